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
    if let Ok(v) = std::env::var("EXP_QUEUE") {
        c.max_queued_frames = v.parse().unwrap();
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

/// The bytes of message `i`: its index, then a pattern derived from it.
pub fn fill_message(i: usize, out: &mut Vec<u8>) {
    fill_message_len(i, message_len(i), out);
}

/// `(k as u8) * 31` for every byte position `k` within a 256-byte block.
const STEP: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut k = 0;
    while k < 256 {
        t[k] = (k as u8).wrapping_mul(31);
        k += 1;
    }
    t
};

/// Message `i` cut or padded to `len` bytes (the NAK fence is 64 bytes):
/// its index (8 bytes, little-endian), then byte `j` is
/// `seed + 31 j ^ (j >> 8)` (mod 256). Written block by block from a table,
/// which the compiler vectorizes: the sender builds every message and each
/// receiver rebuilds it to check it, so a byte-at-a-time loop (about 360 ns
/// per KiB here) was a measurable share of the per-message CPU on both sides.
pub fn fill_message_len(i: usize, len: usize, out: &mut Vec<u8>) {
    // Every byte is written below: resize only (no clear, so a buffer of the
    // right length is not zeroed first, a 1 KiB memset per message).
    out.resize(len.max(8), 0);
    let seed = mix(i as u64 ^ 0xabcdef) as u8;
    for (block, chunk) in out.chunks_mut(256).enumerate() {
        let hi = block as u8;
        for (b, step) in chunk.iter_mut().zip(STEP.iter()) {
            *b = seed.wrapping_add(*step) ^ hi;
        }
    }
    out[..8].copy_from_slice(&(i as u64).to_le_bytes());
    out.truncate(len);
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
    let mut msg = Vec::new();
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
        fill_message_len(i, spec.len_of(i), &mut msg);
        match engine.publish(&msg) {
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
        if polls % 2_000 == 0 {
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
    let mut expected = Vec::new();
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
            fill_message_len(next, spec.len_of(next), &mut expected);
            if m.stream != SENDER || m.data != expected {
                let got_index = m
                    .data
                    .get(..8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
                errors.push(format!(
                    "node {node}: message {next} wrong: {} bytes (want {}), index field {got_index:?}",
                    m.data.len(),
                    expected.len()
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
        if polls % 2_000 == 0 {
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

    /// The definition, byte by byte: the table-driven writer must match it.
    fn reference(i: usize, len: usize) -> Vec<u8> {
        let mut out = (i as u64).to_le_bytes().to_vec();
        let seed = mix(i as u64 ^ 0xabcdef) as u8;
        out.extend(
            (8..len).map(|j| seed.wrapping_add((j as u8).wrapping_mul(31)) ^ (j >> 8) as u8),
        );
        out.truncate(len);
        out
    }

    #[test]
    fn fill_message_len_matches_its_definition() {
        let mut out = Vec::new();
        for i in 0..300 {
            for len in [0, 1, 7, 8, 9, 64, 255, 256, 257, 1024, 1456, 1457, 65536] {
                fill_message_len(i, len, &mut out);
                assert_eq!(out, reference(i, len), "message {i}, {len} bytes");
            }
            fill_message(i, &mut out);
            assert_eq!(out, reference(i, message_len(i)), "message {i}");
        }
    }
}
