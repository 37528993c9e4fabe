//! An upper bound on the memory one seed-run of a graph holds, from its plan: what the memory
//! check (`crate::sys::limits`) compares with the machine's before a sweep starts.
//!
//! **The bound**, in elements, then bytes (f64: 8, f32: 4). With P the stored parameters'
//! elements, W the largest linear weight's, A the activations' (inputs and layer outputs) and
//! the gradients' of the tensors a gradient flows into, and per computation:
//! - its parameters, P;
//! - its gradients: every stored parameter's whose step is not fused
//!   ([`super::graph::Plan::fused_sgd`]), twice with gradient accumulation (the micro-step's
//!   and the accumulated one). In a streamed run the two fp32 computations share the
//!   buffers of gradients no check reads (`Bufs::swap_unrecorded_grads`);
//! - its activations and their gradients, A, plus one more of the largest tensor (the scratch
//!   of a second gradient contribution);
//! - per attention layer (`[b, s, w]` queries, `h` heads): the scaled q and kᵀ (2·b·s·w), the
//!   probabilities and two scratch buffers of the scores' shape (3·b·h·s², the O(seq²) part),
//!   and the q, k, v gradients before they are handed on (3·b·s·w); with context parallelism
//!   (`cp` > 1) the ring's merged log-sum-exp (b·h·s) and one block's scratch (3·c² + 6·c·d
//!   + 2·c for chunks of c tokens and head_dim d);
//! - per moe layer (`T` tokens of width `H`, `E` experts, `k` per token, expert width `F`,
//!   `N` expert-parallel ranks, its `Pm` weights): router logits, probabilities and their two
//!   gradients (4·T·E), the routing (4·T·k), the dispatched rows and their gradients
//!   (`T·k` rows: 5·H + 7·F each: inputs, outputs, pre-activations, activations, the
//!   gated up projections and hidden values, and their gradients), the router's per-rank
//!   partial gradients (N·E·H), the router's input gradient (T·H) and its weight
//!   gradients before they are handed on (Pm);
//! - optimizer state (momentum P, Adam 2P) and the pre-step copies the SGD-update checks read;
//! - matmul scratch: what the kernels take for the largest `x·Wᵀ` as they dispatch on this
//!   CPU (`MatmulModel::nt_scratch_elems`, `nt_f64_scratch_elems`: a few-rows kernel's small
//!   buffers, a transposed panel, or all of W transposed; under an order model its own,
//!   `mkl_sgemm::nt_scratch_elems`), and for an fp32 profile with
//!   input-precision passes (bf16, TF32) the pieces an operand is split into, up to 3W;
//! - the sharded computation's per-rank copies of a tensor-parallel layer's weight and of its
//!   gradient, twice the largest such weight (an upper bound: a row-parallel layer reads its
//!   ranks' columns in place where it can, `row_parallel_forward` and
//!   `row_parallel_backward`), and the per-rank partial outputs, tp times the largest
//!   activation;
//! - with data parallelism, every rank's own parameters, gradients (accumulated too) and the
//!   collective's staging, and its activations with their gradients;
//! - the tied-weights-drift mutant's copy of the table with its two gradients, 3 tables.
//!
//! The drawn initial parameters (P, f32, a bound: a tied parameter's entry stays empty) are
//! kept beside them, except in a streamed run, whose sharded computation takes them. The traces: in a run that keeps every step, each
//! check's tensor at every recording, three times in f64, plus as much again for the float64
//! computation's condition slots; in a streamed run only one step's slots, and of those only
//! the ones that are copies (parameters and their gradients are lent as views). The
//! SGD-update checks' expectations add an f32 and an f64 copy of their parameter.
//!
//! A graph with an outer loop (DiLoCo) runs its replicas through buffers of its own and keeps
//! the check-tensor estimate. The bound is checked against peak resident memory on every
//! built-in graph scenario without an outer loop and every example config, and on the two big
//! shapes under bf16x3 passes and a mutant (`tests/suite/memory_bound.rs`); the memory check adds a
//! quarter to it.

use super::graph::Plan;
use crate::kernels::matmul::{MatmulModel, Passes};
use crate::kernels::mkl_sgemm::OrderModel;
use crate::scenario::ir::{At, CheckTensor, LinearParallel, Op, Optimizer};
use crate::scenario::mutant::Mutant;

impl Plan {
    /// An upper bound on the bytes one seed-run of this plan holds (the module doc) under the
    /// fp32 matmul `model` (or the `order_model`, which then computes the matmuls), with
    /// `mutant` in its sharded computation, streamed (one step's traces at a time) or not.
    pub(crate) fn run_bytes(
        &self,
        model: &MatmulModel,
        order_model: Option<OrderModel>,
        mutant: Option<Mutant>,
        streamed: bool,
    ) -> u128 {
        let g = &self.graph;
        let np = g.params.len();
        let numel = |i: usize| -> u128 { g.params[i].shape.iter().map(|&d| d as u128).product() };
        let stored: Vec<usize> = (0..np).filter(|&i| self.storage[i] == i).collect();
        let p: u128 = stored.iter().map(|&i| numel(i)).sum();
        // Per linear layer: (rows, in, out, weight elements, tensor-parallel).
        let linears: Vec<(usize, usize, usize, u128, bool)> = g
            .layers
            .iter()
            .filter_map(|l| match l.op {
                Op::Linear {
                    x,
                    out,
                    weight,
                    parallel,
                    ..
                } => Some((
                    g.rows(x),
                    g.width(x),
                    g.width(out),
                    numel(weight.0),
                    parallel != LinearParallel::None,
                )),
                _ => None,
            })
            .collect();
        // The largest weight, and the largest tensor-parallel one.
        let w: u128 = linears.iter().map(|l| l.3).max().unwrap_or(0);
        let w_tp: u128 = linears
            .iter()
            .filter(|l| l.4)
            .map(|l| l.3)
            .max()
            .unwrap_or(0);
        // The matmul scratch the kernels take for x·Wᵀ (the forward, or a flax kernel's
        // input gradient: both orientations), as they dispatch on this CPU.
        let nt = |f: &dyn Fn(usize, usize, usize) -> usize| -> u128 {
            linears
                .iter()
                .map(|&(m, k, n, _, _)| f(m, k, n).max(f(m, n, k)) as u128)
                .max()
                .unwrap_or(0)
        };
        let scratch_f64 = nt(&crate::kernels::matmul::nt_f64_scratch_elems);
        let scratch_f32 = match order_model {
            // The two-thread model computes the one-thread product first (its narrow rows take
            // no scratch).
            Some(OrderModel::MklSgemm1t | OrderModel::MklSgemm2t) => {
                nt(&crate::kernels::mkl_sgemm::nt_scratch_elems)
            }
            None => nt(&|m, k, n| model.nt_scratch_elems(m, k, n)),
        };
        let acc = if g.train.micro_steps > 1 { 2 } else { 1 };
        let unfused = |i: &&usize| !self.fused_sgd[**i];
        let grads: u128 = stored
            .iter()
            .filter(unfused)
            .map(|&i| numel(i))
            .sum::<u128>()
            * acc;
        // The gradients a streamed run's fp32 computations share.
        let unread: u128 = self
            .unrecorded_grads()
            .iter()
            .filter(unfused)
            .map(|&i| numel(i))
            .sum::<u128>()
            * acc;
        let largest_tensor = self.numel.iter().copied().max().unwrap_or(0) as u128;
        let a: u128 = self
            .numel
            .iter()
            .zip(&self.needs_grad)
            .map(|(&n, &ng)| n as u128 * if ng { 2 } else { 1 })
            .sum::<u128>()
            + largest_tensor;
        let opt = match g.train.optimizer {
            Optimizer::Sgd { momentum: 0.0, .. } => 0,
            Optimizer::Sgd { .. } => 1,
            Optimizer::Adam { .. } => 2,
        } * p;
        let old: u128 = self.keeps_old.iter().map(|&i| numel(i)).sum();
        let pieces = match model.passes {
            Passes::F32 => 0,
            Passes::Bf16x1 | Passes::Tf32(_) => 1,
            Passes::Bf16x3 | Passes::Bf16x6 => 3,
        };
        // Attention layers: the scaled q and kᵀ, the probabilities with two scores-sized
        // scratch buffers (O(seq²) per head), and the three input gradients before they are
        // handed on.
        let attn: u128 = g
            .layers
            .iter()
            .map(|l| match l.op {
                Op::Sdpa { q, heads, cp, .. } => {
                    let s = &g.tensors[q.0].shape;
                    let (b, n, w) = (s[0] as u128, s[1] as u128, s[2] as u128);
                    // Ring attention (cp > 1): the merged log-sum-exp of every query row
                    // (b·h·s) and one block's scratch per rank in turn: scores, probabilities
                    // and their gradient (3·c²), the block's output, scaled q and k and its
                    // three gradients (6·c·d), its lse and D (2·c).
                    let ring = if cp > 1 {
                        let (h, c) = (heads as u128, n / cp as u128);
                        let d = w / h;
                        b * h * n + 3 * c * c + 6 * c * d + 2 * c
                    } else {
                        0
                    };
                    2 * b * n * w + 3 * b * heads as u128 * n * n + 3 * b * n * w + ring
                }
                _ => 0,
            })
            .sum();
        // Mixture-of-experts layers: the routing, the dispatched rows and their gradients,
        // and the weight gradients before they are handed on (module doc).
        let moe: u128 = g
            .layers
            .iter()
            .map(|l| match l.op {
                Op::Moe {
                    x,
                    experts,
                    top_k,
                    ffn,
                    gated,
                    ep,
                    combine,
                    reference_combine,
                    ..
                } => {
                    let (t, h) = (g.rows(x) as u128, g.width(x) as u128);
                    let (e, k, f) = (experts as u128, top_k as u128, ffn as u128);
                    let pm = e * h + e * (if gated { 3 } else { 2 }) * f * h;
                    // The einsum combine's operands and their gradients: every expert's
                    // output per token `[T, E, H]` and the weights `[T, E]`, twice each.
                    let einsum = crate::scenario::ir::MoeCombine::Einsum;
                    let dense = if combine == einsum || reference_combine == einsum {
                        2 * (t * e * h + t * e)
                    } else {
                        0
                    };
                    4 * t * e
                        + 4 * t * k
                        + t * k * (5 * h + 7 * f)
                        + ep as u128 * e * h
                        + t * h
                        + pm
                        + dense
                }
                _ => 0,
            })
            .sum();
        // One computation's parameters, activations, optimizer state and pre-step copies.
        let own = p + a + opt + old + attn + moe;
        let f64_bytes = 8 * (own + grads + scratch_f64);
        // The fp32 reference and sharded computations, their gradients (unread ones shared
        // in a streamed run), one scratch (a thread's) with the input-precision pieces of a
        // product's operands (at most W each), the per-rank copies of a tensor-parallel
        // weight and its gradient.
        let f32_grads = if streamed {
            2 * grads - unread
        } else {
            2 * grads
        };
        // The row-parallel layers' per-rank partial outputs: tp activations at most.
        let tp = g.parallel.tp.max(1) as u128;
        let mut f32_bytes =
            4 * (2 * own + f32_grads + scratch_f32 + pieces * w + 2 * w_tp + tp * largest_tensor);
        for r in &self.ranks {
            let rp: u128 = (0..r.graph.params.len())
                .filter(|&i| r.storage[i] == i)
                .map(|i| {
                    r.graph.params[i]
                        .shape
                        .iter()
                        .map(|&d| d as u128)
                        .product::<u128>()
                })
                .sum();
            let ra: u128 = r.numel.iter().map(|&n| 2 * n as u128).sum();
            // A rank's parameters, gradients (accumulated too) and the collective's staging.
            // (and its attention and moe buffers, at most the whole batch's)
            f32_bytes += 4 * (rp * (2 + acc) + ra + attn + moe);
        }
        if mutant == Some(Mutant::TiedWeightsDrift) {
            if let Some(t) = self.tied_table {
                f32_bytes += 4 * 3 * numel(t);
            }
        }
        let init = if streamed { 0 } else { 4 * p };
        // Traces (f64 values), three computations plus the truth's condition slots.
        let mut traces: u128 = 0;
        for c in &g.checks {
            let n: u128 = c.shape.iter().map(|&d| d as u128).product();
            let records = if streamed {
                1
            } else {
                let per_step = match c.at {
                    At::Step => 1,
                    At::MicroStep => g.train.micro_steps.max(1),
                };
                (g.train.steps.max(1) * per_step) as u128
            };
            let lent =
                streamed && matches!(c.tensor, CheckTensor::Param(_) | CheckTensor::ParamGrad(_));
            if !lent {
                traces += 4 * 8 * n * records;
            }
            if let CheckTensor::SgdUpdate(_) = c.tensor {
                // The expectations' buffers, an f32 and an f64 per computation.
                traces += 3 * 12 * n;
            }
        }
        f64_bytes + f32_bytes + init + traces
    }
}
