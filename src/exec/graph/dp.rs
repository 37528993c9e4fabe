//! Data parallelism in the sharded computation: `dp` ranks ([`Plan::ranks`]), each on its
//! contiguous block of the global batch (the leading dimension of every input, split by the
//! shard rule), and the gradient collective between the backward pass and the optimizer.
//! The reference and float64 computations stay unsharded (the whole batch in one process).
//!
//! # Order of operations
//!
//! Per micro-step:
//! 1. Every rank, in rank order, loads its block of the micro-step's inputs and runs the
//!    forward pass and the loss (the mean over its own rows, the backward seed scaled by
//!    `1/micro_steps` as in the unsharded run) on its own copy of the parameters.
//! 2. Forward checks: an activation is the ranks' blocks concatenated in rank order; the loss
//!    is the reported one, the ranks' losses summed by the backend's all-reduce and then
//!    divided once by `dp`.
//! 3. Every rank, in rank order, runs the backward pass: its own parameter gradients.
//! 4. The collective, by [`GradReduce`]:
//!    - `AllReduce` (DDP, ZeRO-0/1, accumulating under `no_sync`): every rank accumulates
//!      its gradients locally (first stored, then `acc + g`). After the last micro-step,
//!      one message per parameter (DDP's gradient buckets are not modelled): every rank's
//!      gradient is divided by `dp` (one f32 division, DDP's `div_(world_size)`), and the
//!      ranks' buffers are summed by [`Backend::all_reduce`] (the profile's algorithm and
//!      wire) into the reduced gradient.
//!    - `ReduceScatter` (ZeRO-2 / FSDP, synchronising after every micro-step; with
//!      `ReduceScatterAtStep`, `no_sync`, once after the last micro-step on the ranks'
//!      locally accumulated gradients, first stored then `acc + g`): every rank's
//!      gradients are divided by the predivide factor `f` ([`predivide`]), packed rank-major
//!      as FSDP2 packs its reduce-scatter buffer (block c holds shard c of every parameter
//!      in parameter order; shard c of a parameter is rows `c·⌈rows/dp⌉ ..` of its dim 0,
//!      zero-padded to that size), summed by [`Backend::all_reduce`] on the packed buffer
//!      (so every element is summed in the order the all-reduce gives its chunk c, the
//!      owning rank's block: under the ring from rank c+1 around to rank c), divided by the
//!      postdivide factor `dp / f`, and accumulated into the gradient shard (first stored,
//!      then `acc + g`). A division by 1 is skipped, as FSDP does.
//!    - HSDP (`ReduceScatter*` with `replicate = R > 1`: a `R × S` mesh, `S = dp / R`, rank
//!      `r·S + s` at (r, s)), as FSDP2's `foreach_reduce` in torch 2.15
//!      (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) does it: the predivide
//!      factor `f` and postdivide factor `dp / f` come from the whole data-parallel size
//!      `S·R` (`_get_gradient_divide_factors` multiplies the shard group's size by the
//!      replicate group's); every rank's gradients are divided by `f` and packed as above
//!      but in `S` blocks (parameters are sharded over the shard group: shard s is rows
//!      `s·⌈rows/S⌉ ..`); each shard group r reduce-scatters its `S` packed buffers
//!      ([`Backend::all_reduce`] over its ranks in group order, block s summed in chunk s's
//!      order); then, for every shard s, the replicate group's `R` reduce-scatter outputs
//!      (block s of each group r, in r order) are all-reduced ([`Backend::all_reduce`] over
//!      `R` ranks on the block's length: the ring's chunks of that buffer), and the result
//!      divided by `dp / f` and accumulated as above. Every replica ends with the same shard,
//!      so one copy is kept.
//!
//!      Which division torch applies depends on the reduce dtype: for a float16 reduce
//!      (`overflow_risk`) it is this pre/post pair with `ReduceOp.SUM`; for float32 or
//!      bfloat16 with no custom factor, `ReduceOp.AVG` on both collectives (NCCL's average,
//!      a premultiplication by `1/n`); with `set_force_sum_reduction_for_comms`, `SUM` and a
//!      postdivision by `dp`. When every group size is a power of two all three scale by
//!      powers of two, which commutes with rounding (no overflow or subnormal results), so
//!      they give the same bits; with another group size they differ and only the pre/post
//!      form is modelled.
//!
//! After the last micro-step the optimizer updates every parameter from the reduced
//! gradient. A sharded update applies the same elementwise operations to each shard, so
//! updating whole parameters gives the same bits. Then every rank's parameter copy is
//! refreshed (the all-gather, a copy).
//!
//! Mutants: `missing-grad-reduce` skips the collective and its divisions (DDP: rank 0's
//! gradient is the result; ZeRO-2 / FSDP: shard c takes rank c's own rows),
//! `bf16-grad-reduce` runs it on a bf16 wire ([`Backend::all_reduce_bf16`]), `stale-params`
//! skips the refresh of the last rank's copy, which then keeps the initial parameters.
//! Tensor faults and the tied-weights drift do not apply (`tp = 1`, validated).

use super::{load, sized, Bufs, Plan};
use crate::exec::trace::Trace;
use crate::ops::activations::ActReal;
use crate::ops::backend::Backend;
use crate::ops::layers::accumulate;
use crate::ops::optim::step;
use crate::ops::real::Real;
use crate::scenario::ir::{At, CheckTensor, GradReduce};
use crate::scenario::mutant::{Mutant, TpFaults};

/// The data-parallel buffers of one computation, sized on first use and reused.
#[derive(Debug, Default)]
pub(super) struct DpBufs<R> {
    /// Every rank's own parameter copy, activations and gradients.
    ranks: Vec<Bufs<R>>,
    /// The collective's inputs, rank-major.
    parts: Vec<R>,
    /// The collective's result (the packed buffer of a reduce-scatter; the loss).
    out: Vec<R>,
    /// Per parameter: this micro-step's reduce-scattered gradient.
    red: Vec<Vec<R>>,
    /// An activation's rank blocks, concatenated.
    cat: Vec<R>,
    /// The ranks' losses of this micro-step.
    losses: Vec<R>,
    /// HSDP: one shard's reduce-scatter outputs of the `R` replicate ranks, rank-major.
    rep_parts: Vec<R>,
    /// HSDP: the all-reduced shards, block s for shard s (the packed layout of one rank
    /// group's reduce-scatter output).
    rep_out: Vec<R>,
}

/// FSDP's gradient predivide factor (`_get_gradient_predivide_factor`): starting from 1,
/// doubled while `dp % f == 0` and `dp / f > f`; 2 for `dp = 4`, 4 for `dp = 8`. The
/// postdivide factor is `dp / f`.
pub(crate) fn predivide(dp: usize) -> f64 {
    let mut f = 1usize;
    while dp.is_multiple_of(f) && dp as f64 / f as f64 > f as f64 {
        f *= 2;
    }
    f as f64
}

impl Plan {
    /// The sharded computation of a graph with `dp > 1` (module doc).
    pub(super) fn compute_dp<B: Backend>(
        &self,
        be: &mut B,
        init: &[Vec<f32>],
        mutant: Option<Mutant>,
        bf: &mut Bufs<B::R>,
        trace: &mut Trace,
    ) where
        B::R: ActReal,
    {
        let g = &self.graph;
        let dp = self.ranks.len();
        let lr = B::R::from_f64(self.lr);
        let micro_steps = g.train.micro_steps;
        let scale = if g.loss.divide_by_micro_steps {
            B::R::ONE / B::R::from_f64(micro_steps as f64)
        } else {
            B::R::ONE
        };
        // A reduce-scatter after every micro-step; otherwise local accumulation and one
        // collective after the last.
        let every_micro = g.train.grad_reduce == GradReduce::ReduceScatter;
        let np = g.params.len();
        bf.params.resize_with(np, Vec::new);
        bf.acc.resize_with(np, Vec::new);
        bf.old.resize_with(np, Vec::new);
        bf.opt.resize_with(np, Default::default);
        bf.opt.iter_mut().for_each(|o| o.reset());
        // Taken out of `bf` for the run (a move, no allocation) so that `bf` can be lent whole
        // to the shared step-check recording; put back at the end.
        let mut dbufs = std::mem::take(&mut bf.dp);
        let d = &mut dbufs;
        d.ranks.resize_with(dp, Bufs::default);
        d.red.resize_with(np, Vec::new);
        sized(&mut d.losses, dp);
        for i in (0..np).filter(|&i| self.storage[i] == i) {
            load(&mut bf.params[i], &init[i]);
            let n = bf.params[i].len();
            sized(&mut bf.acc[i], n);
            sized(&mut d.red[i], n);
        }
        for &i in &self.keeps_old {
            let n = bf.params[i].len();
            sized(&mut bf.old[i], n);
        }
        for (rp, rb) in self.ranks.iter().zip(&mut d.ranks) {
            rb.params.resize_with(np, Vec::new);
            rb.pgrad.resize_with(np, Vec::new);
            rb.acc.resize_with(np, Vec::new);
            rb.pset.resize(np, false);
            for i in (0..np).filter(|&i| self.storage[i] == i) {
                load(&mut rb.params[i], &init[i]);
                let n = rb.params[i].len();
                sized(&mut rb.pgrad[i], n);
                sized(&mut rb.acc[i], n);
            }
            let nt = rp.graph.tensors.len();
            rb.acts.resize_with(nt, Vec::new);
            rb.dacts.resize_with(nt, Vec::new);
            rb.dset.resize(nt, false);
            for t in 0..nt {
                sized(&mut rb.acts[t], rp.numel[t]);
                if rp.needs_grad[t] {
                    sized(&mut rb.dacts[t], rp.numel[t]);
                }
            }
        }
        let faults = TpFaults::default();
        for s in 0..g.train.steps {
            for m in 0..micro_steps {
                let gi = s * micro_steps + m;
                let last = m + 1 == micro_steps;
                // Forward and loss, rank by rank.
                for (r, (rp, rb)) in self.ranks.iter().zip(&mut d.ranks).enumerate() {
                    let inputs = &rp.inputs[gi];
                    for (dr, v) in rp.graph.inputs.draws.iter().zip(inputs) {
                        if let Some(t) = dr.tensor {
                            load(&mut rb.acts[t.0], &v.f);
                        }
                    }
                    // The rank's own context (no allocation): torch's kernels, its shards.
                    let cx = rp.step_ctx::<B::R>(true, mutant, false, None);
                    for (li, layer) in rp.graph.layers.iter().enumerate() {
                        rp.forward(
                            be,
                            &cx,
                            li,
                            &layer.op,
                            &rp.sharded[li],
                            faults,
                            false,
                            inputs,
                            rb,
                        );
                    }
                    d.losses[r] = rp.loss(be, &cx, inputs, scale, rb);
                }
                for &c in &self.by_phase[0] {
                    let decl = &g.checks[c];
                    if decl.at == At::Step && !last {
                        continue;
                    }
                    let label = self.label(c, s, m);
                    match decl.tensor {
                        CheckTensor::Loss => {
                            sized(&mut d.out, 1);
                            be.all_reduce(&d.losses, dp, &mut d.out);
                            let mean = d.out[0] / B::R::from_f64(dp as f64);
                            trace.record(c, label, &[mean]);
                        }
                        CheckTensor::Activation(t) => {
                            d.cat.clear();
                            for rb in &d.ranks {
                                d.cat.extend_from_slice(&rb.acts[t.0]);
                            }
                            trace.record(c, label, &d.cat);
                        }
                        _ => {}
                    }
                }
                // Backward, rank by rank, with local accumulation when the collective
                // waits for the step.
                for (rp, rb) in self.ranks.iter().zip(&mut d.ranks) {
                    let inputs = &rp.inputs[gi];
                    rb.dset.iter_mut().for_each(|x| *x = false);
                    rb.pset.iter_mut().for_each(|x| *x = false);
                    rb.dset[rp.graph.loss.input.0] = true;
                    let cx = rp.step_ctx::<B::R>(true, mutant, false, None);
                    for (li, layer) in rp.graph.layers.iter().enumerate().rev() {
                        rp.backward(
                            be,
                            &cx,
                            li,
                            &layer.op,
                            &rp.sharded[li],
                            faults,
                            mutant,
                            false,
                            inputs,
                            rb,
                        );
                    }
                    for i in (0..np).filter(|&i| self.storage[i] == i) {
                        if !rb.pset[i] {
                            rb.pgrad[i].fill(B::R::ZERO);
                        }
                        if !every_micro {
                            accumulate(&mut rb.acc[i], &rb.pgrad[i], m == 0);
                        }
                    }
                }
                // The collective.
                match g.train.grad_reduce {
                    GradReduce::ReduceScatter => {
                        self.reduce_scatter(be, mutant, false, d);
                        for i in (0..np).filter(|&i| self.storage[i] == i) {
                            accumulate(&mut bf.acc[i], &d.red[i], m == 0);
                        }
                    }
                    GradReduce::ReduceScatterAtStep if last => {
                        self.reduce_scatter(be, mutant, true, d);
                        for i in (0..np).filter(|&i| self.storage[i] == i) {
                            accumulate(&mut bf.acc[i], &d.red[i], true);
                        }
                    }
                    GradReduce::AllReduce if last => {
                        self.all_reduce_grads(be, mutant, d, &mut bf.acc);
                    }
                    _ => {}
                }
                for &c in &self.by_phase[1] {
                    let decl = &g.checks[c];
                    if decl.at == At::Step && !last {
                        continue;
                    }
                    // Validated: only step-end parameter gradients under an all-reduce.
                    if let CheckTensor::ParamGrad(p) = decl.tensor {
                        let label = self.label(c, s, m);
                        trace.record(c, label, &bf.acc[self.storage[p.0]]);
                    }
                }
                if !last {
                    continue;
                }
                // Optimizer step on the reduced gradient, then the all-gather.
                for &i in &self.keeps_old {
                    let (old, params) = (&mut bf.old[i], &bf.params[i]);
                    old.copy_from_slice(params);
                }
                let opt = g.train.optimizer;
                let root = be.adam_sqrt();
                for i in (0..np).filter(|&i| self.storage[i] == i) {
                    step(
                        opt,
                        &mut bf.params[i],
                        &bf.acc[i],
                        &mut bf.opt[i],
                        &mut bf.opt_scratch,
                        root,
                    );
                }
                for (r, rb) in d.ranks.iter_mut().enumerate() {
                    if mutant == Some(Mutant::StaleParams) && r + 1 == dp {
                        continue;
                    }
                    for i in (0..np).filter(|&i| self.storage[i] == i) {
                        rb.params[i].copy_from_slice(&bf.params[i]);
                    }
                }
                self.record_step_checks(s, m, lr, bf, trace);
            }
        }
        bf.dp = dbufs;
    }

    /// DDP: every rank's accumulated gradient divided by `dp`, then all-reduced, one message
    /// per parameter, into `dst` (module doc).
    fn all_reduce_grads<B: Backend>(
        &self,
        be: &mut B,
        mutant: Option<Mutant>,
        d: &mut DpBufs<B::R>,
        dst: &mut [Vec<B::R>],
    ) {
        let dp = d.ranks.len();
        let world = B::R::from_f64(dp as f64);
        for i in (0..dst.len()).filter(|&i| self.storage[i] == i) {
            if mutant == Some(Mutant::MissingGradReduce) {
                dst[i].copy_from_slice(&d.ranks[0].acc[i]);
                continue;
            }
            let n = dst[i].len();
            sized(&mut d.parts, dp * n);
            for (part, rb) in d.parts.chunks_exact_mut(n).zip(&d.ranks) {
                for (p, &gr) in part.iter_mut().zip(&rb.acc[i]) {
                    *p = gr / world;
                }
            }
            if mutant == Some(Mutant::Bf16GradReduce) {
                be.all_reduce_bf16(&d.parts, dp, &mut dst[i]);
            } else {
                be.all_reduce(&d.parts, dp, &mut dst[i]);
            }
        }
    }

    /// ZeRO-2 / FSDP: every rank's gradients (this micro-step's, or with `local_acc` its
    /// locally accumulated ones) predivided, reduce-scattered through FSDP2's packed buffer
    /// (HSDP: within each shard group, then all-reduced over each replicate group) and
    /// postdivided into `d.red` (module doc).
    fn reduce_scatter<B: Backend>(
        &self,
        be: &mut B,
        mutant: Option<Mutant>,
        local_acc: bool,
        d: &mut DpBufs<B::R>,
    ) {
        let dp = d.ranks.len();
        // The mesh: `rep` replicate groups of `sh` shard ranks (a 1-D group: rep = 1).
        let rep = self.graph.parallel.replicate.max(1);
        let sh = dp / rep;
        let pre = predivide(dp);
        let post = dp as f64 / pre;
        let (pre_r, post_r) = (B::R::from_f64(pre), B::R::from_f64(post));
        // (shard rows ⌈rows/sh⌉, elements per row) of a parameter.
        let layout = |i: usize| {
            let shape = &self.graph.params[i].shape;
            let rows = shape.first().copied().unwrap_or(1).max(1);
            let inner = shape.iter().skip(1).product::<usize>();
            (rows.div_ceil(sh), inner)
        };
        let stored = |i: &usize| self.storage[*i] == *i;
        let np = self.graph.params.len();
        let block: usize = (0..np)
            .filter(stored)
            .map(|i| {
                let (sr, inner) = layout(i);
                sr * inner
            })
            .sum();
        let len = sh * block;
        if mutant == Some(Mutant::MissingGradReduce) {
            for i in (0..np).filter(stored) {
                let (sr, inner) = layout(i);
                for (e, o) in d.red[i].iter_mut().enumerate() {
                    *o = local(&d.ranks[e / inner / sr], i, local_acc)[e];
                }
            }
            return;
        }
        sized(&mut d.parts, dp * len);
        d.parts.fill(B::R::ZERO);
        for (part, rb) in d.parts.chunks_exact_mut(len).zip(&d.ranks) {
            let mut off = 0;
            for i in (0..np).filter(stored) {
                let (sr, inner) = layout(i);
                for (e, &gr) in local(rb, i, local_acc).iter().enumerate() {
                    let c = e / inner / sr;
                    let v = if pre > 1.0 { gr / pre_r } else { gr };
                    part[c * block + off + e - c * sr * inner] = v;
                }
                off += sr * inner;
            }
        }
        let bf16 = mutant == Some(Mutant::Bf16GradReduce);
        // The reduce-scatter of each shard group (its ranks' packed buffers, group order).
        sized(&mut d.out, rep * len);
        for (parts, out) in d
            .parts
            .chunks_exact(sh * len)
            .zip(d.out.chunks_exact_mut(len))
        {
            if bf16 {
                be.all_reduce_bf16(parts, sh, out);
            } else {
                be.all_reduce(parts, sh, out);
            }
        }
        // HSDP: shard s all-reduced over its replicate group (block s of every group's
        // output, group order).
        let reduced: &[B::R] = if rep > 1 {
            sized(&mut d.rep_parts, rep * block);
            sized(&mut d.rep_out, len);
            for (s, dst) in d.rep_out.chunks_exact_mut(block).enumerate() {
                for (r, part) in d.rep_parts.chunks_exact_mut(block).enumerate() {
                    let at = r * len + s * block;
                    part.copy_from_slice(&d.out[at..at + block]);
                }
                if bf16 {
                    be.all_reduce_bf16(&d.rep_parts, rep, dst);
                } else {
                    be.all_reduce(&d.rep_parts, rep, dst);
                }
            }
            &d.rep_out
        } else {
            &d.out
        };
        let mut off = 0;
        for i in (0..np).filter(stored) {
            let (sr, inner) = layout(i);
            for (e, o) in d.red[i].iter_mut().enumerate() {
                let c = e / inner / sr;
                let v = reduced[c * block + off + e - c * sr * inner];
                *o = if post > 1.0 { v / post_r } else { v };
            }
            off += sr * inner;
        }
    }
}

/// A rank's gradient of parameter `i`: locally accumulated (`acc`) or this micro-step's.
fn local<R>(rb: &Bufs<R>, i: usize, acc: bool) -> &[R] {
    if acc {
        &rb.acc[i]
    } else {
        &rb.pgrad[i]
    }
}

#[cfg(test)]
mod tests {
    use super::predivide;

    /// FSDP1's `_get_gradient_predivide_factor` evaluated by hand: world 2: f = 1 → 2 (2/1 >
    /// 1), then 2/2 = 1 is not > 2; world 4 → 2; world 8: 1 → 2 → 4 (8/2 = 4 > 2), 8/4 = 2 is
    /// not > 4; world 3: 3/1 > 1 → 2, then 3 % 2 ≠ 0; world 6: 2, then 6/2 = 3 > 2 → 4, then
    /// 6 % 4 ≠ 0.
    #[test]
    fn predivide_factors_by_hand() {
        for (dp, f) in [
            (1, 1.0),
            (2, 2.0),
            (3, 2.0),
            (4, 2.0),
            (6, 4.0),
            (8, 4.0),
            (16, 4.0),
        ] {
            assert_eq!(predivide(dp), f, "dp {dp}");
        }
    }
}
