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

#[doc(hidden)]
pub fn debug_expk2f(a: f32) -> (f32, f32) {
    let d = expk2f(df(a, 0.0));
    (d.x, d.y)
}
#[doc(hidden)]
pub fn debug_tanh_parts(a: f32) -> (f32, f32, f32, f32, f32, f32) {
    let d = expk2f(df(a, 0.0));
    let e = df_rec(d);
    let n = df_add_df_df(d, df_neg(e));
    let m = df_add_df_df(d, e);
    let q = df_div(n, m);
    (n.x, n.y, m.x, m.y, q.x, q.y)
}
#[doc(hidden)]
pub fn debug_sinh(x: f32) -> f32 {
    fma_dispatch!(fn run(x: f32) -> f32 {
    let a = x.abs();
    let mut d = expk2f(df(a, 0.0));
    let r = df_rec(d);
    // dfsub_vf2_vf2_vf2
    let s = d.x - r.x;
    let mut t = d.x - s;
    t -= r.x;
    t += d.y;
    d = df(s, t - r.y);
    let mut y = (d.x + d.y) * 0.5;
    if a > 89.0 || y.is_nan() { y = f32::INFINITY; }
    let y = f32::from_bits(y.to_bits() ^ (x.to_bits() & 0x8000_0000));
    if x.is_nan() { f32::from_bits(0xffff_ffff) } else { y }
    })
}
