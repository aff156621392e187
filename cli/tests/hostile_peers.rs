//! Hostile peers on the segment (issue 23 part 2): three mcastd daemons and,
//! on the same bridge, an attacker namespace that is not a configured peer.
//! The attacker sends raw Ethernet frames built from the documented layout
//! (docs/protocol.md §1.2, the beat payload of `mcast_groups::liveness`,
//! the link and group messages of `cli/src/links.rs` and
//! `mcast_groups::wire`), some from scratch and some from copies of genuine
//! frames it captured (the bridge floods group-MAC frames to every port, so
//! an AF_PACKET socket in the attacker's namespace sees every DATA frame).
//! Beats are unicast and never reach the attacker once the bridge has
//! learnt the daemons' MACs; the replayed beats are captured on node 2's
//! bridge port, as a mirror port would show them.
//!
//! - `forged_data_acks_and_naks_*`: DATA into a group two subscribers
//!   read, with guessed epochs (start seconds) and from a sniffed frame
//!   (trailer kept, cut off, or naming another key); a flood of 5,000 NAKs
//!   in a receiver's name; ACKs in a receiver's name for frames the bridge
//!   kept from it.
//! - `forged_beats_and_link_messages_*`: a VIEW in the agent's name and a
//!   RESIGN in the registry's (GBN data in a daemon's inbox group); beats
//!   naming node 99 the registry, saying node 2 restarted, and telling node
//!   3 it was declared failed.
//! - `replays_and_*`: captured DATA sent again verbatim (dropped as
//!   duplicates even without a key: no damage to show there), beats of a
//!   node's previous run sent after it restarted, and link frames from
//!   1,000,000 different sender ids (100,000 without a key, where they
//!   pass authentication and the inbox refuses every id that is not a
//!   configured peer: each one cost a link stream of its own before).
//!
//! Each scenario runs twice: with the cluster key (the default), where
//! nothing forged is delivered, no view or role changes, the sender keeps
//! what a receiver lacks, the daemons' memory stays bounded and every
//! refusal is counted in `mcast stat --json` (`auth.*`, exactly); and once
//! with `insecure = true`, where the same frames do their damage (forged
//! messages delivered, a window freed early, a registry of the attacker's
//! choosing, a node evicted or made to rejoin), so the scenario is known to
//! detect an attack that gets through (but forged sender ids, refused by
//! the inbox either way).
//!
//! Root only (CI runs as root); without privileges each test skips with a
//! message, and with CI=true a skip is a failure. All traffic stays inside
//! the namespaces the tests create.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines and guess epochs from the wall clock"
)]

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mcast_ipc::{Client, MessageKind, Notice, Request, Response};
use mcast_netns::{Netns, RawReceiver, RawSender, IFNAME};
use serde_json::Value;

/// mcastd's EtherType (the default; the testbed does not change it).
const ETHERTYPE: u16 = 0x88B5;
/// Bound on every wait for something a daemon should do.
const WAIT: Duration = Duration::from_secs(10);
/// Bytes of the authentication trailer (key id, session, counter, tag).
const TRAILER: usize = 36;
/// Frame kinds (docs/protocol.md §1.3).
const DATA: u8 = 1;
const NAK: u8 = 2;
const ACK: u8 = 3;
const GBN_DATA: u8 = 5;
const BEAT: u8 = 16;
/// Flags (§1.4).
const LAST: u16 = 0x0001;
const WHOLE: u16 = 0x000c;
const ACK_REQ: u16 = 0x0010;
const ACK_VALID: u16 = 0x0020;
/// Group numbers at and above this are the daemons' inboxes (links.rs).
const LINK_BASE: u32 = 0x8000_0000;
/// A link epoch above any incarnation (start seconds): in an insecure
/// cluster it replaces the genuine link stream, whose sequence then starts
/// again at 0.
const LINK_EPOCH: u32 = 0xFFFF_FFF0;

fn mcastd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mcastd"))
}

/// Three daemons and one idle endpoint for the attacker. One message per
/// frame (`batch = false`): the attacks address genuine messages by their
/// frames' sequence numbers.
fn start(test: &str, secure: bool) -> Option<common::Cluster> {
    let extra = if secure {
        "batch = false"
    } else {
        "batch = false\ninsecure = true"
    };
    common::Cluster::start_with_spare(mcastd(), test, 3, 1, |_| extra.to_owned())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

// ---------------------------------------------------------------------------
// Frames, from docs/protocol.md §1.2 (offsets from the Ethernet frame's start)

/// The header fields of a frame the attacker builds.
#[derive(Debug, Clone, Copy, Default)]
struct Hdr {
    kind: u8,
    flags: u16,
    group: u32,
    src: u32,
    peer: u32,
    epoch: u32,
    seq: u32,
    ack: u32,
    tstamp: u32,
}

fn be32(f: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(f[at..at + 4].try_into().expect("4 bytes"))
}

fn put32(f: &mut [u8], at: usize, v: u32) {
    f[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn kind(f: &[u8]) -> u8 {
    f[15]
}
fn group(f: &[u8]) -> u32 {
    be32(f, 18)
}
fn src(f: &[u8]) -> u32 {
    be32(f, 22)
}
fn epoch(f: &[u8]) -> u32 {
    be32(f, 30)
}
fn seq(f: &[u8]) -> u32 {
    be32(f, 34)
}
fn tstamp(f: &[u8]) -> u32 {
    be32(f, 42)
}
fn payload_len(f: &[u8]) -> usize {
    usize::from(u16::from_be_bytes([f[52], f[53]]))
}

/// The group MAC of `group`: `03:00` and the number (§1.1).
fn group_mac(group: u32) -> [u8; 6] {
    let g = group.to_be_bytes();
    [0x03, 0x00, g[0], g[1], g[2], g[3]]
}

/// CRC32C (Castagnoli, reflected 0x82F63B78), table-driven: the attacker's own.
fn crc32c(parts: &[&[u8]]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut c = !0u32;
    for p in parts {
        for &b in *p {
            c = t[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
        }
    }
    !c
}

/// Writes the checksum of a frame: CRC32C over the payload, then bytes 14..54.
fn fix_crc(f: &mut [u8]) {
    let end = 58 + payload_len(f);
    let crc = crc32c(&[&f[58..end], &f[14..54]]);
    put32(f, 54, crc);
}

/// A frame from scratch: header, payload, checksum, then the attacker's
/// guess at a trailer (`key_id`, a session and counter, a 16-byte tag it
/// cannot compute: here from its own xorshift). A daemon without a key
/// reads the trailer as Ethernet padding beyond `payload_len`.
fn forge(dst: [u8; 6], from: [u8; 6], h: &Hdr, payload: &[u8], key_id: u32) -> Vec<u8> {
    let mut f = vec![0u8; 58];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&from);
    f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    f[14] = 2; // version
    f[15] = h.kind;
    f[16..18].copy_from_slice(&h.flags.to_be_bytes());
    put32(&mut f, 18, h.group);
    put32(&mut f, 22, h.src);
    put32(&mut f, 26, h.peer);
    put32(&mut f, 30, h.epoch);
    put32(&mut f, 34, h.seq);
    put32(&mut f, 38, h.ack);
    put32(&mut f, 42, h.tstamp);
    let len = u16::try_from(payload.len()).expect("one frame");
    f[52..54].copy_from_slice(&len.to_be_bytes());
    f.extend_from_slice(payload);
    fix_crc(&mut f);
    f.extend_from_slice(&bogus_trailer(key_id, u64::from(h.seq) ^ u64::from(h.src)));
    f
}

fn bogus_trailer(key_id: u32, salt: u64) -> [u8; TRAILER] {
    let mut t = [0u8; TRAILER];
    t[0..4].copy_from_slice(&key_id.to_be_bytes());
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut t[4..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    t
}

/// A copy of the genuine frame `g` with a new payload of the same length
/// (`text` repeated) and sequence number `s`, its checksum made right again
/// and its trailer (if any) kept as captured: what an attacker without the
/// key can make from a sniffed frame. `key_id`: written over the trailer's.
fn from_sniffed(g: &[u8], s: u32, text: &str, key_id: Option<u32>) -> Vec<u8> {
    let mut f = g.to_vec();
    let end = 58 + payload_len(g);
    for (b, t) in f[58..end].iter_mut().zip(text.bytes().cycle()) {
        *b = t;
    }
    put32(&mut f, 34, s);
    fix_crc(&mut f);
    if let Some(id) = key_id {
        if f.len() >= end + TRAILER {
            put32(&mut f, end, id);
        }
    }
    f
}

/// The key id of a sealed frame (the trailer's first word), 0 for none.
fn key_id(f: &[u8]) -> u32 {
    let end = 58 + payload_len(f);
    if f.len() >= end + TRAILER {
        be32(f, end)
    } else {
        0
    }
}

/// A beat payload as `mcast_groups::liveness` writes it: type (1 beat),
/// incarnation, registry node and its moves, then "I declared you failed"
/// and the incarnation declared failed.
fn beat(incarnation: u32, registry: (u32, u32), evicted: Option<u32>) -> Vec<u8> {
    let mut b = vec![1u8];
    b.extend_from_slice(&incarnation.to_be_bytes());
    b.extend_from_slice(&registry.0.to_be_bytes());
    b.extend_from_slice(&registry.1.to_be_bytes());
    b.push(u8::from(evicted.is_some()));
    b.extend_from_slice(&evicted.unwrap_or(0).to_be_bytes());
    b
}

/// `str` of the group messages: a length byte and the bytes.
fn put_str(v: &mut Vec<u8>, s: &str) {
    v.push(u8::try_from(s.len()).expect("short name"));
    v.extend_from_slice(s.as_bytes());
}

/// A link message carrying a group message (links.rs tag 1, then
/// mcast_groups::wire: version 2, the message's tag, its fields).
fn group_message(tag: u8, fields: &[u8]) -> Vec<u8> {
    let mut v = vec![1u8, 2, tag];
    v.extend_from_slice(fields);
    v
}

// ---------------------------------------------------------------------------
// The attacker

/// The attacker's namespace: a raw sender and a sniffer on its interface.
struct Attacker {
    mac: [u8; 6],
    tx: RawSender,
    rx: RawReceiver,
}

impl Attacker {
    fn new(ns: &Netns) -> Attacker {
        let (tx, rx) = ns.run(|| {
            (
                RawSender::open(IFNAME).expect("raw sender"),
                RawReceiver::open(IFNAME, ETHERTYPE, 8 << 20).expect("sniffer"),
            )
        });
        Attacker {
            mac: ns.mac.0,
            tx,
            rx,
        }
    }

    /// Frames seen on the attacker's port that `want`, until `enough` holds
    /// for them (or panics after [`WAIT`]).
    fn sniff(
        &self,
        want: impl Fn(&[u8]) -> bool,
        enough: impl Fn(&[Vec<u8>]) -> bool,
    ) -> Vec<Vec<u8>> {
        sniff(&self.rx, want, enough)
    }

    fn send(&self, f: &[u8]) {
        self.tx.send(f).expect("send a raw frame");
    }
}

fn sniff(
    rx: &RawReceiver,
    want: impl Fn(&[u8]) -> bool,
    enough: impl Fn(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    while !enough(&got) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "sniffed only {} wanted frames", got.len());
        if let Some(f) = rx.recv(left).expect("sniff") {
            if f.len() >= 58 && want(&f) {
                got.push(f);
            }
        }
    }
    got
}

// ---------------------------------------------------------------------------
// The daemons as an operator sees them

/// `mcast ARGS --json` against node `node`'s daemon, parsed.
fn mcast(cluster: &common::Cluster, node: u32, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_mcast"))
        .arg("--socket")
        .arg(cluster.socket(node))
        .args(args)
        .arg("--json")
        .output()
        .expect("run mcast");
    assert!(
        out.status.success(),
        "mcast {args:?} on node {node}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "mcast {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn stat(cluster: &common::Cluster, node: u32) -> Value {
    mcast(cluster, node, &["stat"])
}

fn num(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

/// The refusals a node counted: (auth failed, unknown key, replayed).
fn refusals(v: &Value) -> [u64; 3] {
    [
        num(v, &["auth", "rx_auth_failed"]),
        num(v, &["auth", "rx_auth_unknown_key"]),
        num(v, &["auth", "rx_replayed"]),
    ]
}

/// A group's entry in a node's `mcast stat`.
fn group_stat(v: &Value, group: u32) -> &Value {
    v["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group"] == group && g["active"] == true)
        .unwrap_or_else(|| panic!("group {group} not in {v}"))
}

/// A counter of the send stream of `group` on the node of `v`.
fn sender_counter(v: &Value, group: u32, key: &str) -> u64 {
    num(&group_stat(v, group)["sender"], &[key])
}

/// A counter of the receive stream of `group` from node `from` on the node
/// of `v`.
fn receiver_counter(v: &Value, group: u32, from: u32, key: &str) -> u64 {
    group_stat(v, group)["receivers"]
        .as_array()
        .expect("receivers")
        .iter()
        .find(|r| r["from"] == from)
        .map_or(0, |r| num(&r["counters"], &[key]))
}

/// A control connection to each daemon, for the counters polled while
/// frames are injected (`Stats` is what `mcast stat --json` prints).
struct Probe(BTreeMap<u32, Client>);

impl Probe {
    fn new(cluster: &common::Cluster) -> Probe {
        Probe(
            (1..=3)
                .map(|n| {
                    (
                        n,
                        Client::connect(cluster.socket(n), "probe").expect("connect"),
                    )
                })
                .collect(),
        )
    }

    fn stats(&mut self, node: u32) -> Value {
        match self.0.get_mut(&node).expect("node").request(Request::Stats) {
            Ok(Response::Json(v)) => v,
            other => panic!("Stats on node {node}: {other:?}"),
        }
    }

    /// Waits until `f` holds for node `node`'s stats; returns them.
    fn until(&mut self, node: u32, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.stats(node);
            if f(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "node {node}: {what} did not happen within {WAIT:?}: {v}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Frames received by each node's engine so far (before any check).
    fn rx_frames(&mut self, nodes: &[u32]) -> Vec<u64> {
        nodes
            .iter()
            .map(|&n| num(&self.stats(n), &["engine", "rx_frames"]))
            .collect()
    }
}

/// Sends `frames` in chunks of `chunk`, waiting after each until every node
/// of `to` has taken in at least that many more frames (its engine's
/// `rx_frames`), so that no burst outruns a daemon's receive ring and every
/// frame injected is one the daemon saw. Returns how many were sent.
fn inject(
    att: &Attacker,
    probe: &mut Probe,
    to: &[u32],
    frames: impl IntoIterator<Item = Vec<u8>>,
    chunk: usize,
) -> u64 {
    let base = probe.rx_frames(to);
    inject_with(att, frames, chunk, |sent| {
        let now = probe.rx_frames(to);
        now.iter().zip(&base).all(|(n, b)| n - b >= sent)
    })
}

/// Sends `frames` in chunks of `chunk`, after each waiting (up to [`WAIT`])
/// until `caught_up(sent so far)`. Returns how many were sent.
fn inject_with(
    att: &Attacker,
    frames: impl IntoIterator<Item = Vec<u8>>,
    chunk: usize,
    caught_up: impl FnMut(u64) -> bool,
) -> u64 {
    inject_within(att, frames, chunk, WAIT, caught_up)
}

/// [`inject_with`], waiting up to `limit` after each chunk.
fn inject_within(
    att: &Attacker,
    frames: impl IntoIterator<Item = Vec<u8>>,
    chunk: usize,
    limit: Duration,
    mut caught_up: impl FnMut(u64) -> bool,
) -> u64 {
    let mut sent = 0u64;
    let mut pending = 0;
    let mut wait = |sent: u64| {
        let deadline = Instant::now() + limit;
        while !caught_up(sent) {
            assert!(
                Instant::now() < deadline,
                "the daemons did not take in {sent} injected frames within {limit:?}"
            );
            std::thread::yield_now();
        }
    };
    for f in frames {
        att.send(&f);
        sent += 1;
        pending += 1;
        if pending == chunk {
            wait(sent);
            pending = 0;
        }
    }
    wait(sent);
    sent
}

/// Message `i` of the genuine stream `tag`: its name and number, then
/// bytes that depend on both (lengths 0 to 299 beyond the name).
fn genuine(tag: &str, i: u64) -> Vec<u8> {
    let mut m = format!("{tag}-{i:06}|").into_bytes();
    let salt = tag.bytes().fold(0u8, |a, b| a.wrapping_mul(31) ^ b);
    m.extend((0..(i * 37) % 300).map(|k| (i as u8).wrapping_mul(13) ^ salt ^ k as u8));
    m
}

fn publish(p: &mut Client, group: u32, tag: &str, range: std::ops::Range<u64>) {
    for i in range {
        p.publish_blocking(group, &genuine(tag, i), Some(WAIT))
            .unwrap_or_else(|e| panic!("publishing {tag} {i}: {e}"));
    }
}

/// What a subscriber received next: data messages of `group`, up to `n`
/// of them or until [`WAIT`] passes without one.
fn next_messages(sub: &mut Client, group: u32, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while got.len() < n {
        let Some(m) = sub.recv_timeout(WAIT).expect("recv") else {
            break;
        };
        if m.kind == MessageKind::Membership {
            continue;
        }
        assert_eq!(m.group, group);
        got.push(m.data);
    }
    got
}

/// The subscriber's next data messages are exactly genuine messages
/// `range` of `tag`, in order, every byte as published.
fn expect_genuine(sub: &mut Client, node: u32, group: u32, tag: &str, range: std::ops::Range<u64>) {
    let want = (range.end - range.start) as usize;
    let got = next_messages(sub, group, want);
    for (k, m) in got.iter().enumerate() {
        let i = range.start + k as u64;
        assert!(
            *m == genuine(tag, i),
            "node {node}'s subscriber of {tag}: message {k} after {} is {:?}, not genuine {i}",
            range.start,
            String::from_utf8_lossy(&m[..m.len().min(40)])
        );
    }
    assert_eq!(
        got.len(),
        want,
        "node {node}'s subscriber of {tag} got {} of {want} messages",
        got.len()
    );
}

/// The daemon's resident set (VmRSS), KiB.
fn rss_kib(cluster: &common::Cluster, node: u32) -> u64 {
    let pid = cluster.daemons[node as usize - 1].pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Every daemon's VmRSS (KiB), node 1 first.
fn rss_all(cluster: &common::Cluster) -> Vec<u64> {
    (1..=3).map(|n| rss_kib(cluster, n)).collect()
}

/// No daemon's VmRSS grew by more than 8 MiB since `before`: a refused
/// frame leaves nothing behind (the UMEM and the rings were allocated and
/// touched at start), so what growth there is comes from the genuine
/// traffic of the test and the allocator.
fn assert_rss_bounded(test: &str, cluster: &common::Cluster, before: &[u64]) {
    let after = rss_all(cluster);
    eprintln!("{test}: VmRSS (KiB) of nodes 1-3 before the attacks {before:?}, after {after:?}");
    for (n, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a.saturating_sub(*b) <= 8192,
            "node {}'s VmRSS grew from {b} to {a} KiB",
            n + 1
        );
    }
}

/// Joins `name` from a new client on `node`.
fn join(cluster: &common::Cluster, node: u32, name: &str) -> (Client, mcast_ipc::Membership) {
    let mut c = Client::connect(cluster.socket(node), name).expect("connect");
    let m = c.join(name).expect("join");
    (c, m)
}

fn wait_nodes(c: &mut Client, m: &mcast_ipc::Membership, n: usize) {
    mcast_cli::stream::wait_nodes(c, m.group, &m.view, n, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A publisher on node 1 and subscribers on nodes 2 and 3 in `name`, all
/// three nodes in the view.
struct Stream {
    group: u32,
    tag: &'static str,
    publ: Client,
    subs: Vec<(u32, Client)>,
    sent: u64,
}

impl Stream {
    fn new(cluster: &common::Cluster, tag: &'static str) -> Stream {
        let (mut publ, m) = join(cluster, 1, tag);
        let subs: Vec<(u32, Client)> = [2, 3]
            .iter()
            .map(|&n| (n, join(cluster, n, tag).0))
            .collect();
        wait_nodes(&mut publ, &m, 3);
        Stream {
            group: m.group,
            tag,
            publ,
            subs,
            sent: 0,
        }
    }

    /// Publishes `n` more genuine messages.
    fn publish(&mut self, n: u64) {
        publish(
            &mut self.publ,
            self.group,
            self.tag,
            self.sent..self.sent + n,
        );
        self.sent += n;
    }

    /// Every subscriber's next messages are genuine `range`.
    fn expect(&mut self, range: std::ops::Range<u64>) {
        for (node, sub) in &mut self.subs {
            expect_genuine(sub, *node, self.group, self.tag, range.clone());
        }
    }
}

// ---------------------------------------------------------------------------
// 1-3: forged DATA (guessed and sniffed), forged ACKs, a NAK flood

/// The DATA of group `g` from node 1 that the attacker sees.
fn data_of(g: u32) -> impl Fn(&[u8]) -> bool {
    move |f| kind(f) == DATA && group(f) == g && src(f) == 1
}

/// Drops the DATA frames of `group` that the bridge forwards to node 3
/// (port p2), and nothing else: node 3 lacks them until the rule goes.
fn block_data_to_node3(cluster: &common::Cluster, group: u32, on: bool) {
    let br = &cluster.topology().bridge;
    if !on {
        let out = br.exec(&["nft", "delete", "table", "bridge", "hostile_block"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let rules = format!(
        "table bridge hostile_block {{\n  chain drop_data {{\n    type filter hook forward priority 0; policy accept;\n    \
         oifname \"p2\" ether type {ETHERTYPE:#06x} @ll,120,8 {DATA} @ll,144,32 {group} counter drop\n  }}\n}}\n"
    );
    let file = cluster.dir.join("block.nft");
    std::fs::write(&file, rules).unwrap();
    let out = br.exec(&["nft", "-f", &file.display().to_string()]);
    assert!(
        out.status.success(),
        "nft (scripts/setup.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn data_acks_and_naks(test: &str, secure: bool) {
    let t0 = now_secs();
    let Some(cluster) = start(test, secure) else {
        return;
    };
    let t1 = now_secs();
    let att = Attacker::new(&cluster.spare()[0]);
    let mut probe = Probe::new(&cluster);
    let all = [1, 2, 3];
    let macs: Vec<[u8; 6]> = cluster.daemons.iter().map(|d| d.ns.mac.0).collect();
    let before: Vec<Value> = all.iter().map(|&n| stat(&cluster, n)).collect();
    let rss0 = rss_all(&cluster);
    let mut injected = [[0u64; 3]; 3]; // per node: auth failed, unknown key, replayed

    // --- 1a. DATA with a guessed epoch, into a group a subscriber reads.
    let mut guess = Stream::new(&cluster, "guess");
    guess.publish(20);
    guess.expect(0..20);
    // The attacker takes nothing from the sniffed frame but the key id,
    // which every sealed frame shows in clear (a guess at it would only
    // move the refusal to rx_auth_unknown_key); the true epoch read here
    // only checks that the guess covers it. Epochs are start seconds: it
    // tries every second from 2 s before the cluster was started to 2 s
    // after it was up, and the first 64 sequence numbers.
    let sample = att.sniff(data_of(guess.group), |f| !f.is_empty());
    let kid = key_id(&sample[0]);
    let true_epoch = epoch(&sample[0]);
    let epochs = (t0 - 2) as u32..=(t1 + 2) as u32;
    assert!(
        epochs.contains(&true_epoch),
        "the guess {epochs:?} misses the epoch {true_epoch}"
    );
    let dst = group_mac(guess.group);
    let frames: Vec<Vec<u8>> = epochs
        .clone()
        .flat_map(|e| (0..64u32).map(move |s| (e, s)))
        .map(|(e, s)| {
            let h = Hdr {
                kind: DATA,
                flags: WHOLE | LAST | ACK_REQ,
                group: guess.group,
                src: 1,
                epoch: e,
                seq: s,
                ack: s,
                ..Hdr::default()
            };
            forge(
                dst,
                att.mac,
                &h,
                format!("FORGED-guess-{e}-{s}").as_bytes(),
                kid,
            )
        })
        .collect();
    let n = inject(&att, &mut probe, &all, frames, 256);
    for c in &mut injected {
        c[0] += n;
    }
    eprintln!(
        "{test}: 1a. {n} DATA frames with guessed epochs {epochs:?} (true {true_epoch}), seq 0..64"
    );
    guess.publish(80);
    if secure {
        guess.expect(20..100);
    } else {
        // The forged frames of the true epoch filled seq 20..63: the
        // subscribers deliver them in place of genuine messages.
        for (node, sub) in &mut guess.subs {
            let got = next_messages(sub, guess.group, 1);
            assert!(
                got.first().is_some_and(|m| m.starts_with(b"FORGED-guess-")),
                "insecure: node {node} did not deliver the forged data: {:?}",
                got.first().map(|m| String::from_utf8_lossy(m).into_owned())
            );
        }
    }

    // --- 1b. DATA made from a sniffed genuine frame: right group, epoch
    // and sequence numbers (the next 20 the sender will use), the captured
    // trailer kept; 5 more with the trailer cut off and 5 naming another
    // key.
    let mut sniffed = Stream::new(&cluster, "sniffed");
    sniffed.publish(20);
    sniffed.expect(0..20);
    let caught = att.sniff(data_of(sniffed.group), |got| {
        got.iter().any(|f| seq(f) == 19)
    });
    let last = caught
        .iter()
        .find(|f| seq(f) == 19)
        .expect("seq 19")
        .clone();
    let mut frames: Vec<Vec<u8>> = (20..40u32)
        .map(|s| from_sniffed(&last, s, &format!("FORGED-BY-ATTACKER-{s}-"), None))
        .collect();
    let cut = 58 + payload_len(&last);
    frames.extend((40..45u32).map(|s| from_sniffed(&last[..cut], s, "FORGED-NO-TRAILER-", None)));
    let unknown: Vec<Vec<u8>> = (45..50u32)
        .map(|s| from_sniffed(&last, s, "FORGED-OTHER-KEY-", Some(kid ^ 0x5a5a_5a5a)))
        .collect();
    let n = inject(&att, &mut probe, &all, frames, 256);
    let u = if secure {
        inject(&att, &mut probe, &all, unknown, 256)
    } else {
        0 // no key: nothing to name
    };
    for c in &mut injected {
        c[0] += n;
        c[1] += u;
    }
    eprintln!(
        "{test}: 1b. {} DATA frames from a sniffed one (seq 20..50)",
        n + u
    );
    sniffed.publish(40);
    if secure {
        sniffed.expect(20..60);
    } else {
        for (node, sub) in &mut sniffed.subs {
            let got = next_messages(sub, sniffed.group, 1);
            assert!(
                got.first()
                    .is_some_and(|m| m.starts_with(b"FORGED-BY-ATTACKER-20-")),
                "insecure: node {node} did not deliver the forged data: {:?}",
                got.first().map(|m| String::from_utf8_lossy(m).into_owned())
            );
        }
    }

    // --- 3. A NAK flood in node 3's name for the sender's stream: every
    // frame it sent so far, 5,000 times (multicast: every node sees them).
    let mut window = Stream::new(&cluster, "window");
    window.publish(20);
    window.expect(0..20);
    let caught = att.sniff(data_of(window.group), |got| {
        got.iter().any(|f| seq(f) == 19)
    });
    let wepoch = epoch(&caught[0]);
    let s1 = probe.stats(1);
    let naks0 = sender_counter(&s1, window.group, "naks_received");
    let unrep0 = sender_counter(&s1, window.group, "naks_unrepairable");
    let mut ranges = Vec::new();
    ranges.extend_from_slice(&0u32.to_be_bytes());
    ranges.extend_from_slice(&20u32.to_be_bytes());
    let naks = (0..5_000u32).map(|i| {
        let h = Hdr {
            kind: NAK,
            group: window.group,
            src: 3,
            peer: 1,
            epoch: wepoch,
            seq: i,
            ..Hdr::default()
        };
        forge(group_mac(window.group), att.mac, &h, &ranges, kid)
    });
    let n = inject(&att, &mut probe, &all, naks, 512);
    for c in &mut injected {
        c[0] += n;
    }
    let s1 = probe.stats(1);
    let naks1 = sender_counter(&s1, window.group, "naks_received") - naks0;
    let unrep1 = sender_counter(&s1, window.group, "naks_unrepairable") - unrep0;
    eprintln!("{test}: 3. {n} NAKs in node 3's name: the sender counted {naks1} NAKs, {unrep1} unrepairable entries");
    if secure {
        assert!(
            naks1 <= 10,
            "the sender took {naks1} NAKs during a flood of {n} forged ones"
        );
    } else {
        assert!(
            naks1 >= n,
            "insecure: the sender took only {naks1} of {n} forged NAKs"
        );
    }

    // --- 2. Forged ACKs in node 3's name while node 3 lacks the data: the
    // bridge drops the group's DATA to node 3, the sender sends 30 more
    // messages (node 2 gets them), and the attacker, which sniffed them,
    // acknowledges all of them as node 3 with an echo of the sender's own
    // stamp. A sender that believed it would free them, and node 3 could
    // never be repaired.
    block_data_to_node3(&cluster, window.group, true);
    let node2_acks = receiver_counter(&probe.stats(2), window.group, 1, "acks_sent");
    window.publish(30);
    expect_genuine(&mut window.subs[0].1, 2, window.group, "window", 20..50);
    // Node 2 acknowledges them at the sender's idle ACK round (16 GRTTs
    // after the last one, docs/protocol.md §3.1): only then can node 3's
    // forged ACKs free them.
    probe.until(2, "node 2's ACK of the 30 messages", |v| {
        receiver_counter(v, window.group, 1, "acks_sent") > node2_acks
    });
    let caught = att.sniff(data_of(window.group), |got| {
        got.iter().any(|f| seq(f) == 49)
    });
    let latest = caught.iter().find(|f| seq(f) == 49).expect("seq 49");
    let s1 = probe.stats(1);
    let acks0 = sender_counter(&s1, window.group, "acks_received");
    let acks = (0..50u32).map(|i| {
        let h = Hdr {
            kind: ACK,
            flags: ACK_VALID,
            group: window.group,
            src: 3,
            peer: 1,
            epoch: wepoch,
            ack: 50,
            tstamp: tstamp(latest).wrapping_add(i),
            ..Hdr::default()
        };
        forge(macs[0], att.mac, &h, &[], kid)
    });
    let n = inject(&att, &mut probe, &[1], acks, 64);
    injected[0][0] += n;
    let acks1 = sender_counter(&probe.stats(1), window.group, "acks_received") - acks0;
    eprintln!("{test}: 2. {n} ACKs in node 3's name (ack 50): the sender counted {acks1} ACKs");
    if !secure {
        assert!(
            acks1 >= n,
            "insecure: the sender took only {acks1} of {n} forged ACKs"
        );
    }
    block_data_to_node3(&cluster, window.group, false);
    window.publish(10);
    let node3 = &mut window.subs[1].1;
    if secure {
        // The sender kept what node 3 lacked: repaired, it has everything.
        expect_genuine(node3, 3, window.group, "window", 20..60);
        expect_genuine(&mut window.subs[0].1, 2, window.group, "window", 50..60);
        let s1 = probe.stats(1);
        assert_eq!(
            sender_counter(&s1, window.group, "naks_unrepairable"),
            unrep0,
            "the sender freed frames node 3 lacked: {s1}"
        );
    } else {
        // The sender freed the 30 frames node 3 never got: its NAKs for
        // them are unrepairable.
        let s1 = probe.until(1, "unrepairable NAKs after the forged ACKs", |v| {
            sender_counter(v, window.group, "naks_unrepairable") > unrep0 + unrep1
        });
        eprintln!(
            "{test}: 2. insecure: {} unrepairable NAK entries after the forged ACKs",
            sender_counter(&s1, window.group, "naks_unrepairable") - unrep0 - unrep1
        );
    }

    if !secure {
        return;
    }
    // Every refusal counted, exactly, and nothing else refused.
    for (i, &node) in all.iter().enumerate() {
        let got: Vec<u64> = refusals(&probe.stats(node))
            .iter()
            .zip(refusals(&before[i]))
            .map(|(a, b)| a - b)
            .collect();
        eprintln!("{test}: node {node}: auth.rx_auth_failed +{}, rx_auth_unknown_key +{}, rx_replayed +{}", got[0], got[1], got[2]);
        assert_eq!(got, injected[i], "node {node}: refusals counted / injected");
    }
    assert_rss_bounded(test, &cluster, &rss0);
}

#[test]
fn forged_data_acks_and_naks_are_refused_and_counted() {
    data_acks_and_naks("hp-data", true);
}

#[test]
fn forged_data_acks_and_naks_do_damage_without_a_key() {
    data_acks_and_naks("hp-data-insecure", false);
}

// ---------------------------------------------------------------------------
// 4-5: beats and link messages

/// What must not change: each node's view of the group (its local view
/// epoch, and `mcast members` / `mcast groups` as answered), its registry
/// and its counters of failures, rejoins and role moves.
fn roles_snapshot(cluster: &common::Cluster, name: &str, group: u32) -> Vec<Value> {
    (1..=3)
        .map(|n| {
            let s = stat(cluster, n);
            let d = &s["daemon"];
            serde_json::json!({
                "members": mcast(cluster, n, &["members", name]),
                "groups": mcast(cluster, n, &["groups"]),
                "view_epoch": group_stat(&s, group)["view_epoch"],
                "registry": d["registry"],
                "incarnation": s["incarnation"],
                "counters": [d["nodes_failed"], d["evictions"], d["rejoins"], d["role_moves"],
                    d["agent_resignations"], d["link_resets"]],
            })
        })
        .collect()
}

fn beats_and_links(test: &str, secure: bool) {
    let t0 = now_secs();
    let Some(cluster) = start(test, secure) else {
        return;
    };
    let t1 = now_secs();
    let att = Attacker::new(&cluster.spare()[0]);
    let mut probe = Probe::new(&cluster);
    let macs: Vec<[u8; 6]> = cluster.daemons.iter().map(|d| d.ns.mac.0).collect();
    // Node 2's client joins first: node 2 is the group's agent, node 1 the
    // registry.
    let (mut c2, m2) = join(&cluster, 2, "roles");
    let (mut c1, _) = join(&cluster, 1, "roles");
    let (mut c3, _) = join(&cluster, 3, "roles");
    wait_nodes(&mut c2, &m2, 3);
    let g = m2.group;
    let members = mcast(&cluster, 1, &["members", "roles"]);
    assert_eq!(members["agent"], 2, "{members}");
    // A genuine frame shows the key id in clear.
    let mut s = Stream::new(&cluster, "keyid");
    s.publish(1);
    let kid = key_id(&att.sniff(data_of(s.group), |f| !f.is_empty())[0]);
    let before = roles_snapshot(&cluster, "roles", g);
    let rss0 = rss_all(&cluster);
    let auth0: Vec<[u64; 3]> = (1..=3).map(|n| refusals(&probe.stats(n))).collect();
    for c in [&mut c1, &mut c2, &mut c3] {
        c.notices();
    }
    let mut injected = [0u64; 3];
    let view = &before[0]["members"];
    let view_epoch = view["epoch"].as_u64().expect("epoch");
    let member_of = |node: u64| -> u64 {
        view["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["node"] == node)
            .and_then(|m| m["client"].as_u64())
            .expect("a member on the node")
    };

    // --- 5a. A VIEW in the agent's (node 2's) name, to node 3's inbox:
    // node 1 gone, node 99 in, 1,000 epochs later.
    let forged_epoch = view_epoch + 1000;
    let mut fields = Vec::new();
    fields.extend_from_slice(&g.to_be_bytes());
    fields.extend_from_slice(&forged_epoch.to_be_bytes());
    fields.extend_from_slice(&2u32.to_be_bytes());
    put_str(&mut fields, "roles");
    fields.extend_from_slice(&3u32.to_be_bytes());
    // Each member: rank, node, client id, tree place (groups wire `view`).
    for (rank, node, member, place) in [
        (0u32, 2u32, member_of(2), 0u32),
        (2, 3, member_of(3), 1),
        (99, 99, 99, 2),
    ] {
        fields.extend_from_slice(&rank.to_be_bytes());
        fields.extend_from_slice(&node.to_be_bytes());
        fields.extend_from_slice(&member.to_be_bytes());
        fields.extend_from_slice(&place.to_be_bytes());
    }
    let link = |to: u32, from: u32, msg: &[u8], seq: u32| {
        let h = Hdr {
            kind: GBN_DATA,
            flags: WHOLE | ACK_REQ,
            group: LINK_BASE | to,
            src: from,
            peer: to,
            epoch: LINK_EPOCH,
            seq,
            ..Hdr::default()
        };
        forge(macs[to as usize - 1], att.mac, &h, msg, kid)
    };
    let view_msg = group_message(7, &fields);
    let n = inject(&att, &mut probe, &[3], [link(3, 2, &view_msg, 0)], 1);
    injected[2] += n;
    if !secure {
        let s3 = probe.until(3, "the forged view", |v| {
            group_stat(v, g)["view_epoch"] == forged_epoch
        });
        eprintln!(
            "{test}: 5a. insecure: node 3 holds the forged view: epoch {}",
            group_stat(&s3, g)["view_epoch"]
        );
    }

    // --- 5b. A RESIGN in the registry's (node 1's) name, to the agent:
    // hand the group to node 99.
    let mut fields = Vec::new();
    fields.extend_from_slice(&g.to_be_bytes());
    put_str(&mut fields, "roles");
    fields.extend_from_slice(&g.to_be_bytes());
    fields.extend_from_slice(&99u32.to_be_bytes());
    let n = inject(
        &att,
        &mut probe,
        &[2],
        [link(2, 1, &group_message(18, &fields), 0)],
        1,
    );
    injected[1] += n;
    if !secure {
        probe.until(2, "the forged resignation", |v| {
            num(v, &["daemon", "agent_resignations"]) > 0
        });
        eprintln!("{test}: 5b. insecure: node 2 resigned as the agent");
    }

    // --- 4c. Beats naming node 99 the registry after 1,000 moves, in node
    // 2's name to nodes 1 and 3 and in node 1's to node 2.
    let inc = |n: u32| num(&before[n as usize - 1], &["incarnation"]) as u32;
    let beat_frame = |to: u32, from: u32, payload: &[u8]| {
        let h = Hdr {
            kind: BEAT,
            src: from,
            peer: to,
            ..Hdr::default()
        };
        forge(macs[to as usize - 1], att.mac, &h, payload, kid)
    };
    for (to, from) in [(1u32, 2u32), (3, 2), (2, 1)] {
        let f = beat_frame(to, from, &beat(inc(from), (99, 1000), None));
        injected[to as usize - 1] += inject(&att, &mut probe, &[to], [f], 1);
    }
    if !secure {
        for n in 1..=3 {
            probe.until(n, "registry 99", |v| v["daemon"]["registry"] == 99);
        }
        eprintln!("{test}: 4c. insecure: every node has registry=99");
    }

    // --- 4a. "Node 2 restarted": beats in its name with another
    // incarnation, to nodes 1 and 3.
    let failed0 = num(&probe.stats(1), &["daemon", "nodes_failed"]);
    for to in [1u32, 3] {
        let f = beat_frame(to, 2, &beat(inc(2).wrapping_add(1), (1, 0), None));
        injected[to as usize - 1] += inject(&att, &mut probe, &[to], [f], 1);
    }
    if !secure {
        probe.until(1, "node 2 taken as restarted", |v| {
            num(v, &["daemon", "nodes_failed"]) > failed0
        });
        eprintln!("{test}: 4a. insecure: node 1 took node 2 as restarted (failed, evicted)");
    }

    // --- 4b. "You were declared failed", in node 1's name, to node 3:
    // its incarnation guessed as every second around the cluster's start.
    let guesses = (t0 - 2) as u32..=(t1 + 2) as u32;
    assert!(
        guesses.contains(&inc(3)),
        "the guess {guesses:?} misses {}",
        inc(3)
    );
    let rejoins0 = num(&probe.stats(3), &["daemon", "rejoins"]);
    let frames: Vec<Vec<u8>> = guesses
        .clone()
        .map(|i| beat_frame(3, 1, &beat(inc(1), (1, 0), Some(i))))
        .collect();
    injected[2] += inject(&att, &mut probe, &[3], frames, 64);
    if !secure {
        probe.until(3, "a rejoin", |v| num(v, &["daemon", "rejoins"]) > rejoins0);
        eprintln!("{test}: 4b. insecure: node 3 rejoined as a new member");
        return;
    }

    // No view, role or liveness verdict changed anywhere.
    let after = roles_snapshot(&cluster, "roles", g);
    for (n, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(b, a, "node {}'s view, roles or counters changed", n + 1);
    }
    for (n, c) in [(1, &mut c1), (2, &mut c2), (3, &mut c3)] {
        let changed: Vec<Notice> = c
            .notices()
            .into_iter()
            .filter(|x| matches!(x, Notice::ViewChanged { .. }))
            .collect();
        assert!(changed.is_empty(), "node {n}'s client saw {changed:?}");
    }
    // Everything refused and counted, exactly.
    for n in 1..=3u32 {
        let i = n as usize - 1;
        let want = [auth0[i][0] + injected[i], auth0[i][1], auth0[i][2]];
        let v = probe.until(n, "the refusals counted", |v| refusals(v)[0] >= want[0]);
        eprintln!(
            "{test}: node {n}: auth.rx_auth_failed +{}",
            refusals(&v)[0] - auth0[i][0]
        );
        assert_eq!(
            refusals(&v),
            want,
            "node {n}: refusals (auth failed, unknown key, replayed)"
        );
    }
    assert_rss_bounded(test, &cluster, &rss0);
}

#[test]
fn forged_beats_and_link_messages_change_no_view_or_role() {
    beats_and_links("hp-roles", true);
}

#[test]
fn forged_beats_and_link_messages_do_damage_without_a_key() {
    beats_and_links("hp-roles-insecure", false);
}

// ---------------------------------------------------------------------------
// 6-7: replays, and frames from a million sender ids

/// Frames of the forged-sender-id flood: GBN data into node 3's inbox,
/// which takes a link stream from any sender, from sender `first + i`.
fn id_flood(
    mac: [u8; 6],
    from: [u8; 6],
    kid: u32,
    ids: std::ops::Range<u32>,
) -> impl Iterator<Item = Vec<u8>> {
    let template = forge(
        mac,
        from,
        &Hdr {
            kind: GBN_DATA,
            flags: WHOLE | ACK_REQ,
            group: LINK_BASE | 3,
            peer: 3,
            epoch: 1,
            ..Hdr::default()
        },
        &[5, 0, 0, 0, 1], // a start request for group 1
        kid,
    );
    ids.map(move |id| {
        let mut f = template.clone();
        put32(&mut f, 22, id);
        fix_crc(&mut f);
        f
    })
}

fn replays_and_ids(test: &str, secure: bool, ids: u32) {
    let Some(mut cluster) = start(test, secure) else {
        return;
    };
    let att = Attacker::new(&cluster.spare()[0]);
    // Node 2's bridge port, as a mirror port would show it: the beats node
    // 2 sends node 1.
    let tap = cluster
        .topology()
        .bridge
        .run(|| RawReceiver::open("p1", ETHERTYPE, 1 << 20).expect("tap"));
    let mut probe = Probe::new(&cluster);
    let macs: Vec<[u8; 6]> = cluster.daemons.iter().map(|d| d.ns.mac.0).collect();
    let all = [1, 2, 3];
    let auth0: Vec<[u64; 3]> = all.iter().map(|&n| refusals(&probe.stats(n))).collect();

    // --- 6a. Verbatim replays of 30 genuine DATA frames, after they were
    // delivered.
    let mut s = Stream::new(&cluster, "replay");
    s.publish(30);
    s.expect(0..30);
    let caught = att.sniff(data_of(s.group), |got| got.iter().any(|f| seq(f) == 29));
    let kid = key_id(&caught[0]);
    let mut seen = std::collections::BTreeSet::new();
    let originals: Vec<Vec<u8>> = caught.into_iter().filter(|f| seen.insert(seq(f))).collect();
    let n = inject(&att, &mut probe, &all, originals, 64);
    s.publish(30);
    s.expect(30..60);
    eprintln!("{test}: 6a. {n} DATA frames replayed verbatim; the subscribers got exactly the 60 genuine messages");
    if secure {
        for (i, &node) in all.iter().enumerate() {
            // Node 1 too: its own frames sent back to it are replays.
            let want = auth0[i][2] + n;
            let v = probe.until(node, "the replays counted", |v| refusals(v)[2] >= want);
            eprintln!(
                "{test}: node {node}: auth.rx_replayed +{}",
                refusals(&v)[2] - auth0[i][2]
            );
            assert_eq!(refusals(&v)[2], want, "node {node}: rx_replayed");
        }
    }

    // --- 7. Frames from `ids` different sender ids into node 3's inbox, in
    // a tight loop paced only by node 3's intake (its engine's `rx_frames`,
    // so none is lost). With a key they fail authentication; without, they
    // pass it (anyone can claim any id) and the inbox refuses every sender
    // that is not a configured peer (before, each one opened a link stream
    // of its own: memory grew about 1 KiB an id).
    let pid = cluster.daemons[2].pid().expect("running");
    let flood = |ids: std::ops::Range<u32>| id_flood(macs[2], att.mac, kid, ids);
    let pace = |probe: &mut Probe, ids: std::ops::Range<u32>| -> u64 {
        inject(&att, probe, &[3], flood(ids), 512)
    };
    let refused = |v: &Value| num(v, &["engine", "rx_sender_refused"]);
    let refused0 = refused(&probe.stats(3));
    let first = 0x4000_0000u32;
    let warm = ids / 10;
    let rss0 = rss_kib(&cluster, 3);
    let t = Instant::now();
    let n1 = pace(&mut probe, first..first + warm);
    let rss1 = rss_kib(&cluster, 3);
    let n2 = pace(&mut probe, first + warm..first + ids);
    let secs = t.elapsed().as_secs_f64();
    let rss2 = rss_kib(&cluster, 3);
    eprintln!(
        "{test}: 7. {} frames from as many sender ids to node 3 (pid {pid}) in {secs:.1} s: VmRSS {rss0} KiB before, {rss1} KiB after {n1}, {rss2} KiB after all",
        n1 + n2
    );
    let v = if secure {
        let v = probe.until(3, "the flood counted", |v| {
            refusals(v)[0] >= auth0[2][0] + n1 + n2
        });
        assert_eq!(
            refusals(&v)[0],
            auth0[2][0] + n1 + n2,
            "node 3: rx_auth_failed"
        );
        v
    } else {
        let v = probe.until(3, "the flood counted", |v| refused(v) >= refused0 + n1 + n2);
        assert_eq!(
            refused(&v),
            refused0 + n1 + n2,
            "node 3: engine.rx_sender_refused"
        );
        v
    };
    let streams = v["links"]
        .as_array()
        .expect("links")
        .iter()
        .find(|l| l["inbox_of"] == 3)
        .and_then(|l| l["receivers"].as_array())
        .map_or(0, Vec::len);
    assert_eq!(
        streams, 2,
        "node 3's inbox has streams from its two peers only"
    );
    // Nothing of a refused frame is kept: the growth over the last 90 %
    // of the flood is the allocator's noise, not per-sender state (16
    // bytes per id would be 14 MiB at a million).
    assert!(
        rss2.saturating_sub(rss1) <= 4096 && rss2.saturating_sub(rss0) <= 8192,
        "node 3's VmRSS grew from {rss0} to {rss1} to {rss2} KiB"
    );

    // --- 6b. Beats of node 2's last run, replayed once node 2 has
    // restarted: an old incarnation, as if it restarted again.
    let beats = sniff(
        &tap,
        |f| kind(f) == BEAT && src(f) == 2 && be32(f, 26) == 1,
        |got| got.len() >= 3,
    );
    let old = be32(&beats[0], 59);
    cluster.kill(2);
    cluster.restart(2);
    cluster.daemons[0].wait_log("msg=\"peer restarted", WAIT);
    let s1 = probe.stats(1);
    let (failed0, replayed0) = (num(&s1, &["daemon", "nodes_failed"]), refusals(&s1)[2]);
    let new = num(&stat(&cluster, 2), &["incarnation"]) as u32;
    assert_ne!(old, new, "node 2 restarted within the same second");
    let n = inject(&att, &mut probe, &[1], beats, 1);
    if secure {
        let v = probe.until(1, "the replayed beats counted", |v| {
            refusals(v)[2] >= replayed0 + n
        });
        assert_eq!(refusals(&v)[2], replayed0 + n, "node 1: rx_replayed");
        assert_eq!(
            num(&v, &["daemon", "nodes_failed"]),
            failed0,
            "node 1 took node 2 as failed again"
        );
        eprintln!("{test}: 6b. {n} beats of node 2's incarnation {old} replayed after it restarted as {new}: refused");
    } else {
        probe.until(1, "node 2 taken as restarted again", |v| {
            num(v, &["daemon", "nodes_failed"]) > failed0
        });
        eprintln!("{test}: 6b. insecure: {n} replayed beats of incarnation {old} made node 1 take node 2 as restarted");
    }
}

#[test]
fn replays_and_a_million_sender_ids_are_refused_in_bounded_memory() {
    replays_and_ids("hp-replay", true, 1_000_000);
}

#[test]
fn replays_do_damage_without_a_key_but_forged_sender_ids_do_not() {
    replays_and_ids("hp-replay-insecure", false, 100_000);
}
