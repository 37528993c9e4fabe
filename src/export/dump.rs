//! Raw trace dump (`repro --dump DIR`): every recorded tensor of the three computations, one
//! element per row, for cross-checks against PyTorch or JAX (`scripts/crosscheck_torch.py`).
//!
//! Columns: `computation` (`f64`, `reference`, `sharded`), `check`, `step`, `role` (`value`,
//! or `expected-f32`/`expected-f64` for self-consistency expectations), `index` (flat, row-major),
//! `value` (Python float repr; fp32 values widen exactly, so `float32(value)` recovers the bits).

use serde::Serialize;

use crate::check::py_repr;
use crate::scenario::{CheckSpec, Traces};
use crate::trace::SlotRole;

#[derive(Serialize)]
struct DumpRow<'a> {
    computation: &'a str,
    check: &'a str,
    step: String,
    role: &'a str,
    index: usize,
    value: String,
}

/// The dump of one seed's traces as CSV bytes.
pub fn dump_csv(checks: &[CheckSpec], traces: &Traces) -> anyhow::Result<Vec<u8>> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    for (name, trace) in [
        ("f64", &traces.f64),
        ("reference", &traces.reference),
        ("sharded", &traces.sharded),
    ] {
        for slot in &trace.slots {
            let role = match slot.role {
                SlotRole::Value => "value",
                SlotRole::SelfExpectedF32 => "expected-f32",
                SlotRole::SelfExpectedF64 => "expected-f64",
                SlotRole::Condition => "condition",
            };
            let step = slot.step.to_string();
            for (i, v) in trace.data(slot).iter().enumerate() {
                w.serialize(DumpRow {
                    computation: name,
                    check: checks[slot.check].name,
                    step: step.clone(),
                    role,
                    index: i,
                    value: py_repr(*v),
                })?;
            }
        }
    }
    w.into_inner()
        .map_err(|e| anyhow::anyhow!("csv buffer: {e}"))
}
