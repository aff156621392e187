//! Times the scale target: `cargo run --release -p mcast-sim --example scale -- [algo] [receivers] [messages]`
//! (defaults: mak, 512 receivers, 10,000 messages of 64 bytes, 1 % loss).

use mcast_sim::{run, Algorithm, Faults, SimConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let algo: Algorithm = args
        .next()
        .map_or(Ok(Algorithm::Mak), |a| a.parse())
        .unwrap_or_else(|e| panic!("{e}"));
    let receivers = args.next().map_or(512, |a| a.parse().expect("receivers"));
    let messages = args.next().map_or(10_000, |a| a.parse().expect("messages"));
    let cfg = SimConfig {
        algorithm: algo,
        receivers,
        messages,
        faults: Faults {
            loss: 0.01,
            faults_until: Some(mcast_proto::Instant(1_000_000_000)),
            ..Faults::default()
        },
        liveness_bound: mcast_proto::Duration::from_secs(10),
        // Plain NAK never frees its window's tail: room for the whole run.
        window_frames: if algo == Algorithm::Nak { 16_384 } else { 256 },
        seed: 512,
        ..SimConfig::default()
    };
    // Wall time of the whole run, read by this harness only: the simulation
    // itself never looks at a clock.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    match run(&cfg) {
        Ok(r) => println!(
            "{algo}: {:?} in {:.2?} wall, {} steps ({:.0} ns/step), virtual {:?}\n  {:?}\n  frames needing repair: {}",
            r.stop,
            started.elapsed(),
            r.steps,
            started.elapsed().as_nanos() as f64 / r.steps as f64,
            r.completion_time.unwrap_or(r.end_time),
            r.wire,
            r.frames_needing_repair
        ),
        Err(f) => {
            eprintln!("{f}");
            std::process::exit(1);
        }
    }
}
