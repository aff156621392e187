//! How `mcast` renders the daemon's answers: the listings (`mcast groups`,
//! `mcast members`) as text and in the documented JSON shape, and
//! `mcast stat`'s text (every counter of every group, stream, peer and
//! client, with rates against the previous sample).
//!
//! Owns: the text and the JSON shape of those commands. May not touch:
//! what the daemon counts (`daemon::stats`).

use serde_json::Value;

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
        "clients {}  published {}  delivered {} (batch records {})  overflowed {}  cut off {}  link msgs {}/{}  link errors {}\n",
        v["clients"].as_array().map_or(0, |a| a.len()),
        d["messages_published"],
        d["fragments_delivered"],
        d["batch_records"].as_u64().unwrap_or(0),
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
