//! The sweep driver: rayon across (parametrization, profile, seed), deterministic
//! aggregation in seed order.
//!
//! Every work unit writes its per-seed results into its own slot of a vector indexed by
//! unit; aggregation then walks the groups and seeds serially. The output therefore does not
//! depend on the thread count or on scheduling.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use crate::catalog::{Catalog, Group};
use crate::check::{StepLabel, Tolerance};
use crate::evaluate::{evaluate, Comparison, SeedCheck};
use crate::scenario::Workspace;
use crate::stats::quantile_sorted;

/// Seeds and execution settings.
#[derive(Debug, Clone)]
pub struct SeedRange {
    /// First seed; `None` uses each scenario's configured first seed.
    pub first: Option<u64>,
    /// Number of seeds, >= 1.
    pub count: u64,
}

/// The per-seed results of one group.
pub struct GroupResult {
    /// Seeds run, ascending. One seed for seed-independent scenarios.
    pub seeds: Vec<u64>,
    /// `per_seed[i]` holds the results of `seeds[i]`, laid out as [`evaluate`] lays them.
    pub per_seed: Vec<Vec<SeedCheck>>,
}

/// One row of the summary: a check × comparison × policy of one group over all its seeds.
#[derive(Debug, Clone)]
pub struct SummaryEntry {
    /// Check name.
    pub check: &'static str,
    /// Comparison.
    pub comparison: Comparison,
    /// Policy name.
    pub policy: String,
    /// The check's tolerance under the policy.
    pub tolerance: Tolerance,
    /// Seeds evaluated.
    pub seeds: usize,
    /// Seeds with usage > 100 %.
    pub failing_seeds: usize,
    /// Largest usage (ratio).
    pub worst_usage: f64,
    /// Seed of the largest usage (the first such seed in seed order).
    pub worst_seed: u64,
    /// Step of the largest usage in that seed.
    pub worst_step: StepLabel,
    /// Median usage over seeds (ratio).
    pub p50_usage: f64,
    /// 95th-percentile usage over seeds (ratio).
    pub p95_usage: f64,
    /// Largest |actual - expected| over all seeds.
    pub max_abs_diff: f64,
    /// Largest |expected| over all seeds.
    pub max_abs_expected: f64,
    /// Seeds with a mismatch involving NaN or infinity.
    pub nonfinite_seeds: usize,
    /// Smallest usage over seeds (ratio): how surely a mutant is detected.
    pub min_usage: f64,
}

/// The seeds a group runs.
pub fn group_seeds(catalog: &Catalog, g: &Group, range: &SeedRange) -> Vec<u64> {
    let s = &catalog.scenarios[g.scenario];
    let first = range.first.unwrap_or(s.common().first_seed);
    let count = if s.seed_dependent() { range.count } else { 1 };
    (0..count).map(|i| first.wrapping_add(i)).collect()
}

/// One progress-bar factory: stderr, hidden when stderr is not a terminal or when quiet.
pub fn progress_bar(len: u64, quiet: bool, what: &str) -> ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:40}] {pos}/{len} seed-runs  {per_sec}  eta {eta}",
        )
        .expect("static template is valid")
        .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

/// Runs every group over its seeds on the current rayon pool.
pub fn run(
    catalog: &Catalog,
    groups: &[Group],
    range: &SeedRange,
    quiet: bool,
) -> Vec<GroupResult> {
    let seeds: Vec<Vec<u64>> = groups
        .iter()
        .map(|g| group_seeds(catalog, g, range))
        .collect();
    let units: Vec<(usize, u64)> = seeds
        .iter()
        .enumerate()
        .flat_map(|(gi, s)| s.iter().map(move |&seed| (gi, seed)))
        .collect();
    let pb = progress_bar(units.len() as u64, quiet, "sweep");
    let results: Vec<Vec<SeedCheck>> = units
        .par_iter()
        .map_init(Workspace::default, |ws, &(gi, seed)| {
            let g = &groups[gi];
            let s = &catalog.scenarios[g.scenario];
            ws.mutant = g.mutant;
            s.run(g.param, seed, &g.profile, ws);
            let mut out = Vec::new();
            evaluate(s.checks(g.param), &g.tolerances, &ws.traces, &mut out);
            pb.inc(1);
            out
        })
        .collect();
    pb.finish_and_clear();
    let mut it = results.into_iter();
    seeds
        .into_iter()
        .map(|s| {
            let per_seed = it.by_ref().take(s.len()).collect();
            GroupResult { seeds: s, per_seed }
        })
        .collect()
}

/// Aggregates one group in seed order.
pub fn summarize(catalog: &Catalog, g: &Group, r: &GroupResult) -> Vec<SummaryEntry> {
    let checks = catalog.scenarios[g.scenario].checks(g.param);
    let np = g.policy_names.len();
    let mut out = Vec::new();
    let mut usages = Vec::with_capacity(r.seeds.len());
    for (c, spec) in checks.iter().enumerate() {
        for (ci, comparison) in Comparison::ALL.into_iter().enumerate() {
            for p in 0..np {
                let k = (c * Comparison::ALL.len() + ci) * np + p;
                usages.clear();
                let mut e = SummaryEntry {
                    check: spec.name,
                    comparison,
                    policy: g.policy_names[p].clone(),
                    tolerance: g.tolerances[p][c],
                    seeds: r.seeds.len(),
                    failing_seeds: 0,
                    worst_usage: f64::NEG_INFINITY,
                    worst_seed: r.seeds[0],
                    worst_step: StepLabel::default(),
                    p50_usage: 0.0,
                    p95_usage: 0.0,
                    max_abs_diff: 0.0,
                    max_abs_expected: 0.0,
                    nonfinite_seeds: 0,
                    min_usage: f64::INFINITY,
                };
                for (seed, res) in r.seeds.iter().zip(&r.per_seed) {
                    let sc = &res[k];
                    usages.push(sc.usage);
                    if sc.usage < e.min_usage {
                        e.min_usage = sc.usage;
                    }
                    if sc.usage > 1.0 {
                        e.failing_seeds += 1;
                    }
                    if sc.usage > e.worst_usage {
                        e.worst_usage = sc.usage;
                        e.worst_seed = *seed;
                        e.worst_step = sc.worst_step;
                    }
                    e.max_abs_diff = e.max_abs_diff.max(sc.max_abs_diff);
                    e.max_abs_expected = e.max_abs_expected.max(sc.max_abs_expected);
                    if sc.nonfinite > 0 {
                        e.nonfinite_seeds += 1;
                    }
                }
                usages.sort_by(f64::total_cmp);
                e.p50_usage = quantile_sorted(&usages, 0.5);
                e.p95_usage = quantile_sorted(&usages, 0.95);
                out.push(e);
            }
        }
    }
    out
}
