//! End to end against real PyTorch: the T1 model of seed 8199, `35-3-False-0` (and the T2
//! model of seed 8199, `35-input_shape1-lm_head-True`), recorded by
//! torch 2.15 on the CPU (`scripts/crosscheck_torch.py --emit-fixture`), once with torch's
//! AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2`, profile `cpu-fma`) and once with its AVX512
//! kernels (profile `cpu-fma-avx512`): the reference logits, the simulated row-parallel
//! logits of all three steps and the final tied weight must match bit for bit. (The
//! simulated row-parallel computation was itself checked bit for bit against DeepSpeed
//! 0.19.8 AutoTP training on 2 CPU ranks with gloo.) This covers torch's generator,
//! the MKL FMA-chain matmuls, tanh, cross-entropy forward and backward, the embedding
//! scatter-add, the tied-gradient sum and SGD together.

use seedsweep::catalog::{Catalog, Selection};
use seedsweep::scenario::Workspace;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");

#[test]
fn t1_seed_8199_matches_torch_avx2_kernels_bit_for_bit() {
    check(
        "torch_t1_seed8199_35-3-False-0_avx2.json",
        "cpu-fma",
        "35-3-False-0",
    );
}

#[test]
fn t1_seed_8199_matches_torch_avx512_kernels_bit_for_bit() {
    check(
        "torch_t1_seed8199_35-3-False-0.json",
        "cpu-fma-avx512",
        "35-3-False-0",
    );
}

/// T2, the untied head: 5 steps x 2 micro-steps of `(loss / 2).backward()` with the bias
/// added after the all-reduce; logits and loss of every micro-step and the final head weight.
#[test]
fn t2_seed_8199_matches_torch_avx2_kernels_bit_for_bit() {
    check(
        "torch_t2_seed8199_35-input_shape1-lm_head-True_avx2.json",
        "cpu-fma",
        "35-input_shape1-lm_head-True",
    );
}

fn check(file: &str, profile: &str, param: &str) {
    let path = format!("{DATA}{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {path}: {e}; regenerate it with scripts/crosscheck_torch.py --emit-fixture")
    });
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    let groups = catalog
        .plan(&Selection {
            params: Some(vec![param.into()]),
            profiles: Some(vec![profile.into()]),
            ..Default::default()
        })
        .unwrap();
    let g = &groups[0];
    let s = &catalog.scenarios[g.scenario];
    let mut ws = Workspace::default();
    s.run(g.param, 8199, &g.profile, &mut ws);
    let checks = s.checks(g.param);
    let mut compared = 0;
    for (name, trace) in [
        ("reference", &ws.traces.reference),
        ("sharded", &ws.traces.sharded),
    ] {
        let tensors = json["computations"][name]
            .as_object()
            .expect("computations in fixture");
        for (key, bits) in tensors {
            let (check, step) = key.split_once('@').unwrap();
            let slot = trace
                .slots
                .iter()
                .find(|sl| checks[sl.check].name == check && sl.step.to_string() == step)
                .unwrap_or_else(|| panic!("{name}: no slot {key}"));
            let ours = trace.data(slot);
            let want: Vec<u32> = bits
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(ours.len(), want.len(), "{name} {key}: length");
            for (i, (&v, &w)) in ours.iter().zip(&want).enumerate() {
                assert_eq!(
                    (v as f32).to_bits(),
                    w,
                    "{name} {key}[{i}]: ours {v:e}, torch {:e}",
                    f32::from_bits(w)
                );
            }
            compared += ours.len();
        }
    }
    let expected: usize = ["reference", "sharded"]
        .iter()
        .flat_map(|c| json["computations"][*c].as_object().unwrap().values())
        .map(|v| v.as_array().unwrap().len())
        .sum();
    assert!(
        compared > 0 && compared == expected,
        "compared {compared} of {expected}"
    );
}
