//! The seed sweep: every algorithm under random faults, checkers on (with
//! `--batch`, small messages packed into shared frames).

use mcast_sim::sweep::{sweep, SweepPlan};
use mcast_sim::Algorithm;

pub(crate) fn run(
    start: u64,
    seeds: u64,
    algo: Option<Algorithm>,
    jobs: Option<usize>,
    batch: bool,
) -> Result<(), String> {
    let plan = SweepPlan {
        seeds: start..start.saturating_add(seeds),
        algorithms: algo.map_or_else(|| Algorithm::ALL.to_vec(), |a| vec![a]),
        jobs: jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        batch,
    };
    let (outcome, wall) = crate::timed(|| {
        sweep(&plan, |done, total| {
            if done % 100 == 0 || done == total {
                eprint!("\r{done}/{total} runs");
            }
        })
    });
    eprintln!();
    println!("{}", outcome.summary());
    println!("wall time {:.1} s", wall.as_secs_f64());
    if outcome.failures.is_empty() {
        Ok(())
    } else {
        for f in outcome.failures.iter().take(5) {
            eprintln!("{f}\n");
        }
        Err(format!(
            "{} of {} runs failed",
            outcome.failures.len(),
            outcome.runs
        ))
    }
}
