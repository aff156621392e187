//! The operator's surface through real daemons: metrics scraped over HTTP
//! from mcastd in its namespace and read with a Prometheus text parser, and
//! `mcast`'s JSON listings. Root only (CI runs as root); without privileges
//! each test skips with a message, and with CI=true a skip is a failure.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use mcast_ipc::{Client, MessageKind};

const METRICS: &str = "127.0.0.1:9464";

/// `GET /metrics` from node `node`'s daemon, inside its namespace: the
/// status line and the body.
fn scrape(cluster: &common::Cluster, node: u32) -> (String, String) {
    let d = &cluster.daemons[node as usize - 1];
    let mut conn =
        d.ns.run(|| TcpStream::connect(METRICS))
            .expect("connect to metrics");
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    (head.to_owned(), body.to_owned())
}

/// The value of the sample `metric` whose labels include `labels`.
fn sample(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            ref other => panic!("{metric}: {other:?}"),
        })
}

/// Scrapes node `node` until `ready` holds for the parsed metrics (the
/// daemon refreshes them once a second), or panics after 10 s.
fn scrape_until(
    cluster: &common::Cluster,
    node: u32,
    ready: impl Fn(&prometheus_parse::Scrape) -> bool,
) -> prometheus_parse::Scrape {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (head, body) = scrape(cluster, node);
        assert!(
            head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
            "{head}\n{body}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/openmetrics-text"),
            "{head}"
        );
        let parsed = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))
            .unwrap_or_else(|e| panic!("unparsable exposition ({e}):\n{body}"));
        if ready(&parsed) {
            return parsed;
        }
        assert!(
            Instant::now() < deadline,
            "node {node}'s metrics never got there:\n{body}"
        );
        // The refresh period, not a synchronisation: nothing signals it.
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn mcast(cluster: &common::Cluster, node: u32, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_mcast"))
        .arg("--socket")
        .arg(cluster.socket(node))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mcast {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "mcast {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The nodes of `group`'s members, sorted, as `mcast members --json` on
/// node `node` lists them.
fn member_nodes(cluster: &common::Cluster, node: u32, group: &str) -> Vec<u64> {
    let members = mcast(cluster, node, &["members", group, "--json"]);
    let mut nodes: Vec<u64> = members["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["node"].as_u64().unwrap())
        .collect();
    nodes.sort_unstable();
    nodes
}

#[test]
fn metrics_count_what_went_through_and_listings_print_json() {
    let Some(cluster) = common::start("metrics", &format!("metrics = \"{METRICS}\"")) else {
        return;
    };
    const N: u64 = 500;
    let mut sub = Client::connect(cluster.socket(2), "sub").unwrap();
    let joined = sub.join("ops").unwrap();
    let mut publ = Client::connect(cluster.socket(1), "pub").unwrap();
    let m = publ.join("ops").unwrap();
    mcast_cli::stream::wait_nodes(&mut publ, m.group, &m.view, 2, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..N {
        publ.publish_blocking(m.group, &i.to_be_bytes(), Some(Duration::from_secs(10)))
            .unwrap();
    }
    let mut got = 0;
    while got < N {
        let msg = sub
            .recv_timeout(Duration::from_secs(20))
            .unwrap()
            .expect("a message within 20 s");
        if msg.kind == MessageKind::Data {
            assert_eq!(msg.data, got.to_be_bytes());
            got += 1;
        }
    }
    let group = joined.group.to_string();
    // The receiver counted every message from node 1 in the group as a
    // record for its client, and the frames they came in (fewer, when
    // messages shared frames).
    let at2 = scrape_until(&cluster, 2, |s| {
        sample(
            s,
            "mcastd_client_delivered_records_total",
            &[("name", "sub")],
        )
        .is_some_and(|n| n >= N as f64)
    });
    let frames = sample(
        &at2,
        "mcastd_group_receive_delivered_total",
        &[("group", &group), ("sender", "1")],
    )
    .unwrap_or(0.0);
    assert!(frames >= 1.0 && frames <= N as f64, "{frames} frames");
    assert_eq!(sample(&at2, "mcastd_peer_up", &[("peer", "1")]), Some(1.0));
    assert_eq!(sample(&at2, "mcastd_clients", &[]), Some(1.0));
    assert_eq!(
        sample(
            &at2,
            "mcastd_info",
            &[("node", "2"), ("transport", "af_xdp")]
        ),
        Some(1.0)
    );
    // The sender counted what it sent, and what its clients published.
    let at1 = scrape_until(&cluster, 1, |s| {
        sample(s, "mcastd_messages_published_total", &[]) == Some(N as f64)
    });
    let sent = sample(
        &at1,
        "mcastd_group_send_data_sent_total",
        &[("name", "ops")],
    )
    .unwrap();
    // Messages may share frames: at most one frame each.
    assert!(sent >= 1.0 && sent <= N as f64, "sent {sent}");
    assert_eq!(
        sample(
            &at1,
            "mcastd_group_batching_messages_total",
            &[("name", "ops")]
        ),
        Some(N as f64)
    );
    assert_eq!(
        sample(
            &at1,
            "mcastd_client_published_messages_total",
            &[("name", "pub")]
        ),
        Some(N as f64)
    );
    // Every metric the example alert rules use exists.
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/mcastd.rules.yml"
    ))
    .unwrap();
    let scraped = |name: &str| {
        [&at1, &at2]
            .iter()
            .any(|s| s.samples.iter().any(|x| x.metric == name))
    };
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("mcastd_") {
            assert!(
                scraped(word),
                "docs/mcastd.rules.yml uses {word}, which mcastd does not export"
            );
        }
    }
    // Anything but GET /metrics is refused.
    let d = &cluster.daemons[0];
    let mut conn = d.ns.run(|| TcpStream::connect(METRICS)).unwrap();
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("HTTP/1.1 404") || reply.starts_with("HTTP/1.0 404"),
        "{reply}"
    );

    // The listings, as scripts read them.
    let groups = mcast(&cluster, 3, &["groups", "--json"]);
    assert_eq!(groups["schema"], 1);
    let ops = &groups["groups"].as_array().unwrap()[0];
    assert_eq!(
        (ops["name"].as_str(), ops["members"].as_u64()),
        (Some("ops"), Some(2))
    );
    let members = mcast(&cluster, 3, &["members", "ops", "--json"]);
    assert_eq!(members["schema"], 1);
    assert_eq!(members["group"], joined.group);
    assert_eq!(member_nodes(&cluster, 3, "ops"), [1, 2]);
    let stat = mcast(&cluster, 2, &["stat", "--json"]);
    assert_eq!(
        (stat["schema"].as_u64(), stat["node"].as_u64()),
        (Some(1), Some(2))
    );
}

#[test]
fn a_node_configured_otherwise_cannot_join_and_is_told_what_differs() {
    // Node 4 has the group in another mode: as a member it would send FIFO
    // frames the others hold for stamps forever.
    let Some(cluster) = common::start_with("mixed-cfg", |n| {
        let mode = if n == 4 { "fifo" } else { "total" };
        format!("[[group]]\nname = \"mixed\"\nmode = \"{mode}\"\n")
    }) else {
        return;
    };
    let mut first = Client::connect(cluster.socket(1), "first").unwrap();
    first.join("mixed").expect("the agent's own join");
    let mut alike = Client::connect(cluster.socket(2), "alike").unwrap();
    alike
        .join("mixed")
        .expect("node 2 configures the group alike");
    let mut other = Client::connect(cluster.socket(4), "other").unwrap();
    let e = other
        .join("mixed")
        .expect_err("node 4 configures the group otherwise")
        .to_string();
    eprintln!("node 4's client was told: {e}");
    for says in [
        "group \"mixed\"",
        "node 1, its agent",
        "mode = \"total\"",
        "mode = \"fifo\"",
        "configure a group alike",
    ] {
        assert!(e.contains(says), "the error does not say {says:?}: {e}");
    }
    assert_eq!(
        member_nodes(&cluster, 3, "mixed"),
        [1, 2],
        "the group goes on without node 4"
    );
    let stat = mcast(&cluster, 1, &["stat", "--json"]);
    assert_eq!(stat["daemon"]["joins_refused_settings"], 1, "{stat:#}");
    cluster.daemons[3].wait_log("join refused", Duration::from_secs(10));

    // A client that relies on a mode says so at join, and is refused where
    // the group runs in another.
    let mut relying = Client::connect(cluster.socket(3), "relying").unwrap();
    let e = relying
        .join_mode("mixed", "sequenced")
        .unwrap_err()
        .to_string();
    for says in ["mode = \"total\" here", "set mode = \"sequenced\""] {
        assert!(e.contains(says), "the error does not say {says:?}: {e}");
    }
    let e = relying
        .join_mode("mixed", "totally")
        .unwrap_err()
        .to_string();
    assert!(e.contains("use one of"), "{e}");
    relying
        .join_mode("mixed", "total")
        .expect("the mode it runs in");
    let out = Command::new(env!("CARGO_BIN_EXE_mcast"))
        .arg("--socket")
        .arg(cluster.socket(2))
        .args(["recv", "mixed", "--mode", "fifo", "--count", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("set mode = \"fifo\""),
        "mcast recv --mode fifo on a total-order group: {stderr}"
    );
    assert_eq!(
        member_nodes(&cluster, 1, "mixed"),
        [1, 2, 3],
        "the client that asked for its mode is in"
    );
}
