//! The memory check's bound on one seed-run of a graph scenario (`Scenario::run_bytes`, from
//! the plan: `graph::memory`) is above the resident memory the seed-run reaches, on every
//! built-in scenario config without an outer loop (DiLoCo keeps the check-tensor estimate)
//! and every example, the two big shapes (V = 32,000 and H = 8,192, where
//! the bound matters) under a profile with bf16x3 input passes and with the tied-weights-drift
//! mutant too.
//!
//! Measured in this process on Linux: the peak resident set (`VmHWM`) is reset before each
//! seed-run (`/proc/self/clear_refs`, value 5) and read after it; what the run added is the
//! peak less the resident set before. Configs run smallest first, each with a fresh workspace
//! that is dropped after it, so that a run finds little memory left over to reuse. The bound
//! is compared as the memory check uses it, with its quarter of margin and 16 MiB for the
//! process; the test also requires the bound with a sixteenth instead of the quarter to cover
//! the big shapes' peaks, so a model that only passes by its margin is caught.
//!
//! `VmHWM` and `clear_refs` are the whole process's, so the test runs alone in its own process
//! (`common::alone`): no other test of the suite allocates during its seed-runs.

#![cfg(target_os = "linux")]

use crate::common;
use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::exec::GraphScenario;
use seedsweep::scenario::mutant::Mutant;
use seedsweep::scenario::profile::{Profile, ProfileRegistry};

/// A `kB` field of /proc/self/status, in bytes.
fn status(field: &str) -> u128 {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = text
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: u128 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of kB");
    kb * 1024
}

fn scenario(path: &str) -> GraphScenario {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap();
    let sf = seedsweep::scenario::load(path, &text).unwrap();
    seedsweep::exec::build::build(sf).unwrap()
}

/// (the bound, what one seed-run of `param` added to the resident set at its peak).
fn measure(
    s: &GraphScenario,
    param: usize,
    profile: &Profile,
    mutant: Option<Mutant>,
) -> (u128, u128) {
    let bound = s
        .run_bytes(param, profile, mutant)
        .expect("a graph scenario without an outer loop bounds its seed-run");
    let mut ws = Workspace::default();
    ws.mutant = mutant;
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak resident set");
    let before = status("VmRSS:");
    s.run_stepwise(param, s.common().first_seed, profile, &mut ws, &mut |_| {});
    let peak = status("VmHWM:");
    drop(ws);
    (bound, peak.saturating_sub(before))
}

/// What the memory check adds for the process itself (`seedsweep::engine::budget::per_run`).
const BASE: u128 = 16 << 20;

#[test]
fn the_bound_covers_peak_resident_memory() {
    if !common::alone::in_own_process("memory_bound::the_bound_covers_peak_resident_memory") {
        return;
    }
    let reg = ProfileRegistry::builtin().unwrap();
    let fma = reg.resolve("cpu-fma", "test").unwrap();
    let bf16x3 = reg.resolve("tpu-bf16x3", "test").unwrap();
    let mut runs: Vec<(&str, Profile, Option<Mutant>)> = Vec::new();
    for f in [
        "configs/deepspeed_tied_row_parallel.toml",
        "configs/deepspeed_row_parallel.toml",
        "configs/deepspeed_tp_column_parallel.toml",
        "configs/deepspeed_tp_row_parallel.toml",
        "configs/deepspeed_uneven_tp3_row_parallel.toml",
        "configs/fsdp_zero2_grad_acc.toml",
        "configs/megatron_tp_mlp.toml",
        "configs/megatron_vocab_parallel_cross_entropy.toml",
        "configs/maxtext_moe_dense_test.toml",
        "configs/maxtext_moe_dense_vs_loop.toml",
        "tests/data/moe/moe_einsum.toml",
        "tests/data/moe/moe_gated_norm.toml",
        "tests/data/moe/moe_dp2.toml",
        "tests/data/moe/moe_ep2.toml",
        "configs/examples/megatron_mlp_tp4.toml",
        "configs/examples/row_parallel_head_tp4.toml",
        "configs/examples/tp2_prenorm_block.toml",
    ] {
        runs.push((f, fma.clone(), None));
    }
    let (v32, h8) = (
        "configs/examples/production_head_v32000_h512.toml",
        "configs/examples/t1_h8192.toml",
    );
    runs.push((v32, fma.clone(), None));
    runs.push((v32, bf16x3.clone(), None));
    runs.push((v32, fma.clone(), Some(Mutant::TiedWeightsDrift)));
    runs.push((h8, fma.clone(), None));
    runs.push((h8, bf16x3, None));
    let mut big = 0;
    for (f, profile, mutant) in runs {
        let s = scenario(f);
        for param in 0..s.param_ids().len() {
            let (bound, used) = measure(&s, param, &profile, mutant);
            let what = format!(
                "{f} [{}] {} {:?}: bound {bound} B (+ a quarter), the run added {used} B",
                s.param_ids()[param],
                profile.name,
                mutant.map(|m| m.name())
            );
            eprintln!("{what}");
            // As the memory check counts it: a quarter more, and 16 MiB for the process
            // itself (code, tables, threads: a first seed-run of a small scenario adds about
            // 2 MiB here).
            assert!(used <= bound + bound / 4 + BASE, "{what}");
            if used > 256 << 20 {
                // Within a sixteenth without the quarter: the model itself covers them (page
                // rounding, such as transparent huge pages, may add a little).
                assert!(
                    used <= bound + bound / 16 + BASE,
                    "the bound needs its margin: {what}"
                );
                big += 1;
            }
        }
    }
    assert_eq!(big, 5, "the big shapes' runs each added more than 256 MiB");
}
