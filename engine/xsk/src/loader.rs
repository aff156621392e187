//! Loads the XDP steering program (`ebpf/steer.bpf.c`), attaches it to one
//! interface and manages its maps.
//!
//! What it does: [`XdpSteering::attach`] loads the embedded object through the
//! verifier, writes the configuration (EtherType, own MAC), and attaches in the
//! asked [`AttachMode`]; the handle subscribes and unsubscribes group MACs,
//! registers AF_XDP sockets per queue, reads the counters and sets the
//! drop-ratio testing knob. Dropping the handle detaches the program (aya
//! holds it through a bpf_link, which the kernel also releases if the process
//! dies).
//!
//! What it never does: it never falls back from native to SKB mode silently
//! (only under [`AttachMode::Auto`], and then it says so on stderr and in
//! [`XdpSteering::fallback_reason`]); it never touches an interface other than
//! the one named; it never replaces a program someone else attached.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::os::fd::AsRawFd;

use aya::maps::{Array, HashMap, MapData, PerCpuArray, XskMap};
use aya::programs::xdp::XdpError;
use aya::programs::{Xdp, XdpMode};
use aya::sys::SyscallError;
use aya::Ebpf;
use mcast_wire::MacAddr;

use crate::sys::{self, cap};

/// The compiled steering program, built by `build.rs` from `ebpf/steer.bpf.c`.
pub static STEER_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer.bpf.o"));

/// Name of the XDP program's function in the object.
const PROGRAM_NAME: &str = "steer";
/// Sockets the XSKMAP can hold, one per RX queue (`max_entries` of `xsks`).
pub const MAX_QUEUES: u32 = 64;
/// Group MACs the `groups` hash map can hold (`max_entries`).
pub const MAX_GROUPS: u32 = 1024;
/// Peer MTU above which native XDP on veth is refused (PLATFORM.md).
pub const VETH_NATIVE_MAX_MTU: u32 = 3506;

/// How to attach the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Driver (native) XDP only; fail if the driver refuses.
    Native,
    /// Generic (SKB) XDP: works on every interface, slower.
    Skb,
    /// Try native, fall back to SKB, and report the fallback.
    Auto,
}

/// The mode the program is actually attached in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedMode {
    /// Driver (native) XDP.
    Native,
    /// Generic (SKB) XDP.
    Skb,
}

impl fmt::Display for AttachedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachedMode::Native => "native",
            AttachedMode::Skb => "skb",
        })
    }
}

/// The program's counters, summed over CPUs. Indices match `enum` in steer.bpf.c.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SteeringCounters {
    /// Frames redirected into an AF_XDP socket.
    pub redirected: u64,
    /// Frames of another EtherType, passed to the kernel stack.
    pub passed: u64,
    /// Our EtherType, but the destination is neither subscribed nor our MAC (passed).
    pub not_subscribed: u64,
    /// Ours and subscribed, but no socket on the queue: passed instead.
    pub redirect_failed: u64,
    /// Dropped by the drop-ratio testing knob.
    pub dropped_injected: u64,
}

/// Errors a user of [`XdpSteering`] meets; each message says what to do.
#[derive(Debug)]
pub enum SteeringError {
    /// No interface of that name in this network namespace.
    NoSuchInterface {
        /// The name asked for.
        ifname: String,
    },
    /// The process lacks a capability the operation needs.
    MissingCapability {
        /// What was being done.
        operation: &'static str,
        /// The capabilities needed, e.g. "CAP_BPF and CAP_NET_ADMIN".
        needed: &'static str,
    },
    /// RLIMIT_MEMLOCK is too low for maps or UMEM.
    MemlockTooLow {
        /// The soft limit in force, bytes.
        limit_bytes: u64,
    },
    /// Native XDP refused with ERANGE: on veth the peer's MTU exceeds 3506.
    NativeMtuTooLarge {
        /// The interface.
        ifname: String,
    },
    /// Native XDP refused with ENOSPC: on veth, fewer RX queues than the peer's TX queues.
    NativeQueueMismatch {
        /// The interface.
        ifname: String,
    },
    /// Native XDP not supported by this driver (EOPNOTSUPP).
    NativeUnsupported {
        /// The interface.
        ifname: String,
    },
    /// Another XDP program is already attached (EBUSY/EEXIST).
    Busy {
        /// The interface.
        ifname: String,
    },
    /// The verifier rejected the program or loading failed otherwise.
    Load(String),
    /// A map operation failed.
    Map {
        /// What was being done.
        operation: &'static str,
        /// The underlying error, rendered.
        detail: String,
    },
    /// An argument was out of range.
    InvalidArgument(String),
    /// Anything else, with context.
    Other {
        /// What was being done.
        operation: &'static str,
        /// The underlying error, rendered.
        detail: String,
    },
}

impl fmt::Display for SteeringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SteeringError::NoSuchInterface { ifname } => write!(
                f,
                "interface `{ifname}` does not exist in this network namespace; check `ip link show` (and `ip netns exec NS ...` if it lives in another namespace)"
            ),
            SteeringError::MissingCapability { operation, needed } => write!(
                f,
                "{operation} needs {needed}; run as root or grant them, e.g. `setcap cap_bpf,cap_net_admin,cap_net_raw,cap_ipc_lock+ep BINARY`"
            ),
            SteeringError::MemlockTooLow { limit_bytes } => write!(
                f,
                "RLIMIT_MEMLOCK is too low ({limit_bytes} bytes) for BPF maps / UMEM; raise it with `ulimit -l unlimited` (shell), `LimitMEMLOCK=infinity` (systemd) or an entry in /etc/security/limits.conf, or grant CAP_IPC_LOCK"
            ),
            SteeringError::NativeMtuTooLarge { ifname } => write!(
                f,
                "native XDP on `{ifname}` refused with ERANGE: on veth the peer's MTU must be <= {VETH_NATIVE_MAX_MTU}; lower it (`ip link set dev PEER mtu {VETH_NATIVE_MAX_MTU}`) or use AttachMode::Skb"
            ),
            SteeringError::NativeQueueMismatch { ifname } => write!(
                f,
                "native XDP on `{ifname}` refused with ENOSPC: on veth it needs at least as many RX queues as the peer has TX queues; recreate the pair with matching `numrxqueues`/`numtxqueues` or use AttachMode::Skb"
            ),
            SteeringError::NativeUnsupported { ifname } => write!(
                f,
                "the driver of `{ifname}` does not support native XDP (EOPNOTSUPP); use AttachMode::Skb or AttachMode::Auto"
            ),
            SteeringError::Busy { ifname } => write!(
                f,
                "another XDP program is attached to `{ifname}`; inspect with `ip link show dev {ifname}` or `bpftool net`, detach it (`ip link set dev {ifname} xdp off`) and retry"
            ),
            SteeringError::Load(detail) => write!(f, "loading the steering program failed: {detail}"),
            SteeringError::Map { operation, detail } => write!(f, "{operation} failed: {detail}"),
            SteeringError::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            SteeringError::Other { operation, detail } => write!(f, "{operation} failed: {detail}"),
        }
    }
}

impl StdError for SteeringError {}

/// The steering program attached to one interface. Detaches on drop.
pub struct XdpSteering {
    // Maps are taken out of `ebpf` so the handle owns them; `ebpf` owns the
    // program and its link, whose drop detaches it.
    groups: HashMap<MapData, [u8; 8], u8>,
    xsks: XskMap<MapData>,
    counters: PerCpuArray<MapData, u64>,
    drop_ratio: Array<MapData, u32>,
    ebpf: Ebpf,
    ifname: String,
    mode: AttachedMode,
    fallback_reason: Option<String>,
}

impl fmt::Debug for XdpSteering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpSteering")
            .field("ifname", &self.ifname)
            .field("mode", &self.mode)
            .field("fallback_reason", &self.fallback_reason)
            .finish_non_exhaustive()
    }
}

impl XdpSteering {
    /// Loads the program, configures it for `ethertype` and `own_mac`, and
    /// attaches it to `ifname` (in the calling thread's network namespace).
    pub fn attach(
        ifname: &str,
        ethertype: u16,
        own_mac: MacAddr,
        mode: AttachMode,
    ) -> Result<XdpSteering, SteeringError> {
        if ethertype == 0 {
            return Err(SteeringError::InvalidArgument(
                "EtherType 0 disables steering".into(),
            ));
        }
        if interface_index(ifname).is_none() {
            return Err(SteeringError::NoSuchInterface {
                ifname: ifname.to_owned(),
            });
        }
        if !(sys::has_capability(cap::BPF) || sys::has_capability(cap::SYS_ADMIN))
            || !sys::has_capability(cap::NET_ADMIN)
        {
            return Err(SteeringError::MissingCapability {
                operation: "loading and attaching the XDP program",
                needed: "CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN",
            });
        }
        // Kernels before 5.11 charge maps to RLIMIT_MEMLOCK; later ones to the
        // memory cgroup. Raising it is harmless either way.
        let _ = sys::raise_memlock(64 << 20);

        let mut ebpf =
            Ebpf::load(STEER_OBJECT).map_err(|e| classify_load(&e, "creating the maps"))?;

        let mut config: Array<MapData, [u8; 8]> = take(&mut ebpf, "config")?;
        let mut value = [0u8; 8];
        value[0..2].copy_from_slice(&ethertype.to_ne_bytes());
        value[2..8].copy_from_slice(&own_mac.0);
        config
            .set(0, value, 0)
            .map_err(|e| map_err("writing the config map", &e))?;
        let groups = take(&mut ebpf, "groups")?;
        let xsks = take(&mut ebpf, "xsks")?;
        let counters = take(&mut ebpf, "counters")?;
        let drop_ratio = take(&mut ebpf, "drop_ratio")?;

        let program: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| {
                SteeringError::Load(format!("no program `{PROGRAM_NAME}` in the object"))
            })?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| SteeringError::Load(e.to_string()))?;
        program
            .load()
            .map_err(|e| classify_load(&e, "loading the program"))?;

        let (mode, fallback_reason) = match mode {
            AttachMode::Native => {
                attach_in(program, ifname, AttachedMode::Native)?;
                (AttachedMode::Native, None)
            }
            AttachMode::Skb => {
                attach_in(program, ifname, AttachedMode::Skb)?;
                (AttachedMode::Skb, None)
            }
            AttachMode::Auto => match attach_in(program, ifname, AttachedMode::Native) {
                Ok(()) => (AttachedMode::Native, None),
                Err(native) => {
                    attach_in(program, ifname, AttachedMode::Skb)?;
                    let reason = native.to_string();
                    eprintln!("mcast-xsk: native XDP on `{ifname}` unavailable ({reason}); attached in SKB mode");
                    (AttachedMode::Skb, Some(reason))
                }
            },
        };

        Ok(XdpSteering {
            groups,
            xsks,
            counters,
            drop_ratio,
            ebpf,
            ifname: ifname.to_owned(),
            mode,
            fallback_reason,
        })
    }

    /// The mode the program is attached in.
    pub fn mode(&self) -> AttachedMode {
        self.mode
    }

    /// Why native mode was not used, if [`AttachMode::Auto`] fell back to SKB.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// The interface the program is attached to.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Steers frames addressed to `mac` (a group MAC) into the AF_XDP sockets.
    pub fn subscribe(&mut self, mac: MacAddr) -> Result<(), SteeringError> {
        self.groups
            .insert(mac_key(mac), 1u8, 0)
            .map_err(|e| map_err("subscribing a group MAC", &e))
    }

    /// Stops steering frames addressed to `mac`. Returns false if it was not subscribed.
    pub fn unsubscribe(&mut self, mac: MacAddr) -> Result<bool, SteeringError> {
        match self.groups.remove(&mac_key(mac)) {
            Ok(()) => Ok(true),
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(map_err("unsubscribing a group MAC", &e)),
        }
    }

    /// TESTING KNOB: drop this fraction (0.0..=1.0) of our subscribed frames in
    /// the XDP program before redirect. 0.0 turns it off.
    pub fn set_drop_ratio(&mut self, ratio: f64) -> Result<(), SteeringError> {
        let threshold = drop_threshold(ratio).ok_or_else(|| {
            SteeringError::InvalidArgument(format!("drop ratio {ratio} is not in 0.0..=1.0"))
        })?;
        self.drop_ratio
            .set(0, threshold, 0)
            .map_err(|e| map_err("setting the drop ratio", &e))
    }

    /// Registers the AF_XDP socket `fd` to receive what queue `queue` steers.
    pub fn register_socket(&mut self, queue: u32, fd: &impl AsRawFd) -> Result<(), SteeringError> {
        if queue >= MAX_QUEUES {
            return Err(SteeringError::InvalidArgument(format!(
                "queue {queue} >= {MAX_QUEUES}"
            )));
        }
        self.xsks
            .set(queue, fd.as_raw_fd(), 0)
            .map_err(|e| map_err("registering an AF_XDP socket in the XSKMAP", &e))
    }

    /// Removes the socket registered for `queue`; its frames go to the kernel
    /// stack again. (Closing the socket also removes it.)
    pub fn unregister_socket(&mut self, queue: u32) -> Result<(), SteeringError> {
        self.xsks
            .unset(queue)
            .map_err(|e| map_err("removing an AF_XDP socket from the XSKMAP", &e))
    }

    /// The counters, summed over CPUs.
    pub fn counters(&self) -> Result<SteeringCounters, SteeringError> {
        let read = |i: u32| -> Result<u64, SteeringError> {
            let values = self
                .counters
                .get(&i, 0)
                .map_err(|e| map_err("reading the counters", &e))?;
            Ok(values.iter().copied().fold(0u64, u64::wrapping_add))
        };
        Ok(SteeringCounters {
            redirected: read(0)?,
            passed: read(1)?,
            not_subscribed: read(2)?,
            redirect_failed: read(3)?,
            dropped_injected: read(4)?,
        })
    }

    /// The loaded object, for callers that need more (e.g. program info).
    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }
}

/// The program's threshold for a drop ratio: a frame is dropped when
/// `bpf_get_prandom_u32() < threshold`, so the ratio is threshold / 2^32
/// (1.0 maps to u32::MAX, as close as a u32 gets). None if out of range.
fn drop_threshold(ratio: f64) -> Option<u32> {
    if !(0.0..=1.0).contains(&ratio) {
        return None; // also rejects NaN
    }
    Some((ratio * 4_294_967_296.0).min(f64::from(u32::MAX)) as u32)
}

fn mac_key(mac: MacAddr) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..6].copy_from_slice(&mac.0);
    k
}

fn interface_index(ifname: &str) -> Option<u32> {
    // /sys/class/net reflects the namespace sysfs was mounted in, which is not
    // necessarily the thread's; if_nametoindex asks the thread's namespace.
    let c = std::ffi::CString::new(ifname).ok()?;
    sys::if_nametoindex(&c)
}

fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, SteeringError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf.take_map(name).ok_or_else(|| SteeringError::Map {
        operation: "finding a map in the object",
        detail: format!("no map named `{name}` (ebpf/steer.bpf.c and loader.rs out of sync?)"),
    })?;
    T::try_from(map).map_err(|e| map_err("opening a map", &e))
}

fn attach_in(program: &mut Xdp, ifname: &str, mode: AttachedMode) -> Result<(), SteeringError> {
    let xdp_mode = match mode {
        AttachedMode::Native => XdpMode::Driver,
        AttachedMode::Skb => XdpMode::Skb,
    };
    match program.attach(ifname, xdp_mode) {
        Ok(_link_id) => Ok(()), // the link is owned by the program; dropped with `ebpf`
        Err(aya::programs::ProgramError::UnknownInterface { .. }) => {
            Err(SteeringError::NoSuchInterface {
                ifname: ifname.to_owned(),
            })
        }
        Err(e) => {
            let ifname = ifname.to_owned();
            Err(match errno_of(&e) {
                Some(libc::ERANGE) => SteeringError::NativeMtuTooLarge { ifname },
                Some(libc::ENOSPC) => SteeringError::NativeQueueMismatch { ifname },
                Some(libc::EOPNOTSUPP) => SteeringError::NativeUnsupported { ifname },
                Some(libc::EBUSY | libc::EEXIST) => SteeringError::Busy { ifname },
                Some(libc::EPERM | libc::EACCES) => SteeringError::MissingCapability {
                    operation: "attaching the XDP program",
                    needed: "CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN",
                },
                _ => SteeringError::Other {
                    operation: "attaching the XDP program",
                    detail: format!("{} mode: {e}", mode),
                },
            })
        }
    }
}

fn classify_load(e: &(dyn StdError + 'static), operation: &'static str) -> SteeringError {
    match errno_of(e) {
        Some(libc::EPERM | libc::EACCES) => {
            if !(sys::has_capability(cap::BPF) || sys::has_capability(cap::SYS_ADMIN)) {
                SteeringError::MissingCapability {
                    operation,
                    needed: "CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN",
                }
            } else {
                // Privileged but refused: on pre-5.11 kernels this is the memlock limit.
                let limit_bytes = sys::memlock_limit().map(|(cur, _)| cur).unwrap_or(0);
                SteeringError::MemlockTooLow { limit_bytes }
            }
        }
        _ => SteeringError::Load(format!("{operation}: {}", render_chain(e))),
    }
}

fn map_err(operation: &'static str, e: &(dyn StdError + 'static)) -> SteeringError {
    SteeringError::Map {
        operation,
        detail: render_chain(e),
    }
}

fn render_chain(e: &(dyn StdError + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = inner.source();
    }
    s
}

/// The errno somewhere in an error's source chain, if any.
fn errno_of(e: &(dyn StdError + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            if let Some(n) = io.raw_os_error() {
                return Some(n);
            }
        }
        if let Some(sc) = err.downcast_ref::<SyscallError>() {
            if let Some(n) = sc.io_error.raw_os_error() {
                return Some(n);
            }
        }
        if let Some(XdpError::NetlinkError(nl)) = err.downcast_ref::<XdpError>() {
            if let Some(n) = nl.raw_os_error() {
                return Some(n);
            }
        }
        if let Some(aya::programs::ProgramError::SyscallError(sc)) =
            err.downcast_ref::<aya::programs::ProgramError>()
        {
            if let Some(n) = sc.io_error.raw_os_error() {
                return Some(n);
            }
        }
        if let Some(aya::programs::ProgramError::XdpError(XdpError::NetlinkError(nl))) =
            err.downcast_ref::<aya::programs::ProgramError>()
        {
            if let Some(n) = nl.raw_os_error() {
                return Some(n);
            }
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_threshold_maps_ratio_to_u32_fraction() {
        assert_eq!(drop_threshold(0.0), Some(0));
        assert_eq!(drop_threshold(0.5), Some(1 << 31));
        assert_eq!(drop_threshold(1.0), Some(u32::MAX));
        assert_eq!(drop_threshold(-0.1), None);
        assert_eq!(drop_threshold(1.01), None);
        assert_eq!(drop_threshold(f64::NAN), None);
    }

    #[test]
    fn mac_key_pads_to_eight_bytes() {
        let k = mac_key(mcast_wire::group_mac(0x0102_0304));
        assert_eq!(k, [0x03, 0x00, 0x01, 0x02, 0x03, 0x04, 0, 0]);
    }

    #[test]
    fn object_has_the_program_and_maps_the_loader_expects() {
        // Parsing only (no kernel): names in steer.bpf.c and here agree.
        let obj = aya_obj::Object::parse(STEER_OBJECT).expect("parse");
        assert!(obj.programs.contains_key(PROGRAM_NAME));
        for m in ["config", "groups", "xsks", "counters", "drop_ratio"] {
            assert!(obj.maps.contains_key(m), "map {m} missing");
        }
    }
}
