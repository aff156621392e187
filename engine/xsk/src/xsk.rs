//! One AF_XDP socket on (interface, queue) with its own UMEM and four rings,
//! built on `xdpilone`, with exact frame accounting.
//!
//! What it does: allocates a page-aligned UMEM of `frame_count` frames,
//! creates the fill, completion, RX and TX rings, binds in copy mode (or
//! zero-copy when configured), keeps the fill ring topped up from a free list,
//! hands received frames to the caller as `(frame index, offset, len)`,
//! transmits caller-filled frames and returns completed ones to the free list.
//!
//! Frame accounting: every UMEM frame is in exactly one [`FrameState`]:
//! `Free` (our free list, which doubles as the fill ring's stash), `Fill`
//! (given to the kernel for RX, possibly already in the RX ring), `Held` (owned
//! by the caller after [`XskSocket::recv`] or [`XskSocket::alloc`]), or `Tx`
//! (given to the kernel for TX, possibly already in the completion ring).
//! A frame sent with [`XskSocket::transmit_keep`] goes `Tx` -> `Held` on
//! completion (listed by [`XskSocket::take_returned`]) instead of `Free`: the
//! engine's retransmission buffers leave and come back without being freed.
//! Each transition checks the frame's previous state, so a frame the kernel
//! returns twice or a caller releases twice is caught, and
//! [`XskSocket::check_conservation`] checks the totals.
//!
//! What it never does: it never lets the caller see the bytes of a frame the
//! kernel owns (accessors return `None` unless the frame is `Held`); it never
//! falls back from zero-copy to copy unless [`ZeroCopy::Preferred`] allows it,
//! and then [`XskSocket::zero_copy_refused`] says so; it never blocks except
//! in [`XskSocket::poll_rx`].
//!
//! The caller must register [`XskSocket::fd`] in the steering program's XSKMAP
//! ([`crate::XdpSteering::register_socket`]) for frames to arrive.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fmt;
use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, RawFd};

use xdpilone::xdp::XdpDesc;
use xdpilone::{
    BufIdx, DeviceQueue, IfInfo, RingRx, RingTx, Socket, SocketConfig, Umem, UmemConfig,
};

use crate::sys::{self, cap, AnonMap};

/// Smallest RX batch [`XskSocket::recv`] reads at once.
pub const MIN_BATCH: u32 = 32;

/// Whether to ask for zero-copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Copy mode (the only mode veth supports).
    Off,
    /// Zero-copy or fail.
    Required,
    /// Try zero-copy; if the driver refuses with EOPNOTSUPP, use copy mode and
    /// report it through [`XskSocket::zero_copy_refused`].
    Preferred,
}

/// The mode the socket is bound in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindMode {
    /// The kernel copies frames between its buffers and the UMEM.
    Copy,
    /// The NIC DMAs straight into the UMEM.
    ZeroCopy,
}

/// Configuration of one socket. All sizes are fixed at construction.
#[derive(Clone, Debug)]
pub struct XskConfig {
    /// Frames in the UMEM. About twice `ring_size` leaves a stash for refills.
    pub frame_count: u32,
    /// Bytes per frame: 2048 or 4096.
    pub frame_size: u32,
    /// Entries in each of the fill, completion, RX and TX rings (power of two).
    pub ring_size: u32,
    /// Largest number of frames [`XskSocket::recv`] returns at once (>= 32).
    pub batch: u32,
    /// Zero-copy policy.
    pub zero_copy: ZeroCopy,
}

impl Default for XskConfig {
    fn default() -> XskConfig {
        XskConfig {
            frame_count: 4096,
            frame_size: 2048,
            ring_size: 2048,
            batch: 64,
            zero_copy: ZeroCopy::Off,
        }
    }
}

/// A received frame: UMEM frame `frame`, packet bytes at `offset..offset+len`
/// within it. Owned by the caller until released or transmitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxFrame {
    /// UMEM frame index.
    pub frame: u32,
    /// Offset of the packet inside the frame (the kernel's headroom).
    pub offset: u32,
    /// Packet length in bytes.
    pub len: u32,
}

/// A frame to transmit: `len` bytes at `offset` inside UMEM frame `frame`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFrame {
    /// UMEM frame index (must be `Held`).
    pub frame: u32,
    /// Offset of the packet inside the frame.
    pub offset: u32,
    /// Packet length in bytes.
    pub len: u32,
}

/// Where one UMEM frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameState {
    /// On our free list (the fill stash).
    Free,
    /// Given to the kernel through the fill ring (or waiting in the RX ring).
    Fill,
    /// Owned by the caller.
    Held,
    /// Given to the kernel through the TX ring (or waiting in the completion ring).
    Tx,
}

/// How many frames are in each place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCounts {
    /// Frames in the UMEM.
    pub total: u32,
    /// On the free list.
    pub free: u32,
    /// Owned by the kernel for RX (fill ring, device, RX ring).
    pub fill: u32,
    /// Of `fill`: already in the RX ring, waiting to be read.
    pub rx_ready: u32,
    /// Owned by the caller.
    pub held: u32,
    /// Owned by the kernel for TX (TX ring, device, completion ring).
    pub tx: u32,
    /// Of `tx`: already in the completion ring, waiting to be reaped.
    pub completion_ready: u32,
}

/// The kernel's own counters of one socket (`getsockopt(XDP_STATISTICS)`):
/// frames lost between the XDP redirect and our RX ring, invisible to the
/// steering program's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Frames dropped by the socket for any reason (e.g. no fill-ring frame).
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty when it needed a frame.
    pub rx_fill_ring_empty: u64,
    /// Times the kernel found the TX ring empty when kicked.
    pub tx_ring_empty: u64,
}

/// Errors of the AF_XDP socket; each message says what to do.
#[derive(Debug)]
pub enum XskError {
    /// No interface of that name in this network namespace.
    NoSuchInterface(String),
    /// AF_XDP sockets need CAP_NET_RAW.
    MissingCapability,
    /// UMEM registration refused: RLIMIT_MEMLOCK too low.
    MemlockTooLow {
        /// UMEM size asked for.
        umem_bytes: u64,
        /// Soft limit in force.
        limit_bytes: u64,
    },
    /// Zero-copy required but the driver refused (EOPNOTSUPP).
    ZeroCopyUnsupported(String),
    /// A configuration value is out of range.
    InvalidConfig(String),
    /// A syscall failed.
    Syscall {
        /// What was being done.
        operation: &'static str,
        /// errno.
        errno: i32,
    },
    /// The frame is not in the state the operation needs (a caller bug).
    BadFrame {
        /// Frame index.
        frame: u32,
        /// Its state (None: out of range).
        state: Option<FrameState>,
        /// What was being done.
        operation: &'static str,
    },
}

impl fmt::Display for XskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XskError::NoSuchInterface(name) => write!(
                f,
                "interface `{name}` does not exist in this network namespace; check `ip link show`"
            ),
            XskError::MissingCapability => write!(
                f,
                "opening an AF_XDP socket needs CAP_NET_RAW (and CAP_NET_ADMIN, CAP_BPF for the steering program); run as root or `setcap cap_net_raw,cap_net_admin,cap_bpf,cap_ipc_lock+ep BINARY`"
            ),
            XskError::MemlockTooLow { umem_bytes, limit_bytes } => write!(
                f,
                "registering a {umem_bytes}-byte UMEM failed: RLIMIT_MEMLOCK is {limit_bytes} bytes; raise it with `ulimit -l unlimited`, `LimitMEMLOCK=infinity` (systemd) or /etc/security/limits.conf, grant CAP_IPC_LOCK, or use fewer/smaller frames"
            ),
            XskError::ZeroCopyUnsupported(name) => write!(
                f,
                "the driver of `{name}` refused zero-copy AF_XDP (EOPNOTSUPP; veth never supports it); use ZeroCopy::Off or ZeroCopy::Preferred"
            ),
            XskError::InvalidConfig(s) => write!(f, "invalid AF_XDP configuration: {s}"),
            XskError::Syscall { operation, errno } => write!(
                f,
                "{operation} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            XskError::BadFrame { frame, state, operation } => {
                write!(f, "{operation}: frame {frame} is in state {state:?}")
            }
        }
    }
}

impl std::error::Error for XskError {}

/// An AF_XDP socket bound to one interface queue, with its own UMEM.
pub struct XskSocket {
    // Field order is drop order: rings and sockets before the UMEM, the UMEM
    // registration before the memory it points into.
    rx: RingRx,
    tx: RingTx,
    device: DeviceQueue,
    umem: Umem,
    area: AnonMap,
    config: XskConfig,
    ifname: String,
    queue: u32,
    mode: BindMode,
    zero_copy_refused: Option<String>,
    state: Vec<FrameState>,
    /// Per frame: return it to the caller (`Held`) instead of the free list
    /// when its transmission completes ([`XskSocket::transmit_keep`]).
    keep: Vec<bool>,
    /// Kept frames whose transmission completed, not yet taken by the caller.
    returned: Vec<u32>,
    free: Vec<u32>,
    counts: FrameCounts,
}

// SAFETY: `XskSocket` owns its UMEM mapping and all ring mappings exclusively;
// no other handle to them exists in this process, so moving the whole set to
// another thread is sound. (`xdpilone::Umem` is not `Send` only because it
// holds a raw pointer to the area.)
unsafe impl Send for XskSocket {}

impl fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XskSocket")
            .field("ifname", &self.ifname)
            .field("queue", &self.queue)
            .field("mode", &self.mode)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl XskSocket {
    /// Opens and binds a socket on `ifname` queue `queue` (in the calling
    /// thread's network namespace) and fills the fill ring.
    pub fn open(ifname: &str, queue: u32, config: XskConfig) -> Result<XskSocket, XskError> {
        validate(&config)?;
        match config.zero_copy {
            ZeroCopy::Off => Self::open_with(ifname, queue, config, BindMode::Copy),
            ZeroCopy::Required => Self::open_with(ifname, queue, config, BindMode::ZeroCopy),
            ZeroCopy::Preferred => {
                match Self::open_with(ifname, queue, config.clone(), BindMode::ZeroCopy) {
                    Err(XskError::ZeroCopyUnsupported(_)) => {
                        let mut s = Self::open_with(ifname, queue, config, BindMode::Copy)?;
                        s.zero_copy_refused =
                        Some(format!("driver of `{ifname}` refused zero-copy (EOPNOTSUPP); bound in copy mode"));
                        Ok(s)
                    }
                    other => other,
                }
            }
        }
    }

    fn open_with(
        ifname: &str,
        queue: u32,
        config: XskConfig,
        mode: BindMode,
    ) -> Result<XskSocket, XskError> {
        let c_name = CString::new(ifname)
            .map_err(|_| XskError::InvalidConfig("interface name has a NUL".into()))?;
        if sys::if_nametoindex(&c_name).is_none() {
            return Err(XskError::NoSuchInterface(ifname.to_owned()));
        }
        if !sys::has_capability(cap::NET_RAW) {
            return Err(XskError::MissingCapability);
        }
        let umem_bytes = u64::from(config.frame_count) * u64::from(config.frame_size);
        // Best effort: the registration below reports if it was not enough.
        let _ = sys::raise_memlock(umem_bytes + (16 << 20));

        let area = AnonMap::new(umem_bytes as usize).map_err(|e| XskError::Syscall {
            operation: "mmap of the UMEM area",
            errno: e.raw_os_error().unwrap_or(0),
        })?;
        let umem_config = UmemConfig {
            fill_size: config.ring_size,
            complete_size: config.ring_size,
            frame_size: config.frame_size,
            headroom: 0,
            flags: 0,
        };
        // SAFETY: `area` is page-aligned (mmap), exactly `umem_bytes` long, and
        // outlives `umem`: both live in the returned `XskSocket`, where `umem`
        // is declared (and so dropped) before `area`.
        let umem =
            unsafe { Umem::new(umem_config, area.as_raw_slice()) }.map_err(|e| {
                match errno(&e) {
                    libc::EPERM if !sys::has_capability(cap::NET_RAW) => {
                        XskError::MissingCapability
                    }
                    libc::EAFNOSUPPORT => XskError::Syscall {
                        operation: "socket(AF_XDP) (kernel without CONFIG_XDP_SOCKETS?)",
                        errno: libc::EAFNOSUPPORT,
                    },
                    libc::ENOBUFS | libc::ENOMEM | libc::EPERM => XskError::MemlockTooLow {
                        umem_bytes,
                        limit_bytes: sys::memlock_limit().map(|(c, _)| c).unwrap_or(0),
                    },
                    n => XskError::Syscall {
                        operation: "registering the UMEM",
                        errno: n,
                    },
                }
            })?;

        let mut info = IfInfo::invalid();
        info.from_name(&c_name).map_err(|e| XskError::Syscall {
            operation: "looking up the interface",
            errno: errno(&e),
        })?;
        info.set_queue(queue);
        let sock = Socket::with_shared(&info, &umem).map_err(|e| XskError::Syscall {
            operation: "creating the AF_XDP socket",
            errno: errno(&e),
        })?;
        let device = umem.fq_cq(&sock).map_err(|e| XskError::Syscall {
            operation: "creating the fill and completion rings",
            errno: errno(&e),
        })?;
        let ring = NonZeroU32::new(config.ring_size);
        let mode_flag = match mode {
            BindMode::Copy => SocketConfig::XDP_BIND_COPY,
            BindMode::ZeroCopy => SocketConfig::XDP_BIND_ZEROCOPY,
        };
        let user = umem
            .rx_tx(
                &sock,
                &SocketConfig {
                    rx_size: ring,
                    tx_size: ring,
                    bind_flags: mode_flag | SocketConfig::XDP_BIND_NEED_WAKEUP,
                },
            )
            .map_err(|e| XskError::Syscall {
                operation: "creating the RX and TX rings",
                errno: errno(&e),
            })?;
        let rx = user.map_rx().map_err(|e| XskError::Syscall {
            operation: "mapping the RX ring",
            errno: errno(&e),
        })?;
        let tx = user.map_tx().map_err(|e| XskError::Syscall {
            operation: "mapping the TX ring",
            errno: errno(&e),
        })?;
        umem.bind(&user).map_err(|e| match (errno(&e), mode) {
            (libc::EOPNOTSUPP, BindMode::ZeroCopy) => {
                XskError::ZeroCopyUnsupported(ifname.to_owned())
            }
            (n, _) => XskError::Syscall {
                operation: "binding the AF_XDP socket to the interface queue",
                errno: n,
            },
        })?;

        let total = config.frame_count;
        let mut s = XskSocket {
            rx,
            tx,
            device,
            umem,
            area,
            ifname: ifname.to_owned(),
            queue,
            mode,
            zero_copy_refused: None,
            state: vec![FrameState::Free; total as usize],
            keep: vec![false; total as usize],
            returned: Vec::new(),
            // Popped from the back: hand out low indices first.
            free: (0..total).rev().collect(),
            counts: FrameCounts {
                total,
                free: total,
                ..FrameCounts::default()
            },
            config,
        };
        s.refill();
        Ok(s)
    }

    /// The socket's file descriptor, for the XSKMAP and for `poll`.
    pub fn fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// The mode the socket is bound in.
    pub fn mode(&self) -> BindMode {
        self.mode
    }

    /// Set when zero-copy was preferred but refused and copy mode is in use.
    pub fn zero_copy_refused(&self) -> Option<&str> {
        self.zero_copy_refused.as_deref()
    }

    /// Whether received frames wait in the RX ring (an advisory, relaxed
    /// read of the kernel's producer index: [`XskSocket::recv`] reads them).
    pub fn rx_waiting(&self) -> bool {
        self.rx.available() > 0
    }

    /// The interface queue this socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The configuration in force.
    pub fn config(&self) -> &XskConfig {
        &self.config
    }

    /// Moves frames from the free list to the fill ring, as many as the ring
    /// accepts now (the kernel publishes its consumer index lazily, so this may
    /// be fewer than were just received; the rest wait on the free list).
    /// Returns how many were given. Keeps `frame_count / 8` frames back for TX.
    pub fn refill(&mut self) -> u32 {
        let reserve_for_tx = (self.config.frame_count / 8) as usize;
        let avail = self.free.len().saturating_sub(reserve_for_tx) as u32;
        if avail == 0 {
            return 0;
        }
        let mut writer = self.device.fill(avail);
        let cap = writer.capacity() as usize;
        let start = self.free.len() - cap;
        let given = writer.insert(
            self.free[start..]
                .iter()
                .map(|&f| u64::from(f) * u64::from(self.config.frame_size)),
        );
        writer.commit();
        drop(writer);
        debug_assert_eq!(given as usize, cap);
        for f in self.free.drain(start..) {
            let st = &mut self.state[f as usize];
            assert_eq!(
                *st,
                FrameState::Free,
                "free list held frame {f} in state {st:?}"
            );
            *st = FrameState::Fill;
        }
        self.counts.free -= given;
        self.counts.fill += given;
        given
    }

    /// Waits up to `timeout_ms` for the RX ring to have frames.
    pub fn poll_rx(&mut self, timeout_ms: i32) -> Result<bool, XskError> {
        if self.rx.available() > 0 {
            return Ok(true);
        }
        sys::poll_readable(self.fd(), timeout_ms).map_err(|e| XskError::Syscall {
            operation: "poll on the AF_XDP socket",
            errno: e.raw_os_error().unwrap_or(0),
        })
    }

    /// Reads up to `batch` received frames into `out` (appending) and refills
    /// the fill ring. The frames become `Held` by the caller.
    pub fn recv(&mut self, out: &mut Vec<RxFrame>) -> Result<usize, XskError> {
        let frame_size = u64::from(self.config.frame_size);
        let mut reader = self.rx.receive(self.config.batch);
        let mut n = 0;
        let mut bad = None;
        while let Some(desc) = reader.read() {
            let frame = (desc.addr / frame_size) as u32;
            let offset = (desc.addr % frame_size) as u32;
            match self.state.get_mut(frame as usize) {
                Some(st @ FrameState::Fill) => *st = FrameState::Held,
                other => {
                    bad.get_or_insert(XskError::BadFrame {
                        frame,
                        state: other.map(|s| *s),
                        operation: "kernel returned on RX a frame not given to the fill ring",
                    });
                    continue;
                }
            }
            out.push(RxFrame {
                frame,
                offset,
                len: desc.len,
            });
            n += 1;
        }
        reader.release();
        drop(reader);
        self.counts.fill -= n as u32;
        self.counts.held += n as u32;
        self.refill();
        match bad {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Takes a frame off the free list for the caller to fill and transmit.
    pub fn alloc(&mut self) -> Option<u32> {
        let f = self.free.pop()?;
        self.transition(f, FrameState::Free, FrameState::Held, "alloc")
            .ok()?;
        Some(f)
    }

    /// Returns `Held` frames to the free list. The fill ring is topped up
    /// from it by the next [`XskSocket::recv`], in one batch (one producer
    /// update for a whole RX batch's frames instead of one per frame), or
    /// here at once if the kernel holds less than a quarter ring of frames.
    pub fn release(&mut self, frames: impl IntoIterator<Item = u32>) -> Result<(), XskError> {
        for f in frames {
            self.transition(f, FrameState::Held, FrameState::Free, "release")?;
            self.free.push(f);
        }
        if self.counts.fill < self.config.ring_size / 4 {
            self.refill();
        }
        Ok(())
    }

    /// The whole UMEM frame `frame`, if the caller holds it.
    pub fn frame(&self, frame: u32) -> Option<&[u8]> {
        let chunk = self.held_chunk(frame)?;
        // SAFETY: the frame is `Held`, so the kernel neither reads nor writes
        // it until we put it on a ring, which needs `&mut self`; the chunk is
        // inside the live UMEM mapping and `frame_size` bytes long.
        Some(unsafe { chunk.as_ref() })
    }

    /// The whole UMEM frame `frame`, writable, if the caller holds it.
    pub fn frame_mut(&mut self, frame: u32) -> Option<&mut [u8]> {
        let mut chunk = self.held_chunk(frame)?;
        // SAFETY: as in `frame`, and `&mut self` makes this the only reference.
        Some(unsafe { chunk.as_mut() })
    }

    /// Copies `range` of held frame `from` to the same range of held frame
    /// `to` (one copy, no bounce buffer). None if either frame is not held,
    /// they are the same frame, or the range does not fit a frame.
    pub fn copy_between(
        &mut self,
        from: u32,
        to: u32,
        range: std::ops::Range<usize>,
    ) -> Option<()> {
        if from == to || range.start > range.end || range.end > self.config.frame_size as usize {
            return None;
        }
        let src = self.held_chunk(from)?;
        let dst = self.held_chunk(to)?;
        // SAFETY: both frames are `Held` (the kernel touches neither until we
        // put them on a ring, which needs `&mut self`, held here), they are
        // distinct frames of the live UMEM mapping, so the two ranges do not
        // overlap, and `range` lies within `frame_size`, the length of each chunk.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.cast::<u8>().as_ptr().add(range.start),
                dst.cast::<u8>().as_ptr().add(range.start),
                range.len(),
            );
        }
        Some(())
    }

    /// The packet bytes of a received frame, if the caller holds it.
    pub fn packet(&self, rx: &RxFrame) -> Option<&[u8]> {
        let start = rx.offset as usize;
        self.frame(rx.frame)?.get(start..start + rx.len as usize)
    }

    /// Puts `Held` frames on the TX ring, as many as fit, and kicks the kernel.
    /// Returns how many were queued; the rest stay `Held`. Also reaps completions.
    /// Completed frames go back to the free list.
    pub fn transmit(&mut self, batch: &[TxFrame]) -> Result<usize, XskError> {
        self.transmit_inner(batch, false)
    }

    /// Like [`XskSocket::transmit`], but each frame comes back to the caller
    /// (`Held` again) when its transmission completes, instead of going to the
    /// free list: a retransmission buffer is sent without giving it up. Take
    /// the completed frames with [`XskSocket::take_returned`].
    pub fn transmit_keep(&mut self, batch: &[TxFrame]) -> Result<usize, XskError> {
        self.transmit_inner(batch, true)
    }

    /// Appends to `out` the frames sent with [`XskSocket::transmit_keep`]
    /// whose transmission has completed since the last call (they are `Held`).
    pub fn take_returned(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.returned);
    }

    fn transmit_inner(&mut self, batch: &[TxFrame], keep: bool) -> Result<usize, XskError> {
        self.reap_completions()?;
        for t in batch {
            let ok = t
                .offset
                .checked_add(t.len)
                .is_some_and(|end| end <= self.config.frame_size);
            if !ok || t.len == 0 {
                return Err(XskError::InvalidConfig(format!(
                    "TX descriptor {t:?} does not fit a {}-byte frame",
                    self.config.frame_size
                )));
            }
            if self.state.get(t.frame as usize) != Some(&FrameState::Held) {
                return Err(XskError::BadFrame {
                    frame: t.frame,
                    state: self.state.get(t.frame as usize).copied(),
                    operation: "transmit",
                });
            }
        }
        let frame_size = u64::from(self.config.frame_size);
        let mut writer = self.tx.transmit(batch.len() as u32);
        let cap = (writer.capacity() as usize).min(batch.len());
        // Bounded by `cap` so the writer never consumes an item it cannot store.
        let n = writer.insert(batch[..cap].iter().map(|t| XdpDesc {
            addr: u64::from(t.frame) * frame_size + u64::from(t.offset),
            len: t.len,
            options: 0,
        })) as usize;
        writer.commit();
        drop(writer);
        for t in &batch[..n] {
            self.state[t.frame as usize] = FrameState::Tx;
            self.keep[t.frame as usize] = keep;
        }
        self.counts.held -= n as u32;
        self.counts.tx += n as u32;
        // Copy mode sends at most 32 frames per kick (PLATFORM.md).
        for _ in 0..n.div_ceil(32).max(1) {
            self.kick()?;
        }
        Ok(n)
    }

    /// Kicks the kernel to process the TX ring if anything is in flight.
    pub fn kick(&mut self) -> Result<(), XskError> {
        if self.counts.tx == 0 {
            return Ok(());
        }
        sys::kick_tx(self.fd()).map_err(|e| XskError::Syscall {
            operation: "sendto kick on the AF_XDP socket",
            errno: e.raw_os_error().unwrap_or(0),
        })
    }

    /// Moves completed TX frames back to the free list (or to the caller, for
    /// frames sent with [`XskSocket::transmit_keep`]). Returns how many.
    pub fn reap_completions(&mut self) -> Result<usize, XskError> {
        let frame_size = u64::from(self.config.frame_size);
        let mut reader = self.device.complete(self.config.ring_size);
        let mut n = 0;
        let mut kept = 0;
        let mut bad = None;
        while let Some(addr) = reader.read() {
            let frame = (addr / frame_size) as u32;
            match self.state.get_mut(frame as usize) {
                Some(st @ FrameState::Tx) if self.keep[frame as usize] => {
                    *st = FrameState::Held;
                    self.keep[frame as usize] = false;
                    self.returned.push(frame);
                    kept += 1;
                    continue;
                }
                Some(st @ FrameState::Tx) => *st = FrameState::Free,
                other => {
                    bad.get_or_insert(XskError::BadFrame {
                        frame,
                        state: other.map(|s| *s),
                        operation: "kernel completed a frame not on the TX ring",
                    });
                    continue;
                }
            }
            self.free.push(frame);
            n += 1;
        }
        reader.release();
        drop(reader);
        self.counts.tx -= (n + kept) as u32;
        self.counts.free += n as u32;
        self.counts.held += kept as u32;
        match bad {
            Some(e) => Err(e),
            None => Ok(n + kept),
        }
    }

    /// The kernel's counters of this socket (drops it saw that no ring shows).
    pub fn kernel_stats(&self) -> Result<SocketStats, XskError> {
        let st = self.device.statistics_v2().map_err(|e| XskError::Syscall {
            operation: "getsockopt(XDP_STATISTICS)",
            errno: errno(&e),
        })?;
        Ok(SocketStats {
            rx_dropped: st.rx_dropped,
            rx_ring_full: st.rx_ring_full,
            rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
            tx_ring_empty: st.tx_ring_empty_descs,
        })
    }

    /// Frames free or in the fill ring (by this socket's own accounting,
    /// without reading the rings), and all of them.
    pub fn spare_frames(&self) -> (u32, u32) {
        (self.counts.free + self.counts.fill, self.config.frame_count)
    }

    /// Where the frames are now.
    pub fn counts(&self) -> FrameCounts {
        FrameCounts {
            rx_ready: self.rx.available(),
            completion_ready: self.device.available(),
            ..self.counts
        }
    }

    /// The state of one frame (None if out of range).
    pub fn frame_state(&self, frame: u32) -> Option<FrameState> {
        self.state.get(frame as usize).copied()
    }

    /// Checks that every frame is in exactly one place: the per-frame states,
    /// the counters and the free list agree, and the kernel's rings hold no
    /// more than we gave them.
    pub fn check_conservation(&self) -> Result<FrameCounts, String> {
        let c = self.counts();
        let mut by_state = [0u32; 4];
        for st in &self.state {
            by_state[*st as usize] += 1;
        }
        let expect = [c.free, c.fill, c.held, c.tx];
        if by_state != expect {
            return Err(format!(
                "per-frame states {by_state:?} != counters [free, fill, held, tx] {expect:?}"
            ));
        }
        if c.free + c.fill + c.held + c.tx != c.total {
            return Err(format!("counts do not add up to {}: {c:?}", c.total));
        }
        if self.free.len() != c.free as usize {
            return Err(format!(
                "free list has {} frames, counter says {}",
                self.free.len(),
                c.free
            ));
        }
        if c.rx_ready > c.fill {
            return Err(format!(
                "RX ring shows {} frames but only {} were given",
                c.rx_ready, c.fill
            ));
        }
        if c.completion_ready > c.tx {
            return Err(format!(
                "completion ring shows {} frames but only {} were sent",
                c.completion_ready, c.tx
            ));
        }
        Ok(c)
    }

    fn transition(
        &mut self,
        f: u32,
        from: FrameState,
        to: FrameState,
        op: &'static str,
    ) -> Result<(), XskError> {
        match self.state.get_mut(f as usize) {
            Some(st) if *st == from => {
                *st = to;
                let dec = counter(&mut self.counts, from);
                *dec -= 1;
                *counter(&mut self.counts, to) += 1;
                Ok(())
            }
            other => Err(XskError::BadFrame {
                frame: f,
                state: other.map(|s| *s),
                operation: op,
            }),
        }
    }

    fn held_chunk(&self, frame: u32) -> Option<std::ptr::NonNull<[u8]>> {
        if self.state.get(frame as usize) != Some(&FrameState::Held) {
            return None;
        }
        let chunk = self.umem.frame(BufIdx(frame))?;
        debug_assert!(chunk.offset + u64::from(self.config.frame_size) <= self.area.len() as u64);
        Some(chunk.addr)
    }
}

fn counter(c: &mut FrameCounts, st: FrameState) -> &mut u32 {
    match st {
        FrameState::Free => &mut c.free,
        FrameState::Fill => &mut c.fill,
        FrameState::Held => &mut c.held,
        FrameState::Tx => &mut c.tx,
    }
}

fn errno(e: &xdpilone::Errno) -> i32 {
    e.get_raw().abs()
}

fn validate(c: &XskConfig) -> Result<(), XskError> {
    let bad = |s: String| Err(XskError::InvalidConfig(s));
    if c.frame_size != 2048 && c.frame_size != 4096 {
        return bad(format!("frame_size {} is not 2048 or 4096", c.frame_size));
    }
    if !c.ring_size.is_power_of_two() || c.ring_size < 64 {
        return bad(format!(
            "ring_size {} is not a power of two >= 64",
            c.ring_size
        ));
    }
    if c.frame_count < c.ring_size + c.ring_size / 2 {
        return bad(format!(
            "frame_count {} leaves no stash: use at least 1.5 x ring_size ({}), ideally 2 x",
            c.frame_count,
            c.ring_size + c.ring_size / 2
        ));
    }
    if c.batch < MIN_BATCH || c.batch > c.ring_size {
        return bad(format!(
            "batch {} is not in {MIN_BATCH}..={}",
            c.batch, c.ring_size
        ));
    }
    Ok(())
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation_names_the_bad_field() {
        assert!(validate(&XskConfig::default()).is_ok());
        let bad = |c: XskConfig| match validate(&c) {
            Err(XskError::InvalidConfig(s)) => s,
            other => panic!("{other:?}"),
        };
        let d = XskConfig::default;
        assert!(bad(XskConfig {
            frame_size: 1500,
            ..d()
        })
        .contains("frame_size"));
        assert!(bad(XskConfig {
            ring_size: 1000,
            ..d()
        })
        .contains("ring_size"));
        assert!(bad(XskConfig {
            frame_count: 2048,
            ..d()
        })
        .contains("stash"));
        assert!(bad(XskConfig { batch: 16, ..d() }).contains("batch"));
    }
}
