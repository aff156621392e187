//! The per-sender FIFO mode: every member that publishes opens its own
//! send stream in the group (MAK by default; the group's `algorithm`), and
//! every receiver delivers each sender's messages in that sender's order,
//! as they arrive. Different senders' messages may interleave differently
//! at different receivers.
//!
//! Owns: whether this node's send stream is open, and where it starts.
//! Does not touch: the receive streams (the daemon opens them at the
//! starts senders announce), nor what a departed sender's survivors agree
//! on (the flush).

use mcast_engine::{EngineError, Fragment};
use mcast_ipc::ClientId;
use mcast_wire::{NodeId, Seq};
use serde_json::json;

use super::send_stream::SendStream;
use super::{GroupMode, ModeCx, Out, Published, To};
use crate::daemon::deliver::data_record;

/// A group in per-sender FIFO order.
#[derive(Debug)]
pub struct PerSenderFifo {
    stream: SendStream,
}

impl PerSenderFifo {
    pub fn new(first_seq: Seq) -> PerSenderFifo {
        PerSenderFifo {
            stream: SendStream::new(first_seq),
        }
    }
}

impl GroupMode for PerSenderFifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    /// Opens the send stream on first use, to the view's remote nodes, and
    /// tells each where it starts.
    fn publish(
        &mut self,
        cx: &mut ModeCx<'_>,
        _from: ClientId,
        msg: &[u8],
        _out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        if cx.remote.is_empty() {
            return Ok(Published::Sent); // nobody else in the group: local delivery only
        }
        self.stream.publish(cx, msg)
    }

    /// The send stream's ACK set is the view; a new member starts where
    /// the stream is now.
    fn members_changed(
        &mut self,
        cx: &mut ModeCx<'_>,
        added: &[NodeId],
    ) -> Result<(), EngineError> {
        self.stream.members_changed(cx, added)
    }

    fn resume_member(&mut self, cx: &mut ModeCx<'_>, to: NodeId) -> Result<bool, EngineError> {
        self.stream.resume_member(cx, to)
    }

    fn deliver(&mut self, f: &Fragment<'_>, out: &mut Out<'_>) {
        out(
            data_record(f.group, f.stream, f.first, f.last),
            f.data,
            To::AllBut(None),
        );
    }

    fn delivers_verbatim(&self) -> bool {
        true
    }

    fn stats_json(&self) -> serde_json::Value {
        json!({"mode": self.name(), "sender_open": self.stream.is_open()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::mode::fake::{at, Fake};
    use crate::links::LinkMessage;

    fn starts(outbox: &[(NodeId, LinkMessage)]) -> Vec<(NodeId, u32)> {
        outbox
            .iter()
            .map(|(n, m)| match m {
                LinkMessage::Start { group: 3, start } => (*n, start.seq.0),
                other => panic!("not a start in group 3: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_send_stream_opens_once_at_the_resume_point_and_new_members_are_told_where_it_is() {
        let mut mode = PerSenderFifo::new(Seq(17));
        let mut streams = Fake::default();
        let mut outbox = Vec::new();
        let remote = [2, 4];
        let mut cx = ModeCx {
            group: 3,
            node: 1,
            epoch: 5,
            remote: &remote,
            root: Some(1),
            settled: true,
            view_epoch: 1,
            streams: &mut streams,
            outbox: &mut outbox,
        };
        // Before the stream is open, a new view and a start request tell nobody.
        mode.members_changed(&mut cx, &[4]).unwrap();
        assert!(!mode.resume_member(&mut cx, 2).unwrap());
        assert!(cx.outbox.is_empty());
        assert_eq!(
            mode.publish(&mut cx, ClientId(1), b"a", &mut |_, _, _| {})
                .unwrap(),
            Published::Sent
        );
        assert_eq!(
            mode.publish(&mut cx, ClientId(1), b"b", &mut |_, _, _| {})
                .unwrap(),
            Published::Sent
        );
        assert_eq!(starts(cx.outbox), [(2, 17), (4, 17)]);
        cx.outbox.clear();
        // Only the added member is told, where the stream is now.
        let remote = [2, 4, 6];
        cx.remote = &remote;
        mode.members_changed(&mut cx, &[6]).unwrap();
        assert_eq!(starts(cx.outbox), [(6, 40)]);
        cx.outbox.clear();
        assert!(mode.resume_member(&mut cx, 4).unwrap());
        assert!(!mode.resume_member(&mut cx, 9).unwrap(), "not a member");
        assert_eq!(starts(cx.outbox), [(4, 30)]);
        assert_eq!(streams.opened, [(vec![2, 4], at(17))]);
        assert_eq!(streams.published, [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(streams.members, [vec![2, 4, 6]]);
    }

    #[test]
    fn a_full_window_blocks_and_a_group_alone_sends_nothing() {
        let mut mode = PerSenderFifo::new(Seq(0));
        let mut streams = Fake {
            full: true,
            position: Some(at(99)),
            ..Fake::default()
        };
        let mut outbox = Vec::new();
        let mut cx = ModeCx {
            group: 3,
            node: 1,
            epoch: 5,
            remote: &[],
            root: Some(1),
            settled: true,
            view_epoch: 1,
            streams: &mut streams,
            outbox: &mut outbox,
        };
        assert_eq!(
            mode.publish(&mut cx, ClientId(1), b"x", &mut |_, _, _| {})
                .unwrap(),
            Published::Sent
        );
        assert!(cx.outbox.is_empty());
        let remote = [2];
        cx.remote = &remote;
        assert_eq!(
            mode.publish(&mut cx, ClientId(1), b"x", &mut |_, _, _| {})
                .unwrap(),
            Published::WouldBlock
        );
        assert_eq!(mode.retire(&streams, 3), Some(Seq(99)));
    }

    #[test]
    fn fragments_are_delivered_at_once_as_their_senders_records() {
        let mut mode = PerSenderFifo::new(Seq(0));
        let mut got = Vec::new();
        let f = Fragment {
            group: 3,
            stream: 2,
            seq: Seq(8),
            first: true,
            last: false,
            data: b"part",
        };
        mode.deliver(&f, &mut |hdr, data, except| {
            got.push((hdr, data.to_vec(), except.except()))
        });
        assert_eq!(
            got,
            [(data_record(3, 2, true, false), b"part".to_vec(), None)]
        );
    }
}
