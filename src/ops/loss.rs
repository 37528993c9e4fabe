//! Losses besides cross-entropy ([`crate::ops::layers::cross_entropy`]): mean squared
//! error and the plain sum.

use crate::ops::real::Real;

/// `F.mse_loss(y, target)` (mean) and its gradient for a backward pass seeded with `scale`.
///
/// Forward: `d = y - t`, `d·d` per element, summed in index order from 0, divided once by
/// the element count. **Not torch's reduction order** (torch's `mean` is a vectorized cascade
/// sum), so the recorded loss may differ from torch's in the last bits.
///
/// Backward (ATen's `mse_backward_cpu_kernel`): `α = (2 / numel)` computed in f64 and rounded
/// to the scalar type; `dy = (α·(y - t))·scale`, each operation rounded.
pub fn mse<R: Real>(y: &[R], target: &[R], scale: R, dy: &mut [R]) -> R {
    let mut total = R::ZERO;
    for (&a, &b) in y.iter().zip(target) {
        let d = a - b;
        total = total + d * d;
    }
    let n = y.len() as f64;
    let alpha = R::from_f64(2.0 / n);
    for ((g, &a), &b) in dy.iter_mut().zip(y).zip(target) {
        *g = (alpha * (a - b)) * scale;
    }
    total / R::from_f64(n)
}

/// `y.sum()` and its gradient (`SumBackward`: the seed expanded), `dy = scale` everywhere.
/// The sum runs in index order from 0 (**not** torch's cascade order; the gradient is exact).
pub fn sum<R: Real>(y: &[R], scale: R, dy: &mut [R]) -> R {
    dy.fill(scale);
    y.iter().fold(R::ZERO, |a, &b| a + b)
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
}
