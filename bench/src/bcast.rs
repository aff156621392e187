//! `mcast-bench bcast`: seed 003's broadcast algorithms on the simulator's
//! topology mode, beside the α–β model: for every group size and message
//! size, each algorithm's steps, link conflicts and completion time, what
//! `auto` chose, and whether the seed's claims hold.

use std::fmt::Write as _;
use std::path::Path;

use mcast_bcast::cost::{choose, Model};
use mcast_bcast::{plan, Algorithm, Shape};
use mcast_sim::topology::{run as run_on, Fabric, Link, Run};

/// Parses `64`, `16K`, `4M`, `1G` (powers of 1024).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => {
            return Err(format!(
                "`{s}`: a size is a number with an optional K, M or G (powers of 1024)"
            ))
        }
    };
    let n: u64 = digits.parse().map_err(|_| format!("`{s}`: not a size"))?;
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| format!("`{s}`: too large"))
}

/// Parses each of `sizes` ([`parse_size`]).
pub(crate) fn parse_sizes(sizes: &[String]) -> Result<Vec<u64>, String> {
    sizes.iter().map(|s| parse_size(s)).collect()
}

/// The fabric the table runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FabricKind {
    /// The squarest r×c mesh of switches for each group size, XY routing.
    Mesh,
    /// One switch: no link is shared.
    Switch,
}

/// The settings of one table.
#[derive(Debug)]
pub(crate) struct Settings<'a> {
    pub members: &'a [u32],
    pub sizes: &'a [u64],
    pub fabric: FabricKind,
    pub link: Link,
    pub json: Option<&'a Path>,
}

/// One cell: an algorithm at one (p, size).
struct Cell {
    algorithm: Algorithm,
    run: Run,
    model: f64,
}

/// The algorithms of a row: the pipelines with the model's best k, DEF
/// where the mesh has two rows or more.
fn algorithms(model: &Model, p: u32, n: u64) -> Vec<Algorithm> {
    let mut v = vec![Algorithm::Iterative];
    if p.is_power_of_two() {
        v.extend([Algorithm::HypercubeNaive, Algorithm::Hypercube]);
    }
    v.extend([
        Algorithm::Mst,
        Algorithm::RsBcast,
        Algorithm::Chain {
            segments: model.best_segments(p, n),
        },
        Algorithm::ScatterCollect,
        Algorithm::ScatterCollect2d,
    ]);
    if model.shape(p).rows >= 2 {
        v.push(Algorithm::Def {
            segments: model.best_def_segments(p, n),
        });
    }
    v
}

fn human_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

pub(crate) fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// Runs the table, prints it, and returns whether every claim held.
pub(crate) fn run(cfg: &Settings<'_>) -> Result<bool, String> {
    let names = [
        "iterative",
        "hypercube-naive",
        "hypercube",
        "mst",
        "rsbcast",
        "chain",
        "scatter-collect",
        "scatter-collect-2d",
        "def",
    ];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# seed 003 on the simulator's topology mode: {} fabric, alpha {:.1} us, beta {:.3} ns/B",
        match cfg.fabric {
            FabricKind::Mesh => "r x c mesh (XY routing)",
            FabricKind::Switch => "one-switch",
        },
        cfg.link.alpha * 1e6,
        cfg.link.beta * 1e9
    );
    let _ = writeln!(
        out,
        "# each cell: completion time [measured/model], +N = N link conflicts; '-' = needs a power of two"
    );
    let _ = writeln!(
        out,
        "\n| p | mesh | size | {} | auto | auto/best |",
        names.join(" | ")
    );
    let _ = writeln!(out, "|{}", "---|".repeat(names.len() + 5));
    let mut json = Vec::new();
    let (mut worst_model, mut worst_auto) = (0.0f64, 0.0f64);
    let (mut naive_conflict_free_meshes, mut rsbcast_conflicts) = (Vec::new(), 0u64);
    for &p in cfg.members {
        if p < 2 {
            return Err(format!(
                "a broadcast group needs 2 or more members, not {p}"
            ));
        }
        let shape = Shape::near_square(p);
        let fabric = match cfg.fabric {
            FabricKind::Mesh => Fabric::Mesh(shape),
            FabricKind::Switch => Fabric::Switch,
        };
        let model = Model {
            link: cfg.link,
            fabric,
        };
        for &n in cfg.sizes {
            let mut cells = Vec::new();
            for alg in algorithms(&model, p, n) {
                let schedule = plan(alg, shape, 0, n).map_err(|e| e.to_string())?;
                let run = run_on(&schedule, fabric, cfg.link)?;
                cells.push(Cell {
                    algorithm: alg,
                    run,
                    model: model.time(alg, p, n),
                });
            }
            let best = cells
                .iter()
                .map(|c| c.run.time)
                .fold(f64::INFINITY, f64::min);
            let choice = choose(&model, p, n);
            let auto = cells
                .iter()
                .find(|c| c.algorithm == choice.algorithm)
                .map(|c| c.run.time)
                .ok_or("auto chose an algorithm the table does not run")?;
            worst_auto = worst_auto.max(auto / best);
            let mut row = format!("| {p} | {shape} | {} |", human_size(n));
            for name in names {
                match cells.iter().find(|c| c.algorithm.name() == name) {
                    None => row.push_str(" - |"),
                    Some(c) => {
                        let ratio = c.run.time / c.model;
                        if c.run.conflicts == 0 {
                            worst_model = worst_model.max((ratio - 1.0).abs());
                        }
                        let k = match c.algorithm {
                            Algorithm::Chain { segments } | Algorithm::Def { segments } => {
                                format!(" k={segments}")
                            }
                            _ => String::new(),
                        };
                        let conflicts = match c.run.conflicts {
                            0 => String::new(),
                            n => format!(" +{n}"),
                        };
                        let _ = write!(
                            row,
                            " {}{k} [{ratio:.2}]{conflicts} |",
                            human_time(c.run.time)
                        );
                        match (c.algorithm, c.run.conflicts) {
                            (Algorithm::HypercubeNaive, 0) if shape.rows > 1 && shape.cols > 2 => {
                                naive_conflict_free_meshes.push(format!("{p} {}", human_size(n)));
                            }
                            (Algorithm::RsBcast, c) => rsbcast_conflicts += c,
                            _ => {}
                        }
                    }
                }
            }
            let _ = writeln!(row, " {} | {:.3} |", choice.algorithm, auto / best);
            out.push_str(&row);
            for c in &cells {
                json.push(serde_json::json!({
                    "p": p,
                    "mesh": shape.to_string(),
                    "bytes": n,
                    "algorithm": c.algorithm.to_string(),
                    "steps": c.run.steps,
                    "transfers": c.run.transfers,
                    "conflicts": c.run.conflicts,
                    "worst_sharing": c.run.worst_sharing,
                    "link_hops": c.run.link_hops,
                    "time_s": c.run.time,
                    "model_s": c.model,
                    "auto": c.algorithm == choice.algorithm,
                    "auto_why": choice.why(),
                }));
            }
        }
    }
    let _ = writeln!(
        out,
        "\n# auto's choice by message size (the model, sizes in powers of two from 64 B to 64 MiB)"
    );
    for &p in cfg.members {
        let model = Model {
            link: cfg.link,
            fabric: match cfg.fabric {
                FabricKind::Mesh => Fabric::Mesh(Shape::near_square(p)),
                FabricKind::Switch => Fabric::Switch,
            },
        };
        let _ = writeln!(out, "p {p}: {}", crossovers(&model, p));
    }
    let _ = writeln!(out);
    let mut ok = true;
    let mut claim = |met: bool, text: String| {
        ok &= met;
        let _ = writeln!(out, "{} {text}", if met { "met:    " } else { "NOT MET:" });
    };
    claim(
        worst_model <= 0.10,
        format!(
            "conflict-free runs within 10 % of the model (worst {:.1} %)",
            worst_model * 100.0
        ),
    );
    claim(
        worst_auto <= 1.10,
        format!(
            "auto within 10 % of the best algorithm in every cell (worst {:.1} %)",
            (worst_auto - 1.0) * 100.0
        ),
    );
    if cfg.fabric == FabricKind::Mesh {
        claim(
            rsbcast_conflicts == 0,
            format!("rsbcast: {rsbcast_conflicts} link conflicts"),
        );
        claim(
            naive_conflict_free_meshes.is_empty(),
            format!(
                "hypercube-naive conflicts on every mesh of 2+ rows and 3+ columns{}",
                if naive_conflict_free_meshes.is_empty() {
                    String::new()
                } else {
                    format!(" (not on {})", naive_conflict_free_meshes.join(", "))
                }
            ),
        );
    }
    print!("{out}");
    if let Some(path) = cfg.json {
        let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(ok)
}

/// Where `auto`'s choice changes as the message grows: "rsbcast to 32 KiB,
/// scatter-collect-2d to 256 KiB, chain above" (the pipelines' k grows
/// with the size and is left out).
fn crossovers(model: &Model, p: u32) -> String {
    let mut spans: Vec<(&'static str, u64)> = Vec::new();
    for shift in 6..=26 {
        let n = 1u64 << shift;
        let name = choose(model, p, n).algorithm.name();
        match spans.last_mut() {
            Some((last, upto)) if *last == name => *upto = n,
            _ => spans.push((name, n)),
        }
    }
    let last = spans.len() - 1;
    spans
        .iter()
        .enumerate()
        .map(|(i, (name, upto))| {
            if i == last {
                format!("{name} above")
            } else {
                format!("{name} to {}", human_size(*upto))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024_and_bad_ones_say_why() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("16K"), Ok(16 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("3X").unwrap_err().contains("K, M or G"));
        assert!(parse_size("K").unwrap_err().contains("not a size"));
        assert!(parse_size("99999999999999G")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn a_small_table_holds_every_claim_and_writes_every_cell_as_json() {
        let json = std::env::temp_dir().join(format!("bcast-{}.json", std::process::id()));
        let link = Link {
            alpha: 10e-6,
            beta: 0.8e-9,
        };
        let held = run(&Settings {
            members: &[6, 16],
            sizes: &[64, 1 << 20],
            fabric: FabricKind::Mesh,
            link,
            json: Some(&json),
        })
        .unwrap();
        assert!(held);
        let cells: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        std::fs::remove_file(&json).unwrap();
        // 6 members: 7 algorithms (no hypercubes; DEF on 2×3); 16: 9. Two
        // sizes each.
        assert_eq!(cells.as_array().unwrap().len(), 2 * 7 + 2 * 9);
        let naive = cells
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["algorithm"] == "hypercube-naive")
            .unwrap();
        assert!(naive["conflicts"].as_u64().unwrap() > 0);
        assert!(run(&Settings {
            members: &[1],
            sizes: &[64],
            fabric: FabricKind::Switch,
            link,
            json: None
        })
        .is_err());
    }

    #[test]
    fn crossovers_name_each_span_once_in_order_of_size() {
        let model = Model {
            link: Link {
                alpha: 10e-6,
                beta: 0.8e-9,
            },
            fabric: Fabric::Switch,
        };
        let c = crossovers(&model, 6);
        assert!(c.starts_with("rsbcast to "), "{c}");
        assert!(c.ends_with(" above"), "{c}");
    }
}
