//! The sender's application: it offers the run's messages to the sender in
//! order, fragment by fragment, at once or at the offered rate, and holds
//! the one frame the sender refused until it takes it. With
//! [`crate::SimConfig::batch`] it packs small whole messages into one frame
//! as the engine's send queue does (docs/protocol.md §1.10): a frame started
//! by a message smaller than a frame takes every next message already due
//! that fits, and a refused frame takes those that fall due while it waits.
//!
//! Owns: [`App`] (which message and offset come next, the refused frame and
//! the messages in it, the wake-up, the frame counts) and `Sim::pump_app`,
//! which fills each frame's buffer in the sender's pool. May not touch: the
//! segment, the queue beyond scheduling its own wake-up, or what receivers
//! deliver.

use mcast_proto::{BufId, Endpoint, Flags, Instant, OutFrame, SendError, Sender};
use mcast_wire::batch;

use super::world::{What, World};
use super::Sim;
use crate::config::offer_time;
use crate::content::fill_message;
use crate::pool::Owner;
use crate::report::SimFailure;

/// The sender's application: messages offered in order, fragment by fragment.
#[derive(Default)]
pub(super) struct App {
    /// The first message of the frame offered next, and that frame's offset
    /// into it (0 unless it is a later fragment).
    pub(super) msg: u64,
    offset: usize,
    /// A frame the sender refused (window full), held by the simulator.
    pub(super) pending: Option<AppFrame>,
    /// The instant of the live wake-up entry (offered-rate mode).
    pub(super) wake_at: Option<Instant>,
    /// Data frames the sender accepted.
    pub(super) frames: u64,
    /// Of those, frames holding several messages (flag `BATCH`).
    pub(super) batched_frames: u64,
    /// Messages that joined a frame another message started.
    pub(super) batched_messages: u64,
    /// One message's bytes, on their way into a batch.
    scratch: Vec<u8>,
}

/// A frame the application built and has not yet handed over.
#[derive(Debug, Clone, Copy)]
pub(super) struct AppFrame {
    pub(super) buf: BufId,
    /// Payload bytes.
    len: usize,
    /// Payload flags: fragment position, and `BATCH` once a second message joined.
    frag: Flags,
    /// Messages it holds: 1 unless batched.
    count: u64,
    /// Later messages may join it: it was started by a whole message smaller
    /// than a frame (the engine's open batch).
    open: bool,
}

impl<S: Sender, R: Endpoint> Sim<'_, S, R> {
    /// Offers frames to the sender until it refuses one, the run's messages
    /// are all offered, or (offered-rate mode) the next message is not yet due.
    pub(super) fn pump_app(&mut self) -> Result<(), SimFailure> {
        let w = &mut self.w;
        let cfg = w.cfg;
        loop {
            let mut f = match w.app.pending.take() {
                Some(f) => f,
                None => {
                    if w.app.msg >= cfg.messages {
                        return Ok(());
                    }
                    if let Some(rate) = cfg.messages_per_sec {
                        let due = offer_time(w.app.msg, rate);
                        if due > w.now {
                            if w.app.wake_at != Some(due) {
                                w.app.wake_at = Some(due);
                                w.push(due, What::AppWake);
                            }
                            return Ok(());
                        }
                    }
                    w.new_frame()
                }
            };
            if f.open {
                w.pack(&mut f);
            }
            let last_frag = f.frag.contains(Flags::FRAG_LAST);
            // Nothing queued behind this frame: it ends its last message, and
            // the message after that is not yet due (or none is left).
            let after = w.app.msg + f.count;
            let next_due = after < cfg.messages
                && cfg
                    .messages_per_sec
                    .is_none_or(|rate| offer_time(after, rate) <= w.now);
            let frame = OutFrame {
                buf: f.buf,
                len: f.len as u16,
                frag: f.frag,
                last: last_frag && !next_due,
            };
            match self.sender.send(w.now, frame) {
                Ok(_) => {
                    w.nodes[0].pool.set_owner(f.buf, Owner::Endpoint);
                    w.app.frames += 1;
                    if f.count > 1 {
                        w.app.batched_frames += 1;
                        w.app.batched_messages += f.count - 1;
                    }
                    if last_frag {
                        w.app.msg += f.count;
                        w.app.offset = 0;
                    } else {
                        w.app.offset += f.len;
                    }
                }
                Err(SendError::WindowFull(b)) if b == f.buf => {
                    w.app.pending = Some(f);
                    return Ok(());
                }
                Err(e) => {
                    return Err(w.failure(format!(
                        "the sender refused {:?} with {e:?} (expected WindowFull of that buffer)",
                        f.buf
                    )))
                }
            }
        }
    }
}

impl World<'_> {
    /// The next fragment of the application's current message, in a buffer
    /// of the sender's pool that the simulator holds.
    fn new_frame(&mut self) -> AppFrame {
        let cfg = self.cfg;
        let (msg, offset) = (self.app.msg, self.app.offset);
        let size = cfg.message_len(msg);
        let len = (size - offset).min(cfg.max_payload);
        let mut frag = Flags::NONE;
        if offset == 0 {
            frag = frag.with(Flags::FRAG_FIRST);
        }
        if offset + len == size {
            frag = frag.with(Flags::FRAG_LAST);
        }
        let (buf, bytes) = self.nodes[0].pool.alloc(Owner::App, len);
        fill_message(cfg.seed, msg, offset, bytes);
        AppFrame {
            buf,
            len,
            frag,
            count: 1,
            open: cfg.batch && offset == 0 && size < cfg.max_payload,
        }
    }

    /// Packs the messages after those in `f` into it, in order, while they
    /// are due and fit: each becomes a record (`mcast_wire::batch`), the
    /// first of them turning `f` into a batch.
    fn pack(&mut self, f: &mut AppFrame) {
        let cfg = self.cfg;
        let mut next = self.app.msg + f.count;
        while next < cfg.messages
            && cfg
                .messages_per_sec
                .is_none_or(|rate| offer_time(next, rate) <= self.now)
        {
            let size = cfg.message_len(next);
            let batched = f.frag.contains(Flags::BATCH);
            let new_len = batch::len_after_append(f.len, batched, size);
            if new_len > cfg.max_payload {
                break;
            }
            let scratch = &mut self.app.scratch;
            scratch.clear();
            scratch.resize(size, 0);
            fill_message(cfg.seed, next, 0, scratch);
            let area = self.nodes[0].pool.resize(f.buf, new_len);
            let mut at = f.len;
            if !batched {
                at = batch::begin(area, f.len);
                f.frag = f.frag.with(Flags::BATCH);
            }
            f.len = batch::append(area, at, scratch);
            debug_assert_eq!(f.len, new_len);
            f.count += 1;
            next += 1;
        }
    }
}
