//! The AF_PACKET fallback: a raw socket bound to one interface and our
//! EtherType, with a [`FramePool`] of the same shape as a UMEM.
//!
//! What it does: `recv` reads frames with `recv(2)` straight into free pool
//! frames (the kernel's one copy, as in AF_XDP copy mode), keeps those
//! addressed to our MAC or a subscribed group and drops the rest (a packet
//! socket also sees frames for other hosts); `transmit` sends each frame with
//! `send(2)` and completes it at the next `reap`. Group MACs are added to the
//! interface's filter with PACKET_ADD_MEMBERSHIP. What it never does: it never
//! attaches XDP, never changes the interface's configuration beyond the
//! multicast filter of its own socket (released when the socket closes), and
//! never blocks except in `wait`.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use mcast_wire::MacAddr;

use super::pool::FramePool;
use super::{LossKnob, RxDesc, Transport, TransportCounts, TransportInfo, TxDesc};
use crate::sys;
use crate::EngineError;

/// Shape of the AF_PACKET transport.
#[derive(Clone, Debug)]
pub struct PacketConfig {
    pub frame_count: u32,
    pub frame_size: usize,
    /// Frames read per `recv` call at most (>= 32).
    pub batch: usize,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            frame_count: 4096,
            frame_size: 2048,
            batch: 64,
        }
    }
}

/// An AF_PACKET raw socket and its frame pool.
#[derive(Debug)]
pub struct PacketTransport {
    fd: OwnedFd,
    ifindex: u32,
    mac: MacAddr,
    groups: HashSet<MacAddr>,
    pool: FramePool,
    batch: usize,
    loss: LossKnob,
    /// Frames received for another host or an unsubscribed group, dropped.
    pub foreign_dropped: u64,
}

impl PacketTransport {
    /// Opens the socket on `ifname` (in the calling thread's network namespace).
    pub fn open(
        ifname: &str,
        ethertype: u16,
        config: PacketConfig,
    ) -> Result<PacketTransport, EngineError> {
        if config.batch < 32 {
            return Err(EngineError::Config(format!(
                "batch {} is below 32",
                config.batch
            )));
        }
        let ifindex =
            sys::if_index(ifname).ok_or_else(|| EngineError::NoSuchInterface(ifname.to_owned()))?;
        if !sys::has_capability(sys::CAP_NET_RAW) {
            return Err(EngineError::MissingCapability {
                operation: "opening an AF_PACKET socket",
                needed: "CAP_NET_RAW",
            });
        }
        let fd = sys::packet_socket(ifindex, ethertype).map_err(|e| EngineError::Io {
            operation: "opening the AF_PACKET socket",
            source: e,
        })?;
        let mac = MacAddr(sys::if_mac(ifname).map_err(|e| EngineError::Io {
            operation: "reading the interface's MAC (SIOCGIFHWADDR)",
            source: e,
        })?);
        Ok(PacketTransport {
            fd,
            ifindex,
            mac,
            groups: HashSet::new(),
            pool: FramePool::new(config.frame_count, config.frame_size),
            batch: config.batch,
            loss: LossKnob::new(u64::from(ifindex) ^ 0x9e37_79b9_7f4a_7c15),
            foreign_dropped: 0,
        })
    }

    /// Frames dropped by the loss knob.
    pub fn injected_drops(&self) -> u64 {
        self.loss.dropped
    }
}

impl Transport for PacketTransport {
    fn info(&self) -> TransportInfo {
        TransportInfo {
            kind: "af_packet",
            attach_mode: None,
            attach_fallback: None,
            bind_mode: None,
            zero_copy_refused: None,
        }
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn frame_size(&self) -> usize {
        self.pool.frame_size()
    }

    fn frame_count(&self) -> u32 {
        self.pool.counts().total
    }

    fn subscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        sys::packet_add_membership(self.fd.as_raw_fd(), self.ifindex, mac.0).map_err(|e| {
            EngineError::Io {
                operation: "adding a group MAC to the interface (PACKET_ADD_MEMBERSHIP)",
                source: e,
            }
        })?;
        self.groups.insert(mac);
        Ok(())
    }

    fn unsubscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        if self.groups.remove(&mac) {
            sys::packet_drop_membership(self.fd.as_raw_fd(), self.ifindex, mac.0).map_err(|e| {
                EngineError::Io {
                    operation: "removing a group MAC from the interface (PACKET_DROP_MEMBERSHIP)",
                    source: e,
                }
            })?;
        }
        Ok(())
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn recv(&mut self, out: &mut Vec<RxDesc>) -> Result<usize, EngineError> {
        let mut n = 0;
        while n < self.batch {
            let Some(f) = self.pool.alloc() else { break };
            let got = sys::recv_nonblocking(self.fd.as_raw_fd(), self.pool.frame_mut(f));
            let len = match got {
                Ok(Some(len)) => len,
                Ok(None) => {
                    self.pool.release(f);
                    break;
                }
                Err(e) => {
                    self.pool.release(f);
                    return Err(EngineError::Io {
                        operation: "recv on the AF_PACKET socket",
                        source: e,
                    });
                }
            };
            let bytes = self.pool.frame(f);
            let mut dst = [0u8; 6];
            let mut src = [0u8; 6];
            if len >= 12 {
                dst.copy_from_slice(&bytes[..6]);
                src.copy_from_slice(&bytes[6..12]);
            }
            let (dst, src) = (MacAddr(dst), MacAddr(src));
            let ours =
                len >= 12 && src != self.mac && (dst == self.mac || self.groups.contains(&dst));
            if !ours {
                self.foreign_dropped += 1;
                self.pool.release(f);
                continue;
            }
            if self.loss.drop_this() {
                self.pool.release(f);
                continue;
            }
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
        let mut n = 0;
        for t in batch {
            let sent = sys::send_frame(
                self.fd.as_raw_fd(),
                &self.pool.frame(t.frame)[..t.len as usize],
            )
            .map_err(|e| EngineError::Io {
                operation: "send on the AF_PACKET socket",
                source: e,
            })?;
            if !sent {
                break;
            }
            self.pool.mark_sent(t.frame, keep);
            n += 1;
        }
        Ok(n)
    }

    fn reap(&mut self, kept: &mut Vec<u32>) -> Result<(), EngineError> {
        self.pool.reap(kept);
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), EngineError> {
        sys::ppoll_readable(self.fd.as_raw_fd(), timeout).map_err(|e| EngineError::Io {
            operation: "poll on the AF_PACKET socket",
            source: e,
        })?;
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
