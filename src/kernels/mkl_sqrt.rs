//! `torch.sqrt` on f32 CPU tensors, bit for bit: MKL's `vsSqrt` as it runs on the AMD EPYC
//! (Zen 4) the fixtures were measured on.
//!
//! torch's CPU `sqrt` on float tensors calls ATen's `vml::vsqrt`
//! (`aten/src/ATen/native/cpu/UnaryOpsKernel.cpp`, `aten/src/ATen/cpu/vml.h`), which on MKL
//! builds is `vmsSqrt(n, in, out, VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE)`. On this
//! CPU MKL's result is not the correctly rounded root: about 17 % of the inputs in [1, 4)
//! are one ulp off. Measured black-box (`scripts/mkl_sqrt_check.py`), MKL's value is that of
//! a Goldschmidt iteration seeded by the CPU's 12-bit reciprocal square root estimate
//! (`rsqrtps`), in f32 arithmetic without fused multiply-adds; [`sqrt_mkl_f32`] states the
//! order. Every f32 input, all 2^32 of them, gives torch's bits (`tests/suite/mkl_sqrt.rs`).
//!
//! The estimate `rsqrtps` returns is implementation-defined (Intel documents only a relative
//! error below 1.5·2^-12; AMD's values differ from Intel's), so it is not read from the CPU
//! here: [`rsqrt12_zen`] is a software copy of this CPU family's instruction, a measured
//! table (`data/rsqrt12_zen.bin`) that is proven equal to the hardware instruction on every
//! positive normal f32 by `tests/suite/mkl_sqrt.rs::rsqrt_table_matches_this_cpu` (ignored;
//! run it on another machine to see whether its estimate, and so likely its torch's sqrt, is
//! the same). Every machine running seedsweep computes the same bits.
//!
//! Allocation-free; no FMA anywhere (Rust never contracts `a * b + c`).

/// This CPU's `rsqrtps` estimate, measured: entry `q·4096 + m` holds the 12 fraction bits of
/// the estimate of `1/sqrt(x)` for `x` in `[1, 4)` with exponent parity `q` (`x` in `[1, 2)`
/// for 0, `[2, 4)` for 1) and top 12 mantissa bits `m`; the estimate itself is
/// `0.5 · (1 + bits·2^-12)`, in `[0.5, 1)`. Little-endian `u16`s.
static RSQRT12_ZEN_BYTES: &[u8; 16384] = include_bytes!("data/rsqrt12_zen.bin");

/// [`RSQRT12_ZEN_BYTES`] as an array (decoded at compile time).
static RSQRT12_ZEN: [u16; 8192] = {
    let b = RSQRT12_ZEN_BYTES;
    let mut t = [0u16; 8192];
    let mut i = 0;
    while i < 8192 {
        t[i] = u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
        i += 1;
    }
    t
};

/// The measured estimate table ([`RSQRT12_ZEN`]), for the tests.
pub fn rsqrt12_zen_table() -> &'static [u16; 8192] {
    &RSQRT12_ZEN
}

/// This CPU family's `rsqrtps`/`rsqrtss` estimate of `1/sqrt(x)` for a positive normal `x`
/// (AMD Zen 4, measured; see the module doc), in software.
///
/// The instruction's value depends only on the exponent's parity and the top 12 mantissa
/// bits, and scales exactly with the exponent: for `x = 4^k · x'` with `x'` in `[1, 4)`, the
/// estimate is the table's for `x'` times `2^-k`. Output: sign 0, exponent `126 - k`, the
/// table's 12 fraction bits, 11 zero bits. Not defined for zero, subnormal, infinite,
/// negative or NaN `x` (the caller never passes them).
#[inline]
pub fn rsqrt12_zen(x: f32) -> f32 {
    let b = x.to_bits();
    debug_assert!((0x0080_0000..0x7f80_0000).contains(&b), "{b:08x}");
    let e = (b >> 23) as i32 - 127;
    let q = e & 1;
    let k = (e - q) >> 1;
    let m = ((b >> 11) & 0xfff) as usize;
    let frac = RSQRT12_ZEN[(q as usize) << 12 | m] as u32;
    f32::from_bits((((126 - k) as u32) << 23) | (frac << 11))
}

/// The inputs MKL's vector loop takes (bits): positive normals below `0x7f7ff000` (the last
/// 4096 finite values are excluded: there MKL returns the correctly rounded root, as for
/// zeros, subnormals, infinities and NaNs; measured on all 2^32 inputs).
const FAST_LO: u32 = 0x0080_0000;
const FAST_HI: u32 = 0x7f7f_f000;

/// `torch.sqrt` on an f32 CPU tensor, bit for bit: MKL 2024.2's `vsSqrt` on an AMD Zen 4 CPU.
///
/// Order, for a positive normal `x` below `0x7f7ff000` (bits), every operation an f32
/// operation rounded to nearest, no FMA:
/// `r = rsqrt12_zen(x)`; `y = x·r`; `h = 0.5·r`; `e = 0.5 - y·h`; `y1 = y + y·e`;
/// `h1 = h + h·e`; `d = x - y1·y1`; result `y1 + d·h1`
/// (Goldschmidt's square root iteration, then one Newton correction with the rounded
/// residual). Every other input: `+0`, `-0` and `+inf` themselves, NaN quieted
/// (`bits | 0x0040_0000`), a negative number the default NaN `0x7fc00000`, and subnormals and
/// the top 4096 finite values the correctly rounded root.
///
/// Verified bit for bit against torch 2.15 on all 2^32 inputs (digests in
/// `tests/data/mkl_sqrt_digests.txt`) under: torch 2.15.0 x86-64 wheel, MKL 2024.2, this CPU
/// (AMD EPYC, Zen 4, AVX-512), one thread, `ATEN_CPU_CAPABILITY=avx2`. On a sample of 2^20
/// inputs MKL's result did not change with `VML_LA`/`VML_EP`, `MKL_ENABLE_INSTRUCTIONS=AVX2`,
/// `MKL_CBWR=COMPATIBLE`, `ATEN_CPU_CAPABILITY` (avx2, avx512, default), one or two threads,
/// the tensor's length, storage offset, stride or in-place use
/// (`scripts/mkl_sqrt_check.py --check-conditions`).
/// Another CPU may run another MKL code path or have another `rsqrtps` (an Intel CPU's
/// estimates differ): `tests/suite/mkl_sqrt.rs::rsqrt_table_matches_this_cpu` and the script's
/// `--check-conditions` check a machine in a minute or two.
#[inline]
pub fn sqrt_mkl_f32(x: f32) -> f32 {
    let b = x.to_bits();
    if b.wrapping_sub(FAST_LO) < FAST_HI - FAST_LO {
        let r = rsqrt12_zen(x);
        let y = x * r;
        let h = 0.5 * r;
        let e = 0.5 - y * h;
        let y1 = y + y * e;
        let h1 = h + h * e;
        let d = x - y1 * y1;
        return y1 + d * h1;
    }
    sqrt_special(x)
}

/// [`sqrt_mkl_f32`] outside MKL's fast range (module doc).
#[cold]
fn sqrt_special(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(x.to_bits() | 0x0040_0000)
    } else if x < 0.0 {
        f32::from_bits(0x7fc0_0000)
    } else {
        // -0, +0, +inf, subnormals and the top finite values: the correctly rounded root
        // (the f64 root of an f32 rounded once to f32 is the correctly rounded f32 root).
        (x as f64).sqrt() as f32
    }
}

/// Which f32 square root Adam's `exp_avg_sq.sqrt()` takes (`sqrt = "mkl" | "cr"` in a
/// profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SqrtKernel {
    /// MKL's `vsSqrt`, as `torch.sqrt` on the CPU ([`sqrt_mkl_f32`]).
    Mkl,
    /// The correctly rounded root; the default of profiles that do not name one.
    #[default]
    CorrectlyRounded,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_scales_with_the_exponent_and_stays_within_its_bound() {
        // The documented bound of rsqrtps, |r·sqrt(x) - 1| <= 1.5·2^-12, holds at both ends
        // of every table segment (the estimate is constant on a segment and sqrt monotone,
        // so the ends bound the error inside), and the table's exponent rule scales by 4.
        for q in 0..2u32 {
            for m in 0..4096u32 {
                let lo = f32::from_bits(((127 + q) << 23) | (m << 11));
                let hi = f32::from_bits(((127 + q) << 23) | (m << 11) | 0x7ff);
                let r = rsqrt12_zen(lo);
                assert_eq!(rsqrt12_zen(hi), r);
                for x in [lo, hi] {
                    let err = (r as f64) * (x as f64).sqrt() - 1.0;
                    assert!(err.abs() <= 1.5 * 2f64.powi(-12), "x {x:e}: error {err:e}");
                }
                for k in [-63i32, -20, 1, 20, 63] {
                    let xs = lo * 4f32.powi(k);
                    assert_eq!(rsqrt12_zen(xs), r * 2f32.powi(-k), "x {lo:e}·4^{k}");
                }
            }
        }
    }

    #[test]
    fn exact_squares_and_specials() {
        // A perfect square's root is exact (the iteration's error is below half an ulp).
        for k in 0..2048u32 {
            let y = 1.0 + k as f32 / 2048.0;
            assert_eq!(sqrt_mkl_f32(y * y), y, "{y}");
        }
        assert_eq!(sqrt_mkl_f32(0.0).to_bits(), 0);
        assert_eq!(sqrt_mkl_f32(-0.0).to_bits(), 0x8000_0000);
        assert_eq!(sqrt_mkl_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(sqrt_mkl_f32(-1.0).to_bits(), 0x7fc0_0000);
        assert_eq!(sqrt_mkl_f32(f32::NEG_INFINITY).to_bits(), 0x7fc0_0000);
        assert_eq!(
            sqrt_mkl_f32(f32::from_bits(0x7f80_0001)).to_bits(),
            0x7fc0_0001
        );
        assert_eq!(
            sqrt_mkl_f32(f32::from_bits(0xffc0_0000)).to_bits(),
            0xffc0_0000
        );
        assert_eq!(
            sqrt_mkl_f32(f32::from_bits(1)),
            (2f64.powi(-149).sqrt()) as f32
        );
    }
}
