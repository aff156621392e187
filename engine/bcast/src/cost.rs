//! The α–β cost model of seed 003 and the automatic choice of algorithm.
//!
//! A transfer of n bytes over one link costs α + nβ: α the start-up (the
//! sender's and receiver's per-transfer work and the link's latency), β the
//! time per byte (the inverse of the bandwidth). A lockstep step costs its
//! slowest transfer. The formulas below are the seed's, with ⌈·⌉ where the
//! group size is not a power of two and the piece sizes of the schedules
//! (pieces differ by a byte at most, so a piece of n/k bytes is ⌈n/k⌉):
//!
//! | algorithm | time |
//! |---|---|
//! | iterative | (p − 1)(α + nβ) |
//! | hypercube, mst, rsbcast (no conflicts) | ⌈log₂ p⌉(α + nβ) |
//! | hypercube-naive on an r×c mesh | log₂ p · α + (r − 1 + c − 1) nβ |
//! | chain with k segments | (p + k − 2)(α + ⌈n/k⌉β), best k ≈ √((p − 2) nβ / α) |
//! | def with k segments, r, c ≥ 2 | (2k + r + c − 3 + [k even])(α + ⌈n/k⌉β), best k ≈ √((r + c − 3) nβ / 2α) |
//! | scatter-collect | ⌈log₂ p⌉α + S(p)·nβ + (p − 1)(α + ⌈n/p⌉β) |
//! | scatter-collect-2d | (⌈log₂ r⌉ + ⌈log₂ c⌉ + r + c − 2)α + 2(p − 1)/p · nβ |
//!
//! DEF sends each segment twice from the root (east, then south), so its
//! pipeline fills at one segment per two steps: a member of row 0 or
//! column 0 has a single neighbour to receive from, whose link to it works
//! every other step. The seed counts r + c + k steps; under the one-port
//! rule of these schedules (one send and one receive per member and step)
//! no schedule on the mesh's east and south links does better than 2k − 1
//! steps for the root's east neighbour alone.
//!
//! S(p) is the scatter's share: 1/2 + 1/4 + … = (p − 1)/p for a power of two,
//! in general the largest block sent at each halving step, summed.
//!
//! [`choose`] picks, for one message, the algorithm the model says is
//! fastest among those that never conflict on the fabric (the group option
//! `auto`, as MPICH and Open MPI choose their broadcast), and says why.

use crate::plan::{def_steps, Algorithm, Shape};

/// The measured cost of one link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// α: seconds per transfer, whatever its size.
    pub alpha: f64,
    /// β: seconds per byte.
    pub beta: f64,
}

/// The group's fabric, as far as the model needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fabric {
    /// One switch, or any fabric where transfers between distinct pairs
    /// never share a link (full bisection).
    Switch,
    /// An r×c mesh of switches, one member per switch, XY routing.
    Mesh(Shape),
}

/// The α–β model for one fabric and link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// The link's α and β.
    pub link: Link,
    /// Where the members sit.
    pub fabric: Fabric,
}

fn log2_ceil(x: u32) -> f64 {
    f64::from(x.max(1).next_power_of_two().trailing_zeros())
}

/// The bytes of the largest block sent at each step of a recursive-halving
/// scatter over `p` members (the root keeps the left half), summed.
fn scatter_bytes(p: u32, n: f64) -> f64 {
    // The first step sends the right half, ⌊p/2⌋ pieces; the larger half
    // (⌈p/2⌉ members) then goes on.
    let (mut m, mut total) = (p, 0.0);
    while m > 1 {
        total += f64::from(m / 2) * n / f64::from(p);
        m = m.div_ceil(2);
    }
    total
}

impl Model {
    /// The model's time of `alg` broadcasting `n` bytes to `p` members.
    pub fn time(&self, alg: Algorithm, p: u32, n: u64) -> f64 {
        let Link { alpha, beta } = self.link;
        let nf = n as f64;
        let pf = f64::from(p);
        let whole = alpha + nf * beta;
        let piece = |k: u32| alpha + (n.div_ceil(u64::from(k.max(1))) as f64) * beta;
        if p < 2 {
            return 0.0;
        }
        match alg {
            Algorithm::Iterative => (pf - 1.0) * whole,
            Algorithm::HypercubeNaive => match self.fabric {
                Fabric::Mesh(s) => {
                    log2_ceil(p) * alpha + f64::from(s.rows - 1 + s.cols - 1) * nf * beta
                }
                Fabric::Switch => log2_ceil(p) * whole,
            },
            Algorithm::Hypercube | Algorithm::Mst | Algorithm::RsBcast => log2_ceil(p) * whole,
            Algorithm::Chain { segments } => f64::from(p + segments - 2) * piece(segments),
            Algorithm::Def { segments } => {
                f64::from(def_steps(self.shape(p), segments)) * piece(segments)
            }
            Algorithm::ScatterCollect => {
                log2_ceil(p) * alpha + scatter_bytes(p, nf) * beta + (pf - 1.0) * piece(p)
            }
            Algorithm::ScatterCollect2d => {
                let s = self.shape(p);
                let (r, c) = (s.rows, s.cols);
                let row_block = (n as f64 / f64::from(r)).ceil();
                (log2_ceil(r) + log2_ceil(c)) * alpha
                    + scatter_bytes(r, nf) * beta
                    + scatter_bytes(c, row_block) * beta
                    + f64::from(c - 1) * piece(p)
                    + f64::from(r - 1) * (alpha + (n.div_ceil(u64::from(r)) as f64) * beta)
            }
        }
    }

    /// The mesh shape for `p` members: the fabric's, or the squarest.
    pub fn shape(&self, p: u32) -> Shape {
        match self.fabric {
            Fabric::Mesh(s) if s.nodes() == p => s,
            _ => Shape::near_square(p),
        }
    }

    /// The number of pipeline segments that minimizes the chain's time:
    /// the seed's optimum √((p − 2) nβ / α), the best of the integers
    /// around it, at least 1 and at most one per byte.
    pub fn best_segments(&self, p: u32, n: u64) -> u32 {
        let fill = f64::from(p.saturating_sub(2));
        self.best_k(fill, 1.0, n, |k| {
            self.time(Algorithm::Chain { segments: k }, p, n)
        })
    }

    /// The number of DEF segments that minimizes its time on the model's
    /// mesh for `p` members: √((r + c − 3) nβ / 2α) (the minimum of
    /// (2k + r + c − 3)(α + nβ/k)), the best of the integers around it.
    pub fn best_def_segments(&self, p: u32, n: u64) -> u32 {
        let s = self.shape(p);
        if s.rows < 2 {
            return self.best_segments(p, n);
        }
        let fill = f64::from(s.rows + s.cols - 3);
        self.best_k(fill, 2.0, n, |k| {
            self.time(Algorithm::Def { segments: k }, p, n)
        })
    }

    /// The k minimizing a pipeline of (`per` · k + `fill`) steps of
    /// α + ⌈n/k⌉β: near √(fill · nβ / (per · α)), the best of the integers
    /// around it by `time` (⌈n/k⌉ and DEF's parity make it jagged); at
    /// least 1 and at most one segment per byte.
    fn best_k(&self, fill: f64, per: f64, n: u64, time: impl Fn(u32) -> f64) -> u32 {
        let Link { alpha, beta } = self.link;
        let real = if alpha > 0.0 {
            (fill * n as f64 * beta / (per * alpha)).sqrt()
        } else {
            n as f64
        };
        let cap = n.clamp(1, u64::from(u32::MAX)) as u32;
        let lo = (real.floor() as u32).clamp(1, cap);
        (lo.saturating_sub(1).max(1)..=(lo + 2).min(cap))
            .min_by(|&a, &b| time(a).total_cmp(&time(b)))
            .unwrap_or(lo)
    }

    /// The algorithms `auto` chooses among: those that never put two
    /// transfers of a step on one link, with the pipelines' best k. The 2-D
    /// algorithms arrange the members as the fabric's mesh, or on a switch
    /// as the squarest logical one (their rings and fences are shorter
    /// there too). DEF only on a switch, where the logical mesh has two
    /// rows or more: on a mesh fabric a root off the corner makes its
    /// wrapping transfers cross the mesh, and they may conflict.
    pub fn candidates(&self, p: u32, n: u64) -> Vec<Algorithm> {
        let mut v = vec![
            Algorithm::RsBcast,
            Algorithm::Chain {
                segments: self.best_segments(p, n),
            },
            Algorithm::ScatterCollect,
            Algorithm::ScatterCollect2d,
        ];
        if self.fabric == Fabric::Switch && self.shape(p).rows >= 2 {
            v.push(Algorithm::Def {
                segments: self.best_def_segments(p, n),
            });
        }
        v
    }
}

/// What `auto` chose for one message, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Its modelled time, seconds.
    pub time: f64,
    /// Every candidate with its modelled time, fastest first.
    pub considered: Vec<(Algorithm, f64)>,
}

impl Choice {
    /// One line for `mcast stat` and the bench: the choice and its rivals.
    pub fn why(&self) -> String {
        let rivals: Vec<String> = self
            .considered
            .iter()
            .map(|(a, t)| format!("{a} {:.1} us", t * 1e6))
            .collect();
        format!("{} (model: {})", self.algorithm, rivals.join(", "))
    }
}

/// The algorithm the model says is fastest for `n` bytes to `p` members.
pub fn choose(model: &Model, p: u32, n: u64) -> Choice {
    let mut considered: Vec<(Algorithm, f64)> = model
        .candidates(p, n)
        .into_iter()
        .map(|a| (a, model.time(a, p, n)))
        .collect();
    considered.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (algorithm, time) = considered[0];
    Choice {
        algorithm,
        time,
        considered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(fabric: Fabric) -> Model {
        Model {
            link: Link {
                alpha: 10e-6,
                beta: 1e-9,
            },
            fabric,
        }
    }

    #[test]
    fn small_messages_take_the_tree_and_large_ones_a_pipeline_or_scatter_collect() {
        let m = model(Fabric::Switch);
        assert_eq!(choose(&m, 64, 64).algorithm, Algorithm::RsBcast);
        let big = choose(&m, 64, 64 << 20).algorithm;
        assert!(
            matches!(big, Algorithm::Chain { .. } | Algorithm::ScatterCollect),
            "{big}"
        );
        let c = choose(&m, 64, 64);
        assert!(
            c.why().starts_with("rsbcast (model: rsbcast"),
            "{}",
            c.why()
        );
        assert_eq!(c.considered.len(), 5);
        let mesh = model(Fabric::Mesh(Shape { rows: 8, cols: 8 }));
        assert_eq!(
            choose(&mesh, 64, 64).considered.len(),
            4,
            "no DEF on a mesh"
        );
        // On one switch the 2-D rings are shorter too: at 1,024 members and
        // 4 MiB they beat the 1-D ring's 1,023 start-ups.
        assert_eq!(
            choose(&m, 1024, 4 << 20).algorithm,
            Algorithm::ScatterCollect2d
        );
    }

    #[test]
    fn the_best_segment_count_is_a_minimum_of_the_chains_time() {
        let m = model(Fabric::Switch);
        for (p, n) in [(6, 1 << 20), (100, 64 << 20), (4, 1000), (1024, 64)] {
            let k = m.best_segments(p, n);
            let t = |k| m.time(Algorithm::Chain { segments: k }, p, n);
            // ⌈n/k⌉ makes the time jagged near the optimum: the chosen k is
            // within 0.1 % of the best of every k up to four times as many.
            let best = (1..=4 * k).map(t).fold(f64::INFINITY, f64::min);
            assert!(t(k) <= best * 1.001, "p {p} n {n} k {k}: {} > {best}", t(k));
        }
        assert_eq!(m.best_segments(1024, 1), 1);
        for (p, n) in [
            (6, 1 << 20),
            (100, 64 << 20),
            (4, 1000),
            (1024, 64),
            (64, 300_000),
        ] {
            let k = m.best_def_segments(p, n);
            let t = |k| m.time(Algorithm::Def { segments: k }, p, n);
            let best = (1..=4 * k).map(t).fold(f64::INFINITY, f64::min);
            assert!(
                t(k) <= best * 1.001,
                "def p {p} n {n} k {k}: {} > {best}",
                t(k)
            );
        }
    }

    #[test]
    fn the_naive_hypercube_pays_for_its_conflicts_on_a_mesh_only() {
        let s = Shape { rows: 4, cols: 4 };
        let (sw, mesh) = (model(Fabric::Switch), model(Fabric::Mesh(s)));
        let n = 1 << 20;
        assert_eq!(
            sw.time(Algorithm::HypercubeNaive, 16, n),
            sw.time(Algorithm::Hypercube, 16, n)
        );
        // log p α + (r + c − 2) nβ against log p (α + nβ): 6 nβ against 4 nβ.
        let ratio =
            mesh.time(Algorithm::HypercubeNaive, 16, n) / mesh.time(Algorithm::Hypercube, 16, n);
        assert!((ratio - 1.48).abs() < 0.02, "{ratio}");
    }

    #[test]
    fn scatter_shares_sum_to_p_minus_one_over_p_for_powers_of_two() {
        for p in [2u32, 4, 64, 1024] {
            let want = f64::from(p - 1) / f64::from(p);
            assert!((scatter_bytes(p, 1.0) - want).abs() < 1e-12);
        }
        assert!((scatter_bytes(5, 5.0) - 4.0).abs() < 1e-12);
    }
}
