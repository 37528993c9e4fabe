//! Shapes, shards and collectives of one parametrization: every tensor's global shape and how
//! it is split over the TP and DP ranks, which collectives run where, and which checks record
//! what. Every shape and shard mismatch is found here, before anything runs.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::scenario::shard::shard_ranges;
use crate::sys::error::InputError;

use super::node::Ctx;
use super::spec::{
    At, Check, CheckKind, Draw, InputParallel, LayerParallel, LossOp, Op, Optimizer, ShardRule,
    Spec,
};
use crate::scenario::ir::FixedValues;

/// Most tensor elements a graph may hold (inputs, parameters and activations, once each).
pub const MAX_GRAPH_ELEMENTS: usize = 1 << 30;

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// float32 (float64 in the ground-truth computation).
    F32,
    /// int64 ids or labels.
    I64,
}

/// How a tensor is split over the TP ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// Every rank holds the whole tensor.
    Replicated,
    /// Rank r holds `ranges[r]` of axis `axis`.
    Axis {
        /// The split axis.
        axis: usize,
        /// One range per rank.
        ranges: Vec<Range<usize>>,
        /// What split it (`column-parallel fc1`), for errors.
        by: String,
    },
}

impl Split {
    /// Whether every rank holds the same part of both tensors: both whole, or both split on
    /// one axis into the same ranges, whichever layer split them.
    pub fn alike(&self, other: &Split) -> bool {
        match (self, other) {
            (Split::Replicated, Split::Replicated) => true,
            (
                Split::Axis {
                    axis: a1,
                    ranges: r1,
                    ..
                },
                Split::Axis {
                    axis: a2,
                    ranges: r2,
                    ..
                },
            ) => a1 == a2 && r1 == r2,
            _ => false,
        }
    }
}

/// What a tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Drawn input.
    Input,
    /// A layer's output.
    Activation,
    /// A parameter.
    Param,
    /// The loss.
    Loss,
}

/// One tensor of the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Name (`head.out`, `head.weight`, `x`).
    pub name: String,
    /// Global shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: Dtype,
    /// TP split.
    pub split: Split,
    /// DP split of axis 0 (inputs and everything computed from them) when `dp > 1`.
    pub dp_ranges: Option<Vec<Range<usize>>>,
    /// Role.
    pub role: Role,
    /// For a tied parameter: the tensor it is (`embedding.weight`).
    pub alias_of: Option<String>,
}

impl Tensor {
    /// Shape held by TP rank `tp` and DP rank `dp`.
    pub fn rank_shape(&self, tp: usize, dp: usize) -> Vec<usize> {
        let mut s = self.shape.clone();
        if let Split::Axis { axis, ranges, .. } = &self.split {
            s[*axis] = ranges[tp].len();
        }
        if let Some(r) = &self.dp_ranges {
            s[0] = r[dp].len();
        }
        s
    }
}

/// A collective operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollectiveOp {
    /// Sum, result on every rank.
    AllReduce,
    /// Concatenation along an axis, result on every rank.
    AllGather,
    /// Sum, each rank keeping its shard.
    ReduceScatter,
    /// Rows sent from every rank to the rank that owns them (expert parallelism's token
    /// dispatch and return); no arithmetic, only the wire dtype's rounding.
    AllToAll,
}

impl CollectiveOp {
    /// The name printed.
    pub fn name(self) -> &'static str {
        match self {
            Self::AllReduce => "all-reduce",
            Self::AllGather => "all-gather",
            Self::ReduceScatter => "reduce-scatter",
            Self::AllToAll => "all-to-all",
        }
    }
}

/// Where in a step a collective runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Forward pass, every micro-step.
    Forward,
    /// Backward pass, every micro-step.
    Backward,
    /// Before the optimizer step (gradient reduction over DP).
    Step,
    /// At a DiLoCo sync.
    Sync,
}

impl Phase {
    /// The name printed.
    pub fn name(self) -> &'static str {
        match self {
            Self::Forward => "forward",
            Self::Backward => "backward",
            Self::Step => "step",
            Self::Sync => "sync",
        }
    }
}

/// The rank group of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The TP ranks.
    Tp,
    /// The DP ranks (replicas).
    Dp,
    /// HSDP: each shard group of a `dp_replicate × dp_shard` mesh (`dp_shard` ranks
    /// `r·dp_shard ..`, one group per replica r).
    DpShard,
    /// HSDP: each replicate group of the mesh (`dp_replicate` ranks `s, s + dp_shard, ..`,
    /// one group per shard s).
    DpReplicate,
    /// The expert-parallel ranks of a `moe` layer (`expert_parallel`).
    Ep,
}

/// One collective of the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Collective {
    /// When it runs.
    pub phase: Phase,
    /// The layer (or `loss`, `optimizer`) it belongs to.
    pub layer: String,
    /// The op.
    pub op: CollectiveOp,
    /// The tensor it produces (`head.out`, `x.grad`, `head.weight.grad`).
    pub tensor: String,
    /// Full shape of that tensor.
    pub shape: Vec<usize>,
    /// Rank group.
    pub group: Group,
    /// Number of ranks.
    pub ranks: usize,
    /// Axis for gathers and scatters.
    pub axis: Option<usize>,
}

/// The reduction behind a matmul output: length `k`, largest shard, ranks all-reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckReduction {
    /// Unsharded reduction length.
    pub k: usize,
    /// Largest per-rank length.
    pub max_shard: usize,
    /// Ranks summed.
    pub ranks: usize,
}

/// What a check records, by tensor name (a parameter by the name of its storage's user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckWhat {
    /// A layer's output.
    Activation(String),
    /// The loss.
    Loss,
    /// The per-token losses of a vocab-parallel cross-entropy (`loss.tokens`).
    LossTokens,
    /// The gradient of an input or activation.
    Grad(String),
    /// A parameter's accumulated gradient (tied: the whole tied gradient).
    ParamGrad(String),
    /// A parameter after the optimizer step.
    Param(String),
    /// The sgd-update self-consistency check of a parameter.
    SgdUpdate(String),
}

/// A check that records.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedCheck {
    /// Name.
    pub name: String,
    /// Tensor name as written.
    pub tensor: String,
    /// The tensor it reads after aliases (`embedding.weight` for a tied `head.weight`).
    pub target: String,
    /// What it records.
    pub what: CheckWhat,
    /// Shape of the compared tensor.
    pub shape: Vec<usize>,
    /// When it records.
    pub at: At,
    /// Kind.
    pub kind: CheckKind,
    /// For matmul outputs, the reduction (theory columns).
    pub reduction: Option<CheckReduction>,
}

/// The resolved graph of one parametrization.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// pytest id.
    pub id: String,
    /// The parsed description.
    pub spec: Spec,
    /// Every tensor, in creation order (inputs, then per layer its parameters and output,
    /// then the loss).
    pub tensors: Vec<Tensor>,
    /// Every collective, in execution order within its phase.
    pub collectives: Vec<Collective>,
    /// The checks that record, in file order.
    pub checks: Vec<ResolvedCheck>,
    /// Optional checks skipped here, with why.
    pub skipped: Vec<(String, String)>,
    /// Tensors whose gradient is computed (parameters, inputs with `grad`).
    pub grads: Vec<String>,
}

impl Graph {
    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

#[allow(clippy::too_many_arguments)]
fn ranges_for(
    ctx: &Ctx,
    path: &str,
    what: &str,
    size: usize,
    n: usize,
    rule: ShardRule,
    grain: usize,
    degree: &str,
) -> Result<Vec<Range<usize>>, InputError> {
    if n == 1 {
        return Ok(std::iter::once(0..size).collect());
    }
    match rule {
        ShardRule::Megatron => {
            if !size.is_multiple_of(n) {
                return Err(ctx.err(
                    path,
                    format!(
                        "{what} has size {size}, which {degree} = {n} does not divide (shard_rule = \"megatron\" needs equal shards); allowed: a {degree} dividing {size}, or shard_rule = \"deepspeed\" for uneven shards"
                    ),
                ));
            }
            Ok((0..n).map(|r| r * size / n..(r + 1) * size / n).collect())
        }
        ShardRule::DeepSpeed => {
            let r = shard_ranges(size, n, grain);
            if let Some(k) = r.iter().position(|r| r.is_empty()) {
                return Err(ctx.err(
                    path,
                    format!(
                        "{what} has size {size}: split over {degree} = {n} (grain {grain}) rank {k} gets nothing; allowed: {degree} <= {}",
                        (size / grain.max(1)).max(1)
                    ),
                ));
            }
            Ok(r)
        }
    }
}

struct Builder<'a> {
    ctx: &'a Ctx,
    spec: &'a Spec,
    tensors: Vec<Tensor>,
    collectives: Vec<Collective>,
    /// Tensor name -> index of the layer that produced it (for `column` splits).
    producer: BTreeMap<String, usize>,
}

impl Builder<'_> {
    fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    fn known(&self) -> String {
        self.tensors
            .iter()
            .filter(|t| t.role != Role::Param)
            .map(|t| t.name.strip_suffix(".out").unwrap_or(&t.name).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The tensor a layer key names: an input, or an earlier layer (its `.out`).
    fn lookup(&self, path: &str, name: &str, here: usize) -> Result<Tensor, InputError> {
        let full = if self.spec.inputs.iter().any(|i| i.name == name) {
            name.to_string()
        } else {
            format!("{}.out", name.strip_suffix(".out").unwrap_or(name))
        };
        if let Some(t) = self.get(&full) {
            return Ok(t.clone());
        }
        let base = name.strip_suffix(".out").unwrap_or(name);
        if let Some(j) = self.spec.layers.iter().position(|l| l.name == base) {
            if j >= here {
                return Err(self.ctx.err(
                    path,
                    format!(
                        "`{name}` is layers[{j}], which is computed after this one; allowed: an input or an earlier layer ({})",
                        self.known()
                    ),
                ));
            }
        }
        Err(self.ctx.err(
            path,
            format!(
                "no tensor is named `{name}`; allowed: an input or an earlier layer ({})",
                self.known()
            ),
        ))
    }

    fn ranges(&self, path: &str, what: &str, size: usize) -> Result<Vec<Range<usize>>, InputError> {
        let p = &self.spec.parallel;
        ranges_for(self.ctx, path, what, size, p.tp, p.rule, p.grain, "tp")
    }

    fn push_param(&mut self, name: String, shape: Vec<usize>, split: Split) {
        self.tensors.push(Tensor {
            name,
            shape,
            dtype: Dtype::F32,
            split,
            dp_ranges: None,
            role: Role::Param,
            alias_of: None,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn coll(
        &mut self,
        phase: Phase,
        layer: &str,
        op: CollectiveOp,
        tensor: String,
        shape: Vec<usize>,
        axis: Option<usize>,
    ) {
        let ranks = self.spec.parallel.tp;
        if ranks > 1 {
            self.collectives.push(Collective {
                phase,
                layer: layer.to_string(),
                op,
                tensor,
                shape,
                group: Group::Tp,
                ranks,
                axis,
            });
        }
    }
}

/// Fixed int64 values used as indices into `n` rows or classes: each in `0..n`.
fn fixed_in_range(
    ctx: &Ctx,
    ii: usize,
    draw: &Draw,
    n: usize,
    what: &str,
) -> Result<(), InputError> {
    if let Draw::Fixed {
        values: FixedValues::I64(v),
        ..
    } = draw
    {
        if let Some((j, bad)) = v
            .iter()
            .enumerate()
            .find(|(_, &x)| x < 0 || x as usize >= n)
        {
            return Err(ctx.err(
                &format!("inputs[{ii}].values[{j}]"),
                format!(
                    "{bad} is out of range: {what} are 0..{n}; allowed: integers in 0..={}",
                    n - 1
                ),
            ));
        }
    }
    Ok(())
}

fn split_desc(s: &Split) -> String {
    match s {
        Split::Replicated => "whole".into(),
        Split::Axis { axis, by, .. } => format!("split on axis {axis} by {by}"),
    }
}

/// Resolves one parsed parametrization.
pub fn resolve(ctx: &Ctx, id: &str, spec: &Spec) -> Result<Graph, InputError> {
    let par = &spec.parallel;
    let mut b = Builder {
        ctx,
        spec,
        tensors: Vec::new(),
        collectives: Vec::new(),
        producer: BTreeMap::new(),
    };
    let mut grads: Vec<String> = Vec::new();
    // Inputs.
    for (i, inp) in spec.inputs.iter().enumerate() {
        if inp.draw == (Draw::Rand { seeded: true }) && (par.dp > 1 || par.reference.is_some()) {
            return Err(ctx.err(
                &format!("inputs[{i}].seeded"),
                "an input drawn per sweep seed is not run yet with dp > 1 or a reference \
                 layout; allowed: seeded = true with dp = 1 and no [parallel.reference], or \
                 leave it out (drawn per micro-step)",
            ));
        }
        let dp_ranges = if par.dp > 1 {
            Some(ranges_for(
                ctx,
                &format!("inputs[{i}].shape[0]"),
                &format!("input `{}`'s batch (its first dim)", inp.name),
                inp.shape[0],
                par.dp,
                par.rule,
                1,
                "dp",
            )?)
        } else {
            None
        };
        let ip = format!("inputs[{i}]");
        let split = match inp.parallel {
            InputParallel::None => Split::Replicated,
            InputParallel::LastDim => {
                let axis = inp.shape.len() - 1;
                let ranges = b.ranges(
                    &format!("{ip}.parallel"),
                    &format!("input `{}`'s last dim", inp.name),
                    inp.shape[axis],
                )?;
                Split::Axis {
                    axis,
                    ranges,
                    by: format!("last-dim input `{}`", inp.name),
                }
            }
        };
        if let (
            Draw::Fixed {
                values,
                per_rank: true,
            },
            Split::Axis { axis, ranges, .. },
        ) = (&inp.draw, &split)
        {
            let w = ranges[0].len();
            if ranges.iter().any(|r| r.len() != w) {
                return Err(ctx.err(
                    &format!("{ip}.per_rank"),
                    format!(
                        "the last dim {} splits unevenly over tp = {} ({:?}), so one rank's values do not fill every shard; allowed: a last dim tp divides, or values for the whole tensor",
                        inp.shape[*axis],
                        ranges.len(),
                        ranges.iter().map(|r| r.len()).collect::<Vec<_>>()
                    ),
                ));
            }
            let n = inp.shape[..*axis].iter().product::<usize>() * w;
            if values.len() != n {
                let mut local = inp.shape.clone();
                local[*axis] = w;
                return Err(ctx.err(
                    &format!("{ip}.values"),
                    format!(
                        "{} values for one rank's shard {local:?} of {:?}; allowed: exactly {n} values, row-major",
                        values.len(),
                        inp.shape
                    ),
                ));
            }
        }
        b.tensors.push(Tensor {
            name: inp.name.clone(),
            shape: inp.shape.clone(),
            dtype: if inp.draw.is_int() {
                Dtype::I64
            } else {
                Dtype::F32
            },
            split,
            dp_ranges,
            role: Role::Input,
            alias_of: None,
        });
        if inp.grad {
            grads.push(inp.name.clone());
        }
    }
    // Layers.
    for (li, layer) in spec.layers.iter().enumerate() {
        let lp = format!("layers[{li}]");
        let in_key = if matches!(layer.op, Op::Binary { .. } | Op::Sdpa { .. }) {
            "inputs[0]"
        } else {
            "input"
        };
        let x = b.lookup(&format!("{lp}.{in_key}"), &layer.input, li)?;
        let by = format!("{}-parallel `{}`", layer.parallel.name(), layer.name);
        let out_name = format!("{}.out", layer.name);
        let needs_f32 = |x: &Tensor| -> Result<(), InputError> {
            if x.dtype == Dtype::I64 {
                return Err(ctx.err(
                    &format!("{lp}.{in_key}"),
                    format!(
                        "`{}` holds int64 ids; op `{}` needs float32; allowed: a randn/values input or a layer's output (ids go through an embedding)",
                        x.name,
                        layer.op.name()
                    ),
                ));
            }
            Ok(())
        };
        let whole = |x: &Tensor, what: &str| -> Result<(), InputError> {
            if let Split::Axis { by, .. } = &x.split {
                return Err(ctx.err(
                    &format!("{lp}.{in_key}"),
                    format!(
                        "`{}` is {} ({}), and {what} needs the whole tensor; allowed: a row-parallel linear here, or gather it there (column-gather)",
                        x.name,
                        split_desc(&x.split),
                        by
                    ),
                ));
            }
            Ok(())
        };
        let (out_shape, out_split) = match &layer.op {
            Op::Embedding {
                num,
                dim,
                padding_idx: _,
            } => {
                if x.dtype != Dtype::I64 {
                    return Err(ctx.err(
                        &format!("{lp}.input"),
                        format!(
                            "an embedding looks up int64 ids and `{}` is float32; allowed: a randint input",
                            x.name
                        ),
                    ));
                }
                if let Some((ii, inp)) = spec
                    .inputs
                    .iter()
                    .enumerate()
                    .find(|(_, i)| i.name == x.name)
                {
                    fixed_in_range(ctx, ii, &inp.draw, *num, "the embedding's rows")?;
                    if let Draw::Randint { high, .. } = inp.draw {
                        if high as usize > *num {
                            return Err(ctx.err(
                                &format!("{lp}.num"),
                                format!(
                                    "the embedding has {num} rows but `{}` draws ids up to {}; allowed: num >= {high} (or a smaller `high`)",
                                    inp.name,
                                    high - 1
                                ),
                            ));
                        }
                    }
                }
                let (wsplit, out_split) = match layer.parallel {
                    LayerParallel::Vocab => {
                        let r = b.ranges(&format!("{lp}.num"), "the embedding's rows", *num)?;
                        let mut s = x.shape.clone();
                        s.push(*dim);
                        b.coll(
                            Phase::Forward,
                            &layer.name,
                            CollectiveOp::AllReduce,
                            out_name.clone(),
                            s,
                            None,
                        );
                        (
                            Split::Axis {
                                axis: 0,
                                ranges: r,
                                by: by.clone(),
                            },
                            Split::Replicated,
                        )
                    }
                    LayerParallel::ColumnGather => {
                        let r = b.ranges(&format!("{lp}.dim"), "the embedding's dim", *dim)?;
                        let mut s = x.shape.clone();
                        s.push(*dim);
                        let axis = s.len() - 1;
                        b.coll(
                            Phase::Forward,
                            &layer.name,
                            CollectiveOp::AllGather,
                            out_name.clone(),
                            s,
                            Some(axis),
                        );
                        (
                            Split::Axis {
                                axis: 1,
                                ranges: r,
                                by: by.clone(),
                            },
                            Split::Replicated,
                        )
                    }
                    _ => (Split::Replicated, Split::Replicated),
                };
                b.push_param(format!("{}.weight", layer.name), vec![*num, *dim], wsplit);
                let mut s = x.shape.clone();
                s.push(*dim);
                (s, out_split)
            }
            Op::Linear { out, bias, tie } => {
                needs_f32(&x)?;
                let k = *x.shape.last().unwrap_or(&0);
                let mut out_shape = x.shape.clone();
                *out_shape.last_mut().expect("shapes have at least one dim") = *out;
                let last = out_shape.len() - 1;
                let (wsplit, bsplit, out_split) = match layer.parallel {
                    LayerParallel::None => {
                        whole(&x, "a replicated linear")?;
                        (Split::Replicated, Split::Replicated, Split::Replicated)
                    }
                    LayerParallel::Column | LayerParallel::ColumnGather => {
                        match &x.split {
                            Split::Axis {
                                axis: 0, by: xby, ..
                            } if xby.starts_with("sequence-parallel") && x.shape.len() >= 2 => {
                                // Megatron's sequence parallelism: gather the tokens first,
                                // reduce-scatter their gradient back.
                                b.coll(
                                    Phase::Forward,
                                    &layer.name,
                                    CollectiveOp::AllGather,
                                    x.name.clone(),
                                    x.shape.clone(),
                                    Some(0),
                                );
                                b.coll(
                                    Phase::Backward,
                                    &layer.name,
                                    CollectiveOp::ReduceScatter,
                                    format!("{}.grad", x.name),
                                    x.shape.clone(),
                                    Some(0),
                                );
                            }
                            _ => whole(&x, "a column-parallel linear")?,
                        }
                        let r = b.ranges(&format!("{lp}.out"), "the out-features", *out)?;
                        let ws = Split::Axis {
                            axis: 0,
                            ranges: r.clone(),
                            by: by.clone(),
                        };
                        let bs = Split::Axis {
                            axis: 0,
                            ranges: r.clone(),
                            by: by.clone(),
                        };
                        let os = if layer.parallel == LayerParallel::ColumnGather {
                            b.coll(
                                Phase::Forward,
                                &layer.name,
                                CollectiveOp::AllGather,
                                out_name.clone(),
                                out_shape.clone(),
                                Some(last),
                            );
                            Split::Replicated
                        } else {
                            Split::Axis {
                                axis: last,
                                ranges: r,
                                by: by.clone(),
                            }
                        };
                        let seq = matches!(&x.split, Split::Axis { axis: 0, .. });
                        if !seq && (x.role != Role::Input || grads.contains(&x.name)) {
                            b.coll(
                                Phase::Backward,
                                &layer.name,
                                CollectiveOp::AllReduce,
                                format!("{}.grad", x.name),
                                x.shape.clone(),
                                None,
                            );
                        }
                        (ws, bs, os)
                    }
                    LayerParallel::Row => {
                        let r = b.ranges(
                            &format!("{lp}.input"),
                            "the in-features (the input's last dim)",
                            k,
                        )?;
                        match &x.split {
                            Split::Replicated => {
                                if x.role != Role::Input || grads.contains(&x.name) {
                                    b.coll(
                                        Phase::Backward,
                                        &layer.name,
                                        CollectiveOp::AllGather,
                                        format!("{}.grad", x.name),
                                        x.shape.clone(),
                                        Some(x.shape.len() - 1),
                                    );
                                }
                            }
                            Split::Axis {
                                axis,
                                ranges,
                                by: xby,
                            } => {
                                if *axis != x.shape.len() - 1 || *ranges != r {
                                    return Err(ctx.err(
                                        &format!("{lp}.input"),
                                        format!(
                                            "`{}` is {} ({xby}), and a row-parallel linear needs it split on its last dim as {:?}; allowed: the output of a column-parallel linear over the same features, or a whole tensor",
                                            x.name,
                                            split_desc(&x.split),
                                            r
                                        ),
                                    ));
                                }
                            }
                        }
                        b.coll(
                            Phase::Forward,
                            &layer.name,
                            CollectiveOp::AllReduce,
                            out_name.clone(),
                            out_shape.clone(),
                            None,
                        );
                        (
                            Split::Axis {
                                axis: 1,
                                ranges: r,
                                by: by.clone(),
                            },
                            Split::Replicated,
                            Split::Replicated,
                        )
                    }
                    _ => unreachable!("parse allows linear: none, column, column-gather, row"),
                };
                let wname = format!("{}.weight", layer.name);
                match tie {
                    None => b.push_param(wname, vec![*out, k], wsplit),
                    Some(t) => {
                        let tp = format!("{lp}.tie");
                        let Some(tj) = spec.layers.iter().position(|l| &l.name == t) else {
                            return Err(ctx.err(
                                &tp,
                                format!(
                                    "no layer is named `{t}`; allowed: an earlier embedding or linear ({})",
                                    spec.layers[..li]
                                        .iter()
                                        .filter(|l| matches!(l.op, Op::Embedding { .. } | Op::Linear { .. }))
                                        .map(|l| l.name.as_str())
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            ));
                        };
                        if tj >= li {
                            return Err(ctx.err(
                                &tp,
                                format!("`{t}` is layers[{tj}], after this one; allowed: an earlier layer (the tied weight is created by the first)"),
                            ));
                        }
                        let target = format!("{t}.weight");
                        let Some(tw) = b.get(&target).cloned() else {
                            return Err(ctx.err(
                                &tp,
                                format!(
                                    "layer `{t}` has no weight; allowed: an embedding or linear"
                                ),
                            ));
                        };
                        if tw.shape != vec![*out, k] {
                            return Err(ctx.err(
                                &tp,
                                format!(
                                    "a tie between different shapes: `{wname}` is [{out}, {k}] (out x in) and `{target}` is {:?}; allowed: a layer whose weight has this layer's shape",
                                    tw.shape
                                ),
                            ));
                        }
                        if let (
                            Split::Axis { axis: a1, .. },
                            Split::Axis {
                                axis: a2, by: by2, ..
                            },
                        ) = (&wsplit, &tw.split)
                        {
                            if a1 != a2 {
                                return Err(ctx.err(
                                    &format!("{lp}.parallel"),
                                    format!(
                                        "the tied weight `{target}` is split on axis {a2} ({by2}) and this layer would split it on axis {a1}; allowed: one split for a tied weight (shard both on the same axis, or one of them not at all)"
                                    ),
                                ));
                            }
                        }
                        b.tensors.push(Tensor {
                            name: wname,
                            shape: vec![*out, k],
                            dtype: Dtype::F32,
                            split: wsplit,
                            dp_ranges: None,
                            role: Role::Param,
                            alias_of: Some(target),
                        });
                    }
                }
                if *bias {
                    b.push_param(format!("{}.bias", layer.name), vec![*out], bsplit);
                }
                (out_shape, out_split)
            }
            Op::Act(_) => {
                needs_f32(&x)?;
                (x.shape.clone(), x.split.clone())
            }
            Op::LayerNorm { affine, .. } | Op::RmsNorm { affine, .. } => {
                needs_f32(&x)?;
                whole(&x, "a norm")?;
                let h = *x.shape.last().unwrap_or(&0);
                let out_split = if layer.parallel == LayerParallel::Sequence {
                    if x.shape.len() < 2 {
                        return Err(ctx.err(
                            &format!("{lp}.parallel"),
                            format!("a sequence-parallel norm splits the tokens (axis 0), and `{}` has shape {:?}; allowed: an input with at least 2 dims", x.name, x.shape),
                        ));
                    }
                    let r = b.ranges(
                        &format!("{lp}.parallel"),
                        &format!("`{}`'s tokens (axis 0)", x.name),
                        x.shape[0],
                    )?;
                    // A row-parallel producer reduce-scatters instead of all-reducing.
                    if let Some(c) = b
                        .collectives
                        .iter_mut()
                        .rev()
                        .find(|c| c.tensor == x.name && c.phase == Phase::Forward)
                    {
                        if c.op == CollectiveOp::AllReduce {
                            c.op = CollectiveOp::ReduceScatter;
                            c.axis = Some(0);
                        }
                    }
                    if *affine {
                        let n = format!("{}.weight.grad", layer.name);
                        b.coll(
                            Phase::Backward,
                            &layer.name,
                            CollectiveOp::AllReduce,
                            n,
                            vec![h],
                            None,
                        );
                        if matches!(layer.op, Op::LayerNorm { .. }) {
                            let n = format!("{}.bias.grad", layer.name);
                            b.coll(
                                Phase::Backward,
                                &layer.name,
                                CollectiveOp::AllReduce,
                                n,
                                vec![h],
                                None,
                            );
                        }
                    }
                    Split::Axis {
                        axis: 0,
                        ranges: r,
                        by: by.clone(),
                    }
                } else {
                    Split::Replicated
                };
                if *affine {
                    b.push_param(format!("{}.weight", layer.name), vec![h], Split::Replicated);
                    if matches!(layer.op, Op::LayerNorm { .. }) {
                        b.push_param(format!("{}.bias", layer.name), vec![h], Split::Replicated);
                    }
                }
                (x.shape.clone(), out_split)
            }
            Op::Sdpa {
                k,
                v,
                heads,
                cp,
                load_balance,
                causal,
                ..
            } => {
                needs_f32(&x)?;
                let kt = b.lookup(&format!("{lp}.inputs[1]"), k, li)?;
                let vt = b.lookup(&format!("{lp}.inputs[2]"), v, li)?;
                needs_f32(&kt)?;
                needs_f32(&vt)?;
                if x.shape.len() != 3 {
                    return Err(ctx.err(
                        &format!("{lp}.inputs[0]"),
                        format!(
                            "`{}` has shape {:?}; allowed: a 3-D tensor [batch, seq, heads·head_dim] (sdpa views it [batch, seq, heads, head_dim] and transposes the heads forward)",
                            x.name, x.shape
                        ),
                    ));
                }
                for t in [&kt, &vt] {
                    if t.shape != x.shape {
                        return Err(ctx.err(
                            &format!("{lp}.inputs"),
                            format!(
                                "q, k and v of different shapes: `{}` is {:?} and `{}` is {:?}; allowed: three tensors of one shape [batch, seq, heads·head_dim]",
                                x.name, x.shape, t.name, t.shape
                            ),
                        ));
                    }
                    if !t.split.alike(&x.split) {
                        return Err(ctx.err(
                            &format!("{lp}.inputs"),
                            format!(
                                "q, k and v split differently: `{}` is {} and `{}` is {}; allowed: three tensors split the same way (column-parallel q, k and v layers, or all whole)",
                                x.name,
                                split_desc(&x.split),
                                t.name,
                                split_desc(&t.split)
                            ),
                        ));
                    }
                }
                head_sharding(
                    ctx,
                    &lp,
                    "inputs[0]",
                    &x,
                    *heads,
                    "q, k and v whole or split on their last dim by column-parallel layers (head-sharded attention)",
                )?;
                if *load_balance && (*cp < 2 || !*causal) {
                    return Err(ctx.err(
                        &format!("{lp}.load_balance"),
                        format!(
                            "load balancing with cp = {cp} and causal = {causal}; allowed: load_balance = true only with cp >= 2 and causal = true (torch: \"Load balancing requires `is_causal=True`\")"
                        ),
                    ));
                }
                if *cp > 1 {
                    ring_composes(ctx, b.spec, &lp, li, *cp, [&x, &kt, &vt])?;
                    let seq = x.shape[1];
                    if *load_balance && !seq.is_multiple_of(2 * cp) {
                        return Err(ctx.err(
                            &format!("{lp}.load_balance"),
                            format!(
                                "load balancing splits the sequence of {seq} tokens into 2 x cp = {} chunks; allowed: a sequence that 2 x cp divides, or load_balance = false",
                                2 * cp
                            ),
                        ));
                    }
                }
                (x.shape.clone(), x.split.clone())
            }
            Op::Rope { heads, theta } => {
                needs_f32(&x)?;
                if x.shape.len() != 3 {
                    return Err(ctx.err(
                        &format!("{lp}.input"),
                        format!(
                            "`{}` has shape {:?}; allowed: a 3-D tensor [batch, seq, heads·head_dim] (rope views it [batch, seq, heads, head_dim], positions along seq)",
                            x.name, x.shape
                        ),
                    ));
                }
                let width = x.shape[2];
                let head_dim = head_sharding(
                    ctx,
                    &lp,
                    "input",
                    &x,
                    *heads,
                    "whole, or split on its last dim by a column-parallel layer (head-sharded)",
                )?;
                if let Err((k, msg)) =
                    crate::ops::rope::check_domain(*theta, head_dim, 0, x.shape[1])
                {
                    let (key, what) = match k {
                        "theta" => ("theta", String::new()),
                        "seq" => ("input", format!(" (`{}` has seq {})", x.name, x.shape[1])),
                        _ => (
                            "heads",
                            format!(" ({heads} heads of width {width} give head_dim {head_dim})"),
                        ),
                    };
                    return Err(ctx.err(&format!("{lp}.{key}"), format!("{msg}{what}")));
                }
                (x.shape.clone(), x.split.clone())
            }
            Op::Moe {
                experts,
                ffn,
                gated,
                expert_parallel,
                ..
            } => {
                needs_f32(&x)?;
                whole(
                    &x,
                    "a mixture-of-experts layer (its router reads every feature)",
                )?;
                let h = *x.shape.last().unwrap_or(&1);
                let ep = *expert_parallel;
                if ep > 1 && (par.tp > 1 || par.dp > 1) {
                    return Err(ctx.err(
                        &format!("{lp}.expert_parallel"),
                        format!(
                            "expert_parallel = {ep} with tp = {} and dp = {}; allowed: expert parallelism on its own (tp = dp = 1): the expert-parallel ranks split the tokens and the experts",
                            par.tp, par.dp
                        ),
                    ));
                }
                let tokens: usize = x.shape[..x.shape.len() - 1].iter().product();
                if ep > 1 && tokens < ep {
                    return Err(ctx.err(
                        &format!("{lp}.expert_parallel"),
                        format!(
                            "expert_parallel = {ep} with {tokens} tokens in `{}`; allowed: at most as many ranks as tokens (each rank routes its own block of tokens)",
                            x.name
                        ),
                    ));
                }
                if ep > 1 && spec.parallel.rule == ShardRule::Megatron && !tokens.is_multiple_of(ep)
                {
                    return Err(ctx.err(
                        &format!("{lp}.expert_parallel"),
                        format!(
                            "expert_parallel = {ep} does not divide the {tokens} tokens of `{}` under shard_rule = \"megatron\"; allowed: a degree that divides the tokens, or shard_rule = \"deepspeed\"",
                            x.name
                        ),
                    ));
                }
                b.push_param(
                    format!("{}.router.weight", layer.name),
                    vec![*experts, h],
                    Split::Replicated,
                );
                for e in 0..*experts {
                    let p = format!("{}.experts.{e}", layer.name);
                    b.push_param(format!("{p}.w1.weight"), vec![*ffn, h], Split::Replicated);
                    b.push_param(format!("{p}.w2.weight"), vec![h, *ffn], Split::Replicated);
                    if *gated {
                        b.push_param(format!("{p}.w3.weight"), vec![*ffn, h], Split::Replicated);
                    }
                }
                if ep > 1 {
                    let mut a2a = |phase: Phase, tensor: String| {
                        b.collectives.push(Collective {
                            phase,
                            layer: layer.name.clone(),
                            op: CollectiveOp::AllToAll,
                            tensor,
                            shape: x.shape.clone(),
                            group: Group::Ep,
                            ranks: ep,
                            axis: Some(0),
                        });
                    };
                    a2a(Phase::Forward, format!("{}.dispatch", layer.name));
                    a2a(Phase::Forward, format!("{}.combine", layer.name));
                    a2a(Phase::Backward, format!("{}.combine.grad", layer.name));
                    a2a(Phase::Backward, format!("{}.dispatch.grad", layer.name));
                    b.collectives.push(Collective {
                        phase: Phase::Backward,
                        layer: layer.name.clone(),
                        op: CollectiveOp::AllReduce,
                        tensor: format!("{}.router.weight.grad", layer.name),
                        shape: vec![*experts, h],
                        group: Group::Ep,
                        ranks: ep,
                        axis: None,
                    });
                }
                (x.shape.clone(), Split::Replicated)
            }
            Op::Softmax => {
                needs_f32(&x)?;
                whole(&x, "a softmax over the last dim")?;
                (x.shape.clone(), x.split.clone())
            }
            Op::Binary { kind, other } => {
                needs_f32(&x)?;
                let y = b.lookup(&format!("{lp}.inputs[1]"), other, li)?;
                if y.dtype == Dtype::I64 {
                    return Err(ctx.err(
                        &format!("{lp}.inputs[1]"),
                        format!(
                            "`{}` holds int64 ids; op `{}` needs float32; allowed: a randn/values input or a layer's output",
                            y.name,
                            kind.name()
                        ),
                    ));
                }
                if x.shape != y.shape {
                    return Err(ctx.err(
                        &format!("{lp}.inputs"),
                        format!(
                            "{} of different shapes: `{}` is {:?} and `{}` is {:?}; allowed: two tensors of one shape",
                            kind.name(), x.name, x.shape, y.name, y.shape
                        ),
                    ));
                }
                // The same shards on every rank (who split them does not matter: SwiGLU's
                // gate and up are two column-parallel layers of one out size).
                if !x.split.alike(&y.split) {
                    return Err(ctx.err(
                        &format!("{lp}.inputs"),
                        format!(
                            "{} of differently split tensors: `{}` is {} and `{}` is {}; allowed: two tensors split the same way (e.g. both outputs of column-parallel layers of one out size, or both whole)",
                            kind.name(),
                            x.name,
                            split_desc(&x.split),
                            y.name,
                            split_desc(&y.split)
                        ),
                    ));
                }
                (x.shape.clone(), x.split.clone())
            }
        };
        b.producer.insert(out_name.clone(), li);
        b.tensors.push(Tensor {
            name: out_name,
            shape: out_shape,
            dtype: Dtype::F32,
            split: out_split,
            dp_ranges: x.dp_ranges.clone(),
            role: Role::Activation,
            alias_of: None,
        });
    }
    // Loss.
    let loss = &spec.loss;
    let lx = b.lookup("loss.input", &loss.input, spec.layers.len())?;
    if lx.dtype != Dtype::F32 {
        return Err(ctx.err(
            "loss.input",
            format!("`{}` holds int64 ids; allowed: a float32 tensor", lx.name),
        ));
    }
    let input_tensor = |key: &str, name: &str| -> Result<Tensor, InputError> {
        spec.inputs
            .iter()
            .position(|i| i.name == name)
            .map(|j| b.tensors[j].clone())
            .ok_or_else(|| {
                ctx.err(
                    &format!("loss.{key}"),
                    format!(
                        "no input is named `{name}`; allowed: one of the [[inputs]] ({})",
                        spec.inputs
                            .iter()
                            .map(|i| i.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
    };
    match &loss.op {
        LossOp::CrossEntropy { labels } => {
            let l = input_tensor("labels", labels)?;
            let v = *lx.shape.last().unwrap_or(&0);
            if l.dtype != Dtype::I64 {
                return Err(ctx.err("loss.labels", format!("`{labels}` is float32; cross-entropy labels are class indices; allowed: a randint input")));
            }
            if l.shape[..] != lx.shape[..lx.shape.len() - 1] {
                return Err(ctx.err(
                    "loss.labels",
                    format!(
                        "`{labels}` has shape {:?}, and logits `{}` of shape {:?} need labels of shape {:?}; allowed: labels with the logits' shape minus the last dim",
                        l.shape,
                        lx.name,
                        lx.shape,
                        &lx.shape[..lx.shape.len() - 1]
                    ),
                ));
            }
            if let Some((ii, inp)) = spec
                .inputs
                .iter()
                .enumerate()
                .find(|(_, i)| &i.name == labels)
            {
                fixed_in_range(ctx, ii, &inp.draw, v, "the logits' classes")?;
            }
            if let Some(Draw::Randint { high, .. }) = spec
                .inputs
                .iter()
                .find(|i| &i.name == labels)
                .map(|i| &i.draw)
            {
                if *high as usize > v {
                    return Err(ctx.err(
                        "loss.labels",
                        format!("`{labels}` draws classes up to {} and the logits have {v}; allowed: high <= {v}", high - 1),
                    ));
                }
            }
            if loss.vocab_parallel {
                let Split::Axis { axis, .. } = &lx.split else {
                    return Err(ctx.err(
                        "loss.parallel",
                        format!("vocab-parallel cross-entropy needs logits split over the vocab (its last dim), and `{}` is whole; allowed: a column-parallel head (no gather), or parallel = \"none\"", lx.name),
                    ));
                };
                if *axis != lx.shape.len() - 1 {
                    return Err(ctx.err(
                        "loss.parallel",
                        format!(
                            "`{}` is {}; vocab-parallel cross-entropy needs its last dim split",
                            lx.name,
                            split_desc(&lx.split)
                        ),
                    ));
                }
                for what in ["max", "sum-exp", "target-logit"] {
                    b.coll(
                        Phase::Forward,
                        "loss",
                        CollectiveOp::AllReduce,
                        format!("loss.{what}"),
                        l.shape.clone(),
                        None,
                    );
                }
            } else if let Split::Axis { by, .. } = &lx.split {
                return Err(ctx.err(
                    "loss.input",
                    format!("`{}` is {} ({by}), and cross-entropy needs the whole logits; allowed: parallel = \"vocab\" here, or column-gather there", lx.name, split_desc(&lx.split)),
                ));
            }
        }
        // `out.sum()` on any sharding: each rank sums its own shard, as the test's ranks do;
        // the gradient is the seed on every element.
        LossOp::Sum => {}
        LossOp::Mse { target } => {
            let t = input_tensor("target", target)?;
            if t.dtype != Dtype::F32 || t.shape != lx.shape {
                return Err(ctx.err(
                    "loss.target",
                    format!("`{target}` has shape {:?} ({:?}), and the prediction `{}` is {:?} float32; allowed: a float32 input of the prediction's shape", t.shape, t.dtype, lx.name, lx.shape),
                ));
            }
            if let Split::Axis { by, .. } = &lx.split {
                return Err(ctx.err(
                    "loss.input",
                    format!("`{}` is {} ({by}), and mse needs the whole prediction; allowed: gather it there (column-gather), or end with a row-parallel linear", lx.name, split_desc(&lx.split)),
                ));
            }
        }
    }
    // Refuse a graph too large to hold before anything is allocated: every tensor is kept in
    // f32 and f64 with its gradient (and optimizer state for parameters).
    let elements: usize = b
        .tensors
        .iter()
        .filter(|t| t.alias_of.is_none())
        .map(|t| t.shape.iter().product::<usize>())
        .sum();
    if elements > MAX_GRAPH_ELEMENTS {
        return Err(ctx.err(
            "dims",
            format!(
                "the graph's tensors hold {elements} elements; allowed: at most {MAX_GRAPH_ELEMENTS} (2^30), since every one is kept in f32 and f64 with its gradient; use smaller dims"
            ),
        ));
    }
    b.tensors.push(Tensor {
        name: "loss".into(),
        shape: vec![],
        dtype: Dtype::F32,
        split: Split::Replicated,
        dp_ranges: None,
        role: Role::Loss,
        alias_of: None,
    });
    // Megatron's vocab-parallel cross-entropy returns the per-token losses (one per label),
    // reduced by the test's `.mean()`; they are the same on every rank after its all-reduces.
    if let (LossOp::CrossEntropy { labels }, true, 1) = (&loss.op, loss.vocab_parallel, par.dp) {
        let shape = lx.shape[..lx.shape.len() - 1].to_vec();
        let _ = labels;
        b.tensors.push(Tensor {
            name: "loss.tokens".into(),
            shape,
            dtype: Dtype::F32,
            split: Split::Replicated,
            dp_ranges: None,
            role: Role::Loss,
            alias_of: None,
        });
    }
    // Parameters and their gradients; DP reduction of the gradients.
    let params: Vec<Tensor> = b
        .tensors
        .iter()
        .filter(|t| t.role == Role::Param && t.alias_of.is_none())
        .cloned()
        .collect();
    for p in &params {
        grads.push(p.name.clone());
    }
    if par.dp > 1 {
        let op = if par.zero_stage >= 2 {
            CollectiveOp::ReduceScatter
        } else {
            CollectiveOp::AllReduce
        };
        let phase = if spec.train.outer.is_some() {
            Phase::Sync
        } else {
            Phase::Step
        };
        let hsdp = par.dp_replicate > 1 && phase == Phase::Step;
        for p in &params {
            if hsdp {
                // FSDP2's HSDP reduction: a reduce-scatter within each shard group, then an
                // all-reduce of the shard within each replicate group.
                let shard = par.dp / par.dp_replicate;
                b.collectives.push(Collective {
                    phase,
                    layer: "optimizer".into(),
                    op: CollectiveOp::ReduceScatter,
                    tensor: format!("{}.grad", p.name),
                    shape: p.shape.clone(),
                    group: Group::DpShard,
                    ranks: shard,
                    axis: Some(0),
                });
                b.collectives.push(Collective {
                    phase,
                    layer: "optimizer".into(),
                    op: CollectiveOp::AllReduce,
                    tensor: format!("{}.grad shard", p.name),
                    shape: p.shape.clone(),
                    group: Group::DpReplicate,
                    ranks: par.dp_replicate,
                    axis: None,
                });
                continue;
            }
            b.collectives.push(Collective {
                phase,
                layer: "optimizer".into(),
                op: if phase == Phase::Sync {
                    CollectiveOp::AllReduce
                } else {
                    op
                },
                tensor: if phase == Phase::Sync {
                    format!("{}.pseudo-grad", p.name)
                } else {
                    format!("{}.grad", p.name)
                },
                shape: p.shape.clone(),
                group: Group::Dp,
                ranks: par.dp,
                axis: (op == CollectiveOp::ReduceScatter && phase == Phase::Step).then_some(0),
            });
        }
    }
    // Checks.
    let mut checks = Vec::new();
    let mut skipped = Vec::new();
    let mut indexed = Vec::new();
    for (ci, c) in spec.checks.iter().enumerate() {
        match resolve_check(ctx, &b, spec, &grads, ci, c)? {
            Ok(rc) => indexed.push((ci, rc)),
            Err(why) => skipped.push((c.name.clone(), why)),
        }
    }
    check_order(ctx, spec, &indexed)?;
    checks.extend(indexed.into_iter().map(|(_, c)| c));
    if checks.is_empty() {
        return Err(ctx.err("checks", "every check is skipped in this parametrization; allowed: at least one check that records"));
    }
    b.collectives.sort_by_key(|c| c.phase);
    Ok(Graph {
        id: id.to_string(),
        spec: spec.clone(),
        tensors: b.tensors,
        collectives: b.collectives,
        checks,
        skipped,
        grads,
    })
}

/// Where in a micro-step a check records (the executor's three phases).
fn phase_of(what: &CheckWhat) -> u8 {
    match what {
        CheckWhat::Activation(_) | CheckWhat::Loss | CheckWhat::LossTokens => 0,
        CheckWhat::Grad(_) | CheckWhat::ParamGrad(_) => 1,
        CheckWhat::Param(_) | CheckWhat::SgdUpdate(_) => 2,
    }
}

/// Checks that the file lists checks in the order they first record: micro-step checks
/// before step-end ones (when there are several micro-steps), and within one micro-step
/// activations and the loss, then gradients, then parameters.
fn check_order(
    ctx: &Ctx,
    spec: &Spec,
    checks: &[(usize, ResolvedCheck)],
) -> Result<(), InputError> {
    let last = spec.train.micro_steps - 1;
    let key = |c: &ResolvedCheck| {
        let micro = if c.at == At::MicroStep { 0 } else { last };
        (micro, phase_of(&c.what))
    };
    for w in checks.windows(2) {
        let ((_, a), (j, b)) = (&w[0], &w[1]);
        if key(b) < key(a) {
            return Err(ctx.err(
                &format!("checks[{j}]"),
                format!(
                    "check `{}` records before `{}` (listed above it), and the output lists checks in the order they first record; allowed: list checks at every micro-step before checks at the step's end, and within one micro-step activations and the loss, then gradients, then parameters",
                    b.name, a.name
                ),
            ));
        }
    }
    Ok(())
}

/// Resolves one check: `Ok(Ok(check))` when it records, `Ok(Err(why))` when it is optional
/// and skipped here, `Err` when it is wrong.
fn resolve_check(
    ctx: &Ctx,
    b: &Builder<'_>,
    spec: &Spec,
    grads: &[String],
    ci: usize,
    c: &Check,
) -> Result<Result<ResolvedCheck, String>, InputError> {
    let path = format!("checks[{ci}].tensor");
    let at_path = format!("checks[{ci}].at");
    let listing = || {
        let mut names: Vec<String> = Vec::new();
        for t in &b.tensors {
            names.push(t.name.clone());
        }
        for g in grads {
            names.push(format!("{g}.grad"));
        }
        names.join(", ")
    };
    let (base, is_grad) = match c.tensor.strip_suffix(".grad") {
        Some(b) => (b, true),
        None => (c.tensor.as_str(), false),
    };
    let missing = |why: String| -> Result<Result<ResolvedCheck, String>, InputError> {
        if c.optional {
            Ok(Err(why))
        } else {
            Err(ctx.err(
                &path,
                format!("{why}; allowed: a tensor that is computed ({}), or optional = true to skip the check where it is not", listing()),
            ))
        }
    };
    if base == "loss.tokens" && b.get(base).is_none() {
        return Err(ctx.err(
            &path,
            "`loss.tokens` (the per-token losses) is recorded for a vocab-parallel cross-entropy only (Megatron's `vocab_parallel_cross_entropy` returns them before `.mean()`), with dp = 1; allowed: loss.op = \"cross-entropy\" with loss.parallel = \"vocab\", or a check on `loss`",
        ));
    }
    let Some(t) = b.get(base).or_else(|| b.get(&format!("{base}.out"))) else {
        // A parameter the layer does not have (bias = false) is "never computed".
        if let Some((layer, part)) = base.rsplit_once('.') {
            if let Some(l) = spec.layers.iter().find(|l| l.name == layer) {
                if matches!(part, "weight" | "bias") {
                    return missing(format!(
                        "`{}` is never computed: layer `{layer}` ({}) has no {part}",
                        c.tensor,
                        l.op.name()
                    ));
                }
            }
        }
        return Err(ctx.err(
            &path,
            format!("no tensor is named `{}`; allowed: {}", c.tensor, listing()),
        ));
    };
    let storage = t.alias_of.clone().unwrap_or_else(|| t.name.clone());
    let what = match (t.role, is_grad) {
        (Role::Loss, false) if spec.loss.op == LossOp::Sum => {
            return Err(ctx.err(
                &path,
                "the value of a `sum` loss is not modelled for the sharded computation (each rank sums its own shard), only its gradient; allowed: a check on an activation, gradient or parameter",
            ));
        }
        (Role::Loss, false) if t.name == "loss.tokens" => CheckWhat::LossTokens,
        (Role::Loss, false) => CheckWhat::Loss,
        (Role::Activation, false) | (Role::Input, false) => {
            if t.role == Role::Input {
                return Err(ctx.err(&path, format!("`{}` is an input as drawn, the same in every computation, so there is nothing to compare; allowed: a computed tensor ({})", t.name, listing())));
            }
            CheckWhat::Activation(t.name.clone())
        }
        (Role::Param, false) => {
            if c.kind == CheckKind::SgdUpdate {
                CheckWhat::SgdUpdate(t.name.clone())
            } else {
                CheckWhat::Param(t.name.clone())
            }
        }
        (Role::Param, true) => {
            if spec.parallel.zero_stage >= 2 {
                return missing(format!(
                    "`{}` is never whole: zero_stage = {} partitions parameter gradients",
                    c.tensor, spec.parallel.zero_stage
                ));
            }
            CheckWhat::ParamGrad(t.name.clone())
        }
        (Role::Input, true) => {
            if !grads.contains(&t.name) {
                return missing(format!(
                    "`{}` is never computed: input `{}` has grad = false (set grad = true, as the test's requires_grad)",
                    c.tensor, t.name
                ));
            }
            CheckWhat::Grad(t.name.clone())
        }
        (Role::Activation, true) => CheckWhat::Grad(t.name.clone()),
        (Role::Loss, true) => {
            return Err(ctx.err(
                &path,
                format!(
                    "`{}` is the backward seed, not a computed tensor; allowed: {}",
                    c.tensor,
                    listing()
                ),
            ));
        }
    };
    if c.kind == CheckKind::SgdUpdate && !matches!(what, CheckWhat::SgdUpdate(_)) {
        return Err(ctx.err(&path, format!("an sgd-update check compares a parameter after the update; `{}` is not a parameter; allowed: a `<layer>.weight` or `<layer>.bias`", c.tensor)));
    }
    let (default_at, allowed_at): (At, &[At]) = match &what {
        CheckWhat::Activation(_) | CheckWhat::Loss | CheckWhat::LossTokens | CheckWhat::Grad(_) => {
            (At::MicroStep, &[At::MicroStep])
        }
        CheckWhat::ParamGrad(_) => (At::Step, &[At::MicroStep, At::Step]),
        CheckWhat::Param(_) => (At::Step, &[At::Step, At::Update]),
        CheckWhat::SgdUpdate(_) => (At::Update, &[At::Update]),
    };
    let at = c.at.unwrap_or(default_at);
    if !allowed_at.contains(&at) {
        let why = match &what {
            CheckWhat::Param(_) => {
                "is a parameter, which changes only at the optimizer step, and cannot be checked"
            }
            CheckWhat::ParamGrad(_) => "is an accumulated gradient and cannot be checked",
            CheckWhat::SgdUpdate(_) => {
                "is an sgd-update check, which records at the optimizer step, and cannot be checked"
            }
            _ => "is computed at every micro-step and cannot be checked",
        };
        return Err(ctx.err(
            &at_path,
            format!(
                "`{}` {why} at \"{}\"; allowed: {}",
                c.tensor,
                at.name(),
                allowed_at
                    .iter()
                    .map(|a| format!("\"{}\"", a.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if c.kind == CheckKind::SgdUpdate
        && !matches!(spec.train.optimizer, Optimizer::Sgd { weight_decay, .. } if weight_decay == 0.0)
    {
        return Err(ctx.err(
            &format!("checks[{ci}].kind"),
            format!(
                "sgd-update restates `old - lr * grad`, plain SGD's update, and the optimizer is {}; allowed: optimizer = \"sgd\" without weight_decay, or kind = \"value\"",
                spec.train.optimizer.name()
            ),
        ));
    }
    let reduction = match &what {
        CheckWhat::Activation(name) => spec
            .layers
            .iter()
            .find(|l| &format!("{}.out", l.name) == name)
            .and_then(|l| match &l.op {
                Op::Linear { .. } => {
                    let w = b.get(&format!("{}.weight", l.name))?;
                    let k = w.shape[1];
                    Some(match (&l.parallel, &w.split) {
                        (LayerParallel::Row, Split::Axis { ranges, .. }) => CheckReduction {
                            k,
                            max_shard: ranges.iter().map(|r| r.len()).max().unwrap_or(k),
                            ranks: ranges.len(),
                        },
                        _ => CheckReduction {
                            k,
                            max_shard: k,
                            ranks: 1,
                        },
                    })
                }
                _ => None,
            }),
        _ => None,
    };
    let shape = b
        .get(&storage)
        .map(|s| s.shape.clone())
        .unwrap_or_else(|| t.shape.clone());
    Ok(Ok(ResolvedCheck {
        name: c.name.clone(),
        tensor: c.tensor.clone(),
        target: if is_grad {
            format!("{storage}.grad")
        } else {
            storage
        },
        what,
        shape,
        at,
        kind: c.kind,
        reduction,
    }))
}

/// The head-sharding rule of `sdpa` and `rope` on `x` (`[batch, seq, heads·head_dim]`, read
/// by key `{lp}.{input_key}`): `heads` divides the width, and a split of `x` is on its last
/// dim with every shard boundary on a head boundary (head-sharded tensor parallelism).
/// Returns `head_dim`; `whole` says what is allowed instead of a split on another dim.
fn head_sharding(
    ctx: &Ctx,
    lp: &str,
    input_key: &str,
    x: &Tensor,
    heads: usize,
    whole: &str,
) -> Result<usize, InputError> {
    let width = x.shape[2];
    if heads == 0 || !width.is_multiple_of(heads) {
        return Err(ctx.err(
            &format!("{lp}.heads"),
            format!(
                "{heads} heads do not divide the width {width} of `{}`; allowed: a number of heads that divides {width}",
                x.name
            ),
        ));
    }
    let head_dim = width / heads;
    if let Split::Axis { axis, ranges, by } = &x.split {
        if *axis != 2 {
            return Err(ctx.err(
                &format!("{lp}.{input_key}"),
                format!(
                    "`{}` is {} ({by}); allowed: {whole}",
                    x.name,
                    split_desc(&x.split)
                ),
            ));
        }
        if let Some(r) = ranges
            .iter()
            .find(|r| !r.start.is_multiple_of(head_dim) || !r.end.is_multiple_of(head_dim))
        {
            return Err(ctx.err(
                &format!("{lp}.heads"),
                format!(
                    "the shard rule splits `{}`'s {width} features at {}..{}, inside a head of {head_dim} features ({heads} heads over tp = {}); allowed: a number of heads whose features the shard rule splits on head boundaries (heads a multiple of tp, or a tp_grain of head_dim under deepspeed)",
                    x.name,
                    r.start,
                    r.end,
                    ranges.len()
                ),
            ));
        }
    }
    Ok(head_dim)
}

/// What a context-parallel `sdpa` layer (`cp` > 1, ring attention) needs, each refusal naming
/// `{lp}.cp`: a sequence of at least `cp` tokens that `cp` divides (each rank a contiguous
/// chunk), q, k and v that are the test's inputs, whole (not head-sharded), in a file without
/// tensor or data parallelism and with no layer after it (a layer on the ranks' chunks would
/// run other kernel shapes than on the whole sequence; not modelled yet).
fn ring_composes(
    ctx: &Ctx,
    spec: &Spec,
    lp: &str,
    li: usize,
    cp: usize,
    qkv: [&Tensor; 3],
) -> Result<(), InputError> {
    let key = format!("{lp}.cp");
    let seq = qkv[0].shape[1];
    if seq < cp {
        return Err(ctx.err(
            &key,
            format!(
                "a sequence of {seq} tokens is shorter than the ring of cp = {cp} ranks; allowed: cp <= {seq} (each rank holds at least one token), a cp that divides {seq}"
            ),
        ));
    }
    if !seq.is_multiple_of(cp) {
        return Err(ctx.err(
            &key,
            format!(
                "cp = {cp} does not divide the sequence of {seq} tokens; allowed: a cp that divides {seq} (torch's context_parallel shards the sequence dim evenly)"
            ),
        ));
    }
    let par = &spec.parallel;
    if par.tp > 1 || par.dp > 1 {
        return Err(ctx.err(
            &key,
            format!(
                "ring attention (cp = {cp}) together with tp = {} and dp = {} is not run yet; allowed: cp with tp = 1 and dp = 1, or cp = 1",
                par.tp, par.dp
            ),
        ));
    }
    for t in qkv {
        if !spec.inputs.iter().any(|i| i.name == t.name) || !matches!(t.split, Split::Replicated) {
            return Err(ctx.err(
                &key,
                format!(
                    "ring attention (cp = {cp}) reads `{}`, which is not a whole input of the file; allowed: q, k and v drawn or given as [[inputs]] (a layer before the ring would run on the ranks' sequence chunks, not modelled yet), or cp = 1",
                    t.name
                ),
            ));
        }
    }
    if li + 1 != spec.layers.len() {
        return Err(ctx.err(
            &key,
            format!(
                "ring attention (cp = {cp}) is followed by layers[{}]; allowed: the ring as the last layer (a layer after it would run on the ranks' sequence chunks, not modelled yet), or cp = 1",
                li + 1
            ),
        ));
    }
    Ok(())
}
