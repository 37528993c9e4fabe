//! Layers: embedding, linear, tanh, cross-entropy, SGD, and their backward passes.

use crate::kernels::isa::Isa;
use crate::ops::backend::Backend;
use crate::ops::real::Real;

/// `out[t] = table[ids[t]]` for t in token order (`nn.Embedding`): a copy, no arithmetic.
/// `table` is `rows × dim`, `out` is `ids.len() × dim`.
pub fn embedding_lookup<R: Real>(table: &[R], dim: usize, ids: &[i64], out: &mut [R]) {
    for (t, &id) in ids.iter().enumerate() {
        let row = id as usize * dim;
        out[t * dim..(t + 1) * dim].copy_from_slice(&table[row..row + dim]);
    }
}

/// Embedding backward (torch's `embedding_dense_backward` on the CPU): `grad` (rows × dim)
/// is zeroed, then for t in token order, unless `ids[t]` is the padding index,
/// `grad[ids[t]] = grad[ids[t]] + dx[t]` elementwise. Each row therefore sums its tokens'
/// gradients left to right, starting from 0.
pub fn embedding_backward<R: Real>(
    dx: &[R],
    dim: usize,
    ids: &[i64],
    padding_idx: Option<i64>,
    grad: &mut [R],
) {
    grad.fill(R::ZERO);
    for (t, &id) in ids.iter().enumerate() {
        if Some(id) == padding_idx {
            continue;
        }
        let row = id as usize * dim;
        for (g, &d) in grad[row..row + dim]
            .iter_mut()
            .zip(&dx[t * dim..(t + 1) * dim])
        {
            *g = *g + d;
        }
    }
}

/// `grad[i] = grad[i] + e[i]` for every element, where `e` is what [`embedding_backward`]
/// writes for these ids: the same values, without a table-sized buffer for `e`. Every row
/// gets `grad + 0.0` in one pass over the table (which turns −0.0 into +0.0, as adding the
/// zero row does, and changes nothing else); then a named row's contribution is summed from
/// +0.0 over its tokens in token order into `row` (`dim` long), and added. That is
/// `grad + e` bit for bit: a sum from +0.0 is never −0.0, so for it (g + 0.0) + e = g + e,
/// NaN operands giving the same quieted NaN. `named` is scratch for the distinct ids
/// (reused: a seed-run allocates nothing here once it has grown).
pub fn embedding_backward_add<R: Real>(
    dx: &[R],
    dim: usize,
    ids: &[i64],
    padding_idx: Option<i64>,
    grad: &mut [R],
    row: &mut Vec<R>,
    named: &mut Vec<usize>,
) {
    embedding_backward_add_on(Isa::detected(), dx, dim, ids, padding_idx, grad, row, named)
}

/// [`embedding_backward_add`] on the compilation `isa` names (the same values on each).
#[allow(clippy::too_many_arguments)]
pub fn embedding_backward_add_on<R: Real>(
    isa: Isa,
    dx: &[R],
    dim: usize,
    ids: &[i64],
    padding_idx: Option<i64>,
    grad: &mut [R],
    row: &mut Vec<R>,
    named: &mut Vec<usize>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe {
                embedding_backward_add_avx512(dx, dim, ids, padding_idx, grad, row, named)
            };
        }
    }
    let _ = isa;
    embedding_backward_add_body(dx, dim, ids, padding_idx, grad, row, named)
}

/// [`embedding_backward_add_body`] compiled for AVX-512F (the same additions, element by
/// element: the same values).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn embedding_backward_add_avx512<R: Real>(
    dx: &[R],
    dim: usize,
    ids: &[i64],
    padding_idx: Option<i64>,
    grad: &mut [R],
    row: &mut Vec<R>,
    named: &mut Vec<usize>,
) {
    embedding_backward_add_body(dx, dim, ids, padding_idx, grad, row, named)
}

/// The order of [`embedding_backward_add`] (its doc).
#[inline(always)]
fn embedding_backward_add_body<R: Real>(
    dx: &[R],
    dim: usize,
    ids: &[i64],
    padding_idx: Option<i64>,
    grad: &mut [R],
    row: &mut Vec<R>,
    named: &mut Vec<usize>,
) {
    named.clear();
    named.extend(
        ids.iter()
            .filter(|&&id| Some(id) != padding_idx)
            .map(|&id| id as usize),
    );
    named.sort_unstable();
    named.dedup();
    // Every row's `+ 0.0` first, in one pass over the table, then the named rows' sums
    // added: for a named row (g + 0.0) + e is g + e bit for bit (g + 0.0 is g except that
    // −0.0 becomes +0.0, and −0.0 + e = +0.0 + e for the e ≠ −0.0 a sum from +0.0 gives; NaN
    // operands give the same quieted NaN either way).
    let width = dim.max(1);
    let rows = grad.len() / width;
    for g in &mut grad[..rows * width] {
        *g = *g + R::ZERO;
    }
    for &r in named.iter().take_while(|&&r| r < rows) {
        row.clear();
        row.resize(dim, R::ZERO);
        for (t, &id) in ids.iter().enumerate() {
            if id as usize == r && Some(id) != padding_idx {
                for (e, &d) in row.iter_mut().zip(&dx[t * dim..(t + 1) * dim]) {
                    *e = *e + d;
                }
            }
        }
        for (g, &e) in grad[r * width..(r + 1) * width].iter_mut().zip(row.iter()) {
            *g = *g + e;
        }
    }
}

/// `y = x · Wᵀ + b` (`F.linear` through torch's `addmm`): without a bias the backend's
/// matmul; with one the backend's [`Backend::linear_bias`] (by default the matmul, then
/// `y[t][o] = acc[t][o] + b[o]` with one rounding). `x` is `m × k`, `w` is `n × k`.
#[allow(clippy::too_many_arguments)]
pub fn linear<B: Backend>(
    be: &mut B,
    x: &[B::R],
    w: &[B::R],
    bias: Option<&[B::R]>,
    y: &mut [B::R],
    m: usize,
    k: usize,
    n: usize,
) {
    match bias {
        Some(b) => be.linear_bias(x, w, b, y, m, k, n),
        None => be.matmul_nt(x, w, y, m, k, n),
    }
}

/// `y[t][o] = y[t][o] + b[o]` for every row t.
pub fn add_row_bias<R: Real>(y: &mut [R], b: &[R], n: usize) {
    for row in y.chunks_exact_mut(n) {
        for (v, &bb) in row.iter_mut().zip(b) {
            *v = *v + bb;
        }
    }
}

/// `x = tanh(x)` elementwise ([`Real::tanh_slice`]: the correctly rounded tanh for f32,
/// `libm` for f64).
pub fn tanh_inplace<R: Real>(x: &mut [R]) {
    R::tanh_slice(x);
}

/// `x = torch.tanh(x)` elementwise, as the backend's profile says torch computes it
/// ([`Backend::tanh`]: MKL's `vmsTanh` or the correctly rounded tanh for f32, `libm` for f64).
pub fn tanh_torch<B: Backend>(be: &mut B, x: &mut [B::R]) {
    be.tanh(x);
}

/// tanh backward ([`Real::tanh_backward`]: torch's `grad·fma(-y, y, 1)` for f32,
/// [`tanh_backward_generic`] for f64).
pub fn tanh_backward<R: Real>(dh: &[R], h: &[R], dpre: &mut [R]) {
    R::tanh_backward(dh, h, dpre);
}

/// tanh backward as written: `dpre = dh · (1 - h·h)`, rounding after the square, the
/// subtraction and the product.
pub fn tanh_backward_generic<R: Real>(dh: &[R], h: &[R], dpre: &mut [R]) {
    for ((d, &g), &y) in dpre.iter_mut().zip(dh).zip(h) {
        *d = g * (R::ONE - y * y);
    }
}

/// Column sums of an `m × n` matrix (bias gradients, `grad.sum(0)`), via
/// [`Real::column_sums`]: torch's CPU reduction order for f32, [`column_sums_generic`] for f64.
pub fn column_sums<R: Real>(x: &[R], n: usize, out: &mut [R]) {
    R::column_sums(x, n, out);
}

/// Column sums in row order: `out[j] = ((x[0][j] + x[1][j]) + …)`, starting from `x[0][j]`.
pub fn column_sums_generic<R: Real>(x: &[R], n: usize, out: &mut [R]) {
    out.copy_from_slice(&x[..n]);
    for row in x.chunks_exact(n).skip(1) {
        for (o, &v) in out.iter_mut().zip(row) {
            *o = *o + v;
        }
    }
}

/// Mean cross-entropy over `labels.len()` rows of `logits` (`n` classes), with its gradient
/// for a backward pass seeded with `scale` (1 for `loss.backward()`, 1/2 for `(loss/2)`), via
/// [`Real::cross_entropy`]: torch's CPU kernels bit for bit for f32
/// (`fp::torch_ops::log_softmax_cross_entropy_f32_isa`, in the backend's torch kernel build),
/// [`cross_entropy_generic`] for f64.
pub fn cross_entropy<B: Backend>(
    be: &mut B,
    logits: &[B::R],
    labels: &[i64],
    n: usize,
    scale: B::R,
    dlogits: &mut [B::R],
) -> B::R {
    be.cross_entropy(logits, labels, n, scale, dlogits)
}

/// Cross-entropy in the textbook order (the f64 ground truth uses it).
///
/// Forward, per row t (`log_softmax` then `nll_loss`): `m = max_v x[v]`;
/// `e[v] = exp(x[v] - m)`; `s = Σ_v e[v]` summed left to right from 0; the loss term is
/// `-((x[label] - m) - ln(s))`. The loss is `(Σ_t term_t) / T`, summed in token order and
/// divided once.
///
/// Backward: `w = scale / T` (one rounding), and
/// `dlogits[t][v] = (e[v] / s)·w - [v == label_t]·w`, i.e. softmax·w minus the one-hot
/// weight, each operation rounded (the softmax reuses the forward exponentials).
///
/// `dlogits` receives the gradient; it also holds the exponentials in between. Returns the
/// loss.
pub fn cross_entropy_generic<R: Real>(
    logits: &[R],
    labels: &[i64],
    n: usize,
    scale: R,
    dlogits: &mut [R],
) -> R {
    cross_entropy_generic_on(Isa::detected(), logits, labels, n, scale, dlogits)
}

/// [`cross_entropy_generic`] on the compilation `isa` names (the same values on each).
pub fn cross_entropy_generic_on<R: Real>(
    isa: Isa,
    logits: &[R],
    labels: &[i64],
    n: usize,
    scale: R,
    dlogits: &mut [R],
) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { cross_entropy_avx512(logits, labels, n, scale, dlogits) };
        }
    }
    let _ = isa;
    cross_entropy_body(logits, labels, n, scale, dlogits)
}

/// [`cross_entropy_body`] compiled for AVX-512F: the same IEEE operations in the same order
/// (Rust neither reassociates nor contracts them), so the same values, with the per-element
/// loops eight lanes wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn cross_entropy_avx512<R: Real>(
    logits: &[R],
    labels: &[i64],
    n: usize,
    scale: R,
    dlogits: &mut [R],
) -> R {
    cross_entropy_body(logits, labels, n, scale, dlogits)
}

/// The order of [`cross_entropy_generic`] (its doc).
#[inline(always)]
fn cross_entropy_body<R: Real>(
    logits: &[R],
    labels: &[i64],
    n: usize,
    scale: R,
    dlogits: &mut [R],
) -> R {
    let t_count = labels.len();
    let tc = R::from_f64(t_count as f64);
    let w = scale / tc;
    let mut total = R::ZERO;
    for (t, &label) in labels.iter().enumerate() {
        let x = &logits[t * n..(t + 1) * n];
        let mut m = x[0];
        for &v in &x[1..] {
            if v > m {
                m = v;
            }
        }
        let ex = &mut dlogits[t * n..(t + 1) * n];
        for (e, &v) in ex.iter_mut().zip(x) {
            *e = v - m;
        }
        // The exponentials are independent: all at once (vectorized for f64), then summed
        // left to right from 0 as before.
        R::exp_slice(ex);
        let mut s = R::ZERO;
        for &e in ex.iter() {
            s = s + e;
        }
        total = total + (-((x[label as usize] - m) - s.ln()));
        for (v, g) in ex.iter_mut().enumerate() {
            let p = (*g / s) * w;
            *g = if v == label as usize { p - w } else { p };
        }
    }
    total / tc
}

/// SGD without momentum as torch applies it on the CPU (`param.add_(grad, alpha=-lr)`, whose
/// vectorized kernel is a fused multiply-add): `p = fma(g, -lr, p)`, one rounding.
pub fn sgd<R: Real>(p: &mut [R], g: &[R], lr: R) {
    R::fma_update(p, g, -lr);
}

/// The SGD update as a test writes its expectation, `p - lr·g`: the product rounded, then
/// the difference rounded.
pub fn sgd_unfused<R: Real>(p: &[R], g: &[R], lr: R, out: &mut [R]) {
    for ((o, &w), &d) in out.iter_mut().zip(p).zip(g) {
        *o = w - lr * d;
    }
}

/// Gradient accumulation: on the first micro-step the gradient is stored as is (torch's
/// `AccumulateGrad` steals the first gradient); afterwards `acc = acc + g`.
pub fn accumulate<R: Real>(acc: &mut [R], g: &[R], first: bool) {
    if first {
        acc.copy_from_slice(g);
    } else {
        for (a, &v) in acc.iter_mut().zip(g) {
            *a = *a + v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::backend::F64Backend;

    #[test]
    fn cross_entropy_matches_closed_form_in_f64() {
        // Two tokens, three classes; reference loss and gradient from the textbook formulas
        // computed here independently with f64::exp/ln. Tolerance 1e-15: both sides are f64
        // evaluations of the same expression in different orders, a few ulps apart at most.
        let logits = [1.0f64, 2.0, 0.5, -1.0, 0.0, 3.0];
        let labels = [1i64, 2];
        let mut d = [0.0f64; 6];
        let loss = cross_entropy(&mut F64Backend::default(), &logits, &labels, 3, 1.0, &mut d);
        let mut expect_loss = 0.0;
        for t in 0..2 {
            let row = &logits[t * 3..t * 3 + 3];
            let z: f64 = row.iter().map(|v| v.exp()).sum();
            expect_loss += -(row[labels[t] as usize].exp() / z).ln();
            for v in 0..3 {
                let p = row[v].exp() / z;
                let g = (p - if v == labels[t] as usize { 1.0 } else { 0.0 }) / 2.0;
                assert!((d[t * 3 + v] - g).abs() < 1e-15, "grad[{t}][{v}]");
            }
        }
        assert!((loss - expect_loss / 2.0).abs() < 1e-15);
    }

    #[test]
    fn embedding_backward_add_is_adding_the_embedding_backward() {
        // Against the definition: embedding_backward into a zeroed table, then grad + e
        // element by element; with signed zeros in grad and dx (−0.0 + +0.0 = +0.0 must
        // happen on rows no id names, and not where a contribution is added), repeated
        // ids, padding and NaN.
        let dim = 3;
        let dx: Vec<f32> = vec![
            1.5,
            -0.0,
            2.0, //
            -0.0,
            -0.0,
            1e-3, //
            0.25,
            f32::NAN,
            -4.0, //
            7.0,
            0.0,
            -0.0,
        ];
        let base: Vec<f32> = vec![
            -0.0,
            1.0,
            -2.0, //
            -0.0,
            -0.0,
            0.0, //
            3.0,
            -0.0,
            f32::INFINITY, //
            -0.0,
            5.0,
            -0.0, //
            0.5,
            -0.0,
            -0.0,
        ];
        for (ids, pad) in [
            (vec![1i64, 3, 1, 0], Some(0i64)),
            (vec![4, 4, 4, 4], None),
            (vec![2, 0, 3, 1], Some(3)),
            (vec![0, 0, 0, 0], Some(0)),
        ] {
            let mut e = vec![0.0f32; base.len()];
            embedding_backward(&dx, dim, &ids, pad, &mut e);
            let want: Vec<u32> = base
                .iter()
                .zip(&e)
                .map(|(&g, &x)| (g + x).to_bits())
                .collect();
            let mut got = base.clone();
            embedding_backward_add(
                &dx,
                dim,
                &ids,
                pad,
                &mut got,
                &mut Vec::new(),
                &mut Vec::new(),
            );
            let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "ids {ids:?} padding {pad:?}");
        }
    }

    #[test]
    fn embedding_backward_skips_padding_and_sums_in_token_order() {
        let dx = [1.0f64, 2.0, 10.0, 20.0, 100.0, 200.0];
        let mut g = [9.0f64; 6];
        embedding_backward(&dx, 2, &[1, 0, 1], Some(0), &mut g);
        assert_eq!(g, [0.0, 0.0, 101.0, 202.0, 0.0, 0.0]);
    }

    #[test]
    fn sgd_is_fused_and_its_unfused_expectation_is_not() {
        // p = 1, g = 1 + 2^-23, lr = 1 - 2^-24 chosen so lr·g is inexact in f32.
        let p = [1.0f32];
        let g = [1.0f32 + f32::EPSILON];
        let lr = 1.0f32 - f32::EPSILON / 2.0;
        let mut fused = p;
        sgd(&mut fused, &g, lr);
        let exact = 1.0f64 - (lr as f64) * (g[0] as f64);
        assert_eq!(fused[0], exact as f32, "one rounding of the exact value");
        let mut unfused = [0.0f32];
        sgd_unfused(&p, &g, lr, &mut unfused);
        assert_eq!(unfused[0], 1.0f32 - lr * g[0]);
        assert_ne!(
            fused[0], unfused[0],
            "the example must separate the two orders"
        );
    }

    #[test]
    fn linear_adds_bias_after_the_matmul() {
        let mut be = F64Backend::default();
        let x = [1.0, 2.0];
        let w = [3.0, 4.0, 5.0, 6.0];
        let mut y = [0.0; 2];
        linear(&mut be, &x, &w, Some(&[0.5, -0.5]), &mut y, 1, 2, 2);
        assert_eq!(y, [11.5, 16.5]);
    }
}
