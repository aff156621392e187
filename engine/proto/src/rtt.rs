//! Round-trip estimation and retransmission timeouts, shared by every machine
//! that waits for feedback: MAK's ACK wait, the ACK baseline's and Go-Back-N's
//! retransmission timers, plain NAK's retry.
//!
//! The estimator is RFC 6298's (§2): the first sample R sets `SRTT = R`,
//! `RTTVAR = R/2`; each later one `RTTVAR = 3/4·RTTVAR + 1/4·|SRTT − R|`, then
//! `SRTT = 7/8·SRTT + 1/8·R`. The timeout is
//!
//! ```text
//! RTO = clamp(max(SRTT + 4·RTTVAR, 2·SRTT), min, max) · 2^backoff   (at most max)
//! ```
//!
//! and `initial` (clamped likewise) before the first sample. Two departures
//! from RFC 6298, both for links measured in microseconds:
//!
//! - the timeout is at least twice the smoothed round trip (RFC 793's
//!   `β·SRTT` with β = 2). A steady link (the simulator's, a paced stream)
//!   drives RTTVAR towards zero, and RFC 6298 relies on its 1 s minimum RTO,
//!   far too long here, to stay clear of the round trip. Twice the round trip
//!   is what a timer restarted at each acknowledgment needs when one
//!   acknowledgment of a stream is lost on a link whose round trip is mostly
//!   one frame's serialization: the next one comes two frame times after the
//!   restart;
//! - `min` and `max` are configured per machine (defaults of a few hundred
//!   microseconds up to a second) instead of 1 s and 60 s.
//!
//! Samples come from timestamps echoed by the feedback (the wire's `tstamp_us`
//! with `ACK_VALID`, see docs/protocol.md §1.2): each names the very copy it
//! answers, so a retransmitted frame gives a valid sample and Karn's rule is
//! not needed where an echo exists. Where none exists (plain NAK's repairs),
//! the machine applies Karn's rule itself.
//!
//! Everything a frame waits for in queues (the sender's own, the NIC's, a
//! rate-limited link's) is part of what the echo measures, so on a slow link
//! the timeout grows with the serialization time of what is typically queued;
//! the machines start their timers when a frame actually leaves them, not when
//! the application hands it over.

use crate::{Duration, Instant};

/// Bounds and start value of an adaptive timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtoConfig {
    /// The timeout before any round trip has been measured.
    pub initial: Duration,
    /// The shortest timeout.
    pub min: Duration,
    /// The longest timeout, exponential backoff included.
    pub max: Duration,
}

impl RtoConfig {
    /// The same value whatever is measured: the old static timers.
    pub const fn fixed(d: Duration) -> RtoConfig {
        RtoConfig {
            initial: d,
            min: d,
            max: d,
        }
    }
}

/// The default retransmission timeout of the ACK baseline and Go-Back-N: 500 µs
/// until a round trip is measured (the old static value: a few LAN round
/// trips), then the estimate, between 200 µs and 1 s.
pub const DEFAULT_RTO: RtoConfig = RtoConfig {
    initial: Duration::from_micros(500),
    min: Duration::from_micros(200),
    max: Duration::from_secs(1),
};

/// `base` doubled `backoff` times, at most `cfg.max` (RFC 6298 §5.5).
pub fn backed_off(base: Duration, backoff: u32, cfg: &RtoConfig) -> Duration {
    let max = cfg.max.max(cfg.min);
    base.checked_mul(1 << backoff.min(MAX_BACKOFF))
        .map_or(max, |d| d.min(max))
}

/// Doublings of the timeout at most (2^16: the `max` bound comes first in practice).
const MAX_BACKOFF: u32 = 16;

/// A smoothed round trip, its variation, and the timeout's backoff.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RttEstimator {
    /// Nanoseconds; `None` until the first sample.
    srtt: Option<u64>,
    rttvar: u64,
    backoff: u32,
    /// The last sample was below half the SRTT, the sender pacing
    /// ([`RttEstimator::sample_paced`]).
    below_half: bool,
}

impl RttEstimator {
    /// An estimator without samples.
    pub const fn new() -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: 0,
            backoff: 0,
            below_half: false,
        }
    }

    /// Takes one round-trip sample (RFC 6298 §2.2, §2.3).
    pub fn sample(&mut self, r: Duration) {
        self.below_half = false;
        self.smooth(r);
    }

    fn smooth(&mut self, r: Duration) {
        let r = u64::try_from(r.as_nanos()).unwrap_or(u64::MAX / 16);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
    }

    /// A sample `r` taken while the sender's last new frames left
    /// `send_gap` apart. As [`RttEstimator::sample`], except that the second
    /// of two such samples in a row below half the smoothed round trip, the
    /// sender pacing its frames at least `r` apart, moves it halfway down at
    /// once (the variation as RFC 6298 has it). Such samples say the queues
    /// the estimate measured have drained: after a burst that filled them,
    /// RFC 6298's gain of an eighth takes some forty samples to come down
    /// from milliseconds to microseconds, while this takes a handful.
    /// Smoothed as RFC 6298 says (and the run of low samples broken): one
    /// low sample alone (a queue that emptied for a moment while the load
    /// goes on), samples within a factor of two (a noisy path's), and any
    /// sample while the sender sends faster than one frame a round trip (its
    /// own frames keep the queues it measures; taken fast there, two daemons
    /// sending to each other at 1 % loss fell to 20–104k messages/s in 4
    /// starts of 18, below the slowest of 18 before, 106k). MAK's GRTT
    /// (docs/protocol.md, "GRTT and the ACK wait").
    pub fn sample_paced(&mut self, r: Duration, send_gap: Duration) {
        let ns = u64::try_from(r.as_nanos()).unwrap_or(u64::MAX / 16);
        match self.srtt {
            Some(s) if ns < s / 2 && send_gap >= r => {
                if self.below_half {
                    self.rttvar = (3 * self.rttvar + (s - ns)) / 4;
                    self.srtt = Some(s - (s - ns) / 2);
                } else {
                    self.smooth(r);
                    self.below_half = true;
                }
            }
            _ => self.sample(r),
        }
    }

    /// The smoothed round trip, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// The round-trip variation (zero before the first sample).
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// The timeout without backoff: `max(SRTT + 4·RTTVAR, 2·SRTT)` clamped to
    /// `[min, max]`, or `initial` before the first sample.
    pub fn base_rto(&self, cfg: &RtoConfig) -> Duration {
        let d = match self.srtt {
            None => cfg.initial,
            Some(s) => Duration::from_nanos(s.saturating_add((4 * self.rttvar).max(s))),
        };
        d.clamp(cfg.min, cfg.max.max(cfg.min))
    }

    /// The timeout: the base doubled once per unanswered expiry, at most `max`.
    pub fn rto(&self, cfg: &RtoConfig) -> Duration {
        backed_off(self.base_rto(cfg), self.backoff, cfg)
    }

    /// The timer expired without an answer: double the timeout (RFC 6298 §5.5).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    /// Doublings in force.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// The feedback made progress: the timeout is the estimate's again.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }
}

/// Echoes older than this are ignored (a wrapped or bogus stamp).
const MAX_ECHO: Duration = Duration::from_secs(10);

/// The round trip of a frame whose send time (the wire's 32-bit microsecond
/// stamp, wrapping) is echoed back as `echo_us` and arrives at `now`; `None`
/// when the echo is from the future or implausibly old.
pub fn echo_rtt(now: Instant, echo_us: u32) -> Option<Duration> {
    let us = now.as_micros_u32().wrapping_sub(echo_us);
    let d = Duration::from_micros(u64::from(us));
    (d < MAX_ECHO).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: RtoConfig = RtoConfig {
        initial: Duration::from_micros(500),
        min: Duration::from_micros(200),
        max: Duration::from_secs(1),
    };

    /// A sender whose frames leave 10 ms apart: every sample here is
    /// shorter.
    const PACED: Duration = Duration::from_millis(10);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn initial_until_the_first_sample() {
        let e = RttEstimator::new();
        assert_eq!(e.srtt(), None);
        assert_eq!(e.rto(&CFG), us(500));
    }

    #[test]
    fn first_sample_and_smoothing_follow_rfc_6298() {
        let mut e = RttEstimator::new();
        e.sample(us(1000));
        assert_eq!(e.srtt(), Some(us(1000)));
        assert_eq!(e.rttvar(), us(500));
        // SRTT + 4·RTTVAR = 3 ms.
        assert_eq!(e.rto(&CFG), us(3000));
        e.sample(us(2000));
        // RTTVAR = 3/4·500 + 1/4·1000 = 625; SRTT = 7/8·1000 + 1/8·2000 = 1125.
        assert_eq!(e.rttvar(), us(625));
        assert_eq!(e.srtt(), Some(us(1125)));
        assert_eq!(e.rto(&CFG), us(1125 + 2500));
    }

    #[test]
    fn a_steady_link_keeps_twice_the_round_trip() {
        let mut e = RttEstimator::new();
        for _ in 0..200 {
            e.sample(us(4000));
        }
        assert_eq!(e.srtt(), Some(us(4000)));
        assert!(e.rttvar() < us(1));
        assert_eq!(e.rto(&CFG), us(8000));
    }

    #[test]
    fn a_drained_path_brings_the_draining_estimate_down_in_a_handful_of_samples() {
        // A burst measured 13 ms; the paced stream after it, 50 µs.
        let (mut fast, mut rfc) = (RttEstimator::new(), RttEstimator::new());
        fast.sample(us(13_000));
        rfc.sample(us(13_000));
        let mut n = 0;
        while fast.srtt().unwrap() > us(100) {
            fast.sample_paced(us(50), PACED);
            rfc.sample(us(50));
            n += 1;
        }
        assert!(n <= 11, "{n} samples");
        assert!(
            rfc.srtt().unwrap() > us(3_000),
            "RFC 6298 still at {:?}",
            rfc.srtt()
        );
        // The timeout stays clear of the old round trip a while: RTTVAR.
        assert!(fast.base_rto(&CFG) > us(1_000));
        // Within a factor of two it is RFC 6298's: noise is not chased down.
        let (mut a, mut b) = (RttEstimator::new(), RttEstimator::new());
        for r in [100, 60, 140, 55, 190, 70] {
            a.sample_paced(us(r), PACED);
            b.sample(us(r));
            assert_eq!(a, b);
        }
        // Upwards it is RFC 6298's too.
        a.sample_paced(us(5_000), PACED);
        b.sample(us(5_000));
        assert_eq!(a, b);
        // One low sample alone (a queue empty for a moment) is RFC 6298's;
        // a second in a row moves it halfway.
        a.sample_paced(us(100), PACED);
        b.sample(us(100));
        assert_eq!(a.srtt(), b.srtt());
        a.sample_paced(us(3_000), PACED);
        b.sample(us(3_000));
        assert_eq!(a.srtt(), b.srtt());
        a.sample_paced(us(100), PACED);
        b.sample(us(100));
        assert_eq!(a.srtt(), b.srtt(), "the streak was broken");
        let before = a.srtt().unwrap();
        a.sample_paced(us(100), PACED);
        assert_eq!(a.srtt().unwrap(), before - (before - us(100)) / 2);
        // A sender that sends faster than one frame a round trip: RFC
        // 6298's, and the run of low samples is broken.
        let (mut c, mut d) = (a, a);
        c.sample_paced(us(50), us(10));
        d.sample(us(50));
        assert_eq!(c, d);
        c.sample_paced(us(50), PACED);
        d.sample(us(50));
        assert_eq!(c.srtt(), d.srtt(), "a saturated sample between");
    }

    #[test]
    fn bounds_and_backoff() {
        let mut e = RttEstimator::new();
        for _ in 0..100 {
            e.sample(us(10));
        }
        assert_eq!(e.rto(&CFG), us(200), "never below min");
        e.back_off();
        assert_eq!(e.rto(&CFG), us(400));
        e.back_off();
        assert_eq!(e.rto(&CFG), us(800));
        for _ in 0..40 {
            e.back_off();
        }
        assert_eq!(e.rto(&CFG), Duration::from_secs(1), "never above max");
        e.reset_backoff();
        assert_eq!(e.rto(&CFG), us(200));
        let mut slow = RttEstimator::new();
        slow.sample(Duration::from_secs(5));
        assert_eq!(slow.rto(&CFG), Duration::from_secs(1));
    }

    #[test]
    fn fixed_config_never_moves() {
        let cfg = RtoConfig::fixed(us(700));
        let mut e = RttEstimator::new();
        assert_eq!(e.rto(&cfg), us(700));
        e.sample(us(5));
        e.back_off();
        assert_eq!(e.rto(&cfg), us(700));
    }

    #[test]
    fn echoes_wrap_and_bogus_ones_are_ignored() {
        let now = Instant(5_000_000); // 5,000 us
        assert_eq!(echo_rtt(now, 4_000), Some(us(1000)));
        // The 32-bit microsecond clock wrapped between the send and now.
        let now = Instant((u64::from(u32::MAX) + 11) * 1_000);
        assert_eq!(echo_rtt(now, u32::MAX - 9), Some(us(20)));
        assert_eq!(echo_rtt(Instant(1_000), 2), None, "from the future");
    }
}
