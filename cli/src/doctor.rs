//! `mcast doctor`: can mcastd run here, and if not, what to change.
//!
//! Every check only reads: `/proc`, `/sys`, the embedded XDP object and the
//! output of `ip -d link show`. Nothing is attached, configured or created.
//! Checks about this process (capabilities, RLIMIT_MEMLOCK) describe the
//! process running the doctor: under systemd mcastd gets its own from the unit
//! (`docs/mcastd.service`), so those report `Warn`, not `Fail`.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::config::{Config, Datapath, XdpMode, DEFAULT_FRAMES, UMEM_FRAME_BYTES};

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Fine.
    Ok,
    /// Works, or may work, but worth changing.
    Warn,
    /// mcastd will not run (as configured) until this is fixed.
    Fail,
    /// Not checked (no interface given, or a check it depends on failed).
    Skip,
}

impl Status {
    /// The tag `render` prints: `[ ok ]`, `[warn]`, `[FAIL]`, `[skip]`.
    pub const fn tag(self) -> &'static str {
        match self {
            Status::Ok => "[ ok ]",
            Status::Warn => "[warn]",
            Status::Fail => "[FAIL]",
            Status::Skip => "[skip]",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Short name ("kernel", "capabilities", "interface"...).
    pub name: &'static str,
    /// Outcome.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do, for `Warn` and `Fail`.
    pub fix: Option<String>,
}

impl Check {
    fn new(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
        Check {
            name,
            status,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// Every check, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
}

impl Report {
    /// One line per check (`[ ok ] kernel 6.1.0: AF_XDP and XDP supported`),
    /// each `Warn`/`Fail` followed by an indented `fix: ...` line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let _ = writeln!(out, "{} {} {}", c.status.tag(), c.name, c.detail);
            if let Some(fix) = &c.fix {
                let _ = writeln!(out, "       fix: {fix}");
            }
        }
        out
    }

    /// True if no check failed (warnings allowed).
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    /// The check named `name`, if it ran.
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// Runs every check: on `iface` if given, else on `cfg`'s interface; with
/// `cfg`'s queue, datapath, XDP mode, frames and socket (defaults without one).
pub fn run(iface: Option<&str>, cfg: Option<&Config>) -> Report {
    let iface = iface.or(cfg.map(|c| c.interface.as_str()));
    let datapath = cfg.map_or(Datapath::Xdp, |c| c.datapath);
    let xdp_mode = cfg.map_or(XdpMode::Auto, |c| c.xdp_mode);
    // The last queue served (`queue` + `queues` − 1): every one must exist.
    let queue = cfg.map_or(0, |c| c.queue + c.queues.max(1) - 1);
    let umem = cfg.map_or(
        u64::from(DEFAULT_FRAMES) * UMEM_FRAME_BYTES,
        Config::umem_bytes,
    );
    let socket = cfg.map_or_else(
        || PathBuf::from("/run/mcastd/mcastd.sock"),
        |c| c.socket.clone(),
    );

    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = parse_cap_eff(&status);

    let mut checks = vec![
        check_kernel(
            fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .as_deref(),
        ),
        check_capabilities(caps, datapath),
        check_memlock(
            fs::read_to_string("/proc/self/limits").ok().as_deref(),
            caps.is_some_and(|c| has(c, CAP_IPC_LOCK)),
            umem,
            datapath,
        ),
        check_xdp_object(datapath),
    ];
    match iface {
        None => {
            for name in [
                "interface",
                "mtu",
                "rx queues",
                "xdp attached",
                "attach mode",
            ] {
                checks.push(
                    Check::new(name, Status::Skip, "no interface given")
                        .fix("name one (`mcast doctor IFACE`) or pass --config with `interface`"),
                );
            }
        }
        Some(name) => checks.extend(check_interface(name, queue, datapath, xdp_mode)),
    }
    checks.push(check_bpffs(
        fs::read_to_string("/proc/mounts").ok().as_deref(),
    ));
    checks.push(check_socket_dir(&socket, &status));
    let state_dir = cfg.map_or_else(|| PathBuf::from("/var/lib/mcastd"), |c| c.state_dir.clone());
    checks.push(check_state_dir(
        &state_dir,
        cfg.map_or(1, |c| c.node),
        &status,
    ));
    checks.push(check_key(cfg));
    Report { checks }
}

/// The cluster key the configuration names (docs/mcastd.md
/// "Authentication"), read with mcastd's own checks, as this user.
fn check_key(cfg: Option<&Config>) -> Check {
    const NAME: &str = "cluster key";
    let Some(cfg) = cfg else {
        return Check::new(NAME, Status::Skip, "no configuration given")
            .fix("pass --config to check its key_file");
    };
    if cfg.insecure {
        return Check::new(
            NAME,
            Status::Warn,
            "insecure = true: frames are not authenticated; any host on the segment can forge them",
        )
        .fix("create a key with `mcast keygen /etc/mcast/cluster.key`, copy it to every node, set key_file and remove insecure");
    }
    if cfg.key_file.is_none() {
        return Check::new(NAME, Status::Fail, "no key_file: mcastd will refuse to start")
            .fix("create a key with `mcast keygen /etc/mcast/cluster.key`, copy it to every node and set key_file (or insecure = true)");
    }
    match crate::keys::load(cfg) {
        Ok(keys) => Check::new(NAME, Status::Ok, crate::keys::describe(keys.as_ref())),
        Err(e) => Check::new(NAME, Status::Fail, e)
            .fix("mcastd checks the key file as the user it runs as: run this check as that user"),
    }
}

/// CAP_NET_ADMIN: attach XDP, create maps with CAP_BPF.
pub const CAP_NET_ADMIN: u32 = 12;
/// CAP_NET_RAW: AF_XDP and AF_PACKET sockets.
pub const CAP_NET_RAW: u32 = 13;
/// CAP_IPC_LOCK: lock memory beyond RLIMIT_MEMLOCK.
pub const CAP_IPC_LOCK: u32 = 14;
/// CAP_SYS_ADMIN: covers CAP_BPF and CAP_PERFMON on kernels before 5.8.
pub const CAP_SYS_ADMIN: u32 = 21;
/// CAP_PERFMON: with CAP_BPF, pointer-arithmetic programs and some helpers.
pub const CAP_PERFMON: u32 = 38;
/// CAP_BPF: load programs and create maps.
pub const CAP_BPF: u32 = 39;

fn has(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// The `CapEff:` mask of a `/proc/PID/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// The effective uid and the gids (effective and supplementary) of a
/// `/proc/PID/status` text.
pub fn parse_ids(status: &str) -> Option<(u32, Vec<u32>)> {
    let field = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)).map(|v| {
            v.split_whitespace()
                .filter_map(|t| t.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
    };
    let uid = *field("Uid:")?.get(1)?;
    let mut gids = vec![*field("Gid:")?.get(1)?];
    gids.extend(field("Groups:").unwrap_or_default());
    Some((uid, gids))
}

/// A resource limit's soft value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// No limit.
    Unlimited,
    /// At most this many bytes.
    Bytes(u64),
}

/// The soft "Max locked memory" of a `/proc/PID/limits` text.
pub fn parse_memlock(limits: &str) -> Option<Limit> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(Limit::Unlimited),
        v => v.parse().ok().map(Limit::Bytes),
    }
}

/// (major, minor) of a kernel release string such as "6.1.0-18-amd64".
pub fn parse_kernel_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?;
    let digits = minor
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(minor.len());
    let minor = minor[..digits].parse().ok()?;
    Some((major, minor))
}

/// What `ip -d link show IF` says about an attached XDP program: e.g.
/// `Some("xdpgeneric, prog/xdp id 42")`, or `None` if there is none.
pub fn parse_xdp_attached(ip_output: &str) -> Option<String> {
    let mut lines = ip_output.lines();
    let header = lines.next().unwrap_or("");
    let mode = header
        .split_whitespace()
        .find(|t| t.starts_with("xdp"))
        .map(|t| t.split('/').next().unwrap_or(t).to_owned());
    let prog = ip_output.lines().find_map(|l| {
        let l = l.trim_start();
        l.starts_with("prog/xdp")
            .then(|| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
    });
    match (mode, prog) {
        (None, None) => None,
        (Some(m), None) => Some(m),
        (None, Some(p)) => Some(p),
        (Some(m), Some(p)) => Some(format!("{m}, {p}")),
    }
}

/// The link kind (`veth`, `bridge`, `ifb`...) of `ip -d link show IF` output,
/// if it names one (physical NICs and `lo` do not).
pub fn parse_link_kind(ip_output: &str) -> Option<String> {
    const NOT_KINDS: [&str; 6] = [
        "link/",
        "prog/",
        "altname",
        "promiscuity",
        "addrgenmode",
        "inet",
    ];
    ip_output.lines().skip(2).find_map(|l| {
        let tok = l.split_whitespace().next()?;
        let is_kind = !NOT_KINDS.iter().any(|p| tok.starts_with(p))
            && tok.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && l.starts_with(' ');
        is_kind.then(|| tok.to_owned())
    })
}

/// Drivers with native (driver-mode) XDP in mainline Linux.
pub const NATIVE_XDP_DRIVERS: &[&str] = &[
    "mlx5_core",
    "mlx4_en",
    "mlx4_core",
    "ice",
    "i40e",
    "ixgbe",
    "ixgbevf",
    "igb",
    "igc",
    "ena",
    "virtio_net",
    "bnxt_en",
    "nfp",
    "qede",
    "thunder_nic",
    "tun",
    "veth",
    "stmmac",
    "fec",
    "mvneta",
    "mvpp2",
    "sfc",
    "hv_netvsc",
    "netsec",
    "dpaa2_eth",
    "tsnep",
    "lan966x_switch",
    "bond",
];

fn check_kernel(release: Option<&str>) -> Check {
    let Some(release) = release.map(str::trim) else {
        return Check::new(
            "kernel",
            Status::Warn,
            "cannot read /proc/sys/kernel/osrelease",
        )
        .fix("check that /proc is mounted");
    };
    match parse_kernel_release(release) {
        Some(v) if v >= (5, 10) => {
            Check::new("kernel", Status::Ok, format!("{release}: AF_XDP and XDP supported"))
        }
        Some(_) => Check::new(
            "kernel",
            Status::Fail,
            format!("{release}: older than 5.10, which mcastd's AF_XDP path needs (bpf_link XDP attach, need_wakeup)"),
        )
        .fix("upgrade to Linux 5.10 or later, or set datapath = \"packet\" (AF_PACKET)"),
        None => Check::new("kernel", Status::Warn, format!("{release}: cannot parse the version"))
            .fix("make sure the kernel is 5.10 or later"),
    }
}

fn check_capabilities(caps: Option<u64>, datapath: Datapath) -> Check {
    let Some(caps) = caps else {
        return Check::new(
            "capabilities",
            Status::Warn,
            "cannot read CapEff in /proc/self/status",
        )
        .fix("run mcastd as root or with the capabilities of docs/mcastd.service");
    };
    let bpf = has(caps, CAP_BPF) || has(caps, CAP_SYS_ADMIN);
    let perfmon = has(caps, CAP_PERFMON) || has(caps, CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    if datapath == Datapath::Xdp {
        if !has(caps, CAP_NET_ADMIN) {
            missing.push("CAP_NET_ADMIN");
        }
        if !bpf {
            missing.push("CAP_BPF");
        }
    }
    if !has(caps, CAP_NET_RAW) {
        missing.push("CAP_NET_RAW");
    }
    let needs = match datapath {
        Datapath::Xdp => "CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF (XDP attach, maps, AF_XDP socket)",
        Datapath::Packet => "CAP_NET_RAW (AF_PACKET socket)",
    };
    if missing.is_empty() {
        let note = if datapath == Datapath::Xdp && !perfmon {
            " (CAP_PERFMON absent: recommended with CAP_BPF)"
        } else {
            ""
        };
        return Check::new(
            "capabilities",
            Status::Ok,
            format!("this process has {needs}{note}"),
        );
    }
    Check::new(
        "capabilities",
        Status::Warn,
        format!(
            "this process (CapEff {caps:016x}) lacks {}; mcastd needs {needs}",
            missing.join(", ")
        ),
    )
    .fix(
        "run mcastd as root, under systemd with AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW CAP_BPF CAP_PERFMON \
         (docs/mcastd.service), or `setcap cap_net_admin,cap_net_raw,cap_bpf,cap_perfmon+ep /usr/local/bin/mcastd`",
    )
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

fn check_memlock(limits: Option<&str>, ipc_lock: bool, umem: u64, datapath: Datapath) -> Check {
    if datapath == Datapath::Packet {
        return Check::new(
            "memlock",
            Status::Skip,
            "datapath = \"packet\" registers no UMEM",
        );
    }
    const FIX: &str = "`ulimit -l unlimited` before starting mcastd, or LimitMEMLOCK=infinity in its systemd unit";
    match limits.and_then(parse_memlock) {
        Some(Limit::Unlimited) => Check::new("memlock", Status::Ok, "RLIMIT_MEMLOCK unlimited"),
        Some(Limit::Bytes(_)) if ipc_lock => Check::new(
            "memlock",
            Status::Ok,
            "CAP_IPC_LOCK held: RLIMIT_MEMLOCK does not apply",
        ),
        Some(Limit::Bytes(b)) if b >= umem => Check::new(
            "memlock",
            Status::Ok,
            format!("RLIMIT_MEMLOCK {} covers the UMEM ({})", mib(b), mib(umem)),
        ),
        Some(Limit::Bytes(b)) => Check::new(
            "memlock",
            Status::Warn,
            format!(
                "RLIMIT_MEMLOCK {} ({b} B) is below the UMEM size {} (frames x {UMEM_FRAME_BYTES} B): registering it fails with ENOBUFS",
                mib(b),
                mib(umem)
            ),
        )
        .fix(FIX),
        None => Check::new("memlock", Status::Warn, "cannot read Max locked memory in /proc/self/limits")
            .fix(FIX),
    }
}

fn check_xdp_object(datapath: Datapath) -> Check {
    let obj = mcast_xsk::loader::STEER_OBJECT;
    let status_if_bad = if datapath == Datapath::Xdp {
        Status::Fail
    } else {
        Status::Warn
    };
    let rebuild = "rebuild mcastd (engine/xsk/build.rs compiles ebpf/steer.bpf.c; needs clang, llvm, libbpf-dev: ./scripts/setup.sh)";
    match aya_obj::Object::parse(obj) {
        Ok(parsed) => {
            let maps = ["config", "groups", "xsks", "counters", "drop_ratio"];
            let missing: Vec<_> = maps
                .iter()
                .filter(|m| !parsed.maps.contains_key(**m))
                .collect();
            if !parsed.programs.contains_key("steer") || !missing.is_empty() {
                return Check::new(
                    "xdp object",
                    status_if_bad,
                    format!(
                        "embedded steer.bpf.o ({} B) lacks the program `steer` or maps {missing:?}",
                        obj.len()
                    ),
                )
                .fix(rebuild);
            }
            Check::new(
                "xdp object",
                Status::Ok,
                format!(
                    "embedded steer.bpf.o, {} B: program `steer` and its {} maps parse",
                    obj.len(),
                    maps.len()
                ),
            )
        }
        Err(e) => Check::new(
            "xdp object",
            status_if_bad,
            format!("embedded steer.bpf.o ({} B) does not parse: {e}", obj.len()),
        )
        .fix(rebuild),
    }
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// The kernel's XDP_PACKET_HEADROOM: copy mode places a frame this far into a UMEM frame.
const XDP_HEADROOM: u64 = 256;
/// Largest MTU whose frames fit a UMEM frame after the headroom.
const MAX_COPY_MTU: u64 = UMEM_FRAME_BYTES - XDP_HEADROOM - mcast_wire::ETH_HEADER_LEN as u64;

fn check_interface(name: &str, queue: u32, datapath: Datapath, xdp_mode: XdpMode) -> Vec<Check> {
    let dir = Path::new("/sys/class/net").join(name);
    if name.is_empty() || name.contains('/') || !dir.exists() {
        let mut out = vec![Check::new(
            "interface",
            Status::Fail,
            format!("{name:?} does not exist (no {})", dir.display()),
        )
        .fix("name an interface listed by `ip link`, or set `interface` in the configuration")];
        for n in ["mtu", "rx queues", "xdp attached", "attach mode"] {
            out.push(Check::new(
                n,
                Status::Skip,
                format!("no interface {name:?}"),
            ));
        }
        return out;
    }
    let ip = Command::new("ip")
        .args(["-d", "link", "show", "dev", name])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());

    // Driver or kind.
    let driver = fs::read_link(dir.join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
    let flags = read_trim(&dir.join("flags"))
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let loopback = flags & 0x8 != 0;
    let kind = ip.as_deref().and_then(parse_link_kind);
    let (driver_name, what) = match (&driver, &kind) {
        (Some(d), _) => (d.clone(), format!("driver {d}")),
        (None, _) if loopback => ("lo".to_owned(), "virtual (loopback)".to_owned()),
        (None, Some(k)) => (k.clone(), format!("virtual ({k})")),
        (None, None) => ("virtual".to_owned(), "virtual".to_owned()),
    };
    let native = NATIVE_XDP_DRIVERS.contains(&driver_name.as_str());

    let mut out = Vec::new();
    let operstate = read_trim(&dir.join("operstate")).unwrap_or_else(|| "unknown".into());
    let admin_up = flags & 0x1 != 0;
    let iface = if !admin_up {
        Check::new(
            "interface",
            Status::Fail,
            format!("{name}: {what}, administratively down"),
        )
        .fix(format!("ip link set dev {name} up"))
    } else if operstate == "down" || operstate == "lowerlayerdown" {
        Check::new(
            "interface",
            Status::Warn,
            format!("{name}: {what}, up but no carrier (operstate {operstate})"),
        )
        .fix(format!(
            "check the cable / link partner of {name} (or the peer of a veth)"
        ))
    } else {
        Check::new(
            "interface",
            Status::Ok,
            format!("{name}: {what}, up (operstate {operstate})"),
        )
    };
    out.push(iface);

    // MTU.
    let mtu = read_trim(&dir.join("mtu")).and_then(|m| m.parse::<u64>().ok());
    out.push(match mtu {
        None => Check::new("mtu", Status::Warn, format!("cannot read {}/mtu", dir.display())),
        Some(m) if m < 1500 => Check::new(
            "mtu",
            Status::Warn,
            format!("{m}: below 1500, each frame carries {} B of message", m.saturating_sub(mcast_wire::HEADER_LEN as u64)),
        )
        .fix(format!("raise it if the segment allows (`ip link set dev {name} mtu 1500`); mcastd works, with more frames per message")),
        Some(m) if datapath == Datapath::Xdp && m > MAX_COPY_MTU => Check::new(
            "mtu",
            Status::Warn,
            format!(
                "{m}: frames above {MAX_COPY_MTU} B of MTU do not fit a {UMEM_FRAME_BYTES} B UMEM frame after the kernel's {XDP_HEADROOM} B XDP headroom"
            ),
        )
        .fix(format!("`ip link set dev {name} mtu {MAX_COPY_MTU}` (or lower) on every node")),
        Some(m) => Check::new("mtu", Status::Ok, format!("{m}: {} B of message per frame", m - mcast_wire::HEADER_LEN as u64)),
    });

    // RX queues.
    let rx = fs::read_dir(dir.join("queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(0);
    out.push(if rx == 0 {
        Check::new(
            "rx queues",
            Status::Warn,
            format!("cannot count {}/queues/rx-*", dir.display()),
        )
    } else if queue >= rx {
        Check::new(
            "rx queues",
            Status::Fail,
            format!("{rx} RX queue(s); queue {queue} (the last of `queue` .. `queue` + `queues` − 1) does not exist"),
        )
        .fix(format!(
            "serve queues 0..={} only, or add queues (`ethtool -L {name} combined {}`)",
            rx - 1,
            queue + 1
        ))
    } else if queue >= mcast_xsk::loader::MAX_QUEUES {
        Check::new(
            "rx queues",
            Status::Fail,
            format!(
                "queue = {queue} is beyond the steering program's {} sockets",
                mcast_xsk::loader::MAX_QUEUES
            ),
        )
        .fix(format!(
            "use a queue below {}",
            mcast_xsk::loader::MAX_QUEUES
        ))
    } else {
        Check::new(
            "rx queues",
            Status::Ok,
            format!("{rx} RX queue(s); queue {queue} exists"),
        )
    });

    // An XDP program already attached.
    out.push(match &ip {
        None => Check::new("xdp attached", Status::Skip, "`ip -d link show` unavailable")
            .fix("install iproute2 to check for an attached XDP program"),
        Some(text) => match parse_xdp_attached(text) {
            None => Check::new("xdp attached", Status::Ok, "no XDP program on the interface"),
            Some(what) => Check::new(
                "xdp attached",
                if datapath == Datapath::Xdp { Status::Fail } else { Status::Warn },
                format!("an XDP program is attached ({what}): mcastd's attach will fail while it stays"),
            )
            .fix(format!(
                "stop whatever attached it (another mcastd?); if it is stale, `ip link set dev {name} xdp off`"
            )),
        },
    });

    // Expected attach mode.
    out.push(match (datapath, xdp_mode) {
        (Datapath::Packet, _) => Check::new("attach mode", Status::Skip, "datapath = \"packet\": no XDP program"),
        (_, XdpMode::Skb) => Check::new("attach mode", Status::Ok, format!("skb (generic) as configured; works on {what}")),
        (_, mode) if driver_name == "veth" => {
            let note = "native if the peer's MTU <= 3506 and this end has as many RX queues as the peer has TX queues, else skb (copy mode either way)";
            if mode == XdpMode::Native && mtu.is_some_and(|m| m > u64::from(mcast_xsk::loader::VETH_NATIVE_MAX_MTU)) {
                Check::new("attach mode", Status::Warn, format!("veth: {note}; this end's MTU is above 3506"))
                    .fix("set xdp_mode = \"auto\" or \"skb\", or lower the peer's MTU to 3506")
            } else {
                Check::new("attach mode", Status::Ok, format!("veth: {note}"))
            }
        }
        (_, XdpMode::Native) if !native => Check::new(
            "attach mode",
            Status::Fail,
            format!("xdp_mode = \"native\" but {what} has no native XDP"),
        )
        .fix("set xdp_mode = \"auto\" (falls back to skb) or \"skb\""),
        (_, _) if native => Check::new("attach mode", Status::Ok, format!("native expected ({what} supports driver-mode XDP)")),
        (_, _) => Check::new(
            "attach mode",
            Status::Ok,
            format!("skb (generic) expected: {what} has no native XDP; xdp_mode = \"auto\" falls back"),
        ),
    });
    out
}

fn check_bpffs(mounts: Option<&str>) -> Check {
    let mounted = mounts.is_some_and(|m| {
        m.lines().any(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            f.len() > 2 && f[1] == "/sys/fs/bpf" && f[2] == "bpf"
        })
    });
    if mounted {
        Check::new(
            "bpffs",
            Status::Ok,
            "/sys/fs/bpf mounted (mcastd pins nothing; for bpftool)",
        )
    } else if Path::new("/sys/fs/bpf").is_dir() {
        Check::new(
            "bpffs",
            Status::Warn,
            "/sys/fs/bpf exists but is not a mounted bpffs (mcastd does not need it)",
        )
        .fix("for inspection with bpftool: mount -t bpf bpf /sys/fs/bpf")
    } else {
        Check::new(
            "bpffs",
            Status::Warn,
            "no /sys/fs/bpf (mcastd does not need it)",
        )
        .fix("for inspection with bpftool: mount -t bpf bpf /sys/fs/bpf")
    }
}

/// True if the directory's mode bits let `uid`/`gids` write and enter it.
fn may_write(meta: &fs::Metadata, uid: u32, gids: &[u32]) -> bool {
    if uid == 0 {
        return true;
    }
    let mode = meta.mode();
    if meta.uid() == uid {
        mode & 0o300 == 0o300
    } else if gids.contains(&meta.gid()) {
        mode & 0o030 == 0o030
    } else {
        mode & 0o003 == 0o003
    }
}

/// True if `uid`/`gids` could create `dir` (its parent exists and is
/// writable by them).
fn parent_writable(dir: &Path, uid: u32, gids: &[u32]) -> bool {
    dir.parent()
        .and_then(|p| fs::metadata(p).ok())
        .is_some_and(|m| may_write(&m, uid, gids))
}

fn check_socket_dir(socket: &Path, status: &str) -> Check {
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Check::new(
            "socket dir",
            Status::Fail,
            format!(
                "socket = {:?} has no directory",
                socket.display().to_string()
            ),
        )
        .fix("set socket to an absolute path such as /run/mcastd/mcastd.sock");
    };
    let (uid, gids) = parse_ids(status).unwrap_or((u32::MAX, Vec::new()));
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Check::new("socket dir", Status::Fail, format!("{} is not a directory", dir.display()))
            .fix("set socket to a path in a directory"),
        Ok(m) if may_write(&m, uid, &gids) => {
            if socket.exists() {
                Check::new("socket dir", Status::Warn, format!("{} already exists: mcastd may be running", socket.display()))
                    .fix("stop the running mcastd first; mcastd replaces a stale socket")
            } else {
                Check::new("socket dir", Status::Ok, format!("{} is writable by this process", dir.display()))
            }
        }
        Ok(m) => Check::new(
            "socket dir",
            Status::Warn,
            format!("{} (owner {}:{}, mode {:o}) is not writable by this process (uid {uid})", dir.display(), m.uid(), m.gid(), m.mode() & 0o7777),
        )
        .fix("run mcastd as the directory's owner (systemd's RuntimeDirectory=mcastd makes it so) or change the directory"),
        Err(_) => {
            let parent_ok = parent_writable(dir, uid, &gids);
            Check::new(
                "socket dir",
                Status::Warn,
                format!(
                    "{} does not exist{}",
                    dir.display(),
                    if parent_ok { " (this process could create it)" } else { "" }
                ),
            )
            .fix(format!("RuntimeDirectory=mcastd in the systemd unit creates it, or `mkdir -p {}`", dir.display()))
        }
    }
}

/// The state directory (`state_dir`, docs/mcastd.md "Failure detection"):
/// mcastd stores each run's incarnation and session there, so a restart
/// after the wall clock was set back is still recognised.
fn check_state_dir(dir: &Path, node: u32, status: &str) -> Check {
    const NAME: &str = "state dir";
    let lost = "a restart after the wall clock is set back would not be recognised";
    let (uid, gids) = parse_ids(status).unwrap_or((u32::MAX, Vec::new()));
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Check::new(NAME, Status::Warn, format!("{} is not a directory: {lost}", dir.display()))
            .fix("set state_dir to a directory"),
        Ok(m) if may_write(&m, uid, &gids) => {
            let file = crate::epochs::path(dir, node);
            match crate::epochs::load(&file) {
                Ok(Some(e)) => Check::new(NAME, Status::Ok, format!("{} is writable; node {node}'s last run took incarnation {}", dir.display(), e.incarnation)),
                Ok(None) => Check::new(NAME, Status::Ok, format!("{} is writable", dir.display())),
                Err(e) => Check::new(NAME, Status::Warn, format!("{e}: mcastd will replace it, and the clock alone gives its next incarnation"))
                    .fix(format!("remove {} if mcastd is not running", file.display())),
            }
        }
        Ok(m) => Check::new(
            NAME,
            Status::Warn,
            format!("{} (owner {}:{}, mode {:o}) is not writable by this process (uid {uid}): {lost}", dir.display(), m.uid(), m.gid(), m.mode() & 0o7777),
        )
        .fix("run mcastd as the directory's owner (systemd's StateDirectory=mcastd makes it so) or change the directory"),
        Err(_) => {
            if parent_writable(dir, uid, &gids) {
                Check::new(NAME, Status::Ok, format!("{} does not exist; mcastd will create it", dir.display()))
            } else {
                Check::new(NAME, Status::Warn, format!("{} does not exist and this process cannot create it: {lost}", dir.display()))
                    .fix(format!("StateDirectory=mcastd in the systemd unit creates it, or `mkdir -p {}`", dir.display()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_check_needs_the_umem() {
        let umem = 16 << 20;
        assert_eq!(
            check_memlock(
                Some("Max locked memory         unlimited            unlimited            bytes\n"),
                false,
                umem,
                Datapath::Xdp
            )
            .status,
            Status::Ok
        );
        let low = "Max locked memory         8388608              8388608              bytes\n";
        let c = check_memlock(Some(low), false, umem, Datapath::Xdp);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("8 MiB") && c.fix.unwrap().contains("ulimit -l unlimited"));
        assert_eq!(
            check_memlock(Some(low), true, umem, Datapath::Xdp).status,
            Status::Ok
        );
        assert_eq!(
            check_memlock(Some(low), false, 8 << 20, Datapath::Xdp).status,
            Status::Ok
        );
        assert_eq!(
            check_memlock(Some(low), false, umem, Datapath::Packet).status,
            Status::Skip
        );
    }

    #[test]
    fn capability_check_names_what_is_missing() {
        let all = (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW) | (1 << CAP_BPF) | (1 << CAP_PERFMON);
        assert_eq!(
            check_capabilities(Some(all), Datapath::Xdp).status,
            Status::Ok
        );
        let c = check_capabilities(Some(1 << CAP_NET_RAW), Datapath::Xdp);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("CAP_NET_ADMIN, CAP_BPF"), "{}", c.detail);
        assert!(c.fix.unwrap().contains("setcap"));
        assert_eq!(
            check_capabilities(Some(1 << CAP_NET_RAW), Datapath::Packet).status,
            Status::Ok
        );
        // CAP_SYS_ADMIN stands in for CAP_BPF.
        let old = (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW) | (1 << CAP_SYS_ADMIN);
        assert_eq!(
            check_capabilities(Some(old), Datapath::Xdp).status,
            Status::Ok
        );
    }

    #[test]
    fn kernel_check() {
        assert_eq!(check_kernel(Some("6.1.0-18-amd64\n")).status, Status::Ok);
        assert_eq!(check_kernel(Some("5.10.0")).status, Status::Ok);
        let c = check_kernel(Some("5.4.0-42-generic"));
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.unwrap().contains("5.10"));
    }

    #[test]
    fn bpffs_check() {
        let m = "sysfs /sys sysfs rw 0 0\nbpf /sys/fs/bpf bpf rw,nosuid 0 0\n";
        assert_eq!(check_bpffs(Some(m)).status, Status::Ok);
        assert_eq!(
            check_bpffs(Some("sysfs /sys sysfs rw 0 0\n")).status,
            Status::Warn
        );
    }

    #[test]
    fn state_dir_check() {
        let root = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n";
        let dir = std::env::temp_dir().join(format!("mcast-doctor-state-{}", std::process::id()));
        // Absent, under a writable parent: mcastd makes it.
        let c = check_state_dir(&dir, 3, root);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.contains("will create it"), "{c:?}");
        let e = crate::epochs::Epochs {
            incarnation: 42,
            session: 7,
        };
        crate::epochs::store(&crate::epochs::path(&dir, 3), e).unwrap();
        let c = check_state_dir(&dir, 3, root);
        assert!(
            c.status == Status::Ok && c.detail.contains("incarnation 42"),
            "{c:?}"
        );
        std::fs::write(crate::epochs::path(&dir, 3), b"garbage").unwrap();
        assert_eq!(check_state_dir(&dir, 3, root).status, Status::Warn);
        let nobody =
            "Uid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nGroups:\t\n";
        let c = check_state_dir(Path::new("/proc"), 3, nobody);
        assert!(c.status == Status::Warn && c.fix.unwrap().contains("StateDirectory"));
        let c = check_state_dir(Path::new("/proc/absent/deeper"), 3, nobody);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn socket_dir_check() {
        let root = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n";
        let dir = std::env::temp_dir();
        let c = check_socket_dir(&dir.join("mcast-doctor-test-absent.sock"), root);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let c = check_socket_dir(Path::new("/nonexistent-mcast/x/mcastd.sock"), root);
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.unwrap().contains("RuntimeDirectory"));
        let nobody =
            "Uid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nGroups:\t\n";
        let c = check_socket_dir(Path::new("/proc/mcastd.sock"), nobody);
        assert_eq!(c.status, Status::Warn, "{c:?}");
    }
}
