//! The inputs of the loss and optimizer fixtures (`scripts/loss_torch.py`,
//! `scripts/optim_torch.py`), drawn again here instead of stored: SplitMix64 of
//! `(stream << 32) | index`, turned into an f32 with a sign, an exponent in a range and a full
//! 23-bit mantissa. The Python scripts define the same `splitmix64` and `draw_bits`.

/// SplitMix64's output function (Steele, Lea and Flood 2014; constants as published).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The digest the exhaustive-kernel scripts (`scripts/mkl_tanh_table.py`,
/// `scripts/mkl_sqrt_check.py`, `scripts/glibc_float_digests.py`) compute for one chunk of
/// f32 inputs `start..start + len` (as bit patterns) through `f`: the wrapping sum of
/// `splitmix64(out_bits | in_bits << 32)`.
pub fn chunk_digest(start: u64, len: u64, f: impl Fn(f32) -> f32) -> u64 {
    (start..start + len).fold(0u64, |sum, k| {
        let out = f(f32::from_bits(k as u32)).to_bits() as u64;
        sum.wrapping_add(splitmix64(out | (k << 32)))
    })
}

/// The hash of element `i` of `stream`.
pub fn hash(stream: u32, i: usize) -> u64 {
    splitmix64((u64::from(stream) << 32) | (i as u64 & 0xFFFF_FFFF))
}

/// Element `i` of `stream`: `±(1 + m/2^23)·2^e`, the sign from bit 63, `e` in `e_lo..=e_hi`
/// from bits 23..38, `m` from bits 0..22.
pub fn draw_one(stream: u32, i: usize, e_lo: i32, e_hi: i32) -> f32 {
    let h = hash(stream, i);
    let span = (e_hi - e_lo + 1) as u64;
    let e = e_lo + (((h >> 23) & 0xFFFF) % span) as i32;
    let bits = (((h >> 63) as u32) << 31) | (((127 + e) as u32) << 23) | (h as u32 & 0x7F_FFFF);
    f32::from_bits(bits)
}

/// `n` elements of `stream`.
pub fn draw(stream: u32, n: usize, e_lo: i32, e_hi: i32) -> Vec<f32> {
    (0..n).map(|i| draw_one(stream, i, e_lo, e_hi)).collect()
}

/// f32 values from 8 hex digits each.
pub fn hex32(h: &str) -> Vec<f32> {
    (0..h.len() / 8)
        .map(|i| f32::from_bits(u32::from_str_radix(&h[8 * i..8 * i + 8], 16).unwrap()))
        .collect()
}

/// f64 values from 16 hex digits each.
pub fn hex64(h: &str) -> Vec<f64> {
    (0..h.len() / 16)
        .map(|i| f64::from_bits(u64::from_str_radix(&h[16 * i..16 * i + 16], 16).unwrap()))
        .collect()
}
