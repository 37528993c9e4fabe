//! Observations: what one computation of a scenario recorded for its checks.
//!
//! A scenario's model code records, in program order, one tensor per (check, step). The
//! three computations of a seed run the same code, so their traces have the same slots in
//! the same order, which is what makes them comparable slot by slot. Values are stored as
//! f64 (f32 values widen exactly). A trace is cleared and reused across seeds, so recording
//! does not allocate once its buffers have grown.

use crate::check::StepLabel;
use crate::real::Real;

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRole {
    /// The observed tensor.
    Value,
    /// For self-consistency checks (like the SGD-update check): the value the test expects,
    /// recomputed from this computation's own inputs in fp32 as the test writes it.
    SelfExpectedF32,
    /// The same expectation evaluated in f64 on the same inputs.
    SelfExpectedF64,
    /// For matmul-like checks, in the float64 computation: `Σ|a_k·b_k|` per element, the
    /// scale of every rounding-error bound.
    Condition,
}

/// One recorded tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Index of the check in the scenario's check list.
    pub check: usize,
    /// Where in the run it was recorded.
    pub step: StepLabel,
    /// What the slot holds.
    pub role: SlotRole,
    /// Offset into [`Trace::values`].
    pub start: usize,
    /// Number of elements.
    pub len: usize,
}

/// The recorded tensors of one computation.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    /// All recorded values, concatenated.
    pub values: Vec<f64>,
    /// The slots, in recording order.
    pub slots: Vec<Slot>,
}

impl Trace {
    /// Forgets every slot, keeping capacity.
    pub fn clear(&mut self) {
        self.values.clear();
        self.slots.clear();
    }

    /// Records `data` as the value of `check` at `step`.
    pub fn record<R: Real>(&mut self, check: usize, step: StepLabel, data: &[R]) {
        self.record_role(check, step, SlotRole::Value, data);
    }

    /// Records `data` in the given role.
    pub fn record_role<R: Real>(
        &mut self,
        check: usize,
        step: StepLabel,
        role: SlotRole,
        data: &[R],
    ) {
        let start = self.values.len();
        self.values.extend(data.iter().map(|x| x.to_f64()));
        self.slots.push(Slot {
            check,
            step,
            role,
            start,
            len: data.len(),
        });
    }

    /// The values of a slot.
    pub fn data(&self, slot: &Slot) -> &[f64] {
        &self.values[slot.start..slot.start + slot.len]
    }
}
