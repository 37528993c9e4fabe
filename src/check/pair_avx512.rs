//! [`super::pair_stats_finite`] for AVX-512F: eight elements per register, and a division only
//! where a division can change the answer.
//!
//! **Order of operations.** Per element, exactly as the portable definition
//! (`pair_stats_impl`): d = |a − e|, m = |e|, the allowance `atol + rtol·m` (a product, then a
//! sum, never fused), the usage x = d / allowance (one division), then the running maxima of
//! x, d and m and the count of x > 1. Maxima of non-NaN values do not depend on the order
//! they are taken in, and counts are sums of integers, so grouping lanes differently gives the
//! same bits.
//!
//! **Why most divisions can be skipped.** Let u be the largest usage found so far. A block
//! of eight elements is first screened with `vrcp14pd` (relative error < 2⁻¹⁴):
//! x̃ = d·rcp(allowance) = x·(1 + δ) with |δ| < 2⁻¹⁴ + 2⁻⁵³, so x ∈ x̃·(1 ± 2⁻¹³). Under
//! L = fl(u·(1 − 2⁻¹²)) (0 for u < 2⁻¹⁰⁰⁰), x̃ < L gives x < u·(1 − 2⁻¹²)·(1 + 2⁻⁵³)/(1 −
//! 2⁻¹³) < u; x̃ < 1 − 2⁻¹² gives x < 1; x̃ > 1 + 2⁻¹² gives x > 1 + 2⁻¹⁴, whose rounding
//! is > 1. Rounding is monotone, so a lane with x̃ < L and x̃ outside 1 ± 2⁻¹² (or with
//! d = 0, usage 0) leaves the maximum unchanged, and the screen alone says whether it
//! counts. A block where every lane passes needs no division; any other block is divided
//! exactly. The bound on δ needs the allowance in [2⁻¹⁰⁰⁰, 2¹⁰⁰⁰] (rcp14 of a subnormal or
//! near-overflow input is not within it): atols outside [2⁻¹⁰⁰⁰, 2⁹⁹⁹] are left to the
//! caller's other paths, and when the largest |expected| could push an allowance past 2¹⁰⁰⁰
//! the kernel declines after its pass and the caller uses another path. A NaN in the screen
//! fails its comparisons and sends the block to the exact path (non-finite inputs make the
//! whole result `None`; they are found from the largest |actual| and |expected| bit
//! patterns).
//!
//! Per block the screen costs four comparisons (two more count the lanes above 1) and no
//! division: the lanes' mismatch counts and the maxima stay in registers until the end.

use super::{PairStats, Tolerance};
use crate::fp::avx512::{lanes, load_pair};
use std::arch::x86_64::*;

/// 2⁻¹⁰⁰⁰: the smallest allowance (and usage) the screen's error bound is used for.
const TINY: f64 = f64::from_bits((1023 - 1000) << 52);
/// 2⁹⁹⁸: |expected| values up to this bound, over an rtol, keep `rtol·|e|` below 2⁹⁹⁹.
const SAFE: f64 = f64::from_bits((1023 + 998) << 52);
/// 1 − 2⁻¹²: the screen's relative margin.
const SHRINK: f64 = 1.0 - 1.0 / 4096.0;
/// 2⁻¹²: screened usages within this of 1 go to the exact path.
const BAND: f64 = 1.0 / 4096.0;

/// The screen's threshold for the largest usage `u` found so far, as an inclusive bound:
/// the float just below L = fl(u·(1 − 2⁻¹²)) for u ≥ 2⁻¹⁰⁰⁰ (x̃ ≤ it ⟺ x̃ < L), else 0
/// (only x̃ = 0, i.e. d = 0, passes).
#[inline(always)]
fn limit(u: f64) -> f64 {
    if u >= TINY {
        f64::from_bits((u * SHRINK).to_bits() - 1)
    } else {
        0.0
    }
}

/// Whether the screened kernel applies: equal lengths (the portable path checks finiteness
/// over whole slices and compares their common prefix) and both atols in [2⁻¹⁰⁰⁰, 2⁹⁹⁹], so
/// that every allowance is at least 2⁻¹⁰⁰⁰; [`pair_stats`] itself declines (`Err`) when
/// some |expected| could push an allowance past 2¹⁰⁰⁰.
pub(super) fn applies(actual: &[f64], expected: &[f64], t1: Tolerance, t2: Tolerance) -> bool {
    let ok = |t: Tolerance| (TINY..=SAFE * 2.0).contains(&t.atol);
    actual.len() == expected.len() && ok(t1) && ok(t2)
}

/// The largest |expected| for which both allowances stay at most 2¹⁰⁰⁰: rtol·m ≤
/// fl(rtol·fl(2⁹⁹⁸/rtol)) < 2⁹⁹⁹ and atol ≤ 2⁹⁹⁹.
fn safe_magnitude(t1: Tolerance, t2: Tolerance) -> f64 {
    let one = |t: Tolerance| {
        if t.rtol > 0.0 {
            SAFE / t.rtol
        } else {
            f64::INFINITY
        }
    };
    one(t1).min(one(t2))
}

/// The result of `pair_stats_impl` (None when some operand is not finite), for inputs that
/// [`applies`] accepts, with both rtols ≥ 0. `Err(())` when some |expected| exceeds
/// [`safe_magnitude`], where the screen's bound is not established: the caller then uses
/// another path.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pair_stats(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Result<Option<PairStats>, ()> {
    debug_assert!(applies(actual, expected, t1, t2));
    let n = actual.len();
    let zero = _mm512_setzero_pd();
    let one = _mm512_set1_pd(1.0);
    let band = _mm512_set1_pd(BAND);
    let (at1, rt1) = (_mm512_set1_pd(t1.atol), _mm512_set1_pd(t1.rtol));
    let (at2, rt2) = (_mm512_set1_pd(t2.atol), _mm512_set1_pd(t2.rtol));
    let (mut u1, mut u2) = (0.0f64, 0.0f64);
    let (mut lim1, mut lim2) = (_mm512_set1_pd(limit(u1)), _mm512_set1_pd(limit(u2)));
    // Counts per lane; maxima of |actual| and |expected| as bit patterns (for non-negative
    // floats the integer order is the float order, and NaN and ±∞ lie above f64::MAX).
    let (mut c1, mut c2) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    let inc = _mm512_set1_epi64(1);
    let mut md = zero;
    let (mut ma, mut me) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    let mut i = 0;
    while i < n {
        // SAFETY: i < n, the length of both slices. A partial last block has zeros in its
        // missing lanes: d = 0 there, which adds nothing to any maximum or count.
        let (a, e) = load_pair(actual, expected, i, n);
        let d = _mm512_abs_pd(_mm512_sub_pd(a, e));
        let m = _mm512_abs_pd(e);
        md = _mm512_max_pd(d, md);
        ma = _mm512_max_epi64(ma, _mm512_castpd_si512(_mm512_abs_pd(a)));
        me = _mm512_max_epi64(me, _mm512_castpd_si512(m));
        let den1 = _mm512_add_pd(at1, _mm512_mul_pd(rt1, m));
        let den2 = _mm512_add_pd(at2, _mm512_mul_pd(rt2, m));
        let q1 = _mm512_mul_pd(d, _mm512_rcp14_pd(den1));
        let q2 = _mm512_mul_pd(d, _mm512_rcp14_pd(den2));
        // Per tolerance: cannot raise the maximum, and not within 2⁻¹² of 1.
        let away = |q: __m512d| {
            _mm512_cmp_pd_mask::<_CMP_GT_OQ>(_mm512_abs_pd(_mm512_sub_pd(q, one)), band)
        };
        let screened = _mm512_cmp_pd_mask::<_CMP_LE_OQ>(q1, lim1)
            & away(q1)
            & _mm512_cmp_pd_mask::<_CMP_LE_OQ>(q2, lim2)
            & away(q2);
        if screened == 0xff {
            c1 = _mm512_mask_add_epi64(c1, _mm512_cmp_pd_mask::<_CMP_GT_OQ>(q1, one), c1, inc);
            c2 = _mm512_mask_add_epi64(c2, _mm512_cmp_pd_mask::<_CMP_GT_OQ>(q2, one), c2, inc);
        } else {
            let x1 = _mm512_div_pd(d, den1);
            let x2 = _mm512_div_pd(d, den2);
            c1 = _mm512_mask_add_epi64(c1, _mm512_cmp_pd_mask::<_CMP_GT_OQ>(x1, one), c1, inc);
            c2 = _mm512_mask_add_epi64(c2, _mm512_cmp_pd_mask::<_CMP_GT_OQ>(x2, one), c2, inc);
            let (b1, b2) = (hmax(x1), hmax(x2));
            if b1 > u1 {
                u1 = b1;
                lim1 = _mm512_set1_pd(limit(u1));
            }
            if b2 > u2 {
                u2 = b2;
                lim2 = _mm512_set1_pd(limit(u2));
            }
        }
        i += 8;
    }
    let max_bits = f64::MAX.to_bits() as i64;
    let (ma, me) = (_mm512_reduce_max_epi64(ma), _mm512_reduce_max_epi64(me));
    if ma > max_bits || me > max_bits {
        return Ok(None);
    }
    let me = f64::from_bits(me as u64);
    if me > safe_magnitude(t1, t2) {
        return Err(());
    }
    let count = |c: __m512i| _mm512_reduce_add_epi64(c) as usize;
    Ok(Some((
        [(u1, count(c1), 0), (u2, count(c2), 0)],
        (hmax(md), me),
    )))
}

/// The largest lane, folded from 0 (every lane is ≥ 0 here; NaN lanes only arise from
/// non-finite inputs, whose result is discarded).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn hmax(v: __m512d) -> f64 {
    lanes(v)
        .iter()
        .fold(0.0f64, |m, &x| if x > m { x } else { m })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{pair_stats_impl, Tolerance};

    const OLD: Tolerance = Tolerance {
        atol: 1e-6,
        rtol: 1e-5,
    };

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Pairs built to sit on the screen's edges: usages within a few ulps of 1 and of a
    /// running maximum (under either tolerance), exact zeros, equal values, magnitudes from
    /// 1e-300 to 1e300 (differences that overflow, allowances above 2¹⁰⁰⁰), and now and then
    /// a NaN or an infinity.
    fn pairs(rng: &mut XorShift, n: usize, tols: [Tolerance; 2]) -> (Vec<f64>, Vec<f64>) {
        let (mut a, mut e) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let target = 10f64.powi((rng.next() % 7) as i32 - 3) * (0.5 + rng.unit());
        for _ in 0..n {
            let r = rng.next();
            let y = match r % 5 {
                0 => 0.0,
                1 => (rng.unit() - 0.5) * 10f64.powi((rng.next() % 601) as i32 - 300),
                _ => (rng.unit() - 0.5) * 10f64.powi((rng.next() % 9) as i32 - 4),
            };
            let t = tols[(r >> 8) as usize % 2];
            let den = t.atol + t.rtol * y.abs();
            let ulps = ((rng.next() % 9) as f64 - 4.0) * f64::EPSILON;
            let x = match (r >> 16) % 11 {
                0 => y,
                1 => y + den * (1.0 + ulps),
                2 => y - den * (1.0 + ulps),
                3 => y + den * target * (1.0 + ulps),
                4 => y + den * target * (1.0 - 2.0 * f64::EPSILON),
                5 => [f64::NAN, f64::INFINITY, f64::MAX, -f64::MAX][(r >> 24) as usize % 4],
                6 => -y,
                _ => y + den * target * (rng.unit() - 0.5) * 2.0,
            };
            // Non-finite values stay rare, so that most slices are finite.
            let x = if !x.is_finite() && !rng.next().is_multiple_of(8) {
                y
            } else {
                x
            };
            a.push(x);
            e.push(y);
        }
        (a, e)
    }

    fn bits(r: Option<PairStats>) -> Option<[(u64, usize); 4]> {
        r.map(|(p, (md, me))| {
            [
                (p[0].0.to_bits(), p[0].1),
                (p[1].0.to_bits(), p[1].1),
                (md.to_bits(), 0),
                (me.to_bits(), 0),
            ]
        })
    }

    #[test]
    fn screened_kernel_equals_the_portable_definition() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512F on this CPU: the screened kernel is not used here");
            return;
        }
        let tol_sets = [
            [OLD, Tolerance::TORCH_FP32],
            [
                Tolerance {
                    atol: 1e-3,
                    rtol: 0.0,
                },
                Tolerance {
                    atol: 2e-300,
                    rtol: 1e300,
                },
            ],
            [
                Tolerance {
                    atol: 1e-2,
                    rtol: 1e-2,
                },
                Tolerance {
                    atol: 1.0,
                    rtol: 3.0,
                },
            ],
        ];
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let (mut finite, mut declined) = (0, 0);
        for case in 0..6000 {
            let tols = tol_sets[case % tol_sets.len()];
            let n = (rng.next() % 70) as usize;
            let (a, e) = pairs(&mut rng, n, tols);
            assert!(applies(&a, &e, tols[0], tols[1]));
            let want = pair_stats_impl(&a, &e, tols[0], tols[1]);
            finite += want.is_some() as usize;
            // SAFETY: AVX-512F checked above.
            let got = unsafe { pair_stats(&a, &e, tols[0], tols[1]) };
            let Ok(got) = got else {
                declined += 1;
                continue;
            };
            assert_eq!(bits(got), bits(want), "case {case}: {a:?} {e:?}");
        }
        // The generator is meant to give mostly finite slices, where the screen works.
        assert!(finite > 3000, "{finite} finite cases");
        // Only the tolerance set with rtol 1e300 declines (its allowances can pass 2¹⁰⁰⁰).
        assert!(declined > 0 && declined < 2000, "{declined} declined");
    }

    /// The screen's premise: rcp14's relative error is below 2⁻¹⁴ over allowances in
    /// [2⁻¹⁰⁰⁰, 2¹⁰⁰⁰], checked on a spread of inputs against exact division in f64 (whose
    /// own error, 2⁻⁵³, is far below the margin).
    #[test]
    fn rcp14_is_within_its_bound() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let mut rng = XorShift(7);
        for _ in 0..20_000 {
            let x = (1.0 + rng.unit()) * 2f64.powi((rng.next() % 2000) as i32 - 1000);
            let mut out = [0.0f64; 8];
            // SAFETY: AVX-512F checked above; `out` holds eight f64.
            unsafe {
                #[target_feature(enable = "avx512f")]
                unsafe fn rcp(x: f64, out: &mut [f64; 8]) {
                    _mm512_storeu_pd(out.as_mut_ptr(), _mm512_rcp14_pd(_mm512_set1_pd(x)));
                }
                rcp(x, &mut out);
            }
            let rel = (out[0] * x - 1.0).abs();
            assert!(rel < 1.0 / 16384.0, "rcp14({x}) off by {rel}");
        }
    }
}
