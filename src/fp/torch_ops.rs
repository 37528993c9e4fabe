//! Bit-exact CPU re-implementations of the fp32 elementwise / reduction kernels
//! that PyTorch (2.15, x86-64, CPU capability AVX512) runs for a tiny MLP:
//! `torch.tanh`, `F.cross_entropy` forward + backward, `tanh_backward`,
//! `grad.sum(0)` and the plain SGD update.
//!
//! * `tanh`, `exp` and `log` are ports of SLEEF's single-precision vector
//!   algorithms (`xtanhf` = `Sleef_tanhf{8,16}_u10`, `xexpf` = `Sleef_expf16_u10`,
//!   `xlogf_u1` = `Sleef_logf16_u10`; `src/libm/sleefsimdsp.c` and the
//!   `ENABLE_FMA_SP` double-float helpers of `src/libm/df.h`).  SLEEF is built with
//!   `-ffp-contract=off`, so the only fused multiply-adds are the explicit
//!   `vmla`/`vfma`/`vfmapn`/`vfmanp` ones, which the AVX2 / AVX512 helpers map to
//!   hardware FMA.  They are reproduced here with [`f32::mul_add`].
//! * ATen calls them through `Vectorized<float>::{tanh,exp,log}`
//!   (`aten/src/ATen/cpu/vec/vec512/vec512_float.h`), and every element of a
//!   contiguous tensor, tails included (`vec::map` does a partial load), goes
//!   through the vector routine.
//!
//! Everything here is allocation-free.  When the CPU has FMA, the slice
//! functions run a `#[target_feature(enable = "fma")]` copy of the same code
//! (identical bits, just faster than the soft `fmaf` fallback).

#![allow(clippy::excessive_precision)]

// ---------------------------------------------------------------------------
// FMA dispatch
// ---------------------------------------------------------------------------

#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

#[inline]
fn has_fma() -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    {
        std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
    {
        false
    }
}

/// Runs `$body` (an expression using only `#[inline(always)]` helpers) either in a
/// `#[target_feature(enable = "fma")]` function or in a portable one.  Both give
/// identical bits because every FMA is written explicitly as `mul_add` and every
/// other operation is a plain IEEE op.
macro_rules! fma_dispatch {
    (fn $name:ident($($arg:ident : $ty:ty),*) -> $ret:ty $body:block) => {{
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        #[target_feature(enable = "fma")]
        unsafe fn fast($($arg: $ty),*) -> $ret $body
        fn portable($($arg: $ty),*) -> $ret $body
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        {
            if has_fma() {
                // SAFETY: the CPU supports FMA (checked at run time just above).
                unsafe { fast($($arg),*) }
            } else {
                portable($($arg),*)
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
        {
            portable($($arg),*)
        }
    }};
}

// ---------------------------------------------------------------------------
// SLEEF building blocks (x86 AVX2/AVX512 semantics)
// ---------------------------------------------------------------------------

/// `vrint_vi2_vf` = `cvtps_epi32`: round to nearest-even; NaN and out-of-range
/// values give the "integer indefinite" `i32::MIN`.
#[inline(always)]
fn rint_i32(x: f32) -> i32 {
    let r = x.round_ties_even();
    if r >= -2147483648.0 && r < 2147483648.0 {
        r as i32
    } else {
        i32::MIN
    }
}

/// `vpow2i_vf_vi2`: 2^q built directly in the exponent field.
#[inline(always)]
fn pow2i(q: i32) -> f32 {
    f32::from_bits((q.wrapping_add(0x7f) as u32) << 23)
}

/// `vldexp2_vf_vf_vi2`: d * 2^(q>>1) * 2^(q - (q>>1)).
#[inline(always)]
fn ldexp2(d: f32, q: i32) -> f32 {
    d * pow2i(q >> 1) * pow2i(q.wrapping_sub(q >> 1))
}

/// Unevaluated sum `x + y` of two floats (SLEEF `vfloat2`).
#[derive(Clone, Copy)]
struct Df {
    x: f32,
    y: f32,
}

#[inline(always)]
fn df(x: f32, y: f32) -> Df {
    Df { x, y }
}

/// `dfneg_vf2_vf2`
#[inline(always)]
fn df_neg(a: Df) -> Df {
    df(-a.x, -a.y)
}

/// `dfscale_vf2_vf2_vf`
#[inline(always)]
fn df_scale(a: Df, s: f32) -> Df {
    df(a.x * s, a.y * s)
}

/// `dfadd2_vf2_vf_vf`
#[inline(always)]
fn df_add2_f_f(a: f32, b: f32) -> Df {
    let s = a + b;
    let v = s - a;
    df(s, (a - (s - v)) + (b - v))
}

/// `dfadd_vf2_vf_vf2`
#[inline(always)]
fn df_add_f_df(a: f32, b: Df) -> Df {
    let s = a + b.x;
    df(s, ((a - s) + b.x) + b.y)
}

/// `dfadd_vf2_vf2_vf`
#[inline(always)]
fn df_add_df_f(a: Df, b: f32) -> Df {
    let s = a.x + b;
    df(s, ((a.x - s) + b) + a.y)
}

/// `dfadd2_vf2_vf2_vf`
#[inline(always)]
fn df_add2_df_f(a: Df, b: f32) -> Df {
    let s = a.x + b;
    let v = s - a.x;
    let t = (a.x - (s - v)) + (b - v);
    df(s, t + a.y)
}

/// `dfadd_vf2_vf2_vf2` (assumes |a| >= |b|)
#[inline(always)]
fn df_add_df_df(a: Df, b: Df) -> Df {
    let s = a.x + b.x;
    df(s, (((a.x - s) + b.x) + a.y) + b.y)
}

/// `dfadd2_vf2_vf2_vf2`
#[inline(always)]
fn df_add2_df_df(a: Df, b: Df) -> Df {
    let s = a.x + b.x;
    let v = s - a.x;
    let t = (a.x - (s - v)) + (b.x - v);
    df(s, t + (a.y + b.y))
}

/// `dfmul_vf2_vf2_vf` (FMA variant)
#[inline(always)]
fn df_mul_df_f(a: Df, b: f32) -> Df {
    let s = a.x * b;
    df(s, fma(a.y, b, fma(a.x, b, -s)))
}

/// `dfmul_vf2_vf2_vf2` (FMA variant)
#[inline(always)]
fn df_mul_df_df(a: Df, b: Df) -> Df {
    let s = a.x * b.x;
    df(s, fma(a.x, b.y, fma(a.y, b.x, fma(a.x, b.x, -s))))
}

/// `dfsqu_vf2_vf2` (FMA variant)
#[inline(always)]
fn df_squ(a: Df) -> Df {
    let s = a.x * a.x;
    df(s, fma(a.x + a.x, a.y, fma(a.x, a.x, -s)))
}

/// `dfrec_vf2_vf2` (FMA variant)
#[inline(always)]
fn df_rec(d: Df) -> Df {
    let s = 1.0 / d.x;
    df(s, s * fma(-d.y, s, fma(-d.x, s, 1.0)))
}

/// `dfdiv_vf2_vf2_vf2` (FMA variant)
#[inline(always)]
fn df_div(n: Df, d: Df) -> Df {
    let t = 1.0 / d.x;
    let s = n.x * t;
    let u = fma(t, n.x, -s);
    let v = fma(-d.y, t, fma(-d.x, t, 1.0));
    df(s, fma(s, v, fma(n.y, t, u)))
}

const R_LN2F: f32 = 1.442_695_040_888_963_407_359_924_681_001_892_137_426_645_954_152_985_934_135_449_406_931;
const L2UF: f32 = 0.693_145_751_953_125;
const L2LF: f32 = 1.428_606_765_330_187_045e-06;

/// `expk2f`: double-float exp of a double-float argument (SLEEF 3.6+ version).
#[inline(always)]
fn expk2f(d: Df) -> Df {
    let u = (d.x + d.y) * R_LN2F;
    let q = rint_i32(u);
    let qf = q as f32;
    let mut s = df_add2_df_f(d, qf * -L2UF);
    s = df_add2_df_f(s, qf * -L2LF);

    let mut u = 0.198_096_022_4e-3_f32;
    u = fma(u, s.x, 0.139_425_648_4e-2);
    u = fma(u, s.x, 0.833_345_670_3e-2);
    u = fma(u, s.x, 0.416_663_736_1e-1);

    let mut t = df_add2_df_f(df_mul_df_f(s, u), 0.166_666_659_414_234_244_790_680_580_464);
    t = df_add2_df_f(df_mul_df_df(s, t), 0.5);
    t = df_add2_df_df(s, df_mul_df_df(df_squ(s), t));
    t = df_add_f_df(1.0, t);

    let mut x = ldexp2(t.x, q);
    let mut y = ldexp2(t.y, q);
    if d.x < -104.0 {
        x = 0.0;
        y = 0.0;
    }
    df(x, y)
}

#[inline(always)]
fn expk2f_old(d: Df) -> Df {
    let u = (d.x + d.y) * R_LN2F;
    let q = rint_i32(u);
    let qf = q as f32;
    let mut s = df_add2_df_f(d, qf * -L2UF);
    s = df_add2_df_f(s, qf * -L2LF);
    let mut u = 0.00136324646882712841033936_f32;
    u = fma(u, s.x, 0.00836596917361021041870117);
    u = fma(u, s.x, 0.0416710823774337768554688);
    u = fma(u, s.x, 0.166665524244308471679688);
    u = fma(u, s.x, 0.499999850988388061523438);
    let mut t = df_add_df_df(s, df_mul_df_f(df_squ(s), u));
    t = df_add_f_df(1.0, t);
    df_scale(df_scale(t, 2.0), pow2i(q - 1))
}

pub fn tanh_old(x: f32) -> f32 {
    fma_dispatch!(fn run(x: f32) -> f32 {
    let a = x.abs();
    let d = expk2f_old(df(a, 0.0));
    let e = df_rec(d);
    let q = df_div(df_add_df_df(d, df_neg(e)), df_add_df_df(d, e));
    let mut y = q.x + q.y;
    if a > 8.664_339_742 || y.is_nan() {
        y = 1.0;
    }
    let y = f32::from_bits(y.to_bits() ^ (x.to_bits() & 0x8000_0000));
    if x.is_nan() {
        f32::from_bits(0xffff_ffff)
    } else {
        y
    }
    })
}

/// SLEEF `xtanhf` (u10): tanh(|x|) = (e - 1/e) / (e + 1/e) in double-float
/// with e = expk2f(|x|); result forced to 1 for |x| > 8.664339742 (or a NaN
/// intermediate), sign copied from x by xor, NaN input -> all-ones NaN.
#[inline(always)]
fn tanh_core(x: f32) -> f32 {
    let a = x.abs();
    let d = expk2f(df(a, 0.0));
    let e = df_rec(d);
    let q = df_div(df_add_df_df(d, df_neg(e)), df_add_df_df(d, e));
    let mut y = q.x + q.y;
    if a > 8.664_339_742 || y.is_nan() {
        y = 1.0;
    }
    let y = f32::from_bits(y.to_bits() ^ (x.to_bits() & 0x8000_0000));
    if x.is_nan() {
        f32::from_bits(0xffff_ffff)
    } else {
        y
    }
}

/// SLEEF `xexpf` (u10, = `Sleef_expf16_u10`):
/// q = rint(d * R_LN2); s = fma(q, -L2U, d); s = fma(q, -L2L, s);
/// Horner polynomial of 6 coefficients in `s` with FMAs;
/// u = 1 + fma(s*s, u, s); u = ldexp2(u, q); 0 if d < -104, +inf if d > 100.
#[inline(always)]
fn exp_core(d: f32) -> f32 {
    let q = rint_i32(d * R_LN2F);
    let qf = q as f32;
    let mut s = fma(qf, -L2UF, d);
    s = fma(qf, -L2LF, s);

    let mut u = 0.000_198_527_617_612_853_646_278_381_f32;
    u = fma(u, s, 0.001_393_043_552_525_341_510_772_71);
    u = fma(u, s, 0.008_333_360_776_305_198_669_433_59);
    u = fma(u, s, 0.041_666_485_369_205_474_853_515_6);
    u = fma(u, s, 0.166_666_671_633_720_397_949_219);
    u = fma(u, s, 0.5);

    u = 1.0 + fma(s * s, u, s);
    u = ldexp2(u, q);

    if d < -104.0 {
        u = 0.0;
    }
    if 100.0 < d {
        u = f32::INFINITY;
    }
    u
}

/// AVX512 `vgetexp`: floor(log2(|v|)) as a float (denormals normalised).
#[inline(always)]
fn getexp(v: f32) -> f32 {
    let b = v.to_bits() & 0x7fff_ffff;
    if b == 0 {
        return f32::NEG_INFINITY;
    }
    if b >= 0x7f80_0000 {
        return if b == 0x7f80_0000 { f32::INFINITY } else { v };
    }
    let e = (b >> 23) as i32;
    if e == 0 {
        // denormal: exponent of the leading one
        let lz = b.leading_zeros() as i32; // >= 9
        (-126 - (lz - 8)) as f32
    } else {
        (e - 127) as f32
    }
}

/// AVX512 `vgetmant(d, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_nan)` for finite
/// d > 0: the mantissa scaled into [0.75, 1.5).
#[inline(always)]
fn getmant_p75_1p5(v: f32) -> f32 {
    let mut b = v.to_bits() & 0x7fff_ffff;
    if (b >> 23) == 0 {
        // normalise a denormal
        let lz = b.leading_zeros();
        b <<= lz - 8;
        b &= 0x007f_ffff;
    }
    let frac = b & 0x007f_ffff;
    // m in [1, 2); if m >= 1.5 (first fraction bit set) use m / 2
    if frac & 0x0040_0000 != 0 {
        f32::from_bits(0x3f00_0000 | frac)
    } else {
        f32::from_bits(0x3f80_0000 | frac)
    }
}

/// SLEEF `xlogf_u1` (= `Sleef_logf16_u10`), AVX512 path:
/// e = getexp(d * (1/0.75)); m = getmant(d) in [0.75, 1.5);
/// s = (ln2_hi, ln2_lo) * e (double-float); x = (m - 1) / (m + 1) double-float;
/// x2 = x.x*x.x; t = fma-Horner(0.3027294874, 0.3996108174, 0.6666694880);
/// s = s + 2x; s = s + (x2*x.x)*t; r = s.x + s.y.
#[inline(always)]
fn log_core(d: f32) -> f32 {
    if d.is_nan() || d < 0.0 {
        return f32::NAN;
    }
    if d == 0.0 {
        return f32::NEG_INFINITY;
    }
    if d == f32::INFINITY {
        return f32::INFINITY;
    }
    let mut e = getexp(d * (1.0_f32 / 0.75_f32));
    if e == f32::INFINITY {
        e = 128.0;
    }
    let m = getmant_p75_1p5(d);
    let mut s = df_mul_df_f(df(0.693_147_182_464_599_609_38, -1.904_654_323_148_236_017e-09), e);
    let x = df_div(df_add2_f_f(-1.0, m), df_add2_f_f(1.0, m));
    let x2 = x.x * x.x;
    let mut t = 0.302_729_487_4_f32;
    t = fma(t, x2, 0.399_610_817_4);
    t = fma(t, x2, 0.666_669_488_0);
    s = df_add_df_df(s, df_scale(x, 2.0));
    s = df_add_df_f(s, (x2 * x.x) * t);
    s.x + s.y
}

// ---------------------------------------------------------------------------
// Public elementwise functions
// ---------------------------------------------------------------------------

/// `torch.tanh` for one f32, bit-exact with `Sleef_tanhf16_u10` /
/// `Sleef_tanhf8_u10` (SLEEF `src/libm/sleefsimdsp.c` `xtanhf`, reached via
/// `Vectorized<float>::tanh` in `aten/src/ATen/cpu/vec/vec512/vec512_float.h`).
///
/// Order: a = |x|; d = expk2f(a) as double-float (range reduction
/// q = rint(a*log2 e), s = a - q*L2U - q*L2L in double-float, degree-6
/// polynomial, first 4 Horner steps with FMA then double-float steps, 1 + t,
/// scaled by 2^q via two multiplications); e = 1/d (double-float, FMA
/// residuals); tanh = (d - e) / (d + e) in double-float; y = hi + lo;
/// y = 1 when a > 8.664339742; sign of x xor-ed in; NaN in -> 0xffffffff.
#[inline]
pub fn tanh_f32(x: f32) -> f32 {
    fma_dispatch!(fn run(x: f32) -> f32 { tanh_core(x) })
}

/// In-place `torch.tanh` over a slice (every element independently, see
/// [`tanh_f32`]).
pub fn tanh_slice(x: &mut [f32]) {
    fma_dispatch!(fn run(x: &mut [f32]) -> () {
        for v in x.iter_mut() {
            *v = tanh_core(*v);
        }
    })
}

/// `Vectorized<float>::exp` = `Sleef_expf16_u10` (SLEEF `xexpf`), the exp used by
/// ATen's log-softmax forward and backward kernels.
///
/// Order: q = rint(d*R_LN2); s = fma(q, -L2U, d); s = fma(q, -L2L, s);
/// u = Horner(0.000198527617612853646278381, 0.00139304355252534151077271,
/// 0.00833336077630519866943359, 0.0416664853692054748535156,
/// 0.166666671633720397949219, 0.5) with FMAs; u = 1 + fma(s*s, u, s);
/// u *= 2^(q>>1) * 2^(q-(q>>1)); 0 below -104, +inf above 100.
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    fma_dispatch!(fn run(x: f32) -> f32 { exp_core(x) })
}

/// `Vectorized<float>::log` = `Sleef_logf16_u10` (SLEEF `xlogf_u1`, AVX512
/// `vgetexp`/`vgetmant` path); see `log_core` for the order of operations.
#[inline]
pub fn log_f32(x: f32) -> f32 {
    fma_dispatch!(fn run(x: f32) -> f32 { log_core(x) })
}


// ---------------------------------------------------------------------------
// Cross entropy = log_softmax (last dim) + nll_loss(mean), forward + backward
// ---------------------------------------------------------------------------

/// ATen's `Vectorized<float>::size()` for the AVX512 kernels.
const LANES: usize = 16;

/// `vec::map_reduce_all(exp(x - max), +)` from
/// `aten/src/ATen/cpu/vec/functional_base.h` with 16 lanes:
/// * `len < 16`: ((e0 + e1) + e2) + ... sequentially;
/// * otherwise lane l accumulates e[l], e[16+l], e[32+l], ... left to right
///   (the ragged tail only touches its first lanes), then the AVX512
///   `vec_reduce_all` butterfly: lanes l and l^8 are added, then l^4, l^2, l^1.
#[inline(always)]
fn row_sum_exp(row: &[f32], max: f32) -> f32 {
    let n = row.len();
    if n < LANES {
        let mut acc = exp_core(row[0] - max);
        for &x in &row[1..] {
            acc += exp_core(x - max);
        }
        return acc;
    }
    let mut acc = [0.0f32; LANES];
    for (l, a) in acc.iter_mut().enumerate() {
        *a = exp_core(row[l] - max);
    }
    let mut d = LANES;
    while d < n {
        let end = (d + LANES).min(n);
        for (a, &x) in acc.iter_mut().zip(&row[d..end]) {
            *a += exp_core(x - max);
        }
        d = end;
    }
    tree_reduce_16(&acc)
}

/// The AVX512 `vec_reduce_all` butterfly over 16 lanes (`_mm512_shuffle_f32x4`
/// 0x4E / 0xB1 then `_mm512_shuffle_ps` 0x4E / 0xB1): lane 0 of the result.
#[inline(always)]
fn tree_reduce_16(v: &[f32; LANES]) -> f32 {
    let mut a = [0.0f32; 8];
    for l in 0..8 {
        a[l] = v[l] + v[l + 8];
    }
    let b = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let c = [b[0] + b[2], b[1] + b[3]];
    c[0] + c[1]
}

/// Max of a row (`vec::reduce_all` with `vec::maximum`; NaN propagates).
#[inline(always)]
fn row_max(row: &[f32]) -> f32 {
    let mut m = row[0];
    for &x in &row[1..] {
        if x.is_nan() || m.is_nan() {
            m = f32::NAN;
        } else if x > m {
            m = x;
        }
    }
    m
}

/// `ceil(log2(n))` as ATen's `utils::CeilLog2`.
fn ceil_log2(n: usize) -> u32 {
    if n <= 1 {
        0
    } else {
        usize::BITS - (n - 1).leading_zeros()
    }
}

/// Default `ignore_index` of `F.cross_entropy`.
pub const IGNORE_INDEX: i64 = -100;

/// `F.cross_entropy(logits, labels, reduction='mean')` on an `N x V` row-major
/// f32 tensor, forward and backward, bit-exact with PyTorch's CPU kernels.
/// Returns the mean loss and writes `d(loss * grad_scale)/d logits` to
/// `dlogits` (`grad_scale` is the gradient arriving at the loss, e.g. 0.5 for
/// `(loss / 2).backward()`).  Labels equal to [`IGNORE_INDEX`] are skipped
/// (their rows get zero gradient), as in torch.
///
/// Forward, per row (`_vec_log_softmax_lastdim`,
/// `aten/src/ATen/native/cpu/LogSoftmaxKernelImpl.h`):
/// `max = max(x)`; `sum = Σ exp(x - max)` with SLEEF `expf_u10` ([`exp_f32`])
/// summed in the 16-lane order of `vec::map_reduce_all` (see `row_sum_exp`);
/// `lse = log(sum)` with SLEEF `logf_u10` ([`log_f32`]);
/// `logp = (x - max) - lse` (two separate subtractions).
///
/// `nll_loss` mean (`nll_loss_out_frame`, `aten/src/ATen/native/LossNLL.cpp`):
/// 8-level cascade sum of `-logp[label]` (level 0 accumulates by subtraction;
/// it is flushed upwards whenever the row index is a multiple of 16, including
/// row 0), levels then added 0..7 onto 0.0, and divided by the (float) number
/// of non-ignored rows.
///
/// Backward: `nll_loss_backward` writes `grad = -(grad_scale / total_weight)`
/// at the label; `_log_softmax_backward_data`
/// (`_vec_host_softmax_backward_lastdim`, `SoftMaxKernel.cpp`) computes
/// `s = Σ grad_row` (= grad, all other entries are zero) and
/// `dlogits = grad_row - exp(logp) * s` (see `LOGSOFTMAX_BWD_FMA`).
pub fn log_softmax_cross_entropy_f32(
    logits: &[f32],
    labels: &[i64],
    v: usize,
    grad_scale: f32,
    dlogits: &mut [f32],
) -> f32 {
    let n = labels.len();
    assert!(v > 0, "v must be positive");
    assert_eq!(logits.len(), n * v, "logits must be labels.len() x v");
    assert_eq!(dlogits.len(), n * v, "dlogits must be labels.len() x v");
    for &t in labels {
        assert!(
            t == IGNORE_INDEX || (0..v as i64).contains(&t),
            "label {t} out of range"
        );
    }
    fma_dispatch!(fn run(logits: &[f32], labels: &[i64], v: usize, grad_scale: f32, dlogits: &mut [f32]) -> f32 {
        ce_core(logits, labels, v, grad_scale, dlogits)
    })
}

#[inline(always)]
fn ce_core(logits: &[f32], labels: &[i64], v: usize, grad_scale: f32, dlogits: &mut [f32]) -> f32 {
    let n = labels.len();
    if n == 0 {
        return f32::NAN;
    }
    // nll_loss forward cascade
    const LEVELS: usize = 8;
    let level_power = (ceil_log2(n) / LEVELS as u32).max(4);
    let level_mask = (1usize << level_power) - 1;
    let mut partial = [0.0f32; LEVELS];
    let mut ignored = 0usize;
    for (b, (&t, row)) in labels.iter().zip(logits.chunks_exact(v)).enumerate() {
        if t == IGNORE_INDEX {
            ignored += 1;
            continue;
        }
        let max = row_max(row);
        let lse = log_core(row_sum_exp(row, max));
        let logp_t = (row[t as usize] - max) - lse;
        partial[0] -= logp_t;
        for j in 0..LEVELS - 1 {
            let mask = level_mask << (j as u32 * level_power);
            if b & mask != 0 {
                break;
            }
            partial[j + 1] += partial[j];
            partial[j] = 0.0;
        }
    }
    let total_weight = (n - ignored) as f32;
    let mut loss = 0.0f32;
    for p in partial {
        loss += p;
    }
    loss /= total_weight;

    // backward
    let grad = -(grad_scale / total_weight);
    for ((&t, row), drow) in labels
        .iter()
        .zip(logits.chunks_exact(v))
        .zip(dlogits.chunks_exact_mut(v))
    {
        if t == IGNORE_INDEX {
            drow.fill(0.0);
            continue;
        }
        let max = row_max(row);
        let lse = log_core(row_sum_exp(row, max));
        let s = grad + 0.0;
        for (j, (d, &x)) in drow.iter_mut().zip(row).enumerate() {
            let gj = if j == t as usize { grad } else { 0.0 };
            let e = exp_core((x - max) - lse);
            *d = if LOGSOFTMAX_BWD_FMA { fma(-e, s, gj) } else { gj - e * s };
        }
    }
    loss
}

const LOGSOFTMAX_BWD_FMA: bool = true;

// ---------------------------------------------------------------------------
// tanh backward, bias-gradient column sums, SGD
// ---------------------------------------------------------------------------

/// `tanh_backward(grad, y)` = `grad * (1 - y*y)`
/// (`tanh_backward_kernel`, `aten/src/ATen/native/cpu/BinaryOpsKernel.cpp`).
pub fn tanh_backward_f32(dy: &[f32], y: &[f32], out: &mut [f32]) {
    assert_eq!(dy.len(), y.len());
    assert_eq!(dy.len(), out.len());
    fma_dispatch!(fn run(dy: &[f32], y: &[f32], out: &mut [f32]) -> () {
        for ((o, &g), &t) in out.iter_mut().zip(dy).zip(y) {
            *o = if TANH_BWD_FMA { g * fma(-t, t, 1.0) } else { g * (1.0 - t * t) };
        }
    })
}

const TANH_BWD_FMA: bool = true;

/// `x.sum(0)` for a row-major `n x h` f32 tensor (`h = out.len()`):
/// out[c] = ((x[0][c] + x[1][c]) + x[2][c]) + ... (rows in order).
pub fn column_sums_f32(x: &[f32], n: usize, out: &mut [f32]) {
    let h = out.len();
    assert_eq!(x.len(), n * h);
    out.fill(0.0);
    for row in x.chunks_exact(h.max(1)).take(n) {
        for (o, &v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
}

/// Plain SGD step `p.add_(g, alpha=-lr)` (`lr` given as f32, i.e. alpha =
/// `-(lr as f32)`): p = fma(g, -lr, p) for every element
/// (`vec::fmadd(other, alpha, self)` in `aten/src/ATen/native/ufunc/add.h`).
pub fn sgd_f32(p: &mut [f32], g: &[f32], lr: f32) {
    assert_eq!(p.len(), g.len());
    let alpha = -lr;
    fma_dispatch!(fn run(p: &mut [f32], g: &[f32], alpha: f32) -> () {
        for (p, &g) in p.iter_mut().zip(g) {
            *p = fma(g, alpha, *p);
        }
    })
}
