//! Aggregating in seed order: each group's per-seed rows ([`SeedValues`]) are fed to a
//! running [`GroupAgg`] in ascending seed order (worst usage, failing seeds, exact quantiles
//! or bounded histograms with the exact top of the tail), then [`summarize`]d into summary
//! entries with their tail estimates; and the per-seed frontiers `size` fits are collected
//! per group in seed order ([`collect_frontiers`]). Seed order makes every aggregate
//! independent of the thread count and of how the seeds were split into shards.
//!
//! A mutant group answers one question: is the bug caught, on which seeds, by how much? Its
//! aggregate keeps exactly that, per entry and per policy over all checks ([`Caught`]): no
//! usages for quantiles, and [`summarize_all`] fits no tail for it. A shard's [`Caught`]
//! counts merge exactly ([`GroupAgg::merge_caught`]).

use crate::check::comparison::Comparison;
use crate::check::{StepLabel, Tolerance};
use crate::engine::catalog::{Catalog, Group};
use crate::engine::evaluate::{evaluate, unit_frontiers, SeedValues};
use crate::engine::plan::{self, GroupMeta, SeedRange};
use crate::engine::run::run_family;
use crate::exec::scenario::Workspace;
use crate::stats::histogram::LogHistogram;
use crate::stats::quantile_sorted;
use crate::stats::tail::{tail_estimate, TailEstimate};

/// One group's frontiers in the asserted comparison: `[check][seed]`, each a list of
/// (|actual − expected|, |expected|) points ([`crate::stats::frontier`]).
pub type Frontiers = Vec<Vec<Vec<(f64, f64)>>>;

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
    /// None: a mutant group (its quantiles and tail answer nothing).
    None,
}

/// The `k` largest values seen, exactly (by `total_cmp`; NaN above +∞).
///
/// Kept as a buffer of candidates, amortized O(1) per value: every value above `floor` is
/// appended; when the buffer holds [`TopK::capacity`] values it is cut back to its `k`
/// largest (`select_nth_unstable_by`, O(len)), and `floor` becomes the least of them, the
/// k-th largest seen so far. A later value at or below that floor cannot be among the `k`
/// largest (k values at least as large are already kept; equal values under `total_cmp` are
/// equal bit for bit, so which copy is kept does not matter). Once the buffer is full, most
/// values are turned away by one comparison. (A binary min-heap of the `k` largest took
/// O(log k) cache-missing steps per accepted value: 2.5 % of a million-seed sweep.)
#[derive(Debug, Clone, Default)]
pub struct TopK {
    k: usize,
    kept: Vec<f64>,
    /// The k-th largest value seen, once the buffer has been cut back at least once.
    floor: Option<f64>,
}

impl TopK {
    /// Keeps the `k` largest.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            // Grows as needed, never past `capacity` (k may be large: an estimate, not a
            // reservation).
            kept: Vec::with_capacity(Self::capacity_for(k).min(1 << 16)),
            floor: None,
        }
    }
    /// Most values held before a cut: k plus half of k (at least 64): bounded memory
    /// (12 bytes per kept value at most), with a cut at most every k/2 accepted values.
    fn capacity_for(k: usize) -> usize {
        k.saturating_add((k / 2).max(64))
    }
    /// Offers a value.
    pub fn add(&mut self, x: f64) {
        if self.k == 0 {
            return;
        }
        if let Some(f) = self.floor {
            if x.total_cmp(&f) != std::cmp::Ordering::Greater {
                return;
            }
        }
        let cap = Self::capacity_for(self.k);
        if self.kept.len() == self.kept.capacity() && self.kept.len() < cap {
            let more = self.kept.len().max(1).min(cap - self.kept.len());
            self.kept.reserve_exact(more);
        }
        self.kept.push(x);
        if self.kept.len() >= cap {
            self.cut();
        }
    }
    /// Cuts the buffer back to its `k` largest and raises the floor to the least of them.
    fn cut(&mut self) {
        let n = self.kept.len();
        if n <= self.k {
            return;
        }
        self.kept.select_nth_unstable_by(n - self.k, f64::total_cmp);
        self.kept.drain(..n - self.k);
        self.floor = Some(self.kept[0]);
    }
    /// The `k` largest values seen (all of them if fewer were seen), ascending by
    /// `total_cmp`: a function of the multiset of values offered, not of their order.
    pub fn sorted(&self) -> Vec<f64> {
        let mut t = self.clone();
        t.cut();
        t.kept.sort_unstable_by(f64::total_cmp);
        t.kept
    }
    /// A stand-in sample of size `n` for the tail estimate: the kept values and `n − k`
    /// zeros below them. The tail estimate reads only the top `k` order statistics (see
    /// [`tail_keep`]), so it gives the same result as on the full sample.
    pub fn sample(&self, n: usize) -> Vec<f64> {
        stand_in(self.sorted(), n)
    }
}

/// `top` (the largest of `n` values) with zeros appended to `n` values: the sample
/// [`tail_estimate`] reads in place of all `n` ([`TopK::sample`]).
fn stand_in(mut top: Vec<f64>, n: usize) -> Vec<f64> {
    top.resize(n.max(top.len()), 0.0);
    top
}

/// How many of the largest usages the tail estimate of `n` seeds reads: its exceedances plus
/// the threshold's neighbour, and at least the top 1 % band an empirical quantile at p = 1e-2
/// (with its binomial interval) needs.
pub fn tail_keep(n: usize) -> usize {
    (crate::stats::tail::exceedance_count(n) + 2)
        .max(n / 50 + 64)
        .min(n)
}

/// How many failing seeds an [`EntryAgg`] lists (the count is always exact).
pub const FAILING_LISTED: usize = 20;

/// The per-seed failure probabilities of the summary's tail columns.
pub const TAIL_PROBS: [f64; 3] = [1e-2, 1e-3, 1e-4];

/// Running aggregate of one check × comparison × policy over seeds, fed in seed order. All
/// usages are in percent.
#[derive(Debug, Clone)]
pub struct EntryAgg {
    /// Seeds with usage > 100 %.
    pub failing: usize,
    /// The first [`FAILING_LISTED`] of those seeds, in seed order (the verdict lists them).
    pub failing_first: Vec<u64>,
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
    /// Seeds whose comparison has a routing flip ([`SeedValues::routing_flips`] above 0);
    /// `None` while no seed fed had a moe layer.
    pub flip_seeds: Option<usize>,
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
    /// One per result entry, in [`crate::engine::evaluate`]'s layout.
    pub entries: Vec<EntryAgg>,
    /// Per policy: seeds on which some check of the asserted comparison exceeds (for mutants:
    /// seeds on which the bug is caught).
    pub caught: Vec<usize>,
    /// Per policy: the first of those seeds.
    pub caught_first: Vec<Option<u64>>,
    /// Per policy: the smallest over seeds of the largest usage over the checks of the
    /// asserted comparison, percent (how surely some check catches a mutant).
    pub caught_min_usage: Vec<f64>,
    /// Per policy: the largest usage over seeds and the checks of the asserted comparison.
    pub caught_max_usage: Vec<f64>,
}

/// How one entry (or, per policy, the checks of the asserted comparison together) catches
/// a mutant over the seeds: what `mutants.csv` writes. Counts add and extremes combine, so
/// shards' values merge to exactly the values of one run over all their seeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caught {
    /// Seeds with usage above 100 %.
    pub detected: usize,
    /// The first such seed.
    pub first: Option<u64>,
    /// Smallest usage over seeds, percent (+∞ without seeds).
    pub min_usage: f64,
    /// Largest usage over seeds, percent (−∞ without seeds).
    pub max_usage: f64,
}

impl GroupAgg {
    /// An empty aggregate for `meta`; `histogram` selects bounded-memory quantiles (which
    /// keep the top of the `expected_seeds` usages exactly for the tail estimate).
    /// A mutant group's keeps no quantiles.
    pub fn new(meta: &GroupMeta, histogram: bool, expected_seeds: usize) -> Self {
        let entry = EntryAgg {
            failing: 0,
            failing_first: Vec::new(),
            worst_usage: f64::NEG_INFINITY,
            worst_seed: 0,
            worst_step: StepLabel::default(),
            max_abs_diff: 0.0,
            max_abs_expected: 0.0,
            nonfinite_seeds: 0,
            min_usage: f64::INFINITY,
            theory_det: f64::NAN,
            theory_prob: f64::NAN,
            flip_seeds: None,
            quantiles: if !meta.mutant.is_empty() {
                Quantiles::None
            } else if histogram {
                Quantiles::Histogram(Box::default(), TopK::new(tail_keep(expected_seeds)))
            } else {
                Quantiles::Exact(Vec::new())
            },
        };
        let np = meta.policies.len();
        Self {
            seeds: 0,
            first_seed: None,
            last_seed: None,
            entries: vec![entry; meta.entries()],
            caught: vec![0; np],
            caught_first: vec![None; np],
            caught_min_usage: vec![f64::INFINITY; np],
            caught_max_usage: vec![f64::NEG_INFINITY; np],
        }
    }

    /// Entry `k`'s detection over the seeds fed.
    pub fn entry_caught(&self, k: usize) -> Caught {
        let e = &self.entries[k];
        Caught {
            detected: e.failing,
            first: e.failing_first.first().copied(),
            min_usage: e.min_usage,
            max_usage: e.worst_usage,
        }
    }

    /// Policy `p`'s detection by some check of the asserted comparison over the seeds fed.
    pub fn any_caught(&self, p: usize) -> Caught {
        Caught {
            detected: self.caught[p],
            first: self.caught_first[p],
            min_usage: self.caught_min_usage[p],
            max_usage: self.caught_max_usage[p],
        }
    }

    /// Adds another part of the seeds of a mutant group, given as what it wrote
    /// (`mutants.csv` of a shard): `seeds` seeds, `entries[k]` per entry and `any[p]` per
    /// policy. Afterwards the aggregate gives the [`Caught`] of one run over the seeds of
    /// every part, in any order of parts, exactly: counts add, the first seed is the least,
    /// and the extremes are compared as [`GroupAgg::feed`] compares them.
    pub fn merge_caught(&mut self, seeds: usize, entries: &[Caught], any: &[Caught]) {
        fn first(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            }
        }
        self.seeds += seeds;
        for (e, c) in self.entries.iter_mut().zip(entries) {
            e.failing += c.detected;
            if let Some(f) = first(e.failing_first.first().copied(), c.first) {
                e.failing_first = vec![f];
            }
            if c.min_usage < e.min_usage {
                e.min_usage = c.min_usage;
            }
            if c.max_usage > e.worst_usage {
                e.worst_usage = c.max_usage;
            }
        }
        for (p, c) in any.iter().enumerate() {
            self.caught[p] += c.detected;
            self.caught_first[p] = first(self.caught_first[p], c.first);
            if c.min_usage < self.caught_min_usage[p] {
                self.caught_min_usage[p] = c.min_usage;
            }
            if c.max_usage > self.caught_max_usage[p] {
                self.caught_max_usage[p] = c.max_usage;
            }
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
                // At most FAILING_LISTED pushes per entry over a whole sweep.
                if e.failing < FAILING_LISTED {
                    e.failing_first.push(seed);
                }
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
            if let Some(f) = sc.routing_flips {
                *e.flip_seeds.get_or_insert(0) += usize::from(f > 0);
            }
            match &mut e.quantiles {
                Quantiles::Exact(v) => v.push(u),
                Quantiles::Histogram(h, top) => {
                    h.add(u);
                    top.add(u);
                }
                Quantiles::None => {}
            }
        }
        let ci = Comparison::ALL
            .iter()
            .position(|c| *c == meta.asserted)
            .expect("asserted comparison is one of ALL");
        for p in 0..meta.policies.len() {
            // The largest usage over the checks (NaN never wins, as for the worst usage).
            let mut most = f64::NEG_INFINITY;
            for c in 0..meta.checks.len() {
                let u = res[meta.index(c, ci, p)].usage_pct;
                if u > most {
                    most = u;
                }
            }
            if most > 100.0 {
                self.caught[p] += 1;
                self.caught_first[p].get_or_insert(seed);
            }
            if most < self.caught_min_usage[p] {
                self.caught_min_usage[p] = most;
            }
            if most > self.caught_max_usage[p] {
                self.caught_max_usage[p] = most;
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
    /// Median usage over seeds, percent (NaN for a mutant group).
    pub p50_usage: f64,
    /// 95th-percentile usage over seeds, percent (NaN for a mutant group).
    pub p95_usage: f64,
    /// `exact` or `histogram` (how the quantiles were computed; `none` for a mutant group).
    pub quantile_method: &'static str,
    /// Largest |actual - expected| over all seeds.
    pub max_abs_diff: f64,
    /// Largest |expected| over all seeds.
    pub max_abs_expected: f64,
    /// Seeds with a mismatch involving NaN or infinity.
    pub nonfinite_seeds: usize,
    /// Smallest usage over seeds, percent: how surely a mutant is detected.
    pub min_usage: f64,
    /// Tail estimate of the per-seed usage at [`TAIL_PROBS`] (percent), `None` without seeds
    /// and for a mutant group.
    pub tail: Option<TailEstimate>,
    /// Largest usage of the deterministic error bound over seeds, percent (NaN: none).
    pub theory_det: f64,
    /// Largest usage of the probabilistic error bound over seeds, percent (NaN: none).
    pub theory_prob: f64,
    /// Seeds with a routing flip in the comparison; `None` without a moe layer.
    pub flip_seeds: Option<usize>,
}

/// What one entry's tail estimate is computed from.
enum TailInput<'a> {
    /// Every usage.
    Exact(&'a [f64]),
    /// The exact top of `n` usages ([`TopK::sorted`]), and `n`.
    Top(Vec<f64>, usize),
}

impl TailInput<'_> {
    /// The sample [`tail_estimate`] reads, by its value bits.
    fn bits(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Self::Exact(v) => Box::new(v.iter().map(|x| x.to_bits())),
            Self::Top(t, n) => Box::new(
                t.iter()
                    .map(|x| x.to_bits())
                    .chain(std::iter::repeat_n(0, n.saturating_sub(t.len()))),
            ),
        }
    }
    /// Whether both give [`tail_estimate`] the same sample, bit for bit.
    fn same(&self, o: &Self) -> bool {
        let len = |i: &Self| match i {
            Self::Exact(v) => v.len(),
            Self::Top(t, n) => *n.max(&t.len()),
        };
        len(self) == len(o) && self.bits().eq(o.bits())
    }
    fn estimate(&self) -> TailEstimate {
        match self {
            Self::Exact(v) => tail_estimate(v, &TAIL_PROBS),
            Self::Top(t, n) => tail_estimate(&stand_in(t.clone(), *n), &TAIL_PROBS),
        }
    }
}

/// The summary entries of every group, in group order, as [`summarize`] gives them one
/// group at a time. A mutant group's entries have no quantiles and no tail. The tail fits,
/// the costly part, run in parallel on the current rayon pool, and each distinct sample is
/// fitted once: entries whose samples are equal bit for
/// bit (the `ref-vs-f64` entries of a clean group and its mutants, the entries of two
/// parametrizations that compute the same) share one fit. [`tail_estimate`] is a
/// deterministic function of its sample, so the result is the same for any thread count.
pub fn summarize_all(metas: &[GroupMeta], aggs: &[GroupAgg]) -> Vec<Vec<SummaryEntry>> {
    use rayon::prelude::*;
    use std::hash::{Hash, Hasher};
    let mut inputs: Vec<TailInput> = Vec::new();
    let mut buckets: std::collections::HashMap<u64, Vec<usize>> = Default::default();
    let slots: Vec<Vec<Option<usize>>> = aggs
        .iter()
        .map(|agg| {
            agg.entries
                .iter()
                .map(|e| {
                    if agg.seeds == 0 {
                        return None;
                    }
                    let input = match &e.quantiles {
                        Quantiles::Exact(v) => TailInput::Exact(v),
                        Quantiles::Histogram(_, top) => TailInput::Top(top.sorted(), agg.seeds),
                        // A mutant group: no tail fit.
                        Quantiles::None => return None,
                    };
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    input.bits().for_each(|b| b.hash(&mut h));
                    let bucket = buckets.entry(h.finish()).or_default();
                    Some(match bucket.iter().find(|&&i| inputs[i].same(&input)) {
                        Some(&i) => i,
                        None => {
                            inputs.push(input);
                            bucket.push(inputs.len() - 1);
                            inputs.len() - 1
                        }
                    })
                })
                .collect()
        })
        .collect();
    // The fits and every entry's p50/p95 (a sort of its sample) at once, all in parallel.
    let (fits, quantiles): (Vec<TailEstimate>, Vec<Vec<EntryQuantiles>>) = rayon::join(
        || inputs.par_iter().map(TailInput::estimate).collect(),
        || {
            aggs.par_iter()
                .map(|a| {
                    a.entries
                        .par_iter()
                        .map(|e| entry_quantiles(e, a.seeds))
                        .collect()
                })
                .collect()
        },
    );
    metas
        .iter()
        .zip(aggs)
        .zip(&slots)
        .zip(&quantiles)
        .map(|(((m, a), s), q)| summarize_with(m, a, q, |k| s[k].map(|i| fits[i].clone())))
        .collect()
}

/// An entry's (p50, p95, quantile method).
type EntryQuantiles = (f64, f64, &'static str);

/// An entry's (p50, p95, method) over `seeds` seeds.
fn entry_quantiles(e: &EntryAgg, seeds: usize) -> EntryQuantiles {
    match &e.quantiles {
        // A group with no seeds here (another shard's) has no quantiles; it is not written
        // out.
        _ if seeds == 0 => (0.0, 0.0, "exact"),
        Quantiles::Exact(v) => {
            let mut sorted = v.clone();
            sorted.sort_unstable_by(f64::total_cmp);
            (
                quantile_sorted(&sorted, 0.5),
                quantile_sorted(&sorted, 0.95),
                "exact",
            )
        }
        Quantiles::Histogram(h, _) => (h.quantile(0.5), h.quantile(0.95), "histogram"),
        Quantiles::None => (f64::NAN, f64::NAN, "none"),
    }
}

/// The summary entries of one group, in result order.
pub fn summarize(meta: &GroupMeta, agg: &GroupAgg) -> Vec<SummaryEntry> {
    summarize_all(std::slice::from_ref(meta), std::slice::from_ref(agg))
        .pop()
        .expect("one group in, one out")
}

/// [`summarize`] with entry k's (p50, p95, method) from `quantiles[k]` and its tail
/// estimate from `tail(k)` (k in result order).
fn summarize_with(
    meta: &GroupMeta,
    agg: &GroupAgg,
    quantiles: &[EntryQuantiles],
    tail: impl Fn(usize) -> Option<TailEstimate>,
) -> Vec<SummaryEntry> {
    let mut out = Vec::with_capacity(meta.entries());
    for (c, check) in meta.checks.iter().enumerate() {
        for (ci, comparison) in Comparison::ALL.into_iter().enumerate() {
            for (p, policy) in meta.policies.iter().enumerate() {
                let e = &agg.entries[meta.index(c, ci, p)];
                let (p50, p95, method) = quantiles[meta.index(c, ci, p)];
                let tail = tail(meta.index(c, ci, p));
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
                    flip_seeds: e.flip_seeds,
                });
            }
        }
    }
    out
}

/// Whether a clean group fails its asserted comparison for some seed (`--fail-on-exceed`).
pub fn exceeded(metas: &[GroupMeta], summaries: &[Vec<SummaryEntry>]) -> bool {
    metas
        .iter()
        .zip(summaries)
        .filter(|(m, _)| m.mutant.is_empty())
        .any(|(m, entries)| {
            entries
                .iter()
                .any(|e| e.comparison == m.asserted && e.failing_seeds > 0)
        })
}

/// Runs every group over its seeds of `range` and collects each seed's frontiers in the
/// asserted comparison, `[group][check][seed]` in seed order, with a progress bar labelled
/// `what` on a terminal. Groups that share work ([`plan::families`], without a memory
/// budget: every result is kept here anyway) compute it once per seed.
pub fn collect_frontiers(
    catalog: &Catalog,
    groups: &[Group],
    range: &SeedRange,
    what: &str,
    quiet: bool,
) -> Vec<Frontiers> {
    let plan = plan::units(catalog, groups, range);
    let total: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let pb = crate::sys::progress::bar(total, quiet, what);
    let mut out: Vec<Frontiers> = groups
        .iter()
        .map(|g| vec![Vec::new(); catalog.scenarios[g.scenario].checks(g.param).len()])
        .collect();
    for f in plan::families(catalog, groups, &plan, u64::MAX, |_| 0) {
        plan::in_chunks_of(
            plan::CHUNK / f.runs.len(),
            f.seeds.clone(),
            || (Workspace::default(), Vec::new()),
            |(ws, pts), &seed| {
                let mut res = Vec::with_capacity(f.runs.len());
                run_family(catalog, groups, &f, seed, ws, |g, _, ws| {
                    let s = catalog.scenarios[g.scenario].as_ref();
                    res.push(unit_frontiers(s, g.param, ws, pts));
                });
                pb.inc(f.groups.len() as u64);
                res
            },
            |_, per_seed| {
                // Transpose to [group][check][seed].
                for res in per_seed {
                    for (j, gi) in f.groups.clone().enumerate() {
                        for (c, fr) in res[f.source[j]].iter().enumerate() {
                            out[gi][c].push(fr.clone());
                        }
                    }
                }
                Ok(())
            },
        )
        .expect("collecting frontiers cannot fail");
    }
    pb.finish_and_clear();
    out
}

/// What `size` reads of one group: a clean group's frontiers in the asserted comparison
/// (`[check][seed]`), or a mutant group's aggregate (how each check catches the bug).
#[derive(Debug, Clone)]
pub enum SizingData {
    /// A clean group's frontiers.
    Frontiers(Frontiers),
    /// A mutant group's aggregate, as a sweep aggregates it.
    Mutant(GroupAgg),
}

/// One run's results for [`collect_for_sizing`].
enum RunResult {
    Frontiers(Vec<Vec<(f64, f64)>>),
    Values(Vec<SeedValues>),
}

/// [`collect_frontiers`] for `size`: every clean group's frontiers, and every mutant group's
/// aggregate over its seeds (the values a sweep feeds it; its frontiers are not computed).
pub fn collect_for_sizing(
    catalog: &Catalog,
    groups: &[Group],
    range: &SeedRange,
    what: &str,
    quiet: bool,
) -> Vec<SizingData> {
    let plan = plan::units(catalog, groups, range);
    let total: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let pb = crate::sys::progress::bar(total, quiet, what);
    let metas: Vec<GroupMeta> = groups.iter().map(|g| GroupMeta::of(catalog, g)).collect();
    let mut out: Vec<SizingData> = groups
        .iter()
        .zip(&metas)
        .zip(&plan)
        .map(|((g, m), (_, r))| match g.mutant {
            Some(_) => SizingData::Mutant(GroupAgg::new(m, false, (r.end - r.start) as usize)),
            None => SizingData::Frontiers(vec![
                Vec::new();
                catalog.scenarios[g.scenario].checks(g.param).len()
            ]),
        })
        .collect();
    for f in plan::families(catalog, groups, &plan, u64::MAX, |_| 0) {
        plan::in_chunks_of(
            plan::CHUNK / f.runs.len(),
            f.seeds.clone(),
            || (Workspace::default(), Vec::new(), Vec::new()),
            |(ws, pts, vals), &seed| {
                let mut res = Vec::with_capacity(f.runs.len());
                run_family(catalog, groups, &f, seed, ws, |g, _, ws| {
                    let s = catalog.scenarios[g.scenario].as_ref();
                    res.push(match g.mutant {
                        None => RunResult::Frontiers(unit_frontiers(s, g.param, ws, pts)),
                        Some(_) => {
                            evaluate(s.checks(g.param), &g.tolerances, &ws.traces, vals);
                            RunResult::Values(vals.iter().map(SeedValues::from).collect())
                        }
                    });
                });
                pb.inc(f.groups.len() as u64);
                res
            },
            |seeds, per_seed| {
                for (&seed, res) in seeds.iter().zip(per_seed) {
                    for (j, gi) in f.groups.clone().enumerate() {
                        match (&mut out[gi], &res[f.source[j]]) {
                            (SizingData::Frontiers(fr), RunResult::Frontiers(r)) => {
                                for (c, x) in r.iter().enumerate() {
                                    fr[c].push(x.clone());
                                }
                            }
                            (SizingData::Mutant(agg), RunResult::Values(v)) => {
                                agg.feed(&metas[gi], seed, v)
                            }
                            _ => unreachable!("a group reports the results of a run like it"),
                        }
                    }
                }
                Ok(())
            },
        )
        .expect("collecting frontiers cannot fail");
    }
    pb.finish_and_clear();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: the k largest of everything offered, by `total_cmp`.
    fn top_by_sorting(xs: &[f64], k: usize) -> Vec<u64> {
        let mut v = xs.to_vec();
        v.sort_unstable_by(f64::total_cmp);
        v[v.len().saturating_sub(k)..]
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    use proptest::prelude::*;

    proptest! {
        /// Any k (0, below, at, above the count), values with many ties (a few distinct
        /// levels), NaN, ±∞ and ±0: the kept values are the k largest, bit for bit.
        #[test]
        fn top_k_keeps_the_k_largest(
            xs in prop::collection::vec(
                prop_oneof![
                    (0u8..6).prop_map(|l| l as f64 * 0.5),
                    prop::num::f64::ANY,
                    Just(f64::NAN),
                    Just(-0.0),
                ],
                0..700,
            ),
            k in 0usize..300,
        ) {
            let mut top = TopK::new(k);
            for &x in &xs {
                top.add(x);
            }
            let got: Vec<u64> = top.sorted().iter().map(|x| x.to_bits()).collect();
            prop_assert_eq!(got, top_by_sorting(&xs, k));
        }
    }

    /// Enough values for many cuts (k = 100, cut at 164 values): rising, falling and
    /// interleaved sequences all keep exactly the 100 largest.
    #[test]
    fn top_k_after_many_cuts() {
        let rising: Vec<f64> = (0..5000).map(|i| i as f64).collect();
        let falling: Vec<f64> = rising.iter().rev().copied().collect();
        let mixed: Vec<f64> = (0..5000u64)
            .map(|i| (i.wrapping_mul(2654435761) % 1009) as f64)
            .collect();
        for xs in [rising, falling, mixed] {
            let mut top = TopK::new(100);
            for &x in &xs {
                top.add(x);
            }
            let got: Vec<u64> = top.sorted().iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, top_by_sorting(&xs, 100));
            assert!(top.kept.capacity() <= TopK::capacity_for(100));
        }
    }

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

    fn mutant_meta() -> GroupMeta {
        GroupMeta {
            scenario: "s".into(),
            param: "p".into(),
            profile: "f".into(),
            mutant: "m".into(),
            checks: vec!["a".into(), "b".into()],
            policies: vec!["old".into(), "new".into()],
            tolerances: vec![
                vec![
                    Tolerance {
                        atol: 1.0,
                        rtol: 0.0
                    };
                    2
                ];
                2
            ],
            asserted: Comparison::ShardedVsRef,
            seed_dependent: true,
        }
    }

    /// A mutant group's counts from parts of its seeds, merged in any order, are the counts
    /// of one run over all of them: what `merge` relies on. Usages around 100 % (caught on
    /// some seeds), with ties, zeros and infinities.
    #[test]
    fn merged_parts_give_the_counts_of_one_run() {
        let m = mutant_meta();
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds: Vec<(u64, Vec<SeedValues>)> = (100..400u64)
            .map(|seed| {
                let v = (0..m.entries())
                    .map(|_| SeedValues {
                        usage_pct: match next() % 10 {
                            0 => f64::INFINITY,
                            1 => 0.0,
                            2 => 100.0,
                            r => (r * 31 % 200) as f64,
                        },
                        ..SeedValues::default()
                    })
                    .collect();
                (seed, v)
            })
            .collect();
        let mut whole = GroupAgg::new(&m, false, seeds.len());
        for (s, v) in &seeds {
            whole.feed(&m, *s, v);
        }
        assert!(matches!(whole.entries[0].quantiles, Quantiles::None));
        let caught = |a: &GroupAgg| {
            let e: Vec<Caught> = (0..m.entries()).map(|k| a.entry_caught(k)).collect();
            let any: Vec<Caught> = (0..m.policies.len()).map(|p| a.any_caught(p)).collect();
            (e, any)
        };
        // Parts of 0, 1, 120 and the rest of the seeds, merged in reverse order.
        let mut merged = GroupAgg::new(&m, false, 0);
        let cuts = [0, 0, 1, 121, seeds.len()];
        for w in cuts.windows(2).rev() {
            let mut part = GroupAgg::new(&m, false, 0);
            for (s, v) in &seeds[w[0]..w[1]] {
                part.feed(&m, *s, v);
            }
            if part.seeds > 0 {
                let (e, any) = caught(&part);
                merged.merge_caught(part.seeds, &e, &any);
            }
        }
        assert_eq!(merged.seeds, whole.seeds);
        let (a, b) = (caught(&merged), caught(&whole));
        assert_eq!(a, b);
        assert!(b
            .0
            .iter()
            .any(|c| c.detected > 0 && c.detected < seeds.len()));
        assert!(b.1.iter().all(|c| c.first.is_some()));
    }
}
