//! The two passes of the streamed [`super::prefilter`] over one check's (actual, expected)
//! pairs, vectorized: [`scan_pairs`] turns pairs into points and finds the anchors' candidates,
//! [`retain`] applies [`super::Anchors::keep`]. The portable loops are the definitions; the
//! AVX2 versions evaluate the same IEEE operations per point (products and sums each rounded,
//! never fused; the same divisions) and combine the per-lane candidates with the same order
//! rules (first occurrence wins a tie), so they give the same points and the same anchors,
//! bit for bit, which the tests check against the portable loops.

use super::{AnchorScan, Anchors, HULL_MARGIN};
use crate::kernels::isa::Isa;

/// The point of one (actual x, expected y) pair, as the frontiers store it: d = |x − y|
/// (NaN → +∞, and 0 when x == y, so equal infinities count as equal), e = |y| (0 for a
/// non-finite y).
#[inline]
pub fn pair_point(x: f64, y: f64) -> (f64, f64) {
    let d = (x - y).abs();
    let d = if d.is_nan() { f64::INFINITY } else { d };
    let ey = if y.is_finite() { y.abs() } else { 0.0 };
    let d = if x == y { 0.0 } else { d };
    (d, ey)
}

/// Appends the point of every pair of `actual` and `expected` to `pts` (d = 0 points
/// included: [`retain`] drops them) and offers each to `scan`, in order.
pub fn scan_pairs(
    actual: &[f64],
    expected: &[f64],
    scan: &mut AnchorScan,
    pts: &mut Vec<(f64, f64)>,
) {
    scan_pairs_on(Isa::detected(), actual, expected, scan, pts)
}

/// [`scan_pairs`] on the compilation `isa` names (the same points and anchors on each).
pub fn scan_pairs_on(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    scan: &mut AnchorScan,
    pts: &mut Vec<(f64, f64)>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return unsafe { scan_pairs_avx2(actual, expected, scan, pts) };
        }
    }
    let _ = isa;
    scan_pairs_portable(actual, expected, scan, pts)
}

/// The definition of [`scan_pairs`].
pub fn scan_pairs_portable(
    actual: &[f64],
    expected: &[f64],
    scan: &mut AnchorScan,
    pts: &mut Vec<(f64, f64)>,
) {
    for (&x, &y) in actual.iter().zip(expected) {
        let q = pair_point(x, y);
        scan.add(q);
        pts.push(q);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_pairs_avx2(
    actual: &[f64],
    expected: &[f64],
    scan: &mut AnchorScan,
    pts: &mut Vec<(f64, f64)>,
) {
    use std::arch::x86_64::*;
    let n = actual.len().min(expected.len());
    let split = n - n % 4;
    pts.reserve(n);
    let base = pts.len();
    let sign = _mm256_set1_pd(-0.0);
    let inf = _mm256_set1_pd(f64::INFINITY);
    let zero = _mm256_setzero_pd();
    // Per lane: p* candidate (d, e); p0 candidate with e > 0 (ratio, index, d, e); the first
    // counted point (index, d, e); e = 0 seen; an infinite d seen.
    let (mut psd, mut pse) = (zero, inf);
    let (mut br, mut bi, mut bd, mut be) = (_mm256_set1_pd(f64::NEG_INFINITY), inf, zero, zero);
    let (mut fi, mut fd, mut fe) = (inf, zero, zero);
    let (mut ze, mut infs) = (zero, zero);
    let mut idx = _mm256_set_pd(3.0, 2.0, 1.0, 0.0);
    let four = _mm256_set1_pd(4.0);
    let dst = pts.as_mut_ptr().add(base) as *mut f64;
    let mut i = 0;
    while i < split {
        let x = _mm256_loadu_pd(actual.as_ptr().add(i));
        let y = _mm256_loadu_pd(expected.as_ptr().add(i));
        let d = _mm256_andnot_pd(sign, _mm256_sub_pd(x, y));
        let d = _mm256_blendv_pd(d, inf, _mm256_cmp_pd::<_CMP_UNORD_Q>(d, d));
        let ay = _mm256_andnot_pd(sign, y);
        let e = _mm256_and_pd(ay, _mm256_cmp_pd::<_CMP_LT_OQ>(ay, inf));
        let d = _mm256_andnot_pd(_mm256_cmp_pd::<_CMP_EQ_OQ>(x, y), d);
        // Store (d, e) pairs in order.
        let lo = _mm256_unpacklo_pd(d, e);
        let hi = _mm256_unpackhi_pd(d, e);
        _mm256_storeu_pd(dst.add(2 * i), _mm256_permute2f128_pd::<0x20>(lo, hi));
        _mm256_storeu_pd(dst.add(2 * i + 4), _mm256_permute2f128_pd::<0x31>(lo, hi));
        let is_inf = _mm256_cmp_pd::<_CMP_EQ_OQ>(d, inf);
        infs = _mm256_or_pd(infs, is_inf);
        let valid = _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_GT_OQ>(d, zero),
            _mm256_cmp_pd::<_CMP_LT_OQ>(d, inf),
        );
        if _mm256_movemask_pd(valid) != 0 {
            let better = _mm256_and_pd(
                valid,
                _mm256_or_pd(
                    _mm256_cmp_pd::<_CMP_GT_OQ>(d, psd),
                    _mm256_and_pd(
                        _mm256_cmp_pd::<_CMP_EQ_OQ>(d, psd),
                        _mm256_cmp_pd::<_CMP_LT_OQ>(e, pse),
                    ),
                ),
            );
            psd = _mm256_blendv_pd(psd, d, better);
            pse = _mm256_blendv_pd(pse, e, better);
            let e_zero = _mm256_cmp_pd::<_CMP_EQ_OQ>(e, zero);
            ze = _mm256_or_pd(ze, _mm256_and_pd(valid, e_zero));
            let r = _mm256_div_pd(d, e);
            let better_r = _mm256_and_pd(
                _mm256_andnot_pd(e_zero, valid),
                _mm256_cmp_pd::<_CMP_GT_OQ>(r, br),
            );
            br = _mm256_blendv_pd(br, r, better_r);
            bi = _mm256_blendv_pd(bi, idx, better_r);
            bd = _mm256_blendv_pd(bd, d, better_r);
            be = _mm256_blendv_pd(be, e, better_r);
            let unset = _mm256_and_pd(valid, _mm256_cmp_pd::<_CMP_EQ_OQ>(fi, inf));
            fi = _mm256_blendv_pd(fi, idx, unset);
            fd = _mm256_blendv_pd(fd, d, unset);
            fe = _mm256_blendv_pd(fe, e, unset);
        }
        idx = _mm256_add_pd(idx, four);
        i += 4;
    }
    pts.set_len(base + split);
    let lanes = |v: __m256d| {
        let mut a = [0.0f64; 4];
        _mm256_storeu_pd(a.as_mut_ptr(), v);
        a
    };
    let (psd, pse) = (lanes(psd), lanes(pse));
    let (br, bi, bd, be) = (lanes(br), lanes(bi), lanes(bd), lanes(be));
    let (fi, fd, fe) = (lanes(fi), lanes(fd), lanes(fe));
    let mut local = AnchorScan {
        infinite: _mm256_movemask_pd(infs) != 0,
        zero_e: _mm256_movemask_pd(ze) != 0,
        ..Default::default()
    };
    // Lanes hold interleaved indices: combine them by the order rules, ties to the smaller
    // index (p* ties are equal values).
    let mut first: Option<(f64, usize)> = None;
    let mut best: Option<(f64, f64, usize)> = None;
    for l in 0..4 {
        if psd[l] > 0.0 {
            let q = (psd[l], pse[l]);
            match local.ps {
                Some(p) if !(q.0 > p.0 || (q.0 == p.0 && q.1 < p.1)) => {}
                _ => local.ps = Some(q),
            }
        }
        if fi[l] != f64::INFINITY && first.is_none_or(|(f, _)| fi[l] < f) {
            first = Some((fi[l], l));
        }
        if bi[l] != f64::INFINITY
            && best.is_none_or(|(r, ix, _)| br[l] > r || (br[l] == r && bi[l] < ix))
        {
            best = Some((br[l], bi[l], l));
        }
    }
    local.first = first.map(|(_, l)| (fd[l], fe[l]));
    local.best = best.map(|(r, _, l)| ((bd[l], be[l]), r));
    for j in split..n {
        let q = pair_point(actual[j], expected[j]);
        local.add(q);
        pts.push(q);
    }
    scan.merge(&local);
}

/// Whether [`scan_anchors`] and [`keep_pairs`] run their vector kernels on the detected
/// [`Isa`] (AVX-512F). Where they do, the two passes beat buffering every point with
/// [`scan_pairs`]: they store only the kept points and divide only where a ratio could
/// matter.
pub fn two_pass_is_vectorized() -> bool {
    Isa::detected().avx512()
}

/// Offers the point of every pair of `actual` and `expected` to `scan`, in order, storing
/// none: the first of the two passes that take a check's prefiltered points straight from
/// its tensors ([`keep_pairs`] is the second).
pub fn scan_anchors(actual: &[f64], expected: &[f64], scan: &mut AnchorScan) {
    scan_anchors_on(Isa::detected(), actual, expected, scan)
}

/// [`scan_anchors`] on the compilation `isa` names (the same anchors on each).
pub fn scan_anchors_on(isa: Isa, actual: &[f64], expected: &[f64], scan: &mut AnchorScan) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { super::avx512::scan_anchors(actual, expected, scan) };
        }
    }
    let _ = isa;
    scan_anchors_portable(actual, expected, scan)
}

/// The definition of [`scan_anchors`].
pub fn scan_anchors_portable(actual: &[f64], expected: &[f64], scan: &mut AnchorScan) {
    for (&x, &y) in actual.iter().zip(expected) {
        scan.add(pair_point(x, y));
    }
}

/// Appends, in order, the point of every pair that `anchors` keep ([`Anchors::keep`]; with
/// no anchors, every point with d > 0): the second pass after [`scan_anchors`].
pub fn keep_pairs(
    actual: &[f64],
    expected: &[f64],
    anchors: Option<&Anchors>,
    pts: &mut Vec<(f64, f64)>,
) {
    keep_pairs_on(Isa::detected(), actual, expected, anchors, pts)
}

/// [`keep_pairs`] on the compilation `isa` names (the same points on each).
pub fn keep_pairs_on(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    anchors: Option<&Anchors>,
    pts: &mut Vec<(f64, f64)>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { super::avx512::keep_pairs(actual, expected, anchors, pts) };
        }
    }
    let _ = isa;
    keep_pairs_portable(actual, expected, anchors, pts)
}

/// The definition of [`keep_pairs`].
pub fn keep_pairs_portable(
    actual: &[f64],
    expected: &[f64],
    anchors: Option<&Anchors>,
    pts: &mut Vec<(f64, f64)>,
) {
    for (&x, &y) in actual.iter().zip(expected) {
        let q = pair_point(x, y);
        let keep = match anchors {
            Some(an) => an.keep(q),
            None => q.0 > 0.0,
        };
        if keep {
            pts.push(q);
        }
    }
}

/// Keeps, in place and in order, the points of `pts` that `an.keep` keeps.
pub fn retain(isa: Isa, an: &Anchors, pts: &mut Vec<(f64, f64)>) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return unsafe { retain_avx2(an, pts) };
        }
    }
    let _ = isa;
    pts.retain(|&q| an.keep(q));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn retain_avx2(an: &Anchors, pts: &mut Vec<(f64, f64)>) {
    use std::arch::x86_64::*;
    let n = pts.len();
    let split = n - n % 4;
    let (ps, p0) = (an.ps, an.p0);
    let km = 1.0 - HULL_MARGIN;
    let zero = _mm256_setzero_pd();
    let (psd, pse) = (_mm256_set1_pd(ps.0), _mm256_set1_pd(ps.1));
    let (p0d, p0e) = (_mm256_set1_pd(p0.0), _mm256_set1_pd(p0.1));
    let vkm = _mm256_set1_pd(km);
    let km_p0d = _mm256_set1_pd(km * p0.0);
    let span_e = _mm256_set1_pd(ps.1 - p0.1);
    let span_d = _mm256_set1_pd(ps.0 - p0.0);
    let not_zero_e = if an.zero_e {
        zero
    } else {
        _mm256_castsi256_pd(_mm256_set1_epi64x(-1))
    };
    let src = pts.as_mut_ptr() as *mut f64;
    let mut w = 0;
    let mut i = 0;
    while i < split {
        let a = _mm256_loadu_pd(src.add(2 * i));
        let b = _mm256_loadu_pd(src.add(2 * i + 4));
        let t0 = _mm256_permute2f128_pd::<0x20>(a, b);
        let t1 = _mm256_permute2f128_pd::<0x31>(a, b);
        let d = _mm256_unpacklo_pd(t0, t1);
        let e = _mm256_unpackhi_pd(t0, t1);
        let positive = _mm256_cmp_pd::<_CMP_GT_OQ>(d, zero);
        let anchor = _mm256_or_pd(
            _mm256_and_pd(
                _mm256_cmp_pd::<_CMP_EQ_OQ>(d, psd),
                _mm256_cmp_pd::<_CMP_EQ_OQ>(e, pse),
            ),
            _mm256_and_pd(
                _mm256_cmp_pd::<_CMP_EQ_OQ>(d, p0d),
                _mm256_cmp_pd::<_CMP_EQ_OQ>(e, p0e),
            ),
        );
        let dominated = _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_GE_OQ>(e, pse),
            _mm256_cmp_pd::<_CMP_LE_OQ>(d, psd),
        );
        // q.0 <= km·p0.0 && q.0·p0.1 <= km·(p0.0·q.1)
        let below_p0 = _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_LE_OQ>(d, km_p0d),
            _mm256_cmp_pd::<_CMP_LE_OQ>(
                _mm256_mul_pd(d, p0e),
                _mm256_mul_pd(vkm, _mm256_mul_pd(p0d, e)),
            ),
        );
        let between = _mm256_and_pd(
            _mm256_and_pd(
                _mm256_cmp_pd::<_CMP_LT_OQ>(p0e, e),
                _mm256_cmp_pd::<_CMP_LT_OQ>(e, pse),
            ),
            _mm256_and_pd(
                _mm256_cmp_pd::<_CMP_LT_OQ>(p0d, d),
                _mm256_cmp_pd::<_CMP_LT_OQ>(d, psd),
            ),
        );
        // below_chord(p0, q, ps): t = (q.1 − p0.1)/(ps.1 − p0.1); h = p0.0 + (ps.0 − p0.0)·t
        let t = _mm256_div_pd(_mm256_sub_pd(e, p0e), span_e);
        let h = _mm256_add_pd(p0d, _mm256_mul_pd(span_d, t));
        let chord = _mm256_and_pd(
            between,
            _mm256_cmp_pd::<_CMP_LE_OQ>(d, _mm256_mul_pd(vkm, h)),
        );
        let dropped = _mm256_or_pd(
            dominated,
            _mm256_and_pd(not_zero_e, _mm256_or_pd(below_p0, chord)),
        );
        let keep = _mm256_and_pd(
            positive,
            _mm256_or_pd(
                anchor,
                _mm256_andnot_pd(dropped, _mm256_castsi256_pd(_mm256_set1_epi64x(-1))),
            ),
        );
        let mut mask = _mm256_movemask_pd(keep);
        let mut l = 0;
        while mask != 0 {
            if mask & 1 != 0 {
                let q = *pts.get_unchecked(i + l);
                *pts.get_unchecked_mut(w) = q;
                w += 1;
            }
            mask >>= 1;
            l += 1;
        }
        i += 4;
    }
    for j in split..n {
        let q = pts[j];
        if an.keep(q) {
            pts[w] = q;
            w += 1;
        }
    }
    pts.truncate(w);
}
