//! The resolved graph: one parametrization of a scenario with every dimension concrete.
//!
//! This is the plain data the scenario language (`src/lang/`) lowers a TOML file into, once
//! per `[[params]]` entry, and what the executor ([`crate::exec`]) runs. Nothing here is
//! symbolic: every shape is a number, every shard is a range, every seed rule is explicit.
//! Tensors, parameters and inputs are referred to by index into the graph's own tables
//! ([`TensorId`], [`ParamId`], [`InputId`]), so a graph can be printed and compared as is.
//!
//! # Execution model (what the executor does with a graph)
//!
//! One seed-run runs the graph three times, exactly as the hand-written scenarios did:
//! in float64 unsharded (the ground truth), in fp32 unsharded (the reference) and in fp32
//! sharded (what the test runs, degree [`Parallel::tp`] × [`Parallel::dp`]). All three share
//! the same initial parameters and inputs:
//!
//! 1. **Init.** Parameters are drawn in table order ([`ResolvedGraph::params`], which is the
//!    test's module-construction order) from one generator seeded with the sweep seed
//!    (torch: `torch.manual_seed(seed)` then each [`TorchInit`] in turn; ChaCha: the stream
//!    named after the parameter). A tied parameter is drawn (torch: consumes its draws) and
//!    then replaced by the storage of the parameter it is tied to.
//! 2. **Inputs.** For global micro-step `i = micro_steps·s + m` of step `s`, every
//!    [`InputDraw`] is drawn in table order after `torch.manual_seed(seed_base + i)` (or from
//!    the ChaCha stream named after the input, keyed by that seed), then the [`Fixup`]s are
//!    applied. Inputs do not depend on the sweep seed; they are drawn once per graph.
//! 3. **Micro-step.** Forward through [`ResolvedGraph::layers`] in order, then the loss, then
//!    backward in reverse layer order. The backward seed is the loss gradient scaled by
//!    `1/micro_steps` when [`Loss::divide_by_micro_steps`] (the test's `loss / accum`).
//!    Parameter gradients of one micro-step are summed over the parameter's uses in backward
//!    order (a tied weight: head part, then embedding part); across micro-steps they are
//!    accumulated as torch does (first stored as is, then `acc + g`).
//! 4. **Step.** After the last micro-step, the gradient reduction over data-parallel ranks
//!    ([`GradReduce`]; a reduce-scatter runs after every micro-step instead), then the
//!    optimizer on every parameter. The data-parallel order is in
//!    [`crate::exec::graph`]'s `dp` module doc.
//! 5. **Checks.** Recorded into the trace in three phases per micro-step, each in check-table
//!    order: after the loss (activations, the loss), after the backward pass and accumulation
//!    (gradients), and after the optimizer step (parameters, self-consistency checks). A check
//!    [`At::Step`] records at the last micro-step of each step with label `s`; one
//!    [`At::MicroStep`] records at every micro-step with label `s.m` (step-end checks then use
//!    the last micro-step's label). Without gradient accumulation (`micro_steps = 1`) every
//!    label is the step's, `s`.
//!
//! Parallelism only changes the sharded computation: with one shard every parallel layer
//! is its unsharded self, so the reference computation is the same graph at degree 1.
//! Mutants ([`crate::scenario::mutant::Mutant`]) follow from the parallelism the graph contains
//! ([`ResolvedGraph::mutants`]).

use std::ops::Range;

use crate::scenario::config::RngKind;
use crate::scenario::mutant::Mutant;

/// Index into [`ResolvedGraph::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// Index into [`ResolvedGraph::params`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(pub usize);

/// Index into [`ResolvedGraph::inputs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InputId(pub usize);

/// One parametrization, fully resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedGraph {
    /// pytest-style parametrization id (`35-3-False-0`).
    pub id: String,
    /// The named integers this parametrization resolved (`hidden = 35`), in file order,
    /// for printing only.
    pub dims: Vec<(String, usize)>,
    /// Generator of the init and the inputs.
    pub rng: RngKind,
    /// Degrees and the shard rule.
    pub parallel: Parallel,
    /// Parameters in module-construction (draw) order.
    pub params: Vec<ParamDecl>,
    /// Input draws and their seed rule.
    pub inputs: Inputs,
    /// Activations: every tensor a layer reads or writes (graph inputs included).
    pub tensors: Vec<TensorDecl>,
    /// Layers in forward order.
    pub layers: Vec<Layer>,
    /// The loss on the last layer's output.
    pub loss: Loss,
    /// Steps, micro-steps, optimizer, outer loop.
    pub train: Train,
    /// Checks in recording order of their first slot.
    pub checks: Vec<CheckDecl>,
}

/// Tensor- and data-parallel degrees and how dimensions are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    /// Tensor-parallel degree (1 = none), 1..=64.
    pub tp: usize,
    /// Data-parallel degree (1 = none), 1..=64: every data-parallel rank, `replicate ×
    /// (dp / replicate)` under HSDP.
    pub dp: usize,
    /// HSDP's replicate degree (`dp_replicate`, 1 = a 1-D data-parallel group): the `dp`
    /// ranks form a `replicate × dp/replicate` mesh, rank `r·(dp/replicate) + s` at (r, s);
    /// parameters are sharded over the shard group (`dp/replicate` ranks, same r) and the
    /// reduce-scattered gradients all-reduced over the replicate group (same s).
    pub replicate: usize,
    /// How a dimension is split over `tp` ranks.
    pub shard_rule: ShardRule,
}

/// How a dimension of size `total` is split over ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardRule {
    /// DeepSpeed AutoTP's near-even rule in grains of `grain` columns
    /// ([`crate::scenario::shard::shard_size`]): uneven shards allowed (35 over 2 = 18 + 17;
    /// 16 over 3 with grain 2 = 6 + 6 + 4).
    DeepSpeed {
        /// `tp_grain_size`, >= 1.
        grain: usize,
    },
    /// Megatron's `divide(total, tp)`: equal shards; a total that `tp` does not divide is an
    /// error found when lowering.
    Megatron,
}

impl ShardRule {
    /// The contiguous shard ranges of a dimension of size `total` over `ranks`, rank order.
    /// Megatron's rule on a total `ranks` does not divide returns `None`.
    pub fn ranges(self, total: usize, ranks: usize) -> Option<Vec<Range<usize>>> {
        match self {
            Self::DeepSpeed { grain } => {
                Some(crate::scenario::shard::shard_ranges(total, ranks, grain))
            }
            Self::Megatron => {
                if ranks == 0 || !total.is_multiple_of(ranks) {
                    return None;
                }
                let s = total / ranks;
                Some((0..ranks).map(|r| r * s..(r + 1) * s).collect())
            }
        }
    }
}

/// One parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamDecl {
    /// Module path as the test names it (`projection.weight`); also the ChaCha stream name.
    pub name: String,
    /// Shape: `[out, in]` for a linear weight, `[rows, dim]` for an embedding, `[n]` for a
    /// bias or a norm weight.
    pub shape: Vec<usize>,
    /// How it is initialised.
    pub init: ParamInit,
    /// Tied to an earlier parameter: this one is drawn (its torch draws are consumed, in
    /// order) and then replaced by that parameter's storage, as `head.weight =
    /// embedding.weight` does. Its uses then contribute to the target's gradient.
    pub tie: Option<ParamId>,
}

/// Initialisation of a parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamInit {
    /// Drawn: with the torch generator as [`TorchInit`] says; with ChaCha from the stream named
    /// after the parameter ([`TorchInit::chacha`] gives the distribution).
    Draw(TorchInit),
    /// All zeros (no draw; `nn.LayerNorm`'s bias).
    Zeros,
    /// All ones (no draw; `nn.LayerNorm` / `RMSNorm` weight).
    Ones,
    /// Written in the file (a test with hand-written initial values): the values are in
    /// [`OuterData::Fixed`]'s `init`, nothing is drawn.
    Fixed,
}

/// A torch init rule, as the module's `reset_parameters` applies it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TorchInit {
    /// `nn.Linear.weight`: `kaiming_uniform_(a=√5)`, i.e. U(-1/√fan_in, 1/√fan_in)
    /// ([`crate::rng::torch::TorchGenerator::kaiming_uniform_linear`]).
    KaimingUniform {
        /// The weight's input features.
        fan_in: usize,
    },
    /// `nn.Linear.bias`: U(-1/√fan_in, 1/√fan_in)
    /// ([`crate::rng::torch::TorchGenerator::linear_bias_uniform`]).
    BiasUniform {
        /// The layer's input features.
        fan_in: usize,
    },
    /// `normal_(mean, std)` (`nn.Embedding`: N(0, 1)); `zero_row` is then zeroed
    /// (`padding_idx`).
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
        /// Row zeroed after the draw (the embedding's `padding_idx`).
        zero_row: Option<usize>,
    },
}

/// The distribution a ChaCha stream draws for a [`TorchInit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChaChaInit {
    /// `fill_uniform(-bound, bound)` with `bound = 1 / sqrt(fan_in as f32)` in f32.
    Uniform {
        /// fan_in of the bound.
        fan_in: usize,
    },
    /// `fill_normal(mean, std)` (f32 parameters).
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
    },
}

impl TorchInit {
    /// The ChaCha distribution standing in for this rule (the same law).
    pub fn chacha(self) -> ChaChaInit {
        match self {
            Self::KaimingUniform { fan_in } | Self::BiasUniform { fan_in } => {
                ChaChaInit::Uniform { fan_in }
            }
            Self::Normal { mean, std, .. } => ChaChaInit::Normal {
                mean: mean as f32,
                std: std as f32,
            },
        }
    }
}

/// The graph's inputs: what is drawn per micro-step and how it is seeded.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// Global micro-step `i` draws after `torch.manual_seed(seed_base + i)` (ChaCha: key
    /// `seed_base + i`), `i = micro_steps·step + micro`.
    pub seed_base: u64,
    /// Draws in order.
    pub draws: Vec<InputDraw>,
    /// Applied in order after all draws of a micro-step.
    pub fixups: Vec<Fixup>,
}

/// One drawn input.
#[derive(Debug, Clone, PartialEq)]
pub struct InputDraw {
    /// Name (`input_ids`, `labels`, `x`); also the ChaCha stream name.
    pub name: String,
    /// Full (global-batch) shape.
    pub shape: Vec<usize>,
    /// What is drawn.
    pub kind: DrawKind,
    /// The activation this input feeds (`None` for labels and targets, which the loss reads
    /// by [`InputId`]). A float input with a tensor is a leaf: its gradient is `x.grad`.
    pub tensor: Option<TensorId>,
    /// The values of a [`DrawKind::Fixed`] input (the same at every micro-step), else `None`.
    pub values: Option<FixedValues>,
}

/// Values written in the file, row-major over the input's global shape.
#[derive(Debug, Clone, PartialEq)]
pub enum FixedValues {
    /// float32 (each number rounded once to nearest-even, as `torch.tensor` stores it).
    F32(Vec<f32>),
    /// int64.
    I64(Vec<i64>),
}

impl FixedValues {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::I64(v) => v.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What an input draw produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawKind {
    /// `torch.randn(shape)` (fp32). ChaCha: `fill_normal(0, 1)`.
    Randn,
    /// `torch.rand(shape)` (fp32, U[0, 1): 24 random bits over 2^24 per element). ChaCha:
    /// `fill_uniform(0, 1)`. `seeded`: drawn once per sweep seed, right after the seed's
    /// `manual_seed` and before every weight, in file order ([`crate::exec::init::draw_params`]:
    /// the values sit after the parameters in the seed's buffers); nothing is drawn per
    /// micro-step. Else drawn per micro-step as `Randn`.
    Rand {
        /// Drawn from the sweep seed's generator.
        seeded: bool,
    },
    /// `torch.randint(high, shape)` (int64). ChaCha: `next_u32() % high` per element.
    Randint {
        /// Exclusive upper bound.
        high: u64,
    },
    /// Float values the graph's outer loop supplies ([`OuterData`]: written in the file, or
    /// drawn per seed); the replicas' batches, replica r taking block r of the leading axis.
    /// Nothing is drawn per micro-step.
    Given,
    /// Written in the file ([`InputDraw::values`], `draw = "fixed"`): the same values at every
    /// micro-step, nothing drawn (the generator is not advanced: `torch.tensor(...)`).
    Fixed {
        /// int64 values (labels, ids), else float32.
        int64: bool,
    },
}

/// A fix-up of a drawn integer input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixup {
    /// `input[index] = value` at a flat (row-major) index, e.g. `ids[0,0] = padding_idx`.
    Set {
        /// The integer input.
        input: InputId,
        /// Flat index.
        index: usize,
        /// The value written.
        value: i64,
    },
}

/// One activation tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDecl {
    /// Name as checks and messages use it (`head.out`, `x`).
    pub name: String,
    /// Full unsharded shape; matmuls see it as `[rows, last]` with `rows` the product of the
    /// leading dimensions.
    pub shape: Vec<usize>,
}

/// One layer in forward order.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Name (`projection`, `head`).
    pub name: String,
    /// What it computes.
    pub op: Op,
}

/// How a linear weight is stored (row-major either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightLayout {
    /// torch's `nn.Linear.weight`, `[out, in]`: `y = x·Wᵀ` through the backend's
    /// `linear_bias` / `matmul_nt`, `dW = dyᵀ·x`, `dx = dy·W`, `db` by torch's column sums.
    #[default]
    OutIn,
    /// A flax kernel (`nnx.Linear`), `[in, out]`: `y = x·K` through the backend's `matmul`,
    /// then `y = y + b` per row; `dK = xᵀ·dy` (`matmul_tn`), `dx = dy·Kᵀ` (`matmul_nt`),
    /// `db` summed from the first row down ([`crate::ops::layers::column_sums_generic`]).
    /// Tensor parallelism is not supported on it.
    InOut,
}

/// A layer's computation.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `out = table[ids]` (`nn.Embedding`); backward scatter-adds rows, skipping
    /// `padding_idx`.
    Embedding {
        /// The integer input.
        ids: InputId,
        /// `[rows, dim]` table.
        table: ParamId,
        /// Output `[.., dim]`.
        out: TensorId,
        /// Row whose gradient is never written.
        padding_idx: Option<i64>,
        /// Sharding of the table.
        parallel: EmbeddingParallel,
    },
    /// `out = x · Wᵀ (+ b)` (`nn.Linear`), or `out = x · K (+ b)` for a flax kernel
    /// ([`WeightLayout::InOut`]).
    Linear {
        /// Input `[.., in]`.
        x: TensorId,
        /// The weight: `[out, in]` as declared ([`ParamDecl::shape`]), stored as `layout` says.
        weight: ParamId,
        /// `[out]` bias.
        bias: Option<ParamId>,
        /// Output `[.., out]`.
        out: TensorId,
        /// Sharding.
        parallel: LinearParallel,
        /// How the weight is stored.
        layout: WeightLayout,
    },
    /// An elementwise activation.
    Activation {
        /// Which one.
        kind: Activation,
        /// Input.
        x: TensorId,
        /// Output (same shape).
        out: TensorId,
    },
    /// A normalisation over the last dimension.
    Norm {
        /// LayerNorm or RMSNorm.
        kind: NormKind,
        /// Input.
        x: TensorId,
        /// Elementwise weight (`[dim]`), if affine.
        weight: Option<ParamId>,
        /// Bias (`[dim]`, LayerNorm only).
        bias: Option<ParamId>,
        /// `eps` as the module holds it.
        eps: f64,
        /// Output.
        out: TensorId,
        /// Sharding.
        parallel: NormParallel,
    },
    /// `out = a + b` or `out = a * b`, elementwise, one rounding per element (torch's
    /// `add` / `mul` of two tensors of one shape).
    Binary {
        /// Which op.
        kind: BinaryKind,
        /// Left operand.
        a: TensorId,
        /// Right operand.
        b: TensorId,
        /// Output.
        out: TensorId,
    },
    /// `out = F.softmax(x, -1)` over the last dimension ([`crate::ops::softmax`]).
    Softmax {
        /// Input.
        x: TensorId,
        /// Output (same shape).
        out: TensorId,
    },
    /// Scaled-dot-product attention in torch's math path ([`crate::ops::attention`]) on
    /// `[batch, seq, heads·head_dim]` tensors.
    Sdpa {
        /// Queries.
        q: TensorId,
        /// Keys.
        k: TensorId,
        /// Values.
        v: TensorId,
        /// Output (q's shape).
        out: TensorId,
        /// Heads.
        heads: usize,
        /// A causal mask.
        causal: bool,
        /// The scale as the test passes it (torch's default `1/sqrt(head_dim)` resolved).
        scale: f64,
        /// Context-parallel degree: the sharded computation runs ring attention over `cp`
        /// sequence chunks ([`crate::ops::ring`]); 1: none.
        cp: usize,
        /// The ring with torch's round-robin load balancing.
        load_balance: bool,
    },
    /// Rotary position embeddings ([`crate::ops::rope`]) on `[batch, seq, heads·head_dim]`.
    Rope {
        /// Input.
        x: TensorId,
        /// Output (same shape).
        out: TensorId,
        /// The cos and sin tables of the positions `0..seq`, built once per scenario.
        tables: std::sync::Arc<crate::ops::rope::RopeTables>,
    },
    /// A mixture-of-experts layer ([`crate::ops::moe`]) on `[.., hidden]` tokens: router
    /// `[experts, hidden]`, then per expert `w1` `[ffn, hidden]`, `w2` `[hidden, ffn]` and,
    /// gated, `w3` `[ffn, hidden]`, consecutive parameters from `router` on
    /// ([`Op::moe_param`]).
    Moe {
        /// Input.
        x: TensorId,
        /// Output (same shape).
        out: TensorId,
        /// The router's weight; the experts' weights follow it in the parameter table.
        router: ParamId,
        /// Experts.
        experts: usize,
        /// Experts per token.
        top_k: usize,
        /// Each expert's hidden width.
        ffn: usize,
        /// The experts' activation.
        act: Activation,
        /// Gated (SwiGLU-style) experts.
        gated: bool,
        /// Renormalise the top-k weights.
        norm_topk: bool,
        /// Expert-parallel degree of the sharded computation.
        ep: usize,
        /// How the sharded computation combines the experts' outputs.
        combine: MoeCombine,
        /// How the reference and float64 computations combine them.
        reference_combine: MoeCombine,
    },
}

/// How a moe layer combines its experts' weighted outputs (`combine`, `reference_combine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeCombine {
    /// `out.index_add_(0, tok, ye * w)` per expert in ascending order: each product rounded,
    /// added elementwise (torch's loop; MaxText's `MoeLoopBlock`).
    Elementwise,
    /// One contraction over the experts, `einsum("BSEM,BSE->BSM", Y, W)` with the unchosen
    /// experts' weights zero (MaxText's `RoutedMoE.dense_matmul`): per token `[1, E]·[E, H]`
    /// by the profile's matmul, so its passes round both operands (bf16 under `tpu-bf16`).
    Einsum,
}

/// Elementwise ops of two tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryKind {
    /// `a + b`; backward: the output gradient to both operands unchanged (`AddBackward0`).
    Add,
    /// `a * b`; backward: `grad_a = g·b`, `grad_b = g·a`, each one rounding (`MulBackward0`).
    Mul,
}

/// Elementwise activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `torch.tanh` (the profile's tanh kernel).
    Tanh,
    /// `F.gelu(x)`: `x·½·(1 + erf(x/√2))`.
    Gelu,
    /// `F.gelu(x, approximate="tanh")`.
    GeluTanh,
    /// `F.relu`.
    Relu,
    /// `F.silu`: `x·sigmoid(x)`.
    Silu,
}

/// Normalisations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `nn.LayerNorm`.
    LayerNorm,
    /// `nn.RMSNorm`.
    RmsNorm,
}

/// Sharding of an embedding table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingParallel {
    /// Replicated.
    None,
    /// Rows of the table replicated but the lookup done per rank on its column shard and
    /// all-gathered (DeepSpeed's `embedding_spec`): numerically the plain lookup.
    ColumnShardedLookup,
    /// Megatron's `VocabParallelEmbedding`: rank r holds rows `shard_r` of the vocabulary,
    /// looks up the ids in its range (zeros elsewhere) and the outputs are all-reduced.
    Vocab,
}

/// Sharding of a linear layer over `tp` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearParallel {
    /// Replicated.
    None,
    /// Output features split (Megatron `ColumnParallelLinear`, `gather_output=False`): the
    /// output stays sharded along its last dimension, for a following row-parallel layer.
    Column,
    /// Column-parallel, the output all-gathered (a copy) into the full tensor.
    ColumnGather,
    /// Input features split (`RowParallelLinear` / DeepSpeed `LinearAllreduce`): rank r
    /// computes `x[:, s_r]·W[:, s_r]ᵀ`, the partials are all-reduced in the profile's order,
    /// the bias is added once after the all-reduce.
    Row,
}

/// Sharding of a norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormParallel {
    /// Replicated.
    None,
    /// Megatron sequence parallelism: tokens split over tp ranks; the input arrives by
    /// reduce-scatter of the preceding row-parallel output and leaves by all-gather to the
    /// next column-parallel layer; the weight gradients' per-rank partial sums are
    /// all-reduced.
    Sequence,
}

/// The loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Loss {
    /// Which loss.
    pub kind: LossKind,
    /// The tensor it reads (logits or predictions).
    pub input: TensorId,
    /// Backward of `loss / micro_steps` (the test's gradient accumulation); the recorded loss
    /// is the unscaled one.
    pub divide_by_micro_steps: bool,
}

/// Loss kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// Mean softmax cross-entropy over the tokens (`F.cross_entropy`, torch's CPU kernels).
    CrossEntropy {
        /// The integer labels.
        labels: InputId,
    },
    /// Megatron's `vocab_parallel_cross_entropy` on vocab-sharded logits (max all-reduce,
    /// sum-exp all-reduce, predicted-logit all-reduce), then the mean over tokens.
    VocabParallelCrossEntropy {
        /// The integer labels.
        labels: InputId,
    },
    /// `F.mse_loss` (mean).
    Mse {
        /// The float target.
        target: InputId,
    },
    /// `out.sum()` (DeepSpeed's layer tests backpropagate the sum of the output).
    Sum,
}

/// Training.
#[derive(Debug, Clone, PartialEq)]
pub struct Train {
    /// Optimizer steps, >= 1.
    pub steps: usize,
    /// Micro-steps (gradient accumulation) per step, >= 1.
    pub micro_steps: usize,
    /// The (inner) optimizer.
    pub optimizer: Optimizer,
    /// Data-parallel gradient reduction (ignored at dp = 1).
    pub grad_reduce: GradReduce,
    /// DiLoCo outer loop around the inner steps.
    pub outer: Option<OuterLoop>,
}

/// Optimizers, with torch's single-tensor (CPU, `foreach=False`) update formulas.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// `torch.optim.SGD`; without momentum `p.add_(g, alpha=-lr)` (one fused rounding).
    Sgd {
        /// Learning rate (rounded to f32 as the fp32 update sees it).
        lr: f64,
        /// Momentum factor (0 = none).
        momentum: f64,
        /// Dampening.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 weight decay added to the gradient.
        weight_decay: f64,
    },
    /// `torch.optim.Adam` / `AdamW`.
    Adam {
        /// Learning rate.
        lr: f64,
        /// β₁.
        beta1: f64,
        /// β₂.
        beta2: f64,
        /// ε.
        eps: f64,
        /// Weight decay.
        weight_decay: f64,
        /// AdamW: decoupled weight decay (`p *= 1 - lr·wd`) instead of L2.
        decoupled: bool,
    },
}

impl Optimizer {
    /// Plain SGD at `lr`.
    pub fn sgd(lr: f64) -> Self {
        Self::Sgd {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        }
    }
    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match *self {
            Self::Sgd { lr, .. } | Self::Adam { lr, .. } => lr,
        }
    }
}

/// How data-parallel ranks combine their gradients before the optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradReduce {
    /// DDP: gradients accumulated locally on each rank; after the last micro-step divided by
    /// `dp`, then all-reduced (sum) in the profile's order.
    AllReduce,
    /// ZeRO-2 / FSDP: after every micro-step, gradients predivided, reduce-scattered (rank c
    /// ends with the sum of its shard c of every parameter, dim 0), postdivided and
    /// accumulated into the gradient shard; the optimizer updates that shard.
    ReduceScatter,
    /// ZeRO-2 / FSDP under `no_sync` (`grad_sync = "step"`): gradients accumulated locally
    /// on each rank, then one reduce-scatter as [`GradReduce::ReduceScatter`]'s after the
    /// last micro-step.
    ReduceScatterAtStep,
}

/// DiLoCo's outer loop: `replicas` copies each take `inner_steps` steps of [`Train`], then
/// the pseudo-gradient `outer - mean(inner)` drives the outer optimizer.
///
/// A graph with an outer loop runs through the executor's outer-loop wrapper
/// ([`crate::exec::outer_loop`]) around the executor's own inner step, in the execution mode
/// of a JAX program (`xla`, [`crate::scenario::profile::XlaMode`]): the replicas are the data-parallel
/// ranks (the inputs' leading axis split evenly, replica r taking block r; every tensor has
/// one replica's shape), [`Train::optimizer`] is read with optax's formulas (plain SGD, or
/// [`Optimizer::Adam`] with `decoupled` = `optax.adamw`), the loss is [`LossKind::Mse`] on the
/// last layer, and every linear weight is a flax kernel ([`WeightLayout::InOut`]).
#[derive(Debug, Clone, PartialEq)]
pub struct OuterLoop {
    /// Replicas (DiLoCo workers).
    pub replicas: usize,
    /// Outer rounds.
    pub rounds: usize,
    /// The outer optimizer (DiLoCo: SGD with Nesterov momentum).
    pub optimizer: Optimizer,
    /// Sync period H: the replicas synchronise after inner step k (1-based) when
    /// `k % sync_period == 0`.
    pub sync_period: usize,
    /// Inner steps in all: `rounds * sync_period`, or fewer or more when the test stops
    /// mid-round (MaxText's: 4 steps, H = 3).
    pub steps: usize,
    /// The execution mode when the profile leaves `xla` unset (how the test calls the
    /// step: eager op by op, or under `jax.jit`).
    pub default_mode: crate::scenario::profile::XlaMode,
    /// Where the initial parameters and the replicas' batches come from.
    pub data: OuterData,
    /// The outer loop's checks, in recording order of their first slot (a graph with an
    /// outer loop has no [`ResolvedGraph::checks`]).
    pub checks: Vec<OuterCheck>,
}

/// Initial parameters and data of an outer-loop run.
#[derive(Debug, Clone, PartialEq)]
pub enum OuterData {
    /// Fixed values, written in the file (a test with hand-written data): the flat initial
    /// parameters (every layer's kernel `[in, out]` then its bias, in layer order), the
    /// inputs and the targets, replica-major.
    Fixed {
        /// Initial parameters, flat.
        init: Vec<f32>,
        /// Inputs, `replicas × batch × in`.
        x: Vec<f32>,
        /// Targets, `replicas × batch × out`.
        y: Vec<f32>,
    },
    /// Drawn per sweep seed from ChaCha streams keyed by (seed, name)
    /// ([`crate::exec::init::draw_teacher`]): every kernel `N(0, 1/fan_in)` (streams
    /// `init.w1`, `init.w2` in layer order), every bias 0 (flax's `nnx.Linear` defaults); a
    /// linear teacher `T ~ N(0, 1/in)` (`data.teacher`) with bias `~ N(0, 1)`
    /// (`data.teacher.bias`); replica r's batch `x ~ N(0, 1)` (`data.replica{r}.x`) and
    /// `y = x·T + tb + noise_std·ε`, `ε ~ N(0, 1)` (`data.replica{r}.noise`), in f64 and rounded
    /// once to f32. The batch is reused at every inner step, as in MaxText's test.
    Teacher {
        /// Standard deviation of the target noise.
        noise_std: f64,
    },
}

/// What an outer-loop check records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterCheckKind {
    /// The reported loss (all-reduce of the replicas' losses / replicas) at every step.
    Loss,
    /// Self-consistency at every non-sync step: the outer parameters equal their value
    /// before the step.
    OuterUnchanged,
    /// The outer parameters after every sync.
    OuterParams,
    /// Self-consistency after every sync: every replica's parameters equal the outer ones.
    InnerEqualsOuter,
}

/// One outer-loop check.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterCheck {
    /// Name (policies refer to it).
    pub name: String,
    /// What it records.
    pub kind: OuterCheckKind,
}

/// One check.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckDecl {
    /// Name (policies refer to it): `logits`, `tied_grad`.
    pub name: String,
    /// What is compared.
    pub tensor: CheckTensor,
    /// Compared shape (torch-style indices in messages).
    pub shape: Vec<usize>,
    /// When it is recorded.
    pub at: At,
    /// For matmul outputs: the reduction behind each element (theory columns); the float64
    /// run then records `Σ|x_k·w_k|` per element ([`ResolvedGraph::reduction_of`]).
    pub reduction: Option<Reduction>,
}

/// What a check records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckTensor {
    /// An activation after the forward pass (`head.out`).
    Activation(TensorId),
    /// The loss (unscaled).
    Loss,
    /// The per-token losses of a [`LossKind::VocabParallelCrossEntropy`] (`loss.tokens`),
    /// one per label, before the mean.
    LossTokens,
    /// The gradient of an activation or leaf input of this micro-step (`x.grad`).
    Grad(TensorId),
    /// A parameter's accumulated gradient (`head.weight.grad`); for a tied parameter the
    /// full tied gradient (give the target's id).
    ParamGrad(ParamId),
    /// A parameter after the optimizer step (`projection.weight`).
    Param(ParamId),
    /// Self-consistency: the parameter after a plain-SGD step against `old - lr·grad` as the
    /// test writes it (product and difference rounded), from the same computation's values.
    SgdUpdate(ParamId),
}

/// When a check records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Once per optimizer step (label `s`).
    Step,
    /// At every micro-step (label `s.m`).
    MicroStep,
}

impl ResolvedGraph {
    /// The layer producing `tensor`, if any.
    pub fn producer(&self, tensor: TensorId) -> Option<&Layer> {
        self.layers.iter().find(|l| l.op.output() == tensor)
    }

    /// The storage a parameter uses (itself, or the parameter it is tied to).
    pub fn storage(&self, p: ParamId) -> ParamId {
        self.params[p.0].tie.unwrap_or(p)
    }

    /// Rows of a tensor seen as a matrix (`product of the leading dims`).
    pub fn rows(&self, t: TensorId) -> usize {
        let s = &self.tensors[t.0].shape;
        s[..s.len().saturating_sub(1)].iter().product()
    }

    /// Last dimension of a tensor.
    pub fn width(&self, t: TensorId) -> usize {
        *self.tensors[t.0].shape.last().unwrap_or(&1)
    }

    /// The reduction behind a linear layer's output (input features, largest shard over tp
    /// ranks when it is row-parallel, ranks summed): what [`CheckDecl::reduction`] holds for
    /// a check on that output. `None` when `tensor` is not a linear layer's output.
    pub fn reduction_of(&self, tensor: TensorId) -> Option<Reduction> {
        let Op::Linear { x, parallel, .. } = &self.producer(tensor)?.op else {
            return None;
        };
        let k = self.width(*x);
        let ranks = if *parallel == LinearParallel::Row {
            self.parallel.tp
        } else {
            1
        };
        let max_shard = self
            .parallel
            .shard_rule
            .ranges(k, ranks)?
            .iter()
            .map(|r| r.len())
            .max()
            .unwrap_or(0);
        Some(Reduction {
            k,
            max_shard,
            ranks,
        })
    }

    /// The mutants this graph's parallelism admits, in [`Mutant::ALL`] order:
    /// a row-parallel linear admits wrong-shard-offset, missing-allreduce, dropped-head-grad
    /// (its weight-gradient contribution dropped), missing-input-grad-gather and
    /// bf16-allreduce; a column-parallel linear admits missing-allreduce and bf16-allreduce
    /// (on its input-gradient all-reduce); a weight tied across an embedding and a linear
    /// admits dropped-embedding-grad and tied-weights-drift (the latter not with dp > 1); an
    /// outer loop admits no-replica-mean, pseudo-grad-sign, no-nesterov and
    /// stale-outer-params; data parallelism (dp > 1, no outer loop) admits
    /// missing-grad-reduce and bf16-grad-reduce, and stale-params when there is a second
    /// step to read the stale parameters.
    pub fn mutants(&self) -> Vec<Mutant> {
        let row = self.parallel.tp > 1
            && self.layers.iter().any(|l| {
                matches!(
                    l.op,
                    Op::Linear {
                        parallel: LinearParallel::Row,
                        ..
                    }
                )
            });
        let column = self.parallel.tp > 1
            && self.layers.iter().any(|l| {
                matches!(
                    l.op,
                    Op::Linear {
                        parallel: LinearParallel::Column | LinearParallel::ColumnGather,
                        ..
                    }
                )
            });
        let tied = self.tied_embedding_head().is_some();
        let dp = self.parallel.dp > 1 && self.train.outer.is_none();
        Mutant::ALL
            .into_iter()
            .filter(|m| match m {
                Mutant::WrongShardOffset
                | Mutant::DroppedHeadGrad
                | Mutant::MissingInputGradGather => row,
                Mutant::MissingAllreduce | Mutant::Bf16Allreduce => row || column,
                Mutant::DroppedEmbeddingGrad => tied,
                // The data-parallel executor keeps one storage per tied weight.
                Mutant::TiedWeightsDrift => tied && !dp,
                Mutant::NoReplicaMean
                | Mutant::PseudoGradSign
                | Mutant::NoNesterov
                | Mutant::StaleOuterParams => self.train.outer.is_some(),
                Mutant::MissingGradReduce | Mutant::Bf16GradReduce => dp,
                // Stale parameters are first read by the second step's forward.
                Mutant::StaleParams => dp && self.train.steps > 1,
            })
            .collect()
    }

    /// `(embedding table, linear weight)` when a linear weight is tied to an embedding table.
    pub fn tied_embedding_head(&self) -> Option<(ParamId, ParamId)> {
        self.layers.iter().find_map(|l| match l.op {
            Op::Linear { weight, .. } => {
                let target = self.params[weight.0].tie?;
                self.layers.iter().find_map(|e| match e.op {
                    Op::Embedding { table, .. } if self.storage(table) == target => {
                        Some((table, weight))
                    }
                    _ => None,
                })
            }
            _ => None,
        })
    }
}

impl Op {
    /// The tensor the op writes.
    pub fn output(&self) -> TensorId {
        match *self {
            Op::Embedding { out, .. }
            | Op::Linear { out, .. }
            | Op::Activation { out, .. }
            | Op::Norm { out, .. }
            | Op::Binary { out, .. }
            | Op::Softmax { out, .. }
            | Op::Sdpa { out, .. }
            | Op::Rope { out, .. }
            | Op::Moe { out, .. } => out,
        }
    }

    /// Whether the op reads tensor `t` (an embedding reads ids, never an activation).
    pub fn reads(&self, t: TensorId) -> bool {
        match *self {
            Op::Linear { x, .. }
            | Op::Activation { x, .. }
            | Op::Norm { x, .. }
            | Op::Softmax { x, .. }
            | Op::Rope { x, .. }
            | Op::Moe { x, .. } => x == t,
            Op::Binary { a, b, .. } => a == t || b == t,
            Op::Sdpa { q, k, v, .. } => q == t || k == t || v == t,
            Op::Embedding { .. } => false,
        }
    }

    /// A `moe` layer's parameter `j` (0: `w1`, 1: `w2`, 2: `w3`) of expert `e`, from its
    /// router's id (the table holds the router, then each expert's weights in order).
    pub fn moe_param(router: ParamId, gated: bool, e: usize, j: usize) -> ParamId {
        let per = if gated { 3 } else { 2 };
        ParamId(router.0 + 1 + e * per + j)
    }
}

/// The reduction behind a matmul-like check: one unsharded dot product of length `k`, and
/// the sharded one as a dot product of at most `max_shard` terms per rank followed by an
/// all-reduce over `ranks` partials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reduction {
    /// Unsharded length.
    pub k: usize,
    /// Largest shard.
    pub max_shard: usize,
    /// Ranks summed by the all-reduce.
    pub ranks: usize,
}
