//! The condition of a matmul: `Σ_k |a_k·b_k|` per output element, the scale of every
//! rounding-error bound of the reduction behind it.

use crate::backend::Backend;
use crate::check::StepLabel;
use crate::real::Real;
use crate::trace::Trace;

/// Records `Σ_k |h[t][k]·W[v][k]|` for every logit (the scale of the matmul's rounding-error
/// bounds) as the check's condition slot: |h|·|W|ᵀ with the backend's matmul (the float64
/// one, so it is exact to f64 rounding).
#[allow(clippy::too_many_arguments)]
pub fn record_condition<B: Backend>(
    be: &mut B,
    h: &[B::R],
    w: &[B::R],
    t: usize,
    k: usize,
    v: usize,
    cond: &mut Vec<B::R>,
    check: usize,
    step: StepLabel,
    trace: &mut Trace,
) {
    // One reusable buffer: |h| (t×k), then |W| (v×k), then the product (t×v).
    let (nh, nw) = (t * k, v * k);
    cond.clear();
    cond.extend(h.iter().map(|x| if *x < B::R::ZERO { -*x } else { *x }));
    cond.extend(w.iter().map(|x| if *x < B::R::ZERO { -*x } else { *x }));
    cond.resize(nh + nw + t * v, B::R::ZERO);
    let (abs, out) = cond.split_at_mut(nh + nw);
    be.matmul_nt(&abs[..nh], &abs[nh..], out, t, k, v);
    trace.record_role(check, step, crate::trace::SlotRole::Condition, out);
}
