//! All-reduce sums over simulated ranks, in the orders of the collective
//! algorithms.
//!
//! Inputs are `n_ranks` equal-length buffers stored rank-major in one slice:
//! rank `r`'s element `j` is `parts[r * len + j]`.
//!
//! Orders (per element; `+` is one f32 add, `w` the wire rounding below):
//! - [`AllReduceAlgo::RankOrder`]: `((x0 + x1) + x2) + ... + x[n-1]`.
//! - [`AllReduceAlgo::Ring`] (NCCL ring, numerics.md): the message is cut into
//!   n chunks, chunk `c` = elements `[c*len/n, (c+1)*len/n)` (integer
//!   division). Chunk `c` is reduced along the ring starting at rank `c+1`:
//!   `((x[c+1] + x[c+2]) + ...) + x[c]` (indices mod n); the finished chunk is
//!   then copied unchanged to every rank.
//! - [`AllReduceAlgo::Tree`]: recursive halving over rank ranges,
//!   `S(lo..hi) = x[lo]` if `hi - lo == 1`, else
//!   `S(lo..hi) = S(lo..mid) + S(mid..hi)` with `mid = lo + (hi - lo).div_ceil(2)`
//!   (e.g. 5 ranks: `((x0 + x1) + x2) + (x3 + x4)`); the root's result is then
//!   broadcast unchanged.
//!
//! Wire ([`Wire`]): `F32` adds and stores in f32. `Bf16` models an all-reduce on
//! a bf16 buffer: every input is rounded to bf16 ([`bf16_rne`]) before it
//! enters, and every partial sum is rounded to bf16 (RNE) right after each f32
//! add (NCCL adds in f32 and stores bf16), i.e. `a (+) b = bf16_rne(a + b)`.
//! The result then consists of bf16 values held in f32.
//!
//! With 2 ranks every algorithm gives `x0 + x1` (IEEE addition is commutative).

use super::round::bf16_rne;

/// All-reduce algorithm (summation order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllReduceAlgo {
    /// NCCL ring: chunk c folded from rank c+1 around to rank c.
    Ring,
    /// `((x0 + x1) + x2) + ...`.
    RankOrder,
    /// Recursive halving over rank ranges (module doc).
    Tree,
}

/// Element type on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    /// f32 buffers: no extra rounding.
    F32,
    /// bf16 buffers: inputs and every partial sum rounded with `bf16_rne`.
    Bf16,
}

impl Wire {
    /// Rounding applied to inputs and to every partial sum.
    #[inline(always)]
    fn w(self, x: f32) -> f32 {
        match self {
            Wire::F32 => x,
            Wire::Bf16 => bf16_rne(x),
        }
    }

    #[inline(always)]
    fn add(self, a: f32, b: f32) -> f32 {
        self.w(a + b)
    }
}

fn check(parts: &[f32], n_ranks: usize) -> usize {
    assert!(n_ranks > 0, "all_reduce: n_ranks must be positive");
    assert_eq!(
        parts.len() % n_ranks,
        0,
        "all_reduce: parts.len() is not a multiple of n_ranks"
    );
    parts.len() / n_ranks
}

/// Sums `n_ranks` equal-length buffers stored rank-major in `parts`
/// (`parts.len() == n_ranks * out.len()`) into `out`, in the order of `algo`
/// with `wire` roundings (module doc). Allocates nothing.
///
/// Panics if `n_ranks == 0` or the lengths do not match.
pub fn all_reduce_sum(
    algo: AllReduceAlgo,
    wire: Wire,
    parts: &[f32],
    n_ranks: usize,
    out: &mut [f32],
) {
    let len = check(parts, n_ranks);
    assert_eq!(out.len(), len, "all_reduce: out has the wrong length");
    let x = |r: usize, j: usize| wire.w(parts[r * len + j]);
    // RankOrder and Ring: each element's sum is a chain over the ranks in a fixed order
    // (per chunk for Ring), s = w(x₀), then s = add(s, w(xₜ)) for the next ranks in turn.
    // The loops run rank by rank over a whole range of elements, each element's chain in
    // the same order, so the inner loops index no rank and divide nothing.
    let chain = |out: &mut [f32], lo: usize, ranks: &mut dyn Iterator<Item = usize>| {
        let hi = lo + out.len();
        if let Some(r0) = ranks.next() {
            for (o, &v) in out.iter_mut().zip(&parts[r0 * len + lo..r0 * len + hi]) {
                *o = wire.w(v);
            }
        }
        for r in ranks {
            for (o, &v) in out.iter_mut().zip(&parts[r * len + lo..r * len + hi]) {
                *o = wire.add(*o, wire.w(v));
            }
        }
    };
    match algo {
        AllReduceAlgo::RankOrder => chain(out, 0, &mut (0..n_ranks)),
        AllReduceAlgo::Ring => {
            for c in 0..n_ranks {
                let lo = c * len / n_ranks;
                let hi = (c + 1) * len / n_ranks;
                chain(
                    &mut out[lo..hi],
                    lo,
                    &mut (1..=n_ranks).map(|t| (c + t) % n_ranks),
                );
            }
        }
        AllReduceAlgo::Tree => {
            for (j, o) in out.iter_mut().enumerate() {
                *o = tree_elem(&x, wire, j, 0, n_ranks);
            }
        }
    }
}

fn tree_elem(x: &impl Fn(usize, usize) -> f32, wire: Wire, j: usize, lo: usize, hi: usize) -> f32 {
    if hi - lo == 1 {
        return x(lo, j);
    }
    let mid = lo + (hi - lo).div_ceil(2);
    wire.add(
        tree_elem(x, wire, j, lo, mid),
        tree_elem(x, wire, j, mid, hi),
    )
}

/// Simulates the collective message by message and returns every rank's copy
/// of the result (for tests: all ranks must hold bitwise-identical results,
/// equal to [`all_reduce_sum`]).
///
/// - Ring: reduce-scatter in n-1 steps (at step s, rank r receives from rank
///   r-1 its partial of chunk `(r - s - 1) mod n` and adds its own data), then
///   all-gather in n-1 steps copying finished chunks around the ring.
/// - RankOrder: rank 0 receives from ranks 1, 2, ... in turn, then broadcasts.
/// - Tree: each tree node's left child receives the right child's whole
///   partial buffer, root = rank 0, then the root broadcasts.
pub fn all_reduce_sum_per_rank(
    algo: AllReduceAlgo,
    wire: Wire,
    parts: &[f32],
    n_ranks: usize,
) -> Vec<Vec<f32>> {
    let len = check(parts, n_ranks);
    // Each rank's own buffer, as it sits on the wire type.
    let mut buf: Vec<Vec<f32>> = (0..n_ranks)
        .map(|r| {
            parts[r * len..(r + 1) * len]
                .iter()
                .map(|&v| wire.w(v))
                .collect()
        })
        .collect();
    let chunk = |c: usize| c * len / n_ranks..(c + 1) * len / n_ranks;
    match algo {
        AllReduceAlgo::Ring => {
            let n = n_ranks;
            // Reduce-scatter: the message each rank sends at a step is taken
            // from the buffers as they were before the step.
            for s in 0..n - 1 {
                let msgs: Vec<(usize, Vec<f32>)> = (0..n)
                    .map(|r| {
                        let c = (r + n - s % n + n - 1) % n; // chunk r sends: r - s - 1
                        (c, buf[r][chunk(c)].to_vec())
                    })
                    .collect();
                for (src, (c, data)) in msgs.into_iter().enumerate() {
                    let dst = (src + 1) % n;
                    for (o, v) in buf[dst][chunk(c)].iter_mut().zip(data) {
                        *o = wire.add(v, *o); // received partial + own data
                    }
                }
            }
            // Now rank r holds the finished chunk r. All-gather: at step s,
            // rank r forwards finished chunk (r - s) to rank r + 1.
            for s in 0..n - 1 {
                let msgs: Vec<(usize, Vec<f32>)> = (0..n)
                    .map(|r| {
                        let c = (r + n - s % n) % n;
                        (c, buf[r][chunk(c)].to_vec())
                    })
                    .collect();
                for (src, (c, data)) in msgs.into_iter().enumerate() {
                    buf[(src + 1) % n][chunk(c)].copy_from_slice(&data);
                }
            }
            buf
        }
        AllReduceAlgo::RankOrder => {
            for r in 1..n_ranks {
                let data = buf[r].clone();
                for (o, v) in buf[0].iter_mut().zip(data) {
                    *o = wire.add(*o, v);
                }
            }
            let root = buf[0].clone();
            vec![root; n_ranks]
        }
        AllReduceAlgo::Tree => {
            tree_reduce_buffers(&mut buf, wire, 0, n_ranks);
            let root = buf[0].clone();
            vec![root; n_ranks]
        }
    }
}

/// Reduces ranks lo..hi into rank lo, whole buffers at a time.
fn tree_reduce_buffers(buf: &mut [Vec<f32>], wire: Wire, lo: usize, hi: usize) {
    if hi - lo <= 1 {
        return;
    }
    let mid = lo + (hi - lo).div_ceil(2);
    tree_reduce_buffers(buf, wire, lo, mid);
    tree_reduce_buffers(buf, wire, mid, hi);
    let (left, right) = buf.split_at_mut(mid);
    for (o, &v) in left[lo].iter_mut().zip(&right[0]) {
        *o = wire.add(*o, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALGOS: [AllReduceAlgo; 3] = [
        AllReduceAlgo::Ring,
        AllReduceAlgo::RankOrder,
        AllReduceAlgo::Tree,
    ];
    const WIRES: [Wire; 2] = [Wire::F32, Wire::Bf16];

    fn run(algo: AllReduceAlgo, wire: Wire, parts: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; parts.len() / n];
        all_reduce_sum(algo, wire, parts, n, &mut out);
        out
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn lcg_parts(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                u * 2f32.powi(((s >> 8) % 17) as i32 - 8)
            })
            .collect()
    }

    #[test]
    fn rank_order_by_hand() {
        // 3 ranks, 2 elements. Element 0: (1 + 2^24) -> 2^24 (tie, even),
        // then + 1 -> 2^24. Element 1: (0.5 + 0.25) + 0.125 = 0.875 exactly.
        let t = 2f32.powi(24);
        let parts = [1.0, 0.5, t, 0.25, 1.0, 0.125];
        assert_eq!(
            run(AllReduceAlgo::RankOrder, Wire::F32, &parts, 3),
            vec![t, 0.875]
        );
    }

    #[test]
    fn ring_differs_from_rank_order_by_hand() {
        // 3 ranks, len 3, so chunk c is element c. Element 0 (chunk 0) is summed
        // x1 + x2 + x0 on the ring; element 1: x2 + x0 + x1; element 2:
        // x0 + x1 + x2 (same as rank order).
        // Put (1, 2^24, -2^24) at element 0 of ranks 0, 1, 2:
        // rank order: (1 + 2^24) = 2^24, - 2^24 = 0; ring: (2^24 - 2^24) + 1 = 1.
        // Element 1: (x0, x1, x2) = (2^24, -2^24, 1): rank order (0) + 1 = 1,
        // ring x2 + x0 = 1 + 2^24 -> 2^24, + x1 = 0.
        let t = 2f32.powi(24);
        let parts = [1.0, t, 3.0, t, -t, 4.0, -t, 1.0, 5.0];
        let ring = run(AllReduceAlgo::Ring, Wire::F32, &parts, 3);
        let rank = run(AllReduceAlgo::RankOrder, Wire::F32, &parts, 3);
        assert_eq!(ring, vec![1.0, 0.0, 12.0]);
        assert_eq!(rank, vec![0.0, 1.0, 12.0]);
        // Tree with 3 ranks is (x0 + x1) + x2, rank order here.
        assert_eq!(run(AllReduceAlgo::Tree, Wire::F32, &parts, 3), rank);
    }

    #[test]
    fn ring_chunking_by_hand() {
        // 4 ranks, len 6: chunks [0,1) [1,3) [3,4) [4,6). Element 5 is in chunk
        // 3, reduced as x0 + x1 + x2 + x3; element 3 in chunk 2: x3 + x0 + x1 + x2.
        // Values chosen so the start rank decides the result: (2^24, 1, 1, -2^24)
        // from rank 0 onwards gives 0 in rank order, and starting at rank 3:
        // (-2^24 + 2^24) + 1 + 1 = 2.
        let t = 2f32.powi(24);
        let mut parts = vec![0.0f32; 24];
        for (r, v) in [t, 1.0, 1.0, -t].into_iter().enumerate() {
            parts[r * 6 + 3] = v;
            parts[r * 6 + 5] = v;
        }
        let ring = run(AllReduceAlgo::Ring, Wire::F32, &parts, 4);
        assert_eq!(ring[5], 0.0);
        assert_eq!(ring[3], 2.0);
        // Tree with 4 ranks: (x0 + x1) + (x2 + x3) = 2^24 + (1 - 2^24) = 1.
        assert_eq!(run(AllReduceAlgo::Tree, Wire::F32, &parts, 4)[3], 1.0);
    }

    #[test]
    fn tree_by_hand_five_ranks() {
        // ((x0 + x1) + x2) + (x3 + x4) with x = (2^24, 1, 1, 1, 1):
        // 2^24 + 1 -> 2^24, + 1 -> 2^24; 1 + 1 = 2; 2^24 + 2. Rank order: 2^24.
        let t = 2f32.powi(24);
        let parts = [t, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(
            run(AllReduceAlgo::Tree, Wire::F32, &parts, 5),
            vec![t + 2.0]
        );
        assert_eq!(run(AllReduceAlgo::RankOrder, Wire::F32, &parts, 5), vec![t]);
    }

    #[test]
    fn every_rank_holds_identical_result_equal_to_all_reduce_sum() {
        for n in 1..=9 {
            for len in [0usize, 1, 2, 5, 17, 64] {
                let parts = lcg_parts(n as u64 * 100 + len as u64, n * len);
                for algo in ALGOS {
                    for wire in WIRES {
                        let want = bits(&run(algo, wire, &parts, n));
                        let per = all_reduce_sum_per_rank(algo, wire, &parts, n);
                        assert_eq!(per.len(), n);
                        for (r, v) in per.iter().enumerate() {
                            assert_eq!(bits(v), want, "{algo:?} {wire:?} n={n} len={len} rank {r}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn orders_differ_on_random_data() {
        // With 5 ranks and 200 elements, the three orders must not all agree
        // (otherwise the per-rank test above could not tell them apart).
        let parts = lcg_parts(11, 5 * 200);
        let r = bits(&run(AllReduceAlgo::Ring, Wire::F32, &parts, 5));
        let o = bits(&run(AllReduceAlgo::RankOrder, Wire::F32, &parts, 5));
        let t = bits(&run(AllReduceAlgo::Tree, Wire::F32, &parts, 5));
        assert_ne!(r, o);
        assert_ne!(t, o);
        assert_ne!(r, t);
    }

    #[test]
    fn bf16_wire_by_hand_and_differs_from_f32() {
        // Inputs 1 + 2^-10 round to 1 on entry (bf16 keeps 8 bits); partial sums
        // round too: 1 + 1 = 2, 2 + 1 = 3, 3 + 1.0078125 (= 1 + 2^-7, a bf16)
        // = 4.0078125 -> bf16 spacing at 4 is 2^-5, so -> 4.
        let parts = [1.0 + 2f32.powi(-10), 1.0, 1.0, 1.0 + 2f32.powi(-7)];
        for algo in ALGOS {
            let bf = run(algo, Wire::Bf16, &parts, 4);
            let f = run(algo, Wire::F32, &parts, 4);
            assert_eq!(bf, vec![4.0], "{algo:?}");
            assert_eq!(f, vec![4.0 + 2f32.powi(-10) + 2f32.powi(-7)], "{algo:?}");
        }
        // Results on the bf16 wire are bf16 values.
        let parts = lcg_parts(5, 4 * 50);
        for algo in ALGOS {
            let bf = run(algo, Wire::Bf16, &parts, 4);
            assert!(bf.iter().all(|x| x.to_bits() & 0xFFFF == 0));
            assert_ne!(bits(&bf), bits(&run(algo, Wire::F32, &parts, 4)));
        }
    }

    #[test]
    fn two_ranks_all_algorithms_equal_x0_plus_x1() {
        let parts = lcg_parts(3, 2 * 33);
        for wire in WIRES {
            let want: Vec<u32> = (0..33)
                .map(|j| wire.add(wire.w(parts[j]), wire.w(parts[33 + j])).to_bits())
                .collect();
            for algo in ALGOS {
                assert_eq!(bits(&run(algo, wire, &parts, 2)), want, "{algo:?} {wire:?}");
            }
        }
    }

    #[test]
    fn one_rank_is_identity_on_the_wire() {
        let parts = lcg_parts(9, 10);
        for algo in ALGOS {
            assert_eq!(bits(&run(algo, Wire::F32, &parts, 1)), bits(&parts));
            let w: Vec<f32> = parts.iter().map(|&x| bf16_rne(x)).collect();
            assert_eq!(bits(&run(algo, Wire::Bf16, &parts, 1)), bits(&w));
        }
    }

    #[test]
    #[should_panic(expected = "n_ranks must be positive")]
    fn zero_ranks_panics() {
        all_reduce_sum(AllReduceAlgo::Ring, Wire::F32, &[], 0, &mut []);
    }
}
