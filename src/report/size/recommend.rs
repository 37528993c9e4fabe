//! One recommendation: the smallest tolerance of a shape whose predicted usage at the flake
//! rate meets the target ([`size_shape`]), and whether a mutant is shown caught under it
//! ([`caught`]).

use crate::check::python_repr::py_repr;
use crate::check::Tolerance;
use crate::engine::aggregate::Frontiers;
use crate::stats::frontier::usage;
use crate::stats::tail::{sizing_bound, SizingBound, SizingMethod};

use super::GroupData;

/// torch's fp32 rtol, the fixed rtol of the atol-only recommendation.
pub const TORCH_RTOL: f64 = 1.3e-6;
/// torch's fp32 (atol, rtol), the direction of the balanced recommendation.
pub const TORCH_PAIR: (f64, f64) = (1e-5, 1.3e-6);

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
    rec_at(fr, checks, shape, lambda, p)
}

/// The recommendation of `shape` at the finite parameter `lambda` over `checks`: its pair,
/// the sizing bound under it, or an empty pair with the reason (an rtol at atol 0 of
/// [`MAX_MEANINGFUL_RTOL`] or more).
fn rec_at(fr: &Frontiers, checks: &[usize], shape: Shape, lambda: f64, p: f64) -> Rec {
    let tol = shape.at(lambda);
    if shape == Shape::RtolAtZeroAtol && tol.rtol >= MAX_MEANINGFUL_RTOL {
        let b = bound(fr, checks, tol, p);
        return Rec {
            shape,
            tol: Tolerance {
                atol: f64::NAN,
                rtol: f64::NAN,
            },
            lambda,
            predicted: f64::NAN,
            upper: f64::NAN,
            method: b.method,
            note:
            format!(
                "rtol would be {}: the binding elements have |expected| near zero, where only an atol helps; use atol-at-torch-rtol or balanced",
                py_repr(tol.rtol)
            ),
        };
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

/// Sizes one shape over all of a test's `checks` given each check's own recommendation of
/// that shape (`singles`): [`size_shape`] over the set, raised to the largest single λ. One
/// pair asserted on every check must meet each check's own target, so its λ can be no
/// smaller than any check's; the tail fits of the per-seed maxima and of one check's usages
/// are separate estimates and need not keep that order by themselves.
pub fn size_all(
    fr: &Frontiers,
    checks: &[usize],
    shape: Shape,
    p: f64,
    target: f64,
    singles: &[Rec],
) -> Rec {
    let all = size_shape(fr, checks, shape, p, target);
    let need = singles
        .iter()
        .map(|r| r.lambda)
        .filter(|l| l.is_finite())
        .fold(0.0, f64::max);
    if all.lambda.is_finite() && need > all.lambda {
        rec_at(fr, checks, shape, need, p)
    } else {
        all
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::plan::GroupMeta;

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

    /// The all-checks pair is never below one check's own: a single check that needs a larger
    /// λ than the fit over the per-seed maxima gives its λ to the set (re-evaluated over the
    /// set), and smaller singles change nothing.
    #[test]
    fn one_pair_for_all_checks_covers_each_checks_own_need() {
        let fr: Frontiers = vec![
            (1..=400).map(|i| vec![(i as f64 * 1e-8, 1.0)]).collect(),
            (1..=400).map(|i| vec![(i as f64 * 2e-8, 1.0)]).collect(),
        ];
        for shape in [Shape::AtolAtTorchRtol, Shape::Balanced] {
            let plain = size_shape(&fr, &[0, 1], shape, 1e-2, 50.0);
            let singles: Vec<Rec> = (0..2)
                .map(|c| size_shape(&fr, &[c], shape, 1e-2, 50.0))
                .collect();
            assert!(singles.iter().all(|r| r.lambda <= plain.lambda));
            assert_eq!(size_all(&fr, &[0, 1], shape, 1e-2, 50.0, &singles), plain);
            let mut big = singles[1].clone();
            big.lambda = plain.lambda * 3.0;
            let raised = size_all(&fr, &[0, 1], shape, 1e-2, 50.0, &[singles[0].clone(), big]);
            assert_eq!(raised.lambda, plain.lambda * 3.0);
            assert!(
                raised.upper < plain.upper && raised.upper <= 50.0,
                "{raised:?}"
            );
        }
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
}
