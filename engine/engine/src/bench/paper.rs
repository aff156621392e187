//! The paper's comparison (seed 000 §4, issue 6): one run of one algorithm
//! (or the raw blast) to the first `receivers` receivers of a topology, in
//! one of the [`PaperMode`]s. Raw times only; `mcast-bench paper` makes the
//! histograms.
//!
//! Owns: the paper runs, their frame and window sizing and their raw
//! figures. May not touch: the `xdp` scenario's runs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use mcast_wire::{group_mac, Frame, NodeId, Seq, ETHERTYPE_DEFAULT};

use crate::harness::netns::Topology;
use crate::harness::runs::xdp;
use crate::harness::scenario::{self, GROUP, SENDER};
use crate::sys::monotonic_ns;
use crate::{
    Accept, Algorithm, Engine, EngineConfig, GroupOptions, PublishError, StreamStart, Transport,
};

use super::{send_blast_batch, spec, BLAST_SPIN, FRAME_COUNT, STAMP_LEN};

/// How the sender offers messages in a paper run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaperMode {
    /// The paper's measurement: send one message, wait until every receiver
    /// delivered it (and, for the acknowledged algorithms, until the sender
    /// holds every acknowledgment), then send the next.
    PingPong,
    /// A fixed offered rate, messages per second; latency counts from each
    /// message's scheduled send time (no coordinated omission).
    Rate(u32),
    /// As fast as the window allows; latency counts from the moment the
    /// application first tried to publish the message.
    Saturation,
    /// Ping-pong with a reply: send one message; the run's last receiver
    /// answers each message it delivers with a 16-byte reply, unicast back
    /// to the sender over the same engine and transport (a Go-Back-N stream
    /// in the sender's inbox group [`ECHO_GROUP`]; the blast answers with one
    /// raw frame); the sender sends the next message when the reply is in.
    /// The round trip is from the send until the reply was delivered at the
    /// sender. Works for every algorithm, plain NAK included.
    Echo,
}

/// The sender's inbox in an echo run: the replies' Go-Back-N stream (the
/// iterative machine with a group of one, unicast, opened by its first
/// frame, as the daemons' links are).
pub const ECHO_GROUP: u32 = 0x8000_0001;

/// Bytes of an echo reply: the message's index and its send time.
pub const ECHO_REPLY_LEN: usize = 16;

/// What a paper run measured, in CLOCK_MONOTONIC nanoseconds since the run
/// started. `u64::MAX` marks a message a receiver never delivered.
#[derive(Debug, Clone, Default)]
pub struct PaperRaw {
    /// Per message: when it was (to be) sent.
    pub sent_ns: Vec<u64>,
    /// Per receiver, per message: when that receiver delivered it.
    pub delivered_ns: Vec<Vec<u64>>,
    /// Ping-pong only, acknowledged algorithms only: per message, from the
    /// publish until the sender held every receiver's acknowledgment.
    pub acked_ns: Vec<u64>,
    /// Echo only: per message, from the send until the reply was delivered
    /// at the sender (`u64::MAX`: no reply in time). Empty in other modes.
    pub echo_ns: Vec<u64>,
    /// XDP attach mode and AF_XDP bind mode seen.
    pub modes: (String, String),
}

/// The UMEM of a paper run's engine (2 KiB frames: 16 MiB), plain NAK's
/// excepted (see [`paper_frames`]).
const PAPER_FRAMES: u32 = 8192;

/// UMEM frames an engine needs beyond its window: the fill and TX rings
/// (2,048 each), the messages queued ahead of the window and the spares
/// (the default socket's whole UMEM).
const PAPER_FRAMES_BEYOND_WINDOW: u32 = 4096;

/// The most messages one plain-NAK paper run may send. Its sender never
/// frees a frame (seed 000's first weakness), so its window holds the whole
/// run, and every engine of the run gets a UMEM of
/// [`paper_frames`]`(messages)` frames of 2 KiB: 47 MiB each for 20,000
/// messages (330 MiB for the 7 engines of a 6-receiver run), 72 MiB each at
/// this cap.
pub const PAPER_MAX_MESSAGES: usize = 32_768;

/// Plain NAK's window in a paper run of `messages` messages: all of them,
/// and room for the fence slack the harness keeps.
fn nak_window(messages: usize) -> u32 {
    messages as u32 + 64
}

/// The UMEM frames of each engine of a paper run of `algorithm` sending
/// `messages` messages: 8,192 (16 MiB), or for plain NAK its whole-run
/// window (messages + 64) plus 4,096 when that is more.
pub fn paper_frames(algorithm: Option<Algorithm>, messages: usize) -> u32 {
    match algorithm {
        Some(Algorithm::Nak) => PAPER_FRAMES.max(nak_window(messages) + PAPER_FRAMES_BEYOND_WINDOW),
        _ => PAPER_FRAMES,
    }
}

/// One paper run: `algorithm` (None: the raw unreliable blast) from the
/// topology's sender to its first `receivers` receivers, `messages`
/// messages of `len` bytes (at least 16) offered in `mode`. A protocol run
/// stops at `deadline` even if some receiver still misses messages (plain
/// NAK never recovers a lost tail); what was delivered by then is reported.
/// The window for a link capped at `bps` by `Topology::limit_rate`: half the
/// frames its tbf queues (50 ms at the rate plus a 4,000-byte bucket), shared
/// by the copies of each frame that pass the sender's port; 4 to 64 frames.
fn capped_window(bps: u64, len: usize, algorithm: Algorithm, receivers: usize) -> u32 {
    let queue_bytes = bps / 8 / 20 + 4_000;
    let frame_bytes = (len.min(1456) + mcast_wire::field::PAYLOAD) as u64;
    let copies = if algorithm == Algorithm::Iterative {
        receivers.max(1) as u64
    } else {
        1
    };
    (queue_bytes / frame_bytes / 2 / copies).clamp(4, 64) as u32
}

/// `link_bps`: the rate the topology's links are capped at, if they are.
#[derive(Debug, Clone, Copy)]
pub struct PaperRun {
    pub algorithm: Option<Algorithm>,
    pub receivers: usize,
    pub len: usize,
    pub mode: PaperMode,
    pub messages: usize,
    pub deadline: Duration,
    pub link_bps: Option<u64>,
}

/// Performs `run` on `topo` (see [`PaperRun`]).
pub fn paper_run(topo: &Topology, run: &PaperRun) -> PaperRaw {
    assert!(run.receivers >= 1 && run.receivers <= topo.receivers.len());
    assert!(run.algorithm != Some(Algorithm::Nak) || run.messages <= PAPER_MAX_MESSAGES);
    let run = PaperRun {
        len: run.len.max(STAMP_LEN),
        ..*run
    };
    match run.algorithm {
        Some(a) => paper_protocol(topo, a, &run),
        None => paper_blast(topo, run.receivers, run.len, run.mode, run.messages),
    }
}

/// Per-receiver progress shared with the sender: messages delivered so far.
fn counters(n: usize) -> Vec<AtomicUsize> {
    (0..n).map(|_| AtomicUsize::new(0)).collect()
}

fn all_reached(c: &[AtomicUsize], n: usize) -> bool {
    c.iter().all(|x| x.load(Ordering::Acquire) >= n)
}

/// The paper runs' sender sleeps at most this long in the engine, so that
/// it wakes in time for a scheduled send.
const SENDER_MAX_SLEEP: Duration = Duration::from_micros(100);

/// How long the ping-pong sender waits for a message before giving up on it.
const PING_TIMEOUT_NS: u64 = 200_000_000;

fn paper_protocol(topo: &Topology, algorithm: Algorithm, run: &PaperRun) -> PaperRaw {
    let PaperRun {
        receivers,
        len,
        mode,
        messages,
        deadline,
        link_bps,
        ..
    } = *run;
    let mut spec = spec(topo, algorithm, receivers, messages, len, 0.0);
    spec.window_frames = spec.window_frames.min(PAPER_FRAMES / 4);
    // On a capped link (`Topology::limit_rate`) the window must fit the
    // bottleneck's queue, with room to spare: a tbf queues `rate` x 50 ms
    // plus its 32 kbit bucket and drops what does not fit, and every copy of
    // the window passes the sender's port (iterative sends one per
    // receiver). A window that overflowed it lost its tail on every burst, and
    // Go-Back-N's go-back then burst into the still-full queue, losing its
    // first frame too, until the retransmission timer (backing off) probed:
    // with 64 frames of 1 KiB (the queue holds about 61) iterative and
    // Go-Back-N to one receiver ran at 33 messages/s, and at 1,164 with 32.
    // The protocol timers need nothing: they measure the capped link.
    if let Some(bps) = link_bps {
        if algorithm != Algorithm::Nak {
            spec.window_frames = spec
                .window_frames
                .min(capped_window(bps, len, algorithm, receivers));
        }
    }
    if algorithm == Algorithm::Nak {
        // Plain NAK never frees its buffer: give it the whole run.
        spec.window_frames = nak_window(messages);
    }
    let echo = mode == PaperMode::Echo;
    // The receiver that answers in an echo run: the last one, which the
    // iterative sender's last copy reaches.
    let replier = receivers - 1;
    let progress = counters(receivers);
    let start = Barrier::new(receivers + 1);
    let sender_done = AtomicBool::new(false);
    let t0 = std::sync::OnceLock::<u64>::new();
    let open = xdp(paper_frames(Some(algorithm), messages));
    let config = |node: NodeId| {
        let mut c = scenario::config(&spec, node);
        if node == SENDER {
            c.max_sleep = c.max_sleep.min(SENDER_MAX_SLEEP);
        } else {
            // The replier sends unicast to the sender from the start.
            c.peers.push((SENDER, topo.sender.mac));
        }
        c
    };
    // The replies' stream: Go-Back-N (the iterative machine to one member),
    // unicast; the sender opens its receive stream on the first reply.
    let echo_group = |c: &EngineConfig, accept_senders: Accept| GroupOptions {
        algorithm: Algorithm::Iterative,
        protocol: c.protocol,
        window_frames: 64,
        subscribe: false,
        accept_senders,
        max_queued_frames: c.max_queued_frames,
        batch_messages: c.batch_messages,
    };
    let deadline_ns = deadline.as_nanos() as u64;
    let (sent, acked, echoed, delivered) = std::thread::scope(|sc| {
        let hs: Vec<_> = spec
            .receivers
            .iter()
            .zip(&topo.receivers)
            .enumerate()
            .map(|(ri, (&(node, _), ns))| {
                let (open, config, progress, start, sender_done, echo_group) =
                    (&open, &config, &progress, &start, &sender_done, &echo_group);
                sc.spawn(move || {
                    ns.enter();
                    let c = config(node);
                    let mut e = Engine::new(open(ns), c.clone())
                        .unwrap_or_else(|e| panic!("engine on {}: {e}", ns.name));
                    e.open_receiver(SENDER).expect("open receiver");
                    let replies = echo && ri == replier;
                    if replies {
                        e.add_group(ECHO_GROUP, echo_group(&c, Accept::Opened))
                            .expect("echo group");
                        let from_zero = StreamStart {
                            epoch: c.epoch,
                            seq: Seq(0),
                        };
                        e.open_sender_in(ECHO_GROUP, &[SENDER], from_zero)
                            .expect("echo stream");
                    }
                    let mut at = vec![u64::MAX; messages];
                    start.wait();
                    let mut got = 0usize;
                    while !sender_done.load(Ordering::SeqCst) {
                        e.run_once().expect("engine");
                        while let Some(m) = e.recv_message() {
                            let now = monotonic_ns();
                            if let Some(b) = m.data.get(..8) {
                                let i = u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
                                if i < messages {
                                    at[i] = now;
                                }
                            }
                            if replies {
                                // The reply: the message's index and send time.
                                let reply = &m.data[..ECHO_REPLY_LEN];
                                while let Err(err) = e.publish_in(ECHO_GROUP, reply) {
                                    assert!(
                                        matches!(err, PublishError::WouldBlock),
                                        "echo reply: {err}"
                                    );
                                    if sender_done.load(Ordering::SeqCst) {
                                        break;
                                    }
                                    e.run_once().expect("engine");
                                }
                            }
                            got += 1;
                            progress[ri].store(got, Ordering::Release);
                        }
                    }
                    let _ = e.shutdown();
                    at
                })
            })
            .collect();
        let s = sc.spawn(|| {
            topo.sender.enter();
            let c = config(SENDER);
            let mut e = Engine::new(open(&topo.sender), c.clone())
                .unwrap_or_else(|e| panic!("engine on {}: {e}", topo.sender.name));
            let members: Vec<NodeId> = spec.receivers.iter().map(|r| r.0).collect();
            e.open_sender(&members).expect("open sender");
            if echo {
                e.add_group(ECHO_GROUP, echo_group(&c, Accept::Any))
                    .expect("echo group");
            }
            let mut msg = vec![0x5au8; len];
            let mut sent = vec![0u64; messages];
            let mut acked = Vec::new();
            let mut echoed = if echo {
                vec![u64::MAX; messages]
            } else {
                Vec::new()
            };
            start.wait();
            let base = monotonic_ns();
            let _ = t0.set(base);
            let deadline = base + deadline_ns;
            for (i, slot) in sent.iter_mut().enumerate() {
                let at = match mode {
                    PaperMode::Rate(rate) => {
                        let at = base + i as u64 * 1_000_000_000 / u64::from(rate.max(1));
                        // Sleep in the engine while the slot is far, then
                        // spin: never send late because of a long sleep.
                        loop {
                            let now = monotonic_ns();
                            if now >= at {
                                break;
                            }
                            if at - now > 2 * SENDER_MAX_SLEEP.as_nanos() as u64 {
                                e.run_once().expect("engine");
                            } else {
                                e.poll().expect("engine");
                            }
                        }
                        at
                    }
                    _ => monotonic_ns(),
                };
                *slot = at;
                msg[..8].copy_from_slice(&(i as u64).to_le_bytes());
                msg[8..16].copy_from_slice(&at.to_le_bytes());
                loop {
                    match e.publish(&msg) {
                        Ok(()) => break,
                        Err(PublishError::WouldBlock) => {
                            e.run_once().expect("engine");
                        }
                        Err(err) => panic!("publish: {err}"),
                    }
                    if monotonic_ns() > deadline {
                        break;
                    }
                }
                match mode {
                    PaperMode::PingPong => {
                        let give_up = monotonic_ns() + PING_TIMEOUT_NS;
                        let mut done = algorithm == Algorithm::Nak;
                        loop {
                            e.run_once().expect("engine");
                            if !done && e.send_idle() {
                                acked.push(monotonic_ns() - at);
                                done = true;
                            }
                            if (done && all_reached(&progress, i + 1)) || monotonic_ns() > give_up {
                                break;
                            }
                        }
                    }
                    PaperMode::Echo => {
                        let give_up = monotonic_ns() + PING_TIMEOUT_NS;
                        while echoed[i] == u64::MAX && monotonic_ns() <= give_up {
                            e.run_once().expect("engine");
                            while let Some(m) = e.recv_message() {
                                let now = monotonic_ns();
                                let index = m.data.get(..8).map(|b| {
                                    u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize
                                });
                                if m.group == ECHO_GROUP && index == Some(i) {
                                    echoed[i] = now - at;
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
            while !all_reached(&progress, messages) && monotonic_ns() < deadline {
                e.run_once().expect("engine");
            }
            if algorithm != Algorithm::Nak {
                let _ = e.flush(Duration::from_secs(2));
            }
            sender_done.store(true, Ordering::SeqCst);
            let _ = e.shutdown();
            (sent, acked, echoed)
        });
        let (sent, acked, echoed) = s.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        let delivered: Vec<Vec<u64>> = hs
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (sent, acked, echoed, delivered)
    });
    let base = t0.get().copied().unwrap_or(0);
    PaperRaw {
        acked_ns: acked,
        echo_ns: echoed,
        ..rebase(base, sent, delivered, (String::new(), String::new()))
    }
}

/// The raw times of a run, relative to its start `base` (acked and echo
/// round trips left empty).
fn rebase(
    base: u64,
    sent: Vec<u64>,
    delivered: Vec<Vec<u64>>,
    modes: (String, String),
) -> PaperRaw {
    let rel = |t: u64| {
        if t == u64::MAX {
            u64::MAX
        } else {
            t.saturating_sub(base)
        }
    };
    PaperRaw {
        sent_ns: sent.into_iter().map(rel).collect(),
        delivered_ns: delivered
            .into_iter()
            .map(|v| v.into_iter().map(rel).collect())
            .collect(),
        acked_ns: Vec::new(),
        echo_ns: Vec::new(),
        modes,
    }
}

/// The raw unreliable multicast blast in a paper run: frames straight onto
/// AF_XDP, no protocol. Ping-pong waits for every receiver or 20 ms; echo
/// waits up to 20 ms for the last receiver's reply, one raw 16-byte frame
/// unicast back to the sender as soon as the message arrived.
fn paper_blast(
    topo: &Topology,
    receivers: usize,
    len: usize,
    mode: PaperMode,
    messages: usize,
) -> PaperRaw {
    let progress = counters(receivers);
    let start = Barrier::new(receivers + 1);
    let done = AtomicBool::new(false);
    let t0 = std::sync::OnceLock::<u64>::new();
    let open = xdp(FRAME_COUNT);
    let echo = mode == PaperMode::Echo;
    let replier = receivers - 1;
    let (sent, echoed, delivered, modes) = std::thread::scope(|sc| {
        let hs: Vec<_> = topo.receivers[..receivers]
            .iter()
            .enumerate()
            .map(|(ri, ns)| {
                let (start, done, open, progress) = (&start, &done, &open, &progress);
                let sender_mac = topo.sender.mac;
                sc.spawn(move || {
                    ns.enter();
                    let mut t = open(ns);
                    t.subscribe(group_mac(GROUP)).expect("subscribe");
                    let info = t.info();
                    let modes = (
                        info.attach_mode
                            .map_or_else(|| "none".to_owned(), |m| format!("{m:?}").to_lowercase()),
                        info.bind_mode
                            .map_or_else(|| "none".to_owned(), |m| format!("{m:?}").to_lowercase()),
                    );
                    let src = t.mac();
                    let replies = echo && ri == replier;
                    let mut at = vec![u64::MAX; messages];
                    start.wait();
                    let mut batch = Vec::new();
                    let mut reply = Vec::with_capacity(1);
                    let mut kept = Vec::new();
                    let mut quiet = monotonic_ns();
                    let mut got = 0usize;
                    loop {
                        batch.clear();
                        t.recv(&mut batch).expect("recv");
                        let now = monotonic_ns();
                        if batch.is_empty() {
                            if done.load(Ordering::SeqCst) && now - quiet > 100_000_000 {
                                break;
                            }
                            if now - quiet > BLAST_SPIN.as_nanos() as u64 {
                                t.wait(Duration::from_millis(1)).expect("wait");
                            } else {
                                std::thread::yield_now();
                            }
                            continue;
                        }
                        quiet = now;
                        for d in &batch {
                            let bytes =
                                &t.frame(d.frame)[d.offset as usize..(d.offset + d.len) as usize];
                            let mut new = None;
                            if let Ok(f) = Frame::new_checked(bytes, ETHERTYPE_DEFAULT) {
                                let i = f.seq().0 as usize;
                                if i < messages && at[i] == u64::MAX {
                                    at[i] = now;
                                    got += 1;
                                    new = Some(i);
                                }
                            }
                            t.release(d.frame);
                            if let (true, Some(i)) = (replies, new) {
                                t.reap(&mut kept).expect("reap");
                                let sent = send_blast_batch(
                                    &mut t,
                                    &mut reply,
                                    sender_mac,
                                    src,
                                    i,
                                    1,
                                    ECHO_REPLY_LEN,
                                );
                                assert_eq!(sent, 1, "the echo reply found no room");
                            }
                        }
                        progress[ri].store(got, Ordering::Release);
                    }
                    (at, modes)
                })
            })
            .collect();
        let s = sc.spawn(|| {
            topo.sender.enter();
            let mut t = open(&topo.sender);
            let src = t.mac();
            let mut sent = vec![0u64; messages];
            let mut echoed = if echo {
                vec![u64::MAX; messages]
            } else {
                Vec::new()
            };
            start.wait();
            let base = monotonic_ns();
            let _ = t0.set(base);
            let mut kept = Vec::new();
            let mut batch = Vec::with_capacity(64);
            let mut rx = Vec::new();
            let mut i = 0usize;
            while i < messages {
                t.reap(&mut kept).expect("reap");
                let at = match mode {
                    PaperMode::Rate(rate) => {
                        let at = base + i as u64 * 1_000_000_000 / u64::from(rate.max(1));
                        loop {
                            let now = monotonic_ns();
                            if now >= at {
                                break;
                            }
                            if at - now > 200_000 {
                                std::thread::sleep(Duration::from_nanos(at - now - 150_000));
                            } else {
                                // As the engine's sender spins to a deadline.
                                std::thread::yield_now();
                            }
                        }
                        at
                    }
                    _ => monotonic_ns(),
                };
                // Saturation sends batches of up to 64 frames per kick, as
                // the engine does; the other modes one frame at a time.
                let want = if mode == PaperMode::Saturation {
                    64.min(messages - i)
                } else {
                    1
                };
                let n = send_blast_batch(&mut t, &mut batch, group_mac(GROUP), src, i, want, len);
                for s in &mut sent[i..i + n] {
                    *s = at;
                }
                i += n;
                if n == 0 {
                    continue;
                }
                let give_up = monotonic_ns() + 20_000_000;
                match mode {
                    PaperMode::PingPong => {
                        while !all_reached(&progress, i) && monotonic_ns() < give_up {
                            t.reap(&mut kept).expect("reap");
                        }
                    }
                    PaperMode::Echo => {
                        // Poll the RX ring, yielding the CPU between polls:
                        // a sender spinning throughout starves the other
                        // receivers of a 2-CPU machine, and one sleeping on
                        // the socket pays a wake-up the engine's sender,
                        // whose sleeps end at its next deadline, mostly does
                        // not.
                        let want = i - 1;
                        while echoed[want] == u64::MAX && monotonic_ns() < give_up {
                            t.reap(&mut kept).expect("reap");
                            rx.clear();
                            t.recv(&mut rx).expect("recv");
                            let now = monotonic_ns();
                            if rx.is_empty() {
                                std::thread::yield_now();
                                continue;
                            }
                            for d in &rx {
                                let bytes = &t.frame(d.frame)
                                    [d.offset as usize..(d.offset + d.len) as usize];
                                if let Ok(f) = Frame::new_checked(bytes, ETHERTYPE_DEFAULT) {
                                    if f.seq().0 as usize == want {
                                        echoed[want] = now - at;
                                    }
                                }
                                t.release(d.frame);
                            }
                        }
                    }
                    _ => {}
                }
            }
            done.store(true, Ordering::SeqCst);
            (sent, echoed)
        });
        let (sent, echoed) = s.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        let mut modes = (String::new(), String::new());
        let delivered: Vec<Vec<u64>> = hs
            .into_iter()
            .map(|h| {
                let (at, m) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                modes = m;
                at
            })
            .collect();
        (sent, echoed, delivered, modes)
    });
    let base = t0.get().copied().unwrap_or(0);
    PaperRaw {
        echo_ns: echoed,
        ..rebase(base, sent, delivered, modes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_window_fits_half_the_tbf_queue_per_copy() {
        // 10 Mbit/s: 62,500 bytes in 50 ms plus the 4,000-byte bucket.
        let ten = 10_000_000;
        // 1,082-byte frames: 61 fit, half of it.
        assert_eq!(capped_window(ten, 1024, Algorithm::Iterative, 1), 30);
        assert_eq!(capped_window(ten, 1024, Algorithm::Mak, 6), 30);
        // 570-byte frames: 116 fit.
        assert_eq!(capped_window(ten, 512, Algorithm::Ack, 4), 58);
        // Iterative to 6 sends 6 copies of each frame through the sender's port.
        assert_eq!(capped_window(ten, 1024, Algorithm::Iterative, 6), 5);
        // Never under 4, never over the uncapped 64.
        assert_eq!(capped_window(1_000_000, 1024, Algorithm::Iterative, 6), 4);
        assert_eq!(capped_window(1_000_000_000, 1024, Algorithm::Mak, 3), 64);
    }
}
