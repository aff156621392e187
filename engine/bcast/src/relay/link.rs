//! What the links cost, measured as the relay runs: α and β for `auto`
//! (seed 003's model, [`crate::cost`]), from the round trips of transfers
//! whose receiver answers (GOT).
//!
//! A sample is a transfer of `b` bytes and the time from its sending to
//! its answer: about α + bβ one way and α back (the answer is tiny), so
//! 2α + bβ. Samples are kept per power-of-two size class as a moving
//! average; α and β come from a least-squares line through the classes'
//! averages (β the slope, α half the intercept) once two classes far
//! enough apart have samples. Until then, or if the fit makes no sense
//! (β or α not positive), the configured link stands.

use crate::cost::Link;

/// Size classes: 2^0 .. 2^39 bytes.
const CLASSES: usize = 40;

/// The weight of a new sample in its class's average.
const GAIN: f64 = 0.125;

/// The measured link.
#[derive(Clone, Debug)]
pub struct LinkEstimate {
    /// Per size class: (average bytes, average round trip in seconds,
    /// samples).
    classes: [(f64, f64, u64); CLASSES],
    samples: u64,
}

impl Default for LinkEstimate {
    fn default() -> LinkEstimate {
        LinkEstimate {
            classes: [(0.0, 0.0, 0); CLASSES],
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
        let c = (64 - bytes.max(1).leading_zeros() as usize - 1).min(CLASSES - 1);
        let (b, t, n) = &mut self.classes[c];
        if *n == 0 {
            (*b, *t) = (bytes as f64, rtt_s);
        } else {
            *b += GAIN * (bytes as f64 - *b);
            *t += GAIN * (rtt_s - *t);
        }
        *n += 1;
        self.samples += 1;
    }

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Each size class with samples: (average bytes, average round trip in
    /// seconds, samples).
    pub fn classes(&self) -> Vec<(f64, f64, u64)> {
        self.classes.iter().copied().filter(|c| c.2 > 0).collect()
    }

    /// α and β fitted from the samples, if they allow it: two size classes
    /// at least 16 times apart, a positive slope and intercept.
    pub fn fitted(&self) -> Option<Link> {
        let pts: Vec<(f64, f64)> = self
            .classes
            .iter()
            .filter(|c| c.2 > 0)
            .map(|c| (c.0, c.1))
            .collect();
        let (lo, hi) = (pts.first()?.0, pts.last()?.0);
        if pts.len() < 2 || hi < 16.0 * lo.max(1.0) {
            return None;
        }
        let k = pts.len() as f64;
        let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
        let (sxx, sxy) = pts
            .iter()
            .fold((0.0, 0.0), |a, p| (a.0 + p.0 * p.0, a.1 + p.0 * p.1));
        let beta = (k * sxy - sx * sy) / (k * sxx - sx * sx);
        let alpha = (sy - beta * sx) / k / 2.0;
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
