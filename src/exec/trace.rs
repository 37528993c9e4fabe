//! Observations: what one computation of a scenario recorded for its checks.
//!
//! A scenario's model code records, in program order, one tensor per (check, step). The
//! three computations of a seed run the same code, so their traces have the same slots in
//! the same order, which is what makes them comparable slot by slot. Values are stored as
//! f64 (f32 values widen exactly). A trace is cleared and reused across seeds, so recording
//! does not allocate once its buffers have grown.

use crate::check::StepLabel;
use crate::ops::real::Real;

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
    /// Offset into [`Trace::values`]; for a lent slot, the index of its view (see
    /// [`Trace::record_lent`]).
    pub start: usize,
    /// Whether the slot is a view of the computation's own buffer instead of a copy.
    pub lent: bool,
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
    /// The views of the lent slots ([`Trace::record_lent`]).
    lent: Vec<Lent>,
    /// Whether [`Trace::record_lent`] lends (see [`Trace::lend`]).
    lending: bool,
    /// The experts every `moe` layer chose, per micro-step in forward order: for every token
    /// its chosen experts in ascending order, then `u32::MAX` ([`Trace::routing_flips`]).
    pub routing: Vec<u32>,
}

/// A lent slot's buffer: its address and length, and its element type.
#[derive(Debug, Clone, Copy)]
enum Lent {
    F32(*const f32, usize),
    F64(*const f64, usize),
}

// SAFETY: a `Lent` is a shared view of a buffer that its owner leaves unmodified and alive
// while the view exists (the contract of `Trace::lend`); sharing or sending a shared view of
// immutable f32/f64 data is sound.
unsafe impl Send for Lent {}
// SAFETY: as above.
unsafe impl Sync for Lent {}

/// The values of one slot as they are stored: f64, or the f32 buffer of an fp32
/// computation, which widens exactly.
#[derive(Debug, Clone, Copy)]
pub enum View<'a> {
    /// f64 values.
    F64(&'a [f64]),
    /// f32 values (each widens to f64 exactly).
    F32(&'a [f32]),
}

impl View<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            View::F64(v) => v.len(),
            View::F32(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether both views are the same memory (the same tensor of the same trace).
    pub fn same(&self, other: &View<'_>) -> bool {
        match (*self, *other) {
            (View::F64(a), View::F64(b)) => std::ptr::eq(a, b),
            (View::F32(a), View::F32(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }

    /// Elements `r` as f64: borrowed when stored as f64, else widened into `buf`.
    pub fn f64s<'b>(&'b self, r: std::ops::Range<usize>, buf: &'b mut Vec<f64>) -> &'b [f64] {
        match *self {
            View::F64(v) => &v[r],
            View::F32(v) => {
                buf.clear();
                extend_widened(buf, &v[r]);
                buf
            }
        }
    }
}

impl Trace {
    /// Forgets every slot (and every lent view), keeping capacity.
    pub fn clear(&mut self) {
        self.values.clear();
        self.slots.clear();
        self.lent.clear();
        self.routing.clear();
    }

    /// Appends one moe layer's routing, `topi` (`[tokens, k]`, any order within a token), to
    /// [`Trace::routing`] as sets.
    pub fn record_routing(&mut self, topi: &[u32], k: usize) {
        for t in topi.chunks_exact(k) {
            let start = self.routing.len();
            self.routing.extend_from_slice(t);
            self.routing[start..].sort_unstable();
            self.routing.push(u32::MAX);
        }
    }

    /// Routing flips between two computations: the tokens (summed over every moe layer and
    /// micro-step the traces recorded) whose chosen expert sets differ. Two traces of
    /// different lengths count every token of the longer one's tail.
    pub fn routing_flips(&self, other: &Trace) -> u64 {
        let mut a = self.routing.split_inclusive(|&e| e == u32::MAX);
        let mut b = other.routing.split_inclusive(|&e| e == u32::MAX);
        let mut flips = 0;
        loop {
            match (a.next(), b.next()) {
                (None, None) => return flips,
                (Some(x), Some(y)) => flips += u64::from(x != y),
                _ => flips += 1,
            }
        }
    }

    /// Turns lending on or off (off by default): while on, [`Trace::record_lent`] records a
    /// view of the caller's buffer instead of a copy of its values. Turning it off clears
    /// the trace.
    ///
    /// # Safety
    /// While lending is on, every buffer passed to [`Trace::record_lent`] must stay alive
    /// and unmodified until this trace is next cleared ([`Trace::clear`], or `lend(false)`).
    pub unsafe fn lend(&mut self, on: bool) {
        if !on {
            self.clear();
        }
        self.lending = on;
    }

    /// [`Trace::record`] of a buffer its computation does not modify before the trace is
    /// cleared (a parameter after the optimizer step, the gradient the step used): a view of
    /// it while lending is on ([`Trace::lend`]), a copy otherwise.
    pub fn record_lent<R: Real>(&mut self, check: usize, step: StepLabel, data: &[R]) {
        use std::any::TypeId;
        if !self.lending {
            return self.record(check, step, data);
        }
        let (ptr, len) = (data.as_ptr(), data.len());
        let view = if TypeId::of::<R>() == TypeId::of::<f32>() {
            Lent::F32(ptr as *const f32, len)
        } else if TypeId::of::<R>() == TypeId::of::<f64>() {
            Lent::F64(ptr as *const f64, len)
        } else {
            return self.record(check, step, data);
        };
        self.slots.push(Slot {
            check,
            step,
            role: SlotRole::Value,
            start: self.lent.len(),
            len,
            lent: true,
        });
        self.lent.push(view);
    }

    /// Whether every slot is stored as f64 (no lent fp32 buffer).
    pub fn all_f64(&self) -> bool {
        self.lent.iter().all(|l| matches!(l, Lent::F64(..)))
    }

    /// A copy with every slot's values stored in the copy as f64 (lent views widened and
    /// copied; the same slots in the same order).
    pub fn widened(&self) -> Trace {
        let mut t = Trace::default();
        for s in &self.slots {
            let start = t.values.len();
            match self.view(s) {
                View::F64(v) => t.values.extend_from_slice(v),
                View::F32(v) => extend_widened(&mut t.values, v),
            }
            t.slots.push(Slot {
                start,
                lent: false,
                ..*s
            });
        }
        t.routing.clone_from(&self.routing);
        t
    }

    /// The values of a slot as stored.
    pub fn view(&self, slot: &Slot) -> View<'_> {
        if !slot.lent {
            return View::F64(self.data(slot));
        }
        // SAFETY: the view was recorded while lending was on, and the trace has not been
        // cleared since, so its buffer is alive and unmodified (the contract of `lend`).
        unsafe {
            match self.lent[slot.start] {
                Lent::F32(p, n) => View::F32(std::slice::from_raw_parts(p, n)),
                Lent::F64(p, n) => View::F64(std::slice::from_raw_parts(p, n)),
            }
        }
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
        extend_widened(&mut self.values, data);
        self.slots.push(Slot {
            check,
            step,
            role,
            start,
            len: data.len(),
            lent: false,
        });
    }

    /// The values of a slot stored as f64 (every slot but a lent fp32 buffer, which
    /// [`Trace::view`] reads; asked for here it panics).
    pub fn data(&self, slot: &Slot) -> &[f64] {
        if slot.lent {
            return match self.view(slot) {
                View::F64(v) => v,
                View::F32(_) => panic!("a lent fp32 slot is read through Trace::view"),
            };
        }
        &self.values[slot.start..slot.start + slot.len]
    }
}

/// Appends `data` to `dst` as f64 (exact for f32 and f64): a plain copy for f64, a widening
/// loop compiled for AVX-512F where the detected [`Isa`](crate::kernels::isa::Isa) has it for
/// f32 (a conversion is exact, so every path gives the same values).
fn extend_widened<R: Real>(dst: &mut Vec<f64>, data: &[R]) {
    use std::any::TypeId;
    if TypeId::of::<R>() == TypeId::of::<f64>() {
        // SAFETY: R is f64, so the slice is a slice of f64.
        let v = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<f64>(), data.len()) };
        dst.extend_from_slice(v);
    } else if TypeId::of::<R>() == TypeId::of::<f32>() {
        // SAFETY: R is f32, so the slice is a slice of f32.
        let v = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<f32>(), data.len()) };
        #[cfg(target_arch = "x86_64")]
        {
            if crate::kernels::isa::Isa::detected().avx512() {
                // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
                unsafe { widen_avx512(dst, v) };
                return;
            }
        }
        dst.extend(v.iter().map(|&x| f64::from(x)));
    } else {
        dst.extend(data.iter().map(|x| x.to_f64()));
    }
}

/// The f32 loop of [`extend_widened`] compiled for AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn widen_avx512(dst: &mut Vec<f64>, v: &[f32]) {
    dst.extend(v.iter().map(|&x| f64::from(x)));
}

#[cfg(test)]
mod tests {
    use super::Trace;

    #[test]
    fn routing_flips_count_tokens_whose_sets_differ() {
        let (mut a, mut b) = (Trace::default(), Trace::default());
        // Two layers' routings: the order within a token does not count, the set does.
        a.record_routing(&[0, 1, 2, 3, 1, 0], 2);
        b.record_routing(&[1, 0, 2, 3, 1, 2], 2);
        a.record_routing(&[3], 1);
        b.record_routing(&[2], 1);
        assert_eq!(a.routing_flips(&b), 2);
        assert_eq!(b.routing_flips(&a), 2);
        assert_eq!(a.routing_flips(&a), 0);
        // A shorter trace: the longer one's extra tokens count.
        let mut c = Trace::default();
        c.record_routing(&[0, 1], 2);
        assert_eq!(a.routing_flips(&c), 3);
        a.clear();
        assert!(a.routing.is_empty());
    }
}
