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
//! other lanes are not screened. A lane with d = 0, or d < d* and (e = 0 or a screened
//! ratio), is quiet: it can only set the e = 0 flag. The other lanes of a block are offered
//! one by one, in order, to [`AnchorScan::add`], the definition (in a T1 sweep about 5 % of
//! blocks have one). A block is first tested as a whole with one sign test, d − τ < 0 (d = 0)
//! or both d − d* < 0 and r̃ − fl(r₀·(1 − 2⁻¹²)) < 0, which only quiet lanes pass; the
//! per-lane comparisons run only for a block where some lane fails it.

use super::simd::{keep_pairs_portable, scan_anchors_portable};
use super::stream::{BELOW_LEN, BELOW_SHIFT};
use super::{AnchorScan, Anchors, HULL_MARGIN};
use crate::kernels::avx512::{lanes, load_pair};
use std::arch::x86_64::*;

/// 2⁻¹⁰⁰⁰, the smallest e (and best ratio) the screen's error bound is used for.
const TINY: f64 = f64::from_bits((1023 - 1000) << 52);
/// 2¹⁰⁰⁰, the largest e the screen's error bound is used for.
const HUGE: f64 = f64::from_bits((1023 + 1000) << 52);
/// 1 − 2⁻¹²: the screen's relative margin.
const SHRINK: f64 = 1.0 - 1.0 / 4096.0;

/// The screen's bound on ratios for the current best ratio (module doc), exclusive: a
/// screened ratio passes when it is below fl(r₀·(1 − 2⁻¹²)); −1 when there is no best, when
/// it is below 2⁻¹⁰⁰⁰, or when it is +∞ (a d/e that overflowed): then no ratio ≥ 0 passes.
/// (A bound of +∞ would make the screen's difference +∞ − +∞ = NaN for a lane whose e is
/// out of range, e = 0 included, and let that lane pass as quiet before its e = 0 flag was
/// taken.)
fn ratio_limit(scan: &AnchorScan) -> f64 {
    match scan.best {
        Some((_, r)) if (TINY..f64::INFINITY).contains(&r) => r * SHRINK,
        _ => -1.0,
    }
}

/// The points of the block of eight pairs from `i` (`i < n`, both slices at least `n`
/// long; a partial block's missing lanes are zeros, points with d = 0): d = |x − y| and
/// e = |y|, [`super::pair_point`] for finite values, and `big` raised to the largest bit
/// pattern of d, and of |x| too when `WITH_X`. Non-finite inputs show up in d's above
/// f64::MAX (a NaN on either side, or an infinity on one, makes x − y NaN or infinite), and
/// so does a difference that overflows; |x| bounds |y| ≤ |x| + d as well, for the keep
/// pass's bound below f64::MAX.
///
/// # Safety
/// The CPU must support AVX-512F; `i < n` and both slices hold at least `n` elements.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn block_points<const WITH_X: bool>(
    actual: &[f64],
    expected: &[f64],
    i: usize,
    n: usize,
    big: &mut __m512i,
) -> (__m512d, __m512d) {
    // SAFETY: as this function's own contract.
    let (x, y) = unsafe { load_pair(actual, expected, i, n) };
    let d = _mm512_abs_pd(_mm512_sub_pd(x, y));
    let e = _mm512_abs_pd(y);
    *big = _mm512_max_epi64(*big, _mm512_castpd_si512(d));
    if WITH_X {
        *big = _mm512_max_epi64(*big, _mm512_castpd_si512(_mm512_abs_pd(x)));
    }
    (d, e)
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
    let mut big = _mm512_setzero_si512();
    let mut blocks = BlockScan::new(scan);
    let mut i = 0;
    while i < n {
        // SAFETY: i < n, within both slices. A partial last block has zeros in its missing
        // lanes: points with d = 0, which change nothing.
        let (d, e) = block_points::<false>(actual, expected, i, n, &mut big);
        blocks.block(d, e);
        i += 8;
    }
    blocks.finish();
    _mm512_reduce_max_epi64(big) <= f64::MAX.to_bits() as i64
}

/// The anchor scan of [`scan_anchors`] one block of eight points at a time, in order, for a
/// caller that computes the points of finite pairs itself (d = |x − y|, e = |y|, zeros in the
/// missing lanes of a partial block) for a pass of its own: the usage statistics of the
/// asserted comparison take the scan in the same pass (`check::pair_stats_scan`). The
/// caller keeps the scan only when every difference was finite (its largest bit pattern at
/// most f64::MAX's), and otherwise redoes it with [`scan_anchors`] from the state it began
/// with; `scan` must not be infinite at the start.
pub struct BlockScan<'s> {
    scan: &'s mut AnchorScan,
    psd: __m512d,
    lim: __m512d,
    ze: __mmask8,
}

impl<'s> BlockScan<'s> {
    /// Starts on `scan` (its bounds as they are).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn new(scan: &'s mut AnchorScan) -> Self {
        debug_assert!(!scan.infinite);
        Self {
            psd: _mm512_set1_pd(scan.ps.map_or(0.0, |p| p.0)),
            lim: _mm512_set1_pd(ratio_limit(scan)),
            ze: 0,
            scan,
        }
    }

    /// Offers the block of points (d, e) (module doc).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn block(&mut self, d: __m512d, e: __m512d) {
        let zero = _mm512_setzero_pd();
        let tiny_bits = _mm512_set1_epi64(TINY.to_bits() as i64);
        let span = _mm512_set1_epi64((HUGE.to_bits() - TINY.to_bits()) as i64);
        let tau = _mm512_set1_pd(f64::from_bits(1));
        let inf = _mm512_set1_pd(f64::INFINITY);
        let sign = _mm512_set1_epi64(i64::MIN);
        let in_range =
            _mm512_cmplt_epu64_mask(_mm512_sub_epi64(_mm512_castpd_si512(e), tiny_bits), span);
        // The screened ratio where e is in range, +∞ elsewhere (never screened).
        let r = _mm512_mask_mul_pd(inf, in_range, d, _mm512_rcp14_pd(e));
        // The common block first, with one test: every lane has d = 0 (d − τ < 0, τ the
        // smallest subnormal), or d < d* and a screened ratio below the bound (both
        // differences negative; a rounded difference has the sign of the exact one). Such
        // lanes are quiet (below), and no lane with d > 0 and e = 0 passes (its ratio is
        // +∞), so the block changes nothing.
        let fast = _mm512_min_pd(
            _mm512_sub_pd(d, tau),
            _mm512_max_pd(_mm512_sub_pd(r, self.lim), _mm512_sub_pd(d, self.psd)),
        );
        if _mm512_test_epi64_mask(_mm512_castpd_si512(fast), sign) == 0xff {
            return;
        }
        let valid = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, zero);
        let e_zero = _mm512_mask_cmp_pd_mask::<_CMP_EQ_OQ>(valid, e, zero);
        self.ze |= e_zero;
        let below_ps = _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(valid, d, self.psd);
        let ratio_ok = _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(in_range, r, self.lim);
        let quiet = !valid | (below_ps & (e_zero | ratio_ok));
        // Only the lanes that are not quiet are offered, in lane order: a quiet lane leaves
        // the scan as it is (its only effect, the e = 0 flag, is in `ze`), and stays quiet
        // after a lane before it raised p* or the best ratio (both bounds only grow). Before
        // the first point with d > 0, p* is unset (d* = 0), so every such lane is offered.
        if quiet != 0xff {
            // SAFETY: AVX-512F, as this function's own.
            let (ds, es) = unsafe { (lanes(d), lanes(e)) };
            let mut todo = !quiet;
            while todo != 0 {
                let l = todo.trailing_zeros() as usize;
                self.scan.add((ds[l], es[l]));
                todo &= todo - 1;
            }
            self.psd = _mm512_set1_pd(self.scan.ps.map_or(0.0, |p| p.0));
            self.lim = _mm512_set1_pd(ratio_limit(self.scan));
        }
    }

    /// Ends the pass: the e = 0 flag of the quiet lanes into the scan.
    pub fn finish(self) {
        self.scan.zero_e |= self.ze != 0;
    }
}

/// [`keep_pairs_portable`], vectorized: the keep test of [`Anchors::keep`] eight lanes at a
/// time on points made from the pairs (module doc), without branches inside a block.
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
        Some(an) if bounded(an) => keep_finite(actual, expected, an, pts),
        // No anchors: every point with d > 0 is kept, and a check whose every pair is
        // equal (a sharded gradient that matches its reference bit for bit) has none.
        None => all_equal(actual, expected),
        _ => false,
    };
    if !done {
        pts.truncate(start);
        keep_pairs_portable(actual, expected, anchors, pts);
    }
}

/// Whether x == y for every pair of `actual` and `expected` (over the shorter): then
/// every point has d = 0 ([`super::pair_point`]: d > 0 exactly when x == y fails, NaN
/// included) and [`keep_pairs_portable`] keeps none.
#[target_feature(enable = "avx512f")]
unsafe fn all_equal(actual: &[f64], expected: &[f64]) -> bool {
    let n = actual.len().min(expected.len());
    let mut differ = 0u8;
    let mut i = 0;
    while i < n {
        // SAFETY: i < n, within both slices; missing lanes of a short block hold 0 in both.
        let (a, e) = load_pair(actual, expected, i, n);
        differ |= _mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(a, e);
        i += 8;
    }
    differ == 0
}

/// 2⁵⁰⁰: [`keep_finite`] takes values below it (their products and differences stay finite).
const BOUND: f64 = f64::from_bits((1023 + 500) << 52);

/// 2⁻²⁰⁰ and 2²⁰⁰: the range of the anchors' coordinates and of a lane's e in which
/// [`keep_finite`]'s screen is used (its error bounds hold there; doc of [`keep_finite`]).
const SCREEN_LO: f64 = f64::from_bits((1023 - 200) << 52);
const SCREEN_HI: f64 = f64::from_bits((1023 + 200) << 52);
/// 1 − 2⁻⁴⁰, the screen's factor c: 256 times further below the hull than the keep test's
/// own margin 2⁻⁴⁸, far more than the screen's few roundings.
const SCREEN_SHRINK: f64 = 1.0 - 1.0 / 1_099_511_627_776.0;

/// Whether both anchors' coordinates are below [`BOUND`].
fn bounded(an: &Anchors) -> bool {
    [an.ps.0, an.ps.1, an.p0.0, an.p0.1]
        .iter()
        .all(|&v| v < BOUND)
}

/// The vector keep pass over pairs whose values and differences are below [`BOUND`] in
/// magnitude; false when some is not (the points appended are then to be discarded).
///
/// **Few comparisons.** Each vector comparison into a mask costs more than an arithmetic
/// operation here, and the test has fourteen, so they are folded into two with exact
/// identities. For finite x and y, x ≤ y ⟺ fl(x − y) ≤ 0 (a rounded difference has the
/// sign of the exact one and is 0 only for x = y, subnormals included); min(x, y) ≥ 0 ⟺
/// both are; max(x, y) ≤ 0 ⟺ both are; for a float m, m > 0 ⟺ fl(τ − m) ≤ 0 with τ the
/// smallest subnormal. With every value below 2⁵⁰⁰ no product or difference overflows,
/// except the chord height h on lanes that are not between the anchors (where the chord
/// test does not apply; it may be ±∞ or NaN there), which is why its term is the first
/// operand of a `max` (`vmaxpd` returns the second operand when either is NaN). A point is
/// kept iff it is an anchor (the larger of its two coordinate distances to p* or to p₀ is
/// 0) or not dropped, where dropped ⟺ min(d, −min(e − e*, d* − d), hull) ≤ 0, that is
/// d ≤ 0, or dominated (e ≥ e* and d ≤ d*), or (with the hull tests)
/// hull = min(max(d − fl(km·d₀), fl(d·e₀) − fl(km·fl(d₀·e))), max(d − fl(km·h), τ − m)) ≤ 0:
/// below p₀ (both of its conditions), or between the anchors (m = the least of e − e₀,
/// e* − e, d − d₀, d* − d is > 0) and below the chord (d ≤ fl(km·h), h computed as
/// [`super::below_chord`] computes it). These are [`Anchors::keep`]'s conditions with its
/// operations; the tests check the kept points against the portable definition.
///
/// The kept lanes are appended with one compress per coordinate and two stores, on every
/// block the screen below lets through (a T1 sweep keeps a point in about 17 % of blocks, so
/// a branch on the kept count alone mispredicts).
///
/// **The screen.** Most blocks keep nothing, and the region whose points are dropped is,
/// up to the margins, the one below the polyline origin → p₀ → p* → (∞, d*), which is
/// concave, so the minimum of its three lines. A block is skipped, before the fourteen
/// comparisons, when every lane has e in [2⁻²⁰⁰, 2²⁰⁰] and either
/// (1) d < c·min(fl(r₀·e), d₀), with r₀ = fl(d₀/e₀), or
/// (2) d₀ < d < c·min(h̃, d*), with h̃ = fl(d₀ + (d* − d₀)·fl(fl(e − e₀)·fl(1/(e* − e₀))))
/// (one fused rounding),
/// c = 1 − 2⁻⁴⁰, each comparison exact (the sign of one fused d − c·x, or of d₀ − d), and
/// only when the hull tests apply, all four anchor coordinates lie in [2⁻²⁰⁰, 2²⁰⁰], e* > e₀
/// and d* > d₀. Every such lane is dropped by the test itself, with u = 2⁻⁵³:
/// - (1): d < c·d₀ ≤ km·d₀ gives fl(d) ≤ fl(km·d₀); and d·e₀ < c·d₀·e·(1 + u)² (r₀ and
///   r₀·e each rounded once), so fl(d·e₀) ≤ c·(1 + u)³·d₀·e < (1 − u)²·km·d₀·e ≤
///   fl(km·fl(d₀·e)), as c·(1 + u)³ < km·(1 − u)². In range, d₀·e ≥ 2⁻⁴⁰⁰ and r₀·e is
///   normal, so no product underflows but fl(d·e₀) for a tiny d, whose absolute error
///   2⁻¹⁰⁷⁵ is far below the 2⁻⁴⁰·d₀·e of room. So p is below p₀.
/// - (2): if e ≤ e₀ then h̃ ≤ d₀ < d, which (2) excludes; if e ≥ e* then d < d* makes p
///   dominated. Otherwise p is between the anchors in both coordinates, and h̃ ≤ (1 + 6u)·h
///   for the test's own chord height h (every term positive: t̃ ≤ (1 + 3u)·t, one more
///   rounding for the sum, against at least (1 − u)² below h on the test's side), so
///   d < c·(1 + 6u)·h ≤ fl(km·h): below the chord.
/// - Neither kind of lane is an anchor (d < d₀ ≤ d*, or d₀ < d < d*), and d = 0 lanes fall
///   under (1). A lane out of range, or a zero lane of a partial block, is never screened.
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
    let tau = _mm512_set1_pd(f64::from_bits(1));
    let (psd, pse) = (_mm512_set1_pd(ps.0), _mm512_set1_pd(ps.1));
    let (p0d, p0e) = (_mm512_set1_pd(p0.0), _mm512_set1_pd(p0.1));
    let vkm = _mm512_set1_pd(km);
    let km_p0d = _mm512_set1_pd(km * p0.0);
    let span_e = _mm512_set1_pd(ps.1 - p0.1);
    let span_d = _mm512_set1_pd(ps.0 - p0.0);
    let hull_tests = !an.zero_e;
    // Interleaving indices: (d₀, e₀, d₁, e₁, …) from the compressed d and e lanes.
    let lo_idx = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
    let hi_idx = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
    // The keep test of one block, and the append of its kept lanes: room for a whole
    // block, then both halves of the interleaved pairs stored and the length advanced by
    // the count.
    let keep_block = |d: __m512d, e: __m512d, pts: &mut Vec<(f64, f64)>| {
        let (e_e0, d_d0) = (_mm512_sub_pd(e, p0e), _mm512_sub_pd(d, p0d));
        let (e_es, ds_d) = (_mm512_sub_pd(e, pse), _mm512_sub_pd(psd, d));
        // Dominated by p*: e − e* ≥ 0 and d* − d ≥ 0.
        let mut drop = _mm512_sub_pd(zero, _mm512_min_pd(e_es, ds_d));
        if hull_tests {
            // Below p₀: d ≤ km·d₀ and d·e₀ ≤ km·(d₀·e).
            let below_p0 = _mm512_max_pd(
                _mm512_sub_pd(d, km_p0d),
                _mm512_sub_pd(
                    _mm512_mul_pd(d, p0e),
                    _mm512_mul_pd(vkm, _mm512_mul_pd(p0d, e)),
                ),
            );
            // Between the anchors in both coordinates, and at or below km·h with
            // t = (e − e₀)/(e* − e₀), h = d₀ + (d* − d₀)·t.
            let m = _mm512_min_pd(
                _mm512_min_pd(e_e0, _mm512_sub_pd(pse, e)),
                _mm512_min_pd(d_d0, ds_d),
            );
            let h = _mm512_add_pd(p0d, _mm512_mul_pd(span_d, _mm512_div_pd(e_e0, span_e)));
            let chord = _mm512_max_pd(
                _mm512_sub_pd(d, _mm512_mul_pd(vkm, h)),
                _mm512_sub_pd(tau, m),
            );
            drop = _mm512_min_pd(drop, _mm512_min_pd(below_p0, chord));
        }
        drop = _mm512_min_pd(d, drop);
        // The anchors themselves are always kept.
        let anchor = _mm512_min_pd(
            _mm512_max_pd(_mm512_abs_pd(e_es), _mm512_abs_pd(ds_d)),
            _mm512_max_pd(_mm512_abs_pd(e_e0), _mm512_abs_pd(d_d0)),
        );
        let keep = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(anchor, zero)
            | !_mm512_cmp_pd_mask::<_CMP_LE_OQ>(drop, zero);
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
    };
    let mut big = _mm512_setzero_si512();
    // The screen (doc above): only with the hull tests, anchors in [2⁻²⁰⁰, 2²⁰⁰] and p*
    // right of and above p₀.
    let in_screen_range = |v: f64| (SCREEN_LO..=SCREEN_HI).contains(&v);
    if hull_tests
        && [p0.0, p0.1, ps.0, ps.1].into_iter().all(in_screen_range)
        && ps.1 > p0.1
        && ps.0 > p0.0
    {
        let v_r0 = _mm512_set1_pd(p0.0 / p0.1);
        let v_inv = _mm512_set1_pd(1.0 / (ps.1 - p0.1));
        let v_c = _mm512_set1_pd(SCREEN_SHRINK);
        let lo_bits = _mm512_set1_epi64(SCREEN_LO.to_bits() as i64);
        let range_bits = _mm512_set1_epi64((SCREEN_HI.to_bits() - SCREEN_LO.to_bits()) as i64);
        let sign = _mm512_set1_epi64(i64::MIN);
        // Runs of 64 blocks: the screen of every block first, into one bit per block
        // (without a branch), then the keep test of the blocks it let through, in order.
        // A branch per block on the screen mispredicted on most blocks that keep a point.
        let mut run = 0;
        while run < n {
            let run_end = n.min(run + 64 * 8);
            let mut left = 0u64;
            let mut i = run;
            while i < run_end {
                // SAFETY: as in `scan_finite`.
                let (d, e) = block_points::<true>(actual, expected, i, n, &mut big);
                // Every lane has e in range and d < c·min(r₀·e, d₀), or
                // d₀ < d < c·min(h̃, d*): the block keeps nothing (doc above).
                let in_range = _mm512_cmplt_epu64_mask(
                    _mm512_sub_epi64(_mm512_castpd_si512(e), lo_bits),
                    range_bits,
                );
                let s1 = _mm512_fnmadd_pd(v_c, _mm512_min_pd(_mm512_mul_pd(v_r0, e), p0d), d);
                let t = _mm512_mul_pd(_mm512_sub_pd(e, p0e), v_inv);
                let s2 = _mm512_max_pd(
                    _mm512_sub_pd(p0d, d),
                    _mm512_fnmadd_pd(v_c, _mm512_min_pd(_mm512_fmadd_pd(span_d, t, p0d), psd), d),
                );
                let below =
                    _mm512_test_epi64_mask(_mm512_castpd_si512(_mm512_min_pd(s1, s2)), sign);
                left |= u64::from(below & in_range != 0xff) << ((i - run) / 8);
                i += 8;
            }
            while left != 0 {
                let i = run + 8 * left.trailing_zeros() as usize;
                left &= left - 1;
                // SAFETY: i < n, a block of this run; the largest bit patterns were taken
                // in the screen's pass.
                let (d, e) = block_points::<false>(actual, expected, i, n, &mut big);
                keep_block(d, e, pts);
            }
            run = run_end;
        }
    } else {
        let mut i = 0;
        while i < n {
            // SAFETY: as in `scan_finite`; the zero lanes of a partial block have d = 0,
            // which is never kept.
            let (d, e) = block_points::<true>(actual, expected, i, n, &mut big);
            keep_block(d, e, pts);
            i += 8;
        }
    }
    _mm512_reduce_max_epi64(big) < BOUND.to_bits() as i64
}

/// [`super::stream::screen_portable`], vectorized: per block of eight pairs, the points'
/// d and e as [`scan_finite`] makes them and their table indices (e's bits shifted right by
/// [`BELOW_SHIFT`]; e = |y| has its sign bit clear, so every index is below [`BELOW_LEN`],
/// also for a non-finite y). The table is nondecreasing, so a block with no d above the
/// entry of its least index passes nothing; any other block takes its lanes' entries by one
/// gather and appends the lanes with d > 0 and d > entry in lane order. A slice holding a non-finite value or
/// difference is redone by the portable definition.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn screen_pairs(
    actual: &[f64],
    expected: &[f64],
    below: &[f64; BELOW_LEN],
    out: &mut Vec<(f64, f64)>,
) {
    let start = out.len();
    let n = actual.len().min(expected.len());
    let zero = _mm512_setzero_pd();
    let mut big = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        // SAFETY: as in `scan_finite`; the zero lanes of a partial block have d = 0, which
        // never passes.
        let (d, e) = block_points::<false>(actual, expected, i, n, &mut big);
        let idx = _mm512_srli_epi64::<BELOW_SHIFT>(_mm512_castpd_si512(e));
        // The table is nondecreasing, so the entry of the block's least index is at most
        // every lane's: a block with no d above it passes nothing (the common case), and
        // only the others take the gather.
        let least = _mm512_reduce_min_epu64(idx) as usize;
        if _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, _mm512_set1_pd(below[least])) == 0 {
            i += 8;
            continue;
        }
        // SAFETY: every index is below BELOW_LEN = below.len() (doc above).
        let entry = _mm512_i64gather_pd::<8>(idx, below.as_ptr().cast());
        let pass = _mm512_mask_cmp_pd_mask::<_CMP_GT_OQ>(
            _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, zero),
            d,
            entry,
        );
        if pass != 0 {
            let (ds, es) = (lanes(d), lanes(e));
            let mut todo = pass;
            while todo != 0 {
                let l = todo.trailing_zeros() as usize;
                out.push((ds[l], es[l]));
                todo &= todo - 1;
            }
        }
        i += 8;
    }
    if _mm512_reduce_max_epi64(big) > f64::MAX.to_bits() as i64 {
        out.truncate(start);
        super::stream::screen_portable(actual, expected, below, out);
    }
}
