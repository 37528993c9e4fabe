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

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs mixing equal values, NaN and infinities on either side, zeros, tiny and huge
    /// magnitudes, repeated points and ties in ratio.
    fn pairs(seed: u64, n: usize) -> (Vec<f64>, Vec<f64>) {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let special = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e-300,
            2.0,
        ];
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let r = next();
            let y = match r % 7 {
                0 => special[(r >> 8) as usize % special.len()],
                1 => ((r >> 8) % 5) as f64,
                _ => {
                    ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 10f64.powi((r % 9) as i32 - 4)
                }
            };
            let r2 = next();
            let x = match r2 % 6 {
                0 => y,
                1 => special[(r2 >> 8) as usize % special.len()],
                2 => y * 2.0,
                3 => ((r2 >> 8) % 5) as f64,
                _ => y + ((r2 >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e-6 * y.abs().max(1e-3),
            };
            a.push(x);
            e.push(y);
        }
        (a, e)
    }

    #[test]
    fn vector_passes_equal_the_portable_definitions() {
        for seed in 0..400u64 {
            let n = (seed as usize * 7) % 67;
            let (a, e) = pairs(seed, n);
            // Two runs offered in order (a check of two slots), into a scan that may already
            // hold points.
            let cut = n / 3;
            let (mut s1, mut s2) = (AnchorScan::default(), AnchorScan::default());
            let (mut p1, mut p2) = (Vec::new(), Vec::new());
            if seed % 3 == 0 {
                s1.add((0.5, 0.25));
                s2.add((0.5, 0.25));
            }
            scan_pairs(&a[..cut], &e[..cut], &mut s1, &mut p1);
            scan_pairs(&a[cut..], &e[cut..], &mut s1, &mut p1);
            scan_pairs_portable(&a[..cut], &e[..cut], &mut s2, &mut p2);
            scan_pairs_portable(&a[cut..], &e[cut..], &mut s2, &mut p2);
            let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
                v.iter().map(|q| (q.0.to_bits(), q.1.to_bits())).collect()
            };
            assert_eq!(bits(&p1), bits(&p2), "points, seed {seed}");
            let (f1, f2) = (s1.finish(), s2.finish());
            assert_eq!(format!("{f1:?}"), format!("{f2:?}"), "anchors, seed {seed}");
            // The filter, with these anchors and with anchors from a finite cloud (the
            // random pairs often hold an infinite d, which leaves no anchors).
            let finite: Vec<(f64, f64)> = p2.iter().copied().filter(|q| q.0.is_finite()).collect();
            for an in [f1, Anchors::of(finite.iter().copied())]
                .into_iter()
                .flatten()
            {
                for pts in [&p2, &finite] {
                    let mut v = pts.clone();
                    retain(Isa::detected(), &an, &mut v);
                    let want: Vec<_> = pts.iter().copied().filter(|&q| an.keep(q)).collect();
                    assert_eq!(bits(&v), bits(&want), "retain, seed {seed} {an:?}");
                }
            }
        }
    }

    /// The points [`keep_pairs`] keeps under `an`, checked bit for bit against its portable
    /// definition.
    fn kept_by_both(a: &[f64], e: &[f64], an: &Anchors) -> Vec<(f64, f64)> {
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        keep_pairs(a, e, Some(an), &mut fast);
        keep_pairs_portable(a, e, Some(an), &mut slow);
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|q| (q.0.to_bits(), q.1.to_bits())).collect()
        };
        assert_eq!(bits(&fast), bits(&slow));
        slow
    }

    /// The keep pass on the edges of its tests, against its definition: anchors
    /// p₀ = (d, e) = (1, 0.25) (the largest d/e) and p* = (2, 1) (the largest d); points
    /// between them at, one ulp above and one ulp below the chord test's boundary km·h, at
    /// and around h itself, and around the below-p₀ test's two boundaries (d = km·d₀ and
    /// d·e₀ = km·d₀·e), each duplicated, plus copies of the anchors. Each point is the pair
    /// (d − e, −e) with e < d a multiple of d's ulp, so that the pair gives exactly (d, e).
    #[test]
    fn keep_pairs_on_its_tests_boundaries_equals_its_definition() {
        let km = 1.0 - HULL_MARGIN;
        let (p0, ps) = ((1.0f64, 0.25f64), (2.0f64, 1.0f64));
        let q52 = |x: f64| (x * 2f64.powi(52)).round() / 2f64.powi(52);
        let q53 = |x: f64| (x * 2f64.powi(53)).round() / 2f64.powi(53);
        let around = |x: f64| [x.next_down().next_down(), x.next_down(), x, x.next_up()];
        let mut pts = vec![p0, ps, p0, ps];
        for k in 1..200 {
            let e = q52(0.25 + 0.75 * k as f64 / 200.0);
            let t = (e - p0.1) / (ps.1 - p0.1);
            let h = p0.0 + (ps.0 - p0.0) * t;
            for d in around(km * h).into_iter().chain(around(h)) {
                pts.push((d, e));
            }
            // Below p₀: d around km·d₀, and e around the ray's boundary km·d₀·e = d·e₀.
            let d = 0.5 + 0.5 * k as f64 / 200.0;
            for dd in around(km * p0.0) {
                pts.push((dd, q53(0.3)));
            }
            let e_ray = q53(d * p0.1 / (km * p0.0));
            for ee in [e_ray - 2f64.powi(-53), e_ray, e_ray + 2f64.powi(-53)] {
                pts.push((d, ee));
            }
        }
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for &(d, ee) in &pts {
            let (x, y) = (d - ee, -ee);
            assert_eq!((x - y).abs(), d, "the pair gives d exactly");
            for _ in 0..2 {
                a.push(x);
                e.push(y);
            }
        }
        let mut scan = AnchorScan::default();
        scan_anchors_portable(&a, &e, &mut scan);
        let an = scan.finish().expect("anchors");
        assert_eq!((an.p0, an.ps), (p0, ps), "the intended anchors");
        let slow = kept_by_both(&a, &e, &an);
        // Both sides of each boundary occur: some points are kept, some dropped.
        assert!(
            !slow.is_empty() && slow.len() < a.len() / 2,
            "{}",
            slow.len()
        );
    }

    /// The keep pass's block screen (`avx512::keep_finite`) against the definition, on
    /// points around the screen's own edges: below p₀'s ray and below the chord by factors
    /// c = 1 − 2⁻⁴⁰ give or take a few ulps (dropped by the test either way), d exactly d₀
    /// and one ulp either side with e between the anchors (d = d₀ is kept: neither below
    /// p₀ nor strictly between the anchors), e at the screen range's ends 2^±200, and a kept
    /// point now and then among blocks of dropped ones, over several runs of 64 blocks.
    #[test]
    fn keep_pairs_around_its_block_screen_equals_its_definition() {
        let (p0, ps) = ((1.0f64, 0.25f64), (2.0f64, 1.0f64));
        let c = 1.0 - 2f64.powi(-40);
        let around = |x: f64| {
            [
                x.next_down().next_down(),
                x.next_down(),
                x,
                x.next_up(),
                x.next_up().next_up(),
            ]
        };
        let q = |x: f64, ulp: f64| (x / ulp).round() * ulp;
        let mut pts = vec![p0, ps];
        for k in 1..400 {
            let f = k as f64 / 400.0;
            // Left of p₀: the ray d = r₀·e.
            let e = q(0.25 * f, 2f64.powi(-56));
            for d in around(c * 4.0 * e) {
                pts.push((d, e));
            }
            // Between the anchors: the chord, d = d₀ and its neighbours.
            let e = q(0.25 + 0.75 * f, 2f64.powi(-54));
            let h = 1.0 + (e - 0.25) / 0.75;
            for d in around(c * h).into_iter().chain(around(p0.0)) {
                pts.push((d, e));
            }
            // Right of p*: under d* (dominated) and at it.
            for d in around(c * ps.0) {
                pts.push((d, q(1.0 + f, 2f64.powi(-52))));
            }
            // Far below (a block the screen skips), then now and then a kept point.
            for j in 0..16 {
                pts.push((0.25 * f, q(0.3 + 0.001 * j as f64, 2f64.powi(-54))));
            }
            if k % 7 == 0 {
                // Above the chord (kept), with a ratio below r₀ = 4 and d below d* = 2.
                let e = q(0.4 + 0.5 * f, 2f64.powi(-54));
                let h = 1.0 + (e - 0.25) / 0.75;
                pts.push((q(h * 1.001, 2f64.powi(-52)), e));
            }
        }
        // e at the ends of the screen's range: below the ray, and dominated by p*.
        for ee in around(2f64.powi(-200)) {
            pts.push((ee * 1e-3, ee));
        }
        for ee in around(2f64.powi(200)) {
            pts.push((0.5, ee));
        }
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for &(d, ee) in &pts {
            // The pair (ee + d, ee) gives d exactly when it is exact, as it is for these
            // multiples of small powers of two; pairs where it is not are kept as they are
            // (both sides still see the same pair).
            a.push(ee + d);
            e.push(ee);
        }
        let mut scan = AnchorScan::default();
        scan_anchors_portable(&a, &e, &mut scan);
        let an = scan.finish().expect("anchors");
        let slow = kept_by_both(&a, &e, &an);
        // Kept points and dropped ones, d = d₀ between the anchors among the kept.

        assert!(
            slow.len() > 400 && slow.len() < a.len() / 4,
            "{}",
            slow.len()
        );
        assert!(slow.iter().any(|q| q.0 == an.p0.0 && q.1 > an.p0.1));
        assert!(slow
            .iter()
            .any(|q| q.1 >= 0.4 && q.0 > 1.0005 * (1.0 + (q.1 - 0.25) / 0.75)));
    }

    /// Finite pairs on the anchor screen's edges: ratios d/e within a few ulps of each
    /// other (the best-ratio test), differences equal to the largest so far (the p* test),
    /// exact zeros in d and in e, and magnitudes from 1e-300 to 1e300.
    fn finite_pairs(seed: u64, n: usize) -> (Vec<f64>, Vec<f64>) {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let ratio = 10f64.powi((next() % 9) as i32 - 4);
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for k in 0..n {
            let r = next();
            let y = match r % 6 {
                0 => 0.0,
                1 => ((r >> 8) % 5) as f64 - 2.0,
                2 => {
                    (((r >> 11) as f64) / (1u64 << 53) as f64 - 0.5)
                        * 10f64.powi((r % 601) as i32 - 300)
                }
                _ => {
                    (((r >> 11) as f64) / (1u64 << 53) as f64 - 0.5)
                        * 10f64.powi((r % 7) as i32 - 3)
                }
            };
            let r2 = next();
            let ulps = ((r2 >> 8) % 7) as f64 - 3.0;
            let x = match r2 % 7 {
                0 => y,
                1 => y + y.abs() * ratio * (1.0 + ulps * f64::EPSILON),
                2 => y - y.abs() * ratio,
                3 => y + (k % 3) as f64 * 1e-3,
                4 => ((r2 >> 16) % 3) as f64,
                _ => {
                    y + (((r2 >> 11) as f64) / (1u64 << 53) as f64 - 0.5)
                        * ratio
                        * y.abs().max(1e-6)
                }
            };
            a.push(x);
            e.push(y);
        }
        (a, e)
    }

    #[test]
    fn two_pass_kernels_equal_their_definitions() {
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|q| (q.0.to_bits(), q.1.to_bits())).collect()
        };
        for seed in 0..3000u64 {
            let n = (seed as usize * 13) % 150;
            let (a, e) = if seed % 4 == 0 {
                pairs(seed, n)
            } else {
                finite_pairs(seed, n)
            };
            let cut = (seed as usize % 5) * n / 5;
            let (mut s1, mut s2) = (AnchorScan::default(), AnchorScan::default());
            if seed % 3 == 0 {
                s1.add((0.5, 0.25));
                s2.add((0.5, 0.25));
            }
            scan_anchors(&a[..cut], &e[..cut], &mut s1);
            scan_anchors(&a[cut..], &e[cut..], &mut s1);
            scan_anchors_portable(&a[..cut], &e[..cut], &mut s2);
            scan_anchors_portable(&a[cut..], &e[cut..], &mut s2);
            assert_eq!(format!("{s1:?}"), format!("{s2:?}"), "scan, seed {seed}");
            let an = s2.finish();
            let (mut p1, mut p2) = (vec![(9.0, 9.0)], vec![(9.0, 9.0)]);
            keep_pairs(&a, &e, an.as_ref(), &mut p1);
            keep_pairs_portable(&a, &e, an.as_ref(), &mut p2);
            assert_eq!(bits(&p1), bits(&p2), "kept, seed {seed}");
            // And the same as buffering every point and filtering (the one-pass form).
            let (mut s3, mut p3) = (AnchorScan::default(), Vec::new());
            if seed % 3 == 0 {
                s3.add((0.5, 0.25));
            }
            scan_pairs_portable(&a, &e, &mut s3, &mut p3);
            s3.filter(&mut p3);
            assert_eq!(bits(&p1[1..]), bits(&p3), "filtered, seed {seed}");
        }
    }

    /// Without anchors, pairs that are all equal (±0 and ±∞ included) keep no point, and
    /// one pair that differs anywhere (by an ulp, or a NaN on either side, which never
    /// equals) sends the pass to the definition: the vector pass against it.
    #[test]
    fn without_anchors_equal_pairs_keep_nothing_and_one_difference_counts() {
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|p| (p.0.to_bits(), p.1.to_bits())).collect()
        };
        for n in [0usize, 1, 7, 8, 9, 16, 61] {
            let e: Vec<f64> = (0..n)
                .map(|i| match i % 5 {
                    0 => 0.0,
                    1 => f64::INFINITY,
                    2 => -1.5 * i as f64,
                    _ => 1e-3 * i as f64,
                })
                .collect();
            let mut a = e.clone();
            a.iter_mut().step_by(3).for_each(|x| {
                if *x == 0.0 {
                    *x = -0.0;
                }
            });
            let (mut p1, mut p2) = (vec![(9.0, 9.0)], vec![(9.0, 9.0)]);
            keep_pairs(&a, &e, None, &mut p1);
            keep_pairs_portable(&a, &e, None, &mut p2);
            assert_eq!(bits(&p1), bits(&p2), "equal, n {n}");
            assert_eq!(p1.len(), 1, "equal pairs keep nothing, n {n}");
            for at in (0..n).step_by(4) {
                for (x, y) in [
                    (f64::from_bits(e[at].to_bits() + 1), e[at]),
                    (f64::NAN, e[at]),
                    (a[at], f64::NAN),
                ] {
                    let (mut a2, mut e2) = (a.clone(), e.clone());
                    (a2[at], e2[at]) = (x, y);
                    let (mut p1, mut p2) = (Vec::new(), Vec::new());
                    keep_pairs(&a2, &e2, None, &mut p1);
                    keep_pairs_portable(&a2, &e2, None, &mut p2);
                    assert_eq!(bits(&p1), bits(&p2), "n {n}, at {at}, ({x}, {y})");
                    assert!(!p1.is_empty(), "n {n}, at {at}: the differing pair is kept");
                }
            }
        }
    }

    /// A best ratio d/e that overflows to +∞ (d = 1 over a subnormal e) and later points
    /// with e = 0 (below p*, so only the e = 0 flag records them) or a subnormal e: the
    /// vector scan must still see them. (Its screen once compared ratios with the bound
    /// +∞ − +∞ = NaN and let such a block through as quiet, leaving the flag unset.)
    #[test]
    fn an_infinite_best_ratio_leaves_later_points_seen() {
        let tiny = 1e-320;
        for later in [(0.5, 0.0), (0.25, 0.0), (0.75, 3e-321), (2.0, 5e-324)] {
            for at in [8, 9, 15, 16, 40] {
                let mut a = vec![0.5; at + 3];
                let mut e = a.clone();
                (a[1], e[1]) = (1.0 + tiny, tiny);
                (a[at], e[at]) = (later.0 + later.1, later.1);
                let (mut fast, mut slow) = (AnchorScan::default(), AnchorScan::default());
                scan_anchors(&a, &e, &mut fast);
                scan_anchors_portable(&a, &e, &mut slow);
                assert!(slow.best.is_some_and(|(_, r)| r == f64::INFINITY));
                assert_eq!(
                    format!("{fast:?}"),
                    format!("{slow:?}"),
                    "{later:?} at {at}"
                );
            }
        }
    }
}
