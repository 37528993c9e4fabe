//! Raw trace dump (`repro --dump DIR`): every tensor the evaluation of one seed read, for
//! cross-checks against PyTorch or JAX (`scripts/crosscheck_torch.py`).
//!
//! **One source of truth.** A [`DumpWriter`] is fed by [`crate::engine::unit_observed`] with
//! the very traces the evaluation has just read (all steps at once, or one training step at a
//! time for a parametrization that streams), never a recomputation: every slot of those
//! traces, that is every tensor behind the printed figures, and the few recorded slots no
//! comparison reads (a self-consistency check's float64-computation value, and the
//! expectations of a computation no comparison pairs them with).
//!
//! A tensor is named by four parts, `(computation, check, step, role)`; all four are needed:
//! - `computation`: `f64` (the float64 ground truth), `reference` (unsharded fp32) or `sharded`
//!   (sharded fp32);
//! - `check`: the check's name; `step`: its label, `2` for a step, `1.0` for micro-step 0 of
//!   step 1;
//! - `role`: `value` (the checked tensor itself: what the comparisons compare), `expected-f32`
//!   / `expected-f64` (a self-consistency check's expectation, the same computation's formula
//!   evaluated in fp32 or in float64: what `sharded-vs-ref` / the `*-vs-f64` comparisons
//!   compare that check's value with), or `condition` (float64 computation only, beside a
//!   check of a matmul output: `Σ_k |a_k·b_k|` per element, the scale of the error-bound
//!   columns; **not** the tensor's value, though it shares its computation, check and step).
//!
//! Two forms of the same tensors:
//! - `<stem>.csv`, one element per row: columns `computation`, `check`, `step`, `role`,
//!   `index` (flat, row-major), `value` (Python float repr; fp32 values widen exactly, so
//!   `float32(value)` recovers the bits). Rows come in the order the evaluation read the
//!   traces: per batch of traces, the float64 computation's slots, then the reference's, then
//!   the sharded one's, each in recording order (one batch, or one per training step for a
//!   parametrization that streams).
//! - `<stem>/<computation>__<check>__step<step>__<role>.npy`, one file per tensor, for
//!   `numpy.load`: the check's shape (1-D when the recorded length is not the shape's
//!   product), row-major; the fp32 computations' values as `float32` (lossless), the float64
//!   computation's and the float64 expectations as `float64`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::check::python_repr::py_repr;
use crate::exec::scenario::{CheckSpec, Traces};
use crate::exec::trace::{SlotRole, Trace, View};
use crate::sys::atomic_write::{write_atomic, AtomicFile};

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
pub fn role_name(role: SlotRole) -> &'static str {
    match role {
        SlotRole::Value => "value",
        SlotRole::SelfExpectedF32 => "expected-f32",
        SlotRole::SelfExpectedF64 => "expected-f64",
        SlotRole::Condition => "condition",
    }
}

/// The `.npy` file name of a tensor (see the module doc).
pub fn npy_name(computation: &str, check: &str, step: &str, role: &str) -> String {
    format!("{computation}__{check}__step{step}__{role}.npy")
}

/// Writes one seed's dump of one group: `<dir>/<stem>.csv` and `<dir>/<stem>/*.npy` (module
/// doc). Feed it every batch of traces the evaluation reads ([`DumpWriter::add`]), then
/// [`DumpWriter::finish`]. The CSV file appears only when finished (written to a temporary
/// file beside it); each `.npy` file is written whole as its tensor arrives, so memory stays
/// that of one batch.
pub struct DumpWriter {
    csv: ::csv::Writer<AtomicFile>,
    csv_path: PathBuf,
    npy_dir: PathBuf,
    /// The `.npy` names written so far: two tensors with one name are refused, never
    /// overwritten.
    names: HashSet<String>,
}

impl DumpWriter {
    /// Starts the dump `<dir>/<stem>.csv` and the folder `<dir>/<stem>/`.
    pub fn create(dir: &Path, stem: &str) -> anyhow::Result<Self> {
        let csv_path = dir.join(format!("{stem}.csv"));
        let npy_dir = dir.join(stem);
        std::fs::create_dir_all(&npy_dir)
            .with_context(|| format!("--dump: cannot create directory {}", npy_dir.display()))?;
        Ok(Self {
            csv: ::csv::Writer::from_writer(AtomicFile::create(&csv_path)?),
            csv_path,
            npy_dir,
            names: HashSet::new(),
        })
    }

    /// Writes every slot of `traces` (one batch the evaluation read), `checks` being the
    /// group's checks.
    pub fn add(&mut self, checks: &[CheckSpec], traces: &Traces) -> anyhow::Result<()> {
        for (name, trace) in computations(traces) {
            for slot in &trace.slots {
                let role = role_name(slot.role);
                let check = &checks[slot.check];
                let step = slot.step.to_string();
                let view = trace.view(slot);
                let mut widened = Vec::new();
                let values = view.f64s(0..view.len(), &mut widened);
                for (i, &v) in values.iter().enumerate() {
                    self.csv.serialize(DumpRow {
                        computation: name,
                        check: check.name,
                        step: step.clone(),
                        role,
                        index: i,
                        value: py_repr(v),
                    })?;
                }
                let file = npy_name(name, check.name, &step, role);
                let bytes =
                    npy_bytes(name, slot.role, &check.shape, view).with_context(|| file.clone())?;
                anyhow::ensure!(
                    self.names.insert(file.clone()),
                    "--dump: two recorded tensors are both named {file}"
                );
                write_atomic(&self.npy_dir.join(&file), &bytes)?;
            }
        }
        Ok(())
    }

    /// Finishes the CSV file; returns what was written, as `repro` reports it.
    pub fn finish(self) -> anyhow::Result<Vec<String>> {
        let file = self
            .csv
            .into_inner()
            .map_err(|e| anyhow::anyhow!("{}: {}", e.error(), "cannot write the CSV dump"))?;
        file.commit()?;
        Ok(vec![
            self.csv_path.display().to_string(),
            format!(
                "{} ({} .npy files)",
                self.npy_dir.display(),
                self.names.len()
            ),
        ])
    }
}

/// One tensor as an `.npy` file (module doc): `float32` where every value is an fp32
/// computation's (exactly an f32), else `float64`.
fn npy_bytes(
    computation: &str,
    role: SlotRole,
    check_shape: &[usize],
    view: View<'_>,
) -> anyhow::Result<Vec<u8>> {
    use ndarray::{ArrayViewD, IxDyn};
    use ndarray_npy::WriteNpyExt;
    let shape: Vec<usize> = if check_shape.iter().product::<usize>() == view.len() {
        check_shape.to_vec()
    } else {
        vec![view.len()]
    };
    let mut bytes = Vec::new();
    let err = |e: ndarray_npy::WriteNpyError| anyhow::anyhow!("{e}");
    let f32_side = computation != "f64" && role != SlotRole::SelfExpectedF64;
    match view {
        View::F32(v) => ArrayViewD::from_shape(IxDyn(&shape), v)?
            .write_npy(&mut bytes)
            .map_err(err)?,
        View::F64(data) => {
            // float32 only where every value is an f32 (exact): fp32 computations' values.
            let f32s: Option<Vec<f32>> = f32_side
                .then(|| data.iter().map(|&v| v as f32).collect::<Vec<f32>>())
                .filter(|v| {
                    v.iter().zip(data).all(|(&a, &b)| {
                        f64::from(a).to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
                    })
                });
            match f32s {
                Some(v) => ArrayViewD::from_shape(IxDyn(&shape), &v)?
                    .write_npy(&mut bytes)
                    .map_err(err)?,
                None => ArrayViewD::from_shape(IxDyn(&shape), data)?
                    .write_npy(&mut bytes)
                    .map_err(err)?,
            }
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::StepLabel;

    /// Every file of `dir` (sorted by name) with its bytes.
    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    }

    /// The dump of `traces` with stem `x` in a new folder: the CSV bytes and the npy files.
    fn dumped(checks: &[CheckSpec], batches: &[&Traces]) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = DumpWriter::create(tmp.path(), "x").unwrap();
        for t in batches {
            w.add(checks, t).unwrap();
        }
        w.finish().unwrap();
        (
            std::fs::read(tmp.path().join("x.csv")).unwrap(),
            files(&tmp.path().join("x")),
        )
    }

    /// A streamed step's traces lend their parameter slots (fp32 ones as f32 buffers, which
    /// `Trace::data` refuses): the dump reads them through their views and writes what the
    /// same traces with every slot copied as f64 give, byte for byte, in both forms.
    #[test]
    fn lent_fp32_slots_dump_as_their_copies() {
        let checks = [
            CheckSpec::new("w", vec![2, 2]),
            CheckSpec::new("out", vec![3]),
        ];
        let w32 = [1.5f32, -0.1, 3.0e-8, f32::MAX];
        let w64 = [0.1f64, -2.0 / 3.0, 1e-300, 7.0];
        let mut lent = Traces::default();
        // SAFETY: `w32` and `w64` outlive `lent` and are never modified.
        unsafe {
            lent.sharded.lend(true);
            lent.f64.lend(true);
        }
        let s = StepLabel::step(0);
        lent.f64.record(1, s, &[1.0f64 / 3.0, 2.0, -0.0]);
        lent.f64
            .record_role(1, s, SlotRole::Condition, &[1.0f64, 2.5, 0.0]);
        lent.f64.record_lent(0, s, &w64);
        lent.sharded.record(1, s, &[0.25f32, 2.0, -0.0]);
        lent.sharded.record_lent(0, s, &w32);
        assert!(!lent.sharded.all_f64(), "the fp32 parameter is lent as f32");
        let copied = Traces {
            f64: lent.f64.widened(),
            reference: lent.reference.widened(),
            sharded: lent.sharded.widened(),
        };
        let (csv_lent, npy_lent) = dumped(&checks, &[&lent]);
        let (csv_copied, npy_copied) = dumped(&checks, &[&copied]);
        assert_eq!(csv_lent, csv_copied);
        assert_eq!(npy_lent, npy_copied);
        let csv = String::from_utf8(csv_lent).unwrap();
        assert!(
            csv.contains("sharded,w,0,value,3,3.4028234663852886e+38"),
            "{csv}"
        );
        assert!(csv.contains("f64,out,0,condition,1,2.5"), "{csv}");
        let names: Vec<&str> = npy_lent.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "f64__out__step0__condition.npy",
                "f64__out__step0__value.npy",
                "f64__w__step0__value.npy",
                "sharded__out__step0__value.npy",
                "sharded__w__step0__value.npy",
            ]
        );
    }

    /// Two tensors that would share a file name are refused instead of one overwriting the
    /// other.
    #[test]
    fn a_second_tensor_with_the_same_name_is_refused() {
        let checks = [CheckSpec::new("out", vec![1])];
        let mut t = Traces::default();
        t.f64.record(0, StepLabel::step(0), &[1.0f64]);
        t.f64.record(0, StepLabel::step(0), &[2.0f64]);
        let tmp = tempfile::tempdir().unwrap();
        let mut w = DumpWriter::create(tmp.path(), "x").unwrap();
        let e = w.add(&checks, &t).unwrap_err().to_string();
        assert!(e.contains("f64__out__step0__value.npy"), "{e}");
        drop(w);
        assert!(
            !tmp.path().join("x.csv").exists(),
            "an unfinished CSV dump never appears"
        );
    }
}
