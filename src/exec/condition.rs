//! The condition of a matmul: `Σ_k |a_k·b_k|` per output element, the scale of every
//! rounding-error bound of the reduction behind it.

use crate::check::StepLabel;
use crate::exec::trace::Trace;
use crate::ops::backend::Backend;
use crate::ops::real::Real;

/// Records `Σ_k |h[t][k]·W[v][k]|` for every logit (the scale of the matmul's rounding-error
/// bounds) as the check's condition slot: |h|·|W|ᵀ with the backend's matmul
/// ([`Backend::matmul_nt_abs`]; the float64 one, so it is exact to f64 rounding).
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
    // One reusable buffer for the product (t×v); the backend takes the absolute values.
    debug_assert_eq!((h.len(), w.len()), (t * k, v * k));
    cond.resize(t * v, B::R::ZERO);
    be.matmul_nt_abs(h, w, cond, t, k, v);
    trace.record_role(check, step, crate::exec::trace::SlotRole::Condition, cond);
}
