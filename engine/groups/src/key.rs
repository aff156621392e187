//! How a node keys what it keeps per group: by number *and* name.
//!
//! Owns only the key type and the ranges over maps keyed by it; holds no
//! state and knows nothing of the roles.

use crate::{GroupId, MemberId};

/// A group as a node knows it: its number and its name. The name is the
/// group's identity; the number is normally its alone, but two registries
/// that never heard of each other may give one number to two names until
/// the registry moves one of them (RESIGN). Everything a node keeps per
/// group is keyed by both, so a node with members of both names keeps
/// them apart and a renumbering moves exactly that name's members.
pub(crate) type Key = (GroupId, String);

pub(crate) fn key(group: GroupId, name: &str) -> Key {
    (group, name.to_owned())
}

/// The range of `joined` holding the members of (`group`, `name`).
pub(crate) fn joined_range(
    group: GroupId,
    name: &str,
) -> std::ops::RangeInclusive<(GroupId, String, MemberId)> {
    (group, name.to_owned(), 0)..=(group, name.to_owned(), MemberId::MAX)
}

/// The range of a map keyed by [`Key`] holding every name under `group`.
pub(crate) fn number_range(group: GroupId) -> std::ops::Range<Key> {
    (group, String::new())..(group.saturating_add(1), String::new())
}
