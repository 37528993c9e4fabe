//! LayerNorm and RMSNorm over the last dimension, forward and backward, and the residual add,
//! in the order of torch's CPU kernels (ATen's AVX2 build, 8 lanes; `-ffp-contract=fast`
//! fusions where measured).
//!
//! LayerNorm follows `aten/src/ATen/native/cpu/layer_norm_kernel.cpp` and
//! `moments_utils.h` (`RowwiseMoments`). The fusions below were chosen by measurement against
//! torch 2.15 (CPU, one thread, `ATEN_CPU_CAPABILITY=avx2`): among the contraction variants of
//! each formula, the one stated here matched torch best. Against the fixture
//! `tests/data/torch_norm.json` (`scripts/norm_torch.py`, test `tests/suite/norm_fixture.rs`, 3 rows
//! each of widths 16, 35, 64, 200, 300) every element of y, dx, dgamma and dbeta is identical
//! at the widths that are multiples of 8 lanes; in all, y 1668/1845, dx 1590/1845,
//! dgamma 505/615, dbeta 615/615. Not modelled yet: the lane reduction of the backward's
//! `ds`/`db` over a ragged tail (width 35: dx 86/105), and one Welford-cascade merge (width
//! 300: two of three row means an ulp off torch's).
//!
//! RMSNorm follows `torch.nn.functional.rms_norm`'s CPU composite and its autograd, op by op,
//! with ATen's reduction orders (see [`rms_norm`] and [`rms_norm_backward`]): bit-exact with
//! torch 2.15 (CPU, float32, eager, `ATEN_CPU_CAPABILITY=avx2`, 1 and 2 threads) on every
//! shape measured.

use crate::ops::real::Real;

/// ATen's `Vectorized<float>::size()` in the AVX2 build.
const LANES: usize = 8;
/// `kChunkSize` of `RowwiseMoments`.
const CHUNK: usize = 16;

fn ceil_log2(n: usize) -> u32 {
    if n <= 1 {
        0
    } else {
        usize::BITS - (n - 1).leading_zeros()
    }
}

/// One lane-vector of Welford moments.
#[derive(Clone, Copy)]
struct Moments<R> {
    m0: usize,
    m1: [R; LANES],
    m2: [R; LANES],
}

impl<R: Real> Moments<R> {
    fn zero() -> Self {
        Self {
            m0: 0,
            m1: [R::ZERO; LANES],
            m2: [R::ZERO; LANES],
        }
    }
    /// `AddMomentsVec(m0_add, m1_add, m2_add, self)`: `n = m0 + m0_add`,
    /// `c = m0_add / n` (as floats), `delta = m1_add - m1`, `m1 = fma(c, delta, m1)`,
    /// `m2 = m2 + fma((delta·delta)·c, m0, m2_add)`.
    fn add(&mut self, o: &Self) {
        let n = self.m0 + o.m0;
        let c = if n == 0 {
            R::ZERO
        } else {
            R::from_f64(o.m0 as f64) / R::from_f64(n as f64)
        };
        let m0 = R::from_f64(self.m0 as f64);
        for l in 0..LANES {
            let delta = o.m1[l] - self.m1[l];
            self.m1[l] = c.fma(delta, self.m1[l]);
            self.m2[l] = self.m2[l] + ((delta * delta) * c).fma(m0, o.m2[l]);
        }
        self.m0 = n;
    }
}

/// Mean and biased variance of one row, ATen's `RowwiseMoments` (AVX2, 8 lanes):
/// - the `n = N / 8` full vectors are taken in chunks of 16 vectors; in a chunk, lane l runs
///   Welford from zero: `delta = x - m1; m1 = fma(delta, 1/(j+1), m1);
///   m2 = fma(delta, x - m1, m2)` (`1/(j+1)` rounded);
/// - each chunk's moments are merged into a cascade stack (`AddMomentsVec`, see
///   [`Moments::add`]): into level 0, then level j-1 into level j while chunk count bit j-1 is
///   0; at the end levels 1.. are merged into level 0 in order;
/// - the `N % 8` tail elements run scalar Welford from zero (`m1 = m1 + delta / k`,
///   `m2 = fma(delta, x - m1, m2)`), then lanes 0..7 are merged into that (scalar
///   `AddMoments` with `n` elements per lane, same formulas);
/// - the variance is `m2 / N`.
pub fn row_moments<R: Real>(x: &[R]) -> (R, R) {
    let big_n = x.len();
    let n = big_n / LANES;
    let chunks = n.div_ceil(CHUNK);
    let depth = ceil_log2(chunks) as usize;
    let mut stk = vec![Moments::<R>::zero(); depth.max(1)];
    for i in 0..chunks {
        let m0 = CHUNK.min(n - i * CHUNK);
        let mut cur = Moments::<R>::zero();
        cur.m0 = m0;
        for j in 0..m0 {
            let c = R::ONE / R::from_f64((j + 1) as f64);
            let base = (i * CHUNK + j) * LANES;
            for l in 0..LANES {
                let xv = x[base + l];
                let delta = xv - cur.m1[l];
                cur.m1[l] = delta.fma(c, cur.m1[l]);
                cur.m2[l] = delta.fma(xv - cur.m1[l], cur.m2[l]);
            }
        }
        stk[0].add(&cur);
        let mut mask = i + 1;
        let mut j = 1;
        while j < depth && mask & 1 == 0 {
            let lower = stk[j - 1];
            stk[j].add(&lower);
            stk[j - 1] = Moments::zero();
            mask >>= 1;
            j += 1;
        }
    }
    for i in 1..depth {
        let upper = stk[i];
        stk[0].add(&upper);
    }
    let (mut m0, mut m1, mut m2) = (0usize, R::ZERO, R::ZERO);
    for &xv in &x[n * LANES..] {
        let delta = xv - m1;
        m0 += 1;
        m1 = m1 + delta / R::from_f64(m0 as f64);
        m2 = delta.fma(xv - m1, m2);
    }
    for l in 0..LANES {
        let nn = m0 + n;
        let c = if nn == 0 {
            R::ZERO
        } else {
            R::from_f64(n as f64) / R::from_f64(nn as f64)
        };
        let delta = stk[0].m1[l] - m1;
        m1 = c.fma(delta, m1);
        m2 = m2 + ((delta * delta) * c).fma(R::from_f64(m0 as f64), stk[0].m2[l]);
        m0 = nn;
    }
    (m1, m2 / R::from_f64(big_n as f64))
}

/// `1 / sqrt(var + eps)` (`eps` rounded to `R`; the square root correctly rounded: for f32 the
/// f64 square root rounded once, which is the correctly rounded f32 square root).
fn rstd<R: Real>(var: R, eps: f64) -> R {
    let s = R::from_f64((var + R::from_f64(eps)).to_f64().sqrt());
    R::ONE / s
}

/// `nn.LayerNorm` forward over rows of width `n`: per row, `(mean, var)` by
/// [`row_moments`], `rstd = 1 / sqrt(var + eps)`, then
/// `y = fma((x - mean) · rstd, gamma, beta)` (gamma 1, beta 0 where absent).
pub fn layer_norm<R: Real>(
    x: &[R],
    gamma: Option<&[R]>,
    beta: Option<&[R]>,
    eps: f64,
    n: usize,
    y: &mut [R],
) {
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let (mean, var) = row_moments(xr);
        let r = rstd(var, eps);
        for (j, (o, &xv)) in yr.iter_mut().zip(xr).enumerate() {
            let g = gamma.map_or(R::ONE, |g| g[j]);
            let b = beta.map_or(R::ZERO, |b| b[j]);
            *o = ((xv - mean) * r).fma(g, b);
        }
    }
}

/// `vec::map*_reduce_all` with `+` over 8 lanes, no fusion of the reduction: for `n < 8` the
/// mapped values summed left to right; else lane l accumulates `f(l), f(8+l), …` left to right
/// (the ragged tail only its first lanes), then the AVX2 butterfly (lane l + lane l+4, then
/// l+2, then l+1).
fn lane_sum<R: Real>(n: usize, f: impl Fn(usize) -> R) -> R {
    if n < LANES {
        let mut acc = f(0);
        for i in 1..n {
            acc = acc + f(i);
        }
        return acc;
    }
    let mut acc = [R::ZERO; LANES];
    for (l, a) in acc.iter_mut().enumerate() {
        *a = f(l);
    }
    let mut d = LANES;
    while d < n {
        for (l, a) in acc.iter_mut().enumerate().take(n - d) {
            *a = *a + f(d + l);
        }
        d += LANES;
    }
    let mut w = LANES;
    while w > 1 {
        let h = w / 2;
        for l in 0..h {
            acc[l] = acc[l] + acc[l + h];
        }
        w = h;
    }
    acc[0]
}

/// `nn.LayerNorm` backward (`LayerNormBackwardKernelImplInternal`, one thread), mean and
/// rstd recomputed as the forward computes them. Per row, in row order:
/// - `dgamma[j] = fma(dy, fma(rstd, x, -rstd·mean), dgamma[j])`, `dbeta[j] = dbeta[j] + dy`
///   (accumulated from zero over the rows, then stored as `0 + acc`);
/// - `ds = Σ (dy·x)·gamma`, `db = Σ dy·gamma` ([`lane_sum`]; without gamma `Σ dy·x`, `Σ dy`);
/// - `b = (((fma(db, mean, -ds)·a)·a)·a)·scale`, `c = fma(-b, mean, -((db·a)·scale))` with
///   `a = rstd`, `scale = 1/N`;
/// - `dx = fma(b, x, (a·dy)·gamma) + c` (without gamma `a·dy`).
///
/// Each output may be skipped with `None`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward<R: Real>(
    x: &[R],
    gamma: Option<&[R]>,
    dy: &[R],
    eps: f64,
    n: usize,
    mut dx: Option<&mut [R]>,
    mut dgamma: Option<&mut [R]>,
    mut dbeta: Option<&mut [R]>,
) {
    if let Some(d) = dgamma.as_deref_mut() {
        d.fill(R::ZERO);
    }
    if let Some(d) = dbeta.as_deref_mut() {
        d.fill(R::ZERO);
    }
    let scale = R::ONE / R::from_f64(n as f64);
    for (i, (xr, dyr)) in x.chunks_exact(n).zip(dy.chunks_exact(n)).enumerate() {
        let (mean, var) = row_moments(xr);
        let a = rstd(var, eps);
        if let Some(dg) = dgamma.as_deref_mut() {
            let b = -a * mean;
            for j in 0..n {
                dg[j] = dyr[j].fma(a.fma(xr[j], b), dg[j]);
            }
        }
        if let Some(db) = dbeta.as_deref_mut() {
            for j in 0..n {
                db[j] = db[j] + dyr[j];
            }
        }
        let Some(dx) = dx.as_deref_mut() else {
            continue;
        };
        let (ds, db) = match gamma {
            Some(g) => (
                lane_sum(n, |j| (dyr[j] * xr[j]) * g[j]),
                lane_sum(n, |j| dyr[j] * g[j]),
            ),
            None => (lane_sum(n, |j| dyr[j] * xr[j]), lane_sum(n, |j| dyr[j])),
        };
        let b = ((((db.fma(mean, -ds)) * a) * a) * a) * scale;
        let c = (-b).fma(mean, -((db * a) * scale));
        let dxr = &mut dx[i * n..(i + 1) * n];
        for j in 0..n {
            let p = match gamma {
                Some(g) => (a * dyr[j]) * g[j],
                None => a * dyr[j],
            };
            dxr[j] = b.fma(xr[j], p) + c;
        }
    }
    for d in [dgamma, dbeta].into_iter().flatten() {
        for v in d.iter_mut() {
            *v = R::ZERO + *v;
        }
    }
}

/// `F.rms_norm(x, [n], weight, eps)` / `nn.RMSNorm(n, eps, elementwise_affine)` forward.
///
/// torch 2.15 on the CPU: `rms_norm_symint` (`aten/src/ATen/native/layer_norm.cpp`) calls
/// `_fused_rms_norm`, which has no CPU kernel and runs the composite `rms_norm_composite`
/// there (same file; the profiler shows `pow`, `mean` as `sum` then `div_`, `add_`,
/// `rsqrt`, `mul`, `mul`). Per row of float32, no upcast:
/// - `s = Σ x·x`: `pow(x, 2)` is `x·x` (`aten/src/ATen/native/cpu/PowKernel.cpp`), summed over
///   the last dim in ATen's inner-reduction order (`cascade_sum`,
///   `aten/src/ATen/native/cpu/SumKernel.cpp`; [`Real::row_sum_by`]);
/// - `ms = s / n`: `mean` is `sum(...).div_(n)` (`mean_out`,
///   `aten/src/ATen/native/ReduceOps.cpp`), a true division, not a multiply by `1/n`;
/// - `r = 1 / sqrt(ms + eps)`: `add_(eps)` with eps as float, one rounding; `rsqrt` is `1 /
///   sqrt` rounded twice (`aten/src/ATen/native/cpu/UnaryOpsKernel.cpp`, and
///   `Vectorized<float>::rsqrt` in `aten/src/ATen/cpu/vec/vec256/vec256_float.h`);
/// - `y = (x · r) · weight` (`y = x · r` without weight).
///
/// f64 runs the same chain with its sums left to right from 0 (the ground truth).
/// Measured bit-exact with torch 2.15 (CPU, float32, eager, `ATEN_CPU_CAPABILITY=avx2`, 1 and
/// 2 threads): every element of y, dx and dweight on 17 shapes (widths 1 to 1000, up to 300
/// rows, 2-D and 3-D, with and without weight, eps 1e-5 and 1e-6) by
/// `scripts/rmsnorm_order_probe.py`; `tests/suite/norm_fixture.rs` (widths 16 to 300) and the
/// conformance probes (docs/conformance.md) hold it.
pub fn rms_norm<R: Real>(x: &[R], weight: Option<&[R]>, eps: f64, n: usize, y: &mut [R]) {
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let r = rms_rstd(xr, eps);
        for (j, (o, &xv)) in yr.iter_mut().zip(xr).enumerate() {
            let t = xv * r;
            *o = weight.map_or(t, |w| t * w[j]);
        }
    }
}

/// `r = 1 / sqrt(Σ x·x / n + eps)` of one row, as [`rms_norm`] states.
fn rms_rstd<R: Real>(xr: &[R], eps: f64) -> R {
    let n = xr.len();
    let ss = R::row_sum_by(n, |j| xr[j] * xr[j]);
    let ms = ss / R::from_f64(n as f64);
    rstd(ms, eps)
}

/// Backward of [`rms_norm`]: torch's autograd of the composite, node by node
/// (`tools/autograd/derivatives.yaml`, `torch/csrc/autograd/FunctionsManual.cpp`), with
/// `r` recomputed per row as the forward computes it and `t = x · r`:
/// - `MulBackward0` of `t · weight`: `g = dy · weight` (`g = dy` without weight);
///   `dweight = (dy · t).sum(0)` (`sum_to`), the rows reduced in ATen's `sum(0)` order
///   ([`Real::column_sums_by`]: `vectorized_outer_sum` in `SumKernel.cpp`);
/// - `MulBackward0` of `x · r`: `a = g · r`; `gr = Σ g·x` over the row in ATen's
///   inner-reduction order ([`Real::row_sum_by`]);
/// - `RsqrtBackward0`: `d1 = (gr · -0.5) · ((r · r) · r)` (`-0.5 * grad * result.pow(3)`,
///   `pow(r, 3)` is `(r·r)·r`);
/// - `AddBackward1` passes `d1` on; `MeanBackward1`: `dm = d1 / n` (`expand`, then `div`);
/// - `PowBackward0`: `dp = dm · (x · 2)` (`grad * (2 * x.pow(1))`, the doubling exact);
/// - the two gradients of `x` reach its gradient buffer one after the other (the autograd
///   engine runs `MulBackward0` before the `RsqrtBackward0 … PowBackward0` chain): `dx = a +
///   dp`; with `accumulate` (x already holds the gradient `old` of a consumer whose backward
///   ran earlier, e.g. a residual add), `dx = (old + a) + dp`, as the engine's `InputBuffer`
///   adds each arriving gradient.
///
/// `rstd` is scratch (one value per row, grown once, then reused). Each output may be
/// skipped with `None`. Measured bit-exact with torch as [`rms_norm`] says.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_backward<R: Real>(
    x: &[R],
    weight: Option<&[R]>,
    dy: &[R],
    eps: f64,
    n: usize,
    dx: Option<&mut [R]>,
    dweight: Option<&mut [R]>,
    accumulate: bool,
    rstd: &mut Vec<R>,
) {
    let rows = x.len() / n;
    if rstd.len() < rows {
        rstd.resize(rows, R::ZERO);
    }
    let rs = &mut rstd[..rows];
    for (r, xr) in rs.iter_mut().zip(x.chunks_exact(n)) {
        *r = rms_rstd(xr, eps);
    }
    let rs = &*rs;
    if let Some(dw) = dweight {
        R::column_sums_by(rows, |i, j| dy[i * n + j] * (x[i * n + j] * rs[i]), dw);
    }
    let Some(dx) = dx else {
        return;
    };
    let nr = R::from_f64(n as f64);
    let half = R::from_f64(-0.5);
    let two = R::from_f64(2.0);
    for (i, ((xr, dyr), dxr)) in x
        .chunks_exact(n)
        .zip(dy.chunks_exact(n))
        .zip(dx.chunks_exact_mut(n))
        .enumerate()
    {
        let r = rs[i];
        let g = |j: usize| weight.map_or(dyr[j], |w| dyr[j] * w[j]);
        let gr = R::row_sum_by(n, |j| g(j) * xr[j]);
        let d1 = (gr * half) * ((r * r) * r);
        let dm = d1 / nr;
        for (j, o) in dxr.iter_mut().enumerate() {
            let a = g(j) * r;
            let dp = dm * (xr[j] * two);
            *o = if accumulate { (*o + a) + dp } else { a + dp };
        }
    }
}

/// Megatron sequence-parallel norm backward: `x`, `dy` and `dx` hold all token rows (rows of
/// width `n`), rank r owns rows `shards[r]`. `dx` is the row-wise backward (rows are
/// independent: the same bits as unsharded); the weight (and bias) gradients are each rank's
/// partial over its own rows ([`layer_norm_backward`] / [`rms_norm_backward`] on its block), then
/// summed over ranks by the backend's all-reduce (Megatron all-reduces the sequence-parallel
/// norm weights' gradients over tp). `accumulate` and `scratch` are [`rms_norm_backward`]'s
/// (a layer norm's `dx` is always written whole).
#[allow(clippy::too_many_arguments)]
pub fn sequence_parallel_norm_backward<B: crate::ops::backend::Backend>(
    be: &mut B,
    kind: crate::scenario::ir::NormKind,
    x: &[B::R],
    weight: Option<&[B::R]>,
    dy: &[B::R],
    eps: f64,
    n: usize,
    shards: &[std::ops::Range<usize>],
    dx: Option<&mut [B::R]>,
    dweight: Option<&mut [B::R]>,
    dbias: Option<&mut [B::R]>,
    accumulate: bool,
    scratch: &mut Vec<B::R>,
) {
    use crate::scenario::ir::NormKind;
    let layer = kind == NormKind::LayerNorm;
    match kind {
        NormKind::LayerNorm => layer_norm_backward(x, weight, dy, eps, n, dx, None, None),
        NormKind::RmsNorm => {
            rms_norm_backward(x, weight, dy, eps, n, dx, None, accumulate, scratch)
        }
    }
    let tp = shards.len();
    let want_w = dweight.is_some();
    let want_b = dbias.is_some() && layer;
    let mut pw = vec![B::R::ZERO; tp * n];
    let mut pb = vec![B::R::ZERO; tp * n];
    for (r, rows) in shards.iter().enumerate() {
        let (xs, ds) = (
            &x[rows.start * n..rows.end * n],
            &dy[rows.start * n..rows.end * n],
        );
        let (w_r, b_r) = (&mut pw[r * n..(r + 1) * n], &mut pb[r * n..(r + 1) * n]);
        let w_out = want_w.then_some(w_r);
        if layer {
            layer_norm_backward(xs, weight, ds, eps, n, None, w_out, want_b.then_some(b_r));
        } else {
            rms_norm_backward(xs, weight, ds, eps, n, None, w_out, false, scratch);
        }
    }
    if let Some(d) = dweight {
        be.all_reduce(&pw, tp, d);
    }
    if let (Some(d), true) = (dbias, want_b) {
        be.all_reduce(&pb, tp, d);
    }
}

/// `out = a + b` elementwise (one rounding each).
pub fn residual_add<R: Real>(a: &[R], b: &[R], out: &mut [R]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cascade of [`row_moments`] against a two-pass f64 mean and variance, on rows
    /// long enough for several chunks and stack levels (N = 1000: 125 vectors, 8 chunks,
    /// depth 3) and with a tail: in f64 the Welford cascade is accurate to a few ulp of
    /// values of order 1 (1e-13 absolute is far below any order mistake, which moves the
    /// moments by orders of magnitude more).
    #[test]
    fn moments_match_two_pass() {
        for n in [3usize, 8, 35, 128, 1000, 2100] {
            let x: Vec<f64> = (0..n)
                .map(|i| ((i * 37) % 101) as f64 * 0.03 - 1.2)
                .collect();
            let mean = x.iter().sum::<f64>() / n as f64;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            let (m, v) = row_moments(&x);
            assert!(
                (m - mean).abs() < 1e-13 && (v - var).abs() < 1e-13,
                "{n}: {m} {v} vs {mean} {var}"
            );
        }
    }

    /// `accumulate` adds the norm's two gradients of x to what x holds one at a time,
    /// `(old + a) + dp` (torch's autograd engine), not `old + (a + dp)`: each element against
    /// the chain written out, on `old` of order 1e3 so that the two groupings round apart on
    /// some elements (asserted, so the check can tell them apart).
    #[test]
    fn rms_backward_accumulates_each_gradient_in_turn() {
        let (n, rows, eps) = (5usize, 2usize, 1e-6);
        let x: Vec<f32> = (0..rows * n)
            .map(|i| (i as f32 * 0.37).sin() + 0.1)
            .collect();
        let dy: Vec<f32> = (0..rows * n).map(|i| (i as f32 * 0.71).cos()).collect();
        let w: Vec<f32> = (0..n).map(|i| 0.8 + i as f32 * 0.1).collect();
        let old: Vec<f32> = (0..rows * n).map(|i| 1.0e3 + i as f32 * 0.37).collect();
        let mut got = old.clone();
        let mut scratch = Vec::new();
        rms_norm_backward(
            &x,
            Some(&w),
            &dy,
            eps,
            n,
            Some(&mut got),
            None,
            true,
            &mut scratch,
        );
        let mut apart = 0;
        for i in 0..rows * n {
            let row = i / n;
            let xr = &x[row * n..(row + 1) * n];
            let r = rms_rstd(xr, eps);
            let g = |j: usize| dy[row * n + j] * w[j];
            let a = g(i % n) * r;
            let gr = crate::kernels::torch_ops::row_sum_f32_by(n, |j| g(j) * xr[j]);
            let d1 = (gr * -0.5) * ((r * r) * r);
            let dp = (d1 / n as f32) * (x[i] * 2.0);
            assert_eq!(
                got[i].to_bits(),
                ((old[i] + a) + dp).to_bits(),
                "element {i}"
            );
            apart += usize::from(((old[i] + a) + dp).to_bits() != (old[i] + (a + dp)).to_bits());
        }
        assert!(apart > 0, "no element tells the two groupings apart");
    }

    /// The backward passes against central differences of the forward in f64 (step 1e-6:
    /// truncation error ~1e-12, rounding ~1e-10 relative; 1e-6 absolute is far below the
    /// gradient's order 1, far above both).
    #[test]
    fn backward_matches_finite_differences() {
        let n = 12;
        let rows = 2;
        let x: Vec<f64> = (0..n * rows)
            .map(|i| ((i * 13) % 17) as f64 * 0.2 - 1.0)
            .collect();
        let w: Vec<f64> = (0..n).map(|i| 0.5 + i as f64 * 0.1).collect();
        let b: Vec<f64> = (0..n).map(|i| i as f64 * 0.05).collect();
        let dy: Vec<f64> = (0..n * rows)
            .map(|i| ((i * 7) % 5) as f64 * 0.3 - 0.6)
            .collect();
        let loss = |x: &[f64], w: &[f64], b: &[f64], rms: bool| {
            let mut y = vec![0.0; n * rows];
            if rms {
                rms_norm(x, Some(w), 1e-5, n, &mut y);
            } else {
                layer_norm(x, Some(w), Some(b), 1e-5, n, &mut y);
            }
            y.iter().zip(&dy).map(|(a, b)| a * b).sum::<f64>()
        };
        for rms in [false, true] {
            let mut dx = vec![0.0; n * rows];
            let mut dw = vec![0.0; n];
            let mut db = vec![0.0; n];
            if rms {
                rms_norm_backward(
                    &x,
                    Some(&w),
                    &dy,
                    1e-5,
                    n,
                    Some(&mut dx),
                    Some(&mut dw),
                    false,
                    &mut Vec::new(),
                );
            } else {
                layer_norm_backward(
                    &x,
                    Some(&w),
                    &dy,
                    1e-5,
                    n,
                    Some(&mut dx),
                    Some(&mut dw),
                    Some(&mut db),
                );
            }
            let h = 1e-6;
            for i in 0..n * rows {
                let (mut p, mut m) = (x.clone(), x.clone());
                p[i] += h;
                m[i] -= h;
                let fd = (loss(&p, &w, &b, rms) - loss(&m, &w, &b, rms)) / (2.0 * h);
                assert!(
                    (fd - dx[i]).abs() < 1e-6,
                    "rms {rms} dx[{i}]: {} vs {fd}",
                    dx[i]
                );
            }
            for j in 0..n {
                let (mut p, mut m) = (w.clone(), w.clone());
                p[j] += h;
                m[j] -= h;
                let fd = (loss(&x, &p, &b, rms) - loss(&x, &m, &b, rms)) / (2.0 * h);
                assert!(
                    (fd - dw[j]).abs() < 1e-6,
                    "rms {rms} dw[{j}]: {} vs {fd}",
                    dw[j]
                );
                if !rms {
                    let (mut p, mut m) = (b.clone(), b.clone());
                    p[j] += h;
                    m[j] -= h;
                    let fd = (loss(&x, &w, &p, rms) - loss(&x, &w, &m, rms)) / (2.0 * h);
                    assert!((fd - db[j]).abs() < 1e-6, "db[{j}]: {} vs {fd}", db[j]);
                }
            }
        }
    }
}
