//! A check's frontier taken from its pairs chunk by chunk, reading each chunk once:
//! [`FrontierStream::offer`] takes consecutive chunks of (actual, expected) pairs,
//! [`FrontierStream::finish`] gives the frontier of all of them, the one [`frontier`] gives
//! of the points [`super::prefilter`] keeps of all the pairs, bit for bit.
//!
//! Why this is the same frontier: the prefilter's anchors need every point, so every point
//! goes to [`scan_anchors`] in order. The points themselves are not kept: only the Pareto
//! staircase of the points so far is ([`staircase_merge`]; no other point can be on the
//! frontier, see [`super::staircase_merge`] on why dropping dominated points keeps the
//! frontier bit for bit). The staircase of a set is a set function, so merging each chunk's
//! points into the staircase of the earlier ones gives the staircase of all. And a point
//! that some staircase point dominates can be left out of a merge: it is in no later
//! staircase either (dominance is transitive, and a staircase point is only ever replaced
//! by one that dominates it).
//!
//! The screen ([`FrontierStream::offer`]'s order of operations): per pair, the point
//! q = [`pair_point`]; q goes to the merge only when d_q > 0 and d_q > `below`[k(e_q)], where
//! k(e) = the top bits of e's bit pattern ([`BELOW_SHIFT`]: the exponent and one mantissa
//! bit; e ≥ 0, so k is monotone in e) and `below`[k] is the largest d of a staircase point
//! with k(e) < k. Such a point has e < e_q, so when its d ≥ d_q it dominates q. The table is
//! rebuilt when a merge changes the staircase.
//!
//! **Large staircases.** A merge sorts the staircase with the new points once the staircase
//! has more than [`super::SMALL_STAIRCASE`] points, so merging every chunk into a staircase
//! of h points would cost O(h log h) per chunk: quadratic in the pairs when most points are
//! on the staircase (a mutant that zeroes a gradient gives d = e on every zeroed element, a
//! staircase as long as the tensor). From [`DEFER_FROM`] points on, the points that pass the
//! screen wait in a pool, and the pool is merged once it holds as many points as the
//! staircase: every merge at least doubles what has been merged since the one before, so
//! each point takes part in O(log) merges. The screen meanwhile uses the table of the last
//! merge: the points of an older staircase are still points offered, so what it drops is
//! still dominated; it only lets more through.

use super::{
    frontier, is_staircase, merge_staircases, pair_point, scan_anchors, staircase_in_place,
    staircase_merge, AnchorScan, SMALL_STAIRCASE,
};
use crate::kernels::isa::Isa;

/// Staircase length from which screened points are pooled between merges (module doc).
pub(super) const DEFER_FROM: usize = 4096;

/// e's bits from this one up index the screen's table: 11 exponent bits and 2 mantissa
/// bits, four table entries per binade.
pub(super) const BELOW_SHIFT: u32 = 50;

/// Entries of the screen's table: every k(e) of an e ≥ 0 (the sign bit is 0).
pub(super) const BELOW_LEN: usize = 1 << (63 - BELOW_SHIFT);

/// The screen's table index of e ≥ 0 (see the module doc).
#[inline]
fn below_index(e: f64) -> usize {
    (e.to_bits() >> BELOW_SHIFT) as usize
}

/// One check's frontier, fed chunk by chunk (see the module doc). Memory: the staircase and
/// a table of [`BELOW_LEN`] floats, whatever the number of pairs.
#[derive(Debug, Clone)]
pub struct FrontierStream {
    scan: AnchorScan,
    stairs: Vec<(f64, f64)>,
    /// The screen: per index k, the largest d of a staircase point whose e has a smaller
    /// index (0 where there is none).
    below: Box<[f64; BELOW_LEN]>,
    /// Points that passed the screen, waiting for the merge (scratch).
    pending: Vec<(f64, f64)>,
    /// The staircase before a merge (scratch), to tell whether the merge changed it.
    before: Vec<(f64, f64)>,
    /// Points that passed the screen and wait for the next merge (a staircase of at least
    /// [`DEFER_FROM`] points only; module doc).
    pool: Vec<(f64, f64)>,
}

impl Default for FrontierStream {
    fn default() -> Self {
        Self {
            scan: AnchorScan::default(),
            stairs: Vec::new(),
            below: Box::new([0.0; BELOW_LEN]),
            pending: Vec::new(),
            before: Vec::new(),
            pool: Vec::new(),
        }
    }
}

impl FrontierStream {
    /// Offers the next chunk of pairs: every point to the anchor scan in order, and the
    /// points that pass the screen to the staircase.
    pub fn offer(&mut self, actual: &[f64], expected: &[f64]) {
        scan_anchors(actual, expected, &mut self.scan);
        let pending = &mut self.pending;
        pending.clear();
        screen(Isa::detected(), actual, expected, &self.below, pending);
        if pending.is_empty() {
            return;
        }
        if self.stairs.len() < DEFER_FROM && self.pool.is_empty() {
            merge_into(&mut self.stairs, pending, &mut self.before, &mut self.below);
            return;
        }
        self.pool.append(pending);
        if self.pool.len() >= self.stairs.len() {
            self.merge_pool();
        }
    }

    /// Merges the pooled points into the staircase.
    fn merge_pool(&mut self) {
        if !self.pool.is_empty() {
            merge_into(
                &mut self.stairs,
                &mut self.pool,
                &mut self.before,
                &mut self.below,
            );
        }
    }

    /// Takes in the stream of the pairs that come after every pair offered so far, as if
    /// its chunks had been offered here: the anchor scans merged in that order
    /// ([`AnchorScan::merge`]) and the two staircases merged (the staircase of a set does not
    /// depend on how the set is split; see the module doc).
    pub fn absorb(&mut self, mut later: FrontierStream) {
        self.scan.merge(&later.scan);
        later.merge_pool();
        if later.stairs.is_empty() {
            return;
        }
        self.merge_pool();
        merge_into(
            &mut self.stairs,
            &mut later.stairs,
            &mut self.before,
            &mut self.below,
        );
    }

    /// The frontier of every point offered: the prefilter's test with the anchors of all
    /// points, applied to the staircase, then [`frontier`].
    pub fn finish(mut self) -> Vec<(f64, f64)> {
        self.merge_pool();
        let mut pts = self.stairs;
        self.scan.filter(&mut pts);
        let mut f = Vec::new();
        frontier(pts.iter().copied(), &mut f);
        f
    }
}

/// `stairs` replaced by the staircase of `stairs` ∪ `more` (`more` left empty), and the
/// screen's table `below` rebuilt if that changed it. A short staircase is merged by
/// [`staircase_merge`] and compared with its copy in `scratch`; a long one is merged with
/// the staircase of `more` in one pass, in place ([`merge_staircases`], which says whether
/// it changed), instead of being sorted again.
fn merge_into(
    stairs: &mut Vec<(f64, f64)>,
    more: &mut Vec<(f64, f64)>,
    scratch: &mut Vec<(f64, f64)>,
    below: &mut [f64; BELOW_LEN],
) {
    let changed = if stairs.len() <= SMALL_STAIRCASE {
        scratch.clone_from(stairs);
        staircase_merge(stairs, more);
        stairs != scratch
    } else {
        more.retain(|q| q.0 > 0.0);
        if !is_staircase(more) {
            staircase_in_place(more);
        }
        let kept = merge_staircases(stairs, more);
        more.clear();
        kept > 0
    };
    if changed {
        rebuild_below(&mut below[..], stairs);
    }
}

/// Appends, in order, the point of each pair ([`pair_point`]) with d > 0 and d above its
/// e's entry of `below`: the screen of [`FrontierStream::offer`], vectorized where the CPU
/// allows (the same points).
fn screen(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    below: &[f64; BELOW_LEN],
    out: &mut Vec<(f64, f64)>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { super::avx512::screen_pairs(actual, expected, below, out) };
        }
    }
    let _ = isa;
    screen_portable(actual, expected, below, out)
}

/// The definition of the screen (see [`screen`]).
pub fn screen_portable(
    actual: &[f64],
    expected: &[f64],
    below: &[f64; BELOW_LEN],
    out: &mut Vec<(f64, f64)>,
) {
    for (&x, &y) in actual.iter().zip(expected) {
        let q = pair_point(x, y);
        if q.0 > 0.0 && q.0 > below[below_index(q.1)] {
            out.push(q);
        }
    }
}

/// `below`[k] = the largest d of a point of `stairs` (sorted by e ascending, d ascending)
/// whose e has an index below k; 0 where none has.
fn rebuild_below(below: &mut [f64], stairs: &[(f64, f64)]) {
    let mut k = 0;
    let mut largest = 0.0;
    for &(d, e) in stairs {
        let i = below_index(e);
        if i >= k {
            below[k..=i].fill(largest);
            k = i + 1;
        }
        largest = d;
    }
    below[k..].fill(largest);
}

/// Test support: the points the screen of [`FrontierStream::offer`] keeps from the pairs of
/// `actual` and `expected` against the table of the staircase `stairs`, on `isa` and by the
/// portable definition (`tests/isa_paths.rs` checks that they are the same, in order).
#[doc(hidden)]
pub fn screen_both_on(
    isa: Isa,
    actual: &[f64],
    expected: &[f64],
    stairs: &[(f64, f64)],
) -> [Vec<(f64, f64)>; 2] {
    let mut below = Box::new([0.0; BELOW_LEN]);
    rebuild_below(&mut below[..], stairs);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    screen(isa, actual, expected, &below, &mut got);
    screen_portable(actual, expected, &below, &mut want);
    [got, want]
}

#[cfg(test)]
mod tests {
    use super::super::{prefilter, staircase_by_sorting};
    use super::*;
    use proptest::prelude::*;

    /// The all-at-once definition: every point, the prefilter, the frontier.
    fn at_once(a: &[f64], e: &[f64]) -> Vec<(f64, f64)> {
        let mut pts: Vec<_> = a.iter().zip(e).map(|(&x, &y)| pair_point(x, y)).collect();
        prefilter(&mut pts);
        let mut f = Vec::new();
        frontier(pts.iter().copied(), &mut f);
        f
    }

    fn streamed(a: &[f64], e: &[f64], chunk: usize) -> Vec<(f64, f64)> {
        let mut s = FrontierStream::default();
        for (ca, ce) in a.chunks(chunk).zip(e.chunks(chunk)) {
            s.offer(ca, ce);
        }
        s.merge_pool();
        // The staircase kept is the staircase of every point with d > 0 (the frontier
        // below drops most of it, so this is the sharper check of the screen).
        let mut all: Vec<_> = a.iter().zip(e).map(|(&x, &y)| pair_point(x, y)).collect();
        all.retain(|q| q.0 > 0.0);
        staircase_by_sorting(&mut all);
        assert_eq!(
            format!("{:?}", s.stairs),
            format!("{all:?}"),
            "chunk {chunk}"
        );
        s.finish()
    }

    /// Expected values over many binades (or, `narrow`, over four, so that many share a
    /// table index), actual values a few ulps off, some equal, some zero, and (with `odd`)
    /// NaNs and infinities.
    fn pairs(raw: &[(u64, i8, u8)], narrow: bool, odd: bool) -> (Vec<f64>, Vec<f64>) {
        raw.iter()
            .map(|&(bits, ulps, kind)| {
                let e = if narrow {
                    f64::from_bits(0x3ff0_0000_0000_0000 + bits % 0x0040_0000_0000_0000)
                } else {
                    f64::from_bits(bits % 0x4100_0000_0000_0000)
                };
                let a = f64::from_bits(e.to_bits().wrapping_add_signed(ulps as i64));
                match kind % 16 {
                    0 => (e, e),
                    1 => (a, 0.0),
                    2 if odd => (f64::NAN, e),
                    3 if odd => (a, f64::INFINITY),
                    4 => (-a, -e),
                    _ => (a, e),
                }
            })
            .unzip()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn streamed_frontier_equals_the_all_at_once_one(
            raw in prop::collection::vec((any::<u64>(), any::<i8>(), any::<u8>()), 0..600),
            chunk in 1usize..80,
            narrow in any::<bool>(),
            odd in any::<bool>(),
        ) {
            let (a, e) = pairs(&raw, narrow, odd);
            let want = at_once(&a, &e);
            let got = streamed(&a, &e, chunk);
            prop_assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
    }

    /// A line of points whose d rises with e, offered in falling e order: every point
    /// passes the screen of the chunk it comes in and the staircase is rebuilt often; the
    /// same again in rising order, where the screen drops most.
    #[test]
    fn rising_and_falling_lines_give_the_all_at_once_frontier() {
        let e: Vec<f64> = (0..2000).map(|i| 1e-3 * 1.01f64.powi(i)).collect();
        let a: Vec<f64> = e.iter().map(|&y| y * (1.0 + 1e-7)).collect();
        let (ra, re): (Vec<f64>, Vec<f64>) = a.iter().rev().zip(e.iter().rev()).unzip();
        for chunk in [1, 7, 64, 2000] {
            assert_eq!(
                streamed(&a, &e, chunk),
                at_once(&a, &e),
                "rising, chunk {chunk}"
            );
            assert_eq!(
                streamed(&ra, &re, chunk),
                at_once(&ra, &re),
                "falling, chunk {chunk}"
            );
        }
    }

    /// A check whose every point is on the staircase (a zeroed actual tensor: d = e), long
    /// enough that screened points are pooled between merges ([`DEFER_FROM`]) and that the
    /// two halves of a split fold are merged by `absorb`: the same staircase and frontier
    /// as all at once, with and without a point that makes the hull drop the line, and with
    /// the pool still holding points when the halves are joined.
    #[test]
    fn long_staircases_pool_and_absorb_to_the_all_at_once_frontier() {
        let n = 5 * DEFER_FROM + 123;
        let mut rng = crate::stats::gpd::SplitMix64(11);
        let e: Vec<f64> = (0..n).map(|_| rng.uniform() * 4.0 + 0.25).collect();
        let zero = vec![0.0; n];
        for steep in [false, true] {
            let mut a = zero.clone();
            if steep {
                a[n / 3] = 3.0 * e[n / 3];
            }
            let want = at_once(&a, &e);
            let mut all: Vec<_> = a.iter().zip(&e).map(|(&x, &y)| pair_point(x, y)).collect();
            staircase_by_sorting(&mut all);
            assert!(all.len() > 4 * DEFER_FROM, "{} staircase points", all.len());
            for chunk in [1000, 4096] {
                assert_eq!(
                    streamed(&a, &e, chunk),
                    want,
                    "steep {steep}, chunk {chunk}"
                );
                // Two halves, as a split fold takes them.
                let mid = n / 2 + 17;
                let (mut first, mut later) = (FrontierStream::default(), FrontierStream::default());
                for (ca, ce) in a[..mid].chunks(chunk).zip(e[..mid].chunks(chunk)) {
                    first.offer(ca, ce);
                }
                for (ca, ce) in a[mid..].chunks(chunk).zip(e[mid..].chunks(chunk)) {
                    later.offer(ca, ce);
                }
                assert!(!first.pool.is_empty() || !later.pool.is_empty() || chunk == 4096);
                first.absorb(later);
                first.merge_pool();
                assert_eq!(first.stairs, all, "steep {steep}, chunk {chunk}: staircase");
                assert_eq!(
                    first.finish(),
                    want,
                    "steep {steep}, chunk {chunk}: frontier"
                );
            }
        }
    }

    /// The table after a rebuild: each entry is the largest d among staircase points with a
    /// smaller index, by direct search.
    #[test]
    fn the_screen_table_holds_the_largest_d_below_each_index() {
        let mut stairs: Vec<(f64, f64)> = vec![
            (1e-9, 0.0),
            (2e-9, 1e-300),
            (3e-9, 1.0),
            (4e-9, 1.0 + f64::EPSILON),
            (5e-9, 1.5),
            (6e-9, 3.0),
            (f64::INFINITY, 1e300),
        ];
        staircase_by_sorting(&mut stairs);
        let mut below = vec![f64::NAN; BELOW_LEN];
        rebuild_below(&mut below, &stairs);
        for (k, &got) in below.iter().enumerate() {
            let want = stairs
                .iter()
                .filter(|p| below_index(p.1) < k)
                .map(|p| p.0)
                .fold(0.0, f64::max);
            assert_eq!(got.to_bits(), want.to_bits(), "index {k}");
        }
    }
}
