//! HSDP (`dp_replicate × dp_shard`) and two layouts compared with each other
//! (`compare = "layout-vs-layout"`), against real PyTorch.
//!
//! `tests/data/torchtitan_fsdp_vs_hsdp.torch1.json` is `scripts/torch_mirror.py` run on the
//! built-in `configs/torchtitan_fsdp_vs_hsdp.toml` in torch 2.15 on the CPU (AVX2 ATen kernels,
//! `ATEN_CPU_CAPABILITY=avx2`, one thread, eager, MKL), every rank simulated in one process and
//! every collective in `cpu-fma`'s ring order: its `sharded` computation is the HSDP 2 × 4 run
//! (reduce-scatter within each shard group of 4, then each shard all-reduced over its
//! replicate group of 2, as FSDP2's `foreach_reduce`), its `reference` the FSDP 8 run of the
//! `[parallel.reference]` layout. Every tensor of both is compared bit for bit with
//! seedsweep's sharded and reference traces at `cpu-fma+mkl-threads-1`.
//!
//! Regenerate: `ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/torch_mirror.py
//! configs/torchtitan_fsdp_vs_hsdp.toml --seeds 50 --threads 1 -o
//! tests/data/torchtitan_fsdp_vs_hsdp.torch1.json`.

use std::path::Path;

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::scenario::profile::ProfileRegistry;
use serde_json::Value;

const TOML: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/configs/torchtitan_fsdp_vs_hsdp.toml"
);
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/torchtitan_fsdp_vs_hsdp.torch1.json"
);

/// Every tensor torch recorded for both layouts (HSDP 2 × 4 and FSDP 8) over the fixture's
/// seeds is bit-identical to seedsweep's.
#[test]
fn fsdp_vs_hsdp_matches_torch_bit_for_bit() {
    let c =
        crate::torch_corpus::measure(Path::new(TOML), Path::new(FIXTURE), "cpu-fma+mkl-threads-1");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap().len();
    // 4 steps × 5 checks (loss, 4 parameters) × 2 layouts per seed.
    assert_eq!(c.tensors, runs * 4 * 5 * 2, "tensors compared");
    assert!(
        c.unmatched.is_empty(),
        "checks without a tensor: {:?}",
        c.unmatched
    );
    assert_eq!(
        (c.tensors_same, c.elements_same),
        (c.tensors, c.elements),
        "first difference: {:?}",
        c.first
    );
}

/// The fixture's two layouts are different computations in torch too: some parameter after
/// step 1 differs between HSDP 2 × 4 and FSDP 8 (the gradients are summed in other orders),
/// while the loss of step 1 (label `0`), computed on the same initial parameters and reduced
/// over the same 8 ranks, is the same in both.
#[test]
fn the_fixture_layouts_differ_after_the_first_update() {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    let keys: Vec<&str> = json["keys"]["default"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let mut differing = 0;
    for run in json["runs"].as_array().unwrap() {
        let (r, s) = (
            run["reference"].as_str().unwrap(),
            run["sharded"].as_str().unwrap(),
        );
        for (i, k) in keys.iter().enumerate() {
            let same = r[16 * i..16 * i + 16] == s[16 * i..16 * i + 16];
            if *k == "loss@0" {
                assert!(same, "step-1 loss differs between the layouts");
            } else if !same {
                differing += 1;
            }
        }
    }
    assert!(
        differing > 0,
        "no tensor differs between FSDP 8 and HSDP 2 x 4"
    );
}

fn scenario(text: &str) -> seedsweep::exec::GraphScenario {
    let sf = seedsweep::scenario::load("hsdp.toml", text).unwrap_or_else(|e| panic!("{e}"));
    seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs seed `seed` of `text` and returns (sharded, reference) traces as f32 bits.
fn traces(text: &str, seed: u64) -> (Vec<u32>, Vec<u32>, Vec<f64>) {
    let s = scenario(text);
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "test")
        .unwrap();
    let mut ws = Workspace::default();
    s.run(0, seed, &profile, &mut ws);
    let bits = |t: &seedsweep::exec::trace::Trace| -> Vec<u32> {
        t.slots
            .iter()
            .flat_map(|sl| t.data(sl).iter().map(|&v| (v as f32).to_bits()))
            .collect()
    };
    let f64s: Vec<f64> = ws
        .traces
        .f64
        .slots
        .iter()
        .flat_map(|sl| ws.traces.f64.data(sl).to_vec())
        .collect();
    (bits(&ws.traces.sharded), bits(&ws.traces.reference), f64s)
}

fn builtin_text() -> String {
    std::fs::read_to_string(TOML).unwrap()
}

/// A mesh with one replica is FSDP: `dp_replicate = 1, dp_shard = 8` computes exactly what
/// `dp = 8` computes (the same code path, one replicate group), and a reference layout
/// equal to it gives a sharded-vs-ref difference of exactly zero.
#[test]
fn one_replica_is_fsdp() {
    let t = builtin_text();
    let a = t
        .replace("dp_replicate = 2 ", "dp_replicate = 1 ")
        .replace("dp_shard = 4 ", "dp_shard = 8 ");
    let b = t
        .replace("dp_replicate = 2 ", "")
        .replace("dp_shard = 4 ", "dp = 8 ");
    // [parallel.reference] of both: HSDP 2 × 4, so that each file's layouts differ.
    let swap = |s: &str| {
        s.replace(
            "[parallel.reference]\ndp_shard = 8 ",
            "[parallel.reference]\ndp_replicate = 2\ndp_shard = 4 ",
        )
    };
    let (sa, ra, _) = traces(&swap(&a), 3);
    let (sb, rb, _) = traces(&swap(&b), 3);
    assert_eq!(sa, sb, "dp_shard = 8 alone vs dp = 8");
    assert_eq!(ra, rb, "the same HSDP reference");
    // The built-in's reference (FSDP 8) is this sharded computation.
    let (_, r_builtin, _) = traces(&t, 3);
    assert_eq!(
        sa, r_builtin,
        "FSDP 8 as sharded layout vs as reference layout"
    );
}

/// The float64 truth stays the unsharded exact computation: the same with or without a
/// reference layout (the built-in against the same file comparing HSDP with one process).
#[test]
fn the_f64_truth_is_the_unsharded_computation() {
    let t = builtin_text();
    let plain = t
        .replace("compare = \"layout-vs-layout\"\n", "")
        .replace("[parallel.reference]\ndp_shard = 8               # FSDP over all 8 ranks\nzero_stage = 3\n", "");
    assert!(!plain.contains("reference]"), "reference table removed");
    let (s1, _, f1) = traces(&t, 5);
    let (s2, r2, f2) = traces(&plain, 5);
    assert_eq!(f1, f2, "float64 truth");
    assert_eq!(s1, s2, "the HSDP computation");
    // Against one process the reference is the unsharded run, which is not FSDP 8's.
    let (_, r1, _) = traces(&t, 5);
    assert_ne!(r1, r2, "FSDP 8 reference vs unsharded reference");
}

/// A fixture of `tests/data/layouts/` measured against its file at one thread.
fn measure_layouts(name: &str) -> crate::torch_corpus::Counts {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/layouts/");
    crate::torch_corpus::measure(
        &Path::new(dir).join(format!("{name}.toml")),
        &Path::new(dir).join(format!("{name}.torch1.json")),
        "cpu-fma+mkl-threads-1",
    )
}

/// HSDP 2 × 4 against one process with 2 micro-steps, reduced after every micro-step and
/// (`no-sync`) once per step on locally accumulated gradients, with parameters whose rows
/// the shard group does not divide (30 and 10 rows over 4: padded shards): every tensor of
/// 20 seeds of both parametrizations, both computations, bit-identical to torch's.
#[test]
fn hsdp_variants_match_torch_bit_for_bit() {
    let c = measure_layouts("hsdp_variants");
    // 2 parametrizations × 20 seeds × 2 computations × (2 steps × 2 micro-steps losses + 2
    // steps × 3 parameters).
    assert_eq!(c.tensors, 2 * 20 * 2 * (4 + 6), "tensors compared");
    assert!(c.unmatched.is_empty(), "{:?}", c.unmatched);
    assert_eq!(
        (c.tensors_same, c.elements_same),
        (c.tensors, c.elements),
        "first difference: {:?}",
        c.first
    );
}

/// Two tensor-parallel layouts compared (TP 4 against TP 2, the Megatron MLP example):
/// torch's TP 4 and TP 2 runs, every tensor of 20 seeds, bit-identical to seedsweep's
/// sharded and reference traces.
#[test]
fn tp4_vs_tp2_matches_torch_bit_for_bit() {
    let c = measure_layouts("tp4_vs_tp2");
    assert!(c.tensors > 0 && c.unmatched.is_empty(), "{:?}", c.unmatched);
    assert_eq!(
        (c.tensors_same, c.elements_same),
        (c.tensors, c.elements),
        "first difference: {:?}",
        c.first
    );
}
