//! What `mcast send` and `mcast recv` put in messages (the daemon's
//! answers are rendered in [`render`](crate::render)).
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
}
