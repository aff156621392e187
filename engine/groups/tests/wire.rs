//! The inter-daemon encoding: round trips, and hostile input never panics.

use mcast_groups::wire::{
    LookupResult, Message, MAX_LIST_GROUPS, MAX_MESSAGE_LEN, MAX_VIEW_MEMBERS, VERSION,
};
use mcast_groups::{
    DecodeError, GroupError, GroupEvent, GroupService, GroupSummary, Limits, Member, NameError,
    View,
};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    // Any UTF-8 up to 255 bytes (what a string on the wire can hold).
    "\\PC{0,60}".prop_filter("fits a one-byte length", |s| s.len() <= 255)
}

fn view() -> impl Strategy<Value = View> {
    (
        any::<u32>(),
        name(),
        any::<u64>(),
        any::<u32>(),
        proptest::collection::vec(
            (any::<u32>(), any::<u32>(), any::<u64>(), any::<u32>()).prop_map(
                |(rank, node, member, place)| Member {
                    rank,
                    node,
                    member,
                    place,
                },
            ),
            0..20,
        ),
    )
        .prop_map(|(group, name, epoch, agent, members)| View {
            group,
            name,
            epoch,
            agent,
            members,
        })
}

fn name_error() -> impl Strategy<Value = NameError> {
    prop_oneof![
        Just(NameError::Empty),
        (any::<u32>(), any::<u32>()).prop_map(|(len, max)| NameError::TooLong { len, max }),
        Just(NameError::Whitespace),
        Just(NameError::NotPrintable),
    ]
}

fn error() -> impl Strategy<Value = GroupError> {
    prop_oneof![
        (name(), name_error()).prop_map(|(name, reason)| GroupError::InvalidName { name, reason }),
        any::<u32>().prop_map(|limit| GroupError::TooManyGroups { limit }),
        Just(GroupError::NumbersExhausted),
        (any::<u32>(), any::<u32>())
            .prop_map(|(group, limit)| GroupError::GroupFull { group, limit }),
        (any::<u32>(), any::<u64>())
            .prop_map(|(group, member)| GroupError::AlreadyMember { group, member }),
        (any::<u32>(), any::<u64>())
            .prop_map(|(group, member)| GroupError::NotMember { group, member }),
        any::<u32>().prop_map(|group| GroupError::UnknownGroup { group }),
        any::<u32>().prop_map(|limit| GroupError::TooManyPending { limit }),
        any::<u32>().prop_map(|node| GroupError::NodeFailed { node }),
        any::<u32>().prop_map(|node| GroupError::NoAnswer { node }),
        (any::<u32>(), name(), any::<u32>(), name(), name()).prop_map(
            |(group, name, agent, there, here)| GroupError::SettingsDiffer {
                group,
                name,
                agent,
                there,
                here,
            }
        ),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let lookup_result = prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(group, agent)| LookupResult::Found { group, agent }),
        Just(LookupResult::NotFound),
        error().prop_map(LookupResult::Error),
    ];
    let summary = (any::<u32>(), name(), any::<u32>(), any::<u32>()).prop_map(
        |(group, name, agent, members)| GroupSummary {
            group,
            name,
            agent,
            members,
        },
    );
    prop_oneof![
        (any::<u64>(), any::<bool>(), name()).prop_map(|(token, create, name)| Message::Lookup {
            token,
            create,
            name
        }),
        (any::<u64>(), lookup_result)
            .prop_map(|(token, result)| Message::LookupReply { token, result }),
        (any::<u64>(), any::<u32>(), any::<u64>(), name(), name()).prop_map(
            |(token, group, member, name, settings)| {
                Message::Register {
                    token,
                    group,
                    member,
                    name,
                    settings,
                }
            }
        ),
        (
            any::<u64>(),
            any::<u32>(),
            prop_oneof![(any::<u32>(), view()).prop_map(Ok), error().prop_map(Err)]
        )
            .prop_map(|(token, group, result)| Message::JoinReply {
                token,
                group,
                result
            }),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(token, group, member)| {
            Message::Leave {
                token,
                group,
                member,
            }
        }),
        (
            any::<u64>(),
            any::<u32>(),
            prop_oneof![view().prop_map(Ok), error().prop_map(Err)]
        )
            .prop_map(|(token, group, result)| Message::LeaveReply {
                token,
                group,
                result
            }),
        view().prop_map(Message::View),
        (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(group, epoch, members)| {
            Message::Count {
                group,
                epoch,
                members,
            }
        }),
        (any::<u32>(), any::<u64>(), any::<u32>(), "[a-z]{1,20}").prop_map(
            |(group, epoch, members, name)| Message::Announce {
                group,
                epoch,
                members,
                name
            }
        ),
        any::<u32>().prop_map(|epoch| Message::Synced { epoch }),
        (any::<u64>(), any::<u32>()).prop_map(|(token, group)| Message::Query { token, group }),
        (any::<u64>(), any::<u32>(), proptest::option::of(view()))
            .prop_map(|(token, group, view)| Message::QueryReply { token, group, view }),
        any::<u64>().prop_map(|token| Message::List { token }),
        (any::<u64>(), proptest::collection::vec(summary, 0..10))
            .prop_map(|(token, groups)| Message::ListReply { token, groups }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            "[a-z]{1,20}",
            proptest::collection::vec(any::<u64>(), 0..10)
        )
            .prop_map(|(group, epoch, agent, name, members)| Message::Sync {
                group,
                epoch,
                agent,
                name,
                members
            }),
        (any::<u32>(), "[a-z]{1,20}").prop_map(|(group, name)| Message::NotAgent { group, name }),
        (any::<u64>(), any::<u32>(), any::<u32>(), "[a-z]{1,20}").prop_map(
            |(token, group, stale, name)| Message::Claim {
                token,
                group,
                stale,
                name
            }
        ),
        (any::<u32>(), "[a-z]{1,20}", any::<u32>(), any::<u32>()).prop_map(
            |(group, name, canonical, agent)| Message::Resign {
                group,
                name,
                canonical,
                agent,
            }
        ),
    ]
}

/// A service that is registry, agent and member, so every handler has state to
/// trip over.
fn busy_service() -> GroupService {
    let mut s = GroupService::new(1, 1, Limits::default());
    s.join(1, 1, "a");
    s.join(2, 2, "a");
    s.query(3, "a");
    while s.poll_send().is_some() {}
    while s.poll_event().is_some() {}
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn encode_then_decode_is_identity(m in message()) {
        let bytes = m.encode();
        prop_assert_eq!(bytes[0], VERSION);
        prop_assert_eq!(Message::decode(&bytes), Ok(m));
    }

    #[test]
    fn every_truncation_and_any_extra_byte_are_rejected(m in message(), extra in any::<u8>()) {
        let bytes = m.encode();
        // REGISTER's last field may be absent (a build before it): cut
        // there, it is an earlier build's REGISTER.
        let earlier = match &m {
            Message::Register { settings, .. } => Some(bytes.len() - 1 - settings.len()),
            _ => None,
        };
        for len in (0..bytes.len()).filter(|&len| Some(len) != earlier) {
            prop_assert!(
                // A count whose items no longer fit is caught as TooMany.
                matches!(
                    Message::decode(&bytes[..len]),
                    Err(DecodeError::Truncated { .. } | DecodeError::TooMany { .. })
                ),
                "prefix of {} bytes of {:?}", len, m
            );
        }
        let mut longer = bytes.clone();
        longer.push(extra);
        prop_assert_eq!(Message::decode(&longer), Err(DecodeError::TrailingBytes { extra: 1 }));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Message::decode(&bytes);
        let mut s = busy_service();
        let _ = s.handle_message(2, &bytes);
        // Also with a valid version byte and tag, so the fields get parsed.
        let mut framed = vec![VERSION, bytes.first().map_or(1, |b| b % 13)];
        framed.extend_from_slice(&bytes);
        let _ = Message::decode(&framed);
        let _ = s.handle_message(1, &framed);
    }

    #[test]
    fn flipped_bytes_of_valid_messages_never_panic(m in message(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        let mut bytes = m.encode();
        for (i, b) in flips {
            let n = bytes.len();
            bytes[i % n] ^= b;
        }
        let _ = Message::decode(&bytes);
        let mut s = busy_service();
        let _ = s.handle_message(2, &bytes);
    }

    /// Well-formed but unsolicited or lying messages from any node: no panic, and
    /// every event is well-formed.
    #[test]
    fn hostile_valid_messages_never_panic(ms in proptest::collection::vec((1..4u32, message()), 1..20)) {
        let mut s = busy_service();
        for (from, m) in ms {
            s.handle_message(from, &m.encode()).unwrap();
            while s.poll_send().is_some() {}
            while let Some(e) = s.poll_event() {
                if let GroupEvent::ViewChanged { group, view } = e {
                    prop_assert_eq!(group, view.group);
                }
            }
        }
    }
}

#[test]
fn wrong_version_unknown_tag_and_bad_values_are_rejected() {
    let good = Message::List { token: 7 }.encode();
    let mut v = good.clone();
    v[0] = 1;
    assert_eq!(
        Message::decode(&v),
        Err(DecodeError::UnsupportedVersion(1)),
        "version 1 (NOT_AGENT and RESIGN without the name) is refused"
    );
    v[0] = 3;
    assert_eq!(Message::decode(&v), Err(DecodeError::UnsupportedVersion(3)));
    assert_eq!(
        Message::decode(&[VERSION, 0]),
        Err(DecodeError::UnknownTag(0))
    );
    assert_eq!(
        Message::decode(&[VERSION, 19]),
        Err(DecodeError::UnknownTag(19))
    );
    let mut lookup = Message::Lookup {
        token: 1,
        create: true,
        name: "x".into(),
    }
    .encode();
    lookup[10] = 2;
    assert_eq!(
        Message::decode(&lookup),
        Err(DecodeError::InvalidValue {
            field: "create flag",
            value: 2
        })
    );
    let mut bad_utf8 = Message::Lookup {
        token: 1,
        create: true,
        name: "é".into(),
    }
    .encode();
    let n = bad_utf8.len();
    bad_utf8[n - 1] = 0xFF;
    assert_eq!(Message::decode(&bad_utf8), Err(DecodeError::BadUtf8));
    let e = Message::decode(&[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "truncated group message: needed 1 bytes, got 0"
    );
}

#[test]
fn oversized_input_and_counts_are_rejected_before_allocating() {
    let huge = vec![VERSION; MAX_MESSAGE_LEN + 1];
    assert_eq!(
        Message::decode(&huge),
        Err(DecodeError::TooLong {
            len: MAX_MESSAGE_LEN + 1,
            max: MAX_MESSAGE_LEN
        })
    );
    // A view claiming 4 billion members in a few bytes.
    let mut v = vec![VERSION, 7];
    v.extend_from_slice(&1u32.to_be_bytes()); // group
    v.extend_from_slice(&1u64.to_be_bytes()); // epoch
    v.extend_from_slice(&1u32.to_be_bytes()); // agent
    v.extend_from_slice(&[1, b'g']); // name
    v.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        Message::decode(&v),
        Err(DecodeError::TooMany {
            what: "members",
            count: u32::MAX,
            ..
        })
    ));
    // More members than the bound, even with the bytes to back them.
    let members = MAX_VIEW_MEMBERS + 1;
    let mut v2 = v[..v.len() - 4].to_vec();
    v2.extend_from_slice(&(members as u32).to_be_bytes());
    v2.resize(v2.len() + members * 16, 0);
    assert!(matches!(
        Message::decode(&v2),
        Err(DecodeError::TooMany { .. })
    ));
    let mut l = vec![VERSION, 12];
    l.extend_from_slice(&0u64.to_be_bytes());
    l.extend_from_slice(&((MAX_LIST_GROUPS + 1) as u32).to_be_bytes());
    l.resize(l.len() + (MAX_LIST_GROUPS + 1) * 13, 0);
    assert!(matches!(
        Message::decode(&l),
        Err(DecodeError::TooMany { what: "groups", .. })
    ));
}

#[test]
fn a_full_view_and_list_fit_in_a_message() {
    let name = "n".repeat(255);
    let view = View {
        group: 1,
        name: name.clone(),
        epoch: 1,
        agent: 1,
        members: (0..MAX_VIEW_MEMBERS as u32)
            .map(|i| Member {
                rank: i,
                node: i,
                member: u64::from(i),
                place: 0,
            })
            .collect(),
    };
    let m = Message::JoinReply {
        token: 1,
        group: 1,
        result: Ok((0, view)),
    };
    assert_eq!(Message::decode(&m.encode()), Ok(m));
    let groups = (0..MAX_LIST_GROUPS as u32)
        .map(|i| GroupSummary {
            group: i,
            name: name.clone(),
            agent: i,
            members: i,
        })
        .collect();
    let m = Message::ListReply { token: 1, groups };
    assert!(m.encode().len() <= MAX_MESSAGE_LEN);
    assert_eq!(Message::decode(&m.encode()), Ok(m));
}

#[test]
fn a_register_of_an_earlier_build_without_settings_is_taken_unchecked() {
    let register = |settings: &str| Message::Register {
        token: 9,
        group: 4,
        member: 77,
        name: "orders".into(),
        settings: settings.into(),
    };
    let new = register("mode = \"total\"").encode();
    assert_eq!(Message::decode(&new), Ok(register("mode = \"total\"")));
    // Builds before the check ended the message at the name: the same
    // bytes as an empty description without its length byte.
    let mut old = register("").encode();
    assert_eq!(old.pop(), Some(0));
    assert_eq!(Message::decode(&old), Ok(register("")));
    // Anything after the description is still refused.
    let mut long = new.clone();
    long.push(0);
    assert_eq!(
        Message::decode(&long),
        Err(DecodeError::TrailingBytes { extra: 1 })
    );
}
