//! T1 and T2 as resolved graphs, built by hand from the legacy config tables (the tables the
//! hand-written modules read). Used by the bit-identity test.

use seedsweep::scenario::config::CommonConfig;
use seedsweep::scenario::ir::*;

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
            layout: WeightLayout::OutIn,
        },
    }
}

/// T1 as graphs, from the legacy config's tables.
pub fn t1_graphs(c: &CommonConfig) -> Vec<ResolvedGraph> {
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
                    replicate: 1,
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
                            values: None,
                        },
                        InputDraw {
                            name: "labels".into(),
                            shape: vec![b, sq],
                            kind: DrawKind::Randint { high: v as u64 },
                            tensor: None,
                            values: None,
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
pub fn t2_graphs(c: &CommonConfig) -> Vec<ResolvedGraph> {
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
                    replicate: 1,
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
                            values: None,
                        },
                        InputDraw {
                            name: "labels".into(),
                            shape: lead.clone(),
                            kind: DrawKind::Randint { high: v as u64 },
                            tensor: None,
                            values: None,
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
