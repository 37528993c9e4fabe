//! End to end against real PyTorch: the T1 model of seed 8199, `35-3-False-0` (and the T2
//! model of seed 8199, `35-input_shape1-lm_head-True`), recorded by
//! torch 2.15 on the CPU (`scripts/crosscheck_torch.py --emit-fixture`), once with torch's
//! AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2`, profile `cpu-fma`) and once with its AVX512
//! kernels (profile `cpu-fma-avx512`): the reference logits, the simulated row-parallel
//! logits of all three steps and the final tied weight must match bit for bit. (The
//! simulated row-parallel computation was itself checked bit for bit against DeepSpeed
//! 0.19.8 AutoTP training on 2 CPU ranks with gloo.) This covers torch's generator,
//! the MKL FMA-chain matmuls, tanh, cross-entropy forward and backward, the embedding
//! scatter-add, the tied-gradient sum and SGD together. Seed 8208 of `35-3-False-0` (AVX2)
//! pins MKL's tanh: it matches with `cpu-fma` and not with `cpu-fma+tanh-cr`.

use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::exec::scenario::Workspace;

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

/// Seed 8208 of `35-3-False-0` is one where MKL's tanh matters: torch's `h` holds elements
/// where MKL's `vmsTanh` is 1 ulp from the correctly rounded tanh (e.g. step 0, h[0,2,28]:
/// -0.0705176443 vs -0.0705176517), and they reach the logits. `cpu-fma` (MKL tanh) must
/// match every logit and the final weight, ...
#[test]
fn t1_seed_8208_matches_torch_with_mkl_tanh() {
    check(
        "torch_t1_seed8208_35-3-False-0_avx2.json",
        "cpu-fma",
        "35-3-False-0",
    );
}

/// ... and the correctly rounded tanh must not (so the fixture does tell the two apart).
#[test]
fn t1_seed_8208_differs_from_torch_with_correctly_rounded_tanh() {
    let (compared, mismatched, first) = compare(
        "torch_t1_seed8208_35-3-False-0_avx2.json",
        "cpu-fma+tanh-cr",
        "35-3-False-0",
    );
    eprintln!("cpu-fma+tanh-cr: {mismatched} of {compared} differ; first: {first}");
    assert!(mismatched > 0, "all {compared} match with tanh-cr");
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

/// T2 on DeepSpeed itself: DeepSpeed 0.19.8's `LinearAllreduceWithReplicatedInput` on two gloo
/// CPU ranks (`scripts/crosscheck_deepspeed_gloo.py --emit-fixture`, one thread per rank,
/// `ATEN_CPU_CAPABILITY=avx2`): every parametrization's logits and loss of every micro-step and
/// the final head weight (the two ranks' shards side by side), and rank 0's unsharded reference.
#[test]
fn t2_seed_8199_matches_deepspeed_on_gloo_ranks_bit_for_bit() {
    for param in [
        "32-input_shape0-lm_head-False",
        "35-input_shape1-lm_head-True",
        "35-input_shape2-embed_out-True",
    ] {
        check(
            &format!("deepspeed_gloo_t2_seed8199_{param}_avx2.json"),
            "cpu-fma",
            param,
        );
    }
}

/// Every element of the fixture must match bit for bit.
fn check(file: &str, profile: &str, param: &str) {
    let (compared, mismatched, first) = compare(file, profile, param);
    assert_eq!(
        mismatched, 0,
        "{mismatched} of {compared} differ; first: {first}"
    );
}

/// Runs the fixture's seed of `param` in `profile` and compares every tensor of the fixture
/// with ours: (elements compared, elements that differ, the first difference).
fn compare(file: &str, profile: &str, param: &str) -> (usize, usize, String) {
    let path = format!("{DATA}{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {path}: {e}; regenerate it with scripts/crosscheck_torch.py or scripts/crosscheck_deepspeed_gloo.py --emit-fixture")
    });
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let seed = json["seed"].as_u64().expect("seed in fixture");
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    let groups = catalog
        .select(&Selection {
            params: Some(vec![param.into()]),
            profiles: Some(vec![profile.into()]),
            ..Default::default()
        })
        .unwrap();
    let g = &groups[0];
    let s = &catalog.scenarios[g.scenario];
    let mut ws = Workspace::default();
    seedsweep::engine::run::run_group(&catalog, g, seed, &mut ws);
    let checks = s.checks(g.param);
    let (mut compared, mut mismatched, mut first) = (0, 0, String::new());
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
                if (v as f32).to_bits() != w {
                    if mismatched == 0 {
                        first = format!(
                            "{name} {key}[{i}]: ours {v:e}, torch {:e}",
                            f32::from_bits(w)
                        );
                    }
                    mismatched += 1;
                }
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
    (compared, mismatched, first)
}
