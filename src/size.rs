//! `seedsweep size`: recommend tolerances from a seed sweep, and check they still catch the
//! bugs the test exists for.
//!
//! One sweep (clean runs plus mutants) is run in-process; for every seed and check it keeps
//! only the small frontier of (|actual − expected|, |expected|) points that can be binding for
//! some (atol, rtol) ([`crate::stats::frontier`]), in the comparison the test asserts. Every
//! candidate tolerance is then evaluated from those frontiers, without re-running anything.
//!
//! A recommendation keeps the usage predicted at the per-seed failure probability
//! `--flake-rate` (peaks-over-threshold GPD tail, or the empirical quantile when the fit is
//! not trustworthy: [`crate::stats::tail`]) at or below `--target`. Three shapes: the
//! smallest atol at torch's fp32 rtol (1.3e-6), the smallest rtol at atol = 0 (chex style),
//! and the smallest multiple of torch's default pair (1e-5, 1.3e-6). Each is rounded up to
//! two significant digits (what a person writes in a test) and re-checked. Then every mutant
//! is evaluated under the balanced recommendation: a bug counts as caught on a seed when some
//! check exceeds its recommended tolerance.

use std::fmt::Write as _;

use rayon::prelude::*;

use crate::catalog::{Catalog, Group};
use crate::check::{py_repr, Tolerance};
use crate::evaluate::for_each_pair;
use crate::export::table::{pct, render};
use crate::scenario::Workspace;
use crate::stats::frontier::{frontier, usage};
use crate::stats::tail::{tail_estimate, TailMethod};
use crate::sweep::{group_seeds, SeedRange};

/// torch's fp32 rtol, the fixed rtol of the atol-only recommendation.
pub const TORCH_RTOL: f64 = 1.3e-6;
/// torch's fp32 (atol, rtol), the direction of the balanced recommendation.
pub const TORCH_PAIR: (f64, f64) = (1e-5, 1.3e-6);

/// Per seed, per check: the frontier in the asserted comparison.
pub type Frontiers = Vec<Vec<Vec<(f64, f64)>>>;

/// Collects frontiers for every group: `[group][check][seed]`.
pub fn collect(catalog: &Catalog, groups: &[Group], range: &SeedRange) -> Vec<Frontiers> {
    groups
        .iter()
        .map(|g| {
            let s = &catalog.scenarios[g.scenario];
            let checks = s.checks(g.param);
            let asserted = s.asserted_comparison();
            let seeds: Vec<u64> = group_seeds(catalog, g, range).collect();
            let per_seed: Vec<Vec<Vec<(f64, f64)>>> = seeds
                .par_iter()
                .map_init(
                    || (Workspace::default(), Vec::new()),
                    |(ws, pts), &seed| {
                        ws.mutant = g.mutant;
                        s.run(g.param, seed, &g.profile, ws);
                        checks
                            .iter()
                            .enumerate()
                            .map(|(c, spec)| {
                                pts.clear();
                                for_each_pair(&ws.traces, c, spec, asserted, |_, a, e| {
                                    for (&x, &y) in a.iter().zip(e) {
                                        let d = (x - y).abs();
                                        let d = if d.is_nan() { f64::INFINITY } else { d };
                                        let ey = if y.is_finite() { y.abs() } else { 0.0 };
                                        let d = if x == y { 0.0 } else { d };
                                        pts.push((d, ey));
                                    }
                                });
                                let mut f = Vec::new();
                                frontier(pts.iter().copied(), &mut f);
                                f
                            })
                            .collect()
                    },
                )
                .collect();
            // Transpose to [check][seed].
            (0..checks.len())
                .map(|c| per_seed.iter().map(|s| s[c].clone()).collect())
                .collect()
        })
        .collect()
}

/// Per-seed usages (percent) of `tol` over one check's frontiers.
pub fn usages(frontiers: &[Vec<(f64, f64)>], tol: Tolerance) -> Vec<f64> {
    frontiers
        .iter()
        .map(|f| usage(f, tol.atol, tol.rtol) * 100.0)
        .collect()
}

/// The usage predicted at per-seed probability `p` (percent) and how it was estimated.
pub fn predicted(frontiers: &[Vec<(f64, f64)>], tol: Tolerance, p: f64) -> (f64, TailMethod) {
    let t = tail_estimate(&usages(frontiers, tol), &[p]);
    (t.points[0].value, t.method)
}

/// Rounds up to two significant digits.
pub fn round_up_2(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x;
    }
    let e = x.log10().floor() - 1.0;
    let scale = 10f64.powf(e);
    let r = (x / scale).ceil() * scale;
    // Re-read through decimal so the printed value is exactly what is used.
    format!("{r:.1e}").parse().unwrap_or(r)
}

/// The smallest λ ≥ 0 (to a relative 1e-6, then rounded up to two digits) such that the
/// usage predicted at `p` of the tolerance `make(λ)` is ≤ `target` percent; +∞ if no λ up to
/// 1e30 is enough (a difference where the tolerance shape gives no allowance).
pub fn smallest(
    frontiers: &[Vec<(f64, f64)>],
    p: f64,
    target: f64,
    make: impl Fn(f64) -> Tolerance,
) -> f64 {
    let ok = |l: f64| predicted(frontiers, make(l), p).0 <= target;
    let mut hi = 1e-15;
    while !ok(hi) {
        hi *= 4.0;
        if hi > 1e30 {
            return f64::INFINITY;
        }
    }
    let mut lo = hi / 4.0;
    if hi == 1e-15 {
        lo = 0.0;
    }
    for _ in 0..80 {
        let mid = if lo == 0.0 {
            hi / 2.0
        } else {
            (lo * hi).sqrt()
        };
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
        if hi - lo <= hi * 1e-6 {
            break;
        }
    }
    let mut r = round_up_2(hi);
    // Rounding up keeps it sufficient; guard against a non-monotone tail fit anyway.
    let mut guard = 0;
    while !ok(r) && guard < 20 {
        r = round_up_2(r * 1.05);
        guard += 1;
    }
    r
}

/// Recommendations for one check.
#[derive(Debug, Clone)]
pub struct Recommendation {
    /// Check name.
    pub check: &'static str,
    /// Smallest atol at rtol = 1.3e-6.
    pub atol_at_torch_rtol: f64,
    /// Smallest rtol at atol = 0.
    pub rtol_at_zero_atol: f64,
    /// Smallest multiple of (1e-5, 1.3e-6).
    pub balanced: Tolerance,
    /// Predicted usage at the flake rate under the balanced pair, percent.
    pub predicted_pct: f64,
    /// Tail method of that prediction.
    pub method: TailMethod,
    /// Per current policy: (name, worst usage %, predicted usage at the flake rate %).
    pub policies: Vec<(String, f64, f64)>,
}

/// Recommends tolerances for every check of a clean group.
pub fn recommend(
    catalog: &Catalog,
    g: &Group,
    fr: &Frontiers,
    flake: f64,
    target: f64,
) -> Vec<Recommendation> {
    let s = &catalog.scenarios[g.scenario];
    s.checks(g.param)
        .iter()
        .enumerate()
        .map(|(c, spec)| {
            let f = &fr[c];
            let atol = smallest(f, flake, target, |a| Tolerance {
                atol: a,
                rtol: TORCH_RTOL,
            });
            let rtol = smallest(f, flake, target, |r| Tolerance { atol: 0.0, rtol: r });
            let lam = smallest(f, flake, target, |l| Tolerance {
                atol: l * TORCH_PAIR.0,
                rtol: l * TORCH_PAIR.1,
            });
            let balanced = Tolerance {
                atol: round_up_2(lam * TORCH_PAIR.0),
                rtol: round_up_2(lam * TORCH_PAIR.1),
            };
            let (pred, method) = predicted(f, balanced, flake);
            let policies = g
                .policy_names
                .iter()
                .enumerate()
                .map(|(p, name)| {
                    let tol = g.tolerances[p][c];
                    let worst = usages(f, tol).into_iter().fold(0.0, f64::max);
                    (name.clone(), worst, predicted(f, tol, flake).0)
                })
                .collect();
            Recommendation {
                check: spec.name,
                atol_at_torch_rtol: atol,
                rtol_at_zero_atol: rtol,
                balanced,
                predicted_pct: pred,
                method,
                policies,
            }
        })
        .collect()
}

/// Seeds on which a mutant is caught by some check under `tols` (one per check).
pub fn caught(fr: &Frontiers, tols: &[Tolerance]) -> (usize, usize) {
    let seeds = fr.first().map(|c| c.len()).unwrap_or(0);
    let n = (0..seeds)
        .filter(|&s| {
            fr.iter()
                .zip(tols)
                .any(|(c, t)| usage(&c[s], t.atol, t.rtol) > 1.0)
        })
        .count();
    (n, seeds)
}

/// The report of a sizing run: a terminal table and the Markdown evidence section.
pub struct SizeReport {
    /// Text for the terminal.
    pub text: String,
    /// Markdown for a pull request.
    pub markdown: String,
    /// Mutants not caught on every seed under the recommendation.
    pub missed: usize,
}

fn fmt_tol(x: f64) -> String {
    if x.is_infinite() {
        "unreachable".into()
    } else {
        py_repr(x)
    }
}

/// Sizes every clean group of `groups` (with the mutants in `groups` as the bugs to catch).
pub fn size(
    catalog: &Catalog,
    groups: &[Group],
    range: &SeedRange,
    flake: f64,
    target: f64,
) -> SizeReport {
    let all = collect(catalog, groups, range);
    let mut text = String::new();
    let mut md = String::new();
    let mut missed = 0;
    let _ = writeln!(md, "## Evidence: tolerance sizing (seedsweep)\n");
    let _ = writeln!(
        md,
        "Usage = |actual − expected| / (atol + rtol·|expected|), worst element, in the comparison the test asserts; \
         above 100 % the check fails. Predicted usage at a per-seed failure probability p comes from a \
         peaks-over-threshold generalized Pareto fit of the per-seed usages (empirical quantile when the fit is \
         rejected or the sample is small). Recommendations keep the usage predicted at p = {} at or below {} %.\n",
        py_repr(flake),
        py_repr(target)
    );
    for (gi, g) in groups.iter().enumerate() {
        if g.mutant.is_some() {
            continue;
        }
        let s = &catalog.scenarios[g.scenario];
        let seeds: Vec<u64> = group_seeds(catalog, g, range).collect();
        if seeds.is_empty() {
            continue;
        }
        let param = s.param_ids()[g.param];
        let recs = recommend(catalog, g, &all[gi], flake, target);
        let jax = matches!(s.common().kind.as_str(), "maxtext-diloco" | "diloco");
        let _ = writeln!(
            text,
            "{} [{}] {}: seeds {}..{} ({}), {} as the test asserts",
            s.common().name,
            param,
            g.profile.name,
            seeds[0],
            seeds[seeds.len() - 1],
            seeds.len(),
            s.asserted_comparison().name()
        );
        let _ = writeln!(
            md,
            "### {} `[{}]`, profile `{}`\n\nSeeds {}..{} ({}).\n",
            s.common().name,
            param,
            g.profile.name,
            seeds[0],
            seeds[seeds.len() - 1],
            seeds.len()
        );
        let mut header: Vec<String> = vec!["check".into()];
        for p in &g.policy_names {
            header.push(format!("{p}: worst"));
            header.push(format!("@p={}", py_repr(flake)));
        }
        for h in [
            "atol @rtol 1.3e-6",
            "rtol @atol 0",
            "balanced (atol, rtol)",
            "predicted",
            "tail",
        ] {
            header.push(h.into());
        }
        let mut rows = Vec::new();
        let _ = writeln!(
            md,
            "| check |{} atol at rtol=1.3e-6 | rtol at atol=0 | balanced | predicted usage at p |",
            g.policy_names
                .iter()
                .map(|p| format!(" worst `{p}` | `{p}` at p |"))
                .collect::<String>()
        );
        let _ = writeln!(
            md,
            "|---|{}---|---|---|---|",
            "---|---|".repeat(g.policy_names.len())
        );
        for r in &recs {
            let mut row = vec![r.check.to_string()];
            let mut mdrow = format!("| `{}` |", r.check);
            for (_, worst, pred) in &r.policies {
                row.push(pct(worst / 100.0));
                row.push(pct(pred / 100.0));
                let _ = write!(mdrow, " {} | {} |", pct(worst / 100.0), pct(pred / 100.0));
            }
            row.push(fmt_tol(r.atol_at_torch_rtol));
            row.push(fmt_tol(r.rtol_at_zero_atol));
            row.push(format!(
                "({}, {})",
                fmt_tol(r.balanced.atol),
                fmt_tol(r.balanced.rtol)
            ));
            row.push(pct(r.predicted_pct / 100.0));
            row.push(match r.method {
                TailMethod::Gpd => "gpd".into(),
                TailMethod::Empirical => "empirical".into(),
            });
            let _ = writeln!(
                mdrow,
                " {} | {} | atol={}, rtol={} | {} |",
                fmt_tol(r.atol_at_torch_rtol),
                fmt_tol(r.rtol_at_zero_atol),
                fmt_tol(r.balanced.atol),
                fmt_tol(r.balanced.rtol),
                pct(r.predicted_pct / 100.0)
            );
            md.push_str(&mdrow);
            rows.push(row);
        }
        text.push_str(&render(&header, &rows, 1));
        // Failing seeds under each current policy.
        for (p, name) in g.policy_names.iter().enumerate() {
            let mut failing: Vec<u64> = Vec::new();
            for (si, &seed) in seeds.iter().enumerate() {
                if (0..recs.len()).any(|c| {
                    usage(
                        &all[gi][c][si],
                        g.tolerances[p][c].atol,
                        g.tolerances[p][c].rtol,
                    ) > 1.0
                }) {
                    failing.push(seed);
                }
            }
            let shown: Vec<String> = failing.iter().take(10).map(|s| s.to_string()).collect();
            let more = if failing.len() > 10 {
                format!(" and {} more", failing.len() - 10)
            } else {
                String::new()
            };
            let line = format!(
                "seeds failing under `{name}`: {}{}",
                if failing.is_empty() {
                    "none".to_string()
                } else {
                    shown.join(", ")
                },
                more
            );
            let _ = writeln!(text, "{line}");
            if failing.is_empty() {
                let _ = writeln!(md, "\n{line}.");
            } else {
                let _ = writeln!(
                    md,
                    "\n{line} (reproduce one with `seedsweep repro --seed {} --param {param} --policy {name}`).",
                    failing[0]
                );
            }
        }
        // Mutants under the balanced recommendation.
        let tols: Vec<Tolerance> = recs.iter().map(|r| r.balanced).collect();
        let mut mrows = Vec::new();
        let _ = writeln!(
            md,
            "\n| injected bug | seeds caught under the recommendation |\n|---|---|"
        );
        for (mi, mg) in groups.iter().enumerate() {
            let Some(m) = mg.mutant else { continue };
            if mg.scenario != g.scenario || mg.param != g.param || mg.profile != g.profile {
                continue;
            }
            let (n, total) = caught(&all[mi], &tols);
            if n < total {
                missed += 1;
            }
            mrows.push(vec![m.name().to_string(), format!("{n}/{total}")]);
            let _ = writeln!(
                md,
                "| `{}` | {n}/{total}{} |",
                m.name(),
                if n < total {
                    " (missed on some seeds)"
                } else {
                    ""
                }
            );
        }
        if !mrows.is_empty() {
            text.push_str(&render(
                &[
                    "mutant".to_string(),
                    "caught under the balanced recommendation".to_string(),
                ],
                &mrows,
                1,
            ));
        }
        let _ = writeln!(md, "\nAssertions:\n\n```python");
        for r in &recs {
            if jax {
                let _ = writeln!(
                    md,
                    "chex.assert_trees_all_close(actual_{0}, expected_{0}, atol={1}, rtol={2})",
                    r.check,
                    fmt_tol(r.balanced.atol),
                    fmt_tol(r.balanced.rtol)
                );
            } else {
                let _ = writeln!(
                    md,
                    "torch.testing.assert_close(actual_{0}, expected_{0}, atol={1}, rtol={2})",
                    r.check,
                    fmt_tol(r.balanced.atol),
                    fmt_tol(r.balanced.rtol)
                );
            }
        }
        let _ = writeln!(md, "```\n");
        text.push('\n');
    }
    SizeReport {
        text,
        markdown: md,
        missed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_up_keeps_two_significant_digits_and_never_goes_down() {
        assert_eq!(round_up_2(1.234e-6), 1.3e-6);
        assert_eq!(round_up_2(1.2e-6), 1.2e-6);
        assert_eq!(round_up_2(9.91e-5), 1.0e-4);
        for x in [3.3e-7, 7.77e-3, 1.0, 45.6] {
            assert!(round_up_2(x) >= x);
        }
    }

    #[test]
    fn smallest_tolerance_meets_the_target_and_a_smaller_one_does_not() {
        // 200 seeds, each a single point (d, e) with d growing: empirical tail.
        let fr: Vec<Vec<(f64, f64)>> = (1..=200).map(|i| vec![(i as f64 * 1e-8, 1.0)]).collect();
        let make = |a: f64| Tolerance { atol: a, rtol: 0.0 };
        let a = smallest(&fr, 1e-2, 50.0, make);
        assert!(predicted(&fr, make(a), 1e-2).0 <= 50.0);
        assert!(
            predicted(&fr, make(a * 0.9), 1e-2).0 > 50.0,
            "not much larger than needed"
        );
    }
}
