//! The checker of one subscriber session: every message and membership
//! event it receives, held to the rules of the module documentation (`soak`).
//!
//! Owns: the per-publisher streams and the violations found. May not touch:
//! the connection (`client`) or the whole run's verdict (`check`).

use super::*;

/// What one publisher's stream looks like to one subscriber.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stream {
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

    pub(super) fn violation(&mut self, kind: &str, detail: String) {
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

    pub(super) fn data(&mut self, source: u32, bytes: &[u8]) {
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
    pub(super) fn break_streams(&mut self, node: Option<u32>, cut: Option<(u32, u64)>) {
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

    pub(super) fn event(&mut self, number: u32, bytes: &[u8]) {
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
    pub(super) fn lasts(&self) -> Vec<Value> {
        self.streams
            .iter()
            .map(|(&(p, inc), st)| json!({"publisher": p, "inc": inc, "last": st.last, "time": st.at}))
            .collect()
    }
}
