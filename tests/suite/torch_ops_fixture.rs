//! Bit-for-bit check of `seedsweep::kernels::torch_ops` against torch CPU outputs
//! recorded in `tests/data/torch_ops.json` (regenerate with
//! `python3 scripts/gen_torch_ops_fixtures.py`; the JSON `meta` block records
//! the torch version and CPU capability it was produced with).
//!
//! Every op must match exactly, `tanh` included: torch.tanh is MKL's `vmsTanh`, which
//! `tanh_slice_with(_, TanhKernel::Mkl)` reproduces (correctly rounded tanh plus the
//! measured exception table; `tests/suite/mkl_tanh.rs` checks the table itself).

use seedsweep::kernels::torch_ops::{
    column_sums_f32, log_softmax_cross_entropy_f32, sgd_f32, tanh_backward_f32, tanh_cr_f32,
    tanh_slice_with, TanhKernel,
};
use serde::Deserialize;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/torch_ops.json");

#[derive(Deserialize)]
struct Meta {
    torch_version: String,
    cpu_capability: String,
}

#[derive(Deserialize)]
struct Tanh {
    x: Vec<u32>,
    y: Vec<u32>,
}

#[derive(Deserialize)]
struct CrossEntropy {
    n: usize,
    v: usize,
    grad_scale: u32,
    logits: Vec<u32>,
    labels: Vec<i64>,
    loss: u32,
    dlogits: Vec<u32>,
}

#[derive(Deserialize)]
struct TanhBackward {
    dy: Vec<u32>,
    y: Vec<u32>,
    out: Vec<u32>,
}

#[derive(Deserialize)]
struct ColumnSums {
    n: usize,
    h: usize,
    x: Vec<u32>,
    out: Vec<u32>,
}

#[derive(Deserialize)]
struct Sgd {
    lr: u32,
    p: Vec<u32>,
    g: Vec<u32>,
    out: Vec<u32>,
}

#[derive(Deserialize)]
struct Fixture {
    meta: Meta,
    tanh: Tanh,
    cross_entropy: Vec<CrossEntropy>,
    tanh_backward: Vec<TanhBackward>,
    column_sums: Vec<ColumnSums>,
    sgd: Vec<Sgd>,
}

fn load() -> Fixture {
    let text = std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| {
        panic!(
            "missing torch fixture {FIXTURE} ({e}); generate it with \
             `python3 scripts/gen_torch_ops_fixtures.py` (needs torch)"
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("malformed fixture {FIXTURE}: {e}"))
}

fn floats(bits: &[u32]) -> Vec<f32> {
    bits.iter().map(|&b| f32::from_bits(b)).collect()
}

/// Panics on the first element whose bits differ.
fn assert_bits(name: &str, input: impl Fn(usize) -> String, expected: &[u32], actual: &[f32]) {
    assert_eq!(expected.len(), actual.len(), "{name}: length mismatch");
    if let Some(i) = (0..expected.len()).find(|&i| actual[i].to_bits() != expected[i]) {
        panic!(
            "{name}: first mismatch at index {i}: input {}, expected {:#010x} ({:e}), actual {:#010x} ({:e}); {} of {} differ",
            input(i),
            expected[i],
            f32::from_bits(expected[i]),
            actual[i].to_bits(),
            actual[i],
            (0..expected.len()).filter(|&j| actual[j].to_bits() != expected[j]).count(),
            expected.len()
        );
    }
}

fn hex(b: u32) -> String {
    format!("{b:#010x} ({:e})", f32::from_bits(b))
}

#[test]
fn fixture_meta() {
    let f = load();
    eprintln!(
        "torch_ops fixture: torch {} / CPU capability {}",
        f.meta.torch_version, f.meta.cpu_capability
    );
    assert!(f.tanh.x.len() >= 4000);
}

#[test]
fn tanh_matches_torch() {
    let f = load();
    let mut y = floats(&f.tanh.x);
    tanh_slice_with(&mut y, TanhKernel::Mkl);
    let mut not_cr = 0;
    for (i, (&e, a)) in f.tanh.y.iter().zip(&y).enumerate() {
        assert_eq!(
            a.to_bits(),
            e,
            "tanh: index {i}: input {}, torch {}, ours {}",
            hex(f.tanh.x[i]),
            hex(e),
            hex(a.to_bits())
        );
        not_cr += usize::from(tanh_cr_f32(f32::from_bits(f.tanh.x[i])).to_bits() != e);
    }
    eprintln!(
        "tanh: all {} match torch; {not_cr} of them differ from the correctly rounded tanh",
        y.len()
    );
}

#[test]
fn cross_entropy_matches_torch() {
    let f = load();
    for (c, case) in f.cross_entropy.iter().enumerate() {
        assert_eq!(case.logits.len(), case.n * case.v);
        let logits = floats(&case.logits);
        let mut d = vec![0.0f32; logits.len()];
        let loss = log_softmax_cross_entropy_f32(
            &logits,
            &case.labels,
            case.v,
            f32::from_bits(case.grad_scale),
            &mut d,
        );
        assert_bits(
            &format!("cross_entropy[{c}] loss (n={}, v={})", case.n, case.v),
            |_| "whole case".to_string(),
            &[case.loss],
            &[loss],
        );
        assert_bits(
            &format!("cross_entropy[{c}] dlogits"),
            |i| format!("logit {}", hex(case.logits[i])),
            &case.dlogits,
            &d,
        );
    }
}

#[test]
fn tanh_backward_matches_torch() {
    let f = load();
    for (c, case) in f.tanh_backward.iter().enumerate() {
        let mut out = vec![0.0f32; case.y.len()];
        tanh_backward_f32(&floats(&case.dy), &floats(&case.y), &mut out);
        assert_bits(
            &format!("tanh_backward[{c}]"),
            |i| format!("dy {}, y {}", hex(case.dy[i]), hex(case.y[i])),
            &case.out,
            &out,
        );
    }
}

#[test]
fn column_sums_match_torch() {
    let f = load();
    for (c, case) in f.column_sums.iter().enumerate() {
        let mut out = vec![0.0f32; case.h];
        column_sums_f32(&floats(&case.x), case.n, &mut out);
        assert_bits(
            &format!("column_sums[{c}] ({}x{})", case.n, case.h),
            |i| format!("column {i}"),
            &case.out,
            &out,
        );
    }
}

#[test]
fn sgd_matches_torch() {
    let f = load();
    for (c, case) in f.sgd.iter().enumerate() {
        let mut p = floats(&case.p);
        sgd_f32(&mut p, &floats(&case.g), f32::from_bits(case.lr));
        assert_bits(
            &format!(
                "sgd[{c}] (size {}, lr {})",
                p.len(),
                f32::from_bits(case.lr)
            ),
            |i| format!("p {}, g {}", hex(case.p[i]), hex(case.g[i])),
            &case.out,
            &p,
        );
    }
}
