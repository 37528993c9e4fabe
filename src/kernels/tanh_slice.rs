//! The f32 tanh of a slice, fast and exact: a vectorisable float64 approximation decides
//! every element whose rounding it can prove, and the exact scalar kernel
//! ([`tanh_mkl_f32`](super::torch_ops::tanh_mkl_f32) or
//! [`tanh_cr_f32`](super::torch_ops::tanh_cr_f32)) computes the rest. The result is bit for
//! bit the exact kernel's on every input (tested on every f32 input of the fast range by
//! `fast_path_equals_the_exact_kernels_on_its_whole_range`); only the time differs.
//!
//! **Fast approximation** (for `2^-12 <= |x| <= 9`): `a = |x|` in f64;
//! `e = exp(2a)` as `2^k · p(r)` with `k = round(2a·log2 e)` (the 1.5·2^52 rounding trick),
//! `r = (2a - k·LN2_HI) - k·LN2_LO` (`LN2_HI` has 21 trailing zero bits, so `k·LN2_HI` is
//! exact for |k| < 2^21), `p` the degree-13 Taylor polynomial of exp in Horner form (no FMA,
//! so every machine computes the same bits); `F = (e - 1) / (e + 1)` with the sign of `x`.
//!
//! **Error bound.** |r| <= ln2/2 + 2^-40, so the Taylor remainder is below
//! |r|^14/14! < 2^-57; argument reduction and 15 Horner roundings add at most 2^-48, so
//! `e` is within 2^-48 relative. `e - 1` then carries that error amplified by
//! `e/(e-1) <= 1 + 1/(2a) <= 2^12` at `a = 2^-12`, and the quotient adds 3 roundings:
//! `F` is within 2^-35.9 relative of tanh(x), i.e. below 0.0003 f32 ulp.
//!
//! **Decision.** With `r = F as f32`, the element takes `r` when `F` is at least
//! [`FAST_WINDOW`] = 0.0145 ulp away from the rounding midpoint on its side: the 29 mantissa
//! bits that the rounding to f32 discards, read as an integer, differ from `2^28` (the
//! midpoint) by at least ceil(0.0145 · 2^29). Then tanh(x) (within 0.0003 ulp of `F`), and
//! `libm::tanh(x)` (within 2^-29 ulp of tanh(x)), lie more than 0.0142 ulp from every
//! midpoint: they round to the same `r`, and outside MKL's 0.014-ulp exception window, where
//! [`tanh_mkl_f32`](super::torch_ops::tanh_mkl_f32) returns `r` as well. Every other element
//! (about 3 % of the fast range, plus NaN, infinities, |x| < 2^-12 and |x| > 9) goes to the
//! exact kernel. (The window was 0.03 ulp, over MKL's earlier 0.02-ulp window; the same
//! margins over the narrower one, and the exhaustive test below checks every input of the
//! fast range either way.)

use super::isa::Isa;
use super::tanh64_slice::tanh64_slice_on;
#[cfg(test)]
use super::torch_ops::{tanh_cr_f32, tanh_mkl_f32};
use super::torch_ops::{tanh_cr_f32_given, tanh_mkl_f32_given, TanhKernel};

/// Half-width, in f32 ulps, of the band around a rounding midpoint where the fast path
/// defers to the exact kernel (> MKL's 0.014-ulp window + the 0.0003-ulp fast error +
/// libm's 2^-29 ulp).
pub const FAST_WINDOW: f64 = 0.0145;

/// Smallest |x| the fast path takes (below it `e - 1` cancels too much for the bound).
pub const FAST_MIN: f32 = 1.0 / 4096.0;
/// Largest |x| the fast path takes (tanh rounds to ±1 from about 9.01 on).
pub const FAST_MAX: f32 = 9.0;

const LOG2E: f64 = std::f64::consts::LOG2_E;
/// ln 2 split so that `k · LN2_HI` is exact: the top 32 bits of ln 2.
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
/// 1.5 · 2^52: adding it rounds an f64 of magnitude < 2^51 to an integer held in the low
/// mantissa bits.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// 1/n! for n = 13 down to 2.
const INV_FACT: [f64; 12] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    1.0 / 2.0,
];

/// The fast approximation `F` for one element (any input: out-of-range inputs are clamped
/// and then rejected by [`decided`]'s caller).
#[inline(always)]
fn approx(x: f32) -> f64 {
    let a = (x.abs() as f64).clamp(FAST_MIN as f64, FAST_MAX as f64);
    let y = 2.0 * a;
    let t = y * LOG2E + ROUND;
    let k = t - ROUND;
    let r = (y - k * LN2_HI) - k * LN2_LO;
    let mut p = INV_FACT[0];
    for c in &INV_FACT[1..] {
        p = p * r + c;
    }
    p = p * r + 1.0;
    p = p * r + 1.0;
    let scale = f64::from_bits(t.to_bits().wrapping_add(1023) << 52);
    let e = p * scale;
    ((e - 1.0) / (e + 1.0)).copysign(x as f64)
}

/// The 29 low mantissa bits of an f64 are what rounding to f32 discards; the midpoint
/// between two f32 neighbours is at `1 << 28` in the binade of the value.
const DISCARDED: u64 = (1 << 29) - 1;
const MIDPOINT: i64 = 1 << 28;
/// [`FAST_WINDOW`] in units of the discarded bits: ceil(0.0145 · 2^29).
const WINDOW_BITS: i64 = 7_784_629;

/// Whether `f` (a normal f32-range value) is at least [`FAST_WINDOW`] ulp from the f32
/// rounding midpoint on its side, measured in its own binade (where that midpoint lies).
#[inline(always)]
fn decided(f: f64) -> bool {
    ((f.to_bits() & DISCARDED) as i64 - MIDPOINT).abs() >= WINDOW_BITS
}

/// Lanes per block: the fast approximation runs over a block with no branches (so the
/// compiler vectorises it), then each element takes its decided value or the exact kernel.
const BLOCK: usize = 16;

/// One block: `out[i] = F as f32` and `ok[i]` whether it is decided (and in range).
#[inline(always)]
fn block_body(x: &[f32; BLOCK], out: &mut [f32; BLOCK], ok: &mut [bool; BLOCK]) {
    for i in 0..BLOCK {
        let f = approx(x[i]);
        let a = x[i].abs();
        out[i] = f as f32;
        ok[i] = (FAST_MIN..=FAST_MAX).contains(&a) & decided(f);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn block_avx512(x: &[f32; BLOCK], out: &mut [f32; BLOCK], ok: &mut [bool; BLOCK]) {
    block_body(x, out, ok)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn block_avx2(x: &[f32; BLOCK], out: &mut [f32; BLOCK], ok: &mut [bool; BLOCK]) {
    block_body(x, out, ok)
}

/// The block kernel of `isa`'s compilation. Every variant computes the same IEEE operations
/// in the same order (no FMA contraction), so they return identical bits; and whatever the
/// fast path returns is proven (and tested) equal to the exact kernel anyway.
fn block_kernel(isa: Isa) -> fn(&[f32; BLOCK], &mut [f32; BLOCK], &mut [bool; BLOCK]) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return |x, o, k| unsafe { block_avx512(x, o, k) };
        }
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return |x, o, k| unsafe { block_avx2(x, o, k) };
        }
    }
    let _ = isa;
    block_body
}

/// `x = tanh(x)` elementwise, bit for bit [`tanh_mkl_f32`](super::torch_ops::tanh_mkl_f32)
/// (`TanhKernel::Mkl`) or [`tanh_cr_f32`](super::torch_ops::tanh_cr_f32)
/// (`TanhKernel::CorrectlyRounded`); see the module doc for the order. The elements the fast
/// path leaves are gathered into batches of up to 64 (`PENDING`), whose `libm::tanh` (the
/// exact kernels' first step) [`tanh64_slice`](super::tanh64_slice::tanh64_slice) computes
/// eight lanes at a time with the same bits; each then takes its kernel's last step ([`tanh_mkl_f32_given`],
/// [`tanh_cr_f32_given`]).
pub fn tanh_slice(x: &mut [f32], kernel: TanhKernel) {
    tanh_slice_on(Isa::detected(), x, kernel)
}

/// [`tanh_slice`] on the compilations `isa` names (the block kernel's, and
/// [`tanh64_slice_on`]'s for the elements the fast path leaves): the same bits on every one.
pub fn tanh_slice_on(isa: Isa, x: &mut [f32], kernel: TanhKernel) {
    let finish: fn(f32, f64) -> f32 = match kernel {
        TanhKernel::Mkl => tanh_mkl_f32_given,
        TanhKernel::CorrectlyRounded => tanh_cr_f32_given,
    };
    let run = block_kernel(isa);
    let (mut inp, mut out, mut ok) = ([0f32; BLOCK], [0f32; BLOCK], [false; BLOCK]);
    // The pending elements: their indices in `x` and their f64 values, then tanh's.
    let (mut at, mut t) = ([0usize; PENDING], [0f64; PENDING]);
    let mut pending = 0;
    let flush = |x: &mut [f32], at: &[usize], t: &mut [f64]| {
        tanh64_slice_on(isa, t);
        for (&i, &ti) in at.iter().zip(t.iter()) {
            x[i] = finish(x[i], ti);
        }
    };
    let mut start = 0;
    while start < x.len() {
        let len = BLOCK.min(x.len() - start);
        inp[..len].copy_from_slice(&x[start..start + len]);
        run(&inp, &mut out, &mut ok);
        for i in 0..len {
            if ok[i] {
                x[start + i] = out[i];
            } else {
                at[pending] = start + i;
                t[pending] = f64::from(x[start + i]);
                pending += 1;
            }
        }
        if pending > PENDING - BLOCK {
            flush(x, &at[..pending], &mut t[..pending]);
            pending = 0;
        }
        start += len;
    }
    flush(x, &at[..pending], &mut t[..pending]);
}

/// Most elements [`tanh_slice`] holds back for the exact kernel before computing them.
const PENDING: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// Every f32 bit pattern with FAST_MIN <= |x| <= FAST_MAX (both signs): the slice kernel
    /// equals the scalar exact kernel on each, for both kernels. Outside that range the slice
    /// kernel calls the scalar kernel itself. About 2.7 · 10^8 inputs.
    #[test]
    fn fast_path_equals_the_exact_kernels_on_its_whole_range() {
        let (lo, hi) = (FAST_MIN.to_bits(), FAST_MAX.to_bits());
        let chunks: Vec<u32> = (lo..=hi).step_by(1 << 16).collect();
        let (fast, total): (u64, u64) = chunks
            .par_iter()
            .map(|&start| {
                let end = (start + (1 << 16) - 1).min(hi);
                let mut fast = 0u64;
                let mut total = 0u64;
                let mut buf = Vec::with_capacity(1 << 17);
                for kernel in [TanhKernel::Mkl, TanhKernel::CorrectlyRounded] {
                    let exact: fn(f32) -> f32 = match kernel {
                        TanhKernel::Mkl => tanh_mkl_f32,
                        TanhKernel::CorrectlyRounded => tanh_cr_f32,
                    };
                    buf.clear();
                    for b in start..=end {
                        buf.push(f32::from_bits(b));
                        buf.push(-f32::from_bits(b));
                    }
                    let input = buf.clone();
                    tanh_slice(&mut buf, kernel);
                    for (&x, &y) in input.iter().zip(&buf) {
                        let want = exact(x);
                        assert_eq!(
                            y.to_bits(),
                            want.to_bits(),
                            "{kernel:?} tanh({x:e}) = {y:e}, exact {want:e}"
                        );
                        fast += u64::from(decided(approx(x)));
                        total += 1;
                    }
                }
                (fast, total)
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        // The fast path must decide the bulk of its range, or it is no faster: a 0.029-ulp
        // band of the 1-ulp rounding interval defers, so about 97 % is decided; asserted
        // > 95 %.
        assert!(
            fast * 20 > total * 19,
            "fast path decided {fast} of {total}"
        );
    }

    /// The special inputs go through the exact kernel: signed zeros, subnormals, the
    /// range ends and their neighbours, infinities and NaNs keep the exact kernel's bits.
    #[test]
    fn special_inputs_keep_the_exact_bits() {
        let mut specials = vec![
            0.0f32,
            -0.0,
            f32::from_bits(1),
            f32::MIN_POSITIVE,
            FAST_MIN,
            FAST_MIN.next_down(),
            FAST_MAX,
            FAST_MAX.next_up(),
            9.01,
            100.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
            f32::from_bits(0x7fa0_0001),
        ];
        specials.extend(specials.clone().iter().map(|x| -x));
        for kernel in [TanhKernel::Mkl, TanhKernel::CorrectlyRounded] {
            let mut y = specials.clone();
            tanh_slice(&mut y, kernel);
            for (&x, &y) in specials.iter().zip(&y) {
                let want = match kernel {
                    TanhKernel::Mkl => tanh_mkl_f32(x),
                    TanhKernel::CorrectlyRounded => tanh_cr_f32(x),
                };
                assert_eq!(y.to_bits(), want.to_bits(), "{kernel:?} tanh({x:e})");
            }
        }
    }
}
