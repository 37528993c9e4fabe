//! Megatron's `VocabParallelEmbedding` in the executor: a vocab-parallel embedding feeding a
//! column-parallel head and the vocab-parallel cross-entropy, at TP 2 and 4. Every element of
//! the lookup is one table value plus zeros (exact in any all-reduce order), so at the first
//! step (same parameters) the sharded embedding output must equal the reference's bit for bit.
//! (The table gradient is the scatter-add of the head's input gradient, whose column-parallel
//! all-reduce rounds differently from the unsharded matmul, so it is not compared bitwise.)

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::scenario::profile::ProfileRegistry;

const FILE: &str = r#"
name = "vocab-parallel-embedding"
rng = "torch"
dims = { tokens = 8, hidden = 8, vocab = 16 }
parallel = { tp = 2, shard_rule = "megatron" }
inputs = [
  { name = "ids", draw = "randint", high = "vocab", shape = ["tokens"] },
  { name = "labels", draw = "randint", high = "vocab", shape = ["tokens"] },
]
layers = [
  { name = "emb", op = "embedding", input = "ids", num = "vocab", dim = "hidden", parallel = "vocab" },
  { name = "head", op = "linear", out = "vocab", bias = false, parallel = "column" },
]
loss = { op = "cross-entropy", labels = "labels", parallel = "vocab" }
train = { steps = 2, optimizer = "sgd", lr = 0.1 }
checks = [
  { name = "emb_out", tensor = "emb.out" },
  { name = "loss", tensor = "loss" },
  { name = "emb_grad", tensor = "emb.weight.grad" },
]
params = [
  { id = "tp2", parallel.tp = 2 },
  { id = "tp4", parallel.tp = 4 },
]
"#;

#[test]
fn vocab_parallel_embedding_equals_the_plain_lookup_in_the_executor() {
    let sf = seedsweep::scenario::load("inline.toml", FILE).unwrap_or_else(|e| panic!("{e}"));
    let s = seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{e}"));
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "test")
        .unwrap();
    let mut ws = Workspace::default();
    let mut compared = 0;
    for param in 0..2 {
        for seed in [8173u64, 8174] {
            s.run(param, seed, &profile, &mut ws);
            let (r, sh) = (&ws.traces.reference, &ws.traces.sharded);
            assert_eq!(r.slots, sh.slots);
            for slot in &r.slots {
                let name = s.checks(param)[slot.check].name;
                if name != "emb_out" || slot.step.to_string() != "0" {
                    continue;
                }
                let a: Vec<u64> = r.data(slot).iter().map(|v| v.to_bits()).collect();
                let b: Vec<u64> = sh.data(slot).iter().map(|v| v.to_bits()).collect();
                assert_eq!(a, b, "param {param} seed {seed} {name} at {}", slot.step);
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 4);
}
