//! Bit-identity gate of the graph executor: T1 (`deepspeed-tied-row-parallel`) and T2
//! (`deepspeed-row-parallel`) expressed as resolved graphs give the same three traces
//! (f64, reference, sharded: every value's bits, every slot's check, step and role, the
//! condition and self-expected slots included) as the hand-written scenario modules, for
//! every parametrization, every built-in profile and a set of modifiers, every mutant each
//! supports, and 30 seeds (10 per mutant). The scenarios' metadata (ids, checks, check names, mutants in
//! order, policies, summary) must be equal too.
//!
//! The configs are the pre-language files, kept in `tests/data/legacy/` because the
//! hand-written modules read that format; the graphs are built from the same tables here.

use seedsweep::config::{parse_scenario_config, CommonConfig};
use seedsweep::graph::ir::*;
use seedsweep::graph::scenario::merged_check_names;
use seedsweep::graph::GraphScenario;
use seedsweep::mutant::Mutant;
use seedsweep::profile::ProfileRegistry;
use seedsweep::scenario::{build, Scenario, Workspace};

const T1: &str = include_str!("data/legacy/deepspeed_tied_row_parallel.toml");
const T2: &str = include_str!("data/legacy/deepspeed_row_parallel.toml");

fn int(t: &toml::Table, k: &str) -> usize {
    t[k].as_integer().unwrap() as usize
}

fn tensor(tensors: &mut Vec<TensorDecl>, name: &str, shape: Vec<usize>) -> TensorId {
    tensors.push(TensorDecl {
        name: name.into(),
        shape,
    });
    TensorId(tensors.len() - 1)
}

fn param(params: &mut Vec<ParamDecl>, name: &str, shape: Vec<usize>, init: TorchInit) -> ParamId {
    params.push(ParamDecl {
        name: name.into(),
        shape,
        init: ParamInit::Draw(init),
        tie: None,
    });
    ParamId(params.len() - 1)
}

fn check(name: &str, tensor: CheckTensor, shape: Vec<usize>, at: At) -> CheckDecl {
    CheckDecl {
        name: name.into(),
        tensor,
        shape,
        at,
        reduction: None,
    }
}

fn linear(
    name: &str,
    x: TensorId,
    w: ParamId,
    b: Option<ParamId>,
    out: TensorId,
    p: LinearParallel,
) -> Layer {
    Layer {
        name: name.into(),
        op: Op::Linear {
            x,
            weight: w,
            bias: b,
            out,
            parallel: p,
        },
    }
}

/// T1 as graphs, from the legacy config's tables.
fn t1_graphs(c: &CommonConfig) -> Vec<ResolvedGraph> {
    let m = &c.model;
    let (v, b, sq, tp, grain, steps) = (
        int(m, "vocab"),
        int(m, "batch"),
        int(m, "seq"),
        int(m, "tp"),
        int(m, "tp_grain"),
        int(m, "steps"),
    );
    let lr = m["lr"].as_float().unwrap();
    let seed = int(m, "input_seed") as u64;
    c.params
        .iter()
        .map(|p| {
            let h = int(p, "hidden");
            let pad = p.get("padding_idx").map(|x| x.as_integer().unwrap());
            let spec = p
                .get("embedding_spec")
                .is_some_and(|x| x.as_bool().unwrap());
            let zero = p.get("zero_stage").map_or(0, |x| x.as_integer().unwrap());
            let mut params = Vec::new();
            let emb = param(
                &mut params,
                "embedding.weight",
                vec![v, h],
                TorchInit::Normal {
                    mean: 0.0,
                    std: 1.0,
                    zero_row: pad.map(|x| x as usize),
                },
            );
            let pw = param(
                &mut params,
                "projection.weight",
                vec![h, h],
                TorchInit::KaimingUniform { fan_in: h },
            );
            let pb = param(
                &mut params,
                "projection.bias",
                vec![h],
                TorchInit::BiasUniform { fan_in: h },
            );
            let hw = param(
                &mut params,
                "head.weight",
                vec![v, h],
                TorchInit::KaimingUniform { fan_in: h },
            );
            params[hw.0].tie = Some(emb);
            let mut tensors = Vec::new();
            let x = tensor(&mut tensors, "embedding.out", vec![b, sq, h]);
            let pre = tensor(&mut tensors, "projection.out", vec![b, sq, h]);
            let hh = tensor(&mut tensors, "tanh.out", vec![b, sq, h]);
            let logits = tensor(&mut tensors, "head.out", vec![b, sq, v]);
            let layers = vec![
                Layer {
                    name: "embedding".into(),
                    op: Op::Embedding {
                        ids: InputId(0),
                        table: emb,
                        out: x,
                        padding_idx: pad,
                        parallel: if spec {
                            EmbeddingParallel::ColumnShardedLookup
                        } else {
                            EmbeddingParallel::None
                        },
                    },
                },
                linear("projection", x, pw, Some(pb), pre, LinearParallel::None),
                Layer {
                    name: "tanh".into(),
                    op: Op::Activation {
                        kind: Activation::Tanh,
                        x: pre,
                        out: hh,
                    },
                },
                linear("head", hh, hw, None, logits, LinearParallel::Row),
            ];
            let mut g = ResolvedGraph {
                id: p["id"].as_str().unwrap().into(),
                dims: vec![("hidden".into(), h)],
                rng: c.rng,
                parallel: Parallel {
                    tp,
                    dp: 1,
                    shard_rule: ShardRule::DeepSpeed { grain },
                },
                params,
                inputs: Inputs {
                    seed_base: seed,
                    draws: vec![
                        InputDraw {
                            name: "input_ids".into(),
                            shape: vec![b, sq],
                            kind: DrawKind::Randint { high: v as u64 },
                            tensor: None,
                        },
                        InputDraw {
                            name: "labels".into(),
                            shape: vec![b, sq],
                            kind: DrawKind::Randint { high: v as u64 },
                            tensor: None,
                        },
                    ],
                    fixups: pad
                        .map(|p| Fixup::Set {
                            input: InputId(0),
                            index: 0,
                            value: p,
                        })
                        .into_iter()
                        .collect(),
                },
                tensors,
                layers,
                loss: Loss {
                    kind: LossKind::CrossEntropy { labels: InputId(1) },
                    input: logits,
                    divide_by_micro_steps: false,
                },
                train: Train {
                    steps,
                    micro_steps: 1,
                    optimizer: Optimizer::sgd(lr),
                    grad_reduce: GradReduce::AllReduce,
                    outer: None,
                },
                checks: vec![],
            };
            let mut checks = vec![check(
                "logits",
                CheckTensor::Activation(logits),
                vec![b, sq, v],
                At::Step,
            )];
            checks[0].reduction = g.reduction_of(logits);
            if zero == 0 {
                checks.push(check(
                    "tied_grad",
                    CheckTensor::ParamGrad(emb),
                    vec![v, h],
                    At::Step,
                ));
            }
            checks.push(check(
                "head_weight",
                CheckTensor::Param(hw),
                vec![v, h],
                At::Step,
            ));
            checks.push(check(
                "projection_weight",
                CheckTensor::Param(pw),
                vec![h, h],
                At::Step,
            ));
            g.checks = checks;
            g
        })
        .collect()
}

/// T2 as graphs, from the legacy config's tables.
fn t2_graphs(c: &CommonConfig) -> Vec<ResolvedGraph> {
    let m = &c.model;
    let (v, tp, grain, steps, accum) = (
        int(m, "vocab"),
        int(m, "tp"),
        int(m, "tp_grain"),
        int(m, "steps"),
        int(m, "accum"),
    );
    let lr = m["lr"].as_float().unwrap();
    let seed = int(m, "input_seed") as u64;
    c.params
        .iter()
        .map(|p| {
            let h = int(p, "hidden");
            let lead: Vec<usize> = p["input_shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_integer().unwrap() as usize)
                .collect();
            let with = |last: usize| {
                let mut s = lead.clone();
                s.push(last);
                s
            };
            let bias = p["bias"].as_bool().unwrap();
            let mut params = Vec::new();
            let pw = param(
                &mut params,
                "projection.weight",
                vec![h, h],
                TorchInit::KaimingUniform { fan_in: h },
            );
            let pb = param(
                &mut params,
                "projection.bias",
                vec![h],
                TorchInit::BiasUniform { fan_in: h },
            );
            let hw = param(
                &mut params,
                "head.weight",
                vec![v, h],
                TorchInit::KaimingUniform { fan_in: h },
            );
            let hb = bias.then(|| {
                param(
                    &mut params,
                    "head.bias",
                    vec![v],
                    TorchInit::BiasUniform { fan_in: h },
                )
            });
            let mut tensors = Vec::new();
            let x = tensor(&mut tensors, "x", with(h));
            let pre = tensor(&mut tensors, "projection.out", with(h));
            let hh = tensor(&mut tensors, "tanh.out", with(h));
            let logits = tensor(&mut tensors, "head.out", with(v));
            let layers = vec![
                linear("projection", x, pw, Some(pb), pre, LinearParallel::None),
                Layer {
                    name: "tanh".into(),
                    op: Op::Activation {
                        kind: Activation::Tanh,
                        x: pre,
                        out: hh,
                    },
                },
                linear("head", hh, hw, hb, logits, LinearParallel::Row),
            ];
            let mut g = ResolvedGraph {
                id: p["id"].as_str().unwrap().into(),
                dims: vec![("hidden".into(), h)],
                rng: c.rng,
                parallel: Parallel {
                    tp,
                    dp: 1,
                    shard_rule: ShardRule::DeepSpeed { grain },
                },
                params,
                inputs: Inputs {
                    seed_base: seed,
                    draws: vec![
                        InputDraw {
                            name: "x".into(),
                            shape: with(h),
                            kind: DrawKind::Randn,
                            tensor: Some(x),
                        },
                        InputDraw {
                            name: "labels".into(),
                            shape: lead.clone(),
                            kind: DrawKind::Randint { high: v as u64 },
                            tensor: None,
                        },
                    ],
                    fixups: vec![],
                },
                tensors,
                layers,
                loss: Loss {
                    kind: LossKind::CrossEntropy { labels: InputId(1) },
                    input: logits,
                    divide_by_micro_steps: true,
                },
                train: Train {
                    steps,
                    micro_steps: accum,
                    optimizer: Optimizer::sgd(lr),
                    grad_reduce: GradReduce::AllReduce,
                    outer: None,
                },
                checks: vec![],
            };
            let mu = At::MicroStep;
            let mut checks = vec![check(
                "logits",
                CheckTensor::Activation(logits),
                with(v),
                mu,
            )];
            checks[0].reduction = g.reduction_of(logits);
            checks.push(check("loss", CheckTensor::Loss, vec![], mu));
            checks.push(check("input_grad", CheckTensor::Grad(x), with(h), mu));
            checks.push(check(
                "projection_grad",
                CheckTensor::ParamGrad(pw),
                vec![h, h],
                mu,
            ));
            checks.push(check(
                "head_grad",
                CheckTensor::ParamGrad(hw),
                vec![v, h],
                mu,
            ));
            if let Some(hb) = hb {
                checks.push(check("bias_grad", CheckTensor::ParamGrad(hb), vec![v], mu));
            }
            checks.push(check(
                "sgd_update",
                CheckTensor::SgdUpdate(pw),
                vec![h, h],
                mu,
            ));
            checks.push(check(
                "projection_weight",
                CheckTensor::Param(pw),
                vec![h, h],
                At::Step,
            ));
            checks.push(check(
                "head_weight",
                CheckTensor::Param(hw),
                vec![v, h],
                At::Step,
            ));
            if let Some(hb) = hb {
                checks.push(check("bias", CheckTensor::Param(hb), vec![v], At::Step));
            }
            g.checks = checks;
            g
        })
        .collect()
}

fn pair(text: &str, file: &str, rng: Option<&str>) -> (Box<dyn Scenario>, GraphScenario) {
    let text = match rng {
        Some(r) => text.replace("rng = \"torch\"", &format!("rng = \"{r}\"")),
        None => text.to_string(),
    };
    let common = parse_scenario_config(file, &text).unwrap();
    let old = build(common.clone()).unwrap();
    let graphs = if common.kind == "deepspeed-tied-row-parallel" {
        t1_graphs(&common)
    } else {
        t2_graphs(&common)
    };
    let names = merged_check_names(&graphs);
    let summary = old.summary();
    let new = GraphScenario::new(common, graphs, names, summary).unwrap();
    (old, new)
}

fn same_traces(
    a: &seedsweep::scenario::Traces,
    b: &seedsweep::scenario::Traces,
) -> Result<(), String> {
    for (name, x, y) in [
        ("f64", &a.f64, &b.f64),
        ("reference", &a.reference, &b.reference),
        ("sharded", &a.sharded, &b.sharded),
    ] {
        if x.slots != y.slots {
            return Err(format!(
                "{name}: slots differ: {:?} vs {:?}",
                x.slots.len(),
                y.slots.len()
            ));
        }
        if let Some(i) = (0..x.values.len().max(y.values.len()))
            .find(|&i| x.values.get(i).map(|v| v.to_bits()) != y.values.get(i).map(|v| v.to_bits()))
        {
            return Err(format!(
                "{name}: value {i} differs: {:?} vs {:?}",
                x.values.get(i),
                y.values.get(i)
            ));
        }
    }
    Ok(())
}

fn profiles() -> Vec<seedsweep::profile::Profile> {
    let reg = ProfileRegistry::builtin().unwrap();
    let mut out: Vec<_> = reg.profiles().cloned().collect();
    for spec in [
        "cpu-fma+mkl-threads-2",
        "cpu-fma+tanh-cr",
        "cpu-fma+allreduce-tree",
        "cpu-fma+allreduce-bf16",
        "cpu-fma+torch-avx512",
        "f32+allreduce-rank-order",
    ] {
        out.push(reg.resolve(spec, "--profile").unwrap());
    }
    out
}

fn gate(text: &str, file: &str, rng: Option<&str>, seeds: u64) {
    let (old, new) = pair(text, file, rng);
    assert_eq!(old.param_ids(), new.param_ids());
    assert_eq!(old.all_check_names(), new.all_check_names());
    assert_eq!(
        old.mutants(),
        new.mutants(),
        "derived mutants, in today's order"
    );
    assert_eq!(old.policies(), new.policies());
    assert_eq!(old.summary(), new.summary());
    let mut mutants: Vec<Option<Mutant>> = vec![None];
    mutants.extend(old.mutants().iter().copied().map(Some));
    let (mut wa, mut wb) = (Workspace::default(), Workspace::default());
    let mut runs = 0;
    for param in 0..old.param_ids().len() {
        assert_eq!(
            old.checks(param),
            new.checks(param),
            "checks of param {param}"
        );
        for profile in profiles() {
            for &mutant in &mutants {
                wa.mutant = mutant;
                wb.mutant = mutant;
                let first = old.common().first_seed;
                // Every seed for the clean runs; a third of them for each mutant.
                let n = if mutant.is_none() {
                    seeds
                } else {
                    seeds.div_ceil(3)
                };
                for seed in first..first + n {
                    old.run(param, seed, &profile, &mut wa);
                    new.run(param, seed, &profile, &mut wb);
                    if let Err(e) = same_traces(&wa.traces, &wb.traces) {
                        panic!(
                            "{file} param {} profile {} mutant {:?} seed {seed}: {e}",
                            old.param_ids()[param],
                            profile.name,
                            mutant.map(|m| m.name())
                        );
                    }
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 0);
}

#[test]
fn t1_graph_is_bit_identical_to_the_hand_written_module() {
    gate(T1, "t1", None, 30);
}

#[test]
fn t2_graph_is_bit_identical_to_the_hand_written_module() {
    gate(T2, "t2", None, 30);
}

#[test]
fn chacha_init_and_inputs_are_bit_identical_too() {
    gate(T1, "t1-chacha", Some("chacha"), 6);
    gate(T2, "t2-chacha", Some("chacha"), 6);
}

#[test]
fn the_comparison_detects_a_different_computation() {
    // Seeds 8173 and 8174 draw different weights: the gate's comparison must report it.
    let (old, new) = pair(T1, "t1", None);
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "--profile")
        .unwrap();
    let (mut wa, mut wb) = (Workspace::default(), Workspace::default());
    old.run(1, 8173, &profile, &mut wa);
    new.run(1, 8174, &profile, &mut wb);
    assert!(same_traces(&wa.traces, &wb.traces).is_err());
    new.run(1, 8173, &profile, &mut wb);
    assert!(same_traces(&wa.traces, &wb.traces).is_ok());
}

#[test]
fn merged_check_names_keep_each_graphs_order() {
    let common = parse_scenario_config("t2", T2).unwrap();
    let graphs = t2_graphs(&common);
    assert_eq!(
        merged_check_names(&graphs),
        [
            "logits",
            "loss",
            "input_grad",
            "projection_grad",
            "head_grad",
            "bias_grad",
            "sgd_update",
            "projection_weight",
            "head_weight",
            "bias"
        ]
    );
}
