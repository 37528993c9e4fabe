//! `seedsweep check FILE`: the resolved graph of every parametrization as text: every
//! tensor's shape per rank, which collectives run over which ranks in which dtype, the
//! optimizer and steps, and the checks with their tolerance under each default policy.

use std::fmt::Write as _;

use crate::scenario::profile::ProfileRegistry;
use crate::sys::error::InputError;

use super::file::ScenarioFile;
use super::resolve::{Dtype, Graph, Group, Role, Split};
use crate::scenario::ir::{FixedValues, MoeCombine};

use super::spec::{Binary, Draw, LossOp, Op, Optimizer, Scheme, ShardRule};

fn shape(s: &[usize]) -> String {
    let parts: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// A number as a config would write it: `1e-6`, `1.3e-6`, `0.05`, `0`.
fn num(v: f64) -> String {
    if v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e6) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// How the default profiles set a collective's buffer (`f32 (ring) in cpu-fma`).
fn profile_wire(file: &ScenarioFile, registry: &ProfileRegistry) -> String {
    let parts: Vec<String> = file
        .common
        .profiles
        .iter()
        .map(|spec| match registry.resolve(spec, "default_profiles") {
            Ok(p) => format!(
                "{} {} in {spec}",
                format!("{:?}", p.wire).to_lowercase(),
                format!("{:?}", p.allreduce).to_lowercase()
            ),
            Err(_) => format!("? in {spec}"),
        })
        .collect();
    parts.join("; ")
}

fn per_rank(t: &super::resolve::Tensor, tp: usize, dp: usize) -> String {
    let split = !matches!(t.split, Split::Replicated);
    let dsplit = t.dp_ranges.is_some();
    if !split && !dsplit {
        return "every rank: whole".into();
    }
    let mut parts = Vec::new();
    let tps = if split { tp } else { 1 };
    let dps = if dsplit { dp } else { 1 };
    for d in 0..dps {
        for r in 0..tps {
            let mut who = String::new();
            if dsplit {
                write!(who, "dp{d}").unwrap();
            }
            if split {
                write!(who, "{}tp{r}", if dsplit { "." } else { "" }).unwrap();
            }
            parts.push(format!("{who} {}", shape(&t.rank_shape(r, d))));
        }
    }
    let mut s = parts.join(", ");
    if let Split::Axis { axis, by, .. } = &t.split {
        write!(s, " (axis {axis} split by {by})").unwrap();
    }
    s
}

fn describe_layer(l: &super::spec::Layer) -> String {
    match &l.op {
        Op::Embedding {
            num,
            dim,
            padding_idx,
        } => format!(
            "embedding({num}, {dim}, padding_idx={})",
            padding_idx.map_or("None".to_string(), |p| p.to_string())
        ),
        Op::Linear { out, bias, tie } => format!(
            "linear(out={out}, bias={bias}{})",
            tie.as_ref()
                .map_or(String::new(), |t| format!(", weight tied to {t}.weight"))
        ),
        Op::Act(a) => a.name().to_string(),
        Op::LayerNorm { eps, affine } => format!("layernorm(eps={eps}, affine={affine})"),
        Op::RmsNorm { eps, affine } => format!("rmsnorm(eps={eps}, affine={affine})"),
        Op::Binary { kind, other } => match kind {
            Binary::Mul => format!("mul(* {other})"),
            k => format!("{}(+ {other})", k.name()),
        },
        Op::Softmax => "softmax(dim=-1)".to_string(),
        Op::Rope { heads, theta } => format!("rope(heads={heads}, theta={theta}, rotate_half)"),
        Op::Sdpa {
            k,
            v,
            heads,
            causal,
            scale,
            cp,
            load_balance,
        } => format!(
            "sdpa(k={k}, v={v}, heads={heads}, causal={causal}, scale={}{}; math path: q,k,v viewed [b, s, heads, head_dim] and transposed to [b, heads, s, head_dim], scores [b, heads, s, s], softmax, output transposed back)",
            scale.map_or("1/sqrt(head_dim)".to_string(), |s| s.to_string()),
            if *cp > 1 {
                format!(", cp={cp}{}", if *load_balance { ", load_balance" } else { "" })
            } else {
                String::new()
            }
        ),
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
        } => {
            let how = |c: &MoeCombine| match c {
                MoeCombine::Elementwise => {
                    "combine sum over the chosen experts in ascending expert order"
                }
                MoeCombine::Einsum => {
                    "combine einsum(BSEM,BSE->BSM) over all experts as one matmul per token"
                }
            };
            let combine_text = if combine == reference_combine {
                how(combine).to_string()
            } else {
                format!(
                    "sharded: {}; reference: {}",
                    how(combine),
                    how(reference_combine)
                )
            };
            format!(
                "moe(experts={experts}, top_k={top_k}, ffn={ffn}, {}, norm_topk={norm_topk}, expert_parallel={expert_parallel}; router linear(bias=False), softmax over experts, topk (ties: lower expert first), {}{combine_text})",
                if *gated {
                    format!("experts {}(x·w1ᵀ) * (x·w3ᵀ) then ·w2ᵀ", act.name())
                } else {
                    format!("experts {}(x·w1ᵀ)·w2ᵀ", act.name())
                },
                if *norm_topk { "weights / their sum, " } else { "" }
            )
        }
    }
}

fn optimizer(o: &Optimizer) -> String {
    match *o {
        Optimizer::Sgd { lr, weight_decay } => {
            format!("sgd(lr={}, weight_decay={})", num(lr), num(weight_decay))
        }
        Optimizer::Momentum {
            lr,
            momentum,
            dampening,
            nesterov,
            weight_decay,
        } => format!(
            "sgd(lr={}, momentum={}, dampening={}, nesterov={nesterov}, weight_decay={})",
            num(lr),
            num(momentum),
            num(dampening),
            num(weight_decay)
        ),
        Optimizer::Adam {
            lr,
            betas,
            eps,
            weight_decay,
            decoupled,
        } => format!(
            "{}(lr={}, betas=({}, {}), eps={}, weight_decay={})",
            if decoupled { "adamw" } else { "adam" },
            num(lr),
            num(betas.0),
            num(betas.1),
            num(eps),
            num(weight_decay)
        ),
    }
}

/// The layout of `[parallel]` (or `[parallel.reference]`) as `check` prints it: degrees, the
/// HSDP mesh, the shard rule and when gradients are reduced.
fn layout_line(p: &super::spec::Parallel) -> String {
    let rule = match p.rule {
        ShardRule::DeepSpeed => format!("deepspeed rule, grain {}", p.grain),
        ShardRule::Megatron => "megatron rule".to_string(),
    };
    let sync = if p.dp == 1 {
        ""
    } else if p.zero_stage < 2 {
        ", gradients all-reduced at the step"
    } else if p.sync_at_step {
        ", gradients reduce-scattered at the step (no_sync)"
    } else {
        ", gradients reduce-scattered after every micro-step"
    };
    let mesh = if p.dp_replicate > 1 {
        format!(
            " = HSDP mesh dp_replicate {} x dp_shard {} (rank r*{}+s; parameters sharded over dp_shard)",
            p.dp_replicate,
            p.dp / p.dp_replicate,
            p.dp / p.dp_replicate
        )
    } else {
        String::new()
    };
    format!(
        "tp {} ({rule}), dp {}{mesh}, zero stage {}{sync}",
        p.tp, p.dp, p.zero_stage
    )
}

/// The send/recv rotations of ring attention on `cp` ranks (torch's
/// `_templated_ring_attention` and its backward; `crate::ops::ring`).
fn ring_text(out: &mut String, layer: &str, k: &str, v: &str, cp: usize, lb: bool) {
    let last = cp - 1;
    let layout = if lb {
        format!(
            "rank r holds chunks r and {} - r of {} of q, {k}, {v}: torch's round-robin load balancing",
            2 * cp - 1,
            2 * cp
        )
    } else {
        format!("rank r holds sequence chunk r of q, {k}, {v}; no load balancing")
    };
    writeln!(
        out,
        "    {layer}: ring attention over cp ranks 0..{last} ({layout})"
    )
    .unwrap();
    writeln!(
        out,
        "      forward: {last} rotations of [{k}, {v}] (each step rank r sends its block to rank r+1 mod {cp}, receives from r-1: torch's all-to-all rotater; the all-gather rotater gathers them once, the same values), one block attention per step with its log-sum-exp, merged in step order (_SDPAMerger)"
    )
    .unwrap();
    writeln!(
        out,
        "      backward: {last} rotations of [{k}, {v}] and {cp} of their gradients [d{k}, d{v}] (f32: each block's gradient travels with it and every rank adds its share, ring order from the block's owner); dq accumulated on its rank in step order"
    )
    .unwrap();
}

/// The collectives of one layout, one line each.
fn collectives_text(out: &mut String, g: &Graph, wire_note: &str) {
    let p = &g.spec.parallel;
    // Ring attention's rotations (context parallelism of an sdpa layer).
    let mut ring = false;
    for l in &g.spec.layers {
        if let super::spec::Op::Sdpa {
            k,
            v,
            cp,
            load_balance,
            ..
        } = &l.op
        {
            if *cp > 1 {
                ring = true;
                ring_text(out, &l.name, k, v, *cp, *load_balance);
            }
        }
    }
    if g.collectives.is_empty() && !ring {
        writeln!(out, "    none (tp = dp = 1)").unwrap();
    }
    for c in &g.collectives {
        let ranks = match c.group {
            Group::Tp => format!("tp ranks 0..{}", c.ranks - 1),
            Group::Dp => format!("dp ranks 0..{}", c.ranks - 1),
            Group::DpShard => format!(
                "each dp_shard group of {} ranks (r·{}..r·{}+{}, r < {})",
                c.ranks,
                c.ranks,
                c.ranks,
                c.ranks - 1,
                p.dp / c.ranks
            ),
            Group::DpReplicate => format!(
                "each dp_replicate group of {} ranks (s, s+{}, .., s < {})",
                c.ranks,
                p.dp / c.ranks,
                p.dp / c.ranks
            ),
            Group::Ep => format!("expert-parallel ranks 0..{}", c.ranks - 1),
        };
        let wire = format!("the profile's wire ({wire_note})");
        let axis = c.axis.map_or(String::new(), |a| format!(" on axis {a}"));
        writeln!(
            out,
            "    {:<8} {:<12} {:<14} {} {}{axis} over {ranks}, {wire}",
            c.phase.name(),
            c.layer,
            c.op.name(),
            c.tensor,
            shape(&c.shape),
        )
        .unwrap();
    }
}

fn graph_text(
    out: &mut String,
    file: &ScenarioFile,
    g: &Graph,
    ir: &crate::scenario::ir::ResolvedGraph,
    reference: Option<&Graph>,
    wire_note: &str,
) {
    let s = &g.spec;
    let p = &s.parallel;
    writeln!(out, "\nparametrization {}", g.id).unwrap();
    if !s.dims.is_empty() {
        let dims: Vec<String> = s
            .dims
            .iter()
            .map(|(k, v)| match v {
                super::node::DimValue::Int(n) => format!("{k} = {n}"),
                super::node::DimValue::List(l) => format!("{k} = {}", shape(l)),
            })
            .collect();
        writeln!(out, "  dims: {}", dims.join(", ")).unwrap();
    }
    writeln!(out, "  parallel: {}", layout_line(p)).unwrap();
    let seed_rule = if !s.inputs.is_empty()
        && s.inputs
            .iter()
            .all(|i| i.draw == Draw::Rand { seeded: true })
    {
        "each drawn once per sweep seed, after torch.manual_seed(seed)".to_string()
    } else if s.train.micro_steps > 1 {
        format!(
            "torch.manual_seed({} + {}*step + micro) before each micro-step's draws",
            s.data.seed, s.train.micro_steps
        )
    } else {
        format!(
            "torch.manual_seed({} + step) before each step's draws",
            s.data.seed
        )
    };
    writeln!(out, "  inputs ({seed_rule}):").unwrap();
    for i in &s.inputs {
        let draw = match &i.draw {
            Draw::Randn => "randn".to_string(),
            Draw::Rand { seeded: false } => "rand".to_string(),
            Draw::Rand { seeded: true } => {
                "rand, once per sweep seed (after torch.manual_seed(seed), before the weights)"
                    .to_string()
            }
            Draw::Randint { high } => format!("randint({high})"),
            Draw::Fixed { values, per_rank } => {
                let (ty, first) = match values {
                    FixedValues::F32(v) => (
                        "float32",
                        v.iter()
                            .take(4)
                            .map(|x| format!("{x:?}"))
                            .collect::<Vec<_>>(),
                    ),
                    FixedValues::I64(v) => (
                        "int64",
                        v.iter().take(4).map(|x| x.to_string()).collect::<Vec<_>>(),
                    ),
                };
                let more = if values.len() > 4 { ", ..." } else { "" };
                format!(
                    "fixed {ty}, {} values [{}{more}]{}, nothing drawn",
                    values.len(),
                    first.join(", "),
                    if *per_rank {
                        " per rank (every rank's shard)"
                    } else {
                        ""
                    }
                )
            }
        };
        let mut extra = String::new();
        for set in &i.set {
            let idx: Vec<String> = set.index.iter().map(|x| x.to_string()).collect();
            write!(
                extra,
                ", then {}[{}] = {}",
                i.name,
                idx.join(", "),
                set.value
            )
            .unwrap();
        }
        if i.grad {
            extra.push_str(", requires_grad");
        }
        writeln!(out, "    {:<14} {draw}{extra}", i.name).unwrap();
    }
    writeln!(out, "  layers (forward order):").unwrap();
    for l in &s.layers {
        let par = if l.parallel.name() == "none" {
            String::new()
        } else {
            format!(", {}-parallel", l.parallel.name())
        };
        let attr = if l.attr != l.name {
            format!(" (attribute {})", l.attr)
        } else {
            String::new()
        };
        writeln!(
            out,
            "    {:<14} {}{par}  <- {}{attr}",
            l.name,
            describe_layer(l),
            l.input
        )
        .unwrap();
    }
    let loss = &s.loss;
    match &loss.op {
        LossOp::Sum => writeln!(out, "    {:<14} sum({})", "loss", loss.input).unwrap(),
        LossOp::CrossEntropy { labels: against } | LossOp::Mse { target: against } => {
            let what = if matches!(loss.op, LossOp::Mse { .. }) {
                "mse"
            } else {
                "cross-entropy"
            };
            writeln!(
                out,
                "    {:<14} {what}({}, {against}, mean over tokens{})",
                "loss",
                loss.input,
                if loss.vocab_parallel {
                    ", vocab-parallel"
                } else {
                    ""
                }
            )
            .unwrap();
        }
    }
    writeln!(out, "  tensors (global shape; per rank):").unwrap();
    for t in &g.tensors {
        let dt = match t.dtype {
            Dtype::F32 => "f32",
            Dtype::I64 => "i64",
        };
        let name = match &t.alias_of {
            Some(a) => format!("{} = {a}", t.name),
            None => t.name.clone(),
        };
        let grad = if g.grads.contains(&t.name) || (t.role == Role::Param && t.alias_of.is_some()) {
            " +grad"
        } else {
            ""
        };
        writeln!(
            out,
            "    {name:<30} {dt} {:<14} {}{grad}",
            shape(&t.shape),
            per_rank(t, p.tp, p.dp)
        )
        .unwrap();
    }
    writeln!(out, "  collectives:").unwrap();
    collectives_text(out, g, wire_note);
    if let Some(r) = reference {
        writeln!(
            out,
            "  reference layout ([parallel.reference], compare = \"layout-vs-layout\"): {}",
            layout_line(&r.spec.parallel)
        )
        .unwrap();
        writeln!(out, "  reference collectives:").unwrap();
        collectives_text(out, r, wire_note);
    }
    let tr = &s.train;
    if !s
        .layers
        .iter()
        .any(|l| crate::scenario::spec::has_weights(&l.op))
    {
        writeln!(
            out,
            "  train: no parameters: {} step{} of forward and loss (the optimizer steps nothing)",
            tr.steps,
            if tr.steps == 1 { "" } else { "s" }
        )
        .unwrap();
    } else {
        writeln!(
            out,
            "  train: {} steps x {} micro-step{}, {}{}",
            tr.steps,
            tr.micro_steps,
            if tr.micro_steps == 1 {
                ""
            } else {
                "s (backward of loss / micro_steps, gradients accumulated)"
            },
            optimizer(&tr.optimizer),
            tr.outer.map_or(String::new(), |o| format!(
                "; DiLoCo outer loop of {} rounds over dp replicas: {}",
                o.rounds,
                optimizer(&o.optimizer)
            ))
        )
        .unwrap();
    }
    let generator = match file.common.rng {
        crate::scenario::config::RngKind::Torch => "one torch generator seeded with the sweep seed",
        crate::scenario::config::RngKind::ChaCha => "ChaCha streams <layer>.weight / <layer>.bias",
    };
    if s.init.order.is_empty() {
        writeln!(out, "  init: no parameters").unwrap();
    } else {
        writeln!(
            out,
            "  init: {} defaults, {generator}, in order {}{}",
            match s.init.scheme {
                Scheme::Torch => "torch",
                Scheme::Flax => "flax",
            },
            s.init.order.join(", "),
            if s.layers
                .iter()
                .any(|l| matches!(&l.op, Op::Linear { tie: Some(_), .. }))
            {
                " (tied weights drawn, then shared)"
            } else {
                ""
            }
        )
        .unwrap();
    }
    writeln!(out, "  checks (tolerance atol/rtol per policy):").unwrap();
    let pols: Vec<&crate::scenario::config::Policy> = file
        .common
        .default_policies
        .iter()
        .filter_map(|n| file.policies.iter().find(|p| &p.name == n))
        .collect();
    for c in &g.checks {
        let tols: Vec<String> = pols
            .iter()
            .map(|p| {
                let t = p.tolerance(&c.name);
                format!("{} {}/{}", p.name, num(t.atol), num(t.rtol))
            })
            .collect();
        let kind = if c.kind.name() == "value" {
            String::new()
        } else {
            format!(" {}", c.kind.name())
        };
        let red = c.reduction.map_or(String::new(), |r| {
            format!(
                ", K {} (largest shard {} over {} rank{})",
                r.k,
                r.max_shard,
                r.ranks,
                if r.ranks == 1 { "" } else { "s" }
            )
        });
        writeln!(
            out,
            "    {:<18} {} {} at {}{kind}{red}: {}",
            c.name,
            c.tensor,
            shape(&c.shape),
            c.at.name(),
            tols.join(", ")
        )
        .unwrap();
    }
    for (name, why) in &g.skipped {
        writeln!(out, "    {name:<18} skipped: {why}").unwrap();
    }
    let mutants: Vec<&str> = ir.mutants().iter().map(|m| m.name()).collect();
    writeln!(
        out,
        "  mutants (from the parallelism): {}",
        if mutants.is_empty() {
            "none".to_string()
        } else {
            mutants.join(", ")
        }
    )
    .unwrap();
}

/// The text `seedsweep check` prints for a validated file.
pub fn check_text(file: &ScenarioFile) -> Result<String, InputError> {
    let mut registry = ProfileRegistry::builtin()?;
    registry.add(&file.common.file, &file.common.extra_profiles)?;
    for spec in &file.common.profiles {
        registry.resolve(spec, "default_profiles").map_err(|e| {
            InputError::config(&file.common.file, "default_profiles", e.to_string())
        })?;
    }
    let wire_note = profile_wire(file, &registry);
    let c = &file.common;
    let mut out = String::new();
    writeln!(out, "{}: ok, scenario {}", c.file, c.name).unwrap();
    if !c.description.is_empty() {
        writeln!(out, "  {}", c.description).unwrap();
    }
    writeln!(
        out,
        "  rng {}, first seed {}, asserted comparison {}, default profiles {}, default policies {}",
        c.rng.name(),
        c.first_seed,
        if file.layout_vs_layout() {
            "layout-vs-layout (in outputs sharded-vs-ref: the sharded layout against the reference layout)"
        } else {
            file.compare.name()
        },
        c.profiles.join(", "),
        c.default_policies.join(", ")
    )
    .unwrap();
    writeln!(
        out,
        "  {} parametrization{}, checks {}",
        file.graphs.len(),
        if file.graphs.len() == 1 { "" } else { "s" },
        file.check_names.join(", ")
    )
    .unwrap();
    for (i, (g, ir)) in file.graphs.iter().zip(&file.lowered).enumerate() {
        let reference = file.references.get(i).and_then(|r| r.as_ref());
        graph_text(
            &mut out,
            file,
            g,
            ir,
            reference.map(|r| &r.graph),
            &wire_note,
        );
    }
    Ok(out)
}

/// Reads, validates and describes the scenario file at `path` (`seedsweep check FILE`).
pub fn check_path(path: &std::path::Path) -> anyhow::Result<String> {
    let text = crate::scenario::config::read_config(path, "FILE")?;
    check_source(&path.display().to_string(), &text)
}

/// [`check_path`] of a file's text, named `name` in errors: the file is loaded
/// ([`crate::scenario::load`], so what a sweep would refuse is refused here too).
pub fn check_source(name: &str, text: &str) -> anyhow::Result<String> {
    let file = crate::scenario::load(name, text)?;
    Ok(if file.outer {
        outer_check_text(&file.common, &file.lowered[0], file.compare)?
    } else {
        check_text(&file)?
    })
}

/// The one line `list` prints for a loaded file's scenario: its layers, degrees, steps and
/// optimizer (or, for an outer-loop file, its widths, replicas and the two optimizers).
pub fn summary(file: &ScenarioFile) -> String {
    if file.outer {
        return file.lowered.first().map(outer_summary).unwrap_or_default();
    }
    let s = &file.graphs[0].spec;
    let opt = &s.train.optimizer;
    let mut out = format!("graph of {} layers", s.layers.len());
    if s.parallel.tp > 1 {
        out.push_str(&format!(", TP {}", s.parallel.tp));
    }
    if s.parallel.dp > 1 {
        out.push_str(&format!(", DP {}", s.parallel.dp));
    }
    out.push_str(&format!(", {} steps", s.train.steps));
    if s.train.micro_steps > 1 {
        out.push_str(&format!(" x {} micro-steps", s.train.micro_steps));
    }
    out.push_str(&format!(", {} lr {}", opt.name(), opt.lr()));
    out
}

/// `list`'s line for an outer-loop graph.
fn outer_summary(g: &crate::scenario::ir::ResolvedGraph) -> String {
    use crate::scenario::ir::OuterData;
    use crate::scenario::profile::XlaMode;
    let Some(o) = g.train.outer.as_ref() else {
        return String::new();
    };
    let widths: Vec<String> = {
        let mut w = Vec::new();
        for l in &g.layers {
            if let crate::scenario::ir::Op::Linear { x, out, .. } = l.op {
                if w.is_empty() {
                    w.push(g.width(x).to_string());
                }
                w.push(g.width(out).to_string());
            }
        }
        w
    };
    let mlp = g.layers.len() > 1;
    let inner = match g.train.optimizer {
        crate::scenario::ir::Optimizer::Sgd { .. } => "sgd",
        crate::scenario::ir::Optimizer::Adam { .. } => "adamw",
    };
    let (outer_lr, momentum, nesterov) = match o.optimizer {
        crate::scenario::ir::Optimizer::Sgd {
            lr,
            momentum,
            nesterov,
            ..
        } => (lr, momentum, nesterov),
        crate::scenario::ir::Optimizer::Adam { lr, .. } => (lr, 0.0, false),
    };
    let nest = if nesterov { " nesterov" } else { "" };
    match o.data {
        OuterData::Teacher { .. } => format!(
            "{} {}, batch {} per replica, {} replicas, sync every {} inner steps ({} steps), \
             inner {inner}, outer sgd lr {outer_lr} momentum {momentum}{nest}",
            if mlp { "mlp" } else { "linear" },
            widths.join("->"),
            g.rows(g.loss.input),
            o.replicas,
            o.sync_period,
            o.steps,
        ),
        OuterData::Fixed { .. } => {
            let (mode, other) = match o.default_mode {
                XlaMode::Eager => ("eager", "jit"),
                XlaMode::Jit => ("jit", "eager"),
            };
            format!(
                "fixed data: {} {}, {} replicas, inner {inner} lr {}, sync every {} steps with \
                 sgd lr {outer_lr} momentum {momentum}{nest}, {} steps; JAX {mode} unless the \
                 profile says xla-{other}",
                if mlp { "mlp" } else { "dense" },
                widths.join("->"),
                o.replicas,
                g.train.optimizer.lr(),
                o.sync_period,
                o.steps
            )
        }
    }
}

/// The text `seedsweep check` prints for a file with a DiLoCo outer loop: its lowered graph
/// (one replica's tensors, flax kernels), the inner step and its execution mode, the outer
/// loop (replicas = dp ranks, sync period, the pseudo-gradient and loss all-reduces with
/// their ranks and wire dtype, the outer optimizer), the checks with their schedule and
/// tolerance per default policy, and the mutants.
pub fn outer_check_text(
    common: &crate::scenario::config::CommonConfig,
    g: &crate::scenario::ir::ResolvedGraph,
    compare: crate::check::comparison::Comparison,
) -> Result<String, InputError> {
    use crate::scenario::ir::{self as ir, OuterCheckKind, OuterData};
    let Some(o) = g.train.outer.as_ref() else {
        return Err(InputError::config(&common.file, "train.outer", "required"));
    };
    let mut registry = ProfileRegistry::builtin()?;
    registry.add(&common.file, &common.extra_profiles)?;
    let mut wires = Vec::new();
    for spec in &common.profiles {
        let p = registry
            .resolve(spec, "default_profiles")
            .map_err(|e| InputError::config(&common.file, "default_profiles", e.to_string()))?;
        wires.push(format!(
            "{} {} in {spec}",
            format!("{:?}", p.wire).to_lowercase(),
            format!("{:?}", p.allreduce).to_lowercase()
        ));
    }
    let names: Vec<&str> = o.checks.iter().map(|c| c.name.as_str()).collect();
    let policies = crate::scenario::config::resolve_policies(common, &names)?;
    let mut out = String::new();
    writeln!(out, "{}: ok, scenario {}", common.file, common.name).unwrap();
    if !common.description.is_empty() {
        writeln!(out, "  {}", common.description).unwrap();
    }
    writeln!(
        out,
        "  rng {}, first seed {}, asserted comparison {}, default profiles {}, default policies {}",
        common.rng.name(),
        common.first_seed,
        compare.name(),
        common.profiles.join(", "),
        common.default_policies.join(", ")
    )
    .unwrap();
    writeln!(out, "  1 parametrization, checks {}", names.join(", ")).unwrap();
    let nr = o.replicas;
    writeln!(
        out,
        "  [{}] one replica's graph (dp {nr} replicas, replica r takes block r of every input's leading axis)",
        g.id
    )
    .unwrap();
    for d in &g.inputs.draws {
        let per: Vec<usize> = d
            .shape
            .iter()
            .enumerate()
            .map(|(i, &v)| if i == 0 { v / nr } else { v })
            .collect();
        let how = match &o.data {
            OuterData::Fixed { .. } => "written in the file".to_string(),
            OuterData::Teacher { noise_std } => {
                if d.tensor.is_some() {
                    "drawn per seed: N(0, 1) from data.replica{r}.x".to_string()
                } else {
                    format!(
                        "drawn per seed: x T + tb + {} N(0, 1), teacher data.teacher / \
                         data.teacher.bias, noise data.replica{{r}}.noise",
                        num(*noise_std)
                    )
                }
            }
        };
        writeln!(
            out,
            "    input {:<10} {} global, every replica {}: {how}",
            d.name,
            shape(&d.shape),
            shape(&per)
        )
        .unwrap();
    }
    for l in &g.layers {
        let text = match l.op {
            ir::Op::Linear {
                x, weight, out: y, ..
            } => format!(
                "linear {} -> {}, flax kernel {} [in, out] x {} + bias",
                shape(&g.tensors[x.0].shape),
                shape(&g.tensors[y.0].shape),
                g.params[weight.0].name,
                shape(&[g.width(x), g.width(y)])
            ),
            ir::Op::Activation { x, .. } => {
                format!("tanh {}", shape(&g.tensors[x.0].shape))
            }
            _ => "?".to_string(),
        };
        writeln!(out, "    layer {:<10} {text}", l.name).unwrap();
    }
    let inner = match g.train.optimizer {
        ir::Optimizer::Sgd { lr, .. } => format!("optax.sgd(lr={})", num(lr)),
        ir::Optimizer::Adam {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            ..
        } => format!(
            "optax.adamw(lr={}, b1={}, b2={}, eps={}, weight_decay={})",
            num(lr),
            num(beta1),
            num(beta2),
            num(eps),
            num(weight_decay)
        ),
    };
    let (mode, other) = match o.default_mode {
        crate::scenario::profile::XlaMode::Eager => ("eager", "jit"),
        crate::scenario::profile::XlaMode::Jit => ("jit", "eager"),
    };
    writeln!(
        out,
        "  inner step (per replica, every step): forward, mse loss on {}, backward, {inner}; JAX {mode} unless the profile says xla-{other}",
        g.tensors[g.loss.input.0].name
    )
    .unwrap();
    let outer_opt = match o.optimizer {
        ir::Optimizer::Sgd {
            lr,
            momentum,
            nesterov,
            ..
        } => format!(
            "optax.sgd(lr={}, momentum={}, nesterov={nesterov})",
            num(lr),
            num(momentum)
        ),
        ir::Optimizer::Adam { lr, .. } => format!("adam(lr={})", num(lr)),
    };
    let np: usize = g
        .params
        .iter()
        .map(|p| p.shape.iter().product::<usize>())
        .sum();
    writeln!(
        out,
        "  outer loop: {nr} replicas, {} inner steps, sync after every step k with k % {} == 0 ({} sync{})",
        o.steps,
        o.sync_period,
        o.steps / o.sync_period,
        if o.steps / o.sync_period == 1 { "" } else { "s" }
    )
    .unwrap();
    writeln!(
        out,
        "    loss: all-reduce(sum) of the {nr} replicas' losses over dp ranks 0..{}, / {nr}, every step",
        nr - 1
    )
    .unwrap();
    writeln!(
        out,
        "    pseudo-gradient: all-reduce(sum) of outer - inner_r ({np} values, flat) over dp ranks 0..{}, / {nr}; wire {}",
        nr - 1,
        wires.join("; ")
    )
    .unwrap();
    writeln!(
        out,
        "    outer step {outer_opt}, contracted (jax.lax.cond); then every replica takes the outer parameters, inner optimizer state kept"
    )
    .unwrap();
    writeln!(
        out,
        "    reference: the same sums in rank order on one device (f32); f64: ground truth"
    )
    .unwrap();
    let init = match o.data {
        OuterData::Fixed { .. } => "written in the file (kernels [in, out], row-major)",
        OuterData::Teacher { .. } => {
            "flax defaults: kernel j from ChaCha stream init.w{j}, N(0, 1/fan_in); biases 0"
        }
    };
    writeln!(out, "  init: {init}").unwrap();
    writeln!(out, "  checks (tolerance atol/rtol per policy):").unwrap();
    let pols: Vec<&crate::scenario::config::Policy> = common
        .default_policies
        .iter()
        .filter_map(|n| policies.iter().find(|p| &p.name == n))
        .collect();
    for c in &o.checks {
        let (what, sh) = match c.kind {
            OuterCheckKind::Loss => ("loss, every step", vec![]),
            OuterCheckKind::OuterUnchanged => (
                "outer parameters == their value before the step, every non-sync step (exact self-consistency)",
                vec![np],
            ),
            OuterCheckKind::OuterParams => ("outer parameters, after every sync", vec![np]),
            OuterCheckKind::InnerEqualsOuter => (
                "every replica's parameters == the outer ones, after every sync (exact self-consistency)",
                vec![nr, np],
            ),
        };
        let tols: Vec<String> = pols
            .iter()
            .map(|p| {
                let t = p.tolerance(&c.name);
                format!("{} {}/{}", p.name, num(t.atol), num(t.rtol))
            })
            .collect();
        writeln!(
            out,
            "    {:<18} {} {what}: {}",
            c.name,
            shape(&sh),
            tols.join(", ")
        )
        .unwrap();
    }
    let mutants: Vec<&str> = g.mutants().iter().map(|m| m.name()).collect();
    writeln!(
        out,
        "  mutants (from the outer loop): {}",
        if mutants.is_empty() {
            "none".to_string()
        } else {
            mutants.join(", ")
        }
    )
    .unwrap();
    Ok(out)
}
