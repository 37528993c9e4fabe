//! The scalar types a computation runs in: `f32` (the profile's arithmetic) and `f64`
//! (the ground truth).
//!
//! Every method maps to one IEEE operation with one rounding, except the transcendentals,
//! which come from the pure-Rust `libm` crate so that results are identical on every
//! machine (numerics.md, "Transcendentals"). Rust never contracts `a * b + c` into an FMA
//! on its own, so an expression written with `*` and `+` rounds twice, and only
//! [`Real::fma`] fuses.

use std::fmt::Debug;
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
    /// `p[i] = fma(g[i], a, p[i])` for every element: one rounding each. Implementations may
    /// use a hardware FMA path; IEEE fma is exactly specified, so the bits are the same.
    fn fma_update(p: &mut [Self], g: &[Self], a: Self) {
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
    fn fma_update(p: &mut [f32], g: &[f32], a: f32) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                return unsafe { fma_update_f32_fma(p, g, a) };
            }
        }
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
    fn fma_update_fast_path_matches_the_scalar_fma() {
        let g: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 3.1).collect();
        let mut fast: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut slow = fast.clone();
        f32::fma_update(&mut fast, &g, -0.05);
        for (w, &d) in slow.iter_mut().zip(&g) {
            *w = libm::fmaf(d, -0.05, *w);
        }
        assert_eq!(fast, slow);
    }

    #[test]
    fn widening_and_narrowing_are_exact_where_representable() {
        assert_eq!(f32::from_f64(0.1f32 as f64).to_bits(), 0.1f32.to_bits());
        assert_eq!(<f64 as Real>::from_f32(0.1f32), 0.1f32 as f64);
    }
}
