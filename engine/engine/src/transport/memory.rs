//! An in-process Ethernet segment: several engines in one process exchange
//! frames through shared queues, with the addressing rules of a bridge
//! (unicast to the port with that MAC, group MACs to subscribed ports, never
//! back to the sender).
//!
//! What it does: [`MemorySegment::port`] creates a [`MemoryTransport`] with its
//! own [`FramePool`]; `transmit` copies each frame into the queues of the ports
//! that accept it (the way the kernel copies in AF_XDP copy mode); `recv`
//! copies queued frames into free pool frames. A port's queue is bounded
//! (`queue_frames`): frames beyond it are dropped and counted, like a full RX
//! ring. What it never does: it needs no privileges, performs no system I/O,
//! and never reorders frames between one sender and one receiver.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use mcast_wire::MacAddr;

use super::pool::FramePool;
use super::{LossKnob, RxDesc, Transport, TransportCounts, TransportInfo, TxDesc};
use crate::EngineError;

/// The shared medium. Clone the `Arc` to give it to each engine's thread.
#[derive(Debug, Default)]
pub struct MemorySegment {
    ports: Mutex<Vec<Arc<Port>>>,
}

#[derive(Debug)]
struct Port {
    mac: MacAddr,
    queue_frames: usize,
    inner: Mutex<PortQueue>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct PortQueue {
    frames: VecDeque<Vec<u8>>,
    groups: HashSet<MacAddr>,
    overflow_dropped: u64,
}

impl MemorySegment {
    pub fn new() -> Arc<MemorySegment> {
        Arc::new(MemorySegment::default())
    }

    /// A new port with MAC `mac` and a pool of `frame_count` frames of
    /// `frame_size` bytes; at most `queue_frames` frames wait in its queue.
    pub fn port(
        self: &Arc<Self>,
        mac: MacAddr,
        frame_count: u32,
        frame_size: usize,
        queue_frames: usize,
    ) -> MemoryTransport {
        let port = Arc::new(Port {
            mac,
            queue_frames,
            inner: Mutex::new(PortQueue::default()),
            ready: Condvar::new(),
        });
        self.ports.lock().expect("segment lock").push(port.clone());
        let seed = u64::from_be_bytes([
            0, 0, mac.0[0], mac.0[1], mac.0[2], mac.0[3], mac.0[4], mac.0[5],
        ]);
        MemoryTransport {
            segment: self.clone(),
            port,
            pool: FramePool::new(frame_count, frame_size),
            batch: 64,
            loss: LossKnob::new(seed),
        }
    }

    fn deliver(&self, from: &MacAddr, frame: &[u8]) {
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[..6]);
        let dst = MacAddr(dst);
        let ports = self.ports.lock().expect("segment lock");
        for p in ports.iter() {
            if p.mac == *from {
                continue;
            }
            let mut q = p.inner.lock().expect("port lock");
            let accepts = dst == p.mac || (dst.is_multicast() && q.groups.contains(&dst));
            if !accepts {
                continue;
            }
            if q.frames.len() >= p.queue_frames {
                q.overflow_dropped += 1;
                continue;
            }
            q.frames.push_back(frame.to_vec());
            p.ready.notify_one();
        }
    }
}

/// One port of a [`MemorySegment`].
#[derive(Debug)]
pub struct MemoryTransport {
    segment: Arc<MemorySegment>,
    port: Arc<Port>,
    pool: FramePool,
    batch: usize,
    loss: LossKnob,
}

impl MemoryTransport {
    /// Frames dropped because this port's queue was full.
    pub fn overflow_dropped(&self) -> u64 {
        self.port.inner.lock().expect("port lock").overflow_dropped
    }

    /// Frames dropped by the loss knob.
    pub fn injected_drops(&self) -> u64 {
        self.loss.dropped
    }
}

impl Transport for MemoryTransport {
    fn info(&self) -> TransportInfo {
        TransportInfo {
            kind: "memory",
            attach_mode: None,
            attach_fallback: None,
            bind_mode: None,
            zero_copy_refused: None,
        }
    }

    fn mac(&self) -> MacAddr {
        self.port.mac
    }

    fn frame_size(&self) -> usize {
        self.pool.frame_size()
    }

    fn frame_count(&self) -> u32 {
        self.pool.counts().total
    }

    fn subscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        self.port
            .inner
            .lock()
            .expect("port lock")
            .groups
            .insert(mac);
        Ok(())
    }

    fn unsubscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        self.port
            .inner
            .lock()
            .expect("port lock")
            .groups
            .remove(&mac);
        Ok(())
    }

    fn rx_waiting(&self) -> bool {
        !self.port.inner.lock().expect("port lock").frames.is_empty()
    }

    fn recv(&mut self, out: &mut Vec<RxDesc>) -> Result<usize, EngineError> {
        let mut n = 0;
        let mut q = self.port.inner.lock().expect("port lock");
        while n < self.batch {
            let Some(bytes) = q.frames.pop_front() else {
                break;
            };
            if self.loss.drop_this() {
                continue;
            }
            let Some(f) = self.pool.alloc() else {
                // No free frame: the frame is lost, as with an empty fill ring.
                q.overflow_dropped += 1;
                continue;
            };
            let len = bytes.len().min(self.pool.frame_size());
            self.pool.frame_mut(f)[..len].copy_from_slice(&bytes[..len]);
            out.push(RxDesc {
                frame: f,
                offset: 0,
                len: len as u32,
            });
            n += 1;
        }
        Ok(n)
    }

    fn alloc(&mut self) -> Option<u32> {
        self.pool.alloc()
    }

    fn release(&mut self, frame: u32) {
        self.pool.release(frame);
    }

    fn frame(&self, frame: u32) -> &[u8] {
        self.pool.frame(frame)
    }

    fn frame_mut(&mut self, frame: u32) -> &mut [u8] {
        self.pool.frame_mut(frame)
    }

    fn copy_between(&mut self, from: u32, to: u32, range: std::ops::Range<usize>) {
        self.pool.copy_between(from, to, range)
    }

    fn transmit(&mut self, batch: &[TxDesc], keep: bool) -> Result<usize, EngineError> {
        for t in batch {
            let bytes = &self.pool.frame(t.frame)[..t.len as usize];
            self.segment.deliver(&self.port.mac, bytes);
            self.pool.mark_sent(t.frame, keep);
        }
        Ok(batch.len())
    }

    fn reap(&mut self, kept: &mut Vec<u32>) -> Result<(), EngineError> {
        self.pool.reap(kept);
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), EngineError> {
        let q = self.port.inner.lock().expect("port lock");
        if q.frames.is_empty() {
            let _ = self.port.ready.wait_timeout(q, timeout).expect("port lock");
        }
        Ok(())
    }

    fn counts(&self) -> TransportCounts {
        self.pool.counts()
    }

    fn check_conservation(&self) -> Result<TransportCounts, String> {
        self.pool.check_conservation()
    }

    fn set_drop_ratio(&mut self, ratio: f64) -> Result<(), EngineError> {
        self.loss.set(ratio)
    }
}
