//! The f64 `tanh` of a slice, bit for bit `libm::tanh` (the pure-Rust libm, 0.2.x) of every
//! element, eight lanes at a time where the CPU has AVX-512F. The float64 ground truth's tanh
//! layers run through it. The vector lanes are checked against libm (every branch and range
//! edge, and 11 million random inputs) in `tests/isa_paths.rs`.
//!
//! **The definition** is [`tanh64_slice_portable`]: `libm::tanh` element by element. libm's
//! `tanh` is musl's `tanh.c` over FreeBSD's `s_expm1.c` (Sun, 1993). With a = |x| and w the
//! high word of a, for 2⁻⁵⁵ ≤ a < 38.82…/2 (w in [0x3c800000, 0x4033687a)) its steps, all
//! basic IEEE operations, are:
//! 1. y = 2a when w > 0x3fd058ae (a > ln(5/3)/2), else y = −2a (both exact);
//! 2. t = expm1(y), in the steps of `s_expm1.c` (below);
//! 3. tanh(a) = 1 − 2/(t + 2) when w > 0x3fe193ea (a > ln(3)/2), t/(t + 2) when
//!    0x3fd058ae < w ≤ 0x3fe193ea, and −t/(t + 2) otherwise; the sign of x is put back last.
//!
//! expm1(y), with hx the high word of |y| (w + 0x00100000 here: doubling a normal number
//! adds one to its exponent), for 2⁻⁵⁴ ≤ |y| < 56·ln2 (which step 1's range guarantees):
//! 1. k = 0, c = 0 and r = y when hx ≤ 0x3fd62e42 (|y| ≤ 0.5·ln2); k = ±1 (the sign of y) when
//!    hx < 0x3ff0a2b2 (|y| < 1.5·ln2); else k = trunc(y·(1/ln2) + ½) (y > 0 here). Then
//!    hi = y − k·ln2hi, lo = k·ln2lo, r = hi − lo, c = (hi − r) − lo (k·ln2hi is exact, and
//!    for k = ±1 these are libm's y ∓ ln2hi and ±ln2lo);
//! 2. hfx = ½·r, hxs = r·hfx, r1 = 1 + hxs·(Q1 + hxs·(Q2 + hxs·(Q3 + hxs·(Q4 + hxs·Q5)))),
//!    t = 3 − r1·hfx, e = hxs·((r1 − t)/(6 − r·t));
//! 3. k = 0: r − (r·e − hxs). Otherwise e' = (r·(e − c) − c) − hxs and
//!    k = −1: ½·(r − e') − ½; k = 1: −2·(e' − (r + ½)) when r < −¼, else 1 + 2·(r − e');
//!    2 ≤ k < 20: (r − e' + (1 − 2⁻ᵏ))·2ᵏ; 20 ≤ k ≤ 56: (r − (e' + 2⁻ᵏ) + 1)·2ᵏ.
//!
//! Each product, sum and quotient is rounded on its own (no FMA). [`tanh64_slice`] evaluates
//! exactly those operations per lane and selects per lane where the scalar code branches;
//! lanes outside the range (a < 2⁻⁵⁵, including ±0 and subnormals; a ≥ 19.41…; NaN; ±∞) are
//! sent to `libm::tanh` itself. The constants are libm's, by bit pattern.

use super::isa::Isa;

/// ln2 split: the high part has trailing zeros, so k·LN2HI is exact for |k| < 2²⁰.
const LN2HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // 6.93147180369123816490e-01
const LN2LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76); // 1.90821492927058770002e-10
const INVLN2: f64 = f64::from_bits(0x3ff7_1547_652b_82fe); // 1.44269504088896338700e+00
const Q1: f64 = f64::from_bits(0xbfa1_1111_1111_10f4); // -3.33333333333331316428e-02
const Q2: f64 = f64::from_bits(0x3f5a_01a0_19fe_5585); // 1.58730158725481460165e-03
const Q3: f64 = f64::from_bits(0xbf14_ce19_9eaa_dbb7); // -7.93650757867487942473e-05
const Q4: f64 = f64::from_bits(0x3ed0_cfca_86e6_5239); // 4.00821782732936239552e-06
const Q5: f64 = f64::from_bits(0xbe8a_fdb7_6e09_c32d); // -2.01099218183624371326e-07

/// High-word bounds of |x| for the vector lanes: [LOW, HIGH).
const LOW: u64 = 0x3c80_0000; // 2^-55
const HIGH: u64 = 0x4033_687a; // 56·ln2 / 2
/// tanh's branch points (high word of |x|): ln(5/3)/2 and ln(3)/2.
const W_SMALL: u64 = 0x3fd0_58ae;
const W_LARGE: u64 = 0x3fe1_93ea;
/// expm1's reduction points (high word of |y|): 0.5·ln2 and 1.5·ln2.
const HX_HALF: u64 = 0x3fd6_2e42;
const HX_THREE_HALVES: u64 = 0x3ff0_a2b2;

/// `xs[i] = tanh(xs[i])` for every element, bit for bit [`tanh64_slice_portable`] (see the
/// module doc), vectorized where the CPU has AVX-512F.
pub fn tanh64_slice(xs: &mut [f64]) {
    tanh64_slice_on(Isa::detected(), xs)
}

/// [`tanh64_slice`] on the compilation `isa` names: the AVX-512F kernel from
/// [`Level::Avx512`](super::isa::Level::Avx512) on, else [`tanh64_slice_portable`].
pub fn tanh64_slice_on(isa: Isa, xs: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { tanh64_slice_avx512(xs) };
        }
    }
    let _ = isa;
    tanh64_slice_portable(xs)
}

/// The definition of [`tanh64_slice`]: `libm::tanh` of each element.
pub fn tanh64_slice_portable(xs: &mut [f64]) {
    for x in xs {
        *x = libm::tanh(*x);
    }
}

/// Eight elements at a time ([`super::avx512::map_blocks`]), lanes outside the range
/// recomputed by libm.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tanh64_slice_avx512(xs: &mut [f64]) {
    super::avx512::map_blocks!(xs, tanh8, libm::tanh);
}

/// The module doc's steps on eight lanes, and the mask of the lanes inside the range they
/// cover (the others' values are to be replaced).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tanh8(x: std::arch::x86_64::__m512d) -> (std::arch::x86_64::__m512d, u8) {
    use std::arch::x86_64::*;
    let set = _mm512_set1_pd;
    let word = |v: u64| _mm512_set1_epi64(v as i64);
    let sign_bit = word(1 << 63);
    let bits = _mm512_castpd_si512(x);
    let a = _mm512_castsi512_pd(_mm512_andnot_si512(sign_bit, bits));
    let w = _mm512_srli_epi64::<32>(_mm512_castpd_si512(a));
    let inside = _mm512_cmpge_epu64_mask(w, word(LOW)) & _mm512_cmplt_epu64_mask(w, word(HIGH));
    let large = _mm512_cmpgt_epu64_mask(w, word(W_LARGE));
    let small = !_mm512_cmpgt_epu64_mask(w, word(W_SMALL));
    // tanh step 1: y = 2a, or −2a for the small branch.
    let two_a = _mm512_add_pd(a, a);
    let y = negate_where(small, two_a);
    // expm1 step 1: k as a float (0, ±1, or trunc(y/ln2 + ½) for y ≥ 1.5·ln2 > 0).
    let hx = _mm512_add_epi64(w, word(0x0010_0000));
    let mid = _mm512_cmpgt_epu64_mask(hx, word(HX_HALF));
    let big = _mm512_cmpge_epu64_mask(hx, word(HX_THREE_HALVES));
    let unit = _mm512_mask_blend_pd(small, set(1.0), set(-1.0));
    let t = _mm512_add_pd(_mm512_mul_pd(set(INVLN2), y), set(0.5));
    let kbig = _mm512_roundscale_pd::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(t);
    let k = _mm512_maskz_mov_pd(mid, _mm512_mask_blend_pd(big, unit, kbig));
    let hi = _mm512_sub_pd(y, _mm512_mul_pd(k, set(LN2HI)));
    let lo = _mm512_mul_pd(k, set(LN2LO));
    let r = _mm512_sub_pd(hi, lo);
    let c = _mm512_sub_pd(_mm512_sub_pd(hi, r), lo);
    // expm1 step 2.
    let hfx = _mm512_mul_pd(set(0.5), r);
    let hxs = _mm512_mul_pd(r, hfx);
    let mut poly = set(Q5);
    for q in [Q4, Q3, Q2, Q1] {
        poly = _mm512_add_pd(set(q), _mm512_mul_pd(hxs, poly));
    }
    let r1 = _mm512_add_pd(set(1.0), _mm512_mul_pd(hxs, poly));
    let t = _mm512_sub_pd(set(3.0), _mm512_mul_pd(r1, hfx));
    let e = _mm512_mul_pd(
        hxs,
        _mm512_div_pd(
            _mm512_sub_pd(r1, t),
            _mm512_sub_pd(set(6.0), _mm512_mul_pd(r, t)),
        ),
    );
    // expm1 step 3, every case, then the one each lane's k selects.
    let k0 = _mm512_sub_pd(r, _mm512_sub_pd(_mm512_mul_pd(r, e), hxs));
    let e = _mm512_sub_pd(_mm512_sub_pd(_mm512_mul_pd(r, _mm512_sub_pd(e, c)), c), hxs);
    let r_e = _mm512_sub_pd(r, e);
    let km1 = _mm512_sub_pd(_mm512_mul_pd(set(0.5), r_e), set(0.5));
    let k1_low = _mm512_mul_pd(set(-2.0), _mm512_sub_pd(e, _mm512_add_pd(r, set(0.5))));
    let k1_high = _mm512_add_pd(set(1.0), _mm512_mul_pd(set(2.0), r_e));
    let k1 = _mm512_mask_blend_pd(_mm512_cmplt_pd_mask(r, set(-0.25)), k1_high, k1_low);
    // 2^k and 2^-k from their bits, (1023 ± k) << 52, k in [2, 56] where they are used. The
    // integer k is read off the significand of k + 2^52 (an exact sum).
    const TWO52: f64 = 4_503_599_627_370_496.0;
    let ki = _mm512_sub_epi64(
        _mm512_castpd_si512(_mm512_add_pd(k, set(TWO52))),
        word(TWO52.to_bits()),
    );
    let twopk = _mm512_castsi512_pd(_mm512_slli_epi64::<52>(_mm512_add_epi64(word(1023), ki)));
    let uf = _mm512_castsi512_pd(_mm512_slli_epi64::<52>(_mm512_sub_epi64(word(1023), ki)));
    let below20 = _mm512_mul_pd(_mm512_add_pd(r_e, _mm512_sub_pd(set(1.0), uf)), twopk);
    let from20 = _mm512_mul_pd(
        _mm512_add_pd(_mm512_sub_pd(r, _mm512_add_pd(e, uf)), set(1.0)),
        twopk,
    );
    let mut em1 = _mm512_mask_blend_pd(_mm512_cmplt_pd_mask(k, set(20.0)), from20, below20);
    em1 = _mm512_mask_blend_pd(_mm512_cmpeq_pd_mask(k, set(1.0)), em1, k1);
    em1 = _mm512_mask_blend_pd(_mm512_cmpeq_pd_mask(k, set(-1.0)), em1, km1);
    em1 = _mm512_mask_blend_pd(_mm512_cmpeq_pd_mask(k, set(0.0)), em1, k0);
    // tanh step 3, then the sign of x.
    let t2 = _mm512_add_pd(em1, set(2.0));
    let ratio = _mm512_div_pd(em1, t2);
    let ratio = negate_where(small, ratio);
    let near_one = _mm512_sub_pd(set(1.0), _mm512_div_pd(set(2.0), t2));
    let th = _mm512_mask_blend_pd(large, ratio, near_one);
    let signed = _mm512_or_si512(_mm512_castpd_si512(th), _mm512_and_si512(bits, sign_bit));
    (_mm512_castsi512_pd(signed), inside)
}

/// `v` with its sign flipped in the lanes of `m` (an exact negation).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn negate_where(
    m: std::arch::x86_64::__mmask8,
    v: std::arch::x86_64::__m512d,
) -> std::arch::x86_64::__m512d {
    use std::arch::x86_64::*;
    let b = _mm512_castpd_si512(v);
    _mm512_castsi512_pd(_mm512_mask_xor_epi64(b, m, b, _mm512_set1_epi64(i64::MIN)))
}
