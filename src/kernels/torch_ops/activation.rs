//! The transcendentals of torch's CPU activation kernels that are not SLEEF's, bit for bit:
//! oneDNN's exact gelu (forward and backward), and the C library's `erff`, `expf` and `tanhf`
//! that ATen's scalar lambdas call.
//!
//! **The exact gelu.** `F.gelu(x)` (`approximate="none"`) on a float32 CPU tensor does not run
//! ATen's own kernel while oneDNN is enabled (the default): `gelu_out_cpu` and
//! `gelu_backward_out_cpu` (`aten/src/ATen/native/Activation.cpp`) hand every contiguous tensor
//! of at least two elements (`use_mkldnn`) to oneDNN's eltwise primitive, algorithm
//! `eltwise_gelu_erf` (`ideep::eltwise_forward` / `eltwise_backward`). Its JIT kernel computes
//! each element alone, the same code for a vector's lanes and for the tail of the tensor
//! (`src/cpu/x64/jit_uni_eltwise.cpp`), by the injector of
//! `src/cpu/x64/injectors/jit_uni_eltwise_injector.cpp` (oneDNN 3.13; torch 2.15 bundles
//! 3.13.3):
//!
//! * forward, AVX-512 machines: a piecewise minimax polynomial of erf(x/√2) in |x|
//!   ([`onednn_gelu_avx512_core`]); AVX2 machines (or `ONEDNN_MAX_CPU_ISA=AVX2`): Abramowitz &
//!   Stegun 7.1.26 with oneDNN's own exp ([`onednn_gelu_avx2_core`]). oneDNN picks its ISA
//!   from the CPU, not from `ATEN_CPU_CAPABILITY`;
//! * backward, both ISAs: A&S 7.1.26 for the cdf, oneDNN's exp for the pdf
//!   ([`onednn_gelu_grad_core`]), times `dy`.
//!
//! A tensor of one element (or a non-contiguous one) goes to ATen's `GeluKernelImpl`
//! (`aten/src/ATen/native/cpu/Activation.cpp`), whose `cpu_kernel_vec` runs fewer elements
//! than two vectors through its scalar lambda: `std::erf` and `std::exp` on a float. (Its
//! vectorized lambda, `Vectorized<float>::erf`, runs only with oneDNN disabled, which no
//! profile models.)
//!
//! **The C library.** ATen's scalar lambdas (the exact gelu above, and the last `n % 16`
//! elements of every tensor in the tanh gelu and silu kernels, `n % 32` on the AVX512 build)
//! call the C library's `erff`, `expf` and `tanhf`. torch's Linux wheels link the system
//! glibc; [`glibc_erff`], [`glibc_expf`] and [`glibc_tanhf`] port glibc 2.36's (Debian 12,
//! where the fixtures were measured): the Sun fdlibm `s_erff.c`, `s_tanhf.c` and `s_expm1f.c`
//! (`sysdeps/ieee754/flt-32/`), and Szabolcs Nagy's table-driven `e_expf.c` with
//! `e_exp2f_data.c` in the FMA build that `sysdeps/x86_64/fpu/multiarch/e_expf.c` selects on a
//! CPU with FMA (also the exp inside `erff`). glibc 2.41 replaced `erff` and `tanhf` by
//! CORE-MATH's correctly rounded ones, so these elements may round differently under a newer
//! glibc.
//!
//! Every function here is a plain sequence of IEEE operations; a fused multiply-add is
//! written `fma` exactly where the source fuses one (oneDNN's `vfmadd*`/`vfnmadd*`, GCC's
//! contraction in glibc's FMA build of `expf`; glibc's generic build of the others has none).
//! Measured bit for bit against torch 2.15 through the activations
//! (`scripts/activations_torch.py`, `tests/suite/activations_fixture.rs`), and the three C
//! library ports against glibc 2.36 on all 2^32 inputs (`scripts/glibc_float_digests.py`,
//! `tests/suite/glibc_float.rs`).

use super::{fma, Isa};

// ---------------------------------------------------------------------------
// oneDNN eltwise gelu_erf (src/cpu/x64/injectors/jit_uni_eltwise_injector.cpp)
// ---------------------------------------------------------------------------

/// x86 `minps` of one lane: `a < b ? a : b` (the second operand when either is NaN).
#[inline(always)]
fn x86_min(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

/// x86 `maxps` of one lane: `a > b ? a : b` (the second operand when either is NaN).
#[inline(always)]
fn x86_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Flips the sign of `x` where `sign` (a sign bit, 0 or `0x8000_0000`) is set.
#[inline(always)]
fn xor_sign(x: f32, sign: u32) -> f32 {
    f32::from_bits(x.to_bits() ^ sign)
}

/// The injector's table (`jit_uni_eltwise_injector_t::register_table_entries`): exp's
/// `exp_log2ef`, `exp_ln_flt_max_f`, `exp_ln_flt_min_f`, `ln2f`, and `exp_pol` p1..p5.
const DNNL_LOG2EF: f32 = f32::from_bits(0x3fb8aa3b);
const DNNL_LN_FLT_MAX: f32 = f32::from_bits(0x42b17218);
const DNNL_LN_FLT_MIN: f32 = f32::from_bits(0xc2aeac50);
const DNNL_LN2F: f32 = f32::from_bits(0x3f317218);
const DNNL_EXP_POL: [f32; 5] = [
    f32::from_bits(0x3f7ffffb),
    f32::from_bits(0x3efffee3),
    f32::from_bits(0x3e2aad40),
    f32::from_bits(0x3d2b9d0d),
    f32::from_bits(0x3c07cfce),
];
/// `gelu_erf_Abramowitz_Stegun_*`: p = 0.3275911, 1/√2, 1/√π, and a1..a5.
const DNNL_AS_P: f32 = f32::from_bits(0x3ea7ba05);
const DNNL_SQRT1_2: f32 = f32::from_bits(0x3f3504f3);
const DNNL_1_SQRT_PI: f32 = f32::from_bits(0x3f106eba);
const DNNL_AS_POL: [f32; 5] = [
    f32::from_bits(0x3e827906),
    f32::from_bits(0xbe91a98e),
    f32::from_bits(0x3fb5f0e3),
    f32::from_bits(0xbfba00e3),
    f32::from_bits(0x3f87dc22),
];

/// oneDNN's `exp_compute_vector_fwd`, one lane.
///
/// Order: `under = x < ln(FLT_MIN)` (0xc2aeac50); `x = maxps(minps(x, ln(FLT_MAX)),
/// ln(FLT_MIN))` (x86 NaN rules: a NaN becomes ln(FLT_MAX)); `fx = floor(x·log2e + 0.5)`
/// (product and sum rounded); `r = fma(−fx, ln2, x)`; `k = 2^(fx − 1)` built in the exponent
/// field (`(cvt(fx − 1) + 127) << 23`, 0 where `under`);
/// `p = fma(fma(fma(fma(fma(p5, r, p4), r, p3), r, p2), r, p1), r, 1)`; `(p·k)·2`.
#[inline(always)]
fn onednn_exp(x: f32) -> f32 {
    let under = x < DNNL_LN_FLT_MIN;
    let x = x86_max(x86_min(x, DNNL_LN_FLT_MAX), DNNL_LN_FLT_MIN);
    let fx = floor_small(x * DNNL_LOG2EF + 0.5);
    let r = fma(-fx, DNNL_LN2F, x);
    let n = (fx - 1.0) as i32;
    let k = if under {
        0.0
    } else {
        f32::from_bits((n.wrapping_add(127) as u32) << 23)
    };
    let [p1, p2, p3, p4, p5] = DNNL_EXP_POL;
    let p = fma(fma(fma(fma(fma(p5, r, p4), r, p3), r, p2), r, p1), r, 1.0);
    (p * k) * 2.0
}

/// `vroundps(v, floor)` for |v| < 2³¹ (exact: the truncation toward zero, less one below a
/// negative non-integer).
#[inline(always)]
fn floor_small(v: f32) -> f32 {
    let t = v as i32 as f32;
    if t > v {
        t - 1.0
    } else {
        t
    }
}

/// A&S 7.1.26's `1 − r(t)·t·e` without its final `1 −`: `r = fma(fma(fma(fma(a5, t, a4), t,
/// a3), t, a2), t, a1)`; returns `fma(m·t, r, 1)` for `m = −e` (the injectors' shared
/// polynomial step).
#[inline(always)]
fn onednn_as_erf(minus_e: f32, t: f32) -> f32 {
    let [a1, a2, a3, a4, a5] = DNNL_AS_POL;
    let r = fma(fma(fma(fma(a5, t, a4), t, a3), t, a2), t, a1);
    fma(minus_e * t, r, 1.0)
}

/// oneDNN's gelu_erf forward on an AVX2 (or older, FMA) machine, one element
/// (`gelu_erf_compute_vector_fwd`, the A&S branch).
///
/// Order: `x = s·(1/√2)`; `t = 1 / fma(p, |x|, 1)`; `e = exp(−(x·x))` (`onednn_exp`);
/// `erf = fma((−e)·t, r(t), 1)` with the sign of `s` xor-ed in; `h = s·0.5`;
/// `fma(erf, h, h)`.
#[inline(always)]
pub(super) fn onednn_gelu_avx2_core(s: f32) -> f32 {
    let x = s * DNNL_SQRT1_2;
    let t = 1.0 / fma(DNNL_AS_P, x.abs(), 1.0);
    let e = onednn_exp(-(x * x));
    let erf = xor_sign(onednn_as_erf(-e, t), s.to_bits() & 0x8000_0000);
    let h = s * 0.5;
    fma(erf, h, h)
}

/// `gelu_erf_minimax_pol`: the coefficients of degree 0 to 5 of oneDNN's 32 piecewise
/// polynomials (25 used, padded to 32) of erf(x/√2) in x ≥ 0, as f32 bits.
const MINIMAX: [[u32; 25]; 6] = [
    [
        0xa6f2cb94, 0x32827792, 0x3381cc0c, 0x34523d4a, 0x351ac44d, 0x35f36d88, 0x36ee8229,
        0x37b8a3bb, 0x3867a213, 0x3940033b, 0x3a2a5a1d, 0x3ae35863, 0x3b7828f2, 0x3c08b14b,
        0x3c515ed3, 0xbb503236, 0xbd8d8e5e, 0xbe8abcd9, 0xbf0c19a2, 0xbeccb328, 0x3e176ced,
        0x3f470d99, 0x3f7abb28, 0x3f800000, 0x00000000,
    ],
    [
        0x3f4c422a, 0x3f4c421f, 0x3f4c4207, 0x3f4c41cb, 0x3f4c413b, 0x3f4c3fad, 0x3f4c3a2f,
        0x3f4c2d40, 0x3f4c146a, 0x3f4bc341, 0x3f4ad08c, 0x3f48f8cf, 0x3f45fac7, 0x3f404e07,
        0x3f3b980f, 0x3f48dff3, 0x3f78b21b, 0x3fbb0704, 0x40019c32, 0x3fe536d6, 0x3f81331e,
        0x3e6c8684, 0x3c98f936, 0x00000000, 0x3f800000,
    ],
    [
        0xb62173f4, 0x3735e4cf, 0x37f2ff89, 0x388c23be, 0x3917535c, 0x39ab2ab0, 0x3a60fadb,
        0x3af9b960, 0x3b6e5491, 0x3c0a4ec5, 0x3ca5aa8c, 0x3d2138d9, 0x3d8737d4, 0x3ddfb660,
        0x3e0f27ab, 0x3d94004b, 0xbe0efdeb, 0xbf1d96c3, 0xbf89db58, 0xbf6d9897, 0xbef69fb8,
        0xbdc4f8a8, 0xbbde6422, 0x00000000, 0x00000000,
    ],
    [
        0xbe081a19, 0xbe084570, 0xbe08639b, 0xbe089837, 0xbe08f409, 0xbe09ab95, 0xbe0b66d0,
        0xbe0e400a, 0xbe124df8, 0xbe1bde02, 0xbe2f19c9, 0xbe4931bf, 0xbe685fbc, 0xbe89c95f,
        0xbe96cbca, 0xbe8044aa, 0xbe0550f2, 0x3dcfd6a1, 0x3e94c826, 0x3e79345f, 0x3decec91,
        0x3ca46568, 0x3aa1e00a, 0x00000000, 0x00000000,
    ],
    [
        0xba3d61db, 0x39f097a3, 0x3a5845dc, 0x3ab1fa35, 0x3b0cefb8, 0x3b653ab6, 0x3bcae527,
        0x3c221712, 0x3c6c5840, 0x3cc0a703, 0x3d1dcc19, 0x3d63656d, 0x3d955907, 0x3dbf9910,
        0x3dd53f69, 0x3db7dcef, 0x3d639ebe, 0xba6ede48, 0xbd22be69, 0xbd041cf1, 0xbc64f5ab,
        0xbb097a32, 0xb8ebf380, 0x00000000, 0x00000000,
    ],
    [
        0x3cb7d80c, 0x3c9b6050, 0x3c978d11, 0x3c92e850, 0x3c8d058b, 0x3c848454, 0x3c6cd623,
        0x3c4c824b, 0x3c2a7935, 0x3be0b390, 0x3b0651ac, 0xbb232f53, 0xbbd42fa0, 0xbc2c5366,
        0xbc492c9e, 0xbc2a7aa6, 0xbbd55d04, 0xba823a76, 0x3b102aa8, 0x3ae25a7e, 0x3a31f792,
        0x38b84375, 0x3689bb5a, 0x00000000, 0x00000000,
    ],
];
/// `gelu_erf_idx_bias` and `gelu_erf_rbound` (≈ 5.543).
const MINIMAX_IDX_BIAS: u32 = 0xc21fffff;
const MINIMAX_RBOUND: f32 = f32::from_bits(0x40b15cee);

/// oneDNN's gelu_erf forward on an AVX-512 machine, one element
/// (`gelu_erf_minimax_approx_compute_vector_fwd`).
///
/// Order: `a = |s|`; the polynomial's index `i = (bits(a) + 0xc21fffff) >> 21` (wrapping
/// 32-bit add, arithmetic shift), clamped to 1..=24, and 23 (the constant 1) where
/// `a > 5.543` (0x40b15cee); `p = c5[i]`, then `p = fma(p, a, c_d[i])` for d = 4 down to 0;
/// the sign of `s` xor-ed into `p`; `p = p + 1`; `(s·p)·0.5`.
#[inline(always)]
pub(super) fn onednn_gelu_avx512_core(s: f32) -> f32 {
    let a = f32::from_bits(s.to_bits() & 0x7fff_ffff);
    let mut i = (a.to_bits().wrapping_add(MINIMAX_IDX_BIAS) as i32) >> 21;
    i = i.clamp(1, 24);
    if MINIMAX_RBOUND < a {
        i = 23;
    }
    let i = i as usize;
    let c = |d: usize| f32::from_bits(MINIMAX[d][i]);
    let mut p = c(5);
    for d in (0..5).rev() {
        p = fma(p, a, c(d));
    }
    let p = xor_sign(p, s.to_bits() & 0x8000_0000) + 1.0;
    (s * p) * 0.5
}

/// oneDNN's gelu_erf derivative, one element, both ISAs (`gelu_erf_compute_vector_bwd`); the
/// primitive's backward multiplies it by `dy` (`jit_uni_eltwise.cpp`: `src·diff_dst`).
///
/// Order: `r = s·(1/√2)`; `q = exp(−(r·r))` (`onednn_exp`); `t = (r·(1/√π))·q`;
/// `w = 1 / fma(p, |r|, 1)`; `erf = fma((−q)·w, r(w), 1)` with the sign of `r` xor-ed in;
/// `fma(erf, 0.5, t + 0.5)`.
#[inline(always)]
pub(super) fn onednn_gelu_grad_core(s: f32) -> f32 {
    let r = s * DNNL_SQRT1_2;
    let q = onednn_exp(-(r * r));
    let t = (r * DNNL_1_SQRT_PI) * q;
    let w = 1.0 / fma(DNNL_AS_P, r.abs(), 1.0);
    let erf = xor_sign(onednn_as_erf(-q, w), r.to_bits() & 0x8000_0000);
    fma(erf, 0.5, t + 0.5)
}

/// Which oneDNN JIT kernel runs the exact gelu's forward: the ISA oneDNN dispatches to on the
/// machine (`ONEDNN_MAX_CPU_ISA` caps it), independent of ATen's `ATEN_CPU_CAPABILITY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OneDnnIsa {
    /// AVX2 and FMA (no AVX-512): the A&S 7.1.26 kernel.
    Avx2,
    /// AVX-512 (`avx512_core` and up): the minimax kernel. The machines the fixtures were
    /// measured on.
    #[default]
    Avx512,
}

/// `F.gelu` of one element of a float32 CPU tensor of at least two elements, as torch 2.15
/// computes it through oneDNN on `isa` (`onednn_gelu_avx512_core`,
/// `onednn_gelu_avx2_core` state the orders).
#[inline]
pub fn onednn_gelu(x: f32, isa: OneDnnIsa) -> f32 {
    match isa {
        OneDnnIsa::Avx512 => fma_dispatch!(
            Isa::detected(),
            fn run(x: f32) -> f32 {
                onednn_gelu_avx512_core(x)
            }
        ),
        OneDnnIsa::Avx2 => fma_dispatch!(
            Isa::detected(),
            fn run(x: f32) -> f32 {
                onednn_gelu_avx2_core(x)
            }
        ),
    }
}

/// The derivative of gelu at one element of a float32 CPU tensor of at least two elements, as
/// torch 2.15's `gelu_backward` computes it through oneDNN (either ISA;
/// `onednn_gelu_grad_core` states the order); the gradient is this times `dy`.
#[inline]
pub fn onednn_gelu_grad(x: f32) -> f32 {
    fma_dispatch!(
        Isa::detected(),
        fn run(x: f32) -> f32 {
            onednn_gelu_grad_core(x)
        }
    )
}

/// [`onednn_gelu`] of every element of `x`, in place (one dispatch for the slice).
pub fn onednn_gelu_slice(x: &mut [f32], isa: OneDnnIsa) {
    match isa {
        OneDnnIsa::Avx512 => fma_dispatch!(
            Isa::detected(),
            fn run(x: &mut [f32]) -> () {
                for v in x.iter_mut() {
                    *v = onednn_gelu_avx512_core(*v);
                }
            }
        ),
        OneDnnIsa::Avx2 => fma_dispatch!(
            Isa::detected(),
            fn run(x: &mut [f32]) -> () {
                for v in x.iter_mut() {
                    *v = onednn_gelu_avx2_core(*v);
                }
            }
        ),
    }
}

/// torch's `gelu_backward` through oneDNN on a slice: `dx = gelu′(x)·dy` per element
/// ([`onednn_gelu_grad`], then the primitive's product; one dispatch for the slice).
pub fn onednn_gelu_backward_slice(dy: &[f32], x: &[f32], dx: &mut [f32]) {
    fma_dispatch!(
        Isa::detected(),
        fn run(dy: &[f32], x: &[f32], dx: &mut [f32]) -> () {
            for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
                *d = onednn_gelu_grad_core(v) * g;
            }
        }
    )
}

// ---------------------------------------------------------------------------
// glibc 2.36 expf (sysdeps/ieee754/flt-32/e_expf.c, FMA build)
// ---------------------------------------------------------------------------

/// `__exp2f_data.tab` (`sysdeps/ieee754/flt-32/e_exp2f_data.c`): the bits of 2^(i/32) minus
/// `i << 47`, for `i` in 0..32.
const EXP2F_TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `__exp2f_data.invln2_scaled`: `0x1.71547652b82fep+0 * 32`.
const EXPF_INVLN2N: f64 = f64::from_bits(0x3ff7_1547_652b_82fe) * 32.0;
/// `__exp2f_data.shift`: `0x1.8p+52`.
const EXPF_SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
/// `__exp2f_data.poly_scaled`: `0x1.c6af84b912394p-5 / 32³`, `0x1.ebfce50fac4f3p-3 / 32²`,
/// `0x1.62e42ff0c52d6p-1 / 32` (each division exact: a power of two).
const EXPF_C0: f64 = f64::from_bits(0x3fac_6af8_4b91_2394) / 32768.0;
const EXPF_C1: f64 = f64::from_bits(0x3fce_bfce_50fa_c4f3) / 1024.0;
const EXPF_C2: f64 = f64::from_bits(0x3fe6_2e42_ff0c_52d6) / 32.0;

/// glibc 2.36's `expf` (FMA build), one value.
///
/// Order: specials first, on `top = (bits(x) >> 20) & 0x7ff` ≥ `0x42b` (|x| ≥ 88 or NaN):
/// −∞ → +0; ±∞ or NaN → `x + x`; x > 0x1.62e42ep6 → `0x1p97f·0x1p97f` (+∞);
/// x < −0x1.9fe368p6 → `0x1p-95f·0x1p-95f` (+0); x < −0x1.9d1d9ep6 → `0x1.4p-75f·0x1.4p-75f`
/// (2⁻¹⁴⁹). Otherwise, in f64 with `xd = x`: `kd = fma(InvLn2N, xd, SHIFT)`, `ki = bits(kd)`,
/// `kd = kd − SHIFT`, `r = fma(InvLn2N, xd, −kd)` (GCC contracts `z = InvLn2N·xd` into both of
/// its uses); `s = from_bits(TAB[ki % 32] + (ki << 47))`; `z = fma(C0, r, C1)`; `r2 = r·r`;
/// `y = fma(C2, r, 1)`; `y = fma(z, r2, y)`; `y = y·s`; the result `y` rounded to f32.
#[inline(always)]
pub(super) fn glibc_expf_core(x: f32) -> f32 {
    let abstop = (x.to_bits() >> 20) & 0x7ff;
    if abstop >= 0x42b {
        if x == f32::NEG_INFINITY {
            return 0.0;
        }
        if abstop >= 0x7f8 {
            return x + x;
        }
        if x > f32::from_bits(0x42b1_7217) {
            return overflow_f32(f32::from_bits(0x7000_0000));
        }
        if x < f32::from_bits(0xc2cf_f1b4) {
            return overflow_f32(f32::from_bits(0x1000_0000));
        }
        if x < f32::from_bits(0xc2ce_8ecf) {
            return overflow_f32(f32::from_bits(0x1a20_0000));
        }
    }
    let xd = f64::from(x);
    let kd0 = EXPF_INVLN2N.mul_add(xd, EXPF_SHIFT);
    let ki = kd0.to_bits();
    let kd = kd0 - EXPF_SHIFT;
    let r = EXPF_INVLN2N.mul_add(xd, -kd);
    let t = EXP2F_TAB[(ki % 32) as usize].wrapping_add(ki << 47);
    let s = f64::from_bits(t);
    let z = EXPF_C0.mul_add(r, EXPF_C1);
    let r2 = r * r;
    let y = EXPF_C2.mul_add(r, 1.0);
    let y = z.mul_add(r2, y);
    (y * s) as f32
}

/// glibc's `xflowf(0, y)`: `y·y` rounded to f32 (an overflow, underflow or smallest
/// subnormal by construction).
#[inline(always)]
fn overflow_f32(y: f32) -> f32 {
    y * y
}

/// glibc 2.36's `expf` on x86-64 with FMA (`glibc_expf_core` states its order): what
/// `std::exp(float)` returns in the scalar part of torch's silu and gelu backward kernels.
#[inline]
pub fn glibc_expf(x: f32) -> f32 {
    fma_dispatch!(
        Isa::detected(),
        fn run(x: f32) -> f32 {
            glibc_expf_core(x)
        }
    )
}

// ---------------------------------------------------------------------------
// glibc 2.36 erff (sysdeps/ieee754/flt-32/s_erff.c: Sun fdlibm, float version)
// ---------------------------------------------------------------------------

const ERX: f32 = f32::from_bits(0x3f58560b);
const EFX: f32 = f32::from_bits(0x3e0375d4);
const PP: [f32; 5] = [
    f32::from_bits(0x3e0375d4),
    f32::from_bits(0xbea66beb),
    f32::from_bits(0xbce9528f),
    f32::from_bits(0xbbbd1489),
    f32::from_bits(0xb7c756b1),
];
const QQ: [f32; 5] = [
    f32::from_bits(0x3ecbbbce),
    f32::from_bits(0x3d852a63),
    f32::from_bits(0x3ba68116),
    f32::from_bits(0x390aee49),
    f32::from_bits(0xb684e21a),
];
const PA: [f32; 7] = [
    f32::from_bits(0xbb1acdc6),
    f32::from_bits(0x3ed46805),
    f32::from_bits(0xbebe9208),
    f32::from_bits(0x3ea2fe54),
    f32::from_bits(0xbde31cc2),
    f32::from_bits(0x3d1151b3),
    f32::from_bits(0xbb0df9c0),
];
const QA: [f32; 6] = [
    f32::from_bits(0x3dd9f331),
    f32::from_bits(0x3f0a5785),
    f32::from_bits(0x3d931ae7),
    f32::from_bits(0x3e013307),
    f32::from_bits(0x3c5f6e13),
    f32::from_bits(0x3c445aa3),
];
const RA: [f32; 8] = [
    f32::from_bits(0xbc21a093),
    f32::from_bits(0xbf31a0b7),
    f32::from_bits(0xc128f022),
    f32::from_bits(0xc2798057),
    f32::from_bits(0xc322658c),
    f32::from_bits(0xc3389ae7),
    f32::from_bits(0xc2a2932b),
    f32::from_bits(0xc11d077e),
];
const SA: [f32; 8] = [
    f32::from_bits(0x419d35ce),
    f32::from_bits(0x4309a863),
    f32::from_bits(0x43d9486f),
    f32::from_bits(0x442158c9),
    f32::from_bits(0x43d6810b),
    f32::from_bits(0x42d9451f),
    f32::from_bits(0x40d23f7c),
    f32::from_bits(0xbd777f97),
];
const RB: [f32; 7] = [
    f32::from_bits(0xbc21a092),
    f32::from_bits(0xbf4c9dd4),
    f32::from_bits(0xc18e104b),
    f32::from_bits(0xc320a2ea),
    f32::from_bits(0xc41f6441),
    f32::from_bits(0xc480230b),
    f32::from_bits(0xc3f1c275),
];
const SB: [f32; 7] = [
    f32::from_bits(0x41f2b459),
    f32::from_bits(0x43a2e571),
    f32::from_bits(0x44c01759),
    f32::from_bits(0x4547fdbb),
    f32::from_bits(0x451f90ce),
    f32::from_bits(0x43ed43a7),
    f32::from_bits(0xc1b38712),
];

/// `c[0] + s·(c[1] + s·(… + s·c[n-1]))`, each operation rounded (no FMA: glibc's generic
/// x86-64 build).
#[inline(always)]
fn horner(c: &[f32], s: f32) -> f32 {
    let mut acc = c[c.len() - 1];
    for &k in c[..c.len() - 1].iter().rev() {
        acc = k + s * acc;
    }
    acc
}

/// `1 + s·(c[0] + s·(c[1] + … + s·c[n-1]))`, each operation rounded.
#[inline(always)]
fn horner1(c: &[f32], s: f32) -> f32 {
    1.0 + s * horner(c, s)
}

/// glibc 2.36's `erff`, one value: fdlibm's float erf (every operation an f32 operation,
/// rounded; glibc's x86-64 build of it has no FMA), its two exps `glibc_expf_core`.
///
/// Order, with `ix` the bits of |x|: NaN/±∞ → `(1 − 2·sign) + 1/x`. |x| < 0.84375:
/// below 2⁻²⁸ → `x + efx·x` (below 2⁻¹¹⁹: `0.0625·(16·x + (16·efx)·x)`); else `z = x·x`,
/// `r = pp0 + z·(pp1 + z·(pp2 + z·(pp3 + z·pp4)))`, `s = 1 + z·(qq1 + … + z·qq5)`,
/// `x + x·(r/s)`. |x| < 1.25: `s = |x| − 1`, `P = pa0 + s·(…)`, `Q = 1 + s·(qa1 + …)`,
/// `±(erx + P/Q)`. |x| ≥ 6: `±(1 − 1e-30)` (= ±1). Else `a = |x|`, `s = 1/(a·a)`, `R`, `S`
/// the `ra`/`sa` rationals in `s` below 1/0.35 (bits 0x4036db6e), the `rb`/`sb` ones from
/// there; `z` = `a` with its low 12 bits cleared;
/// `r = expf((−z)·z − 0.5625) · expf((z − a)·(z + a) + R/S)`; `1 − r/a`, or `r/a − 1` for a
/// negative `x`.
#[inline(always)]
pub(super) fn glibc_erff_core(x: f32) -> f32 {
    let hx = x.to_bits() as i32;
    let ix = hx & 0x7fff_ffff;
    if ix >= 0x7f80_0000 {
        let i = ((hx as u32) >> 31) << 1;
        return (1 - i as i32) as f32 + 1.0 / x;
    }
    if ix < 0x3f58_0000 {
        if ix < 0x3180_0000 {
            if ix < 0x0400_0000 {
                return 0.0625 * (16.0 * x + (16.0 * EFX) * x);
            }
            return x + EFX * x;
        }
        let z = x * x;
        let r = horner(&PP, z);
        let s = horner1(&QQ, z);
        let y = r / s;
        return x + x * y;
    }
    if ix < 0x3fa0_0000 {
        let s = x.abs() - 1.0;
        let p = horner(&PA, s);
        let q = horner1(&QA, s);
        return if hx >= 0 { ERX + p / q } else { -ERX - p / q };
    }
    if ix >= 0x40c0_0000 {
        const TINY: f32 = 1e-30;
        return if hx >= 0 { 1.0 - TINY } else { TINY - 1.0 };
    }
    let a = x.abs();
    let s = 1.0 / (a * a);
    let (r, q) = if ix < 0x4036_db6e {
        (horner(&RA, s), horner1(&SA, s))
    } else {
        (horner(&RB, s), horner1(&SB, s))
    };
    let z = f32::from_bits(a.to_bits() & 0xffff_f000);
    let e = glibc_expf_core(-z * z - 0.5625) * glibc_expf_core((z - a) * (z + a) + r / q);
    if hx >= 0 {
        1.0 - e / a
    } else {
        e / a - 1.0
    }
}

/// glibc 2.36's `erff` (`glibc_erff_core` states its order): what `std::erf(float)` returns
/// in the scalar part of torch's gelu kernels.
#[inline]
pub fn glibc_erff(x: f32) -> f32 {
    fma_dispatch!(
        Isa::detected(),
        fn run(x: f32) -> f32 {
            glibc_erff_core(x)
        }
    )
}

// ---------------------------------------------------------------------------
// glibc 2.36 tanhf and expm1f (sysdeps/ieee754/flt-32/s_tanhf.c, s_expm1f.c: Sun fdlibm)
// ---------------------------------------------------------------------------

const EXPM1_O_THRESHOLD: f32 = f32::from_bits(0x42b17180);
const EXPM1_LN2_HI: f32 = f32::from_bits(0x3f317180);
const EXPM1_LN2_LO: f32 = f32::from_bits(0x3717f7d1);
const EXPM1_INVLN2: f32 = f32::from_bits(0x3fb8aa3b);
const EXPM1_Q: [f32; 5] = [
    f32::from_bits(0xbd088889),
    f32::from_bits(0x3ad00d01),
    f32::from_bits(0xb8a670cd),
    f32::from_bits(0x36867e54),
    f32::from_bits(0xb457edbb),
];

/// glibc 2.36's `expm1f` (fdlibm's float `expm1`, every operation an f32 operation, rounded;
/// no FMA).
///
/// Order, with `ix` the bits of |x|: |x| ≥ 27·ln2: NaN → `x + x`, +∞ → x, −∞ → −1,
/// x > 88.7216796875 → `1e30·1e30` (+∞), x < 0 → `1e-30 − 1` (−1). Reduction for
/// |x| > 0.5·ln2: below 1.5·ln2 `k = ±1`, `hi = x ∓ ln2_hi`, `lo = ±ln2_lo`; else
/// `k = trunc(invln2·x ± 0.5)`, `hi = x − k·ln2_hi`, `lo = k·ln2_lo`; `x = hi − lo`,
/// `c = (hi − x) − lo`. |x| < 2⁻²⁵ → x. Then `hfx = 0.5·x`, `hxs = x·hfx`,
/// `r1 = 1 + hxs·(Q1 + hxs·(Q2 + hxs·(Q3 + hxs·(Q4 + hxs·Q5))))`, `t = 3 − r1·hfx`,
/// `e = hxs·((r1 − t)/(6 − x·t))`; k = 0 → `x − (x·e − hxs)`; else `e = x·(e − c) − c − hxs`
/// and fdlibm's reconstruction for k = −1, 1, ≤ −2 or > 56, < 23, and the rest (the exponent
/// added to the bits).
#[inline(always)]
fn glibc_expm1f_core(x0: f32) -> f32 {
    let bits = x0.to_bits();
    let xsb = bits & 0x8000_0000;
    let hx = bits & 0x7fff_ffff;
    let mut x = x0;
    if hx >= 0x4195_b844 {
        if hx >= 0x42b1_7218 {
            if hx > 0x7f80_0000 {
                return x + x;
            }
            if hx == 0x7f80_0000 {
                return if xsb == 0 { x } else { -1.0 };
            }
            if x > EXPM1_O_THRESHOLD {
                return 1.0e30_f32 * 1.0e30_f32;
            }
        }
        if xsb != 0 {
            return 1.0e-30_f32 - 1.0;
        }
    }
    let k: i32;
    let mut c = 0.0f32;
    if hx > 0x3eb1_7218 {
        let (hi, lo);
        if hx < 0x3f85_1592 {
            if xsb == 0 {
                hi = x - EXPM1_LN2_HI;
                lo = EXPM1_LN2_LO;
                k = 1;
            } else {
                hi = x + EXPM1_LN2_HI;
                lo = -EXPM1_LN2_LO;
                k = -1;
            }
        } else {
            let half = if xsb == 0 { 0.5 } else { -0.5 };
            k = (EXPM1_INVLN2 * x + half) as i32;
            let t = k as f32;
            hi = x - t * EXPM1_LN2_HI;
            lo = t * EXPM1_LN2_LO;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if hx < 0x3300_0000 {
        let t = 1.0e30_f32 + x;
        return x - (t - (1.0e30_f32 + x));
    } else {
        k = 0;
    }
    let hfx = 0.5 * x;
    let hxs = x * hfx;
    let [q1, q2, q3, q4, q5] = EXPM1_Q;
    let r1 = 1.0 + hxs * (q1 + hxs * (q2 + hxs * (q3 + hxs * (q4 + hxs * q5))));
    let t = 3.0 - r1 * hfx;
    let mut e = hxs * ((r1 - t) / (6.0 - x * t));
    if k == 0 {
        return x - (x * e - hxs);
    }
    e = x * (e - c) - c;
    e -= hxs;
    if k == -1 {
        return 0.5 * (x - e) - 0.5;
    }
    if k == 1 {
        return if x < -0.25 {
            -2.0 * (e - (x + 0.5))
        } else {
            1.0 + 2.0 * (x - e)
        };
    }
    let add_k = |y: f32| f32::from_bits((y.to_bits() as i32).wrapping_add(k << 23) as u32);
    if k <= -2 || k > 56 {
        let y = 1.0 - (e - x);
        return add_k(y) - 1.0;
    }
    if k < 23 {
        let t = f32::from_bits(0x3f80_0000 - (0x0100_0000 >> k));
        add_k(t - (e - x))
    } else {
        let t = f32::from_bits(((0x7f - k) as u32) << 23);
        let y = (x - (e + t)) + 1.0;
        add_k(y)
    }
}

/// glibc 2.36's `tanhf` (fdlibm's float `tanh`, every operation an f32 operation, rounded),
/// its expm1 `glibc_expm1f_core`.
///
/// Order, with `ix` the bits of |x|: NaN/±∞ → `1/x ± 1`; ±0 → x; |x| < 2⁻⁵⁵ → `x·(1 + x)`;
/// |x| ≥ 22 → ±(1 − 1e-30) (±1); |x| ≥ 1 → `z = 1 − 2/(expm1(2·|x|) + 2)`; else
/// `t = expm1(−2·|x|)`, `z = −t/(t + 2)`; the sign of x applied to z.
#[inline(always)]
pub(super) fn glibc_tanhf_core(x: f32) -> f32 {
    let jx = x.to_bits() as i32;
    let ix = jx & 0x7fff_ffff;
    if ix >= 0x7f80_0000 {
        return if jx >= 0 {
            1.0 / x + 1.0
        } else {
            1.0 / x - 1.0
        };
    }
    let z = if ix < 0x41b0_0000 {
        if ix == 0 {
            return x;
        }
        if ix < 0x2400_0000 {
            return x * (1.0 + x);
        }
        if ix >= 0x3f80_0000 {
            let t = glibc_expm1f_core(2.0 * x.abs());
            1.0 - 2.0 / (t + 2.0)
        } else {
            let t = glibc_expm1f_core(-2.0 * x.abs());
            -t / (t + 2.0)
        }
    } else {
        1.0 - 1.0e-30_f32
    };
    if jx >= 0 {
        z
    } else {
        -z
    }
}

/// glibc 2.36's `tanhf` (`glibc_tanhf_core` states its order): what `std::tanh(float)`
/// returns in the scalar remainder of ATen's tanh-approximate gelu kernels.
#[inline]
pub fn glibc_tanhf(x: f32) -> f32 {
    fma_dispatch!(
        Isa::detected(),
        fn run(x: f32) -> f32 {
            glibc_tanhf_core(x)
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `step`-th finite f32 bit pattern from +0 up, with its negative.
    fn sweep(step: u32) -> impl Iterator<Item = f32> {
        (0..0x7f80_0000u32)
            .step_by(step as usize)
            .flat_map(|b| [f32::from_bits(b), f32::from_bits(b | 0x8000_0000)])
    }

    #[test]
    fn onednn_gelu_is_within_its_approximations_error() {
        // Both forward kernels approximate erf to within a few 1e-7 (A&S 7.1.26: 1.5e-7 in
        // exact arithmetic; the minimax pieces are closer), and the derivative's A&S cdf the
        // same; with the f32 roundings of values of size max(1, |x|), 1e-6·max(1, |x|) bounds
        // the difference to the exact gelu and its derivative.
        for i in -8000..=8000 {
            let x = i as f32 / 1000.0;
            let x64 = f64::from(x);
            let g = 0.5 * x64 * (1.0 + libm::erf(x64 / 2f64.sqrt()));
            let pdf = libm::exp(-x64 * x64 / 2.0) / (2.0 * std::f64::consts::PI).sqrt();
            let dg = 0.5 * (1.0 + libm::erf(x64 / 2f64.sqrt())) + x64 * pdf;
            let tol = 1e-6 * x64.abs().max(1.0);
            for isa in [OneDnnIsa::Avx512, OneDnnIsa::Avx2] {
                let got = f64::from(onednn_gelu(x, isa));
                assert!((got - g).abs() < tol, "{isa:?} gelu({x}) = {got}, want {g}");
            }
            let got = f64::from(onednn_gelu_grad(x));
            assert!((got - dg).abs() < tol, "gelu'({x}) = {got}, want {dg}");
        }
        for isa in [OneDnnIsa::Avx512, OneDnnIsa::Avx2] {
            assert_eq!(onednn_gelu(0.0, isa).to_bits(), 0);
            // −0's sign is torch's in the fixtures (tests/suite/activations_fixture.rs).
            assert_eq!(onednn_gelu(-0.0, isa), 0.0);
            assert!(onednn_gelu(f32::NAN, isa).is_nan());
            assert!(onednn_gelu(f32::NEG_INFINITY, isa).is_nan());
        }
        // As torch 2.15 returns them: the minimax kernel's saturated piece is the polynomial
        // 1 + 0·x, and 0·∞ is NaN; A&S gives ∞.
        assert!(onednn_gelu(f32::INFINITY, OneDnnIsa::Avx512).is_nan());
        assert_eq!(onednn_gelu(f32::INFINITY, OneDnnIsa::Avx2), f32::INFINITY);
        assert!(onednn_gelu_grad(f32::INFINITY).is_nan());
    }

    #[test]
    fn glibc_expf_is_within_its_stated_error_of_exp() {
        // glibc states 0.502 ulp for its expf (nearest rounding); the f64 `libm::exp` is far
        // more accurate than that, so 0.51 ulp of the f32 result bounds the difference.
        for x in sweep(997) {
            let got = glibc_expf(x);
            let want = libm::exp(f64::from(x));
            if !(-103.0..88.0).contains(&x) {
                continue;
            }
            let ulp = f64::from(f32::from_bits(got.to_bits() + 1) - got);
            assert!(
                (f64::from(got) - want).abs() <= 0.51 * ulp,
                "expf({x:e}) = {got:e}, exp = {want:e}"
            );
        }
        assert_eq!(glibc_expf(0.0), 1.0);
        assert_eq!(glibc_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(glibc_expf(f32::INFINITY), f32::INFINITY);
        assert_eq!(glibc_expf(89.0), f32::INFINITY);
        assert_eq!(glibc_expf(-104.0), 0.0);
        assert_eq!(glibc_expf(-103.5), f32::from_bits(1));
        assert!(glibc_expf(f32::NAN).is_nan());
    }

    #[test]
    fn glibc_tanhf_is_within_its_stated_error_of_tanh() {
        // fdlibm's float tanh is not correctly rounded: glibc's x86-64 ulps table lists 2 ulps
        // for tanhf, and the C library itself returns 0.22024225 for tanh(0.22391066), 2.2 ulps
        // from 0.2202422167; 3 ulps bound it.
        for x in sweep(1021) {
            let got = glibc_tanhf(x);
            let want = libm::tanh(f64::from(x));
            let ulp = f64::from(f32::from_bits(got.abs().to_bits() + 1) - got.abs());
            assert!(
                (f64::from(got) - want).abs() <= 3.0 * ulp,
                "tanhf({x:e}) = {got:e}, tanh = {want:e}"
            );
        }
        assert_eq!(glibc_tanhf(f32::INFINITY), 1.0);
        assert_eq!(glibc_tanhf(f32::NEG_INFINITY), -1.0);
        assert_eq!(glibc_tanhf(-0.0).to_bits(), 0x8000_0000);
        assert!(glibc_tanhf(f32::NAN).is_nan());
    }

    #[test]
    fn glibc_erff_is_within_its_stated_error_of_erf() {
        // fdlibm's float erf is within about 1 ulp; 2 ulps of the result bound it with room.
        for x in sweep(1009) {
            let got = glibc_erff(x);
            let want = libm::erf(f64::from(x));
            let ulp = f64::from(f32::from_bits(got.abs().to_bits() + 1) - got.abs());
            assert!(
                (f64::from(got) - want).abs() <= 2.0 * ulp,
                "erff({x:e}) = {got:e}, erf = {want:e}"
            );
        }
        assert_eq!(glibc_erff(f32::INFINITY), 1.0);
        assert_eq!(glibc_erff(f32::NEG_INFINITY), -1.0);
        assert_eq!(glibc_erff(0.0).to_bits(), 0);
        assert_eq!(glibc_erff(-0.0).to_bits(), 0x8000_0000);
        assert!(glibc_erff(f32::NAN).is_nan());
    }
}
