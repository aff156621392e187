//! The values the service hands out: views, group information, errors, limits.
//!
//! Owns the public value types and their checks (names, limits); holds no
//! state of the service and sends nothing.

use std::fmt;

/// A daemon (node) number. Every node runs one [`crate::GroupService`].
pub type NodeId = u32;
/// A group number, assigned by the registry from 1 upwards, always below
/// [`RESERVED_GROUPS`].
pub type GroupId = u32;
/// A daemon-local client id, chosen by the caller. `(node, member)` names a member.
pub type MemberId = u64;
/// A request id chosen by the caller; every answer event carries it back.
pub type ReqId = u64;

/// Group numbers from here up are reserved and never assigned.
pub const RESERVED_GROUPS: GroupId = 0x8000_0000;

/// One member of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// The member's rank (the paper's PN): unique within the group and never
    /// reused during the group's life.
    pub rank: u32,
    /// The node the member runs on.
    pub node: NodeId,
    /// The member's daemon-local client id.
    pub member: MemberId,
    /// The place of the member's node in the group's feedback tree (seed
    /// 004 §2.2; `mcast_proto::FeedbackTree::with_places`), chosen by the
    /// agent when the node's first member joins ([`View::place_for`]) and
    /// the same for every member of that node: a node that leaves leaves
    /// its place vacant, and the next node to join takes it.
    pub place: u32,
}

/// A group's membership at one epoch, as its agent decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The group number.
    pub group: GroupId,
    /// The group name.
    pub name: String,
    /// Incremented by the agent on every join and leave; the first view is 1.
    pub epoch: u64,
    /// The node that is the group's agent (GA).
    pub agent: NodeId,
    /// The members, sorted by rank.
    pub members: Vec<Member>,
}

impl View {
    /// The nodes that have at least one member in this view, sorted and deduplicated.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.members.iter().map(|m| m.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// Whether `node` has at least one member in this view.
    pub fn has_node(&self, node: NodeId) -> bool {
        self.members.iter().any(|m| m.node == node)
    }

    /// The place in the feedback tree of a member of `node` joining this
    /// view: the place of the node's members already in it, else the lowest
    /// place no member holds (place 0, the root's, only for the agent).
    pub fn place_for(&self, node: NodeId) -> u32 {
        if let Some(m) = self.members.iter().find(|m| m.node == node) {
            return m.place;
        }
        let mut held: Vec<u32> = self.members.iter().map(|m| m.place).collect();
        held.sort_unstable();
        held.dedup();
        let mut p = u32::from(node != self.agent);
        for h in held {
            if h == p {
                p += 1;
            } else if h > p {
                break;
            }
        }
        p
    }

    /// Makes `node` (the new agent) the root of the tree: its members take
    /// place 0, and whoever held place 0 takes the place they left.
    pub fn make_root(&mut self, node: NodeId) {
        let Some(old) = self
            .members
            .iter()
            .find(|m| m.node == node)
            .map(|m| m.place)
        else {
            return;
        };
        for m in &mut self.members {
            if m.node == node {
                m.place = 0;
            } else if m.place == 0 {
                m.place = old;
            }
        }
    }

    /// The member `(node, member)` of this view, if it is in it.
    pub fn find(&self, node: NodeId, member: MemberId) -> Option<&Member> {
        self.members
            .iter()
            .find(|m| m.node == node && m.member == member)
    }
}

/// The answer to a query: what the registry and the group's agent know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group number.
    pub group: GroupId,
    /// The group name.
    pub name: String,
    /// The agent node.
    pub agent: NodeId,
    /// The agent's current view. Epoch 0 and no members if the registry has
    /// created the group but its first member has not reached the agent yet.
    pub view: View,
}

/// One line of the registry's list of groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// The group number.
    pub group: GroupId,
    /// The group name.
    pub name: String,
    /// The agent node.
    pub agent: NodeId,
    /// The member count the agent last reported.
    pub members: u32,
}

/// What a [`crate::GroupService`] tells its daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// A join succeeded. `view` is the first view that contains the member.
    Joined {
        req: ReqId,
        member: MemberId,
        group: GroupId,
        name: String,
        rank: u32,
        view: View,
    },
    /// A leave succeeded.
    Left {
        req: ReqId,
        member: MemberId,
        group: GroupId,
    },
    /// A join, leave, query or list failed.
    Failed { req: ReqId, error: GroupError },
    /// The answer to a query; `None` if the registry knows no group of that name.
    QueryResult { req: ReqId, info: Option<GroupInfo> },
    /// The answer to a list: every group the registry knows, by group number.
    List {
        req: ReqId,
        groups: Vec<GroupSummary>,
    },
    /// The view of a group this node has (or just had) local members in changed.
    /// Emitted for the first view, every later one in epoch order, and the one
    /// after the node's last local member left (which no longer contains the node).
    /// It comes before the `Joined` / `Left` that caused it.
    ViewChanged { group: GroupId, view: View },
}

/// Why a group name is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than the limit, in bytes.
    TooLong { len: u32, max: u32 },
    /// The name contains whitespace.
    Whitespace,
    /// The name contains a control (non-printable) character.
    NotPrintable,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => write!(f, "it is empty"),
            NameError::TooLong { len, max } => {
                write!(f, "it is {len} bytes long and the limit is {max} bytes")
            }
            NameError::Whitespace => write!(f, "whitespace is not allowed"),
            NameError::NotPrintable => write!(f, "control characters are not allowed"),
        }
    }
}

/// Checks a group name: non-empty, at most `max` bytes of UTF-8, no whitespace, no
/// control characters.
pub fn check_name(name: &str, max: usize) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > max {
        return Err(NameError::TooLong {
            len: u32::try_from(name.len()).unwrap_or(u32::MAX),
            max: u32::try_from(max).unwrap_or(u32::MAX),
        });
    }
    if name.chars().any(char::is_whitespace) {
        return Err(NameError::Whitespace);
    }
    if name.chars().any(char::is_control) {
        return Err(NameError::NotPrintable);
    }
    Ok(())
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupError {
    /// The group name is invalid.
    InvalidName { name: String, reason: NameError },
    /// The registry holds its limit of groups.
    TooManyGroups { limit: u32 },
    /// The registry has assigned every group number below [`RESERVED_GROUPS`].
    NumbersExhausted,
    /// The group holds its agent's limit of members.
    GroupFull { group: GroupId, limit: u32 },
    /// The member is already in the group.
    AlreadyMember { group: GroupId, member: MemberId },
    /// The member is not in the group.
    NotMember { group: GroupId, member: MemberId },
    /// No such group: this node has no members in it (leave), or its agent does
    /// not know it.
    UnknownGroup { group: GroupId },
    /// This node has its limit of requests in flight.
    TooManyPending { limit: u32 },
    /// The node the request waited for was declared failed.
    NodeFailed { node: NodeId },
    /// No answer from the node the request waited for in time.
    NoAnswer { node: NodeId },
    /// The group's settings that every node must share (its
    /// [`SettingsOf`](crate::SettingsOf) description) differ between the
    /// joining node (`here`) and the group's agent (`agent`, `there`).
    SettingsDiffer {
        group: GroupId,
        name: String,
        agent: NodeId,
        there: String,
        here: String,
    },
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupError::InvalidName { name, reason } => {
                write!(f, "group name {name:?} is invalid: {reason}")
            }
            GroupError::TooManyGroups { limit } => {
                write!(f, "the registry already holds its limit of {limit} groups")
            }
            GroupError::NumbersExhausted => write!(
                f,
                "the registry has no group numbers left (numbers from {RESERVED_GROUPS:#x} are reserved)"
            ),
            GroupError::GroupFull { group, limit } => {
                write!(f, "group {group} is full: it has its limit of {limit} members")
            }
            GroupError::AlreadyMember { group, member } => {
                write!(f, "member {member} is already in group {group}")
            }
            GroupError::NotMember { group, member } => {
                write!(f, "member {member} is not in group {group}")
            }
            GroupError::UnknownGroup { group } => write!(f, "group {group} is unknown"),
            GroupError::TooManyPending { limit } => write!(
                f,
                "this node already has its limit of {limit} group requests in flight"
            ),
            GroupError::NodeFailed { node } => write!(
                f,
                "node {node}, which this request needed, was declared failed"
            ),
            GroupError::NoAnswer { node } => write!(
                f,
                "node {node} did not answer in time (its answer may have been lost while the cluster changed): retry"
            ),
            GroupError::SettingsDiffer {
                group,
                name,
                agent,
                there,
                here,
            } => write!(
                f,
                "group {name:?} ({group}) is configured differently on node {agent}, its agent ({there}) than on this node ({here}): every node must configure a group alike"
            ),
        }
    }
}

impl std::error::Error for GroupError {}

/// Bounds on what one service holds. Every node may have its own; the registry's
/// `max_groups` and each agent's `max_members` are the ones that apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Groups the registry holds (and groups one node serves as agent).
    /// Clamped to [`crate::wire::MAX_LIST_GROUPS`].
    pub max_groups: usize,
    /// Members per group. Clamped to [`crate::wire::MAX_VIEW_MEMBERS`].
    pub max_members: usize,
    /// Bytes per group name. Clamped to [`crate::wire::MAX_NAME_LEN`].
    pub max_name_len: usize,
    /// Requests of local clients in flight at once on this node.
    pub max_pending: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_groups: 1024,
            max_members: 1024,
            max_name_len: 64,
            max_pending: 4096,
        }
    }
}

impl Limits {
    pub(crate) fn clamped(self) -> Limits {
        Limits {
            max_groups: self.max_groups.min(crate::wire::MAX_LIST_GROUPS),
            max_members: self.max_members.min(crate::wire::MAX_VIEW_MEMBERS),
            max_name_len: self.max_name_len.min(crate::wire::MAX_NAME_LEN),
            max_pending: self.max_pending,
        }
    }
}

pub(crate) fn limit_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
