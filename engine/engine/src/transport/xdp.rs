//! The AF_XDP transport: the XDP steering program on one interface and one
//! AF_XDP socket on one of its queues, its UMEM being the engine's frame pool.
//!
//! What it does: [`XdpTransport::open`] attaches the steering program
//! (`mcast_xsk::XdpSteering`) in the asked mode, opens the socket
//! (`mcast_xsk::XskSocket`) with the asked zero-copy policy, registers it for
//! its queue and reports both modes in [`Transport::info`]. Frames sent with
//! `keep` come back to the engine on completion (`XskSocket::transmit_keep`),
//! so a retransmission buffer is put on the wire without being given up.
//! What it never does: it never falls back from native to SKB XDP or from
//! zero-copy to copy mode unless the configuration allows it, and then it
//! says so (stderr and `info`); it never touches another interface.

use std::os::fd::RawFd;
use std::time::Duration;

use mcast_wire::MacAddr;
use mcast_xsk::{
    AttachMode, RxFrame, SocketStats, SteeringCounters, TxFrame, XdpSteering, XskConfig, XskSocket,
    ZeroCopy,
};

use super::{RxDesc, Transport, TransportCounts, TransportInfo, TxDesc};
use crate::sys;
use crate::EngineError;

/// How to attach and bind.
#[derive(Clone, Debug)]
pub struct XdpConfig {
    /// The interface queue to bind (the steering program redirects each
    /// queue to its own socket; one engine thread per queue).
    pub queue: u32,
    /// Native, SKB, or native with a reported fallback to SKB.
    pub attach: AttachMode,
    /// UMEM and ring sizes, zero-copy policy.
    pub xsk: XskConfig,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            queue: 0,
            attach: AttachMode::Skb,
            xsk: XskConfig::default(),
        }
    }
}

/// AF_XDP socket plus steering program. Field order is drop order: the
/// socket leaves the XSKMAP before the program is detached.
#[derive(Debug)]
pub struct XdpTransport {
    xsk: XskSocket,
    steering: XdpSteering,
    mac: MacAddr,
    rx: Vec<RxFrame>,
    tx: Vec<TxFrame>,
    /// Kept frames whose completion the socket has reaped (it does so inside
    /// every transmit) but that the engine has not collected with `reap` yet.
    /// The socket counts them `Held`; to the engine they are still in the
    /// completion stage, and [`Transport::counts`] reports them as `tx`.
    completed: Vec<u32>,
}

impl XdpTransport {
    /// Attaches to `ifname` and opens the socket (in the calling thread's
    /// network namespace). Errors from the loader and the socket pass through
    /// unchanged: each names what is missing and what to do.
    pub fn open(
        ifname: &str,
        ethertype: u16,
        config: XdpConfig,
    ) -> Result<XdpTransport, EngineError> {
        if sys::if_index(ifname).is_none() {
            return Err(EngineError::NoSuchInterface(ifname.to_owned()));
        }
        let mac = MacAddr(sys::if_mac(ifname).map_err(|e| EngineError::Io {
            operation: "reading the interface's MAC (SIOCGIFHWADDR)",
            source: e,
        })?);
        let mut steering = XdpSteering::attach(ifname, ethertype, mac, config.attach)?;
        let xsk = XskSocket::open(ifname, config.queue, config.xsk.clone())?;
        if let Some(why) = xsk.zero_copy_refused() {
            eprintln!("mcast-engine: {why} (ZeroCopy::Preferred allowed the fallback)");
        }
        if config.xsk.zero_copy == ZeroCopy::Required && xsk.mode() != mcast_xsk::BindMode::ZeroCopy
        {
            return Err(EngineError::Config(
                "zero-copy required but the socket is in copy mode".into(),
            ));
        }
        steering.register_socket(config.queue, &xsk)?;
        let batch = config.xsk.batch as usize;
        Ok(XdpTransport {
            xsk,
            steering,
            mac,
            rx: Vec::with_capacity(batch),
            tx: Vec::with_capacity(batch),
            completed: Vec::new(),
        })
    }

    /// The socket, for its own counters.
    pub fn socket(&self) -> &XskSocket {
        &self.xsk
    }

    /// The steering program's handle.
    pub fn steering(&self) -> &XdpSteering {
        &self.steering
    }

    /// Has the steering program redirect queue `queue` to `socket` (another
    /// queue's socket, served by its own thread).
    pub fn register_queue(&mut self, queue: u32, socket: &XskSocket) -> Result<(), EngineError> {
        Ok(self.steering.register_socket(queue, socket)?)
    }

    /// Stops redirecting queue `queue` (its frames go on to the kernel).
    pub fn unregister_queue(&mut self, queue: u32) -> Result<(), EngineError> {
        Ok(self.steering.unregister_socket(queue)?)
    }
}

impl Transport for XdpTransport {
    fn info(&self) -> TransportInfo {
        TransportInfo {
            kind: "af_xdp",
            attach_mode: Some(self.steering.mode()),
            attach_fallback: self.steering.fallback_reason().map(str::to_owned),
            bind_mode: Some(self.xsk.mode()),
            zero_copy_refused: self.xsk.zero_copy_refused().map(str::to_owned),
        }
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }

    fn frame_size(&self) -> usize {
        self.xsk.config().frame_size as usize
    }

    fn frame_count(&self) -> u32 {
        self.xsk.config().frame_count
    }

    fn subscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        Ok(self.steering.subscribe(mac)?)
    }

    fn unsubscribe(&mut self, mac: MacAddr) -> Result<(), EngineError> {
        self.steering.unsubscribe(mac)?;
        Ok(())
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.xsk.fd())
    }

    fn recv(&mut self, out: &mut Vec<RxDesc>) -> Result<usize, EngineError> {
        self.rx.clear();
        let n = self.xsk.recv(&mut self.rx)?;
        out.extend(self.rx.iter().map(|r| RxDesc {
            frame: r.frame,
            offset: r.offset,
            len: r.len,
        }));
        Ok(n)
    }

    fn rx_waiting(&self) -> bool {
        self.xsk.rx_waiting()
    }

    fn alloc(&mut self) -> Option<u32> {
        self.xsk.alloc()
    }

    fn release(&mut self, frame: u32) {
        self.xsk
            .release([frame])
            .unwrap_or_else(|e| panic!("engine released a frame it does not hold: {e}"));
    }

    fn frame(&self, frame: u32) -> &[u8] {
        self.xsk
            .frame(frame)
            .unwrap_or_else(|| panic!("frame {frame} is not held by the engine"))
    }

    fn frame_mut(&mut self, frame: u32) -> &mut [u8] {
        self.xsk
            .frame_mut(frame)
            .unwrap_or_else(|| panic!("frame {frame} is not held by the engine"))
    }

    fn copy_between(&mut self, from: u32, to: u32, range: std::ops::Range<usize>) {
        self.xsk
            .copy_between(from, to, range.clone())
            .unwrap_or_else(|| panic!("copy of {range:?} from frame {from} to {to}: not both held"))
    }

    fn transmit(&mut self, batch: &[TxDesc], keep: bool) -> Result<usize, EngineError> {
        self.tx.clear();
        self.tx.extend(batch.iter().map(|t| TxFrame {
            frame: t.frame,
            offset: 0,
            len: t.len,
        }));
        let n = if keep {
            self.xsk.transmit_keep(&self.tx)?
        } else {
            self.xsk.transmit(&self.tx)?
        };
        self.xsk.take_returned(&mut self.completed);
        Ok(n)
    }

    fn reap(&mut self, kept: &mut Vec<u32>) -> Result<(), EngineError> {
        self.xsk.reap_completions()?;
        self.xsk.take_returned(&mut self.completed);
        kept.append(&mut self.completed);
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), EngineError> {
        if self.xsk.counts().rx_ready > 0 {
            return Ok(());
        }
        sys::ppoll_readable(self.xsk.fd(), timeout).map_err(|e| EngineError::Io {
            operation: "poll on the AF_XDP socket",
            source: e,
        })?;
        Ok(())
    }

    fn spare_frames(&self) -> (u32, u32) {
        self.xsk.spare_frames()
    }

    fn counts(&self) -> TransportCounts {
        let c = self.xsk.counts();
        let completed = self.completed.len() as u32;
        TransportCounts {
            total: c.total,
            free: c.free,
            fill: c.fill,
            held: c.held - completed,
            tx: c.tx + completed,
        }
    }

    fn check_conservation(&self) -> Result<TransportCounts, String> {
        self.xsk.check_conservation()?;
        Ok(self.counts())
    }

    fn set_drop_ratio(&mut self, ratio: f64) -> Result<(), EngineError> {
        Ok(self.steering.set_drop_ratio(ratio)?)
    }

    fn steering_counters(&self) -> Option<SteeringCounters> {
        self.steering.counters().ok()
    }

    fn socket_stats(&self) -> Option<SocketStats> {
        self.xsk.kernel_stats().ok()
    }
}
