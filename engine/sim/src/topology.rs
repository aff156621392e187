//! The simulator's topology mode (seed 003): a broadcast schedule of
//! `mcast-bcast` run on a switched fabric, step by step, counting the links
//! each step's transfers share.
//!
//! Two fabrics: [`Fabric::Switch`] (one switch: transfers between distinct
//! pairs never share a link, so only the one-port rule limits a step) and
//! [`Fabric::Mesh`] (switches in an r×c mesh, one member per switch, member
//! `i` at row `i / c`, column `i % c`, each pair of neighbouring switches
//! joined by one link per direction, frames routed XY: along the row first,
//! then along the column).
//!
//! Links are serialized and shared fairly: in a step, a transfer whose
//! busiest link carries m transfers moves its bytes at 1/m of the link's
//! rate (wormhole routing holds the whole path; the seed's analysis of the
//! naive algorithm prices a conflict the same way). A step lasts
//! α + max over its transfers of (bytes × β × m). A link that two or more
//! transfers of one step want is one *conflict*.
//!
//! The schedule is first checked by `mcast_bcast::check::verify`; a run
//! is deterministic and draws no randomness.

use mcast_bcast::check::verify;
pub use mcast_bcast::cost::{Fabric, Link};
use mcast_bcast::{Schedule, Shape};

/// What a schedule cost on a fabric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Run {
    /// Steps.
    pub steps: usize,
    /// Transfers.
    pub transfers: usize,
    /// Links wanted by two or more transfers of one step, summed over steps.
    pub conflicts: u64,
    /// The most transfers that shared one link in one step.
    pub worst_sharing: u32,
    /// Link traversals: each transfer counts the switch-to-switch links of its
    /// route.
    pub link_hops: u64,
    /// Completion time, seconds.
    pub time: f64,
}

/// Runs `schedule` on `fabric` with `link`'s α and β.
pub fn run(schedule: &Schedule, fabric: Fabric, link: Link) -> Result<Run, String> {
    verify(schedule)?;
    let shape = match fabric {
        Fabric::Mesh(shape) if shape.nodes() != schedule.p => {
            return Err(format!(
                "a {shape} mesh does not hold {} members",
                schedule.p
            ));
        }
        Fabric::Mesh(shape) => Some(shape),
        Fabric::Switch => None,
    };
    let mut load = vec![0u32; schedule.p as usize * 4];
    let mut touched: Vec<usize> = Vec::new();
    let mut out = Run {
        steps: schedule.steps.len(),
        transfers: schedule.transfers(),
        conflicts: 0,
        worst_sharing: 0,
        link_hops: 0,
        time: 0.0,
    };
    let mut path = Vec::new();
    for step in &schedule.steps {
        if let Some(shape) = shape {
            for t in step {
                route(shape, t.from, t.to, &mut path);
                out.link_hops += path.len() as u64;
                for &l in &path {
                    if load[l] == 0 {
                        touched.push(l);
                    }
                    load[l] += 1;
                }
            }
        }
        let mut slowest = 0.0f64;
        for t in step {
            let sharing = match shape {
                Some(shape) => {
                    route(shape, t.from, t.to, &mut path);
                    path.iter().map(|&l| load[l]).max().unwrap_or(1)
                }
                None => 1,
            };
            out.worst_sharing = out.worst_sharing.max(sharing);
            slowest = slowest.max(schedule.bytes(t) as f64 * link.beta * f64::from(sharing));
        }
        out.time += link.alpha + slowest;
        for l in touched.drain(..) {
            if load[l] > 1 {
                out.conflicts += 1;
            }
            load[l] = 0;
        }
    }
    Ok(out)
}

/// The directed links of the XY route from member `a` to member `b`: link
/// `4 × switch + direction` leaves `switch` eastward (0), westward (1),
/// southward (2) or northward (3).
fn route(shape: Shape, a: u32, b: u32, path: &mut Vec<usize>) {
    path.clear();
    let (r1, c1) = shape.at(a);
    let (r2, c2) = shape.at(b);
    let link = |r, c, dir| 4 * shape.node(r, c) as usize + dir;
    let mut c = c1;
    while c != c2 {
        if c < c2 {
            path.push(link(r1, c, 0));
            c += 1;
        } else {
            path.push(link(r1, c, 1));
            c -= 1;
        }
    }
    let mut r = r1;
    while r != r2 {
        if r < r2 {
            path.push(link(r, c2, 2));
            r += 1;
        } else {
            path.push(link(r, c2, 3));
            r -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcast_bcast::cost::Model;
    use mcast_bcast::{choose, plan, Algorithm};

    const LINK: Link = Link {
        alpha: 10e-6,
        beta: 1e-9,
    };

    fn on_mesh(alg: Algorithm, shape: Shape, root: u32, len: u64) -> Run {
        let s = plan(alg, shape, root, len).unwrap();
        run(&s, Fabric::Mesh(shape), LINK).unwrap()
    }

    #[test]
    fn xy_routes_go_along_the_row_then_along_the_column() {
        let shape = Shape { rows: 3, cols: 4 };
        let mut path = Vec::new();
        // (0,0) → (2,3): east thrice along row 0, then south twice in column 3.
        route(shape, 0, 11, &mut path);
        assert_eq!(path, vec![0, 4, 8, 12 + 2, 28 + 2]);
        route(shape, 11, 0, &mut path);
        assert_eq!(path, vec![44 + 1, 40 + 1, 36 + 1, 32 + 3, 16 + 3]);
    }

    #[test]
    fn the_naive_hypercube_conflicts_on_a_mesh_and_its_reordering_does_not() {
        for (rows, cols) in [(4, 4), (2, 8), (8, 8), (16, 32)] {
            let shape = Shape { rows, cols };
            for root in [0, 5, shape.nodes() - 1] {
                let naive = on_mesh(Algorithm::HypercubeNaive, shape, root, 1 << 20);
                let free = on_mesh(Algorithm::Hypercube, shape, root, 1 << 20);
                assert!(naive.conflicts > 0, "{shape} root {root}");
                assert_eq!(free.conflicts, 0, "{shape} root {root}");
                // The seed: log p α + (r + c − 2) nβ against log p (α + nβ).
                let m = Model {
                    link: LINK,
                    fabric: Fabric::Mesh(shape),
                };
                let model = m.time(Algorithm::HypercubeNaive, shape.nodes(), 1 << 20);
                assert!(
                    (naive.time / model - 1.0).abs() < 1e-9,
                    "{shape}: {} vs {model}",
                    naive.time
                );
            }
        }
    }

    #[test]
    fn rsbcast_never_conflicts_under_xy_routing_whatever_the_shape_and_root() {
        for p in 2..=72u32 {
            let mut shapes = vec![Shape::line(p), Shape::near_square(p)];
            if p % 3 == 0 {
                shapes.push(Shape {
                    rows: 3,
                    cols: p / 3,
                });
                shapes.push(Shape {
                    rows: p / 3,
                    cols: 3,
                });
            }
            for shape in shapes {
                for root in 0..p {
                    let r = on_mesh(Algorithm::RsBcast, shape, root, 1000);
                    assert_eq!(r.conflicts, 0, "rsbcast p {p} on {shape} from {root}");
                    for alg in [Algorithm::ScatterCollect, Algorithm::ScatterCollect2d] {
                        let r = on_mesh(alg, shape, root, 1000);
                        assert_eq!(r.conflicts, 0, "{alg} p {p} on {shape} from {root}");
                    }
                }
            }
        }
    }

    #[test]
    fn def_from_the_corner_keeps_its_two_fences_apart_on_the_mesh() {
        for rows in 2..=9u32 {
            for cols in 2..=9u32 {
                let shape = Shape { rows, cols };
                for k in [1, 2, 7, 40] {
                    let r = on_mesh(Algorithm::Def { segments: k }, shape, 0, 1 << 20);
                    assert_eq!(r.conflicts, 0, "def:{k} on {shape}");
                    // Neighbours only: each transfer crosses one link.
                    assert_eq!(r.link_hops, r.transfers as u64, "def:{k} on {shape}");
                    let m = Model {
                        link: LINK,
                        fabric: Fabric::Mesh(shape),
                    };
                    let model = m.time(Algorithm::Def { segments: k }, shape.nodes(), 1 << 20);
                    assert!((r.time / model - 1.0).abs() < 0.01, "{shape} k {k}");
                }
            }
        }
    }

    #[test]
    fn mst_by_corresponding_position_conflicts_on_some_meshes_where_rsbcast_does_not() {
        let mut found = 0;
        for p in 2..=64u32 {
            let shape = Shape::near_square(p);
            for root in 0..p {
                if on_mesh(Algorithm::Mst, shape, root, 1000).conflicts > 0 {
                    found += 1;
                    assert_eq!(on_mesh(Algorithm::RsBcast, shape, root, 1000).conflicts, 0);
                }
            }
        }
        assert!(found > 0, "the seed's case (5) never arose");
    }

    #[test]
    fn conflict_free_runs_take_the_models_time_and_auto_is_never_far_from_the_best() {
        for p in [4u32, 6, 16, 24, 64, 100] {
            let shape = Shape::near_square(p);
            let fabric = Fabric::Mesh(shape);
            let m = Model { link: LINK, fabric };
            for len in [64u64, 1 << 10, 1 << 14, 1 << 17, 1 << 20] {
                let k = m.best_segments(p, len);
                let mut best = f64::INFINITY;
                let mut algs = vec![
                    Algorithm::Iterative,
                    Algorithm::RsBcast,
                    Algorithm::Chain { segments: k },
                    Algorithm::ScatterCollect,
                    Algorithm::ScatterCollect2d,
                    Algorithm::Def {
                        segments: m.best_def_segments(p, len),
                    },
                ];
                if p.is_power_of_two() {
                    algs.push(Algorithm::Hypercube);
                }
                for alg in algs {
                    let r = on_mesh(alg, shape, 0, len);
                    let model = m.time(alg, p, len);
                    if r.conflicts == 0 {
                        let ratio = r.time / model;
                        assert!((0.9..=1.1).contains(&ratio), "{alg} p {p} {len} B: {ratio}");
                    }
                    best = best.min(r.time);
                }
                let auto = choose(&m, p, len);
                let r = on_mesh(auto.algorithm, shape, 0, len);
                assert!(
                    r.time <= best * 1.1,
                    "auto {} p {p} {len} B: {} > {best}",
                    auto.algorithm,
                    r.time
                );
            }
        }
    }

    #[test]
    fn a_switch_has_no_shared_links_and_a_wrong_mesh_is_refused() {
        let s = plan(
            Algorithm::HypercubeNaive,
            Shape { rows: 4, cols: 4 },
            0,
            1000,
        )
        .unwrap();
        let r = run(&s, Fabric::Switch, LINK).unwrap();
        assert_eq!((r.conflicts, r.worst_sharing, r.link_hops), (0, 1, 0));
        let e = run(&s, Fabric::Mesh(Shape { rows: 3, cols: 5 }), LINK).unwrap_err();
        assert!(e.contains("3x5"), "{e}");
    }
}
