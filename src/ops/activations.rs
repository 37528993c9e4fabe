//! Elementwise activations and their backward passes: gelu (exact and tanh approximation),
//! relu, silu. Each is a pure function of its element (no dependence on position or
//! neighbours), so a sharded tensor gives the same bits as the whole one.
//!
//! f32 follows torch's vectorized CPU kernels (`aten/src/ATen/native/cpu/Activation.cpp`,
//! `Gelu.h`, AVX2 build) as this file states them, with `a + b·c` fused into `fma(b, c, a)` exactly
//! where the measurement below found torch's build (GCC, `-ffp-contract=fast`) fusing it; f64 runs the same
//! expressions with `libm`.
//! Exps and tanhs are SLEEF's u10 kernels ([`crate::kernels::torch_ops::exp_f32`],
//! [`crate::kernels::torch_ops::sleef_tanhf_u10`]), as ATen's `Vectorized<float>` calls them.
//!
//! Measured against torch 2.15 (CPU, one thread, eager, `ATEN_CPU_CAPABILITY=avx2`), 8,192
//! elements `s·randn` after `manual_seed(0)`, bit for bit (`scripts/activations_torch.py`):
//! `gelu_tanh`, `silu` and their backward passes are bit-exact (8,192 / 8,192 each, s = 2 and
//! s = 0.5); the exact `gelu` is **not**: its erf here is `libm::erff`, not the kernel torch
//! vectorizes, so forward agrees on 5,576 / 8,192 (68.1 %, s = 2) and 7,343 / 8,192 (89.6 %,
//! s = 0.5), backward on 2,347 (28.6 %) and 1,835 (22.4 %). Relu copies or zeroes (exact).

use crate::kernels::torch_ops::{exp_f32, row_sum_f32, sleef_tanhf_u10};
use crate::ops::real::Real;

/// `M_SQRT1_2` rounded to f32.
const ALPHA: f32 = std::f64::consts::FRAC_1_SQRT_2 as f32;
/// `M_2_SQRTPI * M_SQRT1_2 * 0.5` (in f64) rounded to f32: 1/√(2π).
const BETA: f32 = (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2 * 0.5) as f32;
/// `M_SQRT2 * M_2_SQRTPI * 0.5` (in f64) rounded to f32: √(2/π).
const GELU_TANH_BETA: f32 =
    (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
/// 0.044715 rounded to f32.
const KAPPA: f32 = 0.044715;

/// Scalar types with torch's activation kernels.
pub trait ActReal: Real {
    /// `erf` as the gelu kernels use it.
    fn erf_k(self) -> Self;
    /// `exp` as the activation kernels use it.
    fn exp_k(self) -> Self;
    /// `tanh` as the tanh-approximate gelu uses it.
    fn tanh_k(self) -> Self;
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
    fn erf_k(self) -> Self {
        libm::erff(self)
    }
    fn exp_k(self) -> Self {
        exp_f32(self)
    }
    fn tanh_k(self) -> Self {
        sleef_tanhf_u10(self)
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
    fn erf_k(self) -> Self {
        libm::erf(self)
    }
    fn exp_k(self) -> Self {
        libm::exp(self)
    }
    fn tanh_k(self) -> Self {
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

/// `x = gelu(x)`: `(x·0.5)·(1 + erf(x·α))`, each operation rounded, α = 1/√2 (not
/// bit-exact: see the module doc).
pub fn gelu<R: ActReal>(x: &mut [R]) {
    let (half, one, alpha) = (R::from_f64(0.5), R::ONE, R::from_f32(ALPHA));
    for v in x {
        *v = (*v * half) * (one + (*v * alpha).erf_k());
    }
}

/// gelu backward from the input `x`: `cdf = 0.5·(1 + erf(x·α))`,
/// `pdf = β·exp((x·x)·(-0.5))`, `dx = dy·(cdf + x·pdf)`, each operation rounded,
/// β = 1/√(2π) (not bit-exact: see the module doc).
pub fn gelu_backward<R: ActReal>(dy: &[R], x: &[R], dx: &mut [R]) {
    let (half, one, alpha, beta) = (
        R::from_f64(0.5),
        R::ONE,
        R::from_f32(ALPHA),
        R::from_f32(BETA),
    );
    for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
        let cdf = half * (one + (v * alpha).erf_k());
        let pdf = beta * ((v * v) * (-half)).exp_k();
        *d = g * (cdf + v * pdf);
    }
}

/// `x = gelu(x, approximate="tanh")`: `c = (x·x)·x`; `inner = β·fma(κ, c, x)`;
/// `(0.5·x)·(1 + tanh(inner))`, each other operation rounded, β = √(2/π), κ = 0.044715.
pub fn gelu_tanh<R: ActReal>(x: &mut [R]) {
    let (half, one, beta, kappa) = (
        R::from_f64(0.5),
        R::ONE,
        R::from_f32(GELU_TANH_BETA),
        R::from_f32(KAPPA),
    );
    for v in x {
        let c = (*v * *v) * *v;
        let inner = beta * kappa.fma(c, *v);
        *v = (half * *v) * (one + inner.tanh_k());
    }
}

/// Backward of [`gelu_tanh`] from the input `x`: `x2 = x·x`; `inner = β·fma(κ, x2·x, x)`;
/// `t = tanh(inner)`; `left = 0.5·x`; `right = 1 + t`; `left_d = 0.5·right`;
/// `tanh_d = fma(-t, t, 1)`; `inner_d = β·fma(3κ, x2, 1)` (3κ rounded);
/// `dx = dy·(left_d + (left·tanh_d)·inner_d)`, each other operation rounded.
pub fn gelu_tanh_backward<R: ActReal>(dy: &[R], x: &[R], dx: &mut [R]) {
    let (half, one, beta, kappa) = (
        R::from_f64(0.5),
        R::ONE,
        R::from_f32(GELU_TANH_BETA),
        R::from_f32(KAPPA),
    );
    let three_kappa = R::from_f64(3.0) * kappa;
    for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
        let x2 = v * v;
        let inner = beta * kappa.fma(x2 * v, v); // x_cube = (x·x)·x
        let t = inner.tanh_k();
        let left = half * v;
        let right = one + t;
        let left_d = half * right;
        let tanh_d = (-t).fma(t, one);
        let inner_d = beta * three_kappa.fma(x2, one);
        *d = g * (left_d + (left * tanh_d) * inner_d);
    }
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

/// `x = silu(x)`: `x / (1 + exp(-x))`, each operation rounded.
pub fn silu<R: ActReal>(x: &mut [R]) {
    for v in x {
        *v = *v / (R::ONE + (-*v).exp_k());
    }
}

/// silu backward from the input: `s = 1 / (1 + exp(-x))`; `dx = (dy·s)·fma(x, 1 - s, 1)`,
/// each other operation rounded.
pub fn silu_backward<R: ActReal>(dy: &[R], x: &[R], dx: &mut [R]) {
    for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
        let s = R::ONE / (R::ONE + (-v).exp_k());
        *d = (g * s) * v.fma(R::ONE - s, R::ONE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_kernels_stay_close_to_the_f64_formulas() {
        // The f32 kernels are approximations (ATen's erf is A&S 7.1.26, |error| < 1.5e-7
        // absolute; SLEEF exp/tanh within 1 ulp); 1e-6 absolute bounds the sum of those and
        // a few f32 roundings for |x| <= 4, where every value here is O(1).
        for i in -400..=400 {
            let x = i as f32 / 100.0;
            let (mut a, mut b, mut c) = ([x], [x], [x]);
            gelu(&mut a);
            gelu_tanh(&mut b);
            silu(&mut c);
            let x64 = x as f64;
            let g64 = 0.5 * x64 * (1.0 + libm::erf(x64 / 2f64.sqrt()));
            let t64 = 0.5
                * x64
                * (1.0
                    + libm::tanh(
                        (2.0 / std::f64::consts::PI).sqrt() * (x64 + 0.044715 * x64 * x64 * x64),
                    ));
            let s64 = x64 / (1.0 + (-x64).exp());
            assert!((a[0] as f64 - g64).abs() < 1e-6, "gelu({x})");
            assert!((b[0] as f64 - t64).abs() < 1e-6, "gelu_tanh({x})");
            assert!((c[0] as f64 - s64).abs() < 1e-6, "silu({x})");
            let mut d = [0.0f32];
            gelu_backward(&[1.0], &[x], &mut d);
            let pdf = (-x64 * x64 / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let dg = 0.5 * (1.0 + libm::erf(x64 / 2f64.sqrt())) + x64 * pdf;
            assert!((d[0] as f64 - dg).abs() < 1e-6, "gelu'({x})");
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
