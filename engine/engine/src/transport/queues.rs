//! Several NIC queues: the AF_XDP transport of queue 0 plus one receive
//! thread per extra queue, each handing its frames to the engine's thread
//! through crossbeam queues.
//!
//! What it owns: the extra queues' AF_XDP sockets (each with its own UMEM),
//! their threads, the bounded handoff buffers between those threads and the
//! engine, and their counters ([`QueueStats`]). The steering program, the
//! frame pool the engine holds and everything sent stay with the queue-0
//! [`XdpTransport`] it wraps.
//!
//! Why this shape: a NIC's RSS spreads arriving frames over its RX queues,
//! and an AF_XDP socket receives only what arrives on the queue it is bound
//! to; the steering program redirects each queue to that queue's socket
//! (`xsks[rx_queue_index]`). A group's frames may arrive on any queue (each
//! sender's flow hashes to its own), and the protocol machines of a stream
//! need all of its frames, its NAKs and ACKs in one place; so the machines
//! stay on one thread, the engine's, and each extra queue's thread does
//! that queue's receive work (its rings, the fill ring, the kernel's copy
//! in copy mode, which the kernel runs on the queue's CPU) and passes each
//! frame's bytes over. The engine takes them in its receive batch, copied
//! into frames of its own pool, exactly as if queue 0 had received them.
//!
//! What it never does: it never drops a frame it has taken from a socket.
//! Handoff buffers are a fixed number per queue; when the engine falls
//! behind, a queue's thread stops taking frames from its RX ring, and the
//! kernel's own counters (`SocketStats`) show what the ring could not hold,
//! as for queue 0. It never sends on an extra queue.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use mcast_wire::MacAddr;
use mcast_xsk::{RxFrame, SocketStats, SteeringCounters, XskConfig, XskSocket};

use super::xdp::{XdpConfig, XdpTransport};
use super::{RxDesc, Transport, TransportCounts, TransportInfo, TxDesc};
use crate::sys;
use crate::EngineError;

/// One extra queue to serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtraQueue {
    /// The interface's RX queue.
    pub queue: u32,
    /// The CPU to pin its thread to, if any.
    pub cpu: Option<usize>,
}

/// Counters of one queue's receive thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The interface's RX queue.
    pub queue: u32,
    /// Frames handed to the engine.
    pub frames: u64,
    /// Times the thread found every handoff buffer taken and waited for the
    /// engine (the engine fell behind this queue).
    pub starved: u64,
    /// The kernel's counters of this queue's socket, as of the thread's
    /// last look (it reads them whenever it goes idle).
    pub kernel: SocketStats,
}

/// A frame's bytes on their way from a queue's thread to the engine.
#[derive(Debug)]
struct Handoff {
    len: u32,
    bytes: Box<[u8]>,
}

/// What a queue's thread and the engine share.
#[derive(Debug)]
struct Shared {
    queue: u32,
    /// Frames received, for the engine (one producer, one consumer).
    full: ArrayQueue<Handoff>,
    /// Empty buffers, back to the thread.
    free: ArrayQueue<Handoff>,
    /// Signalled by the thread after it pushed into `full`: readable while
    /// frames may wait there (part of the engine's wait).
    ready: OwnedFd,
    /// `ready` has been signalled and not yet drained: the thread signals
    /// it only when this was false, and the engine drains it only when this
    /// was true, so neither side makes a system call per frame or per poll.
    signalled: AtomicBool,
    /// Signalled by the engine to stop the thread, or when it returned
    /// buffers the thread waits for.
    wake: OwnedFd,
    stop: AtomicBool,
    /// The thread waits for a buffer.
    starved_now: AtomicBool,
    frames: AtomicU64,
    starved: AtomicU64,
    kernel: [AtomicU64; 4],
}

impl Shared {
    /// `buffers` handoff buffers of `frame_size` bytes for queue `queue`.
    fn new(queue: u32, buffers: usize, frame_size: usize) -> io::Result<Shared> {
        let free = ArrayQueue::new(buffers);
        for _ in 0..buffers {
            free.push(Handoff {
                len: 0,
                bytes: vec![0; frame_size].into_boxed_slice(),
            })
            .expect("the queue holds every buffer");
        }
        Ok(Shared {
            queue,
            full: ArrayQueue::new(buffers),
            free,
            ready: sys::eventfd()?,
            wake: sys::eventfd()?,
            signalled: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            starved_now: AtomicBool::new(false),
            frames: AtomicU64::new(0),
            starved: AtomicU64::new(0),
            kernel: Default::default(),
        })
    }

    /// The thread: hands one frame's bytes over. False when every buffer
    /// is with the engine ([`Shared::wait_for_room`]).
    fn hand(&self, packet: &[u8]) -> bool {
        let Some(mut buf) = self.free.pop() else {
            return false;
        };
        buf.bytes[..packet.len()].copy_from_slice(packet);
        buf.len = packet.len() as u32;
        if self.full.push(buf).is_err() {
            unreachable!("the full queue holds every buffer");
        }
        true
    }

    /// The thread, after handing `n` frames: counts them and wakes the
    /// engine unless a signal it has not drained is still pending.
    fn handed(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.frames.fetch_add(n, Ordering::Relaxed);
        if !self.signalled.swap(true, Ordering::SeqCst) {
            let _ = sys::eventfd_signal(self.ready.as_raw_fd());
        }
    }

    /// The thread, with frames left and no buffer: waits until the engine
    /// gives one back, or `timeout`. False when it timed out with none.
    fn wait_for_room(&self, timeout: Duration) -> bool {
        self.starved_now.store(true, Ordering::SeqCst);
        if !self.free.is_empty() {
            return true;
        }
        self.starved.fetch_add(1, Ordering::Relaxed);
        let woke = sys::ppoll_any(&[self.wake.as_raw_fd()], timeout).unwrap_or(0) > 0;
        let _ = sys::eventfd_drain(self.wake.as_raw_fd());
        woke || !self.free.is_empty()
    }

    /// The engine: whether a frame waits. When none seems to, the `ready`
    /// signal is drained and the queue looked at again, so a frame handed
    /// after that look signals anew and the engine's wait sees it.
    fn waiting(&self) -> io::Result<bool> {
        loop {
            if !self.full.is_empty() {
                return Ok(true);
            }
            if !self.signalled.swap(false, Ordering::SeqCst) {
                return Ok(false);
            }
            sys::eventfd_drain(self.ready.as_raw_fd())?;
        }
    }

    /// The engine: the next frame, once [`Shared::waiting`] said one waits
    /// (one consumer, so it is still there).
    fn next(&self) -> Handoff {
        self.full.pop().expect("a waiting frame pops")
    }

    /// The engine: a buffer back, waking the thread if it waits for one.
    fn give_back(&self, buf: Handoff) -> io::Result<()> {
        if self.free.push(buf).is_err() {
            unreachable!("buffers return to the queue they came from");
        }
        if self.starved_now.swap(false, Ordering::SeqCst) {
            sys::eventfd_signal(self.wake.as_raw_fd())?;
        }
        Ok(())
    }

    /// The engine, done for now with frames left: its wait stays awake.
    fn keep_awake(&self) {
        if !self.full.is_empty() && !self.signalled.swap(true, Ordering::SeqCst) {
            let _ = sys::eventfd_signal(self.ready.as_raw_fd());
        }
    }

    fn stats(&self) -> QueueStats {
        let k = |i: usize| self.kernel[i].load(Ordering::Relaxed);
        QueueStats {
            queue: self.queue,
            frames: self.frames.load(Ordering::Relaxed),
            starved: self.starved.load(Ordering::Relaxed),
            kernel: SocketStats {
                rx_dropped: k(0),
                rx_ring_full: k(1),
                rx_fill_ring_empty: k(2),
                tx_ring_empty: k(3),
            },
        }
    }
}

#[derive(Debug)]
struct Worker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// The AF_XDP transport over several queues of one interface: queue 0's
/// (or the configured first queue's) [`XdpTransport`] for everything the
/// engine does, and a receive thread for each [`ExtraQueue`].
#[derive(Debug)]
pub struct MultiQueueTransport {
    main: XdpTransport,
    workers: Vec<Worker>,
    /// The extra queues' `ready` descriptors, for the engine's wait.
    ready_fds: Vec<RawFd>,
    batch: usize,
}

/// An I/O error of `operation`, as the engine reports it.
fn io(operation: &'static str) -> impl Fn(io::Error) -> EngineError {
    move |source| EngineError::Io { operation, source }
}

/// Handoff buffers per extra queue: as many frames as its RX ring holds.
/// With the defaults (2,048-slot rings, 2 KiB frames) an extra queue takes
/// 8 MiB of UMEM and 4 MiB of buffers.
fn buffers(config: &XdpConfig) -> usize {
    config.xsk.ring_size as usize
}

impl MultiQueueTransport {
    /// Attaches to `ifname`, opens the socket of `config.queue` and one
    /// socket and thread for each of `extra` (distinct queues, none equal
    /// to `config.queue`, each below the interface's RX queue count).
    pub fn open(
        ifname: &str,
        ethertype: u16,
        config: XdpConfig,
        extra: &[ExtraQueue],
    ) -> Result<MultiQueueTransport, EngineError> {
        let mut seen = vec![config.queue];
        for e in extra {
            if seen.contains(&e.queue) {
                return Err(EngineError::Config(format!(
                    "queue {} is named twice; each queue is served once",
                    e.queue
                )));
            }
            seen.push(e.queue);
        }
        let main = XdpTransport::open(ifname, ethertype, config.clone())?;
        let mut this = MultiQueueTransport {
            batch: config.xsk.batch as usize,
            main,
            workers: Vec::new(),
            ready_fds: Vec::new(),
        };
        for e in extra {
            // From here on, Drop stops the threads already started.
            this.start(ifname, &config, *e)?;
        }
        Ok(this)
    }

    fn start(
        &mut self,
        ifname: &str,
        config: &XdpConfig,
        e: ExtraQueue,
    ) -> Result<(), EngineError> {
        // An extra queue's frames only pass through: its RX ring's worth
        // for the kernel and as many again to refill from (the engine's
        // pool is the one that holds frames for long).
        let xsk_config = XskConfig {
            frame_count: 2 * config.xsk.ring_size,
            ..config.xsk.clone()
        };
        let xsk = XskSocket::open(ifname, e.queue, xsk_config).map_err(|err| {
            EngineError::Config(format!(
                "cannot open queue {} of `{ifname}`: {err} (does it have {} RX queues? `ethtool -l {ifname}` shows them, `ethtool -L {ifname} combined N` sets them)",
                e.queue,
                e.queue + 1
            ))
        })?;
        let shared = Arc::new(
            Shared::new(e.queue, buffers(config), config.xsk.frame_size as usize)
                .map_err(io("creating a queue's eventfds"))?,
        );
        self.main.register_queue(e.queue, &xsk)?;
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mcast-rx-q{}", e.queue))
            .spawn(move || receive(xsk, &thread_shared, e.cpu))
            .map_err(io("starting a queue's receive thread"))?;
        self.ready_fds.push(shared.ready.as_raw_fd());
        self.workers.push(Worker {
            shared,
            thread: Some(thread),
        });
        Ok(())
    }

    /// Moves frames the queues' threads handed over into frames of the
    /// engine's pool, at most `budget`.
    fn take_handed(&mut self, out: &mut Vec<RxDesc>, budget: usize) -> Result<usize, EngineError> {
        let mut n = 0;
        for w in &self.workers {
            let s = &w.shared;
            while n < budget && s.waiting().map_err(io("reading a queue's eventfd"))? {
                let Some(frame) = self.main.alloc() else {
                    break;
                };
                let buf = s.next();
                let len = buf.len as usize;
                self.main.frame_mut(frame)[..len].copy_from_slice(&buf.bytes[..len]);
                out.push(RxDesc {
                    frame,
                    offset: 0,
                    len: buf.len,
                });
                n += 1;
                s.give_back(buf).map_err(io("waking a queue's thread"))?;
            }
            s.keep_awake();
        }
        Ok(n)
    }
}

impl Drop for MultiQueueTransport {
    fn drop(&mut self) {
        for w in &mut self.workers {
            // Out of the XSKMAP first, so the socket closes with no redirect
            // aimed at it; the queue's frames go to the kernel meanwhile.
            if let Err(e) = self.main.unregister_queue(w.shared.queue) {
                eprintln!("mcast-engine: unregistering queue {}: {e}", w.shared.queue);
            }
            w.shared.stop.store(true, Ordering::SeqCst);
            let _ = sys::eventfd_signal(w.shared.wake.as_raw_fd());
            if let Some(t) = w.thread.take() {
                if t.join().is_err() {
                    eprintln!(
                        "mcast-engine: the receive thread of queue {} panicked",
                        w.shared.queue
                    );
                }
            }
        }
    }
}

/// How long a queue's thread sleeps at most before it looks at `stop`
/// again (it is also woken at once by `wake`).
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// A queue's thread: takes frames from its socket and hands their bytes to
/// the engine, until told to stop.
fn receive(mut xsk: XskSocket, s: &Shared, cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        if let Err(e) = sys::pin_current_thread(cpu) {
            eprintln!(
                "mcast-engine: queue {}: cannot pin to CPU {cpu}: {e}",
                s.queue
            );
        }
    }
    let _ = sys::set_timer_slack(Duration::from_micros(1));
    let mut rx: Vec<RxFrame> = Vec::new();
    let mut taken: VecDeque<RxFrame> = VecDeque::new();
    let wake = s.wake.as_raw_fd();
    let mut errors = 0u64;
    while !s.stop.load(Ordering::SeqCst) {
        // Woken from a sleep: `wake` is drained once the frames that came
        // are handed over (off the frames' path).
        let mut slept = false;
        if taken.is_empty() {
            if !xsk.rx_waiting() {
                publish_kernel(&xsk, s);
                let _ = sys::ppoll_any(&[xsk.fd(), wake], IDLE_WAIT);
                slept = true;
            }
            rx.clear();
            if let Err(e) = xsk.recv(&mut rx) {
                // A frame the kernel returned that it was not given: a bug;
                // said once, then counted.
                if errors == 0 {
                    eprintln!("mcast-engine: queue {}: {e}", s.queue);
                }
                errors += 1;
            }
            taken.extend(rx.drain(..));
        }
        let mut handed = 0u64;
        while let Some(r) = taken.front() {
            if !s.hand(xsk.packet(r).expect("a received frame is held")) {
                break;
            }
            let _ = xsk.release([r.frame]);
            taken.pop_front();
            handed += 1;
        }
        s.handed(handed);
        if slept {
            let _ = sys::eventfd_drain(wake);
        }
        if !taken.is_empty() {
            // Every buffer is with the engine: wait until it returns some.
            s.wait_for_room(IDLE_WAIT);
        }
    }
    publish_kernel(&xsk, s);
    let _ = xsk.release(taken.drain(..).map(|r| r.frame));
}

fn publish_kernel(xsk: &XskSocket, s: &Shared) {
    if let Ok(k) = xsk.kernel_stats() {
        for (i, v) in [
            k.rx_dropped,
            k.rx_ring_full,
            k.rx_fill_ring_empty,
            k.tx_ring_empty,
        ]
        .into_iter()
        .enumerate()
        {
            s.kernel[i].store(v, Ordering::Relaxed);
        }
    }
}

impl Transport for MultiQueueTransport {
    fn info(&self) -> TransportInfo {
        self.main.info()
    }

    fn mac(&self) -> MacAddr {
        self.main.mac()
    }

    fn frame_size(&self) -> usize {
        self.main.frame_size()
    }

    fn frame_count(&self) -> u32 {
        self.main.frame_count()
    }

    fn subscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        self.main.subscribe(mac)
    }

    fn unsubscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        self.main.unsubscribe(mac)
    }

    fn recv(&mut self, out: &mut Vec<RxDesc>) -> Result<usize, EngineError> {
        let n = self.main.recv(out)?;
        let budget = self.batch.saturating_sub(n).max(1);
        Ok(n + self.take_handed(out, budget)?)
    }

    fn rx_waiting(&self) -> bool {
        self.main.rx_waiting() || self.workers.iter().any(|w| !w.shared.full.is_empty())
    }

    fn alloc(&mut self) -> Option<u32> {
        self.main.alloc()
    }

    fn release(&mut self, frame: u32) {
        self.main.release(frame);
    }

    fn frame(&self, frame: u32) -> &[u8] {
        self.main.frame(frame)
    }

    fn frame_mut(&mut self, frame: u32) -> &mut [u8] {
        self.main.frame_mut(frame)
    }

    fn copy_between(&mut self, from: u32, to: u32, range: std::ops::Range<usize>) {
        self.main.copy_between(from, to, range);
    }

    fn transmit(&mut self, batch: &[TxDesc], keep: bool) -> Result<usize, EngineError> {
        self.main.transmit(batch, keep)
    }

    fn reap(&mut self, kept: &mut Vec<u32>) -> Result<(), EngineError> {
        self.main.reap(kept)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), EngineError> {
        if self.rx_waiting() {
            return Ok(());
        }
        let mut fds = Vec::with_capacity(1 + self.ready_fds.len());
        fds.extend(self.main.wait_fd());
        fds.extend_from_slice(&self.ready_fds);
        sys::ppoll_any(&fds, timeout).map_err(|source| EngineError::Io {
            operation: "poll on the AF_XDP sockets of every queue",
            source,
        })?;
        Ok(())
    }

    fn wait_fd(&self) -> Option<RawFd> {
        self.main.wait_fd()
    }

    fn extra_wait_fds(&self) -> &[RawFd] {
        &self.ready_fds
    }

    fn counts(&self) -> TransportCounts {
        self.main.counts()
    }

    fn spare_frames(&self) -> (u32, u32) {
        self.main.spare_frames()
    }

    fn check_conservation(&self) -> Result<TransportCounts, String> {
        self.main.check_conservation()
    }

    fn set_drop_ratio(&mut self, ratio: f64) -> Result<(), EngineError> {
        self.main.set_drop_ratio(ratio)
    }

    fn steering_counters(&self) -> Option<SteeringCounters> {
        self.main.steering_counters()
    }

    /// Queue 0's socket and every extra queue's, summed.
    fn socket_stats(&self) -> Option<SocketStats> {
        let mut sum = self.main.socket_stats()?;
        for w in &self.workers {
            let k = w.shared.stats().kernel;
            sum.rx_dropped += k.rx_dropped;
            sum.rx_ring_full += k.rx_ring_full;
            sum.rx_fill_ring_empty += k.rx_fill_ring_empty;
            sum.tx_ring_empty += k.tx_ring_empty;
        }
        Some(sum)
    }

    fn queue_stats(&self) -> Vec<QueueStats> {
        self.workers.iter().map(|w| w.shared.stats()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handoff between a queue's thread and the engine, with far fewer
    /// buffers than frames so the thread keeps running out: every frame
    /// arrives once and in order, the engine never sleeps through a frame
    /// handed to it (its wait on `ready` would time out) and the thread
    /// never sleeps through a buffer given back (its wait would time out).
    /// Checked against the code broken: without the wake-up of a starved
    /// thread it fails every run; with both of the engine's guards against
    /// a lost `ready` (the look after the drain, `keep_awake`) removed, in
    /// two runs of six (the race is narrow; either guard alone covers it).
    #[test]
    fn every_frame_crosses_once_in_order_and_no_wake_up_is_lost() {
        const FRAMES: u64 = 200_000;
        const LONG: Duration = Duration::from_secs(5);
        let s = Shared::new(1, 8, 64).expect("eventfds");
        // The thread slept through a buffer given back, and stopped.
        let gave_up = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let thread = scope.spawn(|| {
                let mut rng = mcast_proto::Rng::new(7);
                let (mut batch, mut handed, mut timeouts) = (0u64, 0u64, 0u64);
                let limit = |rng: &mut mcast_proto::Rng| rng.range(1, 40);
                let mut burst = limit(&mut rng);
                while handed < FRAMES {
                    if s.hand(&handed.to_le_bytes()) {
                        handed += 1;
                        batch += 1;
                        if batch < burst && handed < FRAMES {
                            continue;
                        }
                    }
                    // A batch ends, or no buffer is free.
                    s.handed(batch);
                    batch = 0;
                    burst = limit(&mut rng);
                    if s.free.is_empty() && handed < FRAMES && !s.wait_for_room(LONG) {
                        timeouts += 1;
                        gave_up.store(true, Ordering::SeqCst);
                        let _ = sys::eventfd_signal(s.ready.as_raw_fd());
                        break;
                    }
                }
                timeouts
            });
            let mut next = 0u64;
            let mut rng = mcast_proto::Rng::new(11);
            while next < FRAMES {
                let budget = rng.range(1, 16) as usize;
                let mut took = 0;
                while took < budget && s.waiting().expect("eventfd") {
                    let buf = s.next();
                    let got = u64::from_le_bytes(buf.bytes[..8].try_into().expect("8 bytes"));
                    assert_eq!((got, buf.len), (next, 8), "lost, repeated or reordered");
                    next += 1;
                    took += 1;
                    s.give_back(buf).expect("eventfd");
                }
                s.keep_awake();
                if gave_up.load(Ordering::SeqCst) {
                    break;
                }
                if took == 0 && next < FRAMES {
                    let ready = sys::ppoll_any(&[s.ready.as_raw_fd()], 4 * LONG).expect("ppoll");
                    assert!(ready > 0, "the engine slept through frame {next}");
                }
            }
            let timeouts = thread.join().expect("the thread");
            assert_eq!(timeouts, 0, "the thread slept through a buffer given back");
            assert_eq!(next, FRAMES);
        });
        assert_eq!(s.frames.load(Ordering::Relaxed), FRAMES);
        assert!(s.full.is_empty() && s.free.len() == 8, "every buffer back");
    }
}
