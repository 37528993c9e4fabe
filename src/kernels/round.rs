//! Roundings of f32 to narrower formats, each returned widened back to f32.
//!
//! - [`bf16_rne`], [`bf16_trunc`] and [`tf32`] are exact bit arithmetic on the
//!   binary32 encoding (no library call). Because binary32 is sign-magnitude and
//!   its encodings are ordered like the magnitudes, adding a rounding increment to
//!   the bits and masking rounds the magnitude; a carry out of the mantissa bumps
//!   the exponent, and a carry out of the largest finite exponent gives infinity.
//! - [`f16_rne`] goes through `half::f16::from_f32` (the f32 path, which rounds
//!   correctly; `half`'s f64 path misrounds just above ties, see numerics.md).
//!
//! NaN policy (all functions): a NaN stays a NaN with its sign; the result is
//! the input's high bits with the quiet bit (0x0040_0000) set, as the `half` crate
//! does for bf16. Subnormals are rounded like any other value, never flushed.

/// Quiet bit of a binary32 NaN.
const QUIET: u32 = 0x0040_0000;

/// Keeps the bits in `keep_mask` of a NaN and makes sure it stays a NaN.
#[inline(always)]
fn nan_keep(bits: u32, keep_mask: u32) -> f32 {
    f32::from_bits((bits & keep_mask) | QUIET)
}

/// Rounds `x` to the nearest bfloat16 (8 significant bits), ties to even,
/// returned as f32. Exact bit arithmetic: `(bits + 0x7FFF + lsb) & 0xFFFF_0000`
/// where `lsb` is bit 16 of `bits`. Overflow goes to ±inf, subnormals round to
/// bf16 subnormals (no flush), NaN stays NaN (see the module doc), -0 stays -0.
#[inline]
pub fn bf16_rne(x: f32) -> f32 {
    let bits = x.to_bits();
    if x.is_nan() {
        return nan_keep(bits, 0xFFFF_0000);
    }
    let lsb = (bits >> 16) & 1;
    f32::from_bits(bits.wrapping_add(0x7FFF + lsb) & 0xFFFF_0000)
}

/// Truncates `x` to bfloat16 (toward zero), returned as f32: `bits & 0xFFFF_0000`.
///
/// One deviation from the bare mask: a NaN whose payload lies only in the low
/// 16 bits would become ±inf; it is returned as a quiet NaN instead (module doc).
#[inline]
pub fn bf16_trunc(x: f32) -> f32 {
    let bits = x.to_bits();
    if x.is_nan() {
        return nan_keep(bits, 0xFFFF_0000);
    }
    f32::from_bits(bits & 0xFFFF_0000)
}

/// Rounds `x` to the nearest IEEE binary16, ties to even, returned as f32, via
/// `half::f16::from_f32` (overflow to ±inf, f16 subnormals kept, NaN stays NaN).
#[inline]
pub fn f16_rne(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// The f32 -> TF32 rounding mode (undocumented on NVIDIA hardware, so it is a
/// profile parameter; see numerics.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tf32Mode {
    /// Round to nearest, ties to even (PTX `cvt.rn`).
    Rne,
    /// Round to nearest, ties away from zero (PTX `cvt.rna`).
    Rna,
    /// Truncation toward zero.
    Trunc,
}

/// Rounds `x` to TF32 (10 explicit mantissa bits, 8 exponent bits) in the given
/// mode, returned as f32. Exact bit arithmetic on the low 13 bits:
/// Rne adds `0xFFF + bit13`, Rna adds `0x1000`, Trunc adds nothing, then
/// `& 0xFFFF_E000`. Overflow in Rne/Rna goes to ±inf; NaN stays NaN.
#[inline]
pub fn tf32(x: f32, mode: Tf32Mode) -> f32 {
    const MASK: u32 = 0xFFFF_E000;
    let bits = x.to_bits();
    if x.is_nan() {
        return nan_keep(bits, MASK);
    }
    let inc = match mode {
        Tf32Mode::Rne => 0x0FFF + ((bits >> 13) & 1),
        Tf32Mode::Rna => 0x1000,
        Tf32Mode::Trunc => 0,
    };
    f32::from_bits(bits.wrapping_add(inc) & MASK)
}

/// XLA's bf16 3-pass split: `hi = bf16_trunc(x)`, `lo = bf16_rne(x - hi)`.
///
/// `x - hi` is exact in f32 (it is the low 16 mantissa bits of `x`). For every
/// finite `x`: `|x - (hi + lo)| <= max(2^-15 |x|, 2^-134)` (see the tests for
/// the derivation). For infinite `x`, `lo` is NaN.
#[inline]
pub fn bf16x3_split(x: f32) -> (f32, f32) {
    let hi = bf16_trunc(x);
    (hi, bf16_rne(x - hi))
}

/// XLA's bf16 6-pass split: `hi = bf16_trunc(x)`, `mid = bf16_trunc(x - hi)`,
/// `lo = bf16_rne((x - hi) - mid)`; both subtractions are exact in f32.
///
/// For finite `x` with `|x| >= 2^-110`, `hi + mid + lo == x` exactly; below
/// that the bf16 subnormal spacing can lose the last bits and
/// `|x - (hi + mid + lo)| <= 2^-134` (derivation in the tests).
#[inline]
pub fn bf16x6_split(x: f32) -> (f32, f32, f32) {
    let hi = bf16_trunc(x);
    let r1 = x - hi;
    let mid = bf16_trunc(r1);
    (hi, mid, bf16_rne(r1 - mid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(bits: u32) -> f32 {
        f32::from_bits(bits)
    }

    #[track_caller]
    fn assert_bits(got: f32, want: u32) {
        assert_eq!(
            got.to_bits(),
            want,
            "got {:#010x} ({got:e}), want {want:#010x} ({:e})",
            got.to_bits(),
            b(want)
        );
    }

    #[test]
    fn bf16_rne_hand_patterns() {
        // 1 + 2^-8: dropped half is exactly 0x8000 (a tie), kept lsb 0 -> down.
        assert_bits(bf16_rne(b(0x3F80_8000)), 0x3F80_0000);
        // 1 + 3*2^-8: tie with kept lsb 1 -> up to even.
        assert_bits(bf16_rne(b(0x3F81_8000)), 0x3F82_0000);
        // Just above a tie -> up; just below -> down.
        assert_bits(bf16_rne(b(0x3F80_8001)), 0x3F81_0000);
        assert_bits(bf16_rne(b(0x3F80_7FFF)), 0x3F80_0000);
        // Negative values round the magnitude the same way.
        assert_bits(bf16_rne(b(0xBF80_8000)), 0xBF80_0000);
        assert_bits(bf16_rne(b(0xBF81_8000)), 0xBF82_0000);
        assert_bits(bf16_rne(b(0xBF80_8001)), 0xBF81_0000);
        // Mantissa carry into the exponent: 0x3FFF_FFFF -> 2.0.
        assert_bits(bf16_rne(b(0x3FFF_FFFF)), 0x4000_0000);
        // Zeros keep their sign.
        assert_bits(bf16_rne(0.0), 0x0000_0000);
        assert_bits(bf16_rne(-0.0), 0x8000_0000);
        // Infinities stay.
        assert_bits(bf16_rne(f32::INFINITY), 0x7F80_0000);
        assert_bits(bf16_rne(f32::NEG_INFINITY), 0xFF80_0000);
        // Overflow: f32::MAX (0x7F7F_FFFF) is above the tie with bf16 max 0x7F7F.
        assert_bits(bf16_rne(f32::MAX), 0x7F80_0000);
        assert_bits(bf16_rne(-f32::MAX), 0xFF80_0000);
        // 0x7F7F_8000 is a tie and 0x7F7F is odd -> rounds up to inf.
        assert_bits(bf16_rne(b(0x7F7F_8000)), 0x7F80_0000);
        // Below that tie it stays at the largest bf16.
        assert_bits(bf16_rne(b(0x7F7F_7FFF)), 0x7F7F_0000);
        // Subnormals: bf16 subnormal spacing is 2^-133 = 0x0001_0000.
        assert_bits(bf16_rne(b(0x0000_8000)), 0x0000_0000); // tie, even -> 0
        assert_bits(bf16_rne(b(0x0001_8000)), 0x0002_0000); // tie, odd -> up
        assert_bits(bf16_rne(b(0x0000_8001)), 0x0001_0000); // above tie
        assert_bits(bf16_rne(b(0x0000_0001)), 0x0000_0000); // 2^-149 -> +0
        assert_bits(bf16_rne(b(0x8000_0001)), 0x8000_0000); // -2^-149 -> -0
                                                            // Largest subnormal rounds up into the smallest normal.
        assert_bits(bf16_rne(b(0x007F_FFFF)), 0x0080_0000);
    }

    #[test]
    fn bf16_nan_handling() {
        // Quiet NaN with a high payload: unchanged.
        assert_bits(bf16_rne(b(0x7FC0_0000)), 0x7FC0_0000);
        assert_bits(bf16_trunc(b(0x7FC0_0000)), 0x7FC0_0000);
        // Payload only in the low bits: a bare mask would make +inf.
        assert!(bf16_rne(b(0x7F80_0001)).is_nan());
        assert!(bf16_trunc(b(0x7F80_0001)).is_nan());
        assert_bits(bf16_rne(b(0x7F80_0001)), 0x7FC0_0000);
        // Payload 0x7FFF_FFFF must not carry into the sign bit.
        assert_bits(bf16_rne(b(0x7FFF_FFFF)), 0x7FFF_0000);
        // Sign is kept.
        assert_bits(bf16_rne(b(0xFFC1_2345)), 0xFFC1_0000);
        assert_bits(bf16_trunc(b(0xFF80_0001)), 0xFFC0_0000);
        assert!(tf32(b(0x7F80_0001), Tf32Mode::Rne).is_nan());
        assert!(tf32(b(0x7F80_0001), Tf32Mode::Trunc).is_nan());
        assert!(f16_rne(f32::NAN).is_nan());
    }

    #[test]
    fn bf16_trunc_hand_patterns() {
        assert_bits(bf16_trunc(b(0x3F80_FFFF)), 0x3F80_0000);
        assert_bits(bf16_trunc(b(0xBF81_8000)), 0xBF81_0000);
        assert_bits(bf16_trunc(f32::MAX), 0x7F7F_0000);
        assert_bits(bf16_trunc(-0.0), 0x8000_0000);
        assert_bits(bf16_trunc(b(0x0000_FFFF)), 0x0000_0000);
        assert_bits(bf16_trunc(f32::NEG_INFINITY), 0xFF80_0000);
    }

    #[test]
    fn tf32_hand_patterns() {
        use Tf32Mode::*;
        // TF32 keeps bits 31..13; the dropped part is bits 12..0 (tie = 0x1000).
        // 1 + 2^-11: tie, kept lsb (bit 13) is 0.
        let t_even = b(0x3F80_1000);
        assert_bits(tf32(t_even, Rne), 0x3F80_0000);
        assert_bits(tf32(t_even, Rna), 0x3F80_2000);
        assert_bits(tf32(t_even, Trunc), 0x3F80_0000);
        // 1 + 3*2^-11: tie, kept lsb is 1.
        let t_odd = b(0x3F80_3000);
        assert_bits(tf32(t_odd, Rne), 0x3F80_4000);
        assert_bits(tf32(t_odd, Rna), 0x3F80_4000);
        assert_bits(tf32(t_odd, Trunc), 0x3F80_2000);
        // Negative tie: RNA rounds away from zero, i.e. to larger magnitude.
        let t_neg = b(0xBF80_1000);
        assert_bits(tf32(t_neg, Rne), 0xBF80_0000);
        assert_bits(tf32(t_neg, Rna), 0xBF80_2000);
        assert_bits(tf32(t_neg, Trunc), 0xBF80_0000);
        // Just above / below a tie.
        assert_bits(tf32(b(0x3F80_1001), Rne), 0x3F80_2000);
        assert_bits(tf32(b(0x3F80_1001), Rna), 0x3F80_2000);
        assert_bits(tf32(b(0x3F80_1001), Trunc), 0x3F80_0000);
        assert_bits(tf32(b(0x3F80_0FFF), Rne), 0x3F80_0000);
        assert_bits(tf32(b(0x3F80_0FFF), Rna), 0x3F80_0000);
        // Overflow: 0x7F7F_F000 is a tie above the largest TF32 0x7F7F_E000
        // (odd lsb), so both nearest modes give inf and truncation does not.
        assert_bits(tf32(b(0x7F7F_F000), Rne), 0x7F80_0000);
        assert_bits(tf32(b(0x7F7F_F000), Rna), 0x7F80_0000);
        assert_bits(tf32(b(0x7F7F_F000), Trunc), 0x7F7F_E000);
        // Zeros and infinities.
        for m in [Rne, Rna, Trunc] {
            assert_bits(tf32(-0.0, m), 0x8000_0000);
            assert_bits(tf32(f32::INFINITY, m), 0x7F80_0000);
        }
    }

    #[test]
    fn f16_hand_patterns() {
        // f16 has 11 significant bits: 1 + 2^-11 is a tie with even lsb -> 1.
        assert_eq!(f16_rne(1.0 + 2f32.powi(-11)), 1.0);
        // 1 + 3*2^-11 is a tie with odd lsb -> 1 + 2^-9.
        assert_eq!(f16_rne(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        // Just above the tie.
        assert_eq!(
            f16_rne(1.0 + 2f32.powi(-11) + 2f32.powi(-20)),
            1.0 + 2f32.powi(-10)
        );
        // 65520 is the tie between f16 max 65504 and 65536 (odd lsb) -> inf.
        assert_eq!(f16_rne(65520.0), f32::INFINITY);
        assert_eq!(f16_rne(65519.0), 65504.0);
        // Subnormal f16: spacing 2^-24; 2^-25 is a tie -> 0, a bit more -> 2^-24.
        assert_eq!(f16_rne(2f32.powi(-25)).to_bits(), 0);
        assert_eq!(f16_rne(2f32.powi(-25) * 1.5), 2f32.powi(-24));
        assert_eq!(f16_rne(-0.0).to_bits(), 0x8000_0000);
    }

    /// bf16_rne agrees with the `half` crate, whose conversion is written
    /// differently (explicit round-bit / sticky-bit test instead of an add).
    #[test]
    fn bf16_rne_matches_half_on_many_bit_patterns() {
        let mut s = 0x1234_5678_9ABC_DEF0u64;
        for i in 0..2_000_000u64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Every 4th value gets its low 16 bits forced to the tie pattern.
            let mut bits = (s >> 16) as u32;
            if i % 4 == 0 {
                bits = (bits & 0xFFFF_0000) | 0x8000;
            }
            let x = b(bits);
            let want = half::bf16::from_f32(x).to_f32();
            let got = bf16_rne(x);
            if x.is_nan() {
                assert!(got.is_nan() && want.is_nan());
                assert_eq!(got.to_bits() & 0x8000_0000, bits & 0x8000_0000);
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "x = {bits:#010x}");
            }
        }
    }

    fn any_non_nan() -> impl Strategy<Value = f32> {
        any::<u32>()
            .prop_map(f32::from_bits)
            .prop_filter("not NaN", |x| !x.is_nan())
    }

    fn any_finite() -> impl Strategy<Value = f32> {
        any::<u32>()
            .prop_map(f32::from_bits)
            .prop_filter("finite", |x| x.is_finite())
    }

    /// The bound used by the bf16x3 split, evaluated exactly in f64.
    ///
    /// Derivation: let `x` have exponent `e` (`2^e <= |x| < 2^(e+1)`). Then
    /// `r = x - hi` is exact with `|r| < 2^(e-7)` (the truncated low 16 bits).
    /// `lo = bf16_rne(r)` errs by at most half a bf16 spacing at `r`: at most
    /// `2^-8 |r| < 2^(e-15) <= 2^-15 |x|` if `r` is bf16-normal, and at most
    /// `2^-134` (half of the bf16 subnormal spacing 2^-133) otherwise.
    fn x3_bound(x: f32) -> f64 {
        (x.abs() as f64 * 2f64.powi(-15)).max(2f64.powi(-134))
    }

    #[test]
    fn bf16x6_split_threshold_is_real() {
        // x = 2^-111 (1 + 2^-23): r1 = 2^-134 is an f32 subnormal, mid = trunc(r1)
        // = 0 and lo = bf16_rne(2^-134) = 0 (a tie below the bf16 subnormal
        // spacing 2^-133, to even). So the split loses 2^-134 just below 2^-110.
        let x = 2f32.powi(-111) * (1.0 + f32::EPSILON);
        let (hi, mid, lo) = bf16x6_split(x);
        assert_eq!((hi, mid, lo), (2f32.powi(-111), 0.0, 0.0));
        assert_eq!(
            x as f64 - (hi as f64 + mid as f64 + lo as f64),
            2f64.powi(-134)
        );
        // And exactly at the threshold the same mantissa splits exactly.
        let y = 2f32.powi(-110) * (1.0 + f32::EPSILON);
        let (hi, mid, lo) = bf16x6_split(y);
        assert_eq!(hi as f64 + mid as f64 + lo as f64, y as f64);
        // Hand example of a normal split: x = 1 + 2^-8 + 2^-16 + 2^-23.
        let x = b(0x3F80_8081);
        let (hi, mid, lo) = bf16x6_split(x);
        assert_bits(hi, 0x3F80_0000); // 1
                                      // r1 = 2^-8 + 2^-16 + 2^-23; 2^-16 is its 9th bit, so trunc drops it.
        assert_eq!(mid, 2f32.powi(-8));
        assert_eq!(lo, 2f32.powi(-16) + 2f32.powi(-23));
        let (hi3, lo3) = bf16x3_split(x);
        assert_bits(hi3, 0x3F80_0000);
        // lo3 = bf16_rne(2^-8 + 2^-16 + 2^-23): the bf16 spacing at 2^-8 is 2^-15
        // and the remainder 2^-16 + 2^-23 is above half of it -> round up.
        assert_eq!(lo3, 2f32.powi(-8) + 2f32.powi(-15));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn roundings_are_monotone(x in any_non_nan(), y in any_non_nan()) {
            let (x, y) = if x <= y { (x, y) } else { (y, x) };
            prop_assert!(bf16_rne(x) <= bf16_rne(y));
            prop_assert!(bf16_trunc(x) <= bf16_trunc(y));
            prop_assert!(f16_rne(x) <= f16_rne(y));
            for m in [Tf32Mode::Rne, Tf32Mode::Rna, Tf32Mode::Trunc] {
                prop_assert!(tf32(x, m) <= tf32(y, m));
            }
        }

        /// Every rounding is idempotent and lands on the target grid.
        #[test]
        fn roundings_land_on_their_grid(x in any_non_nan()) {
            for r in [bf16_rne(x), bf16_trunc(x)] {
                prop_assert_eq!(r.to_bits() & 0xFFFF, 0);
                prop_assert_eq!(bf16_rne(r).to_bits(), r.to_bits());
            }
            for m in [Tf32Mode::Rne, Tf32Mode::Rna, Tf32Mode::Trunc] {
                let r = tf32(x, m);
                prop_assert_eq!(r.to_bits() & 0x1FFF, 0);
            }
            let h = f16_rne(x);
            prop_assert_eq!(f16_rne(h).to_bits(), h.to_bits());
        }

        /// Nearest modes: the result is one of the two neighbours on the grid and
        /// no farther than the other one (checked exactly in f64).
        #[test]
        fn nearest_modes_are_nearest(x in any_finite()) {
            let down = bf16_trunc(x); // toward zero
            let up_bits = down.to_bits() + 0x1_0000; // away from zero (may be inf)
            let up = b(up_bits);
            let r = bf16_rne(x);
            prop_assert!(r == down || r == up);
            if up.is_finite() {
                let other = if r == down { up } else { down };
                let (xe, re, oe) = (x as f64, r as f64, other as f64);
                prop_assert!((xe - re).abs() <= (xe - oe).abs());
            }
        }

        #[test]
        fn bf16x3_split_reconstructs_within_bound(x in any_finite()) {
            let (hi, lo) = bf16x3_split(x);
            prop_assert_eq!(hi.to_bits(), x.to_bits() & 0xFFFF_0000);
            prop_assert_eq!(lo.to_bits() & 0xFFFF, 0);
            // hi and lo are f32 values, their f64 sum is exact.
            let err = (x as f64 - (hi as f64 + lo as f64)).abs();
            prop_assert!(err <= x3_bound(x), "x={x:e} err={err:e}");
        }

        /// Derivation of exactness: `r1 = x - hi` is exact with at most 16
        /// significant bits, all at or above 2^(e-23). `mid` keeps the top 8 of
        /// them, so `r2 = r1 - mid` is exact with at most 8 significant bits at or
        /// above 2^(e-23). If `e >= -110` those bits are at or above 2^-133, the
        /// bf16 subnormal spacing, so r2 is a bf16 value and `lo == r2`. (If r1 is
        /// an f32 subnormal it is then a multiple of 2^-133 and trunc keeps all of
        /// it.) Below 2^-110, at most the bf16 rounding of r2 is lost: <= 2^-134.
        #[test]
        fn bf16x6_split_reconstructs(x in any_finite()) {
            let (hi, mid, lo) = bf16x6_split(x);
            for p in [hi, mid, lo] {
                prop_assert_eq!(p.to_bits() & 0xFFFF, 0);
            }
            let sum = hi as f64 + mid as f64 + lo as f64; // exact in f64
            let err = (x as f64 - sum).abs();
            if x.abs() >= 2f32.powi(-110) {
                prop_assert_eq!(err, 0.0, "x={:#010x}", x.to_bits());
                // The f32 sum is then exact too (it equals x).
                prop_assert_eq!(((hi + mid) + lo).to_bits(), x.to_bits());
            } else {
                prop_assert!(err <= 2f64.powi(-134));
            }
        }

        /// Same property on values near the threshold, where random bit patterns
        /// rarely land.
        #[test]
        fn bf16x6_split_near_threshold(m in 0u32..0x80_0000, e in -130i32..-100, neg in any::<bool>()) {
            let x = b(((e + 127).max(0) as u32) << 23 | m) * if neg { -1.0 } else { 1.0 };
            let (hi, mid, lo) = bf16x6_split(x);
            let err = (x as f64 - (hi as f64 + mid as f64 + lo as f64)).abs();
            if x.abs() >= 2f32.powi(-110) {
                prop_assert_eq!(err, 0.0);
            } else {
                prop_assert!(err <= 2f64.powi(-134));
            }
        }
    }
}
