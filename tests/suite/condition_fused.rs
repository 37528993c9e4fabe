//! The float64 computation records, beside a checked linear output, its condition
//! Σ_k |x_k·W_k| (the scale of the theory columns). Where the few-rows kernel runs, the
//! forward computes it together with the output from one read of the weight
//! (`Backend::matmul_nt_and_abs`) and the record takes that copy. Either way the slot must be,
//! bit for bit, |h|·|W|ᵀ of the activation and the weight the output was computed from,
//! summed per element as the float64 products sum: c = +0, then c = c + fl(|h_k|·|W_k|) for k
//! ascending.
//!
//! T1 at vocab 2,048 (the head's 2,048 × 32 float64 weight is 512 KB, inside the few-rows
//! kernel's range on an AVX-512 machine), with one more check: the tanh output at every
//! micro-step. The logits of step s ≥ 1 come from that step's tanh output and the head weight
//! recorded after step s − 1, so every step's condition is checked against an independent
//! sum, across seeds that reuse one workspace (a stale condition from an earlier step or seed
//! would show).

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::exec::trace::{SlotRole, Trace};
use seedsweep::exec::GraphScenario;
use seedsweep::scenario::profile::ProfileRegistry;

fn scenario() -> GraphScenario {
    let text = include_str!("../../configs/deepspeed_tied_row_parallel.toml")
        .replace("vocab = 67", "vocab = 2048")
        .replace(
            "[[checks]]\nname = \"logits\"",
            "[[checks]]\nname = \"hidden\"\ntensor = \"tanh.out\"\nat = \"micro-step\"\n\n\
             [[checks]]\nname = \"logits\"",
        );
    assert!(text.contains("vocab = 2048") && text.contains("name = \"hidden\""));
    let sf = seedsweep::scenario::load("t1_v2048.toml", &text).unwrap();
    seedsweep::exec::build::build(sf).unwrap()
}

/// The values of the slot of check `check`, role `role`, at optimizer step `step`.
fn slot(t: &Trace, check: usize, role: SlotRole, step: u32) -> Vec<f64> {
    let s = t
        .slots
        .iter()
        .find(|s| s.check == check && s.role == role && s.step.step == step)
        .unwrap_or_else(|| panic!("no slot of check {check} {role:?} at step {step}"));
    let v = t.view(s);
    let mut buf = Vec::new();
    v.f64s(0..v.len(), &mut buf).to_vec()
}

#[test]
fn a_recorded_condition_is_the_sum_of_absolute_products_of_its_operands() {
    let s = scenario();
    let names: Vec<&str> = s.checks(0).iter().map(|c| c.name).collect();
    let at = |n: &str| names.iter().position(|&m| m == n).unwrap();
    let (hidden, logits, head) = (at("hidden"), at("logits"), at("head_weight"));
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "--profile")
        .unwrap();
    let (tokens, width, vocab) = (10, 32, 2048);
    let mut ws = Workspace::default();
    let mut compared = 0;
    for seed in [8173, 8199, 8200] {
        s.run(0, seed, &profile, &mut ws);
        let t = &ws.traces.f64;
        for step in 1..3u32 {
            let h = slot(t, hidden, SlotRole::Value, step);
            let w = slot(t, head, SlotRole::Value, step - 1);
            let cond = slot(t, logits, SlotRole::Condition, step);
            assert_eq!(
                (h.len(), w.len(), cond.len()),
                (tokens * width, vocab * width, tokens * vocab)
            );
            for r in 0..tokens {
                for v in 0..vocab {
                    let mut c = 0.0f64;
                    for k in 0..width {
                        c += (h[r * width + k] * w[v * width + k]).abs();
                    }
                    assert_eq!(
                        cond[r * vocab + v].to_bits(),
                        c.to_bits(),
                        "seed {seed} step {step} token {r} logit {v}"
                    );
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 3 * 2 * tokens * vocab);
}
