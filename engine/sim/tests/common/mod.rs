//! Test-only machines for exercising the simulator itself: a "perfect-link"
//! sender that multicasts each frame once and forgets it, a receiver that
//! delivers the next expected frame and drops the rest, and switchable bugs
//! for making sure the checkers catch them.
#![allow(dead_code)]

use std::collections::VecDeque;

use mcast_proto::{
    BufId, Counters, Dest, Duration, Endpoint, Event, Flags, Header, Instant, Kind, NodeId,
    OutFrame, RxBody, SendError, Sender, Seq, StreamConfig, Transmit, TxBody,
};

/// Options of [`PerfectSender`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SenderOpts {
    /// Never claims to be idle, so a run never completes.
    pub never_idle: bool,
    /// A timer firing this often, forever.
    pub tick: Option<Duration>,
    /// Bug: keeps every buffer and accepts beyond its window.
    pub hoard: bool,
    /// Keeps sent buffers until the next tick (so the window fills and the
    /// application meets back-pressure).
    pub release_on_tick: bool,
}

/// Multicasts every frame once, then releases its buffer.
#[derive(Debug)]
pub struct PerfectSender {
    stream: StreamConfig,
    opts: SenderOpts,
    next_seq: Seq,
    queue: VecDeque<(Seq, OutFrame)>,
    events: VecDeque<Event>,
    held: usize,
    sent: Vec<BufId>,
    next_tick: Option<Instant>,
    counters: Counters,
}

impl PerfectSender {
    pub fn new(stream: StreamConfig, opts: SenderOpts) -> PerfectSender {
        PerfectSender {
            stream,
            opts,
            next_seq: stream.initial_seq,
            queue: VecDeque::new(),
            events: VecDeque::new(),
            held: 0,
            sent: Vec::new(),
            next_tick: opts.tick.map(|t| Instant::ZERO + t),
            counters: Counters::default(),
        }
    }
}

impl Endpoint for PerfectSender {
    fn handle_frame(&mut self, _now: Instant, header: &Header, body: RxBody<'_>) {
        match (header.kind, body) {
            (Kind::Ack, _) => self.counters.acks_received += 1,
            (_, RxBody::Data(buf)) => {
                self.counters.data_received += 1;
                self.events.push_back(Event::Release(buf));
                self.held += 1;
            }
            _ => self.counters.rejected += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let (Some(t), Some(tick)) = (self.next_tick, self.opts.tick) {
            if now >= t {
                self.counters.timeouts += 1;
                self.next_tick = Some(t + tick);
                for b in self.sent.drain(..) {
                    self.events.push_back(Event::Release(b));
                }
            }
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        let (seq, f) = self.queue.pop_front()?;
        let mut header = Header::new(Kind::Data);
        header.group = self.stream.group;
        header.src = self.stream.local;
        header.epoch = self.stream.epoch;
        header.seq = seq;
        header.flags = if f.last {
            f.frag.with(Flags::LAST)
        } else {
            f.frag
        };
        header.payload_len = f.len;
        self.counters.data_sent += 1;
        if self.opts.release_on_tick {
            self.sent.push(f.buf);
        } else if !self.opts.hoard {
            self.events.push_back(Event::Release(f.buf));
        }
        Some(Transmit {
            dest: Dest::Group,
            header,
            body: TxBody::Buf(f.buf),
        })
    }

    fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front()?;
        if let Event::Release(_) = e {
            self.held -= 1;
        }
        Some(e)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next_tick
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn held_buffers(&self) -> usize {
        self.held
    }

    fn release_all(&mut self) {
        // The simulator never shuts a machine down; this is here for the trait.
        for (_, f) in self.queue.drain(..) {
            self.events.push_back(Event::Release(f.buf));
        }
        for b in self.sent.drain(..) {
            self.events.push_back(Event::Release(b));
        }
        self.held = 0;
    }
}

impl Sender for PerfectSender {
    fn send(&mut self, _now: Instant, frame: OutFrame) -> Result<Seq, SendError> {
        if !self.opts.hoard && self.held >= self.stream.window_frames as usize {
            self.counters.window_full += 1;
            return Err(SendError::WindowFull(frame.buf));
        }
        let seq = self.next_seq;
        self.next_seq = seq.next();
        self.queue.push_back((seq, frame));
        self.held += 1;
        Ok(seq)
    }

    fn can_send(&self) -> bool {
        self.held < self.stream.window_frames as usize
    }

    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.sent.is_empty() && !self.opts.never_idle
    }

    fn set_members(&mut self, _now: Instant, _members: &[NodeId]) {}
}

/// A deliberate fault in [`PerfectReceiver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// Delivers every data frame, duplicates included.
    NoDedupe,
    /// Delivers each pair of frames in reverse order.
    SwapPairs,
    /// Releases every dropped frame twice.
    DoubleRelease,
    /// Forgets dropped frames without releasing them.
    Leak,
}

/// Options of [`PerfectReceiver`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiverOpts {
    /// Answers each data frame with an ACK sent here.
    pub ack_to: Option<Dest>,
    pub bug: Option<Bug>,
}

/// Delivers the next expected frame at once; drops (releases) anything else.
#[derive(Debug)]
pub struct PerfectReceiver {
    stream: StreamConfig,
    opts: ReceiverOpts,
    expected: Seq,
    stash: Option<(Header, BufId)>,
    acks: VecDeque<Seq>,
    events: VecDeque<Event>,
    held: usize,
    counters: Counters,
    /// Panics on the first data frame (a failed assertion inside a machine).
    pub panic_on_data: bool,
}

impl PerfectReceiver {
    pub fn new(stream: StreamConfig, opts: ReceiverOpts) -> PerfectReceiver {
        PerfectReceiver {
            stream,
            opts,
            expected: stream.initial_seq,
            stash: None,
            acks: VecDeque::new(),
            events: VecDeque::new(),
            held: 0,
            counters: Counters::default(),
            panic_on_data: false,
        }
    }

    fn deliver(&mut self, h: &Header, buf: BufId) {
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver {
            stream: self.stream.sender,
            seq: h.seq,
            buf,
            len: h.payload_len,
            flags: h.flags,
        });
    }
}

impl Endpoint for PerfectReceiver {
    fn handle_frame(&mut self, _now: Instant, header: &Header, body: RxBody<'_>) {
        let buf = match body {
            RxBody::Data(buf) => buf,
            _ => {
                if header.kind == Kind::Ack {
                    self.counters.acks_received += 1;
                }
                return;
            }
        };
        assert!(!self.panic_on_data, "the receiver broke");
        self.counters.data_received += 1;
        self.held += 1;
        let bug = self.opts.bug;
        if header.seq == self.expected || bug == Some(Bug::NoDedupe) {
            self.expected = header.seq.next();
            if bug == Some(Bug::SwapPairs) {
                match self.stash.take() {
                    None => self.stash = Some((*header, buf)),
                    Some((h, b)) => {
                        self.deliver(header, buf);
                        self.deliver(&h, b);
                    }
                }
            } else {
                self.deliver(header, buf);
            }
        } else {
            self.counters.duplicates_dropped += 1;
            match bug {
                Some(Bug::Leak) => self.held -= 1,
                Some(Bug::DoubleRelease) => {
                    self.events.push_back(Event::Release(buf));
                    self.events.push_back(Event::Release(buf));
                }
                _ => self.events.push_back(Event::Release(buf)),
            }
        }
        if self.opts.ack_to.is_some() {
            self.acks.push_back(self.expected);
        }
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        let ack = self.acks.pop_front()?;
        let mut header = Header::new(Kind::Ack);
        header.group = self.stream.group;
        header.src = self.stream.local;
        header.peer = self.stream.sender;
        header.epoch = self.stream.epoch;
        header.ack = ack;
        self.counters.acks_sent += 1;
        Some(Transmit {
            dest: self.opts.ack_to.expect("acks only when asked"),
            header,
            body: TxBody::None,
        })
    }

    fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front()?;
        self.held = self.held.saturating_sub(1);
        Some(e)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn held_buffers(&self) -> usize {
        self.held
    }

    fn release_all(&mut self) {
        // The simulator never shuts a machine down; this is here for the trait.
        if let Some((_, b)) = self.stash.take() {
            self.events.push_back(Event::Release(b));
        }
        self.held = 0;
    }
}

/// Runs `cfg` with perfect-link machines.
pub fn run_perfect(
    cfg: &mcast_sim::SimConfig,
    s: SenderOpts,
    r: ReceiverOpts,
) -> Result<mcast_sim::SimReport, mcast_sim::SimFailure> {
    mcast_sim::run_with(
        cfg,
        |stream, _| PerfectSender::new(stream, s),
        |stream| PerfectReceiver::new(stream, r),
    )
}
