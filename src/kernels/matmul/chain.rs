//! The f32 chain and pairwise kernels: every element of `c = a·b` is, per K block of the
//! model's split in ascending order, the chain `t = +0; t = fma(a[i][kk], b[kk][j], t)`
//! (`Accum::Fma`) or `t = t + fl(a[i][kk]·b[kk][j])` (`Accum::MulAdd`) for kk ascending, or
//! the pairwise tree of the block's rounded products (`Accum::Pairwise`); the block results
//! are added left to right. The loops group elements into register tiles (spans of rows,
//! tiles of rows × 16 columns, an overlapping ragged end) without changing any element's
//! order. One body, compiled for AVX-512F (8-row tiles), for AVX2 and FMA, and portably; the
//! [`Isa`] of the call picks one.

use std::ops::Range;

use super::{Accum, KSplit, Mat};
use crate::kernels::isa::Isa;

/// One f32 matmul term in a split/accum order, and the compilation it runs on.
#[derive(Clone, Copy)]
pub(super) struct Kernel {
    pub(super) split: KSplit,
    pub(super) accum: Accum,
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) n: usize,
    pub(super) isa: Isa,
}

impl Kernel {
    /// `c = a · b` in the model order (`a` m × k in any layout, `b` k × n row-major). `acc`
    /// holds at least n, `pw` at least (longest block)·n elements when accum is Pairwise.
    pub(super) fn run(
        &self,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        c: &mut [f32],
        acc: &mut [f32],
        pw: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.isa.avx512() {
                // SAFETY: an `Isa` of this level exists only where the CPU supports
                // AVX-512F, AVX2 and FMA.
                unsafe { kernel_avx512(self, a, b, c, acc, pw) };
                return;
            }
            if self.isa.avx2() {
                // SAFETY: an `Isa` of this level exists only where the CPU supports AVX2 and
                // FMA.
                unsafe { kernel_avx2_fma(self, a, b, c, acc, pw) };
                return;
            }
        }
        kernel_body_g::<GROUP_ROWS>(self, a, b, c, acc, pw);
    }
}

/// The kernel compiled for AVX-512F (with AVX2 and FMA): the same chains, with register
/// tiles of [`GROUP_ROWS_AVX512`] rows (a 16-column tile row is one 512-bit register, so
/// twice the rows keep as many independent chains in flight as the AVX2 tiles do).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn kernel_avx512(
    kern: &Kernel,
    a: Mat<'_, f32>,
    b: Mat<'_, f32>,
    c: &mut [f32],
    acc: &mut [f32],
    pw: &mut [f32],
) {
    kernel_body_g::<GROUP_ROWS_AVX512>(kern, a, b, c, acc, pw);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_avx2_fma(
    kern: &Kernel,
    a: Mat<'_, f32>,
    b: Mat<'_, f32>,
    c: &mut [f32],
    acc: &mut [f32],
    pw: &mut [f32],
) {
    kernel_body_g::<GROUP_ROWS>(kern, a, b, c, acc, pw);
}

/// The chain or pairwise kernel with register tiles of up to `G` rows (the order of every
/// element's chain does not depend on how rows are grouped into tiles): [`GROUP_ROWS`] in
/// the AVX2 and portable compilations, [`GROUP_ROWS_AVX512`] in the AVX-512 one.
#[inline(always)]
fn kernel_body_g<const G: usize>(
    kern: &Kernel,
    a: Mat<'_, f32>,
    b: Mat<'_, f32>,
    c: &mut [f32],
    acc: &mut [f32],
    pw: &mut [f32],
) {
    match kern.accum {
        Accum::Fma => chain_matmul::<true, G>(kern, a, b, c, acc),
        Accum::MulAdd => chain_matmul::<false, G>(kern, a, b, c, acc),
        Accum::Pairwise => pairwise_matmul(kern, a, b, c, pw),
    }
}

#[inline(always)]
fn chain_matmul<const FMA: bool, const G: usize>(
    kern: &Kernel,
    a: Mat<'_, f32>,
    b: Mat<'_, f32>,
    c: &mut [f32],
    acc: &mut [f32],
) {
    let (m, n) = (kern.m, kern.n);
    if n == 0 {
        return;
    }
    if n < 8 {
        // Single-row tiles of the exact width.
        for i in 0..m {
            chain_row::<FMA>(kern, a, i, b, &mut c[i * n..(i + 1) * n], &mut acc[..n]);
        }
        return;
    }
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(SPAN_ROWS);
        let c_rows = &mut c[i * n..(i + rows) * n];
        if rows == 1 {
            // A lone row: [`chain_row`]'s wide tiles keep more chains in flight.
            chain_row::<FMA>(kern, a, i, b, c_rows, &mut acc[..n]);
        } else {
            chain_span::<FMA, G>(kern, a, i, rows, b, c_rows, &mut acc[..rows * n]);
        }
        i += rows;
    }
}

/// Rows of `c` the chain kernel computes in one span ([`chain_span`]): they share each
/// tile strip of `b` while it is in L1.
pub(super) const SPAN_ROWS: usize = 16;

/// Rows of `c` one register tile holds ([`tile_rows`]).
const GROUP_ROWS: usize = 4;

/// Rows of `c` one register tile holds in the AVX-512 kernel ([`kernel_avx512`]).
const GROUP_ROWS_AVX512: usize = 8;

/// Most rows [`span_tiles`] computes as a single tile when a span has no more: ten in
/// the AVX-512 compilation (32 registers hold ten rows of chains), G in the others. Ten
/// rows (T1's tokens, the row count of most of its products) as one tile of ten chains
/// per column instead of 8 + 2: a tile of two rows is bound by the latency of its
/// chains, and took as long as the tile of eight (the 10-row products ran 10–25 % faster
/// as one tile, measured on this crate's 2-core Zen machine; 9–16 rows as 8 + the rest
/// stayed faster than one tile of more).
const fn single_tile_rows(g: usize) -> usize {
    if g >= GROUP_ROWS_AVX512 {
        10
    } else {
        g
    }
}

/// Row `i` of `c` (`c_row`, n wide): for each K block, the chain of every element
/// ([`chain_block`]), block results added left to right into `c_row`.
#[inline(always)]
fn chain_row<const FMA: bool>(
    kern: &Kernel,
    a: Mat<'_, f32>,
    i: usize,
    b: Mat<'_, f32>,
    c_row: &mut [f32],
    acc: &mut [f32],
) {
    let (split, k) = (kern.split, kern.k);
    let a_off = i * a.rs;
    let mut first = true;
    for r in split.blocks(k) {
        if first {
            chain_block::<FMA>(a, a_off, b, r, c_row);
            first = false;
        } else {
            chain_block::<FMA>(a, a_off, b, r, acc);
            for (x, &y) in c_row.iter_mut().zip(acc.iter()) {
                *x += y;
            }
        }
    }
    if first {
        c_row.fill(0.0); // K = 0: no blocks
    }
}

/// Rows `i..i + rows` of `c` (`c_rows`, rows × n, n ≥ 8, rows ≤ [`SPAN_ROWS`]) in the order
/// of [`chain_row`] for each element (per K block the chain over kk ascending, block results
/// added left to right), computed in register tiles of up to [`GROUP_ROWS`] rows × 16
/// columns: each load of `b` serves every row of a tile, and for each K block the tiles of
/// all the span's rows run over one column strip of `b` before the next, so the strip is
/// read from memory once per span (a head's `dy·W` at V = 32,000 reads `W` once instead of
/// m / 4 times, column strip by column strip). Tiles are 16 columns wide; a ragged end is
/// one tile ending at n that overlaps the one before (lanes are independent chains: a lane
/// computed twice gives the same bits).
#[inline(always)]
fn chain_span<const FMA: bool, const G: usize>(
    kern: &Kernel,
    a: Mat<'_, f32>,
    i: usize,
    rows: usize,
    b: Mat<'_, f32>,
    c_rows: &mut [f32],
    acc: &mut [f32],
) {
    let (split, k, n) = (kern.split, kern.k, b.cols);
    let mut first = true;
    for r in split.blocks(k) {
        let dst: &mut [f32] = if first { c_rows } else { acc };
        let mut j = 0;
        while j + 16 <= n {
            span_tiles::<16, FMA, G>(a, i, rows, b, r.clone(), j, dst);
            j += 16;
        }
        if j < n {
            if n - j <= 8 {
                span_tiles::<8, FMA, G>(a, i, rows, b, r.clone(), n - 8, dst);
            } else if n >= 16 {
                span_tiles::<16, FMA, G>(a, i, rows, b, r.clone(), n - 16, dst);
            } else {
                // 8 < n < 16: two 8-wide tiles.
                span_tiles::<8, FMA, G>(a, i, rows, b, r.clone(), 0, dst);
                span_tiles::<8, FMA, G>(a, i, rows, b, r.clone(), n - 8, dst);
            }
        }
        if first {
            first = false;
        } else {
            for (x, &y) in c_rows.iter_mut().zip(acc.iter()) {
                *x += y;
            }
        }
    }
    if first {
        c_rows.fill(0.0); // K = 0: no blocks
    }
}

/// Columns `j..j + W` of rows `i..i + rows` of `dst` (rows × n, rows ≥ 2) for one K block:
/// tiles of `G` rows ([`GROUP_ROWS`], or [`GROUP_ROWS_AVX512`]), the last one shorter but
/// never a single row (G + 1 rows left are split in two: five are 3 + 2, nine 5 + 4), so
/// every tile keeps at least two rows of chains in flight ([`tile_rows`]); up to
/// [`single_tile_rows`]`(G)` rows are one tile. G ≤ 8.
#[inline(always)]
fn span_tiles<const W: usize, const FMA: bool, const G: usize>(
    a: Mat<'_, f32>,
    i: usize,
    rows: usize,
    b: Mat<'_, f32>,
    r: Range<usize>,
    j: usize,
    dst: &mut [f32],
) {
    let n = b.cols;
    let mut g = 0;
    while g < rows {
        let d = &mut dst[g * n..];
        // Never a single-row tile: G + 1 rows left are split (G + 1) / 2 + the rest.
        let left = rows - g;
        let take = if left <= single_tile_rows(G) {
            left
        } else if left == G + 1 {
            left / 2 + 1
        } else {
            left.min(G)
        };
        match take {
            10 => tile_rows::<10, W, FMA>(a, i + g, b, r.clone(), j, d),
            9 => tile_rows::<9, W, FMA>(a, i + g, b, r.clone(), j, d),
            8 => tile_rows::<8, W, FMA>(a, i + g, b, r.clone(), j, d),
            7 => tile_rows::<7, W, FMA>(a, i + g, b, r.clone(), j, d),
            6 => tile_rows::<6, W, FMA>(a, i + g, b, r.clone(), j, d),
            5 => tile_rows::<5, W, FMA>(a, i + g, b, r.clone(), j, d),
            4 => tile_rows::<4, W, FMA>(a, i + g, b, r.clone(), j, d),
            3 => tile_rows::<3, W, FMA>(a, i + g, b, r.clone(), j, d),
            _ => {
                debug_assert_eq!(take, 2);
                tile_rows::<2, W, FMA>(a, i + g, b, r.clone(), j, d)
            }
        }
        g += take;
    }
}

/// `dst[q·n + j..][..W] = chain over kk in r of a(i + q, kk) · b[kk][j..j + W]` for q < R:
/// R × W independent chains held in registers over the whole block, each `b` load shared
/// by the R rows.
#[inline(always)]
fn tile_rows<const R: usize, const W: usize, const FMA: bool>(
    a: Mat<'_, f32>,
    i: usize,
    b: Mat<'_, f32>,
    r: Range<usize>,
    j: usize,
    dst: &mut [f32],
) {
    let (b, n) = (b.data, b.cols);
    let mut t = [[0.0f32; W]; R];
    // Every index the loop reads grows with kk and q, so checking the last ones once covers
    // them all and the loop runs without per-load bounds checks.
    if let Some(last) = r.end.checked_sub(1).filter(|_| !r.is_empty()) {
        assert!(last * n + j + W <= b.len(), "tile_rows: b too short");
        assert!(
            (i + R - 1) * a.rs + last * a.cs < a.data.len(),
            "tile_rows: a too short"
        );
    }
    // One loop, instantiated per layout of `a` with its own element accessor, so that the
    // two layouts the model's products use read a's element of row q through one base
    // pointer plus a constant offset (a transposed view, rs = 1: the R values of one kk are
    // adjacent) or through one pointer per row (row-major, cs = 1), not through an address
    // computed from two run-time strides per row and step.
    #[inline(always)]
    fn run<const R: usize, const W: usize, const FMA: bool>(
        t: &mut [[f32; W]; R],
        b: &[f32],
        n: usize,
        j: usize,
        r: Range<usize>,
        av: impl Fn(usize, usize) -> f32,
    ) {
        for kk in r {
            // SAFETY: kk ≤ the last index checked in `tile_rows`, so the W values of b from
            // kk·n + j are within b.
            let bv: &[f32; W] = unsafe { &*b.as_ptr().add(kk * n + j).cast::<[f32; W]>() };
            for (q, tq) in t.iter_mut().enumerate() {
                let a = av(kk, q);
                for l in 0..W {
                    tq[l] = chain_step::<FMA>(a, bv[l], tq[l]);
                }
            }
        }
    }
    let base = a.data.as_ptr();
    // SAFETY (the three accessors): they are called with kk in r and q < R, whose elements
    // (i + q)·rs + kk·ks lie within a (checked above).
    if a.rs == 1 {
        run::<R, W, FMA>(&mut t, b, n, j, r, |kk, q| unsafe {
            *base.add(i + kk * a.cs).add(q)
        });
    } else if a.cs == 1 {
        let rows: [*const f32; R] = std::array::from_fn(|q| unsafe { base.add((i + q) * a.rs) });
        run::<R, W, FMA>(&mut t, b, n, j, r, |kk, q| unsafe { *rows[q].add(kk) });
    } else {
        run::<R, W, FMA>(&mut t, b, n, j, r, |kk, q| unsafe {
            *base.add((i + q) * a.rs + kk * a.cs)
        });
    }
    for (q, tq) in t.iter().enumerate() {
        dst[q * n + j..q * n + j + W].copy_from_slice(tq);
    }
}

/// One step of a chain: `fma(a, b, c)`, or `c + a·b` with the product rounded first.
#[inline(always)]
fn chain_step<const FMA: bool>(av: f32, bv: f32, c: f32) -> f32 {
    if FMA {
        av.mul_add(bv, c)
    } else {
        c + av * bv
    }
}

/// `dst[j] = chain over kk in r of a(i, kk) * b[kk][j]`, for all j < n.
///
/// Lanes are independent chains, so a lane may be computed twice (by
/// overlapping tiles) and gives the same bits both times. That lets a ragged
/// row end be covered by an 8-wide tile ending at `n`, run in the same k loop
/// as the preceding full tile so that all chains of the row interleave.
#[inline(always)]
fn chain_block<const FMA: bool>(
    a: Mat<'_, f32>,
    a_off: usize,
    b: Mat<'_, f32>,
    r: Range<usize>,
    dst: &mut [f32],
) {
    let n = b.cols;
    let mut j = 0;
    while n - j >= 72 {
        tile::<64, 0, FMA>(a, a_off, b, r.clone(), j, 0, dst);
        j += 64;
    }
    let rest = n - j;
    let full = rest / 8 * 8;
    macro_rules! go {
        ($wa:literal, $wb:literal, $jb:expr) => {
            tile::<$wa, $wb, FMA>(a, a_off, b, r, j, $jb, dst)
        };
    }
    if rest.is_multiple_of(8) {
        match full {
            8 => go!(8, 0, 0),
            16 => go!(16, 0, 0),
            24 => go!(24, 0, 0),
            32 => go!(32, 0, 0),
            40 => go!(40, 0, 0),
            48 => go!(48, 0, 0),
            56 => go!(56, 0, 0),
            64 => go!(64, 0, 0),
            _ => {} // rest == 0
        }
    } else if n >= 8 {
        // Full vectors from j, plus one 8-wide tile ending at n.
        let jb = n - 8;
        match full {
            0 => go!(0, 8, jb),
            8 => go!(8, 8, jb),
            16 => go!(16, 8, jb),
            24 => go!(24, 8, jb),
            32 => go!(32, 8, jb),
            40 => go!(40, 8, jb),
            48 => go!(48, 8, jb),
            56 => go!(56, 8, jb),
            _ => go!(64, 8, jb),
        }
    } else {
        // n < 8: one short tile (j == 0).
        match n {
            1 => go!(1, 0, 0),
            2 => go!(2, 0, 0),
            3 => go!(3, 0, 0),
            4 => go!(4, 0, 0),
            5 => go!(5, 0, 0),
            6 => go!(6, 0, 0),
            _ => go!(7, 0, 0),
        }
    }
}

/// Two tiles of independent chains held in registers over the whole block:
/// lanes `ja..ja+WA` and `jb..jb+WB` (they may overlap; see `chain_block`).
#[inline(always)]
fn tile<const WA: usize, const WB: usize, const FMA: bool>(
    a: Mat<'_, f32>,
    a_off: usize,
    b: Mat<'_, f32>,
    r: Range<usize>,
    ja: usize,
    jb: usize,
    dst: &mut [f32],
) {
    let (b, n) = (b.data, b.cols);
    let mut ta = [0.0f32; WA];
    let mut tb = [0.0f32; WB];
    // As in `tile_rows`: the last indices checked once, the loop without bounds checks.
    if let Some(last) = r.end.checked_sub(1).filter(|_| !r.is_empty()) {
        assert!(ja + WA <= n && jb + WB <= n, "tile: columns past n");
        assert!(last * n + n <= b.len(), "tile: b too short");
        assert!(a_off + last * a.cs < a.data.len(), "tile: a too short");
    }
    for kk in r {
        // SAFETY: kk ≤ the last index checked above: a's element, and row kk of b with both
        // column ranges inside it, are within their slices.
        let av = unsafe { *a.data.get_unchecked(a_off + kk * a.cs) };
        // SAFETY: as above.
        let ra: &[f32; WA] = unsafe { &*b.as_ptr().add(kk * n + ja).cast::<[f32; WA]>() };
        // SAFETY: as above.
        let rb: &[f32; WB] = unsafe { &*b.as_ptr().add(kk * n + jb).cast::<[f32; WB]>() };
        for l in 0..WA {
            ta[l] = chain_step::<FMA>(av, ra[l], ta[l]);
        }
        for l in 0..WB {
            tb[l] = chain_step::<FMA>(av, rb[l], tb[l]);
        }
    }
    dst[ja..ja + WA].copy_from_slice(&ta);
    dst[jb..jb + WB].copy_from_slice(&tb);
}

#[inline(always)]
fn pairwise_matmul(kern: &Kernel, a: Mat<'_, f32>, b: Mat<'_, f32>, c: &mut [f32], pw: &mut [f32]) {
    let b = b.data;
    let (m, k, n) = (kern.m, kern.k, kern.n);
    if n == 0 {
        return;
    }
    for (i, c_row) in c.chunks_exact_mut(n).take(m).enumerate() {
        let a_off = i * a.rs;
        let mut first = true;
        for r in kern.split.blocks(k) {
            let len = r.len();
            let rows = &mut pw[..len * n];
            for (t, kk) in r.enumerate() {
                let av = a.data[a_off + kk * a.cs];
                let brow = &b[kk * n..kk * n + n];
                for (p, &y) in rows[t * n..t * n + n].iter_mut().zip(brow) {
                    *p = av * y;
                }
            }
            tree_reduce(rows, n, 0, len);
            let res = &rows[..n];
            if first {
                c_row.copy_from_slice(res);
                first = false;
            } else {
                for (x, &y) in c_row.iter_mut().zip(res) {
                    *x += y;
                }
            }
        }
        if first {
            c_row.fill(0.0);
        }
    }
}

/// Reduces rows `lo..hi` of `rows` (each n wide) into row `lo` with the tree of
/// `dot_pairwise`: S(lo..hi) = S(lo..mid) + S(mid..hi), mid = lo + ceil(len/2).
fn tree_reduce(rows: &mut [f32], n: usize, lo: usize, hi: usize) {
    if hi - lo <= 1 {
        return;
    }
    let mid = lo + (hi - lo).div_ceil(2);
    tree_reduce(rows, n, lo, mid);
    tree_reduce(rows, n, mid, hi);
    let (left, right) = rows.split_at_mut(mid * n);
    for (x, &y) in left[lo * n..lo * n + n].iter_mut().zip(&right[..n]) {
        *x += y;
    }
}
