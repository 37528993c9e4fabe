//! The float64 products (the ground truth's): every element is `c = +0`, then
//! `c = c + fl(a[i][kk]·b[kk][j])` for kk ascending, a product and a sum each rounded, never
//! fused. The kernels hold register blocks of rows × columns of `c` across the whole
//! reduction (one order per element whatever the blocks); one body, compiled for AVX-512F
//! (8-row groups for a big `b`), AVX2 and portably, picked by the [`Isa`] passed in. `nt`
//! transposes `b` first (whole or by panels) or, with few rows on AVX-512F, reads it in place
//! (`few_rows`); `tn` reads `a` through its transposed view.

use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use super::few_rows::nt_few_rows_f64_avx512;
use super::few_rows::{few_rows_nt_f64_runs, FEW_ROWS};
use super::transpose::transpose_f64_map;
use super::{nt_panel_width, scatter_columns, shapes, Mat, MatMut};
use crate::kernels::isa::Isa;

/// c (m×n) = a (m×k) · b (k×n), all row-major, f64: every element is
/// `c = 0; c = c + a[i][kk]·b[kk][j]` for kk ascending, the product and the sum each rounded
/// (no FMA). The loop runs j innermost over contiguous memory, so it vectorizes without
/// changing any element's order; `isa` picks the compilation (the same bits on each).
///
/// Panics unless the shapes agree and `a` and `b` are row-major.
pub fn matmul_f64(a: Mat<'_, f64>, b: Mat<'_, f64>, c: MatMut<'_, f64>, isa: Isa) {
    let (m, k, n) = shapes("matmul_f64", &a, &b, &c);
    let (a, b) = (a.row_major("matmul_f64"), b.row_major("matmul_f64"));
    matmul_f64_slices(a, b, c.data, m, k, n, isa);
}

/// [`matmul_f64`] of row-major slices (lengths checked by the kernel).
fn matmul_f64_slices(a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { matmul_f64_avx512(a, b, c, m, k, n) };
        }
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return unsafe { matmul_f64_avx2(a, b, c, m, k, n) };
        }
    }
    let _ = isa;
    matmul_f64_impl::<F64_GROUP_ROWS>(a, b, c, m, k, n);
}

/// [`matmul_f64`] compiled for AVX-512F: the same operations per element (a product and a
/// sum, each rounded: Rust never contracts them into an FMA), eight lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn matmul_f64_avx512(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
) {
    matmul_f64_impl::<F64_GROUP_ROWS_AVX512>(a, b, c, m, k, n);
}

/// [`matmul_f64`] compiled for AVX2: the same operations per element, wider vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn matmul_f64_avx2(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
) {
    matmul_f64_impl::<F64_GROUP_ROWS>(a, b, c, m, k, n);
}

/// Columns per register block of the f64 kernels: the accumulators of one block stay in
/// registers across the whole reduction.
const F64_BLOCK: usize = 16;

/// Rows of `c` per register group of [`f64_rows`] (4 × 16 columns: 16 AVX2 registers).
pub(super) const F64_GROUP_ROWS: usize = 4;

/// Rows of `c` per register group of [`f64_rows`] in the AVX-512 compilations for a big `b`
/// (8 × 16 columns: 16 of the 32 registers), so that `b` is read from memory once per 8
/// rows of `c` instead of once per 4 (rows are independent: grouping does not change any
/// element). See [`f64_grouped`].
const F64_GROUP_ROWS_AVX512: usize = 8;

/// Bytes of `b` from which the AVX-512 compilations group [`F64_GROUP_ROWS_AVX512`] rows:
/// below it `b` stays in the core's caches, and T1's small products (widths 35 and 67, a
/// few rows) ran about a third slower with 8-row groups than with 4.
pub(super) const F64_WIDE_GROUPS_FROM: usize = 1 << 20;

/// `c_rows[r][j] = Σ_kk a_at(r, kk)·b[kk][j]` for `R` consecutive rows of `c` (`c_rows`
/// holds them, R × n; `a_at(r, kk)` is row r's a-value at kk) and every column j, kk
/// ascending from `c = 0`, product then sum each rounded: [`f64_cols`] over blocks of
/// [`F64_BLOCK`] columns, then one block of 8 where it fits, then for a ragged end one block
/// of 8 ending at n (overlapping the block before it) or, below 8 columns, one block of
/// all n. Every element has that one order whatever R and the blocks are.
#[inline(always)]
fn f64_rows<const R: usize>(
    a_at: impl Fn(usize, usize) -> f64 + Copy,
    b: &[f64],
    c_rows: &mut [f64],
    k: usize,
    n: usize,
) {
    let mut j0 = 0;
    while j0 + F64_BLOCK <= n {
        f64_cols::<R, F64_BLOCK>(a_at, b, c_rows, k, n, j0);
        j0 += F64_BLOCK;
    }
    if j0 + 8 <= n {
        f64_cols::<R, 8>(a_at, b, c_rows, k, n, j0);
        j0 += 8;
    }
    if j0 < n && n >= 8 {
        // A ragged end: one 8-wide block ending at n, over columns the blocks before it
        // computed too (each element is its own chain: the same bits again).
        return f64_cols::<R, 8>(a_at, b, c_rows, k, n, n - 8);
    }
    match n - j0 {
        0 => {}
        1 => f64_cols::<R, 1>(a_at, b, c_rows, k, n, j0),
        2 => f64_cols::<R, 2>(a_at, b, c_rows, k, n, j0),
        3 => f64_cols::<R, 3>(a_at, b, c_rows, k, n, j0),
        4 => f64_cols::<R, 4>(a_at, b, c_rows, k, n, j0),
        5 => f64_cols::<R, 5>(a_at, b, c_rows, k, n, j0),
        6 => f64_cols::<R, 6>(a_at, b, c_rows, k, n, j0),
        _ => f64_cols::<R, 7>(a_at, b, c_rows, k, n, j0),
    }
}

/// Columns `j0..j0 + W` of the `R` rows of [`f64_rows`]: the R × W accumulators stay in
/// registers across the whole reduction (W and R are constants), each piece of `b` is loaded
/// once for all R rows, and the R · W independent chains hide the latency of the additions
/// (an accumulator kept in memory instead, as a loop over a run-time tail width does, costs
/// a store and a reload per kk). Per element: `c = 0; c = c + a·b` for kk ascending.
#[inline(always)]
fn f64_cols<const R: usize, const W: usize>(
    a_at: impl Fn(usize, usize) -> f64,
    b: &[f64],
    c_rows: &mut [f64],
    k: usize,
    n: usize,
    j0: usize,
) {
    let mut acc = [[0.0f64; W]; R];
    // The last row's block checked once: every kk < k reads inside b.
    assert!(
        k == 0 || (j0 + W <= n && (k - 1) * n + j0 + W <= b.len()),
        "f64_cols: b too short"
    );
    for kk in 0..k {
        // SAFETY: kk < k and the check above: the W values from kk·n + j0 are within b.
        let b_blk: &[f64; W] = unsafe { &*b.as_ptr().add(kk * n + j0).cast::<[f64; W]>() };
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let av = a_at(r, kk);
            for j in 0..W {
                acc_r[j] += av * b_blk[j];
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        c_rows[r * n + j0..r * n + j0 + W].copy_from_slice(acc_r);
    }
}

/// Every row of `c` (m × n) by [`f64_rows`], `G` rows at a time ([`F64_GROUP_ROWS`], or
/// [`F64_GROUP_ROWS_AVX512`]; at most 8) and the last m mod G rows as one smaller group (in
/// the AVX-512 compilation, 9 to 12 rows with a big `b` as one group of all of them);
/// `a_at(i, kk)` is a[i][kk] in either layout, called only with i < m and kk < k. A `G`
/// above [`F64_GROUP_ROWS`] is used only for a `b` of [`F64_WIDE_GROUPS_FROM`] bytes or
/// more (the same elements either way).
#[inline(always)]
fn f64_grouped<const G: usize>(
    a_at: impl Fn(usize, usize) -> f64 + Copy,
    b: &[f64],
    c: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
) {
    if G > F64_GROUP_ROWS && b.len() * 8 < F64_WIDE_GROUPS_FROM {
        return f64_grouped::<F64_GROUP_ROWS>(a_at, b, c, m, k, n);
    }
    if G > F64_GROUP_ROWS {
        // A big `b` and 9 to 12 rows: one group, so `b` is read from memory once (a group
        // of 8 and one of the rest read it twice; 32 % less time for the float64 side of a
        // V = 32,000 head's step). 12 × 16 columns: 24 of the 32 registers.
        match m {
            9 => return f64_rows::<9>(a_at, b, c, k, n),
            10 => return f64_rows::<10>(a_at, b, c, k, n),
            11 => return f64_rows::<11>(a_at, b, c, k, n),
            12 => return f64_rows::<12>(a_at, b, c, k, n),
            _ => {}
        }
    }
    let full = m - m % G;
    for i0 in (0..full).step_by(G) {
        let rows = &mut c[i0 * n..(i0 + G) * n];
        f64_rows::<G>(|r, kk| a_at(i0 + r, kk), b, rows, k, n);
    }
    let rest = &mut c[full * n..m * n];
    let at = |r: usize, kk: usize| a_at(full + r, kk);
    match m - full {
        0 => {}
        1 => f64_rows::<1>(at, b, rest, k, n),
        2 => f64_rows::<2>(at, b, rest, k, n),
        3 => f64_rows::<3>(at, b, rest, k, n),
        4 => f64_rows::<4>(at, b, rest, k, n),
        5 => f64_rows::<5>(at, b, rest, k, n),
        6 => f64_rows::<6>(at, b, rest, k, n),
        _ => f64_rows::<7>(at, b, rest, k, n),
    }
}

#[inline(always)]
pub(super) fn matmul_f64_impl<const G: usize>(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
) {
    assert_eq!(a.len(), m * k, "matmul_f64: a has the wrong length");
    assert_eq!(b.len(), k * n, "matmul_f64: b has the wrong length");
    assert_eq!(c.len(), m * n, "matmul_f64: c has the wrong length");
    if n == 0 {
        return;
    }
    // SAFETY (both closures): the kernels call a_at(i, kk) only with i < m and kk < k, and
    // a.len() == m·k was checked above.
    let a_at = |i: usize, kk: usize| unsafe { *a.get_unchecked(i * k + kk) };
    f64_grouped::<G>(a_at, b, c, m, k, n);
}

/// c (m×n) = a (m×k) · bᵀ, b (n×k) row-major, f64, same order as [`matmul_f64`]; `b` is
/// transposed into `scratch` first (a copy), all at once or, for a big `b` and few rows,
/// one cache-sized panel of columns at a time ([`nt_panel_width`]); with at most 16 rows on
/// `isa`'s AVX-512F, read in place (`few_rows`).
///
/// Panics unless the shapes agree and `a` and `b` are row-major.
pub fn matmul_nt_f64(
    a: Mat<'_, f64>,
    b: Mat<'_, f64>,
    c: MatMut<'_, f64>,
    scratch: &mut Vec<f64>,
    isa: Isa,
) {
    nt_f64::<false>(a, b, c, scratch, isa)
}

/// Scratch elements [`matmul_nt_f64`], [`matmul_nt_abs_f64`] or [`matmul_nt_and_abs_f64`] of
/// this shape takes on the detected [`Isa`] (the few-rows kernel's buffers, two of `c`'s for both
/// products, or |a| and one transposed panel with its block of `c`, or all of `b`
/// transposed): what a memory bound counts.
pub fn nt_f64_scratch_elems(m: usize, k: usize, n: usize) -> usize {
    if few_rows_nt_f64_runs(m, k, n, Isa::detected()) {
        return (k + 2 * n) * FEW_ROWS;
    }
    m * k + nt_panel_width(m, k, n, 8).map_or(k * n, |w| k * w + m * w)
}

/// c (m×n) = |a| · |b|ᵀ, b (n×k) row-major: `Σ_k |a[i][k]·b[j][k]|`, the scale of a matmul's
/// rounding-error bounds. [`matmul_nt_f64`] of the absolute values, bit for bit (|x| is
/// exact), with |b| taken while `b` is transposed into the scratch instead of in a copy of
/// all of `b` (131 MB for a 32,000 × 512 head).
pub fn matmul_nt_abs_f64(
    a: Mat<'_, f64>,
    b: Mat<'_, f64>,
    c: MatMut<'_, f64>,
    scratch: &mut Vec<f64>,
    isa: Isa,
) {
    nt_f64::<true>(a, b, c, scratch, isa)
}

/// [`matmul_nt_f64`], of |a| and |b| when `ABS`. Scratch: |a| (m × k) when `ABS`, then `b`
/// transposed, all at once or one panel at a time ([`nt_panel_width`]) with the panel's
/// block of c.
fn nt_f64<const ABS: bool>(
    a: Mat<'_, f64>,
    b: Mat<'_, f64>,
    c: MatMut<'_, f64>,
    scratch: &mut Vec<f64>,
    isa: Isa,
) {
    let (m, k, n) = shapes("matmul_nt_f64", &a, &b.t(), &c);
    a.row_major("matmul_nt_f64");
    b.row_major("matmul_nt_f64");
    #[cfg(target_arch = "x86_64")]
    if few_rows_nt_f64_runs(m, k, n, isa) {
        // SAFETY: the `Isa` reaches AVX-512F (few_rows_nt_f64_runs); the shapes were checked.
        return unsafe {
            if ABS {
                nt_few_rows_f64_avx512::<false, true>(a, b, &mut [], c.data, scratch)
            } else {
                nt_few_rows_f64_avx512::<true, false>(a, b, c.data, &mut [], scratch)
            }
        };
    }
    let (a, b, c) = (a.data, b.data, c.data);
    let na = if ABS { m * k } else { 0 };
    let width = nt_panel_width(m, k, n, 8);
    // Every element of the scratch is overwritten before it is read.
    scratch.resize(na + width.map_or(k * n, |w| k * w + m * w), 0.0);
    let (sa, rest) = scratch.split_at_mut(na);
    let a: &[f64] = if ABS {
        for (d, &x) in sa.iter_mut().zip(a) {
            *d = x.abs();
        }
        sa
    } else {
        a
    };
    let Some(width) = width else {
        transpose_f64_map::<ABS>(b, rest, n, k, isa);
        return matmul_f64_slices(a, rest, c, m, k, n, isa);
    };
    // Panel by panel, as `MatmulModel::matmul_nt` does: rows j0..j0 + p of b transposed
    // into a k × p panel, then the m × p block of c, copied into its columns.
    let (bt, cp) = rest.split_at_mut(k * width);
    for j0 in (0..n).step_by(width) {
        let p = width.min(n - j0);
        transpose_f64_map::<ABS>(&b[j0 * k..(j0 + p) * k], &mut bt[..k * p], p, k, isa);
        matmul_f64_slices(a, &bt[..k * p], &mut cp[..m * p], m, k, p, isa);
        scatter_columns(&cp[..m * p], c, n, j0, p);
    }
}

/// c (m×n) = aᵀ · b, a (k×m) row-major, f64, same order as [`matmul_f64`]: all its rows
/// through [`matmul_tn_f64_rows`].
///
/// Panics unless the shapes agree and `a` and `b` are row-major.
pub fn matmul_tn_f64(a: Mat<'_, f64>, b: Mat<'_, f64>, c: MatMut<'_, f64>, isa: Isa) {
    let m = a.cols;
    matmul_tn_f64_rows(a, b, c, 0..m, isa);
}

/// Rows `rows` of [`matmul_tn_f64`]'s c (m×n), written to `c_rows` (`rows.len()`×n), each
/// element by the same operations in the same order as `matmul_tn_f64` (the same register
/// blocks, chosen by the size of `b`; rows are independent of each other).
///
/// Panics unless `a` (k×m) and `b` (k×n) are row-major, `rows` lies in `0..m` and
/// `c_rows` is `rows.len()`×n.
pub fn matmul_tn_f64_rows(
    a: Mat<'_, f64>,
    b: Mat<'_, f64>,
    c_rows: MatMut<'_, f64>,
    rows: Range<usize>,
    isa: Isa,
) {
    let part = a.columns(rows.clone()).t();
    shapes("matmul_tn_f64_rows", &part, &b, &c_rows);
    let (m, k, n) = (a.cols, a.rows, b.cols);
    let (a, b) = (
        a.row_major("matmul_tn_f64_rows"),
        b.row_major("matmul_tn_f64_rows"),
    );
    let c_rows = c_rows.data;
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            return unsafe { matmul_tn_f64_rows_avx512(a, b, c_rows, m, k, n, rows) };
        }
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2.
            return unsafe { matmul_tn_f64_rows_avx2(a, b, c_rows, m, k, n, rows) };
        }
    }
    let _ = isa;
    matmul_tn_f64_rows_impl::<F64_GROUP_ROWS>(a, b, c_rows, m, k, n, rows);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn matmul_tn_f64_rows_avx512(
    a: &[f64],
    b: &[f64],
    c_rows: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    rows: Range<usize>,
) {
    matmul_tn_f64_rows_impl::<F64_GROUP_ROWS_AVX512>(a, b, c_rows, m, k, n, rows);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn matmul_tn_f64_rows_avx2(
    a: &[f64],
    b: &[f64],
    c_rows: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    rows: Range<usize>,
) {
    matmul_tn_f64_rows_impl::<F64_GROUP_ROWS>(a, b, c_rows, m, k, n, rows);
}

#[inline(always)]
fn matmul_tn_f64_rows_impl<const G: usize>(
    a: &[f64],
    b: &[f64],
    c_rows: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    rows: Range<usize>,
) {
    assert!(
        a.len() == m * k && b.len() == k * n && rows.start <= rows.end && rows.end <= m,
        "matmul_tn_f64_rows: operand lengths or row range"
    );
    assert_eq!(
        c_rows.len(),
        rows.len() * n,
        "matmul_tn_f64_rows: c_rows length"
    );
    if n == 0 || rows.is_empty() {
        return;
    }
    let r0 = rows.start;
    // SAFETY: the kernels call a_at(i, kk) only with i < rows.len() and kk < k, so the index
    // kk·m + r0 + i < (k − 1)·m + rows.end ≤ k·m = a.len() (checked above).
    let a_at = |i: usize, kk: usize| unsafe { *a.get_unchecked(kk * m + r0 + i) };
    f64_grouped::<G>(a_at, b, c_rows, rows.len(), k, n);
}
