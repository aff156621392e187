//! The checker of schedules: a schedule is a broadcast only if every member
//! ends with every piece, no member forwards a piece before it holds it, and
//! no member sends or receives more than one transfer in a step (the seed's
//! one-port model, which its step counts and cost formulas assume).

use crate::plan::Schedule;

/// What a schedule that passed [`verify`] moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Steps.
    pub steps: usize,
    /// Transfers.
    pub transfers: usize,
    /// Bytes moved by all transfers (the root's message counts once per
    /// member that receives it, plus any piece received twice).
    pub bytes: u64,
}

/// Checks `s` step by step; the error names the step and the transfer.
pub fn verify(s: &Schedule) -> Result<Verified, String> {
    let p = s.p as usize;
    let pieces = s.pieces as usize;
    let mut held: Vec<Bits> = (0..p).map(|_| Bits::new(pieces)).collect();
    held[s.root as usize].set_all();
    let mut sent_in = vec![usize::MAX; p];
    let mut got_in = vec![usize::MAX; p];
    let mut arriving = Vec::new();
    let mut bytes = 0;
    for (step, transfers) in s.steps.iter().enumerate() {
        arriving.clear();
        for t in transfers {
            let bad = |why: &str| format!("{} step {step}, transfer {t:?}: {why}", s.algorithm);
            let (from, to) = (t.from as usize, t.to as usize);
            if from >= p || to >= p || from == to {
                return Err(bad("not between two different members"));
            }
            let end = t.first as usize + t.count as usize;
            if t.count == 0 || end > pieces {
                return Err(bad("carries no piece or pieces beyond the message"));
            }
            if sent_in[from] == step || got_in[to] == step {
                return Err(bad("a member sends or receives twice in one step"));
            }
            sent_in[from] = step;
            got_in[to] = step;
            if !held[from].has(t.first as usize..end) {
                return Err(bad("the sender does not hold what it sends"));
            }
            bytes += s.bytes(t);
            arriving.push((to, t.first as usize..end));
        }
        for (to, r) in arriving.drain(..) {
            held[to].set(r);
        }
    }
    if let Some(m) = held.iter().position(|h| !h.full()) {
        return Err(format!(
            "{}: member {m} does not hold the whole message at the end",
            s.algorithm
        ));
    }
    Ok(Verified {
        steps: s.steps.len(),
        transfers: s.transfers(),
        bytes,
    })
}

/// Which pieces a member holds.
struct Bits {
    words: Vec<u64>,
    len: usize,
}

impl Bits {
    fn new(len: usize) -> Bits {
        Bits {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    fn set_all(&mut self) {
        self.set(0..self.len);
    }

    fn set(&mut self, r: std::ops::Range<usize>) {
        for i in r {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    fn has(&self, r: std::ops::Range<usize>) -> bool {
        r.into_iter()
            .all(|i| self.words[i / 64] & (1 << (i % 64)) != 0)
    }

    fn full(&self) -> bool {
        self.has(0..self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, Algorithm, Shape, Transfer};

    /// Every algorithm, the pipelines with several segment counts.
    fn all() -> Vec<Algorithm> {
        let mut v = crate::plan::every(7).to_vec();
        v.extend([1, 2, 9].map(|segments| Algorithm::Def { segments }));
        v
    }

    #[test]
    fn every_algorithm_broadcasts_from_every_root_for_every_group_size_and_shape() {
        for p in 1..=40u32 {
            let shapes = [Shape::line(p), Shape::near_square(p)];
            for shape in shapes {
                for root in 0..p {
                    for alg in all() {
                        let s = match plan(alg, shape, root, 1000) {
                            Ok(s) => s,
                            Err(_) => {
                                assert!(!p.is_power_of_two());
                                continue;
                            }
                        };
                        let v =
                            verify(&s).unwrap_or_else(|e| panic!("p {p} {shape} root {root}: {e}"));
                        if p > 1 {
                            assert!(
                                v.bytes >= 1000 * u64::from(p - 1),
                                "{alg} p {p}: too few bytes"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_tree_algorithms_take_ceil_log2_p_steps() {
        for p in 2..=200u32 {
            let want = (p as f64).log2().ceil() as usize;
            for alg in [Algorithm::Mst, Algorithm::RsBcast] {
                assert_eq!(
                    plan(alg, Shape::line(p), p / 3, 64).unwrap().steps.len(),
                    want,
                    "{alg} p {p}"
                );
            }
        }
    }

    fn one_step(transfers: Vec<Transfer>, p: u32, pieces: u32) -> Schedule {
        Schedule {
            algorithm: Algorithm::Mst,
            p,
            root: 0,
            len: 100,
            pieces,
            steps: vec![transfers],
        }
    }

    #[test]
    fn forwarding_what_is_not_held_or_sending_twice_in_a_step_is_caught() {
        let t = |from, to| Transfer {
            from,
            to,
            first: 0,
            count: 1,
        };
        // Member 1 forwards in the step it receives.
        let e = verify(&one_step(vec![t(0, 1), t(1, 2)], 3, 1)).unwrap_err();
        assert!(e.contains("does not hold"), "{e}");
        let e = verify(&one_step(vec![t(0, 1), t(0, 2)], 3, 1)).unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = verify(&one_step(vec![t(0, 1)], 3, 1)).unwrap_err();
        assert!(e.contains("member 2"), "{e}");
        let e = verify(&one_step(
            vec![Transfer {
                from: 0,
                to: 1,
                first: 1,
                count: 1,
            }],
            2,
            1,
        ))
        .unwrap_err();
        assert!(e.contains("beyond"), "{e}");
        assert!(verify(&one_step(vec![t(0, 1)], 2, 1)).is_ok());
    }
}
