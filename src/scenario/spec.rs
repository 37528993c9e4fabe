//! The parsed description of one parametrization: the file's tables with one `[[params]]`
//! entry applied and every dim replaced by its size. Shapes and shards are checked later, by
//! [`super::resolve`].

use std::collections::BTreeMap;

use crate::sys::error::InputError;

use super::node::{check_name, DimValue, Obj, MAX_SIZE};
use super::values::{read_values, ValueType};
use crate::scenario::ir::{FixedValues, MoeCombine};

/// DeepSpeed's or Megatron's rule for splitting a size over ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardRule {
    /// DeepSpeed AutoTP's near-even split in grains (uneven shards allowed).
    DeepSpeed,
    /// Megatron-LM's `divide`: the size must be a multiple of the degree.
    Megatron,
}

/// `[parallel]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Parallel {
    /// Tensor-parallel degree.
    pub tp: usize,
    /// Data-parallel degree.
    pub dp: usize,
    /// Shard rule.
    pub rule: ShardRule,
    /// DeepSpeed's grain.
    pub grain: usize,
    /// ZeRO stage.
    pub zero_stage: u8,
    /// `grad_sync = "step"`: a reduce-scatter (zero_stage >= 2) waits for the last
    /// micro-step, the ranks accumulating locally (`no_sync`); `"micro-step"` (the default
    /// there): one after every micro-step. An all-reduce always runs at the step.
    pub sync_at_step: bool,
    /// HSDP's replicate degree (`dp_replicate`): the `dp` ranks form a `dp_replicate ×
    /// dp_shard` mesh (rank `r·dp_shard + s`), parameters sharded over `dp_shard`, gradients
    /// reduce-scattered over the shard group and all-reduced over the replicate group. 1: a
    /// 1-D data-parallel group (`dp` alone, or `dp_shard` alone).
    pub dp_replicate: usize,
    /// `[parallel.reference]`: the layout the reference computation runs under (`compare =
    /// "layout-vs-layout"`), its `shard_rule` and `tp_grain` this table's. `None`: the
    /// reference is unsharded.
    pub reference: Option<Box<Parallel>>,
}

/// `[data]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Data {
    /// Base seed of the input draws: micro-step m of step s draws after
    /// `manual_seed(seed + micro_steps·s + m)`.
    pub seed: u64,
}

/// How an input is drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum Draw {
    /// Standard normal float32.
    Randn,
    /// Uniform float32 in [0, 1) (`torch.rand`). `seeded`: drawn once per sweep seed, right
    /// after `torch.manual_seed(seed)` and before any weight, as a test that draws its
    /// tensors after its own `manual_seed` (`seeded = true`); else per micro-step as `randn`.
    Rand {
        /// Drawn from the sweep seed's generator (else from `[data]`'s per micro-step).
        seeded: bool,
    },
    /// int64 in `0..high`.
    Randint {
        /// Exclusive upper bound.
        high: i64,
    },
    /// Written in the file (`draw = "fixed"`, `values`).
    Fixed {
        /// Row-major over the global shape, or with `per_rank` over one rank's shard.
        values: FixedValues,
        /// `values` are one TP rank's shard, the same on every rank (`per_rank = true`).
        per_rank: bool,
    },
}

impl Draw {
    /// Whether the input holds int64 values.
    pub fn is_int(&self) -> bool {
        matches!(
            self,
            Self::Randint { .. }
                | Self::Fixed {
                    values: FixedValues::I64(_),
                    ..
                }
        )
    }
}

/// How an input is split over the TP ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputParallel {
    /// Every rank holds the whole input.
    None,
    /// Rank r holds shard r of the last dim (by the shard rule), as a `column` layer's output:
    /// the vocab-sharded logits a test hands to a vocab-parallel loss.
    LastDim,
}

/// One fix-up `name[index] = value` after the draw.
#[derive(Debug, Clone, PartialEq)]
pub struct SetOp {
    /// Multi-index into the input.
    pub index: Vec<usize>,
    /// The value.
    pub value: i64,
}

/// One `[[inputs]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// Name.
    pub name: String,
    /// Draw.
    pub draw: Draw,
    /// Global shape.
    pub shape: Vec<usize>,
    /// Fix-ups, in order (those naming an unset layer key already dropped).
    pub set: Vec<SetOp>,
    /// Whether its gradient is computed.
    pub grad: bool,
    /// TP split.
    pub parallel: InputParallel,
}

/// Elementwise activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// `tanh`.
    Tanh,
    /// Exact gelu (erf).
    Gelu,
    /// gelu's tanh approximation.
    GeluTanh,
    /// `relu`.
    Relu,
    /// `silu`.
    Silu,
}

impl Act {
    /// The op name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tanh => "tanh",
            Self::Gelu => "gelu",
            Self::GeluTanh => "gelu-tanh",
            Self::Relu => "relu",
            Self::Silu => "silu",
        }
    }
}

/// A layer's op and its op-specific keys.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `nn.Embedding(num, dim, padding_idx)`.
    Embedding {
        /// Rows.
        num: usize,
        /// Columns.
        dim: usize,
        /// Padding row.
        padding_idx: Option<usize>,
    },
    /// `nn.Linear(in, out, bias)`, optionally sharing another layer's weight.
    Linear {
        /// Out-features.
        out: usize,
        /// With a bias.
        bias: bool,
        /// The layer whose weight this one shares.
        tie: Option<String>,
    },
    /// An elementwise activation.
    Act(Act),
    /// `nn.LayerNorm(last dim, eps, elementwise_affine)`.
    LayerNorm {
        /// Epsilon.
        eps: f64,
        /// Weight and bias.
        affine: bool,
    },
    /// `nn.RMSNorm(last dim, eps, elementwise_affine)`.
    RmsNorm {
        /// Epsilon.
        eps: f64,
        /// Weight.
        affine: bool,
    },
    /// `a + b` or `a * b` of two tensors of one shape (`inputs = [a, b]`).
    Binary {
        /// Which op, as spelt.
        kind: Binary,
        /// The second input (the first is the layer's `input`).
        other: String,
    },
    /// `F.softmax(x, -1)`.
    Softmax,
    /// A mixture-of-experts layer ([`crate::ops::moe`]): a router linear without bias,
    /// softmax over the experts, top-k, optional renormalisation, `experts` MLPs, and the
    /// weighted combine.
    Moe {
        /// Experts.
        experts: usize,
        /// Experts per token.
        top_k: usize,
        /// Each expert's hidden width.
        ffn: usize,
        /// The experts' activation.
        act: Act,
        /// SwiGLU-style gated experts (`act(x·W1ᵀ) * (x·W3ᵀ)`).
        gated: bool,
        /// Renormalise the top-k weights to sum to one.
        norm_topk: bool,
        /// Expert-parallel degree (experts split over this many ranks).
        expert_parallel: usize,
        /// The sharded computation's combine.
        combine: MoeCombine,
        /// The reference's combine (default: `combine`).
        reference_combine: MoeCombine,
    },
    /// `F.scaled_dot_product_attention(q, k, v, is_causal, scale)` (torch's math path) on
    /// `[batch, seq, heads·head_dim]` tensors; `q` is the layer's `input`.
    Sdpa {
        /// The key tensor.
        k: String,
        /// The value tensor.
        v: String,
        /// Heads.
        heads: usize,
        /// `is_causal`.
        causal: bool,
        /// `scale` (`None`: torch's default `1/sqrt(head_dim)`).
        scale: Option<f64>,
        /// Context parallelism: the ring's degree (`cp`, 1 = none). The sharded computation
        /// runs torch's ring attention over `cp` sequence chunks ([`crate::ops::ring`]).
        cp: usize,
        /// The ring with torch's round-robin load balancing (`load_balance`).
        load_balance: bool,
    },
    /// Rotary position embeddings, HF's `rotate_half` style, on `[batch, seq, heads·head_dim]`
    /// ([`crate::ops::rope`]).
    Rope {
        /// Heads.
        heads: usize,
        /// The frequency base.
        theta: f64,
    },
}

/// An elementwise op of two tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// `residual-add`: `a + b` (the older spelling of `add`).
    ResidualAdd,
    /// `add`: `a + b`.
    Add,
    /// `mul`: `a * b`.
    Mul,
}

impl Binary {
    /// The op name as written.
    pub fn name(self) -> &'static str {
        match self {
            Self::ResidualAdd => "residual-add",
            Self::Add => "add",
            Self::Mul => "mul",
        }
    }
}

impl Op {
    /// The op name as written.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Embedding { .. } => "embedding",
            Self::Linear { .. } => "linear",
            Self::Act(a) => a.name(),
            Self::LayerNorm { .. } => "layernorm",
            Self::RmsNorm { .. } => "rmsnorm",
            Self::Binary { kind, .. } => kind.name(),
            Self::Softmax => "softmax",
            Self::Moe { .. } => "moe",
            Self::Sdpa { .. } => "sdpa",
            Self::Rope { .. } => "rope",
        }
    }
}

/// How a layer is sharded over the TP ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerParallel {
    /// Replicated.
    None,
    /// Output features sharded, output left sharded.
    Column,
    /// Output features sharded, output all-gathered.
    ColumnGather,
    /// Input features sharded, partials all-reduced.
    Row,
    /// Embedding rows sharded, outputs all-reduced.
    Vocab,
    /// Tokens sharded (sequence parallelism).
    Sequence,
}

impl LayerParallel {
    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Column => "column",
            Self::ColumnGather => "column-gather",
            Self::Row => "row",
            Self::Vocab => "vocab",
            Self::Sequence => "sequence",
        }
    }
}

/// One `[[layers]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Name.
    pub name: String,
    /// Op.
    pub op: Op,
    /// The tensor it reads.
    pub input: String,
    /// Sharding.
    pub parallel: LayerParallel,
    /// The test's attribute name.
    pub attr: String,
}

/// The loss op.
#[derive(Debug, Clone, PartialEq)]
pub enum LossOp {
    /// Softmax cross-entropy against int64 labels.
    CrossEntropy {
        /// The labels input.
        labels: String,
    },
    /// Mean squared error against a target.
    Mse {
        /// The target input.
        target: String,
    },
    /// `out.sum()`: the sum of the input's elements (no labels or target).
    Sum,
}

/// `[loss]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Loss {
    /// Op.
    pub op: LossOp,
    /// The logits / prediction.
    pub input: String,
    /// Vocab-parallel.
    pub vocab_parallel: bool,
}

/// An optimizer with torch's update formula.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// `torch.optim.SGD(lr, weight_decay)`.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// L2 weight decay.
        weight_decay: f64,
    },
    /// `torch.optim.SGD(lr, momentum, nesterov, weight_decay)`.
    Momentum {
        /// Learning rate.
        lr: f64,
        /// Momentum.
        momentum: f64,
        /// Dampening.
        dampening: f64,
        /// Nesterov.
        nesterov: bool,
        /// L2 weight decay.
        weight_decay: f64,
    },
    /// `torch.optim.Adam` / `AdamW`.
    Adam {
        /// Learning rate.
        lr: f64,
        /// Betas.
        betas: (f64, f64),
        /// Epsilon.
        eps: f64,
        /// Weight decay.
        weight_decay: f64,
        /// AdamW's decoupled decay.
        decoupled: bool,
    },
}

impl Optimizer {
    /// The name as written.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sgd { .. } => "sgd",
            Self::Momentum {
                nesterov: false, ..
            } => "momentum",
            Self::Momentum { nesterov: true, .. } => "nesterov",
            Self::Adam {
                decoupled: false, ..
            } => "adam",
            Self::Adam {
                decoupled: true, ..
            } => "adamw",
        }
    }
    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match *self {
            Self::Sgd { lr, .. } | Self::Momentum { lr, .. } | Self::Adam { lr, .. } => lr,
        }
    }
}

/// `[train.outer]`: DiLoCo.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outer {
    /// Outer rounds, each of `train.steps` inner steps.
    pub rounds: usize,
    /// Outer optimizer (SGD family).
    pub optimizer: Optimizer,
}

/// `[train]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Train {
    /// Optimizer steps.
    pub steps: usize,
    /// Micro-steps per step.
    pub micro_steps: usize,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// DiLoCo outer loop.
    pub outer: Option<Outer>,
}

/// Weight init scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// torch's layer defaults.
    Torch,
    /// flax's: kernels N(0, 1/in), biases 0.
    Flax,
}

/// `[init]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Init {
    /// Layers with weights in construction order.
    pub order: Vec<String>,
    /// Scheme.
    pub scheme: Scheme,
}

/// When a check records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Every micro-step.
    MicroStep,
    /// After every optimizer step.
    Step,
    /// At the optimizer step, labelled by its last micro-step.
    Update,
}

impl At {
    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            Self::MicroStep => "micro-step",
            Self::Step => "step",
            Self::Update => "update",
        }
    }
}

/// What a check compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    /// The tensor across the three computations.
    Value,
    /// The parameter after the update against `old - lr·grad` as the test writes it.
    SgdUpdate,
}

impl CheckKind {
    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            Self::Value => "value",
            Self::SgdUpdate => "sgd-update",
        }
    }
}

/// One `[[checks]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Name.
    pub name: String,
    /// Tensor name.
    pub tensor: String,
    /// When; `None`: the tensor's default.
    pub at: Option<At>,
    /// Kind.
    pub kind: CheckKind,
    /// Skipped where the tensor does not exist.
    pub optional: bool,
}

/// One parametrization, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Dims after the entry's overrides.
    pub dims: BTreeMap<String, DimValue>,
    /// `[parallel]`.
    pub parallel: Parallel,
    /// `[data]`.
    pub data: Data,
    /// `[[inputs]]`.
    pub inputs: Vec<Input>,
    /// `[[layers]]`.
    pub layers: Vec<Layer>,
    /// `[loss]`.
    pub loss: Loss,
    /// `[train]`.
    pub train: Train,
    /// `[init]`.
    pub init: Init,
    /// `[[checks]]`.
    pub checks: Vec<Check>,
}

/// Keys of the document that [`parse_spec`] reads (the others are read by [`super::file`]).
pub const GRAPH_KEYS: &[&str] = &[
    "dims", "parallel", "data", "inputs", "layers", "loss", "train", "init", "checks",
];

/// Keys every layer may have; each op adds its own ([`op_keys`]).
const COMMON_LAYER_KEYS: &[&str] = &["name", "op", "input", "parallel", "attr"];

/// Every key some layer may have: the common ones, then each op's in [`OPS`] order.
fn layer_keys() -> Vec<&'static str> {
    let mut keys = COMMON_LAYER_KEYS.to_vec();
    for k in OPS.iter().flat_map(|op| op_keys(op)) {
        if !keys.contains(k) {
            keys.push(k);
        }
    }
    keys
}

const OPS: &[&str] = &[
    "embedding",
    "linear",
    "tanh",
    "gelu",
    "gelu-tanh",
    "relu",
    "silu",
    "layernorm",
    "rmsnorm",
    "residual-add",
    "softmax",
    "sdpa",
    "rope",
    "moe",
    "add",
    "mul",
];

/// Keys each op allows besides the common ones.
fn op_keys(op: &str) -> &'static [&'static str] {
    match op {
        "embedding" => &["num", "dim", "padding_idx"],
        "linear" => &["out", "bias", "tie"],
        "layernorm" | "rmsnorm" => &["eps", "affine"],
        "residual-add" | "add" | "mul" => &["inputs"],
        "sdpa" => &["inputs", "heads", "causal", "scale", "cp", "load_balance"],
        "rope" => &["heads", "theta", "style"],
        "moe" => &[
            "experts",
            "top_k",
            "ffn",
            "activation",
            "gated",
            "norm_topk",
            "expert_parallel",
            "combine",
            "reference_combine",
        ],
        _ => &[],
    }
}

/// Sharding modes each op allows.
pub fn op_parallels(op: &str) -> &'static [&'static str] {
    match op {
        "linear" => &["none", "column", "column-gather", "row"],
        "embedding" => &["none", "vocab", "column-gather"],
        "layernorm" | "rmsnorm" => &["none", "sequence"],
        _ => &["none"],
    }
}

fn parse_dims(doc: &Obj<'_>) -> Result<BTreeMap<String, DimValue>, InputError> {
    let mut dims = BTreeMap::new();
    let Some(t) = doc.table.get("dims") else {
        return Ok(dims);
    };
    let toml::Value::Table(t) = t else {
        return Err(doc.err("dims", "must be a table of named sizes"));
    };
    for (k, v) in t {
        let path = format!("dims.{k}");
        let bad_name = k.is_empty()
            || k.len() > 64
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if bad_name {
            return Err(doc.ctx.err(
                &path,
                format!(
                    "dim name `{k}` is not allowed; allowed: 1 to 64 letters, digits, '-' and '_'"
                ),
            ));
        }
        let size = |p: &str, v: &toml::Value| -> Result<usize, InputError> {
            match v {
                toml::Value::Integer(i) if (1..=MAX_SIZE as i64).contains(i) => Ok(*i as usize),
                v => Err(doc.ctx.err(
                    p,
                    format!(
                        "{} is not allowed; allowed: an integer in 1..={MAX_SIZE} or a list of 1 to 4 of them",
                        describe(v)
                    ),
                )),
            }
        };
        let d = match v {
            toml::Value::Array(a) => {
                if a.is_empty() || a.len() > 4 {
                    return Err(doc.ctx.err(
                        &path,
                        format!(
                            "a list of {} sizes is not allowed; allowed: 1 to 4 sizes",
                            a.len()
                        ),
                    ));
                }
                let mut l = Vec::new();
                for (i, x) in a.iter().enumerate() {
                    l.push(size(&format!("{path}[{i}]"), x)?);
                }
                DimValue::List(l)
            }
            v => DimValue::Int(size(&path, v)?),
        };
        dims.insert(k.clone(), d);
    }
    Ok(dims)
}

fn describe(v: &toml::Value) -> String {
    match v {
        toml::Value::Integer(i) => i.to_string(),
        v => super::node::type_name(v).to_string(),
    }
}

/// Keys of `[parallel]`; `[parallel.reference]` takes the layout keys, not the shard rule
/// (shared with the layout it is compared with) or another `reference`.
const PARALLEL_KEYS: &[&str] = &[
    "tp",
    "dp",
    "shard_rule",
    "tp_grain",
    "zero_stage",
    "grad_sync",
    "dp_replicate",
    "dp_shard",
    "reference",
];
const REFERENCE_KEYS: &[&str] = &[
    "tp",
    "dp",
    "dp_replicate",
    "dp_shard",
    "zero_stage",
    "grad_sync",
];

fn parse_parallel(doc: &Obj<'_>) -> Result<Parallel, InputError> {
    let empty = toml::Table::new();
    let o = doc.opt_table("parallel", PARALLEL_KEYS)?.unwrap_or(Obj {
        ctx: doc.ctx,
        path: "parallel".into(),
        table: &empty,
    });
    let rule = match o.choice("shard_rule", &["deepspeed", "megatron"], "deepspeed")? {
        "megatron" => ShardRule::Megatron,
        _ => ShardRule::DeepSpeed,
    };
    if rule == ShardRule::Megatron && o.has("tp_grain") {
        return Err(o.err(
            "tp_grain",
            "is DeepSpeed's tp_grain_size and not allowed with shard_rule = \"megatron\"; allowed: leave it out, or shard_rule = \"deepspeed\"",
        ));
    }
    let grain = o.int("tp_grain", 1, MAX_SIZE as i64, 1)? as usize;
    let mut p = parse_layout(&o, rule, grain)?;
    if let Some(r) = o.opt_table("reference", REFERENCE_KEYS)? {
        p.reference = Some(Box::new(parse_layout(&r, rule, grain)?));
    }
    Ok(p)
}

/// The layout keys of `[parallel]` or `[parallel.reference]` (`o`): degrees, the HSDP mesh,
/// the ZeRO stage and when gradients are synchronised.
fn parse_layout(o: &Obj<'_>, rule: ShardRule, grain: usize) -> Result<Parallel, InputError> {
    let zero_stage = o.int("zero_stage", 0, 3, 0)? as u8;
    let sync = o.choice("grad_sync", &["micro-step", "step"], "micro-step")?;
    if zero_stage < 2 && sync == "micro-step" && o.has("grad_sync") {
        return Err(o.err(
            "grad_sync",
            "an all-reduce (zero_stage 0 or 1) runs once per step, after local accumulation; \
             allowed: \"step\", or zero_stage = 2 or 3",
        ));
    }
    let dp = o.opt_int("dp", 1, 64)?.map(|d| d as usize);
    let replicate = o.opt_int("dp_replicate", 1, 64)?.map(|d| d as usize);
    let shard = o.opt_int("dp_shard", 1, 64)?.map(|d| d as usize);
    let dp = match (replicate, shard) {
        (None, None) => dp.unwrap_or(1),
        (Some(_), None) => {
            return Err(o.err(
                "dp_replicate",
                "an HSDP mesh is dp_replicate × dp_shard; allowed: give dp_shard too \
                 (dp_shard = 4 with dp_replicate = 2 is HSDP 2 × 4), or use dp alone",
            ))
        }
        (r, Some(s)) => {
            let r = r.unwrap_or(1);
            let product = r * s;
            if product > 64 {
                return Err(o.err(
                    "dp_shard",
                    format!(
                        "dp_replicate × dp_shard = {r} × {s} = {product} data-parallel ranks; \
                         allowed: a product of at most 64"
                    ),
                ));
            }
            if let Some(d) = dp.filter(|&d| d != product) {
                return Err(o.err(
                    "dp",
                    format!(
                        "dp = {d} disagrees with dp_replicate × dp_shard = {r} × {s} = \
                         {product}; allowed: dp = {product}, or leave dp out"
                    ),
                ));
            }
            if r > 1 && zero_stage < 2 {
                return Err(o.err(
                    "dp_replicate",
                    format!(
                        "HSDP (dp_replicate = {r}) shards parameters and gradients over \
                         dp_shard; allowed: zero_stage = 2 or 3 with it, or dp = {product} \
                         alone for DDP"
                    ),
                ));
            }
            product
        }
    };
    Ok(Parallel {
        tp: o.int("tp", 1, 64, 1)? as usize,
        dp,
        rule,
        grain,
        zero_stage,
        sync_at_step: sync == "step",
        dp_replicate: replicate.unwrap_or(1),
        reference: None,
    })
}

fn parse_data(doc: &Obj<'_>) -> Result<Data, InputError> {
    let empty = toml::Table::new();
    let o = doc.opt_table("data", &["seed"])?.unwrap_or(Obj {
        ctx: doc.ctx,
        path: "data".into(),
        table: &empty,
    });
    Ok(Data {
        seed: o.int("seed", 0, i64::MAX / 2, 0)? as u64,
    })
}

/// The value of a layer key named by a fix-up (`embedding.padding_idx`), from the raw
/// layers: `Ok(None)` when the layer exists but the key is not set.
fn layer_key_value(doc: &Obj<'_>, path: &str, name: &str) -> Result<Option<i64>, InputError> {
    let (layer, key) = name.split_once('.').unwrap_or((name, ""));
    let layers = match doc.table.get("layers") {
        Some(toml::Value::Array(a)) => a.as_slice(),
        _ => &[],
    };
    for l in layers {
        let Some(t) = l.as_table() else { continue };
        if t.get("name").and_then(|n| n.as_str()) == Some(layer) {
            return match t.get(key) {
                None => Ok(None),
                Some(toml::Value::Integer(i)) => Ok(Some(*i)),
                Some(_) => Err(doc.ctx.err(
                    path,
                    format!("`{name}` is not an integer; allowed: an integer, a dim, or an integer layer key"),
                )),
            };
        }
    }
    Err(doc.ctx.err(
        path,
        format!("`{name}` names no dim and no layer key; allowed: an integer, a dim, or `<layer>.<key>` such as `embedding.padding_idx`"),
    ))
}

fn parse_inputs(
    doc: &Obj<'_>,
    dims: &BTreeMap<String, DimValue>,
) -> Result<Vec<Input>, InputError> {
    let mut out: Vec<Input> = Vec::new();
    for o in doc.tables(
        "inputs",
        &[
            "name", "draw", "shape", "high", "set", "grad", "values", "dtype", "parallel",
            "per_rank", "seeded",
        ],
    )? {
        let name = o.name("name", false)?.to_string();
        if out.iter().any(|i| i.name == name) {
            return Err(o.err("name", format!("input `{name}` is defined twice")));
        }
        let shape = o.shape("shape", dims)?;
        let draw_kind = o.req_choice("draw", &["randn", "rand", "randint", "fixed"])?;
        if draw_kind != "rand" && o.has("seeded") {
            return Err(o.err(
                "seeded",
                format!("`seeded` is not allowed with draw = \"{draw_kind}\"; allowed only with draw = \"rand\""),
            ));
        }
        let only = |k: &str, with: &str| -> Result<(), InputError> {
            if o.has(k) {
                return Err(o.err(
                    k,
                    format!("`{k}` is not allowed with draw = \"{draw_kind}\"; allowed only with draw = \"{with}\""),
                ));
            }
            Ok(())
        };
        let parallel = match o.choice("parallel", &["none", "last-dim"], "none")? {
            "last-dim" => InputParallel::LastDim,
            _ => InputParallel::None,
        };
        let draw = match draw_kind {
            "randn" => {
                for k in ["high", "set"] {
                    only(k, "randint")?;
                }
                for k in ["values", "dtype", "per_rank"] {
                    only(k, "fixed")?;
                }
                Draw::Randn
            }
            "rand" => {
                for k in ["high", "set"] {
                    only(k, "randint")?;
                }
                for k in ["values", "dtype", "per_rank"] {
                    only(k, "fixed")?;
                }
                Draw::Rand {
                    seeded: o.bool("seeded", false)?,
                }
            }
            "fixed" => {
                for k in ["high", "set"] {
                    only(k, "randint")?;
                }
                let want = match o.opt_str("dtype")? {
                    None => None,
                    Some(_) => Some(match o.choice("dtype", &["float32", "int64"], "")? {
                        "int64" => ValueType::I64,
                        _ => ValueType::F32,
                    }),
                };
                let values = read_values(&o, "values", want, true)?;
                let per_rank = o.bool("per_rank", false)?;
                if per_rank && parallel != InputParallel::LastDim {
                    return Err(o.err(
                        "per_rank",
                        "the values of one rank's shard need a sharded input; allowed: per_rank = true with parallel = \"last-dim\", or leave it out",
                    ));
                }
                let n: usize = shape.iter().product();
                if !per_rank && values.len() != n {
                    return Err(o.err(
                        "values",
                        format!(
                            "{} values for shape {shape:?}; allowed: exactly {n} values, row-major (or per_rank = true for one rank's shard of a sharded input)",
                            values.len()
                        ),
                    ));
                }
                Draw::Fixed { values, per_rank }
            }
            _ => {
                for k in ["values", "dtype", "per_rank"] {
                    only(k, "fixed")?;
                }
                let high = match o.table.get("high") {
                    None => return Err(o.err(
                        "high",
                        "`high` is required with draw = \"randint\"; allowed: an integer or a dim",
                    )),
                    Some(v) => super::node::size_value(o.ctx, &o.key_path("high"), v, dims)? as i64,
                };
                if high < 2 {
                    return Err(o.err(
                        "high",
                        format!("{high} is not allowed; allowed: 2..={MAX_SIZE}"),
                    ));
                }
                Draw::Randint { high }
            }
        };
        let mut set = Vec::new();
        for s in o.tables("set", &["index", "value"])?.iter() {
            let idx_path = s.key_path("index");
            let index: Vec<usize> = match s.table.get("index") {
                Some(toml::Value::Array(a)) => {
                    let mut v = Vec::new();
                    for x in a {
                        match x {
                            toml::Value::Integer(i) if *i >= 0 => v.push(*i as usize),
                            _ => {
                                return Err(o.ctx.err(
                                    &idx_path,
                                    "allowed: a list of integers >= 0, one per dim of the input",
                                ))
                            }
                        }
                    }
                    v
                }
                _ => {
                    return Err(o.ctx.err(
                        &idx_path,
                        "`index` is required; allowed: a list of integers >= 0, one per dim of the input",
                    ))
                }
            };
            if index.len() != shape.len() || index.iter().zip(&shape).any(|(i, n)| i >= n) {
                return Err(o.ctx.err(
                    &idx_path,
                    format!(
                        "{index:?} is not an index of shape {shape:?}; allowed: {} integers, each below its dim",
                        shape.len()
                    ),
                ));
            }
            let val_path = s.key_path("value");
            let value = match s.table.get("value") {
                Some(toml::Value::Integer(i)) => Some(*i),
                Some(toml::Value::String(n)) => match dims.get(n.as_str()) {
                    Some(DimValue::Int(d)) => Some(*d as i64),
                    Some(DimValue::List(_)) => {
                        return Err(o.ctx.err(
                            &val_path,
                            format!("dim `{n}` is a list; allowed: an integer, an integer dim, or a layer key"),
                        ))
                    }
                    None => layer_key_value(doc, &val_path, n)?,
                },
                _ => {
                    return Err(o.ctx.err(
                        &val_path,
                        "`value` is required; allowed: an integer, a dim, or a layer key such as `embedding.padding_idx`",
                    ))
                }
            };
            if let Some(value) = value {
                set.push(SetOp { index, value });
            }
        }
        let grad = o.bool("grad", false)?;
        if grad && draw.is_int() {
            return Err(o.err(
                "grad",
                "an int64 input has no gradient; allowed: false (or draw = \"randn\")",
            ));
        }
        if parallel == InputParallel::LastDim {
            if draw.is_int() {
                return Err(o.err(
                    "parallel",
                    "an int64 input is read whole (ids, labels); allowed: \"none\"",
                ));
            }
            if grad {
                return Err(o.err(
                    "grad",
                    "the gradient of a sharded input is not modelled; allowed: false with parallel = \"last-dim\"",
                ));
            }
        }
        out.push(Input {
            name,
            draw,
            shape,
            set,
            grad,
            parallel,
        });
    }
    Ok(out)
}

fn parse_layers(
    doc: &Obj<'_>,
    dims: &BTreeMap<String, DimValue>,
) -> Result<Vec<Layer>, InputError> {
    let mut out: Vec<Layer> = Vec::new();
    // No layers: a test of a loss function alone, on its inputs (`loss.input`).
    let objs = doc.tables("layers", &layer_keys())?;
    for o in &objs {
        let name = o.name("name", false)?.to_string();
        if out.iter().any(|l| l.name == name) {
            return Err(o.err("name", format!("layer `{name}` is defined twice")));
        }
        let op_name = o.req_choice("op", OPS)?;
        let own = op_keys(op_name);
        for k in o.table.keys() {
            if !COMMON_LAYER_KEYS.contains(&k.as_str()) && !own.contains(&k.as_str()) {
                let mut allowed: Vec<&str> = COMMON_LAYER_KEYS.to_vec();
                allowed.extend_from_slice(own);
                return Err(o.err(
                    k,
                    format!(
                        "`{k}` is not a key of op `{op_name}`; allowed keys: {}",
                        allowed.join(", ")
                    ),
                ));
            }
        }
        let op = match op_name {
            "embedding" => {
                let num = o.size("num", dims)?;
                let padding_idx = o.opt_int("padding_idx", 0, num as i64 - 1)?;
                Op::Embedding {
                    num,
                    dim: o.size("dim", dims)?,
                    padding_idx: padding_idx.map(|p| p as usize),
                }
            }
            "linear" => {
                let tie = match o.opt_str("tie")? {
                    None => None,
                    Some(t) => {
                        check_name(o, "tie", t, false)?;
                        Some(t.to_string())
                    }
                };
                Op::Linear {
                    out: o.size("out", dims)?,
                    bias: o.bool("bias", true)?,
                    tie,
                }
            }
            "layernorm" | "rmsnorm" => {
                let default = if op_name == "layernorm" { 1e-5 } else { 1e-6 };
                let eps = o.float("eps", |v| v > 0.0 && v < 1.0, "0 < eps < 1", default)?;
                let affine = o.bool("affine", true)?;
                if op_name == "layernorm" {
                    Op::LayerNorm { eps, affine }
                } else {
                    Op::RmsNorm { eps, affine }
                }
            }
            "residual-add" | "add" | "mul" => {
                let Some(ins) = o.opt_strings("inputs")? else {
                    return Err(o.err(
                        "inputs",
                        format!("`inputs` is required for {op_name}; allowed: two tensor names"),
                    ));
                };
                if ins.len() != 2 {
                    return Err(o.err(
                        "inputs",
                        format!("{} tensors is not allowed; allowed: exactly two", ins.len()),
                    ));
                }
                if o.has("input") {
                    return Err(o.err(
                        "input",
                        format!(
                            "{op_name} reads `inputs` (two tensors); allowed: leave `input` out"
                        ),
                    ));
                }
                Op::Binary {
                    kind: match op_name {
                        "add" => Binary::Add,
                        "mul" => Binary::Mul,
                        _ => Binary::ResidualAdd,
                    },
                    other: ins[1].to_string(),
                }
            }
            "softmax" => Op::Softmax,
            "moe" => {
                let experts = o.size("experts", dims)?;
                let top_k = o.size("top_k", dims)?;
                if top_k == 0 || top_k > experts {
                    return Err(o.err(
                        "top_k",
                        format!(
                            "top_k = {top_k} with {experts} experts; allowed: 1..={experts} (each token picks top_k different experts)"
                        ),
                    ));
                }
                let expert_parallel = o.opt_size("expert_parallel", dims)?.unwrap_or(1);
                if expert_parallel == 0 || expert_parallel > 64 || experts % expert_parallel != 0 {
                    return Err(o.err(
                        "expert_parallel",
                        format!(
                            "expert_parallel = {expert_parallel} with {experts} experts; allowed: a degree 1..=64 that divides the number of experts (each rank holds experts / expert_parallel of them)"
                        ),
                    ));
                }
                let act = match o.choice(
                    "activation",
                    &["silu", "gelu", "gelu-tanh", "relu", "tanh"],
                    "silu",
                )? {
                    "gelu" => Act::Gelu,
                    "gelu-tanh" => Act::GeluTanh,
                    "relu" => Act::Relu,
                    "tanh" => Act::Tanh,
                    _ => Act::Silu,
                };
                let combine_of = |key: &str, default: &'static str| {
                    o.choice(key, &["elementwise", "einsum"], default)
                        .map(|v| match v {
                            "einsum" => MoeCombine::Einsum,
                            _ => MoeCombine::Elementwise,
                        })
                };
                let combine = combine_of("combine", "elementwise")?;
                let reference_combine = combine_of(
                    "reference_combine",
                    match combine {
                        MoeCombine::Einsum => "einsum",
                        MoeCombine::Elementwise => "elementwise",
                    },
                )?;
                Op::Moe {
                    experts,
                    top_k,
                    ffn: o.size("ffn", dims)?,
                    act,
                    gated: o.bool("gated", false)?,
                    norm_topk: o.bool("norm_topk", false)?,
                    expert_parallel,
                    combine,
                    reference_combine,
                }
            }
            "sdpa" => {
                let Some(ins) = o.opt_strings("inputs")? else {
                    return Err(o.err(
                        "inputs",
                        "`inputs` is required for sdpa; allowed: three tensor names, [q, k, v]",
                    ));
                };
                if ins.len() != 3 {
                    return Err(o.err(
                        "inputs",
                        format!(
                            "{} tensors is not allowed; allowed: exactly three, [q, k, v]",
                            ins.len()
                        ),
                    ));
                }
                if o.has("input") {
                    return Err(o.err(
                        "input",
                        "sdpa reads `inputs` ([q, k, v]); allowed: leave `input` out",
                    ));
                }
                for (i, a) in ins.iter().enumerate() {
                    if ins[..i].contains(a) {
                        return Err(o.err(
                            "inputs",
                            format!("`{a}` is named twice; allowed: three different tensors (project q, k and v with their own layers)"),
                        ));
                    }
                }
                Op::Sdpa {
                    k: ins[1].to_string(),
                    v: ins[2].to_string(),
                    heads: o.size("heads", dims)?,
                    causal: o.bool("causal", false)?,
                    scale: o.opt_float("scale", |v| v > 0.0, "a number > 0")?,
                    cp: o.int("cp", 1, 64, 1)? as usize,
                    load_balance: o.bool("load_balance", false)?,
                }
            }
            "rope" => {
                o.choice("style", &["half"], "half")?;
                Op::Rope {
                    heads: o.size("heads", dims)?,
                    theta: o.float("theta", |v| v > 0.0, "a number > 0", 10000.0)?,
                }
            }
            "tanh" => Op::Act(Act::Tanh),
            "gelu" => Op::Act(Act::Gelu),
            "gelu-tanh" => Op::Act(Act::GeluTanh),
            "relu" => Op::Act(Act::Relu),
            _ => Op::Act(Act::Silu),
        };
        let input = match (&op, o.opt_str("input")?) {
            (Op::Binary { .. } | Op::Sdpa { .. }, _) => o
                .opt_strings("inputs")?
                .map(|v| v[0].to_string())
                .unwrap_or_default(),
            (_, Some(s)) => s.to_string(),
            (_, None) => match out.last() {
                Some(prev) => prev.name.clone(),
                None => return Err(o.err(
                    "input",
                    "the first layer must name its input; allowed: the name of an [[inputs]] entry",
                )),
            },
        };
        let parallel = match o.choice("parallel", op_parallels(op_name), "none")? {
            "column" => LayerParallel::Column,
            "column-gather" => LayerParallel::ColumnGather,
            "row" => LayerParallel::Row,
            "vocab" => LayerParallel::Vocab,
            "sequence" => LayerParallel::Sequence,
            _ => LayerParallel::None,
        };
        let attr = match o.opt_str("attr")? {
            Some(a) => {
                check_name(o, "attr", a, true)?;
                a.to_string()
            }
            None => name.clone(),
        };
        out.push(Layer {
            name,
            op,
            input,
            parallel,
            attr,
        });
    }
    Ok(out)
}

fn parse_loss(doc: &Obj<'_>, layers: &[Layer]) -> Result<Loss, InputError> {
    let Some(o) = doc.opt_table("loss", &["op", "input", "labels", "target", "parallel"])? else {
        return Err(doc.err(
            "loss",
            "a [loss] table is required; allowed ops: cross-entropy, mse, sum",
        ));
    };
    let op = match o.req_choice("op", &["cross-entropy", "mse", "sum"])? {
        "cross-entropy" => {
            if o.has("target") {
                return Err(o.err(
                    "target",
                    "cross-entropy takes `labels`; allowed: labels = \"<int64 input>\"",
                ));
            }
            let Some(l) = o.opt_str("labels")? else {
                return Err(o.err(
                    "labels",
                    "cross-entropy needs its labels; allowed: labels = \"<name of a randint input>\"",
                ));
            };
            LossOp::CrossEntropy {
                labels: l.to_string(),
            }
        }
        "sum" => {
            for key in ["labels", "target"] {
                if o.has(key) {
                    return Err(o.err(
                        key,
                        "sum takes neither labels nor target; allowed: op = \"sum\" with `input` only",
                    ));
                }
            }
            LossOp::Sum
        }
        _ => {
            if o.has("labels") {
                return Err(o.err(
                    "labels",
                    "mse takes `target`; allowed: target = \"<input of the prediction's shape>\"",
                ));
            }
            let Some(t) = o.opt_str("target")? else {
                return Err(o.err(
                    "target",
                    "mse needs its target; allowed: target = \"<input of the prediction's shape>\"",
                ));
            };
            LossOp::Mse {
                target: t.to_string(),
            }
        }
    };
    let input = match (o.opt_str("input")?, layers.last()) {
        (Some(s), _) => s.to_string(),
        (None, Some(l)) => l.name.clone(),
        (None, None) => {
            return Err(o.err(
                "input",
                "with no [[layers]] the loss reads an input; allowed: input = \"<name of an [[inputs]] entry>\", or add [[layers]] (the model in forward order)",
            ))
        }
    };
    let vocab_parallel = o.choice("parallel", &["none", "vocab"], "none")? == "vocab";
    if vocab_parallel && !matches!(op, LossOp::CrossEntropy { .. }) {
        return Err(o.err(
            "parallel",
            "\"vocab\" is cross-entropy's; allowed with mse and sum: \"none\"",
        ));
    }
    Ok(Loss {
        op,
        input,
        vocab_parallel,
    })
}

const OPT_KEYS: &[&str] = &[
    "optimizer",
    "lr",
    "momentum",
    "dampening",
    "betas",
    "eps",
    "weight_decay",
];

fn parse_optimizer(
    o: &Obj<'_>,
    sgd_family_only: bool,
    default: &'static str,
) -> Result<Optimizer, InputError> {
    let allowed: &[&'static str] = if sgd_family_only {
        &["sgd", "momentum", "nesterov"]
    } else {
        &["sgd", "momentum", "nesterov", "adam", "adamw"]
    };
    let name = if default.is_empty() {
        o.req_choice("optimizer", allowed)?
    } else {
        o.choice("optimizer", allowed, default)?
    };
    let lr = o.req_float(
        "lr",
        |v| v > 0.0 && v < crate::scenario::config::MAX_LR,
        &format!("0 < lr < {}", crate::scenario::config::MAX_LR),
    )?;
    let only = |k: &str, names: &str| -> Result<(), InputError> {
        if o.has(k) {
            return Err(o.err(
                k,
                format!("`{k}` is not a setting of optimizer \"{name}\"; allowed with: {names}"),
            ));
        }
        Ok(())
    };
    let wd = |default: f64| {
        o.float(
            "weight_decay",
            |v| (0.0..1e3).contains(&v),
            "0 <= weight_decay < 1000",
            default,
        )
    };
    Ok(match name {
        "sgd" => {
            only("momentum", "momentum, nesterov")?;
            only("dampening", "momentum, nesterov")?;
            only("betas", "adam, adamw")?;
            only("eps", "adam, adamw")?;
            Optimizer::Sgd {
                lr,
                weight_decay: wd(0.0)?,
            }
        }
        "momentum" | "nesterov" => {
            only("betas", "adam, adamw")?;
            only("eps", "adam, adamw")?;
            let nesterov = name == "nesterov";
            let momentum = o.float(
                "momentum",
                |v| (0.0..1.0).contains(&v),
                "0 <= momentum < 1",
                0.9,
            )?;
            let dampening = o.float(
                "dampening",
                |v| (0.0..1.0).contains(&v),
                "0 <= dampening < 1",
                0.0,
            )?;
            // torch.optim.SGD refuses both ("Nesterov momentum requires a momentum and zero
            // dampening"): no torch test can be written this way. (The outer loop's optimizer,
            // optax's, is validated with the outer loop.)
            let torch = !sgd_family_only;
            if torch && nesterov && momentum == 0.0 {
                return Err(o.err(
                    "momentum",
                    "allowed with nesterov: 0 < momentum < 1 (torch.optim.SGD refuses Nesterov \
                     without momentum)",
                ));
            }
            if torch && nesterov && dampening != 0.0 {
                return Err(o.err(
                    "dampening",
                    "allowed with nesterov: 0 only (torch.optim.SGD refuses Nesterov with \
                     dampening); dampening is a setting of optimizer = \"momentum\"",
                ));
            }
            Optimizer::Momentum {
                lr,
                momentum,
                dampening,
                nesterov,
                weight_decay: wd(0.0)?,
            }
        }
        _ => {
            only("momentum", "momentum, nesterov")?;
            only("dampening", "momentum, nesterov")?;
            let betas = match o.table.get("betas") {
                None => (0.9, 0.999),
                Some(toml::Value::Array(a)) if a.len() == 2 => {
                    let f = |v: &toml::Value| match v {
                        toml::Value::Float(f) if (0.0..1.0).contains(f) => Some(*f),
                        toml::Value::Integer(0) => Some(0.0),
                        _ => None,
                    };
                    match (f(&a[0]), f(&a[1])) {
                        (Some(b1), Some(b2)) => (b1, b2),
                        _ => {
                            return Err(o.err("betas", "allowed: [b1, b2], each in [0, 1)"));
                        }
                    }
                }
                Some(_) => return Err(o.err("betas", "allowed: [b1, b2], each in [0, 1)")),
            };
            let decoupled = name == "adamw";
            Optimizer::Adam {
                lr,
                betas,
                eps: o.float("eps", |v| v > 0.0 && v < 1.0, "0 < eps < 1", 1e-8)?,
                weight_decay: wd(if decoupled { 0.01 } else { 0.0 })?,
                decoupled,
            }
        }
    })
}

/// The [`Train`] of a file without parameters and without `[train]`: one step of forward,
/// loss and backward; the optimizer has nothing to step.
pub const NO_TRAIN: Train = Train {
    steps: 1,
    micro_steps: 1,
    optimizer: Optimizer::Sgd {
        lr: 1.0,
        weight_decay: 0.0,
    },
    outer: None,
};

fn parse_train(doc: &Obj<'_>, has_params: bool) -> Result<Train, InputError> {
    let mut keys: Vec<&str> = vec!["steps", "micro_steps", "outer"];
    keys.extend_from_slice(OPT_KEYS);
    let Some(o) = doc.opt_table("train", &keys)? else {
        if !has_params {
            return Ok(NO_TRAIN);
        }
        return Err(doc.err(
            "train",
            "a [train] table is required (steps, optimizer, lr)",
        ));
    };
    let steps = o.req_int("steps", 1, 1000)? as usize;
    let micro_steps = o.int("micro_steps", 1, 64, 1)? as usize;
    let optimizer = parse_optimizer(&o, false, "")?;
    let mut ok = vec!["rounds"];
    ok.extend_from_slice(OPT_KEYS);
    ok.retain(|k| *k != "betas" && *k != "eps");
    let outer = match o.opt_table("outer", &ok)? {
        None => None,
        Some(t) => Some(Outer {
            rounds: t.req_int("rounds", 1, 1000)? as usize,
            optimizer: parse_optimizer(&t, true, "nesterov")?,
        }),
    };
    Ok(Train {
        steps,
        micro_steps,
        optimizer,
        outer,
    })
}

fn parse_init(doc: &Obj<'_>, layers: &[Layer]) -> Result<Init, InputError> {
    let empty = toml::Table::new();
    let o = doc.opt_table("init", &["order", "scheme"])?.unwrap_or(Obj {
        ctx: doc.ctx,
        path: "init".into(),
        table: &empty,
    });
    let weighted: Vec<&str> = layers
        .iter()
        .filter(|l| has_weights(&l.op))
        .map(|l| l.name.as_str())
        .collect();
    let order = match o.opt_strings("order")? {
        None => weighted.iter().map(|s| s.to_string()).collect(),
        Some(list) => {
            for (i, n) in list.iter().enumerate() {
                if !weighted.contains(n) {
                    return Err(doc.ctx.err(
                        &format!("init.order[{i}]"),
                        format!(
                            "`{n}` is not a layer with weights; allowed: {}",
                            weighted.join(", ")
                        ),
                    ));
                }
                if list[..i].contains(n) {
                    return Err(doc.ctx.err(
                        &format!("init.order[{i}]"),
                        format!("`{n}` is listed twice; list each layer once"),
                    ));
                }
            }
            if let Some(missing) = weighted.iter().find(|w| !list.contains(w)) {
                return Err(o.err(
                    "order",
                    format!(
                        "layer `{missing}` is missing; allowed: every layer with weights, each once ({})",
                        weighted.join(", ")
                    ),
                ));
            }
            list.iter().map(|s| s.to_string()).collect()
        }
    };
    Ok(Init {
        order,
        scheme: match o.choice("scheme", &["torch", "flax"], "torch")? {
            "flax" => Scheme::Flax,
            _ => Scheme::Torch,
        },
    })
}

/// Whether an op owns parameters.
pub fn has_weights(op: &Op) -> bool {
    match op {
        Op::Embedding { .. } | Op::Linear { .. } | Op::Moe { .. } => true,
        Op::LayerNorm { affine, .. } | Op::RmsNorm { affine, .. } => *affine,
        _ => false,
    }
}

fn parse_checks(doc: &Obj<'_>) -> Result<Vec<Check>, InputError> {
    let mut out: Vec<Check> = Vec::new();
    let objs = doc.tables("checks", &["name", "tensor", "at", "kind", "optional"])?;
    if objs.is_empty() {
        return Err(doc.err(
            "checks",
            "at least one [[checks]] entry is required (what the test compares)",
        ));
    }
    for o in objs {
        let name = o.name("name", true)?.to_string();
        if out.iter().any(|c| c.name == name) {
            return Err(o.err("name", format!("check `{name}` is defined twice")));
        }
        let tensor = o.str("tensor")?.to_string();
        let at = match o.opt_str("at")? {
            None => None,
            Some(_) => Some(
                match o.choice("at", &["micro-step", "step", "update"], "")? {
                    "micro-step" => At::MicroStep,
                    "step" => At::Step,
                    _ => At::Update,
                },
            ),
        };
        let kind = match o.choice("kind", &["value", "sgd-update"], "value")? {
            "sgd-update" => CheckKind::SgdUpdate,
            _ => CheckKind::Value,
        };
        out.push(Check {
            name,
            tensor,
            at,
            kind,
            optional: o.bool("optional", false)?,
        });
    }
    Ok(out)
}

fn strings<'a>(v: &'a toml::Value, out: &mut Vec<&'a str>) {
    match v {
        toml::Value::String(s) => out.push(s),
        toml::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        toml::Value::Table(t) => t.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// A dim nothing refers to is a misspelling or a leftover; both are refused.
fn unused_dims(doc: &Obj<'_>, dims: &BTreeMap<String, DimValue>) -> Result<(), InputError> {
    let mut used = Vec::new();
    for (k, v) in doc.table {
        if k != "dims" {
            strings(v, &mut used);
        }
    }
    for d in dims.keys() {
        if !used.contains(&d.as_str()) {
            return Err(doc.ctx.err(
                &format!("dims.{d}"),
                format!("dim `{d}` is never used; allowed: refer to it by name (`out = \"{d}\"`, `shape = [\"{d}\"]`) or remove it"),
            ));
        }
    }
    Ok(())
}

/// Parses the graph part of a (patched) document.
pub fn parse_spec(doc: &Obj<'_>) -> Result<Spec, InputError> {
    let dims = parse_dims(doc)?;
    let parallel = parse_parallel(doc)?;
    let data = parse_data(doc)?;
    let inputs = parse_inputs(doc, &dims)?;
    let layers = parse_layers(doc, &dims)?;
    let loss = parse_loss(doc, &layers)?;
    let train = parse_train(doc, layers.iter().any(|l| has_weights(&l.op)))?;
    let init = parse_init(doc, &layers)?;
    let checks = parse_checks(doc)?;
    unused_dims(doc, &dims)?;
    Ok(Spec {
        dims,
        parallel,
        data,
        inputs,
        layers,
        loss,
        train,
        init,
        checks,
    })
}
