//! Runs one or more throughput phases of `mcast-bench xdp` on one namespace
//! topology, each `--repeat` times, and prints frames/s: for profiling a phase
//! alone (`perf record -g -- target/release/examples/xdp_phase gbn`) and for
//! comparing engine settings in back-to-back pairs with the blast
//! (`xdp_phase unicast-blast,gbn --repeat 10 --ack-policy immediate`).
//! Needs root.
//!
//! Usage: xdp_phase PHASE[,PHASE...] [--loss 0.01] [--messages N] [--repeat N]
//!        [--ack-policy immediate|on-request|delayed:EVERY:MAX_DELAY_US]
//!        [--spin-yield-after-us N]
//! where PHASE is blast, mak, unicast-blast or gbn. Without the last two
//! options the engines run with their defaults.

use std::time::Duration;

use mcast_engine::harness::scenario::Tuning;
use mcast_proto::gbn::AckPolicy;

fn ack_policy(v: &str) -> AckPolicy {
    let parts: Vec<&str> = v.split(':').collect();
    match parts.as_slice() {
        ["immediate"] => AckPolicy::Immediate,
        ["on-request"] => AckPolicy::OnRequest,
        ["delayed", every, us] => AckPolicy::Delayed {
            every: every
                .parse()
                .expect("--ack-policy delayed:EVERY:MAX_DELAY_US"),
            max_delay: Duration::from_micros(
                us.parse().expect("--ack-policy delayed:EVERY:MAX_DELAY_US"),
            ),
        },
        _ => {
            panic!("--ack-policy is immediate, on-request or delayed:EVERY:MAX_DELAY_US, not {v:?}")
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let phases = args.next().unwrap_or_else(|| "gbn".to_owned());
    let (mut loss, mut messages, mut repeat) = (0.0f64, 200_000usize, 1usize);
    let mut tuning = Tuning::default();
    while let Some(a) = args.next() {
        let v = args.next().expect("a value after each option");
        match a.as_str() {
            "--loss" => loss = v.parse().expect("--loss"),
            "--messages" => messages = v.parse().expect("--messages"),
            "--repeat" => repeat = v.parse().expect("--repeat"),
            "--ack-policy" => tuning.gbn_ack_policy = Some(ack_policy(&v)),
            "--spin-yield-after-us" => {
                tuning.spin_yield_after = Some(Duration::from_micros(
                    v.parse().expect("--spin-yield-after-us"),
                ))
            }
            other => panic!("unknown option {other}"),
        }
    }
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        eprintln!("needs root: {why}");
        std::process::exit(2);
    }
    let topo = mcast_engine::harness::netns::Topology::new("xdp_phase").expect("topology");
    for _ in 0..repeat {
        for p in phases.split(',') {
            let t = mcast_engine::bench::throughput_run(&topo, p, messages, 1024, loss, tuning)
                .unwrap_or_else(|e| panic!("{e}"));
            println!(
                "{p} {:.0}% loss: {:.0} frames/s, {:.1} Mbit/s, {:.1}% delivered; CPU ns/msg sender {:.0} receiver {:.0}",
                loss * 100.0,
                t.frames_per_sec,
                t.mbps,
                t.delivered * 100.0,
                t.sender_cpu_ns,
                t.receiver_cpu_ns,
            );
        }
    }
}
