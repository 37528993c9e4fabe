//! Losses besides cross-entropy ([`crate::ops::layers::cross_entropy`]): mean squared
//! error and the plain sum.
//!
//! In f32 both reduce as torch's CPU `sum` does (ATen's cascade sum of a contiguous tensor,
//! [`crate::kernels::torch_ops::row_sum_f32`]); `tests/suite/loss_fixture.rs` holds them to
//! torch 2.15 (one thread, eager, `ATEN_CPU_CAPABILITY=avx2`), bit for bit. In f64 (the
//! ground truth) the sums run left to right from 0 and every constant is a double.

use crate::ops::activations::ActReal;

/// `F.mse_loss(y, target)` (reduction `mean`) and its gradient for a backward pass seeded
/// with `scale`. `dy` holds the squares while the loss is summed (no other buffer).
///
/// Forward, as ATen's `mse_loss` (`aten/src/ATen/native/Loss.cpp`) computes it: the
/// elementwise `d = y - t`, `d·d` (each rounded; `mse_kernel` has no add to contract), then
/// `apply_loss_reduction`'s `mean()`, which on the CPU is `sum(...).div_(numel)`
/// (`mean_out` in `aten/src/ATen/native/ReduceOps.cpp`): the sum in [`ActReal::row_sum_k`]'s
/// order (f32: ATen's cascade; f64: left to right), divided once by `numel` rounded to the
/// type.
///
/// Backward (ATen's `mse_backward_cpu_kernel`, `PointwiseOpsKernel.cpp`): `α = 2 / numel`
/// computed in f64 and rounded to the type (`Scalar::to<scalar_t>`); `dy = (α·(y - t))·scale`,
/// each operation rounded (two products, nothing to contract).
pub fn mse<R: ActReal>(y: &[R], target: &[R], scale: R, dy: &mut [R]) -> R {
    for ((g, &a), &b) in dy.iter_mut().zip(y).zip(target) {
        let d = a - b;
        *g = d * d;
    }
    let n = y.len() as f64;
    let loss = R::row_sum_k(dy) / R::from_f64(n);
    let alpha = R::from_f64(2.0 / n);
    for ((g, &a), &b) in dy.iter_mut().zip(y).zip(target) {
        *g = (alpha * (a - b)) * scale;
    }
    loss
}

/// `y.sum()` and its gradient (`SumBackward`: the seed expanded), `dy = scale` everywhere.
/// The sum in [`ActReal::row_sum_k`]'s order (f32: ATen's cascade sum of a contiguous
/// tensor, `0.0 +` it; f64: left to right from 0).
pub fn sum<R: ActReal>(y: &[R], scale: R, dy: &mut [R]) -> R {
    dy.fill(scale);
    R::row_sum_k(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mse_matches_the_closed_form() {
        let (y, t) = ([1.0f64, 2.0, 4.0], [0.0f64, 2.0, 1.0]);
        let mut d = [0.0; 3];
        let l = mse(&y, &t, 1.0, &mut d);
        assert_eq!(l, (1.0 + 0.0 + 9.0) / 3.0);
        assert_eq!(d, [2.0 / 3.0, 0.0, 2.0]);
    }

    #[test]
    fn sum_gradient_is_the_seed() {
        let mut d = [0.0f32; 2];
        assert_eq!(sum(&[1.5f32, 2.0], 0.5, &mut d), 3.5);
        assert_eq!(d, [0.5, 0.5]);
    }

    /// The f32 reduction is ATen's, not left to right. For 17 elements `1, 2^-24, ..., 2^-24`
    /// left to right each 2^-24 is half an ulp of the running 1 and ties back to it: the sum
    /// is 1. ATen's vector path first sums lane l of the 8 lanes, `x[l] + x[8 + l]`: lane 0 is
    /// 1 again, but lanes 1 to 7 hold 2^-23 each, an ulp of 1, which adds exactly: after the
    /// tail element (`0 + x[16]`, absorbed by lane 0) the sum is 1 + 7·2^-23.
    #[test]
    fn f32_sum_is_not_left_to_right() {
        let mut y = vec![2f32.powi(-24); 17];
        y[0] = 1.0;
        let left_to_right = y.iter().fold(0.0f32, |a, &b| a + b);
        assert_eq!(left_to_right, 1.0);
        let mut d = vec![0.0f32; 17];
        assert_eq!(sum(&y, 1.0, &mut d), 1.0 + 7.0 * 2f32.powi(-23));
    }
}
