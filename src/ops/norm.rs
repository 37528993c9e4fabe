//! LayerNorm and RMSNorm over the last dimension, forward and backward, and the residual add,
//! in the order of torch's CPU kernels (ATen's AVX2 build, 8 lanes; `-ffp-contract=fast`
//! fusions where measured).
//!
//! LayerNorm follows torch 2.15's `aten/src/ATen/native/cpu/layer_norm_kernel.cpp`
//! (`LayerNormKernelImplInternal`, `LayerNormSecondPass`, `layer_norm_backward_frame`,
//! `LayerNormBackwardKernelImplInternal`) and `moments_utils.h` (`RowwiseMoments`, as
//! installed with torch 2.15). Where the source leaves a fusion to the compiler, the variant
//! stated in each function's doc is the one measured against torch 2.15 (CPU, eager,
//! `ATEN_CPU_CAPABILITY=avx2`): the Welford tail and the full-vector `ds`/`db` sums unfused,
//! the scalar moment merge and the ragged tail of `ds`/`db` fused. Measured bit-exact on
//! every element of y, dx, dweight and dbias: `tests/data/torch_layernorm.json`
//! (`scripts/layernorm_torch.py`: 16 widths from 1 to 64, and 256, 257, 300 and 1000, affine and not,
//! inputs of mean 0.5 and 100, 1 to 11 rows, at 1, 2, 4 and 8 threads) and
//! `tests/data/torch_norm.json` (`scripts/norm_torch.py`), both read by
//! `tests/suite/norm_fixture.rs`; and the conformance probes (docs/conformance.md).
//! The thread count is the backend's ([`crate::ops::backend::Backend::aten_threads`]): it
//! changes only the weight and bias gradients ([`layer_norm_backward_threads`]).
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
    /// `AddMomentsVec(o.m0, o.m1, o.m2, self)` of torch 2.15's `moments_utils.h`:
    /// `n = m0 + o.m0`, `c = o.m0 / n` (as floats, 0 when `n = 0`), and per lane
    /// `delta = o.m1 - m1`, `m1 = m1 + c·delta`, `m2 = fma(delta·m0, c·delta, m2 + o.m2)`
    /// (every product and sum rounded, the one FMA explicit in the source).
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
            let m2_sum = self.m2[l] + o.m2[l];
            let c_delta = c * delta;
            self.m1[l] = self.m1[l] + c_delta;
            self.m2[l] = (delta * m0).fma(c_delta, m2_sum);
        }
        self.m0 = n;
    }
}

/// Mean and biased variance of one row, ATen's `RowwiseMoments` (torch 2.15
/// `aten/src/ATen/native/cpu/moments_utils.h`, AVX2: 8 lanes):
/// - the `n = N / 8` full vectors are taken in chunks of 16 vectors; in a chunk, lane l runs
///   Welford from zero (`UpdateMomentsVec`): `delta = x - m1; m1 = fma(1/(j+1), delta, m1);
///   m2 = fma(delta, x - m1, m2)` (`1/(j+1)` rounded);
/// - each chunk's moments are merged into a cascade stack of `depth = CeilLog2(chunks)`
///   levels (ATen's `CeilLog2` is 1 for up to 2 chunks): into level 0 ([`Moments::add`]),
///   then level j-1 into level j (and level j-1 zeroed) while bit j-1 of the chunk count is
///   0; at the end levels 1.. are merged into level 0 in order;
/// - the `N % 8` tail elements run scalar Welford from zero, unfused (measured):
///   `delta = x - m1; m1 = m1 + delta / k; m2 = m2 + delta · (x - m1)`;
/// - lanes 0..7 are then merged into that in lane order by the scalar `AddMoments` with
///   `n` elements per lane, fused (measured): `c = n / (m0 + n)`, `delta = m1_l - m1`,
///   `m1 = fma(c, delta, m1)`, `m2 = m2 + fma((delta·delta)·c, m0, m2_l)`;
/// - the variance is `m2 / N`.
///
/// The stack is a fixed-size array sized by depth as ATen's (4, 8, 16, 32 or 64 levels):
/// nothing is allocated.
pub fn row_moments<R: Real>(x: &[R]) -> (R, R) {
    let chunks = (x.len() / LANES).div_ceil(CHUNK);
    match aten_ceil_log2(chunks) {
        0..=4 => row_moments_impl::<R, 4>(x),
        5..=8 => row_moments_impl::<R, 8>(x),
        9..=16 => row_moments_impl::<R, 16>(x),
        17..=32 => row_moments_impl::<R, 32>(x),
        _ => row_moments_impl::<R, 64>(x),
    }
}

/// ATen's `utils::CeilLog2`: 1 for `x <= 2`, else `ceil(log2(x))`.
fn aten_ceil_log2(x: usize) -> usize {
    if x <= 2 {
        1
    } else {
        (usize::BITS - (x - 1).leading_zeros()) as usize
    }
}

fn row_moments_impl<R: Real, const D: usize>(x: &[R]) -> (R, R) {
    let big_n = x.len();
    let n = big_n / LANES;
    let chunks = n.div_ceil(CHUNK);
    let depth = aten_ceil_log2(chunks);
    let mut stk = [Moments::<R>::zero(); D];
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
                cur.m1[l] = c.fma(delta, cur.m1[l]);
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
        m2 = m2 + delta * (xv - m1);
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

/// `nn.LayerNorm` forward over rows of width `n` (`LayerNormKernelImplInternal`, then
/// `LayerNormSecondPass`): per row, `(mean, var)` by [`row_moments`],
/// `rstd = 1 / sqrt(var + eps)`, then `y = fma((x + (-mean)) · rstd, gamma, beta)` (the
/// vectorised `map3` with weight and bias, the scalar loop with gamma 1 and beta 0 where
/// either is absent: the same roundings). Rows are independent, so the thread count does
/// not change it.
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

/// `Σ p(j)·q(j)` over `j < n` as ATen's `vec::map2_reduce_all` / `map3_reduce_all` /
/// `reduce_all` with `+` reduce it (AVX2, 8 lanes; `q = 1` for `reduce_all`), the map's last
/// product fused into the reduction only in the ragged tail (measured against torch 2.15):
/// - `n < 8`: the mapped values `round(p·q)` summed left to right;
/// - else lane l starts at `round(p(l)·q(l))` and accumulates the full vectors
///   `acc = acc + round(p(8k+l)·q(8k+l))` left to right; the `n % 8` tail elements update
///   lanes 0.. as `acc = fma(p, q, acc)`; then the AVX2 butterfly `VecReduceAllSIMD` (lane
///   l + lane l+4, then l+2, then l+1).
fn map_reduce_sum<R: Real>(n: usize, pq: impl Fn(usize) -> (R, R)) -> R {
    let prod = |j: usize| {
        let (p, q) = pq(j);
        p * q
    };
    if n < LANES {
        let mut acc = prod(0);
        for i in 1..n {
            acc = acc + prod(i);
        }
        return acc;
    }
    let mut acc = [R::ZERO; LANES];
    for (l, a) in acc.iter_mut().enumerate() {
        *a = prod(l);
    }
    let full = n - n % LANES;
    for d in (LANES..full).step_by(LANES) {
        for (l, a) in acc.iter_mut().enumerate() {
            *a = *a + prod(d + l);
        }
    }
    for (l, a) in acc.iter_mut().enumerate().take(n - full) {
        let (p, q) = pq(full + l);
        *a = p.fma(q, *a);
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

/// `nn.LayerNorm` backward at one thread: [`layer_norm_backward_threads`] with
/// `threads = 1` (no scratch needed).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward<R: Real>(
    x: &[R],
    gamma: Option<&[R]>,
    dy: &[R],
    eps: f64,
    n: usize,
    dx: Option<&mut [R]>,
    dgamma: Option<&mut [R]>,
    dbeta: Option<&mut [R]>,
) {
    layer_norm_backward_threads(x, gamma, dy, eps, n, 1, &mut Vec::new(), dx, dgamma, dbeta);
}

/// `nn.LayerNorm` backward as torch 2.15's `LayerNormBackwardKernelImplInternal` and
/// `layer_norm_backward_frame` (float32, AVX2) compute it with `threads` intra-op threads;
/// mean and rstd recomputed as the forward computes them ([`row_moments`], `rstd`).
///
/// Rows are split as `at::parallel_for(0, M, 1)` splits them under OpenMP: `t = min(threads,
/// M)` threads, thread k taking rows `[k·c, min(M, (k+1)·c))` with `c = ceil(M / t)`. Each
/// thread accumulates its rows, in row order, into its own zeroed weight and bias buffers:
/// - `dgamma_k[j] = fma(dy, fma(rstd, x, -rstd·mean), dgamma_k[j])`,
///   `dbeta_k[j] = dbeta_k[j] + dy`;
///
/// and computes each of its rows' input gradient:
/// - `ds = Σ (dy·x)·gamma`, `db = Σ dy·gamma` ([`map_reduce_sum`]; without gamma `Σ dy·x`
///   and `Σ dy`);
/// - `b = (((fma(db, mean, -ds)·a)·a)·a)·scale`, `c = fma(-b, mean, -((db·a)·scale))` with
///   `a = rstd`, `scale = 1/N`;
/// - `dx = fma(b, x, (a·dy)·gamma) + c` (without gamma `fma(b, x, a·dy) + c`).
///
/// The weight and bias gradients are then the per-thread buffers summed in thread order from
/// zero: `dgamma[j] = ((0 + dgamma_0[j]) + dgamma_1[j]) + …` (a thread with no rows adds +0,
/// which changes nothing after `0 + dgamma_0`, so it is skipped). Thread 0's buffer is the
/// output itself; the others use `scratch` (resized to `2·n` when `threads > 1`, kept for
/// reuse: nothing is allocated once it is large enough). Rows are processed in order here;
/// the thread split changes only the weight and bias gradients.
///
/// Each output may be skipped with `None`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward_threads<R: Real>(
    x: &[R],
    gamma: Option<&[R]>,
    dy: &[R],
    eps: f64,
    n: usize,
    threads: usize,
    scratch: &mut Vec<R>,
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
    let rows = x.len().checked_div(n).unwrap_or(0);
    let t = threads.max(1).min(rows.max(1));
    let per = rows.div_ceil(t).max(1);
    let need_partials = t > 1 && (dgamma.is_some() || dbeta.is_some());
    if need_partials && scratch.len() < 2 * n {
        scratch.resize(2 * n, R::ZERO);
    }
    for k in 0..t {
        let rows_k = k * per..((k + 1) * per).min(rows);
        if k == 0 || !need_partials {
            // Thread 0 accumulates into the outputs themselves.
            let (pg, pb) = if k == 0 {
                (dgamma.as_deref_mut(), dbeta.as_deref_mut())
            } else {
                (None, None)
            };
            backward_rows(x, gamma, dy, eps, n, rows_k, dx.as_deref_mut(), pg, pb);
            if k == 0 {
                for d in [dgamma.as_deref_mut(), dbeta.as_deref_mut()]
                    .into_iter()
                    .flatten()
                {
                    for v in d.iter_mut() {
                        *v = R::ZERO + *v;
                    }
                }
            }
            continue;
        }
        let (sg, sb) = scratch[..2 * n].split_at_mut(n);
        sg.fill(R::ZERO);
        sb.fill(R::ZERO);
        let pg = dgamma.is_some().then_some(&mut *sg);
        let pb = dbeta.is_some().then_some(&mut *sb);
        backward_rows(x, gamma, dy, eps, n, rows_k, dx.as_deref_mut(), pg, pb);
        for (d, p) in [(dgamma.as_deref_mut(), &*sg), (dbeta.as_deref_mut(), &*sb)] {
            if let Some(d) = d {
                for (o, &v) in d.iter_mut().zip(p) {
                    *o = *o + v;
                }
            }
        }
    }
}

/// The rows `rows` of [`layer_norm_backward_threads`] on one thread: each row's weight and
/// bias contributions accumulated into `pg` / `pb` (that thread's buffers) and its input
/// gradient written to `dx`, in the order stated there.
#[allow(clippy::too_many_arguments)]
fn backward_rows<R: Real>(
    x: &[R],
    gamma: Option<&[R]>,
    dy: &[R],
    eps: f64,
    n: usize,
    rows: std::ops::Range<usize>,
    mut dx: Option<&mut [R]>,
    mut pg: Option<&mut [R]>,
    mut pb: Option<&mut [R]>,
) {
    let scale = R::ONE / R::from_f64(n as f64);
    for i in rows {
        let (xr, dyr) = (&x[i * n..(i + 1) * n], &dy[i * n..(i + 1) * n]);
        let (mean, var) = row_moments(xr);
        let a = rstd(var, eps);
        if let Some(dg) = pg.as_deref_mut() {
            let b = -a * mean;
            for j in 0..n {
                dg[j] = dyr[j].fma(a.fma(xr[j], b), dg[j]);
            }
        }
        if let Some(db) = pb.as_deref_mut() {
            for j in 0..n {
                db[j] = db[j] + dyr[j];
            }
        }
        let Some(dx) = dx.as_deref_mut() else {
            continue;
        };
        let (ds, db) = match gamma {
            Some(g) => (
                map_reduce_sum(n, |j| (dyr[j] * xr[j], g[j])),
                map_reduce_sum(n, |j| (dyr[j], g[j])),
            ),
            None => (
                map_reduce_sum(n, |j| (dyr[j], xr[j])),
                map_reduce_sum(n, |j| (dyr[j], R::ONE)),
            ),
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
/// norm weights' gradients over tp). `accumulate` is [`rms_norm_backward`]'s (a layer norm's
/// `dx` is always written whole); `scratch` is either kernel's (the rms row statistics, or
/// the layer norm's per-thread partials); `partials` holds the ranks' weight and bias
/// partials before their all-reduce (reused: grown, never shrunk).
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
    partials: &mut Vec<B::R>,
) {
    use crate::scenario::ir::NormKind;
    let layer = kind == NormKind::LayerNorm;
    // The input gradient does not depend on the thread count; each rank's weight and bias
    // partials do (each rank is its own process with the profile's threads).
    let threads = be.aten_threads();
    match kind {
        NormKind::LayerNorm => layer_norm_backward(x, weight, dy, eps, n, dx, None, None),
        NormKind::RmsNorm => {
            rms_norm_backward(x, weight, dy, eps, n, dx, None, accumulate, scratch)
        }
    }
    let tp = shards.len();
    let want_w = dweight.is_some();
    let want_b = dbias.is_some() && layer;
    if partials.len() < 2 * tp * n {
        partials.resize(2 * tp * n, B::R::ZERO);
    }
    let (pw, pb) = partials[..2 * tp * n].split_at_mut(tp * n);
    pw.fill(B::R::ZERO);
    pb.fill(B::R::ZERO);
    for (r, rows) in shards.iter().enumerate() {
        let (xs, ds) = (
            &x[rows.start * n..rows.end * n],
            &dy[rows.start * n..rows.end * n],
        );
        let (w_r, b_r) = (&mut pw[r * n..(r + 1) * n], &mut pb[r * n..(r + 1) * n]);
        let w_out = want_w.then_some(w_r);
        if layer {
            let b_out = want_b.then_some(b_r);
            layer_norm_backward_threads(
                xs, weight, ds, eps, n, threads, scratch, None, w_out, b_out,
            );
        } else {
            rms_norm_backward(xs, weight, ds, eps, n, None, w_out, false, scratch);
        }
    }
    if let Some(d) = dweight {
        be.all_reduce(pw, tp, d);
    }
    if let (Some(d), true) = (dbias, want_b) {
        be.all_reduce(pb, tp, d);
    }
}

/// `out = a + b` elementwise (one rounding each).
pub fn residual_add<R: Real>(a: &[R], b: &[R], out: &mut [R]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

/// `out = a * b` elementwise, one rounding each: torch's `mul` of two tensors of one shape
/// (ATen's vectorized and scalar loops both round every product once, so neither the vector
/// width nor the element order changes a value). Also `MulBackward0`'s two gradients,
/// `grad_a = g * b` and `grad_b = g * a` (`mul_tensor_backward`: `grad * other`), each one
/// rounding.
pub fn elementwise_mul<R: Real>(a: &[R], b: &[R], out: &mut [R]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x * y;
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
