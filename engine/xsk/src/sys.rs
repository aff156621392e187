//! Thin wrappers over the few syscalls the crate makes outside `xdpilone` and
//! `aya`: RLIMIT_MEMLOCK, capability bits, anonymous page-aligned memory for
//! UMEM, `sendto` kicks and `poll`.
//!
//! Every function here is safe to call; the unsafe blocks are confined to this
//! module and to [`crate::xsk`]. Nothing here keeps state.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;

/// Linux capability numbers (include/uapi/linux/capability.h).
pub mod cap {
    /// Configure interfaces, attach XDP.
    pub const NET_ADMIN: u32 = 12;
    /// Open raw and AF_XDP sockets.
    pub const NET_RAW: u32 = 13;
    /// Lock memory beyond RLIMIT_MEMLOCK.
    pub const IPC_LOCK: u32 = 14;
    /// Superset of CAP_BPF on kernels before 5.8.
    pub const SYS_ADMIN: u32 = 21;
    /// Create maps and load programs.
    pub const BPF: u32 = 39;
}

/// True if the calling thread holds capability `cap` in its effective set.
/// Reads `/proc/thread-self/status`; returns false if that cannot be read.
pub fn has_capability(cap: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/thread-self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|bits| bits & (1u64 << cap) != 0)
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn if_nametoindex(name: &std::ffi::CStr) -> Option<u32> {
    // SAFETY: `name` is a valid NUL-terminated string for the call.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// The current soft and hard RLIMIT_MEMLOCK, in bytes (`u64::MAX` = unlimited).
pub fn memlock_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the duration of the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises RLIMIT_MEMLOCK to at least `bytes` (both soft and hard limits if
/// privileged, else the soft limit up to the hard one). Returns the soft limit
/// in force afterwards; never lowers a limit.
pub fn raise_memlock(bytes: u64) -> io::Result<u64> {
    let (cur, max) = memlock_limit()?;
    if cur >= bytes {
        return Ok(cur);
    }
    let want = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: max.max(bytes),
    };
    // SAFETY: `want` is a valid rlimit read by the kernel during the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) } == 0 {
        return Ok(bytes);
    }
    // Unprivileged: go as high as the hard limit allows.
    let want = libc::rlimit {
        rlim_cur: max,
        rlim_max: max,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) } == 0 {
        return Ok(max);
    }
    Ok(cur)
}

/// An anonymous, private, page-aligned mapping, unmapped on drop.
#[derive(Debug)]
pub struct AnonMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner to
// another thread does not invalidate it.
unsafe impl Send for AnonMap {}

impl AnonMap {
    /// Maps `len` bytes of zeroed memory. Pages are not populated here: UMEM
    /// registration pins (and so faults in) them, after its memlock check.
    pub fn new(len: usize) -> io::Result<AnonMap> {
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(AnonMap { ptr, len })
    }

    /// The whole area as a raw slice pointer (what `xdpilone::Umem::new` takes).
    pub fn as_raw_slice(&self) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(self.ptr, self.len)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length mapping (never produced by [`AnonMap::new`] in practice).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing refers
        // to the mapping after its owner is dropped (the UMEM that uses it is
        // declared before it in `XskSocket` and dropped first).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Kicks the kernel to process the TX ring: `sendto(fd, NULL, 0, MSG_DONTWAIT)`.
/// EAGAIN/EBUSY/ENOBUFS mean "try again later" and are not errors here.
pub fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length sendto with null buffer and address is the
    // documented AF_XDP wakeup; no memory is read.
    let rc = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN) => Ok(()),
            _ => Err(e),
        };
    }
    Ok(())
}

/// Waits up to `timeout_ms` for `fd` to become readable. Returns true if it is.
pub fn poll_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
}
