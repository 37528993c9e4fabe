//! Scaled-dot-product attention, `F.scaled_dot_product_attention(q, k, v, is_causal, scale)`,
//! as torch 2.15's MATH backend computes it on the CPU (`_scaled_dot_product_attention_math`,
//! `aten/src/ATen/native/transformers/attention.cpp`), forward and autograd backward. torch's
//! default CPU backend is the flash kernel (`_scaled_dot_product_flash_attention_cpu`, online
//! softmax in blocks with the `exp_u20` exponential); that is not what is modelled here: a test
//! must select the math backend (`torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`), as
//! `scripts/torch_mirror.py` does.
//!
//! # Layout
//!
//! `q`, `k` and `v` are `[batch, seq, heads·head_dim]` row-major, as the linear layers that
//! produce them write them; the op does the head reshape/transpose
//! `x.view(B, S, H, D).transpose(1, 2)` on each, attends per (batch, head), and writes the
//! output transposed back, `out.transpose(1, 2).reshape(B, S, H·D)`: element
//! `(b, s, h·D + d)` of every buffer is element `(b, h, s, d)` of torch's 4-D tensor (views
//! and copies only, no arithmetic).
//!
//! # Forward, per (batch b, head h); `f = sqrt(scale)` (the double `scale` is
//! `1/sqrt(head_dim)` by default), rounded once to the tensor's type as ATen reads a scalar
//!
//! 1. `qs = q·f` and `kts = kᵀ·f` (`query_ * scaling_factor`, `key.transpose(-2, -1) *
//!    scaling_factor`: one rounded multiplication per element);
//! 2. `a[i][j] = Σ_t qs[i][t]·kts[t][j]` (`at::matmul` → `bmm` over the `B·H` batch): the
//!    sum from 0, `t` ascending, each product rounded, then added (`baddbmm_cpu_kernel`,
//!    `aten/src/ATen/native/LinearAlgebra.cpp`, the naive kernel `bmm_out_or_baddbmm_` takes
//!    while `contraction · rows · cols < 400`; measured unfused against torch);
//! 3. causal: `a[i][j] += m[i][j]` with `m = 0` on and below the diagonal, `−∞` above
//!    (`ones(L, S).tril()` through `convert_boolean_attn_mask`, then `attn.add_(mask)`);
//! 4. `p = softmax(a, −1)` ([`crate::ops::softmax`], all `B·H·S` rows in one call);
//! 5. `o[i][d] = Σ_j p[i][j]·v[j][d]`, the order of step 2.
//!
//! # Backward (autograd of the graph above)
//!
//! `dp[i][j] = Σ_d do[i][d]·v[j][d]` (`grad.bmm(v.transpose)`), `dv[j][d] = Σ_i p[i][j]·do[i][d]`
//! (`p.transpose.bmm(grad)`), `da = softmax_backward(dp, p)` (the mask's add passes the
//! gradient on), `dqs[i][t] = Σ_j da[i][j]·kts[t][j]`, `dkts[t][j] = Σ_i qs[i][t]·da[i][j]`, each
//! in the naive kernel's order (from 0, the contraction index ascending, unfused); then
//! `dq = dqs·f` and `dk[j][t] = dkts[t][j]·f`.
//!
//! # MKL's batched products (`seq · seq · head_dim >= 400`)
//!
//! Above the naive kernel's size ATen's `bmm` calls MKL's batched sgemm (`_baddbmm_mkl_`,
//! `aten/src/ATen/native/mkl/LinearAlgebra.cpp`, for contiguous or transposed batch items).
//! Measured (torch 2.15.0, MKL 2024.2, `torch.set_num_threads(1)`, `ATEN_CPU_CAPABILITY=avx2`,
//! eager, the AMD EPYC of `crate::kernels::mkl_sgemm`, operands as torch allocates them;
//! `scripts/sdpa_bmm_torch.py grid`):
//! each batch element is exactly MKL's one-thread `sgemm` of that element alone
//! ([`crate::kernels::mkl_sgemm::element_at`]), its kernel chosen by the element's shape and
//! by the operands' layout flags, its alignment peels following the element's real addresses
//! (batch element `e` of a packed `[E, r, c]` tensor starts `e·r·c` floats in, so it is off a
//! 16-byte boundary when `r·c` is not a multiple of 4). The layouts are torch's
//! ([`BmmOrder::Mkl1t`]; `H_r` the heads of the rank, `e = b·H_r + h_r`): `[B, S, H_r, D]`
//! tensors transposed to `[B, H_r, S, D]` merge to `[B·H_r, S, D]` as views when `B == 1` or
//! `H_r == 1` and are copied (packed) otherwise; every `bmm` output is a fresh packed tensor.
//! - `q·kᵀ`: views: the forward role (x = q·f, W = k·f), x's row `i` at `h_r·D + i·H_r·D`
//!   (`B == 1`) or `e·S·D + i·D`; copies: grad-input (MKL's `('N', 'N')`), C's row `i` at
//!   `e·S·S + i·S`.
//! - `p·v`: grad-input, C's row at `e·S·D + i·D`.
//! - `grad·vᵀ`: forward, x = the output gradient (its rows as q's above: the gradient is a
//!   view of a packed `[B, S, H_r·D]` tensor).
//! - `pᵀ·grad`: grad-weight, C's row `j` at `e·S·D + j·D`.
//! - `da·(k·f)`: views: grad-input, C's row at `e·S·D + i·D`; copies: forward, x = da's row
//!   at `e·S·S + i·S`.
//! - `(q·f)ᵀ·da`: grad-weight, C's row `t` at `e·D·S + t·S`.
//!
//! At `torch.set_num_threads(2)` ([`BmmOrder::Mkl2t`]) every batch element is still the
//! one-thread order when the call has several, but a call with one batch element
//! (`B·H_r == 1`) is MKL's two-thread `sgemm` of it: the rows of
//! [`crate::kernels::mkl_sgemm::narrow_tail_2t`] in the role's narrow kernel.
//!
//! Checked every element bit for bit (`sdpa_bmm_torch.py grid`, which evaluates the same
//! rules in Python): one thread, 996 products of 170 random sdpa calls (`--seed 1 --shapes
//! 170`: seq 3-64, head_dim 4-64, batch·heads 1-8, causal and not), 642 of 150 calls with seq
//! 3-16 × head_dim 4-16 (`--seed 11`) and 36 of 6 with seq 100-200 (`--seed 12`, several K
//! blocks of the main kernel); two threads, 540 products of 100 calls (`--threads 2 --seed 2
//! --seq 3-24 --dim 4-40 --bh 3`) and 180 of 30 calls of one batch element with split rows
//! (`--seed 4 --seq 5-11 --dim 17-40 --bh 1`); and the fixtures `tests/data/torch_sdpa_bmm_avx2.json`
//! and `..._t2.json` (`tests/suite/sdpa_bmm_fixture.rs`: eleven shapes, head groups of
//! tensor-parallel ranks among them) and the conformance probes. Not modelled, so
//! `crate::engine::exactness::op_gaps` lists them: other thread counts, `seq` or `head_dim` 1
//! (gemv kernels), and the f32 profiles without an order model, which keep the naive order
//! ([`mkl_bmm`] says which shapes run MKL's).
//!
//! float64 (the truth) runs the same formulas in f64 with the double `f` and `libm`'s exp;
//! the causal mask is the same `−∞` bias.

use crate::kernels::revealed::Role;
use crate::ops::real::Real;
use crate::ops::softmax::SoftmaxReal;
use std::ops::Range;

/// The shape of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    /// Batch.
    pub batch: usize,
    /// Sequence length (queries = keys).
    pub seq: usize,
    /// Heads.
    pub heads: usize,
    /// Features per head.
    pub head_dim: usize,
}

impl AttnShape {
    /// Width of a `[batch, seq, heads·head_dim]` buffer's rows.
    pub fn width(self) -> usize {
        self.heads * self.head_dim
    }
    /// Elements of one of q, k, v or the output.
    pub fn numel(self) -> usize {
        self.batch * self.seq * self.width()
    }
    /// Elements of the probabilities `[batch, heads, seq, seq]`.
    pub fn probs(self) -> usize {
        self.batch * self.heads * self.seq * self.seq
    }
    /// Elements of the scaled q (or kᵀ) copies `[batch, heads, seq, head_dim]`.
    pub fn scaled(self) -> usize {
        self.batch * self.heads * self.seq * self.head_dim
    }
}

/// Whether every `bmm` of the forward and backward has `contraction · rows · cols < 400`
/// (each of the six is `seq · seq · head_dim`), so that ATen runs its naive kernel, the order
/// modelled here.
pub fn naive_bmm(sh: AttnShape) -> bool {
    sh.seq * sh.seq * sh.head_dim < 400
}

/// The order of the `bmm`s at or above ATen's naive size (`seq · seq · head_dim >= 400`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmmOrder {
    /// Every product in the naive kernel's order (the float64 truth; and the f32 profiles
    /// that do not model MKL at one thread, which are then not exact above the size).
    Naive,
    /// MKL's batched sgemm at one thread: each batch element is the one-thread `sgemm` model
    /// ([`crate::kernels::mkl_sgemm::element_at`]) at its real offsets (module doc).
    Mkl1t,
    /// At two threads: [`BmmOrder::Mkl1t`], except that a product of one batch element
    /// (`B·H_r == 1`) is the two-thread `sgemm` (its rows of
    /// [`crate::kernels::mkl_sgemm::narrow_tail_2t`] in the narrow kernel).
    Mkl2t,
}

impl BmmOrder {
    /// The order of a profile's f32 products from its matmul order model: MKL's batched
    /// order under `mkl-sgemm-1t` and `mkl-sgemm-2t`, else the naive one.
    pub fn of(model: Option<crate::kernels::mkl_sgemm::OrderModel>) -> Self {
        match model {
            Some(crate::kernels::mkl_sgemm::OrderModel::MklSgemm1t) => Self::Mkl1t,
            Some(crate::kernels::mkl_sgemm::OrderModel::MklSgemm2t) => Self::Mkl2t,
            None => Self::Naive,
        }
    }
}

/// Whether the products of `sh` run in MKL's order under `order`: at or above the naive
/// size, and not a gemv (`seq >= 2`, `head_dim >= 2`: the one-row or one-column products,
/// whose kernels peel by other pointers, are not modelled at offsets).
pub fn mkl_bmm(sh: AttnShape, order: BmmOrder) -> bool {
    order != BmmOrder::Naive && !naive_bmm(sh) && sh.seq >= 2 && sh.head_dim >= 2
}

/// Scalar types with the `bmm` element of [`BmmOrder::Mkl1t`].
pub trait BmmReal: Real {
    /// [`crate::kernels::mkl_sgemm::element_at`] for f32. float64 (the truth, which always
    /// runs [`BmmOrder::Naive`]) has no MKL order: the naive chain, `c = 0; c = c + a·b`.
    #[allow(clippy::too_many_arguments)]
    fn mkl_element(
        role: Role,
        a: impl Fn(usize) -> Self,
        b: impl Fn(usize) -> Self,
        dims: (usize, usize, usize),
        j: usize,
        x_row: usize,
        c_row: usize,
        narrow: bool,
    ) -> Self;
}

impl BmmReal for f32 {
    #[inline]
    fn mkl_element(
        role: Role,
        a: impl Fn(usize) -> f32,
        b: impl Fn(usize) -> f32,
        dims: (usize, usize, usize),
        j: usize,
        x_row: usize,
        c_row: usize,
        narrow: bool,
    ) -> f32 {
        crate::kernels::mkl_sgemm::element_at(role, a, b, dims, j, x_row, c_row, narrow)
    }
}

impl BmmReal for f64 {
    #[inline]
    fn mkl_element(
        _: Role,
        a: impl Fn(usize) -> f64,
        b: impl Fn(usize) -> f64,
        (_, red, _): (usize, usize, usize),
        _: usize,
        _: usize,
        _: usize,
        _: bool,
    ) -> f64 {
        let mut c = 0.0;
        for t in 0..red {
            c += a(t) * b(t);
        }
        c
    }
}

/// How torch lays out one batch element `(b, h)` of the six `bmm`s (module doc, "MKL's
/// batched products"), on the rank holding head `h`: `groups` are the ranks' column ranges
/// of q (whole heads; empty: one rank, every head).
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// The rank's batch index `b·H_r + h_r` of `(b, h)`.
    bh: usize,
    /// The float offset of the forward-role x's row 0 of a q-shaped operand (q·f, or the
    /// output gradient), and the distance between its rows.
    x0: usize,
    xld: usize,
    /// Whether the rank's `[B, H_r, S, D]` views merge to `[B·H_r, S, D]` without a copy
    /// (`B == 1` or `H_r == 1`).
    view: bool,
    /// Whether the rank's products have one batch element (`B·H_r == 1`).
    single: bool,
}

fn layout(sh: AttnShape, groups: &[Range<usize>], b: usize, h: usize) -> Layout {
    let d = sh.head_dim;
    let (hr, h0) = groups
        .iter()
        .find(|r| r.contains(&(h * d)))
        .map_or((sh.heads, 0), |r| (r.len() / d, r.start / d));
    let hl = h - h0;
    let bh = b * hr + hl;
    let view = sh.batch == 1 || hr == 1;
    // B == 1 and several heads: q·f and the output gradient are strided views of the rank's
    // [S, H_r·D] buffer; otherwise each batch element is packed (copied, or H_r == 1).
    let (x0, xld) = if sh.batch == 1 && hr > 1 {
        (hl * d, hr * d)
    } else {
        (bh * sh.seq * d, d)
    };
    Layout {
        bh,
        x0,
        xld,
        view,
        single: sh.batch * hr == 1,
    }
}

/// Whether output row `row` of a product of `dims` on `lay`'s rank runs MKL's narrow kernel
/// at two threads (a product of one batch element is split between the threads as `sgemm`
/// splits it: [`crate::kernels::mkl_sgemm::narrow_tail_2t`]).
#[inline]
fn narrow_2t(
    order: BmmOrder,
    lay: &Layout,
    (rows, red, cols): (usize, usize, usize),
    row: usize,
) -> bool {
    order == BmmOrder::Mkl2t
        && lay.single
        && crate::kernels::mkl_sgemm::narrow_tail_2t(rows, red, cols).is_some_and(|r1| row >= r1)
}

/// One element `Σ_t a(t)·b(t)` of a product of `dims` in the naive kernel's order, or with
/// `Some((role, x_row, c_row, narrow))` MKL's ([`BmmReal::mkl_element`]).
#[inline(always)]
fn bmm_dot<R: BmmReal>(
    mkl: Option<(Role, usize, usize, bool)>,
    a: impl Fn(usize) -> R,
    b: impl Fn(usize) -> R,
    dims: (usize, usize, usize),
    j: usize,
) -> R {
    match mkl {
        Some((role, x_row, c_row, narrow)) => {
            R::mkl_element(role, a, b, dims, j, x_row, c_row, narrow)
        }
        None => {
            let mut acc = R::ZERO;
            for t in 0..dims.1 {
                acc = acc + a(t) * b(t);
            }
            acc
        }
    }
}

/// The buffers one attention layer keeps between its forward and backward.
#[derive(Debug, Default, Clone)]
pub struct AttnBufs<R> {
    /// `q·f`, `[b, h, s, d]`.
    pub qs: Vec<R>,
    /// `kᵀ·f`, `[b, h, d, s]`.
    pub kts: Vec<R>,
    /// The probabilities, `[b, h, s, s]`.
    pub p: Vec<R>,
    /// Scratch: the scores (forward), the probabilities' gradient (backward).
    pub tmp: Vec<R>,
    /// Scratch: the scores' gradient.
    pub tmp2: Vec<R>,
}

fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, R::ZERO);
    }
}

/// The scale factor `f = sqrt(scale)` in `R` (f32: the double rounded once, as ATen reads
/// the scalar).
fn factor<R: Real>(scale: f64) -> R {
    R::from_f64(scale.sqrt())
}

/// Forward (module doc): writes `out` (`[b, s, h·d]`) and keeps `qs`, `kts` and the
/// probabilities in `bf`. `lanes` is the softmax's vector width; `order` and `groups` (the
/// ranks' column ranges of q, empty for one rank) decide the `bmm`s' order at or above the
/// naive size.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_forward<R: SoftmaxReal + BmmReal>(
    q: &[R],
    k: &[R],
    v: &[R],
    sh: AttnShape,
    causal: bool,
    scale: f64,
    lanes: usize,
    order: BmmOrder,
    groups: &[Range<usize>],
    out: &mut [R],
    bf: &mut AttnBufs<R>,
) {
    let AttnShape {
        batch,
        seq: s,
        heads,
        head_dim: d,
    } = sh;
    let w = sh.width();
    assert_eq!(q.len(), sh.numel(), "sdpa: q");
    assert_eq!(k.len(), sh.numel(), "sdpa: k");
    assert_eq!(v.len(), sh.numel(), "sdpa: v");
    assert_eq!(out.len(), sh.numel(), "sdpa: out");
    let f: R = factor(scale);
    sized(&mut bf.qs, sh.scaled());
    sized(&mut bf.kts, sh.scaled());
    sized(&mut bf.p, sh.probs());
    sized(&mut bf.tmp, sh.probs());
    let neg_inf = R::from_f64(f64::NEG_INFINITY);
    let mkl = mkl_bmm(sh, order);
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let lay = layout(sh, groups, b, h);
            let qs = &mut bf.qs[bh * s * d..(bh + 1) * s * d];
            let kts = &mut bf.kts[bh * s * d..(bh + 1) * s * d];
            for i in 0..s {
                for t in 0..d {
                    let src = (b * s + i) * w + h * d + t;
                    qs[i * d + t] = q[src] * f;
                    kts[t * s + i] = k[src] * f;
                }
            }
            let (qs, kts) = (&*qs, &*kts);
            let a = &mut bf.tmp[bh * s * s..(bh + 1) * s * s];
            for i in 0..s {
                // q·kᵀ: x = q·f, W = k·f (a transposed view) when the views merge; else two
                // packed copies, MKL's ('N', 'N').
                let nw = narrow_2t(order, &lay, (s, d, s), i);
                let m = mkl.then(|| {
                    if lay.view {
                        (Role::Forward, lay.x0 + i * lay.xld, 0, nw)
                    } else {
                        (Role::GradInput, 0, lay.bh * s * s + i * s, nw)
                    }
                });
                for j in 0..s {
                    let mut acc = bmm_dot(m, |t| qs[i * d + t], |t| kts[t * s + j], (s, d, s), j);
                    if causal {
                        acc = acc + if j > i { neg_inf } else { R::ZERO };
                    }
                    a[i * s + j] = acc;
                }
            }
        }
    }
    R::softmax_rows(&bf.tmp, s, &mut bf.p, lanes);
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let lay = layout(sh, groups, b, h);
            let p = &bf.p[bh * s * s..(bh + 1) * s * s];
            for i in 0..s {
                let m = mkl.then_some((
                    Role::GradInput,
                    0,
                    lay.bh * s * d + i * d,
                    narrow_2t(order, &lay, (s, s, d), i),
                ));
                for t in 0..d {
                    out[(b * s + i) * w + h * d + t] = bmm_dot(
                        m,
                        |j| p[i * s + j],
                        |j| v[(b * s + j) * w + h * d + t],
                        (s, s, d),
                        t,
                    );
                }
            }
        }
    }
}

/// Backward (module doc) from the output gradient `dout` and the forward's buffers in `bf`:
/// writes `dq`, `dk`, `dv` (each `[b, s, h·d]`, overwritten). `threads` is ATen's thread
/// count (the softmax backward's compiled copy); `order` and `groups` as in [`sdpa_forward`].
#[allow(clippy::too_many_arguments)]
pub fn sdpa_backward<R: SoftmaxReal + BmmReal>(
    dout: &[R],
    v: &[R],
    sh: AttnShape,
    scale: f64,
    lanes: usize,
    threads: usize,
    order: BmmOrder,
    groups: &[Range<usize>],
    dq: &mut [R],
    dk: &mut [R],
    dv: &mut [R],
    bf: &mut AttnBufs<R>,
) {
    let AttnShape {
        batch,
        seq: s,
        heads,
        head_dim: d,
    } = sh;
    let w = sh.width();
    let f: R = factor(scale);
    sized(&mut bf.tmp, sh.probs());
    sized(&mut bf.tmp2, sh.probs());
    let mkl = mkl_bmm(sh, order);
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let lay = layout(sh, groups, b, h);
            let p = &bf.p[bh * s * s..(bh + 1) * s * s];
            let dp = &mut bf.tmp[bh * s * s..(bh + 1) * s * s];
            let (go, vv) = (
                |i: usize, t: usize| dout[(b * s + i) * w + h * d + t],
                |j: usize, t: usize| v[(b * s + j) * w + h * d + t],
            );
            for i in 0..s {
                // grad·vᵀ: x = the output gradient, W = v (a transposed view).
                let m = mkl.then_some((
                    Role::Forward,
                    lay.x0 + i * lay.xld,
                    0,
                    narrow_2t(order, &lay, (s, d, s), i),
                ));
                for j in 0..s {
                    dp[i * s + j] = bmm_dot(m, |t| go(i, t), |t| vv(j, t), (s, d, s), j);
                }
            }
            for j in 0..s {
                // pᵀ·grad: pᵀ a transposed view, MKL's ('N', 'T').
                let m = mkl.then_some((
                    Role::GradWeight,
                    0,
                    lay.bh * s * d + j * d,
                    narrow_2t(order, &lay, (s, s, d), j),
                ));
                for t in 0..d {
                    dv[(b * s + j) * w + h * d + t] =
                        bmm_dot(m, |i| p[i * s + j], |i| go(i, t), (s, s, d), t);
                }
            }
        }
    }
    R::softmax_backward_rows(&bf.tmp, &bf.p, s, &mut bf.tmp2, lanes, threads);
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let lay = layout(sh, groups, b, h);
            let da = &bf.tmp2[bh * s * s..(bh + 1) * s * s];
            let qs = &bf.qs[bh * s * d..(bh + 1) * s * d];
            let kts = &bf.kts[bh * s * d..(bh + 1) * s * d];
            for i in 0..s {
                // da·(k·f): k·f's view transposed back is packed rows when the views merge
                // (MKL's ('N', 'N')); else the packed copy transposed (the forward role).
                let nw = narrow_2t(order, &lay, (s, s, d), i);
                let m = mkl.then(|| {
                    if lay.view {
                        (Role::GradInput, 0, lay.bh * s * d + i * d, nw)
                    } else {
                        (Role::Forward, lay.bh * s * s + i * s, 0, nw)
                    }
                });
                for t in 0..d {
                    let acc = bmm_dot(m, |j| da[i * s + j], |j| kts[t * s + j], (s, s, d), t);
                    dq[(b * s + i) * w + h * d + t] = acc * f;
                }
            }
            for t in 0..d {
                // (q·f)ᵀ·da: a transposed view, MKL's ('N', 'T').
                let m = mkl.then_some((
                    Role::GradWeight,
                    0,
                    lay.bh * d * s + t * s,
                    narrow_2t(order, &lay, (d, s, s), t),
                ));
                for j in 0..s {
                    let acc = bmm_dot(m, |i| qs[i * d + t], |i| da[i * s + j], (d, s, s), j);
                    dk[(b * s + j) * w + h * d + t] = acc * f;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One head, two positions, head_dim 1, scale 1: the probabilities are the softmax of
    /// q·k (exact in f64 up to exp's rounding), and with causal masking the first row
    /// attends to itself only.
    #[test]
    fn tiny_case_by_hand() {
        let sh = AttnShape {
            batch: 1,
            seq: 2,
            heads: 1,
            head_dim: 1,
        };
        let (q, k, v) = ([1.0f64, 2.0], [0.5f64, -1.0], [3.0f64, 5.0]);
        let mut out = [0.0f64; 2];
        let mut bf = AttnBufs::default();
        sdpa_forward(
            &q,
            &k,
            &v,
            sh,
            true,
            1.0,
            8,
            BmmOrder::Naive,
            &[],
            &mut out,
            &mut bf,
        );
        assert_eq!(out[0], 3.0);
        // row 1: scores 2·0.5 = 1 and 2·(−1) = −2; p0 = 1/(1 + e^-3)
        let p0 = 1.0 / (1.0 + libm::exp(-3.0));
        assert!((out[1] - (p0 * 3.0 + (1.0 - p0) * 5.0)).abs() < 1e-15);
        // backward of out.sum(): dv = column sums of p; dq of row 0 is 0 (one key)
        let (mut dq, mut dk, mut dv) = ([9.0f64; 2], [9.0f64; 2], [9.0f64; 2]);
        sdpa_backward(
            &[1.0, 1.0],
            &v,
            sh,
            1.0,
            8,
            1,
            BmmOrder::Naive,
            &[],
            &mut dq,
            &mut dk,
            &mut dv,
            &mut bf,
        );
        assert_eq!(dq[0], 0.0);
        assert!((dv[0] - (1.0 + p0)).abs() < 1e-15 && (dv[1] - (1.0 - p0)).abs() < 1e-15);
        // d out1 / d q1 = p0 (1 − p0) (v0 − v1) (k0 − k1)
        let want = p0 * (1.0 - p0) * (3.0 - 5.0) * 1.5;
        assert!((dq[1] - want).abs() < 1e-15, "{} vs {want}", dq[1]);
    }
}
