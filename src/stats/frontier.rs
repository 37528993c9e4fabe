//! Tolerance frontiers: the few elements of a check that can be its worst element under some
//! (atol, rtol), and tolerance recommendations computed from them without re-running.
//!
//! A check's usage under (atol, rtol) is maxᵢ dᵢ/(atol + rtol·eᵢ) with dᵢ = |actualᵢ −
//! expectedᵢ| and eᵢ = |expectedᵢ| (see `crate::check`). Points are passed and stored as
//! **(d, e)** pairs.
//!
//! **Which points can be the maximum.** Fix (a, r) = (atol, rtol) ≥ 0, not both 0, and let
//! U be the maximal usage. A point p attains it iff every q satisfies d_q ≤ U·(a + r·e_q),
//! i.e. iff the line d = α + β·e with α = U·a ≥ 0 and β = U·r ≥ 0 passes through p and lies
//! on or above every point. Conversely a supporting line through p with α, β ≥ 0, not both
//! 0, makes p maximal for (a, r) = (α, β). So the candidates are the points of the upper
//! convex hull of the cloud that have a supporting line of non-negative slope and intercept:
//! 1. d = 0 never matters (usage 0; an all-zero check has usage 0 whatever the tolerance).
//! 2. Pareto dominance: q is dropped if some other p has d_p ≥ d_q and e_p ≤ e_q (p is at
//!    least as large for every (a, r)). What remains is a staircase: e and d both strictly
//!    increasing. Among exact duplicates one is kept.
//! 3. Concave hull: β ≥ 0 makes the largest-d point (the staircase's last) the right end;
//!    α ≥ 0 bounds the slope by d/e, which is the same as adding the origin (0, 0) as an
//!    extra left anchor, unless a point with e = 0 exists (it then has the largest usage as
//!    atol → 0 and is the left end). A staircase point strictly below the chord between
//!    two hull points (or the origin anchor) is never maximal: on the chord, usage is a
//!    ratio of two functions linear in the chord parameter, whose maximum is at an end
//!    (the mediant inequality (x₁ + x₂)/(y₁ + y₂) ≤ max(x₁/y₁, x₂/y₂)).
//!
//! **Rounding.** To make the frontier's maximum usage equal, bit for bit, the maximum over
//! all points (the same division on the same point), a point is dropped only when it lies
//! below the chord by a relative margin of 2⁻⁴⁸ (= 32 units of roundoff u = 2⁻⁵³): the
//! computed chord height has relative error ≤ 6u, the comparison 1u, and each computed usage
//! d/(a + r·e) ≤ 3u (three roundings), so a point that passes the test has a computed usage
//! strictly below the computed usage of a hull point for every (a, r). Dominance in step 2
//! needs no margin: rounding is monotone, so d_p ≥ d_q and e_p ≤ e_q give a computed usage
//! of p ≥ that of q. The frontier may therefore keep points collinear (or within 2⁻⁴⁸
//! relative of collinear) with their neighbours; those attain the maximum in a tie. The
//! argument assumes no intermediate underflows into subnormals (any realistic tolerance and
//! data).

use crate::kernels::isa::Isa;
use std::cmp::Ordering;

#[cfg(target_arch = "x86_64")]
mod avx512;
mod simd;
mod stream;
#[cfg(target_arch = "x86_64")]
pub use avx512::BlockScan;
pub use simd::{
    keep_pairs, keep_pairs_on, keep_pairs_portable, pair_point, scan_anchors, scan_anchors_on,
    scan_anchors_portable, scan_pairs, scan_pairs_on, scan_pairs_portable, two_pass_is_vectorized,
};
#[doc(hidden)]
pub use stream::screen_both_on;
pub use stream::FrontierStream;

/// Relative margin of the hull test, 2⁻⁴⁸ = 32u; see the module doc.
pub const HULL_MARGIN: f64 = 1.0 / 281_474_976_710_656.0;

/// Whether `b` lies at or below (1 − 2⁻⁴⁸)·(the chord from `a` to `p`) at e_b, with
/// e_a < e_b < e_p and d_a < d_b < d_p (all (d, e)). Chord height
/// h = d_a + (d_p − d_a)·((e_b − e_a)/(e_p − e_a)), evaluated in that order: every
/// subtraction is of exact operands and every term is positive, so h has relative error
/// ≤ 6u.
fn below_chord(a: (f64, f64), b: (f64, f64), p: (f64, f64)) -> bool {
    let t = (b.1 - a.1) / (p.1 - a.1);
    let h = a.0 + (p.0 - a.0) * t;
    b.0 <= (1.0 - HULL_MARGIN) * h
}

/// The frontier of `points`, each a **(d, e)** pair (d = |actual − expected| ≥ 0,
/// e = |expected| ≥ 0, e finite, d finite or +∞, neither NaN), written to `out` (cleared
/// first) sorted by e ascending (d is then strictly ascending too).
///
/// Keeps the points that can be the maximal-usage element for some (atol, rtol) ≥ 0, not
/// both 0 — d > 0, not Pareto-dominated, on the upper hull with the origin anchor — as
/// derived in the module doc, plus points within 2⁻⁴⁸ relative of the hull, so that
/// [`usage`] over the frontier equals the maximum over all points bit for bit.
/// If some d is +∞ the frontier is that single point (usage +∞ for every tolerance).
///
/// Algorithm: filter d > 0; the Pareto staircase ([`staircase_in_place`]: sorted by
/// (e ascending, d descending), each point kept whose d exceeds every d before it); then
/// Andrew's monotone chain (upper hull) over the staircase, in place, with the virtual
/// origin as the left anchor when no point has e = 0. O(m log m) for m points with d > 0 at
/// worst, O(m·h) for a staircase of h ≤ [`SMALL_STAIRCASE`] points (a dominance test over
/// h/8 blocks per point while h < [`SEARCH_FROM`], about 10 in a T1 check; a binary search
/// and the insertion's move from there on); no allocation beyond `out`.
pub fn frontier(points: impl Iterator<Item = (f64, f64)>, out: &mut Vec<(f64, f64)>) {
    out.clear();
    let mut infinite: Option<f64> = None;
    for (d, e) in points {
        debug_assert!(
            d >= 0.0 && e >= 0.0 && e.is_finite(),
            "frontier point (d={d}, e={e})"
        );
        if d == f64::INFINITY {
            infinite = Some(infinite.map_or(e, |m: f64| m.min(e)));
        } else if d > 0.0 {
            out.push((d, e));
        }
    }
    if let Some(e) = infinite {
        out.clear();
        out.push((f64::INFINITY, e));
        return;
    }
    staircase_in_place(out);
    if out.len() < 2 {
        return;
    }
    // Upper hull, stack in out[..h].
    let origin_anchor = out[0].1 > 0.0;
    let mut h = 0;
    for i in 0..out.len() {
        let p = out[i];
        while h >= 1 {
            let a = if h >= 2 {
                out[h - 2]
            } else if origin_anchor {
                (0.0, 0.0)
            } else {
                break;
            };
            if below_chord(a, out[h - 1], p) {
                h -= 1;
            } else {
                break;
            }
        }
        out[h] = p;
        h += 1;
    }
    out.truncate(h);
}

/// Staircase length from which [`staircase_in_place`]'s insertion finds a point's place by
/// binary search instead of testing every block of eight (a zeroed gradient puts every
/// element of a check on one line, and its distinct values on the staircase).
const SEARCH_FROM: usize = 32;

/// Most points of a staircase [`staircase_in_place`] builds by insertion (a T1 check's has
/// about 10, and at most 126 over 100 seeds with every mutant); a larger one is sorted.
pub const SMALL_STAIRCASE: usize = 128;

/// Replaces `pts` (each d > 0 and finite or +∞, e ≥ 0 finite, neither NaN) by its Pareto
/// staircase: the points q such that no other point p has e_p ≤ e_q and d_p ≥ d_q, one of
/// each set of equal points, sorted by e ascending (d is then strictly ascending too).
///
/// The definition: sort by (e ascending, d descending, `total_cmp`), then keep each point
/// whose d exceeds every d before it ([`staircase_by_sorting`]). The same set, built by
/// insertion in slice order: a point is dropped when the staircase point of largest e ≤ its
/// e (which has the largest d among those) has a d at least as large; otherwise it replaces
/// the staircase points it dominates (e ≥ its e and d ≤ its d, a run that starts at the
/// first e ≥ its e). Each step keeps the staircase of the points so far, so the end result
/// is the staircase of all of them. When the staircase outgrows [`SMALL_STAIRCASE`] points,
/// the definition runs instead.
pub fn staircase_in_place(pts: &mut Vec<(f64, f64)>) {
    staircase_in_place_on(Isa::detected(), pts)
}

/// [`staircase_in_place`] on the compilation `isa` names (the same staircase on each).
pub fn staircase_in_place_on(isa: Isa, pts: &mut Vec<(f64, f64)>) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { staircase_avx512(pts) };
        }
    }
    let _ = isa;
    staircase_body(pts)
}

/// [`staircase_body`] compiled for AVX-512F: the block tests of eight staircase points are
/// one comparison each (the same result).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn staircase_avx512(pts: &mut Vec<(f64, f64)>) {
    staircase_body(pts)
}

/// The insertion of [`staircase_in_place`]. A point is first tested against every staircase
/// point at once, one test per block of eight of them and no branch per staircase point
/// (dominated: e ≤ e_q and d ≥ d_q, which for a staircase holds for some point exactly when
/// it holds for the point of largest e ≤ e_q): about seven points in eight of a T1 check
/// are dropped there. From [`SEARCH_FROM`] staircase points on, that point and the run a
/// new point replaces are found by binary search instead.
#[inline(always)]
fn staircase_body(pts: &mut Vec<(f64, f64)>) {
    // The staircase as two arrays, e and d, with e = +∞ and d = NaN past its end (never
    // < or ≤ a finite e, never ≤ or ≥ any d), so that the tests and counts run over whole
    // blocks of eight without a bound check per element.
    const PAD: usize = 8;
    let mut es = [f64::INFINITY; SMALL_STAIRCASE + PAD];
    let mut ds = [f64::NAN; SMALL_STAIRCASE + PAD];
    let mut h = 0usize;
    for &(qd, qe) in pts.iter() {
        let (start, end) = if h < SEARCH_FROM {
            let blocks = h.next_multiple_of(PAD);
            let mut dominated = false;
            for (eb, db) in es[..blocks]
                .chunks_exact(PAD)
                .zip(ds[..blocks].chunks_exact(PAD))
            {
                let mut any = false;
                for l in 0..PAD {
                    any |= (eb[l] <= qe) & (db[l] >= qd);
                }
                dominated |= any;
            }
            if dominated {
                continue;
            }
            // The run q dominates: from the first e ≥ e_q while d ≤ d_q. Both coordinates
            // ascend along the staircase, so the run starts after the points with e < e_q
            // and holds every point with e ≥ e_q and d ≤ d_q: two counts over the blocks.
            let (mut start, mut run) = (0usize, 0usize);
            for (eb, db) in es[..blocks]
                .chunks_exact(PAD)
                .zip(ds[..blocks].chunks_exact(PAD))
            {
                for l in 0..PAD {
                    start += usize::from(eb[l] < qe);
                    run += usize::from((eb[l] >= qe) & (db[l] <= qd));
                }
            }
            (start, start + run)
        } else {
            // The same three answers by binary search, for a long staircase: q is dominated
            // exactly when the point of largest e ≤ e_q has d ≥ d_q; the run starts after
            // the points with e < e_q and ends at the first d > d_q after that.
            let le = es[..h].partition_point(|&e| e <= qe);
            if le > 0 && ds[le - 1] >= qd {
                continue;
            }
            let start = es[..h].partition_point(|&e| e < qe);
            (start, start + ds[start..h].partition_point(|&d| d <= qd))
        };
        if end == start {
            if h == SMALL_STAIRCASE {
                staircase_by_sorting(pts);
                return;
            }
            es.copy_within(start..h, start + 1);
            ds.copy_within(start..h, start + 1);
            h += 1;
        } else if end > start + 1 {
            let gone = end - start - 1;
            es.copy_within(end..h, start + 1);
            ds.copy_within(end..h, start + 1);
            es[h - gone..h].fill(f64::INFINITY);
            ds[h - gone..h].fill(f64::NAN);
            h -= gone;
        }
        es[start] = qe;
        ds[start] = qd;
    }
    pts.clear();
    pts.extend(ds[..h].iter().zip(&es[..h]).map(|(&d, &e)| (d, e)));
}

/// The definition of [`staircase_in_place`]: sort, then one pass.
pub fn staircase_by_sorting(pts: &mut Vec<(f64, f64)>) {
    pts.sort_unstable_by(|x, y| match x.1.total_cmp(&y.1) {
        Ordering::Equal => y.0.total_cmp(&x.0),
        o => o,
    });
    let mut w = 0;
    let mut max_d = 0.0;
    for i in 0..pts.len() {
        let p = pts[i];
        if p.0 > max_d {
            max_d = p.0;
            pts[w] = p;
            w += 1;
        }
    }
    pts.truncate(w);
}

/// Drops, in place and in one pass after finding two anchors, most points that cannot be a
/// maximum, so that [`frontier`] sorts few points: the frontier of what remains gives the
/// same maximum usage as the frontier of all points, bit for bit, for every (atol, rtol).
///
/// Anchors: p* = a point of largest d, and (when no point with d > 0 has e = 0) p₀ = a point
/// of largest d/e. A point q ≠ p*, p₀ is dropped when (1) d = 0; or (2) e_q ≥ e* and
/// d_q ≤ d* (dominated by p*; exact, rounding is monotone); or (3) d_q ≤ (1 − 2⁻⁴⁸)·d₀ and
/// d_q·e₀ ≤ (1 − 2⁻⁴⁸)·(d₀·e_q): then d_q·(a + r·e₀) ≤ (1 − 2⁻⁴⁸)·d₀·(a + r·e_q) for all
/// a, r ≥ 0, so q's usage is below p₀'s by a margin of 32u, more than the ≤ 6u of rounding
/// in the two usages and the products; or (4) q lies strictly between p₀ and p* in both
/// coordinates and below their chord by the hull margin (the module doc's mediant argument).
/// Any infinite d: nothing is dropped ([`frontier`] keeps a single infinite point anyway).
pub fn prefilter(pts: &mut Vec<(f64, f64)>) {
    let mut scan = AnchorScan::default();
    pts.iter().for_each(|&q| scan.add(q));
    scan.filter(pts);
}

/// Replaces `stairs` (a Pareto staircase, or empty) by the staircase of `stairs` ∪ `more`:
/// the points with d > 0 that no other point dominates (d_p ≥ d_q and e_p ≤ e_q), one of
/// each set of equal points, sorted by e ascending. `more` is left empty. Dropping dominated
/// points leaves a check's frontier unchanged bit for bit, also after [`prefilter`]'s test
/// with anchors found over all points: if the dominating point is dropped by that test, so
/// is the dominated one (every test is monotone in d and e, and an anchor dominated by
/// another point is dominated by p*, which stays), and otherwise it stays in its place.
pub fn staircase_merge(stairs: &mut Vec<(f64, f64)>, more: &mut Vec<(f64, f64)>) {
    more.retain(|q| q.0 > 0.0);
    more.append(stairs);
    staircase_in_place(more);
    std::mem::swap(stairs, more);
    more.clear();
}

/// Whether `pts` is a staircase already: e and d both strictly ascending, every d > 0 (then
/// [`staircase_in_place`] would leave it as it is).
pub fn is_staircase(pts: &[(f64, f64)]) -> bool {
    pts.first().is_none_or(|p| p.0 > 0.0)
        && pts.windows(2).all(|w| w[0].1 < w[1].1 && w[0].0 < w[1].0)
}

/// Replaces `a` by the staircase of `a` ∪ `b`, two staircases (each sorted by e ascending,
/// d ascending), in place with no other buffer: the points of both in (e ascending, d
/// descending) order, each kept when its d exceeds every d before it. That is
/// [`staircase_by_sorting`]'s pass over the union in its sorted order (equal points can
/// come in either order; one of them is kept), so the same points. O(|a| + |b|): `a` grows
/// by |b|, the two are merged into it from the back (the merge never overtakes the part of
/// `a` not yet read), then one forward pass keeps the staircase. Returns how many points of
/// `b` it kept: none means the result is `a` (a point of `a` is dropped only for a point of
/// `b` that dominates it, which no point of `a` can dominate in turn, so some point of `b`
/// would be kept).
pub fn merge_staircases(a: &mut Vec<(f64, f64)>, b: &[(f64, f64)]) -> usize {
    // Whether x comes after y: e descending, then d ascending (`total_cmp`, as the sort),
    // the merge order read from the back.
    let after = |x: (f64, f64), y: (f64, f64)| match x.1.total_cmp(&y.1) {
        Ordering::Equal => x.0.total_cmp(&y.0) == Ordering::Less,
        o => o == Ordering::Greater,
    };
    let (na, nb) = (a.len(), b.len());
    a.resize(na + nb, (0.0, 0.0));
    // Which slot holds a point of b, as a bit per slot.
    let mut from_b = vec![0u64; (na + nb).div_ceil(64)];
    let (mut i, mut j) = (na, nb);
    for w in (0..na + nb).rev() {
        // w ≥ i always (w + 1 = i + j before the step), so a[i - 1] is still unread.
        if j > 0 && (i == 0 || !after(a[i - 1], b[j - 1])) {
            j -= 1;
            a[w] = b[j];
            from_b[w / 64] |= 1 << (w % 64);
        } else {
            i -= 1;
            a[w] = a[i];
        }
    }
    let mut max_d = 0.0;
    let mut kept = 0;
    let mut kept_b = 0;
    for r in 0..na + nb {
        let p = a[r];
        if p.0 > max_d {
            max_d = p.0;
            a[kept] = p;
            kept += 1;
            kept_b += (from_b[r / 64] >> (r % 64) & 1) as usize;
        }
    }
    a.truncate(kept);
    kept_b
}

/// [`Anchors::of`] one point at a time, or a run of points at a time ([`AnchorScan::merge`]
/// of the scan of a later run). What it keeps decides the anchors exactly as offering the
/// points one by one in order does:
/// - p* (`ps`): the largest d, the smallest e among those (equal points are equal values);
/// - p₀: the first point with e > 0 of the largest computed ratio `d / e` (a later point
///   replaces it only when its ratio is strictly larger); when no point has e > 0, the first
///   point;
/// - whether some point has e = 0, and whether some d is infinite (then there are no
///   anchors).
///
/// Only points with 0 < d count (NaN d counts as none).
#[derive(Debug, Clone, Copy, Default)]
pub struct AnchorScan {
    ps: Option<(f64, f64)>,
    /// The p₀ candidate with e > 0 and its ratio (the same division as when it was offered).
    best: Option<((f64, f64), f64)>,
    first: Option<(f64, f64)>,
    zero_e: bool,
    infinite: bool,
}

impl AnchorScan {
    /// Whether some point offered had an infinite d (no anchors then; every later point is
    /// ignored).
    pub fn is_infinite(&self) -> bool {
        self.infinite
    }

    /// The best ratio d/e offered so far (None before any point with e > 0).
    pub fn best_ratio(&self) -> Option<f64> {
        self.best.map(|(_, r)| r)
    }

    /// Offers a point.
    #[inline]
    pub fn add(&mut self, q: (f64, f64)) {
        if self.infinite || q.0.is_nan() || q.0 <= 0.0 {
            return;
        }
        if q.0.is_infinite() {
            self.infinite = true;
            return;
        }
        if self.first.is_none() {
            self.first = Some(q);
        }
        match self.ps {
            Some(p) if !(q.0 > p.0 || (q.0 == p.0 && q.1 < p.1)) => {}
            _ => self.ps = Some(q),
        }
        if q.1 == 0.0 {
            self.zero_e = true;
        } else {
            let r = q.0 / q.1;
            match self.best {
                Some((_, br)) if r.partial_cmp(&br) != Some(Ordering::Greater) => {}
                _ => self.best = Some((q, r)),
            }
        }
    }

    /// Takes in the scan of points that come after every point offered so far, as if they
    /// had been offered one by one.
    pub fn merge(&mut self, later: &AnchorScan) {
        self.infinite |= later.infinite;
        self.zero_e |= later.zero_e;
        if self.first.is_none() {
            self.first = later.first;
        }
        if let Some(q) = later.ps {
            match self.ps {
                Some(p) if !(q.0 > p.0 || (q.0 == p.0 && q.1 < p.1)) => {}
                _ => self.ps = Some(q),
            }
        }
        if let Some((q, r)) = later.best {
            match self.best {
                Some((_, br)) if r.partial_cmp(&br) != Some(Ordering::Greater) => {}
                _ => self.best = Some((q, r)),
            }
        }
    }

    /// Applies [`prefilter`]'s test with the anchors of the points offered to `pts` in
    /// place (with no anchors, only the d > 0 filter).
    pub fn filter(self, pts: &mut Vec<(f64, f64)>) {
        match self.finish() {
            Some(an) => an.retain(pts),
            None => pts.retain(|q| q.0 > 0.0),
        }
    }

    /// The anchors (None: no point with d > 0, or an infinite d).
    pub fn finish(self) -> Option<Anchors> {
        if self.infinite {
            return None;
        }
        let first = self.first?;
        Some(Anchors {
            ps: self.ps.unwrap_or(first),
            p0: self.best.map_or(first, |(q, _)| q),
            zero_e: self.zero_e,
        })
    }
}

/// The two anchors of [`prefilter`], found in one pass; `keep` is its test. Splitting the
/// two lets a caller stream the points twice instead of storing them all.
#[derive(Debug, Clone, Copy)]
pub struct Anchors {
    ps: (f64, f64),
    p0: (f64, f64),
    zero_e: bool,
}

impl Anchors {
    /// The anchor of the largest d/e (p₀) and the one of the largest d (p*), as (d, e).
    pub fn points(&self) -> ((f64, f64), (f64, f64)) {
        (self.p0, self.ps)
    }

    /// The anchors of the points with d > 0; None when there is none, or when some d is
    /// infinite (then only d > 0 filters).
    pub fn of(points: impl Iterator<Item = (f64, f64)>) -> Option<Self> {
        let mut scan = AnchorScan::default();
        for q in points {
            scan.add(q);
        }
        scan.finish()
    }

    /// Whether [`prefilter`] keeps `q`.
    pub fn keep(&self, q: (f64, f64)) -> bool {
        let (ps, p0) = (self.ps, self.p0);
        if q.0.is_nan() || q.0 <= 0.0 {
            return false;
        }
        if q == ps || q == p0 {
            return true;
        }
        if q.1 >= ps.1 && q.0 <= ps.0 {
            return false;
        }
        if !self.zero_e {
            let keep_m = 1.0 - HULL_MARGIN;
            if q.0 <= keep_m * p0.0 && q.0 * p0.1 <= keep_m * (p0.0 * q.1) {
                return false;
            }
            if p0.1 < q.1 && q.1 < ps.1 && p0.0 < q.0 && q.0 < ps.0 && below_chord(p0, q, ps) {
                return false;
            }
        }
        true
    }

    /// Keeps, in place and in order, the points of `pts` that [`Anchors::keep`] keeps
    /// (vectorized where the CPU allows, with the same answer per point).
    pub fn retain(&self, pts: &mut Vec<(f64, f64)>) {
        self.retain_on(Isa::detected(), pts);
    }

    /// [`Anchors::retain`] on the compilation `isa` names (the same points on each).
    pub fn retain_on(&self, isa: Isa, pts: &mut Vec<(f64, f64)>) {
        simd::retain(isa, self, pts);
    }
}

/// Usage of a frontier (or of any list of (d, e) points) under (atol, rtol):
/// maxᵢ dᵢ/(atol + rtol·eᵢ), each term evaluated as `d / (atol + rtol * e)`, the same
/// operations in the same order as `Tolerance::usage`; 0 for an empty list; +∞ for d > 0
/// over a zero allowance. atol and rtol must be finite and ≥ 0.
pub fn usage(frontier: &[(f64, f64)], atol: f64, rtol: f64) -> f64 {
    let mut m = 0.0;
    for &(d, e) in frontier {
        let u = d / (atol + rtol * e);
        if u > m {
            m = u;
        }
    }
    m
}

/// Number of seeds whose usage exceeds `target`.
fn exceeding(frontiers: &[Vec<(f64, f64)>], atol: f64, rtol: f64, target: f64) -> usize {
    frontiers
        .iter()
        .filter(|f| usage(f, atol, rtol) > target)
        .count()
}

/// The (k+1)-th largest of `needs` (0 if there are ≤ k); sorts `needs`.
fn order_statistic(needs: &mut [f64], k: usize) -> f64 {
    if k >= needs.len() {
        return 0.0;
    }
    needs.sort_unstable_by(|x, y| y.total_cmp(x));
    needs[k]
}

/// The smallest non-negative f64 x with `pass(x)`, for `pass` monotone (false … false,
/// true … true in increasing x); +∞ if even `f64::MAX` fails. Starts at `candidate` (the
/// analytic answer, accurate to a few ulps), gallops in the bit pattern (bit patterns of
/// non-negative floats are ordered like their values) by doubling steps to bracket the
/// boundary, then bisects the bit patterns: at most ~3·64 calls of `pass`, and the result
/// is exact — the next float below fails.
fn smallest_passing(candidate: f64, pass: impl Fn(f64) -> bool) -> f64 {
    if pass(0.0) {
        return 0.0;
    }
    if !pass(f64::MAX) {
        return f64::INFINITY;
    }
    let max_bits = f64::MAX.to_bits();
    let c = if candidate > 0.0 && candidate <= f64::MAX {
        candidate.to_bits()
    } else {
        max_bits
    };
    // Invariant once bracketed: pass(hi) and !pass(lo), lo < hi.
    let (mut lo, mut hi);
    let mut step: u64 = 1;
    if pass(f64::from_bits(c)) {
        hi = c;
        loop {
            let t = hi.saturating_sub(step);
            if t == 0 {
                lo = 0;
                break;
            }
            if pass(f64::from_bits(t)) {
                hi = t;
                step = step.saturating_mul(2);
            } else {
                lo = t;
                break;
            }
        }
    } else {
        lo = c;
        loop {
            let t = lo.saturating_add(step).min(max_bits);
            if pass(f64::from_bits(t)) {
                hi = t;
                break;
            }
            lo = t;
            step = step.saturating_mul(2);
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pass(f64::from_bits(mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    f64::from_bits(hi)
}

/// The smallest atol such that at most `seeds_allowed_to_exceed` seeds have usage >
/// `target` at (atol, `rtol`), a seed's usage being [`usage`] of its frontier.
///
/// Math: a seed's usage is ≤ T iff dᵢ ≤ T·(atol + rtol·eᵢ) for all i, i.e. atol ≥
/// maxᵢ(dᵢ/T − rtol·eᵢ) (clamped at 0): the atol the seed needs. With k seeds allowed to
/// exceed, the answer is the (k+1)-th largest need (0 if there are ≤ k seeds).
///
/// Floating point: that value, computed as `d / target - rtol * e`, can be a few ulps (of
/// d/T) off the boundary of the computed usage. The result is therefore settled against
/// [`usage`] itself: starting from the analytic value, a bracket-and-bisect search over
/// representable values ([`smallest_passing`]; the count is monotone in atol because every
/// rounding is) returns the smallest f64 whose re-evaluated count is ≤ k. So re-evaluating
/// with the result gives at most k seeds above target, and with the next float below, more
/// than k (unless the result is 0). +∞ if no finite atol suffices (a d = +∞).
/// `target` must be finite and > 0, `rtol` finite and ≥ 0.
pub fn min_atol(
    frontiers: &[Vec<(f64, f64)>],
    rtol: f64,
    target: f64,
    seeds_allowed_to_exceed: usize,
) -> f64 {
    assert!(target > 0.0 && target.is_finite(), "target {target}");
    assert!(rtol >= 0.0 && rtol.is_finite(), "rtol {rtol}");
    let mut needs: Vec<f64> = frontiers
        .iter()
        .map(|f| {
            f.iter()
                .map(|&(d, e)| d / target - rtol * e)
                .fold(0.0, f64::max)
        })
        .collect();
    let candidate = order_statistic(&mut needs, seeds_allowed_to_exceed);
    smallest_passing(candidate, |a| {
        exceeding(frontiers, a, rtol, target) <= seeds_allowed_to_exceed
    })
}

/// The smallest rtol such that at most `seeds_allowed_to_exceed` seeds have usage >
/// `target` at (`atol`, rtol).
///
/// Math: per seed, rtol ≥ maxᵢ (dᵢ/T − atol)/eᵢ over eᵢ > 0 (clamped at 0); a point with
/// eᵢ = 0 is unaffected by rtol, and if its usage dᵢ/atol already exceeds T the seed needs
/// rtol = +∞. The answer is the (k+1)-th largest need, then settled against [`usage`]
/// exactly as in [`min_atol`] (smallest f64 with count ≤ k; +∞ if none).
/// `target` must be finite and > 0, `atol` finite and ≥ 0.
pub fn min_rtol(
    frontiers: &[Vec<(f64, f64)>],
    atol: f64,
    target: f64,
    seeds_allowed_to_exceed: usize,
) -> f64 {
    assert!(target > 0.0 && target.is_finite(), "target {target}");
    assert!(atol >= 0.0 && atol.is_finite(), "atol {atol}");
    let mut needs: Vec<f64> = frontiers
        .iter()
        .map(|f| {
            f.iter()
                .map(|&(d, e)| {
                    if e > 0.0 {
                        (d / target - atol) / e
                    } else if d / atol > target {
                        f64::INFINITY
                    } else {
                        0.0
                    }
                })
                .fold(0.0, f64::max)
        })
        .collect();
    let candidate = order_statistic(&mut needs, seeds_allowed_to_exceed);
    smallest_passing(candidate, |r| {
        exceeding(frontiers, atol, r, target) <= seeds_allowed_to_exceed
    })
}

/// The smallest (atol, rtol) on the ray atol = `ratio`·rtol such that at most
/// `seeds_allowed_to_exceed` seeds have usage > `target`; returned as
/// (`ratio * s`, `s`), the pair the count was verified with.
///
/// Math: at (s·ρ, s) a seed's usage is (1/s)·maxᵢ dᵢ/(ρ + eᵢ), so it needs
/// s ≥ maxᵢ dᵢ/(ρ + eᵢ)/T; the (k+1)-th largest need, settled against [`usage`] as in
/// [`min_atol`] (the count is monotone in s, as both fl(s·ρ) and s are). ρ = +∞ means a
/// pure atol: the result is ([`min_atol`] at rtol 0, 0). ρ = 0 is a pure rtol. +∞ scale if
/// none suffices. `ratio` must be ≥ 0 (not NaN), `target` finite and > 0.
pub fn balanced(
    frontiers: &[Vec<(f64, f64)>],
    ratio: f64,
    target: f64,
    seeds_allowed_to_exceed: usize,
) -> (f64, f64) {
    assert!(target > 0.0 && target.is_finite(), "target {target}");
    assert!(ratio >= 0.0, "ratio {ratio}");
    if ratio == f64::INFINITY {
        return (
            min_atol(frontiers, 0.0, target, seeds_allowed_to_exceed),
            0.0,
        );
    }
    let mut needs: Vec<f64> = frontiers
        .iter()
        .map(|f| {
            f.iter()
                .map(|&(d, e)| d / (ratio + e) / target)
                .fold(0.0, f64::max)
        })
        .collect();
    let candidate = order_statistic(&mut needs, seeds_allowed_to_exceed);
    let s = smallest_passing(candidate, |s| {
        exceeding(frontiers, ratio * s, s, target) <= seeds_allowed_to_exceed
    });
    (ratio * s, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Tolerance;
    use crate::stats::gpd::SplitMix64;
    use proptest::prelude::*;

    fn front(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        frontier(points.iter().copied(), &mut out);
        out
    }

    /// A random cloud mixing the hard cases: generic points over six decades, e = 0 points,
    /// d = 0 points, points on a line d = α + β·e (collinear up to rounding: the cases
    /// where an exact hull could drop a point whose rounded usage wins), duplicates, and
    /// small integers.
    fn cloud(seed: u64, n: usize) -> Vec<(f64, f64)> {
        let mut rng = SplitMix64(seed);
        let mag = |rng: &mut SplitMix64| libm::pow(10.0, rng.uniform() * 6.0 - 3.0);
        let alpha = if rng.uniform() < 0.3 {
            0.0
        } else {
            mag(&mut rng)
        };
        let beta = mag(&mut rng);
        let mut pts: Vec<(f64, f64)> = Vec::with_capacity(n);
        for _ in 0..n {
            let kind = (rng.next_u64() % 6) as u8;
            let p = match kind {
                0 => (mag(&mut rng) * rng.uniform(), mag(&mut rng) * rng.uniform()),
                1 => (mag(&mut rng), 0.0),
                2 => (0.0, mag(&mut rng)),
                3 => {
                    let e = mag(&mut rng);
                    (alpha + beta * e, e)
                }
                4 if !pts.is_empty() => pts[(rng.next_u64() % pts.len() as u64) as usize],
                _ => ((rng.next_u64() % 20) as f64, (rng.next_u64() % 20) as f64),
            };
            pts.push(p);
        }
        pts
    }

    /// Tolerances to probe: zeros, random magnitudes, and the supporting directions of
    /// every frontier edge (where ties are exact in real arithmetic).
    fn tolerances(seed: u64, f: &[(f64, f64)]) -> Vec<(f64, f64)> {
        let mut rng = SplitMix64(seed ^ 0x5555);
        let mut t = vec![(0.0, 1.0), (1.0, 0.0), (0.0, 1e-6), (1e-5, 1.3e-6)];
        for _ in 0..20 {
            let a = libm::pow(10.0, rng.uniform() * 8.0 - 6.0);
            let r = libm::pow(10.0, rng.uniform() * 8.0 - 6.0);
            t.push((a, r));
            t.push((0.0, r));
            t.push((a, 0.0));
        }
        for w in f.windows(2) {
            let ((d1, e1), (d2, e2)) = (w[0], w[1]);
            let beta = (d2 - d1) / (e2 - e1);
            let alpha = d1 - beta * e1;
            if alpha >= 0.0 && beta.is_finite() {
                t.push((alpha, beta));
            }
        }
        if let Some(&(d, e)) = f.first() {
            if e > 0.0 {
                t.push((0.0, d / e));
            }
        }
        t
    }

    /// [`staircase_in_place`] against its definition on `pts` (the points with d > 0).
    fn check_staircase(pts: &[(f64, f64)]) -> Result<(), TestCaseError> {
        let pts: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0 > 0.0).collect();
        let (mut fast, mut slow) = (pts.clone(), pts);
        staircase_in_place(&mut fast);
        staircase_by_sorting(&mut slow);
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|p| (p.0.to_bits(), p.1.to_bits())).collect()
        };
        prop_assert_eq!(bits(&fast), bits(&slow));
        Ok(())
    }

    #[test]
    fn staircase_by_insertion_equals_the_definition_on_long_and_tied_runs() {
        // Rising lines (every point on the staircase: past SMALL_STAIRCASE points the
        // definition takes over), in both orders and shuffled, with duplicates, equal e,
        // equal d and infinite d.
        let line: Vec<(f64, f64)> = (1..=300).map(|i| (i as f64 * 0.5, i as f64)).collect();
        let mut rev = line.clone();
        rev.reverse();
        let mut shuffled = line.clone();
        let mut rng = SplitMix64(7);
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        let short: Vec<(f64, f64)> = line[..SMALL_STAIRCASE].to_vec();
        let mut one_more = short.clone();
        one_more.push((1000.0, 1000.0));
        let ties = vec![
            (1.0, 2.0),
            (1.0, 2.0),
            (3.0, 2.0),
            (3.0, 1.0),
            (3.0, 5.0),
            (f64::INFINITY, 4.0),
            (2.0, 0.0),
            (2.0, 0.0),
            (0.5, 0.0),
            (f64::INFINITY, 3.0),
        ];
        // A point of equal e and larger d replaces the one before it.
        let equal_e = vec![(1.0, 2.0), (3.0, 2.0), (0.5, 1.0)];
        for pts in [&line, &rev, &shuffled, &short, &one_more, &ties, &equal_e] {
            check_staircase(pts).unwrap();
        }
        let mut s = short.clone();
        staircase_in_place(&mut s);
        assert_eq!(
            s, short,
            "a staircase of exactly SMALL_STAIRCASE points is built in place"
        );
    }

    proptest! {
        /// The staircase built by insertion is the sorted definition's, point for point.
        #[test]
        fn staircase_by_insertion_equals_the_definition(seed: u64, n in 1usize..600) {
            check_staircase(&cloud(seed, n))?;
        }

        /// Long staircases with ties, built by insertion's binary search: a diagonal of
        /// integer points (every one on the staircase, past [`SEARCH_FROM`]) mixed with
        /// integer points near it, so that new points share a d or an e with staircase
        /// points, repeat them, or replace runs of them; at most 120 distinct values, so
        /// the staircase stays under [`SMALL_STAIRCASE`] and insertion builds it all.
        #[test]
        fn long_staircases_with_ties_equal_the_definition(
            seed: u64,
            diagonal in 40usize..120,
            extra in 0usize..400,
        ) {
            let mut rng = SplitMix64(seed);
            let mut pts: Vec<(f64, f64)> = (1..=diagonal).map(|i| (i as f64, i as f64)).collect();
            for _ in 0..extra {
                let e = 1 + rng.next_u64() % diagonal as u64;
                let off = rng.next_u64() % 5;
                let d = (e + off).saturating_sub(2).clamp(1, diagonal as u64);
                pts.push((d as f64, e as f64));
            }
            for i in (1..pts.len()).rev() {
                pts.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            check_staircase(&pts)?;
        }

        /// Two staircases merged in place give the sorted definition's staircase of their
        /// union, point for point, and say whether the second added a point: clouds with
        /// duplicates across the two, equal e, equal d and long rising lines (staircases of
        /// hundreds of points), split at random.
        #[test]
        fn merged_staircases_equal_the_definition(seed: u64, n in 0usize..900, cut in 0usize..900) {
            let mut pts: Vec<(f64, f64)> = cloud(seed, n).into_iter().filter(|p| p.0 > 0.0).collect();
            if seed % 3 == 0 {
                pts.extend((1..=300).map(|i| (i as f64 * 0.25, i as f64)));
            }
            let cut = cut.min(pts.len());
            let (mut a, mut b) = (pts[..cut].to_vec(), pts[cut..].to_vec());
            staircase_by_sorting(&mut a);
            staircase_by_sorting(&mut b);
            prop_assert!(is_staircase(&a) && is_staircase(&b));
            let before = a.clone();
            let mut want = pts;
            staircase_by_sorting(&mut want);
            let kept_b = merge_staircases(&mut a, &b);
            let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
                v.iter().map(|p| (p.0.to_bits(), p.1.to_bits())).collect()
            };
            prop_assert_eq!(bits(&a), bits(&want));
            prop_assert_eq!(kept_b == 0, bits(&a) == bits(&before));
        }

        /// The maximum usage over the frontier equals the maximum over all points, bit for
        /// bit, for every probed (atol, rtol); also against `Tolerance::usage` on a
        /// synthetic (actual, expected) = (e + d, e) where e + d − e == d exactly.
        #[test]
        fn frontier_max_is_bit_exact(seed: u64, n in 1usize..80) {
            let pts = cloud(seed, n);
            let f = front(&pts);
            for w in f.windows(2) {
                prop_assert!(w[0].1 < w[1].1 && w[0].0 < w[1].0, "{:?}", f);
            }
            let mut pre = pts.clone();
            prefilter(&mut pre);
            let fpre = front(&pre);
            for (a, r) in tolerances(seed, &f) {
                let all = usage(&pts, a, r);
                let fr = usage(&f, a, r);
                prop_assert_eq!(all.to_bits(), fr.to_bits(), "atol={} rtol={} f={:?}", a, r, f);
                // The prefiltered cloud's frontier gives the same bits.
                let frp = usage(&fpre, a, r);
                prop_assert_eq!(all.to_bits(), frp.to_bits(), "prefilter: atol={} rtol={}", a, r);
                let tol = Tolerance { atol: a, rtol: r };
                let via_check = pts
                    .iter()
                    .filter(|&&(d, e)| (e + d) - e == d)
                    .map(|&(d, e)| tol.usage(e + d, e))
                    .fold(0.0, f64::max);
                let via_front = pts
                    .iter()
                    .filter(|&&(d, e)| (e + d) - e == d)
                    .map(|&(d, e)| d / (a + r * e))
                    .fold(0.0, f64::max);
                prop_assert_eq!(via_check.to_bits(), via_front.to_bits());
            }
        }

        /// Minimality on small integer clouds, where exact arithmetic is available
        /// (i64 cross products): the frontier is exactly the set of Pareto-undominated
        /// points with d > 0 that lie on or above every chord between two other such points
        /// (or the origin, when no point has e = 0) — the upper hull including its collinear
        /// boundary points. The 2⁻⁴⁸ margin cannot matter here: a strictly-below integer
        /// point is below its chord by ≥ 1/(Δe) ≥ 1/40 absolute, i.e. ≥ 1/800 relative.
        #[test]
        fn frontier_is_exact_hull_on_integers(
            pts in proptest::collection::vec((0i64..20, 0i64..20), 1..40)
        ) {
            let fpts: Vec<(f64, f64)> = pts.iter().map(|&(d, e)| (d as f64, e as f64)).collect();
            let f = front(&fpts);
            // Brute force.
            let mut stair: Vec<(i64, i64)> = Vec::new();
            for &(d, e) in &pts {
                if d == 0 {
                    continue;
                }
                let dominated = pts.iter().any(|&(d2, e2)| {
                    (d2, e2) != (d, e) && d2 >= d && e2 <= e
                });
                if !dominated && !stair.contains(&(d, e)) {
                    stair.push((d, e));
                }
            }
            let mut anchors = stair.clone();
            if !stair.iter().any(|&(_, e)| e == 0) {
                anchors.push((0, 0));
            }
            let mut want: Vec<(f64, f64)> = stair
                .iter()
                .filter(|&&(db, eb)| {
                    !anchors.iter().any(|&(da, ea)| {
                        anchors.iter().any(|&(dp, ep)| {
                            // b strictly below the chord a–p, with e_a < e_b < e_p:
                            // (d_b − d_a)(e_p − e_a) < (d_p − d_a)(e_b − e_a).
                            ea < eb && eb < ep
                                && (db - da) * (ep - ea) < (dp - da) * (eb - ea)
                        })
                    })
                })
                .map(|&(d, e)| (d as f64, e as f64))
                .collect();
            want.sort_by(|x, y| x.1.total_cmp(&y.1));
            prop_assert_eq!(f, want);
        }
    }

    #[test]
    fn frontier_examples() {
        // (d, e). A = (1, 1) is beaten by B = (2.5, 2) for every tolerance (B's d/e and d
        // are both larger, and A lies below the origin–B chord); C = (3, 10) is the
        // largest d; D = (2, 5) is dominated by B.
        let f = front(&[(1.0, 1.0), (2.5, 2.0), (3.0, 10.0), (2.0, 5.0), (0.0, 0.0)]);
        assert_eq!(f, vec![(2.5, 2.0), (3.0, 10.0)]);
        // With an e = 0 point, it is the left end and A survives if it is above the chord
        // from (0.5, 0) to B: at e = 1 the chord is 1.5 > 1, so A goes.
        let f = front(&[(1.0, 1.0), (2.5, 2.0), (0.5, 0.0)]);
        assert_eq!(f, vec![(0.5, 0.0), (2.5, 2.0)]);
        // An infinite difference dominates everything.
        let f = front(&[(1.0, 1.0), (f64::INFINITY, 3.0), (f64::INFINITY, 2.0)]);
        assert_eq!(f, vec![(f64::INFINITY, 2.0)]);
        assert_eq!(usage(&f, 1.0, 1.0), f64::INFINITY);
        // Nothing but zeros.
        assert!(front(&[(0.0, 1.0), (0.0, 0.0)]).is_empty());
        assert_eq!(usage(&[], 1.0, 0.0), 0.0);
        // Zero allowance: d/0 = +inf, as in `Tolerance::usage`.
        assert_eq!(usage(&[(1.0, 0.0)], 0.0, 1.0), f64::INFINITY);
    }

    #[test]
    fn recommendation_examples() {
        // One point per seed, (d, e) = (2, 1), (1, 1), (4, 1); rtol 1, target 1: needs
        // d − 1 = 1, 0, 3 (exact in f64). k = 0 → 3; k = 1 → 1 in real arithmetic, but the
        // float just below 1 also passes: 1 + (1 − 2⁻⁵³) rounds (to even) to 2, so the
        // computed usage of (2, 1) there is exactly 1 — the settled answer is 1 − 2⁻⁵³. At
        // 3 − 2⁻⁵¹ the sum 4 − 2⁻⁵¹ is representable and the usage exceeds 1: 3 stays.
        // k = 2 → 0; k = 3 → 0.
        let fr = vec![vec![(2.0, 1.0)], vec![(1.0, 1.0)], vec![(4.0, 1.0)]];
        assert_eq!(min_atol(&fr, 1.0, 1.0, 0), 3.0);
        assert_eq!(min_atol(&fr, 1.0, 1.0, 1), 1.0f64.next_down());
        assert_eq!(min_atol(&fr, 1.0, 1.0, 2), 0.0);
        assert_eq!(min_atol(&fr, 1.0, 1.0, 3), 0.0);
        // rtol at atol 1: needs (d − 1)/1 = 1, 0, 3.
        assert_eq!(min_rtol(&fr, 1.0, 1.0, 0), 3.0);
        // Balanced with ratio 1: s ≥ d/(1 + 1) = 1, 0.5, 2.
        assert_eq!(balanced(&fr, 1.0, 1.0, 0), (2.0, 2.0));
        assert_eq!(balanced(&fr, 1.0, 1.0, 1), (1.0, 1.0));
        // e = 0 with d > atol·target: no rtol helps.
        let z = vec![vec![(1.0, 0.0)]];
        assert_eq!(min_rtol(&z, 0.5, 1.0, 0), f64::INFINITY);
        assert_eq!(min_rtol(&z, 0.5, 1.0, 1), 0.0);
        assert_eq!(min_rtol(&z, 1.0, 1.0, 0), 0.0);
        assert_eq!(balanced(&z, 0.0, 1.0, 0).1, f64::INFINITY);
        assert_eq!(balanced(&z, f64::INFINITY, 1.0, 0), (1.0, 0.0));
        // Infinite d: no finite atol.
        let inf = vec![vec![(f64::INFINITY, 1.0)]];
        assert_eq!(min_atol(&inf, 1.0, 1.0, 0), f64::INFINITY);
    }

    /// Independent analytic value: the (k+1)-th largest need over *all* points of each seed
    /// (not the frontier), in the test's own sort.
    fn analytic(needs: impl Iterator<Item = f64>, k: usize) -> f64 {
        let mut v: Vec<f64> = needs.collect();
        v.sort_unstable_by(|x, y| y.total_cmp(x));
        v.get(k).copied().unwrap_or(0.0)
    }

    fn count(fr: &[Vec<(f64, f64)>], a: f64, r: f64, t: f64) -> usize {
        fr.iter().filter(|f| usage(f, a, r) > t).count()
    }

    proptest! {
        /// Recommendations against brute force. For each: (1) at the result, ≤ k seeds are
        /// above target and at the next float below, > k (unless the result is 0): the
        /// result is the exact smallest representable value; (2) it agrees with the
        /// analytic order statistic computed over all points (not the frontier) to
        /// 1e-13·M, M the largest |term| in any need (d/T, rtol·e, atol·…): both are
        /// roundings of the same real threshold, each within ~6u·M ≈ 7e-16·M, so 1e-13 is
        /// a loose bound that still catches any mistake in the math.
        #[test]
        fn recommendations_match_brute_force(
            seed: u64,
            seeds in 1usize..25,
            k in 0usize..6,
            rtol_exp in -8.0f64..0.0,
            atol_exp in -8.0f64..0.0,
            target in 0.1f64..2.0,
            ratio_exp in -6.0f64..6.0,
            zero_rtol in proptest::bool::weighted(0.15),
        ) {
            let clouds: Vec<Vec<(f64, f64)>> =
                (0..seeds).map(|s| cloud(seed.wrapping_add(s as u64 * 7919), 12)).collect();
            let fr: Vec<Vec<(f64, f64)>> = clouds.iter().map(|c| front(c)).collect();
            let rtol = if zero_rtol { 0.0 } else { libm::pow(10.0, rtol_exp) };
            let atol = libm::pow(10.0, atol_exp);
            let ratio = libm::pow(10.0, ratio_exp);

            // min_atol
            let a = min_atol(&fr, rtol, target, k);
            prop_assert!(count(&fr, a, rtol, target) <= k);
            prop_assert!(count(&clouds, a, rtol, target) <= k, "frontier vs all points");
            if a > 0.0 {
                prop_assert!(count(&fr, a.next_down(), rtol, target) > k);
            }
            let want = analytic(clouds.iter().map(|c| {
                c.iter().map(|&(d, e)| d / target - rtol * e).fold(0.0, f64::max)
            }), k);
            let m = clouds.iter().flatten()
                .map(|&(d, e)| (d / target).max(rtol * e)).fold(0.0, f64::max);
            prop_assert!((a - want).abs() <= 1e-13 * m, "atol {} vs {}", a, want);

            // min_rtol
            let r = min_rtol(&fr, atol, target, k);
            if r.is_finite() {
                prop_assert!(count(&fr, atol, r, target) <= k);
                if r > 0.0 {
                    prop_assert!(count(&fr, atol, r.next_down(), target) > k);
                }
            } else {
                prop_assert!(count(&fr, atol, f64::MAX, target) > k);
            }
            let want_r = analytic(clouds.iter().map(|c| {
                c.iter().map(|&(d, e)| {
                    if e > 0.0 { (d / target - atol) / e }
                    else if d / atol > target { f64::INFINITY } else { 0.0 }
                }).fold(0.0, f64::max)
            }), k);
            if want_r.is_finite() {
                // Relative to the need's own scale: (d/T + atol)/e for the terms involved.
                let m_r = clouds.iter().flatten().filter(|p| p.1 > 0.0)
                    .map(|&(d, e)| (d / target + atol) / e).fold(0.0, f64::max);
                prop_assert!((r - want_r).abs() <= 1e-13 * m_r, "rtol {} vs {}", r, want_r);
            } else {
                prop_assert_eq!(r, f64::INFINITY);
            }

            // balanced
            let (ba, br) = balanced(&fr, ratio, target, k);
            prop_assert_eq!(ba, ratio * br);
            if br.is_finite() {
                prop_assert!(count(&fr, ba, br, target) <= k);
                if br > 0.0 {
                    let s = br.next_down();
                    prop_assert!(count(&fr, ratio * s, s, target) > k);
                }
                let want_s = analytic(clouds.iter().map(|c| {
                    c.iter().map(|&(d, e)| d / (ratio + e) / target).fold(0.0, f64::max)
                }), k);
                let m_s = clouds.iter().flatten()
                    .map(|&(d, e)| d / (ratio + e) / target).fold(0.0, f64::max);
                prop_assert!((br - want_s).abs() <= 1e-13 * m_s, "s {} vs {}", br, want_s);
            }
        }
    }
}
