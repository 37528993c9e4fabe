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
//! **Why most divisions can be skipped.** Let u₀ be a usage some element attains and w the
//! allowance. One fused multiply-subtract gives z = fl(u₀·w − d) with a single rounding, and
//! rounding to nearest keeps the sign of the exact value: a negative u₀·w − d gives a
//! negative z or −0, and an exact zero gives +0 (IEEE 754 §6.3). So z's sign bit is clear
//! exactly when d ≤ u₀·w, i.e. d/w ≤ u₀; rounding is monotone and u₀ is a float, so then
//! x = fl(d/w) ≤ u₀ and the lane cannot raise the maximum above u₀, which the maximum
//! reaches anyway. Only the blocks where some lane fails this screen are divided exactly.
//! u₀ is the largest exact usage of a few blocks spread over the tensor ([`SAMPLES`],
//! divided up front; the first block of a short tensor). The screen runs over runs of 64
//! blocks into one bit per block, without a branch, and the blocks it lets through (about
//! 3 % in a T1 sweep) are divided after it: a branch per block mispredicted on nearly every
//! one of them. (z is NaN only for a non-finite d, whose result is discarded, for
//! u₀ = +∞, where no lane can raise the maximum, or for an allowance of +∞ with u₀ = 0,
//! where x = 0.)
//!
//! **Counting without the division.** For floats d and w > 0, x = fl(d/w) > 1 exactly when
//! d > w: for d ≤ w, d/w ≤ 1 and x ≤ 1; for d > w, d ≥ w + ulp(w), and ulp(w)/w > 2⁻⁵³ for
//! every float w (normal or subnormal), so d/w > 1 + 2⁻⁵³, above the midpoint between 1 and the
//! next float, and x ≥ 1 + 2⁻⁵². An allowance that overflows to +∞ gives x = 0 and no count,
//! as d > +∞ does not hold. No x exceeds 1 unless the largest usage does, so the counts take
//! a second pass (d > w per lane) only for a check whose largest usage is above 1: in a
//! passing check most blocks cost one subtraction, two absolute values, two allowances, two
//! fused operations and two maxima.
//!
//! **Non-finite inputs** make the portable result `None`. A non-finite e shows in the largest
//! |e| bit pattern; a non-finite a with finite e makes d non-finite. d can also overflow from
//! finite inputs, so a non-finite largest d is settled by a scan of `actual`.

use super::{all_finite, PairStats};
use crate::check::Tolerance;
use crate::kernels::avx512::{lanes, load_pair};
use crate::stats::frontier::BlockScan;
use std::arch::x86_64::*;

/// Whether the screened kernel applies: equal lengths (the portable path checks finiteness
/// over whole slices and compares their common prefix) and finite tolerances (the caller
/// takes only atols > 0 and rtols ≥ 0).
pub(super) fn applies(actual: &[f64], expected: &[f64], t1: Tolerance, t2: Tolerance) -> bool {
    let ok = |t: Tolerance| t.atol.is_finite() && t.rtol.is_finite();
    actual.len() == expected.len() && ok(t1) && ok(t2)
}

/// The result of `pair_stats_impl` (None when some operand is not finite), for inputs that
/// [`applies`] accepts, with both rtols ≥ 0.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pair_stats(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    let ([r], _) = pair_stats_n::<1, true>([actual], expected, t1, t2, None);
    r
}

/// [`pair_stats`] without the counts (both 0): no second pass over a failing comparison.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pair_usages(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    let ([r], _) = pair_stats_n::<1, false>([actual], expected, t1, t2, None);
    r
}

/// [`pair_stats`], with the anchor scan of the same pairs taken in the same pass (their
/// points (|a − e|, |e|), block by block in order, into `scan`). Also returns whether every
/// difference was finite: only then does the scan hold what [`scan_anchors`] would give
/// (otherwise the caller redoes it).
///
/// [`scan_anchors`]: crate::stats::frontier::scan_anchors
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pair_stats_scan(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
    scan: &mut BlockScan<'_>,
) -> (Option<PairStats>, bool) {
    let ([r], d_finite) = pair_stats_n::<1, true>([actual], expected, t1, t2, Some(scan));
    (r, d_finite)
}

/// [`pair_stats`] of two actual tensors against one expected tensor, in one pass that
/// computes each element's |e| and allowances once (`ref-vs-f64` and `sharded-vs-f64` expect
/// the same float64 trace): the same two results, each element's operations unchanged.
///
/// # Safety
/// The CPU must support AVX-512F; [`applies`] holds for both actual tensors.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pair_stats2(
    a1: &[f64],
    a2: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> [Option<PairStats>; 2] {
    pair_stats_n::<2, true>([a1, a2], expected, t1, t2, None).0
}

/// [`pair_stats`] of each of the `N` actual tensors against `expected` (module doc), and
/// whether the first one's differences are all finite. With `scan`, every block's points of
/// the first pair, (d, |e|), are offered to it in order in the screening pass. Without
/// `COUNTS` the counts are not taken (0).
#[inline(always)]
unsafe fn pair_stats_n<const N: usize, const COUNTS: bool>(
    actuals: [&[f64]; N],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
    mut scan: Option<&mut BlockScan<'_>>,
) -> ([Option<PairStats>; N], bool) {
    const { assert!(N >= 1, "at least one actual tensor") };
    for a in actuals {
        debug_assert!(applies(a, expected, t1, t2));
    }
    let n = expected.len();
    let zero = _mm512_setzero_pd();
    let sign = _mm512_set1_epi64(i64::MIN);
    let (at1, rt1) = (_mm512_set1_pd(t1.atol), _mm512_set1_pd(t1.rtol));
    let (at2, rt2) = (_mm512_set1_pd(t2.atol), _mm512_set1_pd(t2.rtol));
    // Per block of expected values: m = |e| and the two allowances atol + rtol·m (a product,
    // then a sum); per actual block, d = |a − e|. The same terms for the seed and the main
    // loop.
    // (A macro, so that every use is inlined: as a closure it was called.)
    macro_rules! load {
        ($i:expr) => {{
            let i: usize = $i;
            // SAFETY: i < n, the length of every slice (every use); a partial block has
            // zeros in its missing lanes.
            let (a0, e) = load_pair(actuals[0], expected, i, n);
            let m = _mm512_abs_pd(e);
            let w1 = _mm512_add_pd(at1, _mm512_mul_pd(rt1, m));
            let w2 = _mm512_add_pd(at2, _mm512_mul_pd(rt2, m));
            let d: [__m512d; N] = std::array::from_fn(|k| {
                let a = if k == 0 {
                    a0
                } else {
                    load_pair(actuals[k], expected, i, n).0
                };
                _mm512_abs_pd(_mm512_sub_pd(a, e))
            });
            (d, m, w1, w2)
        }};
    }
    // Seed the maxima with the exact usages of a few blocks spread over the tensor (the
    // first block alone for a short one; their divisions are independent of each other):
    // u₀ is a usage some element attains, the screen's bound for every block.
    let mut s1 = [zero; N];
    let mut s2 = [zero; N];
    for start in sample_starts(n) {
        // A short block has zeros in its missing lanes (usage 0).
        let (d, _, w1, w2) = load!(start);
        for k in 0..N {
            // MAXPD keeps the running maximum unless the new value is strictly larger (a
            // NaN usage, from a non-finite input, is skipped, as `hmax` skips it).
            s1[k] = _mm512_max_pd(_mm512_div_pd(d[k], w1), s1[k]);
            s2[k] = _mm512_max_pd(_mm512_div_pd(d[k], w2), s2[k]);
        }
    }
    let vu1: [__m512d; N] = std::array::from_fn(|k| _mm512_set1_pd(hmax(s1[k])));
    let vu2: [__m512d; N] = std::array::from_fn(|k| _mm512_set1_pd(hmax(s2[k])));
    // Maxima of d and |e| as bit patterns (for non-negative floats the integer order is
    // the float order, and NaN and ±∞ lie above f64::MAX).
    let mut md = [_mm512_setzero_si512(); N];
    let mut me = _mm512_setzero_si512();
    // Runs of 64 blocks: every block screened against u₀ into one bit (without a branch),
    // then the blocks it let through divided, in any order (a maximum). A branch per block
    // on the screen mispredicted on most blocks that divide.
    let mut run = 0;
    while run < n {
        let run_end = n.min(run + 64 * 8);
        let mut left = [0u64; N];
        let mut i = run;
        while i < run_end {
            // i < n. A partial last block has zeros in its missing lanes: d = 0 there,
            // which adds nothing to any maximum or count.
            let (d, m, w1, w2) = load!(i);
            me = _mm512_max_epi64(me, _mm512_castpd_si512(m));
            if let Some(scan) = scan.as_deref_mut() {
                scan.block(d[0], m);
            }
            for k in 0..N {
                md[k] = _mm512_max_epi64(md[k], _mm512_castpd_si512(d[k]));
                // d ≤ u₀·w under both tolerances: the sign bits of fl(u₀·w − d) clear.
                let z = _mm512_or_si512(
                    _mm512_castpd_si512(_mm512_fmsub_pd(vu1[k], w1, d[k])),
                    _mm512_castpd_si512(_mm512_fmsub_pd(vu2[k], w2, d[k])),
                );
                left[k] |= u64::from(_mm512_test_epi64_mask(z, sign) != 0) << ((i - run) / 8);
            }
            i += 8;
        }
        for k in 0..N {
            while left[k] != 0 {
                let i = run + 8 * left[k].trailing_zeros() as usize;
                left[k] &= left[k] - 1;
                let (d, _, w1, w2) = load!(i);
                s1[k] = _mm512_max_pd(_mm512_div_pd(d[k], w1), s1[k]);
                s2[k] = _mm512_max_pd(_mm512_div_pd(d[k], w2), s2[k]);
            }
        }
        run = run_end;
    }
    let max_bits = f64::MAX.to_bits() as i64;
    let me = _mm512_reduce_max_epi64(me);
    let d_finite = _mm512_reduce_max_epi64(md[0]) <= max_bits;
    // A loop, not `array::from_fn`: a closure there was left out of line by the inliner,
    // and the intrinsics in it with it (a call per operation in the count pass).
    let mut stats: [Option<PairStats>; N] = [None; N];
    for (k, out) in stats.iter_mut().enumerate() {
        let (u1, u2) = (hmax(s1[k]), hmax(s2[k]));
        let md = _mm512_reduce_max_epi64(md[k]);
        if me > max_bits || md > max_bits && !all_finite(actuals[k]) {
            continue;
        }
        // The counts of x > 1, that is d > w (module doc): none unless some usage is above
        // 1, so a second pass only then.
        let (mut c1, mut c2) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        if COUNTS && (u1 > 1.0 || u2 > 1.0) {
            let inc = _mm512_set1_epi64(1);
            let mut i = 0;
            while i < n {
                // SAFETY: i < n, the length of both slices; the zero lanes of a partial
                // block have d = 0, never > w. The same terms as `load!`, for this tensor.
                let (a, e) = load_pair(actuals[k], expected, i, n);
                let m = _mm512_abs_pd(e);
                let w1 = _mm512_add_pd(at1, _mm512_mul_pd(rt1, m));
                let w2 = _mm512_add_pd(at2, _mm512_mul_pd(rt2, m));
                let d = _mm512_abs_pd(_mm512_sub_pd(a, e));
                c1 = _mm512_mask_add_epi64(c1, _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, w1), c1, inc);
                c2 = _mm512_mask_add_epi64(c2, _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, w2), c2, inc);
                i += 8;
            }
        }
        let (n1, n2) = (
            _mm512_reduce_add_epi64(c1) as usize,
            _mm512_reduce_add_epi64(c2) as usize,
        );
        *out = Some((
            [(u1, n1, 0), (u2, n2, 0)],
            (f64::from_bits(md as u64), f64::from_bits(me as u64)),
        ));
    }
    (stats, d_finite)
}

/// Where the sampled blocks of a tensor of `n` elements start: [`SAMPLES`] blocks spread
/// over it from [`SAMPLE_FROM`] elements on (each start + 8 ≤ n·SAMPLES/(SAMPLES + 1) + 8
/// ≤ n), the first block of a shorter one, none of an empty one.
fn sample_starts(n: usize) -> impl Iterator<Item = usize> {
    let count = if n >= SAMPLE_FROM {
        SAMPLES
    } else {
        usize::from(n > 0)
    };
    (0..count).map(move |s| {
        if n >= SAMPLE_FROM {
            ((s + 1) * n / (SAMPLES + 1)) / 8 * 8
        } else {
            0
        }
    })
}

/// Blocks [`pair_stats`] divides up front to seed its maxima.
const SAMPLES: usize = 4;
/// Elements from which [`pair_stats`] seeds its maxima (smaller tensors have few blocks).
const SAMPLE_FROM: usize = 128;

/// The largest lane, folded from 0 (every lane is ≥ 0 here; NaN lanes only arise from
/// non-finite inputs, whose result is discarded).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn hmax(v: __m512d) -> f64 {
    lanes(v)
        .iter()
        .fold(0.0f64, |m, &x| if x > m { x } else { m })
}

/// The largest `cond[i] / (atol + rtol·|expected[i]|)` (each term one product, one sum and one
/// division, never fused; a term replaces the maximum only when it is strictly larger, so NaN
/// terms never count; 0 when there are none), eight lanes at a time, dividing only the blocks
/// where some lane can exceed a term already taken: the screen of `pair_stats` (module
/// doc), with the largest term m₀ of a few sampled blocks as its bound, in runs of 64 blocks
/// without a branch per block. z = fl(m₀·w − c) with a clear sign bit gives fl(c/w) ≤ m₀,
/// and a NaN z comes only from a term that is NaN or cannot exceed m₀. The lanes are combined
/// by the same rule at the end; the maximum of a set of non-negative values does not depend
/// on the order it is taken in. Missing lanes of a partial last block hold c = 0, e = 0: a
/// term 0 or NaN, which changes nothing.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn max_ratio(cond: &[f64], expected: &[f64], atol: f64, rtol: f64) -> f64 {
    let n = cond.len().min(expected.len());
    let (va, vr) = (_mm512_set1_pd(atol), _mm512_set1_pd(rtol));
    let zero = _mm512_setzero_si512();
    // A block's terms: condition and allowance.
    let terms = |i: usize| {
        // SAFETY: i < n, within both slices.
        let (c, e) = load_pair(cond, expected, i, n);
        (c, _mm512_add_pd(va, _mm512_mul_pd(vr, _mm512_abs_pd(e))))
    };
    // The screen's bound: the largest term of a few blocks spread over the slices (the
    // first block of short ones), a term some element has. MAXPD returns its second operand
    // unless the first is strictly larger: the rule of the definition, NaN terms included.
    let mut m = _mm512_setzero_pd();
    for start in sample_starts(n) {
        let (c, w) = terms(start);
        m = _mm512_max_pd(_mm512_div_pd(c, w), m);
    }
    // m holds no NaN, so its largest lane is the largest term sampled.
    let bound = _mm512_set1_pd(_mm512_reduce_max_pd(m));
    // Runs of 64 blocks: each screened against the bound into one bit, without a branch,
    // then the blocks it let through divided (a maximum: in any order).
    let mut run = 0;
    while run < n {
        let run_end = n.min(run + 64 * 8);
        let mut left = 0u64;
        let mut i = run;
        while i < run_end {
            let (c, w) = terms(i);
            let z = _mm512_fmsub_pd(bound, w, c);
            left |= u64::from(_mm512_cmplt_epi64_mask(_mm512_castpd_si512(z), zero) != 0)
                << ((i - run) / 8);
            i += 8;
        }
        while left != 0 {
            let i = run + 8 * left.trailing_zeros() as usize;
            left &= left - 1;
            let (c, w) = terms(i);
            m = _mm512_max_pd(_mm512_div_pd(c, w), m);
        }
        run = run_end;
    }
    lanes(m)
        .iter()
        .fold(0.0f64, |a, &x| if x > a { x } else { a })
}
