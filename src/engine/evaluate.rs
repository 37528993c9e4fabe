//! Evaluating one seed: every check × comparison × policy, over all recorded steps.
//!
//! Comparisons (the expected side second):
//! - `sharded-vs-ref`: sharded fp32 vs unsharded fp32, what the real test asserts;
//! - `ref-vs-f64`: unsharded fp32 vs the float64 ground truth;
//! - `sharded-vs-f64`: sharded fp32 vs the float64 ground truth.
//!
//! Self-consistent checks compare a computation's value with the test's formula evaluated
//! on that computation's own inputs: in fp32 for `-vs-ref`, in f64 for `-vs-f64`.
//!
//! Besides the rows ([`evaluate`] into [`SeedCheck`], stored as [`SeedValues`]), one seed's
//! traces give the tolerance frontiers `size` fits ([`unit_frontiers`]).

use crate::check::comparison::Comparison;
use crate::check::usage::{
    magnitude_stats, max_ratio, pair_stats_finite, pair_stats_finite2, pair_stats_finite_scan,
    pair_usages_finite, usage_stats, PairStats,
};
use crate::check::{StepLabel, Tolerance};
use crate::exec::scenario::{CheckSpec, Scenario, Traces, Workspace};
use crate::exec::trace::{Slot, SlotRole, Trace, View};
use crate::stats::frontier::{
    frontier, keep_pairs, scan_anchors, scan_pairs, two_pass_is_vectorized, AnchorScan,
    FrontierStream,
};

/// The worst case of one check × comparison × policy over the steps of one seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedCheck {
    /// Maximum usage over all steps and elements (ratio; 1.0 = 100 %).
    pub usage: f64,
    /// Maximum `|actual - expected|` over all steps.
    pub max_abs_diff: f64,
    /// The step of the maximum usage (first on ties).
    pub worst_step: StepLabel,
    /// Mismatched elements at the worst step.
    pub mismatched: u32,
    /// Elements compared at the worst step.
    pub elements: u32,
    /// Mismatches involving NaN or infinity, over all steps.
    pub nonfinite: u32,
    /// Maximum `|expected|` over all steps.
    pub max_abs_expected: f64,
    /// For matmul-like checks: the usage the deterministic error bound γ·Σ|a·b| would take
    /// (ratio, maximum over steps and elements); NaN for other checks.
    pub theory_det: f64,
    /// The same for Higham & Mary's probabilistic bound at per-seed failure probability
    /// [`THEORY_P`]; NaN for other checks.
    pub theory_prob: f64,
    /// Routing flips of the comparison: tokens whose chosen expert sets differ between its
    /// two computations, summed over every moe layer, micro-step and step
    /// ([`Trace::routing_flips`]); the same for every check and policy of the comparison.
    /// `None` when no computation routed (the scenario has no moe layer).
    pub routing_flips: Option<u64>,
}

/// Visits the (actual, expected, step) tensors of one check and comparison. Value slots are
/// matched across the two traces in recording order (the float64 trace may hold extra
/// condition slots).
pub fn for_each_pair<'t>(
    traces: &'t Traces,
    check: usize,
    spec: &CheckSpec,
    comparison: Comparison,
    mut f: impl FnMut(StepLabel, &'t [f64], &'t [f64]),
) {
    for_each_slot_pair(traces, check, spec, comparison, |step, (at, a), (et, e)| {
        f(step, at.data(a), et.data(e))
    });
}

/// [`for_each_pair`] with the tensors as stored ([`View`]: a lent fp32 buffer is not
/// widened).
pub fn for_each_view_pair<'t>(
    traces: &'t Traces,
    check: usize,
    spec: &CheckSpec,
    comparison: Comparison,
    mut f: impl FnMut(StepLabel, View<'t>, View<'t>),
) {
    for_each_slot_pair(traces, check, spec, comparison, |step, (at, a), (et, e)| {
        f(step, at.view(a), et.view(e))
    });
}

/// The pairing of [`for_each_pair`]: (trace, slot) of the actual and of the expected side.
fn for_each_slot_pair<'t>(
    traces: &'t Traces,
    check: usize,
    spec: &CheckSpec,
    comparison: Comparison,
    mut f: impl FnMut(StepLabel, (&'t Trace, &'t Slot), (&'t Trace, &'t Slot)),
) {
    let (actual, expected) = traces.sides(comparison);
    let self_role = match comparison {
        Comparison::ShardedVsRef => SlotRole::SelfExpectedF32,
        _ => SlotRole::SelfExpectedF64,
    };
    let mut j = 0;
    for (i, slot) in actual.slots.iter().enumerate() {
        if slot.check != check || slot.role != SlotRole::Value {
            continue;
        }
        if spec.self_consistent {
            let exp_slot: &Slot = actual.slots[i..]
                .iter()
                .find(|s| s.check == check && s.step == slot.step && s.role == self_role)
                .expect("self-consistent checks record their expectations after the value");
            f(slot.step, (actual, slot), (actual, exp_slot));
        } else {
            while j < expected.slots.len() {
                let s = &expected.slots[j];
                if s.check == check && s.step == slot.step && s.role == SlotRole::Value {
                    break;
                }
                j += 1;
            }
            let s = expected
                .slots
                .get(j)
                .expect("every computation records the same checks and steps");
            debug_assert_eq!(s.len, slot.len);
            j += 1;
            f(slot.step, (actual, slot), (expected, s));
        }
    }
}

/// The `Σ|a·b|` tensor the float64 computation recorded for `check` at `step`, if any.
pub fn condition(traces: &Traces, check: usize, step: StepLabel) -> Option<&[f64]> {
    traces
        .f64
        .slots
        .iter()
        .find(|s| s.check == check && s.step == step && s.role == SlotRole::Condition)
        .map(|s| traces.f64.data(s))
}

/// Unit roundoff of fp32.
const U: f64 = 1.0 / 16_777_216.0;

/// γ_n = n·u / (1 − n·u): the deterministic bound on the relative error of an n-term dot
/// product in any summation order, with or without FMA (Higham, *Accuracy and Stability of
/// Numerical Algorithms*, 2nd ed., §3.1).
pub fn gamma(n: usize) -> f64 {
    let nu = n as f64 * U;
    if nu >= 1.0 {
        f64::INFINITY
    } else {
        nu / (1.0 - nu)
    }
}

/// Higham & Mary's probabilistic bound (SIAM J. Sci. Comput. 41(5), 2019, Thm 3.1):
/// γ̃_n(λ) = exp(λ·√n·u + n·u²/(1 − u)) − 1, which bounds the relative error of an n-term
/// dot product with probability at least 1 − 2n·exp(−λ²(1 − u)²/2) under their model of
/// independent rounding errors. λ is chosen so that a union over `elements` such products
/// fails with probability `p`: λ = √(2·ln(2·n·elements/p)) / (1 − u).
pub fn gamma_prob(n: usize, elements: usize, p: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let lambda = (2.0 * (2.0 * n as f64 * elements.max(1) as f64 / p).ln()).sqrt() / (1.0 - U);
    (lambda * (n as f64).sqrt() * U + n as f64 * U * U / (1.0 - U)).exp_m1()
}

/// Per-seed failure probability of the probabilistic theory column.
pub const THEORY_P: f64 = 1e-4;

/// (deterministic, probabilistic) bound factors on |actual − expected| / Σ|a·b| for a
/// comparison of a reduction: the sum of the two sides' bounds (the float64 side counts as
/// exact).
fn theory_factors(
    r: &crate::scenario::ir::Reduction,
    comparison: Comparison,
    elements: usize,
) -> (f64, f64) {
    let sharded = r.max_shard + r.ranks.saturating_sub(1);
    let (det_ref, det_sh) = (gamma(r.k), gamma(sharded));
    let (pr_ref, pr_sh) = (
        gamma_prob(r.k, elements, THEORY_P),
        gamma_prob(sharded, elements, THEORY_P),
    );
    match comparison {
        Comparison::ShardedVsRef => (det_ref + det_sh, pr_ref + pr_sh),
        Comparison::RefVsF64 => (det_ref, pr_ref),
        Comparison::ShardedVsF64 => (det_sh, pr_sh),
    }
}

impl Default for SeedCheck {
    fn default() -> Self {
        Self {
            usage: 0.0,
            max_abs_diff: 0.0,
            worst_step: StepLabel::default(),
            mismatched: 0,
            elements: 0,
            nonfinite: 0,
            max_abs_expected: 0.0,
            theory_det: f64::NAN,
            theory_prob: f64::NAN,
            routing_flips: None,
        }
    }
}

/// Routing flips per comparison (in [`Comparison::ALL`] order) of one set of traces, or
/// `None` when none of the three computations routed ([`SeedCheck::routing_flips`]).
/// Walks the recorded routing once per comparison; allocates nothing.
pub fn routing_flips(traces: &Traces) -> Option<[u64; 3]> {
    let routed = !(traces.reference.routing.is_empty()
        && traces.sharded.routing.is_empty()
        && traces.f64.routing.is_empty());
    routed.then(|| {
        Comparison::ALL.map(|c| match c {
            Comparison::ShardedVsRef => traces.sharded.routing_flips(&traces.reference),
            Comparison::RefVsF64 => traces.reference.routing_flips(&traces.f64),
            Comparison::ShardedVsF64 => traces.sharded.routing_flips(&traces.f64),
        })
    })
}

/// Sets every entry's [`SeedCheck::routing_flips`] from `flips` (per comparison), `out` laid
/// out as [`evaluate`] lays it out with `policies` policies.
fn set_routing_flips(out: &mut [SeedCheck], flips: Option<[u64; 3]>, policies: usize) {
    let n = Comparison::ALL.len();
    for (i, e) in out.iter_mut().enumerate() {
        e.routing_flips = flips.map(|f| f[(i / policies) % n]);
    }
}

/// Evaluates every check × comparison × policy of one seed into `out`, laid out
/// check-major, then comparison (in [`Comparison::ALL`] order), then policy.
/// `tolerances[p][c]` is policy p's tolerance for check c.
pub fn evaluate(
    checks: &[CheckSpec],
    tolerances: &[Vec<Tolerance>],
    traces: &Traces,
    out: &mut Vec<SeedCheck>,
) {
    evaluate_scanning(checks, tolerances, traces, None, out, None)
}

/// [`evaluate`], with the `ref-vs-f64` entries copied from `reuse` when given (the output of
/// [`evaluate`] for the same checks and tolerances on traces with the same reference and
/// float64 traces: that comparison reads nothing else), and with
/// `scans = Some((asserted, v))` the frontiers' anchor scans
/// too: `v[c]` the [`AnchorScan`] of check c's pairs in the `asserted` comparison, in
/// order, as [`unit_frontiers`] takes it, where that comparison's statistics are taken
/// ([`pair_stats_finite_scan`]: in the same pass). `v` is left empty when the comparison is
/// not folded here (its entries reused, or other than two policies); [`unit_frontiers_scanned`]
/// then scans itself.
pub fn evaluate_scanning(
    checks: &[CheckSpec],
    tolerances: &[Vec<Tolerance>],
    traces: &Traces,
    reuse: Option<&[SeedCheck]>,
    out: &mut Vec<SeedCheck>,
    scans: Option<(Comparison, &mut Vec<AnchorScan>)>,
) {
    evaluate_with(checks, tolerances, traces, reuse, out, scans, false)
}

/// [`evaluate_scanning`] for a mutant run, without frontiers: the same entries but for what
/// the comparisons with the sharded computation do not compute, their theory columns (NaN)
/// and, where a tensor's statistics are taken in one pass, their mismatch counts (0). A
/// mutant group keeps how each check catches the bug, which the usages say; the error bounds
/// and mismatch counts of a computation with a bug in it answer nothing.
pub fn evaluate_mutant(
    checks: &[CheckSpec],
    tolerances: &[Vec<Tolerance>],
    traces: &Traces,
    reuse: Option<&[SeedCheck]>,
    out: &mut Vec<SeedCheck>,
) {
    evaluate_with(checks, tolerances, traces, reuse, out, None, true)
}

/// [`evaluate_scanning`], or for a `mutant` run [`evaluate_mutant`].
fn evaluate_with(
    checks: &[CheckSpec],
    tolerances: &[Vec<Tolerance>],
    traces: &Traces,
    reuse: Option<&[SeedCheck]>,
    out: &mut Vec<SeedCheck>,
    mut scans: Option<(Comparison, &mut Vec<AnchorScan>)>,
    mutant: bool,
) {
    out.clear();
    let asserted = scans.as_ref().map(|(k, _)| *k);
    let scanned =
        tolerances.len() == 2 && !(reuse.is_some() && asserted == Some(Comparison::RefVsF64));
    if let Some((_, v)) = &mut scans {
        v.clear();
        if scanned {
            v.resize(checks.len(), AnchorScan::default());
        }
    }
    for (c, spec) in checks.iter().enumerate() {
        let mut memo = RatioMemo::default();
        // `ref-vs-f64` and `sharded-vs-f64` expect the same float64 tensors (unless a check
        // expects from its own trace): both comparisons' statistics of a step are taken in
        // one pass while the first is folded ([`pair_stats_finite2`]), for up to
        // [`FUSED_STEPS`] steps, and the second reads its share back by step index.
        let fuse = reuse.is_none() && tolerances.len() == 2 && !spec.self_consistent;
        let mut sharded: [Option<StepPair>; FUSED_STEPS] = [None; FUSED_STEPS];
        let mut sharded_stats: [Option<Option<PairStats>>; FUSED_STEPS] = [None; FUSED_STEPS];
        if fuse {
            let mut k = 0;
            for_each_pair(traces, c, spec, Comparison::ShardedVsF64, |step, a, e| {
                if let Some(slot) = sharded.get_mut(k) {
                    *slot = Some((step, a, e));
                }
                k += 1;
            });
        }
        for comparison in Comparison::ALL {
            let base = out.len();
            if let (Comparison::RefVsF64, Some(r)) = (comparison, reuse) {
                out.extend_from_slice(&r[base..base + tolerances.len()]);
                continue;
            }
            out.extend(std::iter::repeat_n(SeedCheck::default(), tolerances.len()));
            let mut first = true;
            // This check's anchor scan, where this is the comparison it is taken in.
            let mut scan = match &mut scans {
                Some((k, v)) if *k == comparison && scanned => Some(&mut v[c]),
                _ => None,
            };
            let mut stats =
                |k: usize, step: StepLabel, a: &[f64], e: &[f64], [t1, t2]: [Tolerance; 2]| {
                    let fused = match comparison {
                        Comparison::RefVsF64 if fuse => match sharded.get(k).copied().flatten() {
                            Some((s, a2, e2)) if s == step && std::ptr::eq(e, e2) => {
                                let [r, sh] = pair_stats_finite2(a, a2, e, t1, t2);
                                sharded_stats[k] = Some(sh);
                                Some(r)
                            }
                            _ => None,
                        },
                        Comparison::ShardedVsF64 if fuse => sharded_stats.get(k).copied().flatten(),
                        _ => None,
                    };
                    match (fused, scan.as_deref_mut()) {
                        (Some(r), None) => r,
                        (Some(r), Some(scan)) => {
                            scan_anchors(a, e, scan);
                            r
                        }
                        (None, Some(scan)) => pair_stats_finite_scan(a, e, t1, t2, scan),
                        (None, None) if mutant && comparison != Comparison::RefVsF64 => {
                            pair_usages_finite(a, e, t1, t2)
                        }
                        (None, None) => pair_stats_finite(a, e, t1, t2),
                    }
                };
            fold_comparison(
                spec,
                c,
                comparison,
                tolerances,
                traces,
                &mut out[base..],
                &mut first,
                // `ref-vs-f64` reads no sharded trace: its entries are those of the clean
                // run, theory included, whoever computes them (a later run may reuse them).
                (!mutant || comparison == Comparison::RefVsF64).then_some(&mut memo),
                &mut stats,
            );
        }
    }
    set_routing_flips(out, routing_flips(traces), tolerances.len());
}

/// Steps of a check whose `ref-vs-f64` and `sharded-vs-f64` statistics [`evaluate`] takes in
/// one pass (later steps, if any, take them one comparison at a time).
const FUSED_STEPS: usize = 16;

/// One step's (actual, expected) tensors of a comparison.
type StepPair<'t> = (StepLabel, &'t [f64], &'t [f64]);

/// How [`fold_comparison`] gets the statistics of its k-th tensor pair (step, actual,
/// expected) under the two policies' tolerances: [`pair_stats_finite`], or a share of a
/// fused pass.
type StatsOf<'a> =
    dyn FnMut(usize, StepLabel, &[f64], &[f64], [Tolerance; 2]) -> Option<PairStats> + 'a;

/// Folds the (actual, expected) tensors of check `c` in `comparison` that `traces` holds,
/// in recording order, into `out` (one entry per policy): the worst usage (the first on
/// ties; `first`: no tensor folded yet), maxima and sums as [`evaluate`] documents them,
/// and with `memo` (the ratios taken so far) the theory columns.
#[allow(clippy::too_many_arguments)]
fn fold_comparison(
    spec: &CheckSpec,
    c: usize,
    comparison: Comparison,
    tolerances: &[Vec<Tolerance>],
    traces: &Traces,
    out: &mut [SeedCheck],
    first: &mut bool,
    mut memo: Option<&mut RatioMemo>,
    stats: &mut StatsOf<'_>,
) {
    let mut k = 0;
    for_each_pair(traces, c, spec, comparison, |step, a, e| {
        let fused = match tolerances {
            [p1, p2] => stats(k, step, a, e, [p1[c], p2[c]]),
            _ => None,
        };
        k += 1;
        let pair = Pair {
            c,
            comparison,
            step,
            len: a.len(),
            a,
            e,
            ratios: None,
        };
        fold_pair(
            spec,
            &pair,
            tolerances,
            traces,
            fused,
            out,
            first,
            memo.as_deref_mut(),
        );
    });
}

/// The [`max_ratio`]s (two policies) of the (condition, expected) tensors a check's earlier
/// comparisons have taken, by the tensors' addresses and lengths (the same slices of the
/// same traces, so the same values): up to eight, kept on the stack.
#[derive(Default)]
struct RatioMemo {
    n: usize,
    keys: [(usize, usize, usize); 8],
    vals: [[f64; 2]; 8],
}

impl RatioMemo {
    fn key(cond: &[f64], e: &[f64]) -> (usize, usize, usize) {
        (cond.as_ptr() as usize, e.as_ptr() as usize, e.len())
    }
    fn get(&self, cond: &[f64], e: &[f64]) -> Option<[f64; 2]> {
        let k = Self::key(cond, e);
        (0..self.n)
            .find(|&i| self.keys[i] == k)
            .map(|i| self.vals[i])
    }
    fn put(&mut self, cond: &[f64], e: &[f64], r: [f64; 2]) {
        if self.n < self.keys.len() && cond.len() == e.len() {
            self.keys[self.n] = Self::key(cond, e);
            self.vals[self.n] = r;
            self.n += 1;
        }
    }
}

/// One (actual, expected) tensor pair of check `c` in `comparison` at `step`, of `len`
/// elements. [`fold_pair`] reads `a` and `e` only without precomputed statistics, and `e`
/// for the theory columns without precomputed ratios; otherwise they may be empty.
struct Pair<'t> {
    c: usize,
    comparison: Comparison,
    step: StepLabel,
    len: usize,
    a: &'t [f64],
    e: &'t [f64],
    /// For a check with theory columns, [`max_ratio`] per policy when already taken (None:
    /// computed from `e`).
    ratios: Option<&'t [f64]>,
}

/// Folds one tensor pair into `out` as [`fold_comparison`] does, given what
/// [`pair_stats_finite`] returns for it under the two policies (`fused`; None: computed here
/// per policy, as for any other number of policies) and, for a check with theory columns,
/// [`Pair::ratios`]. Without `memo` the theory columns are left as they are.
#[allow(clippy::too_many_arguments)]
fn fold_pair(
    spec: &CheckSpec,
    pair: &Pair<'_>,
    tolerances: &[Vec<Tolerance>],
    traces: &Traces,
    fused: Option<PairStats>,
    out: &mut [SeedCheck],
    first: &mut bool,
    memo: Option<&mut RatioMemo>,
) {
    let &Pair {
        c,
        comparison,
        step,
        len,
        a,
        e,
        ratios,
    } = pair;
    let (max_d, max_e) = match &fused {
        Some((_, mags)) => *mags,
        None => magnitude_stats(a, e),
    };
    for (p, tols) in tolerances.iter().enumerate() {
        let (usage, mismatched, nonfinite) = match &fused {
            Some((pair, _)) => pair[p],
            None => usage_stats(a, e, tols[c]),
        };
        let r = &mut out[p];
        if *first || usage > r.usage {
            r.usage = usage;
            r.worst_step = step;
            r.mismatched = mismatched as u32;
            r.elements = len as u32;
        }
        r.max_abs_diff = r.max_abs_diff.max(max_d);
        r.max_abs_expected = r.max_abs_expected.max(max_e);
        r.nonfinite += nonfinite as u32;
    }
    let theory = match memo {
        Some(memo) => spec
            .reduction
            .zip(condition(traces, c, step))
            .map(|r| (r, memo)),
        None => None,
    };
    if let Some(((red, cond), memo)) = theory {
        let (gd, gp) = theory_factors(&red, comparison, len);
        // Without precomputed ratios, two policies' ratios come from `memo` when an earlier
        // comparison of this check had the same condition and expected tensor (ref-vs-f64
        // and sharded-vs-f64 both expect the float64 trace): the same function of the same
        // values.
        let taken;
        let ratios = match ratios {
            None if tolerances.len() == 2 => {
                taken = memo.get(cond, e).unwrap_or_else(|| {
                    let r = [
                        max_ratio(cond, e, tolerances[0][c]),
                        max_ratio(cond, e, tolerances[1][c]),
                    ];
                    memo.put(cond, e, r);
                    r
                });
                Some(&taken[..])
            }
            r => r,
        };
        for (p, tols) in tolerances.iter().enumerate() {
            let m = match ratios {
                Some(r) => r[p],
                None => max_ratio(cond, e, tols[c]),
            };
            let (ud, up) = (gd * m, gp * m);
            let r = &mut out[p];
            r.theory_det = if r.theory_det.is_nan() {
                ud
            } else {
                r.theory_det.max(ud)
            };
            r.theory_prob = if r.theory_prob.is_nan() {
                up
            } else {
                r.theory_prob.max(up)
            };
        }
    }
    *first = false;
}

/// Elements per chunk of [`StreamedEval`]'s fused fold: three comparisons' chunks
/// (3 × 64 KiB of f64 inputs) stay in the core's L2 between the passes that read them.
const FUSED_CHUNK: usize = 8192;

/// [`pair_stats_finite`]'s result for a whole tensor from its results for consecutive
/// chunks: maxima of the usages and magnitudes, sums of the counts. The maxima do not
/// depend on how the elements are grouped (every value is finite and ≥ 0), so this is the
/// same result bit for bit; a chunk with a non-finite value gives None for the whole, as
/// the whole tensor does.
fn merge_pair_stats(total: &mut PairStats, part: &PairStats) {
    for (t, p) in total.0.iter_mut().zip(&part.0) {
        if p.0 > t.0 {
            t.0 = p.0;
        }
        t.1 += p.1;
        t.2 += p.2;
    }
    if part.1 .0 > total.1 .0 {
        total.1 .0 = part.1 .0;
    }
    if part.1 .1 > total.1 .1 {
        total.1 .1 = part.1 .1;
    }
}

/// Elements from which [`StreamedEval`] folds a tensor in two halves on two threads: a
/// quarter of a million, a few milliseconds of folding per half.
const SPLIT_FROM: usize = 1 << 18;

/// What the fused fold of one tensor reads ([`StreamedEval`]): the distinct tensors of the
/// three comparisons, which of them each comparison's (actual, expected) is, the earlier
/// comparison expecting the same tensor, the two policies' tolerances, the comparison the
/// frontier is taken in and the condition numbers of the theory columns.
struct FoldInputs<'a, 'v> {
    distinct: &'a [Option<View<'v>>; 6],
    slot: &'a [[usize; 2]; 3],
    same_e: &'a [Option<usize>; 3],
    tolerances: [Tolerance; 2],
    asserted: Option<usize>,
    cond: Option<&'a [f64]>,
}

/// Per comparison the statistics of a range of elements ([`pair_stats_finite`] merged
/// chunk by chunk; None when some value is not finite), and per comparison and policy the
/// largest theory ratio ([`max_ratio`]; 0 for a comparison that takes an earlier one's).
type RangeFold = ([Option<PairStats>; 3], [[f64; 2]; 3]);

impl FoldInputs<'_, '_> {
    /// Folds elements `range` chunk by chunk ([`FUSED_CHUNK`]; one empty chunk for an empty
    /// range at 0), each chunk of every distinct tensor widened once into `chunks` and read
    /// by all three comparisons, the asserted one's pairs offered to `front` in order.
    fn range(
        &self,
        range: std::ops::Range<usize>,
        mut front: Option<&mut FrontierStream>,
        chunks: &mut [Vec<f64>; 6],
    ) -> RangeFold {
        let [t1, t2] = self.tolerances;
        let mut stats: [Option<PairStats>; 3] = [Some(([(0.0, 0, 0); 2], (0.0, 0.0))); 3];
        let mut ratios = [[0.0f64; 2]; 3];
        let end = range.end.max(range.start + 1);
        for start in (range.start..end).step_by(FUSED_CHUNK) {
            let r = start..(start + FUSED_CHUNK).min(range.end);
            let mut widened: [&[f64]; 6] = [&[]; 6];
            for ((w, buf), v) in widened.iter_mut().zip(chunks.iter_mut()).zip(self.distinct) {
                if let Some(v) = v {
                    *w = v.f64s(r.clone(), buf);
                }
            }
            for (k, total) in stats.iter_mut().enumerate() {
                let (a, e) = (widened[self.slot[k][0]], widened[self.slot[k][1]]);
                if total.is_some() {
                    merge_part(total, pair_stats_finite(a, e, t1, t2));
                }
                if self.asserted == Some(k) {
                    if let Some(front) = front.as_deref_mut() {
                        front.offer(a, e);
                    }
                }
                if let (Some(cond), None) = (self.cond, self.same_e[k]) {
                    let cond = &cond[r.start.min(cond.len())..r.end.min(cond.len())];
                    for (acc, tol) in ratios[k].iter_mut().zip([t1, t2]) {
                        let m = max_ratio(cond, e, tol);
                        if m > *acc {
                            *acc = m;
                        }
                    }
                }
            }
        }
        (stats, ratios)
    }
}

/// `total` merged with the statistics of the elements after it ([`merge_pair_stats`]):
/// None when either is None (some value not finite).
fn merge_part(total: &mut Option<PairStats>, part: Option<PairStats>) {
    match (total.as_mut(), part) {
        (Some(acc), Some(part)) => merge_pair_stats(acc, &part),
        _ => *total = None,
    }
}

/// One seed's evaluation folded step by step, for a parametrization that runs in lockstep
/// ([`Scenario::run_stepwise`]): [`StreamedEval::step`] takes each step's traces in order,
/// [`StreamedEval::finish`] gives what [`evaluate`] and [`unit_frontiers`] give for the
/// traces of all steps at once, bit for bit (the same tensors folded in the same order; the
/// frontier fed chunk by chunk, see [`FrontierStream`]). Memory: one step's traces and the
/// frontiers' staircases.
pub struct StreamedEval {
    out: Vec<SeedCheck>,
    first: Vec<bool>,
    /// Policies of the entries.
    policies: usize,
    /// Routing flips per comparison summed over the steps so far; `None` while no step
    /// routed ([`routing_flips`]).
    flips: Option<[u64; 3]>,
    /// Per check, when frontiers are asked for (empty otherwise): its frontier so far.
    fronts: Vec<FrontierStream>,
    /// Widened chunks of fp32 views ([`View::f64s`]): each distinct tensor of the three
    /// comparisons.
    chunks: [Vec<f64>; 6],
    /// The same for the second half of a tensor folded in two halves at once.
    spare: [Vec<f64>; 6],
    /// Whole tensors widened where the fold needs them.
    whole: [Vec<f64>; 2],
}

impl StreamedEval {
    /// An empty fold for `checks` under `policies` policies; frontiers too when asked.
    pub fn new(checks: &[CheckSpec], policies: usize, frontiers: bool) -> Self {
        let n = checks.len() * Comparison::ALL.len();
        Self {
            out: vec![SeedCheck::default(); n * policies],
            first: vec![true; n],
            policies,
            flips: None,
            fronts: vec![FrontierStream::default(); if frontiers { checks.len() } else { 0 }],
            chunks: Default::default(),
            spare: Default::default(),
            whole: Default::default(),
        }
    }

    /// Folds one step's traces (`asserted`: the comparison the frontiers are taken in).
    /// The traces may hold lent fp32 buffers ([`crate::exec::trace::Trace::lend`]): they are read
    /// chunk by chunk, widened exactly, so the results are those of the widened copies.
    pub fn step(
        &mut self,
        checks: &[CheckSpec],
        tolerances: &[Vec<Tolerance>],
        traces: &Traces,
        asserted: Comparison,
    ) {
        let np = tolerances.len();
        // Each step's traces hold that step's routing only.
        if let Some(f) = routing_flips(traces) {
            let sum = self.flips.get_or_insert([0; 3]);
            for (s, x) in sum.iter_mut().zip(f) {
                *s += x;
            }
        }
        // A widened copy of this step's traces, made only if a fold below needs one.
        let mut widened: Option<Traces> = None;
        for (c, spec) in checks.iter().enumerate() {
            if !self.fold_fused(spec, c, tolerances, traces, asserted) {
                let t = if traces.reference.all_f64() && traces.sharded.all_f64() {
                    traces
                } else {
                    widened.get_or_insert_with(|| Traces {
                        f64: traces.f64.widened(),
                        reference: traces.reference.widened(),
                        sharded: traces.sharded.widened(),
                    })
                };
                let mut memo = RatioMemo::default();
                for (k, comparison) in Comparison::ALL.into_iter().enumerate() {
                    let i = c * Comparison::ALL.len() + k;
                    let out = &mut self.out[i * np..(i + 1) * np];
                    fold_comparison(
                        spec,
                        c,
                        comparison,
                        tolerances,
                        t,
                        out,
                        &mut self.first[i],
                        Some(&mut memo),
                        &mut |_, _, a, e, [t1, t2]| pair_stats_finite(a, e, t1, t2),
                    );
                }
                if let Some(front) = self.fronts.get_mut(c) {
                    for_each_pair(t, c, spec, asserted, |_, a, e| {
                        for (a, e) in a.chunks(FUSED_CHUNK).zip(e.chunks(FUSED_CHUNK)) {
                            front.offer(a, e);
                        }
                    });
                }
            }
        }
    }

    /// The fold of check `c` over this step's traces (all three comparisons, and the
    /// frontier when asked for) in chunks of [`FUSED_CHUNK`] elements, each chunk of
    /// the three traces read from memory once for all of them instead of once per
    /// comparison and pass; the same results as the per-comparison fold, bit for bit (see
    /// [`merge_pair_stats`]; the anchors see the same points in the same order). Returns
    /// false, having done nothing, where it does not apply: other than two policies, or
    /// comparisons whose tensors do not pair up one for one.
    fn fold_fused(
        &mut self,
        spec: &CheckSpec,
        c: usize,
        tolerances: &[Vec<Tolerance>],
        traces: &Traces,
        asserted: Comparison,
    ) -> bool {
        if tolerances.len() != 2 {
            return false;
        }
        let mut pairs: [Vec<(StepLabel, View<'_>, View<'_>)>; 3] = Default::default();
        for (k, comparison) in Comparison::ALL.into_iter().enumerate() {
            for_each_view_pair(traces, c, spec, comparison, |step, a, e| {
                pairs[k].push((step, a, e))
            });
        }
        let lined_up = pairs.iter().all(|p| {
            p.len() == pairs[0].len()
                && p.iter()
                    .zip(&pairs[0])
                    .all(|(x, y)| x.0 == y.0 && x.1.len() == y.1.len() && x.2.len() == y.1.len())
        });
        if !lined_up {
            return false;
        }
        let (t1, t2) = (tolerances[0][c], tolerances[1][c]);
        let ka = Comparison::ALL.iter().position(|&k| k == asserted);
        let Self {
            out,
            first,
            fronts,
            chunks,
            spare,
            whole,
            ..
        } = self;
        for (t, lead) in pairs[0].iter().enumerate() {
            let n = lead.1.len();
            // The theory columns' [`max_ratio`] per comparison and policy, taken chunk by
            // chunk (a maximum, the same whatever the grouping); a comparison whose expected
            // tensor is an earlier one's (ref-vs-f64 and sharded-vs-f64 both expect the
            // float64 trace) takes that one's.
            let cond = spec.reduction.and_then(|_| condition(traces, c, lead.0));
            // Each distinct tensor of the three comparisons (the sharded and reference ones
            // appear twice) is widened once per chunk, into its own buffer.
            let mut distinct: [Option<View<'_>>; 6] = [None; 6];
            let mut slot = [[0usize; 2]; 3];
            let mut n_distinct = 0;
            for (k, sides) in slot.iter_mut().enumerate() {
                let (_, av, ev) = &pairs[k][t];
                for (side, v) in sides.iter_mut().zip([av, ev]) {
                    let found = distinct[..n_distinct]
                        .iter()
                        .position(|d| d.is_some_and(|d| d.same(v)));
                    *side = found.unwrap_or_else(|| {
                        distinct[n_distinct] = Some(*v);
                        n_distinct += 1;
                        n_distinct - 1
                    });
                }
            }
            let same_e: [Option<usize>; 3] =
                std::array::from_fn(|k| (0..k).find(|&j| slot[j][1] == slot[k][1]));
            let fold = FoldInputs {
                distinct: &distinct,
                slot: &slot,
                same_e: &same_e,
                tolerances: [t1, t2],
                asserted: ka,
                cond,
            };
            let front = fronts.get_mut(c);
            let (stats, mut ratios) = if n >= SPLIT_FROM {
                // Two halves on two threads where the pool has them (a big tensor of a
                // streamed run; on one thread the join runs one after the other): the first
                // folded into this check's frontier, the second into a fresh one merged in
                // after it; the statistics and ratios merged in order (grouping-independent,
                // see [`merge_pair_stats`]; [`FrontierStream::absorb`]).
                let mid = (n / 2).next_multiple_of(FUSED_CHUNK);
                let mut later = front.is_some().then(FrontierStream::default);
                let ((mut stats, mut ratios), (s2, r2)) = rayon::join(
                    || fold.range(0..mid, front, chunks),
                    || fold.range(mid..n, later.as_mut(), spare),
                );
                if let (Some(front), Some(later)) = (fronts.get_mut(c), later) {
                    front.absorb(later);
                }
                for k in 0..3 {
                    merge_part(&mut stats[k], s2[k]);
                    for (acc, &m) in ratios[k].iter_mut().zip(&r2[k]) {
                        if m > *acc {
                            *acc = m;
                        }
                    }
                }
                (stats, ratios)
            } else {
                fold.range(0..n, front, chunks)
            };
            for k in 0..3 {
                if let Some(j) = same_e[k] {
                    ratios[k] = ratios[j];
                }
            }
            for (k, stat) in stats.into_iter().enumerate() {
                let (step, av, ev) = &pairs[k][t];
                let comparison = Comparison::ALL[k];
                // The whole tensors, where the fold reads them: for the non-finite path only
                // (the theory columns' ratios are taken above).
                let reads = stat.is_none();
                let [wa, we] = whole;
                let (a, e) = if reads {
                    (av.f64s(0..n, wa), ev.f64s(0..n, we))
                } else {
                    (&[][..], &[][..])
                };
                let pair = Pair {
                    c,
                    comparison,
                    step: *step,
                    len: n,
                    a,
                    e,
                    ratios: Some(&ratios[k]),
                };
                let i = c * Comparison::ALL.len() + k;
                fold_pair(
                    spec,
                    &pair,
                    tolerances,
                    traces,
                    stat,
                    &mut out[i * 2..(i + 1) * 2],
                    &mut first[i],
                    Some(&mut RatioMemo::default()),
                );
            }
        }
        true
    }

    /// The folded entries (layout of [`evaluate`]) and, when asked for, the frontier of
    /// every check.
    pub fn finish(self) -> (Vec<SeedCheck>, Vec<Vec<(f64, f64)>>) {
        let fronts = self
            .fronts
            .into_iter()
            .map(FrontierStream::finish)
            .collect();
        let mut out = self.out;
        set_routing_flips(&mut out, self.flips, self.policies);
        (out, fronts)
    }
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
    /// Routing flips of the entry's comparison ([`SeedCheck::routing_flips`]); `None`: no
    /// moe layer.
    pub routing_flips: Option<u64>,
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
            routing_flips: sc.routing_flips,
        }
    }
}

/// One seed's tolerance frontiers in the asserted comparison, `[check]` of
/// (|actual − expected|, |expected|) points ([`crate::stats::frontier`]).
pub type SeedFrontiers = Vec<Vec<(f64, f64)>>;

/// Most points of one check [`unit_frontiers`] buffers (16 bytes each, 64 MiB); a check
/// with more elements is streamed twice instead.
const FRONTIER_BUFFER_POINTS: usize = 1 << 22;

/// The frontiers of one run unit, `[check]`, in the comparison the test asserts, from the
/// traces left in `ws` by `s.run` (`pts` is scratch). Per element: d = |actual − expected|
/// (NaN → +∞, and 0 when actual == expected, so equal infinities count as equal), e =
/// |expected| (0 for a non-finite expected value). The points are filtered as
/// [`crate::stats::frontier::prefilter`] filters them before the frontier is taken.
pub fn unit_frontiers(
    s: &dyn Scenario,
    param: usize,
    ws: &Workspace,
    pts: &mut Vec<(f64, f64)>,
) -> Vec<Vec<(f64, f64)>> {
    unit_frontiers_scanned(s, param, ws, pts, &[])
}

/// [`unit_frontiers`], with the anchor scans of the checks' pairs already taken when `scans`
/// holds one per check ([`evaluate_scanning`]; the first of the two passes then is not run):
/// the same frontiers.
pub fn unit_frontiers_scanned(
    s: &dyn Scenario,
    param: usize,
    ws: &Workspace,
    pts: &mut Vec<(f64, f64)>,
    scans: &[AnchorScan],
) -> Vec<Vec<(f64, f64)>> {
    let asserted = s.asserted_comparison();
    let checks = s.checks(param);
    let given = scans.len() == checks.len();
    checks
        .iter()
        .enumerate()
        .map(|(c, spec)| {
            pts.clear();
            let n: usize = ws
                .traces
                .sides(asserted)
                .0
                .slots
                .iter()
                .filter(|sl| sl.check == c && sl.role == SlotRole::Value)
                .map(|sl| sl.len)
                .sum();
            if !given && n <= FRONTIER_BUFFER_POINTS && !two_pass_is_vectorized() {
                // One pass: every point buffered while the anchors are found, then the
                // points [`prefilter`] keeps kept in place (d = 0 points never are): the same
                // points in the same order as the two-pass stream below.
                let mut scan = AnchorScan::default();
                for_each_pair(&ws.traces, c, spec, asserted, |_, a, e| {
                    scan_pairs(a, e, &mut scan, pts);
                });
                scan.filter(pts);
            } else {
                // [`prefilter`] streamed: the anchors in a first pass (or as `scans` holds
                // them), then only the points it keeps, in the same order (the same points as
                // collecting all and filtering): memory stays bounded for big tensors, and
                // where the passes are vectorized they are faster than buffering at any size.
                let scan = if given {
                    scans[c]
                } else {
                    let mut scan = AnchorScan::default();
                    for_each_pair(&ws.traces, c, spec, asserted, |_, a, e| {
                        scan_anchors(a, e, &mut scan);
                    });
                    scan
                };
                let anchors = scan.finish();
                for_each_pair(&ws.traces, c, spec, asserted, |_, a, e| {
                    keep_pairs(a, e, anchors.as_ref(), pts);
                });
            }
            let mut f = Vec::new();
            frontier(pts.iter().copied(), &mut f);
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_matches_its_definition() {
        // γ_n = nu/(1 − nu) with u = 2^-24, computed independently.
        let u = 2f64.powi(-24);
        assert_eq!(gamma(35), 35.0 * u / (1.0 - 35.0 * u));
        assert_eq!(gamma(0), 0.0);
        assert!(gamma(1 << 24).is_infinite());
    }

    #[test]
    fn probabilistic_bound_beats_the_deterministic_one_only_for_long_reductions() {
        // λ√n u against n u: with λ ≈ 6–7 at these failure probabilities, the probabilistic
        // bound is the smaller one once √n exceeds λ, i.e. from n of a few dozen on.
        assert!(gamma_prob(16, 670, THEORY_P) > gamma(16));
        assert!(gamma_prob(4096, 670, THEORY_P) < gamma(4096));
    }
}
