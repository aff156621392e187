//! Running a seeded simulation of the daemon's machines over many seeds, or
//! one seed again: the sweeps of the barrier (`barrier_sweep`) and of the
//! sequenced and total-order modes (`mode::sweep`) share it.
//!
//! Owns: reading `<NAME>_SEED` (one seed, to replay a failure),
//! `<NAME>_SEEDS` (how many seeds, for a longer sweep) and `<NAME>_FIRST`
//! (the first of them), and the verdict (how many failed, and the first
//! failure's report).

/// Runs `run` for seed `<NAME>_SEED` if it is set, else for
/// `<NAME>_SEEDS` seeds (default `default`) from `<NAME>_FIRST` (default
/// 0); fails with the first failure.
pub(super) fn sweep(name: &str, default: u64, run: impl Fn(u64) -> Result<(), String>) {
    if let Ok(seed) = std::env::var(format!("{name}_SEED")) {
        let seed: u64 = seed
            .parse()
            .unwrap_or_else(|_| panic!("{name}_SEED is a number"));
        run(seed).unwrap_or_else(|e| panic!("{e}"));
        return;
    }
    let seeds: u64 = std::env::var(format!("{name}_SEEDS"))
        .map_or(default, |n| n.parse().expect("a number of seeds"));
    // {name}_FIRST=S runs seeds from S on: a longer sweep need not rerun
    // the seeds an earlier one passed.
    let first: u64 =
        std::env::var(format!("{name}_FIRST")).map_or(0, |n| n.parse().expect("a first seed"));
    let failures: Vec<String> = (first..first.saturating_add(seeds))
        .filter_map(|s| run(s).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds failed; the first: {}",
        failures.len(),
        failures[0]
    );
}
