//! Tolerance sizing (the maths of `seedsweep size`): recommend tolerances from a seed sweep,
//! and check they still catch the bugs the test exists for.
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
//! is checked against the balanced recommendation from its rows (`mutants.csv`: per check
//! and swept policy, its smallest usage over the seeds; a mutant has no frontiers): it is
//! shown caught on every seed when some check's smallest usage, scaled by the least ratio of
//! the swept tolerance to the recommended one, stays above 100 % ([`caught`]).

use std::fmt::Write as _;

use rayon::prelude::*;

use crate::check::python_repr::py_repr;
use crate::check::Tolerance;
use crate::engine::plan::GroupMeta;
use crate::report::table::{pct, render};
use crate::stats::frontier::usage;
use crate::stats::tail::{
    seeds_needed_empirical, seeds_needed_gpd, sizing_bound, SizingBound, SizingMethod,
};

/// torch's fp32 rtol, the fixed rtol of the atol-only recommendation.
pub const TORCH_RTOL: f64 = 1.3e-6;
/// torch's fp32 (atol, rtol), the direction of the balanced recommendation.
pub const TORCH_PAIR: (f64, f64) = (1e-5, 1.3e-6);

pub use crate::engine::aggregate::Frontiers;

/// Per-seed usages (percent) of `tol` over one check's frontiers.
pub fn usages(frontiers: &[Vec<(f64, f64)>], tol: Tolerance) -> Vec<f64> {
    frontiers
        .iter()
        .map(|f| usage(f, tol.atol, tol.rtol) * 100.0)
        .collect()
}

/// Per-seed usages (percent) of `tol` over several checks at once: each seed's largest
/// usage over `checks` (a test asserting them all with one tolerance fails on that seed
/// when any of them does).
pub fn usages_over(fr: &Frontiers, checks: &[usize], tol: Tolerance) -> Vec<f64> {
    let seeds = fr.first().map(|c| c.len()).unwrap_or(0);
    (0..seeds)
        .map(|s| {
            checks
                .iter()
                .map(|&c| usage(&fr[c][s], tol.atol, tol.rtol) * 100.0)
                .fold(0.0, f64::max)
        })
        .collect()
}

/// Rounds up to two significant digits.
pub fn round_up_2(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x;
    }
    let e = x.log10().floor() - 1.0;
    let scale = 10f64.powf(e);
    let r = (x / scale).ceil() * scale;
    // Re-read through decimal so the printed value is exactly what is used; never below x.
    let back: f64 = format!("{r:.1e}").parse().unwrap_or(r);
    if back >= x {
        back
    } else {
        format!("{:.1e}", r * (1.0 + 1e-12)).parse().unwrap_or(r)
    }
}

/// The three shapes of a recommendation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The smallest atol at torch's fp32 rtol 1.3e-6.
    AtolAtTorchRtol,
    /// The smallest rtol at atol = 0 (chex style).
    RtolAtZeroAtol,
    /// The smallest multiple of torch's default pair (1e-5, 1.3e-6).
    Balanced,
}

impl Shape {
    /// All shapes, in output order.
    pub const ALL: [Shape; 3] = [
        Shape::AtolAtTorchRtol,
        Shape::RtolAtZeroAtol,
        Shape::Balanced,
    ];
    /// The name in `recommendations.csv`.
    pub fn name(self) -> &'static str {
        match self {
            Shape::AtolAtTorchRtol => "atol-at-torch-rtol",
            Shape::RtolAtZeroAtol => "rtol-at-zero-atol",
            Shape::Balanced => "balanced",
        }
    }
    /// The tolerance at parameter λ.
    fn at(self, l: f64) -> Tolerance {
        match self {
            Shape::AtolAtTorchRtol => Tolerance {
                atol: l,
                rtol: TORCH_RTOL,
            },
            Shape::RtolAtZeroAtol => Tolerance { atol: 0.0, rtol: l },
            Shape::Balanced => Tolerance {
                atol: round_up_2(l * TORCH_PAIR.0),
                rtol: round_up_2(l * TORCH_PAIR.1),
            },
        }
    }
}

/// Largest rtol `rtol-at-zero-atol` recommends: from 1e-2 up, the binding elements are ones
/// whose |expected| is tiny against their difference (values near zero), where a relative
/// tolerance says nothing and an atol is needed.
pub const MAX_MEANINGFUL_RTOL: f64 = 1e-2;

/// One recommendation: a (check or all checks) × shape, for one profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Rec {
    /// The shape.
    pub shape: Shape,
    /// The pair (NaN when there is none; see `note`).
    pub tol: Tolerance,
    /// The shape's free parameter (atol, rtol or the multiple λ); +∞ when unreachable.
    pub lambda: f64,
    /// Point estimate of the usage at the flake rate under `tol`, percent.
    pub predicted: f64,
    /// Upper end of its 95 % interval, percent: at or below the target.
    pub upper: f64,
    /// How the tail was estimated.
    pub method: SizingMethod,
    /// Why the pair is empty or unusual; empty otherwise.
    pub note: String,
}

/// The sizing bound of `tol` over `checks`.
fn bound(fr: &Frontiers, checks: &[usize], tol: Tolerance, p: f64) -> SizingBound {
    sizing_bound(&usages_over(fr, checks, tol), p)
}

/// Sizes one shape over `checks` (one check, or all of a test's): the smallest λ whose
/// sizing bound (upper end at p) is ≤ `target`, rounded up to two significant digits and
/// re-checked. For the two shapes that scale the tolerance (rtol at atol 0, balanced) usage
/// is inversely proportional to λ, so λ = upper bound at λ = 1 / target, then verified (and
/// raised by 2 % steps if rounding or the fit's discreteness needs it). For atol at fixed
/// rtol: geometric bracketing from 1e-12 by factors of 4, then 40 geometric bisection steps.
pub fn size_shape(fr: &Frontiers, checks: &[usize], shape: Shape, p: f64, target: f64) -> Rec {
    let empty = |lambda: f64, method: SizingMethod, note: String| Rec {
        shape,
        tol: Tolerance {
            atol: f64::NAN,
            rtol: f64::NAN,
        },
        lambda,
        predicted: f64::NAN,
        upper: f64::NAN,
        method,
        note,
    };
    // Nothing differs on any seed: exact equality holds.
    if checks.iter().all(|&c| fr[c].iter().all(|f| f.is_empty())) {
        return Rec {
            shape,
            tol: Tolerance {
                atol: 0.0,
                rtol: 0.0,
            },
            lambda: 0.0,
            predicted: 0.0,
            upper: 0.0,
            method: SizingMethod::Empirical,
            note: "bit-exact on every seed: assert equality".into(),
        };
    }
    let ok = |l: f64| bound(fr, checks, shape.at(l), p).hi <= target;
    let lambda = match shape {
        Shape::AtolAtTorchRtol => {
            let mut hi = 1e-12;
            while !ok(hi) {
                hi *= 4.0;
                if hi > 1e30 {
                    break;
                }
            }
            if hi > 1e30 {
                f64::INFINITY
            } else {
                let mut lo = hi / 4.0;
                for _ in 0..40 {
                    let mid = (lo * hi).sqrt();
                    if ok(mid) {
                        hi = mid;
                    } else {
                        lo = mid;
                    }
                    if hi - lo <= hi * 1e-4 {
                        break;
                    }
                }
                round_up_2(hi)
            }
        }
        Shape::RtolAtZeroAtol | Shape::Balanced => {
            let unit = match shape {
                Shape::RtolAtZeroAtol => Tolerance {
                    atol: 0.0,
                    rtol: 1.0,
                },
                _ => Tolerance {
                    atol: TORCH_PAIR.0,
                    rtol: TORCH_PAIR.1,
                },
            };
            let b = bound(fr, checks, unit, p);
            if !b.hi.is_finite() {
                f64::INFINITY
            } else {
                let mut l = b.hi / target;
                if shape == Shape::RtolAtZeroAtol {
                    l = round_up_2(l);
                }
                l
            }
        }
    };
    let mut lambda = lambda;
    if lambda.is_finite() {
        let mut guard = 0;
        while !ok(lambda) && guard < 50 {
            lambda = if shape == Shape::Balanced {
                lambda * 1.02
            } else {
                round_up_2(lambda * 1.02)
            };
            guard += 1;
        }
        if !ok(lambda) {
            lambda = f64::INFINITY;
        }
    }
    if !lambda.is_finite() {
        let b = bound(fr, checks, shape.at(1.0), p);
        let note = if b.method == SizingMethod::NotEstimable {
            format!(
                "not estimable with {} seeds (an infinite usage, or too few seeds)",
                fr.first().map(|c| c.len()).unwrap_or(0)
            )
        } else {
            "no finite tolerance of this shape meets the target (the upper bound is unbounded)"
                .into()
        };
        return empty(f64::INFINITY, b.method, note);
    }
    let tol = shape.at(lambda);
    if shape == Shape::RtolAtZeroAtol && tol.rtol >= MAX_MEANINGFUL_RTOL {
        let b = bound(fr, checks, tol, p);
        return empty(
            lambda,
            b.method,
            format!(
                "rtol would be {}: the binding elements have |expected| near zero, where only an atol helps; use atol-at-torch-rtol or balanced",
                py_repr(tol.rtol)
            ),
        );
    }
    let b = bound(fr, checks, tol, p);
    Rec {
        shape,
        tol,
        lambda,
        predicted: b.value,
        upper: b.hi,
        method: b.method,
        note: String::new(),
    }
}

/// The data of one group to size: what `plan.csv` says about it, its seeds, and (a clean
/// group) its frontiers `[check][seed]` or (a mutant group) its smallest usages.
#[derive(Debug, Clone)]
pub struct GroupData {
    /// Identity and layout.
    pub meta: GroupMeta,
    /// Seeds, ascending.
    pub seeds: Vec<u64>,
    /// `[check][seed]` (a clean group; empty for a mutant group).
    pub fr: Frontiers,
    /// A mutant group: `[check][policy]`, the smallest usage over the seeds in the asserted
    /// comparison, percent (`mutants.csv`'s `min_usage_pct`); empty for a clean group.
    pub mutant_min_usage: Vec<Vec<f64>>,
    /// Whether the test is a JAX one (chex assertions).
    pub jax: bool,
}

/// One row of `recommendations.csv` (declared with its columns in
/// [`crate::results::schema`]).
pub use crate::results::schema::RecRow;

/// (scenario, param, the recommended balanced pair of each check by name).
pub type ValidatePairs = (String, String, Vec<(String, Tolerance)>);

/// A sized (scenario, param): per profile and the combination.
struct Sized {
    /// Clean group indices, one per profile.
    groups: Vec<usize>,
    /// `[profile][check or all (last)][shape]`.
    recs: Vec<Vec<Vec<Rec>>>,
    /// `[check or all][shape]`: (profile index of the binding profile, its rec).
    combined: Vec<Vec<(usize, Rec)>>,
}

/// The report of a sizing run.
pub struct SizeReport {
    /// Text for the terminal (warnings are lines starting `warning:`).
    pub text: String,
    /// Markdown for a pull request.
    pub markdown: String,
    /// Mutants not shown to be caught on every seed under the recommendation ([`caught`]).
    pub missed: usize,
    /// `recommendations.csv` rows.
    pub rows: Vec<RecRow>,
    /// Per (scenario, param): the recommended per-check balanced pairs for every profile
    /// (what `--validate` sweeps): (scenario, param, pairs by check name).
    pub validate: Vec<ValidatePairs>,
}

fn fmt_tol(x: f64) -> String {
    if x.is_infinite() {
        "unreachable".into()
    } else if x.is_nan() {
        "-".into()
    } else {
        py_repr(x)
    }
}

fn fmt_pct(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        pct(x / 100.0)
    }
}

fn opt(x: f64) -> Option<f64> {
    if x.is_finite() {
        Some(x)
    } else {
        None
    }
}

/// Sizes every clean group of `data` (the mutant groups are the bugs to catch).
pub fn size(data: &[GroupData], flake: f64, target: f64) -> SizeReport {
    let need_gpd = seeds_needed_gpd(flake);
    let need_df = seeds_needed_empirical(flake);
    let mut text = String::new();
    let mut md = String::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    let mut validate = Vec::new();
    let mut missed = 0;
    let _ = writeln!(md, "## Evidence: tolerance sizing (seedsweep)\n");
    let _ = writeln!(
        md,
        "Usage = |actual − expected| / (atol + rtol·|expected|), worst element, in the comparison the test asserts; \
         above 100 % the check fails. The usage at a per-seed failure probability p is an empirical quantile when \
         there are enough seeds for a distribution-free bound ({need_df} at p = {}), otherwise a peaks-over-threshold \
         generalized Pareto extrapolation (at least {need_gpd} seeds) with a 95 % profile-likelihood interval. \
         Recommendations keep the **upper end** of that interval at or below {} %, for every profile.\n",
        py_repr(flake),
        py_repr(target)
    );
    // (scenario, param) keys of clean groups, in first-appearance order.
    let mut keys: Vec<(String, String)> = Vec::new();
    for d in data.iter().filter(|d| d.meta.mutant.is_empty()) {
        let k = (d.meta.scenario.clone(), d.meta.param.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (scenario, param) in &keys {
        let groups: Vec<usize> = data
            .iter()
            .enumerate()
            .filter(|(_, d)| {
                d.meta.mutant.is_empty() && &d.meta.scenario == scenario && &d.meta.param == param
            })
            .filter(|(_, d)| !d.seeds.is_empty())
            .map(|(i, _)| i)
            .collect();
        if groups.is_empty() {
            continue;
        }
        let first = &data[groups[0]];
        let checks = first.meta.checks.clone();
        let all_checks: Vec<usize> = (0..checks.len()).collect();
        // Per profile: per check, then all checks; per shape.
        let recs: Vec<Vec<Vec<Rec>>> = groups
            .par_iter()
            .map(|&gi| {
                let d = &data[gi];
                let mut sets: Vec<Vec<usize>> = (0..checks.len()).map(|c| vec![c]).collect();
                sets.push(all_checks.clone());
                sets.iter()
                    .map(|set| {
                        Shape::ALL
                            .iter()
                            .map(|&sh| size_shape(&d.fr, set, sh, flake, target))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        // Across profiles: the largest λ binds (ties: the first profile).
        let combined: Vec<Vec<(usize, Rec)>> = (0..=checks.len())
            .map(|c| {
                (0..Shape::ALL.len())
                    .map(|sh| {
                        let mut best = 0;
                        for p in 1..groups.len() {
                            let (a, b) = (recs[p][c][sh].lambda, recs[best][c][sh].lambda);
                            if a > b || (b.is_nan() && !a.is_nan()) {
                                best = p;
                            }
                        }
                        (best, recs[best][c][sh].clone())
                    })
                    .collect()
            })
            .collect();
        let sized = Sized {
            groups,
            recs,
            combined,
        };
        report_key(
            data,
            &sized,
            &checks,
            flake,
            target,
            (need_gpd, need_df),
            &mut text,
            &mut md,
            &mut warnings,
            &mut rows,
            &mut missed,
        );
        let pairs: Vec<(String, Tolerance)> = checks
            .iter()
            .enumerate()
            .map(|(c, name)| (name.clone(), sized.combined[c][2].1.tol))
            .collect();
        validate.push((scenario.clone(), param.clone(), pairs));
    }
    for w in &warnings {
        let _ = writeln!(text, "{w}");
        let _ = writeln!(md, "> {w}\n");
    }
    SizeReport {
        text,
        markdown: md,
        missed,
        rows,
        validate,
    }
}

#[allow(clippy::too_many_arguments)]
fn report_key(
    data: &[GroupData],
    sz: &Sized,
    checks: &[String],
    flake: f64,
    target: f64,
    (need_gpd, need_df): (usize, usize),
    text: &mut String,
    md: &mut String,
    warnings: &mut Vec<String>,
    rows: &mut Vec<RecRow>,
    missed: &mut usize,
) {
    let first = &data[sz.groups[0]];
    let (scenario, param) = (&first.meta.scenario, &first.meta.param);
    let check_name = |c: usize| -> String {
        if c < checks.len() {
            checks[c].clone()
        } else {
            "all".into()
        }
    };
    let binding_check = |p: Option<usize>, sh: usize| -> String {
        // The single check needing the largest λ.
        let lam = |c: usize| match p {
            Some(p) => sz.recs[p][c][sh].lambda,
            None => sz.combined[c][sh].1.lambda,
        };
        let mut best = 0;
        for c in 1..checks.len() {
            if lam(c) > lam(best) {
                best = c;
            }
        }
        checks.get(best).cloned().unwrap_or_default()
    };
    let mut row = |profile: String, c: usize, rec: &Rec, seeds: usize, bp: String, bc: String| {
        rows.push(RecRow {
            scenario: scenario.clone(),
            param: param.clone(),
            profile,
            check: check_name(c),
            shape: rec.shape.name().into(),
            atol: opt(rec.tol.atol),
            rtol: opt(rec.tol.rtol),
            flake_rate: flake,
            target_pct: target,
            predicted_pct: opt(rec.predicted),
            predicted_upper_pct: opt(rec.upper),
            tail_method: rec.method.name().into(),
            seeds,
            seeds_needed_gpd: need_gpd,
            seeds_needed_empirical: need_df,
            binding_profile: bp,
            binding_check: bc,
            note: rec.note.clone(),
        });
    };
    for (pi, &gi) in sz.groups.iter().enumerate() {
        let d = &data[gi];
        let n = d.seeds.len();
        for c in 0..=checks.len() {
            for (sh, rec) in sz.recs[pi][c].iter().enumerate() {
                let bc = if c == checks.len() {
                    binding_check(Some(pi), sh)
                } else {
                    String::new()
                };
                row(d.meta.profile.clone(), c, rec, n, String::new(), bc);
            }
        }
        if n < need_gpd {
            warnings.push(format!(
                "warning: {scenario} [{param}] {}: {n} seeds are too few for a flake rate of {}: a GPD extrapolation needs at least {need_gpd} seeds and a distribution-free bound {need_df}; the recommendation is conservative (a GPD tail with its shape fixed at ξ = 0.5, or at a rejected fit's when heavier; valid if the true tail is no heavier)",
                d.meta.profile,
                py_repr(flake)
            ));
        } else {
            let fallback: Vec<String> = (0..checks.len())
                .filter(|&c| sz.recs[pi][c][2].method == SizingMethod::Conservative)
                .map(|c| checks[c].clone())
                .collect();
            if !fallback.is_empty() {
                warnings.push(format!(
                    "warning: {scenario} [{param}] {}: no GPD fit was accepted for {} at any threshold; the recommendation is conservative (a GPD with its shape fixed at ξ = 0.5, or at the rejected fit's when heavier)",
                    d.meta.profile,
                    fallback.join(", ")
                ));
            }
        }
        if (0..=checks.len()).any(|c| sz.recs[pi][c][2].method == SizingMethod::NotEstimable) {
            warnings.push(format!(
                "warning: {scenario} [{param}] {}: some usages are not estimable with {n} seeds; no recommendation for them",
                d.meta.profile
            ));
        }
    }
    let profiles: Vec<&str> = sz
        .groups
        .iter()
        .map(|&g| data[g].meta.profile.as_str())
        .collect();
    for c in 0..=checks.len() {
        for (sh, (bp, rec)) in sz.combined[c].iter().enumerate() {
            let bc = if c == checks.len() {
                binding_check(None, sh)
            } else {
                String::new()
            };
            row(
                "all".into(),
                c,
                rec,
                data[sz.groups[*bp]].seeds.len(),
                profiles[*bp].to_string(),
                bc,
            );
        }
    }

    // Terminal and Markdown.
    let seeds = &first.seeds;
    let _ = writeln!(
        text,
        "{scenario} [{param}]: seeds {}..{} ({}) per profile ({}), {} as the test asserts; flake rate {}, target {} % on the upper bound",
        seeds[0],
        seeds[seeds.len() - 1],
        seeds.len(),
        profiles.join(", "),
        first.meta.asserted.name(),
        py_repr(flake),
        py_repr(target)
    );
    let _ = writeln!(
        md,
        "### {scenario} `[{param}]`, profiles {}\n\nSeeds {}..{} ({}) per profile.\n",
        profiles
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", "),
        seeds[0],
        seeds[seeds.len() - 1],
        seeds.len()
    );
    // Current policies, per profile.
    let mut header: Vec<String> = vec!["check".into(), "profile".into()];
    for p in &first.meta.policies {
        header.push(format!("{p}: worst"));
        header.push(format!("@p={} [upper]", py_repr(flake)));
    }
    let mut prow = Vec::new();
    let _ = writeln!(
        md,
        "Current policies (worst seed; usage at p with its 95 % upper end):\n\n| check | profile |{}\n|---|---|{}",
        first
            .meta
            .policies
            .iter()
            .map(|p| format!(" worst `{p}` | `{p}` at p |"))
            .collect::<String>(),
        "---|---|".repeat(first.meta.policies.len())
    );
    for (c, check) in checks.iter().enumerate() {
        for &gi in &sz.groups {
            let d = &data[gi];
            let mut r = vec![check.clone(), d.meta.profile.clone()];
            let mut m = format!("| `{check}` | `{}` |", d.meta.profile);
            for (p, _) in d.meta.policies.iter().enumerate() {
                let tol = d.meta.tolerances[p][c];
                let u = usages(&d.fr[c], tol);
                let worst = u.iter().copied().fold(0.0, f64::max);
                let b = sizing_bound(&u, flake);
                let at = format!("{} [{}]", fmt_pct(b.value), fmt_pct(b.hi));
                r.push(fmt_pct(worst));
                r.push(at.clone());
                let _ = write!(m, " {} | {} |", fmt_pct(worst), at);
            }
            prow.push(r);
            let _ = writeln!(md, "{m}");
        }
    }
    text.push_str(&render(&header, &prow, 1));
    // Recommendations (all profiles).
    let header: Vec<String> = [
        "check",
        "atol @rtol 1.3e-6",
        "rtol @atol 0",
        "balanced (atol, rtol)",
        "predicted [upper]",
        "tail",
        "binding profile",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let _ = writeln!(
        md,
        "\nRecommendations (hold for every profile above):\n\n| check | atol at rtol=1.3e-6 | rtol at atol=0 | balanced | predicted usage at p [upper] | tail | binding profile |\n|---|---|---|---|---|---|---|"
    );
    let mut rrows = Vec::new();
    for c in 0..=checks.len() {
        let cm = &sz.combined[c];
        let name = if c < checks.len() {
            checks[c].clone()
        } else {
            "all (one pair)".into()
        };
        let (bp, bal) = &cm[2];
        let atol = fmt_tol(cm[0].1.tol.atol);
        let rtol = if cm[1].1.tol.rtol.is_nan() {
            "n/a".to_string()
        } else {
            fmt_tol(cm[1].1.tol.rtol)
        };
        let balanced = format!("({}, {})", fmt_tol(bal.tol.atol), fmt_tol(bal.tol.rtol));
        let pred = format!("{} [{}]", fmt_pct(bal.predicted), fmt_pct(bal.upper));
        rrows.push(vec![
            name.clone(),
            atol.clone(),
            rtol.clone(),
            balanced,
            pred.clone(),
            bal.method.name().to_string(),
            profiles[*bp].to_string(),
        ]);
        let _ = writeln!(
            md,
            "| `{name}` | {atol} | {rtol} | atol={}, rtol={} | {pred} | {} | `{}` |",
            fmt_tol(bal.tol.atol),
            fmt_tol(bal.tol.rtol),
            bal.method.name(),
            profiles[*bp]
        );
    }
    text.push_str(&render(&header, &rrows, 1));
    // Failing seeds under each current policy (first profile).
    for (p, name) in first.meta.policies.iter().enumerate() {
        let mut failing: Vec<u64> = Vec::new();
        for &gi in &sz.groups {
            let d = &data[gi];
            for (si, &seed) in d.seeds.iter().enumerate() {
                if (0..checks.len()).any(|c| {
                    let t = d.meta.tolerances[p][c];
                    usage(&d.fr[c][si], t.atol, t.rtol) > 1.0
                }) && !failing.contains(&seed)
                {
                    failing.push(seed);
                }
            }
        }
        failing.sort_unstable();
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
    // Mutants under the per-check balanced recommendation.
    let tols: Vec<Tolerance> = (0..checks.len()).map(|c| sz.combined[c][2].1.tol).collect();
    let mut mrows = Vec::new();
    let _ = writeln!(
        md,
        "\n| injected bug | profile | seeds caught under the recommendation |\n|---|---|---|"
    );
    for d in data.iter().filter(|d| {
        !d.meta.mutant.is_empty() && &d.meta.scenario == scenario && &d.meta.param == param
    }) {
        if tols.iter().all(|t| t.atol.is_nan()) {
            // No recommendation to check the bug against.
            mrows.push(vec![
                d.meta.mutant.clone(),
                d.meta.profile.clone(),
                "no recommendation".into(),
            ]);
            let _ = writeln!(
                md,
                "| `{}` | `{}` | no recommendation |",
                d.meta.mutant, d.meta.profile
            );
            continue;
        }
        let total = d.seeds.len();
        let shown = caught(d, &tols);
        if !shown {
            *missed += 1;
        }
        let cell = if shown {
            format!("{total}/{total}")
        } else {
            "not shown".to_string()
        };
        mrows.push(vec![
            d.meta.mutant.clone(),
            d.meta.profile.clone(),
            cell.clone(),
        ]);
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {cell}{} |",
            d.meta.mutant,
            d.meta.profile,
            if shown {
                ""
            } else {
                " on every seed (no check's smallest usage bounds it above 100 %)"
            }
        );
    }
    if !mrows.is_empty() {
        text.push_str(&render(
            &[
                "mutant".to_string(),
                "profile".to_string(),
                "caught under the balanced recommendation".to_string(),
            ],
            &mrows,
            1,
        ));
    }
    let _ = writeln!(md, "\nAssertions (per check):\n\n```python");
    for (c, check) in checks.iter().enumerate() {
        let t = sz.combined[c][2].1.tol;
        let call = if first.jax {
            "chex.assert_trees_all_close"
        } else {
            "torch.testing.assert_close"
        };
        let _ = writeln!(
            md,
            "{call}(actual_{check}, expected_{check}, atol={}, rtol={})",
            fmt_tol(t.atol),
            fmt_tol(t.rtol)
        );
    }
    let one = &sz.combined[checks.len()][2].1.tol;
    let _ = writeln!(
        md,
        "# or one pair for every check: atol={}, rtol={}\n```\n",
        fmt_tol(one.atol),
        fmt_tol(one.rtol)
    );
    text.push('\n');
}

/// Whether the mutant group `d` is shown caught on every seed under `tols` (one per check;
/// a NaN pair catches nothing). For an element with |actual − expected| = x and
/// |expected| = e, the usage under (a, r) is its usage under a swept policy's (a_p, r_p)
/// times (a_p + r_p·e) / (a + r·e), which for every e ≥ 0 is at least the smaller of
/// a_p / a and r_p / r. So a check whose smallest usage over the seeds under some policy,
/// times that factor, is above 100 % exceeds the recommendation on every seed. (Bugs are
/// caught by wide margins: T1's smallest margin is the bf16 all-reduce's, over 1,000 times
/// torch's default.) Without such a check, `size` does not claim the bug is caught.
pub fn caught(d: &GroupData, tols: &[Tolerance]) -> bool {
    d.mutant_min_usage
        .iter()
        .zip(tols)
        .enumerate()
        .any(|(c, (per_policy, t))| {
            !t.atol.is_nan()
                && per_policy.iter().enumerate().any(|(p, &u)| {
                    let swept = d.meta.tolerances[p][c];
                    // The least of (a_p + r_p·e) / (a + r·e) over e ≥ 0: one of its two ends
                    // (0/0 ends, a zero in both pairs, say nothing).
                    let ends = [swept.atol / t.atol, swept.rtol / t.rtol];
                    let factor = ends
                        .iter()
                        .filter(|x| !x.is_nan())
                        .copied()
                        .reduce(f64::min)
                        .unwrap_or(1.0);
                    u * factor > 100.0
                })
        })
}

/// `recommendations.csv` bytes.
pub fn recommendations_csv(rows: &[RecRow]) -> anyhow::Result<Vec<u8>> {
    Ok(crate::results::csv::table(
        crate::results::schema::RECOMMENDATION_COLUMNS,
        rows,
    ))
}

/// The two-sided 95 % Clopper–Pearson interval of a binomial proportion with `x` successes
/// in `n` trials: lo solves P(X ≥ x; p) = 0.025 (0 when x = 0), hi solves P(X ≤ x; p) =
/// 0.025 (1 when x = n), each by 200 bisection steps in p. The cdf is summed from log-pmfs
/// (`libm::lgamma`), over the shorter side.
pub fn clopper_pearson(x: usize, n: usize) -> (f64, f64) {
    let cdf = |k: usize, p: f64| -> f64 {
        // P(X ≤ k).
        let nf = n as f64;
        let lg_n = libm::lgamma(nf + 1.0);
        let (lp, lq) = (libm::log(p), libm::log1p(-p));
        let term = |j: usize| {
            let jf = j as f64;
            libm::exp(
                lg_n - libm::lgamma(jf + 1.0) - libm::lgamma(nf - jf + 1.0)
                    + jf * lp
                    + (nf - jf) * lq,
            )
        };
        if k >= n {
            return 1.0;
        }
        if (k as f64) < nf * p {
            (0..=k).map(term).sum::<f64>().min(1.0)
        } else {
            (1.0 - ((k + 1)..=n).map(term).sum::<f64>()).max(0.0)
        }
    };
    let solve = |f: &dyn Fn(f64) -> f64| {
        // f increasing in p from < 0 to > 0.
        let (mut a, mut b) = (0.0f64, 1.0f64);
        for _ in 0..200 {
            let m = 0.5 * (a + b);
            if f(m) < 0.0 {
                a = m;
            } else {
                b = m;
            }
        }
        0.5 * (a + b)
    };
    let lo = if x == 0 {
        0.0
    } else {
        solve(&|p| (1.0 - cdf(x - 1, p)) - 0.025)
    };
    let hi = if x >= n {
        1.0
    } else {
        solve(&|p| 0.025 - cdf(x, p))
    };
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mutant is shown caught when some check's smallest usage, scaled by the least ratio
    /// of the swept tolerance to the recommended one, stays above 100 %; not otherwise.
    #[test]
    fn a_mutant_is_shown_caught_only_with_margin_under_the_recommendation() {
        let tol = |atol, rtol| Tolerance { atol, rtol };
        let d = |min: f64| GroupData {
            meta: GroupMeta {
                scenario: "s".into(),
                param: "p".into(),
                profile: "f".into(),
                mutant: "m".into(),
                checks: vec!["logits".into()],
                policies: vec!["old".into(), "exact".into()],
                tolerances: vec![vec![tol(1e-6, 1e-5)], vec![tol(0.0, 0.0)]],
                asserted: crate::check::comparison::Comparison::ShardedVsRef,
                seed_dependent: true,
            },
            seeds: (0..10).collect(),
            fr: Vec::new(),
            mutant_min_usage: vec![vec![min, f64::INFINITY]],
            jax: false,
        };
        // Recommended (1.6e-5, 2.1e-6): the least ratio is 1e-6 / 1.6e-5 = 0.0625.
        let rec = [tol(1.6e-5, 2.1e-6)];
        assert!(caught(&d(1601.0), &rec));
        assert!(!caught(&d(1599.0), &rec));
        // An exact policy's infinite usage scales by 0 and shows nothing.
        assert!(!caught(&d(0.0), &rec));
        // A looser swept tolerance scales the usage up.
        assert!(caught(&d(101.0), &[tol(1e-7, 1e-6)]));
        // No recommendation for the check: nothing caught.
        assert!(!caught(&d(1e9), &[tol(f64::NAN, f64::NAN)]));
    }

    #[test]
    fn rounding_up_keeps_two_significant_digits_and_never_goes_down() {
        assert_eq!(round_up_2(1.234e-6), 1.3e-6);
        assert_eq!(round_up_2(1.2e-6), 1.2e-6);
        assert_eq!(round_up_2(9.91e-5), 1.0e-4);
        for x in [3.3e-7, 7.77e-3, 1.0, 45.6] {
            assert!(round_up_2(x) >= x);
        }
    }

    /// 400 seeds, each one point (d, e) = (i·1e-8, 1): at p = 1e-2 (400 ≥ 368 seeds, so an
    /// empirical bound) the recommended atol keeps the upper bound at or below 50 %, and
    /// 0.85 of it does not (rounding up to two digits adds less than 10 %).
    #[test]
    fn sized_tolerance_meets_the_target_and_a_smaller_one_does_not() {
        let fr: Frontiers = vec![(1..=400).map(|i| vec![(i as f64 * 1e-8, 1.0)]).collect()];
        let rec = size_shape(&fr, &[0], Shape::AtolAtTorchRtol, 1e-2, 50.0);
        assert_eq!(rec.method, SizingMethod::Empirical);
        assert!(rec.upper <= 50.0, "{rec:?}");
        assert_eq!(rec.tol.atol, round_up_2(rec.tol.atol));
        let smaller = Tolerance {
            atol: rec.tol.atol * 0.85,
            rtol: TORCH_RTOL,
        };
        assert!(bound(&fr, &[0], smaller, 1e-2).hi > 50.0);
        // Balanced: usage scales as 1/λ, and the rounded pair still meets the target.
        let bal = size_shape(&fr, &[0], Shape::Balanced, 1e-2, 50.0);
        assert!(bal.upper <= 50.0 && bal.tol.atol >= bal.lambda * TORCH_PAIR.0);
        // rtol at atol 0 for values near zero is not a recommendation.
        let near_zero: Frontiers = vec![(1..=400).map(|i| vec![(i as f64 * 1e-8, 1e-9)]).collect()];
        let r = size_shape(&near_zero, &[0], Shape::RtolAtZeroAtol, 1e-2, 50.0);
        assert!(r.tol.rtol.is_nan() && r.note.contains("near zero"), "{r:?}");
        // Bit-exact everywhere: assert equality.
        let exact: Frontiers = vec![vec![vec![]; 50]];
        let e = size_shape(&exact, &[0], Shape::Balanced, 1e-4, 50.0);
        assert_eq!((e.tol.atol, e.tol.rtol), (0.0, 0.0));
    }

    /// Too few seeds: the fallback is conservative, and `size` says so.
    #[test]
    fn fifty_seeds_at_1e4_warn_and_size_conservatively() {
        let fr: Frontiers = vec![(1..=50)
            .map(|i| vec![(1e-6 * (1.0 + (i as f64 * 0.37).sin().abs()), 1.0)])
            .collect()];
        let rec = size_shape(&fr, &[0], Shape::Balanced, 1e-4, 50.0);
        assert_eq!(rec.method, SizingMethod::Conservative);
        // Larger than sizing the largest observed usage to the target.
        let torch = Tolerance {
            atol: TORCH_PAIR.0,
            rtol: TORCH_PAIR.1,
        };
        let worst = usages(&fr[0], torch).into_iter().fold(0.0, f64::max);
        assert!(rec.lambda > worst / 50.0, "{rec:?} vs worst {worst}");
    }

    #[test]
    fn clopper_pearson_matches_closed_forms() {
        // x = 0: hi = 1 − 0.025^(1/n); x = n: lo = 0.025^(1/n). 1e-9 relative: 200 bisection
        // steps resolve far below that; the cdf sums are exact to rounding here.
        let n = 1000;
        let (lo, hi) = clopper_pearson(0, n);
        assert_eq!(lo, 0.0);
        assert!((hi - (1.0 - 0.025f64.powf(1.0 / n as f64))).abs() < 1e-9 * hi);
        let (lo, hi) = clopper_pearson(n, n);
        assert_eq!(hi, 1.0);
        assert!((lo - 0.025f64.powf(1.0 / n as f64)).abs() < 1e-9);
        // x = 2 of 200000: 1.2110487e-06 and 3.6122967e-05, computed independently in Python
        // with exact `math.comb` binomial sums and bisection. 1e-6 relative: both are
        // converged far below that.
        let (lo, hi) = clopper_pearson(2, 200_000);
        assert!((lo / 1.2110487e-6 - 1.0).abs() < 1e-6, "{lo}");
        assert!((hi / 3.6122967e-5 - 1.0).abs() < 1e-6, "{hi}");
    }
}
