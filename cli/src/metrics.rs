//! mcastd's metrics for scrapers (Prometheus and anything that reads its
//! text format): every counter `mcast stat` shows, as metric families in
//! the OpenMetrics text exposition (encoded by `prometheus-client`), served
//! over HTTP at `/metrics` on the address the configuration's `metrics`
//! key names (docs/mcastd.md, "Operations").
//!
//! Owns: the HTTP thread ([`Exporter`]), the last snapshot it serves, and
//! the mapping from `mcast stat`'s JSON to metric names ([`render`]).
//! Does not touch: the daemon. The daemon hands it a snapshot of its
//! counters (the same JSON as `mcast stat --json`) at most once a
//! [`REFRESH_NS`]; scrapes never reach the polling thread.
//!
//! Naming: `mcastd_` then the `mcast stat` key; counters end in `_total`,
//! units are in the name (`_bytes`, `_seconds`), and what a counter is
//! about is a label: `group` and `name` (the group's number and name),
//! `sender` (the node a receive stream comes from), `peer` (the other end
//! of a link or of failure detection), `client` (a local application).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::Value;

/// How often the daemon refreshes the snapshot (ns): a scrape sees
/// counters at most this old.
pub const REFRESH_NS: u64 = 1_000_000_000;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics HTTP server: one thread, answering `GET /metrics` from the
/// last snapshot the daemon published.
pub struct Exporter {
    snapshot: Arc<Mutex<Option<Value>>>,
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Listens on `addr` and serves from a thread. Err: the address cannot
    /// be bound (in use, not local, no permission), said in words.
    pub fn start(addr: SocketAddr) -> Result<Exporter, String> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| format!("metrics on {addr}: not an IP address"))?;
        let server = Arc::new(server);
        let snapshot: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
        let (srv, snap) = (server.clone(), snapshot.clone());
        let thread = std::thread::Builder::new()
            .name("mcastd-metrics".into())
            .spawn(move || serve(&srv, &snap))
            .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
        Ok(Exporter {
            snapshot,
            server,
            addr,
            thread: Some(thread),
        })
    }

    /// Where it listens (the port chosen if the configuration said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the snapshot scrapes are answered from.
    pub fn publish(&self, stats: Value) {
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = Some(stats);
    }
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers requests until the server is unblocked.
fn serve(server: &tiny_http::Server, snapshot: &Mutex<Option<Value>>) {
    let content_type =
        tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE).expect("a valid header");
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let response = if *request.method() != tiny_http::Method::Get || path != "/metrics" {
            tiny_http::Response::from_string("mcastd serves GET /metrics only\n")
                .with_status_code(404)
        } else {
            let text = snapshot
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(render);
            match text {
                Some(t) => tiny_http::Response::from_string(t).with_header(content_type.clone()),
                None => tiny_http::Response::from_string("mcastd has not counted yet\n")
                    .with_status_code(503),
            }
        };
        // A scraper that hung up is its own problem.
        let _ = request.respond(response);
    }
}

/// The exposition of one `mcast stat --json` snapshot.
pub fn render(stats: &Value) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families::from_stats(stats)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String does not fail");
    out
}

/// Label pairs of one sample, in order.
type Labels = Vec<(&'static str, String)>;

/// One metric family: its help, its type and its samples by label set
/// (samples with the same labels are added up: the receive streams closed
/// and opened again from one sender, a group carried again).
#[derive(Debug)]
struct Family {
    help: String,
    kind: MetricType,
    samples: BTreeMap<Labels, f64>,
}

/// Every family of one snapshot, by name.
#[derive(Debug, Default)]
struct Families(BTreeMap<String, Family>);

impl Families {
    fn from_stats(s: &Value) -> Families {
        let mut f = Families::default();
        let node = s["node"].to_string();
        let info_labels = vec![
            ("node", node),
            ("incarnation", s["incarnation"].to_string()),
            ("transport", text(&s["transport"]["kind"])),
            ("xdp_mode", text(&s["transport"]["xdp_mode"])),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
        ];
        f.gauge(
            "mcastd_info",
            "This daemon: node, incarnation, transport",
            info_labels,
            1.0,
        );
        f.counters("mcastd_engine", "engine", &s["engine"], &[], &[]);
        // What the kernel dropped before the RX ring (AF_XDP only).
        f.counters(
            "mcastd_kernel",
            "transport.kernel",
            &s["transport"]["kernel"],
            &[],
            &[],
        );
        // Several NIC queues: each extra queue's receive thread.
        for q in s["transport"]["queues"].as_array().into_iter().flatten() {
            f.counters(
                "mcastd_queue",
                "transport.queues[]",
                q,
                &["queue"],
                &[("queue", q["queue"].to_string())],
            );
        }
        // Frames refused by authentication (bad tag, unknown key, replayed).
        f.counters("mcastd", "auth", &s["auth"], &[], &[]);
        f.gauge(
            "mcastd_authenticated",
            "1 when frames are authenticated with a cluster key, 0 when insecure = true",
            vec![],
            if s["auth"]["authenticated"].as_bool() == Some(true) {
                1.0
            } else {
                0.0
            },
        );
        let frames = &s["transport"]["frames"];
        for state in ["free", "fill", "held", "tx"] {
            f.gauge(
                "mcastd_umem_frames",
                "UMEM frames by where they are (mcast stat: transport.frames)",
                vec![("state", state.to_owned())],
                num(&frames[state]),
            );
        }
        f.gauge(
            "mcastd_umem_frames_capacity",
            "UMEM frames in all (mcast stat: transport.frames.total)",
            Vec::new(),
            num(&frames["total"]),
        );
        let daemon = &s["daemon"];
        f.counters("mcastd", "daemon", daemon, &["registry", "flush"], &[]);
        f.gauge(
            "mcastd_registry_node",
            "The node this daemon takes for the registry",
            Vec::new(),
            num(&daemon["registry"]),
        );
        let flush = &daemon["flush"];
        f.counters(
            "mcastd_flush",
            "daemon.flush",
            flush,
            &[
                "kept_frames",
                "kept_bytes",
                "ended_records",
                "ended_records_bytes",
            ],
            &[],
        );
        for (key, unit) in [("kept_frames", "frames"), ("kept_bytes", "bytes")] {
            f.gauge(
                &format!("mcastd_flush_kept_{unit}"),
                &format!("Kept for flushes now (mcast stat: daemon.flush.{key})"),
                Vec::new(),
                num(&flush[key]),
            );
        }
        for (key, what) in [
            (
                "ended_records",
                "Records of ended flushes kept for their streams",
            ),
            (
                "ended_records_bytes",
                "Payload bytes of the records of ended flushes",
            ),
        ] {
            f.gauge(
                &format!("mcastd_flush_{key}"),
                &format!("{what} (mcast stat: daemon.flush.{key})"),
                Vec::new(),
                num(&flush[key]),
            );
        }
        f.trace(&s["trace"]);
        f.peers(&s["peers"]);
        f.groups(&s["groups"]);
        f.links(&s["links"]);
        f.clients(&s["clients"]);
        f
    }

    /// With `trace = true`: each hop's quantiles (seconds; `quantile="1"`
    /// is the largest) and its sample counts. Nothing without tracing.
    fn trace(&mut self, trace: &Value) {
        let Some(hops) = trace.as_object() else {
            return;
        };
        for (hop, h) in hops {
            if !h.is_object() {
                continue;
            }
            for (q, key) in [
                ("0.5", "p50_ns"),
                ("0.9", "p90_ns"),
                ("0.99", "p99_ns"),
                ("1", "max_ns"),
            ] {
                self.gauge(
                    "mcastd_trace_hop_seconds",
                    "Per-hop latency since the daemon started (trace = true; mcast stat: trace)",
                    vec![("hop", hop.clone()), ("quantile", q.to_owned())],
                    num(&h[key]) / 1e9,
                );
            }
            let labels = vec![("hop", hop.clone())];
            self.counter(
                "mcastd_trace_hop_samples",
                "Messages or frames timed at this hop",
                labels.clone(),
                num(&h["count"]),
            );
            self.counter(
                "mcastd_trace_hop_backwards",
                "Samples not timed: their end was stamped before their start (clocks that disagree)",
                labels,
                num(&h["backwards"]),
            );
        }
        self.counter(
            "mcastd_trace_sent_samples_dropped",
            "Frames sent whose taken -> sent time the engine could not keep for the daemon's round",
            Vec::new(),
            num(&trace["sent_samples_dropped"]),
        );
    }

    fn peers(&mut self, peers: &Value) {
        for p in array(peers) {
            let peer = vec![("peer", p["node"].to_string())];
            let state = text(&p["state"]);
            self.gauge(
                "mcastd_peer_up",
                "1 while the failure detector holds the peer alive",
                peer.clone(),
                f64::from(u8::from(state == "alive")),
            );
            self.gauge(
                "mcastd_peer_suspect",
                "1 while the peer is suspect (being probed)",
                peer.clone(),
                f64::from(u8::from(state.starts_with("suspect"))),
            );
            self.gauge(
                "mcastd_peer_last_heard_seconds",
                "Time since the peer was last heard",
                peer,
                num(&p["last_heard_ms_ago"]) / 1e3,
            );
        }
    }

    fn groups(&mut self, groups: &Value) {
        for g in array(groups) {
            let labels = vec![
                ("group", g["group"].to_string()),
                ("name", text(&g["name"])),
            ];
            if g["active"] == Value::Bool(true) {
                let mut info = labels.clone();
                info.push(("algorithm", text(&g["algorithm"])));
                info.push(("mode", text(&g["mode"]["mode"])));
                self.gauge("mcastd_group_info", "A group this node carries", info, 1.0);
                for (key, name) in [
                    ("local_members", "mcastd_group_local_members"),
                    ("view_epoch", "mcastd_group_view_epoch"),
                    ("queued_frames", "mcastd_group_queued_frames"),
                ] {
                    let help = format!("mcast stat: groups[].{key}");
                    self.gauge(name, &help, labels.clone(), num(&g[key]));
                }
                if let Some(us) = g["grtt_us"].as_f64() {
                    let help = "The send stream's group round trip (MAK's GRTT), \
                        which its receivers' NAK backoff and repair wait derive from";
                    self.gauge("mcastd_group_grtt_seconds", help, labels.clone(), us / 1e6);
                }
                let paused = f64::from(u8::from(g["paused"] == Value::Bool(true)));
                let help = "1 while the group is held back for a slow subscriber";
                self.gauge("mcastd_group_paused", help, labels.clone(), paused);
            }
            // The group mode's own numbers: levels as gauges, the rest counters.
            let mode = &g["mode"];
            let levels = [
                "held",
                "held_bytes",
                "own_held_bytes",
                "held_max",
                "pending",
                "pending_bytes",
                "queued",
                "queued_bytes",
                "events_unplaced",
                "early",
                "early_bytes",
                "held_messages",
                "open_rounds",
                "incarnation",
            ];
            for key in levels {
                if let Some(v) = mode[key].as_f64() {
                    let help = format!("mcast stat: groups[].mode.{key}");
                    self.gauge(
                        &format!("mcastd_group_mode_{key}"),
                        &help,
                        labels.clone(),
                        v,
                    );
                }
            }
            self.counters("mcastd_group_mode", "groups[].mode", mode, &levels, &labels);
            // (Total order with commit) the commit tree's reports.
            let tree = &mode["commit_tree"];
            if let Some(v) = tree["stable_lag_us"].as_f64() {
                let help = "mcast stat: groups[].mode.commit_tree.stable_lag_us";
                self.gauge(
                    "mcastd_group_commit_tree_stable_lag_us",
                    help,
                    labels.clone(),
                    v,
                );
            }
            let not_counts = ["view", "parent", "stable_lag_us"];
            self.counters(
                "mcastd_group_commit_tree",
                "groups[].mode.commit_tree",
                tree,
                &not_counts,
                &labels,
            );
            let sender = &g["sender"];
            self.counters("mcastd_group_send", "groups[].sender", sender, &[], &labels);
            // The ratios are the counters' quotients: PromQL divides them.
            let ratios = ["messages_per_frame", "wire_bytes_per_payload_byte"];
            let batching = &g["batching"];
            self.counters(
                "mcastd_group_batching",
                "groups[].batching",
                batching,
                &ratios,
                &labels,
            );
            for r in array(&g["receivers"]) {
                let mut l = labels.clone();
                l.push(("sender", r["from"].to_string()));
                let help = "groups[].receivers[].counters";
                self.counters("mcastd_group_receive", help, &r["counters"], &[], &l);
            }
        }
    }

    fn links(&mut self, links: &Value) {
        for link in array(links) {
            let to = vec![("peer", link["inbox_of"].to_string())];
            self.counters(
                "mcastd_link_send",
                "links[].sender",
                &link["sender"],
                &[],
                &to,
            );
            for r in array(&link["receivers"]) {
                let from = vec![("peer", r["from"].to_string())];
                let help = "links[].receivers[].counters";
                self.counters("mcastd_link_receive", help, &r["counters"], &[], &from);
            }
        }
    }

    fn clients(&mut self, clients: &Value) {
        let all = array(clients);
        self.gauge(
            "mcastd_clients",
            "Local applications connected",
            Vec::new(),
            all.len() as f64,
        );
        for c in all {
            let l = vec![
                ("client", c["client"].to_string()),
                ("name", text(&c["name"])),
            ];
            self.counter(
                "mcastd_client_published_messages",
                "Messages the client published (mcast stat: clients[].published)",
                l.clone(),
                num(&c["published"]),
            );
            self.counter(
                "mcastd_client_delivered_records",
                "Records put in the client's ring (mcast stat: clients[].delivered)",
                l.clone(),
                num(&c["delivered"]),
            );
            self.gauge(
                "mcastd_client_overflow_bytes",
                "Bytes waiting beyond the client's subscription ring",
                l,
                num(&c["overflow_bytes"]),
            );
        }
    }

    /// Every number of the object `o` but `skip` as a counter `PREFIX_KEY`.
    fn counters(
        &mut self,
        prefix: &str,
        at: &str,
        o: &Value,
        skip: &[&str],
        labels: &[(&'static str, String)],
    ) {
        let Some(map) = o.as_object() else {
            return; // null: no such stream
        };
        for (key, v) in map {
            if skip.contains(&key.as_str()) || !v.is_number() {
                continue;
            }
            let help = format!("mcast stat: {at}.{key}");
            self.counter(&format!("{prefix}_{key}"), &help, labels.to_vec(), num(v));
        }
    }

    fn counter(&mut self, name: &str, help: &str, labels: Labels, v: f64) {
        self.add(name, help, MetricType::Counter, labels, v);
    }

    fn gauge(&mut self, name: &str, help: &str, labels: Labels, v: f64) {
        self.add(name, help, MetricType::Gauge, labels, v);
    }

    fn add(&mut self, name: &str, help: &str, kind: MetricType, labels: Labels, v: f64) {
        let family = self.0.entry(name.to_owned()).or_insert_with(|| Family {
            help: help.to_owned(),
            kind,
            samples: BTreeMap::new(),
        });
        *family.samples.entry(labels).or_default() += v;
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (name, family) in &self.0 {
            let mut metric = encoder.encode_descriptor(name, &family.help, None, family.kind)?;
            for (labels, &v) in &family.samples {
                let sample = metric.encode_family(labels)?;
                match family.kind {
                    // Counters come from u64 counts: whole and not negative.
                    MetricType::Counter => ConstCounter::new(v as u64).encode(sample)?,
                    // Whole gauges (most are counts) print without ".0".
                    _ if v.fract() == 0.0 && v.abs() < 9e15 => {
                        ConstGauge::new(v as i64).encode(sample)?
                    }
                    _ => ConstGauge::new(v).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => {
            let mut s = String::new();
            let _ = write!(s, "{other}");
            s
        }
    }
}

fn array(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stats() -> Value {
        let counters = |n: u64| json!({"data_sent": n, "naks_received": 2 * n});
        json!({
            "node": 2, "incarnation": 77,
            "transport": {"kind": "af_xdp", "xdp_mode": "Skb",
                "frames": {"total": 4096, "free": 4000, "fill": 64, "held": 30, "tx": 2},
                "kernel": {"rx_dropped": 5, "rx_ring_full": 4, "rx_fill_ring_empty": 1, "tx_ring_empty": 0}},
            "engine": {"rx_frames": 10, "tx_frames": 20},
            "daemon": {"clients_connected": 3, "registry": 1,
                "flush": {"started": 1, "kept_frames": 5, "kept_bytes": 500}},
            "peers": [{"node": 1, "state": "alive", "last_heard_ms_ago": 20},
                      {"node": 3, "state": "suspect (1 probes)", "last_heard_ms_ago": 150}],
            "groups": [
                {"group": 1, "name": "prices", "active": true, "algorithm": "mak",
                 "mode": {"mode": "fifo"}, "local_members": 2, "view_epoch": 4, "paused": false,
                 "queued_frames": 0, "grtt_us": 150.0, "sender": counters(7),
                 "receivers": [{"from": 1, "counters": counters(1)},
                               {"from": 1, "closed": true, "counters": counters(10)}]},
                {"group": 1, "name": "prices", "active": false, "algorithm": "mak",
                 "sender": counters(100), "receivers": []},
                {"group": 2, "name": "log", "active": true, "algorithm": "mak",
                 "mode": {"mode": "total", "held": 4, "delivered": 90, "barrier_lag_us": {"1": 20},
                          "commit_tree": {"on": true, "view": 3, "parent": 1, "stable_lag_us": 80, "ups_sent": 5}},
                 "local_members": 1, "view_epoch": 2, "paused": false, "queued_frames": 0,
                 "sender": null, "receivers": []}
            ],
            "links": [{"inbox_of": 1, "sender": counters(4), "receivers": []},
                      {"inbox_of": 2, "sender": null, "receivers": [{"from": 3, "counters": counters(6)}]}],
            "clients": [{"client": 9, "name": "recv", "published": 0, "delivered": 12, "overflow_bytes": 0}]
        })
    }

    #[test]
    fn every_counter_becomes_a_labelled_family_and_repeated_streams_add_up() {
        let text = render(&stats());
        for line in [
            "mcastd_engine_rx_frames_total 10",
            "mcastd_kernel_rx_ring_full_total 4",
            "mcastd_clients_connected_total 3",
            "mcastd_registry_node 1",
            "mcastd_flush_started_total 1",
            "mcastd_flush_kept_bytes 500",
            "mcastd_umem_frames{state=\"held\"} 30",
            "mcastd_peer_up{peer=\"1\"} 1",
            "mcastd_peer_up{peer=\"3\"} 0",
            "mcastd_peer_suspect{peer=\"3\"} 1",
            "mcastd_peer_last_heard_seconds{peer=\"3\"} 0.15",
            "mcastd_group_grtt_seconds{group=\"1\",name=\"prices\"} 0.00015",
            // The active group's sender and the retired one's, added up.
            "mcastd_group_send_data_sent_total{group=\"1\",name=\"prices\"} 107",
            // The open and the closed stream from node 1, added up.
            "mcastd_group_receive_naks_received_total{group=\"1\",name=\"prices\",sender=\"1\"} 22",
            "mcastd_group_local_members{group=\"1\",name=\"prices\"} 2",
            // A group mode's levels are gauges, its counts counters.
            "mcastd_group_mode_held{group=\"2\",name=\"log\"} 4",
            "mcastd_group_mode_delivered_total{group=\"2\",name=\"log\"} 90",
            "# TYPE mcastd_group_mode_held gauge",
            "mcastd_group_commit_tree_ups_sent_total{group=\"2\",name=\"log\"} 5",
            "mcastd_group_commit_tree_stable_lag_us{group=\"2\",name=\"log\"} 80",
            "mcastd_link_send_data_sent_total{peer=\"1\"} 4",
            "mcastd_link_receive_data_sent_total{peer=\"3\"} 6",
            "mcastd_client_delivered_records_total{client=\"9\",name=\"recv\"} 12",
            "# TYPE mcastd_engine_rx_frames counter",
            "# TYPE mcastd_umem_frames gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
        // Each family once, each label set once in it.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        let mut unique = types.clone();
        unique.dedup();
        assert_eq!(types, unique);
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once(' ').expect("name value").0)
            .collect();
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(samples.len(), sorted.len(), "a sample repeated in:\n{text}");
    }

    #[test]
    fn a_real_parser_reads_the_exposition() {
        let text = render(&stats());
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("parses");
        let sent = scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == "mcastd_group_send_data_sent_total"
                    && s.labels.get("name") == Some("prices")
            })
            .expect("the group's sender counter");
        // The exposition is OpenMetrics: a counter family `x` has samples
        // `x_total`, which this classic-format parser cannot pair with the
        // TYPE line (the types are checked line by line above).
        assert!(
            matches!(sent.value, prometheus_parse::Value::Untyped(v) if v == 107.0),
            "{:?}",
            sent.value
        );
        assert_eq!(
            scrape
                .docs
                .get("mcastd_group_send_data_sent")
                .map(String::as_str),
            Some("mcast stat: groups[].sender.data_sent")
        );
        let up: Vec<_> = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "mcastd_peer_up")
            .map(|s| (s.labels.get("peer").unwrap().to_owned(), s.value.clone()))
            .collect();
        assert_eq!(
            up,
            [
                ("1".to_owned(), prometheus_parse::Value::Gauge(1.0)),
                ("3".to_owned(), prometheus_parse::Value::Gauge(0.0))
            ]
        );
    }

    #[test]
    fn a_traced_daemon_exports_each_hop_and_an_untraced_one_nothing() {
        let mut s = stats();
        s["trace"] = json!({"sent_to_received": {"count": 40, "p50_ns": 12_000, "p90_ns": 20_000,
            "p99_ns": 31_000, "max_ns": 90_000, "backwards": 1}, "sent_samples_dropped": 3});
        let text = render(&s);
        for line in [
            r#"mcastd_trace_hop_seconds{hop="sent_to_received",quantile="0.5"} 0.000012"#,
            r#"mcastd_trace_hop_seconds{hop="sent_to_received",quantile="1"} 0.00009"#,
            r#"mcastd_trace_hop_samples_total{hop="sent_to_received"} 40"#,
            r#"mcastd_trace_hop_backwards_total{hop="sent_to_received"} 1"#,
            "mcastd_trace_sent_samples_dropped_total 3",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains(r#"hop="sent_samples_dropped""#), "{text}");
        assert!(!render(&stats()).contains("mcastd_trace"));
    }

    #[test]
    fn a_snapshot_without_streams_renders() {
        let text = render(&json!({"node": 1, "daemon": {}, "groups": [], "peers": []}));
        assert!(text.contains("mcastd_clients 0"), "{text}");
    }
}
