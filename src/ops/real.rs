//! The scalar types a computation runs in: `f32` (the profile's arithmetic) and `f64`
//! (the ground truth).
//!
//! Every method maps to one IEEE operation with one rounding, except the transcendentals,
//! which come from the pure-Rust `libm` crate so that results are identical on every
//! machine (numerics.md, "Transcendentals"). The slice-level hooks (`tanh_slice`,
//! `cross_entropy`, `tanh_backward`, `column_sums`) follow torch's CPU kernels for `f32`
//! (`fp::torch_ops`, verified bit for bit against torch 2.15; `tanh_slice` is the correctly
//! rounded tanh, and the torch scenarios take the profile's tanh from the backend instead) and
//! the plain written order for `f64`. Rust never contracts `a * b + c` into an FMA
//! on its own, so an expression written with `*` and `+` rounds twice, and only
//! [`Real::fma`] fuses.

use std::fmt::Debug;

use crate::kernels::isa::Isa;
use crate::kernels::torch_ops;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A floating-point scalar with exactly-specified operations.
pub trait Real:
    Copy
    + Debug
    + Default
    + PartialOrd
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Exact for `f64`; rounds to nearest even for `f32`.
    fn from_f64(x: f64) -> Self;
    /// Exact widening of an `f32` value.
    fn from_f32(x: f32) -> Self;
    /// Exact widening to `f64`.
    fn to_f64(self) -> f64;
    /// `self * a + b` with a single rounding (IEEE fusedMultiplyAdd).
    fn fma(self, a: Self, b: Self) -> Self;
    /// Hyperbolic tangent from `libm` (`tanhf` / `tanh`).
    fn tanh(self) -> Self;
    /// Exponential from `libm` (`expf` / `exp`).
    fn exp(self) -> Self;
    /// Natural logarithm from `libm` (`logf` / `log`).
    fn ln(self) -> Self;
    /// `x = tanh(x)` elementwise. Default: [`Real::tanh`] per element (`libm`).
    fn tanh_slice(x: &mut [Self]) {
        for v in x {
            *v = v.tanh();
        }
    }
    /// `x = exp(x)` elementwise, bit for bit [`Real::exp`] per element (the default); f64
    /// vectorizes it ([`crate::kernels::exp_slice`]).
    fn exp_slice(x: &mut [Self]) {
        for v in x {
            *v = v.exp();
        }
    }
    /// Mean cross-entropy and its gradient; see [`crate::ops::layers::cross_entropy`].
    fn cross_entropy(
        logits: &[Self],
        labels: &[i64],
        n: usize,
        scale: Self,
        dlogits: &mut [Self],
    ) -> Self {
        crate::ops::layers::cross_entropy_generic(logits, labels, n, scale, dlogits)
    }
    /// tanh backward; see [`crate::ops::layers::tanh_backward`].
    fn tanh_backward(dh: &[Self], h: &[Self], dpre: &mut [Self]) {
        crate::ops::layers::tanh_backward_generic(dh, h, dpre)
    }
    /// Column sums; see [`crate::ops::layers::column_sums`].
    fn column_sums(x: &[Self], n: usize, out: &mut [Self]) {
        crate::ops::layers::column_sums_generic(x, n, out)
    }
    /// `Σ get(i)` over `i < n`, a sum over the last dim of a contiguous row (`x.sum(-1)`):
    /// f32 in ATen's CPU order ([`torch_ops::row_sum_f32_by`]); the default (f64) left to
    /// right from 0: `((0 + get(0)) + get(1)) + …`.
    fn row_sum_by(n: usize, get: impl Fn(usize) -> Self) -> Self {
        (0..n).fold(Self::ZERO, |a, i| a + get(i))
    }
    /// `out[c] = Σ_i get(i, c)` over `i < rows`, a sum over the leading dim of a row-major
    /// `rows x out.len()` tensor (`x.sum(0)`): f32 in ATen's CPU order
    /// ([`torch_ops::column_sums_f32_by`]); the default (f64) rows in order from 0:
    /// `((0 + get(0, c)) + get(1, c)) + …`.
    fn column_sums_by(rows: usize, get: impl Fn(usize, usize) -> Self, out: &mut [Self]) {
        for (c, o) in out.iter_mut().enumerate() {
            *o = (0..rows).fold(Self::ZERO, |a, i| a + get(i, c));
        }
    }
    /// `p[i] = fma(g[i], a, p[i])` for every element: one rounding each
    /// ([`Real::fma_update_on`] the detected [`Isa`]).
    fn fma_update(p: &mut [Self], g: &[Self], a: Self) {
        Self::fma_update_on(Isa::detected(), p, g, a)
    }
    /// [`Real::fma_update`] on the compilation `isa` names. Implementations may use a
    /// hardware FMA path; IEEE fma is exactly specified, so the bits are the same.
    fn fma_update_on(isa: Isa, p: &mut [Self], g: &[Self], a: Self) {
        let _ = isa;
        for (w, &d) in p.iter_mut().zip(g) {
            *w = d.fma(a, *w);
        }
    }
}

#[inline(always)]
fn fma_update_f32(p: &mut [f32], g: &[f32], a: f32) {
    for (w, &d) in p.iter_mut().zip(g) {
        *w = d.mul_add(a, *w);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_update_f32_fma(p: &mut [f32], g: &[f32], a: f32) {
    fma_update_f32(p, g, a);
}

#[inline(always)]
fn fma_update_f64(p: &mut [f64], g: &[f64], a: f64) {
    for (w, &d) in p.iter_mut().zip(g) {
        *w = d.mul_add(a, *w);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_update_f64_fma(p: &mut [f64], g: &[f64], a: f64) {
    fma_update_f64(p, g, a);
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn fma(self, a: Self, b: Self) -> Self {
        self.mul_add(a, b)
    }
    #[inline]
    fn tanh(self) -> Self {
        libm::tanhf(self)
    }
    #[inline]
    fn exp(self) -> Self {
        libm::expf(self)
    }
    #[inline]
    fn ln(self) -> Self {
        libm::logf(self)
    }
    /// The correctly rounded tanh ([`torch_ops::tanh_slice`]). The torch scenarios do not
    /// use this: they call [`crate::ops::backend::Backend::tanh`], which runs the profile's tanh
    /// (MKL's `vmsTanh` for the torch CPU profiles).
    fn tanh_slice(x: &mut [f32]) {
        torch_ops::tanh_slice(x);
    }
    /// torch's CPU `log_softmax` + `nll_loss` forward and backward, bit for bit
    /// ([`torch_ops::log_softmax_cross_entropy_f32`]).
    fn cross_entropy(
        logits: &[f32],
        labels: &[i64],
        n: usize,
        scale: f32,
        dlogits: &mut [f32],
    ) -> f32 {
        torch_ops::log_softmax_cross_entropy_f32(logits, labels, n, scale, dlogits)
    }
    /// torch's CPU `tanh_backward`, `grad · fma(-y, y, 1)` ([`torch_ops::tanh_backward_f32`]).
    fn tanh_backward(dh: &[f32], h: &[f32], dpre: &mut [f32]) {
        torch_ops::tanh_backward_f32(dh, h, dpre);
    }
    /// torch's CPU `sum(0)` order ([`torch_ops::column_sums_f32`]).
    fn column_sums(x: &[f32], n: usize, out: &mut [f32]) {
        // torch_ops takes the row count; `n` here is the column count (= out.len()).
        torch_ops::column_sums_f32(x, x.len() / n, out);
    }
    /// ATen's CPU inner-reduction order ([`torch_ops::row_sum_f32_by`]).
    fn row_sum_by(n: usize, get: impl Fn(usize) -> f32) -> f32 {
        torch_ops::row_sum_f32_by(n, get)
    }
    /// ATen's CPU `sum(0)` order ([`torch_ops::column_sums_f32_by`]).
    fn column_sums_by(rows: usize, get: impl Fn(usize, usize) -> f32, out: &mut [f32]) {
        torch_ops::column_sums_f32_by(rows, get, out);
    }
    fn fma_update_on(isa: Isa, p: &mut [f32], g: &[f32], a: f32) {
        #[cfg(target_arch = "x86_64")]
        {
            if isa.avx2() {
                // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2 and
                // FMA.
                return unsafe { fma_update_f32_fma(p, g, a) };
            }
        }
        let _ = isa;
        fma_update_f32(p, g, a);
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline]
    fn from_f32(x: f32) -> Self {
        x as f64
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn fma(self, a: Self, b: Self) -> Self {
        self.mul_add(a, b)
    }
    #[inline]
    fn tanh(self) -> Self {
        libm::tanh(self)
    }
    #[inline]
    fn exp(self) -> Self {
        libm::exp(self)
    }
    #[inline]
    fn ln(self) -> Self {
        libm::log(self)
    }
    /// `libm::tanh` of each element, eight lanes at a time where the CPU allows, bit for bit
    /// ([`crate::kernels::tanh64_slice`]).
    fn tanh_slice(x: &mut [f64]) {
        crate::kernels::tanh64_slice::tanh64_slice(x);
    }
    /// `libm::exp` of each element, eight lanes at a time where the CPU allows, bit for bit.
    fn exp_slice(x: &mut [f64]) {
        crate::kernels::exp_slice::exp_slice(x);
    }
    fn fma_update_on(isa: Isa, p: &mut [f64], g: &[f64], a: f64) {
        #[cfg(target_arch = "x86_64")]
        {
            if isa.avx2() {
                // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2 and
                // FMA.
                return unsafe { fma_update_f64_fma(p, g, a) };
            }
        }
        let _ = isa;
        fma_update_f64(p, g, a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fma_rounds_once_where_mul_then_add_rounds_twice() {
        // a = 1 + 2^-12: a*a = 1 + 2^-11 + 2^-24 exactly. The plain product rounds the
        // 2^-24 term away (it is a tie to even), the fused form keeps it until the final
        // subtraction of (1 + 2^-11), which is exact.
        let a = 1.0f32 + f32::EPSILON * 2048.0;
        let c = -(1.0f32 + f32::EPSILON * 4096.0);
        assert_eq!(a * a + c, 0.0);
        assert_eq!(Real::fma(a, a, c), 2f32.powi(-24));
    }

    #[test]
    fn widening_and_narrowing_are_exact_where_representable() {
        assert_eq!(f32::from_f64(0.1f32 as f64).to_bits(), 0.1f32.to_bits());
        assert_eq!(<f64 as Real>::from_f32(0.1f32), 0.1f32 as f64);
    }
}
