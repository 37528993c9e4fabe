//! [`super::ce_core`] (torch's fp32 cross-entropy, forward and backward) on AVX-512F: the
//! SLEEF exponential sixteen lanes at a time. The scalar `ce_core` is the definition; this
//! gives its bits for every input (tests below, against `ce_core` itself and against
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

/// Whether this CPU runs the vector kernel.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

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

#[cfg(test)]
mod tests {
    use super::super::{ce_core, exp_core};
    use super::*;

    /// exp_core of each input through the FMA build (mul_add is the definition everywhere;
    /// the target-feature copy only makes the test fast).
    #[target_feature(enable = "fma")]
    unsafe fn exp_scalar(x: &[f32], out: &mut [f32]) {
        for (o, &d) in out.iter_mut().zip(x) {
            *o = exp_core(d);
        }
    }

    fn check_exp(inputs: &[f32]) {
        let mut want = vec![0.0f32; inputs.len()];
        // SAFETY: AVX-512F (which includes FMA) is checked by every caller.
        unsafe { exp_scalar(inputs, &mut want) };
        for (c, w) in inputs.chunks(16).zip(want.chunks(16)) {
            // SAFETY: as above.
            let got = unsafe { lanes16(exp16(load16(c, 0).0)) };
            for l in 0..c.len() {
                assert_eq!(
                    got[l].to_bits(),
                    w[l].to_bits(),
                    "exp({:e}) = bits {:#x}, want {:#x}",
                    c[l],
                    got[l].to_bits(),
                    w[l].to_bits()
                );
            }
        }
    }

    #[test]
    fn exp16_equals_exp_core_over_the_f32_range() {
        if !available() {
            eprintln!("no AVX-512F on this CPU: the vector kernel is not used here");
            return;
        }
        // Every 61st bit pattern (70 M inputs: every binade of both signs, NaNs and
        // infinities included), then every input within 64 ulps of the cut-offs −104 and
        // 100, of q's rounding points (d·log2 e at half-integers, where q changes) for
        // |q| ≤ 160, and of 0.
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(61).map(f32::from_bits).collect();
        let mut around = |c: f32| {
            for k in -64i32..=64 {
                xs.push(f32::from_bits(c.to_bits().wrapping_add_signed(k)));
            }
        };
        around(-104.0);
        around(100.0);
        around(0.0);
        around(-0.0);
        for h in -320..=320 {
            around((h as f32 + 0.5) / std::f32::consts::LOG2_E);
        }
        check_exp(&xs);
    }

    /// `ce_core::<N>` in the FMA build, the one a machine with AVX-512F runs without the
    /// vector kernel (the soft-float `fmaf` of the portable build gives the same numbers, but
    /// a NaN it makes may carry another sign than the hardware's default NaN).
    #[target_feature(enable = "fma")]
    unsafe fn ce_fma<const N: usize>(
        logits: &[f32],
        labels: &[i64],
        v: usize,
        grad_scale: f32,
        dlogits: &mut [f32],
    ) -> f32 {
        ce_core::<N>(logits, labels, v, grad_scale, dlogits)
    }

    /// Equal bit patterns, or both NaN. Which NaN comes out of a row holding NaN and ±∞
    /// logits is not part of either kernel's definition: x86 returns a NaN operand (or the
    /// negative default NaN for ∞ − ∞), and which one follows the compiler's order of
    /// commutative operations and the instructions it picks. Measured: the two agreed bit
    /// for bit on all 3000 cases on the Intel Xeon of an earlier session; on this project's
    /// AMD EPYC case 20's loss is +qNaN (0x7fc00000) from the vector kernel and −qNaN
    /// (0xffc00000) from `ce_core`, and every non-NaN value still agrees bit for bit. No
    /// output sees a NaN's sign: every comparison takes |actual − expected| and |expected|,
    /// and a NaN prints as `nan`.
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan()
    }

    /// A small deterministic generator (xorshift64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn logit(&mut self, scale: f32) -> f32 {
            match self.below(40) {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => f32::NEG_INFINITY,
                3 => 0.0,
                4 => -0.0,
                _ => ((self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale,
            }
        }
    }

    #[test]
    fn vector_cross_entropy_equals_ce_core() {
        if !available() {
            eprintln!("no AVX-512F on this CPU: the vector kernel is not used here");
            return;
        }
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for case in 0..3000 {
            let v = 1 + rng.below(70) as usize;
            let n = 1 + rng.below(40) as usize;
            // Mostly ordinary logits; now and then rows with specials or huge spreads, and
            // all-equal rows (zero maxima of both signs among them).
            let special = case % 4 == 0;
            let scale = [1.0, 20.0, 300.0, 1e-30][rng.below(4) as usize];
            let logits: Vec<f32> = (0..n * v)
                .map(|_| {
                    if special {
                        rng.logit(scale)
                    } else if case % 7 == 1 {
                        [0.0, -0.0][rng.below(2) as usize]
                    } else {
                        ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
                    }
                })
                .collect();
            let labels: Vec<i64> = (0..n)
                .map(|_| {
                    if rng.below(9) == 0 {
                        IGNORE_INDEX
                    } else {
                        rng.below(v as u64) as i64
                    }
                })
                .collect();
            let grad_scale = [1.0, 0.5, 1.0 / 3.0][rng.below(3) as usize];
            let mut want = vec![0.0f32; n * v];
            let mut got = vec![7.0f32; n * v];
            for lanes in [16, 8] {
                // SAFETY: AVX-512F (which includes FMA) checked above.
                let (lw, lg) = unsafe {
                    if lanes == 16 {
                        (
                            ce_fma::<16>(&logits, &labels, v, grad_scale, &mut want),
                            ce::<16>(&logits, &labels, v, grad_scale, &mut got),
                        )
                    } else {
                        (
                            ce_fma::<8>(&logits, &labels, v, grad_scale, &mut want),
                            ce::<8>(&logits, &labels, v, grad_scale, &mut got),
                        )
                    }
                };
                assert!(
                    same(lg, lw),
                    "case {case} N={lanes}: loss {:#x} vs {:#x}",
                    lg.to_bits(),
                    lw.to_bits()
                );
                for (j, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        same(g, w),
                        "case {case} N={lanes}: dlogit {j} {:#x} vs {:#x}",
                        g.to_bits(),
                        w.to_bits()
                    );
                }
            }
        }
    }
}
