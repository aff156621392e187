//! What `mcast send` and `mcast recv` put in messages, and how `mcast`
//! renders the daemon's answers.
//!
//! A `send` stream is the input cut into messages of up to `--chunk` bytes
//! (or, with `--lines`, one line per message, newline included), ended by
//! one empty message. With `--stamp`, each message starts with
//! [`STAMP_LEN`] bytes: the magic `MCTS`, 4 reserved bytes, and the send
//! time (CLOCK_MONOTONIC, nanoseconds, big-endian u64); the end message is
//! stamped too.
//!
//! Both ends move messages in batches: `send` publishes every message its
//! input already holds (up to [`SEND_BATCH`]) with one ring commit before it
//! reads on (a read that may block comes after a publish, so a line is still
//! sent as soon as it is read), and `recv` takes up to [`RECV_BATCH`]
//! messages per call, lent in place from the ring into one buffered writer
//! that is flushed when the ring runs dry, not per message.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use hdrhistogram::Histogram;
use mcast_engine::sys::monotonic_ns;
use mcast_ipc::{Client, MessageKind, MessageRef, Notice};
use serde_json::Value;

/// Bytes of a send-time stamp.
pub const STAMP_LEN: usize = 16;
const MAGIC: &[u8; 4] = b"MCTS";

/// What a send moved.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub bytes: u64,
    pub messages: u64,
    pub elapsed: Duration,
}

/// A stamp for now.
pub fn stamp_now(out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + STAMP_LEN, 0);
    stamp_at(&mut out[at..]);
}

/// A stamp for now into the first [`STAMP_LEN`] bytes of `out`.
fn stamp_at(out: &mut [u8]) {
    out[..4].copy_from_slice(MAGIC);
    out[4..8].fill(0);
    out[8..STAMP_LEN].copy_from_slice(&monotonic_ns().to_be_bytes());
}

/// The send time in a stamped message, and its data.
pub fn unstamp(msg: &[u8]) -> Option<(u64, &[u8])> {
    if msg.len() < STAMP_LEN || &msg[..4] != MAGIC {
        return None;
    }
    let t = u64::from_be_bytes(msg[8..16].try_into().expect("8 bytes"));
    Some((t, &msg[STAMP_LEN..]))
}

/// Most messages `send` publishes per call (one ring commit).
pub const SEND_BATCH: usize = 256;
/// Most bytes of messages `send` gathers before publishing them.
const SEND_BATCH_BYTES: usize = 1 << 20;
/// Most messages `recv` takes from the ring per call.
pub const RECV_BATCH: usize = 256;

/// One message read by `send`'s input side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NextMsg {
    /// The input goes on (false: this was the end message, empty).
    more: bool,
    /// Another whole message is already buffered: reading it will not block.
    ready: bool,
}

/// Sends `input` to `group` as a stream (see the module doc).
pub fn send<R: Read>(
    client: &mut Client,
    group: u32,
    input: &mut BufReader<R>,
    chunk: usize,
    stamp: bool,
    rate: Option<u64>,
) -> Result<Sent, String> {
    publish_stream(client, group, stamp, rate, |msg| {
        next_chunk(input, chunk, msg).map_err(|e| format!("reading the input: {e}"))
    })
}

/// Appends the next `chunk` bytes of `input` (fewer at its end) to `msg`.
fn next_chunk<R: Read>(
    input: &mut BufReader<R>,
    chunk: usize,
    msg: &mut Vec<u8>,
) -> std::io::Result<NextMsg> {
    let start = msg.len();
    msg.resize(start + chunk, 0);
    let n = read_full(input, &mut msg[start..])?;
    msg.truncate(start + n);
    Ok(NextMsg {
        more: n > 0,
        ready: input.buffer().len() >= chunk,
    })
}

/// Sends `input` to `group` one line per message, each with its newline
/// (the last line may lack one), so that `recv` writes the input back as it
/// was; a line is published as soon as it is read (with the lines already
/// read behind it). A line longer than `max_line` bytes is refused with its
/// number, after the lines before it are published.
pub fn send_lines<R: Read>(
    client: &mut Client,
    group: u32,
    input: &mut BufReader<R>,
    max_line: usize,
    stamp: bool,
    rate: Option<u64>,
) -> Result<Sent, String> {
    let mut number = 0u64;
    publish_stream(client, group, stamp, rate, |msg| {
        number += 1;
        next_line(input, max_line, number, msg)
    })
}

/// Appends line `number` of `input` to `msg`.
fn next_line<R: Read>(
    input: &mut BufReader<R>,
    max_line: usize,
    number: u64,
    msg: &mut Vec<u8>,
) -> Result<NextMsg, String> {
    let start = msg.len();
    let n = input
        .read_until(b'\n', msg)
        .map_err(|e| format!("reading the input: {e}"))?;
    if n > max_line {
        msg.truncate(start);
        return Err(format!(
            "line {number} is {n} bytes, more than the largest message ({max_line}): \
             send it without --lines (--chunk cuts it), or raise max_message in mcastd.toml"
        ));
    }
    Ok(NextMsg {
        more: n > 0,
        ready: input.buffer().contains(&b'\n'),
    })
}

/// Messages read and not yet published: their bytes end to end.
#[derive(Debug, Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Where each message ends in `bytes`.
    ends: Vec<usize>,
}

impl Batch {
    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Message `k`.
    fn get(&self, k: usize) -> &[u8] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.bytes[start..self.ends[k]]
    }

    /// Publishes every message, in order, as many per call as the ring
    /// takes (one commit each), waiting for room; then empties the batch.
    fn publish(&mut self, client: &mut Client, group: u32) -> Result<(), String> {
        let mut done = 0;
        while done < self.len() {
            let rest = (done..self.len()).map(|k| self.get(k));
            done += client
                .publish_batch_blocking(group, rest, None)
                .map_err(|e| format!("publishing: {e}"))?;
        }
        self.bytes.clear();
        self.ends.clear();
        Ok(())
    }
}

/// Publishes the messages `next` appends (after the stamp, if any) until
/// it says the input ended, then the empty end message. Messages the input
/// already holds are gathered and published together before a read that
/// may block; paced at `rate`, each goes alone at its time. If `next`
/// fails, what was read before it is published first.
fn publish_stream(
    client: &mut Client,
    group: u32,
    stamp: bool,
    rate: Option<u64>,
    mut next: impl FnMut(&mut Vec<u8>) -> Result<NextMsg, String>,
) -> Result<Sent, String> {
    let start = monotonic_ns();
    let interval = rate.filter(|&r| r > 0).map_or(0, |r| 1_000_000_000 / r);
    let mut batch = Batch::default();
    let (mut bytes, mut messages) = (0u64, 0u64);
    loop {
        // Room for the stamp, taken once the message is read (a read may
        // wait for the input) and its time has come.
        let begin = batch.bytes.len();
        let data_start = begin + if stamp { STAMP_LEN } else { 0 };
        batch.bytes.resize(data_start, 0);
        let read = match next(&mut batch.bytes) {
            Ok(r) => r,
            Err(e) => {
                batch.bytes.truncate(begin);
                batch.publish(client, group)?;
                return Err(e);
            }
        };
        if interval > 0 {
            // Pacing: message k leaves at start + k * interval.
            let due = start + messages * interval;
            let now = monotonic_ns();
            if due > now {
                std::thread::sleep(Duration::from_nanos(due - now));
            }
        }
        if stamp {
            stamp_at(&mut batch.bytes[begin..data_start]);
        }
        bytes += (batch.bytes.len() - data_start) as u64;
        batch.ends.push(batch.bytes.len());
        messages += 1;
        let full = batch.len() >= SEND_BATCH || batch.bytes.len() >= SEND_BATCH_BYTES;
        if !read.more || !read.ready || interval > 0 || full {
            batch.publish(client, group)?;
        }
        if !read.more {
            break; // the end message went out
        }
    }
    Ok(Sent {
        bytes,
        messages: messages - 1,
        elapsed: Duration::from_nanos(monotonic_ns() - start),
    })
}

/// Fills `buf` unless the input ends first; returns the bytes read.
fn read_full<R: Read + ?Sized>(input: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Waits until `group`'s view has `n` member nodes (from the join's view
/// and the view notices that follow).
pub fn wait_nodes(
    client: &mut Client,
    group: u32,
    view: &mcast_ipc::View,
    n: usize,
    timeout: Duration,
) -> Result<(), String> {
    let mut nodes = 0;
    let enough = |m: &[mcast_ipc::Member]| {
        nodes = member_nodes(m);
        nodes >= n
    };
    if wait_view(client, group, Some(view), enough, timeout)? {
        return Ok(());
    }
    Err(format!(
        "the group has {nodes} member nodes after {} s, --wait-nodes asked for {n}",
        timeout.as_secs()
    ))
}

/// Waits for a view of `group` whose members `enough` accepts: `initial`
/// (the view the client joined with) if given, then each view notice. In
/// a total-order group a view's notice comes with its event, at its place
/// in the order, that of the view the client joined in too. False when
/// `timeout` passed first.
pub fn wait_view(
    client: &mut Client,
    group: u32,
    initial: Option<&mcast_ipc::View>,
    mut enough: impl FnMut(&[mcast_ipc::Member]) -> bool,
    timeout: Duration,
) -> Result<bool, String> {
    let deadline = monotonic_ns() + timeout.as_nanos() as u64;
    let mut done = initial.is_some_and(|v| enough(&v.members));
    while !done {
        if monotonic_ns() >= deadline {
            return Ok(false);
        }
        client
            .wait_notice(Duration::from_millis(100))
            .map_err(|e| e.to_string())?;
        for notice in client.notices() {
            if let Notice::ViewChanged {
                group: g, members, ..
            } = notice
            {
                if g == group {
                    done = enough(&members);
                }
            }
        }
    }
    Ok(true)
}

/// Distinct nodes among `members`.
pub fn member_nodes(members: &[mcast_ipc::Member]) -> usize {
    let mut nodes: Vec<u32> = members.iter().map(|m| m.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.len()
}

/// Distinct nodes in a view (as JSON).
pub fn view_nodes(view: &Value) -> usize {
    let mut nodes: Vec<u64> = view["members"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["node"].as_u64()).collect())
        .unwrap_or_default();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.len()
}

/// What a receive took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Received {
    pub bytes: u64,
    pub messages: u64,
    /// The end message came.
    pub ended: bool,
}

/// `mcast recv`: writes messages of one group, strips stamps, measures latency.
#[derive(Debug)]
pub struct StreamReader {
    stamped: bool,
    latency: Histogram<u64>,
}

impl StreamReader {
    pub fn new(stamped: bool) -> StreamReader {
        StreamReader {
            stamped,
            latency: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds"),
        }
    }

    /// Receives until the end message, `count` messages, or `idle` without
    /// any, writing each message's data to `out` straight from the ring,
    /// [`RECV_BATCH`] messages per call at most. `out` is flushed whenever
    /// the ring is empty, before waiting: output keeps up with a quiet
    /// stream and costs no write per message in a busy one.
    pub fn run(
        &mut self,
        client: &mut Client,
        group: u32,
        out: &mut dyn Write,
        count: Option<u64>,
        idle: Option<Duration>,
    ) -> Result<Received, String> {
        let mut sink = Sink::new(self, group, out);
        while !sink.got.ended && count.is_none_or(|c| sink.got.messages < c) {
            let max = count.map_or(RECV_BATCH, |c| {
                (c - sink.got.messages).min(RECV_BATCH as u64) as usize
            });
            let mut n = client
                .recv_batch(max, |m| sink.take(m))
                .map_err(|e| e.to_string())?;
            if n == 0 {
                sink.out
                    .flush()
                    .map_err(|e| format!("writing the output: {e}"))?;
                n = client
                    .recv_batch_timeout(max, idle, |m| sink.take(m))
                    .map_err(|e| e.to_string())?;
            }
            if let Some(e) = sink.failed.take() {
                return Err(e);
            }
            if n == 0 {
                return Err(format!(
                    "nothing received for {} s ({} messages so far)",
                    idle.unwrap_or_default().as_secs(),
                    sink.got.messages
                ));
            }
        }
        Ok(sink.got)
    }

    /// "n=… p50=… p99=… p99.9=… max=…" in microseconds, if stamped.
    pub fn latency_summary(&self) -> Option<String> {
        if !self.stamped || self.latency.is_empty() {
            return None;
        }
        let us = |q: f64| self.latency.value_at_quantile(q) as f64 / 1e3;
        Some(format!(
            "n={} p50={:.1}us p99={:.1}us p99.9={:.1}us max={:.1}us",
            self.latency.len(),
            us(0.5),
            us(0.99),
            us(0.999),
            self.latency.max() as f64 / 1e3
        ))
    }
}

/// Where [`StreamReader::run`] puts the messages a batch lends it.
struct Sink<'a> {
    reader: &'a mut StreamReader,
    group: u32,
    out: &'a mut dyn Write,
    got: Received,
    /// The first failure; the rest of the batch is passed over.
    failed: Option<String>,
}

impl<'a> Sink<'a> {
    /// A sink of `group`'s data into `out`, nothing received yet.
    fn new(reader: &'a mut StreamReader, group: u32, out: &'a mut dyn Write) -> Sink<'a> {
        Sink {
            reader,
            group,
            out,
            got: Received::default(),
            failed: None,
        }
    }

    /// One message: the group's data is written (its stamp stripped and
    /// timed), the empty one ends the stream; events, other groups and
    /// anything after the end or a failure are passed over.
    fn take(&mut self, m: MessageRef<'_>) {
        if self.got.ended
            || self.failed.is_some()
            || m.group != self.group
            || m.kind == MessageKind::Membership
        {
            return;
        }
        let data = if self.reader.stamped {
            match unstamp(m.data) {
                Some((t, d)) => {
                    let now = monotonic_ns();
                    let _ = self.reader.latency.record(now.saturating_sub(t).max(1));
                    d
                }
                None => {
                    self.failed =
                        Some("a message without a stamp: is the sender using --stamp?".into());
                    return;
                }
            }
        } else {
            m.data
        };
        if data.is_empty() {
            self.got.ended = true;
            return;
        }
        if let Err(e) = self.out.write_all(data) {
            self.failed = Some(format!("writing the output: {e}"));
            return;
        }
        self.got.bytes += data.len() as u64;
        self.got.messages += 1;
    }
}

/// The version of the JSON that `mcast groups --json`, `members --json`
/// and `stat --json` print (docs/mcastd.md, "JSON output"): raised when a
/// field changes meaning or goes away, not when one is added.
pub const JSON_SCHEMA: u64 = 1;

/// `mcast groups --json`: the registry's listing in the documented shape.
pub fn groups_json(v: Value) -> Value {
    let groups: Vec<Value> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            serde_json::json!({
                "name": g["name"], "group": g["group"], "agent": g["agent"], "members": g["members"],
            })
        })
        .collect();
    serde_json::json!({"schema": JSON_SCHEMA, "groups": groups})
}

/// `mcast members --json`: one group's view in the documented shape.
pub fn members_json(v: Value) -> Value {
    let view = if v["view"].is_object() {
        &v["view"]
    } else {
        &v
    };
    let members: Vec<Value> = view["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| serde_json::json!({"rank": m["rank"], "node": m["node"], "client": m["member"]}))
        .collect();
    serde_json::json!({
        "schema": JSON_SCHEMA,
        "name": view["name"],
        "group": view["group"],
        "agent": view["agent"],
        "epoch": view["epoch"],
        "members": members,
    })
}

/// `mcast groups` output.
pub fn render_groups(v: &Value) -> String {
    let mut s = format!(
        "{:<24} {:>8} {:>6} {:>8}\n",
        "GROUP", "NUMBER", "AGENT", "MEMBERS"
    );
    for g in v.as_array().into_iter().flatten() {
        s += &format!(
            "{:<24} {:>8} {:>6} {:>8}\n",
            g["name"].as_str().unwrap_or("?"),
            g["group"],
            g["agent"],
            g["members"]
        );
    }
    s
}

/// `mcast members` output.
pub fn render_members(v: &Value) -> String {
    let view = if v["view"].is_object() { &v["view"] } else { v };
    let mut s = format!(
        "group {} (number {}), agent node {}, view epoch {}\n{:>6} {:>6} {:>10}\n",
        view["name"].as_str().unwrap_or("?"),
        view["group"],
        view["agent"],
        view["epoch"],
        "RANK",
        "NODE",
        "CLIENT"
    );
    for m in view["members"].as_array().into_iter().flatten() {
        s += &format!("{:>6} {:>6} {:>10}\n", m["rank"], m["node"], m["member"]);
    }
    s
}

/// `mcast stat` output; with the previous sample and the seconds since, rates.
/// The daemon's per-hop timing (`trace = true`), one line per hop; nothing
/// when it does not trace.
fn render_trace(t: &Value) -> String {
    if !t.is_object() {
        return String::new();
    }
    let us = |h: &Value, k: &str| h[k].as_u64().unwrap_or(0) as f64 / 1e3;
    let mut s = format!(
        "trace   {:<18} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "HOP (µs)", "COUNT", "P50", "P90", "P99", "MAX", "BACKWARDS"
    );
    for (key, name) in [
        ("publish_to_taken", "publish → taken"),
        ("taken_to_sent", "taken → sent"),
        ("sent_to_received", "sent → received"),
        ("received_to_ring", "received → ring"),
    ] {
        let h = &t[key];
        s += &format!(
            "        {:<18} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9}\n",
            name,
            h["count"].as_u64().unwrap_or(0),
            us(h, "p50_ns"),
            us(h, "p90_ns"),
            us(h, "p99_ns"),
            us(h, "max_ns"),
            h["backwards"].as_u64().unwrap_or(0),
        );
    }
    s
}

pub fn render_stats(v: &Value, prev: Option<(&Value, f64)>) -> String {
    let t = &v["transport"];
    let mut s = format!(
        "node {}  transport {}  xdp {}  frames free {}/{}\n",
        v["node"],
        t["kind"].as_str().unwrap_or("?"),
        t["xdp_mode"].as_str().unwrap_or("-"),
        t["frames"]["free"],
        t["frames"]["total"]
    );
    let e = &v["engine"];
    s += &format!(
        "engine  rx {}  tx {}  checksum-fail {}  malformed {}  paused-drop {}  no-route {}\n",
        e["rx_frames"],
        e["tx_frames"],
        e["rx_checksum_failures"],
        e["rx_malformed"],
        e["rx_paused"],
        e["tx_no_route"]
    );
    let k = &t["kernel"];
    if k.is_object() {
        s += &format!(
            "kernel  rx dropped {} (RX ring full {}, fill ring empty {})  TX ring empty {}\n",
            k["rx_dropped"], k["rx_ring_full"], k["rx_fill_ring_empty"], k["tx_ring_empty"]
        );
    }
    for q in t["queues"].as_array().into_iter().flatten() {
        s += &format!(
            "queue {}  frames {}  starved {}  rx dropped {} (RX ring full {}, fill ring empty {})\n",
            q["queue"],
            q["frames"],
            q["starved"],
            q["rx_dropped"],
            q["rx_ring_full"],
            q["rx_fill_ring_empty"]
        );
    }
    let a = &v["auth"];
    if a.is_object() {
        s += &format!(
            "auth    {}\n        refused: bad-tag {}  unknown-key {}  replayed {}\n",
            a["summary"].as_str().unwrap_or("?"),
            a["rx_auth_failed"],
            a["rx_auth_unknown_key"],
            a["rx_replayed"]
        );
    }
    s += &render_trace(&v["trace"]);
    let rate = |path: &[&str]| -> String {
        let Some((p, secs)) = prev else {
            return String::new();
        };
        let get = |x: &Value| path.iter().fold(x, |a, k| &a[*k]).as_u64().unwrap_or(0);
        format!(
            " ({:.0}/s)",
            get(v).saturating_sub(get(p)) as f64 / secs.max(1e-9)
        )
    };
    s += &format!(
        "{:<16} {:>6} {:<9} {:>12} {:>6} {:>6} {:>10} {:>8} {:>8} {:>9} {:>7} {:>8} {:>6}\n",
        "GROUP",
        "NUMBER",
        "ALGO",
        "SENT",
        "MSG/FR",
        "WIRE/B",
        "RETRANS",
        "NAKS",
        "ACKWAIT",
        "DELIVERED",
        "STALLS",
        "GRTT",
        "PAUSED"
    );
    for (gi, g) in v["groups"].as_array().into_iter().flatten().enumerate() {
        let snd = &g["sender"];
        let delivered: u64 = g["receivers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["counters"]["delivered"].as_u64().unwrap_or(0))
            .sum();
        let naks: u64 = g["receivers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["counters"]["naks_sent"].as_u64().unwrap_or(0))
            .sum::<u64>()
            + snd["naks_received"].as_u64().unwrap_or(0);
        let b = &g["batching"];
        let ratio = |k: &str, digits: usize| match b[k].as_f64() {
            Some(x) if x > 0.0 => format!("{x:.digits$}"),
            _ => "-".into(),
        };
        s += &format!(
            "{:<16} {:>6} {:<9} {:>12} {:>6} {:>6} {:>10} {:>8} {:>8} {:>9} {:>7} {:>8} {:>6}{}\n",
            g["name"].as_str().unwrap_or("?"),
            g["group"].as_u64().unwrap_or(0),
            g["algorithm"].as_str().unwrap_or("?"),
            snd["data_sent"].as_u64().unwrap_or(0),
            ratio("messages_per_frame", 1),
            ratio("wire_bytes_per_payload_byte", 2),
            snd["data_retransmitted"].as_u64().unwrap_or(0),
            naks,
            snd["ack_reqs_sent"].as_u64().unwrap_or(0),
            delivered,
            snd["stalls"].as_u64().unwrap_or(0),
            g["grtt_us"]
                .as_f64()
                .map_or("-".to_string(), |us| format!("{us:.0}µs")),
            if g["active"] == false {
                "left".to_string()
            } else {
                g["paused"].to_string()
            },
            rate(&["groups", &gi.to_string(), "sender", "data_sent"]),
        );
        let t = &g["tree"];
        if t.is_object() {
            // The feedback tree: where this node's ACK reports go, and whose come here.
            let over_receivers = |counter: &str| -> u64 {
                g["receivers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| r["counters"][counter].as_u64().unwrap_or(0))
                    .sum()
            };
            let parent = match &t["parent"] {
                serde_json::Value::Null => "-".to_string(),
                p => p.to_string(),
            };
            s += &format!(
                "  tree: root {}  fanout {}  place {}  parent {parent}  children {}  reports in {}  polls {}\n",
                t["root"],
                t["fanout"],
                t["place"],
                t["children"],
                over_receivers("acks_received"),
                over_receivers("ack_reqs_sent"),
            );
        }
        let m = &g["mode"];
        if m["mode"] == "sequenced" {
            // Many-to-many through the root: what goes up to it, and what it sends on.
            s += &format!(
                "  sequenced: root {}  forwarded {}  pending {}  resent {}  sequenced {} (own {})  queued {}  duplicates {}\n",
                m["root"],
                m["forwarded"],
                m["pending"],
                m["resent"],
                m["sequenced"],
                m["sequenced_own"],
                m["queued"],
                m["duplicates"],
            );
        }
        if m["mode"] == "broadcast" {
            // No multicast: what each schedule carried, and why `auto` chose.
            let by: Vec<String> = m["chosen"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(a, n)| format!("{a} {n}"))
                .collect();
            let link = match &m["link_measured"] {
                Value::Null => format!("not fitted yet ({} samples)", m["link_samples"]),
                l => format!(
                    "alpha {:.1} µs  beta {:.2} ns/B ({} samples)",
                    l["alpha_us"].as_f64().unwrap_or(0.0),
                    l["beta_ns_per_byte"].as_f64().unwrap_or(0.0),
                    m["link_samples"]
                ),
            };
            s += &format!(
                "  broadcast ({}): sent by {}  published {}  delivered {}  transfers {}  re-sent {} (asked of ancestors {})  rounds {} (open {})  held {}  link {link}\n",
                m["broadcast"].as_str().unwrap_or("?"),
                if by.is_empty() { "-".to_owned() } else { by.join(", ") },
                m["published"],
                m["delivered"],
                m["transfers_sent"],
                m["refed_after_view_change"],
                m["refeeds_delegated"],
                m["departure_rounds"],
                m["open_rounds"],
                m["held_messages"],
            );
            if let Some(why) = m["auto_last_choice"].as_str() {
                s += &format!("  auto: {why}\n");
            }
        }
        if m["mode"] == "total" {
            // Total order: what waits for the barrier, and who holds it back.
            let lag: Vec<String> = m["barrier_lag_us"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(n, l)| match l.as_u64() {
                    Some(us) => format!("{n}:{us}µs"),
                    None => format!("{n}:none yet"),
                })
                .collect();
            s += &format!(
                "  total: held {} ({} B)  delivered {}  published {}  beacons sent {} received {}  events {} (unplaced {})  cut {}  silent reported {}  barrier lag {}\n",
                m["held"],
                m["held_bytes"],
                m["delivered"],
                m["published"],
                m["beacons_sent"],
                m["beacons_received"],
                m["events"],
                m["events_unplaced"],
                m["cut"],
                m["silent_reports"].as_u64().unwrap_or(0),
                if lag.is_empty() { "-".to_owned() } else { lag.join(" ") },
            );
            // Commit: how the reports travel (protocol.md §6.4).
            let t = &m["commit_tree"];
            if t["on"] == true {
                let place = if t["root"] == true {
                    "root".to_owned()
                } else {
                    format!("parent {}", t["parent"])
                };
                let stable = t["stable_lag_us"]
                    .as_u64()
                    .map_or("none yet".to_owned(), |us| format!("{us}µs"));
                s += &format!(
                    "  commit tree: {place}  stable point lag {stable}  reports sent {} received {} dropped {}  stable points received {}\n",
                    t["ups_sent"], t["ups_received"], t["ups_dropped"], t["stables_received"],
                );
            } else if m["commit"] == true {
                s += "  commit: every member's report to all (the view is smaller than commit_tree_from)\n";
            }
        }
        for r in g["receivers"].as_array().into_iter().flatten() {
            let c = &r["counters"];
            s += &format!(
                "  from node {:<6} delivered {}  naks {}  suppressed {}  duplicates {}",
                r["from"],
                c["delivered"],
                c["naks_sent"],
                c["naks_suppressed"],
                c["duplicates_dropped"]
            );
            // Local recovery over the group's tree (protocol.md §3.5).
            let near = [
                "near_naks_sent",
                "relays_received",
                "near_naks_received",
                "relays_sent",
            ]
            .map(|k| c[k].as_u64().unwrap_or(0));
            if near.iter().any(|&n| n > 0) {
                s += &format!(
                    "  near: asked {} repaired {}, was asked {} repaired {}",
                    near[0], near[1], near[2], near[3]
                );
            }
            s += "\n";
        }
    }
    let peers: Vec<String> = v["peers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "{} {} ({} ms ago)",
                p["node"],
                p["state"].as_str().unwrap_or("?"),
                p["last_heard_ms_ago"]
            )
        })
        .collect();
    let d = &v["daemon"];
    s += &format!(
        "peers: {}\nfailure detection: suspicions {} (data path {}, beacons {})  probes {}  failed {}  evictions {}  recovered {}\n",
        if peers.is_empty() { "none".to_string() } else { peers.join(", ") },
        d["suspicions"],
        d["data_path_suspicions"].as_u64().unwrap_or(0),
        d["beacon_suspicions"].as_u64().unwrap_or(0),
        d["probes_sent"],
        d["nodes_failed"],
        d["evictions"],
        d["nodes_recovered"]
    );
    s += &format!(
        "clients {}  published {}  delivered {}  overflowed {}  cut off {}  link msgs {}/{}  link errors {}\n",
        v["clients"].as_array().map_or(0, |a| a.len()),
        d["messages_published"],
        d["fragments_delivered"],
        d["fragments_overflowed"],
        d["clients_cut_off"],
        d["link_messages_sent"],
        d["link_messages_received"],
        d["link_errors"]
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_shows_a_groups_feedback_tree_and_its_counters() {
        let group = |tree: Value| {
            serde_json::json!({"groups": [{
                "name": "g", "group": 1, "algorithm": "mak", "tree": tree,
                "receivers": [
                    {"from": 2, "counters": {"acks_received": 3, "ack_reqs_sent": 1}},
                    {"from": 3, "counters": {"acks_received": 4, "ack_reqs_sent": 0}},
                ],
            }]})
        };
        let tree = serde_json::json!({"root": 2, "fanout": 2, "nodes": 4, "place": 0, "parent": null, "children": [1, 3]});
        let text = render_stats(&group(tree), None);
        assert!(
            text.contains(
                "tree: root 2  fanout 2  place 0  parent -  children [1,3]  reports in 7  polls 1"
            ),
            "{text}"
        );
        assert!(!render_stats(&group(Value::Null), None).contains("tree:"));
    }

    #[test]
    fn stat_shows_each_groups_grtt_when_it_sends() {
        let v = serde_json::json!({"groups": [
            {"name": "sends", "group": 1, "algorithm": "mak", "grtt_us": 412.6, "sender": {"stalls": 3}},
            {"name": "listens", "group": 2, "algorithm": "mak", "grtt_us": null},
        ]});
        let text = render_stats(&v, None);
        let row = |first: &str| -> Vec<&str> {
            let line = text.lines().find(|l| l.starts_with(first)).unwrap();
            line.split_whitespace().collect()
        };
        let at = row("GROUP").iter().position(|&c| c == "GRTT").unwrap();
        assert_eq!(row("GROUP")[at - 1], "STALLS");
        assert_eq!(&row("sends")[at - 1..=at], ["3", "413µs"], "{text}");
        assert_eq!(row("listens")[at], "-", "{text}");
        // Each value ends under its header's last character.
        let end = |first: &str, cell: &str| {
            let line = text.lines().find(|l| l.starts_with(first)).unwrap();
            line[..line.rfind(cell).unwrap() + cell.len()]
                .chars()
                .count()
        };
        assert_eq!(end("sends", "413µs"), end("GROUP", "GRTT"), "{text}");
        assert_eq!(end("sends", "1 mak"), end("GROUP", "NUMBER") + 4, "{text}");
    }

    #[test]
    fn stat_shows_a_sequenced_groups_root_and_its_counters() {
        let v = serde_json::json!({"groups": [{
            "name": "g", "group": 1, "algorithm": "mak", "tree": null, "receivers": [],
            "mode": {"mode": "sequenced", "root": 3, "forwarded": 10, "pending": 2, "resent": 0,
                     "sequenced": 0, "sequenced_own": 0, "queued": 0, "duplicates": 1},
        }]});
        let text = render_stats(&v, None);
        assert!(
            text.contains("sequenced: root 3  forwarded 10  pending 2  resent 0  sequenced 0 (own 0)  queued 0  duplicates 1"),
            "{text}"
        );
        let fifo =
            serde_json::json!({"groups": [{"name": "g", "group": 1, "mode": {"mode": "fifo"}}]});
        assert!(!render_stats(&fifo, None).contains("sequenced:"));
    }

    #[test]
    fn stat_shows_what_a_broadcast_groups_schedules_carried_and_why_auto_chose() {
        let v = serde_json::json!({"groups": [{
            "name": "g", "group": 1, "algorithm": "mak", "tree": null, "receivers": [],
            "mode": {"mode": "broadcast", "broadcast": "auto", "published": 7, "delivered": 20,
                     "transfers_sent": 30, "refed_after_view_change": 2, "refeeds_delegated": 5, "departure_rounds": 1,
                     "open_rounds": 0, "held_messages": 3, "chosen": {"rsbcast": 5, "chain": 2},
                     "link_measured": {"alpha_us": 41.25, "beta_ns_per_byte": 3.5},
                     "link_samples": 12,
                     "auto_last_choice": "1024 B to 6 members: rsbcast (model: rsbcast 160.0 us)"},
        }]});
        let text = render_stats(&v, None);
        assert!(
            text.contains("broadcast (auto): sent by chain 2, rsbcast 5  published 7  delivered 20  transfers 30  re-sent 2 (asked of ancestors 5)  rounds 1 (open 0)  held 3  link alpha 41.2 µs  beta 3.50 ns/B (12 samples)"),
            "{text}"
        );
        assert!(
            text.contains("  auto: 1024 B to 6 members: rsbcast (model: rsbcast 160.0 us)"),
            "{text}"
        );
        let fixed = serde_json::json!({"groups": [{"name": "g", "group": 1, "mode": {
            "mode": "broadcast", "broadcast": "mst", "chosen": {}, "link_measured": null,
            "link_samples": 0, "auto_last_choice": null}}]});
        let text = render_stats(&fixed, None);
        assert!(
            text.contains("broadcast (mst): sent by -")
                && text.contains("link not fitted yet (0 samples)"),
            "{text}"
        );
        assert!(!text.contains("auto:"), "{text}");
    }

    #[test]
    fn stat_shows_a_total_order_groups_held_messages_and_barrier_lag_per_node() {
        let v = serde_json::json!({"groups": [{
            "name": "g", "group": 1, "algorithm": "mak", "tree": null, "receivers": [],
            "mode": {"mode": "total", "held": 3, "held_bytes": 600, "delivered": 40,
                     "published": 12, "beacons_sent": 5, "beacons_received": 9,
                     "events": 2, "events_unplaced": 1, "cut": 4, "silent_reports": 1,
                     "barrier_lag_us": {"2": 35, "3": null}},
        }]});
        let text = render_stats(&v, None);
        assert!(
            text.contains("total: held 3 (600 B)  delivered 40  published 12  beacons sent 5 received 9  events 2 (unplaced 1)  cut 4  silent reported 1  barrier lag 2:35µs 3:none yet"),
            "{text}"
        );
        assert!(!text.contains("commit"), "{text}");
    }

    #[test]
    fn stat_shows_how_a_committing_groups_reports_travel() {
        let group = |tree| {
            serde_json::json!({"groups": [{
                "name": "g", "group": 1, "algorithm": "mak", "tree": null, "receivers": [],
                "mode": {"mode": "total", "commit": true, "barrier_lag_us": {}, "commit_tree": tree},
            }]})
        };
        let text = render_stats(
            &group(serde_json::json!({"on": true, "root": false, "parent": 4,
                "stable_lag_us": 120, "ups_sent": 9, "ups_received": 16, "ups_dropped": 0,
                "stables_received": 7})),
            None,
        );
        assert!(
            text.contains("commit tree: parent 4  stable point lag 120µs  reports sent 9 received 16 dropped 0  stable points received 7"),
            "{text}"
        );
        let text = render_stats(&group(serde_json::json!({"on": false})), None);
        assert!(
            text.contains("commit: every member's report to all"),
            "{text}"
        );
    }

    #[test]
    fn stat_shows_each_traced_hop_in_microseconds_and_nothing_untraced() {
        let hop = |p50| serde_json::json!({"count": 7, "p50_ns": p50, "p90_ns": 0, "p99_ns": 12_500, "max_ns": 0, "backwards": 2});
        let v = serde_json::json!({"trace": {
            "publish_to_taken": hop(1_500), "taken_to_sent": hop(2_000),
            "sent_to_received": hop(30_000), "received_to_ring": hop(400),
        }});
        let text = render_stats(&v, None);
        assert!(text.contains("publish → taken"), "{text}");
        let wire = text
            .lines()
            .find(|l| l.contains("sent → received"))
            .expect(&text);
        let cols: Vec<&str> = wire.split_whitespace().collect();
        assert_eq!(
            cols[3..],
            ["7", "30.0", "0.0", "12.5", "0.0", "2"],
            "{wire}"
        );
        assert!(!render_stats(&serde_json::json!({"trace": null}), None).contains("trace"));
    }

    #[test]
    fn stat_shows_what_the_kernel_dropped_before_the_rx_ring_where_it_is_known() {
        let k = serde_json::json!({"rx_dropped": 9, "rx_ring_full": 7, "rx_fill_ring_empty": 2, "tx_ring_empty": 0});
        let text = render_stats(&serde_json::json!({"transport": {"kernel": k}}), None);
        let line = text.lines().find(|l| l.starts_with("kernel")).expect(&text);
        assert!(
            line.contains("rx dropped 9 (RX ring full 7, fill ring empty 2)"),
            "{line}"
        );
        let none = render_stats(&serde_json::json!({"transport": {"kernel": null}}), None);
        assert!(!none.contains("kernel"), "{none}");
    }

    #[test]
    fn stamps_roundtrip_and_plain_data_is_not_a_stamp() {
        let mut m = Vec::new();
        stamp_now(&mut m);
        m.extend_from_slice(b"data");
        let (t, d) = unstamp(&m).unwrap();
        assert!(t > 0);
        assert_eq!(d, b"data");
        assert!(unstamp(b"MCTS").is_none());
        assert!(unstamp(b"plain old data here").is_none());
    }

    /// An input that gives at most `.1` bytes per read, as a pipe may.
    struct Dribble(Vec<u8>, usize);
    impl Read for Dribble {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(self.1).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    fn dribble(bytes: &[u8], per_read: usize) -> BufReader<Dribble> {
        BufReader::with_capacity(64, Dribble(bytes.to_vec(), per_read))
    }

    #[test]
    fn a_line_is_ready_only_when_the_input_holds_all_of_it() {
        let next = |input: &mut BufReader<Dribble>| {
            let mut msg = Vec::new();
            let r = next_line(input, 100, 1, &mut msg).unwrap();
            (String::from_utf8(msg).unwrap(), r.more, r.ready)
        };
        // 8 bytes a read: the second line came with the first.
        let mut input = dribble(b"ab\ncd\nef\ng", 8);
        assert_eq!(next(&mut input), ("ab\n".into(), true, true));
        // "ef" is half a line: publish before reading the rest.
        assert_eq!(next(&mut input), ("cd\n".into(), true, false));
        assert_eq!(next(&mut input), ("ef\n".into(), true, false));
        assert_eq!(next(&mut input), ("g".into(), true, false));
        assert_eq!(next(&mut input), ("".into(), false, false));
        // A line over the limit: refused, nothing of it kept.
        let mut input = dribble(b"0123456789\n", 4);
        let mut msg = b"kept".to_vec();
        let e = next_line(&mut input, 5, 7, &mut msg).unwrap_err();
        assert!(e.contains("line 7 is 11 bytes"), "{e}");
        assert_eq!(msg, b"kept");
    }

    #[test]
    fn a_chunk_is_ready_only_when_the_input_holds_all_of_it() {
        let mut input = dribble(&[5u8; 10], 64);
        let mut msg = b"x".to_vec();
        let r = next_chunk(&mut input, 4, &mut msg).unwrap();
        // Appended after what was there; 6 bytes left buffered: ready.
        assert_eq!(msg, [b'x', 5, 5, 5, 5]);
        assert_eq!((r.more, r.ready), (true, true));
        let r = next_chunk(&mut input, 4, &mut msg).unwrap();
        assert_eq!((msg.len(), r.more, r.ready), (9, true, false));
        let r = next_chunk(&mut input, 4, &mut msg).unwrap();
        assert_eq!((msg.len(), r.more, r.ready), (11, true, false));
        let r = next_chunk(&mut input, 4, &mut msg).unwrap();
        assert_eq!((msg.len(), r.more), (11, false));
    }

    #[test]
    fn batch_messages_are_their_bytes_end_to_end() {
        let b = Batch {
            bytes: b"onetwothree".to_vec(),
            ends: vec![3, 3, 6, 11],
        };
        let all: Vec<&[u8]> = (0..b.len()).map(|k| b.get(k)).collect();
        assert_eq!(all, [&b"one"[..], b"", b"two", b"three"]);
    }

    fn data(group: u32, bytes: &[u8]) -> MessageRef<'_> {
        MessageRef {
            kind: MessageKind::Data,
            group,
            source: 1,
            data: bytes,
        }
    }

    #[test]
    fn the_sink_writes_the_group_data_until_the_end_message() {
        let mut reader = StreamReader::new(false);
        let mut out = Vec::new();
        let mut sink = Sink::new(&mut reader, 3, &mut out);
        sink.take(data(3, b"one "));
        sink.take(data(4, b"other group "));
        sink.take(MessageRef {
            kind: MessageKind::Membership,
            ..data(3, b"{}")
        });
        sink.take(data(3, b"two"));
        sink.take(data(3, b""));
        sink.take(data(3, b" after the end"));
        let got = sink.got;
        assert_eq!((got.messages, got.bytes, got.ended), (2, 7, true));
        assert!(sink.failed.is_none());
        assert_eq!(out, b"one two");
    }

    #[test]
    fn the_stamped_sink_strips_stamps_and_refuses_a_message_without_one() {
        let mut reader = StreamReader::new(true);
        let mut out = Vec::new();
        let mut sink = Sink::new(&mut reader, 3, &mut out);
        let mut m = Vec::new();
        stamp_now(&mut m);
        m.extend_from_slice(b"stamped");
        sink.take(data(3, &m));
        sink.take(data(3, b"plain"));
        sink.take(data(3, &m));
        assert!(sink.failed.as_ref().unwrap().contains("without a stamp"));
        assert_eq!(sink.got.messages, 1, "nothing after the failure");
        assert_eq!(out, b"stamped");
        assert_eq!(reader.latency.len(), 1);
    }

    #[test]
    fn read_full_fills_across_short_reads() {
        let mut d = Dribble((0..10).collect(), 3);
        let mut buf = [0u8; 8];
        assert_eq!(read_full(&mut d, &mut buf).unwrap(), 8);
        assert_eq!(buf, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(read_full(&mut d, &mut buf).unwrap(), 2);
        assert_eq!(read_full(&mut d, &mut buf).unwrap(), 0);
    }

    #[test]
    fn views_count_distinct_nodes() {
        let v = serde_json::json!({"members": [{"node": 1}, {"node": 2}, {"node": 1}]});
        assert_eq!(view_nodes(&v), 2);
        assert_eq!(view_nodes(&serde_json::json!({})), 0);
    }

    #[test]
    fn listings_print_the_documented_json_shape() {
        let listing = serde_json::json!([
            {"name": "prices", "group": 1, "agent": 2, "members": 3, "internal": true}
        ]);
        assert_eq!(
            groups_json(listing),
            serde_json::json!({"schema": 1, "groups": [
                {"name": "prices", "group": 1, "agent": 2, "members": 3}
            ]})
        );
        let info = serde_json::json!({"group": 1, "name": "prices", "agent": 2, "view": {
            "group": 1, "name": "prices", "epoch": 5, "agent": 2,
            "members": [{"rank": 0, "node": 2, "member": 7}]}});
        assert_eq!(
            members_json(info),
            serde_json::json!({"schema": 1, "name": "prices", "group": 1, "agent": 2, "epoch": 5,
                "members": [{"rank": 0, "node": 2, "client": 7}]})
        );
    }
}
