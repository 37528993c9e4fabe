//! A captured file against the built-in it mirrors: `python/examples/test_row_parallel_head.py`
//! (the row-parallel head on a replicated input that DeepSpeed's
//! `LinearAllreduceWithReplicatedInput` computes, emulated in one process in the model and loop
//! of the built-in `deepspeed-row-parallel`'s `35-input_shape2-embed_out-True`), captured into
//! `python/examples/captures/test_row_parallel_head.test_row_parallel_head_sgd.toml`. The two
//! files name their checks differently and the capture has only the checks the example asserts,
//! so their `summary.csv` cannot be equal; what is compared is every tensor the capture checks
//! against the built-in's tensor of the same quantity, at the same step, in both fp32
//! computations, bit for bit, at several seeds under `cpu-fma`. No Python needed.

use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::exec::scenario::Workspace;
use seedsweep::exec::trace::SlotRole;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/python/examples/captures/test_row_parallel_head.test_row_parallel_head_sgd.toml"
);

/// (the capture's check, the built-in's check) naming the same tensor.
const SAME: [(&str, &str); 5] = [
    ("lm_head_out", "logits"),
    ("loss", "loss"),
    ("projection_weight_grad", "projection_grad"),
    ("lm_head_weight", "head_weight"),
    ("projection_weight", "projection_weight"),
];

/// The Vec of (check name, step label, computation, f32 bits) of `scenario`'s run at `seed`.
fn run(
    catalog: &Catalog,
    scenario: &str,
    param: Option<&str>,
    seed: u64,
) -> Vec<(String, String, &'static str, Vec<u32>)> {
    let groups = catalog
        .select(&Selection {
            scenarios: Some(vec![scenario.into()]),
            params: param.map(|p| vec![p.into()]),
            profiles: Some(vec!["cpu-fma".into()]),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(groups.len(), 1, "{scenario}: one group");
    let g = &groups[0];
    let s = &catalog.scenarios[g.scenario];
    let checks = s.checks(g.param);
    let mut ws = Workspace::default();
    seedsweep::engine::run::run_group(catalog, g, seed, &mut ws);
    let mut out = Vec::new();
    for (name, trace) in [
        ("reference", &ws.traces.reference),
        ("sharded", &ws.traces.sharded),
    ] {
        for sl in trace
            .slots
            .iter()
            .filter(|sl| matches!(sl.role, SlotRole::Value))
        {
            let bits = trace
                .data(sl)
                .iter()
                .map(|&v| (v as f32).to_bits())
                .collect();
            out.push((
                checks[sl.check].name.to_string(),
                sl.step.to_string(),
                name,
                bits,
            ));
        }
    }
    out
}

#[test]
fn captured_row_parallel_head_computes_the_builtins_tensors_bit_for_bit() {
    let catalog = Catalog::load(&[CAPTURE], None).unwrap();
    let mut compared = 0;
    for seed in [8173, 8199, 8208] {
        let captured = run(&catalog, "test_row_parallel_head_sgd", None, seed);
        let builtin = run(
            &catalog,
            "deepspeed-row-parallel",
            Some("35-input_shape2-embed_out-True"),
            seed,
        );
        // every tensor the capture checks, in both computations: 3 micro-step checks x 10
        // micro-steps + 2 step checks x 5 steps = 40, twice
        assert_eq!(captured.len(), 80, "seed {seed}: the capture's tensors");
        for (check, step, comp, bits) in &captured {
            let (_, theirs) = SAME
                .iter()
                .find(|(c, _)| c == check)
                .unwrap_or_else(|| panic!("unmapped check {check}"));
            let (_, _, _, want) = builtin
                .iter()
                .find(|(c, st, cp, _)| c == theirs && st == step && cp == comp)
                .unwrap_or_else(|| {
                    panic!("seed {seed}: the built-in has no {theirs} at {step} ({comp})")
                });
            assert_eq!(
                bits.len(),
                want.len(),
                "seed {seed}: {check} at {step} ({comp}): length"
            );
            let diff = bits.iter().zip(want).position(|(a, b)| a != b);
            assert!(
                diff.is_none(),
                "seed {seed}: {check} at {step} ({comp}) differs at flat index {diff:?}"
            );
            compared += bits.len();
        }
    }
    assert!(compared > 0);
}
