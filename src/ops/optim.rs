//! Optimizer updates as torch's single-tensor CPU path applies them (`foreach=False`, the
//! default for CPU tensors; `torch/optim/sgd.py::_single_tensor_sgd`,
//! `adam.py::_single_tensor_adam`), elementwise.
//!
//! Kernel facts used (ATen CPU, float): `a.add_(b, alpha=s)` is `fma(b, s, a)`; `a.mul_(s)`
//! rounds the product; `lerp_(end, w)` with `|w| < 0.5` is `fma(w, end - a, a)`, else
//! `end - (end - a)·(1 - w)` as `fma(-(end - a), 1 - w, end)`; `addcmul_(t1, t2, value=s)`
//! is `a + (s·t1)·t2`, which GCC contracts into `fma(s·t1, t2, a)` (the contraction the
//! project measured for `tanh_backward`); `addcdiv_(t1, t2, value=s)` is `fma(s, t1 / t2, a)`
//! the same way. Python-float scalars (`lr`, bias corrections) are computed in f64 and rounded
//! to the tensor's type where the kernel reads them. **Not verified bit for bit against torch
//! for momentum, Nesterov or Adam** (plain SGD is: [`crate::ops::layers::sgd`]).

use crate::ops::real::Real;

/// Per-parameter optimizer state.
#[derive(Debug, Default, Clone)]
pub struct OptState<R> {
    /// SGD momentum buffer, or Adam's `exp_avg`.
    pub m: Vec<R>,
    /// Adam's `exp_avg_sq`.
    pub v: Vec<R>,
    /// Steps taken (Adam's `step`; for SGD whether the momentum buffer exists).
    pub steps: u64,
}

impl<R: Real> OptState<R> {
    /// Forgets everything, keeping capacity.
    pub fn reset(&mut self) {
        self.m.clear();
        self.v.clear();
        self.steps = 0;
    }
}

/// `torch.optim.SGD` step on `p` with gradient `g` (which it may modify as torch's local
/// `grad` does: `scratch` holds it). Order per element: weight decay `g = fma(p, wd, g)`;
/// momentum: the first step stores `buf = g`, later ones `buf = fma(g, 1 - dampening,
/// buf·momentum)`; Nesterov `g = fma(buf, momentum, g)`, else `g = buf`; then
/// `p = fma(g, -lr, p)`. Scalars are rounded to `R` from f64 first (`-lr` from the f32 lr).
#[allow(clippy::too_many_arguments)]
pub fn sgd_step<R: Real>(
    p: &mut [R],
    g: &[R],
    lr: R,
    momentum: f64,
    dampening: f64,
    nesterov: bool,
    weight_decay: f64,
    st: &mut OptState<R>,
    scratch: &mut Vec<R>,
) {
    scratch.clear();
    scratch.extend_from_slice(g);
    if weight_decay != 0.0 {
        let wd = R::from_f64(weight_decay);
        for (gi, &pi) in scratch.iter_mut().zip(p.iter()) {
            *gi = pi.fma(wd, *gi);
        }
    }
    if momentum != 0.0 {
        let mo = R::from_f64(momentum);
        let keep = R::from_f64(1.0 - dampening);
        if st.steps == 0 {
            st.m.clear();
            st.m.extend_from_slice(scratch);
        } else {
            for (b, &gi) in st.m.iter_mut().zip(scratch.iter()) {
                *b = gi.fma(keep, *b * mo);
            }
        }
        st.steps += 1;
        if nesterov {
            for (gi, &b) in scratch.iter_mut().zip(&st.m) {
                *gi = b.fma(mo, *gi);
            }
        } else {
            scratch.copy_from_slice(&st.m);
        }
    }
    R::fma_update(p, scratch, -lr);
}

/// `torch.optim.Adam` / `AdamW` step (no amsgrad). Order per element, with `k` the step count
/// after incrementing and the scalars in f64: AdamW `p = p·(1 - lr·wd)`; Adam with weight
/// decay `g = fma(p, wd, g)`; `m = lerp(m, g, 1 - β₁)`; `v = fma((1 - β₂)·g, g, v·β₂)`;
/// `step_size = lr / (1 - β₁^k)`; `c2 = sqrt(1 - β₂^k)`; `denom = sqrt(v) / c2 + eps`;
/// `p = fma(-step_size, m / denom, p)`. The state's buffers start at zero.
#[allow(clippy::too_many_arguments)]
pub fn adam_step<R: Real>(
    p: &mut [R],
    g: &[R],
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    decoupled: bool,
    st: &mut OptState<R>,
) {
    if st.steps == 0 {
        st.m.clear();
        st.m.resize(p.len(), R::ZERO);
        st.v.clear();
        st.v.resize(p.len(), R::ZERO);
    }
    st.steps += 1;
    let k = st.steps as f64;
    let w1 = R::from_f64(1.0 - beta1);
    let b2 = R::from_f64(beta2);
    let w2 = R::from_f64(1.0 - beta2);
    let wd = R::from_f64(weight_decay);
    let shrink = R::from_f64(1.0 - lr * weight_decay);
    let step_size = lr / (1.0 - beta1.powf(k));
    let c2 = R::from_f64((1.0 - beta2.powf(k)).sqrt());
    let neg_step = R::from_f64(-step_size);
    let e = R::from_f64(eps);
    for (((pi, &gi), m), v) in p
        .iter_mut()
        .zip(g)
        .zip(st.m.iter_mut())
        .zip(st.v.iter_mut())
    {
        let mut grad = gi;
        if weight_decay != 0.0 {
            if decoupled {
                *pi = *pi * shrink;
            } else {
                grad = pi.fma(wd, grad);
            }
        }
        let diff = grad - *m;
        *m = if w1.to_f64().abs() < 0.5 {
            w1.fma(diff, *m)
        } else {
            (-diff).fma(R::ONE - w1, grad)
        };
        *v = (w2 * grad).fma(grad, *v * b2);
        let denom = sqrt(*v) / c2 + e;
        *pi = neg_step.fma(*m / denom, *pi);
    }
}

/// IEEE square root in the scalar type (correctly rounded for f32 and f64).
fn sqrt<R: Real>(x: R) -> R {
    // f32's sqrt of a value widened to f64 and rounded back is the correctly rounded f32
    // sqrt (binary64 has more than 2·24 + 2 bits), so one f64 sqrt serves both types.
    R::from_f64(x.to_f64().sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn momentum_matches_the_recurrence_in_f64() {
        // p0 = 1, g = 0.5 each step, lr 0.1, momentum 0.9: buf1 = 0.5, p1 = 0.95;
        // buf2 = 0.9·0.5 + 0.5 = 0.95, p2 = 0.95 - 0.095 = 0.855 (f64, exact to rounding).
        let mut p = [1.0f64];
        let mut st = OptState::default();
        let mut s = Vec::new();
        sgd_step(&mut p, &[0.5], 0.1, 0.9, 0.0, false, 0.0, &mut st, &mut s);
        assert!((p[0] - 0.95).abs() < 1e-15);
        sgd_step(&mut p, &[0.5], 0.1, 0.9, 0.0, false, 0.0, &mut st, &mut s);
        assert!((p[0] - 0.855).abs() < 1e-15);
    }

    #[test]
    fn adam_first_step_moves_by_lr() {
        // Step 1: m = 0.1 g, v = 0.001 g², corrected m/√v = sign(g) (up to eps), so
        // p moves by lr·g/(|g| + eps') ≈ lr; 1e-9 allows for eps = 1e-8 relative to |g| = 2.
        let mut p = [1.0f64, 1.0];
        let mut st = OptState::default();
        adam_step(
            &mut p,
            &[2.0, -2.0],
            0.01,
            0.9,
            0.999,
            1e-8,
            0.0,
            false,
            &mut st,
        );
        assert!((p[0] - 0.99).abs() < 1e-9 && (p[1] - 1.01).abs() < 1e-9);
    }
}
