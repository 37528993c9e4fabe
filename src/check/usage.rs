//! Usage of one element and of a tensor (the module doc of [`crate::check`] states the
//! criterion and its special cases), in portable loops and the AVX-512 kernels of
//! `pair_avx512`, which give the same bits.

use crate::check::Tolerance;
use crate::kernels::isa::Isa;

#[cfg(target_arch = "x86_64")]
mod pair_avx512;

/// The outcome of one tensor comparison under one tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TensorStats {
    /// Maximum element usage (ratio, 1.0 = 100 %).
    pub usage: f64,
    /// Flat index of the element with the maximum usage (first on ties).
    pub worst_index: usize,
    /// Elements with usage > 1.
    pub mismatched: usize,
    /// Elements compared.
    pub elements: usize,
    /// Mismatches that involve a NaN or an infinity.
    pub nonfinite: usize,
    /// Maximum `|actual - expected|` (f64; NaN-free: NaN pairs count as +∞).
    pub max_abs_diff: f64,
    /// Maximum `|expected|`.
    pub max_abs_expected: f64,
}

/// Compares `actual` against `expected` element by element under `tol`.
pub fn compare(actual: &[f64], expected: &[f64], tol: Tolerance) -> TensorStats {
    debug_assert_eq!(actual.len(), expected.len());
    let mut s = TensorStats {
        usage: 0.0,
        worst_index: 0,
        mismatched: 0,
        elements: actual.len(),
        nonfinite: 0,
        max_abs_diff: 0.0,
        max_abs_expected: 0.0,
    };
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let u = tol.usage(a, e);
        if u > s.usage {
            s.usage = u;
            s.worst_index = i;
        }
        if u > 1.0 {
            s.mismatched += 1;
            if !(a.is_finite() && e.is_finite()) {
                s.nonfinite += 1;
            }
        }
        let d = if a == e { 0.0 } else { (a - e).abs() };
        let d = if d.is_nan() { f64::INFINITY } else { d };
        if d > s.max_abs_diff {
            s.max_abs_diff = d;
        }
        let ae = e.abs();
        if ae > s.max_abs_expected {
            s.max_abs_expected = ae;
        }
    }
    s
}

/// Usage of one element, branch-free (selects only), same value as [`Tolerance::usage`].
#[inline(always)]
fn usage_lane(a: f64, e: f64, atol: f64, rtol: f64) -> f64 {
    let d = (a - e).abs();
    let raw = d / (atol + rtol * e.abs());
    // d is 0 only when a == e (finite); a non-finite d (NaN or an infinity on one side) and
    // NaN quotients (inf/inf) are infinite usage; a zero allowance gives d/0 = inf already.
    let u = if raw.is_nan() || d.is_infinite() || d.is_nan() {
        f64::INFINITY
    } else {
        raw
    };
    if a == e {
        0.0
    } else {
        u
    }
}

const LANES: usize = 4;

/// Usage statistics of one tensor under one tolerance, without the worst index: the sweep's
/// hot path. Same definition as [`Tolerance::usage`]; four independent lanes so the compiler
/// can vectorize it (the maximum does not depend on the order it is taken in).
/// Returns (max usage, mismatched elements, non-finite mismatches).
#[inline]
pub fn usage_stats(actual: &[f64], expected: &[f64], tol: Tolerance) -> (f64, usize, usize) {
    usage_stats_on(Isa::detected(), actual, expected, tol)
}

/// [`usage_stats`] on the compilation `isa` names (the same results on each).
#[inline]
pub fn usage_stats_on(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    tol: Tolerance,
) -> (f64, usize, usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return unsafe { usage_stats_avx2(actual, expected, tol) };
        }
    }
    let _ = isa;
    usage_stats_impl(actual, expected, tol)
}

/// [`usage_stats`] compiled for AVX2: the same IEEE operations on wider vectors, so the
/// same results.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn usage_stats_avx2(
    actual: &[f64],
    expected: &[f64],
    tol: Tolerance,
) -> (f64, usize, usize) {
    usage_stats_impl(actual, expected, tol)
}

/// Whether every value is finite (four independent lanes, no early exit, so it vectorizes).
#[inline(always)]
fn all_finite(x: &[f64]) -> bool {
    let mut ok = [true; LANES];
    let split = x.len() - x.len() % LANES;
    for c in x[..split].chunks_exact(LANES) {
        for l in 0..LANES {
            ok[l] &= c[l].is_finite();
        }
    }
    ok.iter().all(|&b| b) && x[split..].iter().all(|v| v.is_finite())
}

#[inline(always)]
fn usage_stats_impl(actual: &[f64], expected: &[f64], tol: Tolerance) -> (f64, usize, usize) {
    let (atol, rtol) = (tol.atol, tol.rtol);
    // Fast path: with finite operands and atol > 0 the allowance is positive and finite, so
    // `d / allowed` is already the usage (0 when equal) and no special case can arise.
    if atol > 0.0 && rtol >= 0.0 && all_finite(actual) && all_finite(expected) {
        let mut max_u = [0.0f64; LANES];
        let mut bad = [0u64; LANES];
        let n = actual.len().min(expected.len());
        let split = n - n % LANES;
        for (a4, e4) in actual[..split]
            .chunks_exact(LANES)
            .zip(expected[..split].chunks_exact(LANES))
        {
            for l in 0..LANES {
                let u = (a4[l] - e4[l]).abs() / (atol + rtol * e4[l].abs());
                max_u[l] = if u > max_u[l] { u } else { max_u[l] };
                bad[l] += (u > 1.0) as u64;
            }
        }
        for i in split..n {
            let u = (actual[i] - expected[i]).abs() / (atol + rtol * expected[i].abs());
            max_u[0] = if u > max_u[0] { u } else { max_u[0] };
            bad[0] += (u > 1.0) as u64;
        }
        let m = max_u.iter().fold(0.0f64, |m, &u| if u > m { u } else { m });
        return (m, bad.iter().sum::<u64>() as usize, 0);
    }
    let mut max_u = [0.0f64; LANES];
    let mut bad = [0u64; LANES];
    let mut nonfinite = [0u64; LANES];
    let n = actual.len().min(expected.len());
    let split = n - n % LANES;
    for (a4, e4) in actual[..split]
        .chunks_exact(LANES)
        .zip(expected[..split].chunks_exact(LANES))
    {
        for l in 0..LANES {
            let u = usage_lane(a4[l], e4[l], atol, rtol);
            max_u[l] = if u > max_u[l] { u } else { max_u[l] };
            let b = u > 1.0;
            bad[l] += b as u64;
            nonfinite[l] += (b & !(a4[l].is_finite() & e4[l].is_finite())) as u64;
        }
    }
    for i in split..n {
        let (a, e) = (actual[i], expected[i]);
        let u = usage_lane(a, e, atol, rtol);
        max_u[0] = if u > max_u[0] { u } else { max_u[0] };
        let b = u > 1.0;
        bad[0] += b as u64;
        nonfinite[0] += (b & !(a.is_finite() & e.is_finite())) as u64;
    }
    let m = max_u.iter().fold(0.0f64, |m, &u| if u > m { u } else { m });
    (
        m,
        bad.iter().sum::<u64>() as usize,
        nonfinite.iter().sum::<u64>() as usize,
    )
}

/// Largest `|actual - expected|` (a NaN difference counts as +∞) and largest `|expected|`.
#[inline]
pub fn magnitude_stats(actual: &[f64], expected: &[f64]) -> (f64, f64) {
    magnitude_stats_on(Isa::detected(), actual, expected)
}

/// [`magnitude_stats`] on the compilation `isa` names (the same results on each).
#[inline]
pub fn magnitude_stats_on(isa: Isa, actual: &[f64], expected: &[f64]) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return unsafe { magnitude_stats_avx2(actual, expected) };
        }
    }
    let _ = isa;
    magnitude_stats_impl(actual, expected)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn magnitude_stats_avx2(actual: &[f64], expected: &[f64]) -> (f64, f64) {
    magnitude_stats_impl(actual, expected)
}

#[inline(always)]
fn magnitude_stats_impl(actual: &[f64], expected: &[f64]) -> (f64, f64) {
    if all_finite(actual) && all_finite(expected) {
        // Finite operands: |a - e| is 0 exactly when a == e and never NaN.
        max_pair_lanes(actual, expected, |a, e| ((a - e).abs(), e.abs()))
    } else {
        max_pair_lanes(actual, expected, |a, e| {
            let d = (a - e).abs();
            let d = if d.is_nan() { f64::INFINITY } else { d };
            (if a == e { 0.0 } else { d }, e.abs())
        })
    }
}

/// The element-wise maxima of both components of `lane(actual[i], expected[i])`, in
/// [`LANES`] independent lanes (the maximum does not depend on the order it is taken in).
#[inline(always)]
fn max_pair_lanes(
    actual: &[f64],
    expected: &[f64],
    lane: impl Fn(f64, f64) -> (f64, f64),
) -> (f64, f64) {
    let mut max_d = [0.0f64; LANES];
    let mut max_e = [0.0f64; LANES];
    let n = actual.len().min(expected.len());
    let split = n - n % LANES;
    for (a4, e4) in actual[..split]
        .chunks_exact(LANES)
        .zip(expected[..split].chunks_exact(LANES))
    {
        for l in 0..LANES {
            let (d, ae) = lane(a4[l], e4[l]);
            max_d[l] = if d > max_d[l] { d } else { max_d[l] };
            max_e[l] = if ae > max_e[l] { ae } else { max_e[l] };
        }
    }
    for i in split..n {
        let (d, ae) = lane(actual[i], expected[i]);
        max_d[0] = if d > max_d[0] { d } else { max_d[0] };
        max_e[0] = if ae > max_e[0] { ae } else { max_e[0] };
    }
    let fold = |v: [f64; LANES]| v.iter().fold(0.0f64, |m, &x| if x > m { x } else { m });
    (fold(max_d), fold(max_e))
}

/// Per tolerance (max usage, mismatched, non-finite mismatches), then (max |diff|,
/// max |expected|): the result of [`pair_stats_finite`].
pub type PairStats = ([(f64, usize, usize); 2], (f64, f64));

/// [`usage_stats`] under two tolerances plus [`magnitude_stats`], in one pass, when every
/// operand is finite and both atols are positive (the common case: each element's difference
/// and magnitude are computed once). Returns `None` otherwise, and the caller falls back to
/// the separate functions. Results are identical to those functions.
pub fn pair_stats_finite(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    pair_stats_finite_on(Isa::detected(), actual, expected, t1, t2)
}

/// [`pair_stats_finite`] on the compilation `isa` names: the screened AVX-512F kernel (where
/// it applies), the AVX2 compilation, or the portable definition; the same results on each.
pub fn pair_stats_finite_on(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    if !fusable(t1, t2) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() && pair_avx512::applies(actual, expected, t1, t2) {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { pair_avx512::pair_stats(actual, expected, t1, t2) };
        }
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return unsafe { pair_stats_avx2(actual, expected, t1, t2) };
        }
    }
    let _ = isa;
    pair_stats_impl(actual, expected, t1, t2)
}

/// [`pair_stats_finite`] without the mismatch counts (both 0 in the result): the maxima
/// alone, which is what a mutant's evaluation keeps. With AVX-512F a comparison whose usage
/// is above 100 % (every mutant's) then takes one pass instead of two.
pub fn pair_usages_finite(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    pair_usages_finite_on(Isa::detected(), actual, expected, t1, t2)
}

/// [`pair_usages_finite`] on the compilation `isa` names; the same results on each: the
/// usages and magnitudes of [`pair_stats_finite_on`], the counts 0.
pub fn pair_usages_finite_on(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    #[cfg(target_arch = "x86_64")]
    {
        if fusable(t1, t2) && isa.avx512() && pair_avx512::applies(actual, expected, t1, t2) {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { pair_avx512::pair_usages(actual, expected, t1, t2) };
        }
    }
    pair_stats_finite_on(isa, actual, expected, t1, t2)
        .map(|(per, mags)| (per.map(|(u, _, _)| (u, 0, 0)), mags))
}

/// Whether the screened AVX-512F kernel of [`pair_stats_finite_on`] takes these operands and
/// tolerances at [`Level::Avx512`](crate::kernels::isa::Level::Avx512) (for tests that must
/// know which kernel they compare).
#[doc(hidden)]
pub fn pair_kernel_applies(actual: &[f64], expected: &[f64], t1: Tolerance, t2: Tolerance) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        fusable(t1, t2) && pair_avx512::applies(actual, expected, t1, t2)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (actual, expected, t1, t2);
        false
    }
}

/// [`pair_stats_finite`] of `actual` against `expected`, and
/// [`scan_anchors`](crate::stats::frontier::scan_anchors) of the same pairs into `scan`, with
/// the same results as the two calls: in one pass where the AVX-512 kernels apply to both (the
/// scan redone alone when some difference is not finite), else one after the other. The
/// asserted comparison's statistics and its frontier's anchors read the same pairs.
pub fn pair_stats_finite_scan(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
    scan: &mut crate::stats::frontier::AnchorScan,
) -> Option<PairStats> {
    pair_stats_finite_scan_on(Isa::detected(), actual, expected, t1, t2, scan)
}

/// [`pair_stats_finite_scan`] on the compilation `isa` names (the same results on each).
pub fn pair_stats_finite_scan_on(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
    scan: &mut crate::stats::frontier::AnchorScan,
) -> Option<PairStats> {
    use crate::stats::frontier::scan_anchors_on;
    #[cfg(target_arch = "x86_64")]
    {
        if fusable(t1, t2)
            && isa.avx512()
            && !scan.is_infinite()
            && pair_avx512::applies(actual, expected, t1, t2)
        {
            let start = *scan;
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F, and
            // the scan is not infinite (BlockScan::new's condition).
            let (stats, d_finite) = unsafe {
                let mut blocks = crate::stats::frontier::BlockScan::new(scan);
                let r = pair_avx512::pair_stats_scan(actual, expected, t1, t2, &mut blocks);
                blocks.finish();
                r
            };
            if !d_finite {
                *scan = start;
                scan_anchors_on(isa, actual, expected, scan);
            }
            return stats;
        }
    }
    let stats = pair_stats_finite_on(isa, actual, expected, t1, t2);
    scan_anchors_on(isa, actual, expected, scan);
    stats
}

/// Whether [`pair_stats_finite`] takes the two tolerances: both atols positive, both rtols
/// non-negative.
fn fusable(t1: Tolerance, t2: Tolerance) -> bool {
    t1.atol > 0.0 && t2.atol > 0.0 && t1.rtol >= 0.0 && t2.rtol >= 0.0
}

/// [`pair_stats_finite`] of `a1` and of `a2` against the same `expected`: the same two
/// results, taken in one pass (each element's |expected| and allowances computed once) where
/// the AVX-512 kernel applies to both.
pub fn pair_stats_finite2(
    a1: &[f64],
    a2: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> [Option<PairStats>; 2] {
    pair_stats_finite2_on(Isa::detected(), a1, a2, expected, t1, t2)
}

/// [`pair_stats_finite2`] on the compilation `isa` names (the same results on each).
pub fn pair_stats_finite2_on(
    isa: Isa,
    a1: &[f64],
    a2: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> [Option<PairStats>; 2] {
    #[cfg(target_arch = "x86_64")]
    {
        if fusable(t1, t2)
            && isa.avx512()
            && pair_avx512::applies(a1, expected, t1, t2)
            && pair_avx512::applies(a2, expected, t1, t2)
        {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F,
            // and the kernel applies to both (checked just above).
            return unsafe { pair_avx512::pair_stats2(a1, a2, expected, t1, t2) };
        }
    }
    [
        pair_stats_finite_on(isa, a1, expected, t1, t2),
        pair_stats_finite_on(isa, a2, expected, t1, t2),
    ]
}

/// `max_i S_i / (atol + rtol·|e_i|)` over `cond` (S) and `expected`, four independent lanes
/// (the maximum does not depend on the order it is taken in): the theory columns' ratio, whose
/// usage is a bound's factor times this. [`max_ratio_on`] the detected [`Isa`].
pub fn max_ratio(cond: &[f64], expected: &[f64], t: Tolerance) -> f64 {
    max_ratio_on(Isa::detected(), cond, expected, t)
}

/// [`max_ratio`] on the compilation `isa` names: the AVX-512F kernel with the division screen
/// (`pair_avx512::max_ratio`) from [`Level::Avx512`](crate::kernels::isa::Level::Avx512) on,
/// else [`max_ratio_portable`], the definition; the same result bit for bit.
pub fn max_ratio_on(isa: Isa, cond: &[f64], expected: &[f64], t: Tolerance) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { pair_avx512::max_ratio(cond, expected, t.atol, t.rtol) };
        }
    }
    let _ = isa;
    max_ratio_portable(cond, expected, t)
}

/// The definition of [`max_ratio`]: terms in index order, four lanes.
pub fn max_ratio_portable(cond: &[f64], expected: &[f64], t: Tolerance) -> f64 {
    let mut m = [0.0f64; 4];
    let n = cond.len().min(expected.len());
    let split = n - n % 4;
    for (c4, e4) in cond[..split]
        .chunks_exact(4)
        .zip(expected[..split].chunks_exact(4))
    {
        for l in 0..4 {
            let r = c4[l] / (t.atol + t.rtol * e4[l].abs());
            m[l] = if r > m[l] { r } else { m[l] };
        }
    }
    for i in split..n {
        let r = cond[i] / (t.atol + t.rtol * expected[i].abs());
        m[0] = if r > m[0] { r } else { m[0] };
    }
    m.iter().fold(0.0f64, |a, &x| if x > a { x } else { a })
}

/// AVX2 version of [`pair_stats_impl`] with explicit intrinsics: four lanes per register,
/// the same IEEE operations per element (`atol + rtol·|e|` as a product then a sum, never
/// fused; one division), so the results are identical.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pair_stats_avx2(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    use std::arch::x86_64::*;
    if !(all_finite(actual) && all_finite(expected)) {
        return None;
    }
    let n = actual.len().min(expected.len());
    let split = n - n % LANES;
    let sign = _mm256_set1_pd(-0.0);
    let one = _mm256_set1_pd(1.0);
    let (at1, rt1) = (_mm256_set1_pd(t1.atol), _mm256_set1_pd(t1.rtol));
    let (at2, rt2) = (_mm256_set1_pd(t2.atol), _mm256_set1_pd(t2.rtol));
    let zero = _mm256_setzero_pd();
    let (mut u1, mut u2, mut md, mut me) = (zero, zero, zero, zero);
    let (mut b1, mut b2) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let mut i = 0;
    while i < split {
        // SAFETY: i + 4 <= split <= len of both slices.
        let a = _mm256_loadu_pd(actual.as_ptr().add(i));
        let e = _mm256_loadu_pd(expected.as_ptr().add(i));
        let d = _mm256_andnot_pd(sign, _mm256_sub_pd(a, e));
        let ae = _mm256_andnot_pd(sign, e);
        let x1 = _mm256_div_pd(d, _mm256_add_pd(at1, _mm256_mul_pd(rt1, ae)));
        let x2 = _mm256_div_pd(d, _mm256_add_pd(at2, _mm256_mul_pd(rt2, ae)));
        u1 = _mm256_max_pd(x1, u1);
        u2 = _mm256_max_pd(x2, u2);
        // A true comparison is all ones (-1 as i64): subtracting it counts.
        b1 = _mm256_sub_epi64(
            b1,
            _mm256_castpd_si256(_mm256_cmp_pd::<_CMP_GT_OQ>(x1, one)),
        );
        b2 = _mm256_sub_epi64(
            b2,
            _mm256_castpd_si256(_mm256_cmp_pd::<_CMP_GT_OQ>(x2, one)),
        );
        md = _mm256_max_pd(d, md);
        me = _mm256_max_pd(ae, me);
        i += LANES;
    }
    let mut lanes = [[0.0f64; LANES]; 4];
    _mm256_storeu_pd(lanes[0].as_mut_ptr(), u1);
    _mm256_storeu_pd(lanes[1].as_mut_ptr(), u2);
    _mm256_storeu_pd(lanes[2].as_mut_ptr(), md);
    _mm256_storeu_pd(lanes[3].as_mut_ptr(), me);
    let mut counts = [[0u64; LANES]; 2];
    _mm256_storeu_si256(counts[0].as_mut_ptr() as *mut __m256i, b1);
    _mm256_storeu_si256(counts[1].as_mut_ptr() as *mut __m256i, b2);
    let [mut u1, mut u2, mut md, mut me] =
        lanes.map(|v| v.iter().fold(0.0f64, |m, &x| if x > m { x } else { m }));
    let mut c1 = counts[0].iter().sum::<u64>() as usize;
    let mut c2 = counts[1].iter().sum::<u64>() as usize;
    for k in split..n {
        let d = (actual[k] - expected[k]).abs();
        let ae = expected[k].abs();
        let x1 = d / (t1.atol + t1.rtol * ae);
        let x2 = d / (t2.atol + t2.rtol * ae);
        u1 = if x1 > u1 { x1 } else { u1 };
        u2 = if x2 > u2 { x2 } else { u2 };
        c1 += (x1 > 1.0) as usize;
        c2 += (x2 > 1.0) as usize;
        md = if d > md { d } else { md };
        me = if ae > me { ae } else { me };
    }
    Some(([(u1, c1, 0), (u2, c2, 0)], (md, me)))
}

#[inline(always)]
fn pair_stats_impl(
    actual: &[f64],
    expected: &[f64],
    t1: Tolerance,
    t2: Tolerance,
) -> Option<PairStats> {
    if !(all_finite(actual) && all_finite(expected)) {
        return None;
    }
    let mut u1 = [0.0f64; LANES];
    let mut u2 = [0.0f64; LANES];
    let mut b1 = [0u64; LANES];
    let mut b2 = [0u64; LANES];
    let mut md = [0.0f64; LANES];
    let mut me = [0.0f64; LANES];
    let n = actual.len().min(expected.len());
    let split = n - n % LANES;
    let mut lane = |l: usize, a: f64, e: f64| {
        let d = (a - e).abs();
        let ae = e.abs();
        let x1 = d / (t1.atol + t1.rtol * ae);
        let x2 = d / (t2.atol + t2.rtol * ae);
        u1[l] = if x1 > u1[l] { x1 } else { u1[l] };
        u2[l] = if x2 > u2[l] { x2 } else { u2[l] };
        b1[l] += (x1 > 1.0) as u64;
        b2[l] += (x2 > 1.0) as u64;
        md[l] = if d > md[l] { d } else { md[l] };
        me[l] = if ae > me[l] { ae } else { me[l] };
    };
    for (a4, e4) in actual[..split]
        .chunks_exact(LANES)
        .zip(expected[..split].chunks_exact(LANES))
    {
        for l in 0..LANES {
            lane(l, a4[l], e4[l]);
        }
    }
    for i in split..n {
        lane(0, actual[i], expected[i]);
    }
    let fold = |v: [f64; LANES]| v.iter().fold(0.0f64, |m, &x| if x > m { x } else { m });
    let sum = |v: [u64; LANES]| v.iter().sum::<u64>() as usize;
    Some((
        [(fold(u1), sum(b1), 0), (fold(u2), sum(b2), 0)],
        (fold(md), fold(me)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: Tolerance = Tolerance {
        atol: 1e-6,
        rtol: 1e-5,
    };

    #[test]
    fn usage_is_diff_over_allowance() {
        // |1.5e-6| / (1e-6 + 1e-5·0.5): both terms computed independently here.
        let u = OLD.usage(0.5 + 1.5e-6, 0.5);
        let expect = ((0.5 + 1.5e-6) - 0.5f64).abs() / (1e-6 + 1e-5 * 0.5);
        assert_eq!(u, expect);
        assert!(u < 1.0);
    }

    #[test]
    fn nan_on_either_side_is_infinite_usage() {
        assert_eq!(OLD.usage(f64::NAN, 1.0), f64::INFINITY);
        assert_eq!(OLD.usage(1.0, f64::NAN), f64::INFINITY);
        assert_eq!(OLD.usage(f64::NAN, f64::NAN), f64::INFINITY);
    }

    #[test]
    fn infinities_are_equal_only_to_themselves() {
        assert_eq!(OLD.usage(f64::INFINITY, f64::INFINITY), 0.0);
        assert_eq!(OLD.usage(f64::INFINITY, 1.0), f64::INFINITY);
        assert_eq!(OLD.usage(f64::NEG_INFINITY, f64::INFINITY), f64::INFINITY);
        assert_eq!(OLD.usage(1.0, f64::INFINITY), f64::INFINITY);
    }

    #[test]
    fn zero_tolerance_is_exact_equality() {
        let exact = Tolerance {
            atol: 0.0,
            rtol: 0.0,
        };
        assert_eq!(exact.usage(1.0, 1.0), 0.0);
        assert_eq!(exact.usage(1.0 + f64::EPSILON, 1.0), f64::INFINITY);
        assert_eq!(exact.usage(0.0, -0.0), 0.0, "IEEE equality: +0 == -0");
    }

    #[test]
    fn compare_counts_mismatches_and_flags_nonfinite() {
        let a = [1.0, 2.0 + 1e-3, f64::NAN, 4.0];
        let e = [1.0, 2.0, 3.0, 4.0];
        let s = compare(&a, &e, OLD);
        assert_eq!(s.mismatched, 2);
        assert_eq!(s.nonfinite, 1);
        assert_eq!(s.usage, f64::INFINITY);
        assert_eq!(s.worst_index, 2);
        assert_eq!(s.max_abs_diff, f64::INFINITY);
        assert_eq!(s.max_abs_expected, 4.0);
    }
    #[test]
    fn usages_only_equal_the_full_statistics_without_counts_on_every_isa() {
        use crate::kernels::isa::Level;
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let t1 = OLD;
        let t2 = Tolerance {
            atol: 1e-5,
            rtol: 1.3e-6,
        };
        for n in [0, 1, 7, 8, 9, 63, 1000] {
            let e: Vec<f64> = (0..n).map(|_| next()).collect();
            // Differences around the allowances: some pass, some fail (as a mutant's do).
            let a: Vec<f64> = e.iter().map(|&y| y + next() * 4e-5).collect();
            for level in [Level::Portable, Level::Avx2, Level::Avx512] {
                let Some(isa) = Isa::new(level) else { continue };
                let full = pair_stats_finite_on(isa, &a, &e, t1, t2);
                let want = full.map(|(per, mags)| (per.map(|(u, _, _)| (u, 0, 0)), mags));
                assert_eq!(
                    pair_usages_finite_on(isa, &a, &e, t1, t2),
                    want,
                    "{n} {level:?}"
                );
            }
        }
    }
}
