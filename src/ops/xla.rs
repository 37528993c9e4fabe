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
/// - decoupled Adam (`optax.adamw(lr, b1, b2, eps, eps_root=0, weight_decay)`), as JAX runs it
///   with its defaults (`jax_enable_x64` off, as MaxText's test runs), measured with
///   `scripts/jax_probe_xla.py` (100 % of 4,000 random elements at steps 1, 2 and 7, each mode):
///   the moments eager `m = (1−b1)·g + b1·m`, `v = (1−b2)·(g·g) + b2·v` (every operation
///   rounded), jit `m = fma(1−b1, g, b1·m)`, `v = fma(1−b2, g·g, b2·v)` (XLA contracts the first
///   product into the add); the bias correction `bc = 1 − b^t` in the computation's precision
///   (optax's weak-typed `1 - decay**count`: `b` rounded to it, `b^t` correctly rounded, here
///   the f64 `powi` of the rounded base, relative error below t·2⁻⁵², rounded once), computed in
///   a jitted function in either mode, where XLA turns the division by the scalar into a
///   product with its reciprocal: `m̂ = m·(1/bc1)`, `v̂ = v·(1/bc2)`; `u = m̂ / (sqrt(v̂) + eps)`
///   (sqrt correctly rounded); jit `u = fma(wd, p, u)`, `p = fma(u, −lr, p)`; eager
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
            let pow = |b: R| R::from_f64(b.to_f64().powi(t as i32));
            let inv_bc1 = R::ONE / (R::ONE - pow(b1r));
            let inv_bc2 = R::ONE / (R::ONE - pow(b2r));
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
                if jit {
                    *mv = c1.fma(gv, b1r * *mv);
                    *vv = c2.fma(gv * gv, b2r * *vv);
                } else {
                    *mv = c1 * gv + b1r * *mv;
                    *vv = c2 * (gv * gv) + b2r * *vv;
                }
                let mh = *mv * inv_bc1;
                let vh = *vv * inv_bc2;
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

    #[test]
    fn adamw_matches_optax_under_jax_defaults_in_both_modes() {
        // Real JAX 0.10.2 / optax 0.2.8 on the CPU, jax_enable_x64 off:
        // optax.adamw(0.01, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01) on 8 f32 parameters
        // (numpy default_rng(7) normals), three steps with the gradients below, the step
        // called directly (eager) and under jax.jit; the parameters' bits after each step.
        let p0 = [
            0x3aa13d19u32,
            0x3e98f52d,
            0xbe8c5bcc,
            0xbf63fdd4,
            0xbee8ca9c,
            0xbf7ddc8c,
            0x3d765923,
            0x3fab8c2c,
        ];
        let grads = [
            [
                0xbefc027eu32,
                0xbf1ed771,
                0x3efacc94,
                0x3eb6b9e5,
                0x3dd7e36d,
                0xbf6e3327,
                0xbcefa185,
                0x3f31ff64,
            ],
            [
                0xbfac0f39, 0xbeea4c9d, 0xbff35b44, 0xbfa50f93, 0xbfebbdf9, 0xbe70bbbb, 0xbfa23bb0,
                0x3e8ae329,
            ],
            [
                0x3e20835b, 0xbe3f6ad3, 0xc0211297, 0xbf09e7c7, 0xbd46a8ed, 0x3de80e8b, 0xbfc3db7d,
                0xbef49c14,
            ],
        ];
        let later = [
            [
                0x3ca818feu32,
                0x3ea311b8,
                0xbe8e9dae,
                0xbf65207f,
                0xbeea41ad,
                0xbf791f02,
                0x3d9f2df0,
                0x3fa9168c,
            ],
            [
                0x3cdcdda1, 0x3ea798e4, 0xbe8aace0, 0xbf638122, 0xbee75bf7, 0xbf77a732, 0x3db0e858,
                0x3fa8c450,
            ],
        ];
        let first = |last: u32| {
            [
                last, 0x3e9e0ff9, 0xbe9176ea, 0xbf668759, 0xbeede35c, 0xbf7b46b1, 0x3d8fa442,
                0x3faa401a,
            ]
        };
        // The two modes part at step 1 in one element only (the jit update's FMAs).
        for (mode, step1) in [
            (XlaMode::Eager, first(0x3c37fde1)),
            (XlaMode::Jit, first(0x3c37fde2)),
        ] {
            let opt = Optimizer::Adam {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
                decoupled: true,
            };
            let mut p: Vec<f32> = p0.iter().map(|&b| f32::from_bits(b)).collect();
            let mut st = OptState::default();
            for (t, (g, want)) in grads.iter().zip([step1, later[0], later[1]]).enumerate() {
                let g: Vec<f32> = g.iter().map(|&b| f32::from_bits(b)).collect();
                step(mode, opt, t + 1, &mut p, &g, &mut st);
                let got: Vec<u32> = p.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{mode:?} step {}", t + 1);
            }
        }
    }
}
