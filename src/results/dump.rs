//! Raw trace dump (`repro --dump DIR`): every recorded tensor of the three computations, one
//! element per row, for cross-checks against PyTorch or JAX (`scripts/crosscheck_torch.py`).
//!
//! Columns: `computation` (`f64`, `reference`, `sharded`), `check`, `step`, `role` (`value`,
//! or `expected-f32`/`expected-f64` for self-consistency expectations), `index` (flat, row-major),
//! `value` (Python float repr; fp32 values widen exactly, so `float32(value)` recovers the bits).

use serde::Serialize;

use crate::check::python_repr::py_repr;
use crate::exec::scenario::{CheckSpec, Traces};
use crate::exec::trace::{SlotRole, Trace};

#[derive(Serialize)]
struct DumpRow<'a> {
    computation: &'a str,
    check: &'a str,
    step: String,
    role: &'a str,
    index: usize,
    value: String,
}

/// The three computations' traces, in dump order, with their names.
fn computations(traces: &Traces) -> [(&'static str, &Trace); 3] {
    [
        ("f64", &traces.f64),
        ("reference", &traces.reference),
        ("sharded", &traces.sharded),
    ]
}

/// A slot role as the dumps name it.
fn role_name(role: SlotRole) -> &'static str {
    match role {
        SlotRole::Value => "value",
        SlotRole::SelfExpectedF32 => "expected-f32",
        SlotRole::SelfExpectedF64 => "expected-f64",
        SlotRole::Condition => "condition",
    }
}

/// The dump of one seed's traces as CSV bytes.
pub fn dump_csv(checks: &[CheckSpec], traces: &Traces) -> anyhow::Result<Vec<u8>> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    for (name, trace) in computations(traces) {
        for slot in &trace.slots {
            let role = role_name(slot.role);
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

/// The dump of one seed's traces as `.npy` files for `numpy.load`: one file per recorded
/// tensor, named `<computation>__<check>__step<step>__<role>.npy` (step `2`, or `1.0` for a
/// micro-step), holding the tensor with the check's shape (1-D when the recorded length is not
/// the shape's product) in row-major order. The fp32 computations (`reference`, `sharded`) are
/// written as `float32` (their values widen to f64 exactly, so this is lossless), the `f64`
/// computation and the float64 expectations as `float64`. Returns (file name, bytes) in trace
/// order; the bytes depend only on the traces.
pub fn dump_npy(checks: &[CheckSpec], traces: &Traces) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    use ndarray::{ArrayViewD, IxDyn};
    use ndarray_npy::WriteNpyExt;
    let mut out = Vec::new();
    for (name, trace) in computations(traces) {
        for slot in &trace.slots {
            let role = role_name(slot.role);
            let check = &checks[slot.check];
            let data = trace.data(slot);
            let shape: Vec<usize> = if check.shape.iter().product::<usize>() == data.len() {
                check.shape.to_vec()
            } else {
                vec![data.len()]
            };
            let file = format!("{name}__{}__step{}__{role}.npy", check.name, slot.step);
            let mut bytes = Vec::new();
            // float32 only where every value is an f32 (exact): fp32 computations' values.
            let f32s: Option<Vec<f32>> = (name != "f64" && slot.role != SlotRole::SelfExpectedF64)
                .then(|| data.iter().map(|&v| v as f32).collect::<Vec<f32>>())
                .filter(|v| {
                    v.iter().zip(data).all(|(&a, &b)| {
                        f64::from(a).to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
                    })
                });
            let err = |e: ndarray_npy::WriteNpyError| anyhow::anyhow!("{file}: {e}");
            match f32s {
                Some(v) => ArrayViewD::from_shape(IxDyn(&shape), &v)?
                    .write_npy(&mut bytes)
                    .map_err(err)?,
                None => ArrayViewD::from_shape(IxDyn(&shape), data)?
                    .write_npy(&mut bytes)
                    .map_err(err)?,
            }
            out.push((file, bytes));
        }
    }
    Ok(out)
}
