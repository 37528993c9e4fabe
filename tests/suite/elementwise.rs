//! Layers with several inputs (`mul`, `add`), fixed inputs (`draw = "fixed"`), sharded inputs
//! and per-token losses, against real torch.
//!
//! The files: `tests/data/elementwise/*.toml`, the example `configs/examples/swiglu_tp2.toml`
//! and the built-in `configs/megatron_vocab_parallel_ce_test.toml`; for each `F.toml`,
//! `tests/data/elementwise/` holds the fixtures `F.torch1.json` and `F.torch2.json`:
//! `scripts/torch_mirror.py F.toml --threads T -o ...` in torch
//! 2.15 on the CPU (`ATEN_CPU_CAPABILITY=avx2`, eager, T = 1 and 2 threads), every check of
//! both computations (the unsharded reference and the simulated sharded one) as FNV-1a
//! digests of the f32 bits. Every tensor is compared bit for bit with seedsweep's trace at the
//! profile of that thread count (`torch_corpus::measure`, the corpus's comparison), and the
//! measured counts are written to `agreement.tsv`; the test asserts the measured rows equal
//! the recorded ones (regenerate with `SEEDSWEEP_BLESS_CORPUS=1`), so a regression and an
//! improvement both fail it.
//!
//! `swiglu_tp2` (the example), `mul_shared_operands` (operands read by several layers, `x * x`,
//! uneven shards at TP 3 and TP 2) and `sharded_input_row` (a fixed last-dim-sharded input
//! times a column output into a row layer) run 20 seeds; the built-in 3 (its values do not
//! depend on the seed). `elem-NNN.toml` are `scripts/gen_corpus.py --count 12 --seed 35 --elementwise 0.6 --prefix
//! elem` (SwiGLU blocks, `add`, fixed inputs mixed into the corpus generator's files), 5 seeds
//! each. Measured: every file bit-exact at 1 and 2 threads except `elem-001`, a vocab-parallel
//! cross-entropy trained through 9 micro-steps, whose loss differs in 9 of 180 values (and what
//! its gradients feed after): torch's `exp` and `log` there are MKL's vmsExp/vmsLn, which
//! seedsweep does not model (docs/conformance.md); it holds no `mul` or `add`.

use std::path::{Path, PathBuf};

use super::torch_corpus::{assert_agreement, toml_files};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/elementwise/");

fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = toml_files(DIR);
    v.push(root.join("configs/examples/swiglu_tp2.toml"));
    v.push(root.join("configs/megatron_vocab_parallel_ce_test.toml"));
    v.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    v
}

#[test]
fn elementwise_files_against_torch_at_one_and_two_threads() {
    assert_agreement(DIR, "tests/data/elementwise", &files());
}

/// The built-in `megatron-vocab-parallel-ce-test` passes Megatron's own assertion,
/// `torch.equal(torch.round(expected_output), torch.round(output))`, with the test's constants,
/// in both fp32 computations (TP 4 and TP 1); and its per-token losses are the float64 value
/// `ln(16·Σ_{k=0..7} e^k) − (t mod 8)` computed here independently (pure-Rust `libm`), within
/// 2 ulp of f32 at 10.2 (2 · 2^-20 ≈ 1.9e-6: the fp32 chain is a handful of roundings of
/// exact integers, an exp, a 32-term sum per rank, 4-rank sum and a log, each within
/// half an ulp of its result).
#[test]
fn megatron_vocab_parallel_ce_test_passes_the_tests_own_assertion() {
    use seedsweep::exec::scenario::{Scenario, Workspace};
    use seedsweep::scenario::profile::ProfileRegistry;
    let text = include_str!("../../configs/megatron_vocab_parallel_ce_test.toml");
    let sf = seedsweep::scenario::load("megatron_vocab_parallel_ce_test.toml", text)
        .unwrap_or_else(|e| panic!("{e}"));
    let s = seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{e}"));
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma+mkl-threads-1", "test")
        .unwrap();
    let mut ws = Workspace::default();
    s.run(0, 0, &profile, &mut ws);
    let checks = s.checks(0);
    let expected: [f32; 16] = [
        10.2309, 8.2309, 6.2309, 4.2309, 10.2309, 8.2309, 6.2309, 4.2309, 10.2309, 8.2309, 6.2309,
        4.2309, 10.2309, 8.2309, 6.2309, 4.2309,
    ];
    let lse = libm::log(16.0 * (0..8).map(|k| libm::exp(f64::from(k))).sum::<f64>());
    for (what, t) in [
        ("sharded (tp 4)", &ws.traces.sharded),
        ("reference (tp 1)", &ws.traces.reference),
    ] {
        let slot = t
            .slots
            .iter()
            .find(|sl| &*checks[sl.check].name == "output")
            .expect("the output check records");
        let out = t.data(slot);
        assert_eq!(out.len(), 16, "{what}");
        for (i, (&o, &e)) in out.iter().zip(&expected).enumerate() {
            // A trace holds the f32 values widened (exactly).
            let o = o as f32;
            assert_eq!(o.round(), e.round(), "{what}: token {i}: {o} vs {e}");
            let truth = lse - f64::from((2 * i as u32) % 8);
            assert!(
                (f64::from(o) - truth).abs() <= 2.0 * 2f64.powi(-20),
                "{what}: token {i}: {o} vs the float64 {truth}"
            );
        }
    }
}
