//! Softmax over the last dimension (`F.softmax(x, -1)`) and its backward, as torch 2.15's CPU
//! kernels compute them in float32, and the float64 truth.
//!
//! # float32: ATen's kernels (`aten/src/ATen/native/cpu/SoftMaxKernel.cpp`)
//!
//! `F.softmax(x, -1)` on a contiguous float tensor runs `softmax_lastdim_kernel` →
//! `_vec_softmax_lastdim`, one row of `n` at a time (rows are independent, so ATen's
//! `parallel_for` over rows changes no bit at any thread count), with
//! `Vectorized<float>` of `L` lanes (8 on the AVX2 build, 16 on AVX512: the profile's
//! `torch_isa`):
//!
//! 1. `max = vec::reduce_all(maximum, row)`: the maximum (the order of a max does not change
//!    its value; a NaN propagates);
//! 2. `vec::map((x − max).exp())`: every element, the tail's partial vector included, through
//!    `Vectorized<float>::exp`, which is SLEEF's `Sleef_expf8_u10` / `Sleef_expf16_u10`
//!    ([`crate::kernels::torch_ops::exp_f32`]; not the faster `exp_u20`, which torch's flash
//!    attention uses), on the rounded difference `x − max`;
//! 3. `sum = vec::reduce_all(+, e)` (`aten/src/ATen/cpu/vec/functional_base.h`): for `n < L`
//!    the elements left to right (`((e0 + e1) + e2) + …`); otherwise lane `l` starts at `e[l]`
//!    and adds `e[L + l]`, `e[2L + l]`, … left to right (the ragged tail adds into its first
//!    `n mod L` lanes only), then the butterfly of `vec_reduce_all`: lane `l` adds lane
//!    `l + L/2`, then `l + L/4`, …, and lane 0 is the sum ([`lane_sum`]);
//! 4. `r = 1 / sum` (one division), then `y = e · r` (one multiplication per element).
//!
//! The backward, `_softmax_backward_data(dy, y, -1)` on the last dim, runs
//! `softmax_backward_lastdim_kernel` → `_vec_host_softmax_backward_lastdim<float, false>`
//! (not `_vec_softmax_backward`, which is the kernel for an inner dimension):
//!
//! 1. `dot = vec::map2_reduce_all(dy · y, +)`: the lane order of step 3 above on the
//!    rounded products `dy·y`, except, in one of the two compiled copies of the row loop,
//!    the ragged tail (the last `n mod L` elements, when `n ≥ L`), whose accumulation
//!    `Vec::set(acc, acc + dy·y, n − d)` GCC (`-ffp-contract=fast`) contracts there into
//!    `fma(dy, y, acc)`. ATen's `parallel_for(0, rows, 0, ..)` calls the row loop inline
//!    (the copy with the fused tail) when it runs on one thread or there is one row, and
//!    inside its OpenMP region (the copy with no contraction at all) with two or more rows
//!    at two or more threads ([`crate::ops::backend::Backend::aten_threads`]). The full
//!    vectors' `acc + dy·y` are not contracted in either copy, nor is the left-to-right sum
//!    of the rounded products when `n < L` (measured: every other combination of fused and
//!    unfused steps mismatches torch; the butterfly adds are plain additions);
//! 2. `dx = (dy − dot) · y`, one subtraction and one multiplication per element.
//!
//! Measured against torch 2.15 (CPU, one thread, eager; `scripts/softmax_torch.py`, fixtures
//! `tests/data/torch_softmax_{avx2,avx512}.json`, test `tests/suite/softmax_fixture.rs`):
//! forward and backward identical on all 5,355 elements of each build (`ATEN_CPU_CAPABILITY=avx2`
//! with 8 lanes; the AVX512 build of an AMD EPYC with 16), rows of 1 to 257 elements, and at
//! two threads on the AVX2 build (`torch_softmax_avx2_t2.json`).
//!
//! # float64: the truth
//!
//! The exact formula in float64 with the pure-Rust `libm` exp: `m = max x`,
//! `e_i = exp(x_i − m)`, `s = Σ e_i` left to right from `e_0`, `y_i = e_i / s`; backward
//! `dot = Σ dy_i·y_i` left to right from 0, `dx_i = y_i·(dy_i − dot)`.

use crate::kernels::torch_ops::{exp_shifted_f32, tree_reduce};
use crate::ops::real::Real;

/// Scalar types with a softmax kernel: f32 is torch's CPU kernel, f64 the truth (module doc).
pub trait SoftmaxReal: Real {
    /// Softmax of every row of `n` of `x` into `y` (same length, a multiple of `n`); `lanes`
    /// is the width of torch's `Vectorized<float>` (8 or 16; f64 ignores it).
    fn softmax_rows(x: &[Self], n: usize, y: &mut [Self], lanes: usize);
    /// The backward of [`SoftmaxReal::softmax_rows`]: `dx` from the output gradient `dy`
    /// and the forward's output `y`, row by row; `threads` is ATen's intra-op thread count
    /// (which compiled copy of torch's row loop runs; f64 ignores it and `lanes`).
    fn softmax_backward_rows(
        dy: &[Self],
        y: &[Self],
        n: usize,
        dx: &mut [Self],
        lanes: usize,
        threads: usize,
    );
}

/// ATen's `reduce_all(+)` / `map_reduce_all(.., +)` over the `n` terms `term(i)`: for
/// `n < lanes` the rounded terms left to right from `term(0)`; otherwise lane `l` starts
/// at `term(l)` and adds the rounded `term(i)` of every further full vector of its lane,
/// the ragged tail's terms (the last `n mod lanes`) are accumulated by `tail(a, i)` (a
/// plain `a + term(i)`, or a contracted `fma`), then the halving butterfly of plain
/// additions. `lanes` is 8 or 16.
#[inline(always)]
fn lane_sum(
    n: usize,
    lanes: usize,
    term: impl Fn(usize) -> f32,
    tail: impl Fn(f32, usize) -> f32,
) -> f32 {
    debug_assert!(lanes == 8 || lanes == 16);
    if n < lanes {
        let mut s = term(0);
        for i in 1..n {
            s += term(i);
        }
        return s;
    }
    let mut v = [0.0f32; 16];
    for (l, a) in v.iter_mut().enumerate().take(lanes) {
        *a = term(l);
    }
    let full = n - n % lanes;
    let mut d = lanes;
    while d < full {
        for (l, i) in (d..d + lanes).enumerate() {
            v[l] += term(i);
        }
        d += lanes;
    }
    for (l, i) in (full..n).enumerate() {
        v[l] = tail(v[l], i);
    }
    tree_reduce(&mut v[..lanes])
}

/// Maximum of a row, NaN propagating (`vec::maximum`).
fn row_max<R: Real>(row: &[R]) -> R {
    let mut m = row[0];
    for &x in &row[1..] {
        if x.to_f64().is_nan() {
            return x;
        }
        if x > m {
            m = x;
        }
    }
    m
}

impl SoftmaxReal for f32 {
    fn softmax_rows(x: &[f32], n: usize, y: &mut [f32], lanes: usize) {
        assert_eq!(x.len(), y.len(), "softmax: lengths");
        if n == 0 {
            return;
        }
        for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
            let max = row_max(xr);
            exp_shifted_f32(xr, max, yr);
            let sum = lane_sum(n, lanes, |i| yr[i], |a, i| a + yr[i]);
            let r = 1.0 / sum;
            for o in yr.iter_mut() {
                *o *= r;
            }
        }
    }

    fn softmax_backward_rows(
        dy: &[f32],
        y: &[f32],
        n: usize,
        dx: &mut [f32],
        lanes: usize,
        threads: usize,
    ) {
        assert_eq!(dy.len(), y.len(), "softmax backward: lengths");
        assert_eq!(dy.len(), dx.len(), "softmax backward: lengths");
        if n == 0 {
            return;
        }
        let fused_tail = dy.len() / n < 2 || threads < 2;
        for ((gr, yr), dr) in dy
            .chunks_exact(n)
            .zip(y.chunks_exact(n))
            .zip(dx.chunks_exact_mut(n))
        {
            let dot = if fused_tail {
                lane_sum(n, lanes, |i| gr[i] * yr[i], |a, i| gr[i].mul_add(yr[i], a))
            } else {
                lane_sum(n, lanes, |i| gr[i] * yr[i], |a, i| a + gr[i] * yr[i])
            };
            for ((d, &g), &o) in dr.iter_mut().zip(gr).zip(yr) {
                *d = (g - dot) * o;
            }
        }
    }
}

impl SoftmaxReal for f64 {
    fn softmax_rows(x: &[f64], n: usize, y: &mut [f64], _: usize) {
        assert_eq!(x.len(), y.len(), "softmax: lengths");
        if n == 0 {
            return;
        }
        for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
            let max = row_max(xr);
            for (o, &v) in yr.iter_mut().zip(xr) {
                *o = libm::exp(v - max);
            }
            let mut s = yr[0];
            for &e in &yr[1..] {
                s += e;
            }
            for o in yr.iter_mut() {
                *o /= s;
            }
        }
    }

    fn softmax_backward_rows(dy: &[f64], y: &[f64], n: usize, dx: &mut [f64], _: usize, _: usize) {
        assert_eq!(dy.len(), y.len(), "softmax backward: lengths");
        assert_eq!(dy.len(), dx.len(), "softmax backward: lengths");
        if n == 0 {
            return;
        }
        for ((gr, yr), dr) in dy
            .chunks_exact(n)
            .zip(y.chunks_exact(n))
            .zip(dx.chunks_exact_mut(n))
        {
            let mut dot = 0.0;
            for (&g, &o) in gr.iter().zip(yr) {
                dot += g * o;
            }
            for ((d, &g), &o) in dr.iter_mut().zip(gr).zip(yr) {
                *d = o * (g - dot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f64 truth sums to one within rounding: n terms each rounded once (error ≤ n·ε).
    #[test]
    fn f64_rows_sum_to_one_and_backward_of_uniform_is_zero() {
        let x: Vec<f64> = (0..21).map(|i| (i as f64 * 0.37).sin() * 3.0).collect();
        let mut y = vec![0.0; 21];
        f64::softmax_rows(&x, 7, &mut y, 8);
        for r in y.chunks(7) {
            let s: f64 = r.iter().sum();
            assert!((s - 1.0).abs() < 8.0 * f64::EPSILON, "row sum {s}");
        }
        // A constant output gradient has a zero input gradient (softmax is shift invariant):
        // dot = c·Σy, dx = y(c − dot) is c·y·(1 − Σy), at most a few ulps of c.
        let dy = vec![0.5; 21];
        let mut dx = vec![1.0; 21];
        f64::softmax_backward_rows(&dy, &y, 7, &mut dx, 8, 1);
        assert!(dx.iter().all(|d| d.abs() < 1e-15), "{dx:?}");
    }

    /// Below `lanes` elements the sum is left to right; at `lanes` and above the lanes and
    /// the butterfly: 17 terms over 8 lanes put term 16 into lane 0 and pair lanes (0,4),
    /// (1,5), … then (0,2), (1,3), then (0,1).
    #[test]
    fn lane_sum_order() {
        let t = [
            1e8f32, 1.0, -1e8, 1.0, 0.5, 0.25, 3.0, 7.0, 1e-3, 2.0, 5.0, 1.5, 9.0, 4.0, 6.0, 8.0,
            -2.0,
        ];
        let got = lane_sum(17, 8, |i| t[i], |a, i| a + t[i]);
        let mut v = [0.0f32; 8];
        for l in 0..8 {
            v[l] = t[l] + t[l + 8];
        }
        v[0] += t[16];
        let want = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        assert_eq!(got.to_bits(), want.to_bits());
        let seq = lane_sum(3, 8, |i| t[i], |a, i| a + t[i]);
        assert_eq!(seq.to_bits(), ((t[0] + t[1]) + t[2]).to_bits());
    }
}
