//! The paper's runs in the deterministic simulator: the algorithm's own
//! machines wrapped in recorders that note, in virtual time, when the sender
//! accepted each frame, when each receiver delivered it and when the sender
//! next held every acknowledgment. Every message fits one frame here, so a
//! sequence number names a message.
//!
//! Echo runs: the simulator carries one stream (node 1 to the rest), so the
//! reply is not a Go-Back-N stream as over AF_XDP but one header-only frame
//! (a `Pack` marked by [`REPLY_EPOCH`]) that the last receiver's recorder
//! sends to the sender when it delivers a message, and the sender's recorder
//! takes out of the stream; it crosses the simulated segment like any frame
//! (the receiver's NIC serializes it, the link delays it). The sender's
//! recorder refuses the next message (window full) until the reply is in.
//! The paper runs are lossless, so the reply needs no repair.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use mcast_engine::bench::{PaperMode, PaperRaw};
use mcast_proto::any::{AnyReceiver, AnySender};
use mcast_proto::{
    Counters, Dest, Endpoint, Event, GroupId, Header, Instant, Kind, NodeId, OutFrame, RxBody,
    SendError, Sender, Seq, Transmit, TxBody,
};
use mcast_sim::{Algorithm, LinkConfig, SimConfig, SENDER};

/// The simulated segment of the paper runs.
#[derive(Debug, Clone, Copy)]
pub struct SimLink {
    pub bandwidth_bps: u64,
    pub latency: Duration,
}

#[derive(Debug, Default)]
struct Log {
    seq_to_msg: HashMap<u32, usize>,
    accepted: Vec<u64>,
    delivered: Vec<Vec<u64>>,
    /// Accept time of the message whose acknowledgments are awaited.
    awaiting_ack: Option<u64>,
    /// Send until the sender held every ACK, per message (ping-pong).
    acked: Vec<u64>,
    /// Echo: the message whose reply is awaited, and its accept time.
    awaiting_reply: Option<(usize, u64)>,
    /// Echo: send until the reply reached the sender, per message.
    echoed: Vec<u64>,
}

/// Marks the simulated echo reply (a `Pack` no machine sends with it).
pub const REPLY_EPOCH: u32 = 0xec40_ec40;

/// True for the recorders' echo reply frame.
fn is_reply(h: &Header) -> bool {
    h.kind == Kind::Pack && h.epoch == REPLY_EPOCH
}

struct RecSender {
    inner: AnySender,
    log: Rc<RefCell<Log>>,
    acked: bool,
    /// Echo mode: one message at a time, the next when the reply is in.
    echo: bool,
}

impl RecSender {
    fn check_idle(&mut self, now: Instant) {
        if self.acked && self.inner.is_idle() {
            let mut log = self.log.borrow_mut();
            if let Some(t) = log.awaiting_ack.take() {
                log.acked.push(now.0 - t);
            }
        }
    }
}

impl Endpoint for RecSender {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        if is_reply(header) {
            let mut log = self.log.borrow_mut();
            let i = log.seq_to_msg.get(&header.seq.0).copied();
            if let Some((want, at)) = log.awaiting_reply {
                if i == Some(want) {
                    log.echoed[want] = now.0 - at;
                    log.awaiting_reply = None;
                }
            }
            return;
        }
        self.inner.handle_frame(now, header, body);
        self.check_idle(now);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.inner.handle_timeout(now);
        self.check_idle(now);
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.inner.poll_transmit(now)
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.inner.poll_event()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn held_buffers(&self) -> usize {
        self.inner.held_buffers()
    }
    fn release_all(&mut self) {
        self.inner.release_all();
    }
}

impl RecSender {
    fn awaiting_reply(&self) -> bool {
        self.echo && self.log.borrow().awaiting_reply.is_some()
    }
}

impl Sender for RecSender {
    fn send(&mut self, now: Instant, mut frame: OutFrame) -> Result<Seq, SendError> {
        if self.awaiting_reply() {
            return Err(SendError::WindowFull(frame.buf));
        }
        if self.echo {
            // Nothing is queued behind it: the application waits for the
            // reply (the engine marks such a frame the end of a burst too).
            frame.last = true;
        }
        let seq = self.inner.send(now, frame)?;
        let mut log = self.log.borrow_mut();
        let i = log.accepted.len();
        log.accepted.push(now.0);
        log.seq_to_msg.insert(seq.0, i);
        if self.acked {
            log.awaiting_ack = Some(now.0);
        }
        if self.echo {
            log.awaiting_reply = Some((i, now.0));
        }
        Ok(seq)
    }
    fn can_send(&self) -> bool {
        !self.awaiting_reply() && self.inner.can_send()
    }
    /// Not idle while a reply is awaited, so the run does not end before
    /// the last one arrives.
    fn is_idle(&self) -> bool {
        !self.awaiting_reply() && self.inner.is_idle()
    }
    fn set_members(&mut self, now: Instant, members: &[NodeId]) {
        self.inner.set_members(now, members);
    }
}

struct RecReceiver {
    inner: AnyReceiver,
    index: usize,
    /// This node and its group, and whether it answers each delivery (echo mode).
    node: NodeId,
    group: GroupId,
    replies: bool,
    /// Sequence numbers delivered and not yet answered.
    to_answer: VecDeque<Seq>,
    now: u64,
    log: Rc<RefCell<Log>>,
}

impl Endpoint for RecReceiver {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        self.now = now.0;
        self.inner.handle_frame(now, header, body);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.now = now.0;
        self.inner.handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.now = now.0;
        if let Some(t) = self.inner.poll_transmit(now) {
            return Some(t);
        }
        let seq = self.to_answer.pop_front()?;
        let mut header = Header::new(Kind::Pack);
        header.group = self.group;
        header.src = self.node;
        header.peer = SENDER;
        header.epoch = REPLY_EPOCH;
        header.seq = seq;
        Some(Transmit {
            dest: Dest::Node(SENDER),
            header,
            body: TxBody::None,
        })
    }
    fn poll_event(&mut self) -> Option<Event> {
        let e = self.inner.poll_event();
        if let Some(Event::Deliver { seq, .. }) = e {
            if self.replies {
                self.to_answer.push_back(seq);
            }
            let mut log = self.log.borrow_mut();
            if let Some(&i) = log.seq_to_msg.get(&seq.0) {
                if let Some(slot) = log.delivered[self.index].get_mut(i) {
                    *slot = self.now;
                }
            }
        }
        e
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn held_buffers(&self) -> usize {
        self.inner.held_buffers()
    }
    fn release_all(&mut self) {
        self.inner.release_all();
    }
}

/// The window of the simulated runs (but NAK's): small enough that a full
/// window drains in tens of milliseconds at 10 Mbit/s.
const SIM_WINDOW: u32 = 64;

/// Wire time of one data frame of `len` payload bytes on `link` (Ethernet
/// header, our header, CRC; preamble and gap not modelled).
fn wire_ns(len: usize, link: &SimLink) -> u64 {
    ((len + 100) as u64 * 8 * 1_000_000_000) / link.bandwidth_bps.max(1)
}

/// One simulated run (no loss; seed 1).
pub fn run(
    algorithm: Algorithm,
    receivers: usize,
    len: usize,
    mode: PaperMode,
    messages: usize,
    link: &SimLink,
) -> Result<PaperRaw, String> {
    let mut cfg = SimConfig {
        algorithm,
        receivers: receivers as u32,
        messages: messages as u64,
        min_size: len,
        max_size: len,
        seed: 1,
        link: LinkConfig {
            bandwidth_bps: link.bandwidth_bps,
            latency: link.latency,
            ..LinkConfig::default()
        },
        max_virtual_time: Duration::from_secs(3600),
        ..SimConfig::default()
    };
    cfg.window_frames = match algorithm {
        // Plain NAK never frees its buffer: the whole run.
        Algorithm::Nak => (messages as u32 + 64).next_power_of_two(),
        _ => SIM_WINDOW,
    };
    // A wire time at this rate, for the ping-pong spacing. The protocol
    // timers are the defaults: they measure the round trip and follow the
    // 10 Mbit/s wire by themselves.
    let wire = wire_ns(len, link);
    let rate = match mode {
        // Messages far enough apart that each is delivered and acknowledged
        // before the next: the paper's send-and-wait, in virtual time.
        PaperMode::PingPong => {
            let gap = 4 * (receivers as u64 + 2) * (wire + 2 * link.latency.as_nanos() as u64)
                + 2_000_000;
            Some((1_000_000_000 / gap).max(1))
        }
        PaperMode::Rate(r) => Some(u64::from(r)),
        // Echo: the next message as soon as the sender's recorder takes it
        // (when the reply is in).
        PaperMode::Saturation | PaperMode::Echo => None,
    };
    cfg.messages_per_sec = rate;
    cfg.liveness_bound = Duration::from_secs(30);
    let log = Rc::new(RefCell::new(Log {
        delivered: vec![vec![u64::MAX; messages]; receivers],
        echoed: if mode == PaperMode::Echo {
            vec![u64::MAX; messages]
        } else {
            Vec::new()
        },
        ..Log::default()
    }));
    let acked = mode == PaperMode::PingPong && algorithm != Algorithm::Nak;
    let echo = mode == PaperMode::Echo;
    // The receiver that answers: the last, which the iterative sender's last
    // copy reaches.
    let replier = receivers as NodeId + 1;
    let protocol = cfg.protocol;
    let report = mcast_sim::run_with(
        &cfg,
        |stream, members| RecSender {
            inner: AnySender::new(algorithm, stream, &protocol, members),
            log: log.clone(),
            acked,
            echo,
        },
        |stream| RecReceiver {
            inner: AnyReceiver::new(algorithm, stream, &protocol),
            index: (stream.local as usize).saturating_sub(2),
            node: stream.local,
            group: stream.group,
            replies: echo && stream.local == replier,
            to_answer: VecDeque::new(),
            now: 0,
            log: log.clone(),
        },
    )
    .map_err(|f| format!("simulated {algorithm} run failed: {f}"))?;
    if !report.completed && algorithm != Algorithm::Nak {
        return Err(format!(
            "simulated {algorithm} run did not complete ({:?})",
            report.stop
        ));
    }
    let log = Rc::try_unwrap(log)
        .map_err(|_| "simulator kept a recorder".to_owned())?
        .into_inner();
    let sent_ns: Vec<u64> = match rate {
        Some(r) if !matches!(mode, PaperMode::PingPong) => (0..messages as u64)
            .map(|i| (u128::from(i) * 1_000_000_000 / u128::from(r)) as u64)
            .collect(),
        // Ping-pong and echo: the message is sent when it is accepted. Saturation: the
        // application wanted to send it as soon as the previous one was taken.
        _ if mode == PaperMode::Saturation => std::iter::once(0)
            .chain(log.accepted.iter().copied())
            .take(messages)
            .collect(),
        _ => log.accepted.clone(),
    };
    Ok(PaperRaw {
        sent_ns,
        delivered_ns: log.delivered,
        acked_ns: log.acked,
        echo_ns: log.echoed,
        modes: ("simulator".into(), "simulator".into()),
    })
}
