//! This node's send stream in a group, as a mode drives it: opened on
//! first use at the resume point, its ACK set following the view, each
//! member told where it starts. The FIFO mode's stream carries this node's
//! messages; the sequenced mode's, the root's.
//!
//! Owns: whether the stream is open and where it opens. Does not touch:
//! what goes into it (the modes), the engine's machines.

use mcast_engine::{EngineError, PublishError, StreamStart};
use mcast_wire::{NodeId, Seq};

use super::{ModeCx, Published};

/// This node's send stream in one group.
#[derive(Debug)]
pub struct SendStream {
    /// Where the stream opens (the last position of an earlier stream of
    /// this incarnation, else 0).
    first_seq: Seq,
    open: bool,
}

impl SendStream {
    pub fn new(first_seq: Seq) -> SendStream {
        SendStream {
            first_seq,
            open: false,
        }
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Opens the stream, if it is not yet, to the view's remote nodes, and
    /// tells each where it starts.
    pub fn ensure_open(&mut self, cx: &mut ModeCx<'_>) -> Result<(), EngineError> {
        if self.open {
            return Ok(());
        }
        let start = StreamStart {
            epoch: cx.epoch,
            seq: self.first_seq,
        };
        let remote = cx.remote;
        cx.streams.open_sender(cx.group, remote, start)?;
        self.open = true;
        cx.announce(remote, start);
        Ok(())
    }

    /// `msg` into the stream, opening it first if need be: Sent, WouldBlock
    /// (the window is full), or Dropped with the reason for the client.
    pub fn publish(&mut self, cx: &mut ModeCx<'_>, msg: &[u8]) -> Result<Published, EngineError> {
        self.ensure_open(cx)?;
        Ok(match cx.streams.publish(cx.group, msg) {
            Ok(()) => Published::Sent,
            Err(PublishError::WouldBlock) => Published::WouldBlock,
            Err(e) => {
                Published::Dropped(format!("a message for group {} was dropped: {e}", cx.group))
            }
        })
    }

    /// The view changed: the ACK set becomes the view; `added` members are
    /// told where the stream is now.
    pub fn members_changed(
        &mut self,
        cx: &mut ModeCx<'_>,
        added: &[NodeId],
    ) -> Result<(), EngineError> {
        if self.open {
            let start = cx.streams.set_members(cx.group, cx.remote)?;
            cx.announce(added, start);
        }
        Ok(())
    }

    /// Remote member `to` lost the stream while counted: tells it where to
    /// go on. True when it was told (false: no stream, or not a member; the
    /// view that adds it sends the start).
    pub fn resume_member(&mut self, cx: &mut ModeCx<'_>, to: NodeId) -> Result<bool, EngineError> {
        if !self.open || !cx.remote.contains(&to) {
            return Ok(false);
        }
        let start = cx.streams.resume_member(cx.group, to, cx.remote)?;
        cx.announce(&[to], start);
        Ok(true)
    }
}
