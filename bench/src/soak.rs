//! `mcast-bench soak client` and `mcast-bench soak check`: the traffic and
//! the checker of `scripts/soak.sh` (issue 23 part 5).
//!
//! A **client** is one connection to one mcastd, a member of one group. With
//! `--publish ID` it publishes numbered messages at `--rate`; every client
//! checks every message it receives and writes what it found as JSON lines
//! to `--out`. A long-lived client reconnects when its daemon dies or cuts
//! it off (a new *session*: a new publisher incarnation, a fresh checker);
//! a churn client (`--duration`) ends instead.
//!
//! A message is [`HEADER`] bytes and a body: the magic `SOAK`, a tag of the
//! group's name, the publisher's node, its id, its incarnation (one per
//! session), the counter (0, 1, 2, ... per incarnation), the body length and
//! an FNV-1a checksum over everything else. A publisher `K` is (id,
//! incarnation).
//!
//! What the checker holds a subscriber's stream to, per publisher `K` on
//! node `N` (docs/mcastd.md, "Late join", "Membership events in the
//! stream", "When a sender leaves"; docs/testing.md "Soak"):
//! - every message is intact (checksum, length), of this group, and tagged
//!   by the daemon with the node that published it;
//! - counters from `K` only grow, for the whole session, across every view
//!   change and across this node's own eviction and rejoin: a counter at or
//!   below the last one is a repeat or a reordering;
//! - the first message from `K` may be any counter (the join point), and so
//!   may the first one after a *break*: a membership event naming `N` gone
//!   or joined, a `skipped` event for `N` (a flush's jump), or this node's
//!   eviction (`evicted`). Anywhere else, the next counter from `K` is the
//!   last plus one: a larger one is a loss;
//! - survivors agree: at the event that names `N` gone, each subscriber
//!   writes the last counter of `K` it delivered (a *cut*); `check` compares
//!   the cuts of one departure (group, view epoch, `K`), leaving out a
//!   subscriber whose node was itself evicted within 3 s (not a survivor)
//!   and departures whose flush a daemon logged as timed out (documented:
//!   survivors may then differ);
//! - liveness at the end: a client still running at the end that had been
//!   running for 10 s has received, from each publisher of its group still
//!   running, at least what that publisher had published 3 s before the end.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use mcast_ipc::{Client, Error as IpcError, ErrorCode, Message, MessageKind, Notice};
use mcast_proto::Rng;
use serde_json::{json, Value};

/// Bytes before a message's body.
pub const HEADER: usize = 44;
const MAGIC: &[u8; 4] = b"SOAK";
/// Detailed violation records per session; the rest are only counted.
const DETAIL_LIMIT: u64 = 100;

#[derive(Subcommand, Debug)]
pub enum SoakCommand {
    /// One client of the soak: joins GROUP through the daemon at SOCKET, publishes numbered
    /// messages with --publish, checks every message it receives; JSON lines to --out.
    Client(ClientArgs),
    /// Reads every client's records (DIR/clients/*.jsonl) and the daemons' logs
    /// (DIR/logs/*.log), prints the totals and exits 1 on any violation.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The daemon's control socket.
    #[arg(long)]
    socket: PathBuf,
    /// The group to join.
    #[arg(long)]
    group: String,
    /// The node the daemon runs on (for the records).
    #[arg(long)]
    node: u32,
    /// This client's name in the records.
    #[arg(long)]
    name: String,
    /// Publish, as publisher ID (distinct per client), besides checking.
    #[arg(long, value_name = "ID")]
    publish: Option<u32>,
    /// Messages per second when publishing.
    #[arg(long, default_value_t = 100)]
    rate: u64,
    /// The largest body, bytes (sizes: 80 % up to 512, 18 % up to 4 KiB, 2 % up to this).
    #[arg(long, default_value_t = 16_384)]
    max_size: usize,
    /// End after this many seconds (a churn client); otherwise run until SIGTERM or SIGINT and
    /// reconnect whenever the daemon goes away or cuts this client off.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Leave the group explicitly before ending (otherwise just disconnect).
    #[arg(long)]
    leave: bool,
    /// Append the records here.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the message sizes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Break the rules on purpose, to show the checker catches it: every EVERY messages the
    /// publisher skips a counter (a loss) or, alternately, publishes the previous one again (a
    /// repeat). A run with this must fail.
    #[arg(long, value_name = "EVERY")]
    sabotage: Option<u64>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The soak's work directory.
    dir: PathBuf,
}

pub fn run(cmd: SoakCommand) -> Result<(), String> {
    match cmd {
        SoakCommand::Client(a) => client(&a),
        SoakCommand::Check(a) => check(&a.dir),
    }
}

/// Wall time, seconds since the epoch (the daemons' logs use the same clock).
#[allow(clippy::disallowed_methods, reason = "records carry wall time")]
fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[allow(clippy::disallowed_methods, reason = "the publisher paces itself")]
fn mono() -> Instant {
    Instant::now()
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn group_tag(name: &str) -> u32 {
    fnv1a(&[name.as_bytes()]) as u32
}

/// One message's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub tag: u32,
    pub node: u32,
    pub publisher: u32,
    pub inc: u64,
    pub counter: u64,
}

/// Writes message `s` with a body of `len` bytes into `out`.
pub fn encode(s: &Stamp, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&s.tag.to_be_bytes());
    out.extend_from_slice(&s.node.to_be_bytes());
    out.extend_from_slice(&s.publisher.to_be_bytes());
    out.extend_from_slice(&s.inc.to_be_bytes());
    out.extend_from_slice(&s.counter.to_be_bytes());
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    let mut x = s.inc ^ s.counter.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 1;
    for _ in 0..len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    let sum = fnv1a(&[&out[..36], &out[HEADER..]]);
    out[36..44].copy_from_slice(&sum.to_be_bytes());
}

/// The header of an intact message, or why it is not one.
pub fn decode(m: &[u8]) -> Result<Stamp, String> {
    if m.len() < HEADER || &m[..4] != MAGIC {
        return Err(format!("{}-byte message without the soak header", m.len()));
    }
    let u32_at = |i: usize| u32::from_be_bytes(m[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_be_bytes(m[i..i + 8].try_into().expect("8 bytes"));
    let len = u32_at(32) as usize;
    if m.len() != HEADER + len {
        return Err(format!(
            "{} bytes where the header says {}",
            m.len(),
            HEADER + len
        ));
    }
    if u64_at(36) != fnv1a(&[&m[..36], &m[HEADER..]]) {
        return Err("checksum mismatch".into());
    }
    Ok(Stamp {
        tag: u32_at(4),
        node: u32_at(8),
        publisher: u32_at(12),
        inc: u64_at(16),
        counter: u64_at(24),
    })
}

/// What one publisher's stream looks like to one subscriber.
#[derive(Debug, Clone, Copy)]
struct Stream {
    node: u32,
    last: u64,
    /// The next message must be `last + 1` (no break since `last`).
    open: bool,
    at: f64,
}

/// The checker of one session's stream (module doc).
#[derive(Debug)]
pub struct Checker {
    tag: u32,
    streams: BTreeMap<(u32, u64), Stream>,
    pub checked: u64,
    pub violations: u64,
    pub lost_messages: u64,
    pub breaks: u64,
    pub events: u64,
    pub skipped_events: u64,
    pub evictions: u64,
    /// Records to write: violations (the first DETAIL_LIMIT), cuts, evictions.
    pub records: Vec<Value>,
}

impl Checker {
    pub fn new(group: &str) -> Checker {
        Checker {
            tag: group_tag(group),
            streams: BTreeMap::new(),
            checked: 0,
            violations: 0,
            lost_messages: 0,
            breaks: 0,
            events: 0,
            skipped_events: 0,
            evictions: 0,
            records: Vec::new(),
        }
    }

    fn violation(&mut self, kind: &str, detail: String) {
        self.violations += 1;
        if self.violations <= DETAIL_LIMIT {
            self.records
                .push(json!({"t": "violation", "kind": kind, "detail": detail, "time": wall()}));
        }
    }

    /// A message delivered by the daemon.
    pub fn message(&mut self, m: &Message) {
        match m.kind {
            MessageKind::Data => self.data(m.source, &m.data),
            MessageKind::Membership => self.event(m.group, &m.data),
        }
    }

    fn data(&mut self, source: u32, bytes: &[u8]) {
        let s = match decode(bytes) {
            Ok(s) => s,
            Err(e) => return self.violation("corrupt", format!("from node {source}: {e}")),
        };
        if s.tag != self.tag {
            self.violation(
                "wrong_group",
                format!(
                    "publisher {} counter {}: another group's message",
                    s.publisher, s.counter
                ),
            );
            return;
        }
        if s.node != source {
            self.violation(
                "wrong_source",
                format!(
                    "publisher {} (node {}) counter {} delivered as from node {source}",
                    s.publisher, s.node, s.counter
                ),
            );
        }
        self.checked += 1;
        let now = wall();
        let key = (s.publisher, s.inc);
        let Some(st) = self.streams.get(&key).copied() else {
            self.streams.insert(
                key,
                Stream {
                    node: s.node,
                    last: s.counter,
                    open: true,
                    at: now,
                },
            );
            return;
        };
        if s.counter <= st.last {
            self.violation(
                "repeated_or_reordered",
                format!(
                    "publisher {} incarnation {:x} (node {}): counter {} after {}",
                    s.publisher, s.inc, s.node, s.counter, st.last
                ),
            );
            return;
        }
        if st.open && s.counter != st.last + 1 {
            self.lost_messages += s.counter - st.last - 1;
            self.violation(
                "lost",
                format!(
                    "publisher {} incarnation {:x} (node {}): counter {} after {}, with no membership event between",
                    s.publisher, s.inc, s.node, s.counter, st.last
                ),
            );
        }
        self.streams.insert(
            key,
            Stream {
                node: s.node,
                last: s.counter,
                open: true,
                at: now,
            },
        );
    }

    /// Breaks the streams of the publishers on `node` (all, if None); with
    /// a view's epoch, writes the cuts the survivors compare.
    fn break_streams(&mut self, node: Option<u32>, cut: Option<(u32, u64)>) {
        let now = wall();
        for (&(publisher, inc), st) in self.streams.iter_mut() {
            if node.is_some_and(|n| n != st.node) || !st.open {
                continue;
            }
            st.open = false;
            self.breaks += 1;
            if let Some((number, epoch)) = cut {
                self.records.push(json!({
                    "t": "cut", "number": number, "epoch": epoch, "publisher": publisher,
                    "inc": inc, "from": st.node, "last": st.last, "time": now,
                }));
            }
        }
    }

    fn event(&mut self, number: u32, bytes: &[u8]) {
        self.events += 1;
        let v: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => return self.violation("corrupt", format!("membership event: {e}")),
        };
        let nodes = |k: &str| -> Vec<u32> {
            v[k].as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_u64().map(|n| n as u32))
                .collect()
        };
        if v["evicted"] == true {
            self.evictions += 1;
            self.break_streams(None, None);
            self.records.push(json!({"t": "evicted", "time": wall()}));
        } else if let Some(sender) = v["skipped"]["sender"].as_u64() {
            self.skipped_events += 1;
            self.break_streams(Some(sender as u32), None);
        } else {
            let epoch = v["epoch"].as_u64().unwrap_or(0);
            for n in nodes("gone") {
                self.break_streams(Some(n), Some((number, epoch)));
            }
            for n in nodes("joined") {
                self.break_streams(Some(n), None);
            }
        }
    }

    /// Each publisher's last counter and when it came.
    fn lasts(&self) -> Vec<Value> {
        self.streams
            .iter()
            .map(|(&(p, inc), st)| json!({"publisher": p, "inc": inc, "last": st.last, "time": st.at}))
            .collect()
    }
}

/// Appends records to the client's file, one JSON line each.
#[derive(Debug)]
struct Records {
    file: File,
    base: Value,
}

impl Records {
    fn write(&mut self, mut v: Value) {
        if let (Some(o), Some(b)) = (v.as_object_mut(), self.base.as_object()) {
            for (k, x) in b {
                o.entry(k.clone()).or_insert_with(|| x.clone());
            }
        }
        // The records are the run's result: a write that fails must not pass unseen.
        writeln!(self.file, "{v}").expect("writing the soak records");
    }
}

/// Why a session ended.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum End {
    /// SIGTERM or SIGINT.
    Stopped,
    /// --duration passed.
    Duration,
    /// The daemon went away.
    Disconnected,
    /// The daemon cut this client off.
    CutOff,
    /// This node rejoined after an eviction and could not join the group again.
    RejoinFailed,
}

impl End {
    fn name(self) -> &'static str {
        match self {
            End::Stopped => "stopped",
            End::Duration => "duration",
            End::Disconnected => "disconnected",
            End::CutOff => "cut_off",
            End::RejoinFailed => "rejoin_failed",
        }
    }
}

fn client(a: &ClientArgs) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("installing the signal handler: {e}"))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.out)
        .map_err(|e| format!("{}: {e}", a.out.display()))?;
    let mut rec = Records {
        file,
        base: json!({"client": a.name, "node": a.node, "group": a.group}),
    };
    let started = mono();
    let until = a.duration.map(|d| started + Duration::from_secs_f64(d));
    let mut rng = Rng::new(a.seed ^ u64::from(std::process::id()));
    let mut session = 0u64;
    loop {
        let Some(mut c) = connect_and_join(a, &stop, until, &mut rec, session) else {
            return Ok(()); // stopped, or the duration passed, while connecting
        };
        let end = run_session(a, &mut c, &stop, until, &mut rec, session, &mut rng);
        let left = if a.leave && matches!(end, End::Stopped | End::Duration) {
            let g = c.group;
            c.client.leave(g).is_ok()
        } else {
            false
        };
        let mut ck = c.checker;
        for r in ck.records.drain(..) {
            rec.write(r);
        }
        rec.write(json!({
            "t": "end", "session": session, "why": end.name(), "time": wall(),
            "publisher": a.publish, "inc": c.inc, "published": c.published,
            "checked": ck.checked, "violations": ck.violations, "lost_messages": ck.lost_messages,
            "breaks": ck.breaks, "events": ck.events, "skipped_events": ck.skipped_events,
            "evictions": ck.evictions, "publish_errors": c.publish_errors,
            "other_errors": c.other_errors, "left": left,
            "started": c.started, "last": ck.lasts(),
        }));
        drop(c.client);
        session += 1;
        if matches!(end, End::Stopped | End::Duration) || until.is_some() {
            return Ok(());
        }
    }
}

/// One connection and what it did.
#[derive(Debug)]
struct Session {
    client: Client,
    group: u32,
    checker: Checker,
    inc: u64,
    published: u64,
    /// Publications dropped because this client was not in the group then
    /// (its node was evicted and had not joined it again yet).
    publish_errors: u64,
    /// Other `Error` notices (written as notes).
    other_errors: u64,
    started: f64,
}

/// Connects and joins, retrying while the daemon is away or busy; None
/// when told to stop (or out of time) first.
fn connect_and_join(
    a: &ClientArgs,
    stop: &AtomicBool,
    until: Option<Instant>,
    rec: &mut Records,
    session: u64,
) -> Option<Session> {
    let mut last_error = String::new();
    let mut tries = 0u64;
    loop {
        if stop.load(Ordering::Relaxed) || until.is_some_and(|u| mono() >= u) {
            if tries > 0 {
                rec.write(json!({"t": "gave_up", "session": session, "tries": tries,
                    "error": last_error, "time": wall()}));
            }
            return None;
        }
        if tries > 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
        tries += 1;
        let mut client = match Client::connect(&a.socket, &a.name) {
            Ok(c) => c,
            Err(e) => {
                last_error = e.to_string();
                continue;
            }
        };
        match client.join(&a.group) {
            Ok(m) => {
                let inc = fnv1a(&[
                    &wall().to_bits().to_be_bytes(),
                    &std::process::id().to_be_bytes(),
                    &session.to_be_bytes(),
                ]);
                let started = wall();
                rec.write(
                    json!({"t": "session", "session": session, "publisher": a.publish,
                    "inc": inc, "number": m.group, "tries": tries, "time": started}),
                );
                return Some(Session {
                    client,
                    group: m.group,
                    checker: Checker::new(&a.group),
                    inc,
                    published: 0,
                    publish_errors: 0,
                    other_errors: 0,
                    started,
                });
            }
            Err(e) => last_error = e.to_string(),
        }
    }
}

fn body_len(rng: &mut Rng, max: usize) -> usize {
    let max = max as u64;
    let r = rng.unit();
    let hi = if r < 0.8 {
        512
    } else if r < 0.98 {
        4096
    } else {
        max
    };
    rng.range(0, hi.min(max)) as usize
}

fn run_session(
    a: &ClientArgs,
    s: &mut Session,
    stop: &AtomicBool,
    until: Option<Instant>,
    rec: &mut Records,
    session: u64,
    rng: &mut Rng,
) -> End {
    let interval = Duration::from_secs_f64(1.0 / a.rate.max(1) as f64);
    let mut next_due = mono();
    let mut next_progress = mono();
    let mut msg = Vec::new();
    let mut pending: Option<usize> = None;
    let tag = group_tag(&a.group);
    let mut sabotaged = 0u64;
    loop {
        if stop.load(Ordering::Relaxed) {
            return End::Stopped;
        }
        let now = mono();
        if until.is_some_and(|u| now >= u) {
            return End::Duration;
        }
        if let Some(publisher) = a.publish {
            if now >= next_progress {
                rec.write(
                    json!({"t": "progress", "session": session, "publisher": publisher,
                    "inc": s.inc, "counter": s.published, "time": wall()}),
                );
                next_progress = now + Duration::from_secs(1);
            }
            // What is due, without blocking; a full ring delays, never skips.
            while mono() >= next_due {
                let len = *pending.get_or_insert_with(|| body_len(rng, a.max_size));
                // Sabotage (--sabotage): skip a counter, or repeat the last one.
                let mut counter = s.published;
                let mut sabotage = None;
                if let Some(every) = a.sabotage.filter(|&e| e > 0) {
                    if counter > 0 && counter / every > sabotaged {
                        if sabotaged % 2 == 0 {
                            sabotage = Some("skip");
                            counter += 1;
                        } else {
                            sabotage = Some("repeat");
                            counter -= 1;
                        }
                    }
                }
                let stamp = Stamp {
                    tag,
                    node: a.node,
                    publisher,
                    inc: s.inc,
                    counter,
                };
                encode(&stamp, len, &mut msg);
                match s.client.publish(s.group, &msg) {
                    Ok(()) => {
                        if let Some(kind) = sabotage {
                            sabotaged += 1;
                            rec.write(json!({"t": "sabotage", "session": session, "kind": kind,
                                "counter": counter, "time": wall()}));
                        }
                        if sabotage != Some("repeat") {
                            s.published = counter + 1;
                            pending = None;
                            next_due += interval;
                        }
                    }
                    Err(IpcError::WouldBlock) => break,
                    Err(e) => return ended(&e),
                }
            }
            // After a stall, go on at the rate rather than in a burst.
            if mono() > next_due + Duration::from_secs(1) {
                next_due = mono();
            }
        }
        let wait = if a.publish.is_some() {
            next_due
                .saturating_duration_since(mono())
                .clamp(Duration::from_micros(200), Duration::from_millis(20))
        } else {
            Duration::from_millis(50)
        };
        match s.client.recv_timeout(wait) {
            Ok(Some(m)) => {
                if m.kind == MessageKind::Membership {
                    s.group = m.group;
                }
                s.checker.message(&m);
                // Whatever else is there, without waiting.
                loop {
                    match s.client.try_recv() {
                        Ok(Some(m)) => {
                            if m.kind == MessageKind::Membership {
                                s.group = m.group;
                            }
                            s.checker.message(&m);
                        }
                        Ok(None) => break,
                        Err(e) => return ended(&e),
                    }
                }
            }
            Ok(None) => {}
            Err(e) => return ended(&e),
        }
        for r in s.checker.records.drain(..) {
            rec.write(r);
        }
        for n in s.client.notices() {
            match n {
                Notice::ViewChanged { group, .. } => s.group = group,
                Notice::Error { message } => {
                    if message.contains("could not join") {
                        rec.write(json!({"t": "note", "session": session, "message": message, "time": wall()}));
                        return End::RejoinFailed;
                    }
                    if message.contains("has not joined") {
                        s.publish_errors += 1;
                    } else {
                        s.other_errors += 1;
                        if s.other_errors <= 10 {
                            rec.write(json!({"t": "note", "session": session, "message": message, "time": wall()}));
                        }
                    }
                }
                Notice::CutOff { reason } => {
                    rec.write(json!({"t": "note", "session": session, "message": format!("cut off: {reason}"), "time": wall()}));
                    return End::CutOff;
                }
                Notice::Shutdown { .. } => return End::Disconnected,
            }
        }
    }
}

fn ended(e: &IpcError) -> End {
    match e {
        IpcError::CutOff { .. } => End::CutOff,
        IpcError::Daemon {
            code: ErrorCode::UnknownGroup,
            ..
        } => End::RejoinFailed,
        _ => End::Disconnected,
    }
}

// ---- check ----

#[derive(Debug, Default)]
struct Totals {
    clients: u64,
    sessions: u64,
    churn_sessions: u64,
    published: u64,
    checked: u64,
    violations: u64,
    lost_messages: u64,
    breaks: u64,
    events: u64,
    skipped_events: u64,
    evictions: u64,
    publish_errors: u64,
    other_errors: u64,
    left: u64,
    ends: BTreeMap<String, u64>,
    unfinished: u64,
}

fn read_jsonl(path: &Path) -> Result<Vec<Value>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        // A client stopped mid-write leaves at most a torn last line.
        match serde_json::from_str(&line) {
            Ok(v) => out.push(v),
            Err(e) => eprintln!("soak check: {}:{}: {e}", path.display(), i + 1),
        }
    }
    Ok(out)
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

/// `key=value` from a daemon's log line (quoted values unquoted).
fn log_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!(" {key}=");
    let at = line.find(&pat)? + pat.len();
    let rest = &line[at..];
    if let Some(q) = rest.strip_prefix('"') {
        q.split('"').next()
    } else {
        rest.split_whitespace().next()
    }
}

/// A departed publisher at one subscriber: (group, view epoch, publisher, incarnation, node).
type Departure = (String, u64, u64, u64, u64);

/// One subscriber's last message of a departed publisher.
#[derive(Debug)]
struct Cut<'a> {
    client: &'a str,
    last: u64,
    time: f64,
    number: u64,
}

/// What the daemons' logs say: the flushes that timed out (group number,
/// sender, time) and counts of notable lines.
#[derive(Debug, Default)]
struct Logs {
    timed_out: Vec<(u64, u64, f64)>,
    counts: BTreeMap<&'static str, u64>,
}

fn read_logs(dir: &Path) -> Result<Logs, String> {
    const COUNTED: [(&str, &str); 7] = [
        ("flush agreed", "flushes agreed"),
        ("flush timed out", "flushes timed out"),
        ("flush jumped", "flush jumps"),
        (
            "peer failed",
            "peers declared failed (each daemon counts its own)",
        ),
        ("this node was declared failed", "rejoins after an eviction"),
        ("client cut off", "clients cut off"),
        ("level=error", "error lines"),
    ];
    let mut logs = Logs::default();
    for p in files(&dir.join("logs"), "log") {
        let f = File::open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        for line in BufReader::new(f).lines().map_while(Result::ok) {
            for (needle, label) in COUNTED {
                if line.contains(needle) {
                    *logs.counts.entry(label).or_default() += 1;
                }
            }
            if line.contains("flush timed out") {
                let num = |k: &str| log_field(&line, k).and_then(|x| x.parse::<u64>().ok());
                let ts = log_field(&line, "ts")
                    .or_else(|| {
                        line.strip_prefix("ts=")
                            .and_then(|l| l.split_whitespace().next())
                    })
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0.0);
                logs.timed_out
                    .push((num("group").unwrap_or(0), num("sender").unwrap_or(0), ts));
            }
        }
    }
    Ok(logs)
}

/// Survivors agree on a departed publisher's last message: returns the
/// departures compared, the disagreements excused by a timed-out flush,
/// and the disagreements.
fn agreement(all: &[Value], logs: &Logs, details: &mut Vec<(String, String)>) -> (u64, u64, u64) {
    let mut evicted_at: HashMap<&str, Vec<f64>> = HashMap::new();
    for v in all.iter().filter(|v| v["t"] == "evicted") {
        evicted_at
            .entry(v["client"].as_str().unwrap_or(""))
            .or_default()
            .push(v["time"].as_f64().unwrap_or(0.0));
    }
    let mut cuts: BTreeMap<Departure, Vec<Cut<'_>>> = BTreeMap::new();
    for v in all.iter().filter(|v| v["t"] == "cut") {
        let client = v["client"].as_str().unwrap_or("");
        let time = v["time"].as_f64().unwrap_or(0.0);
        // Not a survivor: its own node was evicted right after.
        let evicted = evicted_at
            .get(client)
            .is_some_and(|ts| ts.iter().any(|&e| e >= time - 0.5 && e <= time + 3.0));
        if evicted {
            continue;
        }
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let key = (
            v["group"].as_str().unwrap_or("").to_owned(),
            n("epoch"),
            n("publisher"),
            n("inc"),
            n("from"),
        );
        cuts.entry(key).or_default().push(Cut {
            client,
            last: n("last"),
            time,
            number: n("number"),
        });
    }
    let (mut compared, mut excused, mut disagreements) = (0, 0, 0);
    for ((group, epoch, publisher, _, from), list) in &cuts {
        if list.len() < 2 {
            continue;
        }
        compared += 1;
        if list.iter().all(|c| c.last == list[0].last) {
            continue;
        }
        let timed_out = logs.timed_out.iter().any(|&(g, s, ts)| {
            g == list[0].number && s == *from && (ts - list[0].time).abs() < 5.0
        });
        if timed_out {
            excused += 1;
            continue;
        }
        disagreements += 1;
        let who: Vec<String> = list
            .iter()
            .map(|c| format!("{} at {}", c.client, c.last))
            .collect();
        details.push(("agreement".to_owned(), format!(
            "survivors disagree on publisher {publisher} (node {from}) in {group} at view epoch {epoch}: {}",
            who.join(", ")
        )));
    }
    (compared, excused, disagreements)
}

/// Liveness at the end: returns the streams checked and the stalled ones.
fn liveness(all: &[Value], ends: &[&Value], details: &mut Vec<(String, String)>) -> (u64, u64) {
    let key = |v: &Value| {
        (
            v["publisher"].as_u64().unwrap_or(0),
            v["inc"].as_u64().unwrap_or(0),
        )
    };
    let mut progress: HashMap<(u64, u64), Vec<(f64, u64)>> = HashMap::new();
    for v in all.iter().filter(|v| v["t"] == "progress") {
        progress.entry(key(v)).or_default().push((
            v["time"].as_f64().unwrap_or(0.0),
            v["counter"].as_u64().unwrap_or(0),
        ));
    }
    let stopped: Vec<&Value> = ends
        .iter()
        .copied()
        .filter(|e| e["why"] == "stopped")
        .collect();
    let (mut checked, mut stalls) = (0, 0);
    for e in &stopped {
        let end = e["time"].as_f64().unwrap_or(0.0);
        if e["started"].as_f64().unwrap_or(end) > end - 10.0 {
            continue;
        }
        for p in stopped.iter().filter(|p| p["publisher"].is_u64()) {
            if p["group"] != e["group"] || p["client"] == e["client"] {
                continue;
            }
            let k = key(p);
            // Messages 0..owed had been published three seconds before the end.
            let owed = progress.get(&k).and_then(|pr| {
                pr.iter()
                    .filter(|(ts, _)| *ts <= end - 3.0)
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|x| x.1)
            });
            let Some(owed) = owed.filter(|&o| o > 0) else {
                continue;
            };
            checked += 1;
            let got = e["last"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|l| key(l) == k)
                .and_then(|l| l["last"].as_u64());
            if got.is_none_or(|g| g + 1 < owed) {
                stalls += 1;
                details.push(("liveness".to_owned(), format!(
                    "{} ({}, node {}): stalled: received up to {:?} of {} (node {}), which had published {} three seconds before the end",
                    e["client"].as_str().unwrap_or("?"),
                    e["group"].as_str().unwrap_or("?"),
                    e["node"],
                    got,
                    p["client"].as_str().unwrap_or("?"),
                    p["node"],
                    owed
                )));
            }
        }
    }
    (checked, stalls)
}

fn check(dir: &Path) -> Result<(), String> {
    let mut t = Totals::default();
    let mut details: Vec<(String, String)> = Vec::new();
    let mut all: Vec<Value> = Vec::new();
    for p in files(&dir.join("clients"), "jsonl") {
        t.clients += 1;
        all.extend(read_jsonl(&p)?);
    }
    let sid = |v: &Value| {
        (
            v["client"].as_str().unwrap_or("").to_owned(),
            v["session"].as_u64().unwrap_or(0),
        )
    };
    let mut started: HashMap<(String, u64), &Value> = HashMap::new();
    let mut ends: HashMap<(String, u64), &Value> = HashMap::new();
    let mut sabotage = 0u64;
    for v in &all {
        match v["t"].as_str().unwrap_or("") {
            "session" => {
                started.insert(sid(v), v);
            }
            "end" => {
                ends.insert(sid(v), v);
            }
            "sabotage" => sabotage += 1,
            "violation" => details.push((
                v["client"].as_str().unwrap_or("?").to_owned(),
                format!(
                    "{} ({}, node {}): {}: {}",
                    v["client"].as_str().unwrap_or("?"),
                    v["group"].as_str().unwrap_or("?"),
                    v["node"],
                    v["kind"].as_str().unwrap_or("?"),
                    v["detail"].as_str().unwrap_or("")
                ),
            )),
            _ => {}
        }
    }
    t.sessions = started.len() as u64;
    t.churn_sessions = started
        .keys()
        .filter(|(c, _)| c.starts_with("churn"))
        .count() as u64;
    t.unfinished = started.keys().filter(|k| !ends.contains_key(*k)).count() as u64;
    for e in ends.values() {
        let n = |k: &str| e[k].as_u64().unwrap_or(0);
        t.published += n("published");
        t.checked += n("checked");
        t.violations += n("violations");
        t.lost_messages += n("lost_messages");
        t.breaks += n("breaks");
        t.events += n("events");
        t.skipped_events += n("skipped_events");
        t.evictions += n("evictions");
        t.publish_errors += n("publish_errors");
        t.other_errors += n("other_errors");
        t.left += u64::from(e["left"] == true);
        *t.ends
            .entry(e["why"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    let logs = read_logs(dir)?;
    let (compared, excused, disagreements) = agreement(&all, &logs, &mut details);
    let ends: Vec<&Value> = ends.values().copied().collect();
    let (live_checked, stalls) = liveness(&all, &ends, &mut details);
    let failures = t.violations + disagreements + stalls;
    println!(
        "soak check: {} clients, {} sessions ({} of churn clients), {} unfinished",
        t.clients, t.sessions, t.churn_sessions, t.unfinished
    );
    println!("  messages published         {}", t.published);
    println!("  messages checked           {}", t.checked);
    println!(
        "  violations in streams      {} (messages lost {})",
        t.violations, t.lost_messages
    );
    println!("  survivor agreement         {compared} departures seen by 2 or more subscribers, {disagreements} disagreements, {excused} excused by a timed-out flush");
    println!("  liveness at the end        {live_checked} streams checked, {stalls} stalled");
    println!(
        "  membership events          {} (streams broken by one {}, flush jumps {}, own evictions {})",
        t.events, t.breaks, t.skipped_events, t.evictions
    );
    println!(
        "  publications refused       {} (published while out of the group); other error notices {}",
        t.publish_errors, t.other_errors
    );
    let why: Vec<String> = t.ends.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "  sessions ended             {} (left explicitly {})",
        why.join(", "),
        t.left
    );
    let counts: Vec<String> = logs
        .counts
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "  daemon logs                {}",
        if counts.is_empty() {
            "-".to_owned()
        } else {
            counts.join(", ")
        }
    );
    if sabotage > 0 {
        println!("  sabotage                   {sabotage} rule breaks injected on purpose (--sabotage): this run must fail");
    }
    // The first few of each client's, then the rest counted.
    let mut shown: HashMap<&str, usize> = HashMap::new();
    let mut hidden = 0;
    for (client, d) in &details {
        let n = shown.entry(client.as_str()).or_default();
        *n += 1;
        if *n <= 3 {
            println!("  VIOLATION {d}");
        } else {
            hidden += 1;
        }
    }
    if hidden > 0 {
        println!("  ... and {hidden} more (DIR/clients/*.jsonl has them, up to 100 a session)");
    }
    println!(
        "SOAK-CHECK checked={} violations={failures} stream={} disagreements={disagreements} stalls={stalls}",
        t.checked, t.violations
    );
    if failures > 0 {
        return Err(format!("{failures} violations"));
    }
    if t.checked == 0 {
        return Err("no message was checked".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &Stamp) -> Message {
        let mut m = Vec::new();
        encode(s, 100, &mut m);
        Message {
            kind: MessageKind::Data,
            group: 7,
            source: s.node,
            data: m,
        }
    }

    fn event(v: Value) -> Message {
        Message {
            kind: MessageKind::Membership,
            group: 7,
            source: 0,
            data: v.to_string().into_bytes(),
        }
    }

    fn stamp(node: u32, counter: u64) -> Stamp {
        Stamp {
            tag: group_tag("g"),
            node,
            publisher: node * 10,
            inc: 5,
            counter,
        }
    }

    #[test]
    fn messages_round_trip_and_corruption_is_caught() {
        let mut m = Vec::new();
        encode(&stamp(2, 9), 300, &mut m);
        assert_eq!(decode(&m).unwrap(), stamp(2, 9));
        for i in [0, 5, 30, 40, 200] {
            let mut bad = m.clone();
            bad[i] ^= 1;
            assert!(decode(&bad).is_err(), "byte {i}");
        }
        assert!(decode(&m[..m.len() - 1]).is_err());
    }

    #[test]
    fn a_gap_is_a_loss_unless_an_event_breaks_the_stream() {
        let mut c = Checker::new("g");
        for i in 5..10 {
            c.message(&data(&stamp(2, i)));
        }
        assert_eq!((c.checked, c.violations), (5, 0), "any first counter");
        c.message(&data(&stamp(2, 11)));
        assert_eq!((c.violations, c.lost_messages), (1, 1));
        // Another node's departure breaks nothing of node 2's.
        c.message(&event(json!({"epoch": 3, "gone": [3], "joined": []})));
        c.message(&data(&stamp(2, 13)));
        assert_eq!(c.violations, 2);
        c.message(&event(json!({"epoch": 4, "gone": [2], "joined": []})));
        c.message(&data(&stamp(2, 20)));
        assert_eq!(c.violations, 2, "gap after a gone event");
        let cut = c.records.iter().find(|r| r["t"] == "cut").unwrap();
        assert_eq!(
            (cut["last"].as_u64(), cut["epoch"].as_u64()),
            (Some(13), Some(4))
        );
        c.message(&event(json!({"skipped": {"sender": 2, "frames": 3}})));
        c.message(&data(&stamp(2, 25)));
        c.message(&event(json!({"evicted": true, "by": 1, "rejoining": true})));
        c.message(&data(&stamp(2, 40)));
        c.message(&event(json!({"epoch": 9, "gone": [], "joined": [2]})));
        c.message(&data(&stamp(2, 50)));
        c.message(&data(&stamp(2, 51)));
        assert_eq!(c.violations, 2);
    }

    #[test]
    fn repeats_and_reordering_are_violations_even_across_events() {
        let mut c = Checker::new("g");
        c.message(&data(&stamp(2, 1)));
        c.message(&data(&stamp(2, 2)));
        c.message(&data(&stamp(2, 2)));
        assert_eq!(c.violations, 1);
        c.message(&event(json!({"evicted": true})));
        c.message(&data(&stamp(2, 1)));
        assert_eq!(c.violations, 2);
        // Another publisher's stream is its own.
        c.message(&data(&stamp(3, 0)));
        assert_eq!(c.violations, 2);
        let mut other = stamp(2, 3);
        other.tag = group_tag("h");
        c.message(&data(&other));
        assert_eq!(c.violations, 3);
        let mut m = data(&stamp(2, 4));
        m.source = 4;
        c.message(&m);
        assert_eq!(c.violations, 4);
    }

    /// Whether `check` passes a work directory with one client file per
    /// entry of `clients` and one daemon log.
    fn passes(test: &str, clients: &[(&str, Vec<Value>)], log: &str) -> bool {
        let dir = std::env::temp_dir().join(format!("soak-check-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("clients")).unwrap();
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        for (name, recs) in clients {
            let text: String = recs
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    r["client"] = json!(name);
                    r["group"] = json!("g");
                    format!("{r}\n")
                })
                .collect();
            std::fs::write(dir.join("clients").join(format!("{name}.jsonl")), text).unwrap();
        }
        std::fs::write(dir.join("logs/n1.log"), log).unwrap();
        let ok = check(&dir).is_ok();
        std::fs::remove_dir_all(&dir).unwrap();
        ok
    }

    fn session(started: f64) -> Value {
        json!({"t": "session", "session": 0, "time": started})
    }

    fn end(why: &str, started: f64, at: f64, publisher: Option<u32>, last: Value) -> Value {
        json!({"t": "end", "session": 0, "why": why, "time": at, "started": started,
            "publisher": publisher, "inc": 9, "checked": 10, "last": last})
    }

    fn cut(last: u64) -> Value {
        json!({"t": "cut", "number": 3, "epoch": 7, "publisher": 11, "inc": 5, "from": 2,
            "last": last, "time": 1000.0})
    }

    #[test]
    fn survivors_that_disagree_fail_the_check_unless_the_flush_timed_out() {
        let ok = |l| {
            vec![
                session(900.0),
                cut(l),
                end("duration", 900.0, 1001.0, None, json!([])),
            ]
        };
        assert!(passes("agree", &[("s1", ok(40)), ("s2", ok(40))], ""));
        assert!(!passes("disagree", &[("s1", ok(40)), ("s2", ok(39))], ""));
        let log = "ts=1001.5 level=warn msg=\"flush timed out: survivors may differ\" group=3 sender=2 waiting_for=[4]\n";
        assert!(passes("excused", &[("s1", ok(40)), ("s2", ok(39))], log));
        // Not a survivor: its own node was evicted right after.
        let mut evicted = ok(39);
        evicted.push(json!({"t": "evicted", "time": 1001.0}));
        assert!(passes("evicted", &[("s1", ok(40)), ("s2", evicted)], ""));
    }

    #[test]
    fn a_subscriber_behind_a_running_publisher_at_the_end_is_a_stall() {
        let publisher = vec![
            json!({"t": "session", "session": 0, "time": 900.0}),
            json!({"t": "progress", "session": 0, "publisher": 11, "inc": 9, "counter": 500, "time": 990.0}),
            json!({"t": "progress", "session": 0, "publisher": 11, "inc": 9, "counter": 600, "time": 998.0}),
            end("stopped", 900.0, 1000.0, Some(11), json!([])),
        ];
        let sub = |last: u64| {
            vec![
                session(900.0),
                end(
                    "stopped",
                    900.0,
                    1000.0,
                    None,
                    json!([{"publisher": 11, "inc": 9, "last": last, "time": 999.0}]),
                ),
            ]
        };
        assert!(passes(
            "live",
            &[("p", publisher.clone()), ("s", sub(499))],
            ""
        ));
        assert!(!passes("stalled", &[("p", publisher), ("s", sub(400))], ""));
    }
}
