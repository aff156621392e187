//! `mcast-bench soak check`: the run's verdict from every client's records
//! and the daemons' logs: totals, survivor agreement, liveness at the end.
//!
//! Owns: reading the work directory and the cross-client checks. May not
//! touch: a single stream's rules (`checker`).

use super::*;

#[derive(Debug, Default)]
pub(super) struct Totals {
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

pub(super) fn read_jsonl(path: &Path) -> Result<Vec<Value>, String> {
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

pub(super) fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
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
pub(super) fn log_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
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
pub(super) type Departure = (String, u64, u64, u64, u64);

/// One subscriber's last message of a departed publisher.
#[derive(Debug)]
pub(super) struct Cut<'a> {
    client: &'a str,
    last: u64,
    time: f64,
    number: u64,
}

/// What the daemons' logs say: the flushes that timed out (group number,
/// sender, time) and counts of notable lines.
#[derive(Debug, Default)]
pub(super) struct Logs {
    timed_out: Vec<(u64, u64, f64)>,
    counts: BTreeMap<&'static str, u64>,
}

pub(super) fn read_logs(dir: &Path) -> Result<Logs, String> {
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
pub(super) fn agreement(
    all: &[Value],
    logs: &Logs,
    details: &mut Vec<(String, String)>,
) -> (u64, u64, u64) {
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
pub(super) fn liveness(
    all: &[Value],
    ends: &[&Value],
    details: &mut Vec<(String, String)>,
) -> (u64, u64) {
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

pub(super) fn check(dir: &Path) -> Result<(), String> {
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
