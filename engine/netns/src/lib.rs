//! Namespace test harness: a private L2 network of one "sender" and three
//! "receiver" network namespaces joined by veth pairs to a Linux bridge that
//! lives in a fifth namespace.
//!
//! What it does: creates uniquely named namespaces (prefix `mc<pid>-<n>`),
//! the bridge, the veth pairs (created inside the bridge namespace, so no
//! interface ever appears in the root namespace), sets fixed locally
//! administered MACs, brings links up and assigns addresses from
//! 198.18.0.0/15 (RFC 2544 benchmarking range, test-only) inside the
//! namespaces only. Everything is removed in `Drop`, which also runs when a
//! test panics; a process that is interrupted (and so runs no `Drop`) removes
//! what it still has with [`remove_all_for_exit`], e.g. from its signal
//! handler. [`Netns::run`] executes a closure on a dedicated thread that
//! has entered the namespace with `setns`, so the test's other threads stay
//! in the root namespace.
//!
//! What it never does: it never creates, modifies or sends on an interface of
//! the root namespace, and never attaches XDP there.
//!
//! Shared by `mcast-xsk`'s tests and `mcast-engine` (its tests and
//! `mcast-bench xdp`). `unsafe` is confined to `setns` and raw sockets here.
#![allow(unsafe_code)]
#![allow(
    clippy::disallowed_methods,
    reason = "real-kernel tests wait on wall-clock deadlines and measure rates; no protocol state reads this clock"
)]

use std::ffi::CString;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mcast_wire::MacAddr;

/// Interface name of every endpoint (sender or receiver) inside its namespace.
pub const IFNAME: &str = "eth0";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Every namespace this process created and has not removed yet. Held while
/// a namespace is added or deleted, so that [`remove_all_for_exit`] misses
/// none.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<String>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Creates namespace `name` and records it.
fn add_netns(name: &str) {
    let mut live = live();
    ip(&["netns", "add", name]);
    live.push(name.to_owned());
}

/// Deletes namespace `name` (best effort) and forgets it.
fn del_netns(name: &str) {
    let mut live = live();
    let _ = Command::new("ip").args(["netns", "del", name]).output();
    live.retain(|n| n != name);
}

/// The namespaces this process created and still has, oldest first.
pub fn live_namespaces() -> Vec<String> {
    live().clone()
}

/// Removes every namespace this process created and still has (newest
/// first) and returns their names. For a process about to exit without
/// running `Drop`, such as one interrupted by a signal: afterwards this
/// process can neither create nor remove a namespace (the registry stays
/// locked, so one half-built now cannot escape), and a thread that tries
/// blocks until the process exits. Threads still inside a removed namespace
/// keep it alive, unnamed, until they end with the process.
pub fn remove_all_for_exit() -> Vec<String> {
    let mut live = live();
    let names = std::mem::take(&mut *live);
    for name in names.iter().rev() {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
    }
    std::mem::forget(live);
    names
}

/// Why this process cannot build the topology (missing capabilities or no
/// `ip` tool), or None when it can.
pub fn missing_privileges() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let need = [
        (12, "CAP_NET_ADMIN"),
        (13, "CAP_NET_RAW"),
        (21, "CAP_SYS_ADMIN"),
    ];
    let missing: Vec<&str> = need
        .iter()
        .filter(|(b, _)| caps & (1u64 << b) == 0)
        .map(|(_, n)| *n)
        .collect();
    let has_ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_ip {
        return Some("the `ip` tool (iproute2) is not installed".to_owned());
    }
    if !missing.is_empty() {
        return Some(format!("missing {}", missing.join(", ")));
    }
    None
}

/// Returns false (after printing why) if the test must be skipped; panics
/// instead of skipping when `CI=true`.
pub fn privileged_or_skip(test: &str) -> bool {
    let Some(why) = missing_privileges() else {
        return true;
    };
    let msg = format!("SKIPPED {test}: namespace tests need root ({why}); run the tests as root (sudo -E cargo test where root is not the user)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg} -- and CI=true, where a skip is a failure");
    }
    eprintln!("{msg}");
    false
}

/// One network namespace of the topology.
#[derive(Debug, Clone)]
pub struct Netns {
    /// Name under /run/netns.
    pub name: String,
    /// The endpoint's MAC (on `eth0`); unused for the bridge namespace.
    pub mac: MacAddr,
    /// The endpoint's IPv4 address.
    pub ip: Ipv4Addr,
}

impl Netns {
    /// Runs `f` on a new thread that has entered this namespace; returns its result.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&path).unwrap_or_else(|e| panic!("setns into {path}: {e}"));
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Moves the calling thread into this namespace (use on a dedicated
    /// thread: it stays there until it ends).
    pub fn enter(&self) {
        let path = format!("/run/netns/{}", self.name);
        enter(&path).unwrap_or_else(|e| panic!("setns into {path}: {e}"));
    }

    /// Runs a command inside the namespace (`ip netns exec`).
    pub fn exec(&self, args: &[&str]) -> std::process::Output {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("run ip netns exec");
        out
    }

    /// Runs `args` inside the namespace with `input` on its standard input
    /// (e.g. `nft -f -`); Err when the command cannot be run at all.
    pub fn exec_with_input(
        &self,
        args: &[&str],
        input: &[u8],
    ) -> Result<std::process::Output, String> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run {} (scripts/setup.sh installs the tools): {e}",
                    args[0]
                )
            })?;
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().expect("piped");
            stdin
                .write_all(input)
                .map_err(|e| format!("writing to {}: {e}", args[0]))?;
        }
        child
            .wait_with_output()
            .map_err(|e| format!("waiting for {}: {e}", args[0]))
    }
}

/// Sender, bridge and receivers (three by [`Topology::new`], up to
/// [`MAX_RECEIVERS`] by [`Topology::with_receivers`]); removed on drop.
#[derive(Debug)]
pub struct Topology {
    /// Holds the bridge `br0` and the bridge-side veth ends.
    pub bridge: Netns,
    /// The sender endpoint.
    pub sender: Netns,
    /// The receiver endpoints (three unless built by [`Topology::with_receivers`]).
    pub receivers: Vec<Netns>,
    created: Vec<String>,
}

/// The nftables table of [`Topology::set_loss`], in the bridge namespace.
const LOSS_TABLE: &str = "mcast_loss";

/// The nftables table of [`Topology::drop_multicast`], in the bridge namespace.
const NO_MULTICAST_TABLE: &str = "mcast_no_multicast";

/// The packet count of the first counter in `nft list` output.
fn counter_packets(text: &str) -> u64 {
    text.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The most receivers [`Topology::with_receivers`] builds.
pub const MAX_RECEIVERS: usize = 16;

impl Topology {
    /// Builds the topology with three receivers, or returns None when the
    /// test must be skipped.
    pub fn new(test: &str) -> Option<Topology> {
        Topology::with_receivers(test, 3)
    }

    /// Builds the topology with `receivers` receivers (1 to
    /// [`MAX_RECEIVERS`]; the first three are those of [`Topology::new`]), or
    /// returns None when the test must be skipped.
    pub fn with_receivers(test: &str, receivers: usize) -> Option<Topology> {
        Topology::with_queues(test, receivers, 1)
    }

    /// As [`Topology::with_receivers`], every veth (both ends) with `queues`
    /// RX and TX queues. Which queue a frame arrives on at an endpoint is
    /// the TX queue its bridge port picks: see [`Topology::steer_by_cpu`].
    pub fn with_queues(test: &str, receivers: usize, queues: u32) -> Option<Topology> {
        assert!((1..=64).contains(&queues), "{queues} queues: 1 to 64");
        assert!(
            (1..=MAX_RECEIVERS).contains(&receivers),
            "{receivers} receivers: 1 to {MAX_RECEIVERS} supported"
        );
        if !privileged_or_skip(test) {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("mc{}-{n}", std::process::id());
        let subnet = (n % 250) as u8; // 198.18.<subnet>.0/24, namespaces are isolated anyway
        let endpoint = |role: &str, host: u8| Netns {
            name: format!("{prefix}-{role}"),
            mac: MacAddr([0x02, 0x58, 0x53, 0x4b, subnet, host]),
            ip: Ipv4Addr::new(198, 18, subnet, host),
        };
        let mut topo = Topology {
            bridge: endpoint("br", 254),
            sender: endpoint("s", 1),
            receivers: (1..=receivers)
                .map(|i| endpoint(&format!("r{i}"), 10 + i as u8))
                .collect(),
            created: Vec::new(),
        };
        // From here on, Drop cleans up whatever was created, even on panic.
        let br = topo.bridge.name.clone();
        add_netns(&br);
        topo.created.push(br.clone());
        ipn(&br, &["link", "add", "br0", "type", "bridge"]);
        ipn(&br, &["link", "set", "br0", "up"]);
        ipn(&br, &["link", "set", "lo", "up"]);
        let endpoints: Vec<Netns> = std::iter::once(topo.sender.clone())
            .chain(topo.receivers.clone())
            .collect();
        for (i, ep) in endpoints.iter().enumerate() {
            add_netns(&ep.name);
            topo.created.push(ep.name.clone());
            let port = format!("p{i}");
            // Created inside the bridge namespace, the far end moved straight
            // into the endpoint: nothing ever exists in the root namespace.
            // One queue: the veth as `ip` makes it by default, as before
            // queues could be asked for.
            let q = queues.to_string();
            let many = ["numtxqueues", &q, "numrxqueues", &q];
            let queue_args: &[&str] = if queues > 1 { &many } else { &[] };
            let mut args = vec!["link", "add", "name", &port];
            args.extend_from_slice(queue_args);
            args.extend_from_slice(&["type", "veth", "peer", "name", IFNAME, "netns", &ep.name]);
            args.extend_from_slice(queue_args);
            ipn(&br, &args);
            ipn(&br, &["link", "set", &port, "master", "br0"]);
            ipn(&br, &["link", "set", &port, "up"]);
            ipn(
                &ep.name,
                &["link", "set", IFNAME, "address", &ep.mac.to_string()],
            );
            ipn(
                &ep.name,
                &["addr", "add", &format!("{}/24", ep.ip), "dev", IFNAME],
            );
            ipn(&ep.name, &["link", "set", IFNAME, "up"]);
            ipn(&ep.name, &["link", "set", "lo", "up"]);
        }
        topo.wait_carrier();
        Some(topo)
    }

    /// Has the bridge port of endpoint `endpoint` (0 the sender, then the
    /// receivers) send what the bridge forwards on CPU `c` on its TX queue
    /// `c % used` (transmit packet steering, `xps_cpus`, for each of the
    /// port's `queues` queues). A veth delivers what its peer sent on TX
    /// queue `q` to its RX queue `q`, and the bridge forwards a frame on the
    /// CPU its sender transmitted on: so with `used` = `queues`, a sender
    /// pinned to CPU `c` reaches that endpoint on its queue `c`, as a NIC's
    /// RSS puts one flow on one queue; with `used` = 1, every frame arrives
    /// on queue 0.
    pub fn steer_by_cpu(&self, endpoint: usize, used: u32, queues: u32) -> Result<(), String> {
        assert!((1..=queues).contains(&used), "{used} of {queues} queues");
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get().min(64));
        let port = format!("p{endpoint}");
        for q in 0..queues {
            let mask = (0..cpus)
                .filter(|c| *c as u32 % used == q)
                .fold(0u64, |m, c| m | 1 << c);
            let mask = format!("{mask:x}");
            let path = format!("/sys/class/net/{port}/queues/tx-{q}/xps_cpus");
            let out = self
                .bridge
                .exec_with_input(&["sh", "-c", &format!("cat > {path}")], mask.as_bytes())?;
            if !out.status.success() {
                return Err(format!(
                    "writing {mask} to {path}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(())
    }

    /// Drops a fraction `rate` (0.0 to 1.0, in steps of 1/10,000) of the
    /// frames of `ethertype` the bridge forwards, each copy on each port
    /// drawn on its own: loss on the segment, in both directions and for
    /// every frame kind, outside anything the test runs (an nftables rule
    /// in the bridge namespace; needs the `nft` tool, which
    /// `scripts/setup.sh` installs). `rate` 0 removes the rule. Returns the
    /// frames dropped so far by the rule being replaced (0 if none).
    pub fn set_loss(&self, ethertype: u16, rate: f64) -> Result<u64, String> {
        if !(0.0..=1.0).contains(&rate) {
            return Err(format!("loss {rate} is not a fraction from 0 to 1"));
        }
        let rule = (rate > 0.0).then(|| {
            let per_10k = (rate * 10_000.0).round() as u32;
            format!("ether type {ethertype:#06x} numgen random mod 10000 < {per_10k} counter drop")
        });
        self.replace_drop_rule(LOSS_TABLE, rule, "the loss rule")
    }

    /// Makes the segment a fabric without multicast (`on`), or puts
    /// multicast back: the bridge drops every frame to a group address
    /// (the I/G bit of the destination set: multicast and broadcast), as a
    /// cloud network or a routed fabric with IGMP off does; unicast frames
    /// go on. An nftables rule in the bridge namespace, like
    /// [`Topology::set_loss`]'s. Returns the frames it has dropped so far.
    pub fn drop_multicast(&self, on: bool) -> Result<u64, String> {
        let rule = on.then(|| {
            "ether daddr & 01:00:00:00:00:00 == 01:00:00:00:00:00 counter drop".to_owned()
        });
        self.replace_drop_rule(NO_MULTICAST_TABLE, rule, "the rule that drops multicast")
    }

    /// Replaces the bridge namespace's nftables table `table` by one whose
    /// forward chain holds `rule` (none: the table goes). Returns the
    /// packets the table's counter had dropped until then.
    fn replace_drop_rule(
        &self,
        table: &str,
        rule: Option<String>,
        what: &str,
    ) -> Result<u64, String> {
        let dropped = self.table_dropped(table);
        let _ = self
            .bridge
            .exec(&["nft", "delete", "table", "bridge", table]);
        let Some(rule) = rule else {
            return Ok(dropped);
        };
        let rules = format!(
            "table bridge {table} {{\n  chain filter {{\n    type filter hook forward priority 0; policy accept;\n    {rule}\n  }}\n}}\n"
        );
        let out = self
            .bridge
            .exec_with_input(&["nft", "-f", "-"], rules.as_bytes())?;
        if !out.status.success() {
            return Err(format!(
                "nft refused {what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(dropped)
    }

    /// Packets the counter of nftables table `table` has dropped (0 if the
    /// table is not there).
    fn table_dropped(&self, table: &str) -> u64 {
        let out = self.bridge.exec(&["nft", "list", "table", "bridge", table]);
        counter_packets(&String::from_utf8_lossy(&out.stdout))
    }

    /// Frames the rule of [`Topology::drop_multicast`] has dropped so far.
    pub fn multicast_dropped(&self) -> u64 {
        self.table_dropped(NO_MULTICAST_TABLE)
    }

    /// Frames the loss rule of [`Topology::set_loss`] has dropped so far.
    pub fn loss_dropped(&self) -> u64 {
        self.table_dropped(LOSS_TABLE)
    }

    /// Caps every link at `rate` (a `tc` rate such as `10mbit`) with
    /// token-bucket filters inside the bridge namespace, to emulate a slow
    /// segment: a `tbf` on each bridge-side veth end (`p0` is the sender's
    /// port, `p1..` the receivers'), which shapes what leaves the bridge
    /// towards each endpoint (ACKs and NAKs converging on the sender queue on
    /// `p0`), and a `tbf` on an `ifb` device that `p0`'s ingress is
    /// redirected through, which shapes everything the sender puts on the
    /// wire (every unicast copy of the iterative algorithm one after the
    /// other, as on a shared segment). Shaping the sender's own `eth0` would
    /// not do: AF_XDP's copy-mode transmit bypasses the qdisc. `burst` is
    /// the bucket (`32kbit`). Only interfaces inside the topology's
    /// namespaces are touched.
    pub fn limit_rate(&self, rate: &str, burst: &str) -> Result<(), String> {
        self.shape(rate, burst, 1)
    }

    /// [`Topology::limit_rate`] with every endpoint's output shaped too,
    /// not only the sender's: each port's ingress goes through an `ifb` of
    /// its own. Every node then sends and receives at `rate` at most, each
    /// direction on its own: the full-duplex links of seed 003's model,
    /// where the members that relay a broadcast share nothing.
    pub fn limit_rate_every_port(&self, rate: &str, burst: &str) -> Result<(), String> {
        self.shape(rate, burst, self.receivers.len() + 1)
    }

    /// Shapes every bridge port's egress, and the ingress of the first
    /// `senders` ports (each through `ifb<i>`).
    fn shape(&self, rate: &str, burst: &str, senders: usize) -> Result<(), String> {
        let br = self.bridge.name.as_str();
        let tbf = |dev: &str| -> Vec<String> {
            [
                "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
            ]
            .iter()
            .chain(&["burst", burst, "latency", "50ms"])
            .map(|s| s.to_string())
            .collect()
        };
        let mut cmds: Vec<Vec<String>> = (0..=self.receivers.len())
            .map(|i| tbf(&format!("p{i}")))
            .collect();
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        for i in 0..senders {
            cmds.push(words(&format!("ip link add ifb{i} type ifb")));
            cmds.push(words(&format!("ip link set ifb{i} up")));
            cmds.push(tbf(&format!("ifb{i}")));
            cmds.push(words(&format!(
                "tc qdisc replace dev p{i} handle ffff: ingress"
            )));
            cmds.push(words(&format!(
                "tc filter add dev p{i} parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev ifb{i}"
            )));
        }
        for cmd in cmds {
            let out = Command::new("ip")
                .args(["netns", "exec", br])
                .args(&cmd)
                .output()
                .map_err(|e| format!("running {}: {e}", cmd[0]))?;
            if !out.status.success() {
                return Err(format!(
                    "{}: {}",
                    cmd.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(())
    }

    fn wait_carrier(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        for ep in std::iter::once(&self.sender).chain(&self.receivers) {
            loop {
                let out = Command::new("ip")
                    .args(["-n", &ep.name, "-br", "link", "show", IFNAME])
                    .output()
                    .expect("ip link show");
                if String::from_utf8_lossy(&out.stdout).contains("UP") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} {IFNAME} never came up",
                    ep.name
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Bridge ports start forwarding at once (STP off) but give the
        // kernel a moment to finish bringing the ports up.
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Deleting a namespace destroys its veth ends, and with them the peers.
        for name in self.created.iter().rev() {
            del_netns(name);
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ipn(ns: &str, args: &[&str]) {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    ip(&all);
}

fn enter(path: &str) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    // SAFETY: setns on a valid namespace fd affects only the calling thread
    // (a dedicated one, see `Netns::run`); CLONE_NEWNET checks the fd's type.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clears the calling thread's effective capability set (permitted stays, so
/// nothing is lost for good; the thread should end soon after).
pub fn drop_effective_caps() -> io::Result<()> {
    drop_effective_caps_except(&[])
}

/// Clears the calling thread's effective capabilities except those numbered in `keep`.
pub fn drop_effective_caps_except(keep: &[u32]) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header read/write exactly two Data
    // structs; pid 0 is the calling thread.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut mask = [0u32; 2];
        for &c in keep {
            mask[(c / 32) as usize] |= 1 << (c % 32);
        }
        data[0].effective &= mask[0];
        data[1].effective &= mask[1];
        if libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// An AF_PACKET raw socket bound to one interface, for sending test frames.
/// Create it inside the namespace (via [`Netns::run`]); use it from anywhere.
#[derive(Debug)]
pub struct RawSender {
    fd: OwnedFd,
}

impl RawSender {
    /// Opens a send-only packet socket on `ifname` in the current thread's namespace.
    pub fn open(ifname: &str) -> io::Result<RawSender> {
        let c = CString::new(ifname).expect("no NUL");
        // SAFETY: plain syscalls with valid arguments; results are checked.
        unsafe {
            let ifindex = libc::if_nametoindex(c.as_ptr());
            if ifindex == 0 {
                return Err(io::Error::last_os_error());
            }
            // Protocol 0: this socket receives nothing.
            let raw = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(raw);
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_ifindex = ifindex as i32;
            let rc = libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(RawSender { fd })
        }
    }

    /// Sends one complete Ethernet frame.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is valid for reads of its length during the call.
            let rc =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if rc >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            return Err(e);
        }
    }
}

/// An AF_PACKET raw socket bound to one interface that captures the frames
/// of one EtherType arriving there (not those this host sends): a test's
/// sniffer, e.g. an attacker's copy of the group frames a bridge floods to
/// every port, or a mirror of what one node sends (bound to its port in the
/// bridge's namespace). Create it inside the namespace (via
/// [`Netns::run`]); use it from anywhere.
#[derive(Debug)]
pub struct RawReceiver {
    fd: OwnedFd,
    ethertype: u16,
}

impl RawReceiver {
    /// Opens a capture socket for `ethertype` on `ifname` in the current
    /// thread's namespace, with a receive buffer of about `rcvbuf` bytes.
    pub fn open(ifname: &str, ethertype: u16, rcvbuf: usize) -> io::Result<RawReceiver> {
        let c = CString::new(ifname).expect("no NUL");
        // Every protocol, filtered in `recv`: a bridge port hands its frames
        // to the bridge before protocol-specific sockets would see them,
        // and only ETH_P_ALL sockets see them first.
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain syscalls with valid arguments; results are checked.
        unsafe {
            let ifindex = libc::if_nametoindex(c.as_ptr());
            if ifindex == 0 {
                return Err(io::Error::last_os_error());
            }
            let raw = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(proto),
            );
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(raw);
            let size = i32::try_from(rcvbuf).unwrap_or(i32::MAX);
            // Best effort: a smaller buffer only drops more under a burst.
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            );
            // Frames this host sends are never queued (Linux 4.20 on; older
            // kernels queue them and `recv` skips them).
            let one: i32 = 1;
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                (&one as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            );
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = ifindex as i32;
            let rc = libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(RawReceiver { fd, ethertype })
        }
    }

    /// The next frame that arrived on the interface (frames this host sent
    /// are skipped), or None when none came within `timeout`.
    pub fn recv(&self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 65_536];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd for the duration of the call.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                return Ok(None);
            }
            // SAFETY: zeroed sockaddr_ll is a valid value; recvfrom writes at
            // most `len` bytes to `buf` and `alen` bytes to `sll`.
            let (n, sll) = unsafe {
                let mut sll: libc::sockaddr_ll = std::mem::zeroed();
                let mut alen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                let n = libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut sll as *mut libc::sockaddr_ll).cast(),
                    &mut alen,
                );
                (n, sll)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) {
                    continue;
                }
                return Err(e);
            }
            if sll.sll_pkttype == libc::PACKET_OUTGOING
                || n < 14
                || buf[12..14] != self.ethertype.to_be_bytes()
            {
                continue;
            }
            buf.truncate(n as usize);
            return Ok(Some(buf));
        }
    }
}

/// Builds a test frame: Ethernet header with `ethertype`, then a 4-byte
/// big-endian sequence number and a pattern derived from it, `len` bytes total.
pub fn test_frame(dst: MacAddr, src: MacAddr, ethertype: u16, seq: u32, len: usize) -> Vec<u8> {
    assert!(len >= 18);
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    for i in 0..len - 18 {
        f.push((seq as usize).wrapping_mul(31).wrapping_add(i) as u8);
    }
    f
}

/// Sends one ICMP echo request to `dst` from the current thread's namespace
/// through a raw socket and waits for the reply: a `ping` that needs no
/// binary (the `ping` tool is not installed on this machine).
pub fn icmp_ping(dst: Ipv4Addr, ident: u16, seq: u16, timeout: Duration) -> io::Result<Duration> {
    let mut req = vec![8u8, 0, 0, 0];
    req.extend_from_slice(&ident.to_be_bytes());
    req.extend_from_slice(&seq.to_be_bytes());
    req.extend_from_slice(b"mcast-xsk ping payload");
    let sum = checksum(&req);
    req[2..4].copy_from_slice(&sum.to_be_bytes());
    let start = Instant::now();
    // SAFETY: plain socket syscalls with valid buffers; results are checked.
    unsafe {
        let raw = libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        );
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(raw);
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
        let mut sin: libc::sockaddr_in = std::mem::zeroed();
        sin.sin_family = libc::AF_INET as u16;
        sin.sin_addr.s_addr = u32::from_ne_bytes(dst.octets());
        let rc = libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        );
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 1500];
        while start.elapsed() < timeout {
            let n = libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0);
            if n < 0 {
                continue; // timeout slice elapsed: look again
            }
            let n = n as usize;
            let ihl = usize::from(buf[0] & 0x0f) * 4;
            if n >= ihl + 8
                && buf[ihl] == 0
                && buf[ihl + 4..ihl + 6] == ident.to_be_bytes()
                && buf[ihl + 6..ihl + 8] == seq.to_be_bytes()
            {
                return Ok(start.elapsed());
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no ICMP echo reply from {dst}"),
    ))
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for chunk in data.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry that an interrupted process cleans up from holds exactly
    /// the namespaces a topology created, until its `Drop` removes them.
    #[test]
    fn the_registry_follows_a_topology_from_creation_to_drop() {
        let Some(topo) = Topology::with_receivers("the_registry_follows_a_topology", 2) else {
            return;
        };
        let names: Vec<String> = [&topo.bridge, &topo.sender]
            .into_iter()
            .chain(&topo.receivers)
            .map(|n| n.name.clone())
            .collect();
        let live = live_namespaces();
        for n in &names {
            assert!(live.contains(n), "{n} not in {live:?}");
        }
        let listed = |n: &str| {
            let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.split_whitespace().next() == Some(n))
        };
        assert!(names.iter().all(|n| listed(n)));
        drop(topo);
        let live = live_namespaces();
        for n in &names {
            assert!(!live.contains(n), "{n} still registered: {live:?}");
            assert!(!listed(n), "{n} still exists");
        }
    }

    /// The segment's loss rule drops about the asked fraction of our
    /// EtherType's frames, none of another, and goes away at 0.
    #[test]
    fn set_loss_drops_about_the_asked_fraction_of_one_ethertype() {
        let Some(topo) = Topology::with_receivers("set_loss_drops", 1) else {
            return;
        };
        assert_eq!(topo.set_loss(0x88b5, 0.1).unwrap(), 0);
        let (to, from) = (topo.receivers[0].mac, topo.sender.mac);
        topo.sender.run(|| {
            let tx = RawSender::open(IFNAME).unwrap();
            for seq in 0..1000 {
                tx.send(&test_frame(to, from, 0x88b6, seq, 64)).unwrap();
            }
        });
        assert_eq!(topo.loss_dropped(), 0, "another EtherType was dropped");
        topo.sender.run(|| {
            let tx = RawSender::open(IFNAME).unwrap();
            for seq in 0..10_000 {
                tx.send(&test_frame(to, from, 0x88b5, seq, 64)).unwrap();
            }
        });
        let dropped = topo.loss_dropped();
        // 10 % of 10,000: a binomial draw's standard deviation is 30.
        assert!(
            (850..=1150).contains(&dropped),
            "dropped {dropped} of 10,000"
        );
        assert_eq!(topo.set_loss(0x88b5, 0.0).unwrap(), dropped);
        assert_eq!(topo.loss_dropped(), 0, "the rule is gone");
        assert!(topo.set_loss(0x88b5, 1.5).is_err());
    }
}
