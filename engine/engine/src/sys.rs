//! The raw syscalls the engine needs beyond `mcast-xsk`: the monotonic clock,
//! `ppoll` with a nanosecond timeout, CPU pinning, interface MAC/MTU lookup
//! and the AF_PACKET socket of the fallback transport.
//!
//! What it does: thin, checked wrappers that turn errno into `io::Error`.
//! What it never does: it never keeps a raw pointer beyond a call, never
//! touches memory it was not given as a slice, and holds no state. This is
//! the only module of the crate where `unsafe` is allowed.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock_gettime(clock)` in nanoseconds, for clocks that always exist.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the callers pass clocks
    // every Linux kernel this code supports has (CLOCK_MONOTONIC,
    // CLOCK_THREAD_CPUTIME_ID), so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`): how late the
/// kernel may end a timed sleep (`ppoll`'s timeout) to batch wake-ups. The
/// default, 50 µs, delays every protocol deadline the engine sleeps towards
/// by up to that much: a NAK timer of tens of microseconds fired 60 µs late.
pub fn set_timer_slack(slack: Duration) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(slack.as_nanos().max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID), in
/// nanoseconds: user and system, including softirq work the kernel ran in its
/// syscalls (the veth and bridge path of a sendto). For the benchmarks'
/// CPU-per-frame figures.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Waits until `fd` is readable or `timeout` passes. Returns true if readable.
/// EINTR counts as a timeout (the caller loops anyway).
pub fn ppoll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: one valid pollfd and a valid timespec for the duration of the
    // call; a null sigmask leaves the signal mask unchanged.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
}

/// Pins the calling thread to CPU `cpu` (sched_setaffinity).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond CPU_SETSIZE"),
        ));
    }
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set); CPU_SET is
    // given an index checked against CPU_SETSIZE above; pid 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The interface index of `ifname` in the calling thread's network namespace.
pub fn if_index(ifname: &str) -> Option<u32> {
    let c = CString::new(ifname).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

fn ifreq_for(ifname: &str) -> io::Result<libc::ifreq> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name `{ifname}` is empty or too long"),
        ));
    }
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

fn ioctl_ifreq(ifname: &str, request: libc::Ioctl) -> io::Result<libc::ifreq> {
    let mut req = ifreq_for(ifname)?;
    // SAFETY: plain socket creation; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: SIOCGIFHWADDR / SIOCGIFMTU read and write one ifreq, which `req` is.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request, &mut req) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req)
}

/// The hardware address of `ifname` (SIOCGIFHWADDR).
pub fn if_mac(ifname: &str) -> io::Result<[u8; 6]> {
    let req = ioctl_ifreq(ifname, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member of the union.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(mac)
}

/// The MTU of `ifname` (SIOCGIFMTU).
pub fn if_mtu(ifname: &str) -> io::Result<u32> {
    let req = ioctl_ifreq(ifname, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// `struct packet_mreq` of linux/if_packet.h.
#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_DROP_MEMBERSHIP: libc::c_int = 2;
const PACKET_MR_MULTICAST: libc::c_ushort = 0;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Opens a non-blocking AF_PACKET raw socket bound to `ifindex` that receives
/// only `ethertype` and not our own outgoing frames.
pub fn packet_socket(ifindex: u32, ethertype: u16) -> io::Result<OwnedFd> {
    let proto = ethertype.to_be();
    // SAFETY: plain socket creation; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(proto),
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_ll is plain data; all-zero is valid, fields set below.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // Best effort (Linux >= 4.20): without it we filter our own frames by MAC.
    let _ = setsockopt_int(fd.as_raw_fd(), SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
    // Bursts of a window's worth of frames must not overflow the socket buffer.
    if setsockopt_int(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        8 << 20,
    )
    .is_err()
    {
        let _ = setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20);
    }
    Ok(fd)
}

/// Adds the multicast MAC `mac` to `ifindex`'s filter for this socket.
pub fn packet_add_membership(fd: RawFd, ifindex: u32, mac: [u8; 6]) -> io::Result<()> {
    packet_membership(fd, ifindex, mac, PACKET_ADD_MEMBERSHIP)
}

/// Removes the multicast MAC `mac` from `ifindex`'s filter for this socket.
pub fn packet_drop_membership(fd: RawFd, ifindex: u32, mac: [u8; 6]) -> io::Result<()> {
    packet_membership(fd, ifindex, mac, PACKET_DROP_MEMBERSHIP)
}

fn packet_membership(fd: RawFd, ifindex: u32, mac: [u8; 6], op: libc::c_int) -> io::Result<()> {
    let mut address = [0u8; 8];
    address[..6].copy_from_slice(&mac);
    let mreq = PacketMreq {
        mr_ifindex: ifindex as libc::c_int,
        mr_type: PACKET_MR_MULTICAST,
        mr_alen: 6,
        mr_address: address,
    };
    // SAFETY: `mreq` is a valid packet_mreq of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            SOL_PACKET,
            op,
            (&mreq as *const PacketMreq).cast(),
            std::mem::size_of::<PacketMreq>() as u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until one of `fds` is readable (or hung up) or `timeout` passes.
/// Returns how many are ready; EINTR counts as a timeout.
pub fn ppoll_any(fds: &[RawFd], timeout: Duration) -> io::Result<usize> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds and `ts` a valid
    // timespec for the duration of the call; a null sigmask changes nothing.
    let rc = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a valid c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one frame into `buf` without blocking. `Ok(None)`: nothing waiting.
pub fn recv_nonblocking(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is valid for writes of its length during the call.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// Sends one frame. `Ok(false)`: the queue is full now (EAGAIN/ENOBUFS), try later.
pub fn send_frame(fd: RawFd, frame: &[u8]) -> io::Result<bool> {
    // SAFETY: `frame` is valid for reads of its length during the call.
    let n = unsafe { libc::send(fd, frame.as_ptr().cast(), frame.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => Ok(false),
            _ => Err(e),
        };
    }
    Ok(true)
}

/// True if the calling thread's effective set has capability number `cap`.
pub fn has_capability(cap: u32) -> bool {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1u64 << cap) != 0)
}

/// CAP_NET_RAW's number.
pub const CAP_NET_RAW: u32 = 13;

/// A non-blocking eventfd (a counter another thread bumps to wake a poller).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter: its poller wakes. A counter at its
/// maximum (EAGAIN) is still readable, so that is not an error.
pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: `one` is a valid 8-byte buffer for the duration of the call.
    let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

/// Resets an eventfd's counter to zero (it stops being readable). Returns
/// whether it had been signalled.
pub fn eventfd_drain(fd: RawFd) -> io::Result<bool> {
    let mut v: u64 = 0;
    // SAFETY: `v` is a valid, writable 8-byte buffer for the duration of the call.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(v > 0)
}
