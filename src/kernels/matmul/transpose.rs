//! Transposes: pure data movement (and, for the f64 one of |a|, a cleared sign bit), so every
//! compilation gives the same copy. f32: 8 × 8 AVX2 tiles or a scalar loop; f64: 8 × 8
//! AVX-512F register blocks or 32 × 32 cache tiles. A ragged edge is the last tile moved back
//! to end at the edge ([`tile_starts`]), overlapping the one before it.

use super::{Mat, MatMut};
use crate::kernels::isa::Isa;

/// `dst` (cols×rows) = transpose of `src` (rows×cols): pure data movement, so
/// both versions below give identical results.
pub(super) fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut [f32], isa: Isa) {
    assert!(src.len() == rows * cols && dst.len() == rows * cols);
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2; the
            // lengths were checked.
            unsafe { transpose_avx2(src, rows, cols, dst) };
            return;
        }
    }
    let _ = isa;
    transpose_scalar(src, rows, cols, dst);
}

/// `dst` (cols × rows) = `src` (rows × cols)ᵀ in f32, both row-major: 8 × 8 tiles on `isa`'s
/// AVX2, a scalar loop elsewhere (a copy: the same values either way).
///
/// Panics unless `src` is row-major and `dst` is its transpose's shape.
pub fn transpose_f32(src: Mat<'_, f32>, dst: MatMut<'_, f32>, isa: Isa) {
    let (rows, cols) = (src.rows, src.cols);
    assert!(
        dst.rows == cols && dst.cols == rows,
        "transpose_f32: dst is {}×{}, not {cols}×{rows}",
        dst.rows,
        dst.cols
    );
    transpose_into(src.row_major("transpose_f32"), rows, cols, dst.data, isa)
}

/// Scalar transpose (contiguous writes, strided reads).
fn transpose_scalar(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    for c in 0..cols {
        for r in 0..rows {
            dst[c * rows + r] = src[r * cols + c];
        }
    }
}

/// 8×8 tiles with AVX shuffles. A ragged right or bottom edge is the last tile moved back
/// to end at the edge ([`tile_starts`]), overlapping the tile before it (those elements are
/// written again with the same values); only a matrix with fewer than 8 rows or columns is
/// copied by [`transpose_scalar`].
///
/// # Safety
/// The CPU must support avx2, and `src.len() == dst.len() == rows * cols`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_avx2(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    use std::arch::x86_64::*;
    if rows < 8 || cols < 8 {
        return transpose_scalar(src, rows, cols, dst);
    }
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    for r0 in tile_starts(rows) {
        for c0 in tile_starts(cols) {
            // SAFETY: rows r0..r0+8 <= rows and columns c0..c0+8 <= cols, so
            // every load is inside src and every store inside dst.
            unsafe {
                let ld = |i: usize| _mm256_loadu_ps(sp.add((r0 + i) * cols + c0));
                let (x0, x1, x2, x3) = (ld(0), ld(1), ld(2), ld(3));
                let (x4, x5, x6, x7) = (ld(4), ld(5), ld(6), ld(7));
                let t0 = _mm256_unpacklo_ps(x0, x1);
                let t1 = _mm256_unpackhi_ps(x0, x1);
                let t2 = _mm256_unpacklo_ps(x2, x3);
                let t3 = _mm256_unpackhi_ps(x2, x3);
                let t4 = _mm256_unpacklo_ps(x4, x5);
                let t5 = _mm256_unpackhi_ps(x4, x5);
                let t6 = _mm256_unpacklo_ps(x6, x7);
                let t7 = _mm256_unpackhi_ps(x6, x7);
                let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
                let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
                let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
                let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
                let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
                let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
                let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
                let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
                let st = |j: usize, v: __m256| _mm256_storeu_ps(dp.add((c0 + j) * rows + r0), v);
                st(0, _mm256_permute2f128_ps::<0x20>(s0, s4));
                st(1, _mm256_permute2f128_ps::<0x20>(s1, s5));
                st(2, _mm256_permute2f128_ps::<0x20>(s2, s6));
                st(3, _mm256_permute2f128_ps::<0x20>(s3, s7));
                st(4, _mm256_permute2f128_ps::<0x31>(s0, s4));
                st(5, _mm256_permute2f128_ps::<0x31>(s1, s5));
                st(6, _mm256_permute2f128_ps::<0x31>(s2, s6));
                st(7, _mm256_permute2f128_ps::<0x31>(s3, s7));
            }
        }
    }
}

/// `dst` (cols × rows) = `src` (rows × cols)ᵀ, both row-major, in 32 × 32 tiles so that
/// both sides are walked a cache line at a time, or in 8 × 8 register blocks on `isa`'s
/// AVX-512F (a copy: no arithmetic, the same values either way).
///
/// Panics unless `src` is row-major and `dst` is its transpose's shape.
pub fn transpose_f64(src: Mat<'_, f64>, dst: MatMut<'_, f64>, isa: Isa) {
    let (rows, cols) = (src.rows, src.cols);
    assert!(
        dst.rows == cols && dst.cols == rows,
        "transpose_f64: dst is {}×{}, not {cols}×{rows}",
        dst.rows,
        dst.cols
    );
    transpose_f64_map::<false>(src.row_major("transpose_f64"), dst.data, rows, cols, isa)
}

/// [`transpose_f64`], of the absolute values when `ABS` (|x| clears the sign bit: exact).
/// Where `isa` has AVX-512F, the 8 × 8 blocks are transposed in registers
/// ([`transpose_f64_avx512`]); the result is the same copy.
pub(super) fn transpose_f64_map<const ABS: bool>(
    src: &[f64],
    dst: &mut [f64],
    rows: usize,
    cols: usize,
    isa: Isa,
) {
    assert_eq!(
        src.len(),
        rows * cols,
        "transpose_f64: src has the wrong length"
    );
    assert_eq!(
        dst.len(),
        rows * cols,
        "transpose_f64: dst has the wrong length"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F; the
            // lengths were checked above.
            return unsafe { transpose_f64_avx512::<ABS>(src, dst, rows, cols) };
        }
    }
    let _ = isa;
    transpose_f64_scalar::<ABS>(src, dst, rows, cols);
}

/// The portable [`transpose_f64_map`] of `src` (rows × cols) into `dst` (cols × rows), in
/// 32 × 32 tiles so that both sides are walked a cache line at a time.
fn transpose_f64_scalar<const ABS: bool>(src: &[f64], dst: &mut [f64], rows: usize, cols: usize) {
    const T: usize = 32;
    for r0 in (0..rows).step_by(T) {
        let r1 = (r0 + T).min(rows);
        for c0 in (0..cols).step_by(T) {
            let c1 = (c0 + T).min(cols);
            for r in r0..r1 {
                let row = &src[r * cols + c0..r * cols + c1];
                for (cc, &v) in (c0..c1).zip(row) {
                    dst[cc * rows + r] = if ABS { v.abs() } else { v };
                }
            }
        }
    }
}

/// [`transpose_f64_map`] with every 8 × 8 block transposed in registers (three rounds of
/// two-source permutes: pairs, quads, halves). A ragged right or bottom edge is the last
/// block moved back to end at the edge ([`tile_starts`]): it overlaps the block before it
/// and writes those elements again with the same values, so every element is moved by a
/// vector block. Only a matrix with fewer than 8 rows or columns is copied by
/// [`transpose_f64_scalar`]. A copy (and a cleared sign bit for `ABS`): the same values.
///
/// # Safety
/// The CPU must support AVX-512F; `src` and `dst` hold rows × cols elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_f64_avx512<const ABS: bool>(
    src: &[f64],
    dst: &mut [f64],
    rows: usize,
    cols: usize,
) {
    use std::arch::x86_64::*;
    if rows < 8 || cols < 8 {
        return transpose_f64_scalar::<ABS>(src, dst, rows, cols);
    }
    let idx = |v: [i64; 8]| _mm512_loadu_si512(v.as_ptr().cast());
    let pair_lo = idx([0, 8, 2, 10, 4, 12, 6, 14]);
    let pair_hi = idx([1, 9, 3, 11, 5, 13, 7, 15]);
    let quad_lo = idx([0, 1, 8, 9, 4, 5, 12, 13]);
    let quad_hi = idx([2, 3, 10, 11, 6, 7, 14, 15]);
    let half_lo = idx([0, 1, 2, 3, 8, 9, 10, 11]);
    let half_hi = idx([4, 5, 6, 7, 12, 13, 14, 15]);
    let sign = _mm512_set1_epi64(i64::MIN);
    let s = src.as_ptr();
    let d = dst.as_mut_ptr();
    for r0 in tile_starts(rows) {
        for c0 in tile_starts(cols) {
            // SAFETY: rows r0..r0 + 8 ≤ rows and columns c0..c0 + 8 ≤ cols are inside src.
            let x: [__m512d; 8] = std::array::from_fn(|q| {
                let v = _mm512_loadu_pd(s.add((r0 + q) * cols + c0));
                if ABS {
                    _mm512_castsi512_pd(_mm512_andnot_si512(sign, _mm512_castpd_si512(v)))
                } else {
                    v
                }
            });
            // t[2p] = (x[2p][c], x[2p+1][c]) for even c, t[2p+1] for odd c.
            let t: [__m512d; 8] = std::array::from_fn(|q| {
                let (a, b) = (x[q & !1], x[q | 1]);
                if q % 2 == 0 {
                    _mm512_permutex2var_pd(a, pair_lo, b)
                } else {
                    _mm512_permutex2var_pd(a, pair_hi, b)
                }
            });
            // u[4h + p]: rows 4h..4h + 4 of columns {p, p + 4} (p = c mod 4).
            let u: [__m512d; 8] = std::array::from_fn(|q| {
                let (h, p) = (q / 4, q % 4);
                let (a, b) = (t[4 * h + (p % 2)], t[4 * h + 2 + (p % 2)]);
                if p < 2 {
                    _mm512_permutex2var_pd(a, quad_lo, b)
                } else {
                    _mm512_permutex2var_pd(a, quad_hi, b)
                }
            });
            for c in 0..8 {
                let (a, b) = (u[c % 4], u[4 + c % 4]);
                let col = if c < 4 {
                    _mm512_permutex2var_pd(a, half_lo, b)
                } else {
                    _mm512_permutex2var_pd(a, half_hi, b)
                };
                // SAFETY: row c0 + c of dst (cols × rows), columns r0..r0 + 8, is inside it.
                _mm512_storeu_pd(d.add((c0 + c) * rows + r0), col);
            }
        }
    }
}

/// Where the 8-wide tiles of a dimension of `len` ≥ 8 start: 0, 8, 16, … while a whole tile
/// fits, then `len − 8` when `len` is not a multiple of 8 (the last tile overlapping the one
/// before it). Every index is in some tile, and every tile inside 0..len.
fn tile_starts(len: usize) -> impl Iterator<Item = usize> {
    debug_assert!(len >= 8);
    let full = len / 8 * 8;
    (0..full).step_by(8).chain((full < len).then_some(len - 8))
}
