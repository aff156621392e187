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
        let n = buffers(config);
        let frame_size = config.xsk.frame_size as usize;
        let free = ArrayQueue::new(n);
        for _ in 0..n {
            free.push(Handoff {
                len: 0,
                bytes: vec![0; frame_size].into_boxed_slice(),
            })
            .expect("the queue holds n buffers");
        }
        let io = |operation| move |source| EngineError::Io { operation, source };
        let shared = Arc::new(Shared {
            queue: e.queue,
            full: ArrayQueue::new(n),
            free,
            ready: sys::eventfd().map_err(io("creating a queue's eventfd"))?,
            wake: sys::eventfd().map_err(io("creating a queue's eventfd"))?,
            signalled: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            starved_now: AtomicBool::new(false),
            frames: AtomicU64::new(0),
            starved: AtomicU64::new(0),
            kernel: Default::default(),
        });
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

    /// The queue-0 transport (steering program, its socket's counters).
    pub fn main(&self) -> &XdpTransport {
        &self.main
    }

    /// Moves frames the queues' threads handed over into frames of the
    /// engine's pool, at most `budget`.
    fn take_handed(&mut self, out: &mut Vec<RxDesc>, budget: usize) -> Result<usize, EngineError> {
        let mut n = 0;
        for w in &self.workers {
            let s = &w.shared;
            while n < budget {
                if s.full.is_empty() {
                    // Drained before the last look: a push after that look
                    // signals again, so the engine's wait sees it.
                    if !s.signalled.swap(false, Ordering::SeqCst) {
                        break;
                    }
                    sys::eventfd_drain(s.ready.as_raw_fd()).map_err(|source| EngineError::Io {
                        operation: "reading a queue's eventfd",
                        source,
                    })?;
                    continue;
                }
                let Some(frame) = self.main.alloc() else {
                    break;
                };
                // One consumer (this thread), so a queue seen non-empty pops.
                let buf = s.full.pop().expect("a non-empty queue pops");
                let len = buf.len as usize;
                self.main.frame_mut(frame)[..len].copy_from_slice(&buf.bytes[..len]);
                out.push(RxDesc {
                    frame,
                    offset: 0,
                    len: buf.len,
                });
                n += 1;
                if s.free.push(buf).is_err() {
                    unreachable!("buffers return to the queue they came from");
                }
                if s.starved_now.swap(false, Ordering::SeqCst) {
                    sys::eventfd_signal(s.wake.as_raw_fd()).map_err(|source| EngineError::Io {
                        operation: "waking a queue's thread",
                        source,
                    })?;
                }
            }
            if !s.full.is_empty() && !s.signalled.swap(true, Ordering::SeqCst) {
                // Left for the next batch: keep the engine's wait awake.
                let _ = sys::eventfd_signal(s.ready.as_raw_fd());
            }
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
            let Some(mut buf) = s.free.pop() else {
                break;
            };
            let packet = xsk.packet(r).expect("a received frame is held");
            buf.bytes[..packet.len()].copy_from_slice(packet);
            buf.len = r.len;
            if s.full.push(buf).is_err() {
                unreachable!("the full queue holds every buffer");
            }
            let _ = xsk.release([r.frame]);
            taken.pop_front();
            handed += 1;
        }
        if handed > 0 {
            s.frames.fetch_add(handed, Ordering::Relaxed);
            if !s.signalled.swap(true, Ordering::SeqCst) {
                let _ = sys::eventfd_signal(s.ready.as_raw_fd());
            }
        }
        if slept {
            let _ = sys::eventfd_drain(wake);
        }
        if !taken.is_empty() {
            // Every buffer is with the engine: wait until it returns some.
            s.starved_now.store(true, Ordering::SeqCst);
            if s.free.is_empty() {
                s.starved.fetch_add(1, Ordering::Relaxed);
                let _ = sys::ppoll_any(&[wake], IDLE_WAIT);
                let _ = sys::eventfd_drain(wake);
            }
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
