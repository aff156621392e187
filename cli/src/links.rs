//! The daemons' unicast links and what travels on them.
//!
//! Every daemon has an inbox: the unicast-only group `LINK_BASE | node`. A
//! daemon's Go-Back-N send stream to peer P lives in P's inbox group; P
//! accepts a receive stream from any of its configured peers that sends
//! there (from sequence 0, restarting on a newer epoch; another node's
//! frames open nothing, `engine.rx_sender_refused`). All groups' control traffic shares these
//! links, multiplexed by the group number inside each message (seed 004).
//!
//! A link message is one engine message (reassembled from its fragments):
//!
//! | byte 0 | rest                                                     |
//! |--------|----------------------------------------------------------|
//! | 1      | a group-management message (`mcast-groups` wire format)  |
//! | 2      | stream start: group u32, epoch u32, seq u32 (big-endian) |
//! | 3      | flush state: group u32, sender u32, epoch u32, has u8, next u32 |
//! | 4      | flush data: group u32, sender u32, epoch u32, seq u32, flags u8 (1 first, 2 last), the frame's bytes |
//! | 5      | start request: group u32 |
//! | 6      | mode message: group u32, then the group mode's own bytes |
//! | 7      | barrier: group u32, what u8 (1 arrived, 2 ask, 3 release), number u64, then node ids u32 each (arrived: covered; release: dropped) |
//!
//! A stream start tells a member where the sender's data stream begins for
//! it: at the sender's first frame when the stream opens, at the sender's
//! current position when the member is added to the view (late join).
//! The flush messages carry `mcast_groups::flush`: when a sender leaves a
//! view, the survivors tell each other how far they delivered its stream
//! (`has` 0: no stream from it) and send each other the frames they lack.

use mcast_engine::StreamStart;
use mcast_groups::flush::{FlushFrame, FlushKey, FlushMsg};
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
const TAG_FLUSH_STATE: u8 = 3;
const TAG_FLUSH_DATA: u8 = 4;
const TAG_START_REQUEST: u8 = 5;
const TAG_MODE: u8 = 6;
const TAG_BARRIER: u8 = 7;
/// A flush state after the head: next and from, each a flag and a u32.
const FLUSH_STATE_LEN: usize = FLUSH_HEAD + 10;
/// Tag and key: group, sender, epoch.
const FLUSH_HEAD: usize = 13;

/// One decoded link message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkMessage {
    Groups(Vec<u8>),
    Start {
        group: GroupId,
        start: StreamStart,
    },
    /// "I carry `group` and hold no stream from you": the sender answers
    /// with a start where the asker can continue.
    StartRequest {
        group: GroupId,
    },
    Flush(FlushMsg),
    /// For the group's mode (`daemon::mode`), which alone reads `body`.
    Mode {
        group: GroupId,
        body: Vec<u8>,
    },
    /// The group's barrier on the daemons' tree (docs/protocol.md §6.2).
    Barrier {
        group: GroupId,
        what: BarrierMsg,
        /// The barrier's number, counted by the tree's root from 1.
        number: u64,
        /// ARRIVED: the nodes the report covers; RELEASE: the nodes that
        /// left the view while the root waited; ASK: none.
        dropped: Vec<NodeId>,
    },
}

/// What a barrier link message says (docs/protocol.md §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierMsg {
    /// Child to parent: every member in my subtree has reached barrier `number`.
    Arrived = 1,
    /// Parent to child: I wait at barrier `number`; tell me when your
    /// subtree has reached it (and learn its number, if new).
    Ask = 2,
    /// Parent to child: barrier `number` is complete: release, and pass it on.
    Release = 3,
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
            LinkMessage::StartRequest { group } => {
                let mut v = vec![TAG_START_REQUEST];
                v.extend_from_slice(&group.to_be_bytes());
                v
            }
            LinkMessage::Barrier {
                group,
                what,
                number,
                dropped,
            } => {
                let mut v = vec![TAG_BARRIER];
                v.extend_from_slice(&group.to_be_bytes());
                v.push(*what as u8);
                v.extend_from_slice(&number.to_be_bytes());
                for n in dropped {
                    v.extend_from_slice(&n.to_be_bytes());
                }
                v
            }
            LinkMessage::Mode { group, body } => {
                let mut v = Vec::with_capacity(5 + body.len());
                v.push(TAG_MODE);
                v.extend_from_slice(&group.to_be_bytes());
                v.extend_from_slice(body);
                v
            }
            LinkMessage::Flush(FlushMsg::State { key, next, from }) => {
                let mut v = flush_head(TAG_FLUSH_STATE, key, 10);
                for s in [next, from] {
                    v.push(u8::from(s.is_some()));
                    v.extend_from_slice(&s.unwrap_or_default().0.to_be_bytes());
                }
                v
            }
            LinkMessage::Flush(FlushMsg::Data { key, frame }) => {
                let mut v = flush_head(TAG_FLUSH_DATA, key, 5 + frame.data.len());
                v.extend_from_slice(&frame.seq.0.to_be_bytes());
                v.push(
                    u8::from(frame.first)
                        | (u8::from(frame.last) << 1)
                        | (u8::from(frame.batch) << 2),
                );
                v.extend_from_slice(&frame.data);
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
            Some(&TAG_START_REQUEST) if b.len() == 5 => {
                Ok(LinkMessage::StartRequest { group: word(b, 1) })
            }
            Some(&TAG_START_REQUEST) => Err(format!("start request of {} bytes, not 5", b.len())),
            Some(&TAG_MODE) if b.len() >= 5 => Ok(LinkMessage::Mode {
                group: word(b, 1),
                body: b[5..].to_vec(),
            }),
            Some(&TAG_MODE) => Err(format!("mode message of {} bytes, less than 5", b.len())),
            Some(&TAG_BARRIER) if b.len() >= 14 && (b.len() - 14) % 4 == 0 => {
                Ok(LinkMessage::Barrier {
                    group: word(b, 1),
                    what: match b[5] {
                        1 => BarrierMsg::Arrived,
                        2 => BarrierMsg::Ask,
                        3 => BarrierMsg::Release,
                        w => return Err(format!("barrier message of kind {w}, not 1, 2 or 3")),
                    },
                    number: u64::from_be_bytes(b[6..14].try_into().expect("8 bytes")),
                    dropped: b[14..]
                        .chunks_exact(4)
                        .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")))
                        .collect(),
                })
            }
            Some(&TAG_BARRIER) => Err(format!(
                "barrier message of {} bytes, not 14 and a multiple of 4 more",
                b.len()
            )),
            Some(&TAG_FLUSH_STATE) if b.len() == FLUSH_STATE_LEN => {
                let key = flush_key(b);
                let seq_at = |i: usize| match b[i] {
                    0 => Ok(None),
                    1 => Ok(Some(Seq(word(b, i + 1)))),
                    h => Err(format!("flush state with has = {h}, not 0 or 1")),
                };
                let next = seq_at(FLUSH_HEAD)?;
                let from = seq_at(FLUSH_HEAD + 5)?;
                Ok(LinkMessage::Flush(FlushMsg::State { key, next, from }))
            }
            Some(&TAG_FLUSH_STATE) => Err(format!(
                "flush state of {} bytes, not {FLUSH_STATE_LEN}",
                b.len()
            )),
            Some(&TAG_FLUSH_DATA) if b.len() >= FLUSH_HEAD + 5 => {
                let flags = b[FLUSH_HEAD + 4];
                if flags > 7 {
                    return Err(format!("flush data with flags {flags:#x}"));
                }
                let data = &b[FLUSH_HEAD + 5..];
                let batch = flags & 4 != 0;
                if batch {
                    // Its records are delivered one by one: checked whole first.
                    let wire =
                        mcast_wire::Flags(u16::from(flags & 3) << 2 | mcast_wire::Flags::BATCH.0);
                    mcast_wire::batch::validate(wire, data)
                        .map_err(|e| format!("flush data: {e}"))?;
                }
                Ok(LinkMessage::Flush(FlushMsg::Data {
                    key: flush_key(b),
                    frame: FlushFrame {
                        seq: Seq(word(b, FLUSH_HEAD)),
                        first: flags & 1 != 0,
                        last: flags & 2 != 0,
                        batch,
                        data: data.to_vec(),
                    },
                }))
            }
            Some(&TAG_FLUSH_DATA) => Err(format!(
                "flush data of {} bytes, less than {}",
                b.len(),
                FLUSH_HEAD + 5
            )),
            Some(t) => Err(format!("unknown link message tag {t}")),
            None => Err("empty link message".into()),
        }
    }
}

fn flush_head(tag: u8, key: &FlushKey, more: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(FLUSH_HEAD + more);
    v.push(tag);
    v.extend_from_slice(&key.group.to_be_bytes());
    v.extend_from_slice(&key.sender.to_be_bytes());
    v.extend_from_slice(&key.epoch.to_be_bytes());
    v
}

/// The big-endian u32 at `i` (the caller checked the length).
fn word(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn flush_key(b: &[u8]) -> FlushKey {
    FlushKey {
        group: word(b, 1),
        sender: word(b, 5),
        epoch: word(b, 9),
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
        let r = LinkMessage::StartRequest { group: 0x8000_0001 };
        assert_eq!(r.encode().len(), 5);
        assert_eq!(LinkMessage::decode(&r.encode()).unwrap(), r);
        assert!(LinkMessage::decode(&[5, 0, 0])
            .unwrap_err()
            .contains("not 5"));
        let m = LinkMessage::Mode {
            group: 9,
            body: vec![7, 7],
        };
        assert_eq!(m.encode(), [6, 0, 0, 0, 9, 7, 7]);
        assert_eq!(LinkMessage::decode(&m.encode()).unwrap(), m);
        let empty = LinkMessage::Mode {
            group: 9,
            body: Vec::new(),
        };
        assert_eq!(LinkMessage::decode(&empty.encode()).unwrap(), empty);
        assert!(LinkMessage::decode(&[6, 0, 0, 9])
            .unwrap_err()
            .contains("less than 5"));
        assert!(LinkMessage::decode(&[]).is_err());
        assert!(LinkMessage::decode(&[2, 0, 0]).unwrap_err().contains("13"));
        assert!(LinkMessage::decode(&[9]).unwrap_err().contains("tag 9"));
        for what in [BarrierMsg::Arrived, BarrierMsg::Ask, BarrierMsg::Release] {
            let b = LinkMessage::Barrier {
                group: 4,
                what,
                number: u64::MAX - 1,
                dropped: if what == BarrierMsg::Release {
                    vec![2, 9]
                } else {
                    Vec::new()
                },
            };
            assert_eq!(
                b.encode().len(),
                if what == BarrierMsg::Release { 22 } else { 14 }
            );
            assert_eq!(LinkMessage::decode(&b.encode()).unwrap(), b);
        }
        let mut bad = LinkMessage::Barrier {
            group: 4,
            what: BarrierMsg::Ask,
            number: 1,
            dropped: Vec::new(),
        }
        .encode();
        bad[5] = 4;
        assert!(LinkMessage::decode(&bad).unwrap_err().contains("kind 4"));
        assert!(LinkMessage::decode(&bad[..13])
            .unwrap_err()
            .contains("not 14"));
        assert_eq!(inbox(5), 0x8000_0005);
        assert!(is_link(inbox(1)) && !is_link(7));
    }

    #[test]
    fn flush_messages_roundtrip_and_reject_garbage() {
        let key = FlushKey {
            group: 7,
            sender: 3,
            epoch: 0xdead_beef,
        };
        for next in [None, Some(Seq(0)), Some(Seq(u32::MAX))] {
            for from in [None, Some(Seq(7))] {
                let m = LinkMessage::Flush(FlushMsg::State { key, next, from });
                assert_eq!(LinkMessage::decode(&m.encode()).unwrap(), m);
            }
        }
        for (first, last, batch, data) in [
            (true, true, false, vec![]),
            (true, false, false, vec![1, 2]),
            (false, true, false, vec![9; 1400]),
            (true, true, true, b"\x00\x02hi\x00\x00".to_vec()),
        ] {
            let m = LinkMessage::Flush(FlushMsg::Data {
                key,
                frame: FlushFrame {
                    seq: Seq(41),
                    first,
                    last,
                    batch,
                    data,
                },
            });
            assert_eq!(LinkMessage::decode(&m.encode()).unwrap(), m);
        }
        let state = LinkMessage::Flush(FlushMsg::State {
            key,
            next: None,
            from: None,
        })
        .encode();
        assert_eq!(state.len(), 23);
        assert!(LinkMessage::decode(&state[..18])
            .unwrap_err()
            .contains("not 23"));
        let mut bad = state.clone();
        bad[13] = 2;
        assert!(LinkMessage::decode(&bad).unwrap_err().contains("has = 2"));
        let mut bad = state.clone();
        bad[18] = 3;
        assert!(LinkMessage::decode(&bad).unwrap_err().contains("has = 3"));
        let mut data = LinkMessage::Flush(FlushMsg::Data {
            key,
            frame: FlushFrame {
                seq: Seq(1),
                first: true,
                last: true,
                batch: false,
                data: vec![5],
            },
        })
        .encode();
        assert!(LinkMessage::decode(&data[..17])
            .unwrap_err()
            .contains("less than 18"));
        data[17] = 8;
        assert!(LinkMessage::decode(&data)
            .unwrap_err()
            .contains("flags 0x8"));
        // A batch whose record runs past the end, and one not whole.
        data[17] = 7;
        assert!(LinkMessage::decode(&data)
            .unwrap_err()
            .contains("malformed batched payload"));
        data.extend_from_slice(&[0]);
        data[17] = 5;
        assert!(LinkMessage::decode(&data)
            .unwrap_err()
            .contains("whole message"));
    }
}
