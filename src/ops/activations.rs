//! Elementwise activations and their backward passes: gelu (exact and tanh approximation),
//! relu, silu.
//!
//! f32 follows torch 2.15's CPU code paths as this file states them. Each element's result
//! depends on which contiguous torch tensor holds it ([`TorchParts`], [`TorchLoop`]), not on
//! its neighbours' values:
//!
//! * the exact gelu and its backward run in oneDNN for a tensor of two or more elements
//!   (`gelu_out_cpu`'s `use_mkldnn`; [`crate::kernels::torch_ops::onednn_gelu`]: on an
//!   AVX-512 machine a minimax polynomial, on AVX2 Abramowitz–Stegun, the profile's
//!   `onednn_isa`), and in ATen's scalar lambda with glibc's `erff`/`expf` for one element;
//! * the tanh gelu and silu run ATen's `cpu_kernel_vec` (`aten/src/ATen/native/cpu/Activation.cpp`):
//!   the vectorized lambda (SLEEF's u10 `expf`/`tanhf`, [`crate::kernels::torch_ops::exp_f32`],
//!   [`crate::kernels::torch_ops::sleef_tanhf_u10`]) on the first `n − n % 16` elements of a
//!   tensor of `n` (32 on the AVX512 build, the profile's `torch_isa`), the scalar lambda
//!   (glibc's `expf`/`tanhf`, [`crate::kernels::torch_ops::glibc_expf`],
//!   [`crate::kernels::torch_ops::glibc_tanhf`]) on the rest;
//! * `a + b·c` is fused into `fma(b, c, a)` exactly where the measurement below found torch's
//!   build (GCC, `-ffp-contract=fast`) fusing it; relu copies or zeroes.
//!
//! So a sharded tensor can differ from the whole one where a rank's tensor has a scalar
//! remainder, as it does in torch. f64 (the ground truth) computes the same formulas in f64
//! with f64 constants ([`ActReal`]) and `libm`, on every element alike.
//!
//! Measured against torch 2.15 (CPU, one thread, eager, glibc 2.36, an AVX-512 machine), bit
//! for bit, NaN with NaN (`scripts/activations_torch.py`): tensors of 1, 2, 7, 8, 9, 15, 16, 17,
//! 31, 32, 33, 100 and 8,192 elements of `s·randn` (s = 0.5, 2, 8) and 41 special values (±0,
//! subnormals, large |x|, ±∞, NaN) as tensors and alone, 25,553 elements per op. All six ops
//! agree on every element under `ATEN_CPU_CAPABILITY=avx2` (ATen scalar remainder: 241
//! elements; exact gelu through ATen's scalar lambda: 44), under the AVX512 build (401
//! remainder elements) and with `ONEDNN_MAX_CPU_ISA=AVX2`; the fixtures
//! `tests/data/torch_activations_*.json` keep all but the 8,192-element tensors
//! (`tests/suite/activations_fixture.rs`). glibc's `erff`, `expf` and `tanhf` ports agree with
//! the C library on all 2^32 inputs (`tests/suite/glibc_float.rs`, ignored by default). Before
//! this model the exact gelu used `libm::erff` and agreed with torch on 68–90 % of forward and
//! 22–29 % of backward elements.

use std::ops::Range;

use crate::kernels::torch_ops::{
    exp_f32, glibc_erff, glibc_expf, glibc_tanhf, onednn_gelu_backward_slice, onednn_gelu_slice,
    row_sum_f32, sleef_tanhf_u10, OneDnnIsa,
};
use crate::ops::real::Real;

/// Scalar types with torch's activation kernels.
///
/// The constants are each type's own: f32 holds torch's (the f64 value rounded to f32, as
/// `Activation.cpp` converts `M_SQRT1_2` and its products), f64 the nearest double to the
/// exact value, so that the float64 ground truth holds no f32-rounded constant.
pub trait ActReal:
    Real
    + crate::ops::softmax::SoftmaxReal
    + crate::ops::attention::BmmReal
    + crate::ops::rope::RopeReal
    + crate::ops::ring::RingReal
{
    /// 1/√2 (torch's `kAlpha`: `M_SQRT1_2`).
    const FRAC_1_SQRT_2: Self;
    /// 1/√(2π) (torch's `kBeta` of the exact gelu: `M_2_SQRTPI · M_SQRT1_2 · 0.5`).
    const FRAC_1_SQRT_2PI: Self;
    /// √(2/π) (torch's `kBeta` of the tanh gelu: `M_SQRT2 · M_2_SQRTPI · 0.5`).
    const SQRT_2_OVER_PI: Self;
    /// 0.044715 (torch's `kKappa`).
    const GELU_KAPPA: Self;
    /// gelu of elements of a tensor of two or more elements, in place (f32: oneDNN's gelu_erf
    /// on `isa`, [`onednn_gelu_slice`]; f64: `(x·0.5)·(1 + erf(x·(1/√2)))` with `libm::erf`).
    fn gelu_k(x: &mut [Self], isa: OneDnnIsa);
    /// `dx = gelu′(x)·dy` for elements of a tensor of two or more elements (f32: oneDNN's,
    /// [`onednn_gelu_backward_slice`]; f64: gelu′ =
    /// `0.5·(1 + erf(x·(1/√2))) + x·((1/√(2π))·exp((x·x)·(−0.5)))`).
    fn gelu_backward_k(dy: &[Self], x: &[Self], dx: &mut [Self]);
    /// `erf` as ATen's scalar gelu lambda computes it (f32: the C library's `erff`,
    /// [`glibc_erff`]; f64: `libm::erf`).
    fn erf_scalar(self) -> Self;
    /// `exp` as ATen's vectorized activation lambdas compute it (f32: SLEEF's `expf` u10,
    /// [`exp_f32`]; f64: `libm::exp`).
    fn exp_k(self) -> Self;
    /// `exp` as ATen's scalar activation lambdas compute it (f32: the C library's `expf`,
    /// [`glibc_expf`]; f64: `libm::exp`).
    fn exp_scalar(self) -> Self;
    /// `tanh` as ATen's vectorized tanh-approximate gelu lambdas compute it (f32: SLEEF's
    /// `tanhf` u10, [`sleef_tanhf_u10`]; f64: `libm::tanh`).
    fn tanh_k(self) -> Self;
    /// `tanh` as ATen's scalar tanh-approximate gelu lambdas compute it (f32: the C
    /// library's `tanhf`, [`glibc_tanhf`]; f64: `libm::tanh`).
    fn tanh_scalar(self) -> Self;
    /// `torch.exp` on a tensor (f32: MKL's `vmsExp`, modelled by the correctly rounded exp,
    /// `libm::exp` in f64 rounded once; measured agreement in
    /// [`crate::ops::vocab_parallel`]).
    fn exp_vml(self) -> Self;
    /// `torch.log` on a tensor (f32: MKL's `vmsLn`, modelled as [`ActReal::exp_vml`] is).
    fn ln_vml(self) -> Self;
    /// `x.sum(dim=-1)` of one contiguous row (f32: ATen's order,
    /// [`crate::kernels::torch_ops::row_sum_f32`]; f64: left to right from 0).
    fn row_sum_k(x: &[Self]) -> Self;
}

impl ActReal for f32 {
    const FRAC_1_SQRT_2: f32 = std::f64::consts::FRAC_1_SQRT_2 as f32;
    const FRAC_1_SQRT_2PI: f32 =
        (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2 * 0.5) as f32;
    const SQRT_2_OVER_PI: f32 =
        (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
    const GELU_KAPPA: f32 = 0.044715;
    fn gelu_k(x: &mut [Self], isa: OneDnnIsa) {
        onednn_gelu_slice(x, isa)
    }
    fn gelu_backward_k(dy: &[Self], x: &[Self], dx: &mut [Self]) {
        onednn_gelu_backward_slice(dy, x, dx)
    }
    fn erf_scalar(self) -> Self {
        glibc_erff(self)
    }
    fn exp_k(self) -> Self {
        exp_f32(self)
    }
    fn exp_scalar(self) -> Self {
        glibc_expf(self)
    }
    fn tanh_k(self) -> Self {
        sleef_tanhf_u10(self)
    }
    fn tanh_scalar(self) -> Self {
        glibc_tanhf(self)
    }
    fn exp_vml(self) -> Self {
        libm::exp(f64::from(self)) as f32
    }
    fn ln_vml(self) -> Self {
        libm::log(f64::from(self)) as f32
    }
    fn row_sum_k(x: &[Self]) -> Self {
        row_sum_f32(x)
    }
}

impl ActReal for f64 {
    const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
    /// The double nearest 1/√(2π) = 0.39894228040143267793994605993…
    const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
    /// The double nearest √(2/π) = 0.79788456080286535587989211986… (torch's f64
    /// `M_SQRT2 · M_2_SQRTPI · 0.5` is one ulp above it).
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    const GELU_KAPPA: f64 = 0.044715;
    fn gelu_k(x: &mut [Self], _: OneDnnIsa) {
        for v in x {
            *v = (*v * 0.5) * (1.0 + libm::erf(*v * Self::FRAC_1_SQRT_2));
        }
    }
    fn gelu_backward_k(dy: &[Self], x: &[Self], dx: &mut [Self]) {
        for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
            let cdf = 0.5 * (1.0 + libm::erf(v * Self::FRAC_1_SQRT_2));
            *d = (cdf + v * (Self::FRAC_1_SQRT_2PI * libm::exp((v * v) * -0.5))) * g;
        }
    }
    fn erf_scalar(self) -> Self {
        libm::erf(self)
    }
    fn exp_k(self) -> Self {
        libm::exp(self)
    }
    fn exp_scalar(self) -> Self {
        libm::exp(self)
    }
    fn tanh_k(self) -> Self {
        libm::tanh(self)
    }
    fn tanh_scalar(self) -> Self {
        libm::tanh(self)
    }
    fn exp_vml(self) -> Self {
        libm::exp(self)
    }
    fn ln_vml(self) -> Self {
        libm::log(self)
    }
    fn row_sum_k(x: &[Self]) -> Self {
        x.iter().fold(0.0, |a, &b| a + b)
    }
}

/// The contiguous torch tensors that one elementwise op's `[rows, width]` row-major buffer
/// is computed in, in one computation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TorchParts {
    /// One tensor: the whole buffer.
    #[default]
    Whole,
    /// One tensor per range of columns (each rank's `[rows, range]` shard of a
    /// column-parallel output, row-major on its own).
    Columns(Vec<Range<usize>>),
    /// One tensor per range of rows (each rank's token block under sequence parallelism).
    Rows(Vec<Range<usize>>),
}

/// [`TorchParts::Whole`], to borrow.
pub static WHOLE: TorchParts = TorchParts::Whole;

/// How torch runs an elementwise op over a buffer: which of its two code paths computes each
/// element, by the contiguous tensor ([`TorchParts`]) the element is in. ATen's
/// `cpu_kernel_vec` (`aten/src/ATen/native/cpu/Loops.h`, `vectorized_loop`) runs a tensor of
/// `n` elements by the vectorized lambda for its first `n − n % block` elements and by the
/// scalar lambda for the rest; the exact gelu goes to oneDNN for a tensor of two or more
/// elements and to ATen's scalar lambda for one ([`gelu`]). That is torch at one thread; at
/// more, ATen splits a tensor of the tanh gelu's forward above 16,384 elements, and of the
/// other ATen kernels here at 32,768 or more, into one range per thread, each with its own
/// remainder, which this does not model (oneDNN's gelu is per element: any thread count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorchLoop<'a> {
    /// Elements per iteration of the vectorized loop, `2·Vec<float>::size()`
    /// ([`crate::kernels::torch_ops::TorchIsa::elementwise_block`]: 16 on the AVX2 build, 32
    /// on the AVX512 one); 0 for no scalar remainder (every element by the vectorized lambda:
    /// the float64 computation, where both lambdas are the same formula).
    pub block: usize,
    /// Width of the buffer's rows.
    pub width: usize,
    /// The tensors.
    pub parts: &'a TorchParts,
    /// The ISA oneDNN's JIT kernels run on (the exact gelu, [`gelu`]).
    pub onednn: OneDnnIsa,
}

impl TorchLoop<'static> {
    /// The whole buffer as one tensor, oneDNN on AVX-512.
    pub fn whole(block: usize, width: usize) -> Self {
        Self {
            block,
            width,
            parts: &WHOLE,
            onednn: OneDnnIsa::Avx512,
        }
    }
}

impl TorchLoop<'_> {
    /// Of a tensor of `n` elements, how many ATen's `cpu_kernel_vec` runs by the vectorized
    /// lambda (the rest by the scalar one): `n − n % block`.
    fn aten_vectorized(&self, n: usize) -> usize {
        if self.block == 0 {
            n
        } else {
            n - n % self.block
        }
    }
}

/// Calls `f(range, scalar)` for consecutive runs of a buffer of `len` elements covering it
/// once: `scalar` says whether torch computes the run by the scalar path (a tensor of `n`
/// elements computes its first `main(n)` by the vector path, the rest by the scalar one).
fn for_each_run(
    len: usize,
    lp: &TorchLoop<'_>,
    main: impl Fn(usize) -> usize,
    mut f: impl FnMut(Range<usize>, bool),
) {
    // One run of positions `k0..k0 + n` of a tensor whose vectorized part ends at `m`,
    // starting at buffer index `base`.
    let mut run = |base: usize, k0: usize, n: usize, m: usize| {
        let s = m.saturating_sub(k0).min(n);
        if s > 0 {
            f(base..base + s, false);
        }
        if n > s {
            f(base + s..base + n, true);
        }
    };
    let w = lp.width;
    match lp.parts {
        TorchParts::Whole => run(0, 0, len, main(len)),
        TorchParts::Rows(rs) => {
            for r in rs {
                let n = r.len() * w;
                run(r.start * w, 0, n, main(n));
            }
        }
        TorchParts::Columns(cs) => {
            let rows = len.checked_div(w).unwrap_or(0);
            for c in cs {
                let m = main(rows * c.len());
                for i in 0..rows {
                    run(i * w + c.start, i * c.len(), c.len(), m);
                }
            }
        }
    }
}

/// `x = gelu(x)` (`F.gelu`, exact). torch 2.15 computes a contiguous float32 tensor of two or
/// more elements in oneDNN ([`ActReal::gelu_k`]; `gelu_out_cpu`'s `use_mkldnn`), one of one
/// element in ATen's scalar lambda: `(x·0.5)·(1 + erf(x·α))`, each operation rounded,
/// α = 1/√2 ([`ActReal::FRAC_1_SQRT_2`]), erf [`ActReal::erf_scalar`].
pub fn gelu<R: ActReal>(x: &mut [R], lp: &TorchLoop<'_>) {
    let (half, one, alpha, isa) = (R::from_f64(0.5), R::ONE, R::FRAC_1_SQRT_2, lp.onednn);
    for_each_run(x.len(), lp, onednn_elements, |r, scalar| {
        let x = &mut x[r];
        if scalar {
            for v in x {
                *v = (*v * half) * (one + (*v * alpha).erf_scalar());
            }
        } else {
            R::gelu_k(x, isa);
        }
    });
}

/// Of a tensor of `n` elements, how many torch's exact gelu computes in oneDNN: all from two
/// elements on, none of one.
fn onednn_elements(n: usize) -> usize {
    if n >= 2 {
        n
    } else {
        0
    }
}

/// gelu backward from the input `x` (`torch.ops.aten.gelu_backward`, exact). A tensor of two
/// or more elements in oneDNN: `dx = gelu′(x)·dy` ([`ActReal::gelu_backward_k`]); one of one
/// element in ATen's scalar lambda: `cdf = 0.5·(1 + erf(x·α))`, `pdf = β·exp((x·x)·(-0.5))`,
/// `dx = dy·(cdf + x·pdf)`, each operation rounded (GCC does not contract `cdf + x·pdf` there:
/// measured), α = 1/√2, β = 1/√(2π) ([`ActReal::FRAC_1_SQRT_2PI`]), erf and exp
/// [`ActReal::erf_scalar`] and [`ActReal::exp_scalar`].
pub fn gelu_backward<R: ActReal>(dy: &[R], x: &[R], dx: &mut [R], lp: &TorchLoop<'_>) {
    let (half, one, alpha, beta) = (
        R::from_f64(0.5),
        R::ONE,
        R::FRAC_1_SQRT_2,
        R::FRAC_1_SQRT_2PI,
    );
    for_each_run(dx.len(), lp, onednn_elements, |r, scalar| {
        if scalar {
            let it = dx[r.clone()].iter_mut().zip(&dy[r.clone()]).zip(&x[r]);
            for ((d, &g), &v) in it {
                let cdf = half * (one + (v * alpha).erf_scalar());
                let pdf = beta * ((v * v) * (-half)).exp_scalar();
                *d = g * (cdf + v * pdf);
            }
        } else {
            R::gelu_backward_k(&dy[r.clone()], &x[r.clone()], &mut dx[r]);
        }
    });
}

/// `x = gelu(x, approximate="tanh")`: `c = (x·x)·x`; `inner = β·fma(κ, c, x)`;
/// `(0.5·x)·(1 + tanh(inner))`, each other operation rounded, β = √(2/π)
/// ([`ActReal::SQRT_2_OVER_PI`]), κ = 0.044715 ([`ActReal::GELU_KAPPA`]); tanh is
/// [`ActReal::tanh_k`] in ATen's vectorized part of each tensor and [`ActReal::tanh_scalar`]
/// in its scalar remainder ([`TorchLoop`]; both lambdas contract alike: measured).
pub fn gelu_tanh<R: ActReal>(x: &mut [R], lp: &TorchLoop<'_>) {
    let (half, one, beta, kappa) = (R::from_f64(0.5), R::ONE, R::SQRT_2_OVER_PI, R::GELU_KAPPA);
    for_each_run(
        x.len(),
        lp,
        |n| lp.aten_vectorized(n),
        |r, scalar| {
            for v in &mut x[r] {
                let c = (*v * *v) * *v;
                let inner = beta * kappa.fma(c, *v);
                let t = if scalar {
                    inner.tanh_scalar()
                } else {
                    inner.tanh_k()
                };
                *v = (half * *v) * (one + t);
            }
        },
    );
}

/// Backward of [`gelu_tanh`] from the input `x`: `x2 = x·x`; `inner = β·fma(κ, x2·x, x)`;
/// `t = tanh(inner)`; `left = 0.5·x`; `right = 1 + t`; `left_d = 0.5·right`;
/// `tanh_d = fma(-t, t, 1)`; `inner_d = β·fma(3κ, x2, 1)` (3κ rounded);
/// `dx = dy·(left_d + (left·tanh_d)·inner_d)`, each other operation rounded; tanh as in
/// [`gelu_tanh`].
pub fn gelu_tanh_backward<R: ActReal>(dy: &[R], x: &[R], dx: &mut [R], lp: &TorchLoop<'_>) {
    let (half, one, beta, kappa) = (R::from_f64(0.5), R::ONE, R::SQRT_2_OVER_PI, R::GELU_KAPPA);
    let three_kappa = R::from_f64(3.0) * kappa;
    for_each_run(
        dx.len(),
        lp,
        |n| lp.aten_vectorized(n),
        |r, scalar| {
            let it = dx[r.clone()].iter_mut().zip(&dy[r.clone()]).zip(&x[r]);
            for ((d, &g), &v) in it {
                let x2 = v * v;
                let inner = beta * kappa.fma(x2 * v, v); // x_cube = (x·x)·x
                let t = if scalar {
                    inner.tanh_scalar()
                } else {
                    inner.tanh_k()
                };
                let left = half * v;
                let right = one + t;
                let left_d = half * right;
                let tanh_d = (-t).fma(t, one);
                let inner_d = beta * three_kappa.fma(x2, one);
                *d = g * (left_d + (left * tanh_d) * inner_d);
            }
        },
    );
}

/// `x = max(x, 0)` (`F.relu`; NaN stays NaN).
pub fn relu<R: Real>(x: &mut [R]) {
    for v in x {
        if *v < R::ZERO {
            *v = R::ZERO;
        }
    }
}

/// relu backward from the output `y` (torch's `threshold_backward(dy, y, 0)`):
/// `dx = y <= 0 ? 0 : dy`.
pub fn relu_backward<R: Real>(dy: &[R], y: &[R], dx: &mut [R]) {
    for ((d, &g), &o) in dx.iter_mut().zip(dy).zip(y) {
        *d = if o <= R::ZERO { R::ZERO } else { g };
    }
}

/// `x = silu(x)`: `x / (1 + exp(-x))`, each operation rounded; exp is [`ActReal::exp_k`] in
/// the vectorized part of each tensor and [`ActReal::exp_scalar`] in its remainder
/// ([`TorchLoop`]).
pub fn silu<R: ActReal>(x: &mut [R], lp: &TorchLoop<'_>) {
    for_each_run(
        x.len(),
        lp,
        |n| lp.aten_vectorized(n),
        |r, scalar| {
            let x = &mut x[r];
            if scalar {
                for v in x {
                    *v = *v / (R::ONE + (-*v).exp_scalar());
                }
            } else {
                for v in x {
                    *v = *v / (R::ONE + (-*v).exp_k());
                }
            }
        },
    );
}

/// silu backward from the input: `s = 1 / (1 + exp(-x))`; `dx = (dy·s)·fma(x, 1 - s, 1)`,
/// each other operation rounded (both lambdas contracted alike: measured); exp as in
/// [`silu`].
pub fn silu_backward<R: ActReal>(dy: &[R], x: &[R], dx: &mut [R], lp: &TorchLoop<'_>) {
    for_each_run(
        dx.len(),
        lp,
        |n| lp.aten_vectorized(n),
        |r, scalar| {
            let it = dx[r.clone()].iter_mut().zip(&dy[r.clone()]).zip(&x[r]);
            for ((d, &g), &v) in it {
                let e = if scalar {
                    (-v).exp_scalar()
                } else {
                    (-v).exp_k()
                };
                let s = R::ONE / (R::ONE + e);
                *d = (g * s) * v.fma(R::ONE - s, R::ONE);
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs of [`for_each_run`], as (range, scalar) pairs.
    fn runs(len: usize, lp: &TorchLoop<'_>) -> Vec<(Range<usize>, bool)> {
        let mut v = Vec::new();
        for_each_run(len, lp, |n| lp.aten_vectorized(n), |r, s| v.push((r, s)));
        v
    }

    #[test]
    fn torch_loop_runs_cover_each_tensor_with_its_remainder_last() {
        // One tensor of 37 elements, AVX2 block 16: 32 vectorized, 5 scalar.
        assert_eq!(
            runs(37, &TorchLoop::whole(16, 37)),
            [(0..32, false), (32..37, true)]
        );
        // Shorter than a block: all scalar; a multiple: no remainder; block 0: no remainder.
        assert_eq!(runs(7, &TorchLoop::whole(16, 7)), [(0..7, true)]);
        assert_eq!(runs(64, &TorchLoop::whole(32, 8)), [(0..64, false)]);
        assert_eq!(runs(7, &TorchLoop::whole(0, 7)), [(0..7, false)]);
        // [3, 10] split into columns 0..6 and 6..10 (two ranks' [3, 6] and [3, 4] tensors):
        // rank 0 holds 18 elements (16 vectorized: its rows 0, 1 and the first 4 of row 2),
        // rank 1 holds 12 (all scalar).
        let cols = TorchParts::Columns(vec![0..6, 6..10]);
        let lp = TorchLoop {
            block: 16,
            width: 10,
            parts: &cols,
            onednn: OneDnnIsa::Avx512,
        };
        assert_eq!(
            runs(30, &lp),
            [
                (0..6, false),
                (10..16, false),
                (20..24, false),
                (24..26, true),
                (6..10, true),
                (16..20, true),
                (26..30, true),
            ]
        );
        // Rows 0..3 and 3..5 of width 8: tensors of 24 and 16 elements.
        let rows = TorchParts::Rows(vec![0..3, 3..5]);
        let lp = TorchLoop {
            block: 16,
            width: 8,
            parts: &rows,
            onednn: OneDnnIsa::Avx512,
        };
        assert_eq!(
            runs(40, &lp),
            [(0..16, false), (16..24, true), (24..40, false)]
        );
    }

    #[test]
    fn f32_kernels_stay_close_to_the_f64_formulas() {
        // The f32 kernels approximate: oneDNN's gelu and its derivative are within a few
        // 1e-7 of erf's (A&S 7.1.26 or minimax pieces), glibc's erff and expf and SLEEF's exp
        // and tanh within about 1 ulp; 1e-6 absolute bounds the sum of those and a few f32
        // roundings for |x| <= 4, where every value here is O(1). The whole tensor runs the
        // vector paths (oneDNN for gelu, block 0 for silu), each element alone the scalar
        // ones (a one-element tensor).
        let xs: Vec<f32> = (-400..=400).map(|i| i as f32 / 100.0).collect();
        let n = xs.len();
        let whole = TorchLoop::whole(0, n);
        let single = TorchLoop::whole(16, 1);
        let ones = vec![1.0f32; n];
        let (mut ga, mut sa, mut ta) = (xs.clone(), xs.clone(), xs.clone());
        gelu(&mut ga, &whole);
        silu(&mut sa, &whole);
        gelu_tanh(&mut ta, &whole);
        let mut da = vec![0.0f32; n];
        gelu_backward(&ones, &xs, &mut da, &whole);
        for (i, &x) in xs.iter().enumerate() {
            let (mut gb, mut sb, mut tb) = ([x], [x], [x]);
            gelu(&mut gb, &single);
            silu(&mut sb, &single);
            gelu_tanh(&mut tb, &single);
            let mut db = [0.0f32];
            gelu_backward(&[1.0], &[x], &mut db, &single);
            let x64 = x as f64;
            let g64 = 0.5 * x64 * (1.0 + libm::erf(x64 / 2f64.sqrt()));
            let t64 = 0.5
                * x64
                * (1.0
                    + libm::tanh(
                        (2.0 / std::f64::consts::PI).sqrt() * (x64 + 0.044715 * x64 * x64 * x64),
                    ));
            let s64 = x64 / (1.0 + libm::exp(-x64));
            let pdf = libm::exp(-x64 * x64 / 2.0) / (2.0 * std::f64::consts::PI).sqrt();
            let dg = 0.5 * (1.0 + libm::erf(x64 / 2f64.sqrt())) + x64 * pdf;
            for (what, got, want) in [
                ("gelu", ga[i], g64),
                ("gelu scalar", gb[0], g64),
                ("gelu_tanh", ta[i], t64),
                ("gelu_tanh scalar", tb[0], t64),
                ("silu", sa[i], s64),
                ("silu scalar", sb[0], s64),
                ("gelu'", da[i], dg),
                ("gelu' scalar", db[0], dg),
            ] {
                assert!(
                    (got as f64 - want).abs() < 1e-6,
                    "{what}({x}) = {got}, want {want}"
                );
            }
        }
    }

    /// The f64 inputs of the float64-truth tests: 6,001 points over [-6, 6].
    fn xs64() -> impl Iterator<Item = f64> {
        (-3000..=3000).map(|i| i as f64 / 500.0)
    }

    /// Tolerance of the float64-truth tests: the independent formulas below reach the same
    /// value by other f64 roundings (x/√2 instead of x·(1/√2), √ of a rounded 2π, …) and
    /// libm's erf, exp and tanh are each within about 1 ulp, so the two differ by a few
    /// units of 2⁻⁵² times the size of the terms they add, which `scale` bounds; 16ε·scale
    /// leaves room for that. An f32-rounded constant (relative error ≈ 1e-8) misses it by
    /// about seven orders of magnitude.
    fn close(got: f64, want: f64, scale: f64) -> bool {
        (got - want).abs() <= 16.0 * f64::EPSILON * scale
    }

    /// `f` of every input as one tensor (torch's vector path) and of each alone (its scalar
    /// path), in f64.
    fn both_paths(f: impl Fn(&mut [f64], &TorchLoop<'_>)) -> Vec<(f64, f64, f64)> {
        let xs: Vec<f64> = xs64().collect();
        let mut all = xs.clone();
        f(&mut all, &TorchLoop::whole(16, xs.len()));
        xs.iter()
            .zip(all)
            .map(|(&x, v)| {
                let mut one = [x];
                f(&mut one, &TorchLoop::whole(16, 1));
                (x, v, one[0])
            })
            .collect()
    }

    #[test]
    fn f64_gelu_is_float64_throughout() {
        for (x, a, b) in both_paths(gelu) {
            let want = 0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt()));
            assert!(close(a, want, x.abs()), "gelu({x}): {a} vs {want}");
            assert!(close(b, want, x.abs()), "gelu({x}) alone: {b} vs {want}");
        }
        let grad = |y: &mut [f64], lp: &TorchLoop<'_>| {
            let (x, ones) = (y.to_vec(), vec![1.0; y.len()]);
            gelu_backward(&ones, &x, y, lp);
        };
        for (x, a, b) in both_paths(grad) {
            let pdf = libm::exp(-x * x / 2.0) / (2.0 * std::f64::consts::PI).sqrt();
            let want = 0.5 * (1.0 + libm::erf(x / 2f64.sqrt())) + x * pdf;
            assert!(close(a, want, 1.0 + x.abs()), "gelu'({x}): {a} vs {want}");
            assert!(
                close(b, want, 1.0 + x.abs()),
                "gelu'({x}) alone: {b} vs {want}"
            );
        }
    }

    #[test]
    fn f64_gelu_tanh_is_float64_throughout() {
        let beta = (2.0 / std::f64::consts::PI).sqrt();
        let u = |x: f64| beta * (x + 0.044715 * x * x * x);
        for (x, a, b) in both_paths(gelu_tanh) {
            let want = 0.5 * x * (1.0 + libm::tanh(u(x)));
            // tanh's argument reaches |u| ≈ 12: its ulp-level differences move tanh by at
            // most (1 − t²)·|u|·ε, inside the bound.
            let scale = x.abs() * (1.0 + u(x).abs());
            assert!(close(a, want, scale), "gelu_tanh({x}): {a} vs {want}");
            assert!(close(b, want, scale), "gelu_tanh({x}) alone: {b} vs {want}");
        }
        let grad = |y: &mut [f64], lp: &TorchLoop<'_>| {
            let (x, ones) = (y.to_vec(), vec![1.0; y.len()]);
            gelu_tanh_backward(&ones, &x, y, lp);
        };
        for (x, a, b) in both_paths(grad) {
            let t = libm::tanh(u(x));
            let du = beta * (1.0 + 3.0 * 0.044715 * x * x);
            let want = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
            let scale = 1.0 + x.abs() * du * (1.0 + u(x).abs());
            assert!(close(a, want, scale), "gelu_tanh'({x}): {a} vs {want}");
            assert!(
                close(b, want, scale),
                "gelu_tanh'({x}) alone: {b} vs {want}"
            );
        }
    }

    #[test]
    fn f64_silu_and_relu_are_float64_throughout() {
        // σ(x) = (1 + tanh(x/2))/2: another route to the same value.
        let sig = |x: f64| 0.5 * (1.0 + libm::tanh(x / 2.0));
        for (x, a, b) in both_paths(silu) {
            let want = x * sig(x);
            assert!(close(a, want, x.abs()), "silu({x}): {a} vs {want}");
            assert!(close(b, want, x.abs()), "silu({x}) alone: {b} vs {want}");
        }
        let grad = |y: &mut [f64], lp: &TorchLoop<'_>| {
            let (x, ones) = (y.to_vec(), vec![1.0; y.len()]);
            silu_backward(&ones, &x, y, lp);
        };
        for (x, a, b) in both_paths(grad) {
            let want = sig(x) * (1.0 + x * (1.0 - sig(x)));
            assert!(close(a, want, 1.0 + x.abs()), "silu'({x}): {a} vs {want}");
            assert!(
                close(b, want, 1.0 + x.abs()),
                "silu'({x}) alone: {b} vs {want}"
            );
        }
        for x in xs64() {
            let mut r = [x];
            relu(&mut r);
            assert_eq!(r[0], x.max(0.0), "relu({x})");
            let mut dr = [0.0];
            relu_backward(&[3.0], &r, &mut dr);
            assert_eq!(dr[0], if x > 0.0 { 3.0 } else { 0.0 }, "relu'({x})");
        }
    }

    #[test]
    fn relu_and_its_backward() {
        let mut x = [-1.0f32, 0.0, 2.0];
        relu(&mut x);
        assert_eq!(x, [0.0, 0.0, 2.0]);
        let mut d = [0.0f32; 3];
        relu_backward(&[5.0, 5.0, 5.0], &x, &mut d);
        assert_eq!(d, [0.0, 0.0, 5.0]);
    }
}
