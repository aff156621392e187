//! Per-hop timing of messages (docs/mcastd.md "Where the time goes"): the
//! histogram every hop is recorded in, and the summary the daemon's stats
//! and the client library report.
//!
//! Owns: how a hop's latencies are kept (nanoseconds, two significant
//! digits, up to 10 s; later ones count as 10 s) and summarised. Which hops
//! there are, and where they are stamped, belongs to the daemon
//! (`mcastd`'s trace) and to [`Client`](crate::Client) (the last hop).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use crate::sys::monotonic_ns;

/// Latencies above this are recorded as this.
const MAX_NS: u64 = 10_000_000_000;

/// One hop's latencies, in nanoseconds.
#[derive(Debug, Clone)]
pub struct Hop {
    hist: Histogram<u64>,
    /// Samples whose end came before their start (clocks that disagree):
    /// counted, not recorded.
    backwards: u64,
}

impl Default for Hop {
    fn default() -> Hop {
        Hop::new()
    }
}

impl Hop {
    pub fn new() -> Hop {
        Hop {
            hist: Histogram::new_with_bounds(1, MAX_NS, 2).expect("valid bounds"),
            backwards: 0,
        }
    }

    /// Records the hop from `from` to `to` (both [`monotonic_ns`]).
    #[inline]
    pub fn record(&mut self, from: u64, to: u64) {
        match to.checked_sub(from) {
            Some(ns) => self.record_ns(ns),
            None => self.backwards += 1,
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
    }

    /// Counts a sample whose clocks disagreed.
    pub fn record_backwards(&mut self) {
        self.backwards += 1;
    }

    pub fn summary(&self) -> HopSummary {
        let h = &self.hist;
        let q = |q: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(q)
            }
        };
        HopSummary {
            count: h.len(),
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            max_ns: if h.is_empty() { 0 } else { h.max() },
            backwards: self.backwards,
        }
    }
}

/// What `mcast stat` and [`Client::read_hop`](crate::Client::read_hop) say
/// of one hop. Quantiles are within 1 % (two significant digits). Laid out
/// as C's `struct mcast_hop` (libmcast hands it over as it is): its fields
/// and their order are that header's.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopSummary {
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Samples not recorded because their end was stamped before their
    /// start (a hop between machines whose clocks disagree).
    pub backwards: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hop_summarises_what_it_recorded_and_counts_clocks_that_disagree() {
        let mut h = Hop::new();
        assert_eq!(h.summary(), HopSummary::default());
        for us in 1..=100u64 {
            h.record(1_000_000, 1_000_000 + us * 1_000);
        }
        h.record(5, 4);
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.backwards, 1);
        // Two significant digits: within 1 %.
        assert!((49_500..=50_500).contains(&s.p50_ns), "{s:?}");
        assert!((98_000..=100_000).contains(&s.p99_ns), "{s:?}");
        assert!((99_000..=101_000).contains(&s.max_ns), "{s:?}");
        h.record_ns(u64::MAX);
        assert!(h.summary().max_ns >= MAX_NS, "saturates instead of failing");
    }
}
