//! Statistics: order statistics for the summary, tail estimates and tolerance sizing.

pub mod binomial;
pub mod frontier;
pub mod gpd;
#[doc(hidden)]
pub mod gpd_sums;
pub mod profile_likelihood;
pub mod tail;

pub mod histogram;

/// The q-quantile of `sorted` (ascending, non-empty) by linear interpolation between order
/// statistics, numpy's default (`method="linear"`): position `q·(n-1)`, interpolated between
/// its floor and ceiling. Infinite values are handled without producing NaN: if the two
/// neighbours are equal the value is that neighbour, and an infinite upper neighbour with a
/// positive weight gives infinity.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of an empty sample");
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let (a, b) = (sorted[lo], sorted[hi]);
    let w = pos - lo as f64;
    if a == b || w == 0.0 {
        a
    } else if b.is_infinite() {
        b
    } else {
        a + (b - a) * w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_numpy_linear_method() {
        // numpy.quantile([1, 2, 3, 4], [0, .5, .95, 1]) = [1, 2.5, 3.85, 4]
        let x = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile_sorted(&x, 0.0), 1.0);
        assert_eq!(quantile_sorted(&x, 0.5), 2.5);
        // 3 + (4-3)·0.85 computed in f64, as numpy does.
        assert_eq!(quantile_sorted(&x, 0.95), 3.0 + 1.0 * (0.95f64 * 3.0 - 2.0));
        assert_eq!(quantile_sorted(&x, 1.0), 4.0);
        assert_eq!(quantile_sorted(&[7.0], 0.5), 7.0);
    }

    #[test]
    fn infinite_tail_does_not_become_nan() {
        let x = [1.0, f64::INFINITY];
        assert_eq!(quantile_sorted(&x, 0.5), f64::INFINITY);
        assert_eq!(quantile_sorted(&x, 0.0), 1.0);
        let y = [f64::INFINITY, f64::INFINITY];
        assert_eq!(quantile_sorted(&y, 0.3), f64::INFINITY);
    }
}
