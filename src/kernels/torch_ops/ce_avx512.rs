//! [`super::ce_core`] (torch's fp32 cross-entropy, forward and backward) on AVX-512F: the
//! SLEEF exponential sixteen lanes at a time. The scalar `ce_core` is the definition; this
//! gives its bits for every input (`tests/isa_paths.rs`, against `ce_core` itself and against
//! `exp_core` lane by lane).
//!
//! **Order of operations**, the same IEEE operations as the scalar code, lane by lane:
//! - exp ([`exp16`], `exp_core`): `u = d·R_LN2F`; `q = cvtps2dq(u)` (round to nearest even
//!   under the default MXCSR, "integer indefinite" `i32::MIN` for NaN and out-of-range, as
//!   `rint_i32`); `qf = q as f32`; `s = fma(qf, −L2U, d)`; `s = fma(qf, −L2L, s)`; the
//!   six-coefficient Horner polynomial with one FMA per step; `u = 1 + fma(s·s, u, s)`;
//!   `u = (u·2^(q>>1))·2^(q − (q>>1))` with both powers built in the exponent field; 0 where
//!   `d < −104`, +∞ where `100 < d`.
//! - row maximum: lane-wise maxima, folded; any NaN gives `f32::NAN` as `row_max` does. Where
//!   the maximum is zero, `row_max` returns the first zero and this may return the other
//!   sign; no result depends on it: `x − (±0)` differs only in the sign of a zero, exp(±0)
//!   = 1, and a signed zero subtracted from the loss's partial sums (which start at +0)
//!   leaves +0. The test's all-zero rows of mixed signs check this.
//! - sum of exponentials (`row_sum_exp::<N>`): for `n < N` the exponentials added one by one
//!   in order; otherwise lane l of N (16 or 8) accumulates `e[l], e[N + l], ...` left to
//!   right, a ragged last block touching only its first lanes, then the butterfly
//!   `tree_reduce` on the N lanes. With N = 8 the sixteen exponentials of a zmm block are
//!   added as two blocks of eight, low half first.
//! - the log of the sum, the loss's cascade and its mean are the scalar code's, once per row.
//! - backward: `dlogit = fma(−exp((x − max) − lse), s, g)` with g = `grad` at the label and
//!   0 elsewhere.

use super::{ceil_log2, log_core, tree_reduce, IGNORE_INDEX, L2LF, L2UF, R_LN2F};
use std::arch::x86_64::*;

/// SLEEF `xexpf` on sixteen lanes, bit for bit `exp_core` per lane (module doc).
///
/// # Safety
/// The CPU must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn exp16(d: __m512) -> __m512 {
    let q = _mm512_cvtps_epi32(_mm512_mul_ps(d, _mm512_set1_ps(R_LN2F)));
    let qf = _mm512_cvtepi32_ps(q);
    let mut s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-L2UF), d);
    s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-L2LF), s);
    let mut u = _mm512_set1_ps(0.000_198_527_617_612_853_646_278_381_f32);
    for c in [
        0.001_393_043_552_525_341_510_772_71_f32,
        0.008_333_360_776_305_198_669_433_59,
        0.041_666_485_369_205_474_853_515_6,
        0.166_666_671_633_720_397_949_219,
        0.5,
    ] {
        u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(c));
    }
    u = _mm512_add_ps(
        _mm512_set1_ps(1.0),
        _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s),
    );
    // ldexp2: pow2i(k) = (k + 0x7f) << 23, for k = q >> 1 (arithmetic) and q − (q >> 1).
    let bias = _mm512_set1_epi32(0x7f);
    let half = _mm512_srai_epi32::<1>(q);
    let p1 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(half, bias)));
    let p2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_sub_epi32(q, half),
        bias,
    )));
    u = _mm512_mul_ps(_mm512_mul_ps(u, p1), p2);
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(d, _mm512_set1_ps(-104.0));
    u = _mm512_mask_mov_ps(u, under, _mm512_setzero_ps());
    let over = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_set1_ps(100.0), d);
    _mm512_mask_mov_ps(u, over, _mm512_set1_ps(f32::INFINITY))
}

/// Elements `i ..` of `row`, at most sixteen (mask `live`, zeros elsewhere).
///
/// # Safety
/// The CPU must support AVX-512F; `i < row.len()`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load16(row: &[f32], i: usize) -> (__m512, __mmask16) {
    let left = row.len() - i;
    if left >= 16 {
        // SAFETY: i + 16 <= row.len().
        (_mm512_loadu_ps(row.as_ptr().add(i)), 0xffff)
    } else {
        let live = ((1u32 << left) - 1) as __mmask16;
        // SAFETY: the `live` lanes are elements i .. row.len().
        (_mm512_maskz_loadu_ps(live, row.as_ptr().add(i)), live)
    }
}

/// [`exp16`] of up to sixteen values (the lanes past `x.len()` are exp(0)).
///
/// # Safety
/// The CPU must support AVX-512F; `x` is not empty.
#[target_feature(enable = "avx512f")]
pub unsafe fn exp16_of(x: &[f32]) -> [f32; 16] {
    lanes16(exp16(load16(x, 0).0))
}

/// The sixteen lanes of `v`, lowest first.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn lanes16(v: __m512) -> [f32; 16] {
    let mut out = [0.0f32; 16];
    // SAFETY: `out` holds sixteen f32.
    _mm512_storeu_ps(out.as_mut_ptr(), v);
    out
}

/// `row_max` (module doc).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn row_max16(row: &[f32]) -> f32 {
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut nan: __mmask16 = 0;
    let mut i = 0;
    while i < row.len() {
        let (x, live) = load16(row, i);
        nan |= _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(live, x, x);
        m = _mm512_mask_max_ps(m, live, m, x);
        i += 16;
    }
    if nan != 0 {
        return f32::NAN;
    }
    _mm512_reduce_max_ps(m)
}

/// `row_sum_exp::<N>(row, max)` for N = 16 or 8 (module doc).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn row_sum_exp16<const N: usize>(row: &[f32], max: f32) -> f32 {
    let n = row.len();
    let vmax = _mm512_set1_ps(max);
    if n < N {
        let (x, _) = load16(row, 0);
        let e = lanes16(exp16(_mm512_sub_ps(x, vmax)));
        let mut acc = e[0];
        for &v in &e[1..n] {
            acc += v;
        }
        return acc;
    }
    // The first block initialises the lanes (as the scalar code's first exponentials do).
    let (x, live) = load16(row, 0);
    let mut acc = exp16(_mm512_sub_ps(x, vmax));
    if N == 8 {
        let high = _mm512_shuffle_f32x4::<0b0100_1110>(acc, acc);
        acc = _mm512_mask_add_ps(acc, (live >> 8) & 0xff, acc, high);
    }
    let mut i = 16;
    while i < n {
        let (x, live) = load16(row, i);
        let e = exp16(_mm512_sub_ps(x, vmax));
        if N == 16 {
            acc = _mm512_mask_add_ps(acc, live, acc, e);
        } else {
            // Two blocks of eight, the low half first.
            acc = _mm512_mask_add_ps(acc, live & 0xff, acc, e);
            let high = _mm512_shuffle_f32x4::<0b0100_1110>(e, e);
            acc = _mm512_mask_add_ps(acc, (live >> 8) & 0xff, acc, high);
        }
        i += 16;
    }
    let mut l = lanes16(acc);
    if N == 16 {
        tree_reduce(&mut l)
    } else {
        let mut l8: [f32; 8] = l[..8].try_into().expect("eight lanes");
        tree_reduce(&mut l8)
    }
}

/// `ce_core::<N>` for N = 16 or 8 (module doc), the argument checks done by the caller.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn ce<const N: usize>(
    logits: &[f32],
    labels: &[i64],
    v: usize,
    grad_scale: f32,
    dlogits: &mut [f32],
) -> f32 {
    let n = labels.len();
    let ignored = labels.iter().filter(|&&t| t == IGNORE_INDEX).count();
    let total_weight = (n - ignored) as f32;
    let grad = -(grad_scale / total_weight);
    let s = grad + 0.0;
    let vs = _mm512_set1_ps(s);
    let vgrad = _mm512_set1_ps(grad);

    const LEVELS: usize = 8;
    let level_power = (ceil_log2(n) / LEVELS as u32).max(4);
    let level_mask = (1usize << level_power) - 1;
    let mut partial = [0.0f32; LEVELS];
    for (b, ((&t, row), drow)) in labels
        .iter()
        .zip(logits.chunks_exact(v))
        .zip(dlogits.chunks_exact_mut(v))
        .enumerate()
    {
        if t == IGNORE_INDEX {
            drow.fill(0.0);
            continue;
        }
        let t = t as usize;
        let max = row_max16(row);
        let lse = log_core(row_sum_exp16::<N>(row, max));
        partial[0] -= (row[t] - max) - lse;
        for j in 0..LEVELS - 1 {
            if b & (level_mask << (j as u32 * level_power)) != 0 {
                break;
            }
            partial[j + 1] += partial[j];
            partial[j] = 0.0;
        }
        let (vmax, vlse) = (_mm512_set1_ps(max), _mm512_set1_ps(lse));
        let mut i = 0;
        while i < v {
            let (x, live) = load16(row, i);
            let e = exp16(_mm512_sub_ps(_mm512_sub_ps(x, vmax), vlse));
            let at_label = if (i..i + 16).contains(&t) {
                1u16 << (t - i)
            } else {
                0
            };
            let g = _mm512_maskz_mov_ps(at_label, vgrad);
            // −e by its sign bit, as the scalar negation (NaN signs included).
            let neg_e = _mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(e),
                _mm512_set1_epi32(i32::MIN),
            ));
            let d = _mm512_fmadd_ps(neg_e, vs, g);
            // SAFETY: the `live` lanes are elements i .. v of the row.
            _mm512_mask_storeu_ps(drow.as_mut_ptr().add(i), live, d);
            i += 16;
        }
    }
    let mut loss = 0.0f32;
    for p in partial {
        loss += p;
    }
    loss / total_weight
}
