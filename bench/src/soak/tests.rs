//! The soak's rules, each against a hand-made stream or work directory.

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
