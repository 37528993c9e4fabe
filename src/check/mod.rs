//! Tolerances, usage, and torch's mismatch report.
//!
//! **Usage** of one element is `|actual - expected| / (atol + rtol·|expected|)`, the criterion
//! of `torch.isclose` and numpy's `assert_allclose`, evaluated in f64 (both operands are
//! exactly representable there). The usage of a tensor is the maximum over its elements;
//! above 1 (100 %) the check fails. Special cases, in this order:
//! - `actual == expected` (including equal infinities) has usage 0, also when atol = rtol = 0;
//! - a NaN on either side, an infinity that differs, or any difference where the allowance is
//!   0 (atol = rtol = 0, or atol = 0 and expected = 0) has usage +∞ and counts as non-finite
//!   when a NaN or infinity is involved. Nothing is hidden: +∞ is written `inf`.

use std::fmt::Write as _;

#[cfg(target_arch = "x86_64")]
pub mod comparison;
mod pair_avx512;
#[cfg(target_arch = "x86_64")]
pub use pair_avx512::max_ratio as max_ratio_avx512;

/// An (atol, rtol) pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

impl Tolerance {
    /// torch's fp32 default (`torch.testing.assert_close`): atol 1e-5, rtol 1.3e-6.
    pub const TORCH_FP32: Tolerance = Tolerance {
        atol: 1e-5,
        rtol: 1.3e-6,
    };

    /// `atol + rtol·|expected|`, in f64.
    #[inline]
    pub fn allowed(&self, expected: f64) -> f64 {
        self.atol + self.rtol * expected.abs()
    }

    /// Usage of one element; see the module doc for the special cases.
    #[inline]
    pub fn usage(&self, actual: f64, expected: f64) -> f64 {
        if actual == expected {
            return 0.0;
        }
        let diff = (actual - expected).abs();
        if !diff.is_finite() {
            // A NaN, or an infinity on one side only (also when expected is infinite and the
            // allowance with it: inf/inf must not become NaN).
            return f64::INFINITY;
        }
        let allowed = self.allowed(expected);
        if allowed == 0.0 {
            return f64::INFINITY;
        }
        diff / allowed
    }
}

/// Where in a run a value was observed: an optimizer step, and for checks made at every
/// gradient-accumulation micro-step, the micro-step within it. Displayed `2` or `2.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StepLabel {
    /// Optimizer step, from 0 (or the 1-based step for scenarios whose test counts from 1).
    pub step: u32,
    /// Micro-step within the step, for per-micro-step checks.
    pub micro: Option<u32>,
}

impl StepLabel {
    /// A plain step.
    pub fn step(step: u32) -> Self {
        Self { step, micro: None }
    }
    /// A micro-step of a step.
    pub fn micro(step: u32, micro: u32) -> Self {
        Self {
            step,
            micro: Some(micro),
        }
    }
}

impl std::fmt::Display for StepLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.micro {
            None => write!(f, "{}", self.step),
            Some(m) => write!(f, "{}.{}", self.step, m),
        }
    }
}

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
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { usage_stats_avx2(actual, expected, tol) };
        }
    }
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
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { magnitude_stats_avx2(actual, expected) };
        }
    }
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
    if !fusable(t1, t2) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && pair_avx512::applies(actual, expected, t1, t2)
        {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { pair_avx512::pair_stats(actual, expected, t1, t2) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { pair_stats_avx2(actual, expected, t1, t2) };
        }
    }
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
    #[cfg(target_arch = "x86_64")]
    {
        if fusable(t1, t2)
            && std::arch::is_x86_feature_detected!("avx512f")
            && pair_avx512::applies(actual, expected, t1, t2)
        {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { pair_avx512::pair_usages(actual, expected, t1, t2) };
        }
    }
    pair_stats_finite(actual, expected, t1, t2)
        .map(|(per, mags)| (per.map(|(u, _, _)| (u, 0, 0)), mags))
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
    use crate::stats::frontier::{scan_anchors, two_pass_is_vectorized};
    #[cfg(target_arch = "x86_64")]
    {
        if fusable(t1, t2)
            && two_pass_is_vectorized()
            && !scan.is_infinite()
            && pair_avx512::applies(actual, expected, t1, t2)
        {
            let start = *scan;
            // SAFETY: the CPU supports AVX-512F (two_pass_is_vectorized), and the scan is
            // not infinite (BlockScan::new's condition).
            let (stats, d_finite) = unsafe {
                let mut blocks = crate::stats::frontier::BlockScan::new(scan);
                let r = pair_avx512::pair_stats_scan(actual, expected, t1, t2, &mut blocks);
                blocks.finish();
                r
            };
            if !d_finite {
                *scan = start;
                scan_anchors(actual, expected, scan);
            }
            return stats;
        }
    }
    let stats = pair_stats_finite(actual, expected, t1, t2);
    scan_anchors(actual, expected, scan);
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
    #[cfg(target_arch = "x86_64")]
    {
        if fusable(t1, t2)
            && std::arch::is_x86_feature_detected!("avx512f")
            && pair_avx512::applies(a1, expected, t1, t2)
            && pair_avx512::applies(a2, expected, t1, t2)
        {
            // SAFETY: the CPU supports AVX-512F, and the kernel applies to both (checked
            // just above).
            return unsafe { pair_avx512::pair_stats2(a1, a2, expected, t1, t2) };
        }
    }
    [
        pair_stats_finite(a1, expected, t1, t2),
        pair_stats_finite(a2, expected, t1, t2),
    ]
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

/// Formats a float the way Python's `repr(float)` does, which is how torch's messages print
/// numbers: the shortest string that round-trips, in fixed notation when the decimal exponent
/// is in `[-4, 16)` and in scientific notation with a signed two-digit exponent otherwise
/// (`1e-06`, `1.1173542588949203e-06`, `0.0001`, `1e+16`, `inf`, `nan`).
pub fn py_repr(x: f64) -> String {
    let mut out = Vec::with_capacity(24);
    py_repr_into(x, &mut out);
    String::from_utf8(out).expect("py_repr writes ASCII")
}

/// [`py_repr`] appended to `out`, without allocating (the digits come from a stack buffer).
pub fn py_repr_into(x: f64, out: &mut Vec<u8>) {
    if x.is_nan() {
        return out.extend_from_slice(b"nan");
    }
    if x.is_infinite() {
        return out.extend_from_slice(if x > 0.0 { b"inf" } else { b"-inf" });
    }
    if x == 0.0 {
        return out.extend_from_slice(if x.is_sign_negative() {
            b"-0.0"
        } else {
            b"0.0"
        });
    }
    let mut digits = [0u8; 17];
    let (nd, exp) = shortest_digits(x, &mut digits);
    let digits = &digits[..nd];
    if x < 0.0 {
        out.push(b'-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
            out.extend_from_slice(digits);
        } else {
            let point = exp as usize + 1;
            if digits.len() <= point {
                out.extend_from_slice(digits);
                out.extend(std::iter::repeat_n(b'0', point - digits.len()));
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..point]);
                out.push(b'.');
                out.extend_from_slice(&digits[point..]);
            }
        }
    } else {
        out.push(digits[0]);
        if nd > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let e = exp.unsigned_abs();
        if e >= 100 {
            out.push(b'0' + (e / 100) as u8);
        }
        out.push(b'0' + (e / 10 % 10) as u8);
        out.push(b'0' + (e % 10) as u8);
    }
}

/// The shortest decimal digits that round-trip to the finite, nonzero `x` (the closest such
/// string to x), with no leading or trailing zeros, into `digits`; returns their count n and
/// the decimal exponent E, so that |x| ≈ 0.d₁d₂…dₙ × 10^(E+1). The digits come from the `ryu`
/// crate (Adams, "Ryū: fast float-to-string conversion", PLDI 2018), whose output
/// ("1.5e-7", "0.0001", "123456.0", "1e16") is read back into digits and an exponent.
/// Where two shortest strings are equally close to x (an exact decimal tie, such as 2⁻²⁵ =
/// 2.98023223876953125e-8), ryu takes the even one, as Python's `repr` does (David Gay's
/// dtoa, mode 0), and Rust's `{:e}` takes the upper one: `tests/py_repr_fixture.rs` checks
/// the strings against CPython's on random values and 200 such ties.
fn shortest_digits(x: f64, digits: &mut [u8; 17]) -> (usize, i32) {
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(x.abs()).as_bytes();
    let (mut nd, mut int_digits, mut point) = (0usize, 0i32, false);
    let mut rest: &[u8] = &[];
    for (i, &c) in text.iter().enumerate() {
        match c {
            b'.' => point = true,
            b'e' | b'E' => {
                rest = &text[i + 1..];
                break;
            }
            b'0' if nd == 0 => {
                // A leading zero: after the point it moves the exponent down.
                if point {
                    int_digits -= 1;
                }
            }
            _ => {
                digits[nd] = c;
                nd += 1;
                if !point {
                    int_digits += 1;
                }
            }
        }
    }
    while nd > 1 && digits[nd - 1] == b'0' {
        nd -= 1;
    }
    let (neg, exp_digits) = match rest.split_first() {
        Some((b'-', r)) => (true, r),
        _ => (false, rest),
    };
    let e10 = exp_digits
        .iter()
        .fold(0i32, |acc, &c| acc * 10 + i32::from(c - b'0'));
    (nd, int_digits - 1 + if neg { -e10 } else { e10 })
}

/// Formats a flat index as torch does in its messages: the bare integer for a 1-d tensor,
/// a tuple `(1, 1, 45)` for more dimensions, `()` for a 0-d tensor.
pub fn format_index(flat: usize, shape: &[usize]) -> String {
    match shape.len() {
        0 => "()".into(),
        1 => flat.to_string(),
        _ => {
            let mut idx = vec![0usize; shape.len()];
            let mut rest = flat;
            for (d, &n) in shape.iter().enumerate().rev() {
                idx[d] = rest % n.max(1);
                rest /= n.max(1);
            }
            let parts: Vec<String> = idx.iter().map(|i| i.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// torch's `assert_close` failure message for two fp32 tensors, as
/// `torch.testing._comparison.make_tensor_mismatch_msg` builds it:
/// the mismatch decision is the usage criterion above (> 1); the differences are computed as
/// torch computes them for float32 tensors, `|actual - expected|` rounded to f32 and
/// `abs_diff / |expected|` in f32, over the mismatched elements only, and printed with
/// Python's float repr. Returns `None` when nothing mismatches.
///
/// `actual`/`expected` are f64 copies of f32 tensors when `f32_inputs` is true; when the
/// expected side is the float64 ground truth, the differences are computed in f64 instead.
pub fn torch_mismatch_message(
    actual: &[f64],
    expected: &[f64],
    shape: &[usize],
    tol: Tolerance,
    f32_inputs: bool,
) -> Option<String> {
    let n = actual.len();
    let mut mismatched = 0usize;
    let (mut max_abs, mut max_abs_i) = (0.0f64, 0usize);
    let (mut max_rel, mut max_rel_i) = (0.0f64, 0usize);
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        if tol.usage(a, e) <= 1.0 {
            continue;
        }
        mismatched += 1;
        let (abs, rel) = if f32_inputs {
            let abs = ((a as f32) - (e as f32)).abs();
            (abs as f64, (abs / (e as f32).abs()) as f64)
        } else {
            let abs = (a - e).abs();
            (abs, abs / e.abs())
        };
        // torch.max propagates NaN: a NaN difference wins and is reported.
        if abs > max_abs || (abs.is_nan() && !max_abs.is_nan()) {
            max_abs = abs;
            max_abs_i = i;
        }
        if rel > max_rel || (rel.is_nan() && !max_rel.is_nan()) {
            max_rel = rel;
            max_rel_i = i;
        }
    }
    if mismatched == 0 {
        return None;
    }
    let equality = tol.atol == 0.0 && tol.rtol == 0.0;
    let mut msg = String::new();
    let _ = writeln!(
        msg,
        "Tensor-likes are not {}!\n",
        if equality { "equal" } else { "close" }
    );
    let _ = writeln!(
        msg,
        "Mismatched elements: {} / {} ({})",
        mismatched,
        n,
        python_percent_1(mismatched as f64 / n as f64)
    );
    let allowed = |t: f64| {
        if equality {
            String::new()
        } else {
            format!(" (up to {} allowed)", py_repr(t))
        }
    };
    let _ = writeln!(
        msg,
        "Greatest absolute difference: {} at index {}{}",
        py_repr(max_abs),
        format_index(max_abs_i, shape),
        allowed(tol.atol)
    );
    let _ = write!(
        msg,
        "Greatest relative difference: {} at index {}{}",
        py_repr(max_rel),
        format_index(max_rel_i, shape),
        allowed(tol.rtol)
    );
    Some(msg)
}

/// Python's `f"{x:.1%}"`: x·100 rounded to one decimal (round-half-even on the exact binary
/// value, which Rust's formatting also does), followed by `%`.
fn python_percent_1(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
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
    fn fast_stats_agree_with_the_reference_definition() {
        let a = [1.0, 2.0 + 1e-3, f64::NAN, 4.0, f64::INFINITY, 0.0, -3.0];
        let e = [1.0, 2.0, 3.0, 4.0, f64::INFINITY, 1e-7, f64::NEG_INFINITY];
        for tol in [
            OLD,
            Tolerance::TORCH_FP32,
            Tolerance {
                atol: 0.0,
                rtol: 0.0,
            },
        ] {
            let s = compare(&a, &e, tol);
            let (u, m, nf) = usage_stats(&a, &e, tol);
            assert_eq!((u, m, nf), (s.usage, s.mismatched, s.nonfinite), "{tol:?}");
            assert_eq!(usage_stats_impl(&a, &e, tol), (u, m, nf), "portable path");
            assert_eq!(
                magnitude_stats(&a, &e),
                (s.max_abs_diff, s.max_abs_expected)
            );
            assert_eq!(
                magnitude_stats_impl(&a, &e),
                (s.max_abs_diff, s.max_abs_expected)
            );
        }
    }

    #[test]
    fn fast_path_agrees_with_the_definition_on_finite_data() {
        // Finite data takes the division-only path; compare element by element with the
        // reference definition.
        let e: Vec<f64> = (0..103).map(|i| ((i as f64) * 0.37).sin() * 10.0).collect();
        let a: Vec<f64> = e
            .iter()
            .enumerate()
            .map(|(i, v)| v + (i % 7) as f64 * 3e-6)
            .collect();
        for tol in [
            OLD,
            Tolerance::TORCH_FP32,
            Tolerance {
                atol: 1e-9,
                rtol: 0.0,
            },
        ] {
            let s = compare(&a, &e, tol);
            assert_eq!(
                usage_stats(&a, &e, tol),
                (s.usage, s.mismatched, s.nonfinite),
                "{tol:?}"
            );
            assert_eq!(
                magnitude_stats(&a, &e),
                (s.max_abs_diff, s.max_abs_expected)
            );
        }
        for len in [0, 1, 5, 103] {
            let (a, e) = (&a[..len], &e[..len]);
            let (pair, mags) = pair_stats_finite(a, e, OLD, Tolerance::TORCH_FP32).unwrap();
            assert_eq!(
                pair_stats_impl(a, e, OLD, Tolerance::TORCH_FP32).unwrap(),
                (pair, mags),
                "portable path, len {len}"
            );
            assert_eq!(pair[0], usage_stats(a, e, OLD), "len {len}");
            assert_eq!(
                pair[1],
                usage_stats(a, e, Tolerance::TORCH_FP32),
                "len {len}"
            );
            assert_eq!(mags, magnitude_stats(a, e), "len {len}");
        }
        assert!(pair_stats_finite(&[f64::NAN], &[1.0], OLD, OLD).is_none());
        assert!(pair_stats_finite(
            &[1.0],
            &[1.0],
            OLD,
            Tolerance {
                atol: 0.0,
                rtol: 1e-6
            }
        )
        .is_none());
    }

    /// The earlier, allocating `py_repr` (string splitting of `{:e}`): the reference the
    /// allocation-free one is checked against.
    fn py_repr_reference(x: f64) -> String {
        if x.is_nan() {
            return "nan".into();
        }
        if x.is_infinite() {
            return if x > 0.0 { "inf".into() } else { "-inf".into() };
        }
        if x == 0.0 {
            return if x.is_sign_negative() {
                "-0.0".into()
            } else {
                "0.0".into()
            };
        }
        let sci = format!("{:e}", x);
        let (mantissa, exp) = sci.split_once('e').unwrap();
        let exp: i32 = exp.parse().unwrap();
        if (-4..16).contains(&exp) {
            let neg = mantissa.starts_with('-');
            let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
            let mut out = String::new();
            if neg {
                out.push('-');
            }
            if exp < 0 {
                out.push_str("0.");
                out.push_str(&"0".repeat((-exp - 1) as usize));
                out.push_str(&digits);
            } else {
                let point = exp as usize + 1;
                if digits.len() <= point {
                    out.push_str(&digits);
                    out.push_str(&"0".repeat(point - digits.len()));
                    out.push_str(".0");
                } else {
                    out.push_str(&digits[..point]);
                    out.push('.');
                    out.push_str(&digits[point..]);
                }
            }
            out
        } else {
            let sign = if exp < 0 { '-' } else { '+' };
            format!("{mantissa}e{sign}{:02}", exp.abs())
        }
    }

    #[test]
    fn py_repr_into_matches_the_reference_on_random_bit_patterns() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut ties = 0;
        for i in 0..200_000u64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Raw bit patterns, and values near every decimal exponent boundary.
            let x = if i % 2 == 0 {
                f64::from_bits(s)
            } else {
                (s >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((s % 41) as i32 - 20)
            };
            let (ours, reference) = (py_repr(x), py_repr_reference(x));
            if ours != reference {
                // Core's `{:e}` and ryu differ only where two shortest strings are equally
                // close to x (core rounds such ties up, Python and ryu to even; the fixture
                // test `tests/py_repr_fixture.rs` pins Python's choice): both must round-trip
                // and be equally short.
                assert_eq!(ours.parse::<f64>().unwrap().to_bits(), x.to_bits(), "{x:e}");
                assert_eq!(ours.len(), reference.len(), "{x:e}");
                ties += 1;
            }
        }
        // Ties come from the scaled half of the draws (multiples of 2⁻⁵³ times a power of
        // ten); which string is Python's at a tie is checked by tests/py_repr_fixture.rs, not
        // here. A difference on more than a small fraction of the draws would not be a tie.
        assert!(ties < 1000, "{ties} differences from core's digits");
        for x in [
            1e16,
            9999999999999998.0,
            1e-4,
            9.999999999999999e-5,
            1e-5,
            5e-324,
            f64::MAX,
        ] {
            assert_eq!(py_repr(x), py_repr_reference(x), "{x:e}");
        }
    }

    #[test]
    fn py_repr_matches_python_for_known_values() {
        // Expected strings are what CPython 3 prints for repr() of these doubles.
        assert_eq!(py_repr(1e-6), "1e-06");
        assert_eq!(py_repr(1e-5), "1e-05");
        assert_eq!(py_repr(1.3e-6), "1.3e-06");
        assert_eq!(py_repr(1.1173542588949203e-06), "1.1173542588949203e-06");
        assert_eq!(py_repr(0.0001), "0.0001");
        assert_eq!(py_repr(0.00012), "0.00012");
        assert_eq!(py_repr(0.5), "0.5");
        assert_eq!(py_repr(13.75), "13.75");
        assert_eq!(py_repr(100.0), "100.0");
        assert_eq!(py_repr(1e16), "1e+16");
        assert_eq!(py_repr(123456789012345.0), "123456789012345.0");
        assert_eq!(py_repr(-2.5e-7), "-2.5e-07");
        assert_eq!(py_repr(f64::INFINITY), "inf");
        assert_eq!(py_repr(0.0), "0.0");
        // 2⁻²⁵ and 5·2⁻²³ (one fp32 ulp at 0.25 and at 5.0, common greatest differences)
        // are exact decimal ties at the 17th digit: Python rounds them half to even, where
        // Rust's `{:e}` rounds up (…313e-08, …063e-07).
        assert_eq!(py_repr(2f64.powi(-25)), "2.9802322387695312e-08");
        assert_eq!(py_repr(5.0 * 2f64.powi(-23)), "5.960464477539062e-07");
    }

    #[test]
    fn index_formatting_follows_torch() {
        assert_eq!(format_index(335 + 67 + 45, &[2, 5, 67]), "(1, 1, 45)");
        assert_eq!(format_index(45, &[670]), "45");
        assert_eq!(format_index(0, &[]), "()");
    }

    #[test]
    fn mismatch_message_has_torch_layout() {
        let mut e = vec![0.25f64; 670];
        let mut a = e.clone();
        // One element off by 2^-20 (about 9.5e-7) on an expected value of 2^-10: the
        // allowance is 1e-6 + 1e-5·2^-10 ≈ 1.0098e-6, so the element passes; make it fail
        // with 2^-19 instead.
        let idx = 335 + 67 + 45;
        e[idx] = 2f64.powi(-10);
        a[idx] = 2f64.powi(-10) + 2f64.powi(-19);
        let msg = torch_mismatch_message(&a, &e, &[2, 5, 67], OLD, true).unwrap();
        let expected_abs = py_repr(2f64.powi(-19));
        let expected_rel = py_repr(2f64.powi(-9));
        assert_eq!(
            msg,
            format!(
                "Tensor-likes are not close!\n\n\
                 Mismatched elements: 1 / 670 (0.1%)\n\
                 Greatest absolute difference: {expected_abs} at index (1, 1, 45) (up to 1e-06 allowed)\n\
                 Greatest relative difference: {expected_rel} at index (1, 1, 45) (up to 1e-05 allowed)"
            )
        );
        assert!(torch_mismatch_message(&e, &e, &[670], OLD, true).is_none());
    }

    #[test]
    fn equality_message_says_equal_and_omits_allowance() {
        let exact = Tolerance {
            atol: 0.0,
            rtol: 0.0,
        };
        let msg = torch_mismatch_message(&[1.0, 2.5], &[1.0, 2.0], &[2], exact, false).unwrap();
        assert!(msg.starts_with("Tensor-likes are not equal!"));
        assert!(msg.contains("Mismatched elements: 1 / 2 (50.0%)"));
        assert!(msg.contains("Greatest absolute difference: 0.5 at index 1\n"));
        assert!(!msg.contains("allowed"));
    }
}
