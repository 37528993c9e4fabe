//! The `out.sum()` loss (DeepSpeed's `TestTpLayerFwdBwd` backpropagates `out.sum()`).

use crate::real::Real;

/// `loss = Σ x` with the gradient of a backward pass seeded with `scale`.
///
/// Backward (what the checks see): `dx[i] = scale` for every element, torch's
/// `SumBackward0` (the seed expanded to the input's shape: a copy, no arithmetic).
///
/// Forward: `((x[0] + x[1]) + x[2]) + …` left to right from 0, one rounding per add. This is
/// not torch's CPU order for `sum()` (a vectorized cascade), so the value is not torch's
/// bits; the scenario language refuses a check on the value of a `sum` loss, and the
/// executor uses the value for nothing else.
pub fn sum_loss<R: Real>(x: &[R], scale: R, dx: &mut [R]) -> R {
    dx.fill(scale);
    x.iter().fold(R::ZERO, |acc, &v| acc + v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_is_the_seed_and_value_the_left_to_right_sum() {
        // 1 + 2^-24 + 2^-24: left to right each tiny term rounds away (ties to even), so the
        // sum is exactly 1; the gradient is the seed everywhere, bit for bit.
        let x = [1.0f32, f32::EPSILON / 2.0, f32::EPSILON / 2.0];
        let mut dx = [9.0f32; 3];
        let v = sum_loss(&x, 0.5f32, &mut dx);
        assert_eq!(v, 1.0f32);
        assert_eq!(dx, [0.5f32; 3]);
    }
}
