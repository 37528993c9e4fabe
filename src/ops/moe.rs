//! A mixture-of-experts layer (`op = "moe"`), its backward, and expert parallelism.
//!
//! # The computation (the torch formulation `scripts/torch_mirror.py` runs)
//!
//! On `x` viewed `[T, H]` (every leading dim is a token), with `E` experts, `k` of them per
//! token, expert width `F`:
//!
//! 1. `logits = F.linear(x, Wr)` (`[T, E]`, the router, no bias: the backend's `x·Wrᵀ`);
//! 2. `probs = F.softmax(logits, -1)` ([`crate::ops::softmax`], ATen's kernel);
//! 3. `w, idx = torch.topk(probs, k)`: per token the `k` largest probabilities, larger first;
//!    among equal values the lower expert index first (a stable order: torch's CPU topk does
//!    not promise an order among equal values, so a tie is where a torch run may differ), a
//!    NaN counts as larger than every number;
//! 4. with `norm_topk`: `w = w / w.sum(-1, keepdim=True)` (the sum in ATen's inner-reduction
//!    order, [`Real::row_sum_by`]; one division per weight), as Mixtral and MaxText do;
//! 5. `out = zeros`; for every expert `e` in ascending order, its tokens `tok` (ascending,
//!    `torch.where(idx == e)`) gathered into `xe = x[tok]` (`[M_e, H]`, a fresh tensor):
//!    `a = xe·W1ᵀ`, `h = act(a)` (torch's elementwise loop over the `[M_e, F]` tensor),
//!    gated: `h = act(a) * (xe·W3ᵀ)` (one rounding); `ye = h·W2ᵀ`; then
//!    `out.index_add_(0, tok, ye * w[tok, slot])`: each product rounded, then added to the
//!    token's running sum (from +0). So every output element is
//!    `((0 + w_a·y_a) + w_b·y_b) + …` over the token's experts **in ascending expert index**,
//!    each product and each addition rounded once.
//!
//! # The einsum combine (`combine = "einsum"`, MaxText's `dense_matmul`)
//!
//! Step 5's combine as one contraction over the experts, `out = einsum("teh,te->th", Y, W)`:
//! `Y` every expert's output `[T, E, H]` (rows of the experts a token did not choose are zero),
//! `W` the weights `[T, E]` (zero there); per token a `[H, E]·[E, 1]` product ([`MoeCombine`]).
//! torch computes it with `bmm`; under a profile that mirrors torch's batched products and
//! below ATen's naive size (`H·E < 400`) that is `c = 0; c = c + fl(w_e·y_e)` over the experts
//! in ascending order, the elementwise combine's bits; its backward gives the weights
//! `Σ_h fl(y·g)` in `h` order from +0 and the expert outputs `fl(w·g)`. Otherwise (the
//! profiles that mirror no torch build, and torch's MKL order above the size, a listed gap)
//! the three products are the profile's matmul ([`Backend::matmul`]), whose passes round both
//! operands: under `tpu-bf16` the expert outputs and the weights are rounded to bf16, as a TPU
//! does at JAX's default precision. Expert parallelism, the routing and the experts are as
//! above; the reference computation may combine otherwise (`reference_combine`).
//!
//! # Backward (torch's autograd of that formulation)
//!
//! - `gy = g[tok] * w[tok, slot]` per element; the weight's gradient
//!   `gw[tok, slot] = Σ_h g·ye` (the rounded products summed by ATen's sum over the last
//!   dim, [`Real::row_sum_by`]; `MulBackward0`'s `sum_to_size`);
//! - the expert: `dh = gy·W2`, `dW2 = gyᵀ·h`; gated: `d_act = dh * up`, `d_up = dh * act(a)`;
//!   `da` by the activation's backward; `dW1 = daᵀ·xe`, `dxe = da·W1` (gated: `dW3 = d_upᵀ·xe`
//!   and `dxe = d_up·W3 + da·W1`, the two contributions in autograd's arrival order, a single
//!   commutative addition);
//! - the input's gradient: autograd accumulates the experts' `IndexBackward` contributions in
//!   the order their nodes run, **descending expert index** (later nodes first), each a dense
//!   tensor of zeros with the expert's rows: per token `((+0 + dxe_b) + dxe_a)` for experts
//!   `b > a`, then the router's contribution is added last (`… + dlogits·Wr`);
//! - the router: with `norm_topk`, `DivBackward0` gives `gw / s` to `p` first and
//!   `Σ_j (−gw_j)·((p_j / s) / s)` (ATen's sum order) to `s`, whose `SumBackward` adds it to
//!   every `p_j` second; topk's backward scatters the `k` gradients into zeros `[T, E]` (the
//!   unchosen experts get exactly 0: top-k indices have no gradient); softmax's backward;
//!   `dWr = dlogitsᵀ·x`, `dx += dlogits·Wr`.
//!
//! An expert that no token chose gets a zero gradient here, where torch leaves its `.grad`
//! `None` and its optimizer skips it: the same parameters under SGD without weight decay, not
//! under Adam or with weight decay (its step count and decay differ).
//!
//! # float64
//!
//! The same formulas with the float64 backend and kernels (sums left to right); the truth
//! routes by its own top-k of its own probabilities, so where fp32 and float64 choose
//! different experts for a token the two computations differ by a whole expert's output.
//!
//! # Expert parallelism (`expert_parallel = N`, the sharded computation)
//!
//! The tokens are split over the `N` ranks in contiguous blocks (the shard rule's ranges of
//! `T`), and expert `e` lives on rank `e / (E/N)`. Each rank runs the router on its own block
//! (its own `[T_r, H] · Wrᵀ`, softmax, top-k: a block's matmul may round differently from
//! the whole batch's, and then the rank may choose other experts than the reference). The
//! dispatch all-to-all sends each token's row to its experts' ranks; expert `e`'s rank
//! stacks the rows it receives in source-rank order, each rank's in token order, which is
//! the global token order, so the expert runs on the reference's `[M_e, H]` rows. The
//! combine all-to-all returns `ye` to the token's rank. Both all-to-alls (and, backward, the
//! gradients `gy` sent to the expert ranks and `dxe` sent back) move a row that crosses
//! ranks in the profile's wire dtype: on a bf16 wire the row is rounded to bf16
//! ([`Backend::wire_round`]); a row whose expert lives on its own rank does not travel. The
//! combine then runs on the token's rank in the unsharded order above (ascending expert
//! index, each `w·ye` rounded, from +0), with the returned, wire-rounded `ye`. The router's
//! weight gradient is each rank's `dlogits_rᵀ·x_r`, all-reduced over the `N` ranks in the
//! profile's collective order ([`Backend::all_reduce`]).

use std::ops::Range;

use crate::ops::activations::{
    gelu, gelu_backward, gelu_tanh, gelu_tanh_backward, relu, relu_backward, silu, silu_backward,
    ActReal, TorchLoop, WHOLE,
};
use crate::ops::backend::Backend;
use crate::ops::layers::{linear, tanh_backward};
use crate::ops::real::Real;
use crate::ops::softmax::SoftmaxReal;
use crate::scenario::ir::{Activation, MoeCombine, Op, ParamId};

/// The shape and options of one moe layer.
#[derive(Debug, Clone, Copy)]
pub struct MoeCfg {
    /// Tokens (the product of the input's leading dims).
    pub tokens: usize,
    /// Hidden width (the input's last dim).
    pub hidden: usize,
    /// Expert width.
    pub ffn: usize,
    /// Experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// The experts' activation.
    pub act: Activation,
    /// Gated experts.
    pub gated: bool,
    /// Renormalised top-k weights.
    pub norm_topk: bool,
    /// The combine as one contraction over the experts (MaxText's dense einsum) instead of
    /// the elementwise weighted sum ([`MoeCombine`]).
    pub combine: MoeCombine,
}

/// A moe layer's weights: the parameter table, its storage map and the router's id.
pub struct MoeWeights<'a, R> {
    /// Every parameter's values, by storage.
    pub params: &'a [Vec<R>],
    /// Parameter id to storage.
    pub storage: &'a [usize],
    /// The router's id (the experts' follow).
    pub router: ParamId,
    /// Gated experts (three weights each).
    pub gated: bool,
}

impl<R> MoeWeights<'_, R> {
    fn router(&self) -> &[R] {
        &self.params[self.storage[self.router.0]]
    }
    fn w(&self, e: usize, j: usize) -> &[R] {
        &self.params[self.storage[Op::moe_param(self.router, self.gated, e, j).0]]
    }
}

/// Saved forward values and scratch of one moe layer, reused across calls.
#[derive(Debug, Default, Clone)]
pub struct MoeBufs<R> {
    logits: Vec<R>,
    probs: Vec<R>,
    /// Chosen experts `[T, k]`, larger probability first.
    pub topi: Vec<u32>,
    topp: Vec<R>,
    topw: Vec<R>,
    sums: Vec<R>,
    count: Vec<usize>,
    off: Vec<usize>,
    fill: Vec<usize>,
    /// Dispatched rows, expert-major: token and slot.
    tok: Vec<u32>,
    slot: Vec<u32>,
    xe: Vec<R>,
    a: Vec<R>,
    act: Vec<R>,
    up: Vec<R>,
    h: Vec<R>,
    ye: Vec<R>,
    /// The einsum combine's operands: per token its experts' outputs `[E, H]` (zero rows for
    /// the experts it did not choose) and its weights `[E]` (zero where not chosen).
    comb_y: Vec<R>,
    comb_w: Vec<R>,
    // backward scratch
    comb_dy: Vec<R>,
    comb_dw: Vec<R>,
    gy: Vec<R>,
    dh: Vec<R>,
    da: Vec<R>,
    dup: Vec<R>,
    dxe: Vec<R>,
    dxe3: Vec<R>,
    gw: Vec<R>,
    dprobs: Vec<R>,
    dlogits: Vec<R>,
    parts: Vec<R>,
    dxr: Vec<R>,
    /// Weight gradients by local index: 0 the router, then `1 + e·per + j`.
    pub dw: Vec<Vec<R>>,
}

fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    v.clear();
    v.resize(n, R::ZERO);
}

/// The rank whose token block holds token `t`.
fn rank_of(ranks: &[Range<usize>], t: usize) -> usize {
    ranks.iter().position(|r| r.contains(&t)).unwrap_or(0)
}

/// Whether `a` ranks before `b` in torch's topk order (larger first, NaN largest).
fn larger<R: Real>(a: R, b: R) -> bool {
    let (an, bn) = (a.partial_cmp(&a).is_none(), b.partial_cmp(&b).is_none());
    match (an, bn) {
        (true, false) => true,
        (_, true) => false,
        _ => a > b,
    }
}

/// The elementwise loop over a `[rows, width]` expert buffer, one torch tensor.
fn torch_loop<B: Backend>(be: &B, width: usize) -> TorchLoop<'static> {
    TorchLoop {
        block: be.elementwise_block(),
        width,
        parts: &WHOLE,
        onednn: be.onednn_isa(),
    }
}

/// `y = act(y)` in place (the executor's kernels; tanh by the profile's tanh).
fn apply_act<B: Backend>(be: &mut B, act: Activation, y: &mut [B::R], width: usize)
where
    B::R: ActReal,
{
    let lp = torch_loop(be, width);
    match act {
        Activation::Tanh => be.tanh(y),
        Activation::Gelu => gelu(y, &lp),
        Activation::GeluTanh => gelu_tanh(y, &lp),
        Activation::Relu => relu(y),
        Activation::Silu => silu(y, &lp),
    }
}

/// The forward (module doc, steps 1 to 5) of `x` (`[T, H]`) into `y`. `ranks` are the token
/// blocks of the expert-parallel ranks (one range `0..T` unsharded); `ep` the number of
/// expert-parallel ranks (1 unsharded). Saves what the backward reads in `bf`.
#[allow(clippy::too_many_arguments)]
pub fn moe_forward<B: Backend>(
    be: &mut B,
    c: &MoeCfg,
    w: &MoeWeights<'_, B::R>,
    x: &[B::R],
    ranks: &[Range<usize>],
    y: &mut [B::R],
    bf: &mut MoeBufs<B::R>,
) where
    B::R: ActReal,
{
    let (t, h, f, ne, k) = (c.tokens, c.hidden, c.ffn, c.experts, c.top_k);
    let zero = B::R::ZERO;
    // 1-2. Router and softmax, each rank on its own token block.
    sized(&mut bf.logits, t * ne);
    for r in ranks {
        linear(
            be,
            &x[r.start * h..r.end * h],
            w.router(),
            None,
            &mut bf.logits[r.start * ne..r.end * ne],
            r.len(),
            h,
            ne,
        );
    }
    sized(&mut bf.probs, t * ne);
    B::R::softmax_rows(&bf.logits, ne, &mut bf.probs, be.elementwise_block() / 2);
    // 3-4. Top-k and the weights.
    bf.topi.clear();
    bf.topi.resize(t * k, 0);
    sized(&mut bf.topp, t * k);
    sized(&mut bf.topw, t * k);
    sized(&mut bf.sums, t);
    for tt in 0..t {
        let p = &bf.probs[tt * ne..(tt + 1) * ne];
        for j in 0..k {
            let mut best = usize::MAX;
            for (e, &v) in p.iter().enumerate() {
                if bf.topi[tt * k..tt * k + j].contains(&(e as u32)) {
                    continue;
                }
                if best == usize::MAX || larger(v, p[best]) {
                    best = e;
                }
            }
            bf.topi[tt * k + j] = best as u32;
            bf.topp[tt * k + j] = p[best];
        }
        let tp = &bf.topp[tt * k..(tt + 1) * k];
        if c.norm_topk {
            let s = B::R::row_sum_by(k, |j| tp[j]);
            bf.sums[tt] = s;
            for (o, &p) in bf.topw[tt * k..(tt + 1) * k].iter_mut().zip(tp) {
                *o = p / s;
            }
        } else {
            bf.topw[tt * k..(tt + 1) * k].copy_from_slice(tp);
        }
    }
    // Dispatch lists: every expert's tokens in ascending order.
    bf.count.clear();
    bf.count.resize(ne, 0);
    for &e in &bf.topi {
        bf.count[e as usize] += 1;
    }
    bf.off.clear();
    let mut acc = 0;
    for e in 0..ne {
        bf.off.push(acc);
        acc += bf.count[e];
    }
    bf.off.push(acc);
    bf.tok.clear();
    bf.tok.resize(t * k, 0);
    bf.slot.clear();
    bf.slot.resize(t * k, 0);
    bf.fill.clear();
    bf.fill.extend_from_slice(&bf.off);
    for tt in 0..t {
        for j in 0..k {
            let e = bf.topi[tt * k + j] as usize;
            bf.tok[bf.fill[e]] = tt as u32;
            bf.slot[bf.fill[e]] = j as u32;
            bf.fill[e] += 1;
        }
    }
    let per_rank = ne / ranks.len().max(1);
    let crosses = |e: usize, tt: usize| ranks.len() > 1 && rank_of(ranks, tt) != e / per_rank;
    // 5. Experts and the combine.
    let n = t * k;
    sized(&mut bf.xe, n * h);
    sized(&mut bf.a, n * f);
    sized(&mut bf.act, n * f);
    sized(&mut bf.up, if c.gated { n * f } else { 0 });
    sized(&mut bf.h, n * f);
    sized(&mut bf.ye, n * h);
    let einsum = c.combine == MoeCombine::Einsum;
    if einsum {
        sized(&mut bf.comb_y, t * ne * h);
        sized(&mut bf.comb_w, t * ne);
    }
    y.fill(zero);
    for e in 0..ne {
        let (lo, hi) = (bf.off[e], bf.off[e + 1]);
        let m = hi - lo;
        if m == 0 {
            continue;
        }
        for i in lo..hi {
            let tt = bf.tok[i] as usize;
            let row = &mut bf.xe[i * h..(i + 1) * h];
            row.copy_from_slice(&x[tt * h..(tt + 1) * h]);
            if crosses(e, tt) {
                be.wire_round(row);
            }
        }
        let xe = &bf.xe[lo * h..hi * h];
        let a = &mut bf.a[lo * f..hi * f];
        linear(be, xe, w.w(e, 0), None, a, m, h, f);
        let act = &mut bf.act[lo * f..hi * f];
        act.copy_from_slice(a);
        apply_act(be, c.act, act, f);
        let hbuf = &mut bf.h[lo * f..hi * f];
        if c.gated {
            let up = &mut bf.up[lo * f..hi * f];
            linear(be, xe, w.w(e, 2), None, up, m, h, f);
            for ((o, &p), &q) in hbuf.iter_mut().zip(act.iter()).zip(up.iter()) {
                *o = p * q;
            }
        } else {
            hbuf.copy_from_slice(act);
        }
        let ye = &mut bf.ye[lo * h..hi * h];
        linear(be, hbuf, w.w(e, 1), None, ye, m, f, h);
        for i in lo..hi {
            let tt = bf.tok[i] as usize;
            let row = &mut bf.ye[i * h..(i + 1) * h];
            if crosses(e, tt) {
                be.wire_round(row);
            }
            let wt = bf.topw[tt * k + bf.slot[i] as usize];
            if einsum {
                let at = (tt * ne + e) * h;
                bf.comb_y[at..at + h].copy_from_slice(row);
                bf.comb_w[tt * ne + e] = wt;
                continue;
            }
            for (o, &v) in y[tt * h..(tt + 1) * h].iter_mut().zip(row.iter()) {
                *o = *o + v * wt;
            }
        }
    }
    if einsum {
        // `einsum("BSEM,BSE->BSM")`, per token over the experts.
        let naive = torch_naive_bmm(be, h, ne);
        for tt in 0..t {
            let (yt, wt) = (
                &bf.comb_y[tt * ne * h..(tt + 1) * ne * h],
                &bf.comb_w[tt * ne..(tt + 1) * ne],
            );
            let out = &mut y[tt * h..(tt + 1) * h];
            if naive {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = (0..ne).fold(zero, |acc, e| acc + wt[e] * yt[e * h + j]);
                }
            } else {
                be.matmul(wt, yt, out, 1, ne, h);
            }
        }
    }
}

/// Whether torch computes a `[rows, red]·[red, 1]` product of the einsum combine (a `bmm`
/// per token) in ATen's naive kernel, `c = 0; c = c + fl(a·b)` in reduction order: under a
/// profile that mirrors torch's batched products ([`Backend::bmm_order`] not the naive
/// default) and below ATen's size, `red · rows · 1 < 400`. Otherwise the contraction is the
/// profile's matmul ([`Backend::matmul`]: its passes round the operands, bf16 under
/// `tpu-bf16`; MKL's sgemm model above the size, where torch's batched order is not
/// modelled and `check` says so).
fn torch_naive_bmm<B: Backend>(be: &B, rows: usize, red: usize) -> bool {
    be.bmm_order() != crate::ops::attention::BmmOrder::Naive && rows * red < 400
}

/// The backward (module doc) from the output gradient `g` (`[T, H]`): the weight gradients
/// into `bf.dw` (local index 0 the router, then `1 + e·per + j`), and, when `dx` is given,
/// the input's gradient into it. `ranks` as for [`moe_forward`].
#[allow(clippy::too_many_arguments)]
pub fn moe_backward<B: Backend>(
    be: &mut B,
    c: &MoeCfg,
    w: &MoeWeights<'_, B::R>,
    x: &[B::R],
    g: &[B::R],
    ranks: &[Range<usize>],
    mut dx: Option<&mut [B::R]>,
    bf: &mut MoeBufs<B::R>,
) where
    B::R: ActReal,
{
    let (t, h, f, ne, k) = (c.tokens, c.hidden, c.ffn, c.experts, c.top_k);
    let zero = B::R::ZERO;
    let per = if c.gated { 3 } else { 2 };
    let nparams = 1 + ne * per;
    if bf.dw.len() != nparams {
        bf.dw.resize_with(nparams, Vec::new);
    }
    let per_rank = ne / ranks.len().max(1);
    let crosses = |e: usize, tt: usize| ranks.len() > 1 && rank_of(ranks, tt) != e / per_rank;
    let n = t * k;
    sized(&mut bf.gy, n * h);
    sized(&mut bf.dh, n * f);
    sized(&mut bf.da, n * f);
    sized(&mut bf.dup, if c.gated { n * f } else { 0 });
    sized(&mut bf.dxe, n * h);
    sized(&mut bf.dxe3, if c.gated { n * h } else { 0 });
    sized(&mut bf.gw, n);
    if let Some(d) = dx.as_deref_mut() {
        d.fill(zero);
    }
    let einsum = c.combine == MoeCombine::Einsum;
    if einsum {
        // The contraction's gradients per token, as `bmm`'s backward computes them: the
        // weights' `Y·g` (`[E, H]·[H, 1]`) and the experts' outputs' `w·gᵀ` (`[E, 1]·[1, H]`,
        // one product each) ([`torch_naive_bmm`] says which kernel).
        sized(&mut bf.comb_dw, t * ne);
        sized(&mut bf.comb_dy, t * ne * h);
        let naive = torch_naive_bmm(be, ne, h);
        for tt in 0..t {
            let gr = &g[tt * h..(tt + 1) * h];
            let (yt, wt) = (
                &bf.comb_y[tt * ne * h..(tt + 1) * ne * h],
                &bf.comb_w[tt * ne..(tt + 1) * ne],
            );
            let (dwt, dyt) = (
                &mut bf.comb_dw[tt * ne..(tt + 1) * ne],
                &mut bf.comb_dy[tt * ne * h..(tt + 1) * ne * h],
            );
            if naive {
                for (e, o) in dwt.iter_mut().enumerate() {
                    *o = (0..h).fold(zero, |acc, j| acc + yt[e * h + j] * gr[j]);
                }
                for (e, row) in dyt.chunks_exact_mut(h).enumerate() {
                    for (o, &v) in row.iter_mut().zip(gr) {
                        *o = wt[e] * v;
                    }
                }
            } else {
                be.matmul(yt, gr, dwt, ne, h, 1);
                be.matmul(wt, gr, dyt, ne, 1, h);
            }
        }
    }
    // Experts in descending order: the order autograd adds their input gradients.
    for e in (0..ne).rev() {
        let (lo, hi) = (bf.off[e], bf.off[e + 1]);
        let m = hi - lo;
        let wi = 1 + e * per;
        sized(&mut bf.dw[wi], f * h);
        sized(&mut bf.dw[wi + 1], h * f);
        if c.gated {
            sized(&mut bf.dw[wi + 2], f * h);
        }
        if m == 0 {
            continue;
        }
        for i in lo..hi {
            let tt = bf.tok[i] as usize;
            let s = bf.slot[i] as usize;
            let wt = bf.topw[tt * k + s];
            let gr = &g[tt * h..(tt + 1) * h];
            let ye = &bf.ye[i * h..(i + 1) * h];
            let row = &mut bf.gy[i * h..(i + 1) * h];
            if einsum {
                bf.gw[tt * k + s] = bf.comb_dw[tt * ne + e];
                let at = (tt * ne + e) * h;
                row.copy_from_slice(&bf.comb_dy[at..at + h]);
            } else {
                bf.gw[tt * k + s] = zero + B::R::row_sum_by(h, |j| gr[j] * ye[j]);
                for (o, &v) in row.iter_mut().zip(gr) {
                    *o = v * wt;
                }
            }
            if crosses(e, tt) {
                be.wire_round(row);
            }
        }
        let gy = &bf.gy[lo * h..hi * h];
        let hb = &bf.h[lo * f..hi * f];
        let xe = &bf.xe[lo * h..hi * h];
        be.matmul_tn(gy, hb, &mut bf.dw[wi + 1], h, m, f);
        let dh = &mut bf.dh[lo * f..hi * f];
        be.matmul(gy, w.w(e, 1), dh, m, h, f);
        let act = &bf.act[lo * f..hi * f];
        let a = &bf.a[lo * f..hi * f];
        let da = &mut bf.da[lo * f..hi * f];
        // The activation's incoming gradient: dh, or gated dh * up (and d_up = dh * act).
        if c.gated {
            let up = &bf.up[lo * f..hi * f];
            let dup = &mut bf.dup[lo * f..hi * f];
            for (((o, q), &d), (&u, &av)) in da
                .iter_mut()
                .zip(dup.iter_mut())
                .zip(dh.iter())
                .zip(up.iter().zip(act))
            {
                *o = d * u;
                *q = d * av;
            }
            dh.copy_from_slice(da);
        }
        let lp = torch_loop(be, f);
        match c.act {
            Activation::Tanh => tanh_backward(dh, act, da),
            Activation::Relu => relu_backward(dh, act, da),
            Activation::Gelu => gelu_backward(dh, a, da, &lp),
            Activation::GeluTanh => gelu_tanh_backward(dh, a, da, &lp),
            Activation::Silu => silu_backward(dh, a, da, &lp),
        }
        be.matmul_tn(da, xe, &mut bf.dw[wi], f, m, h);
        let dxe = &mut bf.dxe[lo * h..hi * h];
        be.matmul(da, w.w(e, 0), dxe, m, f, h);
        if c.gated {
            let dup = &bf.dup[lo * f..hi * f];
            be.matmul_tn(dup, xe, &mut bf.dw[wi + 2], f, m, h);
            let d3 = &mut bf.dxe3[lo * h..hi * h];
            be.matmul(dup, w.w(e, 2), d3, m, f, h);
            // The up projection's contribution arrives first; one addition.
            for (o, &v) in dxe.iter_mut().zip(d3.iter()) {
                *o = v + *o;
            }
        }
        if let Some(d) = dx.as_deref_mut() {
            for i in lo..hi {
                let tt = bf.tok[i] as usize;
                let row = &mut bf.dxe[i * h..(i + 1) * h];
                if crosses(e, tt) {
                    be.wire_round(row);
                }
                for (o, &v) in d[tt * h..(tt + 1) * h].iter_mut().zip(row.iter()) {
                    *o = *o + v;
                }
            }
        }
    }
    // The router: renormalisation, topk and softmax backward.
    sized(&mut bf.dprobs, t * ne);
    for tt in 0..t {
        let gw = &bf.gw[tt * k..(tt + 1) * k];
        let p = &bf.topp[tt * k..(tt + 1) * k];
        for j in 0..k {
            let gp = if c.norm_topk {
                let s = bf.sums[tt];
                let direct = gw[j] / s;
                let gs = B::R::row_sum_by(k, |i| (-gw[i]) * ((p[i] / s) / s));
                direct + gs
            } else {
                gw[j]
            };
            bf.dprobs[tt * ne + bf.topi[tt * k + j] as usize] = gp;
        }
    }
    sized(&mut bf.dlogits, t * ne);
    B::R::softmax_backward_rows(
        &bf.dprobs,
        &bf.probs,
        ne,
        &mut bf.dlogits,
        be.elementwise_block() / 2,
        be.aten_threads(),
    );
    // The router's weight gradient: each rank's, all-reduced over the ranks.
    let nr = ranks.len();
    sized(&mut bf.dw[0], ne * h);
    if nr == 1 {
        be.matmul_tn(&bf.dlogits, x, &mut bf.dw[0], ne, t, h);
    } else {
        sized(&mut bf.parts, nr * ne * h);
        for (ri, r) in ranks.iter().enumerate() {
            be.matmul_tn(
                &bf.dlogits[r.start * ne..r.end * ne],
                &x[r.start * h..r.end * h],
                &mut bf.parts[ri * ne * h..(ri + 1) * ne * h],
                ne,
                r.len(),
                h,
            );
        }
        be.all_reduce(&bf.parts, nr, &mut bf.dw[0]);
    }
    if let Some(d) = dx {
        sized(&mut bf.dxr, t * h);
        for r in ranks {
            be.matmul(
                &bf.dlogits[r.start * ne..r.end * ne],
                w.router(),
                &mut bf.dxr[r.start * h..r.end * h],
                r.len(),
                ne,
                h,
            );
        }
        for (o, &v) in d.iter_mut().zip(&bf.dxr) {
            *o = *o + v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topk_order_prefers_larger_then_nan() {
        assert!(larger(2.0f32, 1.0));
        assert!(!larger(1.0f32, 1.0));
        assert!(larger(f32::NAN, 1e30));
        assert!(!larger(1e30, f32::NAN));
    }
}
