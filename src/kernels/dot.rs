//! Scalar reference dot products, one per accumulation order.
//!
//! These are the specification of the orders: the fast kernels in
//! [`super::matmul`] are tested bit for bit against them. Each function states
//! its order. All f32 functions return `+0.0` for empty inputs.
//!
//! Signed zeros: a chain starts at `+0.0`, so an all-(-0) chain gives `+0.0`;
//! a pairwise tree has no starting value, so a one-element tree is that
//! product itself (possibly `-0.0`). The matmul kernels reproduce this exactly.

use super::matmul::{Accum, KSplit};

/// `c = +0; for k ascending: c = fma(a[k], b[k], c)` (one rounding per step).
///
/// Panics if `a.len() != b.len()`.
pub fn dot_fma_chain(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let mut c = 0.0f32;
    for (&x, &y) in a.iter().zip(b) {
        c = x.mul_add(y, c);
    }
    c
}

/// `c = +0; for k ascending: c = c + fl(a[k] * b[k])` (two roundings per step,
/// never contracted: Rust does not fuse `a * b + c`).
///
/// Panics if `a.len() != b.len()`.
pub fn dot_mul_add(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let mut c = 0.0f32;
    for (&x, &y) in a.iter().zip(b) {
        c += x * y;
    }
    c
}

/// Products rounded to f32, then a recursive pairwise sum with this split rule:
/// `S(lo..hi) = p[lo]` if `hi - lo == 1`, else
/// `S(lo..hi) = S(lo..mid) + S(mid..hi)` with `mid = lo + (hi - lo).div_ceil(2)`
/// (the left half takes the larger half). E.g. 5 terms:
/// `((p0 + p1) + p2) + (p3 + p4)`. Empty input gives `+0.0`.
///
/// Panics if `a.len() != b.len()`.
pub fn dot_pairwise(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    if a.is_empty() {
        return 0.0;
    }
    pairwise_rec(a, b)
}

fn pairwise_rec(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    if n == 1 {
        return a[0] * b[0];
    }
    let mid = n.div_ceil(2);
    pairwise_rec(&a[..mid], &b[..mid]) + pairwise_rec(&a[mid..], &b[mid..])
}

/// The K range is cut into blocks by `split` ([`KSplit::for_each_block`]); each
/// block is reduced independently in `accum` order (Fma / MulAdd: a chain from
/// `+0`, as [`dot_fma_chain`] / [`dot_mul_add`]; Pairwise: the tree of
/// [`dot_pairwise`] over the block); block results are combined left to right
/// with plain f32 adds: `((b0 + b1) + b2) + ...`. No blocks (K = 0) gives `+0.0`.
///
/// Panics if `a.len() != b.len()`.
pub fn dot_blocked(a: &[f32], b: &[f32], split: KSplit, accum: Accum) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let mut c: Option<f32> = None;
    split.for_each_block(a.len(), |r| {
        let (x, y) = (&a[r.clone()], &b[r]);
        let v = match accum {
            Accum::Fma => dot_fma_chain(x, y),
            Accum::MulAdd => dot_mul_add(x, y),
            Accum::Pairwise => dot_pairwise(x, y),
        };
        c = Some(match c {
            None => v,
            Some(c) => c + v,
        });
    });
    c.unwrap_or(0.0)
}

/// `c = +0; for k ascending: c = c + a[k] * b[k]` in f64, no fma.
///
/// Panics if `a.len() != b.len()`.
pub fn dot_f64(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let mut c = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        c += x * y;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// f32 values over a wide exponent range (no NaN/inf), so that roundings,
    /// cancellations and occasional underflow all occur.
    fn wide_f32() -> impl Strategy<Value = f32> {
        (any::<bool>(), 0u32..0x80_0000, 60u32..180).prop_map(|(neg, m, e)| {
            let x = f32::from_bits((e << 23) | m);
            if neg {
                -x
            } else {
                x
            }
        })
    }

    fn pair_vecs(max_len: usize) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
        (0..max_len).prop_flat_map(|n| {
            (
                proptest::collection::vec(wide_f32(), n),
                proptest::collection::vec(wide_f32(), n),
            )
        })
    }

    /// Exactness check for `a * b + c` in f64: `a * b` is exact in f64 (48 bits);
    /// Fast2Sum-style error term of the f64 addition tells whether `s` is exact.
    fn f64_fma_if_exact(a: f32, b: f32, c: f32) -> Option<f32> {
        let p = a as f64 * b as f64;
        let c = c as f64;
        let s = p + c;
        // TwoSum (Knuth): err == 0 iff s == p + c exactly.
        let bb = s - p;
        let err = (p - (s - bb)) + (c - bb);
        if err == 0.0 && s.is_finite() {
            Some(s as f32) // one rounding from the exact value
        } else {
            None
        }
    }

    #[test]
    fn hand_example_fma_vs_mul_add_differ() {
        // a0*b0 = -(1 + 2^-11) exactly; a1*b1 = (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24.
        // mul-add rounds the second product first: 2^-24 is half an ulp of 1 and
        // the kept lsb is even, so fl(p1) = 1 + 2^-11 and the sum is 0.
        // The fma chain adds the exact p1 to c = -(1 + 2^-11): result 2^-24.
        let e12 = 2f32.powi(-12);
        let a = [-(1.0 + 2.0 * e12), 1.0 + e12];
        let b = [1.0, 1.0 + e12];
        assert_eq!(dot_mul_add(&a, &b), 0.0);
        assert_eq!(dot_fma_chain(&a, &b), 2f32.powi(-24));
        // Pairwise with two terms is p0 + p1 = mul-add here.
        assert_eq!(dot_pairwise(&a, &b), 0.0);
    }

    #[test]
    fn pairwise_split_rule_by_hand() {
        // Products [2^24, 1, 1, 1, 1]. Rule: ((p0 + p1) + p2) + (p3 + p4).
        // 2^24 + 1 is a tie -> 2^24 (even); + 1 -> 2^24; (1 + 1) = 2;
        // 2^24 + 2 = 2^24 + 2 exactly. A sequential sum gives 2^24, and a
        // right-heavy split ((p0 + p1) + (p2 + (p3 + p4))) would give 2^24 + 4.
        let t = 2f32.powi(24);
        let a = [t, 1.0, 1.0, 1.0, 1.0];
        let b = [1.0; 5];
        let p: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
        let hand = ((p[0] + p[1]) + p[2]) + (p[3] + p[4]);
        assert_eq!(hand, t + 2.0);
        assert_eq!(dot_pairwise(&a, &b), hand);
        assert_eq!(dot_mul_add(&a, &b), t);
        // 6 terms: ((p0 + p1) + p2) + ((p3 + p4) + p5).
        let a6 = [t, 1.0, 1.0, 1.0, 1.0, 1.0];
        let b6 = [1.0; 6];
        assert_eq!(dot_pairwise(&a6, &b6), t + 2.0 + 2.0);
        // 3 terms: (p0 + p1) + p2 with p = [1, 2^24, 1]: (2^24 + 1 -> 2^24) + 1 -> 2^24.
        assert_eq!(dot_pairwise(&[1.0, t, 1.0], &[1.0; 3]), t);
        // Empty and single.
        assert_eq!(dot_pairwise(&[], &[]).to_bits(), 0);
        assert_eq!(dot_pairwise(&[-0.0], &[1.0]).to_bits(), 0x8000_0000);
        // A chain starts at +0, so a single -0 product becomes +0.
        assert_eq!(dot_fma_chain(&[-0.0], &[1.0]).to_bits(), 0);
    }

    #[test]
    fn blocked_composes_as_stated() {
        let mut s = 7u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0
        };
        let a: Vec<f32> = (0..257).map(|_| next()).collect();
        let b: Vec<f32> = (0..257).map(|_| next()).collect();
        // Mkl at K = 257: [0,128) [128,256) [256,257), combined left to right.
        let want = (dot_fma_chain(&a[..128], &b[..128])
            + dot_fma_chain(&a[128..256], &b[128..256]))
            + dot_fma_chain(&a[256..], &b[256..]);
        let got = dot_blocked(&a, &b, KSplit::Mkl, Accum::Fma);
        assert_eq!(got.to_bits(), want.to_bits());
        // The last block of one is fl(a*b) (fma with +0 adds nothing unless -0).
        assert_eq!(dot_fma_chain(&a[256..], &b[256..]), a[256] * b[256]);
        // Single equals the plain functions.
        for (acc, f) in [
            (Accum::Fma, dot_fma_chain as fn(&[f32], &[f32]) -> f32),
            (Accum::MulAdd, dot_mul_add),
            (Accum::Pairwise, dot_pairwise),
        ] {
            assert_eq!(
                dot_blocked(&a, &b, KSplit::Single, acc).to_bits(),
                f(&a, &b).to_bits()
            );
        }
        // Chunks(3) at K = 257: [0,85) [85,171) [171,257).
        let want = (dot_mul_add(&a[..85], &b[..85]) + dot_mul_add(&a[85..171], &b[85..171]))
            + dot_mul_add(&a[171..], &b[171..]);
        let got = dot_blocked(&a, &b, KSplit::Chunks(3), Accum::MulAdd);
        assert_eq!(got.to_bits(), want.to_bits());
        // The blocking matters on this data (otherwise the test above is weak).
        assert_ne!(
            dot_blocked(&a, &b, KSplit::Mkl, Accum::Fma).to_bits(),
            dot_fma_chain(&a, &b).to_bits()
        );
        assert_eq!(dot_blocked(&[], &[], KSplit::Mkl, Accum::Fma).to_bits(), 0);
    }

    #[test]
    fn dot_f64_order_by_hand() {
        // Sequential: (0 + 1e16*1) + 1*1 = 1e16 + 1 -> 1e16 (spacing 2 at 1e16),
        // then + (-1e16) = 0. Any other grouping of the last two gives 1.
        let a = [1e16, 1.0, -1e16];
        assert_eq!(dot_f64(&a, &[1.0; 3]), 0.0);
        assert_eq!(dot_f64(&[1e16, -1e16, 1.0], &[1.0; 3]), 1.0);
        // No fma: c = -1, then a1*b1 = 1 - 2^-60 exactly, fl() = 1, -1 + 1 = 0
        // (an fma step would give -2^-60).
        let e = 2f64.powi(-30);
        assert_eq!(dot_f64(&[-1.0, 1.0 + e], &[1.0, 1.0 - e]), 0.0);
        assert_eq!((1.0 + e).mul_add(1.0 - e, -1.0), -2f64.powi(-60));
        assert_eq!(dot_f64(&[], &[]).to_bits(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// Small integers: every product and partial sum is an integer below
        /// 2^24, hence exact in f32, so the chain equals the exact sum, which the
        /// f64 sum holds exactly (then one rounding is no rounding).
        #[test]
        fn fma_chain_exact_on_small_integers(
            v in proptest::collection::vec((-1024i32..=1024, -1024i32..=1024), 0..15)
        ) {
            let a: Vec<f32> = v.iter().map(|p| p.0 as f32).collect();
            let b: Vec<f32> = v.iter().map(|p| p.1 as f32).collect();
            let exact: f64 = v.iter().map(|p| p.0 as f64 * p.1 as f64).sum();
            prop_assert_eq!(dot_fma_chain(&a, &b) as f64, exact);
            prop_assert_eq!(dot_mul_add(&a, &b) as f64, exact);
            prop_assert_eq!(dot_pairwise(&a, &b) as f64, exact);
        }

        /// Each fma step against libm's software `fmaf` (pure Rust, independent
        /// of std's fma intrinsic / the hardware instruction).
        #[test]
        fn fma_chain_matches_libm_fmaf((a, b) in pair_vecs(40)) {
            let mut c = 0.0f32;
            for k in 0..a.len() {
                c = libm::fmaf(a[k], b[k], c);
            }
            prop_assert_eq!(dot_fma_chain(&a, &b).to_bits(), c.to_bits());
        }

        /// Each fma step against f64 arithmetic wherever `a*b + c` is exact in
        /// f64 (checked by TwoSum); the chain's own steps are replayed so every
        /// step is checked from the same state.
        #[test]
        fn fma_chain_matches_exact_f64_steps((a, b) in pair_vecs(40)) {
            let mut c = 0.0f32;
            for k in 0..a.len() {
                let step = a[k].mul_add(b[k], c);
                if let Some(want) = f64_fma_if_exact(a[k], b[k], c) {
                    prop_assert_eq!(step.to_bits(), want.to_bits());
                }
                c = step;
            }
            prop_assert_eq!(dot_fma_chain(&a, &b).to_bits(), c.to_bits());
        }

        /// mul-add against f64: `a*b` is exact in f64 and `as f32` rounds it once;
        /// the f32+f32 sum computed in f64 then rounded to f32 is correctly rounded
        /// (double rounding is innocuous for + when 53 >= 2*24 + 2, Figueroa 1995).
        #[test]
        fn mul_add_matches_f64_emulation((a, b) in pair_vecs(40)) {
            let mut c = 0.0f32;
            for k in 0..a.len() {
                let p = (a[k] as f64 * b[k] as f64) as f32;
                c = (c as f64 + p as f64) as f32;
            }
            prop_assert_eq!(dot_mul_add(&a, &b).to_bits(), c.to_bits());
        }

        /// Pairwise against an independent iterative bottom-up formulation of
        /// the same tree (explicit stack of (range, state)), in f64-emulated adds.
        #[test]
        fn pairwise_matches_explicit_tree((a, b) in pair_vecs(70)) {
            fn tree(p: &[f32], lo: usize, hi: usize) -> f32 {
                // Independent restatement: left size = ceil(n / 2).
                let n = hi - lo;
                if n == 1 {
                    return p[lo];
                }
                let left = n - n / 2;
                let x = tree(p, lo, lo + left);
                let y = tree(p, lo + left, hi);
                (x as f64 + y as f64) as f32
            }
            let p: Vec<f32> = a.iter().zip(&b).map(|(x, y)| (*x as f64 * *y as f64) as f32).collect();
            let want = if p.is_empty() { 0.0 } else { tree(&p, 0, p.len()) };
            prop_assert_eq!(dot_pairwise(&a, &b).to_bits(), want.to_bits());
        }

    }
}
