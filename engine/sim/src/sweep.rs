//! Seed sweeps: many random runs ([`SimConfig::random`], or
//! [`SimConfig::random_batched`] with batching) of several
//! algorithms, spread over threads, every failure kept with its replay
//! command. Each run is single-threaded and deterministic; only the order in
//! which runs finish varies, and the outcome is sorted so it does not show.

use core::fmt::Write as _;
use core::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use mcast_proto::any::Algorithm;

use crate::config::{guarantees_completion, SimConfig};
use crate::report::SimFailure;

/// What to sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepPlan {
    /// Each seed gives one random configuration per algorithm.
    pub seeds: Range<u64>,
    pub algorithms: Vec<Algorithm>,
    /// Worker threads (at least one is used).
    pub jobs: usize,
    /// Batching runs ([`SimConfig::random_batched`]) instead of
    /// [`SimConfig::random`]: small messages packed into shared frames.
    pub batch: bool,
}

/// How one algorithm fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlgorithmTally {
    pub algorithm: Algorithm,
    pub runs: u64,
    /// Runs that completed (for plain NAK, completion is not guaranteed).
    pub completed: u64,
    pub failed: u64,
    /// Over the runs that did not fail: messages the sender accepted, data
    /// frames it accepted them in, and messages that joined a frame another
    /// started (batching).
    pub messages: u64,
    pub frames: u64,
    pub batched_messages: u64,
    /// Repairs receivers sent tree neighbours from their copies (local
    /// recovery, docs/protocol.md §3.5): the sweep drew trees and that path ran.
    pub relays: u64,
}

/// The result of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepOutcome {
    pub runs: u64,
    /// Per algorithm, in the plan's order.
    pub tallies: Vec<AlgorithmTally>,
    /// Every failure, ordered by algorithm (the plan's order) then seed.
    pub failures: Vec<SimFailure>,
}

impl SweepOutcome {
    /// `Err` with the summary and the first three failures (each with its
    /// replay command) when any run failed: a sweep test's verdict.
    pub fn check(&self) -> Result<(), String> {
        if self.failures.is_empty() {
            return Ok(());
        }
        let shown: Vec<String> = self
            .failures
            .iter()
            .take(3)
            .map(|f| f.to_string())
            .collect();
        Err(format!("{}\n{}", self.summary(), shown.join("\n\n")))
    }

    /// One line per algorithm: runs, completed, failed, messages and frames.
    pub fn summary(&self) -> String {
        let mut s = format!("{} runs, {} failed", self.runs, self.failures.len());
        for t in &self.tallies {
            let _ = write!(
                s,
                "\n  {:<9} {} runs, {} completed{}, {} failed; {} messages in {} frames ({} batched, {} relayed repairs)",
                t.algorithm.name(),
                t.runs,
                t.completed,
                if guarantees_completion(t.algorithm) {
                    ""
                } else {
                    " (not guaranteed)"
                },
                t.failed,
                t.messages,
                t.frames,
                t.batched_messages,
                t.relays
            );
        }
        s
    }
}

/// Runs every (algorithm, seed) of `plan` on `plan.jobs` threads, calling
/// `progress(done, total)` on the calling thread after each run.
pub fn sweep(plan: &SweepPlan, mut progress: impl FnMut(u64, u64)) -> SweepOutcome {
    let work: Vec<(usize, u64)> = (0..plan.algorithms.len())
        .flat_map(|a| plan.seeds.clone().map(move |seed| (a, seed)))
        .collect();
    let total = work.len() as u64;
    let next = AtomicUsize::new(0);
    let mut tallies: Vec<AlgorithmTally> = plan
        .algorithms
        .iter()
        .map(|&algorithm| AlgorithmTally {
            algorithm,
            runs: 0,
            completed: 0,
            failed: 0,
            messages: 0,
            frames: 0,
            batched_messages: 0,
            relays: 0,
        })
        .collect();
    let mut failures: Vec<(usize, u64, SimFailure)> = Vec::new();
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..plan.jobs.max(1) {
            let tx = tx.clone();
            let (work, next) = (&work, &next);
            let algorithms = &plan.algorithms;
            let batch = plan.batch;
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(a, seed)) = work.get(i) else { break };
                let cfg = if batch {
                    SimConfig::random_batched(seed, algorithms[a])
                } else {
                    SimConfig::random(seed, algorithms[a])
                };
                let outcome = crate::run(&cfg).map(|r| {
                    (
                        r.completed,
                        r.sent_messages,
                        r.data_frames,
                        r.batched_messages,
                        r.wire.relay,
                    )
                });
                if tx.send((a, seed, outcome)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut done = 0;
        for (a, seed, outcome) in rx {
            let t = &mut tallies[a];
            t.runs += 1;
            match outcome {
                Ok((completed, messages, frames, batched, relays)) => {
                    t.completed += u64::from(completed);
                    t.messages += messages;
                    t.frames += frames;
                    t.batched_messages += batched;
                    t.relays += relays;
                }
                Err(f) => {
                    t.failed += 1;
                    failures.push((a, seed, f));
                }
            }
            done += 1;
            progress(done, total);
        }
    });
    failures.sort_by_key(|&(a, seed, _)| (a, seed));
    SweepOutcome {
        runs: total,
        tallies,
        failures: failures.into_iter().map(|(_, _, f)| f).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_sweep_runs_everything_once() {
        let plan = SweepPlan {
            seeds: 0..6,
            algorithms: vec![Algorithm::Mak, Algorithm::Ack],
            jobs: 3,
            batch: false,
        };
        let mut calls = 0;
        let out = sweep(&plan, |done, total| {
            calls += 1;
            assert!(done <= total && total == 12);
        });
        assert_eq!(calls, 12);
        assert_eq!(out.runs, 12);
        assert_eq!(out.tallies.iter().map(|t| t.runs).sum::<u64>(), 12);
        assert!(out.summary().starts_with("12 runs"));
        let t = out.tallies[0];
        assert!(t.messages > 0 && t.frames >= t.messages, "{t:?}");
        assert_eq!(t.batched_messages, 0, "no batching unless asked");
    }
}
