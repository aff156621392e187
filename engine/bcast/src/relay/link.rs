//! What the links cost, measured as the relay runs: α and β for `auto`
//! (seed 003's model, [`crate::cost`]), from the round trips of transfers
//! whose receiver answers (GOT).
//!
//! A sample is a transfer of `b` bytes and the time from its sending to
//! its answer: about α + bβ one way and α back (the answer is tiny), so
//! 2α + bβ, plus whatever the transfer waited behind others on the way
//! (the member's other transfers on the same link, the receiver's queue).
//! That wait only ever adds, and grows with the load, not with `b`, so
//! each power-of-two size class keeps the **least** round trip of its
//! recent samples (a windowed minimum over the last 16 to 32 of them, as
//! TCP's and BBR's minimum RTT filters do): the sample that waited least.
//! α and β come from a line through the classes' minima (β the slope, α
//! half the intercept), fitted by Siegel's repeated median so that a class
//! whose recent transfers all waited (seen in the AF_XDP bench: 110 ms for
//! 86 KB transfers whose wire time is 4 ms) does not tilt it, once two
//! classes far enough apart have samples. Until then, or if the fit makes no sense (β or α not
//! positive), the configured link stands.
//!
//! Until 2026-11-28 a class kept a moving average. Under a 200 Mbit/s cap
//! the averages of 12 KB to 113 KB transfers were 16–185 ms against
//! 0.5–4.5 ms of wire time (docs/benchmarks.md, issue 21's AF_XDP runs):
//! the fit came out with α of milliseconds or negative, and `auto` fell
//! back to the configured link.

use crate::cost::Link;

/// Size classes: 2^0 .. 2^39 bytes.
const CLASSES: usize = 40;

/// Samples per window of a class's minimum: the least round trip of the
/// current window and the one before stands.
const WINDOW: u64 = 16;

/// The least round trip of one window of a class: (bytes, seconds).
type Least = Option<(f64, f64)>;

/// One size class.
#[derive(Clone, Copy, Debug, Default)]
struct Class {
    /// The window being filled.
    current: Least,
    /// The window before.
    previous: Least,
    /// Samples in the current window.
    in_window: u64,
    /// Samples ever.
    samples: u64,
}

impl Class {
    /// The least round trip of the two windows.
    fn least(&self) -> Least {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(if a.1 <= b.1 { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// The median of `v` (the mean of the two middle values for an even
/// count; NaN for none).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The measured link.
#[derive(Clone, Debug)]
pub struct LinkEstimate {
    classes: [Class; CLASSES],
    samples: u64,
}

impl Default for LinkEstimate {
    fn default() -> LinkEstimate {
        LinkEstimate {
            classes: [Class::default(); CLASSES],
            samples: 0,
        }
    }
}

impl LinkEstimate {
    /// A transfer of `bytes` answered `rtt_s` seconds after it was sent.
    pub fn sample(&mut self, bytes: u64, rtt_s: f64) {
        if !(rtt_s.is_finite() && rtt_s >= 0.0) {
            return;
        }
        let c =
            &mut self.classes[(64 - bytes.max(1).leading_zeros() as usize - 1).min(CLASSES - 1)];
        if c.in_window == WINDOW {
            c.previous = c.current.take();
            c.in_window = 0;
        }
        if c.current.is_none_or(|(_, t)| rtt_s < t) {
            c.current = Some((bytes as f64, rtt_s));
        }
        c.in_window += 1;
        c.samples += 1;
        self.samples += 1;
    }

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Each size class with samples: (the bytes of its least recent round
    /// trip, that round trip in seconds, samples ever).
    pub fn classes(&self) -> Vec<(f64, f64, u64)> {
        self.classes
            .iter()
            .filter_map(|c| c.least().map(|(b, t)| (b, t, c.samples)))
            .collect()
    }

    /// α and β fitted from the samples, if they allow it: two size classes
    /// at least 16 times apart, a positive slope and intercept.
    pub fn fitted(&self) -> Option<Link> {
        let pts: Vec<(f64, f64)> = self.classes.iter().filter_map(Class::least).collect();
        let (lo, hi) = (pts.first()?.0, pts.last()?.0);
        if pts.len() < 2 || hi < 16.0 * lo.max(1.0) {
            return None;
        }
        // Siegel's repeated median: for each point the median slope to the
        // others, then the median of those; the intercept likewise. Up to
        // half the classes may be off the line (a class whose recent
        // transfers all waited) without moving it.
        let beta = median(
            pts.iter()
                .map(|&(x1, y1)| {
                    median(
                        pts.iter()
                            .filter(|p| p.0 != x1)
                            .map(|&(x2, y2)| (y2 - y1) / (x2 - x1))
                            .collect(),
                    )
                })
                .collect(),
        );
        let alpha = median(pts.iter().map(|&(x, y)| y - beta * x).collect()) / 2.0;
        (beta > 0.0 && alpha > 0.0).then_some(Link { alpha, beta })
    }

    /// The link `auto` should use: the fitted one, else `configured`.
    pub fn or(&self, configured: Link) -> Link {
        self.fitted().unwrap_or(configured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_the_size_classes_gives_alpha_and_beta() {
        let mut e = LinkEstimate::default();
        assert_eq!(e.fitted(), None);
        let (alpha, beta) = (50e-6, 4e-9);
        for _ in 0..50 {
            for b in [100u64, 1000, 100_000, 1 << 20] {
                e.sample(b, 2.0 * alpha + b as f64 * beta);
            }
        }
        let l = e.fitted().unwrap();
        assert!(
            (l.alpha - alpha).abs() < 1e-9 && (l.beta - beta).abs() < 1e-13,
            "{l:?}"
        );
        assert_eq!(e.samples(), 200);
    }

    #[test]
    fn transfers_that_waited_behind_others_do_not_bias_the_fit() {
        // 200 Mbit/s (43 ns/B as the bench's cap measures it), α 60 µs; most
        // transfers wait behind others for up to 200 times their wire time,
        // one in eight goes through unqueued.
        let (alpha, beta) = (60e-6, 43e-9);
        let mut e = LinkEstimate::default();
        let mut x = 7u64;
        for i in 0..400u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let b = [1024u64, 2731, 11_908, 27_567, 53_824, 113_360][(i % 6) as usize];
            let wire = 2.0 * alpha + b as f64 * beta;
            let wait = if (x >> 33) % 8 == 0 {
                0.0
            } else {
                wire * ((x >> 40) % 200) as f64
            };
            e.sample(b, wire + wait);
        }
        let l = e.fitted().expect("a fit");
        assert!((l.alpha / alpha - 1.0).abs() < 0.05, "{l:?}");
        assert!((l.beta / beta - 1.0).abs() < 0.05, "{l:?}");
        // The minimum follows the link: when every transfer takes twice as
        // long from now on, two windows later the fit says so.
        for i in 0..(2 * WINDOW * 6) {
            let b = [1024u64, 2731, 11_908, 27_567, 53_824, 113_360][(i % 6) as usize];
            e.sample(b, 2.0 * (2.0 * alpha + b as f64 * beta));
        }
        let l = e.fitted().expect("a fit");
        assert!((l.beta / (2.0 * beta) - 1.0).abs() < 0.05, "{l:?}");
    }

    #[test]
    fn one_size_class_far_off_the_line_does_not_tilt_it() {
        // Round trips on a line 2α + bβ (α 30 µs, β 45 ns/B) but for the
        // 86 KB class, whose recent transfers all waited: an AF_XDP bench
        // run under a 200 Mbit/s cap had its minimum at 110 ms against 4 ms
        // of wire time (docs/benchmarks.md, 2026-11-28). A least-squares
        // line through these points has β 354 ns/B and α 1 ms.
        let mut e = LinkEstimate::default();
        for b in [1024u64, 2731, 11_651, 16_384, 50_533, 85_598, 131_072] {
            let rtt = if b == 85_598 {
                110e-3
            } else {
                60e-6 + b as f64 * 45e-9
            };
            e.sample(b, rtt);
        }
        let l = e.fitted().expect("a fit");
        assert!((l.beta / 45e-9 - 1.0).abs() < 0.01, "{l:?}");
        assert!((l.alpha / 30e-6 - 1.0).abs() < 0.01, "{l:?}");
    }

    #[test]
    fn too_little_or_nonsensical_data_keeps_the_configured_link() {
        let configured = Link {
            alpha: 1e-5,
            beta: 1e-9,
        };
        let mut e = LinkEstimate::default();
        e.sample(1000, 1e-3);
        e.sample(1100, 2e-3);
        assert_eq!(e.or(configured), configured, "one size class only");
        e.sample(1 << 20, 1e-4); // larger but faster: a negative slope
        assert_eq!(e.or(configured), configured);
        e.sample(10, f64::NAN);
        assert_eq!(e.samples(), 3);
    }
}
