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
//! Above the naive kernel's size ATen's `bmm` goes to MKL (`_baddbmm_mkl_`, a batched sgemm),
//! whose orders are not modelled here: [`naive_bmm`] says which shapes are covered, and
//! `crate::engine::exactness::op_gaps` lists the others.
//!
//! float64 (the truth) runs the same formulas in f64 with the double `f` and `libm`'s exp;
//! the causal mask is the same `−∞` bias.

use crate::ops::real::Real;
use crate::ops::softmax::SoftmaxReal;

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
/// probabilities in `bf`. `lanes` is the softmax's vector width.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_forward<R: SoftmaxReal>(
    q: &[R],
    k: &[R],
    v: &[R],
    sh: AttnShape,
    causal: bool,
    scale: f64,
    lanes: usize,
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
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let qs = &mut bf.qs[bh * s * d..(bh + 1) * s * d];
            let kts = &mut bf.kts[bh * s * d..(bh + 1) * s * d];
            for i in 0..s {
                for t in 0..d {
                    let src = (b * s + i) * w + h * d + t;
                    qs[i * d + t] = q[src] * f;
                    kts[t * s + i] = k[src] * f;
                }
            }
            let a = &mut bf.tmp[bh * s * s..(bh + 1) * s * s];
            for i in 0..s {
                for j in 0..s {
                    let mut acc = R::ZERO;
                    for t in 0..d {
                        acc = acc + qs[i * d + t] * kts[t * s + j];
                    }
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
            let p = &bf.p[bh * s * s..(bh + 1) * s * s];
            for i in 0..s {
                for t in 0..d {
                    let mut acc = R::ZERO;
                    for j in 0..s {
                        acc = acc + p[i * s + j] * v[(b * s + j) * w + h * d + t];
                    }
                    out[(b * s + i) * w + h * d + t] = acc;
                }
            }
        }
    }
}

/// Backward (module doc) from the output gradient `dout` and the forward's buffers in `bf`:
/// writes `dq`, `dk`, `dv` (each `[b, s, h·d]`, overwritten). `threads` is ATen's thread
/// count (the softmax backward's compiled copy).
#[allow(clippy::too_many_arguments)]
pub fn sdpa_backward<R: SoftmaxReal>(
    dout: &[R],
    v: &[R],
    sh: AttnShape,
    scale: f64,
    lanes: usize,
    threads: usize,
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
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let p = &bf.p[bh * s * s..(bh + 1) * s * s];
            let dp = &mut bf.tmp[bh * s * s..(bh + 1) * s * s];
            for i in 0..s {
                for j in 0..s {
                    let mut acc = R::ZERO;
                    for t in 0..d {
                        acc = acc
                            + dout[(b * s + i) * w + h * d + t] * v[(b * s + j) * w + h * d + t];
                    }
                    dp[i * s + j] = acc;
                }
            }
            for j in 0..s {
                for t in 0..d {
                    let mut acc = R::ZERO;
                    for i in 0..s {
                        acc = acc + p[i * s + j] * dout[(b * s + i) * w + h * d + t];
                    }
                    dv[(b * s + j) * w + h * d + t] = acc;
                }
            }
        }
    }
    R::softmax_backward_rows(&bf.tmp, &bf.p, s, &mut bf.tmp2, lanes, threads);
    for b in 0..batch {
        for h in 0..heads {
            let bh = b * heads + h;
            let da = &bf.tmp2[bh * s * s..(bh + 1) * s * s];
            let qs = &bf.qs[bh * s * d..(bh + 1) * s * d];
            let kts = &bf.kts[bh * s * d..(bh + 1) * s * d];
            for i in 0..s {
                for t in 0..d {
                    let mut acc = R::ZERO;
                    for j in 0..s {
                        acc = acc + da[i * s + j] * kts[t * s + j];
                    }
                    dq[(b * s + i) * w + h * d + t] = acc * f;
                }
            }
            for t in 0..d {
                for j in 0..s {
                    let mut acc = R::ZERO;
                    for i in 0..s {
                        acc = acc + qs[i * d + t] * da[i * s + j];
                    }
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
        sdpa_forward(&q, &k, &v, sh, true, 1.0, 8, &mut out, &mut bf);
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
