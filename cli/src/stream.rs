//! What `mcast send` and `mcast recv` put in messages, and how `mcast`
//! renders the daemon's answers.
//!
//! A `send` stream is the input cut into messages of up to `--chunk` bytes
//! (or, with `--lines`, one line per message, newline included), ended by
//! one empty message. With `--stamp`, each message starts with
//! [`STAMP_LEN`] bytes: the magic `MCTS`, 4 reserved bytes, and the send
//! time (CLOCK_MONOTONIC, nanoseconds, big-endian u64); the end message is
//! stamped too.

use std::io::{BufRead, Read, Write};
use std::time::Duration;

use hdrhistogram::Histogram;
use mcast_engine::sys::monotonic_ns;
use mcast_ipc::{Client, Error as IpcError, Notice};
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
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&monotonic_ns().to_be_bytes());
}

/// The send time in a stamped message, and its data.
pub fn unstamp(msg: &[u8]) -> Option<(u64, &[u8])> {
    if msg.len() < STAMP_LEN || &msg[..4] != MAGIC {
        return None;
    }
    let t = u64::from_be_bytes(msg[8..16].try_into().expect("8 bytes"));
    Some((t, &msg[STAMP_LEN..]))
}

/// Sends `input` to `group` as a stream (see the module doc).
pub fn send(
    client: &mut Client,
    group: u32,
    input: &mut dyn Read,
    chunk: usize,
    stamp: bool,
    rate: Option<u64>,
) -> Result<Sent, String> {
    let mut buf = vec![0u8; chunk];
    publish_stream(client, group, stamp, rate, |msg| {
        let n = read_full(input, &mut buf).map_err(|e| format!("reading the input: {e}"))?;
        msg.extend_from_slice(&buf[..n]);
        Ok(n > 0)
    })
}

/// Sends `input` to `group` one line per message, each with its newline
/// (the last line may lack one), so that `recv` writes the input back as it
/// was; a line is published as soon as it is read. A line longer than
/// `max_line` bytes is refused with its number.
pub fn send_lines(
    client: &mut Client,
    group: u32,
    input: &mut dyn BufRead,
    max_line: usize,
    stamp: bool,
    rate: Option<u64>,
) -> Result<Sent, String> {
    let mut line = Vec::new();
    let mut number = 0u64;
    publish_stream(client, group, stamp, rate, |msg| {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading the input: {e}"))?;
        number += 1;
        if n > max_line {
            return Err(format!(
                "line {number} is {n} bytes, more than the largest message ({max_line}): \
                 send it without --lines (--chunk cuts it), or raise max_message in mcastd.toml"
            ));
        }
        msg.extend_from_slice(&line);
        Ok(n > 0)
    })
}

/// Publishes the messages `next` writes (after the stamp, if any) until it
/// says the input ended, then the empty end message; paced at `rate`.
fn publish_stream(
    client: &mut Client,
    group: u32,
    stamp: bool,
    rate: Option<u64>,
    mut next: impl FnMut(&mut Vec<u8>) -> Result<bool, String>,
) -> Result<Sent, String> {
    let start = monotonic_ns();
    let interval = rate.filter(|&r| r > 0).map_or(0, |r| 1_000_000_000 / r);
    let (mut data, mut msg) = (Vec::new(), Vec::new());
    let (mut bytes, mut messages) = (0u64, 0u64);
    loop {
        data.clear();
        let more = next(&mut data)?;
        let n = data.len();
        if interval > 0 {
            // Pacing: message k leaves at start + k * interval.
            let due = start + messages * interval;
            let now = monotonic_ns();
            if due > now {
                std::thread::sleep(Duration::from_nanos(due - now));
            }
        }
        msg.clear();
        if stamp {
            stamp_now(&mut msg);
        }
        msg.extend_from_slice(&data);
        client
            .publish_blocking(group, &msg, None)
            .map_err(|e| format!("publishing: {e}"))?;
        messages += 1;
        bytes += n as u64;
        if !more {
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
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
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
    let deadline = monotonic_ns() + timeout.as_nanos() as u64;
    let mut nodes = member_nodes(&view.members);
    while nodes < n {
        if monotonic_ns() >= deadline {
            return Err(format!(
                "the group has {nodes} member nodes after {} s, --wait-nodes asked for {n}",
                timeout.as_secs()
            ));
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
                    nodes = member_nodes(&members);
                }
            }
        }
    }
    Ok(())
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

    /// Receives until the end message, `count` messages, or `idle` without any.
    pub fn run(
        &mut self,
        client: &mut Client,
        group: u32,
        out: &mut dyn Write,
        count: Option<u64>,
        idle: Option<Duration>,
    ) -> Result<Received, String> {
        let mut r = Received::default();
        while count.is_none_or(|c| r.messages < c) {
            let m = match idle {
                Some(t) => match client.recv_timeout(t) {
                    Ok(Some(m)) => m,
                    Ok(None) => {
                        return Err(format!(
                            "nothing received for {} s ({} messages so far)",
                            t.as_secs(),
                            r.messages
                        ))
                    }
                    Err(e) => return Err(e.to_string()),
                },
                None => client.recv().map_err(|e: IpcError| e.to_string())?,
            };
            if m.group != group || m.kind == mcast_ipc::MessageKind::Membership {
                continue;
            }
            let data: &[u8] = if self.stamped {
                match unstamp(&m.data) {
                    Some((t, d)) => {
                        let now = monotonic_ns();
                        let _ = self.latency.record(now.saturating_sub(t).max(1));
                        d
                    }
                    None => {
                        return Err("a message without a stamp: is the sender using --stamp?".into())
                    }
                }
            } else {
                &m.data
            };
            if data.is_empty() {
                r.ended = true;
                break;
            }
            out.write_all(data)
                .map_err(|e| format!("writing the output: {e}"))?;
            r.bytes += data.len() as u64;
            r.messages += 1;
        }
        Ok(r)
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
        "{:<16} {:>6} {:<9} {:>12} {:>10} {:>8} {:>8} {:>9} {:>7} {:>6}\n",
        "GROUP",
        "NUMBER",
        "ALGO",
        "SENT",
        "RETRANS",
        "NAKS",
        "ACKWAIT",
        "DELIVERED",
        "STALLS",
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
        s += &format!(
            "{:<16} {:>6} {:<9} {:>12} {:>10} {:>8} {:>8} {:>9} {:>7} {:>6}{}\n",
            g["name"].as_str().unwrap_or("?"),
            g["group"],
            g["algorithm"].as_str().unwrap_or("?"),
            snd["data_sent"].as_u64().unwrap_or(0),
            snd["data_retransmitted"].as_u64().unwrap_or(0),
            naks,
            snd["ack_reqs_sent"].as_u64().unwrap_or(0),
            delivered,
            snd["stalls"].as_u64().unwrap_or(0),
            if g["active"] == false {
                "left".to_string()
            } else {
                g["paused"].to_string()
            },
            rate(&["groups", &gi.to_string(), "sender", "data_sent"]),
        );
        for r in g["receivers"].as_array().into_iter().flatten() {
            let c = &r["counters"];
            s += &format!(
                "  from node {:<6} delivered {}  naks {}  suppressed {}  duplicates {}\n",
                r["from"],
                c["delivered"],
                c["naks_sent"],
                c["naks_suppressed"],
                c["duplicates_dropped"]
            );
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
        "peers: {}\nfailure detection: suspicions {}  probes {}  failed {}  evictions {}  recovered {}\n",
        if peers.is_empty() { "none".to_string() } else { peers.join(", ") },
        d["suspicions"],
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

    #[test]
    fn read_full_fills_across_short_reads() {
        struct Dribble(Vec<u8>);
        impl Read for Dribble {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(3).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0.drain(..n);
                Ok(n)
            }
        }
        let mut d = Dribble((0..10).collect());
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
