//! The sender's application: it offers the run's messages to the sender in
//! order, fragment by fragment, at once or at the offered rate, and holds
//! the one fragment the sender refused until it takes it.
//!
//! Owns: [`App`] (which message and offset come next, the refused fragment,
//! the wake-up) and `Sim::pump_app`, which fills each fragment's buffer in
//! the sender's pool. May not touch: the segment, the queue beyond
//! scheduling its own wake-up, or what receivers deliver.

use mcast_proto::{BufId, Endpoint, Flags, Instant, OutFrame, SendError, Sender};

use super::world::What;
use super::Sim;
use crate::config::offer_time;
use crate::content::fill_message;
use crate::pool::Owner;
use crate::report::SimFailure;

/// The sender's application: messages offered in order, fragment by fragment.
#[derive(Default)]
pub(super) struct App {
    /// The message whose fragment is offered next, and that fragment's offset.
    pub(super) msg: u64,
    offset: usize,
    /// A fragment the sender refused (window full), held by the simulator.
    pub(super) pending: Option<BufId>,
    /// The instant of the live wake-up entry (offered-rate mode).
    pub(super) wake_at: Option<Instant>,
}

impl<S: Sender, R: Endpoint> Sim<'_, S, R> {
    /// Offers fragments to the sender until it refuses one, the run's messages
    /// are all offered, or (offered-rate mode) the next message is not yet due.
    pub(super) fn pump_app(&mut self) -> Result<(), SimFailure> {
        let w = &mut self.w;
        let cfg = w.cfg;
        loop {
            if w.app.msg >= cfg.messages {
                return Ok(());
            }
            if let Some(rate) = cfg.messages_per_sec {
                let due = offer_time(w.app.msg, rate);
                if due > w.now && w.app.pending.is_none() {
                    if w.app.wake_at != Some(due) {
                        w.app.wake_at = Some(due);
                        w.push(due, What::AppWake);
                    }
                    return Ok(());
                }
            }
            let size = cfg.message_len(w.app.msg);
            let len = (size - w.app.offset).min(cfg.max_payload);
            let mut frag = Flags::NONE;
            if w.app.offset == 0 {
                frag = frag.with(Flags::FRAG_FIRST);
            }
            let last_frag = w.app.offset + len == size;
            if last_frag {
                frag = frag.with(Flags::FRAG_LAST);
            }
            let buf = match w.app.pending.take() {
                Some(buf) => buf,
                None => {
                    let (buf, bytes) = w.nodes[0].pool.alloc(Owner::App, len);
                    fill_message(cfg.seed, w.app.msg, w.app.offset, bytes);
                    buf
                }
            };
            // Nothing queued behind this fragment: the message's end, with the
            // next message not yet due (or none left).
            let next_due = w.app.msg + 1 < cfg.messages
                && cfg
                    .messages_per_sec
                    .is_none_or(|rate| offer_time(w.app.msg + 1, rate) <= w.now);
            let frame = OutFrame {
                buf,
                len: len as u16,
                frag,
                last: last_frag && !next_due,
            };
            match self.sender.send(w.now, frame) {
                Ok(_) => {
                    w.nodes[0].pool.set_owner(buf, Owner::Endpoint);
                    if last_frag {
                        w.app.msg += 1;
                        w.app.offset = 0;
                    } else {
                        w.app.offset += len;
                    }
                }
                Err(SendError::WindowFull(b)) if b == buf => {
                    w.app.pending = Some(buf);
                    return Ok(());
                }
                Err(e) => {
                    return Err(w.failure(format!(
                        "the sender refused {buf:?} with {e:?} (expected WindowFull of that buffer)"
                    )))
                }
            }
        }
    }
}
