//! The poll loop: each [`Engine::poll`] reaps TX completions, drains one RX
//! batch, fires due timers, feeds queued fragments to the send machines,
//! drains events and transmits; [`Engine::run_once`] adds the adaptive wait
//! (busy-poll, then sleep until a frame, a caller's descriptor or the next
//! protocol deadline).
//!
//! Owns: the order of one iteration, the timers, the feeding of send
//! windows and the idle policy (spin, yield, sleep, timer slack). May not
//! touch: frame headers or payloads (the receive and transmit paths do).

use std::cell::Cell;
use std::os::fd::RawFd;
use std::time::Duration;

use mcast_proto::{Endpoint, Instant, SendError, Sender};

use super::delivery::Deliver;
use super::frames::Place;
use super::publish::keep_payload_crc;
use super::{nanos, Engine};
use crate::sys;
use crate::transport::Transport;
use crate::EngineError;

impl<T: Transport> Engine<T> {
    /// One iteration without sleeping; received messages are reassembled
    /// and queued. Returns whether anything happened.
    pub fn poll(&mut self) -> Result<bool, EngineError> {
        self.poll_inner(None)
    }

    /// One iteration without sleeping; received fragments go to `sink`, in
    /// place (nothing is reassembled or queued).
    pub fn poll_deliver(&mut self, sink: &mut dyn Deliver) -> Result<bool, EngineError> {
        self.poll_inner(Some(sink))
    }

    fn poll_inner<'s>(
        &mut self,
        mut sink: Option<&mut (dyn Deliver + 's)>,
    ) -> Result<bool, EngineError> {
        self.counters.polls += 1;
        let now = self.now();
        self.polled_at = now.0;
        let mut work = false;

        // Completions: kept frames return to their machine (or to the pool if
        // the machine released them while they were in flight).
        self.kept.clear();
        self.transport.reap(&mut self.kept)?;
        for i in 0..self.kept.len() {
            let f = self.kept[i];
            match self.frames.place[f as usize] {
                Place::InTx { back: true } => self.frames.place[f as usize] = Place::Machine,
                Place::InTx { back: false } => self.free(f),
                other => {
                    return Err(EngineError::Accounting(format!(
                        "transport completed kept frame {f} that the engine has in {other:?}"
                    )))
                }
            }
            work = true;
        }

        // Receive one batch.
        let mut rx = std::mem::take(&mut self.rx_batch);
        rx.clear();
        let got = self.transport.recv(&mut rx);
        if let (Some(t), false) = (self.trace.as_deref_mut(), rx.is_empty()) {
            t.rx_batch();
        }
        for d in &rx {
            self.handle_rx(now, *d)?;
        }
        work |= !rx.is_empty();
        self.rx_batch = rx;
        got?;

        // Timers.
        for g in &mut self.groups {
            if let Some(s) = g.sender.as_mut() {
                if s.machine.poll_timeout().is_some_and(|t| t <= now) {
                    s.machine.handle_timeout(now);
                    work = true;
                }
            }
            for r in &mut g.receivers {
                if r.machine.poll_timeout().is_some_and(|t| t <= now) {
                    r.machine.handle_timeout(now);
                    work = true;
                }
            }
        }

        work |= self.feed_senders(now);
        self.drain_events(sink.as_deref_mut())?;
        work |= self.drain_transmits(now)?;
        self.drain_events(sink)?;
        Ok(work)
    }

    /// One iteration with adaptive waiting: busy-polls for `spin` after the
    /// last work, then sleeps until a frame arrives or the next deadline.
    pub fn run_once(&mut self) -> Result<bool, EngineError> {
        self.run_once_for(self.cfg.max_sleep)
    }

    /// [`Engine::run_once`] sleeping at most `max_sleep` (and never longer
    /// than [`EngineConfig::max_sleep`](super::EngineConfig::max_sleep)): for a caller with a deadline of its
    /// own, such as the next message a paced sender must publish.
    pub fn run_once_for(&mut self, max_sleep: Duration) -> Result<bool, EngineError> {
        if self.poll()? {
            self.idle_since = None;
            return Ok(true);
        }
        self.idle(&[], Some(max_sleep))?;
        Ok(false)
    }

    /// [`Engine::run_once`] delivering to `sink`, whose sleep also ends when
    /// one of `fds` becomes readable (or `max_sleep`, if given, passes).
    /// After a sleep it polls again at once, so a frame that woke it is
    /// delivered in this call, not after the rest of the caller's round
    /// (mcastd's round does a dozen other things and a `poll()` of its
    /// clients first: docs/benchmarks.md "Where the time goes").
    pub fn run_once_deliver(
        &mut self,
        sink: &mut dyn Deliver,
        fds: &[RawFd],
        max_sleep: Option<Duration>,
    ) -> Result<bool, EngineError> {
        if self.poll_deliver(sink)? {
            self.idle_since = None;
            return Ok(true);
        }
        if self.idle(fds, max_sleep)? && self.poll_deliver(sink)? {
            self.idle_since = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// One round of busy-polling without work: yield the CPU or hint a spin.
    fn spin_round(&self) {
        if self.cfg.spin_yield {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// After a poll without work: spin a while, then sleep. True when it
    /// slept (and so may have been woken by something to do).
    fn idle(&mut self, fds: &[RawFd], max_sleep: Option<Duration>) -> Result<bool, EngineError> {
        // The poll that just found no work read the clock a moment ago: one
        // clock read per busy-poll round instead of two.
        let now = self.polled_at;
        let since = *self.idle_since.get_or_insert(now);
        if now - since < nanos(self.cfg.spin) {
            // `spin_yield_after` of an idle spin keeps the CPU.
            if now - since < nanos(self.cfg.spin_yield_after) {
                std::hint::spin_loop();
            } else {
                self.spin_round();
            }
            return Ok(false);
        }
        let mut timeout = max_sleep
            .unwrap_or(self.cfg.max_sleep)
            .min(self.cfg.max_sleep);
        if let Some(d) = self.next_deadline() {
            // Wake `deadline_spin` before the deadline and spin to it: a wake
            // from poll() takes tens of microseconds on a loaded host, all of
            // which a sleep to the deadline itself adds to the timer.
            let left = d.0.saturating_sub(now);
            let early = left.saturating_sub(nanos(self.cfg.deadline_spin));
            timeout = timeout.min(Duration::from_nanos(early));
        }
        if !self.tx_keep.is_empty() || !self.tx_copy.is_empty() || !self.deferred.is_empty() {
            // The TX ring was full or a frame is in flight: look again soon.
            timeout = timeout.min(Duration::from_micros(20));
        }
        if timeout.is_zero() {
            // Spinning to a deadline `deadline_spin` away.
            self.spin_round();
            return Ok(false);
        }
        precise_sleeps();
        self.counters.sleeps += 1;
        let slept = match (fds.is_empty(), self.transport.wait_fd()) {
            (true, _) => self.transport.wait(timeout),
            (false, Some(fd)) => {
                let mut all = Vec::with_capacity(fds.len() + 1);
                all.push(fd);
                all.extend_from_slice(self.transport.extra_wait_fds());
                all.extend_from_slice(fds);
                sys::ppoll_any(&all, timeout)
                    .map(|_| ())
                    .map_err(|e| EngineError::Io {
                        operation: "poll on the transport and the caller's descriptors",
                        source: e,
                    })
            }
            // No transport descriptor to wait on with the caller's: wait on
            // theirs briefly, then look at the transport again.
            (false, None) => sys::ppoll_any(fds, timeout.min(Duration::from_micros(200)))
                .map(|_| ())
                .map_err(|e| EngineError::Io {
                    operation: "poll on the caller's descriptors",
                    source: e,
                }),
        };
        slept.map(|()| true)
    }

    /// The earliest protocol deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.groups
            .iter()
            .flat_map(|g| {
                let s = g.sender.as_ref().and_then(|s| s.machine.poll_timeout());
                g.receivers
                    .iter()
                    .filter_map(|r| r.machine.poll_timeout())
                    .chain(s)
            })
            .min()
    }

    /// Feeds queued fragments to each sender while its window is open.
    pub(super) fn feed_senders(&mut self, now: Instant) -> bool {
        let mut fed = false;
        for g in &mut self.groups {
            let Some(s) = g.sender.as_mut() else {
                continue;
            };
            while let Some(mut of) = s.queue.pop_front() {
                if !s.machine.can_send() {
                    s.queue.push_front(of);
                    break;
                }
                of.last = s.queue.is_empty();
                // Final now: nothing joins a frame that left the queue. A
                // sealed frame has no CRC (its tag covers the payload).
                if self.auth.is_none() {
                    keep_payload_crc(&self.transport, &mut self.frames, &of);
                }
                // Counted only where the machine says what every member
                // acknowledged: elsewhere nothing would ever settle the
                // entries.
                let ends = if s.machine.acked_until().is_some() {
                    u32::from(self.frames.ends[of.buf.0 as usize])
                } else {
                    0
                };
                match s.machine.send(now, of) {
                    Ok(seq) => {
                        self.frames.place[of.buf.0 as usize] = Place::Machine;
                        s.next_seq = seq.next();
                        s.tally.frames += 1;
                        // (Settled here too, so the entries stay within
                        // the window when nobody asks for the count.)
                        s.settle_acked();
                        if ends > 0 {
                            s.ends.push_back((seq, ends));
                        }
                        fed = true;
                    }
                    Err(SendError::WindowFull(_)) | Err(SendError::NoMembers(_)) => {
                        s.queue.push_front(of);
                        break;
                    }
                }
            }
        }
        fed
    }
}

thread_local! {
    /// Whether this thread's timer slack has been set.
    static PRECISE: Cell<bool> = const { Cell::new(false) };
}

/// The timer slack of a thread that sleeps towards protocol deadlines: 1 µs,
/// not the default 50 µs (a sleep's timeout may otherwise end that much
/// late, and NAK timers are tens of microseconds). Set once per thread, by
/// the first sleep.
fn precise_sleeps() {
    PRECISE.with(|p| {
        if !p.get() {
            // Best effort: a thread that cannot change it keeps the default.
            let _ = sys::set_timer_slack(Duration::from_micros(1));
            p.set(true);
        }
    });
}
