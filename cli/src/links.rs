//! The daemons' unicast links and what travels on them.
//!
//! Every daemon has an inbox: the unicast-only group `LINK_BASE | node`. A
//! daemon's Go-Back-N send stream to peer P lives in P's inbox group; P
//! accepts a receive stream from any node that sends there (from sequence
//! 0, restarting on a newer epoch). All groups' control traffic shares these
//! links, multiplexed by the group number inside each message (seed 004).
//!
//! A link message is one engine message (reassembled from its fragments):
//!
//! | byte 0 | rest                                                     |
//! |--------|----------------------------------------------------------|
//! | 1      | a group-management message (`mcast-groups` wire format)  |
//! | 2      | stream start: group u32, epoch u32, seq u32 (big-endian) |
//!
//! A stream start tells a member where the sender's data stream begins for
//! it: at the sender's first frame when the stream opens, at the sender's
//! current position when the member is added to the view (late join).

use mcast_engine::StreamStart;
use mcast_wire::{GroupId, NodeId, Seq};

/// Group numbers at and above this are the daemons' inboxes.
pub const LINK_BASE: GroupId = 0x8000_0000;

/// Node `node`'s inbox group.
pub fn inbox(node: NodeId) -> GroupId {
    LINK_BASE | node
}

/// True for an inbox group.
pub fn is_link(group: GroupId) -> bool {
    group >= LINK_BASE
}

const TAG_GROUPS: u8 = 1;
const TAG_START: u8 = 2;

/// One decoded link message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkMessage {
    Groups(Vec<u8>),
    Start { group: GroupId, start: StreamStart },
}

impl LinkMessage {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            LinkMessage::Groups(b) => {
                let mut v = Vec::with_capacity(b.len() + 1);
                v.push(TAG_GROUPS);
                v.extend_from_slice(b);
                v
            }
            LinkMessage::Start { group, start } => {
                let mut v = vec![TAG_START];
                v.extend_from_slice(&group.to_be_bytes());
                v.extend_from_slice(&start.epoch.to_be_bytes());
                v.extend_from_slice(&start.seq.0.to_be_bytes());
                v
            }
        }
    }

    pub fn decode(b: &[u8]) -> Result<LinkMessage, String> {
        match b.first() {
            Some(&TAG_GROUPS) => Ok(LinkMessage::Groups(b[1..].to_vec())),
            Some(&TAG_START) if b.len() == 13 => {
                let word = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
                Ok(LinkMessage::Start {
                    group: word(1),
                    start: StreamStart {
                        epoch: word(5),
                        seq: Seq(word(9)),
                    },
                })
            }
            Some(&TAG_START) => Err(format!("stream start of {} bytes, not 13", b.len())),
            Some(t) => Err(format!("unknown link message tag {t}")),
            None => Err("empty link message".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_messages_roundtrip_and_reject_garbage() {
        let s = LinkMessage::Start {
            group: 7,
            start: StreamStart {
                epoch: 3,
                seq: Seq(u32::MAX),
            },
        };
        assert_eq!(LinkMessage::decode(&s.encode()).unwrap(), s);
        let g = LinkMessage::Groups(vec![1, 2, 3]);
        assert_eq!(LinkMessage::decode(&g.encode()).unwrap(), g);
        assert!(LinkMessage::decode(&[]).is_err());
        assert!(LinkMessage::decode(&[2, 0, 0]).unwrap_err().contains("13"));
        assert!(LinkMessage::decode(&[9]).unwrap_err().contains("tag 9"));
        assert_eq!(inbox(5), 0x8000_0005);
        assert!(is_link(inbox(1)) && !is_link(7));
    }
}
