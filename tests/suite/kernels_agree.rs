//! End to end: every recorded tensor of a seed-run is bit-identical whether the fp32 matmuls
//! run on the vectorized kernels or on the straightforward scalar dot products
//! (`fp::dot::dot_blocked`, one per output element). The two share no kernel code, so this
//! checks the fast kernels inside the real models, in every profile without input passes.

use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::exec::scenario::Workspace;
use seedsweep::ops::backend::Kernels;

#[test]
fn fast_and_scalar_reference_kernels_give_identical_traces() {
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    let sel = Selection {
        profiles: Some(
            [
                "cpu-fma",
                "cpu-nofma",
                "pairwise",
                "splitk-4",
                "cpu-fma+allreduce-bf16",
            ]
            .map(String::from)
            .to_vec(),
        ),
        ..Default::default()
    };
    let groups = catalog.select(&sel).unwrap();
    // T1 4 params, T2 3, maxtext-diloco 1, diloco 1, deepspeed-tp-row-parallel 4,
    // deepspeed-uneven-tp3-row-parallel 2, deepspeed-tp-column-parallel 4, megatron-tp-mlp 2,
    // fsdp-zero2-grad-acc 1, megatron-vocab-parallel-ce 2, megatron-vocab-parallel-ce-test 1,
    // torchtitan-fsdp-vs-hsdp 1, maxtext-moe-dense-test 1, maxtext-moe-dense-vs-loop 1,
    // pytorch-ring-attention-sdpa-test 9; each in the 5 profiles.
    assert_eq!(
        groups.len(),
        (4 + 3 + 1 + 1 + 4 + 2 + 4 + 2 + 1 + 2 + 1 + 1 + 1 + 1 + 9) * 5
    );
    let mut fast = Workspace::with_kernels(Kernels::Fast);
    let mut scalar = Workspace::with_kernels(Kernels::ScalarReference);
    for g in &groups {
        let s = &catalog.scenarios[g.scenario];
        for seed in [8173u64, 8199] {
            s.run(g.param, seed, &g.profile, &mut fast);
            s.run(g.param, seed, &g.profile, &mut scalar);
            for (a, b, name) in [
                (
                    &fast.traces.reference,
                    &scalar.traces.reference,
                    "reference",
                ),
                (&fast.traces.sharded, &scalar.traces.sharded, "sharded"),
                (&fast.traces.f64, &scalar.traces.f64, "f64"),
            ] {
                assert_eq!(a.slots, b.slots);
                let same = a
                    .values
                    .iter()
                    .zip(&b.values)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "{} {} {} seed {seed}: {name} traces differ",
                    s.common().name,
                    s.param_ids()[g.param],
                    g.profile.name
                );
            }
        }
    }
}

#[test]
fn profiles_that_change_the_order_change_the_bits() {
    // Guards the test above against comparing two copies of the same thing: different
    // profiles must give different sharded logits somewhere.
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    let sel = Selection {
        params: Some(vec!["35-3-False-0".into()]),
        profiles: Some(vec!["cpu-fma".into(), "cpu-nofma".into()]),
        ..Default::default()
    };
    let groups = catalog.select(&sel).unwrap();
    let mut ws = Workspace::default();
    let s = &catalog.scenarios[groups[0].scenario];
    s.run(groups[0].param, 8173, &groups[0].profile, &mut ws);
    let fma = ws.traces.sharded.values.clone();
    s.run(groups[1].param, 8173, &groups[1].profile, &mut ws);
    assert_ne!(fma, ws.traces.sharded.values);
}
