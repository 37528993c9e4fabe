//! The two passes of [`super::prefilter`] straight from one check's (actual, expected) pairs,
//! for AVX-512F, without storing every point: [`scan_anchors`] offers the pairs' points to an
//! [`AnchorScan`], [`keep_pairs`] appends the points [`Anchors::keep`] keeps. Their portable
//! definitions are [`scan_anchors_portable`] and [`keep_pairs_portable`] (each pair through
//! [`super::pair_point`], in order); the vector versions give the same scan and the same points,
//! bit for bit, which the tests check.
//!
//! **Order of operations.** For finite x and y, [`super::pair_point`] is (|x − y|, |y|) (x − y is
//! 0 exactly when x == y), so a block of eight finite pairs needs one subtraction and two
//! absolute values; a slice holding a non-finite value, or a difference that overflows, is
//! redone by the portable definition from the scan state it started with.
//!
//! **Screening the anchor scan.** [`AnchorScan::add`] changes its state only for a point
//! with d > 0 that is the first such point, or has d ≥ d* (the current p*), or has e > 0 and
//! a ratio fl(d/e) above the best so far, r₀. The screen uses r̃ = d·rcp14(e) = (d/e)(1 + δ),
//! |δ| < 2⁻¹⁴ + 2⁻⁵³: r̃ < fl(r₀·(1 − 2⁻¹²)) gives d/e < r₀ (as in `check::pair_avx512`), so
//! fl(d/e) ≤ r₀ and the best stays. That bound needs e in [2⁻¹⁰⁰⁰, 2¹⁰⁰⁰] and r₀ ≥ 2⁻¹⁰⁰⁰;
//! other lanes are not screened. A block whose every lane has d = 0, or d < d* and (e = 0
//! or a screened ratio), only sets the e = 0 flag; any other block is offered point by point
//! to [`AnchorScan::add`], the definition.

use super::simd::{keep_pairs_portable, scan_anchors_portable};
use super::{AnchorScan, Anchors, HULL_MARGIN};
use crate::fp::avx512::{lanes, load_pair};
use std::arch::x86_64::*;

/// 2⁻¹⁰⁰⁰, the smallest e (and best ratio) the screen's error bound is used for.
const TINY: f64 = f64::from_bits((1023 - 1000) << 52);
/// 2¹⁰⁰⁰, the largest e the screen's error bound is used for.
const HUGE: f64 = f64::from_bits((1023 + 1000) << 52);
/// 1 − 2⁻¹²: the screen's relative margin.
const SHRINK: f64 = 1.0 - 1.0 / 4096.0;

/// Whether this CPU runs the vector passes.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// The screen's bound on ratios for the current best ratio (module doc), as an inclusive
/// bound (the float just below fl(r₀·(1 − 2⁻¹²))); −1 when there is no best or it is below
/// 2⁻¹⁰⁰⁰ (no ratio passes).
fn ratio_limit(scan: &AnchorScan) -> f64 {
    match scan.best {
        Some((_, r)) if r >= TINY => f64::from_bits((r * SHRINK).to_bits() - 1),
        _ => -1.0,
    }
}

/// [`scan_anchors_portable`], vectorized (module doc).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn scan_anchors(actual: &[f64], expected: &[f64], scan: &mut AnchorScan) {
    let start = *scan;
    if scan.infinite || !scan_finite(actual, expected, scan) {
        *scan = start;
        scan_anchors_portable(actual, expected, scan);
    }
}

/// The vector pass over pairs assumed finite; false (with `scan` left part-way) when some
/// value or difference is not finite.
#[target_feature(enable = "avx512f")]
unsafe fn scan_finite(actual: &[f64], expected: &[f64], scan: &mut AnchorScan) -> bool {
    let n = actual.len().min(expected.len());
    let zero = _mm512_setzero_pd();
    let tiny_bits = _mm512_set1_epi64(TINY.to_bits() as i64);
    let span = _mm512_set1_epi64((HUGE.to_bits() - TINY.to_bits()) as i64);
    let mut big = _mm512_setzero_si512();
    let mut psd = _mm512_set1_pd(scan.ps.map_or(0.0, |p| p.0));
    let mut lim = _mm512_set1_pd(ratio_limit(scan));
    let mut ze: __mmask8 = 0;
    let mut i = 0;
    while i < n {
        // SAFETY: i < n, within both slices. A partial last block has zeros in its missing
        // lanes: points with d = 0, which change nothing.
        let (x, y) = load_pair(actual, expected, i, n);
        let d = _mm512_abs_pd(_mm512_sub_pd(x, y));
        let e = _mm512_abs_pd(y);
        // Non-finite inputs show up as d or |x| above f64::MAX in bit-pattern order (|y| is
        // in d's when |x| is finite: a finite x minus an infinite y is infinite).
        big = _mm512_max_epi64(big, _mm512_castpd_si512(d));
        big = _mm512_max_epi64(big, _mm512_castpd_si512(_mm512_abs_pd(x)));
        let valid = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, zero);
        let e_zero = _mm512_mask_cmp_pd_mask::<_CMP_EQ_OQ>(valid, e, zero);
        ze |= e_zero;
        let below_ps = _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(valid, d, psd);
        let r = _mm512_mul_pd(d, _mm512_rcp14_pd(e));
        let in_range =
            _mm512_cmplt_epu64_mask(_mm512_sub_epi64(_mm512_castpd_si512(e), tiny_bits), span);
        let ratio_ok = _mm512_mask_cmp_pd_mask::<_CMP_LE_OQ>(in_range, r, lim);
        let quiet = !valid | (below_ps & (e_zero | ratio_ok));
        if quiet != 0xff || scan.first.is_none() && valid != 0 {
            let (ds, es) = (lanes(d), lanes(e));
            for l in 0..8 {
                scan.add((ds[l], es[l]));
            }
            psd = _mm512_set1_pd(scan.ps.map_or(0.0, |p| p.0));
            lim = _mm512_set1_pd(ratio_limit(scan));
        }
        i += 8;
    }
    scan.zero_e |= ze != 0;
    _mm512_reduce_max_epi64(big) <= f64::MAX.to_bits() as i64
}

/// [`keep_pairs_portable`], vectorized: the keep test of `retain_avx2` eight lanes at a time
/// on points made from the pairs (module doc), without branches inside a block.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn keep_pairs(
    actual: &[f64],
    expected: &[f64],
    anchors: Option<&Anchors>,
    pts: &mut Vec<(f64, f64)>,
) {
    let start = pts.len();
    let done = match anchors {
        Some(an) => keep_finite(actual, expected, an, pts),
        None => false,
    };
    if !done {
        pts.truncate(start);
        keep_pairs_portable(actual, expected, anchors, pts);
    }
}

/// The vector keep pass over pairs assumed finite; false when some value or difference is
/// not finite (the points appended are then to be discarded).
///
/// Branch-free per block: every test, the chord's division included, runs on all eight
/// lanes and the kept lanes are appended with one compress and two stores. Which tests a
/// block needs is data-dependent (measured in a T1 sweep of 35-3-False-0: 66 % of blocks
/// reach the hull tests, 45 % the chord, 17 % keep a point), so branching on it
/// mispredicted often. The comparisons are independent of each other and their masks are
/// combined afterwards; lanes a test does not apply to are masked out of its answer, so the
/// kept points are those of the portable definition, in order. In that sweep this pass
/// took 31-40 % fewer profile samples than the branching one with chained masked
/// comparisons.
#[target_feature(enable = "avx512f")]
unsafe fn keep_finite(
    actual: &[f64],
    expected: &[f64],
    an: &Anchors,
    pts: &mut Vec<(f64, f64)>,
) -> bool {
    // The appends below write (d, e) pairs as two adjacent f64, the layout the compiler
    // gives `(f64, f64)`; this makes that an error at compile time if it ever changed.
    const _: () = assert!(
        std::mem::size_of::<(f64, f64)>() == 16
            && std::mem::offset_of!((f64, f64), 0) == 0
            && std::mem::offset_of!((f64, f64), 1) == 8
    );
    let n = actual.len().min(expected.len());
    let (ps, p0) = (an.ps, an.p0);
    let km = 1.0 - HULL_MARGIN;
    let zero = _mm512_setzero_pd();
    let (psd, pse) = (_mm512_set1_pd(ps.0), _mm512_set1_pd(ps.1));
    let (p0d, p0e) = (_mm512_set1_pd(p0.0), _mm512_set1_pd(p0.1));
    let vkm = _mm512_set1_pd(km);
    let km_p0d = _mm512_set1_pd(km * p0.0);
    let span_e = _mm512_set1_pd(ps.1 - p0.1);
    let span_d = _mm512_set1_pd(ps.0 - p0.0);
    let hull_tests: __mmask8 = if an.zero_e { 0 } else { 0xff };
    // Interleaving indices: (d₀, e₀, d₁, e₁, …) from the compressed d and e lanes.
    let lo_idx = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
    let hi_idx = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
    let mut big = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        // SAFETY: as in `scan_finite`; the zero lanes of a partial block have d = 0, which
        // is never kept.
        let (x, y) = load_pair(actual, expected, i, n);
        let d = _mm512_abs_pd(_mm512_sub_pd(x, y));
        let e = _mm512_abs_pd(y);
        big = _mm512_max_epi64(big, _mm512_castpd_si512(d));
        big = _mm512_max_epi64(big, _mm512_castpd_si512(_mm512_abs_pd(x)));
        // Every comparison runs on all lanes, independently of the others, and the masks
        // are combined afterwards: chaining them as masked comparisons made each block one
        // long chain of dependent comparisons. (A comparison under a mask is the unmasked
        // comparison AND the mask, so the answers are the same.)
        let positive = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, zero);
        // Dominated by p*: e ≥ e* and d ≤ d*.
        let dominated = positive
            & _mm512_cmp_pd_mask::<_CMP_GE_OQ>(e, pse)
            & _mm512_cmp_pd_mask::<_CMP_LE_OQ>(d, psd);
        let rest = positive & !dominated & hull_tests;
        // q.0 ≤ km·p0.0 and q.0·p0.1 ≤ km·(p0.0·q.1).
        let below_p0 = _mm512_cmp_pd_mask::<_CMP_LE_OQ>(d, km_p0d)
            & _mm512_cmp_pd_mask::<_CMP_LE_OQ>(
                _mm512_mul_pd(d, p0e),
                _mm512_mul_pd(vkm, _mm512_mul_pd(p0d, e)),
            );
        // Strictly between the anchors in both coordinates.
        let between = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(p0e, e)
            & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(e, pse)
            & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(p0d, d)
            & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(d, psd);
        // below_chord(p0, q, ps): t = (q.1 − p0.1)/(ps.1 − p0.1), h = p0.0 + (ps.0 − p0.0)·t;
        // it applies to the lanes between the anchors (span_e > 0 there).
        let t = _mm512_div_pd(_mm512_sub_pd(e, p0e), span_e);
        let h = _mm512_add_pd(p0d, _mm512_mul_pd(span_d, t));
        let chord = between & _mm512_cmp_pd_mask::<_CMP_LE_OQ>(d, _mm512_mul_pd(vkm, h));
        // The anchors themselves are always kept.
        let anchor = (_mm512_cmp_pd_mask::<_CMP_EQ_OQ>(d, psd)
            & _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(e, pse))
            | (_mm512_cmp_pd_mask::<_CMP_EQ_OQ>(d, p0d) & _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(e, p0e));
        let keep = positive & (anchor | (!dominated & ((rest & !below_p0 & !chord) | !hull_tests)));
        // Append the kept lanes: room for a whole block, then both halves of the
        // interleaved pairs stored and the length advanced by the count.
        pts.reserve(8);
        let len = pts.len();
        let dc = _mm512_maskz_compress_pd(keep, d);
        let ec = _mm512_maskz_compress_pd(keep, e);
        // SAFETY: capacity ≥ len + 8 pairs = 16 f64 past the start of the spare room; the
        // first count(keep) pairs written are initialised values, and the length covers
        // only those.
        let dst = pts.as_mut_ptr().add(len).cast::<f64>();
        _mm512_storeu_pd(dst, _mm512_permutex2var_pd(dc, lo_idx, ec));
        _mm512_storeu_pd(dst.add(8), _mm512_permutex2var_pd(dc, hi_idx, ec));
        pts.set_len(len + keep.count_ones() as usize);
        i += 8;
    }
    _mm512_reduce_max_epi64(big) <= f64::MAX.to_bits() as i64
}
