//! The two sums at the heart of the GPD fits, computed with lane-wise `log1p` and `log` that
//! give `libm`'s bits:
//! - the log-likelihood's Σᵢ wᵢ·ln1p_div(ξ·wᵢ) with wᵢ = (valuesᵢ − shift)/σ
//!   ([`excess_sum`], definition [`excess_sum_portable`]);
//! - the profile ξ(s)'s Σᵢ ln1p_phi_z(s, (valuesᵢ − shift)/y_max) ([`phi_sum`], definition
//!   [`phi_sum_portable`]).
//!
//! The tail fits evaluate these sums thousands of times per interval (grids, golden
//! sections, root finding), and the scalar `log1p` and `log` behind them were the largest
//! single cost of a sweep with `--mutants all`. Where AVX-512 is available the terms are
//! computed eight at a time and added one by one in slice order, so each sum is the same
//! float.
//!
//! **log1p, lane by lane.** The algorithm is the one of FreeBSD's `s_log1p.c` (Sun
//! Microsystems' fdlibm, as carried by musl and by the `libm` crate 0.2.16 this crate uses):
//! reduce 1 + x = 2ᵏ·(1 + f) with √2/2 < 1 + f < √2 (k = 0 and f = x when
//! −0.2929 < x < 0.4142), with a correction c = ((1 + x) − u)/u for the rounding of u = 1 + x,
//! then log(1 + f) = f − hfsq + s·(hfsq + R(s²)) with s = f/(2 + f) and R the degree-14
//! minimax polynomial in s of fdlibm's log, and finally k·ln2 added in two parts. `log`
//! (fdlibm's `e_log.c`) is the same without the correction, for positive normal x. Every
//! step below is the same IEEE operation in the same order as the scalar code (no fused
//! multiply-add, the same evaluation order of each expression), selected per lane where the
//! scalar code branches. Lanes that the scalar code handles by an early return are never
//! used: in the likelihood, |x| < 10⁻⁴ takes the series (which covers |x| < 2⁻⁵³) and x ≤ −1
//! ends the sum; in the profile, |x| < 2⁻⁵³ returns x as the scalar does; and any non-finite
//! value (or, for `log`, a zero or subnormal argument) sends the whole sum to the portable
//! loop.

use super::gpd::{ln1p_div, ln1p_phi_z};
use crate::kernels::isa::Isa;

/// Σ (vᵢ − shift)/σ · ln1p_div(ξ·(vᵢ − shift)/σ) over `values` in order; None as soon as some
/// ξ·wᵢ ≤ −1 (outside the support). The definition of [`excess_sum`].
pub fn excess_sum_portable(values: &[f64], shift: f64, xi: f64, sigma: f64) -> Option<f64> {
    let mut s = 0.0;
    for &v in values {
        let w = (v - shift) / sigma;
        let x = xi * w;
        if x <= -1.0 {
            return None;
        }
        s += w * ln1p_div(x);
    }
    Some(s)
}

/// [`excess_sum_portable`], with the terms computed eight at a time where the CPU has
/// AVX-512F and AVX-512DQ (the same result).
pub fn excess_sum(values: &[f64], shift: f64, xi: f64, sigma: f64) -> Option<f64> {
    excess_sum_on(Isa::detected(), values, shift, xi, sigma)
}

/// [`excess_sum`] on the compilation `isa` names: the vector sum from
/// [`Level::Avx512`](crate::kernels::isa::Level::Avx512) on (AVX-512F and AVX-512DQ), else
/// [`excess_sum_portable`]; the same result.
pub fn excess_sum_on(isa: Isa, values: &[f64], shift: f64, xi: f64, sigma: f64) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F and
            // AVX-512DQ.
            if let Some(r) = unsafe { avx512::excess_sum(values, shift, xi, sigma) } {
                return r;
            }
        }
    }
    let _ = isa;
    excess_sum_portable(values, shift, xi, sigma)
}

/// Test support: `libm::log1p` (`log1p`) or `libm::log` of each element of `xs`, in place,
/// by the vector sums' lane functions (eight at a time, a short last block padded with
/// ones) where `isa` reaches [`Level::Avx512`](crate::kernels::isa::Level::Avx512), else by
/// libm. The lanes hold libm's value only on their domains (log1p: −1 < x finite and
/// |x| ≥ 2⁻⁵³; log: positive normal x); `tests/isa_paths.rs` checks them there.
#[doc(hidden)]
pub fn log_lanes_on(isa: Isa, log1p: bool, xs: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if isa.avx512() {
        for c in xs.chunks_mut(8) {
            let mut v = [1.0f64; 8];
            v[..c.len()].copy_from_slice(c);
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F and
            // AVX-512DQ.
            let y = unsafe { avx512::lanes_of(log1p, &v) };
            c.copy_from_slice(&y[..c.len()]);
        }
        return;
    }
    let _ = isa;
    for x in xs {
        *x = if log1p {
            libm::log1p(*x)
        } else {
            libm::log(*x)
        };
    }
}

/// Σ `ln1p_phi_z`(s, (vᵢ − shift)/y_max) over `values` in order, starting from −0.0 as
/// `Iterator::sum` does: the sum behind the GPD fit's profile ξ(s). The definition of
/// [`phi_sum`].
pub fn phi_sum_portable(values: &[f64], shift: f64, ymax: f64, s: f64) -> f64 {
    values
        .iter()
        .map(|&v| ln1p_phi_z(s, (v - shift) / ymax))
        .sum()
}

/// [`phi_sum_portable`], with the terms computed eight at a time where the CPU has AVX-512F
/// and AVX-512DQ, and eˢ, e⁻ˢ or expm1(s) taken once instead of per term (the same
/// result).
pub fn phi_sum(values: &[f64], shift: f64, ymax: f64, s: f64) -> f64 {
    phi_sum_on(Isa::detected(), values, shift, ymax, s)
}

/// [`phi_sum`] on the compilation `isa` names: the vector sum from
/// [`Level::Avx512`](crate::kernels::isa::Level::Avx512) on (AVX-512F and AVX-512DQ), else
/// [`phi_sum_portable`]; the same result.
pub fn phi_sum_on(isa: Isa, values: &[f64], shift: f64, ymax: f64, s: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F and
            // AVX-512DQ.
            if let Some(r) = unsafe { avx512::phi_sum(values, shift, ymax, s) } {
                return r;
            }
        }
    }
    let _ = isa;
    phi_sum_portable(values, shift, ymax, s)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// [`log1p`] (`log1p`) or [`log`] of the eight values of `v`.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn lanes_of(log1p: bool, v: &[f64; 8]) -> [f64; 8] {
        let x = _mm512_loadu_pd(v.as_ptr());
        crate::kernels::avx512::lanes(if log1p { self::log1p(x) } else { log(x) })
    }

    // fdlibm's constants (s_log1p.c / e_log.c), by their bit patterns.
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    const LG: [f64; 7] = [
        f64::from_bits(0x3fe5_5555_5555_5593),
        f64::from_bits(0x3fd9_9999_9997_fa04),
        f64::from_bits(0x3fd2_4924_9422_9359),
        f64::from_bits(0x3fcc_71c5_1d8e_78af),
        f64::from_bits(0x3fc7_4664_96cb_03de),
        f64::from_bits(0x3fc3_9a09_d078_c69f),
        f64::from_bits(0x3fc2_f112_df3e_5244),
    ];

    /// `libm::log1p(x)` in every lane with −1 < x finite and |x| ≥ 2⁻⁵³ (other lanes hold
    /// unspecified values). The order of operations is the scalar one (module doc).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn log1p(x: __m512d) -> __m512d {
        let one = _mm512_set1_pd(1.0);
        let bits = _mm512_castpd_si512(x);
        let hx = _mm512_srli_epi64::<32>(bits);
        // k = 0, c = 0, f = x where 1 + x lies in [√2/2, √2): 0 ≤ x < 0.4142 (high word below
        // 0x3fda827a) or −0.2929 ≤ x < 0 (sign set, high word at most 0xbfd2bec4).
        let k0 = _mm512_cmplt_epu64_mask(hx, _mm512_set1_epi64(0x3fda_827a))
            | (_mm512_cmpge_epu64_mask(hx, _mm512_set1_epi64(0x8000_0000))
                & _mm512_cmple_epu64_mask(hx, _mm512_set1_epi64(0xbfd2_bec4)));
        // Elsewhere: u = 1 + x, its high word shifted so that the exponent field gives k.
        let u = _mm512_add_pd(one, x);
        let ub = _mm512_castpd_si512(u);
        let hu = _mm512_add_epi64(
            _mm512_srli_epi64::<32>(ub),
            _mm512_set1_epi64(0x3ff0_0000 - 0x3fe6_a09e),
        );
        let k = _mm512_sub_epi64(_mm512_srli_epi64::<20>(hu), _mm512_set1_epi64(0x3ff));
        // c = (k ≥ 2 ? 1 − (u − x) : x − (u − 1)) / u for k < 54, else 0.
        let c_big = _mm512_sub_pd(one, _mm512_sub_pd(u, x));
        let c_small = _mm512_sub_pd(x, _mm512_sub_pd(u, one));
        let ge2 = _mm512_cmpge_epi64_mask(k, _mm512_set1_epi64(2));
        let c = _mm512_div_pd(_mm512_mask_blend_pd(ge2, c_small, c_big), u);
        let lt54 = _mm512_cmplt_epi64_mask(k, _mm512_set1_epi64(54));
        let c = _mm512_maskz_mov_pd(lt54 & !k0, c);
        // u reduced into [√2/2, √2): high word (hu & 0xfffff) + 0x3fe6a09e, low word kept.
        let hu2 = _mm512_add_epi64(
            _mm512_and_si512(hu, _mm512_set1_epi64(0x000f_ffff)),
            _mm512_set1_epi64(0x3fe6_a09e),
        );
        let u2 = _mm512_castsi512_pd(_mm512_or_si512(
            _mm512_slli_epi64::<32>(hu2),
            _mm512_and_si512(ub, _mm512_set1_epi64(0xffff_ffff)),
        ));
        let f = _mm512_mask_blend_pd(k0, _mm512_sub_pd(u2, one), x);
        let k = _mm512_maskz_mov_epi64(!k0, k);
        log_tail(f, k, c)
    }

    /// `libm::log(x)` in every lane with x positive, normal and finite (other lanes hold
    /// unspecified values): reduce x = 2ᵏ·(1 + f) with √2/2 ≤ 1 + f < √2 by the same integer
    /// steps on the high word as the scalar code, then [`log_tail`] with c = 0.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn log(x: __m512d) -> __m512d {
        let bits = _mm512_castpd_si512(x);
        let hx = _mm512_add_epi64(
            _mm512_srli_epi64::<32>(bits),
            _mm512_set1_epi64(0x3ff0_0000 - 0x3fe6_a09e),
        );
        let k = _mm512_sub_epi64(_mm512_srli_epi64::<20>(hx), _mm512_set1_epi64(0x3ff));
        let hx = _mm512_add_epi64(
            _mm512_and_si512(hx, _mm512_set1_epi64(0x000f_ffff)),
            _mm512_set1_epi64(0x3fe6_a09e),
        );
        let r = _mm512_castsi512_pd(_mm512_or_si512(
            _mm512_slli_epi64::<32>(hx),
            _mm512_and_si512(bits, _mm512_set1_epi64(0xffff_ffff)),
        ));
        let f = _mm512_sub_pd(r, _mm512_set1_pd(1.0));
        log_tail(f, k, _mm512_setzero_pd())
    }

    /// The shared end of fdlibm's `log` and `log1p` for 1 + f = the reduced argument, k its
    /// power of two and c the correction (0 for `log`):
    /// s·(hfsq + R) + (k·ln2_lo + c) − hfsq + f + k·ln2_hi, with hfsq = 0.5·f·f,
    /// s = f/(2 + f) and R = t2 + t1 (the polynomials below). For `log` the scalar code
    /// writes k·ln2_lo without "+ c": adding c = +0 to it changes no bit (k·ln2_lo is +0 or
    /// nonzero).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn log_tail(f: __m512d, k: __m512i, c: __m512d) -> __m512d {
        // hfsq = 0.5·f·f; s = f/(2 + f); z = s²; w = z².
        let hfsq = _mm512_mul_pd(_mm512_mul_pd(_mm512_set1_pd(0.5), f), f);
        let s = _mm512_div_pd(f, _mm512_add_pd(_mm512_set1_pd(2.0), f));
        let z = _mm512_mul_pd(s, s);
        let w = _mm512_mul_pd(z, z);
        let c_ = |v: f64| _mm512_set1_pd(v);
        // t1 = w·(Lg2 + w·(Lg4 + w·Lg6)); t2 = z·(Lg1 + w·(Lg3 + w·(Lg5 + w·Lg7))).
        let t1 = _mm512_mul_pd(
            w,
            _mm512_add_pd(
                c_(LG[1]),
                _mm512_mul_pd(w, _mm512_add_pd(c_(LG[3]), _mm512_mul_pd(w, c_(LG[5])))),
            ),
        );
        let t2 = _mm512_mul_pd(
            z,
            _mm512_add_pd(
                c_(LG[0]),
                _mm512_mul_pd(
                    w,
                    _mm512_add_pd(
                        c_(LG[2]),
                        _mm512_mul_pd(w, _mm512_add_pd(c_(LG[4]), _mm512_mul_pd(w, c_(LG[6])))),
                    ),
                ),
            ),
        );
        let r = _mm512_add_pd(t2, t1);
        let dk = _mm512_cvtepi64_pd(k);
        // s·(hfsq + R) + (dk·ln2_lo + c) − hfsq + f + dk·ln2_hi, left to right.
        let acc = _mm512_add_pd(
            _mm512_mul_pd(s, _mm512_add_pd(hfsq, r)),
            _mm512_add_pd(_mm512_mul_pd(dk, c_(LN2_LO)), c),
        );
        let acc = _mm512_add_pd(_mm512_sub_pd(acc, hfsq), f);
        _mm512_add_pd(acc, _mm512_mul_pd(dk, c_(LN2_HI)))
    }

    /// The block of `values` from i < len: its `live` lanes (all eight, or those of a short
    /// last block) and their values, 0 in the other lanes, whose results the callers never
    /// look at.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn block(values: &[f64], i: usize) -> (__mmask8, __m512d) {
        let left = values.len() - i;
        let live: __mmask8 = if left >= 8 { 0xff } else { (1u8 << left) - 1 };
        // SAFETY: the `live` lanes are elements i .. min(i + 8, len).
        (live, _mm512_maskz_loadu_pd(live, values.as_ptr().add(i)))
    }

    /// `acc` plus the `live` lanes of `t` (the first ones), one at a time in lane order. The
    /// other lanes are not added at all: adding +0 would turn an accumulated −0 into +0.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn add_live(mut acc: f64, t: __m512d, live: __mmask8) -> f64 {
        let mut terms = [0.0f64; 8];
        _mm512_storeu_pd(terms.as_mut_ptr(), t);
        for &x in &terms[..live.count_ones() as usize] {
            acc += x;
        }
        acc
    }

    /// The vector form of `excess_sum_portable`: Some(its result), or None when some value
    /// or term is not finite (the caller then runs the portable loop).
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn excess_sum(
        values: &[f64],
        shift: f64,
        xi: f64,
        sigma: f64,
    ) -> Option<Option<f64>> {
        let (vshift, vsigma, vxi) = (
            _mm512_set1_pd(shift),
            _mm512_set1_pd(sigma),
            _mm512_set1_pd(xi),
        );
        let cutoff = _mm512_set1_pd(super::super::gpd::SERIES_CUTOFF);
        let max = _mm512_set1_pd(f64::MAX);
        let c_ = |v: f64| _mm512_set1_pd(v);
        let mut s = 0.0;
        let mut i = 0;
        while i < values.len() {
            // Every test and the sum below are masked to `live` (see `block`).
            let (live, v) = block(values, i);
            let w = _mm512_div_pd(_mm512_sub_pd(v, vshift), vsigma);
            let x = _mm512_mul_pd(vxi, w);
            if _mm512_mask_cmp_pd_mask::<_CMP_LE_OQ>(live, x, c_(-1.0)) != 0 {
                // The scalar loop stops at the first such term, whatever came before.
                return Some(None);
            }
            let small = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(_mm512_abs_pd(x), cutoff);
            // 1 + x·(−1/2 + x·(1/3 + x·(−1/4 + x·(1/5)))), as `ln1p_div` writes it.
            let series = _mm512_add_pd(
                c_(1.0),
                _mm512_mul_pd(
                    x,
                    _mm512_add_pd(
                        c_(-0.5),
                        _mm512_mul_pd(
                            x,
                            _mm512_add_pd(
                                c_(1.0 / 3.0),
                                _mm512_mul_pd(
                                    x,
                                    _mm512_add_pd(c_(-0.25), _mm512_mul_pd(x, c_(0.2))),
                                ),
                            ),
                        ),
                    ),
                ),
            );
            let ratio = _mm512_div_pd(log1p(x), x);
            let t = _mm512_mul_pd(w, _mm512_mask_blend_pd(small, ratio, series));
            // Any NaN or infinity (in a value, a w, or a term) fails this comparison.
            if _mm512_mask_cmp_pd_mask::<_CMP_LE_OQ>(live, _mm512_abs_pd(t), max) != live
                || _mm512_mask_cmp_pd_mask::<_CMP_LE_OQ>(live, _mm512_abs_pd(w), max) != live
            {
                return None;
            }
            s = add_live(s, t, live);
            i += 8;
        }
        Some(Some(s))
    }

    /// The vector form of `phi_sum_portable`: Some(its result), or None when some lane
    /// would leave the arguments the lane-wise `log` and `log1p` take (a NaN, an infinity,
    /// a subnormal or zero argument of `log`), or s is not finite.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn phi_sum(values: &[f64], shift: f64, ymax: f64, s: f64) -> Option<f64> {
        if !s.is_finite() {
            return None;
        }
        // The branch of `ln1p_phi_z`, and its transcendental of s, once for the whole sum.
        let branch = if s > 1.0 {
            0
        } else if s > -1.0 {
            1
        } else {
            2
        };
        let ce = match branch {
            0 => libm::exp(-s),
            1 => libm::expm1(s),
            _ => libm::exp(s),
        };
        let (vs, vce, one) = (_mm512_set1_pd(s), _mm512_set1_pd(ce), _mm512_set1_pd(1.0));
        let (vshift, vymax) = (_mm512_set1_pd(shift), _mm512_set1_pd(ymax));
        let zero = _mm512_setzero_pd();
        let min_normal = _mm512_set1_epi64(0x0010_0000_0000_0000);
        let normal_span = _mm512_set1_epi64(0x7ff0_0000_0000_0000 - 0x0010_0000_0000_0000);
        let mut acc = -0.0f64;
        let mut i = 0;
        while i < values.len() {
            // The test and the sum below are masked to `live` (see `block`).
            let (live, v) = block(values, i);
            let z = _mm512_div_pd(_mm512_sub_pd(v, vshift), vymax);
            let z0 = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(z, zero);
            let z1 = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(z, one);
            let general = !(z0 | z1);
            let (t, ok) = if branch == 1 {
                // log1p(expm1(s)·z); |arg| < 2⁻⁵³ returns arg itself, as the scalar does.
                let arg = _mm512_mul_pd(vce, z);
                let tiny = _mm512_cmplt_epu64_mask(
                    _mm512_castpd_si512(_mm512_abs_pd(arg)),
                    _mm512_set1_epi64(0x3ca0_0000_0000_0000),
                );
                let ok = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(arg, _mm512_set1_pd(-1.0))
                    & _mm512_cmp_pd_mask::<_CMP_LE_OQ>(arg, _mm512_set1_pd(f64::MAX));
                (_mm512_mask_blend_pd(tiny, log1p(arg), arg), ok)
            } else {
                // s + log(z + (1 − z)·e⁻ˢ), or log((1 − z) + eˢ·z).
                let omz = _mm512_sub_pd(one, z);
                let arg = if branch == 0 {
                    _mm512_add_pd(z, _mm512_mul_pd(omz, vce))
                } else {
                    _mm512_add_pd(omz, _mm512_mul_pd(vce, z))
                };
                let ok = _mm512_cmplt_epu64_mask(
                    _mm512_sub_epi64(_mm512_castpd_si512(arg), min_normal),
                    normal_span,
                );
                let l = log(arg);
                (if branch == 0 { _mm512_add_pd(vs, l) } else { l }, ok)
            };
            if general & !ok & live != 0 {
                return None;
            }
            let t = _mm512_mask_blend_pd(z1, t, vs);
            let t = _mm512_mask_blend_pd(z0, t, zero);
            acc = add_live(acc, t, live);
            i += 8;
        }
        Some(acc)
    }
}
