//! The sweep driver: rayon across (parametrization, profile, seed), deterministic streaming
//! aggregation in seed order.
//!
//! Work units (one group × one seed) are processed in chunks: a chunk runs in parallel, its
//! results are collected by index, then fed in unit order to the groups' aggregates and to the
//! output sink before the next chunk starts. Memory is bounded by the chunk size, the output
//! does not depend on the thread count or on scheduling, and a sink that appends to a file
//! leaves whole units behind when interrupted, which `--resume` continues from.

use std::ops::Range;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use crate::catalog::{Catalog, Group};
use crate::check::{StepLabel, Tolerance};
use crate::evaluate::{evaluate, Comparison, SeedCheck};
use crate::scenario::Workspace;
use crate::stats::histogram::LogHistogram;
use crate::stats::quantile_sorted;
use crate::stats::tail::{tail_estimate, TailEstimate};

/// Units per parallel chunk: large enough to keep every thread busy, small enough that the
/// chunk's results stay a few megabytes.
pub const CHUNK: usize = 4096;

/// A deterministic slice of the seed range (`--shard i/n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u64,
    /// Number of shards, >= 1.
    pub count: u64,
}

/// Seeds to run.
#[derive(Debug, Clone)]
pub struct SeedRange {
    /// First seed; `None` uses each scenario's configured first seed.
    pub first: Option<u64>,
    /// Number of seeds, >= 1.
    pub count: u64,
    /// Only this shard's slice: seeds `first + i·count/n .. first + (i+1)·count/n` (integer
    /// division), and seed-independent scenarios in shard 0 only.
    pub shard: Option<Shard>,
}

/// What identifies a group and lays out its results, independent of the catalog (so shard
/// outputs can be merged without the configs that produced them).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMeta {
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Profile spec.
    pub profile: String,
    /// Mutant name, empty for the clean run.
    pub mutant: String,
    /// Check names, in result order.
    pub checks: Vec<String>,
    /// Policy names, in result order.
    pub policies: Vec<String>,
    /// `tolerances[p][c]`.
    pub tolerances: Vec<Vec<Tolerance>>,
    /// The comparison the test asserts.
    pub asserted: Comparison,
    /// Whether the seed changes the scenario.
    pub seed_dependent: bool,
}

impl GroupMeta {
    /// The metadata of a planned group.
    pub fn of(catalog: &Catalog, g: &Group) -> Self {
        let s = &catalog.scenarios[g.scenario];
        Self {
            scenario: s.common().name.clone(),
            param: s.param_ids()[g.param].to_string(),
            profile: g.profile.name.clone(),
            mutant: g.mutant.map(|m| m.name().to_string()).unwrap_or_default(),
            checks: s
                .checks(g.param)
                .iter()
                .map(|c| c.name.to_string())
                .collect(),
            policies: g.policy_names.clone(),
            tolerances: g.tolerances.clone(),
            asserted: s.asserted_comparison(),
            seed_dependent: s.seed_dependent(),
        }
    }

    /// Results per seed: checks × comparisons × policies.
    pub fn entries(&self) -> usize {
        self.checks.len() * Comparison::ALL.len() * self.policies.len()
    }

    /// Index of a result in the layout of [`evaluate`].
    pub fn index(&self, check: usize, comparison: usize, policy: usize) -> usize {
        (check * Comparison::ALL.len() + comparison) * self.policies.len() + policy
    }
}

/// The seeds a group runs in `range` (possibly empty for a shard).
pub fn group_seeds(catalog: &Catalog, g: &Group, range: &SeedRange) -> Range<u64> {
    let s = &catalog.scenarios[g.scenario];
    let first = range.first.unwrap_or(s.common().first_seed);
    let (lo, hi) = if !s.seed_dependent() {
        match range.shard {
            Some(sh) if sh.index != 0 => (0, 0),
            _ => (0, 1),
        }
    } else {
        match range.shard {
            None => (0, range.count),
            Some(sh) => (
                shard_bound(range.count, sh.index, sh.count),
                shard_bound(range.count, sh.index + 1, sh.count),
            ),
        }
    };
    first.wrapping_add(lo)..first.wrapping_add(hi)
}

/// `count·i/n` without overflow.
fn shard_bound(count: u64, i: u64, n: u64) -> u64 {
    ((count as u128 * i as u128) / n as u128) as u64
}

/// One seed's result for one entry, as `seeds.csv` stores it: the usage in percent
/// (`100·usage`, one rounding), so that aggregating these values gives the same summary
/// whether they come from a run or are read back from `seeds.csv` (`merge`, `--resume`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SeedValues {
    /// `100 · usage`.
    pub usage_pct: f64,
    /// Largest |diff| over steps.
    pub max_abs_diff: f64,
    /// Step of the worst usage.
    pub worst_step: StepLabel,
    /// Mismatched elements at the worst step.
    pub mismatched: u32,
    /// Elements at the worst step.
    pub elements: u32,
    /// NaN/inf mismatches over steps.
    pub nonfinite: u32,
    /// Largest |expected| over steps.
    pub max_abs_expected: f64,
    /// Usage of the deterministic error bound, percent (NaN: not a matmul-like check).
    pub theory_det_pct: f64,
    /// Usage of the probabilistic error bound, percent (NaN: not a matmul-like check).
    pub theory_prob_pct: f64,
}

impl From<&SeedCheck> for SeedValues {
    fn from(sc: &SeedCheck) -> Self {
        Self {
            usage_pct: sc.usage * 100.0,
            max_abs_diff: sc.max_abs_diff,
            worst_step: sc.worst_step,
            mismatched: sc.mismatched,
            elements: sc.elements,
            nonfinite: sc.nonfinite,
            max_abs_expected: sc.max_abs_expected,
            theory_det_pct: sc.theory_det * 100.0,
            theory_prob_pct: sc.theory_prob * 100.0,
        }
    }
}

/// The larger of two values where NaN means "none".
fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else {
        a.max(b)
    }
}

/// Quantile state of one summary entry.
#[derive(Debug, Clone)]
pub enum Quantiles {
    /// Every usage, for exact quantiles.
    Exact(Vec<f64>),
    /// A log-binned histogram (`--summary-only`): memory independent of the seed count,
    /// plus the largest usages exactly, as many as the tail estimate reads
    /// ([`tail_keep`]).
    Histogram(Box<LogHistogram>, TopK),
}

/// The `k` largest values seen, exactly (a min-heap of capacity `k`).
#[derive(Debug, Clone, Default)]
pub struct TopK {
    k: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<OrdF64>>,
}

/// An f64 ordered by `total_cmp`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl TopK {
    /// Keeps the `k` largest.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            // Grows as needed: k may be large (an estimate, not a reservation).
            heap: std::collections::BinaryHeap::with_capacity(k.saturating_add(1).min(1 << 16)),
        }
    }
    /// Offers a value.
    pub fn add(&mut self, x: f64) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(std::cmp::Reverse(OrdF64(x)));
        } else if let Some(min) = self.heap.peek() {
            if OrdF64(x) > min.0 {
                self.heap.pop();
                self.heap.push(std::cmp::Reverse(OrdF64(x)));
            }
        }
    }
    /// A stand-in sample of size `n` for the tail estimate: the kept values and `n − k`
    /// zeros below them. The tail estimate reads only the top `k` order statistics (see
    /// [`tail_keep`]), so it gives the same result as on the full sample.
    pub fn sample(&self, n: usize) -> Vec<f64> {
        let mut v: Vec<f64> = self.heap.iter().map(|r| r.0 .0).collect();
        v.resize(n.max(v.len()), 0.0);
        v
    }
}

/// How many of the largest usages the tail estimate of `n` seeds reads: its exceedances plus
/// the threshold's neighbour, and at least the top 1 % band an empirical quantile at p = 1e-2
/// (with its binomial interval) needs.
pub fn tail_keep(n: usize) -> usize {
    (crate::stats::tail::exceedance_count(n) + 2)
        .max(n / 50 + 64)
        .min(n)
}

/// The per-seed failure probabilities of the summary's tail columns.
pub const TAIL_PROBS: [f64; 3] = [1e-2, 1e-3, 1e-4];

/// Running aggregate of one check × comparison × policy over seeds, fed in seed order. All
/// usages are in percent.
#[derive(Debug, Clone)]
pub struct EntryAgg {
    /// Seeds with usage > 100 %.
    pub failing: usize,
    /// Largest usage so far (the first seed reaching it wins ties).
    pub worst_usage: f64,
    /// Its seed.
    pub worst_seed: u64,
    /// Its step.
    pub worst_step: StepLabel,
    /// Largest |diff|.
    pub max_abs_diff: f64,
    /// Largest |expected|.
    pub max_abs_expected: f64,
    /// Seeds with NaN/inf mismatches.
    pub nonfinite_seeds: usize,
    /// Smallest usage.
    pub min_usage: f64,
    /// Largest deterministic-bound usage, percent (NaN: none).
    pub theory_det: f64,
    /// Largest probabilistic-bound usage, percent (NaN: none).
    pub theory_prob: f64,
    /// Quantile state.
    pub quantiles: Quantiles,
}

/// Running aggregate of one group.
#[derive(Debug, Clone)]
pub struct GroupAgg {
    /// Seeds fed.
    pub seeds: usize,
    /// First seed fed.
    pub first_seed: Option<u64>,
    /// Last seed fed.
    pub last_seed: Option<u64>,
    /// One per result entry, in [`evaluate`]'s layout.
    pub entries: Vec<EntryAgg>,
    /// Per policy: seeds on which some check of the asserted comparison exceeds (for mutants:
    /// seeds on which the bug is caught).
    pub caught: Vec<usize>,
}

impl GroupAgg {
    /// An empty aggregate for `meta`; `histogram` selects bounded-memory quantiles (which
    /// keep the top of the `expected_seeds` usages exactly for the tail estimate).
    pub fn new(meta: &GroupMeta, histogram: bool, expected_seeds: usize) -> Self {
        let entry = EntryAgg {
            failing: 0,
            worst_usage: f64::NEG_INFINITY,
            worst_seed: 0,
            worst_step: StepLabel::default(),
            max_abs_diff: 0.0,
            max_abs_expected: 0.0,
            nonfinite_seeds: 0,
            min_usage: f64::INFINITY,
            theory_det: f64::NAN,
            theory_prob: f64::NAN,
            quantiles: if histogram {
                Quantiles::Histogram(Box::default(), TopK::new(tail_keep(expected_seeds)))
            } else {
                Quantiles::Exact(Vec::new())
            },
        };
        Self {
            seeds: 0,
            first_seed: None,
            last_seed: None,
            entries: vec![entry; meta.entries()],
            caught: vec![0; meta.policies.len()],
        }
    }

    /// Adds one seed's results (seeds must come in ascending order).
    pub fn feed(&mut self, meta: &GroupMeta, seed: u64, res: &[SeedValues]) {
        self.seeds += 1;
        self.first_seed.get_or_insert(seed);
        self.last_seed = Some(seed);
        for (e, sc) in self.entries.iter_mut().zip(res) {
            let u = sc.usage_pct;
            if u < e.min_usage {
                e.min_usage = u;
            }
            if u > 100.0 {
                e.failing += 1;
            }
            if u > e.worst_usage {
                e.worst_usage = u;
                e.worst_seed = seed;
                e.worst_step = sc.worst_step;
            }
            e.max_abs_diff = e.max_abs_diff.max(sc.max_abs_diff);
            e.max_abs_expected = e.max_abs_expected.max(sc.max_abs_expected);
            if sc.nonfinite > 0 {
                e.nonfinite_seeds += 1;
            }
            e.theory_det = max_nan(e.theory_det, sc.theory_det_pct);
            e.theory_prob = max_nan(e.theory_prob, sc.theory_prob_pct);
            match &mut e.quantiles {
                Quantiles::Exact(v) => v.push(u),
                Quantiles::Histogram(h, top) => {
                    h.add(u);
                    top.add(u);
                }
            }
        }
        let ci = Comparison::ALL
            .iter()
            .position(|c| *c == meta.asserted)
            .expect("asserted comparison is one of ALL");
        for p in 0..meta.policies.len() {
            if (0..meta.checks.len()).any(|c| res[meta.index(c, ci, p)].usage_pct > 100.0) {
                self.caught[p] += 1;
            }
        }
    }
}

/// One row of the summary: a check × comparison × policy of one group over all its seeds.
#[derive(Debug, Clone)]
pub struct SummaryEntry {
    /// Check name.
    pub check: String,
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
    /// Largest usage, percent.
    pub worst_usage: f64,
    /// Seed of the largest usage (the first such seed in seed order).
    pub worst_seed: u64,
    /// Step of the largest usage in that seed.
    pub worst_step: StepLabel,
    /// Median usage over seeds, percent.
    pub p50_usage: f64,
    /// 95th-percentile usage over seeds, percent.
    pub p95_usage: f64,
    /// `exact` or `histogram` (how the quantiles were computed).
    pub quantile_method: &'static str,
    /// Largest |actual - expected| over all seeds.
    pub max_abs_diff: f64,
    /// Largest |expected| over all seeds.
    pub max_abs_expected: f64,
    /// Seeds with a mismatch involving NaN or infinity.
    pub nonfinite_seeds: usize,
    /// Smallest usage over seeds, percent: how surely a mutant is detected.
    pub min_usage: f64,
    /// Tail estimate of the per-seed usage at [`TAIL_PROBS`] (percent), `None` without seeds.
    pub tail: Option<TailEstimate>,
    /// Largest usage of the deterministic error bound over seeds, percent (NaN: none).
    pub theory_det: f64,
    /// Largest usage of the probabilistic error bound over seeds, percent (NaN: none).
    pub theory_prob: f64,
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

/// The work units of a plan, in output order: group-major, then seed.
pub fn units(catalog: &Catalog, groups: &[Group], range: &SeedRange) -> Vec<(usize, Range<u64>)> {
    groups
        .iter()
        .enumerate()
        .map(|(gi, g)| (gi, group_seeds(catalog, g, range)))
        .collect()
}

/// Runs one work unit, a group at one seed (its mutant injected into the sharded
/// computation), in `ws`, and evaluates every check × comparison × policy into `out`.
pub fn run_unit(
    catalog: &Catalog,
    g: &Group,
    seed: u64,
    ws: &mut Workspace,
    out: &mut Vec<SeedCheck>,
) {
    let s = &catalog.scenarios[g.scenario];
    ws.mutant = g.mutant;
    s.run(g.param, seed, &g.profile, ws);
    evaluate(s.checks(g.param), &g.tolerances, &ws.traces, out);
}

/// Where finished units go, in output order.
pub trait UnitSink {
    /// One unit's results.
    fn unit(&mut self, group: usize, seed: u64, values: &[SeedValues]) -> anyhow::Result<()>;
    /// Every unit so far has been given to [`UnitSink::unit`]: a safe point to checkpoint.
    fn chunk_done(&mut self, units_so_far: u64) -> anyhow::Result<()>;
    /// One unit's tolerance frontiers in the asserted comparison, `[check]` (after
    /// [`UnitSink::unit`] for the same unit). Default: discarded.
    fn frontiers(
        &mut self,
        _group: usize,
        _seed: u64,
        _frontiers: &[Vec<(f64, f64)>],
    ) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Runs every unit after the first `skip` (already fed by a resume) on the current rayon
/// pool, in chunks of [`CHUNK`], feeding `aggs` and the sink for each unit in output order.
#[allow(clippy::too_many_arguments)]
pub fn run(
    catalog: &Catalog,
    groups: &[Group],
    metas: &[GroupMeta],
    plan: &[(usize, Range<u64>)],
    skip: u64,
    aggs: &mut [GroupAgg],
    quiet: bool,
    sink: &mut dyn UnitSink,
) -> anyhow::Result<()> {
    let total: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let pb = progress_bar(total, quiet, "sweep");
    pb.inc(skip.min(total));
    // Iterate units lazily in output order, skipping the resumed ones.
    let mut pending = plan
        .iter()
        .flat_map(|(gi, r)| r.clone().map(move |seed| (*gi, seed)))
        .skip(skip as usize)
        .peekable();
    let mut chunk: Vec<(usize, u64)> = Vec::with_capacity(CHUNK);
    let mut so_far = skip;
    while pending.peek().is_some() {
        chunk.clear();
        chunk.extend(pending.by_ref().take(CHUNK));
        let results: Vec<(Vec<SeedCheck>, crate::export::frontiers::SeedFrontiers)> = chunk
            .par_iter()
            .map_init(
                || (Workspace::default(), Vec::new()),
                |(ws, pts), &(gi, seed)| {
                    let mut out = Vec::new();
                    run_unit(catalog, &groups[gi], seed, ws, &mut out);
                    let g = &groups[gi];
                    let fr = crate::size::unit_frontiers(
                        catalog.scenarios[g.scenario].as_ref(),
                        g.param,
                        ws,
                        pts,
                    );
                    pb.inc(1);
                    (out, fr)
                },
            )
            .collect();
        let mut values = Vec::new();
        for (&(gi, seed), (res, fr)) in chunk.iter().zip(&results) {
            values.clear();
            values.extend(res.iter().map(SeedValues::from));
            aggs[gi].feed(&metas[gi], seed, &values);
            sink.unit(gi, seed, &values)?;
            sink.frontiers(gi, seed, fr)?;
        }
        so_far += chunk.len() as u64;
        sink.chunk_done(so_far)?;
    }
    pb.finish_and_clear();
    Ok(())
}

/// The summary entries of one group, in result order.
pub fn summarize(meta: &GroupMeta, agg: &GroupAgg) -> Vec<SummaryEntry> {
    let mut out = Vec::with_capacity(meta.entries());
    let mut sorted = Vec::new();
    for (c, check) in meta.checks.iter().enumerate() {
        for (ci, comparison) in Comparison::ALL.into_iter().enumerate() {
            for (p, policy) in meta.policies.iter().enumerate() {
                let e = &agg.entries[meta.index(c, ci, p)];
                let (p50, p95, method) = match &e.quantiles {
                    // A group with no seeds here (another shard's) has no quantiles; it is
                    // not written out.
                    _ if agg.seeds == 0 => (0.0, 0.0, "exact"),
                    Quantiles::Exact(v) => {
                        sorted.clear();
                        sorted.extend_from_slice(v);
                        sorted.sort_by(f64::total_cmp);
                        (
                            quantile_sorted(&sorted, 0.5),
                            quantile_sorted(&sorted, 0.95),
                            "exact",
                        )
                    }
                    Quantiles::Histogram(h, _) => (h.quantile(0.5), h.quantile(0.95), "histogram"),
                };
                let tail = match &e.quantiles {
                    _ if agg.seeds == 0 => None,
                    Quantiles::Exact(v) => Some(tail_estimate(v, &TAIL_PROBS)),
                    Quantiles::Histogram(_, top) => {
                        Some(tail_estimate(&top.sample(agg.seeds), &TAIL_PROBS))
                    }
                };
                out.push(SummaryEntry {
                    check: check.clone(),
                    comparison,
                    policy: policy.clone(),
                    tolerance: meta.tolerances[p][c],
                    seeds: agg.seeds,
                    failing_seeds: e.failing,
                    worst_usage: e.worst_usage,
                    worst_seed: e.worst_seed,
                    worst_step: e.worst_step,
                    p50_usage: p50,
                    p95_usage: p95,
                    quantile_method: method,
                    max_abs_diff: e.max_abs_diff,
                    max_abs_expected: e.max_abs_expected,
                    nonfinite_seeds: e.nonfinite_seeds,
                    min_usage: e.min_usage,
                    tail,
                    theory_det: e.theory_det,
                    theory_prob: e.theory_prob,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_sample_gives_the_same_tail_as_the_full_sample() {
        // 5000 deterministic usages with a heavy-ish tail.
        let full: Vec<f64> = (0..5000u64)
            .map(|i| {
                let u = ((i.wrapping_mul(2654435761) % 10007) as f64 + 0.5) / 10007.0;
                10.0 * (1.0 - u).powf(-0.2)
            })
            .collect();
        let mut top = TopK::new(tail_keep(full.len()));
        for &x in &full {
            top.add(x);
        }
        let a = tail_estimate(&full, &TAIL_PROBS);
        let b = tail_estimate(&top.sample(full.len()), &TAIL_PROBS);
        assert_eq!(a, b);
    }

    #[test]
    fn shards_partition_the_seed_range() {
        for count in [1u64, 7, 40, 1000] {
            for n in 1..=6u64 {
                let mut next = 0;
                for i in 0..n {
                    let lo = shard_bound(count, i, n);
                    let hi = shard_bound(count, i + 1, n);
                    assert_eq!(lo, next, "count {count} n {n} i {i}");
                    assert!(hi >= lo);
                    next = hi;
                }
                assert_eq!(next, count);
            }
        }
    }
}
