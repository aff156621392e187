//! Frame accounting: which of the transport's UMEM frames the engine holds
//! and where ([`Place`]), what it keeps per frame ([`FrameTable`]), a
//! machine's release of a buffer, the conservation check
//! ([`Engine::check_conservation`], [`FrameLedger`]) and shutdown, which
//! brings every frame back.
//!
//! Owns: the per-frame table and the transitions that return frames
//! (free, release, absorb a closed machine's releases). May not touch: the
//! contents of a frame, or the stream table beyond handing a closed stream's
//! machine back its buffers.

use std::collections::VecDeque;

use mcast_proto::{BufId, Endpoint, Event, Transmit, TxBody};

use super::stats::EngineStats;
use super::Engine;
use crate::sys;
use crate::transport::{Transport, TransportCounts};
use crate::EngineError;

/// Where the frames are, by the engine's ledger, after a conservation check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameLedger {
    pub transport: TransportCounts,
    /// Received, being dispatched (0 between polls).
    pub rx: u32,
    /// Published fragments waiting for the send window.
    pub queued: u32,
    /// Held by a protocol machine (retransmission or reorder buffer).
    pub machine: u32,
    /// In the engine's TX batch, not yet accepted by the transport.
    pub staged: u32,
    /// Retransmission buffers in the TX ring or awaiting completion.
    pub in_tx_kept: u32,
    /// Sum of the machines' `held_buffers()`.
    pub machines_report: u32,
}

/// What shutdown returned.
#[derive(Debug, Clone)]
pub struct ShutdownReport {
    pub stats: EngineStats,
    /// The ledger after every frame came back.
    pub ledger: FrameLedger,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// The transport's: free, fill ring / kernel RX, or a non-kept frame in TX.
    Transport,
    Rx,
    Queued,
    Machine,
    /// In a TX batch. `keep`: a machine's buffer (in the kept batch); `back`:
    /// return it to the machine after completion (false once it released it).
    Staged {
        keep: bool,
        back: bool,
    },
    InTx {
        back: bool,
    },
}

/// By frame index: where each frame is and what the engine keeps about it.
#[derive(Debug)]
pub(super) struct FrameTable {
    pub(super) place: Vec<Place>,
    /// Where a received data frame's bytes start in it (RX headroom).
    pub(super) rx_offset: Vec<u32>,
    /// The CRC32C of the payload a publish wrote into the frame, computed
    /// while the payload was in cache; a transmission adds only the header's
    /// (`Frame::emit_with_payload_crc`).
    pub(super) payload_crc: Vec<u32>,
    /// Messages that end in a queued or sent frame a publish wrote: 1 for a
    /// whole message or a last fragment, one more per message packed beside
    /// it, 0 for other fragments (counted as packed, never read back).
    pub(super) ends: Vec<u16>,
}

impl FrameTable {
    /// `n` frames, all the transport's.
    pub(super) fn new(n: usize) -> FrameTable {
        FrameTable {
            place: vec![Place::Transport; n],
            rx_offset: vec![0; n],
            payload_crc: vec![0; n],
            ends: vec![0; n],
        }
    }
}

impl<T: Transport> Engine<T> {
    /// Checks that every frame is in exactly one place: the transport's own
    /// ledger holds, the engine's places agree with the transport's counts, and
    /// the machines hold exactly the frames the engine thinks they hold.
    pub fn check_conservation(&self) -> Result<FrameLedger, String> {
        let transport = self.transport.check_conservation()?;
        let mut l = FrameLedger {
            transport,
            ..FrameLedger::default()
        };
        let mut machine_owned = 0u32;
        for p in &self.frames.place {
            match *p {
                Place::Transport => {}
                Place::Rx => l.rx += 1,
                Place::Queued => l.queued += 1,
                Place::Machine => {
                    l.machine += 1;
                    machine_owned += 1;
                }
                Place::Staged { back, .. } => {
                    l.staged += 1;
                    machine_owned += u32::from(back);
                }
                Place::InTx { back } => {
                    l.in_tx_kept += 1;
                    machine_owned += u32::from(back);
                }
            }
        }
        l.machines_report = self
            .groups
            .iter()
            .map(|g| {
                g.sender.as_ref().map_or(0, |s| s.machine.held_buffers()) as u32
                    + g.receivers
                        .iter()
                        .map(|r| r.machine.held_buffers() as u32)
                        .sum::<u32>()
            })
            .sum();
        let queued: usize = self
            .groups
            .iter()
            .filter_map(|g| g.sender.as_ref())
            .map(|s| s.queue.len())
            .sum();
        if queued as u32 != l.queued {
            return Err(format!(
                "send queues hold {queued} frames, the ledger {}: {l:?}",
                l.queued
            ));
        }
        let engine_held = l.rx + l.queued + l.machine + l.staged;
        if engine_held != transport.held {
            return Err(format!(
                "engine holds {engine_held} frames, transport says {}: {l:?}",
                transport.held
            ));
        }
        if l.in_tx_kept > transport.tx {
            return Err(format!(
                "{} kept frames in flight but the transport has {} in TX: {l:?}",
                l.in_tx_kept, transport.tx
            ));
        }
        if machine_owned != l.machines_report {
            return Err(format!(
                "machines report {} buffers, the engine's ledger {machine_owned}: {l:?}",
                l.machines_report
            ));
        }
        Ok(l)
    }

    /// Stops: waits (briefly) for frames in flight, has every machine hand
    /// back its buffers (`release_all`), and checks that every frame is back
    /// with the transport.
    pub fn shutdown(mut self) -> Result<(ShutdownReport, T), EngineError> {
        let _ = self.flush_batches();
        let deadline = sys::monotonic_ns() + 200_000_000;
        loop {
            let busy = self.transport.counts().tx > 0
                || self
                    .frames
                    .place
                    .iter()
                    .any(|p| matches!(p, Place::InTx { .. } | Place::Staged { .. }));
            if !busy || sys::monotonic_ns() >= deadline {
                break;
            }
            self.kept.clear();
            self.transport.reap(&mut self.kept)?;
            for i in 0..self.kept.len() {
                let f = self.kept[i];
                if let Place::InTx { back } = self.frames.place[f as usize] {
                    self.frames.place[f as usize] = if back {
                        Place::Machine
                    } else {
                        Place::Transport
                    };
                    if !back {
                        self.transport.release(f);
                    }
                }
            }
            let _ = self.flush_batches();
            std::thread::yield_now();
        }
        self.deferred.clear();
        let mut stats = self.stats();
        for gi in 0..self.groups.len() {
            if let Some(mut s) = self.groups[gi].sender.take() {
                while let Some(of) = s.queue.pop_front() {
                    self.free(of.buf.0);
                }
                s.machine.release_all();
                self.absorb_releases(&mut s.machine)?;
            }
            for mut r in std::mem::take(&mut self.groups[gi].receivers) {
                r.machine.release_all();
                self.absorb_releases(&mut r.machine)?;
            }
        }
        for f in 0..self.frames.place.len() as u32 {
            match self.frames.place[f as usize] {
                Place::Machine => {
                    return Err(EngineError::Accounting(format!(
                        "frame {f} still held by a machine after release_all"
                    )))
                }
                Place::Staged { .. } => self.free(f),
                Place::InTx { .. } => {
                    return Err(EngineError::Accounting(format!(
                        "frame {f} never completed its transmission"
                    )))
                }
                _ => {}
            }
        }
        self.tx_keep.clear();
        self.tx_copy.clear();
        let ledger = self.check_conservation().map_err(EngineError::Accounting)?;
        if ledger.transport.held != 0 || ledger.transport.tx != 0 {
            return Err(EngineError::Accounting(format!(
                "frames still held or in flight after shutdown: {ledger:?}"
            )));
        }
        stats.frames = ledger.transport;
        Ok((ShutdownReport { stats, ledger }, self.transport))
    }

    /// Takes a machine's events after `release_all` (releases only).
    pub(super) fn absorb_releases(
        &mut self,
        machine: &mut dyn Endpoint,
    ) -> Result<(), EngineError> {
        while let Some(ev) = machine.poll_event() {
            match ev {
                Event::Release(b) => release_from_machine(
                    &mut self.frames.place,
                    &mut self.transport,
                    &mut self.deferred,
                    b,
                )?,
                Event::Deliver { buf, .. } => {
                    // A delivery the caller will never take: free its frame.
                    let f = buf.0;
                    self.free(f);
                }
            }
        }
        Ok(())
    }

    #[inline]
    pub(super) fn free(&mut self, f: u32) {
        self.frames.place[f as usize] = Place::Transport;
        self.transport.release(f);
    }
}

/// A machine gave buffer `b` back: free it now, or after its transmission.
/// Deferred transmissions of it are dropped: once freed the frame may be
/// reused for other data, and the machine no longer wants it sent.
#[inline]
pub(super) fn release_from_machine<T: Transport>(
    place: &mut [Place],
    transport: &mut T,
    deferred: &mut VecDeque<Transmit>,
    b: BufId,
) -> Result<(), EngineError> {
    if !deferred.is_empty() {
        deferred.retain(|t| t.body != TxBody::Buf(b));
    }
    let f = b.0 as usize;
    match place[f] {
        Place::Machine => {
            place[f] = Place::Transport;
            transport.release(b.0);
        }
        Place::Staged { keep, back: true } => place[f] = Place::Staged { keep, back: false },
        Place::InTx { back: true } => place[f] = Place::InTx { back: false },
        other => {
            return Err(EngineError::Accounting(format!(
                "machine released frame {f} that the engine has in {other:?}"
            )))
        }
    }
    Ok(())
}
