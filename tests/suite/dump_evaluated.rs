//! `repro --dump` writes the tensors the evaluation reads (issue 34, item 6). For several
//! built-ins (and a file whose `fc1.out` is checked, the tensor the issue found wrong), the
//! command line's dump of one seed is compared, bit for bit, with an in-process evaluation of
//! the same groups at the same seed:
//! - the dump holds exactly the slots of the traces the evaluation read, each under its
//!   `(computation, check, step, role)` name, in both forms (the CSV rows and the `.npy`
//!   files), with the same bits;
//! - every tensor a comparison compares (each side of every check × comparison, as
//!   `engine::evaluate::for_each_view_pair` pairs them) and every condition the error-bound
//!   columns read is one of them, under the name the dump doc gives it: the float64 value of
//!   `fc1_out` is the `value` role, its `Σ|a·b|` the `condition` role.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use assert_cmd::Command;
use seedsweep::check::comparison::Comparison;
use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::engine::evaluate::{condition, for_each_view_pair};
use seedsweep::exec::scenario::{Traces, Workspace};
use seedsweep::exec::trace::View;
use seedsweep::results::dump::role_name;

/// A tensor's name in the dump: (computation, check, step, role).
type Key = (String, String, String, String);

fn bits(v: View<'_>) -> Vec<u64> {
    let mut buf = Vec::new();
    v.f64s(0..v.len(), &mut buf)
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

fn key(comp: &str, check: &str, step: impl ToString, role: &str) -> Key {
    (
        comp.to_string(),
        check.to_string(),
        step.to_string(),
        role.to_string(),
    )
}

/// Every slot of the three traces by its dump name (no two slots share one).
fn slots(checks: &[seedsweep::exec::scenario::CheckSpec], t: &Traces) -> BTreeMap<Key, Vec<u64>> {
    let mut out = BTreeMap::new();
    for (comp, trace) in [
        ("f64", &t.f64),
        ("reference", &t.reference),
        ("sharded", &t.sharded),
    ] {
        for s in &trace.slots {
            let k = key(comp, checks[s.check].name, s.step, role_name(s.role));
            let prev = out.insert(k.clone(), bits(trace.view(s)));
            assert!(prev.is_none(), "two slots named {k:?}");
        }
    }
    out
}

/// What the evaluation compares: both sides of every check × comparison, and the conditions,
/// each by the name the dump gives it.
fn compared(
    checks: &[seedsweep::exec::scenario::CheckSpec],
    t: &Traces,
) -> BTreeMap<Key, Vec<u64>> {
    let mut out: BTreeMap<Key, Vec<u64>> = BTreeMap::new();
    let mut put = |k: Key, b: Vec<u64>| {
        if let Some(prev) = out.insert(k.clone(), b.clone()) {
            assert_eq!(prev, b, "{k:?} read as two different tensors");
        }
    };
    for (c, spec) in checks.iter().enumerate() {
        for cmp in Comparison::ALL {
            let (actual, expected) = match cmp {
                Comparison::ShardedVsRef => ("sharded", "reference"),
                Comparison::RefVsF64 => ("reference", "f64"),
                Comparison::ShardedVsF64 => ("sharded", "f64"),
            };
            for_each_view_pair(t, c, spec, cmp, |step, a, e| {
                put(key(actual, spec.name, step, "value"), bits(a));
                let e_key = if spec.self_consistent {
                    let role = if cmp == Comparison::ShardedVsRef {
                        "expected-f32"
                    } else {
                        "expected-f64"
                    };
                    key(actual, spec.name, step, role)
                } else {
                    key(expected, spec.name, step, "value")
                };
                put(e_key, bits(e));
                if let Some(cond) = condition(t, c, step) {
                    put(
                        key("f64", spec.name, step, "condition"),
                        cond.iter().map(|x| x.to_bits()).collect(),
                    );
                }
            });
        }
    }
    out
}

/// The CSV dump: every tensor's values in index order, as bits.
fn read_csv(path: &Path) -> BTreeMap<Key, Vec<u64>> {
    let mut out: BTreeMap<Key, Vec<u64>> = BTreeMap::new();
    let mut r = csv::Reader::from_path(path).unwrap();
    assert_eq!(
        r.headers().unwrap(),
        vec!["computation", "check", "step", "role", "index", "value"]
    );
    for rec in r.records() {
        let rec = rec.unwrap();
        let v = out
            .entry(key(&rec[0], &rec[1], &rec[2], &rec[3]))
            .or_default();
        assert_eq!(rec[4].parse::<usize>().unwrap(), v.len(), "{rec:?}");
        v.push(rec[5].parse::<f64>().unwrap().to_bits());
    }
    out
}

/// The `.npy` folder: every tensor's values (row-major), as bits, and whether it is float32.
fn read_npys(dir: &Path) -> BTreeMap<Key, (Vec<u64>, bool)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        let parts: Vec<&str> = stem.split("__").collect();
        assert_eq!(parts.len(), 4, "{stem}");
        let k = key(
            parts[0],
            parts[1],
            parts[2].strip_prefix("step").unwrap(),
            parts[3],
        );
        let (descr, _, values) = crate::dump_npy::read_npy(&path);
        out.insert(
            k,
            (values.iter().map(|x| x.to_bits()).collect(), descr == "<f4"),
        );
    }
    out
}

/// Dumps `scenario` at `param` and `seed` through the command line (with `extra` arguments and
/// `config` files), evaluates the same groups in-process, and compares.
fn dump_is_the_evaluated_traces(
    scenario: &str,
    param: &str,
    seed: u64,
    mutants: Option<&str>,
    config: Option<&Path>,
) {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = Command::cargo_bin("seedsweep").unwrap();
    cmd.args(["repro", "-q", "--seed", &seed.to_string()])
        .args(["--scenario", scenario, "--param", param, "--dump"])
        .arg(tmp.path());
    if let Some(m) = mutants {
        cmd.args(["--mutants", m]);
    }
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let configs: Vec<&Path> = config.into_iter().collect();
    let catalog = Catalog::load(&configs, None).unwrap();
    let groups = catalog
        .select(&Selection {
            scenarios: Some(vec![scenario.into()]),
            params: Some(vec![param.into()]),
            mutants: mutants.map(|m| vec![m.to_string()]),
            ..Default::default()
        })
        .unwrap();
    assert!(!groups.is_empty());
    let mut dumped_dirs = BTreeSet::new();
    for g in &groups {
        let s = &catalog.scenarios[g.scenario];
        let checks = s.checks(g.param);
        let stem = format!(
            "{scenario}__{param}__{}{}__seed{seed}",
            g.profile.name,
            g.mutant
                .map(|m| format!("__{}", m.name()))
                .unwrap_or_default()
        );
        let mut ws = Workspace::default();
        let mut results = Vec::new();
        seedsweep::engine::unit(&catalog, g, seed, &mut ws, &mut results);
        let all = slots(checks, &ws.traces);
        let read = compared(checks, &ws.traces);
        for (k, b) in &read {
            assert_eq!(all.get(k), Some(b), "{stem}: the evaluated {k:?}");
        }
        let csv = read_csv(&tmp.path().join(format!("{stem}.csv")));
        assert_eq!(
            csv.keys().collect::<Vec<_>>(),
            all.keys().collect::<Vec<_>>(),
            "{stem}: the CSV dump names every slot the evaluation read, and nothing else"
        );
        for (k, b) in &all {
            assert!(
                csv[k] == *b,
                "{stem}: CSV {k:?} differs from the evaluated tensor"
            );
        }
        let npys = read_npys(&tmp.path().join(&stem));
        assert_eq!(
            npys.keys().collect::<Vec<_>>(),
            all.keys().collect::<Vec<_>>(),
            "{stem}: one .npy file per slot"
        );
        for (k, (b, is_f32)) in &npys {
            assert!(all[k] == *b, "{stem}: .npy {k:?} differs");
            let fp32_side = k.0 != "f64" && k.3 != "expected-f64";
            assert_eq!(*is_f32, fp32_side, "{stem}: {k:?} dtype");
        }
        eprintln!(
            "{stem}: {} tensors dumped, {} of them compared by the evaluation",
            all.len(),
            read.len()
        );
        dumped_dirs.insert(stem);
    }
    // Nothing else was written: each group's CSV file and its folder.
    let names: BTreeSet<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let want: BTreeSet<String> = dumped_dirs
        .iter()
        .flat_map(|s| [s.clone(), format!("{s}.csv")])
        .collect();
    assert_eq!(names, want);
}

#[test]
fn tied_row_parallel_dump_is_what_the_evaluation_read() {
    // Conditions beside the logits, a tied gradient, parameters after the step.
    dump_is_the_evaluated_traces(
        "deepspeed-tied-row-parallel",
        "35-3-False-0",
        8199,
        Some("missing-allreduce"),
        None,
    );
}

#[test]
fn row_parallel_with_micro_steps_dump_is_what_the_evaluation_read() {
    // Micro-step labels and the SGD-update self-consistency check's expectations.
    dump_is_the_evaluated_traces(
        "deepspeed-row-parallel",
        "35-input_shape1-lm_head-True",
        8199,
        None,
        None,
    );
}

#[test]
fn megatron_mlp_and_vocab_parallel_dumps_are_what_the_evaluation_read() {
    dump_is_the_evaluated_traces("megatron-tp-mlp", "16-64-4", 8180, None, None);
    dump_is_the_evaluated_traces(
        "megatron-vocab-parallel-ce",
        "16-16-32-4",
        8180,
        Some("bf16-allreduce"),
        None,
    );
}

#[test]
fn data_parallel_and_outer_loop_dumps_are_what_the_evaluation_read() {
    dump_is_the_evaluated_traces("fsdp-zero2-grad-acc", "16-32-4-2", 8181, None, None);
    // Two default profiles (f32, tpu-bf16), sharded-vs-f64 asserted, self-consistent checks.
    dump_is_the_evaluated_traces(
        "maxtext-diloco",
        "test_diloco_training_simulation_with_mesh",
        0,
        None,
        None,
    );
}

/// The computation the issue described (LayerNorm → column-parallel fc1 → exact gelu →
/// row-parallel fc2 → residual add, MSE, AdamW, 4 steps × 2 micro-steps, TP 4, H = 36,
/// F = 100) with `fc1.out` checked: the float64 `fc1_out` the dump names `value` is the one
/// the evaluation compares, and its condition is the `condition` role.
#[test]
fn checked_fc1_out_dump_is_what_the_evaluation_read() {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(
        &mut f,
        br#"name = "heldout-mlp"
dims = { tokens = 8, hidden = 36, ffn = 100 }
parallel = { tp = 4 }
inputs = [
  { name = "x", draw = "randn", shape = ["tokens", "hidden"], grad = true },
  { name = "target", draw = "randn", shape = ["tokens", "hidden"] },
]
layers = [
  { name = "ln", op = "layernorm", input = "x" },
  { name = "fc1", op = "linear", out = "ffn", parallel = "column", bias = false },
  { name = "act", op = "gelu" },
  { name = "fc2", op = "linear", out = "hidden", parallel = "row" },
  { name = "res", op = "residual-add", inputs = ["fc2.out", "x"] },
]
loss = { op = "mse", target = "target" }
train = { steps = 4, micro_steps = 2, optimizer = "adamw", lr = 1e-3 }
checks = [
  { name = "fc1_out", tensor = "fc1.out" },
  { name = "out", tensor = "res.out" },
  { name = "loss", tensor = "loss" },
  { name = "x_grad", tensor = "x.grad" },
  { name = "fc1_weight", tensor = "fc1.weight" },
]
"#,
    )
    .unwrap();
    dump_is_the_evaluated_traces("heldout-mlp", "default", 3, None, Some(f.path()));
}
