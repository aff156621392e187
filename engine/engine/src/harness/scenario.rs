//! One reliable-multicast run, generic over the transport: a sender engine
//! publishes `messages` messages of mixed sizes (64 B to 64 KiB, fragmented)
//! and every receiver engine checks that it delivers all of them, in order
//! and intact. Each engine runs on its own thread (its polling thread); they
//! coordinate through [`Control`] only (start barrier, loss knob, completion).
//! Frame conservation is asserted during the run and at shutdown.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use crate::sys::monotonic_ns;
use crate::{Algorithm, Engine, EngineConfig, EngineStats, ShutdownReport, Transport};
use mcast_wire::{MacAddr, NodeId};

pub const GROUP: u32 = 7;
pub const SENDER: NodeId = 1;

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub algorithm: Algorithm,
    pub messages: usize,
    /// Injected loss at every receiver.
    pub loss: f64,
    pub receivers: Vec<(NodeId, MacAddr)>,
    pub window_frames: u32,
    /// NAK: after the run, turn loss off and send one more small message, so
    /// that a lost tail is revealed (plain NAK cannot detect one otherwise).
    pub fence: bool,
    /// Give up after this long.
    pub deadline: Duration,
    /// Every message this long instead of the mixed sizes.
    pub fixed_len: Option<usize>,
    /// Engine settings changed from the defaults.
    pub tuning: Tuning,
}

/// Engine settings a run changes from the defaults, to compare them on one
/// topology (`engine/engine/examples/xdp_phase.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tuning {
    /// Go-Back-N's acknowledgment policy.
    pub gbn_ack_policy: Option<mcast_proto::gbn::AckPolicy>,
    /// [`EngineConfig::spin_yield_after`].
    pub spin_yield_after: Option<Duration>,
}

impl Spec {
    /// The length of message `i` in this run.
    pub fn len_of(&self, i: usize) -> usize {
        if self.fence && i == self.messages {
            return 64;
        }
        self.fixed_len.unwrap_or_else(|| message_len(i))
    }

    /// Data frames of the run (without the fence).
    pub fn frames(&self) -> usize {
        (0..self.messages)
            .map(|i| self.len_of(i).div_ceil(1456).max(1))
            .sum()
    }
}

/// Shared between the threads of one run.
#[derive(Debug)]
pub struct Control {
    pub start: Barrier,
    /// Loss the receivers should apply, parts per million.
    pub loss_ppm: AtomicU32,
    /// Bumped after each change of `loss_ppm`.
    pub loss_gen: AtomicU32,
    /// Receivers that applied the current `loss_gen`.
    pub loss_applied: AtomicUsize,
    /// Receivers that delivered everything.
    pub receivers_done: AtomicUsize,
    /// The sender is finished: receivers may stop.
    pub sender_done: AtomicBool,
    /// Something failed: everyone stops.
    pub abort: AtomicBool,
}

impl Control {
    pub fn new(spec: &Spec) -> Control {
        Control {
            start: Barrier::new(spec.receivers.len() + 1),
            loss_ppm: AtomicU32::new((spec.loss * 1e6) as u32),
            loss_gen: AtomicU32::new(0),
            loss_applied: AtomicUsize::new(0),
            receivers_done: AtomicUsize::new(0),
            sender_done: AtomicBool::new(false),
            abort: AtomicBool::new(false),
        }
    }
}

/// What one node saw.
#[derive(Debug)]
pub struct NodeResult {
    pub node: NodeId,
    pub delivered: usize,
    pub bytes: u64,
    pub errors: Vec<String>,
    pub elapsed: Duration,
    /// CPU time the node's thread used from the start barrier to the end of
    /// its run (before shutdown).
    pub cpu: Duration,
    pub stats: EngineStats,
    pub shutdown: ShutdownReport,
}

/// Engine configuration for a node of this run.
pub fn config(spec: &Spec, node: NodeId) -> EngineConfig {
    let mut c = EngineConfig::new(node, GROUP, spec.algorithm);
    c.window_frames = spec.window_frames;
    c.peers = spec.receivers.clone();
    c.seed = 0x5eed ^ u64::from(node);
    // A wrap of the sequence space in every run (docs/protocol.md §1.5).
    c.initial_seq = mcast_wire::Seq(u32::MAX - 100);
    // The protocol timers are the defaults: they measure the round trips of
    // this noisy 2-vCPU machine (four engines at once) and of capped links.
    c.spin = Duration::from_micros(10);
    if let Some(p) = spec.tuning.gbn_ack_policy {
        c.protocol.gbn.ack_policy = p;
    }
    if let Some(d) = spec.tuning.spin_yield_after {
        c.spin_yield_after = d;
    }
    c
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Length of message `i`: 80 % single-frame (64..=1456 B), 15 % up to 16 KiB,
/// 5 % up to 64 KiB; message 0 is 64 B and message 1 exactly 64 KiB.
pub fn message_len(i: usize) -> usize {
    match i {
        0 => 64,
        1 => 65536,
        _ => {
            let h = mix(i as u64);
            let r = (h >> 8) as usize;
            match h % 100 {
                0..=79 => 64 + r % (1456 - 64 + 1),
                80..=94 => 1457 + r % (16384 - 1457 + 1),
                _ => 16385 + r % (65536 - 16385 + 1),
            }
        }
    }
}

/// Polls between two mid-run conservation checks. A check walks every frame
/// of the UMEM (tens of microseconds): every 2,000 polls it was 10-16 ns per
/// message of a throughput run's sender. Runs are still checked mid-run (a
/// 100,000-message sender polls more than this) and completely at the end.
const CONSERVATION_EVERY: u64 = 1 << 16;

/// The longest message the harness makes.
pub const MAX_MESSAGE: usize = 65536;

/// Messages start at `8 * (i % OFFSETS)` in [`pattern`]: consecutive
/// messages differ, and an offset names a message modulo this.
const OFFSETS: usize = 8192;

/// The bytes every message is cut from: pseudo-random (xorshift64*), long
/// enough for the last offset plus the longest message (136 KiB, so it stays
/// in L2). The sender publishes slices of it as they are and each receiver
/// compares what it delivers against the slice it expects, so neither builds
/// a message: in the throughput runs the harness's own work per message is a
/// compare on the receivers, as light as the raw blast's frame fill, and the
/// ratios measure the engine rather than the test's message generator.
fn pattern() -> &'static [u8] {
    static PATTERN: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    PATTERN.get_or_init(|| {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut p = Vec::with_capacity(8 * OFFSETS + MAX_MESSAGE);
        while p.len() < 8 * OFFSETS + MAX_MESSAGE {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            p.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
        }
        p
    })
}

/// Message `i` of `len` bytes (at most [`MAX_MESSAGE`]): `len` bytes of the
/// pattern from offset `8 * (i % 8192)`.
pub fn message_bytes(i: usize, len: usize) -> &'static [u8] {
    assert!(
        len <= MAX_MESSAGE,
        "harness messages are at most {MAX_MESSAGE} bytes, not {len}"
    );
    let off = 8 * (i % OFFSETS);
    &pattern()[off..off + len]
}

/// Message `i` with its mixed-size length ([`message_len`]).
pub fn message(i: usize) -> &'static [u8] {
    message_bytes(i, message_len(i))
}

/// For an error report: which message (modulo 8192) `data` starts like, if
/// its first 16 bytes are at a message offset of the pattern.
pub fn which_message(data: &[u8]) -> Option<usize> {
    let head = data.get(..16)?;
    (0..OFFSETS).find(|k| &pattern()[8 * k..8 * k + 16] == head)
}

/// Frames message `i` takes with the default MTU.
pub fn frames_of(i: usize) -> usize {
    message_len(i).div_ceil(1456).max(1)
}

/// The largest message count <= `want` whose frames fit `frames` (NAK's
/// sender never frees its window).
pub fn messages_fitting(want: usize, frames: usize) -> usize {
    let mut total = 0;
    for i in 0..want {
        total += frames_of(i);
        if total > frames {
            return i;
        }
    }
    want
}

/// Sets `abort` when its thread panics, so the other nodes stop at once
/// instead of waiting for the deadline.
struct AbortOnPanic<'a>(&'a Control);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort.store(true, Ordering::SeqCst);
        }
    }
}

/// The sender's thread body.
pub fn run_sender<T: Transport>(mut engine: Engine<T>, spec: &Spec, ctl: &Control) -> NodeResult {
    let _guard = AbortOnPanic(ctl);
    let members: Vec<NodeId> = spec.receivers.iter().map(|r| r.0).collect();
    engine.open_sender(&members).expect("open sender");
    let mut errors = Vec::new();
    ctl.start.wait();
    let t0 = monotonic_ns();
    let cpu0 = crate::sys::thread_cpu_ns();
    let deadline = t0 + spec.deadline.as_nanos() as u64;
    let mut bytes = 0u64;
    let mut polls = 0u64;
    let total = spec.messages + usize::from(spec.fence);
    let mut i = 0;
    while i < total && !ctl.abort.load(Ordering::Relaxed) {
        if i == spec.messages {
            // The fence: wait until everything went out, turn loss off, and
            // send one small message that reveals any lost tail.
            if !engine.flush(Duration::from_secs(30)).expect("flush") {
                errors.push("sender did not go idle before the fence".into());
                break;
            }
            ctl.loss_ppm.store(0, Ordering::SeqCst);
            ctl.loss_applied.store(0, Ordering::SeqCst);
            ctl.loss_gen.fetch_add(1, Ordering::SeqCst);
            while ctl.loss_applied.load(Ordering::SeqCst) < spec.receivers.len()
                && monotonic_ns() < deadline
            {
                engine.run_once().expect("engine");
            }
        }
        let msg = message_bytes(i, spec.len_of(i));
        match engine.publish(msg) {
            Ok(()) => {
                bytes += msg.len() as u64;
                i += 1;
            }
            Err(crate::PublishError::WouldBlock) => {
                engine.run_once().expect("engine");
            }
            Err(e) => panic!("publish: {e}"),
        }
        polls += 1;
        if polls % CONSERVATION_EVERY == 0 {
            engine
                .check_conservation()
                .unwrap_or_else(|e| panic!("sender conservation mid-run: {e}"));
        }
        // The deadline is a safety net: a clock read per message was a
        // measurable share of the sender's CPU, one per 64 is not.
        if polls % 64 == 0 && monotonic_ns() > deadline {
            errors.push(format!(
                "sender published only {i} of {total} messages before the deadline"
            ));
            break;
        }
    }
    // Keep serving repairs and ACK requests until every receiver has everything.
    while ctl.receivers_done.load(Ordering::SeqCst) < spec.receivers.len()
        && !ctl.abort.load(Ordering::Relaxed)
    {
        if monotonic_ns() > deadline {
            errors.push(format!(
                "only {} of {} receivers complete at the deadline",
                ctl.receivers_done.load(Ordering::SeqCst),
                spec.receivers.len()
            ));
            break;
        }
        engine.run_once().expect("engine");
    }
    if spec.algorithm != Algorithm::Nak {
        let _ = engine.flush(Duration::from_secs(2));
    }
    let elapsed = Duration::from_nanos(monotonic_ns() - t0);
    let cpu = Duration::from_nanos(crate::sys::thread_cpu_ns() - cpu0);
    ctl.sender_done.store(true, Ordering::SeqCst);
    engine
        .check_conservation()
        .unwrap_or_else(|e| panic!("sender conservation at the end: {e}"));
    let stats = engine.stats();
    let (shutdown, _transport) = engine
        .shutdown()
        .unwrap_or_else(|e| panic!("sender shutdown: {e}"));
    NodeResult {
        node: SENDER,
        delivered: i,
        bytes,
        errors,
        elapsed,
        cpu,
        stats,
        shutdown,
    }
}

/// A receiver's thread body.
pub fn run_receiver<T: Transport>(
    mut engine: Engine<T>,
    node: NodeId,
    spec: &Spec,
    ctl: &Control,
) -> NodeResult {
    let _guard = AbortOnPanic(ctl);
    engine.open_receiver(SENDER).expect("open receiver");
    let mut loss_gen = ctl.loss_gen.load(Ordering::SeqCst);
    engine
        .transport_mut()
        .set_drop_ratio(f64::from(ctl.loss_ppm.load(Ordering::SeqCst)) / 1e6)
        .expect("set drop ratio");
    ctl.start.wait();
    let t0 = monotonic_ns();
    let cpu0 = crate::sys::thread_cpu_ns();
    let mut cpu_done = None;
    let deadline = t0 + spec.deadline.as_nanos() as u64 + 2_000_000_000;
    let want = spec.messages + usize::from(spec.fence);
    let (mut next, mut bytes, mut errors) = (0usize, 0u64, Vec::new());
    let mut done_at = None;
    let mut polls = 0u64;
    while !ctl.sender_done.load(Ordering::SeqCst) && !ctl.abort.load(Ordering::Relaxed) {
        let gen = ctl.loss_gen.load(Ordering::SeqCst);
        if gen != loss_gen {
            let ppm = ctl.loss_ppm.load(Ordering::SeqCst);
            engine
                .transport_mut()
                .set_drop_ratio(f64::from(ppm) / 1e6)
                .expect("drop ratio");
            loss_gen = gen;
            ctl.loss_applied.fetch_add(1, Ordering::SeqCst);
        }
        engine.run_once().expect("engine");
        while let Some(m) = engine.recv_message() {
            let expected = message_bytes(next, spec.len_of(next));
            if m.stream != SENDER || m.data != expected {
                errors.push(format!(
                    "node {node}: message {next} wrong: {} bytes (want {}), starts like message {:?} (mod 8192)",
                    m.data.len(),
                    expected.len(),
                    which_message(&m.data),
                ));
                ctl.abort.store(true, Ordering::SeqCst);
                break;
            }
            bytes += m.data.len() as u64;
            next += 1;
            if next == want {
                done_at = Some(monotonic_ns());
                cpu_done = Some(crate::sys::thread_cpu_ns());
                ctl.receivers_done.fetch_add(1, Ordering::SeqCst);
            }
        }
        polls += 1;
        if polls % CONSERVATION_EVERY == 0 {
            engine
                .check_conservation()
                .unwrap_or_else(|e| panic!("node {node} conservation mid-run: {e}"));
        }
        if polls % 64 == 0 && monotonic_ns() > deadline {
            errors.push(format!(
                "node {node}: deadline passed with {next} of {want} messages"
            ));
            break;
        }
    }
    if next > want {
        errors.push(format!(
            "node {node}: {next} messages, more than the {want} sent"
        ));
    } else if next < want && errors.is_empty() {
        errors.push(format!(
            "node {node}: only {next} of {want} messages delivered"
        ));
    }
    let elapsed = Duration::from_nanos(done_at.unwrap_or_else(monotonic_ns) - t0);
    let cpu = Duration::from_nanos(cpu_done.unwrap_or_else(crate::sys::thread_cpu_ns) - cpu0);
    engine
        .check_conservation()
        .unwrap_or_else(|e| panic!("node {node} conservation at the end: {e}"));
    let stats = engine.stats();
    let (shutdown, _t) = engine
        .shutdown()
        .unwrap_or_else(|e| panic!("node {node} shutdown: {e}"));
    NodeResult {
        node,
        delivered: next,
        bytes,
        errors,
        elapsed,
        cpu,
        stats,
        shutdown,
    }
}

/// Prints a run's figures and asserts it succeeded.
pub fn report(name: &str, spec: &Spec, sender: &NodeResult, receivers: &[NodeResult]) {
    let frames = spec.frames();
    let secs = sender.elapsed.as_secs_f64();
    let s = sender.stats.sender.unwrap_or_default();
    eprintln!(
        "{name}: {} messages ({frames} data frames, {:.1} MB) in {secs:.2} s: {:.1} Mbit/s goodput, {:.0} frames/s; sender CPU {:.0} ns/frame: sent {} retransmitted {} timeouts {} naks_rx {} acks_rx {}; engine tx {} in {} batches, deferred {} copies {}, rx {}, polls {} sleeps {}",
        spec.messages,
        sender.bytes as f64 / 1e6,
        sender.bytes as f64 * 8.0 / secs / 1e6,
        frames as f64 / secs,
        sender.cpu.as_nanos() as f64 / frames as f64,
        s.data_sent,
        s.data_retransmitted,
        s.timeouts,
        s.naks_received,
        s.acks_received,
        sender.stats.engine.tx_frames,
        sender.stats.engine.tx_batches,
        sender.stats.engine.tx_deferred,
        sender.stats.engine.tx_payload_copies,
        sender.stats.engine.rx_frames,
        sender.stats.engine.polls,
        sender.stats.engine.sleeps,
    );
    for r in receivers {
        let c = r.stats.receivers.first().map(|x| x.1).unwrap_or_default();
        eprintln!(
            "  node {}: {} messages in {:.2} s, CPU {:.0} ns/frame; rx {} dup {} naks_sent {} acks_sent {} packs_sent {} crc_fail {}; tx {} in {} batches, polls {} sleeps {}; steering {:?}; socket {:?}; transport {} {:?}/{:?}",
            r.node,
            r.delivered,
            r.elapsed.as_secs_f64(),
            r.cpu.as_nanos() as f64 / frames as f64,
            r.stats.engine.rx_frames,
            c.duplicates_dropped,
            c.naks_sent,
            c.acks_sent,
            c.packs_sent,
            r.stats.engine.rx_checksum_failures,
            r.stats.engine.tx_frames,
            r.stats.engine.tx_batches,
            r.stats.engine.polls,
            r.stats.engine.sleeps,
            r.stats.steering,
            r.stats.socket,
            r.stats.transport.kind,
            r.stats.transport.attach_mode,
            r.stats.transport.bind_mode,
        );
    }
    let mut errors: Vec<&String> = sender.errors.iter().collect();
    for r in receivers {
        errors.extend(&r.errors);
    }
    assert!(errors.is_empty(), "{name} failed: {errors:#?}");
    for r in receivers {
        assert_eq!(
            r.delivered,
            spec.messages + usize::from(spec.fence),
            "node {}",
            r.node
        );
    }
    for n in std::iter::once(sender).chain(receivers) {
        let l = n.shutdown.ledger;
        assert_eq!(
            l.transport.held + l.transport.tx,
            0,
            "node {}: {l:?}",
            n.node
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_differ_and_name_themselves() {
        for i in 0..OFFSETS + 3 {
            let m = message_bytes(i, 64);
            assert_eq!(m.len(), 64);
            assert_ne!(m, message_bytes(i + 1, 64), "messages {i} and {}", i + 1);
            assert_eq!(which_message(m), Some(i % OFFSETS), "message {i}");
        }
        assert_eq!(message(1).len(), MAX_MESSAGE);
        assert_eq!(message_bytes(OFFSETS - 1, MAX_MESSAGE).len(), MAX_MESSAGE);
        assert_eq!(which_message(&[0; 16]), None);
        assert_eq!(which_message(&[]), None);
    }

    #[test]
    #[should_panic(expected = "at most 65536 bytes")]
    fn a_message_longer_than_the_pattern_allows_is_refused() {
        message_bytes(0, MAX_MESSAGE + 1);
    }
}
