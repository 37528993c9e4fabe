//! Profile-likelihood confidence intervals for GPD quantiles (return levels), and a fit with
//! the shape fixed for the conservative fallback.
//!
//! Reparameterization (Coles 2001, §4.3.3 and §2.6.6): the excess z exceeded with conditional
//! probability q satisfies z = σ·L·[expm1(ξL)/(ξL)] with L = −ln q, so for fixed z the scale
//! is σ(ξ; z) = z / (L·expm1_div(ξL)). The profile log-likelihood of z is
//! ℓ_p(z) = max over ξ ∈ [[`XI_MIN`], [`XI_MAX`]] of ℓ(ξ, σ(ξ; z)), and the 95 % interval is
//! {z : 2·(ℓ̂ − ℓ_p(z)) ≤ χ²₁(0.95) = 3.8415} (Wilks). Unlike the delta method it is not
//! forced to be symmetric on any scale: the upper end stretches out when the data say
//! little about the tail, which is what a tolerance sized on the upper end needs.
//!
//! Everything is deterministic: fixed grids, golden-section search and Illinois root
//! finding, `libm` transcendentals, sums in slice order.

use super::gpd::{expm1_div, Gpd, GpdFit, XI_MAX, XI_MIN};
use super::gpd_sums::excess_sum;

/// χ²₁ 0.95 quantile, 1.959963984540054².
pub const CHI2_1_95: f64 = 3.841_458_820_694_124;

/// Points of the coarse ξ grid of the inner maximization (step 2.5/32 ≈ 0.078 in ξ).
const XI_GRID: usize = 33;

/// Golden-section maximization of `f` on [a, b] to width `tol`; returns (argmax, max).
fn golden_max(f: impl Fn(f64) -> f64, mut a: f64, mut b: f64, tol: f64) -> (f64, f64) {
    let inv_phi = (libm::sqrt(5.0) - 1.0) / 2.0;
    let mut c = b - inv_phi * (b - a);
    let mut d = a + inv_phi * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..200 {
        if b - a <= tol {
            break;
        }
        if fc >= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - inv_phi * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + inv_phi * (b - a);
            fd = f(d);
        }
    }
    if fc >= fd {
        (c, fc)
    } else {
        (d, fd)
    }
}

/// GPD log-likelihood of the excesses `values[i] − shift` (all ≥ 0), the same expression as
/// `Gpd::log_pdf` summed (−k·ln σ − (1 + ξ)·Σ wᵢ·[ln(1 + ξwᵢ)/(ξwᵢ)], wᵢ = yᵢ/σ) with ln σ
/// taken once instead of per point; −∞ outside the support or for σ not positive and
/// finite. Summed in slice order.
fn loglik(values: &[f64], shift: f64, xi: f64, sigma: f64) -> f64 {
    if !(sigma > 0.0 && sigma.is_finite()) {
        return f64::NEG_INFINITY;
    }
    let Some(s) = excess_sum(values, shift, xi, sigma) else {
        return f64::NEG_INFINITY;
    };
    -(values.len() as f64) * libm::log(sigma) - (1.0 + xi) * s
}

/// The excesses `values[i] − shift` and the tail probability they are extrapolated to.
struct Excesses<'a> {
    values: &'a [f64],
    shift: f64,
    /// L = −ln q.
    l: f64,
    /// L·expm1_div(ξL) at each point ξ of the profile's grid: the same for every z, so
    /// computed once ([`Excesses::new`]) instead of once per grid point and z.
    grid_scale: [f64; XI_GRID],
}

impl<'a> Excesses<'a> {
    fn new(values: &'a [f64], shift: f64, q: f64) -> Self {
        let l = -libm::log(q);
        Self {
            values,
            shift,
            l,
            grid_scale: std::array::from_fn(|j| l * expm1_div(grid_xi(j) * l)),
        }
    }

    /// ℓ(ξ, σ(ξ; z)) with σ = z / (L·expm1_div(ξL)), `scale` being that denominator.
    fn loglik_scaled(&self, xi: f64, z: f64, scale: f64) -> f64 {
        loglik(self.values, self.shift, xi, z / scale)
    }

    fn loglik(&self, xi: f64, z: f64) -> f64 {
        self.loglik_scaled(xi, z, self.l * expm1_div(xi * self.l))
    }

    /// ℓ_p(z): a 33-point grid over [XI_MIN, XI_MAX], then golden section between the best
    /// point's neighbours to 1e-5 in ξ (an error δ in ξ costs ≈ k·δ²·I/2 ≲ 1e-7 in ℓ).
    fn profile(&self, z: f64) -> f64 {
        let mut best = 0;
        let mut best_val = f64::NEG_INFINITY;
        for j in 0..XI_GRID {
            let v = self.loglik_scaled(grid_xi(j), z, self.grid_scale[j]);
            if v > best_val {
                best_val = v;
                best = j;
            }
        }
        if !best_val.is_finite() {
            return f64::NEG_INFINITY;
        }
        let a = grid_xi(best.saturating_sub(1));
        let b = grid_xi((best + 1).min(XI_GRID - 1));
        let (_, v) = golden_max(|xi| self.loglik(xi, z), a, b, 1e-5);
        v.max(best_val)
    }
}

/// Point j of the profile's ξ grid, XI_MIN + j·(XI_MAX − XI_MIN)/(XI_GRID − 1).
fn grid_xi(j: usize) -> f64 {
    let step = (XI_MAX - XI_MIN) / (XI_GRID - 1) as f64;
    XI_MIN + step * j as f64
}

/// The root of `g` (continuous, g(a) < 0 ≤ g(b)) in [a, b] by the Illinois variant of
/// regula falsi, to a relative width 1e-8 or 100 steps.
fn illinois(g: impl Fn(f64) -> f64, mut a: f64, mut b: f64) -> f64 {
    let (mut ga, mut gb) = (g(a), g(b));
    let mut side = 0;
    for _ in 0..100 {
        if (b - a).abs() <= 1e-8 * a.abs().max(b.abs()).max(1e-300) {
            break;
        }
        let c = if gb.is_finite() && ga.is_finite() && gb != ga {
            (a * gb - b * ga) / (gb - ga)
        } else {
            0.5 * (a + b)
        };
        let c = if c > a.min(b) && c < a.max(b) {
            c
        } else {
            0.5 * (a + b)
        };
        let gc = g(c);
        if gc >= 0.0 {
            b = c;
            gb = gc;
            if side == 1 {
                ga *= 0.5;
            }
            side = 1;
        } else {
            a = c;
            ga = gc;
            if side == -1 {
                gb *= 0.5;
            }
            side = -1;
        }
    }
    b
}

/// Where the deviance `dev` (0 at `z_hat`, growing away from it) reaches `crit`, searching
/// outwards from `z_hat` by factors of `factor` (2 up or 1/2 down), at most 60 times:
/// +∞ going up (or 0 going down) when it never does. Solved in ln z.
fn crossing(dev: impl Fn(f64) -> f64, z_hat: f64, factor: f64, crit: f64) -> f64 {
    let mut inner = z_hat;
    let mut outer = z_hat;
    let mut found = false;
    for _ in 0..60 {
        outer *= factor;
        if dev(outer) >= crit {
            found = true;
            break;
        }
        inner = outer;
    }
    if !found {
        return if factor > 1.0 { f64::INFINITY } else { 0.0 };
    }
    let g = |t: f64| dev(libm::exp(t)) - crit;
    libm::exp(illinois(g, libm::log(inner), libm::log(outer)))
}

/// 95 % profile-likelihood interval (lo, hi) of the excess z exceeded with conditional
/// probability `q` ∈ (0, 1) under the GPD fitted to `values[i] − shift` (`fit` from
/// `fit_mle_shifted` on the same values). The point estimate is `fit.gpd.isf(q)`; hi = +∞
/// when even ξ up to [`XI_MAX`] leaves the deviance below 3.84, lo = 0 likewise below.
pub fn quantile_interval(values: &[f64], shift: f64, fit: &GpdFit, q: f64) -> (f64, f64) {
    let ex = Excesses::new(values, shift, q);
    let z_hat = fit.gpd.isf(q);
    if !(z_hat > 0.0 && z_hat.is_finite()) {
        return (0.0, f64::INFINITY);
    }
    let dev = |z: f64| 2.0 * (fit.loglik - ex.profile(z));
    let hi = crossing(dev, z_hat, 2.0, CHI2_1_95);
    let lo = crossing(dev, z_hat, 0.5, CHI2_1_95);
    (lo, hi)
}

/// A GPD fit with the shape fixed: the scale's MLE, its log-likelihood, and the 95 %
/// profile-likelihood interval of the excess quantile (one free parameter, so the same
/// χ²₁ point).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedShapeFit {
    /// (ξ fixed, σ̂).
    pub gpd: Gpd,
    /// Log-likelihood at σ̂.
    pub loglik: f64,
}

/// The MLE of σ with ξ = `xi` ≥ 0 fixed, for the excesses `values[i] − shift` (all finite,
/// ≥ 0, not all 0): golden section on ln σ over [ln y_max − 40, ln y_max + 10] to 1e-10
/// (the score −k/σ + (1 + ξ)/σ·Σ y/(σ + ξy) has a single root, so ℓ is unimodal in σ).
/// None for an empty or all-zero sample or a non-finite excess.
pub fn fit_fixed_shape(values: &[f64], shift: f64, xi: f64) -> Option<FixedShapeFit> {
    assert!(xi >= 0.0, "fixed shape {xi}");
    let mut ymax: f64 = 0.0;
    for &v in values {
        let y = v - shift;
        if !(y >= 0.0 && y.is_finite()) {
            return None;
        }
        ymax = ymax.max(y);
    }
    if values.is_empty() || ymax <= 0.0 {
        return None;
    }
    let f = |t: f64| loglik(values, shift, xi, libm::exp(t));
    let c = libm::log(ymax);
    let (t, loglik) = golden_max(f, c - 40.0, c + 10.0, 1e-10);
    Some(FixedShapeFit {
        gpd: Gpd {
            shape: xi,
            scale: libm::exp(t),
        },
        loglik,
    })
}

/// 95 % interval (lo, hi) of the excess exceeded with conditional probability `q` under a
/// [`FixedShapeFit`]: z = σ·L·expm1_div(ξL) is proportional to σ, so the interval is the
/// likelihood interval of σ scaled by that factor.
pub fn fixed_shape_interval(values: &[f64], shift: f64, fit: &FixedShapeFit, q: f64) -> (f64, f64) {
    let xi = fit.gpd.shape;
    let dev = |s: f64| 2.0 * (fit.loglik - loglik(values, shift, xi, s));
    let s_hi = crossing(dev, fit.gpd.scale, 2.0, CHI2_1_95);
    let s_lo = crossing(dev, fit.gpd.scale, 0.5, CHI2_1_95);
    let l = -libm::log(q);
    let factor = l * expm1_div(xi * l);
    (s_lo * factor, s_hi * factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::gpd::{fit_mle, SplitMix64};

    fn sample(g: &Gpd, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64(seed);
        (0..n).map(|_| rng.gpd(g)).collect()
    }

    /// The interval contains the point estimate, and at its ends the deviance is 3.84
    /// (checked by re-evaluating the profile there; 1e-6 absolute covers the root finder's
    /// 1e-10 relative width times the deviance's slope, ≲ 100 per unit ln z).
    #[test]
    fn interval_ends_are_where_the_deviance_is_chi2() {
        for (xi, seed) in [(0.0, 1u64), (0.3, 2), (-0.2, 3)] {
            let g = Gpd {
                shape: xi,
                scale: 1.0,
            };
            let y = sample(&g, 200, seed);
            let fit = fit_mle(&y).unwrap();
            let q = 1e-2;
            let (lo, hi) = quantile_interval(&y, 0.0, &fit, q);
            let z = fit.gpd.isf(q);
            assert!(lo < z && z < hi, "{lo} {z} {hi}");
            let ex = Excesses::new(&y, 0.0, q);
            for end in [lo, hi] {
                let d = 2.0 * (fit.loglik - ex.profile(end));
                assert!(
                    (d - CHI2_1_95).abs() < 1e-6,
                    "xi {xi}: deviance {d} at {end}"
                );
            }
            // The profile at the MLE's own quantile is the maximum (to the inner search's
            // resolution: 1e-7 in ξ costs ≲ n·1e-14 in ℓ).
            assert!((ex.profile(z) - fit.loglik).abs() < 1e-6);
        }
    }

    /// Fixed-shape MLE: the score −k + (1 + ξ)·Σ y/(σ + ξy) vanishes at σ̂ (relative 1e-8:
    /// the golden section's 1e-10 in ln σ times a score slope of order k).
    #[test]
    fn fixed_shape_fit_solves_the_score() {
        let g = Gpd {
            shape: 0.1,
            scale: 2.0,
        };
        let y = sample(&g, 300, 9);
        let fit = fit_fixed_shape(&y, 0.0, 0.5).unwrap();
        let s = fit.gpd.scale;
        let score: f64 =
            -(y.len() as f64) + 1.5 * y.iter().map(|&v| v / (s + 0.5 * v)).sum::<f64>();
        assert!(score.abs() < 1e-8 * y.len() as f64, "score {score}");
        let (lo, hi) = fixed_shape_interval(&y, 0.0, &fit, 1e-3);
        let z = fit.gpd.isf(1e-3);
        assert!(lo < z && z < hi);
        assert!(fit_fixed_shape(&[0.0, 0.0], 0.0, 0.5).is_none());
    }
}
