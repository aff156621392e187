//! The messages between the group services of two daemons, and their encoding.
//!
//! Messages travel over reliable, in-order links between daemons (the caller
//! provides them), addressed by node id; the link tells the receiver who sent them.
//! A message to the sending node itself never reaches the wire.
//!
//! All integers are big-endian. `str` is a 1-byte length (0–255) followed by that
//! many bytes of UTF-8. Every message is `version (u8) = 2`, `tag (u8)`, then the
//! fields of its tag, and nothing after them. A message is at most
//! [`MAX_MESSAGE_LEN`] bytes.
//!
//! | tag | message | direction | fields after version and tag |
//! |---|---|---|---|
//! | 1 | LOOKUP | OA → registry | token u64, create u8 (0/1), name str |
//! | 2 | LOOKUP_REPLY | registry → OA | token u64, status u8: 0 found (group u32, agent u32), 1 not found (nothing), 2 error (error) |
//! | 3 | REGISTER | OA → GA | token u64, group u32, member u64, name str |
//! | 4 | JOIN_REPLY | GA → OA | token u64, group u32, status u8: 0 ok (rank u32, view), 1 error (error) |
//! | 5 | LEAVE | OA → GA | token u64 (0: no answer wanted), group u32, member u64 |
//! | 6 | LEAVE_REPLY | GA → OA | token u64, group u32, status u8: 0 ok (view after the leave), 1 error (error) |
//! | 7 | VIEW | GA → member nodes | view |
//! | 8 | COUNT | GA → registry | group u32, epoch u64, members u32 |
//! | 9 | QUERY | OA → GA | token u64, group u32 |
//! | 10 | QUERY_REPLY | GA → OA | token u64, group u32, present u8 (0/1), then view if 1 |
//! | 11 | LIST | OA → registry | token u64 |
//! | 12 | LIST_REPLY | registry → OA | token u64, count u32 (≤ 4096), count × (group u32, agent u32, members u32, name str) |
//! | 13 | ANNOUNCE | GA → registry | group u32, epoch u64, members u32, name str |
//! | 14 | SYNCED | any → registry | epoch u32 (the registry moves this node knows of) |
//! | 15 | SYNC | OA → GA | group u32, epoch u64 (of the view held, 0 if none), agent u32 (of that view), name str, count u32 (≤ 16384), count × member u64 |
//! | 16 | NOT_AGENT | GA → OA | group u32 |
//! | 17 | CLAIM | OA → registry | token u64, group u32, stale u32 (the node that answered NOT_AGENT), name str; answered by LOOKUP_REPLY |
//! | 18 | RESIGN | registry → GA | group u32, canonical group u32, agent u32 (of the canonical group) |
//!
//! `view` is: group u32, epoch u64, agent u32, name str, count u32 (≤ 16384), then
//! count × (rank u32, node u32, member u64, place u32), sorted by rank.
//!
//! `error` is a code u8 and its fields:
//!
//! | code | error | fields |
//! |---|---|---|
//! | 1 | invalid name | name str, reason u8 (1 empty, 2 too long, 3 whitespace, 4 control character), len u32, max u32 (both 0 unless too long) |
//! | 2 | too many groups | limit u32 |
//! | 3 | group numbers exhausted | — |
//! | 4 | group full | group u32, limit u32 |
//! | 5 | already a member | group u32, member u64 |
//! | 6 | not a member | group u32, member u64 |
//! | 7 | unknown group | group u32 |
//! | 8 | too many requests in flight | limit u32 |
//! | 9 | node failed (the request waited on it) | node u32 |
//! | 10 | no answer in time | node u32 |
//!
//! `token` is chosen by the requesting node and echoed in the reply; it is not the
//! client's [`crate::ReqId`]. A decoder rejects, with a [`DecodeError`]: a message
//! longer than [`MAX_MESSAGE_LEN`], any other version, an unknown tag, status,
//! code or reason, a boolean other than 0/1, a name that is not UTF-8, a count
//! above its bound or larger than the bytes left could hold, a truncated message
//! and bytes after the last field.
//!
//! Owns the messages' types and their encoding and decoding only: it
//! decides nothing about groups and keeps no state (the roles in the
//! service do).

use std::fmt;

use crate::types::{GroupError, GroupId, GroupSummary, Member, MemberId, NameError, NodeId, View};

/// The only version this code speaks. 2: NOT_AGENT and RESIGN carry the
/// group's name (version 1's did not), so a node of an older build is refused
/// with `unsupported group message version` instead of misread.
pub const VERSION: u8 = 2;
/// The longest message accepted (2 MiB).
pub const MAX_MESSAGE_LEN: usize = 2 << 20;
/// The longest string on the wire (a 1-byte length).
pub const MAX_NAME_LEN: usize = 255;
/// The most members a view on the wire carries.
pub const MAX_VIEW_MEMBERS: usize = 16384;
/// The most groups a list on the wire carries.
pub const MAX_LIST_GROUPS: usize = 4096;

const MEMBER_LEN: usize = 20;
const SUMMARY_MIN_LEN: usize = 13;

/// What the registry answers to a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupResult {
    Found { group: GroupId, agent: NodeId },
    NotFound,
    Error(GroupError),
}

/// A message between two group services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Lookup {
        token: u64,
        create: bool,
        name: String,
    },
    LookupReply {
        token: u64,
        result: LookupResult,
    },
    Register {
        token: u64,
        group: GroupId,
        member: MemberId,
        name: String,
        /// The joining node's description of the group's settings that
        /// every node must share (empty: not checked).
        settings: String,
    },
    JoinReply {
        token: u64,
        group: GroupId,
        result: Result<(u32, View), GroupError>,
    },
    Leave {
        token: u64,
        group: GroupId,
        member: MemberId,
    },
    LeaveReply {
        token: u64,
        group: GroupId,
        result: Result<View, GroupError>,
    },
    View(View),
    Count {
        group: GroupId,
        epoch: u64,
        members: u32,
    },
    /// A node has announced every group it serves to the registry of this
    /// epoch (after a move): the registry may create new names once every
    /// live node has said so.
    Synced {
        epoch: u32,
    },
    /// An agent tells a new registry (the old one failed) a group it serves.
    Announce {
        group: GroupId,
        epoch: u64,
        members: u32,
        name: String,
    },
    Query {
        token: u64,
        group: GroupId,
    },
    QueryReply {
        token: u64,
        group: GroupId,
        view: Option<View>,
    },
    List {
        token: u64,
    },
    ListReply {
        token: u64,
        groups: Vec<GroupSummary>,
    },
    /// Anti-entropy, sent every sync period by each member node to the
    /// agent it knows: the node's members of the group (all of them: the
    /// agent adds the missing and drops the others) and the view it holds.
    Sync {
        group: GroupId,
        epoch: u64,
        agent: NodeId,
        name: String,
        members: Vec<MemberId>,
    },
    /// The answer to a SYNC sent to a node that is not the agent of the
    /// group (number and name: one number may carry two names for a while).
    NotAgent {
        group: GroupId,
        name: String,
    },
    /// A member node whose agent answered NOT_AGENT asks the registry for
    /// the group's agent, offering itself if `stale` still holds the role.
    Claim {
        token: u64,
        group: GroupId,
        stale: NodeId,
        name: String,
    },
    /// The registry to an agent that must step down: another node holds the
    /// role, or the name lives under another (`canonical`) number. `name`
    /// says which of the node's groups numbered `group` it is.
    Resign {
        group: GroupId,
        name: String,
        canonical: GroupId,
        agent: NodeId,
    },
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The message ends before its last field.
    Truncated { needed: usize, got: usize },
    /// The message is longer than [`MAX_MESSAGE_LEN`].
    TooLong { len: usize, max: usize },
    /// Bytes follow the last field.
    TrailingBytes { extra: usize },
    /// The version byte is not [`VERSION`].
    UnsupportedVersion(u8),
    /// The tag is unknown.
    UnknownTag(u8),
    /// A one-byte field holds a value it cannot have.
    InvalidValue { field: &'static str, value: u8 },
    /// A string is not UTF-8.
    BadUtf8,
    /// A count is above its bound or larger than the remaining bytes could hold.
    TooMany {
        what: &'static str,
        count: u32,
        max: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { needed, got } => {
                write!(
                    f,
                    "truncated group message: needed {needed} bytes, got {got}"
                )
            }
            DecodeError::TooLong { len, max } => {
                write!(
                    f,
                    "group message of {len} bytes is longer than the limit of {max}"
                )
            }
            DecodeError::TrailingBytes { extra } => {
                write!(f, "group message has {extra} bytes after its last field")
            }
            DecodeError::UnsupportedVersion(v) => {
                write!(f, "unsupported group message version {v}")
            }
            DecodeError::UnknownTag(t) => write!(f, "unknown group message tag {t}"),
            DecodeError::InvalidValue { field, value } => {
                write!(f, "invalid {field} {value} in group message")
            }
            DecodeError::BadUtf8 => write!(f, "group name in message is not UTF-8"),
            DecodeError::TooMany { what, count, max } => {
                write!(
                    f,
                    "group message claims {count} {what}, more than {max} or than its bytes hold"
                )
            }
        }
    }
}

impl std::error::Error for DecodeError {}

// ---------------------------------------------------------------- encoding

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    /// Strings longer than 255 bytes are cut at the last character boundary that
    /// fits; the service never produces one (names are checked first).
    fn str(&mut self, s: &str) {
        let mut end = s.len().min(MAX_NAME_LEN);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u8(end as u8);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
    }
    fn view(&mut self, v: &View) {
        self.u32(v.group);
        self.u64(v.epoch);
        self.u32(v.agent);
        self.str(&v.name);
        self.u32(u32::try_from(v.members.len()).unwrap_or(u32::MAX));
        for m in &v.members {
            self.u32(m.rank);
            self.u32(m.node);
            self.u64(m.member);
            self.u32(m.place);
        }
    }
    fn error(&mut self, e: &GroupError) {
        match e {
            GroupError::InvalidName { name, reason } => {
                self.u8(1);
                self.str(name);
                let (code, len, max) = match *reason {
                    NameError::Empty => (1, 0, 0),
                    NameError::TooLong { len, max } => (2, len, max),
                    NameError::Whitespace => (3, 0, 0),
                    NameError::NotPrintable => (4, 0, 0),
                };
                self.u8(code);
                self.u32(len);
                self.u32(max);
            }
            GroupError::TooManyGroups { limit } => {
                self.u8(2);
                self.u32(*limit);
            }
            GroupError::NumbersExhausted => self.u8(3),
            GroupError::GroupFull { group, limit } => {
                self.u8(4);
                self.u32(*group);
                self.u32(*limit);
            }
            GroupError::AlreadyMember { group, member } => {
                self.u8(5);
                self.u32(*group);
                self.u64(*member);
            }
            GroupError::NotMember { group, member } => {
                self.u8(6);
                self.u32(*group);
                self.u64(*member);
            }
            GroupError::UnknownGroup { group } => {
                self.u8(7);
                self.u32(*group);
            }
            GroupError::TooManyPending { limit } => {
                self.u8(8);
                self.u32(*limit);
            }
            GroupError::NodeFailed { node } => {
                self.u8(9);
                self.u32(*node);
            }
            GroupError::NoAnswer { node } => {
                self.u8(10);
                self.u32(*node);
            }
            GroupError::SettingsDiffer {
                group,
                name,
                agent,
                there,
                here,
            } => {
                self.u8(11);
                self.u32(*group);
                self.str(name);
                self.u32(*agent);
                self.str(there);
                self.str(here);
            }
        }
    }
}

impl Message {
    /// The message's encoding (see the module documentation).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(32));
        w.u8(VERSION);
        match self {
            Message::Lookup {
                token,
                create,
                name,
            } => {
                w.u8(1);
                w.u64(*token);
                w.u8(u8::from(*create));
                w.str(name);
            }
            Message::LookupReply { token, result } => {
                w.u8(2);
                w.u64(*token);
                match result {
                    LookupResult::Found { group, agent } => {
                        w.u8(0);
                        w.u32(*group);
                        w.u32(*agent);
                    }
                    LookupResult::NotFound => w.u8(1),
                    LookupResult::Error(e) => {
                        w.u8(2);
                        w.error(e);
                    }
                }
            }
            Message::Register {
                token,
                group,
                member,
                name,
                settings,
            } => {
                w.u8(3);
                w.u64(*token);
                w.u32(*group);
                w.u64(*member);
                w.str(name);
                w.str(settings);
            }
            Message::JoinReply {
                token,
                group,
                result,
            } => {
                w.u8(4);
                w.u64(*token);
                w.u32(*group);
                match result {
                    Ok((rank, view)) => {
                        w.u8(0);
                        w.u32(*rank);
                        w.view(view);
                    }
                    Err(e) => {
                        w.u8(1);
                        w.error(e);
                    }
                }
            }
            Message::Leave {
                token,
                group,
                member,
            } => {
                w.u8(5);
                w.u64(*token);
                w.u32(*group);
                w.u64(*member);
            }
            Message::LeaveReply {
                token,
                group,
                result,
            } => {
                w.u8(6);
                w.u64(*token);
                w.u32(*group);
                match result {
                    Ok(view) => {
                        w.u8(0);
                        w.view(view);
                    }
                    Err(e) => {
                        w.u8(1);
                        w.error(e);
                    }
                }
            }
            Message::View(view) => {
                w.u8(7);
                w.view(view);
            }
            Message::Count {
                group,
                epoch,
                members,
            } => {
                w.u8(8);
                w.u32(*group);
                w.u64(*epoch);
                w.u32(*members);
            }
            Message::Synced { epoch } => {
                w.u8(14);
                w.u32(*epoch);
            }
            Message::Announce {
                group,
                epoch,
                members,
                name,
            } => {
                w.u8(13);
                w.u32(*group);
                w.u64(*epoch);
                w.u32(*members);
                w.str(name);
            }
            Message::Query { token, group } => {
                w.u8(9);
                w.u64(*token);
                w.u32(*group);
            }
            Message::QueryReply { token, group, view } => {
                w.u8(10);
                w.u64(*token);
                w.u32(*group);
                match view {
                    Some(v) => {
                        w.u8(1);
                        w.view(v);
                    }
                    None => w.u8(0),
                }
            }
            Message::List { token } => {
                w.u8(11);
                w.u64(*token);
            }
            Message::ListReply { token, groups } => {
                w.u8(12);
                w.u64(*token);
                w.u32(u32::try_from(groups.len()).unwrap_or(u32::MAX));
                for g in groups {
                    w.u32(g.group);
                    w.u32(g.agent);
                    w.u32(g.members);
                    w.str(&g.name);
                }
            }
            Message::Sync {
                group,
                epoch,
                agent,
                name,
                members,
            } => {
                w.u8(15);
                w.u32(*group);
                w.u64(*epoch);
                w.u32(*agent);
                w.str(name);
                w.u32(u32::try_from(members.len()).unwrap_or(u32::MAX));
                for m in members {
                    w.u64(*m);
                }
            }
            Message::NotAgent { group, name } => {
                w.u8(16);
                w.u32(*group);
                w.str(name);
            }
            Message::Claim {
                token,
                group,
                stale,
                name,
            } => {
                w.u8(17);
                w.u64(*token);
                w.u32(*group);
                w.u32(*stale);
                w.str(name);
            }
            Message::Resign {
                group,
                name,
                canonical,
                agent,
            } => {
                w.u8(18);
                w.u32(*group);
                w.str(name);
                w.u32(*canonical);
                w.u32(*agent);
            }
        }
        w.0
    }

    /// Decodes one message; hostile input gives an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        if bytes.len() > MAX_MESSAGE_LEN {
            return Err(DecodeError::TooLong {
                len: bytes.len(),
                max: MAX_MESSAGE_LEN,
            });
        }
        let mut r = Reader { buf: bytes, pos: 0 };
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let tag = r.u8()?;
        let msg = match tag {
            1 => Message::Lookup {
                token: r.u64()?,
                create: r.bool("create flag")?,
                name: r.str()?,
            },
            2 => {
                let token = r.u64()?;
                let result = match r.u8()? {
                    0 => LookupResult::Found {
                        group: r.u32()?,
                        agent: r.u32()?,
                    },
                    1 => LookupResult::NotFound,
                    2 => LookupResult::Error(r.error()?),
                    value => {
                        return Err(DecodeError::InvalidValue {
                            field: "lookup status",
                            value,
                        })
                    }
                };
                Message::LookupReply { token, result }
            }
            3 => Message::Register {
                token: r.u64()?,
                group: r.u32()?,
                member: r.u64()?,
                name: r.str()?,
                // (Absent from builds before 2026-11-28: not checked.)
                settings: if r.pos < bytes.len() {
                    r.str()?
                } else {
                    String::new()
                },
            },
            4 => {
                let token = r.u64()?;
                let group = r.u32()?;
                let result = match r.u8()? {
                    0 => Ok((r.u32()?, r.view()?)),
                    1 => Err(r.error()?),
                    value => {
                        return Err(DecodeError::InvalidValue {
                            field: "join status",
                            value,
                        })
                    }
                };
                Message::JoinReply {
                    token,
                    group,
                    result,
                }
            }
            5 => Message::Leave {
                token: r.u64()?,
                group: r.u32()?,
                member: r.u64()?,
            },
            6 => {
                let token = r.u64()?;
                let group = r.u32()?;
                let result = match r.u8()? {
                    0 => Ok(r.view()?),
                    1 => Err(r.error()?),
                    value => {
                        return Err(DecodeError::InvalidValue {
                            field: "leave status",
                            value,
                        })
                    }
                };
                Message::LeaveReply {
                    token,
                    group,
                    result,
                }
            }
            7 => Message::View(r.view()?),
            8 => Message::Count {
                group: r.u32()?,
                epoch: r.u64()?,
                members: r.u32()?,
            },
            9 => Message::Query {
                token: r.u64()?,
                group: r.u32()?,
            },
            10 => {
                let token = r.u64()?;
                let group = r.u32()?;
                let view = if r.bool("view presence")? {
                    Some(r.view()?)
                } else {
                    None
                };
                Message::QueryReply { token, group, view }
            }
            11 => Message::List { token: r.u64()? },
            14 => Message::Synced { epoch: r.u32()? },
            13 => Message::Announce {
                group: r.u32()?,
                epoch: r.u64()?,
                members: r.u32()?,
                name: r.str()?,
            },
            12 => {
                let token = r.u64()?;
                let n = r.count("groups", MAX_LIST_GROUPS, SUMMARY_MIN_LEN)?;
                let mut groups = Vec::with_capacity(n);
                for _ in 0..n {
                    groups.push(GroupSummary {
                        group: r.u32()?,
                        agent: r.u32()?,
                        members: r.u32()?,
                        name: r.str()?,
                    });
                }
                Message::ListReply { token, groups }
            }
            15 => {
                let group = r.u32()?;
                let epoch = r.u64()?;
                let agent = r.u32()?;
                let name = r.str()?;
                let n = r.count("members", MAX_VIEW_MEMBERS, 8)?;
                let mut members = Vec::with_capacity(n);
                for _ in 0..n {
                    members.push(r.u64()?);
                }
                Message::Sync {
                    group,
                    epoch,
                    agent,
                    name,
                    members,
                }
            }
            16 => Message::NotAgent {
                group: r.u32()?,
                name: r.str()?,
            },
            17 => Message::Claim {
                token: r.u64()?,
                group: r.u32()?,
                stale: r.u32()?,
                name: r.str()?,
            },
            18 => Message::Resign {
                group: r.u32()?,
                name: r.str()?,
                canonical: r.u32()?,
                agent: r.u32()?,
            },
            t => return Err(DecodeError::UnknownTag(t)),
        };
        let extra = bytes.len() - r.pos;
        if extra != 0 {
            return Err(DecodeError::TrailingBytes { extra });
        }
        Ok(msg)
    }
}

// ---------------------------------------------------------------- decoding

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(DecodeError::Truncated {
                needed: self.pos.saturating_add(n),
                got: self.buf.len(),
            }),
        }
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }
    fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(DecodeError::InvalidValue { field, value }),
        }
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let n = usize::from(self.u8()?);
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadUtf8)
    }
    /// A u32 count of items of at least `min_len` bytes each, bounded by `max`
    /// and by the bytes left, so that no allocation exceeds the message's size.
    fn count(
        &mut self,
        what: &'static str,
        max: usize,
        min_len: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.u32()?;
        let n = usize::try_from(count).unwrap_or(usize::MAX);
        let left = self.buf.len() - self.pos;
        if n > max || n.saturating_mul(min_len) > left {
            return Err(DecodeError::TooMany { what, count, max });
        }
        Ok(n)
    }
    fn view(&mut self) -> Result<View, DecodeError> {
        let group = self.u32()?;
        let epoch = self.u64()?;
        let agent = self.u32()?;
        let name = self.str()?;
        let n = self.count("members", MAX_VIEW_MEMBERS, MEMBER_LEN)?;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            members.push(Member {
                rank: self.u32()?,
                node: self.u32()?,
                member: self.u64()?,
                place: self.u32()?,
            });
        }
        Ok(View {
            group,
            name,
            epoch,
            agent,
            members,
        })
    }
    fn error(&mut self) -> Result<GroupError, DecodeError> {
        Ok(match self.u8()? {
            1 => {
                let name = self.str()?;
                let code = self.u8()?;
                let len = self.u32()?;
                let max = self.u32()?;
                let reason = match code {
                    1 => NameError::Empty,
                    2 => NameError::TooLong { len, max },
                    3 => NameError::Whitespace,
                    4 => NameError::NotPrintable,
                    value => {
                        return Err(DecodeError::InvalidValue {
                            field: "name error reason",
                            value,
                        })
                    }
                };
                GroupError::InvalidName { name, reason }
            }
            2 => GroupError::TooManyGroups { limit: self.u32()? },
            3 => GroupError::NumbersExhausted,
            4 => GroupError::GroupFull {
                group: self.u32()?,
                limit: self.u32()?,
            },
            5 => GroupError::AlreadyMember {
                group: self.u32()?,
                member: self.u64()?,
            },
            6 => GroupError::NotMember {
                group: self.u32()?,
                member: self.u64()?,
            },
            7 => GroupError::UnknownGroup { group: self.u32()? },
            8 => GroupError::TooManyPending { limit: self.u32()? },
            9 => GroupError::NodeFailed { node: self.u32()? },
            10 => GroupError::NoAnswer { node: self.u32()? },
            11 => GroupError::SettingsDiffer {
                group: self.u32()?,
                name: self.str()?,
                agent: self.u32()?,
                there: self.str()?,
                here: self.str()?,
            },
            value => {
                return Err(DecodeError::InvalidValue {
                    field: "error code",
                    value,
                })
            }
        })
    }
}
