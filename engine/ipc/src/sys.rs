//! The syscalls the control path needs: eventfds, `poll`, `SOCK_SEQPACKET`
//! Unix sockets, `SCM_RIGHTS` fd passing and `SO_PEERCRED`.
//!
//! Every function here is safe to call; unsafe blocks are confined to this
//! module and to [`crate::shm`]. Nothing here keeps state.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn cvt_size(rc: libc::ssize_t) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Takes ownership of a descriptor a syscall just returned.
fn owned(fd: RawFd) -> OwnedFd {
    debug_assert!(fd >= 0);
    // SAFETY: `fd` was just returned by a successful syscall that creates a
    // new descriptor; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A non-blocking, close-on-exec eventfd used as a doorbell between the
/// daemon and one client. Writing adds to a counter; reading resets it.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new eventfd with counter 0.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall with constant flags; returns a new fd or -1.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        Ok(EventFd { fd: owned(fd) })
    }

    /// Wraps an eventfd received from the peer. The fd is put in non-blocking
    /// mode; a descriptor that is not an eventfd shows up as errors on use.
    pub fn from_owned(fd: OwnedFd) -> io::Result<EventFd> {
        set_nonblocking(fd.as_raw_fd())?;
        Ok(EventFd { fd })
    }

    /// Adds 1 to the counter, waking whoever polls it. A full counter
    /// (EAGAIN) already means "wake up", so it is not an error.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own fd.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter; true if it was non-zero.
    pub fn drain(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid, writable u64.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        n == 8 && v != 0
    }

    /// The descriptor, for poll sets and fd passing.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; F_GETFL takes no pointer.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above; F_SETFL takes an int.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
}

/// `poll(2)` over `fds`; `None` waits forever. EINTR counts as "nothing
/// ready" (the callers loop and recompute their deadline).
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms = match timeout {
        None => -1,
        // Round up so that a short positive timeout does not become a spin.
        Some(t) => t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
    };
    // SAFETY: `fds` is a valid, writable slice of pollfd for the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

/// A `pollfd` asking for readability.
pub fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is empty, contains NUL or is longer than {} bytes",
                path.display(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn seqpacket(nonblocking: bool) -> io::Result<OwnedFd> {
    let mut ty = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
    if nonblocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: plain syscall; returns a new fd or -1.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, ty, 0) })?;
    Ok(owned(fd))
}

/// A non-blocking listening `SOCK_SEQPACKET` socket bound at `path`, with the
/// file's mode set to `mode`.
pub fn seqpacket_listen(path: &Path, mode: u32, backlog: i32) -> io::Result<OwnedFd> {
    let fd = seqpacket(true)?;
    let (addr, len) = sockaddr(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in socket path"))?;
    // SAFETY: `c` is a valid NUL-terminated path.
    if let Err(e) = cvt(unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) }) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    // SAFETY: listen on the socket we own.
    if let Err(e) = cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) }) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(fd)
}

/// A blocking `SOCK_SEQPACKET` socket connected to `path`.
pub fn seqpacket_connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket(false)?;
    let (addr, len) = sockaddr(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    Ok(fd)
}

/// Accepts one connection as a non-blocking socket; `None` when none waits.
pub fn accept(listen: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: null address pointers are allowed (we do not want the address).
    let rc = unsafe {
        libc::accept4(
            listen,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            // A connection that died in the backlog, or a signal: try again later.
            _ if matches!(
                e.raw_os_error(),
                Some(libc::ECONNABORTED) | Some(libc::EINTR)
            ) =>
            {
                Ok(None)
            }
            _ => Err(e),
        };
    }
    Ok(Some(owned(rc)))
}

/// The peer's credentials at connect time (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: u32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// Reads `SO_PEERCRED` from a connected Unix socket.
pub fn peer_cred(fd: RawFd) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid and writable; the kernel writes at
    // most `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(PeerCred {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The effective uid of this process.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail and takes no arguments.
    unsafe { libc::geteuid() }
}

/// At most this many descriptors travel in one message (the Welcome sends 3).
pub const MAX_FDS: usize = 4;

const CMSG_SPACE: usize = 64;

#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_SPACE]);

/// Sends one message with `fds` attached (`SCM_RIGHTS`). `MSG_NOSIGNAL`
/// always; `MSG_DONTWAIT` when `nonblocking`.
pub fn send_msg(fd: RawFd, data: &[u8], fds: &[RawFd], nonblocking: bool) -> io::Result<usize> {
    assert!(fds.len() <= MAX_FDS, "at most {MAX_FDS} fds per message");
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
    // SAFETY: msghdr is plain old data; all-zero is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let (space, clen) = unsafe {
            (
                libc::CMSG_SPACE(payload as u32),
                libc::CMSG_LEN(payload as u32),
            )
        };
        assert!(space as usize <= CMSG_SPACE);
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` writable, 8-aligned bytes, so
        // CMSG_FIRSTHDR returns a valid header pointer inside it and
        // CMSG_DATA has room for `payload` bytes.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = clen as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), payload);
        }
    }
    let mut flags = libc::MSG_NOSIGNAL;
    if nonblocking {
        flags |= libc::MSG_DONTWAIT;
    }
    // SAFETY: `msg` points at a live iovec over `data` and a live control
    // buffer; both outlive the call.
    cvt_size(unsafe { libc::sendmsg(fd, &msg, flags) })
}

/// One message received by [`recv_msg`].
#[derive(Debug)]
pub struct Received {
    /// Bytes copied into the buffer.
    pub len: usize,
    /// The message was longer than the buffer (the rest is lost).
    pub truncated: bool,
    /// The message's real length when truncated (from `MSG_TRUNC`).
    pub full_len: usize,
    /// Descriptors that came with it (already close-on-exec).
    pub fds: Vec<OwnedFd>,
}

/// Receives one message (and any descriptors) into `buf`. `Ok(None)` when
/// nothing is queued on a non-blocking read; `len == 0` means the peer closed.
pub fn recv_msg(fd: RawFd, buf: &mut [u8], nonblocking: bool) -> io::Result<Option<Received>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    // MSG_TRUNC makes recvmsg return the real length of a longer message.
    let mut flags = libc::MSG_CMSG_CLOEXEC | libc::MSG_TRUNC;
    if nonblocking {
        flags |= libc::MSG_DONTWAIT;
    }
    // SAFETY: `msg` points at a live iovec over `buf` and a live control
    // buffer of CMSG_SPACE bytes; the kernel writes within those.
    let rc = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(e);
    }
    let full_len = rc as usize;
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control/msg_controllen; CMSG_FIRSTHDR and
    // CMSG_NXTHDR walk only within that buffer, and every SCM_RIGHTS payload
    // holds cmsg_len - CMSG_LEN(0) bytes of ints, each a new descriptor we
    // now own.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let n = bytes / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..n {
                    let raw = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some(Received {
        len: full_len.min(buf.len()),
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0 || full_len > buf.len(),
        full_len,
        fds,
    }))
}

/// Asks for a send buffer of `bytes` on a socket: a `SOCK_SEQPACKET`
/// message must fit it whole. `SO_SNDBUFFORCE` first, which a process with
/// CAP_NET_ADMIN (mcastd runs as root) may set past `net.core.wmem_max`, so
/// a host whose limit is small still gets its large answers; else
/// `SO_SNDBUF`, which the kernel caps at that limit.
pub fn set_send_buffer(fd: RawFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let set = |opt: libc::c_int| {
        // SAFETY: `v` is a live c_int and its size is passed with it.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        cvt(rc).map(|_| ())
    };
    set(libc::SO_SNDBUFFORCE).or_else(|_| set(libc::SO_SNDBUF))
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of every trace stamp (the
/// engine's frames carry the same clock, `mcast_engine::sys::monotonic_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and CLOCK_MONOTONIC exists
    // on every Linux kernel, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The send buffer the kernel gave a socket (`SO_SNDBUF`: twice what was
    /// asked, for its bookkeeping).
    fn send_buffer(fd: RawFd) -> io::Result<usize> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are live and writable, `len` holds `v`'s size.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        cvt(rc).map(|_| v.max(0) as usize)
    }

    #[test]
    fn the_daemon_gets_its_send_buffer_past_a_small_wmem_max() {
        if geteuid() != 0 {
            let msg = "skipped: SO_SNDBUFFORCE needs root";
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "{msg}, and CI=true"
            );
            eprintln!("{msg}");
            return;
        }
        let max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Twice the host's limit (the kernel would cap SO_SNDBUF at it).
        let want = (2 * max).min(libc::c_int::MAX as usize / 2);
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        set_send_buffer(a.as_raw_fd(), want).unwrap();
        let got = send_buffer(a.as_raw_fd()).unwrap();
        assert!(got >= 2 * want, "asked {want}, got {got} (wmem_max {max})");
    }
}
