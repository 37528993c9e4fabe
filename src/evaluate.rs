//! Evaluating one seed: every check × comparison × policy, over all recorded steps.
//!
//! Comparisons (the expected side second):
//! - `sharded-vs-ref`: sharded fp32 vs unsharded fp32, what the real test asserts;
//! - `ref-vs-f64`: unsharded fp32 vs the float64 ground truth;
//! - `sharded-vs-f64`: sharded fp32 vs the float64 ground truth.
//!
//! Self-consistent checks compare a computation's value with the test's formula evaluated
//! on that computation's own inputs: in fp32 for `-vs-ref`, in f64 for `-vs-f64`.

use crate::check::{magnitude_stats, pair_stats_finite, usage_stats, StepLabel, Tolerance};
use crate::scenario::{CheckSpec, Traces};
use crate::trace::{Slot, SlotRole, Trace};

/// One of the three comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Comparison {
    /// Sharded vs unsharded fp32.
    ShardedVsRef,
    /// Unsharded fp32 vs float64.
    RefVsF64,
    /// Sharded fp32 vs float64.
    ShardedVsF64,
}

impl Comparison {
    /// All three, in output order.
    pub const ALL: [Comparison; 3] = [Self::ShardedVsRef, Self::RefVsF64, Self::ShardedVsF64];

    /// The name used in CSV files and flags.
    pub fn name(self) -> &'static str {
        match self {
            Self::ShardedVsRef => "sharded-vs-ref",
            Self::RefVsF64 => "ref-vs-f64",
            Self::ShardedVsF64 => "sharded-vs-f64",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// (actual, expected) traces.
    pub fn sides(self, t: &Traces) -> (&Trace, &Trace) {
        match self {
            Self::ShardedVsRef => (&t.sharded, &t.reference),
            Self::RefVsF64 => (&t.reference, &t.f64),
            Self::ShardedVsF64 => (&t.sharded, &t.f64),
        }
    }

    /// Whether both sides are fp32 tensors (torch's messages then compute in f32).
    pub fn both_f32(self) -> bool {
        self == Self::ShardedVsRef
    }
}

/// The worst case of one check × comparison × policy over the steps of one seed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
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
}

/// Visits the (actual, expected, step) tensors of one check and comparison.
pub fn for_each_pair<'t>(
    traces: &'t Traces,
    check: usize,
    spec: &CheckSpec,
    comparison: Comparison,
    mut f: impl FnMut(StepLabel, &'t [f64], &'t [f64]),
) {
    let (actual, expected) = comparison.sides(traces);
    let self_role = match comparison {
        Comparison::ShardedVsRef => SlotRole::SelfExpectedF32,
        _ => SlotRole::SelfExpectedF64,
    };
    for (i, slot) in actual.slots.iter().enumerate() {
        if slot.check != check || slot.role != SlotRole::Value {
            continue;
        }
        let exp_slot: &Slot = if spec.self_consistent {
            actual.slots[i..]
                .iter()
                .find(|s| s.check == check && s.step == slot.step && s.role == self_role)
                .expect("self-consistent checks record their expectations after the value")
        } else {
            let s = &expected.slots[i];
            debug_assert_eq!((s.check, s.step, s.len), (slot.check, slot.step, slot.len));
            s
        };
        let exp_trace = if spec.self_consistent {
            actual
        } else {
            expected
        };
        f(slot.step, actual.data(slot), exp_trace.data(exp_slot));
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
    out.clear();
    for (c, spec) in checks.iter().enumerate() {
        for comparison in Comparison::ALL {
            let base = out.len();
            out.extend(std::iter::repeat_n(SeedCheck::default(), tolerances.len()));
            let mut first = true;
            for_each_pair(traces, c, spec, comparison, |step, a, e| {
                let fused = if tolerances.len() == 2 {
                    pair_stats_finite(a, e, tolerances[0][c], tolerances[1][c])
                } else {
                    None
                };
                let (max_d, max_e) = match &fused {
                    Some((_, mags)) => *mags,
                    None => magnitude_stats(a, e),
                };
                for (p, tols) in tolerances.iter().enumerate() {
                    let (usage, mismatched, nonfinite) = match &fused {
                        Some((pair, _)) => pair[p],
                        None => usage_stats(a, e, tols[c]),
                    };
                    let r = &mut out[base + p];
                    if first || usage > r.usage {
                        r.usage = usage;
                        r.worst_step = step;
                        r.mismatched = mismatched as u32;
                        r.elements = a.len() as u32;
                    }
                    r.max_abs_diff = r.max_abs_diff.max(max_d);
                    r.max_abs_expected = r.max_abs_expected.max(max_e);
                    r.nonfinite += nonfinite as u32;
                }
                first = false;
            });
        }
    }
}
