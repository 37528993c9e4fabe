//! Lowering: a resolved parametrization ([`super::resolve::Graph`], already validated) into
//! the graph IR the executor runs ([`crate::scenario::ir::ResolvedGraph`]).
//!
//! Names become indices: parameters in the test's construction order (`[init] order`, each
//! layer's weight before its bias), tensors as inputs read by a layer and then every layer's
//! output in forward order, inputs in file order.

use crate::scenario::config::RngKind;
use crate::scenario::ir;
use crate::scenario::ir::Reduction;
use crate::sys::error::InputError;

use super::node::{Ctx, DimValue};
use super::resolve::{CheckWhat, Graph};
use super::spec::{self, At, LayerParallel, LossOp, Op, Scheme, ShardRule};

fn param_id(params: &[ir::ParamDecl], name: &str) -> ir::ParamId {
    ir::ParamId(
        params
            .iter()
            .position(|p| p.name == name)
            .expect("resolve declared every parameter a layer or check names"),
    )
}

fn optimizer(o: &spec::Optimizer) -> ir::Optimizer {
    match *o {
        spec::Optimizer::Sgd { lr, weight_decay } => ir::Optimizer::Sgd {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay,
        },
        spec::Optimizer::Momentum {
            lr,
            momentum,
            dampening,
            nesterov,
            weight_decay,
        } => ir::Optimizer::Sgd {
            lr,
            momentum,
            dampening,
            nesterov,
            weight_decay,
        },
        spec::Optimizer::Adam {
            lr,
            betas,
            eps,
            weight_decay,
            decoupled,
        } => ir::Optimizer::Adam {
            lr,
            beta1: betas.0,
            beta2: betas.1,
            eps,
            weight_decay,
            decoupled,
        },
    }
}

/// Lowers one resolved parametrization; `rng` is the file's generator.
pub fn lower(ctx: &Ctx, g: &Graph, rng: RngKind) -> Result<ir::ResolvedGraph, InputError> {
    let s = &g.spec;
    let mut dims = Vec::new();
    for (k, v) in &s.dims {
        match v {
            DimValue::Int(n) => dims.push((k.clone(), *n)),
            DimValue::List(l) => {
                for (i, n) in l.iter().enumerate() {
                    dims.push((format!("{k}[{i}]"), *n));
                }
            }
        }
    }
    let parallel = ir::Parallel {
        tp: s.parallel.tp,
        dp: s.parallel.dp,
        replicate: s.parallel.dp_replicate,
        shard_rule: match s.parallel.rule {
            ShardRule::DeepSpeed => ir::ShardRule::DeepSpeed {
                grain: s.parallel.grain,
            },
            ShardRule::Megatron => ir::ShardRule::Megatron,
        },
    };
    // Parameters, in construction order.
    let mut params: Vec<ir::ParamDecl> = Vec::new();
    let mut ties: Vec<(usize, String)> = Vec::new();
    for (oi, lname) in s.init.order.iter().enumerate() {
        let layer = s
            .layers
            .iter()
            .find(|l| &l.name == lname)
            .expect("parse checked that init.order names layers");
        let fan_in = g
            .tensor(&format!("{lname}.weight"))
            .map(|w| *w.shape.last().unwrap_or(&1))
            .unwrap_or(1);
        let flax_kernel = ir::ParamInit::Draw(ir::TorchInit::Normal {
            mean: 0.0,
            std: 1.0 / (fan_in as f64).sqrt(),
            zero_row: None,
        });
        let first = params.len();
        let mut push = |name: String, init: ir::ParamInit| {
            let shape = g
                .tensor(&name)
                .map(|t| t.shape.clone())
                .expect("resolve declared the layer's parameters");
            params.push(ir::ParamDecl {
                name,
                shape,
                init,
                tie: None,
            });
        };
        match &layer.op {
            Op::Embedding { padding_idx, .. } => {
                if s.init.scheme == Scheme::Flax {
                    return Err(ctx.err(
                        &format!("init.order[{oi}]"),
                        format!("layer `{lname}` is an embedding, and the flax scheme covers linear layers only; allowed: scheme = \"torch\""),
                    ));
                }
                push(
                    format!("{lname}.weight"),
                    ir::ParamInit::Draw(ir::TorchInit::Normal {
                        mean: 0.0,
                        std: 1.0,
                        zero_row: *padding_idx,
                    }),
                );
            }
            Op::Linear { bias, tie, .. } => {
                push(
                    format!("{lname}.weight"),
                    match s.init.scheme {
                        Scheme::Torch => {
                            ir::ParamInit::Draw(ir::TorchInit::KaimingUniform { fan_in })
                        }
                        Scheme::Flax => flax_kernel,
                    },
                );
                if let Some(t) = tie {
                    ties.push((first, format!("{t}.weight")));
                }
                if *bias {
                    push(
                        format!("{lname}.bias"),
                        match s.init.scheme {
                            Scheme::Torch => {
                                ir::ParamInit::Draw(ir::TorchInit::BiasUniform { fan_in })
                            }
                            Scheme::Flax => ir::ParamInit::Zeros,
                        },
                    );
                }
            }
            Op::LayerNorm { affine: true, .. } => {
                push(format!("{lname}.weight"), ir::ParamInit::Ones);
                push(format!("{lname}.bias"), ir::ParamInit::Zeros);
            }
            Op::RmsNorm { affine: true, .. } => {
                push(format!("{lname}.weight"), ir::ParamInit::Ones);
            }
            Op::Moe {
                experts,
                ffn,
                gated,
                ..
            } => {
                if s.init.scheme == Scheme::Flax {
                    return Err(ctx.err(
                        &format!("init.order[{oi}]"),
                        format!("layer `{lname}` is a moe layer, and the flax scheme covers linear layers only; allowed: scheme = \"torch\""),
                    ));
                }
                // nn.Linear(hidden, experts, bias=False), then every expert's nn.Linear
                // modules in construction order: w1 (hidden -> ffn), w2 (ffn -> hidden),
                // w3 (hidden -> ffn), each kaiming_uniform_(a=sqrt(5)) of its fan-in.
                let h = g
                    .tensor(&format!("{lname}.router.weight"))
                    .map(|t| t.shape[1])
                    .unwrap_or(1);
                let ku = |fan_in| ir::ParamInit::Draw(ir::TorchInit::KaimingUniform { fan_in });
                push(format!("{lname}.router.weight"), ku(h));
                for e in 0..*experts {
                    push(format!("{lname}.experts.{e}.w1.weight"), ku(h));
                    push(format!("{lname}.experts.{e}.w2.weight"), ku(*ffn));
                    if *gated {
                        push(format!("{lname}.experts.{e}.w3.weight"), ku(h));
                    }
                }
            }
            _ => {}
        }
    }
    for (pi, target) in ties {
        let t = param_id(&params, &target);
        if t.0 >= pi {
            let li = s
                .layers
                .iter()
                .position(|l| target.starts_with(&format!("{}.", l.name)))
                .unwrap_or(0);
            return Err(ctx.err(
                "init.order",
                format!(
                    "`{}` is tied to `{target}`, which this order constructs later; allowed: construct layers[{li}] before the layer tied to it",
                    params[pi].name
                ),
            ));
        }
        params[pi].tie = Some(t);
    }
    // Tensors: inputs a layer reads, then every layer's output.
    let mut tensors: Vec<ir::TensorDecl> = Vec::new();
    let read = |name: &str| {
        s.layers.iter().any(|l| {
            l.input == name
                || matches!(&l.op, Op::Binary { other, .. } if other == name)
                || matches!(&l.op, Op::Sdpa { k, v, .. } if k == name || v == name)
        }) || s.loss.input == name
    };
    for inp in &s.inputs {
        if read(&inp.name) && !inp.draw.is_int() {
            tensors.push(ir::TensorDecl {
                name: inp.name.clone(),
                shape: inp.shape.clone(),
            });
        }
    }
    for l in &s.layers {
        let name = format!("{}.out", l.name);
        let shape = g
            .tensor(&name)
            .expect("resolve declared every output")
            .shape
            .clone();
        tensors.push(ir::TensorDecl { name, shape });
    }
    let tid = |name: &str| -> ir::TensorId {
        let full = if s.inputs.iter().any(|i| i.name == name) {
            name.to_string()
        } else {
            format!("{}.out", name.strip_suffix(".out").unwrap_or(name))
        };
        ir::TensorId(
            tensors
                .iter()
                .position(|t| t.name == full)
                .expect("resolve checked every tensor a layer reads"),
        )
    };
    let iid = |name: &str| -> ir::InputId {
        ir::InputId(
            s.inputs
                .iter()
                .position(|i| i.name == name)
                .expect("resolve checked every input the graph reads"),
        )
    };
    // Inputs.
    let mut draws = Vec::new();
    let mut fixups = Vec::new();
    for (ii, inp) in s.inputs.iter().enumerate() {
        let (kind, values) = match &inp.draw {
            spec::Draw::Randn => (ir::DrawKind::Randn, None),
            spec::Draw::Rand { seeded } => (ir::DrawKind::Rand { seeded: *seeded }, None),
            spec::Draw::Randint { high } => (ir::DrawKind::Randint { high: *high as u64 }, None),
            spec::Draw::Fixed { values, per_rank } => (
                ir::DrawKind::Fixed {
                    int64: matches!(values, ir::FixedValues::I64(_)),
                },
                Some(if *per_rank {
                    every_rank(values, &inp.shape, s.parallel.tp)
                } else {
                    values.clone()
                }),
            ),
        };
        let tensor = tensors
            .iter()
            .position(|t| t.name == inp.name)
            .map(ir::TensorId);
        draws.push(ir::InputDraw {
            name: inp.name.clone(),
            shape: inp.shape.clone(),
            kind,
            tensor,
            values,
        });
        for set in &inp.set {
            let mut flat = 0;
            for (i, d) in set.index.iter().zip(&inp.shape) {
                flat = flat * d + i;
            }
            fixups.push(ir::Fixup::Set {
                input: ir::InputId(ii),
                index: flat,
                value: set.value,
            });
        }
    }
    // Layers.
    let mut layers = Vec::new();
    for l in &s.layers {
        let out = tid(&l.name);
        let op = match &l.op {
            Op::Embedding { padding_idx, .. } => ir::Op::Embedding {
                ids: iid(&l.input),
                table: param_id(&params, &format!("{}.weight", l.name)),
                out,
                padding_idx: padding_idx.map(|p| p as i64),
                parallel: match l.parallel {
                    LayerParallel::Vocab => ir::EmbeddingParallel::Vocab,
                    LayerParallel::ColumnGather => ir::EmbeddingParallel::ColumnShardedLookup,
                    _ => ir::EmbeddingParallel::None,
                },
            },
            Op::Linear { bias, .. } => ir::Op::Linear {
                x: tid(&l.input),
                weight: param_id(&params, &format!("{}.weight", l.name)),
                bias: bias.then(|| param_id(&params, &format!("{}.bias", l.name))),
                out,
                parallel: match l.parallel {
                    LayerParallel::Column => ir::LinearParallel::Column,
                    LayerParallel::ColumnGather => ir::LinearParallel::ColumnGather,
                    LayerParallel::Row => ir::LinearParallel::Row,
                    _ => ir::LinearParallel::None,
                },
                // torch's `[out, in]`, also under `scheme = "flax"` (a flax-initialised torch
                // model); flax kernels are the outer-loop lowering's ([`super::outer`]).
                layout: ir::WeightLayout::OutIn,
            },
            Op::Act(a) => ir::Op::Activation {
                kind: match a {
                    spec::Act::Tanh => ir::Activation::Tanh,
                    spec::Act::Gelu => ir::Activation::Gelu,
                    spec::Act::GeluTanh => ir::Activation::GeluTanh,
                    spec::Act::Relu => ir::Activation::Relu,
                    spec::Act::Silu => ir::Activation::Silu,
                },
                x: tid(&l.input),
                out,
            },
            Op::LayerNorm { eps, affine } | Op::RmsNorm { eps, affine } => {
                let layernorm = matches!(l.op, Op::LayerNorm { .. });
                ir::Op::Norm {
                    kind: if layernorm {
                        ir::NormKind::LayerNorm
                    } else {
                        ir::NormKind::RmsNorm
                    },
                    x: tid(&l.input),
                    weight: affine.then(|| param_id(&params, &format!("{}.weight", l.name))),
                    bias: (*affine && layernorm)
                        .then(|| param_id(&params, &format!("{}.bias", l.name))),
                    eps: *eps,
                    out,
                    parallel: if l.parallel == LayerParallel::Sequence {
                        ir::NormParallel::Sequence
                    } else {
                        ir::NormParallel::None
                    },
                }
            }
            Op::Binary { kind, other } => ir::Op::Binary {
                kind: match kind {
                    spec::Binary::Mul => ir::BinaryKind::Mul,
                    spec::Binary::Add | spec::Binary::ResidualAdd => ir::BinaryKind::Add,
                },
                a: tid(&l.input),
                b: tid(other),
                out,
            },
            Op::Rope { heads, theta } => {
                let x = tid(&l.input);
                let shape = &tensors[x.0].shape;
                let head_dim = shape.last().copied().unwrap_or(0) / heads.max(&1);
                let tables = crate::ops::rope::RopeTables::new(*theta, head_dim, 0, shape[1])
                    .expect("resolve checked the measured domain");
                ir::Op::Rope {
                    x,
                    out,
                    tables: std::sync::Arc::new(tables),
                }
            }
            Op::Softmax => ir::Op::Softmax {
                x: tid(&l.input),
                out,
            },
            Op::Moe {
                experts,
                top_k,
                ffn,
                act,
                gated,
                norm_topk,
                expert_parallel,
                combine,
                reference_combine,
            } => ir::Op::Moe {
                x: tid(&l.input),
                out,
                router: param_id(&params, &format!("{}.router.weight", l.name)),
                experts: *experts,
                top_k: *top_k,
                ffn: *ffn,
                act: match act {
                    spec::Act::Tanh => ir::Activation::Tanh,
                    spec::Act::Gelu => ir::Activation::Gelu,
                    spec::Act::GeluTanh => ir::Activation::GeluTanh,
                    spec::Act::Relu => ir::Activation::Relu,
                    spec::Act::Silu => ir::Activation::Silu,
                },
                gated: *gated,
                norm_topk: *norm_topk,
                ep: *expert_parallel,
                combine: *combine,
                reference_combine: *reference_combine,
            },
            Op::Sdpa {
                k,
                v,
                heads,
                causal,
                scale,
                cp,
                load_balance,
            } => {
                let q = tid(&l.input);
                let head_dim = tensors[q.0].shape.last().copied().unwrap_or(1) / heads.max(&1);
                ir::Op::Sdpa {
                    q,
                    k: tid(k),
                    v: tid(v),
                    out,
                    heads: *heads,
                    causal: *causal,
                    // torch's `calculate_scale`: 1 / sqrt(head_dim) in double.
                    scale: scale.unwrap_or(1.0 / (head_dim as f64).sqrt()),
                    cp: *cp,
                    load_balance: *load_balance,
                }
            }
        };
        layers.push(ir::Layer {
            name: l.name.clone(),
            op,
        });
    }
    let loss = ir::Loss {
        kind: match &s.loss.op {
            LossOp::CrossEntropy { labels } if s.loss.vocab_parallel => {
                ir::LossKind::VocabParallelCrossEntropy {
                    labels: iid(labels),
                }
            }
            LossOp::CrossEntropy { labels } => ir::LossKind::CrossEntropy {
                labels: iid(labels),
            },
            LossOp::Mse { target } => ir::LossKind::Mse {
                target: iid(target),
            },
            LossOp::Sum => ir::LossKind::Sum,
        },
        input: tid(&s.loss.input),
        divide_by_micro_steps: s.train.micro_steps > 1,
    };
    let train = ir::Train {
        steps: s.train.steps,
        micro_steps: s.train.micro_steps,
        optimizer: optimizer(&s.train.optimizer),
        // ZeRO 2/3 reduce-scatter the gradients over dp; at dp = 1 nothing is reduced.
        grad_reduce: if s.parallel.zero_stage >= 2 && s.parallel.dp > 1 {
            if s.parallel.sync_at_step {
                ir::GradReduce::ReduceScatterAtStep
            } else {
                ir::GradReduce::ReduceScatter
            }
        } else {
            ir::GradReduce::AllReduce
        },
        // A file with [train.outer] is read by `lang::outer` (the outer loop's own reader);
        // this generic lowering only describes its inner graph.
        outer: None,
    };
    let storage = |name: &str| -> ir::ParamId {
        let p = param_id(&params, name);
        params[p.0].tie.unwrap_or(p)
    };
    let checks = g
        .checks
        .iter()
        .map(|c| ir::CheckDecl {
            name: c.name.clone(),
            tensor: match &c.what {
                CheckWhat::Activation(t) => ir::CheckTensor::Activation(tid(t)),
                CheckWhat::Loss => ir::CheckTensor::Loss,
                CheckWhat::LossTokens => ir::CheckTensor::LossTokens,
                CheckWhat::Grad(t) => ir::CheckTensor::Grad(tid(t)),
                CheckWhat::ParamGrad(p) => ir::CheckTensor::ParamGrad(storage(p)),
                // A tied parameter by its own id: it reads the shared storage.
                CheckWhat::Param(p) => ir::CheckTensor::Param(param_id(&params, p)),
                CheckWhat::SgdUpdate(p) => ir::CheckTensor::SgdUpdate(param_id(&params, p)),
            },
            shape: c.shape.clone(),
            at: match c.at {
                // One micro-step per step: every check is labelled by its step.
                _ if s.train.micro_steps == 1 => ir::At::Step,
                At::Step => ir::At::Step,
                // Step-end tensors at "update" record once per step with the label of its
                // last micro-step (the IR's MicroStep on a step-end tensor).
                At::MicroStep | At::Update => ir::At::MicroStep,
            },
            reduction: c.reduction.map(|r| Reduction {
                k: r.k,
                max_shard: r.max_shard,
                ranks: r.ranks,
            }),
        })
        .collect();
    Ok(ir::ResolvedGraph {
        id: g.id.clone(),
        dims,
        rng,
        parallel,
        params,
        inputs: ir::Inputs {
            seed_base: s.data.seed,
            draws,
            fixups,
        },
        tensors,
        layers,
        loss,
        train,
        checks,
    })
}

/// The global values of a last-dim-sharded input whose file gives one rank's shard, the same
/// on every rank (`per_rank = true`, equal shards checked by resolve): rank r's columns of
/// every row are the shard's row.
fn every_rank(local: &ir::FixedValues, shape: &[usize], tp: usize) -> ir::FixedValues {
    fn tile<T: Copy>(v: &[T], w: usize, tp: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len() * tp);
        for row in v.chunks(w) {
            for _ in 0..tp {
                out.extend_from_slice(row);
            }
        }
        out
    }
    let w = shape.last().copied().unwrap_or(1) / tp.max(1);
    match local {
        ir::FixedValues::F32(v) => ir::FixedValues::F32(tile(v, w, tp)),
        ir::FixedValues::I64(v) => ir::FixedValues::I64(tile(v, w, tp)),
    }
}
