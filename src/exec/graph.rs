//! The executor: one computation of a resolved graph (float64, fp32 reference or fp32
//! sharded) through a [`Backend`], recording the graph's checks into a [`Trace`].
//!
//! The order of every operation is the one the graph's module doc
//! ([`crate::scenario::ir`]) describes; the kernels are those of [`crate::ops`], whose doc
//! comments give their own orders. Buffers live in [`Bufs`], sized on first use and reused.

use std::ops::Range;

use crate::check::StepLabel;
use crate::exec::condition::record_condition;
use crate::exec::init::InputValue;
use crate::exec::scenario::CheckSpec;
use crate::exec::trace::{SlotRole, Trace};
use crate::ops::activations::{
    gelu, gelu_backward, gelu_tanh, gelu_tanh_backward, relu, relu_backward, silu, silu_backward,
    ActReal, TorchLoop, TorchParts, WHOLE,
};
use crate::ops::attention::{sdpa_backward, sdpa_forward, AttnBufs, AttnShape};
use crate::ops::backend::Backend;
use crate::ops::layers::{
    accumulate, add_row_bias, column_sums, column_sums_generic, embedding_backward,
    embedding_backward_add, embedding_lookup, linear, sgd, sgd_unfused, tanh_backward,
    tanh_inplace,
};
use crate::ops::loss;
use crate::ops::moe::{moe_backward, moe_forward, MoeBufs, MoeCfg, MoeWeights};
use crate::ops::norm::{
    elementwise_mul, layer_norm, layer_norm_backward_threads, residual_add, rms_norm,
    rms_norm_backward, sequence_parallel_norm_backward,
};
use crate::ops::optim::{step, OptState};
use crate::ops::real::Real;
use crate::ops::rope::{rope_backward, rope_forward};
use crate::ops::softmax::SoftmaxReal;
use crate::ops::tp::{
    column_parallel_backward, column_parallel_forward, row_parallel_backward, row_parallel_forward,
    RowParallelBuffers,
};
use crate::ops::vocab_parallel::{
    vocab_parallel_cross_entropy, vocab_parallel_embedding, VocabParallelBuffers,
};
use crate::ops::xla;
use crate::scenario::ir::{
    Activation, At, BinaryKind, CheckTensor, EmbeddingParallel, LinearParallel, LossKind, NormKind,
    NormParallel, Op, ResolvedGraph, TensorId, WeightLayout,
};
use crate::scenario::mutant::{Mutant, TpFaults};
use crate::scenario::profile::XlaMode;

mod dp;

/// When in a micro-step a check records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// After the forward pass and the loss.
    Forward,
    /// After the backward pass and the accumulation.
    Backward,
    /// After the optimizer step (last micro-step only).
    Step,
}

/// The phase of a check's tensor.
pub(crate) fn phase(t: CheckTensor) -> Phase {
    match t {
        CheckTensor::Activation(_) | CheckTensor::Loss | CheckTensor::LossTokens => Phase::Forward,
        CheckTensor::Grad(_) | CheckTensor::ParamGrad(_) => Phase::Backward,
        CheckTensor::Param(_) | CheckTensor::SgdUpdate(_) => Phase::Step,
    }
}

/// A graph prepared for running: its inputs drawn, its shards and check phases computed.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The graph.
    pub graph: ResolvedGraph,
    /// The checks as the engine sees them.
    pub checks: Vec<CheckSpec>,
    /// Inputs, `[global micro-step][input]`.
    pub inputs: Vec<Vec<InputValue>>,
    /// Per layer: the shards of its split dimension in the sharded computation (one full
    /// range for an unsplit layer).
    pub sharded: Vec<Vec<Range<usize>>>,
    /// Per layer: one full range (the unsharded computation).
    pub whole: Vec<Vec<Range<usize>>>,
    /// Per parameter: the parameter whose storage it uses.
    pub storage: Vec<usize>,
    /// Per tensor: element count.
    pub numel: Vec<usize>,
    /// Per tensor: whether a gradient flows into it.
    pub needs_grad: Vec<bool>,
    /// Check indices per phase, in table order.
    pub by_phase: [Vec<usize>; 3],
    /// Parameters whose pre-step value an SGD-update check needs.
    pub keeps_old: Vec<usize>,
    /// The embedding table tied to a linear weight, if any (its storage index).
    pub tied_table: Option<usize>,
    /// Per parameter: whether its optimizer step is taken in its layer's backward, panel by
    /// panel as its gradient is computed, so that the gradient is never whole in memory
    /// (`crate::exec::graph_scenario`'s `fused_sgd` says when that is allowed). At H = 8,192 that
    /// is a 512 MiB float64 buffer and a 256 MiB float32 one never touched.
    pub fused_sgd: Vec<bool>,
    /// The learning rate as the file writes it (a Python float); each computation rounds it
    /// to its own type once (the fp32 update's `alpha = -lr` as ATen reads the scalar, the
    /// float64 truth's exactly).
    pub lr: f64,
    /// Per layer: an activation that may overwrite its input (its backward needs only its
    /// output, and nothing else reads the input: no other layer, check, loss or input draw).
    pub in_place: Vec<bool>,
    /// Per layer: for an activation, the torch tensors its input is held in by the sharded
    /// computation's ranks (a column-parallel output: one per rank's columns; a
    /// sequence-parallel norm's: one per rank's token rows; elementwise layers pass their
    /// input's on), which decides the scalar remainder of torch's elementwise loop
    /// ([`TorchLoop`]); for an attention layer, the tensors its q is held in (its ranks' head
    /// groups). [`TorchParts::Whole`] for other layers; the unsharded computations always use
    /// it.
    pub act_parts: Vec<TorchParts>,
    /// A vocab-parallel loss: the vocabulary's shards in the sharded computation (computed
    /// once here, not per micro-step). Empty for other losses.
    pub loss_shards: Vec<Range<usize>>,
    /// With `dp > 1`: one plan per data-parallel rank, on the rank's block of the batch
    /// (the sharded computation runs them: the `dp` module of this file). Empty otherwise.
    pub ranks: Vec<Plan>,
    /// `compare = "layout-vs-layout"`: the same graph prepared under the reference layout
    /// (`[parallel.reference]`), whose sharded computation is the reference computation
    /// ([`crate::exec::GraphScenario`]). `None`: the reference is this plan unsharded.
    pub reference: Option<Box<Plan>>,
    /// A graph with an outer loop: what the outer-loop wrapper needs
    /// ([`crate::exec::outer_loop`]).
    pub(crate) outer: Option<crate::exec::outer_loop::OuterPlan>,
}

/// Model state and activations of one computation.
#[derive(Debug, Default)]
pub struct Bufs<R> {
    params: Vec<Vec<R>>,
    acts: Vec<Vec<R>>,
    dacts: Vec<Vec<R>>,
    dset: Vec<bool>,
    pgrad: Vec<Vec<R>>,
    pset: Vec<bool>,
    /// Per parameter: stepped in this micro-step's backward ([`Plan::fused_sgd`]).
    stepped: Vec<bool>,
    /// One panel of a fused step's gradient.
    panel: Vec<R>,
    acc: Vec<Vec<R>>,
    old: Vec<Vec<R>>,
    tmp_p: Vec<R>,
    /// One embedding row ([`embedding_backward_add`]).
    tmp_row: Vec<R>,
    /// The distinct ids of [`embedding_backward_add`].
    tmp_ids: Vec<usize>,
    /// The per-thread weight and bias gradient buffers of a LayerNorm backward at several
    /// threads ([`layer_norm_backward_threads`]).
    norm_partials: Vec<R>,
    tmp_a: Vec<R>,
    expect: Vec<R>,
    expect64: Vec<f64>,
    cond: Vec<R>,
    /// The tensors whose condition this micro-step records (the float64 computation's
    /// checked linear outputs with a reduction).
    cond_want: Vec<TensorId>,
    /// The tensor whose condition `cond` holds, computed with its forward product
    /// ([`Backend::matmul_nt_and_abs`]); None when it holds none.
    cond_of: Option<TensorId>,
    /// The embedding's own copy of a tied table (tied-weights-drift), its gradient and
    /// accumulated gradient.
    drift: [Vec<R>; 3],
    rp: RowParallelBuffers<R>,
    vp: VocabParallelBuffers<R>,
    /// Float targets of the loss (MSE), this micro-step.
    target: Vec<R>,
    /// Optimizer state per parameter, and of the drift copy.
    opt: Vec<OptState<R>>,
    drift_opt: OptState<R>,
    opt_scratch: Vec<R>,
    /// One value per row: the rms norm backward's recomputed `rstd` ([`rms_norm_backward`]).
    norm_rstd: Vec<R>,
    /// The sequence-parallel norm's per-rank weight and bias partials
    /// ([`sequence_parallel_norm_backward`]).
    sp_norm_partials: Vec<R>,
    /// Per layer: an attention layer's saved scaled q, kᵀ and probabilities and its scratch
    /// ([`sdpa_forward`]); empty for other layers.
    attn: Vec<AttnBufs<R>>,
    /// Per layer: a moe layer's saved routing, expert activations and scratch
    /// ([`moe_forward`]); empty for other layers.
    pub(crate) moe: Vec<MoeBufs<R>>,
    /// An attention layer's q, k and v gradients before they are handed on.
    attn_grads: [Vec<R>; 3],
    /// Ring attention's per-rank state and scratch ([`crate::ops::ring`]).
    ring: crate::ops::ring::RingBufs<R>,
    /// The inputs drawn once per seed ([`crate::exec::init::seeded_inputs`]), in their order.
    seeded: Vec<Vec<R>>,
    /// Data parallelism (the `dp` module): every rank's own buffers (its parameter copy,
    /// activations, gradients), and the staging of the gradient collective.
    dp: dp::DpBufs<R>,
}

/// What every micro-step of one computation shares ([`Plan::step_ctx`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepCtx<'a, R> {
    /// The sharded computation (else one of the unsharded ones).
    sharded: bool,
    shards: &'a [Vec<Range<usize>>],
    faults: TpFaults,
    mutant: Option<Mutant>,
    drift: bool,
    condition: bool,
    lr: R,
    scale: R,
    xla: Option<XlaMode>,
}

impl<R> Bufs<R> {
    /// Swaps the gradient buffers (`pgrad` and `acc`) of the stored parameters `which` with
    /// `other`'s, for two computations of one plan that step one after the other
    /// ([`Plan::unrecorded_grads`]): every backward rewrites a gradient target whole before
    /// reading it, and the optimizer step consumes it, so between steps their contents are
    /// dead and one set of buffers serves both (only one is ever written, so only one is
    /// faulted in).
    pub(crate) fn swap_unrecorded_grads(&mut self, other: &mut Bufs<R>, which: &[usize]) {
        for &i in which {
            std::mem::swap(&mut self.pgrad[i], &mut other.pgrad[i]);
            std::mem::swap(&mut self.acc[i], &mut other.acc[i]);
        }
    }

    /// The parameters (indexed by parameter; a tied one's entry is empty).
    pub(crate) fn params(&self) -> &[Vec<R>] {
        &self.params
    }
    /// The parameters, writable (the outer loop resets its replicas through it).
    pub(crate) fn params_mut(&mut self) -> &mut [Vec<R>] {
        &mut self.params
    }
}

/// Bytes of one panel of a fused step's gradient ([`fused_sgd_step`]): a few rows of the
/// weight, in cache while the update reads them back.
const FUSED_PANEL_BYTES: usize = 512 << 10;

/// The plain-SGD step of a torch-layout linear weight `w` (n×k) with the gradient
/// dW = dyᵀ·x (dy m×n, x m×k) computed panel by panel of rows
/// ([`Backend::matmul_tn_rows`]: each element as the whole product computes it) and each
/// panel applied at once by [`sgd`] (elementwise: the same operations on the same values as
/// [`step`] on the whole gradient). Returns false, with nothing changed, when the backend
/// computes the product only whole.
#[allow(clippy::too_many_arguments)]
fn fused_sgd_step<B: Backend>(
    be: &mut B,
    dy: &[B::R],
    x: &[B::R],
    w: &mut [B::R],
    panel: &mut Vec<B::R>,
    n: usize,
    m: usize,
    k: usize,
    lr: B::R,
) -> bool {
    let row_bytes = k.max(1) * std::mem::size_of::<B::R>();
    let mut rows = (FUSED_PANEL_BYTES / row_bytes).max(1);
    if rows >= 8 {
        rows -= rows % 8;
    }
    let rows = rows.min(n.max(1));
    sized(panel, rows * k);
    for r0 in (0..n).step_by(rows) {
        let r1 = (r0 + rows).min(n);
        let g = &mut panel[..(r1 - r0) * k];
        if !be.matmul_tn_rows(dy, x, g, n, m, k, r0..r1) {
            debug_assert_eq!(r0, 0, "a backend computes panels always or never");
            return false;
        }
        sgd(&mut w[r0 * k..r1 * k], g, lr);
    }
    true
}

/// Gives `v` length `n`; contents are unspecified when it already had that length (every
/// buffer is written before it is read).
/// A new buffer comes from a zeroed allocation (`vec![0; n]`, which the system maps lazily),
/// so a buffer that is never written, such as the second gradient buffer of a step without
/// gradient accumulation (see [`Plan::micro_step`]), never costs its pages.
fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    if v.len() != n {
        if v.capacity() < n {
            *v = vec![R::ZERO; n];
        } else {
            v.clear();
            v.resize(n, R::ZERO);
        }
    }
}

fn load<R: Real>(v: &mut Vec<R>, src: &[f32]) {
    v.clear();
    v.extend(src.iter().map(|&x| R::from_f32(x)));
}

/// `dst = src` when `first`, else `dst = dst + src` (a second gradient contribution; IEEE
/// addition is commutative, so two contributions give the same bits in either order).
fn add_into<R: Real>(dst: &mut [R], src: &[R]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = *d + s;
    }
}

impl Plan {
    fn label(&self, check: usize, s: usize, m: usize) -> StepLabel {
        match self.graph.checks[check].at {
            At::MicroStep if self.graph.train.micro_steps > 1 => {
                StepLabel::micro(s as u32, m as u32)
            }
            _ => StepLabel::step(s as u32),
        }
    }

    /// One computation. `sharded` selects the sharded layer splits; `mutant` injects a bug
    /// (the sharded computation only); `condition` records `Σ|x·w|` beside checks with a
    /// reduction (the float64 computation).
    #[allow(clippy::too_many_arguments)]
    pub fn compute<B: Backend>(
        &self,
        be: &mut B,
        init: &[Vec<f32>],
        sharded: bool,
        mutant: Option<Mutant>,
        condition: bool,
        bf: &mut Bufs<B::R>,
        trace: &mut Trace,
    ) where
        B::R: ActReal,
    {
        if sharded && !self.ranks.is_empty() {
            return self.compute_dp(be, init, mutant, bf, trace);
        }
        let cx = self.step_ctx(sharded, mutant, condition, None);
        self.load_state(&cx, init, bf);
        for s in 0..self.graph.train.steps {
            self.step(be, &cx, s, bf, trace);
        }
    }

    /// Training step `s` of one computation: its micro-steps in order on their inputs
    /// ([`Plan::micro_step`]), the last one ending in the optimizer step.
    pub(crate) fn step<B: Backend>(
        &self,
        be: &mut B,
        cx: &StepCtx<'_, B::R>,
        s: usize,
        bf: &mut Bufs<B::R>,
        trace: &mut Trace,
    ) where
        B::R: ActReal,
    {
        let micro_steps = self.graph.train.micro_steps;
        for m in 0..micro_steps {
            let inputs = &self.inputs[s * micro_steps + m];
            self.micro_step(be, cx, s, m, inputs, bf, trace);
        }
    }

    /// What every micro-step of one computation shares. `xla` runs the elementwise kernels
    /// and the optimizer as a JAX program in that mode ([`crate::ops::xla`]) instead of
    /// torch's.
    pub(crate) fn step_ctx<R: Real>(
        &self,
        sharded: bool,
        mutant: Option<Mutant>,
        condition: bool,
        xla: Option<XlaMode>,
    ) -> StepCtx<'_, R> {
        let g = &self.graph;
        let micro_steps = g.train.micro_steps;
        StepCtx {
            sharded,
            shards: if sharded { &self.sharded } else { &self.whole },
            faults: TpFaults::of(mutant),
            mutant,
            drift: mutant == Some(Mutant::TiedWeightsDrift) && self.tied_table.is_some(),
            condition,
            lr: R::from_f64(self.lr),
            scale: if g.loss.divide_by_micro_steps {
                R::ONE / R::from_f64(micro_steps as f64)
            } else {
                R::ONE
            },
            xla,
        }
    }

    /// Sizes `bf` for this graph, loads the initial parameters `init` (indexed by
    /// parameter) and forgets the optimizer state.
    pub(crate) fn load_state<R: Real>(
        &self,
        cx: &StepCtx<'_, R>,
        init: &[Vec<f32>],
        bf: &mut Bufs<R>,
    ) {
        self.prepare_state(cx, bf, |i, v| load(v, &init[i]));
        self.load_seeded(init, bf);
    }

    /// [`Plan::load_state`] for an fp32 computation that takes the initial parameters
    /// instead of copying them: each stored parameter's buffer is swapped with its `init`
    /// entry (the same values: an fp32 load is a copy), so `init` is left holding this
    /// computation's previous parameter buffers, whose contents are unspecified. The caller
    /// must not read `init` as drawn values again before it is drawn anew.
    pub(crate) fn load_state_taking(
        &self,
        cx: &StepCtx<'_, f32>,
        init: &mut [Vec<f32>],
        bf: &mut Bufs<f32>,
    ) {
        self.prepare_state(cx, bf, |i, v| std::mem::swap(v, &mut init[i]));
        self.load_seeded(init, bf);
    }

    /// Copies the seed's seeded inputs (after the parameters in `init`) into `bf`.
    fn load_seeded<R: Real>(&self, init: &[Vec<f32>], bf: &mut Bufs<R>) {
        let np = self.graph.params.len();
        let n = init.len().saturating_sub(np);
        bf.seeded.resize_with(n, Vec::new);
        for (dst, src) in bf.seeded.iter_mut().zip(&init[np..]) {
            load(dst, src);
        }
    }

    /// Gives `init` back the parameter buffers [`Plan::load_state_taking`] took into `bf`
    /// (their contents are then this computation's last parameters, not drawn values), so
    /// that the next draw writes into them and no second parameter-sized buffer is kept.
    pub(crate) fn return_taken(&self, init: &mut [Vec<f32>], bf: &mut Bufs<f32>) {
        for (i, (p, taken)) in init.iter_mut().zip(&mut bf.params).enumerate() {
            if self.storage[i] == i {
                std::mem::swap(taken, p);
            }
        }
    }

    /// The stored parameters whose gradient no check records (no `ParamGrad` check on the
    /// parameter or a parameter tied to it): their gradient buffers hold nothing anyone
    /// reads once a step is over, so two computations that step one after the other may
    /// use the same buffers ([`Bufs::swap_unrecorded_grads`]).
    pub(crate) fn unrecorded_grads(&self) -> Vec<usize> {
        let recorded: Vec<usize> = self
            .graph
            .checks
            .iter()
            .filter_map(|c| match c.tensor {
                CheckTensor::ParamGrad(p) => Some(self.storage[p.0]),
                _ => None,
            })
            .collect();
        (0..self.graph.params.len())
            .filter(|&i| self.storage[i] == i && !recorded.contains(&i))
            .collect()
    }

    /// Sizes `bf` for this graph, fills each stored parameter's buffer with `fill(index,
    /// buffer)` and forgets the optimizer state.
    fn prepare_state<R: Real>(
        &self,
        cx: &StepCtx<'_, R>,
        bf: &mut Bufs<R>,
        mut fill: impl FnMut(usize, &mut Vec<R>),
    ) {
        let g = &self.graph;
        let np = g.params.len();
        bf.params.resize_with(np, Vec::new);
        bf.pgrad.resize_with(np, Vec::new);
        bf.acc.resize_with(np, Vec::new);
        bf.old.resize_with(np, Vec::new);
        bf.pset.resize(np, false);
        bf.stepped.resize(np, false);
        bf.opt.resize_with(np, OptState::default);
        bf.opt.iter_mut().for_each(OptState::reset);
        bf.drift_opt.reset();
        for (i, p) in g.params.iter().enumerate() {
            if self.storage[i] != i {
                continue;
            }
            let n: usize = p.shape.iter().product();
            fill(i, &mut bf.params[i]);
            debug_assert_eq!(bf.params[i].len(), n, "parameter {} loaded", p.name);
            sized(&mut bf.pgrad[i], n);
            sized(&mut bf.acc[i], n);
        }
        for &i in &self.keeps_old {
            let n = bf.params[i].len();
            sized(&mut bf.old[i], n);
        }
        if cx.drift {
            let t = self.tied_table.unwrap_or(0);
            let n = bf.params[t].len();
            bf.drift[0].clear();
            bf.drift[0].extend_from_slice(&bf.params[t]);
            sized(&mut bf.drift[1], n);
            sized(&mut bf.drift[2], n);
        }
        let nt = g.tensors.len();
        bf.acts.resize_with(nt, Vec::new);
        bf.dacts.resize_with(nt, Vec::new);
        bf.dset.resize(nt, false);
        for t in 0..nt {
            sized(&mut bf.acts[t], self.numel[t]);
            if self.needs_grad[t] {
                sized(&mut bf.dacts[t], self.numel[t]);
            }
        }
    }

    /// Micro-step `m` of step `s` on `inputs`: forward, loss, backward, accumulation, and at
    /// the last micro-step the optimizer step, each phase recording its checks. Returns the
    /// micro-step's loss.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn micro_step<B: Backend>(
        &self,
        be: &mut B,
        cx: &StepCtx<'_, B::R>,
        s: usize,
        m: usize,
        inputs: &[InputValue],
        bf: &mut Bufs<B::R>,
        trace: &mut Trace,
    ) -> B::R
    where
        B::R: ActReal,
    {
        let g = &self.graph;
        let (faults, mutant, drift, condition) = (cx.faults, cx.mutant, cx.drift, cx.condition);
        let np = g.params.len();
        let last = m + 1 == g.train.micro_steps;
        let mut k = 0;
        for (d, v) in g.inputs.draws.iter().zip(inputs) {
            let seeded = d.kind == crate::scenario::ir::DrawKind::Rand { seeded: true };
            if let Some(t) = d.tensor {
                if seeded {
                    let (acts, src) = (&mut bf.acts, &bf.seeded);
                    acts[t.0].clear();
                    acts[t.0].extend_from_slice(&src[k]);
                } else {
                    load(&mut bf.acts[t.0], &v.f);
                }
            }
            k += usize::from(seeded);
        }
        // The conditions this micro-step records, for a forward that can compute them with
        // its product.
        bf.cond_of = None;
        bf.cond_want.clear();
        if condition {
            for &c in &self.by_phase[0] {
                let decl = &g.checks[c];
                if let (CheckTensor::Activation(t), Some(_)) = (decl.tensor, decl.reduction) {
                    if decl.at != At::Step || last {
                        bf.cond_want.push(t);
                    }
                }
            }
        }
        // Forward.
        for (li, layer) in g.layers.iter().enumerate() {
            self.forward(
                be,
                cx,
                li,
                &layer.op,
                &cx.shards[li],
                faults,
                drift,
                inputs,
                bf,
            );
            if let Op::Moe { top_k, .. } = layer.op {
                trace.record_routing(&bf.moe[li].topi, top_k);
            }
        }
        let loss = self.loss(be, cx, inputs, cx.scale, bf);
        for &c in &self.by_phase[0] {
            let decl = &g.checks[c];
            if decl.at == At::Step && !last {
                continue;
            }
            let label = self.label(c, s, m);
            match decl.tensor {
                CheckTensor::Loss => trace.record(c, label, &[loss]),
                // The vocab-parallel loss's per-token values, kept by its kernel.
                CheckTensor::LossTokens => trace.record(c, label, bf.vp.token_losses()),
                CheckTensor::Activation(t) => {
                    trace.record(c, label, &bf.acts[t.0]);
                    if condition && decl.reduction.is_some() {
                        self.condition(be, t, c, label, bf, trace);
                    }
                }
                _ => {}
            }
        }
        // Backward.
        bf.dset.iter_mut().for_each(|d| *d = false);
        bf.pset.iter_mut().for_each(|d| *d = false);
        bf.stepped.iter_mut().for_each(|d| *d = false);
        bf.dset[g.loss.input.0] = true;
        for (li, layer) in g.layers.iter().enumerate().rev() {
            self.backward(
                be,
                cx,
                li,
                &layer.op,
                &cx.shards[li],
                faults,
                mutant,
                drift,
                inputs,
                bf,
            );
        }
        for i in 0..np {
            if self.storage[i] != i || bf.stepped[i] {
                continue;
            }
            if !bf.pset[i] {
                bf.pgrad[i].fill(B::R::ZERO);
            }
            if m == 0 {
                // The first micro-step's gradient is stored as is: take the buffer
                // instead of copying it (every contribution rewrites its target
                // whole, so the swapped-out buffer needs no clearing).
                std::mem::swap(&mut bf.acc[i], &mut bf.pgrad[i]);
            } else {
                accumulate(&mut bf.acc[i], &bf.pgrad[i], false);
            }
        }
        if drift {
            let [_, g1, g2] = &mut bf.drift;
            accumulate(g2, g1, m == 0);
        }
        for &c in &self.by_phase[1] {
            let decl = &g.checks[c];
            if decl.at == At::Step && !last {
                continue;
            }
            let label = self.label(c, s, m);
            match decl.tensor {
                CheckTensor::Grad(t) => trace.record(c, label, &bf.dacts[t.0]),
                CheckTensor::ParamGrad(p) => {
                    let grad = &bf.acc[self.storage[p.0]];
                    if g.train.micro_steps == 1 {
                        // Not modified before the next step's backward (the optimizer only
                        // reads it): it may be lent.
                        trace.record_lent(c, label, grad)
                    } else {
                        trace.record(c, label, grad)
                    }
                }
                _ => {}
            }
        }
        if !last {
            return loss;
        }
        // Optimizer step.
        for &i in &self.keeps_old {
            let (old, params) = (&mut bf.old[i], &bf.params[i]);
            old.copy_from_slice(params);
        }
        let opt = g.train.optimizer;
        let lr = cx.lr;
        for i in 0..np {
            if self.storage[i] != i || bf.stepped[i] {
                continue;
            }
            match cx.xla {
                Some(mode) => xla::step(
                    mode,
                    opt,
                    s + 1,
                    &mut bf.params[i],
                    &bf.acc[i],
                    &mut bf.opt[i],
                ),
                None => step(
                    opt,
                    &mut bf.params[i],
                    &bf.acc[i],
                    &mut bf.opt[i],
                    &mut bf.opt_scratch,
                    be.adam_sqrt(),
                ),
            }
        }
        if drift {
            let [w, _, g2] = &mut bf.drift;
            step(
                opt,
                w,
                g2,
                &mut bf.drift_opt,
                &mut bf.opt_scratch,
                be.adam_sqrt(),
            );
        }
        self.record_step_checks(s, m, lr, bf, trace);
        if m == 0 {
            // One micro-step per step: the gradient swapped into `acc` above has been used
            // (checks, optimizer) and nothing reads `acc` before the next step's swap, so the
            // buffers swap back: every step's backward writes the same buffer, and the other
            // one, never written, is never faulted in (one parameter-sized buffer per
            // computation: 250 MB at V = 32,000, H = 512).
            for i in 0..np {
                if self.storage[i] == i && !bf.stepped[i] {
                    std::mem::swap(&mut bf.acc[i], &mut bf.pgrad[i]);
                }
            }
        }
        loss
    }

    /// Records the checks of the optimizer-step phase (parameters, and the SGD-update
    /// self-consistency check with its f32 and f64 expectations) of micro-step `m` of step
    /// `s`, in check-table order.
    pub(crate) fn record_step_checks<R: Real>(
        &self,
        s: usize,
        m: usize,
        lr: R,
        bf: &mut Bufs<R>,
        trace: &mut Trace,
    ) {
        for &c in &self.by_phase[2] {
            let label = self.label(c, s, m);
            match self.graph.checks[c].tensor {
                // After the step's update: not modified before the next step's.
                CheckTensor::Param(p) => trace.record_lent(c, label, &bf.params[self.storage[p.0]]),
                CheckTensor::SgdUpdate(p) => {
                    let i = self.storage[p.0];
                    trace.record(c, label, &bf.params[i]);
                    sized(&mut bf.expect, bf.old[i].len());
                    sgd_unfused(&bf.old[i], &bf.acc[i], lr, &mut bf.expect);
                    trace.record_role(c, label, SlotRole::SelfExpectedF32, &bf.expect);
                    // The test's float64 expectation reads the learning rate as the Python
                    // float it is, not as the fp32 update rounded it.
                    let lr64 = self.lr;
                    bf.expect64.clear();
                    bf.expect64.extend(
                        bf.old[i]
                            .iter()
                            .zip(&bf.acc[i])
                            .map(|(&o, &gr)| o.to_f64() - lr64 * gr.to_f64()),
                    );
                    trace.record_role(c, label, SlotRole::SelfExpectedF64, &bf.expect64);
                }
                _ => {}
            }
        }
    }

    fn condition<B: Backend>(
        &self,
        be: &mut B,
        t: TensorId,
        check: usize,
        label: StepLabel,
        bf: &mut Bufs<B::R>,
        trace: &mut Trace,
    ) where
        B::R: ActReal,
    {
        let g = &self.graph;
        if bf.cond_of == Some(t) {
            // Computed with the forward product, from the same operands: neither has changed
            // since (a tensor has one producer, and an activation runs in place only on a
            // tensor no other layer reads).
            trace.record_role(check, label, SlotRole::Condition, &bf.cond);
            return;
        }
        bf.cond_of = None;
        if let Some(Op::Linear { x, weight, .. }) = g.producer(t).map(|l| &l.op) {
            let (m, k, n) = (g.rows(*x), g.width(*x), g.width(t));
            let w = &bf.params[self.storage[weight.0]];
            record_condition(
                be,
                &bf.acts[x.0],
                w,
                m,
                k,
                n,
                &mut bf.cond,
                check,
                label,
                trace,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn forward<B: Backend>(
        &self,
        be: &mut B,
        cx: &StepCtx<'_, B::R>,
        li: usize,
        op: &Op,
        shards: &[Range<usize>],
        faults: TpFaults,
        drift: bool,
        inputs: &[InputValue],
        bf: &mut Bufs<B::R>,
    ) where
        B::R: ActReal,
    {
        let g = &self.graph;
        match *op {
            Op::Embedding {
                ids,
                table,
                out,
                parallel: EmbeddingParallel::Vocab,
                ..
            } if shards.len() > 1 => {
                let tbl = &bf.params[self.storage[table.0]];
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                let dim = g.width(out);
                vocab_parallel_embedding(
                    be,
                    tbl,
                    dim,
                    &inputs[ids.0].i,
                    shards,
                    &mut y,
                    &mut bf.vp,
                );
                bf.acts[out.0] = y;
            }
            Op::Embedding {
                ids, table, out, ..
            } => {
                let s = self.storage[table.0];
                let tbl = if drift && Some(s) == self.tied_table {
                    &bf.drift[0]
                } else {
                    &bf.params[s]
                };
                let dim = g.width(out);
                embedding_lookup(tbl, dim, &inputs[ids.0].i, &mut bf.acts[out.0]);
            }
            Op::Linear {
                x,
                weight,
                bias,
                out,
                parallel,
                layout,
            } => {
                let (m, k, n) = (g.rows(x), g.width(x), g.width(out));
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                let w = &bf.params[self.storage[weight.0]];
                let b = bias.map(|b| bf.params[self.storage[b.0]].as_slice());
                let xs = &bf.acts[x.0];
                match parallel {
                    _ if layout == WeightLayout::InOut => {
                        be.matmul(xs, w, &mut y, m, k, n);
                        if let Some(b) = b {
                            add_row_bias(&mut y, b, n);
                        }
                    }
                    LinearParallel::Row if shards.len() > 1 => {
                        row_parallel_forward(
                            be, xs, w, &mut y, m, k, n, shards, faults, &mut bf.rp,
                        );
                        if let Some(b) = b {
                            add_row_bias(&mut y, b, n);
                        }
                    }
                    LinearParallel::Column | LinearParallel::ColumnGather if shards.len() > 1 => {
                        column_parallel_forward(be, xs, w, b, &mut y, m, k, n, shards, &mut bf.rp);
                    }
                    _ if b.is_none() && bf.cond_want.contains(&out) => {
                        // Its condition is recorded: both products from one pass over the
                        // weight where the backend can.
                        let mut cond = std::mem::take(&mut bf.cond);
                        cond.resize(m * n, B::R::ZERO);
                        if be.matmul_nt_and_abs(xs, w, &mut y, &mut cond, m, k, n) {
                            bf.cond_of = Some(out);
                        } else {
                            linear(be, xs, w, b, &mut y, m, k, n);
                        }
                        bf.cond = cond;
                    }
                    _ => linear(be, xs, w, b, &mut y, m, k, n),
                }
                bf.acts[out.0] = y;
            }
            Op::Activation { kind, x, out } => {
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                if self.in_place[li] {
                    // Nothing reads the input after this layer: compute in its buffer.
                    std::mem::swap(&mut y, &mut bf.acts[x.0]);
                } else {
                    y.copy_from_slice(&bf.acts[x.0]);
                }
                let lp = self.torch_loop(be, cx, li, x);
                match kind {
                    // JAX's tanh: XLA's correctly rounded f32 tanh (libm's for f64).
                    Activation::Tanh if cx.xla.is_some() => tanh_inplace(&mut y),
                    Activation::Tanh => be.tanh(&mut y),
                    Activation::Gelu => gelu(&mut y, &lp),
                    Activation::GeluTanh => gelu_tanh(&mut y, &lp),
                    Activation::Relu => relu(&mut y),
                    Activation::Silu => silu(&mut y, &lp),
                }
                bf.acts[out.0] = y;
            }
            Op::Norm {
                kind,
                x,
                weight,
                bias,
                eps,
                out,
                ..
            } => {
                let n = g.width(x);
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                let w = weight.map(|p| bf.params[self.storage[p.0]].as_slice());
                let b = bias.map(|p| bf.params[self.storage[p.0]].as_slice());
                match kind {
                    NormKind::LayerNorm => layer_norm(&bf.acts[x.0], w, b, eps, n, &mut y),
                    NormKind::RmsNorm => rms_norm(&bf.acts[x.0], w, eps, n, &mut y),
                }
                bf.acts[out.0] = y;
            }
            Op::Binary { kind, a, b, out } => {
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                match kind {
                    BinaryKind::Add => residual_add(&bf.acts[a.0], &bf.acts[b.0], &mut y),
                    BinaryKind::Mul => elementwise_mul(&bf.acts[a.0], &bf.acts[b.0], &mut y),
                }
                bf.acts[out.0] = y;
            }
            Op::Sdpa {
                q,
                k,
                v,
                out,
                heads,
                causal,
                scale,
                cp,
                load_balance,
            } => {
                if cx.sharded && cp > 1 {
                    // Context parallelism: torch's ring attention over the cp sequence chunks.
                    let sh = self.attn_shape(q, heads);
                    let mut y = std::mem::take(&mut bf.acts[out.0]);
                    crate::ops::ring::ring_forward(
                        &bf.acts[q.0],
                        &bf.acts[k.0],
                        &bf.acts[v.0],
                        sh,
                        cp,
                        causal,
                        load_balance,
                        scale,
                        be.elementwise_block() / 2,
                        be.elementwise_block(),
                        &mut y,
                        &mut bf.ring,
                    );
                    bf.acts[out.0] = y;
                    return;
                }
                // Per (batch, head): the sharded computation's ranks, each on its heads (the
                // column shards of q, k, v hold whole heads), give the same bits as the whole
                // tensor's, so it needs no split of its own.
                let sh = self.attn_shape(q, heads);
                if bf.attn.len() <= li {
                    bf.attn.resize_with(li + 1, AttnBufs::default);
                }
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                sdpa_forward(
                    &bf.acts[q.0],
                    &bf.acts[k.0],
                    &bf.acts[v.0],
                    sh,
                    causal,
                    scale,
                    be.elementwise_block() / 2,
                    be.bmm_order(),
                    self.head_groups(cx.sharded, li),
                    &mut y,
                    &mut bf.attn[li],
                );
                bf.acts[out.0] = y;
            }
            Op::Rope { x, out, ref tables } => {
                // Elementwise per head, each row at its position: a rank's heads (whole, from
                // a column-parallel layer) give the same bits as the whole tensor's.
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                rope_forward(&bf.acts[x.0], g.width(x), tables, &mut y);
                bf.acts[out.0] = y;
            }
            Op::Moe { x, out, .. } => {
                // `shards`: the expert-parallel ranks' token blocks (one block unsharded).
                let c = self.moe_cfg(op, cx.sharded);
                if bf.moe.len() <= li {
                    bf.moe.resize_with(li + 1, MoeBufs::default);
                }
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                let Bufs {
                    params, acts, moe, ..
                } = bf;
                let w = self.moe_weights(op, params);
                moe_forward(be, &c, &w, &acts[x.0], shards, &mut y, &mut moe[li]);
                bf.acts[out.0] = y;
            }
            Op::Softmax { x, out } => {
                // Row by row, so a rank's rows give the same bits as the whole tensor's: the
                // sharded computation needs no split of its own.
                let mut y = std::mem::take(&mut bf.acts[out.0]);
                B::R::softmax_rows(
                    &bf.acts[x.0],
                    g.width(x),
                    &mut y,
                    be.elementwise_block() / 2,
                );
                bf.acts[out.0] = y;
            }
        }
    }

    /// Mean loss of this micro-step, with its gradient (seeded with `scale`) in the loss
    /// input's gradient buffer. `sharded` selects the vocab split of a vocab-parallel loss.
    fn loss<B: Backend>(
        &self,
        be: &mut B,
        cx: &StepCtx<'_, B::R>,
        inputs: &[InputValue],
        scale: B::R,
        bf: &mut Bufs<B::R>,
    ) -> B::R
    where
        B::R: ActReal,
    {
        let g = &self.graph;
        let t = g.loss.input;
        match g.loss.kind {
            LossKind::CrossEntropy { labels } => be.cross_entropy(
                &bf.acts[t.0],
                &inputs[labels.0].i,
                g.width(t),
                scale,
                &mut bf.dacts[t.0],
            ),
            LossKind::Mse { target } => {
                load(&mut bf.target, &inputs[target.0].f);
                match cx.xla {
                    Some(mode) => xla::mse(
                        mode,
                        &bf.acts[t.0],
                        &bf.target,
                        g.width(t),
                        &mut bf.dacts[t.0],
                    ),
                    None => loss::mse(&bf.acts[t.0], &bf.target, scale, &mut bf.dacts[t.0]),
                }
            }
            LossKind::Sum => loss::sum(&bf.acts[t.0], scale, &mut bf.dacts[t.0]),
            LossKind::VocabParallelCrossEntropy { labels } => {
                let v = g.width(t);
                let whole = 0..v;
                let shards = if cx.sharded && !self.loss_shards.is_empty() {
                    self.loss_shards.as_slice()
                } else {
                    std::slice::from_ref(&whole)
                };
                vocab_parallel_cross_entropy(
                    be,
                    &bf.acts[t.0],
                    &inputs[labels.0].i,
                    v,
                    shards,
                    scale,
                    &mut bf.dacts[t.0],
                    &mut bf.vp,
                )
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn backward<B: Backend>(
        &self,
        be: &mut B,
        cx: &StepCtx<'_, B::R>,
        li: usize,
        op: &Op,
        shards: &[Range<usize>],
        faults: TpFaults,
        mutant: Option<Mutant>,
        drift: bool,
        inputs: &[InputValue],
        bf: &mut Bufs<B::R>,
    ) where
        B::R: ActReal,
    {
        let g = &self.graph;
        let out = op.output();
        if !bf.dset[out.0] {
            return;
        }
        match *op {
            Op::Embedding {
                ids,
                table,
                padding_idx,
                ..
            } => {
                let s = self.storage[table.0];
                let dim = g.width(out);
                let ids = &inputs[ids.0].i;
                if drift && Some(s) == self.tied_table {
                    let mut d = std::mem::take(&mut bf.drift[1]);
                    embedding_backward(&bf.dacts[out.0], dim, ids, padding_idx, &mut d);
                    bf.drift[1] = d;
                } else if mutant != Some(Mutant::DroppedEmbeddingGrad) {
                    if bf.pset[s] {
                        // A second contribution (a tied head's came first): added in place,
                        // the same operations as adding a table-sized buffer of it.
                        embedding_backward_add(
                            &bf.dacts[out.0],
                            dim,
                            ids,
                            padding_idx,
                            &mut bf.pgrad[s],
                            &mut bf.tmp_row,
                            &mut bf.tmp_ids,
                        );
                    } else {
                        let mut dst = self.grad_target(bf, s);
                        embedding_backward(&bf.dacts[out.0], dim, ids, padding_idx, &mut dst);
                        self.grad_done(bf, s, dst);
                    }
                }
            }
            Op::Linear {
                x,
                weight,
                bias,
                parallel,
                layout: WeightLayout::InOut,
                ..
            } => {
                // A flax kernel (validated unsharded): dK = xᵀ·dy, dx = dy·Kᵀ, db summed
                // from the first row down.
                let (m, k, n) = (g.rows(x), g.width(x), g.width(out));
                let _ = parallel;
                let ws = self.storage[weight.0];
                let dy = std::mem::take(&mut bf.dacts[out.0]);
                let mut dw = self.grad_target(bf, ws);
                be.matmul_tn(&bf.acts[x.0], &dy, &mut dw, k, m, n);
                self.grad_done(bf, ws, dw);
                if self.needs_grad[x.0] {
                    let mut dx = self.act_grad_target(bf, x.0);
                    be.matmul_nt(&dy, &bf.params[ws], &mut dx, m, n, k);
                    self.act_grad_done(bf, x.0, dx);
                }
                if let Some(b) = bias {
                    let bs = self.storage[b.0];
                    let mut db = self.grad_target(bf, bs);
                    column_sums_generic(&dy, n, &mut db);
                    self.grad_done(bf, bs, db);
                }
                bf.dacts[out.0] = dy;
            }
            Op::Linear {
                x,
                weight,
                bias,
                parallel,
                ..
            } => {
                let (m, k, n) = (g.rows(x), g.width(x), g.width(out));
                let ws = self.storage[weight.0];
                let drop_w = mutant == Some(Mutant::DroppedHeadGrad)
                    && parallel == LinearParallel::Row
                    && shards.len() > 1;
                let dy = std::mem::take(&mut bf.dacts[out.0]);
                // The weight's step taken here instead of after the backward: the gradient
                // after dx, which reads the weight before its step.
                let fuse = self.fused_sgd[ws] && shards.len() == 1 && cx.xla.is_none() && !drop_w;
                let mut dw = (!drop_w && !fuse).then(|| self.grad_target(bf, ws));
                let want_dx = self.needs_grad[x.0];
                let mut dx = want_dx.then(|| self.act_grad_target(bf, x.0));
                if matches!(
                    parallel,
                    LinearParallel::Column | LinearParallel::ColumnGather
                ) && shards.len() > 1
                {
                    let bs = bias.map(|b| self.storage[b.0]);
                    let mut db = bs.map(|b| self.grad_target(bf, b));
                    column_parallel_backward(
                        be,
                        &bf.acts[x.0],
                        &bf.params[ws],
                        &dy,
                        dw.as_deref_mut(),
                        db.as_deref_mut(),
                        dx.as_deref_mut(),
                        m,
                        k,
                        n,
                        shards,
                        faults,
                        &mut bf.rp,
                    );
                    if let Some(dw) = dw {
                        self.grad_done(bf, ws, dw);
                    }
                    if let (Some(b), Some(db)) = (bs, db) {
                        self.grad_done(bf, b, db);
                    }
                    if let Some(dx) = dx {
                        self.act_grad_done(bf, x.0, dx);
                    }
                    bf.dacts[out.0] = dy;
                    return;
                }
                row_parallel_backward(
                    be,
                    &bf.acts[x.0],
                    &bf.params[ws],
                    &dy,
                    dw.as_deref_mut(),
                    dx.as_deref_mut(),
                    m,
                    k,
                    n,
                    shards,
                    if parallel == LinearParallel::Row {
                        faults
                    } else {
                        TpFaults::default()
                    },
                    &mut bf.rp,
                );
                if let Some(dw) = dw {
                    self.grad_done(bf, ws, dw);
                }
                if let Some(dx) = dx {
                    self.act_grad_done(bf, x.0, dx);
                }
                if fuse {
                    let Bufs {
                        params,
                        acts,
                        panel,
                        ..
                    } = bf;
                    if fused_sgd_step(be, &dy, &acts[x.0], &mut params[ws], panel, n, m, k, cx.lr) {
                        bf.stepped[ws] = true;
                    } else {
                        // The backend computes this product only whole: as unfused.
                        let mut dw = self.grad_target(bf, ws);
                        be.matmul_tn(&dy, &bf.acts[x.0], &mut dw, n, m, k);
                        self.grad_done(bf, ws, dw);
                    }
                }
                if let Some(b) = bias {
                    let bs = self.storage[b.0];
                    let mut db = self.grad_target(bf, bs);
                    column_sums(&dy, n, &mut db);
                    self.grad_done(bf, bs, db);
                }
                bf.dacts[out.0] = dy;
            }
            Op::Activation { kind, x, .. } => {
                if !self.needs_grad[x.0] {
                    return;
                }
                let mut dx = self.act_grad_target(bf, x.0);
                let (dy, y, xs) = (&bf.dacts[out.0], &bf.acts[out.0], &bf.acts[x.0]);
                let lp = self.torch_loop(be, cx, li, x);
                match kind {
                    Activation::Tanh if cx.xla.is_some() => {
                        xla::tanh_backward(cx.xla.unwrap_or(XlaMode::Eager), dy, y, &mut dx)
                    }
                    Activation::Tanh => tanh_backward(dy, y, &mut dx),
                    Activation::Relu => relu_backward(dy, y, &mut dx),
                    Activation::Gelu => gelu_backward(dy, xs, &mut dx, &lp),
                    Activation::GeluTanh => gelu_tanh_backward(dy, xs, &mut dx, &lp),
                    Activation::Silu => silu_backward(dy, xs, &mut dx, &lp),
                }
                self.act_grad_done(bf, x.0, dx);
            }
            Op::Norm {
                kind,
                x,
                weight,
                bias,
                eps,
                parallel,
                ..
            } => {
                let n = g.width(x);
                let dy = std::mem::take(&mut bf.dacts[out.0]);
                let wp = weight.map(|p| self.storage[p.0]);
                let bp = bias.map(|p| self.storage[p.0]);
                let mut dw = wp.map(|p| self.grad_target(bf, p));
                let mut db = bp.map(|p| self.grad_target(bf, p));
                // RMSNorm's composite hands x two gradients, one after the other (see
                // `rms_norm_backward`): where x already holds one, torch adds them to it one
                // at a time, so the kernel accumulates into x's gradient itself.
                let accumulate = kind == NormKind::RmsNorm && self.needs_grad[x.0] && bf.dset[x.0];
                let mut dx = if accumulate {
                    Some(std::mem::take(&mut bf.dacts[x.0]))
                } else {
                    self.needs_grad[x.0].then(|| self.act_grad_target(bf, x.0))
                };
                let w = wp.map(|p| bf.params[p].as_slice());
                let xs = &bf.acts[x.0];
                if parallel == NormParallel::Sequence && shards.len() > 1 {
                    // Megatron SP: rank r normalises its token rows `shards[r]`; its weight
                    // gradients are partial sums over those rows, all-reduced over tp.
                    sequence_parallel_norm_backward(
                        be,
                        kind,
                        xs,
                        w,
                        &dy,
                        eps,
                        n,
                        shards,
                        dx.as_deref_mut(),
                        dw.as_deref_mut(),
                        db.as_deref_mut(),
                        accumulate,
                        &mut bf.norm_rstd,
                        &mut bf.sp_norm_partials,
                    );
                } else {
                    match kind {
                        NormKind::LayerNorm => layer_norm_backward_threads(
                            xs,
                            w,
                            &dy,
                            eps,
                            n,
                            be.aten_threads(),
                            &mut bf.norm_partials,
                            dx.as_deref_mut(),
                            dw.as_deref_mut(),
                            db.as_deref_mut(),
                        ),
                        NormKind::RmsNorm => rms_norm_backward(
                            xs,
                            w,
                            &dy,
                            eps,
                            n,
                            dx.as_deref_mut(),
                            dw.as_deref_mut(),
                            accumulate,
                            &mut bf.norm_rstd,
                        ),
                    }
                }
                if let (Some(p), Some(d)) = (wp, dw) {
                    self.grad_done(bf, p, d);
                }
                if let (Some(p), Some(d)) = (bp, db) {
                    self.grad_done(bf, p, d);
                }
                match dx {
                    Some(d) if accumulate => bf.dacts[x.0] = d,
                    Some(d) => self.act_grad_done(bf, x.0, d),
                    None => {}
                }
                bf.dacts[out.0] = dy;
            }
            Op::Binary { kind, a, b, .. } => {
                // AddBackward0 hands the output gradient to both operands unchanged;
                // MulBackward0 hands `g·b` to `a`, then `g·a` to `b` (its outputs in operand
                // order; both products are read from the forward's operands, so `x * x` gives
                // x `g·x + g·x`). A tensor with several consumers sums them (act_grad_done:
                // the first stored, each later one added to it, as torch's input buffer).
                let dy = std::mem::take(&mut bf.dacts[out.0]);
                for (t, other) in [(a, b), (b, a)] {
                    if self.needs_grad[t.0] {
                        let mut d = self.act_grad_target(bf, t.0);
                        match kind {
                            BinaryKind::Add => d.copy_from_slice(&dy),
                            BinaryKind::Mul => elementwise_mul(&dy, &bf.acts[other.0], &mut d),
                        }
                        self.act_grad_done(bf, t.0, d);
                    }
                }
                bf.dacts[out.0] = dy;
            }
            Op::Sdpa {
                q,
                k,
                v,
                heads,
                scale,
                causal,
                cp,
                load_balance,
                ..
            } => {
                if ![q, k, v].iter().any(|t| self.needs_grad[t.0]) {
                    return;
                }
                let sh = self.attn_shape(q, heads);
                let [mut gq, mut gk, mut gv] = std::mem::take(&mut bf.attn_grads);
                for gbuf in [&mut gq, &mut gk, &mut gv] {
                    sized(gbuf, sh.numel());
                }
                if cx.sharded && cp > 1 {
                    crate::ops::ring::ring_backward(
                        &bf.dacts[out.0],
                        &bf.acts[q.0],
                        &bf.acts[k.0],
                        &bf.acts[v.0],
                        &bf.acts[out.0],
                        sh,
                        cp,
                        causal,
                        load_balance,
                        scale,
                        &mut gq,
                        &mut gk,
                        &mut gv,
                        &mut bf.ring,
                    );
                } else {
                    sdpa_backward(
                        &bf.dacts[out.0],
                        &bf.acts[v.0],
                        sh,
                        scale,
                        be.elementwise_block() / 2,
                        be.aten_threads(),
                        be.bmm_order(),
                        self.head_groups(cx.sharded, li),
                        &mut gq,
                        &mut gk,
                        &mut gv,
                        &mut bf.attn[li],
                    );
                }
                for (t, gbuf) in [(q, &gq), (k, &gk), (v, &gv)] {
                    if self.needs_grad[t.0] {
                        let mut d = self.act_grad_target(bf, t.0);
                        d.copy_from_slice(gbuf);
                        self.act_grad_done(bf, t.0, d);
                    }
                }
                bf.attn_grads = [gq, gk, gv];
            }
            Op::Rope { x, ref tables, .. } => {
                if !self.needs_grad[x.0] {
                    return;
                }
                let mut dx = self.act_grad_target(bf, x.0);
                rope_backward(&bf.dacts[out.0], g.width(x), tables, &mut dx);
                self.act_grad_done(bf, x.0, dx);
            }
            Op::Moe { x, router, .. } => {
                let c = self.moe_cfg(op, cx.sharded);
                let want_dx = self.needs_grad[x.0];
                let mut dx = want_dx.then(|| self.act_grad_target(bf, x.0));
                {
                    let Bufs {
                        params,
                        acts,
                        dacts,
                        moe,
                        ..
                    } = &mut *bf;
                    let w = self.moe_weights(op, params);
                    moe_backward(
                        be,
                        &c,
                        &w,
                        &acts[x.0],
                        &dacts[out.0],
                        shards,
                        dx.as_deref_mut(),
                        &mut moe[li],
                    );
                }
                let mut dws = std::mem::take(&mut bf.moe[li].dw);
                for (i, dw) in dws.iter_mut().enumerate() {
                    let s = self.storage[router.0 + i];
                    let mut t = self.grad_target(bf, s);
                    t.copy_from_slice(dw);
                    self.grad_done(bf, s, t);
                }
                bf.moe[li].dw = dws;
                if let Some(dx) = dx {
                    self.act_grad_done(bf, x.0, dx);
                }
            }
            Op::Softmax { x, .. } => {
                if !self.needs_grad[x.0] {
                    return;
                }
                let mut dx = self.act_grad_target(bf, x.0);
                B::R::softmax_backward_rows(
                    &bf.dacts[out.0],
                    &bf.acts[out.0],
                    g.width(x),
                    &mut dx,
                    be.elementwise_block() / 2,
                    be.aten_threads(),
                );
                self.act_grad_done(bf, x.0, dx);
            }
        }
    }

    /// The buffer a parameter gradient contribution is written into: the parameter's own
    /// gradient for its first contribution of the micro-step, else a scratch buffer that
    /// [`Plan::grad_done`] adds in.
    fn grad_target<R: Real>(&self, bf: &mut Bufs<R>, p: usize) -> Vec<R> {
        if bf.pset[p] {
            let mut t = std::mem::take(&mut bf.tmp_p);
            sized(&mut t, bf.pgrad[p].len());
            t
        } else {
            std::mem::take(&mut bf.pgrad[p])
        }
    }

    fn grad_done<R: Real>(&self, bf: &mut Bufs<R>, p: usize, buf: Vec<R>) {
        if bf.pset[p] {
            add_into(&mut bf.pgrad[p], &buf);
            bf.tmp_p = buf;
        } else {
            bf.pgrad[p] = buf;
            bf.pset[p] = true;
        }
    }

    /// How torch's elementwise loop covers activation layer `li`'s input `x` in this
    /// computation: its tensors ([`Plan::act_parts`] in the sharded computation, the whole
    /// buffer otherwise) and the backend's vector block.
    fn torch_loop<'p, B: Backend>(
        &'p self,
        be: &B,
        cx: &StepCtx<'_, B::R>,
        li: usize,
        x: TensorId,
    ) -> TorchLoop<'p> {
        TorchLoop {
            block: be.elementwise_block(),
            width: self.graph.width(x),
            parts: if cx.sharded {
                &self.act_parts[li]
            } else {
                &WHOLE
            },
            onednn: be.onednn_isa(),
        }
    }

    /// The ranks' column ranges of attention layer `li`'s q in the sharded computation (each
    /// rank's torch tensors hold its heads, [`Plan::act_parts`]); empty (one rank) otherwise.
    fn head_groups(&self, sharded: bool, li: usize) -> &[Range<usize>] {
        match (sharded, &self.act_parts[li]) {
            (true, TorchParts::Columns(r)) => r,
            _ => &[],
        }
    }

    /// The shape and options of moe layer `op` in the sharded computation or (`sharded`
    /// false) the reference and float64 ones, which differ in their combine only.
    fn moe_cfg(&self, op: &Op, sharded: bool) -> MoeCfg {
        let Op::Moe {
            x,
            experts,
            top_k,
            ffn,
            act,
            gated,
            norm_topk,
            combine,
            reference_combine,
            ..
        } = *op
        else {
            unreachable!("moe_cfg of a moe layer")
        };
        MoeCfg {
            tokens: self.graph.rows(x),
            hidden: self.graph.width(x),
            ffn,
            experts,
            top_k,
            act,
            gated,
            norm_topk,
            combine: if sharded { combine } else { reference_combine },
        }
    }

    /// Moe layer `op`'s weights in `params`.
    fn moe_weights<'a, R>(&'a self, op: &Op, params: &'a [Vec<R>]) -> MoeWeights<'a, R> {
        let Op::Moe { router, gated, .. } = *op else {
            unreachable!("moe_weights of a moe layer")
        };
        MoeWeights {
            params,
            storage: &self.storage,
            router,
            gated,
        }
    }

    /// The shape of an attention layer on `[batch, seq, heads·head_dim]` queries `q` (this
    /// plan's, so a data-parallel rank's batch).
    fn attn_shape(&self, q: TensorId, heads: usize) -> AttnShape {
        let s = &self.graph.tensors[q.0].shape;
        AttnShape {
            batch: s[0],
            seq: s[1],
            heads,
            head_dim: s[2] / heads,
        }
    }

    fn act_grad_target<R: Real>(&self, bf: &mut Bufs<R>, t: usize) -> Vec<R> {
        if bf.dset[t] {
            let mut v = std::mem::take(&mut bf.tmp_a);
            sized(&mut v, self.numel[t]);
            v
        } else {
            std::mem::take(&mut bf.dacts[t])
        }
    }

    fn act_grad_done<R: Real>(&self, bf: &mut Bufs<R>, t: usize, buf: Vec<R>) {
        if bf.dset[t] {
            add_into(&mut bf.dacts[t], &buf);
            bf.tmp_a = buf;
        } else {
            bf.dacts[t] = buf;
            bf.dset[t] = true;
        }
    }
}
