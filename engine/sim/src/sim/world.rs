//! The world a run happens in: the event queue (virtual time, in order,
//! ties in insertion order), each node's NIC and buffer pool, the segment
//! that turns a transmitted frame into copies (serialization at the link's
//! rate, latency, jitter, loss, duplication, corruption, partitions), the
//! wire statistics and the trace.
//!
//! Owns: [`World`]'s queue, nodes and network randomness, and how a frame
//! becomes bytes and copies. May not touch: the endpoints (it never calls a
//! machine; the drive loop does), the application's offers (`super::app`),
//! or the checkers' state (`super::checks`), which it only holds.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::rc::Rc;

use mcast_proto::relay::{SeqRing, KEPT_FLAGS};
use mcast_proto::{Dest, Flags, Header, Instant, Kind, NodeId, Rng, Seq, Transmit, TxBody};
use mcast_wire::{field, group_mac, node_mac, Frame, ETHERTYPE_DEFAULT, ETH_HEADER_LEN};

use super::app::App;
use super::checks::RxCheck;
use crate::config::SimConfig;
use crate::pool::{Owner, Pool};
use crate::report::{SimFailure, WireStats};

/// Trace lines kept for a failure's report.
const TRACE_TAIL: usize = 40;

/// Everything but the endpoints, so an endpoint and the world can be borrowed
/// at once.
pub(super) struct World<'c> {
    pub(super) cfg: &'c SimConfig,
    pub(super) now: Instant,
    pub(super) step: u64,
    pub(super) heap: BinaryHeap<Entry>,
    order: u64,
    pub(super) net_rng: Rng,
    /// Index `id - 1`.
    pub(super) nodes: Vec<NodeState>,
    /// Index `id - 2`.
    pub(super) checks: Vec<RxCheck>,
    pub(super) done_receivers: u32,
    pub(super) app: App,
    /// Loss probability of copies to or from each node, index `id - 1`.
    loss: Vec<f64>,
    /// Extra one-way latency of each node's link, index `id - 1`.
    extra_latency_ns: Vec<u64>,
    scratch: Vec<u8>,
    pub(super) wire: WireStats,
    pub(super) needing_repair: HashSet<u32>,
    pub(super) foreign_dropped: u64,
    pub(super) malformed_dropped: u64,
    pub(super) completion_time: Option<Instant>,
    /// When the last receiver delivered the last message.
    pub(super) delivered_time: Option<Instant>,
    pub(super) trace: Vec<String>,
    trace_tail: VecDeque<String>,
}

pub(super) struct NodeState {
    pub(super) pool: Pool,
    /// When this node's NIC finishes sending what it has queued.
    nic_free_at: Instant,
    /// The instant of this node's live "NIC has room" entry, if any.
    pub(super) nic_wake_at: Option<Instant>,
    /// The instant of this node's live timer entry in the heap, if any.
    pub(super) timer_at: Option<Instant>,
    /// The last instant its timer fired at, and how many times in a row.
    pub(super) last_fire: Option<Instant>,
    pub(super) fires_at_last: u32,
    pub(super) checksum_failures: u64,
    pub(super) max_held: usize,
    /// Copies of the data frames this node's receiver took, for repairs of
    /// its tree neighbours (made when the receiver first asks for them).
    pub(super) copies: Option<Copies>,
}

/// The copies a node keeps of the data frames its receiver took (docs/
/// protocol.md §3.5), in the engine's ring (`SeqRing`) with its flags
/// (`KEPT_FLAGS`), but holding the simulated frame's shared bytes and its
/// payload's length instead of a copy of the payload: with 1,024 receivers,
/// copying every payload doubled the simulator's wall time.
pub(super) struct Copies(SeqRing<(Flags, Rc<[u8]>, usize)>);

impl Copies {
    pub(super) fn new(capacity: u32) -> Copies {
        Copies(SeqRing::new(capacity))
    }

    /// Keeps frame `seq`: its whole checked frame, of `payload_len` bytes
    /// of payload.
    pub(super) fn keep(&mut self, seq: Seq, flags: Flags, frame: &Rc<[u8]>, payload_len: u16) {
        let kept = Flags(flags.0 & KEPT_FLAGS.0);
        *self.0.slot(seq) = Some((seq, (kept, frame.clone(), usize::from(payload_len))));
    }

    /// Frame `seq`, if still kept: its kept flags, the frame and its
    /// payload's length.
    fn get(&self, seq: Seq) -> Option<(Flags, Rc<[u8]>, usize)> {
        self.0.get(seq).cloned()
    }
}

pub(super) struct Entry {
    pub(super) at: Instant,
    order: u64,
    pub(super) what: What,
}

pub(super) enum What {
    /// A copy of a frame reaches `to`.
    Copy {
        from: NodeId,
        to: NodeId,
        bytes: Rc<[u8]>,
    },
    /// Copies of one frame reaching several nodes at the same instant, in
    /// order: the same as one `Copy` entry each, inserted one after the
    /// other (nothing can come between them), at a fraction of the cost.
    Batch(Box<Batch>),
    /// `node`'s timer, if `at` is still its deadline.
    Timer { node: NodeId },
    /// `node`'s NIC queue has room again: take more frames from its machine.
    NicReady { node: NodeId },
    /// The next message becomes available to the sender's application.
    AppWake,
    /// `node` installs the re-parented feedback tree (`SimConfig::retree`).
    Retree { node: NodeId },
}

pub(super) struct Batch {
    pub(super) from: NodeId,
    pub(super) to: Vec<NodeId>,
    pub(super) bytes: Rc<[u8]>,
    /// The next destination to deliver to.
    pub(super) next: usize,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: the heap pops the earliest, ties in insertion order.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

impl<'c> World<'c> {
    pub(super) fn new(cfg: &'c SimConfig) -> World<'c> {
        let nodes = (0..=cfg.receivers)
            .map(|_| NodeState {
                pool: Pool::default(),
                nic_free_at: Instant::ZERO,
                nic_wake_at: None,
                timer_at: None,
                last_fire: None,
                fires_at_last: 0,
                checksum_failures: 0,
                max_held: 0,
                copies: None,
            })
            .collect();
        let checks = (0..cfg.receivers)
            .map(|_| RxCheck::new(cfg.max_size))
            .collect();
        let mut loss = vec![0.0];
        loss.extend((2..=cfg.receivers + 1).map(|n| cfg.faults.loss_of(n)));
        let extra_latency_ns = (1..=cfg.receivers + 1)
            .map(|n| {
                cfg.receiver_latency
                    .iter()
                    .filter(|(node, _)| *node == n)
                    .map(|(_, d)| nanos(*d))
                    .sum()
            })
            .collect();
        World {
            cfg,
            now: Instant::ZERO,
            step: 0,
            heap: BinaryHeap::new(),
            order: 0,
            net_rng: Rng::new(cfg.seed),
            nodes,
            checks,
            // With no messages to send, every receiver is done from the start.
            done_receivers: if cfg.messages == 0 { cfg.receivers } else { 0 },
            app: App::default(),
            loss,
            extra_latency_ns,
            scratch: Vec::new(),
            wire: WireStats::default(),
            needing_repair: HashSet::new(),
            foreign_dropped: 0,
            malformed_dropped: 0,
            completion_time: None,
            delivered_time: None,
            trace: Vec::new(),
            trace_tail: VecDeque::new(),
        }
    }

    pub(super) fn push(&mut self, at: Instant, what: What) {
        self.order += 1;
        self.heap.push(Entry {
            at,
            order: self.order,
            what,
        });
    }

    pub(super) fn failure(&self, reason: String) -> SimFailure {
        SimFailure {
            reason,
            algorithm: self.cfg.algorithm,
            seed: self.cfg.seed,
            step: self.step,
            time: self.now,
            replay: self.cfg.replay_command(),
            trace_tail: self.trace_tail.iter().cloned().collect(),
        }
    }

    fn tracing(&self) -> bool {
        self.cfg.trace_lines > 0
    }

    /// Adds a trace line (built only when tracing is on).
    pub(super) fn trace_line(&mut self, line: impl FnOnce() -> String) {
        if !self.tracing() {
            return;
        }
        let line = format!("{:?} {}", self.now, line());
        if self.trace.len() < self.cfg.trace_lines {
            self.trace.push(line.clone());
        }
        if self.trace_tail.len() == TRACE_TAIL {
            self.trace_tail.pop_front();
        }
        self.trace_tail.push_back(line);
    }

    /// True when `node`'s NIC backlog is within [`crate::LinkConfig::tx_queue`];
    /// otherwise schedules a wake-up for when it will be, and says no.
    pub(super) fn nic_has_room(&mut self, node: NodeId) -> bool {
        let limit = nanos(self.cfg.link.tx_queue);
        let st = &mut self.nodes[node as usize - 1];
        let room_at = Instant(st.nic_free_at.0.saturating_sub(limit));
        if room_at <= self.now {
            return true;
        }
        if st.nic_wake_at != Some(room_at) {
            st.nic_wake_at = Some(room_at);
            self.push(room_at, What::NicReady { node });
        }
        false
    }

    /// Puts a frame on the segment: its bytes are built once, the NIC
    /// serializes it, and each destination gets its copy (or loses it).
    pub(super) fn transmit(&mut self, node: NodeId, tx: &Transmit) -> Result<(), SimFailure> {
        let cfg = self.cfg;
        let relayed;
        let mut copy = None;
        let h = match tx.body {
            TxBody::Relay(seq) => {
                // A repair from the node's copy, as an engine writes it.
                let copies = self.nodes[node as usize - 1].copies.as_ref();
                let Some((flags, frame, len)) = copies.and_then(|c| c.get(seq)) else {
                    self.wire.relay_missed += 1;
                    return Ok(());
                };
                let mut h = tx.header;
                h.flags = h.flags.with(flags);
                h.payload_len = len as u16;
                (relayed, copy) = (h, Some(frame));
                &relayed
            }
            _ => &tx.header,
        };
        if h.src != node {
            return Err(self.failure(format!("node {node} sent a frame with src {}", h.src)));
        }
        let last_node = cfg.receivers + 1;
        if let Dest::Node(n) = tx.dest {
            if n == node || !(1..=last_node).contains(&n) {
                return Err(self.failure(format!("node {node} sent a frame to node {n}")));
            }
        }
        let dst = match tx.dest {
            Dest::Group => group_mac(cfg.group),
            Dest::Node(n) => node_mac(n),
        };
        let payload_len = usize::from(h.payload_len);
        let bytes: Rc<[u8]> = match &tx.body {
            &TxBody::Buf(buf) => {
                let pool = &mut self.nodes[node as usize - 1].pool;
                let owner = pool.owner(buf);
                if owner != Owner::Endpoint {
                    return Err(self.failure(format!(
                        "node {node} transmitted from {buf:?}, which it does not hold (owner: {owner:?})"
                    )));
                }
                let have = pool.payload(buf).len();
                if payload_len > have {
                    return Err(self.failure(format!(
                        "node {node} sent {payload_len} payload bytes from {buf:?}, which holds {have}"
                    )));
                }
                // The zero-copy path: the header is written in front of the
                // payload in the buffer itself, then the frame is shared.
                let slot = pool.frame_mut(buf);
                let (_, len) =
                    Frame::emit(&mut slot[..], dst, node_mac(node), ETHERTYPE_DEFAULT, h)
                        .expect("the slot holds the payload");
                Rc::from(&slot[..len])
            }
            TxBody::Ranges(list) => {
                if payload_len != list.wire_len() || list.is_empty() {
                    return Err(self.failure(format!(
                        "node {node} sent a range list of {} ranges with payload_len {payload_len}",
                        list.len()
                    )));
                }
                self.emit_scratch(node, dst, h, |p| {
                    list.emit(p).expect("sized to the list");
                })
            }
            TxBody::Relay(_) => {
                self.wire.relay += 1;
                let frame = copy.expect("taken above");
                let payload = &frame[field::PAYLOAD..field::PAYLOAD + payload_len];
                self.emit_scratch(node, dst, h, |p| p.copy_from_slice(payload))
            }
            TxBody::None => {
                if payload_len != 0 {
                    return Err(self.failure(format!(
                        "node {node} sent a {:?} without a body but payload_len {payload_len}",
                        h.kind
                    )));
                }
                self.emit_scratch(node, dst, h, |_| {})
            }
        };
        self.count_kind(h);
        self.wire.bytes += bytes.len() as u64;

        // The NIC sends its frames one after another at the link's rate.
        let st = &mut self.nodes[node as usize - 1];
        let ser_ns = ((bytes.len() as u128 * 8 * 1_000_000_000)
            .div_ceil(u128::from(cfg.link.bandwidth_bps))) as u64;
        let depart = Instant(st.nic_free_at.0.max(self.now.0) + ser_ns);
        st.nic_free_at = depart;
        let arrive = depart + cfg.link.latency;

        let faults = cfg.faults.faults_until.is_none_or(|t| self.now < t);
        let healed = !faults;
        let original_data = h.kind.carries_data() && !h.flags.contains(Flags::RETRANSMIT);
        let mut lost_at = Vec::new();
        let mut dup_at = Vec::new();
        let mut corrupt_at = Vec::new();
        let tracing = self.tracing();
        let (first, last) = match tx.dest {
            Dest::Group => (1, last_node),
            Dest::Node(n) => (n, n),
        };
        // Copies that arrive together, intact: one heap entry for them all.
        let mut together = Vec::new();
        for to in first..=last {
            if to == node {
                continue;
            }
            self.wire.copies += 1;
            if faults && self.lost(node, to) {
                self.wire.copies_lost += 1;
                if original_data {
                    self.needing_repair.insert(h.seq.0);
                }
                if tracing {
                    lost_at.push(to);
                }
                continue;
            }
            let copies = if faults && self.net_rng.chance(cfg.faults.duplicate) {
                self.wire.copies_duplicated += 1;
                if tracing {
                    dup_at.push(to);
                }
                2
            } else {
                1
            };
            let mut intact = false;
            for _ in 0..copies {
                // Jitter (and the reordering it brings) heals with the rest:
                // after faults_until the segment is FIFO again.
                let jitter = if healed {
                    0
                } else {
                    self.net_rng.range(0, nanos(cfg.link.jitter))
                };
                // A far receiver's extra latency, either end of the copy.
                let delay = jitter
                    + self.extra_latency_ns[node as usize - 1]
                    + self.extra_latency_ns[to as usize - 1];
                let copy = if faults && self.net_rng.chance(cfg.faults.corrupt) {
                    self.wire.copies_corrupted += 1;
                    if tracing {
                        corrupt_at.push(to);
                    }
                    self.corrupted(&bytes)
                } else {
                    intact = true;
                    if delay == 0 {
                        together.push(to);
                        continue;
                    }
                    bytes.clone()
                };
                self.push(
                    Instant(arrive.0 + delay),
                    What::Copy {
                        from: node,
                        to,
                        bytes: copy,
                    },
                );
            }
            if !intact && original_data {
                self.needing_repair.insert(h.seq.0);
            }
        }
        match together[..] {
            [] => {}
            [to] => self.push(
                arrive,
                What::Copy {
                    from: node,
                    to,
                    bytes,
                },
            ),
            _ => self.push(
                arrive,
                What::Batch(Box::new(Batch {
                    from: node,
                    to: together,
                    bytes,
                    next: 0,
                })),
            ),
        }
        if tracing {
            let dest = match tx.dest {
                Dest::Group => "group".to_string(),
                Dest::Node(n) => n.to_string(),
            };
            let mut line = format!("{node}->{dest} {}", describe(h));
            if let TxBody::Ranges(list) = &tx.body {
                let ranges: Vec<String> = list
                    .iter()
                    .map(|r| match r.count {
                        1 => format!("{}", r.start.0),
                        n => format!("{}+{}", r.start.0, n),
                    })
                    .collect();
                let what = if h.kind == Kind::Ack {
                    "covers"
                } else {
                    "missing"
                };
                let _ = write!(line, " {what} [{}]", ranges.join(" "));
            }
            for (what, at) in [
                ("lost", &lost_at),
                ("dup", &dup_at),
                ("corrupt", &corrupt_at),
            ] {
                if !at.is_empty() {
                    let list: Vec<String> = at.iter().map(|n| n.to_string()).collect();
                    let _ = write!(line, " {what} at {}", list.join(","));
                }
            }
            self.trace_line(|| line);
        }
        Ok(())
    }

    fn emit_scratch(
        &mut self,
        node: NodeId,
        dst: mcast_wire::MacAddr,
        h: &Header,
        write_payload: impl FnOnce(&mut [u8]),
    ) -> Rc<[u8]> {
        let len = field::PAYLOAD + usize::from(h.payload_len);
        self.scratch.clear();
        self.scratch.resize(len, 0);
        write_payload(&mut self.scratch[field::PAYLOAD..]);
        Frame::emit(
            &mut self.scratch[..],
            dst,
            node_mac(node),
            ETHERTYPE_DEFAULT,
            h,
        )
        .expect("sized to the frame");
        Rc::from(&self.scratch[..])
    }

    /// True when the copy from `from` to `to` is lost (faults are active).
    fn lost(&mut self, from: NodeId, to: NodeId) -> bool {
        let now = self.now;
        let partitioned = self
            .cfg
            .faults
            .partitions
            .iter()
            .any(|p| (p.node == from || p.node == to) && p.from <= now && now < p.until);
        partitioned
            || self.net_rng.chance(self.loss[from as usize - 1])
            || self.net_rng.chance(self.loss[to as usize - 1])
    }

    /// A private copy of `bytes` with one byte flipped, past the Ethernet
    /// header: the NIC's FCS would drop damaged MACs; what the CRC32C of our
    /// header guards is everything after them.
    fn corrupted(&mut self, bytes: &[u8]) -> Rc<[u8]> {
        let mut v = bytes.to_vec();
        let at = self
            .net_rng
            .range(ETH_HEADER_LEN as u64, v.len() as u64 - 1) as usize;
        v[at] ^= self.net_rng.range(1, 255) as u8;
        Rc::from(v)
    }

    fn count_kind(&mut self, h: &Header) {
        let s = &mut self.wire;
        match h.kind {
            Kind::Data | Kind::GbnData if h.flags.contains(Flags::RETRANSMIT) => {
                s.data_retransmit += 1
            }
            Kind::Data | Kind::GbnData => s.data_original += 1,
            Kind::Nak => s.nak += 1,
            Kind::Ack => s.ack += 1,
            Kind::AckReq => s.ack_req += 1,
            Kind::Pack => s.pack += 1,
            Kind::Nack => s.nack += 1,
            Kind::Heartbeat => s.advert += 1,
            Kind::Beat => s.other += 1,
        }
    }
}

fn nanos(d: mcast_proto::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A header in a trace line: kind, sequence, and the flags that matter.
fn describe(h: &Header) -> String {
    let kind = match h.kind {
        Kind::Data => "DATA",
        Kind::Nak => "NAK",
        Kind::Ack => "ACK",
        Kind::AckReq => "ACK_REQ",
        Kind::GbnData => "GBN_DATA",
        Kind::Pack => "PACK",
        Kind::Nack => "NACK",
        Kind::Heartbeat => "HEARTBEAT",
        Kind::Beat => "BEAT",
    };
    let mut s = format!("{kind} {:?}", h.seq);
    if h.kind.carries_data() {
        let _ = write!(s, " len={}", h.payload_len);
        if h.flags.contains(Flags::ACK_REQ) && h.grtt_ns != 0 {
            // The sender's group round trip, which sets every NAK timer.
            let _ = write!(s, " grtt={:.1}us", f64::from(h.grtt_ns) / 1e3);
        }
    } else {
        let _ = write!(s, " ack={:?}", h.ack);
        if h.kind == Kind::Ack {
            let _ = write!(s, " echo={}", h.tstamp_us);
        }
    }
    for (flag, name) in [
        (Flags::RETRANSMIT, "rexmit"),
        (Flags::LAST, "last"),
        (Flags::ACK_REQ, "ack_req"),
        (Flags::BATCH, "batch"),
    ] {
        if h.flags.contains(flag) {
            let _ = write!(s, " {name}");
        }
    }
    s
}
