//! `mcast-bench xdp`: the AF_XDP scenario on real kernel paths (network
//! namespaces, veth, a bridge), run by `mcast_engine::bench::run_xdp`. This
//! module turns its figures into ratios, HdrHistograms (3 significant
//! figures) and, optionally, a JSON file. Needs root.

use hdrhistogram::Histogram;
use mcast_engine::bench::{self, Environment, Latency, XdpBenchConfig, XdpReport};
use serde_json::{json, Value};

/// Runs the scenario, prints the figures, writes `json` when given.
pub fn run(messages: usize, latency_messages: usize, json: Option<&str>) -> Result<(), String> {
    if let Some(why) = bench::missing_privileges() {
        return Err(format!(
            "xdp needs root ({why}): it creates network namespaces and attaches XDP inside them. \
             Run it as root (with sudo where root is not the user: `sudo -E mcast-bench xdp`)"
        ));
    }
    if messages == 0 || latency_messages == 0 {
        return Err("--messages and --latency-messages must be at least 1".into());
    }
    let cfg = XdpBenchConfig {
        messages,
        latency_messages,
        ..XdpBenchConfig::default()
    };
    eprintln!(
        "mcast-bench xdp: 1 sender -> 3 receivers in network namespaces on a bridge, AF_XDP; \
         {} messages of {} B per throughput run, {} per latency run",
        cfg.messages, cfg.message_len, cfg.latency_messages
    );
    let report = bench::run_xdp(&cfg, |l| eprintln!("  {l}"))?;
    let latencies: Vec<(Histogram<u64>, &Latency)> = report
        .latency
        .iter()
        .map(|l| Ok((histogram(&l.samples_ns)?, l)))
        .collect::<Result<_, String>>()?;
    print(&report, &latencies);
    if let Some(path) = json {
        crate::path::write_json(path, &to_json(&report, &latencies))?;
    }
    Ok(())
}

/// Latencies in nanoseconds, 1 ns to 1 hour, 3 significant figures.
fn histogram(samples_ns: &[u64]) -> Result<Histogram<u64>, String> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;
    for &s in samples_ns {
        h.saturating_record(s.max(1));
    }
    Ok(h)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn pct(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".to_owned(), |r| format!("{:.1}%", 100.0 * r))
}

/// The three ratios the scenario exists for, at `loss`.
fn ratios(r: &XdpReport, loss: f64) -> [(&'static str, Option<f64>); 3] {
    let mbps = |name: &str, loss: f64| r.get(name, loss).map(|t| t.mbps);
    [
        ("mak/blast", ratio(mbps("mak", loss), mbps("blast", loss))),
        (
            "mak(loss)/mak(0%)",
            ratio(mbps("mak", loss), mbps("mak", 0.0)),
        ),
        (
            "gbn/unicast-blast",
            ratio(mbps("gbn", loss), mbps("unicast-blast", loss)),
        ),
    ]
}

fn environment_line(e: &Environment, message_len: usize) -> String {
    format!(
        "kernel {}, XDP mode {}, bind mode {}, {} queue(s), {message_len} B messages, {} CPUs, {} build",
        e.kernel, e.xdp_mode, e.bind_mode, e.queues, e.cpus, e.build_profile
    )
}

fn print(r: &XdpReport, latencies: &[(Histogram<u64>, &Latency)]) {
    println!(
        "environment: {}",
        environment_line(&r.environment, r.message_len)
    );
    println!();
    println!(
        "throughput (goodput at the slowest receiver; blasts are unreliable, 'got' is what arrived)"
    );
    println!(
        "{:<14} {:>5} {:>4} {:>10} {:>12} {:>8}",
        "run", "loss", "rx", "Mbit/s", "frames/s", "got"
    );
    for t in &r.throughput {
        println!(
            "{:<14} {:>4}% {:>4} {:>10.1} {:>12.0} {:>7.1}%",
            t.name,
            t.loss * 100.0,
            t.receivers,
            t.mbps,
            t.frames_per_sec,
            100.0 * t.delivered
        );
    }
    println!();
    for loss in [0.0, 0.01] {
        let parts: Vec<String> = ratios(r, loss)
            .iter()
            .filter(|(name, _)| loss > 0.0 || !name.starts_with("mak(loss)"))
            .map(|(name, v)| format!("{} = {}", name.replace("loss", "1%"), pct(*v)))
            .collect();
        println!("ratios at {}% loss: {}", loss * 100.0, parts.join(", "));
    }
    println!();
    println!("one-way latency (CLOCK_MONOTONIC, scheduled send time to delivery, every receiver)");
    println!(
        "{:<22} {:>7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "run", "spin", "samples", "p50 us", "p99 us", "p99.9 us", "max us", "delivered"
    );
    for (h, l) in latencies {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        println!(
            "{:<22} {:>7} {:>9} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>8.1}%",
            l.name,
            if l.busy_poll {
                "busy".to_owned()
            } else {
                format!("{}us", l.spin.as_micros())
            },
            h.len(),
            us(0.5),
            us(0.99),
            us(0.999),
            h.max() as f64 / 1e3,
            100.0 * l.delivered_min as f64 / l.messages.max(1) as f64
        );
    }
}

fn to_json(r: &XdpReport, latencies: &[(Histogram<u64>, &Latency)]) -> Value {
    let e = &r.environment;
    let env = |message_len: usize| {
        json!({
            "kernel": e.kernel,
            "xdp_mode": e.xdp_mode,
            "bind_mode": e.bind_mode,
            "queues": e.queues,
            "message_len": message_len,
            "cpus": e.cpus,
            "build_profile": e.build_profile,
            "senders": 1,
            "receivers": e.receivers,
        })
    };
    let throughput: Vec<Value> = r
        .throughput
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "loss": t.loss,
                "receivers": t.receivers,
                "messages": t.messages,
                "goodput_mbps": t.mbps,
                "frames_per_sec": t.frames_per_sec,
                "delivered_fraction": t.delivered,
                "environment": env(t.message_len),
            })
        })
        .collect();
    let ratios: Vec<Value> = [0.0, 0.01]
        .iter()
        .flat_map(|&loss| {
            ratios(r, loss)
                .into_iter()
                .filter(move |(name, _)| loss > 0.0 || !name.starts_with("mak(loss)"))
                .map(move |(name, v)| {
                    json!({
                        "name": name.replace("loss", &format!("{}%", loss * 100.0)),
                        "loss": loss,
                        "ratio": v,
                        "environment": env(r.message_len),
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let latency: Vec<Value> = latencies
        .iter()
        .map(|(h, l)| {
            json!({
                "name": l.name,
                "algorithm": l.algorithm.to_string(),
                "loss": l.loss,
                "rate_per_sec": l.rate_per_sec,
                "spin_us": l.spin.as_micros() as u64,
                "busy_poll": l.busy_poll,
                "messages": l.messages,
                "delivered_min": l.delivered_min,
                "samples": h.len(),
                "histogram_significant_figures": 3,
                "p50_ns": h.value_at_quantile(0.5),
                "p99_ns": h.value_at_quantile(0.99),
                "p999_ns": h.value_at_quantile(0.999),
                "max_ns": h.max(),
                "mean_ns": h.mean(),
                "environment": env(l.message_len),
            })
        })
        .collect();
    json!({
        "scenario": "xdp",
        "environment": env(r.message_len),
        "throughput": throughput,
        "ratios": ratios,
        "latency": latency,
    })
}
