//! Ring attention (context parallelism) for the `sdpa` op: torch 2.15's
//! `_templated_ring_attention` and `_templated_ring_attention_backward`
//! (`torch/distributed/tensor/experimental/_context_parallel/_attention.py`), on `cp` ranks
//! simulated in one process: without load balancing (`_cp_options.enable_load_balance =
//! False`: rank r holds the contiguous chunk r of the sequence), or with it (causal only:
//! the sequence in `2·cp` chunks, rank r holding chunks r and `2·cp − 1 − r`, concatenated).
//!
//! # Layout
//!
//! `q`, `k`, `v`, the output and the gradients are the whole `[batch, seq, heads·head_dim]`
//! buffers of [`crate::ops::attention`]; rank r owns the query, key and value rows
//! `r·c .. (r+1)·c` of every batch (`c = seq / cp`), as `context_parallel` shards
//! `[b, h, s, d]` tensors on dim 2. The ranks' results are written into the same rows
//! (`context_parallel_unshard`).
//!
//! With load balancing the steps differ (the `if`/`elif`/`else` of torch's loop, never a
//! skip): step 0 the rank's two chunks against themselves with the causal mask on their local
//! (concatenated) positions; a step `0 < i ≤ r` all of the rank's queries against the first
//! chunk of the block; a step `i > r` the rank's second chunk only against the whole block,
//! merged into the second half of the output and lse (`partial`); backward accordingly: dq of
//! the second half only at `i > r`, the block's first chunk's dk/dv only at `0 < i ≤ r`.
//!
//! # Forward, rank r, per (batch, head) (every operation below is elementwise or per row, so
//! the order of the (batch, head) loops does not change a bit)
//!
//! Step `i = 0 .. cp-1` holds key/value block `j = (r − i) mod cp` (the rotater sends the block
//! to rank r+1 each step: rank r receives from r−1). `_is_causal_behavior`: not causal → the
//! whole block; causal → step 0 with the causal mask (the diagonal block), `j < r` the whole
//! block, `j > r` skipped. The block op (the mirror's, as `scripts/ring_attention_torch.py`
//! runs it in torch on the CPU; torch's own ring runs only on the GPU kernels):
//! 1. `out_b` = the math-path sdpa of the block ([`crate::ops::attention`]'s order: `q·f`,
//!    `kᵀ·f`, naive `bmm` sums from 0 in contraction order, the additive `−∞` mask, ATen's
//!    softmax over the block's `c` keys, the naive `p·v`);
//! 2. `lse_b[a] = m + ln(Σ_c exp(s[a][c] − m))` over the block's (masked) scores, `m` the
//!    row's max (`torch.logsumexp`'s formula: `amax`, then `exp(x − m)`, summed, `log`, `+ m`),
//!    here with SLEEF's `expf_u10` and `logf_u10` ports and the sum from 0 left to right
//!    (torch's is MKL's `vmsExp`/`vmsLn` and ATen's reduction: a gap,
//!    `crate::engine::exactness::op_gaps`).
//!
//! Merge (`_SDPAMerger`, f32, in step order): the first block's `(out_b, lse_b)` is taken
//! as is; every later one: `out = out − sigmoid(lse_b − lse)·(out − out_b)` (four tensors:
//! `lse_b − lse`, its sigmoid, `out − out_b`, the broadcast product, then the difference, each
//! rounded) and `lse = lse − logsigmoid(lse − lse_b)`. `sigmoid` is ATen's CPU kernel:
//! the first `n − n mod e` elements of the `[b, h, c, 1]` tensor (`n = b·h·c`, `e` the
//! elementwise block, 16 on AVX2) `1 / ((0 − x).exp() + 1)` with SLEEF's exp, the rest
//! `1 / (1 + exp(−x))` with glibc's `expf`. `logsigmoid` is `min(x, 0) − log1p(exp(−|x|))`
//! with SLEEF's exp and a correctly rounded `log1p` (ATen's is SLEEF's `log1pf_u10`: a gap).
//!
//! # Backward, rank r (`_templated_ring_attention_backward`)
//!
//! The same steps and blocks; each non-skipped block runs the block backward from the merged
//! `out` and `lse` of rank r's queries, the output gradient `g` (flash attention's backward,
//! written as the mirror's torch script writes it): `s` as in the forward (with the mask),
//! `p = exp(s − lse)` (SLEEF), `dv_b[c][d] = Σ_a p[a][c]·g[a][d]`, `dp[a][c] = Σ_d g[a][d]·v[c][d]`,
//! `D[a] = Σ_d g[a][d]·out[a][d]`, `ds = p·(dp − D)`, `dq_b[a][t] = (Σ_c ds[a][c]·(k·f)[c][t])·f`,
//! `dk_b[c][t] = (Σ_a ds[a][c]·(q·f)[a][t])·f`: every sum from 0 in its index order, each
//! product rounded, then added.
//!
//! Accumulation in f32 as torch's: `dq = ((0 + dq_0) + dq_1) + …` in step order on rank r;
//! a key/value block's gradient travels with it: `dk_j = ((0 + dk from rank j at step 0) + dk
//! from rank j+1 at step 1) + …`, ranks `j, j+1, …, j+cp−1 (mod cp)`, a skipped step adding
//! a zero tensor (`x + 0`).

use crate::ops::attention::AttnShape;
use crate::ops::real::Real;
use crate::ops::softmax::SoftmaxReal;

/// The transcendentals of the ring's block op and merge in `R`.
pub trait RingReal: SoftmaxReal {
    /// ATen's vectorized `exp` (f32: SLEEF's `expf_u10` port; f64: `libm`).
    fn vexp(self) -> Self;
    /// The scalar `std::exp` of an elementwise kernel's remainder (f32: glibc 2.36's `expf`).
    fn sexp(self) -> Self;
    /// `log` (f32: SLEEF's `logf_u10` port, modelling MKL's `vmsLn`: a gap).
    fn vlog(self) -> Self;
    /// `log1p` (f32: the correctly rounded value, modelling SLEEF's `log1pf_u10`: a gap).
    fn log1p(self) -> Self;
}

impl RingReal for f32 {
    #[inline]
    fn vexp(self) -> f32 {
        crate::kernels::torch_ops::exp_f32(self)
    }
    #[inline]
    fn sexp(self) -> f32 {
        crate::kernels::torch_ops::glibc_expf(self)
    }
    #[inline]
    fn vlog(self) -> f32 {
        crate::kernels::torch_ops::log_f32(self)
    }
    #[inline]
    fn log1p(self) -> f32 {
        libm::log1p(self as f64) as f32
    }
}

impl RingReal for f64 {
    #[inline]
    fn vexp(self) -> f64 {
        libm::exp(self)
    }
    #[inline]
    fn sexp(self) -> f64 {
        libm::exp(self)
    }
    #[inline]
    fn vlog(self) -> f64 {
        libm::log(self)
    }
    #[inline]
    fn log1p(self) -> f64 {
        libm::log1p(self)
    }
}

/// What block `j` contributes to rank `r` at step `i` (`_is_causal_behavior` without load
/// balancing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// The whole block.
    Full,
    /// The diagonal block with the causal mask.
    Causal,
    /// Nothing (a future block under the causal mask).
    Skip,
}

/// `_is_causal_behavior(rank, world_size, i, is_causal)` with `enable_load_balance = False`.
pub fn behaviour(rank: usize, cp: usize, i: usize, causal: bool) -> Block {
    if !causal {
        return Block::Full;
    }
    if i == 0 {
        return Block::Causal;
    }
    if (rank + cp - i) % cp < rank {
        Block::Full
    } else {
        Block::Skip
    }
}

/// The ring's per-rank state and scratch (sized on first use, reused).
#[derive(Debug, Default, Clone)]
pub struct RingBufs<R> {
    /// The merged log-sum-exp of every query row, `[b, h, s]` (each rank its rows).
    lse: Vec<R>,
    /// One block's scores / probabilities (`c × c`), its softmax, its gradient scratch.
    s: Vec<R>,
    p: Vec<R>,
    ds: Vec<R>,
    /// One block's output `c × d` and log-sum-exp `c`, the scaled q and k rows.
    ob: Vec<R>,
    lb: Vec<R>,
    qs: Vec<R>,
    ks: Vec<R>,
    /// `D[a]` of the block backward.
    dd: Vec<R>,
    /// One block's dq, dk, dv.
    gq: Vec<R>,
    gk: Vec<R>,
    gv: Vec<R>,
    /// The global rows of the rank and of the block it holds.
    mine: Vec<usize>,
    theirs: Vec<usize>,
}

impl<R> RingBufs<R> {
    /// The merged log-sum-exp of the last [`ring_forward`], `[b, h, s]` (rank r's rows
    /// `r·c..` of every (b, h)), as `_templated_ring_attention` returns it.
    pub fn lse(&self) -> &[R] {
        &self.lse
    }
}

fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, R::ZERO);
    }
}

/// Index of element `(b, s, h, d)` in a `[b, s, h·d]` buffer.
#[inline(always)]
fn at(sh: AttnShape, b: usize, s: usize, h: usize, d: usize) -> usize {
    (b * sh.seq + s) * sh.width() + h * sh.head_dim + d
}

/// Which rows one step's block op reads (global sequence positions, in the rank's local
/// order), whether it is masked, and whether it merges into the second half only.
struct StepRows<'a> {
    q: &'a [usize],
    k: &'a [usize],
    mask: bool,
}

/// The global sequence rows rank `r` holds: chunk r of `cp` (no load balancing), or chunks r
/// and `2·cp − 1 − r` of `2·cp` (load balancing, torch's round-robin layout), in that order.
fn local_rows(r: usize, cp: usize, seq: usize, lb: bool, out: &mut Vec<usize>) {
    out.clear();
    if lb {
        let c = seq / (2 * cp);
        out.extend(r * c..(r + 1) * c);
        out.extend((2 * cp - 1 - r) * c..(2 * cp - r) * c);
    } else {
        let c = seq / cp;
        out.extend(r * c..(r + 1) * c);
    }
}

/// The rows of step `i` on rank `r` (`_templated_ring_attention`'s three cases): `None` when
/// skipped. `mine` / `theirs` are the local rows of rank r and of the block's source
/// `(r − i) mod cp`.
fn step_rows<'a>(
    r: usize,
    cp: usize,
    i: usize,
    causal: bool,
    lb: bool,
    mine: &'a [usize],
    theirs: &'a [usize],
) -> Option<(StepRows<'a>, bool)> {
    if !lb {
        let beh = behaviour(r, cp, i, causal);
        return (beh != Block::Skip).then_some((
            StepRows {
                q: mine,
                k: theirs,
                mask: beh == Block::Causal,
            },
            false,
        ));
    }
    let h = mine.len() / 2;
    Some(if i == 0 {
        (
            StepRows {
                q: mine,
                k: theirs,
                mask: causal,
            },
            false,
        )
    } else if i <= r {
        // The source's first chunk only (all of it precedes both of rank r's).
        (
            StepRows {
                q: mine,
                k: &theirs[..h],
                mask: false,
            },
            false,
        )
    } else {
        // Rank r's second chunk only, against both of the source's; merged into the second
        // half (`partial`).
        (
            StepRows {
                q: &mine[h..],
                k: theirs,
                mask: false,
            },
            true,
        )
    })
}

/// Scores of `rows` for (b, h) into `bf.s` (`q × k`, row-major), with the scaled rows in
/// `bf.qs`, `bf.ks`; the causal bias on local positions when masked.
fn scores<R: RingReal>(
    q: &[R],
    k: &[R],
    sh: AttnShape,
    (b, h): (usize, usize),
    rows: &StepRows<'_>,
    f: R,
    bf: &mut RingBufs<R>,
) {
    let d = sh.head_dim;
    let (nq, nk) = (rows.q.len(), rows.k.len());
    for (a, &gq) in rows.q.iter().enumerate() {
        for t in 0..d {
            bf.qs[a * d + t] = q[at(sh, b, gq, h, t)] * f;
        }
    }
    for (a, &gk) in rows.k.iter().enumerate() {
        for t in 0..d {
            bf.ks[a * d + t] = k[at(sh, b, gk, h, t)] * f;
        }
    }
    let neg_inf = R::from_f64(f64::NEG_INFINITY);
    for a in 0..nq {
        for cc in 0..nk {
            let mut acc = R::ZERO;
            for t in 0..d {
                acc = acc + bf.qs[a * d + t] * bf.ks[cc * d + t];
            }
            if rows.mask {
                acc = acc + if cc > a { neg_inf } else { R::ZERO };
            }
            bf.s[a * nk + cc] = acc;
        }
    }
}

/// ATen's sigmoid of element `idx` of an `n`-element tensor (module doc).
#[inline]
fn sigmoid<R: RingReal>(x: R, idx: usize, n: usize, block: usize) -> R {
    if idx < n - n % block {
        R::ONE / ((R::ZERO - x).vexp() + R::ONE)
    } else {
        R::ONE / (R::ONE + (R::ZERO - x).sexp())
    }
}

/// ATen's logsigmoid (module doc).
#[inline]
fn logsigmoid<R: RingReal>(x: R) -> R {
    let m = if x < R::ZERO { x } else { R::ZERO };
    let ax = if x < R::ZERO { R::ZERO - x } else { x };
    m - (R::ZERO - ax).vexp().log1p()
}

/// Sizes the scratch of blocks of at most `n` rows.
fn size_scratch<R: Real>(bf: &mut RingBufs<R>, n: usize, d: usize) {
    for (buf, len) in [
        (&mut bf.s, n * n),
        (&mut bf.p, n * n),
        (&mut bf.ds, n * n),
        (&mut bf.ob, n * d),
        (&mut bf.lb, n),
        (&mut bf.qs, n * d),
        (&mut bf.ks, n * d),
        (&mut bf.dd, n),
        (&mut bf.gq, n * d),
        (&mut bf.gk, n * d),
        (&mut bf.gv, n * d),
    ] {
        sized(buf, len);
    }
}

/// Ring attention forward (module doc) over `cp` ranks, with torch's round-robin load
/// balancing when `lb`: writes `out` (`[b, s, h·d]`) and keeps the merged log-sum-exp in
/// `bf`. `lanes` is the softmax's vector width, `block` the elementwise kernels' vector block
/// (16 on AVX2, 32 on AVX512).
#[allow(clippy::too_many_arguments)]
pub fn ring_forward<R: RingReal>(
    q: &[R],
    k: &[R],
    v: &[R],
    sh: AttnShape,
    cp: usize,
    causal: bool,
    lb: bool,
    scale: f64,
    lanes: usize,
    block: usize,
    out: &mut [R],
    bf: &mut RingBufs<R>,
) {
    let (s, d, heads) = (sh.seq, sh.head_dim, sh.heads);
    let chunks = if lb { 2 * cp } else { cp };
    assert_eq!(
        s % chunks,
        0,
        "ring attention: seq {s} over {chunks} chunks"
    );
    let f = R::from_f64(scale.sqrt());
    sized(&mut bf.lse, sh.batch * heads * s);
    size_scratch(bf, s / cp, d);
    let (mut mine, mut theirs) = (std::mem::take(&mut bf.mine), std::mem::take(&mut bf.theirs));
    for r in 0..cp {
        local_rows(r, cp, s, lb, &mut mine);
        for i in 0..cp {
            local_rows((r + cp - i) % cp, cp, s, lb, &mut theirs);
            let Some((rows, _)) = step_rows(r, cp, i, causal, lb, &mine, &theirs) else {
                continue;
            };
            let (nq, nk) = (rows.q.len(), rows.k.len());
            // The merge's [b, h, nq, 1] tensors (a partial merge: the second half's).
            let n_lse = sh.batch * heads * nq;
            for b in 0..sh.batch {
                for h in 0..heads {
                    scores(q, k, sh, (b, h), &rows, f, bf);
                    R::softmax_rows(&bf.s[..nq * nk], nk, &mut bf.p[..nq * nk], lanes);
                    for a in 0..nq {
                        for t in 0..d {
                            let mut acc = R::ZERO;
                            for (cc, &gk) in rows.k.iter().enumerate() {
                                acc = acc + bf.p[a * nk + cc] * v[at(sh, b, gk, h, t)];
                            }
                            bf.ob[a * d + t] = acc;
                        }
                        // logsumexp: amax, exp(x − m) summed from 0, log, + m.
                        let row = &bf.s[a * nk..(a + 1) * nk];
                        let mut m = row[0];
                        for &x in &row[1..] {
                            if x > m {
                                m = x;
                            }
                        }
                        let mut sum = R::ZERO;
                        for &x in row {
                            sum = sum + (x - m).vexp();
                        }
                        bf.lb[a] = sum.vlog() + m;
                    }
                    for (a, &gq) in rows.q.iter().enumerate() {
                        let (li, lb_a) = ((b * heads + h) * s + gq, bf.lb[a]);
                        if i == 0 {
                            bf.lse[li] = lb_a;
                            for t in 0..d {
                                out[at(sh, b, gq, h, t)] = bf.ob[a * d + t];
                            }
                            continue;
                        }
                        let lse = bf.lse[li];
                        let idx = (b * heads + h) * nq + a;
                        let sg = sigmoid(lb_a - lse, idx, n_lse, block);
                        for t in 0..d {
                            let o = &mut out[at(sh, b, gq, h, t)];
                            *o = *o - sg * (*o - bf.ob[a * d + t]);
                        }
                        bf.lse[li] = lse - logsigmoid(lse - lb_a);
                    }
                }
            }
        }
    }
    bf.mine = mine;
    bf.theirs = theirs;
}

/// Ring attention backward (module doc) from the output gradient `g`, the inputs and the
/// merged `out` (and the log-sum-exp [`ring_forward`] kept in `bf`): writes `dq`, `dk`, `dv`
/// (each `[b, s, h·d]`, overwritten).
#[allow(clippy::too_many_arguments)]
pub fn ring_backward<R: RingReal>(
    g: &[R],
    q: &[R],
    k: &[R],
    v: &[R],
    out: &[R],
    sh: AttnShape,
    cp: usize,
    causal: bool,
    lb: bool,
    scale: f64,
    dq: &mut [R],
    dk: &mut [R],
    dv: &mut [R],
    bf: &mut RingBufs<R>,
) {
    let (s, d, heads) = (sh.seq, sh.head_dim, sh.heads);
    let f = R::from_f64(scale.sqrt());
    size_scratch(bf, s / cp, d);
    // dq accumulates on its rank from 0; dk and dv of block j from 0 at rank j's step 0.
    for x in [&mut *dq, &mut *dk, &mut *dv] {
        x.fill(R::ZERO);
    }
    let (mut mine, mut theirs) = (std::mem::take(&mut bf.mine), std::mem::take(&mut bf.theirs));
    // Step by step in ring order, so that each block's dk/dv gets its contributions in the
    // order of the ranks it visits: at step i rank r holds block (r − i).
    for i in 0..cp {
        for r in 0..cp {
            local_rows(r, cp, s, lb, &mut mine);
            local_rows((r + cp - i) % cp, cp, s, lb, &mut theirs);
            let Some((rows, _)) = step_rows(r, cp, i, causal, lb, &mine, &theirs) else {
                // `grad + zeros`: x + 0 (turns −0 into +0, as torch's add does), on rank r's
                // dq rows and on the dk/dv of the block rank r holds.
                for b in 0..sh.batch {
                    for h in 0..heads {
                        for (&gq, &gk) in mine.iter().zip(theirs.iter()) {
                            for t in 0..d {
                                let e = at(sh, b, gq, h, t);
                                dq[e] = dq[e] + R::ZERO;
                                let e = at(sh, b, gk, h, t);
                                dk[e] = dk[e] + R::ZERO;
                                dv[e] = dv[e] + R::ZERO;
                            }
                        }
                    }
                }
                continue;
            };
            let (nq, nk) = (rows.q.len(), rows.k.len());
            for b in 0..sh.batch {
                for h in 0..heads {
                    scores(q, k, sh, (b, h), &rows, f, bf);
                    for (a, &gq) in rows.q.iter().enumerate() {
                        let l = bf.lse[(b * heads + h) * s + gq];
                        for cc in 0..nk {
                            let x = &mut bf.s[a * nk + cc];
                            *x = (*x - l).vexp();
                        }
                        let mut acc = R::ZERO;
                        for t in 0..d {
                            let e = at(sh, b, gq, h, t);
                            acc = acc + g[e] * out[e];
                        }
                        bf.dd[a] = acc;
                    }
                    let p = &bf.s;
                    for cc in 0..nk {
                        for t in 0..d {
                            let mut acc = R::ZERO;
                            for (a, &gq) in rows.q.iter().enumerate() {
                                acc = acc + p[a * nk + cc] * g[at(sh, b, gq, h, t)];
                            }
                            bf.gv[cc * d + t] = acc;
                        }
                    }
                    for (a, &gq) in rows.q.iter().enumerate() {
                        for (cc, &gk) in rows.k.iter().enumerate() {
                            let mut acc = R::ZERO;
                            for t in 0..d {
                                acc = acc + g[at(sh, b, gq, h, t)] * v[at(sh, b, gk, h, t)];
                            }
                            bf.ds[a * nk + cc] = p[a * nk + cc] * (acc - bf.dd[a]);
                        }
                    }
                    for a in 0..nq {
                        for t in 0..d {
                            let mut acc = R::ZERO;
                            for cc in 0..nk {
                                acc = acc + bf.ds[a * nk + cc] * bf.ks[cc * d + t];
                            }
                            bf.gq[a * d + t] = acc * f;
                        }
                    }
                    for cc in 0..nk {
                        for t in 0..d {
                            let mut acc = R::ZERO;
                            for a in 0..nq {
                                acc = acc + bf.ds[a * nk + cc] * bf.qs[a * d + t];
                            }
                            bf.gk[cc * d + t] = acc * f;
                        }
                    }
                    for (a, &gq) in rows.q.iter().enumerate() {
                        for t in 0..d {
                            let e = at(sh, b, gq, h, t);
                            dq[e] = dq[e] + bf.gq[a * d + t];
                        }
                    }
                    for (cc, &gk) in rows.k.iter().enumerate() {
                        for t in 0..d {
                            let e = at(sh, b, gk, h, t);
                            dk[e] = dk[e] + bf.gk[cc * d + t];
                            dv[e] = dv[e] + bf.gv[cc * d + t];
                        }
                    }
                }
            }
        }
    }
    bf.mine = mine;
    bf.theirs = theirs;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torch's own `test_is_causal_behavior` without load balancing: at world size 2, rank 0
    /// attends causally to its own block and skips rank 1's; rank 1 takes rank 0's block
    /// whole; not causal, every block whole.
    #[test]
    fn causal_behaviour_is_torchs() {
        assert_eq!(behaviour(0, 4, 0, false), Block::Full);
        assert_eq!(behaviour(0, 2, 0, true), Block::Causal);
        assert_eq!(behaviour(0, 2, 1, true), Block::Skip);
        assert_eq!(behaviour(1, 2, 0, true), Block::Causal);
        assert_eq!(behaviour(1, 2, 1, true), Block::Full);
        // cp 4, rank 2: blocks 2 (causal), 1, 0 whole, then block 3 skipped.
        let got: Vec<Block> = (0..4).map(|i| behaviour(2, 4, i, true)).collect();
        assert_eq!(got, [Block::Causal, Block::Full, Block::Full, Block::Skip]);
    }
}
