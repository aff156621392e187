//! mcastd's configuration: a TOML file (`/etc/mcastd.toml`, example in
//! `docs/mcastd.toml.example`) plus command-line [`Overrides`].
//!
//! Every key but `node` and `interface` has a default. Unknown keys are errors
//! (`deny_unknown_fields` everywhere), so a typo is reported with its line
//! rather than silently ignored. The order is: [`Config::from_toml_str`] or
//! [`Config::load`] (parse), [`Config::apply`] (command line), then
//! [`Config::validate`] (its checks in `config/validate.rs`);
//! [`Config::resolve`] does all three. Every [`ConfigError`] names the
//! file, the key and what to change.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use mcast_wire::MacAddr;
use serde::{Deserialize, Deserializer};

mod validate;

/// Node ids are 1..=MAX_NODE (0 is reserved).
pub const MAX_NODE: u32 = 0x7fff_ffff;
/// Largest `max_message`: 64 MiB.
pub const MAX_MESSAGE_LIMIT: u64 = 64 << 20;
/// Longest group name, in bytes.
pub const MAX_GROUP_NAME: usize = 64;
/// Bytes of UMEM counted per frame when sizing RLIMIT_MEMLOCK (a page: the
/// largest frame size AF_XDP accepts).
pub const UMEM_FRAME_BYTES: u64 = 4096;

/// UMEM frames when the configuration says nothing: four default windows
/// (one group sending a full window still leaves room for receiving,
/// other groups and the rings), 64 MiB counted.
pub const DEFAULT_FRAMES: u32 = 16384;

/// The per-group window when the configuration says nothing. Under loss a
/// window is freed only when every receiver has repaired every gap in it,
/// and the daemon-to-daemon round trip on a loaded host is milliseconds:
/// 4,096 frames keep the sender going through a repair round at 1 % loss
/// where 1,024 stalled it (docs/benchmarks.md "Through mcastd under loss").
pub const DEFAULT_WINDOW_FRAMES: u32 = 4096;
/// Where mcastd looks for its configuration unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/mcastd.toml";

/// The reliability algorithm of a group (the engine's [`mcast_engine::Algorithm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// MAK: NAKs after random timers with suppression, ACKs per window.
    Mak,
    /// Plain NAK: unicast NAKs without suppression.
    Nak,
    /// Every receiver ACKs every frame.
    Ack,
    /// Go-Back-N unicast to each receiver in turn.
    Iterative,
}

impl Algorithm {
    /// The engine's variant.
    pub fn to_engine(self) -> mcast_engine::Algorithm {
        match self {
            Algorithm::Mak => mcast_engine::Algorithm::Mak,
            Algorithm::Nak => mcast_engine::Algorithm::Nak,
            Algorithm::Ack => mcast_engine::Algorithm::Ack,
            Algorithm::Iterative => mcast_engine::Algorithm::Iterative,
        }
    }

    /// The name used in the file and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Mak => "mak",
            Algorithm::Nak => "nak",
            Algorithm::Ack => "ack",
            Algorithm::Iterative => "iterative",
        }
    }
}

/// How frames reach the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Datapath {
    /// AF_XDP with the steering program (needs CAP_NET_ADMIN and CAP_BPF).
    Xdp,
    /// AF_PACKET: the fallback where XDP cannot attach.
    Packet,
}

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// Native, falling back to SKB mode (the reason is logged).
    Auto,
    /// Native (driver) mode only.
    Native,
    /// SKB (generic) mode only.
    Skb,
}

impl XdpMode {
    /// The loader's attach mode.
    pub fn to_xsk(self) -> mcast_xsk::AttachMode {
        match self {
            XdpMode::Auto => mcast_xsk::AttachMode::Auto,
            XdpMode::Native => mcast_xsk::AttachMode::Native,
            XdpMode::Skb => mcast_xsk::AttachMode::Skb,
        }
    }
}

/// How the polling thread waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Polling {
    /// Spin `spin_us`, then sleep until a frame or a deadline.
    Adaptive,
    /// Never sleep.
    Busy,
    /// Sleep at once (spin 0).
    Sleep,
}

/// How a group orders its senders' messages (docs/mcastd.md, "Group modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupMode {
    /// Each sender multicasts in its own stream; every receiver delivers
    /// each sender's messages in that sender's order.
    #[default]
    Fifo,
    /// Every member's messages go through the root of the group's hybrid
    /// tree (its agent), which multicasts them: every member delivers all
    /// senders' messages in one order, the root's.
    Sequenced,
    /// Every member stamps its messages with a hybrid logical clock and
    /// multicasts them itself; every member delivers all senders' messages
    /// in the order of their stamps (seed 002, TOC), no sequencer.
    Total,
    /// No multicast: every member's message spreads over the daemons'
    /// unicast links by a broadcast schedule (seed 003, `broadcast`);
    /// every receiver delivers each sender's messages in that sender's
    /// order.
    Broadcast,
}

impl GroupMode {
    /// The name used in the file and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            GroupMode::Fifo => "fifo",
            GroupMode::Sequenced => "sequenced",
            GroupMode::Total => "total",
            GroupMode::Broadcast => "broadcast",
        }
    }
}

/// The broadcast algorithm of a `mode = "broadcast"` group (seed 003;
/// docs/protocol.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Broadcast {
    /// For each message, the fastest by the α–β model for its size and the
    /// group's size.
    #[default]
    Auto,
    /// Always this one.
    Fixed(mcast_bcast::Algorithm),
}

impl FromStr for Broadcast {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(Broadcast::Auto);
        }
        mcast_bcast::Algorithm::parse(s)
            .map(Broadcast::Fixed)
            .map_err(|e| format!("broadcast = {s:?}: {e}, or \"auto\""))
    }
}

impl fmt::Display for Broadcast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Broadcast::Auto => f.write_str("auto"),
            Broadcast::Fixed(a) => write!(f, "{a}"),
        }
    }
}

impl<'de> Deserialize<'de> for Broadcast {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What happens when a client subscription's ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlowSubscriber {
    /// Disconnect the client, telling it why.
    Cutoff,
    /// Hold the group back: accept none of its frames until the subscriber drains.
    Hold,
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// The default.
    Info,
    /// Everything.
    Debug,
}

macro_rules! from_str_by_name {
    ($t:ty, $key:literal, [$($name:literal => $v:expr),+ $(,)?]) => {
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($name => Ok($v),)+
                    _ => Err(format!(
                        concat!($key, " = {:?} is not known: use one of ", $(concat!("\"", $name, "\", "),)+),
                        s
                    ).trim_end_matches(", ").to_owned()),
                }
            }
        }
    };
}
from_str_by_name!(Algorithm, "algorithm", ["mak" => Algorithm::Mak, "nak" => Algorithm::Nak, "ack" => Algorithm::Ack, "iterative" => Algorithm::Iterative]);
from_str_by_name!(Datapath, "datapath", ["xdp" => Datapath::Xdp, "packet" => Datapath::Packet]);
from_str_by_name!(XdpMode, "xdp_mode", ["auto" => XdpMode::Auto, "native" => XdpMode::Native, "skb" => XdpMode::Skb]);
from_str_by_name!(Polling, "polling", ["adaptive" => Polling::Adaptive, "busy" => Polling::Busy, "sleep" => Polling::Sleep]);
from_str_by_name!(SlowSubscriber, "slow_subscriber", ["cutoff" => SlowSubscriber::Cutoff, "hold" => SlowSubscriber::Hold]);
from_str_by_name!(GroupMode, "mode", ["fifo" => GroupMode::Fifo, "sequenced" => GroupMode::Sequenced, "total" => GroupMode::Total, "broadcast" => GroupMode::Broadcast]);
from_str_by_name!(LogLevel, "log", ["error" => LogLevel::Error, "warn" => LogLevel::Warn, "info" => LogLevel::Info, "debug" => LogLevel::Debug]);

/// Another node on the segment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// Its node id.
    pub node: u32,
    /// Its interface's MAC (unicast), `aa:bb:cc:dd:ee:ff`.
    #[serde(deserialize_with = "de_mac")]
    pub mac: MacAddr,
}

/// Per-group overrides of the daemon's defaults, by group name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// The group's name (as applications name it).
    pub name: String,
    /// Overrides `algorithm`.
    #[serde(default)]
    pub algorithm: Option<Algorithm>,
    /// Overrides `window_frames`.
    #[serde(default)]
    pub window_frames: Option<u32>,
    /// Overrides `slow_subscriber`.
    #[serde(default)]
    pub slow_subscriber: Option<SlowSubscriber>,
    /// Overrides `batch`.
    #[serde(default)]
    pub batch: Option<bool>,
    /// Overrides `tree_fanout`.
    #[serde(default)]
    pub tree_fanout: Option<u16>,
    /// Overrides `near_repairs`.
    #[serde(default)]
    pub near_repairs: Option<bool>,
    /// Overrides `mode`.
    #[serde(default)]
    pub mode: Option<GroupMode>,
    /// Overrides `commit`.
    #[serde(default)]
    pub commit: Option<bool>,
    /// Overrides `commit_tree_from`.
    #[serde(default)]
    pub commit_tree_from: Option<u32>,
    /// Overrides `broadcast`.
    #[serde(default)]
    pub broadcast: Option<Broadcast>,
}

/// What a group runs with: the daemon's defaults with its `[[group]]` overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSettings {
    /// Reliability algorithm.
    pub algorithm: Algorithm,
    /// Sender window, in frames.
    pub window_frames: u32,
    /// Behaviour with a slow subscriber.
    pub slow_subscriber: SlowSubscriber,
    /// Small messages share frames (docs/protocol.md §1.10).
    pub batch: bool,
    /// MAK's ACKs climb a feedback tree of this fanout (0: straight to the
    /// sender; docs/protocol.md §3.4).
    pub tree_fanout: u16,
    /// With a tree, receivers repair each other's losses from their copies
    /// before asking the group (docs/protocol.md §3.5).
    pub near_repairs: bool,
    /// How the group orders its senders' messages.
    pub mode: GroupMode,
    /// (Total order) a message is delivered only once every member has it.
    pub commit: bool,
    /// (Total order) views of at least this many members send their claims
    /// (or reports) up a tree (0: never; docs/protocol.md §6.4).
    pub commit_tree_from: u32,
    /// (Broadcast) the algorithm.
    pub broadcast: Broadcast,
}

impl GroupSettings {
    /// The settings every node must configure alike for this group, as the
    /// configuration file spells them. The group's agent refuses a join
    /// from a node whose description differs from its own
    /// (`mcast_groups::SettingsOf`; docs/mcastd.md, "Configure a group
    /// alike"). The others are each node's own: the window, the slow
    /// subscriber's fate, batching (a flag of each frame), near repairs,
    /// and a broadcast group's algorithm (each message names its own).
    pub fn shared(&self) -> String {
        let mut s = format!("mode = \"{}\"", self.mode.name());
        if self.mode != GroupMode::Broadcast {
            s += &format!(
                ", algorithm = \"{}\", tree_fanout = {}",
                self.algorithm.name(),
                self.tree_fanout
            );
        }
        if self.mode == GroupMode::Total {
            s += &format!(
                ", commit = {}, commit_tree_from = {}",
                self.commit, self.commit_tree_from
            );
        }
        s
    }
}

/// mcastd's configuration. See `docs/mcastd.toml.example` for every key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where this configuration came from (a path, or "command line"); named in errors.
    #[serde(skip)]
    pub origin: String,
    /// This node's id, 1..=0x7fff_ffff.
    pub node: u32,
    /// The network interface.
    pub interface: String,
    /// The NIC receive queue (the first, with `queues` > 1).
    #[serde(default)]
    pub queue: u32,
    /// How many consecutive RX queues to serve, from `queue` on: one
    /// receive thread for each beyond the first (AF_XDP only).
    #[serde(default = "d_queues")]
    pub queues: u32,
    /// The CPU of each extra queue's receive thread, in queue order
    /// (`queue` + 1 first); unset or shorter: not pinned.
    #[serde(default)]
    pub queue_cpus: Vec<usize>,
    /// Node id of the registry: this node or a peer.
    #[serde(default = "d_registry")]
    pub registry: u32,
    /// The control socket's path.
    #[serde(default = "d_socket")]
    pub socket: PathBuf,
    /// The control socket's mode, octal (e.g. "0660").
    #[serde(default = "d_socket_mode")]
    pub socket_mode: String,
    /// Where the daemon keeps what must survive a restart: the incarnation
    /// and authentication session it took (`epochs`), so the next run takes
    /// larger ones even if the wall clock was set back.
    #[serde(default = "d_state_dir")]
    pub state_dir: PathBuf,
    /// Uids allowed to connect (SO_PEERCRED); empty = root and the daemon's own uid.
    #[serde(default)]
    pub allow_uids: Vec<u32>,
    /// Gids allowed to connect.
    #[serde(default)]
    pub allow_gids: Vec<u32>,
    /// AF_XDP or AF_PACKET.
    #[serde(default = "d_datapath")]
    pub datapath: Datapath,
    /// XDP attach mode.
    #[serde(default = "d_xdp_mode")]
    pub xdp_mode: XdpMode,
    /// UMEM frames: a power of two, 64..=65536.
    #[serde(default = "d_frames")]
    pub frames: u32,
    /// Default per-group window, in frames (< frames). Unset: a quarter of
    /// `frames`, at most [`DEFAULT_WINDOW_FRAMES`] ([`Config::window`]).
    #[serde(default)]
    pub window_frames: Option<u32>,
    /// Largest message, bytes.
    #[serde(default = "d_max_message")]
    pub max_message: u64,
    /// How the polling thread waits.
    #[serde(default = "d_polling")]
    pub polling: Polling,
    /// Microseconds to spin before sleeping (adaptive polling).
    #[serde(default = "d_spin_us")]
    pub spin_us: u64,
    /// CPU to pin the polling thread to.
    #[serde(default)]
    pub cpu: Option<usize>,
    /// Default algorithm for groups.
    #[serde(default = "d_algorithm")]
    pub algorithm: Algorithm,
    /// Default behaviour with a slow subscriber.
    #[serde(default = "d_slow")]
    pub slow_subscriber: SlowSubscriber,
    /// Pack small messages that wait for the window into shared frames
    /// (docs/protocol.md §1.10); false sends one message per frame.
    #[serde(default = "d_true")]
    pub batch: bool,
    /// Time every message at every hop (docs/mcastd.md "Where the time
    /// goes"): clients stamp what they publish, the engine stamps frames,
    /// `mcast stat` shows each hop's quantiles. Off by default; on, it
    /// costs a clock read per frame and per receive or publish call.
    #[serde(default)]
    pub trace: bool,
    /// Default feedback tree fanout of MAK groups (docs/protocol.md §3.4):
    /// receivers' ACKs are merged on the way up a tree rooted at the group
    /// agent, widened to at most 4 levels; 0 (the default) sends every
    /// receiver's ACK to the sender.
    #[serde(default)]
    pub tree_fanout: u16,
    /// With a feedback tree, a receiver asks one tree neighbour for what it
    /// lost, which repairs it from its copy, before it asks the group and
    /// the sender (docs/protocol.md §3.5). On by default; it keeps a copy
    /// of every frame of each stream received (at most a window of them).
    #[serde(default = "d_true")]
    pub near_repairs: bool,
    /// Default group mode: "fifo" (each sender's order), "sequenced"
    /// (every sender through the tree's root, one order for all) or "total"
    /// (one order for all from the senders' timestamps, no sequencer).
    #[serde(default)]
    pub mode: GroupMode,
    /// Total-order groups: at most one beacon per this many microseconds
    /// from a node, sent only while others' messages wait for its stamp.
    #[serde(default = "d_beacon_us")]
    pub beacon_us: u64,
    /// Total-order groups: deliver a message only once every member of the
    /// view has it (seed 002's TOC-Re: what one member delivered, every
    /// surviving member delivers, even if that member and the sender fail
    /// together), at about one more hop of latency. False: as soon as the
    /// order is known (TOC-BE).
    #[serde(default)]
    pub commit: bool,
    /// Total-order groups: views of at least this many members send up a
    /// tree (fanout 8, rooted at the group's agent), whose root multicasts
    /// the least, their barrier reports where the group commits (instead
    /// of every member multicasting its own to all: docs/protocol.md §6.4,
    /// "Commit over a tree"), else their claims and whether they are busy
    /// (instead of every idle member stamping for every message: "Stamps
    /// over the tree"; not over `algorithm = "nak"`, which acknowledges
    /// nothing). 0: never. At least 2 otherwise; 17 by default.
    #[serde(default = "d_commit_tree_from")]
    pub commit_tree_from: u32,
    /// Broadcast groups (`mode = "broadcast"`): the algorithm that spreads a
    /// member's message over the links: "auto" (the default: the α–β
    /// model's choice for each message), "iterative", "hypercube",
    /// "hypercube-naive", "mst", "rsbcast", "chain:K", "def:K", "scatter-collect" or
    /// "scatter-collect-2d".
    #[serde(default)]
    pub broadcast: Broadcast,
    /// Bytes per client subscription ring.
    #[serde(default = "d_buffer")]
    pub subscriber_buffer: u64,
    /// Bytes per client publication ring.
    #[serde(default = "d_buffer")]
    pub publication_buffer: u64,
    /// Most clients connected at once.
    #[serde(default = "d_max_clients")]
    pub max_clients: u32,
    /// Log verbosity.
    #[serde(default = "d_log")]
    pub log: LogLevel,
    /// Failure detection: a beat to every peer every `heartbeat_ms`.
    #[serde(default = "d_beat_ms")]
    pub heartbeat_ms: u64,
    /// Missed beats before a peer is suspect (and probed).
    #[serde(default = "d_suspect_after")]
    pub suspect_after: u32,
    /// Time between probes of a suspect peer.
    #[serde(default = "d_beat_ms")]
    pub probe_ms: u64,
    /// Unanswered probes before a suspect peer is declared failed.
    #[serde(default = "d_suspect_after")]
    pub probes: u32,
    /// Where to serve metrics for Prometheus (`GET /metrics`), as
    /// "address:port"; absent: no metrics server.
    #[serde(default)]
    pub metrics: Option<String>,
    /// The cluster key file (`mcast keygen FILE` writes one; the same key on
    /// every node): every frame is sealed with it and every frame received
    /// must be. Required unless `insecure = true`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// A second key file whose key is accepted too (not used to seal): the
    /// old or the next key while a key is rotated (docs/mcastd.md).
    #[serde(default)]
    pub accept_key_file: Option<PathBuf>,
    /// Run without frame authentication: any host on the segment can then
    /// forge frames. `mcast stat` and the log say so.
    #[serde(default)]
    pub insecure: bool,
    /// The other nodes (`[[peer]]`).
    #[serde(default, rename = "peer")]
    pub peers: Vec<Peer>,
    /// Per-group overrides (`[[group]]`).
    #[serde(default, rename = "group")]
    pub groups: Vec<GroupConfig>,
}

fn d_registry() -> u32 {
    1
}
fn d_socket() -> PathBuf {
    PathBuf::from("/run/mcastd/mcastd.sock")
}
fn d_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/mcastd")
}
fn d_socket_mode() -> String {
    "0660".to_owned()
}
fn d_datapath() -> Datapath {
    Datapath::Xdp
}
fn d_queues() -> u32 {
    1
}
fn d_xdp_mode() -> XdpMode {
    XdpMode::Auto
}
fn d_frames() -> u32 {
    DEFAULT_FRAMES
}
fn d_max_message() -> u64 {
    1 << 20
}
fn d_polling() -> Polling {
    Polling::Adaptive
}
fn d_true() -> bool {
    true
}

fn d_spin_us() -> u64 {
    20
}
fn d_beacon_us() -> u64 {
    100
}
fn d_commit_tree_from() -> u32 {
    crate::daemon::mode::commit_tree::DEFAULT_FROM_NODES as u32
}
fn d_algorithm() -> Algorithm {
    Algorithm::Mak
}
fn d_slow() -> SlowSubscriber {
    SlowSubscriber::Cutoff
}
fn d_buffer() -> u64 {
    4 << 20
}
fn d_beat_ms() -> u64 {
    50
}
fn d_suspect_after() -> u32 {
    3
}
fn d_max_clients() -> u32 {
    64
}
fn d_log() -> LogLevel {
    LogLevel::Info
}

fn de_mac<'de, D: Deserializer<'de>>(d: D) -> Result<MacAddr, D::Error> {
    let s = String::deserialize(d)?;
    parse_mac(&s).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "mac = {s:?} is not a MAC address: write six hex octets separated by colons, e.g. \"02:00:00:00:00:02\""
        ))
    })
}

/// Parses `aa:bb:cc:dd:ee:ff` (also `-` separators, either case).
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut out = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut out {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(MacAddr(out))
}

/// Parses an octal permission string ("0660", "660", "0o660") into mode bits.
pub fn parse_mode(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b))
    {
        return None;
    }
    u32::from_str_radix(digits, 8).ok()
}

/// Command-line overrides: each `Some` replaces the file's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--node`
    pub node: Option<u32>,
    /// `--interface`
    pub interface: Option<String>,
    /// `--queue`
    pub queue: Option<u32>,
    /// `--queues`
    pub queues: Option<u32>,
    /// `--registry`
    pub registry: Option<u32>,
    /// `--socket`
    pub socket: Option<PathBuf>,
    /// `--datapath`
    pub datapath: Option<Datapath>,
    /// `--xdp-mode`
    pub xdp_mode: Option<XdpMode>,
    /// `--frames`
    pub frames: Option<u32>,
    /// `--window-frames`
    pub window_frames: Option<u32>,
    /// `--algorithm`
    pub algorithm: Option<Algorithm>,
    /// `--polling`
    pub polling: Option<Polling>,
    /// `--spin-us`
    pub spin_us: Option<u64>,
    /// `--cpu`
    pub cpu: Option<usize>,
    /// `--log`
    pub log: Option<LogLevel>,
}

impl Overrides {
    /// True if no override is set.
    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }
}

/// Why a configuration was refused.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema (unknown key,
    /// wrong type, unknown value).
    Parse {
        /// The file (or "command line", `"<string>"`).
        origin: String,
        /// 1-based line and column of the offending text, when known.
        position: Option<(usize, usize)>,
        /// The offending line's text, when known.
        source_line: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The values parse but do not make sense together.
    Invalid {
        /// The file.
        origin: String,
        /// The key at fault (e.g. `registry`, `peer[1].mac`, `group["prices"].window_frames`).
        key: String,
        /// What is wrong and what to do, starting with the key.
        message: String,
    },
}

impl ConfigError {
    /// The key at fault, for validation errors.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    fn invalid(origin: &str, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin: origin.to_owned(),
            key: key.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Io { path, source } => write!(
                f,
                "{}: cannot read the configuration ({source}): check the path, or pass --config FILE",
                path.display()
            ),
            ConfigError::Parse {
                origin,
                position,
                source_line,
                message,
            } => {
                match position {
                    Some((line, col)) => write!(f, "{origin}:{line}:{col}: {message}")?,
                    None => write!(f, "{origin}: {message}")?,
                }
                if let Some(text) = source_line {
                    write!(f, "\n    | {text}")?;
                }
                Ok(())
            }
            ConfigError::Invalid { origin, message, .. } => write!(f, "{origin}: {message}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// 1-based (line, column) of byte offset `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = at
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, col)
}

/// A readable list of node ids: "1, 2, 3".
fn list(ids: impl IntoIterator<Item = u32>) -> String {
    ids.into_iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Config {
    /// Parses TOML `text`; `origin` (usually the path) is named in errors.
    /// Does not validate: apply overrides, then call [`Config::validate`].
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let position = e.span().map(|s| line_col(text, s.start));
            let source_line = position
                .and_then(|(line, _)| text.lines().nth(line - 1))
                .map(|l| l.trim_end().to_owned());
            ConfigError::Parse {
                origin: origin.to_owned(),
                position,
                source_line,
                message: e.message().trim_end().to_owned(),
            }
        })?;
        cfg.origin = origin.to_owned();
        Ok(cfg)
    }

    /// Reads and parses the file at `path` (does not validate).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Config::from_toml_str(&text, &path.display().to_string())
    }

    /// What mcastd does at start: load `path`, apply `overrides`, validate.
    pub fn resolve(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut cfg = Config::load(path)?;
        cfg.apply(overrides);
        cfg.validate()?;
        Ok(cfg)
    }

    /// Replaces every value that `o` sets. The origin gains " + command line"
    /// so that errors about an overridden value are not blamed on the file alone.
    pub fn apply(&mut self, o: &Overrides) {
        fn set<T: Clone>(dst: &mut T, src: &Option<T>) {
            if let Some(v) = src {
                *dst = v.clone();
            }
        }
        set(&mut self.node, &o.node);
        set(&mut self.interface, &o.interface);
        set(&mut self.queue, &o.queue);
        set(&mut self.queues, &o.queues);
        set(&mut self.registry, &o.registry);
        set(&mut self.socket, &o.socket);
        set(&mut self.datapath, &o.datapath);
        set(&mut self.xdp_mode, &o.xdp_mode);
        set(&mut self.frames, &o.frames);
        if o.window_frames.is_some() {
            self.window_frames = o.window_frames;
        }
        set(&mut self.algorithm, &o.algorithm);
        set(&mut self.polling, &o.polling);
        set(&mut self.spin_us, &o.spin_us);
        if o.cpu.is_some() {
            self.cpu = o.cpu;
        }
        set(&mut self.log, &o.log);
        if !o.is_empty() && !self.origin.ends_with(" + command line") {
            self.origin.push_str(" + command line");
        }
    }

    /// The settings group `name` runs with: the defaults with its `[[group]]` overrides.
    pub fn group_settings(&self, name: &str) -> GroupSettings {
        let g = self.groups.iter().find(|g| g.name == name);
        GroupSettings {
            algorithm: g.and_then(|g| g.algorithm).unwrap_or(self.algorithm),
            window_frames: g.and_then(|g| g.window_frames).unwrap_or(self.window()),
            slow_subscriber: g
                .and_then(|g| g.slow_subscriber)
                .unwrap_or(self.slow_subscriber),
            batch: g.and_then(|g| g.batch).unwrap_or(self.batch),
            tree_fanout: g.and_then(|g| g.tree_fanout).unwrap_or(self.tree_fanout),
            near_repairs: g.and_then(|g| g.near_repairs).unwrap_or(self.near_repairs),
            mode: g.and_then(|g| g.mode).unwrap_or(self.mode),
            commit: g.and_then(|g| g.commit).unwrap_or(self.commit),
            commit_tree_from: g
                .and_then(|g| g.commit_tree_from)
                .unwrap_or(self.commit_tree_from),
            broadcast: g.and_then(|g| g.broadcast).unwrap_or(self.broadcast),
        }
    }

    /// The control socket's mode bits (validated: 0o660 if unparsable).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().and_then(|m| m.parse().ok())
    }

    pub fn socket_mode_bits(&self) -> u32 {
        parse_mode(&self.socket_mode).unwrap_or(0o660)
    }

    /// The default per-group window: `window_frames`, or when unset a
    /// quarter of `frames` up to [`DEFAULT_WINDOW_FRAMES`] (so `frames`
    /// alone sizes both, and an old `frames = 4096` keeps its 1,024).
    pub fn window(&self) -> u32 {
        self.window_frames
            .unwrap_or((self.frames / 4).clamp(1, DEFAULT_WINDOW_FRAMES))
    }

    /// The UMEM size RLIMIT_MEMLOCK must allow: `frames` × [`UMEM_FRAME_BYTES`].
    pub fn umem_bytes(&self) -> u64 {
        u64::from(self.frames) * UMEM_FRAME_BYTES
    }

    /// The MAC of peer `node`, if it is a peer.
    pub fn peer_mac(&self, node: u32) -> Option<MacAddr> {
        self.peers.iter().find(|p| p.node == node).map(|p| p.mac)
    }
}

/// Ok if `name` can name a group: non-empty, at most 64 bytes, no whitespace
/// or control characters. The error completes "name = \"...\" ".
pub fn check_group_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty: give the group a name".to_owned());
    }
    if name.len() > MAX_GROUP_NAME {
        return Err(format!(
            "is {} bytes long: group names are at most {MAX_GROUP_NAME} bytes",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(
            "contains whitespace or a control character: use e.g. '-' or '_' instead".to_owned(),
        );
    }
    Ok(())
}
