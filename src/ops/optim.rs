//! Optimizer updates as torch's single-tensor CPU path applies them (`foreach=False`, the
//! default for CPU tensors; `torch/optim/sgd.py::_single_tensor_sgd`,
//! `adam.py::_single_tensor_adam`, which `AdamW` runs with `decoupled_weight_decay=True`),
//! elementwise.
//!
//! Kernel facts used (ATen CPU, float and double alike; the AVX2 kernels are built with FMA
//! and GCC contracts a product feeding an add): `a.add_(b, alpha=s)` is `fma(b, s, a)`
//! (`ufunc/add.h`: `vec::fmadd`; the scalar tail `a + s·b` contracted); `a.mul_(s)` rounds the
//! product; `lerp_(end, w)` with `|w| < 0.5` is `fma(w, end - a, a)`, else
//! `fma(w - 1, end - a, end)` (`Lerp.h`, `lerp_vec`; the scalar `end - (end - a)·(1 - w)`
//! contracts to the same value); `addcmul_(t1, t2, value=s)` is `a + (s·t1)·t2`, contracted
//! into `fma(s·t1, t2, a)`; `addcdiv_(t1, t2, value=s)` is `a + (s·t1) / t2`
//! (`PointwiseOpsKernel.cpp`: a quotient feeds the add, so nothing contracts: three
//! roundings); `t.sqrt()` is MKL's `vsSqrt` (`vml::vsqrt`), modelled for f32 by
//! [`crate::kernels::mkl_sqrt::sqrt_mkl_f32`] under a profile with `sqrt = "mkl"` and by the
//! correctly rounded root otherwise; `t / s` divides by the scalar (`div_true_kernel`),
//! `t.add_(s)` adds it.
//!
//! Python-float scalars (`lr`, `1 - beta`, the bias corrections, `1 - lr·wd`) are computed in
//! f64 as CPython computes them and rounded to the tensor's type where the kernel reads them
//! (`Scalar::to<float>`); the f64 truth reads them exactly. Adam's step count is a float32
//! tensor read back with `.item()`, exact below 2^24.
//!
//! Measured against torch 2.15 (`tests/suite/optim_fixture.rs`, from
//! `scripts/optim_torch.py`: one thread, eager, `ATEN_CPU_CAPABILITY=avx2`, MKL 2024.2 on an
//! AMD EPYC CPU; every optimizer and weight-decay setting of the scenario language, lr 1e-3
//! and 0.1, 6 steps): SGD, weight decay, momentum, dampening and Nesterov are torch's bit for
//! bit in float32 and in float64. Adam and AdamW with MKL's f32 root (`sqrt = "mkl"`,
//! [`crate::kernels::mkl_sqrt::sqrt_mkl_f32`]) are torch's bit for bit in float32 too; with
//! the correctly rounded root they agree on 92.6 % of f32 elements, and the f64 truth on
//! 99.9 % of f64 elements (torch's float64 root is MKL's `vdSqrt`, not modelled).

use crate::ops::layers::sgd;
use crate::ops::real::Real;
use crate::scenario::ir::Optimizer;

/// One optimizer step of `p` with gradient `g`, as the executor takes it: plain SGD (no
/// momentum, no weight decay) through the fused update of [`sgd`] (torch's
/// `p.add_(g, alpha=-lr)`), momentum or weight decay through [`sgd_step`], Adam and AdamW
/// through [`adam_step_with`] with the square root `root` (the backend's
/// [`crate::ops::backend::Backend::adam_sqrt`]: [`sqrt`], or MKL's f32 root under a profile
/// with `sqrt = "mkl"`). The hyperparameters arrive as the f64 values the file writes and
/// are rounded to `R` once, where torch's kernels read them (exactly, for f64).
pub fn step<R: Real>(
    opt: Optimizer,
    p: &mut [R],
    g: &[R],
    st: &mut OptState<R>,
    scratch: &mut Vec<R>,
    root: fn(R) -> R,
) {
    match opt {
        Optimizer::Sgd {
            lr,
            momentum,
            dampening,
            nesterov,
            weight_decay,
        } => {
            let lr = R::from_f64(lr);
            if momentum == 0.0 && weight_decay == 0.0 {
                sgd(p, g, lr);
            } else {
                sgd_step(
                    p,
                    g,
                    lr,
                    momentum,
                    dampening,
                    nesterov,
                    weight_decay,
                    st,
                    scratch,
                );
            }
        }
        Optimizer::Adam {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            decoupled,
        } => adam_step_with(
            p,
            g,
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            decoupled,
            st,
            root,
        ),
    }
}

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
/// `p = fma(g, -lr, p)`. The scalars are rounded to `R` from f64 (`lr` by the caller: the
/// learning rate as written, rounded once).
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

/// The step's Python-float scalars of Adam at 1-based step `k`, in f64 as
/// `_single_tensor_adam` computes them: `bias_correction1 = 1 - beta1 ** k`,
/// `bias_correction2 = 1 - beta2 ** k`, `step_size = lr / bias_correction1` and
/// `bias_correction2_sqrt = bias_correction2 ** 0.5`. Returns `(step_size,
/// bias_correction2_sqrt)`.
///
/// CPython's `**` on floats is the C library's `pow`, which is not correctly rounded (glibc's
/// misses on a few inputs in ten thousand). Here `beta ** k` is the correctly rounded power
/// ([`pow_int`]) and `x ** 0.5` the IEEE square root; `tests/suite/optim_fixture.rs` measures
/// both against CPython on a grid of betas and steps, and checks that the scalars rounded to
/// f32, as the f32 kernels read them, agree.
pub fn adam_scalars(lr: f64, beta1: f64, beta2: f64, k: u64) -> (f64, f64) {
    let bias_correction1 = 1.0 - pow_int(beta1, k);
    let bias_correction2 = 1.0 - pow_int(beta2, k);
    (lr / bias_correction1, bias_correction2.sqrt())
}

/// `b^k` for `0 <= b < 1`, correctly rounded wherever the result is at least 2^-960 (below
/// that the double-double's low part underflows; Adam only subtracts it from 1, where
/// anything under 2^-54 vanishes). Exponentiation by squaring in double-double arithmetic
/// (each product `fma`-exact in its high part, relative error under 2^-100 after at most
/// 2·64 products), rounded once at the end.
pub fn pow_int(b: f64, k: u64) -> f64 {
    fn mul((ah, al): (f64, f64), (bh, bl): (f64, f64)) -> (f64, f64) {
        let p = ah * bh;
        let e = ah.mul_add(bh, -p) + (ah * bl + al * bh);
        let s = p + e;
        (s, e - (s - p))
    }
    let (mut r, mut sq, mut e) = ((1.0, 0.0), (b, 0.0), k);
    while e > 0 {
        if e & 1 == 1 {
            r = mul(r, sq);
        }
        e >>= 1;
        if e > 0 {
            sq = mul(sq, sq);
        }
    }
    r.0 + r.1
}

/// `torch.optim.Adam` / `AdamW` step (no amsgrad), `_single_tensor_adam`'s order. With `k`
/// the step count after incrementing and `(step_size, c2)` from [`adam_scalars`], per
/// element: AdamW `p = p·(1 - lr·wd)` (`param.mul_`); Adam with weight decay
/// `g = fma(p, wd, g)` (`grad.add(param, alpha=wd)`); `m = lerp(m, g, 1 - β₁)` (`lerp_`);
/// `v = fma((1 - β₂)·g, g, v·β₂)` (`mul_(β₂).addcmul_(g, g, value=1 - β₂)`);
/// `denom = sqrt(v) / c2 + eps` (three roundings); `p = p + (-step_size·m) / denom`
/// (`addcdiv_`, three roundings). The state's buffers start at zero.
///
/// The square root is the correctly rounded one. torch's `exp_avg_sq.sqrt()` is MKL's
/// `vsSqrt` / `vdSqrt` (ATen's `vml::vsqrt`, `VML_HA`), which is not: it differs from the
/// correctly rounded root on about 17 % of f32 inputs and 1.3 % of f64 inputs (measured with
/// torch 2.15's MKL 2024.2 on an AMD EPYC CPU), so with this root Adam and AdamW agree with
/// torch on a measured share of elements only (`tests/suite/optim_fixture.rs`).
/// [`adam_step_with`] takes another root: with MKL's f32 root
/// ([`crate::kernels::mkl_sqrt::sqrt_mkl_f32`], what [`step`] runs under a profile with
/// `sqrt = "mkl"`) every f32 element is torch's.
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
    adam_step_with(
        p,
        g,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled,
        st,
        sqrt,
    )
}

/// [`adam_step`] with the square root `root` in place of the correctly rounded one.
#[allow(clippy::too_many_arguments)]
pub fn adam_step_with<R: Real>(
    p: &mut [R],
    g: &[R],
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    decoupled: bool,
    st: &mut OptState<R>,
    root: impl Fn(R) -> R,
) {
    if st.steps == 0 {
        st.m.clear();
        st.m.resize(p.len(), R::ZERO);
        st.v.clear();
        st.v.resize(p.len(), R::ZERO);
    }
    st.steps += 1;
    let (step_size, bc2_sqrt) = adam_scalars(lr, beta1, beta2, st.steps);
    let w1 = R::from_f64(1.0 - beta1);
    let small = w1.to_f64().abs() < 0.5;
    let w1m1 = w1 - R::ONE;
    let b2 = R::from_f64(beta2);
    let w2 = R::from_f64(1.0 - beta2);
    let wd = R::from_f64(weight_decay);
    let shrink = R::from_f64(1.0 - lr * weight_decay);
    let c2 = R::from_f64(bc2_sqrt);
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
        *m = if small {
            w1.fma(diff, *m)
        } else {
            w1m1.fma(diff, grad)
        };
        *v = (w2 * grad).fma(grad, *v * b2);
        let denom = root(*v) / c2 + e;
        *pi = *pi + (neg_step * *m) / denom;
    }
}

/// IEEE square root in the scalar type (correctly rounded for f32 and f64).
pub fn sqrt<R: Real>(x: R) -> R {
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
    fn pow_int_is_the_correctly_rounded_power() {
        assert_eq!(pow_int(0.9, 0), 1.0);
        assert_eq!(pow_int(0.5, 30), 2f64.powi(-30));
        // A square is one IEEE product, correctly rounded.
        assert_eq!(pow_int(0.999, 2), 0.999 * 0.999);
        // The exact 0.99^3 (of the double nearest 0.99) rounds to 0.970299; three rounded
        // products give the double below it (values from exact rational arithmetic).
        assert_eq!(pow_int(0.99, 3), 0.970_299);
        assert_eq!(0.99 * 0.99 * 0.99, 0.970_298_999_999_999_9);
        assert_eq!(pow_int(0.9, 6), 0.531_441);
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
