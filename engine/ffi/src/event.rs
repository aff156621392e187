//! Membership events and notices as the C API shows them.
//!
//! A membership event is a record in the subscription ring, in stream order
//! with the data; its bytes are JSON (docs/mcastd.md, "Membership events in
//! the stream"): a new view (`epoch`, `agent`, `members`, `joined`, `gone`,
//! `failed`), this node's eviction (`{"evicted": true, "by": …}`), or a
//! flush that passed over frames (`{"skipped": {"sender": …, "frames": …}}`).
//! [`parse_event`] turns them into [`McastEvent`] and node lists, so a C
//! program needs no JSON parser. A notice comes on the control socket
//! ([`mcast_ipc::Notice`]); [`notice_info`] gives its kind, numbers and text.
//! Safe code; `capi` copies the results out.

use std::ffi::c_int;

use mcast_ipc::{MessageKind, Notice};
use serde_json::Value;

use crate::Fail;

/// A message of application data (`mcast_recv_ex`'s `*kind_out`).
pub const MCAST_MSG_DATA: c_int = 0;
/// A membership event: the bytes are the event's JSON.
pub const MCAST_MSG_MEMBERSHIP: c_int = 1;

/// The C kind of a received message.
pub fn msg_kind(k: MessageKind) -> c_int {
    match k {
        MessageKind::Data => MCAST_MSG_DATA,
        MessageKind::Membership => MCAST_MSG_MEMBERSHIP,
    }
}

/// An event of a shape this library does not know (a newer daemon's).
pub const MCAST_EVENT_OTHER: c_int = 0;
/// A new view of the group.
pub const MCAST_EVENT_VIEW: c_int = 1;
/// This node was declared failed and left the group; it rejoins as a new member.
pub const MCAST_EVENT_EVICTED: c_int = 2;
/// The flush of a departed sender passed over frames nobody kept.
pub const MCAST_EVENT_SKIPPED: c_int = 3;

/// The node of each member of the new view, in rank order.
pub const MCAST_NODES_MEMBERS: c_int = 0;
/// The nodes that joined the group with this view.
pub const MCAST_NODES_JOINED: c_int = 1;
/// The nodes that left the group or were evicted from it with this view.
pub const MCAST_NODES_GONE: c_int = 2;
/// Of the gone nodes, those this node suspects or declared failed.
pub const MCAST_NODES_FAILED: c_int = 3;

/// A membership event parsed (`struct mcast_event` in mcast.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct McastEvent {
    /// One of the `MCAST_EVENT_*` kinds.
    pub kind: c_int,
    /// View: the new view's epoch.
    pub epoch: u64,
    /// View: the node of the group's agent.
    pub agent: u32,
    /// Evicted: the node that declared this one failed.
    pub evicted_by: u32,
    /// Skipped: the departed sender.
    pub skipped_sender: u32,
    /// Skipped: how many of its frames were passed over.
    pub skipped_frames: u64,
    /// View: how many members it has.
    pub members: usize,
    /// View: how many nodes joined.
    pub joined: usize,
    /// View: how many nodes are gone.
    pub gone: usize,
    /// View: how many of the gone nodes failed.
    pub failed: usize,
}

/// A membership event's fields and node lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// The counts and numbers C gets in one struct.
    pub info: McastEvent,
    /// `MCAST_NODES_MEMBERS`, `_JOINED`, `_GONE`, `_FAILED`, in that order.
    pub lists: [Vec<u32>; 4],
}

impl Event {
    /// The node list `which` (an `MCAST_NODES_*`).
    pub fn nodes(&self, which: c_int) -> Result<&[u32], Fail> {
        usize::try_from(which)
            .ok()
            .and_then(|i| self.lists.get(i))
            .map(Vec::as_slice)
            .ok_or_else(|| Fail::inval(format!("list {which}: not an MCAST_NODES_* value")))
    }
}

/// A node id field (JSON number within u32).
fn node(v: &Value, what: &str) -> Result<u32, Fail> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| Fail::inval(format!("membership event: {what} is not a node id: {v}")))
}

/// A list of node ids; missing means empty.
fn node_list(v: &Value, key: &str) -> Result<Vec<u32>, Fail> {
    match v.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(|n| node(n, key)).collect(),
        Some(other) => Err(Fail::inval(format!(
            "membership event: {key} is not a list: {other}"
        ))),
    }
}

/// Parses a membership event's bytes (`mcast_event_parse`). Bytes that are
/// not a JSON object, or a known field of the wrong type, are
/// `MCAST_EINVAL`; an object of an unknown shape is `MCAST_EVENT_OTHER`.
pub fn parse_event(data: &[u8]) -> Result<Event, Fail> {
    let v: Value = serde_json::from_slice(data)
        .map_err(|e| Fail::inval(format!("not a membership event (not JSON: {e})")))?;
    if !v.is_object() {
        return Err(Fail::inval(format!(
            "not a membership event (not a JSON object): {v}"
        )));
    }
    let mut ev = Event::default();
    if v.get("evicted").is_some_and(|e| e == &Value::Bool(true)) {
        ev.info.kind = MCAST_EVENT_EVICTED;
        if let Some(by) = v.get("by") {
            ev.info.evicted_by = node(by, "by")?;
        }
    } else if let Some(s) = v.get("skipped") {
        ev.info.kind = MCAST_EVENT_SKIPPED;
        ev.info.skipped_sender = node(&s["sender"], "skipped.sender")?;
        ev.info.skipped_frames = s["frames"].as_u64().ok_or_else(|| {
            Fail::inval(format!(
                "membership event: skipped.frames is not a count: {s}"
            ))
        })?;
    } else if let Some(epoch) = v.get("epoch") {
        ev.info.kind = MCAST_EVENT_VIEW;
        ev.info.epoch = epoch
            .as_u64()
            .ok_or_else(|| Fail::inval(format!("membership event: epoch is {epoch}")))?;
        if let Some(agent) = v.get("agent") {
            ev.info.agent = node(agent, "agent")?;
        }
        let members = match v.get("members") {
            None => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|m| node(&m["node"], "a member's node"))
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(Fail::inval(format!(
                    "membership event: members is not a list: {other}"
                )))
            }
        };
        ev.lists = [
            members,
            node_list(&v, "joined")?,
            node_list(&v, "gone")?,
            node_list(&v, "failed")?,
        ];
        let [m, j, g, f] = &ev.lists;
        (
            ev.info.members,
            ev.info.joined,
            ev.info.gone,
            ev.info.failed,
        ) = (m.len(), j.len(), g.len(), f.len());
    } else {
        ev.info.kind = MCAST_EVENT_OTHER;
    }
    Ok(ev)
}

/// A group has a new view.
pub const MCAST_NOTICE_VIEW_CHANGED: c_int = 1;
/// The daemon cut this client off; the connection is closed.
pub const MCAST_NOTICE_CUT_OFF: c_int = 2;
/// The daemon is stopping; the connection is closed.
pub const MCAST_NOTICE_SHUTDOWN: c_int = 3;
/// The daemon refused something that had no request to answer.
pub const MCAST_NOTICE_ERROR: c_int = 4;

/// A notice's numbers (`struct mcast_notice` in mcast.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct McastNotice {
    /// One of the `MCAST_NOTICE_*` kinds.
    pub kind: c_int,
    /// View changed: the group's number.
    pub group: u32,
    /// View changed: the new view's epoch.
    pub epoch: u64,
    /// View changed: how many members the view has.
    pub members: usize,
}

/// A notice's numbers and its text: the reason or message, or for a view
/// change its group, epoch and member nodes.
pub fn notice_info(n: &Notice) -> (McastNotice, String) {
    match n {
        Notice::ViewChanged {
            group,
            epoch,
            members,
        } => {
            let nodes: Vec<String> = members.iter().map(|m| m.node.to_string()).collect();
            (
                McastNotice {
                    kind: MCAST_NOTICE_VIEW_CHANGED,
                    group: *group,
                    epoch: *epoch,
                    members: members.len(),
                },
                format!(
                    "group {group} epoch {epoch}: {} members, on nodes [{}]",
                    members.len(),
                    nodes.join(", ")
                ),
            )
        }
        Notice::CutOff { reason } => (kind_only(MCAST_NOTICE_CUT_OFF), reason.clone()),
        Notice::Shutdown { reason } => (kind_only(MCAST_NOTICE_SHUTDOWN), reason.clone()),
        Notice::Error { message } => (kind_only(MCAST_NOTICE_ERROR), message.clone()),
    }
}

fn kind_only(kind: c_int) -> McastNotice {
    McastNotice {
        kind,
        ..McastNotice::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MCAST_EINVAL;
    use mcast_ipc::Member;

    #[test]
    fn a_view_event_as_the_daemon_writes_it() {
        let json = br#"{"epoch":7,"agent":1,"members":[{"rank":0,"node":1,"member":3},{"rank":2,"node":2,"member":9}],"joined":[],"gone":[4,3],"failed":[4]}"#;
        let ev = parse_event(json).unwrap();
        assert_eq!(
            ev.info,
            McastEvent {
                kind: MCAST_EVENT_VIEW,
                epoch: 7,
                agent: 1,
                members: 2,
                joined: 0,
                gone: 2,
                failed: 1,
                ..McastEvent::default()
            }
        );
        assert_eq!(ev.nodes(MCAST_NODES_MEMBERS).unwrap(), &[1, 2]);
        assert_eq!(ev.nodes(MCAST_NODES_GONE).unwrap(), &[4, 3]);
        assert_eq!(ev.nodes(MCAST_NODES_FAILED).unwrap(), &[4]);
        assert!(ev.nodes(MCAST_NODES_JOINED).unwrap().is_empty());
        assert_eq!(ev.nodes(4).unwrap_err().code, MCAST_EINVAL);
        assert_eq!(ev.nodes(-1).unwrap_err().code, MCAST_EINVAL);
    }

    #[test]
    fn eviction_skip_unknown_and_garbage() {
        let ev = parse_event(br#"{"evicted":true,"by":2,"rejoining":true}"#).unwrap();
        assert_eq!((ev.info.kind, ev.info.evicted_by), (MCAST_EVENT_EVICTED, 2));
        let ev = parse_event(br#"{"skipped":{"sender":3,"frames":12}}"#).unwrap();
        assert_eq!(
            (ev.info.kind, ev.info.skipped_sender, ev.info.skipped_frames),
            (MCAST_EVENT_SKIPPED, 3, 12)
        );
        assert_eq!(
            parse_event(br#"{"future":1}"#).unwrap().info.kind,
            MCAST_EVENT_OTHER
        );
        for bad in [
            &b"not json"[..],
            b"[1,2]",
            br#"{"epoch":"x"}"#,
            br#"{"epoch":1,"gone":[-1]}"#,
            br#"{"epoch":1,"gone":[4294967296]}"#,
            br#"{"epoch":1,"failed":3}"#,
            br#"{"skipped":{"sender":1}}"#,
        ] {
            let e = parse_event(bad).unwrap_err();
            assert_eq!(e.code, MCAST_EINVAL, "{}", String::from_utf8_lossy(bad));
            assert!(e.message.contains("membership event"), "{}", e.message);
        }
    }

    #[test]
    fn notices_give_kind_numbers_and_text() {
        let members = vec![
            Member {
                rank: 0,
                node: 1,
                member: 5,
            },
            Member {
                rank: 1,
                node: 3,
                member: 6,
            },
        ];
        let (n, text) = notice_info(&Notice::ViewChanged {
            group: 2,
            epoch: 9,
            members,
        });
        assert_eq!(
            n,
            McastNotice {
                kind: MCAST_NOTICE_VIEW_CHANGED,
                group: 2,
                epoch: 9,
                members: 2
            }
        );
        assert_eq!(text, "group 2 epoch 9: 2 members, on nodes [1, 3]");
        let (n, text) = notice_info(&Notice::CutOff {
            reason: "too slow".into(),
        });
        assert_eq!(
            (n.kind, n.group, text.as_str()),
            (MCAST_NOTICE_CUT_OFF, 0, "too slow")
        );
        let (n, _) = notice_info(&Notice::Shutdown { reason: "x".into() });
        assert_eq!(n.kind, MCAST_NOTICE_SHUTDOWN);
        let (n, text) = notice_info(&Notice::Error {
            message: "dropped".into(),
        });
        assert_eq!((n.kind, text.as_str()), (MCAST_NOTICE_ERROR, "dropped"));
    }
}
