//! Scenario files with a DiLoCo outer loop (`[train.outer]`): lowered into one resolved graph
//! with an [`ir::OuterLoop`], run by the executor ([`crate::exec::GraphScenario::outer`],
//! the outer loop around its inner step: [`crate::exec::outer_loop`]).
//!
//! The lowering: every tensor has one replica's shape (the inputs' leading axis over `dp`),
//! every input is an [`ir::DrawKind::Given`] draw of the global batch, every linear layer's
//! weight a flax kernel ([`ir::WeightLayout::InOut`], declared `[out, in]`, stored
//! `[in, out]`), `[init] scheme = "flax"` draws `N(0, 1/fan_in)` kernels and zero biases.
//!
//! The surface is the language's (`docs/scenario-language.md`, "DiLoCo outer loop"): the same
//! top-level keys, `[parallel] dp` = the replicas, `[[inputs]]` with `draw = "fixed"` and their
//! `values`, or `randn` and `teacher` drawn per seed (the global batch, replica r taking block
//! r of the leading axis), `[[layers]]`
//! (`linear` with a bias, `tanh`), `[init] values` for every parameter or `scheme = "flax"`,
//! `[loss] op = "mse"`,
//! `[train]` (the inner optimizer, `steps` = inner steps in all), `[train.outer]`
//! (`sync_period`, the outer optimizer, the JAX `execution` mode), `[[checks]]` on `loss`,
//! `outer` and `replicas`, `[[params]]` (one entry naming the test's id) and `[policies.*]`.

use std::collections::BTreeMap;

use crate::check::comparison::Comparison;
use crate::scenario::config::{CommonConfig, RngKind};
use crate::scenario::ir::{
    self, Activation, LinearParallel, Op, OuterCheck, OuterCheckKind, OuterData, ParamDecl,
    ParamId, ParamInit, ResolvedGraph, TensorDecl, TensorId, WeightLayout,
};
use crate::scenario::profile::{toml_error, XlaMode};
use crate::scenario::ScenarioFile;
use crate::sys::error::InputError;

use super::node::{check_name, Ctx, Obj};

/// The scenario kind of outer-loop files (`CommonConfig::kind`); their `model` holds the whole
/// document, read again by [`parse`].
pub const KIND: &str = "graph-outer";

const TOP: &[&str] = &[
    "name",
    "description",
    "first_seed",
    "rng",
    "default_profiles",
    "default_policies",
    "compare",
    "parallel",
    "inputs",
    "layers",
    "init",
    "loss",
    "train",
    "checks",
    "params",
    "policies",
    "profiles",
    "modifiers",
];

/// Whether `text` is a scenario file in the language with an outer loop.
pub fn is_outer_file(text: &str) -> bool {
    let Ok(t) = toml::from_str::<toml::Table>(text) else {
        return false;
    };
    let outer = t
        .get("train")
        .and_then(|v| v.as_table())
        .is_some_and(|tr| tr.contains_key("outer"));
    t.contains_key("layers") && !t.contains_key("scenario") && outer
}

fn names(o: &Obj<'_>, key: &str, default: &str) -> Result<Vec<String>, InputError> {
    Ok(match o.opt_strings(key)? {
        None => vec![default.to_string()],
        Some(l) if l.is_empty() => return Err(o.err(key, "list at least one name")),
        Some(l) => l.iter().map(|s| s.to_string()).collect(),
    })
}

/// Reads the top level of an outer-loop file into the common config (policies, profiles,
/// modifiers as every config has them); the graph is read by [`graph`].
pub fn parse_common(file: &str, text: &str) -> Result<CommonConfig, InputError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| toml_error(file, e))?;
    let ctx = Ctx::new(file);
    let top = Obj::new(&ctx, "", &table, TOP)?;
    let name = top.str("name")?;
    check_name(&top, "name", name, true)?;
    let rng = match top.choice("rng", &["torch", "chacha"], "torch")? {
        "chacha" => RngKind::ChaCha,
        _ => RngKind::Torch,
    };
    let (policy_tables, extra) = crate::scenario::file::policy_and_profile_tables(&ctx, &table)?;
    let common = CommonConfig {
        file: file.to_string(),
        kind: KIND.to_string(),
        name: name.to_string(),
        description: top.opt_str("description")?.unwrap_or("").to_string(),
        first_seed: top.int("first_seed", 0, i64::MAX, 0)? as u64,
        rng,
        profiles: names(&top, "default_profiles", "cpu-fma")?,
        default_policies: names(&top, "default_policies", "torch-default")?,
        policy_tables,
        extra_profiles: extra,
        model: table.clone(),
        params: Vec::new(),
    };
    // Read the graph now too, so that a bad file fails at load time.
    graph(&common)?;
    Ok(common)
}

/// A list of numbers, rounded once to f32 (round to nearest, as JAX converts a Python float):
/// the shared reader of written values ([`super::values::read_values`]) as float32.
fn values(o: &Obj<'_>, key: &str) -> Result<Vec<f32>, InputError> {
    match super::values::read_values(o, key, Some(super::values::ValueType::F32), false)? {
        ir::FixedValues::F32(v) => Ok(v),
        ir::FixedValues::I64(_) => unreachable!("read as float32"),
    }
}

fn shape(o: &Obj<'_>, key: &str) -> Result<Vec<usize>, InputError> {
    let bad = || o.err(key, "required: a list of sizes, 1..=65536 each");
    let Some(toml::Value::Array(a)) = o.table.get(key) else {
        return Err(bad());
    };
    a.iter()
        .map(|v| match v {
            toml::Value::Integer(n) if (1..=65536).contains(n) => Ok(*n as usize),
            _ => Err(bad()),
        })
        .collect()
}

fn lr(o: &Obj<'_>) -> Result<f64, InputError> {
    o.req_float(
        "lr",
        |v| v > 0.0 && v < crate::scenario::config::MAX_LR,
        &format!("0 < lr < {}", crate::scenario::config::MAX_LR),
    )
}

/// Reads the graph of an outer-loop file (its document is `common.model`).
pub fn graph(common: &CommonConfig) -> Result<(ResolvedGraph, Comparison), InputError> {
    let ctx = Ctx::new(&common.file);
    let doc = Obj::new(&ctx, "", &common.model, TOP)?;
    let compare = match doc.choice(
        "compare",
        &["sharded-vs-ref", "sharded-vs-f64"],
        "sharded-vs-ref",
    )? {
        "sharded-vs-f64" => Comparison::ShardedVsF64,
        _ => Comparison::ShardedVsRef,
    };
    let par = doc
        .opt_table("parallel", &["dp", "tp"])?
        .ok_or_else(|| doc.err("parallel", "required: [parallel] dp = the replicas"))?;
    let tp = par.int("tp", 1, 1, 1)? as usize;
    let dp = par.req_int("dp", 1, 64)? as usize;
    let ids = doc.tables("params", &["id"])?;
    let id = match ids.as_slice() {
        [] => "0".to_string(),
        [p] => p.str("id")?.to_string(),
        _ => {
            return Err(doc.err(
                "params",
                "an outer-loop file has one parametrization; allowed: one [[params]] entry",
            ))
        }
    };
    // Inputs: fixed values, or drawn per seed (randn model input, teacher targets).
    let mut tensors: Vec<TensorDecl> = Vec::new();
    let mut fixed: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    let mut input_names = Vec::new();
    let mut drawn: Vec<(String, &str)> = Vec::new();
    let mut noise_std = None;
    let mut draws: Vec<ir::InputDraw> = Vec::new();
    for inp in doc.tables("inputs", &["name", "draw", "shape", "values", "noise_std"])? {
        let name = inp.name("name", false)?;
        let draw = inp.req_choice("draw", &["fixed", "randn", "teacher"])?;
        let sh = shape(&inp, "shape")?;
        let n: usize = sh.iter().product();
        if sh.len() != 2 {
            return Err(inp.err("shape", "an outer-loop input is [rows, features]"));
        }
        if !sh[0].is_multiple_of(dp) {
            return Err(inp.err(
                "shape",
                format!(
                    "{} input rows do not split evenly over {dp} replicas",
                    sh[0]
                ),
            ));
        }
        if draw == "fixed" {
            let v = values(&inp, "values")?;
            if v.len() != n {
                return Err(inp.err(
                    "values",
                    format!("a [rows, features] input of shape {sh:?} needs {n} values, row-major"),
                ));
            }
            fixed.insert(name.to_string(), v);
        } else {
            if inp.has("values") {
                return Err(inp.err("values", "only allowed with draw = \"fixed\""));
            }
            if draw == "teacher" {
                noise_std = Some(inp.req_float(
                    "noise_std",
                    |v| (0.0..1e3).contains(&v),
                    "0 <= noise_std < 1000",
                )?);
            } else if inp.has("noise_std") {
                return Err(inp.err("noise_std", "only allowed with draw = \"teacher\""));
            }
            drawn.push((name.to_string(), draw));
        }
        draws.push(ir::InputDraw {
            name: name.to_string(),
            shape: sh.clone(),
            kind: ir::DrawKind::Given,
            tensor: Some(TensorId(tensors.len())),
            values: None,
        });
        tensors.push(TensorDecl {
            name: name.to_string(),
            shape: vec![sh[0] / dp, sh[1]],
        });
        input_names.push(name.to_string());
    }
    let tensor = |tensors: &[TensorDecl], n: &str| tensors.iter().position(|t| t.name == n);
    // Layers.
    let mut params: Vec<ParamDecl> = Vec::new();
    let mut layers = Vec::new();
    let mut prev: Option<usize> = None;
    for (li, l) in doc
        .tables("layers", &["name", "op", "input", "out", "bias"])?
        .iter()
        .enumerate()
    {
        let name = l.name("name", false)?.to_string();
        let op = l.req_choice("op", &["linear", "tanh"])?;
        let x = match l.opt_str("input")? {
            Some(n) => tensor(&tensors, n)
                .ok_or_else(|| l.err("input", format!("`{n}` is no input or layer")))?,
            None => prev.ok_or_else(|| l.err("input", "the first layer names its input"))?,
        };
        let rows = tensors[x].shape[0];
        let width = tensors[x].shape[1];
        let out_t = tensors.len();
        let op = match op {
            "linear" => {
                let n = l.req_int("out", 1, 4096)? as usize;
                if !l.bool("bias", true)? {
                    return Err(l.err("bias", "an outer-loop model's linear layers have a bias"));
                }
                let w = params.len();
                params.push(ParamDecl {
                    name: format!("{name}.kernel"),
                    shape: vec![n, width],
                    init: ParamInit::Fixed,
                    tie: None,
                });
                params.push(ParamDecl {
                    name: format!("{name}.bias"),
                    shape: vec![n],
                    init: ParamInit::Fixed,
                    tie: None,
                });
                tensors.push(TensorDecl {
                    name: format!("{name}.out"),
                    shape: vec![rows, n],
                });
                Op::Linear {
                    x: TensorId(x),
                    weight: ParamId(w),
                    bias: Some(ParamId(w + 1)),
                    out: TensorId(out_t),
                    parallel: LinearParallel::None,
                    layout: WeightLayout::InOut,
                }
            }
            _ => {
                for k in ["out", "bias"] {
                    if l.has(k) {
                        return Err(l.err(k, "not a setting of op \"tanh\""));
                    }
                }
                tensors.push(TensorDecl {
                    name: format!("{name}.out"),
                    shape: vec![rows, width],
                });
                Op::Activation {
                    kind: Activation::Tanh,
                    x: TensorId(x),
                    out: TensorId(out_t),
                }
            }
        };
        let _ = li;
        layers.push(ir::Layer { name, op });
        prev = Some(out_t);
    }
    let last = prev.ok_or_else(|| doc.err("layers", "at least one layer is required"))?;
    // Init: every parameter's values (flax kernel layout), or flax's scheme drawn per seed.
    let init = doc
        .opt_table("init", &["values", "scheme"])?
        .ok_or_else(|| {
            doc.err(
                "init",
                "required: [init] values (fixed) or scheme = \"flax\"",
            )
        })?;
    let mut init_flat = Vec::new();
    let drawn_init = init.has("scheme");
    if drawn_init {
        init.req_choice("scheme", &["flax"])?;
        if init.has("values") {
            return Err(init.err("values", "give values or scheme = \"flax\", not both"));
        }
        for p in &mut params {
            p.init = if p.name.ends_with(".bias") {
                ParamInit::Zeros
            } else {
                ParamInit::Draw(ir::TorchInit::Normal {
                    mean: 0.0,
                    std: (1.0 / p.shape[1] as f64).sqrt(),
                    zero_row: None,
                })
            };
        }
    } else {
        let Some(toml::Value::Table(vt)) = init.table.get("values") else {
            return Err(init.err("values", "required: a table of parameter name = [numbers]"));
        };
        let allowed: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        let iv = Obj::new(&ctx, "init.values", vt, &allowed)?;
        for p in &params {
            let v = values(&iv, &p.name)?;
            let n: usize = p.shape.iter().product();
            if v.len() != n {
                return Err(iv.err(
                    &p.name,
                    format!(
                        "holds {} values; {} needs {n} (a kernel is [in, out], row-major)",
                        v.len(),
                        p.name
                    ),
                ));
            }
            init_flat.extend(v);
        }
    }
    // Loss.
    let lo = doc
        .opt_table("loss", &["op", "target"])?
        .ok_or_else(|| doc.err("loss", "required: [loss] op = \"mse\", target"))?;
    lo.req_choice("op", &["mse"])?;
    let target = lo.str("target")?;
    let ti = input_names
        .iter()
        .position(|n| n == target)
        .ok_or_else(|| lo.err("target", format!("`{target}` is no input")))?;
    // The loss reads the target by its id; no layer reads it.
    draws[ti].tensor = None;
    let x_name = match &layers[0].op {
        Op::Linear { x, .. } => tensors[x.0].name.clone(),
        _ => String::new(),
    };
    // Either everything is written in the file, or everything is drawn: the model input by
    // randn, the target by the teacher, the parameters by flax's scheme, all from ChaCha.
    let data = if drawn.is_empty() && !drawn_init {
        OuterData::Fixed {
            init: init_flat,
            x: fixed.get(&x_name).cloned().unwrap_or_default(),
            y: fixed.get(target).cloned().unwrap_or_default(),
        }
    } else {
        let want = [(x_name.clone(), "randn"), (target.to_string(), "teacher")];
        if !drawn_init
            || drawn.len() != 2
            || !want
                .iter()
                .all(|w| drawn.iter().any(|d| d.0 == w.0 && d.1 == w.1))
        {
            return Err(doc.err(
                "inputs",
                format!(
                    "drawn outer-loop data is the model input `{x_name}` by randn, the target \
                     `{target}` by teacher and [init] scheme = \"flax\"; or write every value \
                     (draw = \"fixed\" and [init] values)"
                ),
            ));
        }
        if common.rng != RngKind::ChaCha {
            return Err(doc.err(
                "rng",
                "drawn outer-loop data comes from ChaCha streams; allowed: \"chacha\"",
            ));
        }
        OuterData::Teacher {
            noise_std: noise_std.unwrap_or(0.0),
        }
    };
    if tensors[ti].shape != tensors[last].shape {
        return Err(lo.err(
            "target",
            format!(
                "shape {:?} differs from the last layer's output {:?}",
                tensors[ti].shape, tensors[last].shape
            ),
        ));
    }
    // Train.
    let tr = doc
        .opt_table(
            "train",
            &[
                "steps",
                "optimizer",
                "lr",
                "betas",
                "eps",
                "weight_decay",
                "outer",
            ],
        )?
        .ok_or_else(|| doc.err("train", "required"))?;
    let steps = tr.req_int("steps", 1, 1000)? as usize;
    let inner = match tr.req_choice("optimizer", &["sgd", "adamw"])? {
        "sgd" => {
            for k in ["betas", "eps", "weight_decay"] {
                if tr.has(k) {
                    return Err(tr.err(k, "only allowed with optimizer = \"adamw\""));
                }
            }
            ir::Optimizer::sgd(lr(&tr)?)
        }
        _ => {
            let (beta1, beta2) = match tr.table.get("betas") {
                None => (0.9, 0.999),
                Some(toml::Value::Array(a)) if a.len() == 2 => {
                    match (a[0].as_float(), a[1].as_float()) {
                        (Some(b1), Some(b2))
                            if (0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2) =>
                        {
                            (b1, b2)
                        }
                        _ => return Err(tr.err("betas", "allowed: [b1, b2], each in [0, 1)")),
                    }
                }
                Some(_) => return Err(tr.err("betas", "allowed: [b1, b2], each in [0, 1)")),
            };
            ir::Optimizer::Adam {
                lr: lr(&tr)?,
                beta1,
                beta2,
                eps: tr.float("eps", |v| v > 0.0 && v < 1.0, "0 < eps < 1", 1e-8)?,
                // optax.adamw's default.
                weight_decay: tr.float(
                    "weight_decay",
                    |v| (0.0..1e3).contains(&v),
                    "0 <= weight_decay < 1000",
                    1e-4,
                )?,
                decoupled: true,
            }
        }
    };
    let ou = tr
        .opt_table(
            "outer",
            &["sync_period", "optimizer", "lr", "momentum", "execution"],
        )?
        .expect("an outer-loop file has [train.outer]");
    let sync_period = ou.req_int("sync_period", 1, 1000)? as usize;
    let oname = ou.choice("optimizer", &["sgd", "momentum", "nesterov"], "nesterov")?;
    let momentum = if oname == "sgd" {
        if ou.has("momentum") {
            return Err(ou.err(
                "momentum",
                "allowed with optimizer = \"momentum\" or \"nesterov\"",
            ));
        }
        0.0
    } else {
        ou.float(
            "momentum",
            |v| (0.0..1.0).contains(&v),
            "0 <= momentum < 1",
            0.9,
        )?
    };
    let outer_opt = ir::Optimizer::Sgd {
        lr: lr(&ou)?,
        momentum,
        dampening: 0.0,
        nesterov: oname == "nesterov",
        weight_decay: 0.0,
    };
    let default_mode = match ou.choice("execution", &["eager", "jit"], "jit")? {
        "eager" => XlaMode::Eager,
        _ => XlaMode::Jit,
    };
    // Checks.
    let mut checks = Vec::new();
    for c in doc.tables("checks", &["name", "tensor", "kind"])? {
        let name = c.name("name", false)?;
        let tensor = c.req_choice("tensor", &["loss", "outer", "replicas"])?;
        let kind = c.choice("kind", &["value", "unchanged", "equals-outer"], "value")?;
        let k =
            match (tensor, kind) {
                ("loss", "value") => OuterCheckKind::Loss,
                ("outer", "value") => OuterCheckKind::OuterParams,
                ("outer", "unchanged") => OuterCheckKind::OuterUnchanged,
                ("replicas", "equals-outer") => OuterCheckKind::InnerEqualsOuter,
                _ => return Err(c.err(
                    "kind",
                    "allowed: loss (value), outer (value: after every sync; unchanged: at every \
                     other step), replicas (equals-outer: after every sync)",
                )),
            };
        checks.push(OuterCheck {
            name: name.to_string(),
            kind: k,
        });
    }
    let loss = ir::Loss {
        kind: ir::LossKind::Mse {
            target: ir::InputId(ti),
        },
        input: TensorId(last),
        divide_by_micro_steps: false,
    };
    let g = ResolvedGraph {
        id,
        dims: Vec::new(),
        rng: common.rng,
        parallel: ir::Parallel {
            tp,
            dp,
            replicate: 1,
            shard_rule: ir::ShardRule::DeepSpeed { grain: 1 },
        },
        params,
        inputs: ir::Inputs {
            seed_base: 0,
            draws,
            fixups: Vec::new(),
        },
        tensors,
        layers,
        loss,
        train: ir::Train {
            steps,
            micro_steps: 1,
            optimizer: inner,
            grad_reduce: ir::GradReduce::AllReduce,
            outer: Some(ir::OuterLoop {
                replicas: dp,
                rounds: steps.div_ceil(sync_period),
                optimizer: outer_opt,
                sync_period,
                steps,
                default_mode,
                data,
                checks: Vec::new(),
            }),
        },
        checks: Vec::new(),
    };
    let mut g = g;
    if let Some(o) = g.train.outer.as_mut() {
        o.checks = checks;
    }
    Ok((g, compare))
}

/// Parses an outer-loop file into the form every scenario file takes: its common config and
/// its one lowered graph (with `train.outer`), validated.
pub fn parse(file: &str, text: &str) -> Result<ScenarioFile, InputError> {
    let common = parse_common(file, text)?;
    let (g, compare) = graph(&common)?;
    Ok(ScenarioFile {
        references: Vec::new(),
        common,
        compare,
        graphs: Vec::new(),
        lowered: vec![g],
        check_names: Vec::new(),
        policies: Vec::new(),
        outer: true,
    })
}
