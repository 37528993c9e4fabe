//! The elementwise kernels of a JAX program in XLA's execution modes ([`XlaMode`]), which the
//! executor calls instead of torch's where a graph runs as JAX does (an outer-loop graph,
//! [`crate::exec::outer_loop`]). Measured with JAX 0.10.2 on the CPU
//! (`scripts/crosscheck_jax.py --contraction`):
//! - `eager` (op by op): every elementwise operation is its own XLA executable and rounds
//!   once, so `p + (−lr)·g` is `round(p + round(−lr·g))` (100 % of random inputs);
//! - `jit` (`jax.jit` of the step): XLA's CPU backend contracts a product that feeds an add
//!   into one FMA: the SGD update is `fma(g, −lr, p)` (100 %), the loss of two examples of
//!   one output `fma(r0, r0, r1·r1)` (100 % of 1000 random states of the real jitted step),
//!   tanh's derivative `fma(dy, y, dy)·(1 − y)`.
//!
//! Constants are rounded once to the computation's precision (f32: round to nearest, as JAX
//! converts a weak-typed Python float).

use crate::ops::optim::OptState;
use crate::ops::real::Real;
use crate::scenario::ir::Optimizer;
use crate::scenario::profile::XlaMode;

/// Correctly rounded square root in either precision: the f64 square root of the exactly
/// widened value, rounded once to `R`. For f32 the double rounding is innocuous (f64 carries
/// more than 2·24 + 2 significant bits, Figueroa 1995).
fn sqrt<R: Real>(x: R) -> R {
    R::from_f64(x.to_f64().sqrt())
}

/// `mean((y − t)²)` as JAX computes it, with its gradient `dy = c·(y − t)`, `c = 2/N` rounded
/// once. Eager (and jit beyond two elements): the squares rounded, summed from 0 in element
/// order, divided once by `N` (seed 1; not torch's order, [`crate::ops::loss::mse`]). Jit with two
/// elements of one output (MaxText's test): the sum is `fma(r0, r0, r1·r1)`. XLA's reduction
/// order for more elements is not revealed (neither a forward nor a backward FMA chain matches
/// the jitted step for 3 to 16 examples), so there jit sums as eager does.
pub fn mse<R: Real>(mode: XlaMode, y: &[R], target: &[R], width: usize, dy: &mut [R]) -> R {
    let mut total = R::ZERO;
    for (&a, &b) in y.iter().zip(target) {
        let d = a - b;
        total = total + d * d;
    }
    let n = y.len() as f64;
    let alpha = R::from_f64(2.0 / n);
    for ((g, &a), &b) in dy.iter_mut().zip(y).zip(target) {
        *g = alpha * (a - b);
    }
    let loss = total / R::from_f64(n);
    if mode == XlaMode::Jit && y.len() == 2 && width == 1 {
        let (r0, r1) = (y[0] - target[0], y[1] - target[1]);
        return r0.fma(r0, r1 * r1) / R::from_f64(2.0);
    }
    loss
}

/// `tanh`'s derivative as JAX writes it, `dx = (dy + dy·y)·(1 − y)`: jit
/// `fma(dy, y, dy)·(1 − y)` (the add contracted), eager every operation rounded.
pub fn tanh_backward<R: Real>(mode: XlaMode, dy: &[R], y: &[R], dx: &mut [R]) {
    for ((d, &g), &hv) in dx.iter_mut().zip(dy).zip(y) {
        let gy = if mode == XlaMode::Jit {
            g.fma(hv, g)
        } else {
            g + g * hv
        };
        *d = gy * (R::ONE - hv);
    }
}

/// One step of optax's optimizer for `opt` on `p` with gradient `g`, `t` the 1-based step:
/// - plain SGD (`optax.sgd(lr)`): jit `fma(g, −lr, p)`, eager `round(p + round(−lr·g))`;
/// - decoupled Adam (`optax.adamw(lr, b1, b2, eps, eps_root=0, weight_decay)`):
///   `m = (1−b1)·g + b1·m` and `v = (1−b2)·(g·g) + b2·v` (every operation rounded; the two
///   products of each sum make it no single contraction); `m̂ = m / bc1`, `v̂ = v / bc2` with
///   `bc = 1 − b^t` computed in f64 and rounded once; `u = m̂ / (sqrt(v̂) + eps)` (sqrt
///   correctly rounded); jit `u = fma(wd, p, u)`, `p = fma(u, −lr, p)`; eager
///   `u = round(u + round(wd·p))`, `p = round(p + round(−lr·u))`.
///
/// `st` holds Adam's `m` and `v` (sized and zeroed on the first step). Other optimizers are
/// refused when the graph is validated.
pub fn step<R: Real>(
    mode: XlaMode,
    opt: Optimizer,
    t: usize,
    p: &mut [R],
    g: &[R],
    st: &mut OptState<R>,
) {
    let jit = mode == XlaMode::Jit;
    match opt {
        Optimizer::Sgd { lr, .. } => {
            let neg_lr = -R::from_f64(lr);
            if jit {
                R::fma_update(p, g, neg_lr);
            } else {
                for (w, &gv) in p.iter_mut().zip(g) {
                    *w = *w + neg_lr * gv;
                }
            }
        }
        Optimizer::Adam {
            lr,
            beta1: b1,
            beta2: b2,
            eps,
            weight_decay,
            ..
        } => {
            if st.m.len() != p.len() {
                st.m.clear();
                st.m.resize(p.len(), R::ZERO);
                st.v.clear();
                st.v.resize(p.len(), R::ZERO);
            }
            let c1 = R::from_f64(1.0 - b1);
            let c2 = R::from_f64(1.0 - b2);
            let (b1r, b2r) = (R::from_f64(b1), R::from_f64(b2));
            let bc1 = R::from_f64(1.0 - b1.powi(t as i32));
            let bc2 = R::from_f64(1.0 - b2.powi(t as i32));
            let (eps, wd, neg_lr) = (
                R::from_f64(eps),
                R::from_f64(weight_decay),
                -R::from_f64(lr),
            );
            for (((w, &gv), mv), vv) in p
                .iter_mut()
                .zip(g)
                .zip(st.m.iter_mut())
                .zip(st.v.iter_mut())
            {
                *mv = c1 * gv + b1r * *mv;
                *vv = c2 * (gv * gv) + b2r * *vv;
                let mh = *mv / bc1;
                let vh = *vv / bc2;
                let u = mh / (sqrt(vh) + eps);
                if jit {
                    let u = wd.fma(*w, u);
                    *w = u.fma(neg_lr, *w);
                } else {
                    let u = u + wd * *w;
                    *w = *w + neg_lr * u;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jit_contracts_the_two_element_loss_and_eager_does_not() {
        // r0 = 1 + 2^-12, r1 = 2^-12: r0² = 1 + 2^-11 + 2^-24 rounds (tie to even) to
        // 1 + 2^-11 eagerly, and adding r1² = 2^-24 ties back to it; the fma adds both
        // 2^-24 exactly, giving 1 + 2^-11 + 2^-23. The expectations are computed in f64
        // (exact here) and rounded as each order says.
        let y = [1.0f32 + 1.0 / 4096.0, 1.0 / 4096.0];
        let t = [0.0f32, 0.0];
        let mut dy = [0.0f32; 2];
        let (r0, r1) = (y[0] as f64, y[1] as f64);
        let eager_want = ((r0 * r0) as f32 + (r1 * r1) as f32) / 2.0;
        let jit_want = ((r0 * r0 + r1 * r1) as f32) / 2.0;
        assert_ne!(eager_want, jit_want);
        assert_eq!(mse(XlaMode::Eager, &y, &t, 1, &mut dy), eager_want);
        assert_eq!(mse(XlaMode::Jit, &y, &t, 1, &mut dy), jit_want);
    }

    #[test]
    fn sgd_rounds_once_under_jit_and_twice_eager() {
        // p = 1, g = 1 + 2^-23, lr = 0.1f32: the product −lr·g is inexact in f32.
        let g = [1.0f32 + f32::EPSILON];
        let lr = 0.1f64;
        let neg = -(lr as f32) as f64;
        let (mut pe, mut pj) = ([1.0f32], [1.0f32]);
        let mut st = OptState::default();
        step(XlaMode::Eager, Optimizer::sgd(lr), 1, &mut pe, &g, &mut st);
        step(XlaMode::Jit, Optimizer::sgd(lr), 1, &mut pj, &g, &mut st);
        assert_eq!(pe[0], (1.0 + ((neg * g[0] as f64) as f32) as f64) as f32);
        assert_eq!(pj[0], (1.0 + neg * g[0] as f64) as f32);
    }
}
