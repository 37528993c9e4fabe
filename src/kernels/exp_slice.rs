//! The f64 `exp` of a slice, bit for bit `libm::exp` (the pure-Rust libm, 0.2.x) of every
//! element, eight lanes at a time where the CPU has AVX-512F.
//!
//! **The definition** is [`exp_slice_portable`]: `libm::exp` element by element. libm's
//! `exp` is FreeBSD's `e_exp.c` (Sun, 2004); its steps, all basic IEEE operations, are
//! (for 2⁻²⁸ < |x| < 708.39…, high word of |x| in (0x3e300000, 0x4086232b)):
//! 1. k = ±1 when |x| < 1.5·ln2 (high word < 0x3ff0a2b2) and |x| > 0.5·ln2, else
//!    k = trunc(x·(1/ln2) + ±½) (the sign of x), and k = 0 for |x| ≤ 0.5·ln2 (high word
//!    ≤ 0x3fd62e42);
//! 2. hi = x − k·ln2hi, lo = k·ln2lo, r = hi − lo (for k = 0 these are x, +0 and x: the same
//!    operations give the same values);
//! 3. z = r·r, c = r − z·(P1 + z·(P2 + z·(P3 + z·(P4 + z·P5)))),
//!    y = 1 + ((r·c/(2 − c) − lo) + hi);
//! 4. the result is y·2ᵏ, one multiplication by an exact power of two (libm's `scalbn` for
//!    −1022 ≤ k ≤ 1023, which step 1 guarantees in this range).
//!
//! Each product, sum and quotient is rounded on its own (no FMA). [`exp_slice`] evaluates
//! exactly those operations per lane; lanes outside the range (|x| ≤ 2⁻²⁸, |x| ≥ 708.39…,
//! NaN, ±∞) are sent to `libm::exp` itself. The constants are libm's, by bit pattern. The
//! vector lanes are checked against libm (every branch and range edge, and 11 million random
//! inputs) in `tests/isa_paths.rs`.

use super::isa::Isa;

/// ln2 split: the high part has trailing zeros, so k·LN2HI is exact for |k| < 2²⁰. The
/// constants are libm's, given by their bit patterns.
const LN2HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // 6.93147180369123816490e-01
const LN2LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76); // 1.90821492927058770002e-10
const INVLN2: f64 = f64::from_bits(0x3ff7_1547_652b_82fe); // 1.44269504088896338700e+00
const P1: f64 = f64::from_bits(0x3fc5_5555_5555_553e); // 1.66666666666666019037e-01
const P2: f64 = f64::from_bits(0xbf66_c16c_16be_bd93); // -2.77777777770155933842e-03
const P3: f64 = f64::from_bits(0x3f11_566a_af25_de2c); // 6.61375632143793436117e-05
const P4: f64 = f64::from_bits(0xbebb_bd41_c5d2_6bf1); // -1.65339022054652515390e-06
const P5: f64 = f64::from_bits(0x3e66_3769_72be_a4d0); // 4.13813679705723846039e-08

/// `xs[i] = exp(xs[i])` for every element, bit for bit [`exp_slice_portable`] (see the
/// module doc), vectorized where the CPU has AVX-512F.
pub fn exp_slice(xs: &mut [f64]) {
    exp_slice_on(Isa::detected(), xs)
}

/// [`exp_slice`] on the compilation `isa` names: the AVX-512F kernel from
/// [`Level::Avx512`](super::isa::Level::Avx512) on, else [`exp_slice_portable`].
pub fn exp_slice_on(isa: Isa, xs: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { exp_slice_avx512(xs) };
        }
    }
    let _ = isa;
    exp_slice_portable(xs)
}

/// The definition of [`exp_slice`]: `libm::exp` of each element.
pub fn exp_slice_portable(xs: &mut [f64]) {
    for x in xs {
        *x = libm::exp(*x);
    }
}

/// Eight elements at a time ([`super::avx512::map_blocks`]), lanes outside the range
/// recomputed by libm.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_slice_avx512(xs: &mut [f64]) {
    super::avx512::map_blocks!(xs, exp8, libm::exp);
}

/// Steps 1–4 of the module doc on eight lanes, and the mask of the lanes inside the range
/// they cover (the others' values are to be replaced).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp8(x: std::arch::x86_64::__m512d) -> (std::arch::x86_64::__m512d, u8) {
    use std::arch::x86_64::*;
    // High word of |x|, as an unsigned 64-bit lane value.
    let bits = _mm512_castpd_si512(x);
    let hx = _mm512_and_si512(
        _mm512_srli_epi64::<32>(bits),
        _mm512_set1_epi64(0x7fff_ffff),
    );
    let inside = _mm512_cmpgt_epu64_mask(hx, _mm512_set1_epi64(0x3e30_0000))
        & _mm512_cmplt_epu64_mask(hx, _mm512_set1_epi64(0x4086_232b));
    let big = _mm512_cmpge_epu64_mask(hx, _mm512_set1_epi64(0x3ff0_a2b2));
    let mid = _mm512_cmpgt_epu64_mask(hx, _mm512_set1_epi64(0x3fd6_2e42));
    let negative = _mm512_cmplt_pd_mask(x, _mm512_setzero_pd());
    // k: trunc(INVLN2·x ± ½) for big lanes, ±1 for the others above 0.5·ln2, else 0.
    let half = _mm512_mask_blend_pd(negative, _mm512_set1_pd(0.5), _mm512_set1_pd(-0.5));
    let one = _mm512_mask_blend_pd(negative, _mm512_set1_pd(1.0), _mm512_set1_pd(-1.0));
    let t = _mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd(INVLN2), x), half);
    let kbig = _mm512_roundscale_pd::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(t);
    let k = _mm512_mask_blend_pd(big, one, kbig);
    let k = _mm512_maskz_mov_pd(mid, k);
    let hi = _mm512_sub_pd(x, _mm512_mul_pd(k, _mm512_set1_pd(LN2HI)));
    let lo = _mm512_mul_pd(k, _mm512_set1_pd(LN2LO));
    let r = _mm512_sub_pd(hi, lo);
    let z = _mm512_mul_pd(r, r);
    let mut poly = _mm512_set1_pd(P5);
    for p in [P4, P3, P2, P1] {
        poly = _mm512_add_pd(_mm512_set1_pd(p), _mm512_mul_pd(z, poly));
    }
    let c = _mm512_sub_pd(r, _mm512_mul_pd(z, poly));
    let q = _mm512_div_pd(_mm512_mul_pd(r, c), _mm512_sub_pd(_mm512_set1_pd(2.0), c));
    let y = _mm512_add_pd(_mm512_set1_pd(1.0), _mm512_add_pd(_mm512_sub_pd(q, lo), hi));
    // 2^k from its bits, (k + 1023) << 52, k in [-1022, 1023] inside the range (lanes
    // outside it are replaced). The integer k + 1023 is read off the significand of
    // (k + 1023) + 2^52 (both sums exact), all in AVX-512F.
    const TWO52: f64 = 4_503_599_627_370_496.0;
    let biased = _mm512_add_pd(
        _mm512_add_pd(k, _mm512_set1_pd(1023.0)),
        _mm512_set1_pd(TWO52),
    );
    let ki = _mm512_sub_epi64(
        _mm512_castpd_si512(biased),
        _mm512_set1_epi64(TWO52.to_bits() as i64),
    );
    let scale = _mm512_castsi512_pd(_mm512_slli_epi64::<52>(ki));
    (_mm512_mul_pd(y, scale), inside)
}
