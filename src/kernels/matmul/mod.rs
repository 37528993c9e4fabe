//! Matmul models: how K is split into blocks, how each block accumulates, and
//! which precision passes make up the product, plus fast kernels that compute
//! every element in exactly the order of the scalar references in
//! [`super::dot`].
//!
//! Element order (for every output element `c[i][j]` and every pass term):
//! the K range is cut by [`KSplit::for_each_block`]; each block is reduced
//! independently in [`Accum`] order; block results are combined left to right
//! with plain f32 adds, `((blk0 + blk1) + blk2) + ...`. This is exactly
//! [`dot_blocked`](super::dot::dot_blocked) applied to row `i` of `a` and
//! column `j` of `b`. Multi-pass models ([`Passes`]) compute each term as such a
//! matmul on the split inputs and fold the terms left to right in f32. The float64
//! products ([`matmul_f64`] and its forms) have one order: `c = +0`, then
//! `c = c + fl(a[i][kk]·b[kk][j])` for kk ascending, never fused.
//!
//! Operands are views that carry their shape: [`Mat`] (a matrix as stored, with the
//! strides of its rows and columns) and [`MatMut`] (an output, row-major). The entry
//! points name which operand is used transposed (`nt`: `b` is stored n × k; `tn`: `a` is
//! stored k × m) and check that the shapes agree.
//!
//! The files, by job:
//! - this one: the models, the views, the scratch and the f32 entry points (pass splitting,
//!   `x·Wᵀ` by transposed panels);
//! - `chain`: the f32 chain and pairwise kernels and their compilations;
//! - `few_rows`: `x·Wᵀ` with at most 16 rows and a big `W` on AVX-512F, reading `W` once;
//! - `f64`: the float64 products;
//! - `transpose`: the f32 and f64 transposes (data movement only).
//!
//! Kernel structure (f32): for each span of up to 16 rows of `c` and each K block, the
//! innermost loop runs over `j` (contiguous output elements, each lane an
//! independent chain) in register tiles of 4 (3, 2) rows × 16 columns, so that each
//! load of `b` serves every row of a tile, and every tile of the span runs over one
//! column strip of `b` before the next (a lone last row, and n < 8, take
//! single-row tiles). `x·Wᵀ` with a big `W` and few rows transposes `W` one
//! cache-sized panel of columns at a time. None of this changes any element's
//! order, only which elements are computed together. The kernel body is one
//! `#[inline(always)]` function compiled three times: for AVX-512F (8-row tiles), for AVX2
//! and FMA, and portably; which one runs is the [`Isa`] the scratch carries
//! ([`MatmulScratch::with_isa`]; by default the detected one). IEEE fma, multiplication and
//! addition are correctly rounded, so every compilation gives bit-identical results
//! (tested in `tests/isa_paths.rs`, each path forced).

use std::ops::Range;

use super::isa::Isa;

use super::round::{bf16_rne, bf16x3_split, bf16x6_split, tf32, Tf32Mode};

mod chain;
mod few_rows;
mod float64;
mod transpose;

#[cfg(test)]
mod tests;

use chain::{Kernel, SPAN_ROWS};
pub use few_rows::matmul_nt_and_abs_f64;
#[cfg(target_arch = "x86_64")]
use few_rows::nt_few_rows_avx512;
use few_rows::{few_rows_nt_runs, FEW_ROWS};
pub use float64::{
    matmul_f64, matmul_nt_abs_f64, matmul_nt_f64, matmul_tn_f64, matmul_tn_f64_rows,
    nt_f64_scratch_elems,
};
use transpose::transpose_into;
pub use transpose::{transpose_f32, transpose_f64};

/// How the K range of a dot product is cut into independently accumulated
/// blocks. Blocks are never empty and are visited in ascending order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KSplit {
    /// One block over all of K.
    Single,
    /// The MKL rule measured in numerics.md: K <= 192 one block;
    /// 192 < K < 384 the even part of K in two equal halves, plus a last block
    /// of one if K is odd; K >= 384 blocks of 192, the last one shorter.
    Mkl,
    /// Blocks of `kc`, the last one shorter. Panics if `kc == 0`.
    Blocked(usize),
    /// Split-K into `s` chunks: chunk `i` is `[i*K/s, (i+1)*K/s)` (integer
    /// division); empty chunks are skipped. Panics if `s == 0`.
    Chunks(usize),
}

impl KSplit {
    /// Calls `f` once per non-empty block of `0..k`, in ascending order.
    /// Allocates nothing. Panics for `Blocked(0)` and `Chunks(0)`.
    pub fn for_each_block(&self, k: usize, mut f: impl FnMut(Range<usize>)) {
        for r in self.blocks(k) {
            f(r);
        }
    }

    /// The blocks as an iterator (used by the kernels: a closure-free loop
    /// keeps the kernel body inside its `target_feature` function).
    #[inline(always)]
    pub(crate) fn blocks(&self, k: usize) -> Blocks {
        match *self {
            KSplit::Blocked(kc) => assert!(kc > 0, "KSplit::Blocked(0)"),
            KSplit::Chunks(s) => assert!(s > 0, "KSplit::Chunks(0)"),
            _ => {}
        }
        Blocks {
            split: *self,
            k,
            pos: 0,
            idx: 0,
        }
    }

    /// Length of the longest block for this `k` (0 if `k == 0`).
    fn max_block(&self, k: usize) -> usize {
        self.blocks(k).map(|r| r.len()).max().unwrap_or(0)
    }

    /// Whether the whole reduction over `k` is one block (one chain from +0).
    pub fn is_one_block(&self, k: usize) -> bool {
        self.max_block(k) == k
    }
}

/// Iterator over the blocks of a [`KSplit`].
pub(crate) struct Blocks {
    split: KSplit,
    k: usize,
    /// Start of the next block.
    pos: usize,
    /// Next chunk index (Chunks only).
    idx: usize,
}

impl Iterator for Blocks {
    type Item = Range<usize>;

    #[inline(always)]
    fn next(&mut self) -> Option<Range<usize>> {
        let (k, pos) = (self.k, self.pos);
        if pos >= k {
            return None;
        }
        let end = match self.split {
            KSplit::Single => k,
            KSplit::Mkl => {
                if k <= 192 {
                    k
                } else if k < 384 {
                    // Even part in two equal halves, then a block of one if odd.
                    let even = k & !1;
                    if pos < even / 2 {
                        even / 2
                    } else if pos < even {
                        even
                    } else {
                        k
                    }
                } else {
                    (pos + 192).min(k)
                }
            }
            KSplit::Blocked(kc) => (pos + kc).min(k),
            KSplit::Chunks(s) => loop {
                // Chunk i = [i*k/s, (i+1)*k/s); skip empty chunks.
                let i = self.idx;
                self.idx += 1;
                let (lo, hi) = (i * k / s, (i + 1) * k / s);
                debug_assert!(i < s && (lo == pos || lo == hi));
                if lo < hi {
                    break hi;
                }
            },
        };
        self.pos = end;
        Some(pos..end)
    }
}

/// How one K block is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accum {
    /// `c = +0; c = fma(a[k], b[k], c)` for k ascending.
    Fma,
    /// `c = +0; c = c + fl(a[k] * b[k])` for k ascending.
    MulAdd,
    /// Rounded products summed by the pairwise tree of
    /// [`dot_pairwise`](super::dot::dot_pairwise) (left half = ceil(len/2)).
    Pairwise,
}

/// Which input roundings / splits make up the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Passes {
    /// Plain f32 inputs.
    F32,
    /// Inputs rounded with [`bf16_rne`]; products of bf16 values are exact in
    /// f32; f32 accumulation in the model order. One pass.
    Bf16x1,
    /// XLA bf16_3x: `(lo·hi + hi·lo) + hi·hi` with [`bf16x3_split`] pieces,
    /// `X·Y` meaning `a_X · b_Y`, each term a full matmul in the model order.
    Bf16x3,
    /// XLA bf16_6x with [`bf16x6_split`] pieces:
    /// `((((mid·mid + hi·lo) + lo·hi) + hi·mid) + mid·hi) + hi·hi`.
    Bf16x6,
    /// Inputs rounded to TF32 in the given mode, then f32 accumulation in the
    /// model order.
    Tf32(Tf32Mode),
}

/// A complete matmul numerics model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulModel {
    /// How K is cut into blocks.
    pub split: KSplit,
    /// How each block accumulates.
    pub accum: Accum,
    /// Input roundings / splits and their term order.
    pub passes: Passes,
}

/// Reusable buffers for [`MatmulModel`], and the [`Isa`] its kernels run on (one per thread,
/// like the buffers). They grow on demand and never shrink, so once they have grown to the
/// largest shapes used, matmuls allocate nothing.
#[derive(Default)]
pub struct MatmulScratch {
    /// The compilation the kernels run on ([`Isa::detected`] by default).
    isa: Isa,
    /// Transposed `b` for `matmul_nt` (k×n, or k × panel width).
    bt: Vec<f32>,
    /// One panel of `c` for `matmul_nt` (m × panel width).
    panel: Vec<f32>,
    /// Rounded / split pieces of `a` (same layout as the `a` operand).
    pa: [Vec<f32>; 3],
    /// Rounded / split pieces of `b` (k×n).
    pb: [Vec<f32>; 3],
    /// One pass term (m×n).
    term: Vec<f32>,
    /// One block's accumulators ([`SPAN_ROWS`] × n).
    acc: Vec<f32>,
    /// Pairwise product rows (longest block × n).
    pw: Vec<f32>,
    /// One K block's columns of `a` and of `b`, and one block's product
    /// ([`MatmulModel::matmul_nt_bias_after_first_block`]).
    blk: [Vec<f32>; 3],
}

impl MatmulScratch {
    /// Empty buffers whose kernels run on `isa` (tests force each path with it).
    pub fn with_isa(isa: Isa) -> Self {
        Self {
            isa,
            ..Self::default()
        }
    }

    /// The compilation this scratch's kernels run on.
    pub fn isa(&self) -> Isa {
        self.isa
    }
}

/// Grows `v` to at least `len` and returns its first `len` elements.
fn grown(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

/// Pass terms as (a piece, b piece) indices, folded left to right.
const TERMS_1: &[(usize, usize)] = &[(0, 0)];
/// Pieces [hi, lo]: lo·hi, hi·lo, hi·hi.
const TERMS_3: &[(usize, usize)] = &[(1, 0), (0, 1), (0, 0)];
/// Pieces [hi, mid, lo]: mid·mid, hi·lo, lo·hi, hi·mid, mid·hi, hi·hi.
const TERMS_6: &[(usize, usize)] = &[(1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0)];

/// A matrix as stored: element `(i, j)` of its `rows × cols` is `data[i·rs + j·cs]`. Made
/// row-major by [`Mat::new`] (checked); [`Mat::t`] and [`Mat::columns`] give views of the same
/// data with other strides. Every element of the view lies inside `data` (an invariant of
/// the constructors).
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a, T> Mat<'a, T> {
    /// The row-major `rows × cols` matrix `data`. Panics unless `data.len() == rows·cols`.
    #[inline]
    #[track_caller]
    pub fn new(data: &'a [T], rows: usize, cols: usize) -> Self {
        if rows.checked_mul(cols) != Some(data.len()) {
            wrong_length("Mat::new", data.len(), rows, cols);
        }
        Mat {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// Rows.
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    #[inline]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The transpose, without a copy (the strides swapped).
    #[inline]
    pub fn t(self) -> Self {
        Mat {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Columns `range` of this matrix, without a copy. Panics unless `range` lies in
    /// `0..cols`.
    #[inline]
    #[track_caller]
    pub fn columns(self, range: Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= self.cols,
            "Mat::columns: {range:?} is not inside 0..{}",
            self.cols
        );
        let empty = self.rows == 0 || range.is_empty();
        Mat {
            data: if empty {
                &self.data[..0]
            } else {
                &self.data[range.start * self.cs..]
            },
            cols: range.len(),
            ..self
        }
    }

    /// Whether the elements are row-major and contiguous (`data` holds exactly them).
    #[inline]
    pub fn is_row_major(&self) -> bool {
        self.cs == 1 && self.rs == self.cols && self.data.len() == self.rows * self.cols
    }

    /// The data of a row-major view. Panics for another layout.
    #[inline]
    #[track_caller]
    fn row_major(&self, what: &str) -> &'a [T] {
        if !self.is_row_major() {
            not_row_major(what);
        }
        self.data
    }
}

/// An output matrix, row-major: element `(i, j)` of its `rows × cols` is `data[i·cols + j]`.
#[derive(Debug)]
pub struct MatMut<'a, T> {
    data: &'a mut [T],
    rows: usize,
    cols: usize,
}

impl<'a, T> MatMut<'a, T> {
    /// The row-major `rows × cols` matrix `data`. Panics unless `data.len() == rows·cols`.
    #[inline]
    #[track_caller]
    pub fn new(data: &'a mut [T], rows: usize, cols: usize) -> Self {
        if rows.checked_mul(cols) != Some(data.len()) {
            wrong_length("MatMut::new", data.len(), rows, cols);
        }
        MatMut { data, rows, cols }
    }

    /// Rows.
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    #[inline]
    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// Checks that `a (m × k)` times `b (k × n)` fits in `c (m × n)` (the product's shapes, once
/// any transposed operand is taken as used) and returns (m, k, n).
#[inline]
#[track_caller]
fn shapes<T>(
    what: &str,
    a: &Mat<'_, T>,
    b: &Mat<'_, T>,
    c: &MatMut<'_, T>,
) -> (usize, usize, usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || c.rows != m || c.cols != n {
        shapes_disagree(what, [a.rows, a.cols, b.rows, b.cols, c.rows, c.cols]);
    }
    (m, k, n)
}

/// The panic of [`shapes`], out of the callers' way.
#[cold]
#[inline(never)]
#[track_caller]
fn shapes_disagree(what: &str, [ar, ac, br, bc, cr, cc]: [usize; 6]) -> ! {
    panic!("{what}: shapes do not agree: a {ar}×{ac}, b {br}×{bc}, c {cr}×{cc}")
}

/// The panic of [`Mat::new`] and [`MatMut::new`].
#[cold]
#[inline(never)]
#[track_caller]
fn wrong_length(what: &str, len: usize, rows: usize, cols: usize) -> ! {
    panic!("{what}: data has the wrong length ({len} for {rows} × {cols})")
}

/// The panic of `Mat::row_major`.
#[cold]
#[inline(never)]
#[track_caller]
fn not_row_major(what: &str) -> ! {
    panic!("{what}: operand must be row-major")
}

impl MatmulModel {
    /// c (m×n) = a (m×k) · b (k×n), row-major. c is overwritten.
    ///
    /// Panics unless the shapes agree and `a` and `b` are row-major.
    pub fn matmul(
        &self,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        c: MatMut<'_, f32>,
        s: &mut MatmulScratch,
    ) {
        shapes("matmul", &a, &b, &c);
        a.row_major("matmul");
        b.row_major("matmul");
        self.run(a, b, c.data, s);
    }

    /// c (m×n) = a (m×k) · bᵀ where b is (n×k) row-major (torch `F.linear`:
    /// x · Wᵀ). `b` is transposed into scratch, then the same kernel runs; for a big `b`
    /// and few rows one cache-sized panel of columns at a time ([`nt_panel_width`]), and with
    /// at most 16 rows on AVX-512F without a transposed copy (`few_rows`).
    ///
    /// Panics unless the shapes agree and `a` and `b` are row-major.
    pub fn matmul_nt(
        &self,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        c: MatMut<'_, f32>,
        s: &mut MatmulScratch,
    ) {
        let (m, k, n) = shapes("matmul_nt", &a, &b.t(), &c);
        a.row_major("matmul_nt");
        let bd = b.row_major("matmul_nt");
        let c = c.data;
        #[cfg(target_arch = "x86_64")]
        if few_rows_nt_runs(self, m, k, n, s.isa) {
            // SAFETY: the scratch's `Isa` reaches AVX-512F (few_rows_nt_runs); the shapes
            // were checked.
            return unsafe { self.few_rows(a, b, c, s) };
        }
        let isa = s.isa;
        let mut bt = std::mem::take(&mut s.bt);
        match nt_panel_width(m, k, n, 4) {
            None => {
                transpose_into(bd, n, k, grown(&mut bt, k * n), isa);
                self.run(a, Mat::new(&bt[..k * n], k, n), c, s);
            }
            Some(width) => {
                // Panel by panel: rows j0..j0 + p of b (contiguous) transposed into a k × p
                // panel that stays in cache while every row of c takes its p columns.
                let mut cp = std::mem::take(&mut s.panel);
                for j0 in (0..n).step_by(width) {
                    let p = width.min(n - j0);
                    transpose_into(&bd[j0 * k..(j0 + p) * k], p, k, grown(&mut bt, k * p), isa);
                    let cp = grown(&mut cp, m * p);
                    self.run(a, Mat::new(&bt[..k * p], k, p), cp, s);
                    scatter_columns(cp, c, n, j0, p);
                }
                s.panel = cp;
            }
        }
        s.bt = bt;
    }

    /// `c (m×n) = a (m×k) · bᵀ + bias` (b stored n×k, bias per column) with the bias joining
    /// after the first K block: `((blk0 + bias) + blk1) + …`, each block reduced in this
    /// model's order from +0 and the blocks added left to right (MKL's `addmm` at one thread
    /// when K is cut into several blocks, measured: [`crate::kernels::mkl_sgemm`]); with no
    /// K, the bias. Each block's columns of `a` are copied into scratch and multiplied by the
    /// block's columns of `b` alone: read in place where the few-rows kernel runs
    /// ([`MatmulModel::matmul_nt_cols`]), else copied and taken by [`MatmulModel::matmul_nt`];
    /// [`MatmulModel::nt_bias_scratch_elems`] elements.
    ///
    /// Panics unless the shapes agree, `a` and `b` are row-major, `bias` has n elements and
    /// the model has no input-precision passes.
    pub fn matmul_nt_bias_after_first_block(
        &self,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        bias: &[f32],
        c: MatMut<'_, f32>,
        s: &mut MatmulScratch,
    ) {
        let what = "matmul_nt_bias_after_first_block";
        let (m, k, n) = shapes(what, &a, &b.t(), &c);
        let (ad, bd) = (a.row_major(what), b.row_major(what));
        assert!(
            bias.len() == n && self.passes == Passes::F32,
            "{what}: the bias needs n elements and the model f32 inputs"
        );
        let c = c.data;
        let one = MatmulModel {
            split: KSplit::Single,
            ..*self
        };
        let [mut xa, mut wb, mut tmp] = std::mem::take(&mut s.blk);
        let mut first = true;
        for r in self.split.blocks(k) {
            let len = r.len();
            let gather = |src: &[f32], rows: usize, dst: &mut Vec<f32>| {
                let d = grown(dst, rows * len);
                for (i, row) in d.chunks_exact_mut(len).enumerate() {
                    row.copy_from_slice(&src[i * k + r.start..i * k + r.end]);
                }
            };
            gather(ad, m, &mut xa);
            let xm = Mat::new(&xa[..m * len], m, len);
            // The few-rows kernel reads the block's columns of `b` in place; elsewhere they are
            // gathered (matmul_nt transposes them anyway).
            let mut product = |out: &mut [f32], s: &mut MatmulScratch| {
                let cols = b.columns(r.clone());
                if !one.matmul_nt_cols(xm, cols, MatMut::new(&mut *out, m, n), s) {
                    gather(bd, n, &mut wb);
                    let wm = Mat::new(&wb[..n * len], n, len);
                    one.matmul_nt(xm, wm, MatMut::new(out, m, n), s);
                }
            };
            if first {
                product(&mut *c, s);
                for row in c.chunks_exact_mut(n) {
                    for (v, &x) in row.iter_mut().zip(bias) {
                        *v += x;
                    }
                }
                first = false;
            } else {
                let t = grown(&mut tmp, m * n);
                product(&mut *t, s);
                for (v, &x) in c.iter_mut().zip(t.iter()) {
                    *v += x;
                }
            }
        }
        if first {
            for row in c.chunks_exact_mut(n) {
                row.copy_from_slice(bias);
            }
        }
        s.blk = [xa, wb, tmp];
    }

    /// Scratch elements [`MatmulModel::matmul_nt_bias_after_first_block`] of this shape takes
    /// on the detected [`Isa`]: a block's columns of both operands, one block's product, and
    /// what `matmul_nt` of one block takes.
    pub fn nt_bias_scratch_elems(&self, m: usize, k: usize, n: usize) -> usize {
        let len = self.split.max_block(k);
        let one = MatmulModel {
            split: KSplit::Single,
            ..*self
        };
        (m + n) * len + m * n + one.nt_scratch_elems(m, len, n)
    }

    /// c (m×n) = aᵀ · b where a is (k×m) row-major (weight gradients: dYᵀ · X).
    /// The kernel reads `a` through its transposed view (element (i, kk) at `kk*m + i`),
    /// which is equivalent to transposing it first.
    ///
    /// Panics unless the shapes agree and `a` and `b` are row-major.
    pub fn matmul_tn(
        &self,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        c: MatMut<'_, f32>,
        s: &mut MatmulScratch,
    ) {
        shapes("matmul_tn", &a.t(), &b, &c);
        a.row_major("matmul_tn");
        b.row_major("matmul_tn");
        self.run(a.t(), b, c.data, s);
    }

    /// Rows `rows` of [`matmul_tn`](Self::matmul_tn)'s c (m×n), written to `c_rows`
    /// (`rows.len()`×n): the same kernel on the view of `a`'s columns `rows`, so every
    /// element is the chain `matmul_tn` computes for it (rows are independent; how rows are
    /// grouped into register tiles does not change an element's order). A weight gradient
    /// can so be consumed panel by panel without ever being whole.
    ///
    /// Panics unless `a` (k×m) and `b` (k×n) are row-major, `rows` lies in `0..m` and
    /// `c_rows` is `rows.len()`×n.
    pub fn matmul_tn_rows(
        &self,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        c_rows: MatMut<'_, f32>,
        rows: Range<usize>,
        s: &mut MatmulScratch,
    ) {
        a.row_major("matmul_tn_rows");
        b.row_major("matmul_tn_rows");
        let part = a.columns(rows.clone()).t();
        shapes("matmul_tn_rows", &part, &b, &c_rows);
        if rows.is_empty() {
            return;
        }
        self.run(part, b, c_rows.data, s);
    }

    /// Scratch elements [`matmul_nt`](Self::matmul_nt) of this shape takes under this model
    /// on the detected [`Isa`] (the few-rows kernel's two buffers, one transposed panel with
    /// its block of `c`, or all of `b` transposed), not counting the input-precision pieces:
    /// what a memory bound counts.
    pub fn nt_scratch_elems(&self, m: usize, k: usize, n: usize) -> usize {
        if few_rows_nt_runs(self, m, k, n, Isa::detected()) {
            return (k + n) * FEW_ROWS;
        }
        match nt_panel_width(m, k, n, 4) {
            Some(w) => k * w + m * w,
            None => k * n,
        }
    }

    /// [`MatmulModel::matmul_nt`] with `b` the view `w` (n × k) of some columns of a wider
    /// row-major matrix (a rank's shard of a row-parallel weight, [`Mat::columns`]), read in
    /// place, and true, where the few-rows kernel runs for this shape on the scratch's
    /// [`Isa`] (`few_rows`, which reads every row of `b` once anyway); false, with nothing
    /// written, elsewhere (the caller then gathers the columns and calls `matmul_nt`). The
    /// same kernel on the same values: the product of the gathered columns, bit for bit.
    ///
    /// Panics unless the shapes agree, `a` is row-major and `w`'s rows are contiguous.
    pub fn matmul_nt_cols(
        &self,
        a: Mat<'_, f32>,
        w: Mat<'_, f32>,
        c: MatMut<'_, f32>,
        s: &mut MatmulScratch,
    ) -> bool {
        let (m, k, n) = shapes("matmul_nt_cols", &a, &w.t(), &c);
        a.row_major("matmul_nt_cols");
        assert!(
            w.cs == 1,
            "matmul_nt_cols: the rows of w must be contiguous"
        );
        #[cfg(target_arch = "x86_64")]
        if k > 0 && few_rows_nt_runs(self, m, k, n, s.isa) {
            // SAFETY: the scratch's `Isa` reaches AVX-512F (few_rows_nt_runs); every row of
            // `w` lies inside its data (a `Mat` invariant), which the kernel checks.
            unsafe { self.few_rows(a, w, c.data, s) };
            return true;
        }
        let _ = (m, n, s, c);
        false
    }

    /// `nt_few_rows_avx512` in this model's accumulation (FMA chains or multiply-add),
    /// its buffers from `s`.
    ///
    /// # Safety
    /// As `nt_few_rows_avx512`'s.
    #[cfg(target_arch = "x86_64")]
    unsafe fn few_rows(
        &self,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        c: &mut [f32],
        s: &mut MatmulScratch,
    ) {
        let (at, ct) = (&mut s.bt, &mut s.panel);
        if self.accum == Accum::Fma {
            nt_few_rows_avx512::<true>(a, b, c, self.split, at, ct)
        } else {
            nt_few_rows_avx512::<false>(a, b, c, self.split, at, ct)
        }
    }

    /// `c` (m×n) = `a` (m×k, any strides) · `b` (k×n, row-major) on the scratch's [`Isa`]:
    /// the input passes of the model, each term by the chain kernel, folded left to right.
    fn run(&self, a: Mat<'_, f32>, b: Mat<'_, f32>, c: &mut [f32], s: &mut MatmulScratch) {
        let MatmulScratch {
            isa,
            pa,
            pb,
            term,
            acc,
            pw,
            ..
        } = s;
        let (m, k, n) = (a.rows, a.cols, b.cols);
        debug_assert!(b.rows == k && b.is_row_major() && c.len() == m * n);
        let kern = Kernel {
            split: self.split,
            accum: self.accum,
            m,
            k,
            n,
            isa: *isa,
        };
        if kern.accum == Accum::Pairwise {
            grown(pw, kern.split.max_block(k) * n);
        }
        grown(acc, SPAN_ROWS * n);
        let terms = match self.passes {
            Passes::F32 => {
                kern.run(a, b, c, acc, pw);
                return;
            }
            Passes::Bf16x1 => {
                map_into(a.data, &mut pa[0], bf16_rne);
                map_into(b.data, &mut pb[0], bf16_rne);
                TERMS_1
            }
            Passes::Tf32(mode) => {
                map_into(a.data, &mut pa[0], |x| tf32(x, mode));
                map_into(b.data, &mut pb[0], |x| tf32(x, mode));
                TERMS_1
            }
            Passes::Bf16x3 => {
                split3_into(a.data, pa);
                split3_into(b.data, pb);
                TERMS_3
            }
            Passes::Bf16x6 => {
                split6_into(a.data, pa);
                split6_into(b.data, pb);
                TERMS_6
            }
        };
        let na = a.data.len();
        let nb = b.data.len();
        let term = grown(term, m * n);
        for (t, &(ia, ib)) in terms.iter().enumerate() {
            let ap = Mat {
                data: &pa[ia][..na],
                ..a
            };
            let bp = Mat {
                data: &pb[ib][..nb],
                ..b
            };
            if t == 0 {
                kern.run(ap, bp, c, acc, pw);
            } else {
                kern.run(ap, bp, term, acc, pw);
                for (x, &y) in c.iter_mut().zip(term.iter()) {
                    *x += y;
                }
            }
        }
    }
}

/// Bytes of `b` from which `x·Wᵀ` (`matmul_nt`, [`matmul_nt_f64`]) runs panel by panel
/// instead of transposing all of `b` first: a big transposed copy costs a pass over memory
/// and as much fresh memory as `b` (131 MB for a 32,000 × 512 f64 head).
const NT_PANEL_FROM: usize = 1 << 20;

/// Most rows of `c` for which the panels pay: every panel reads all of `a` again.
const NT_PANEL_MAX_M: usize = 64;

/// Bytes of one transposed panel (k × width elements), well inside a core's L2.
const NT_PANEL_BYTES: usize = 512 << 10;

/// The panel width (columns of `c`, a multiple of 16) with which `x·Wᵀ` of shape m × k × n
/// and elements of `size` bytes runs panel by panel, or None to transpose all of `b`.
/// Either way each element of `c` is computed by the same kernel in the same order: only
/// where its inputs were copied to differs.
fn nt_panel_width(m: usize, k: usize, n: usize, size: usize) -> Option<usize> {
    if m > NT_PANEL_MAX_M || k * n * size < NT_PANEL_FROM {
        return None;
    }
    let width = (NT_PANEL_BYTES / (k * size).max(1) / 16 * 16).max(16);
    (width < n).then_some(width)
}

/// Copies the m × p panel `cp` into columns j0..j0 + p of `c` (m × n).
fn scatter_columns<T: Copy>(cp: &[T], c: &mut [T], n: usize, j0: usize, p: usize) {
    for (row, src) in c.chunks_exact_mut(n).zip(cp.chunks_exact(p)) {
        row[j0..j0 + p].copy_from_slice(src);
    }
}

fn map_into(src: &[f32], dst: &mut Vec<f32>, f: impl Fn(f32) -> f32) {
    let dst = grown(dst, src.len());
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = f(x);
    }
}

fn split3_into(src: &[f32], dst: &mut [Vec<f32>; 3]) {
    let [hi, lo, _] = dst;
    let hi = grown(hi, src.len());
    let lo = grown(lo, src.len());
    for ((h, l), &x) in hi.iter_mut().zip(lo.iter_mut()).zip(src) {
        (*h, *l) = bf16x3_split(x);
    }
}

fn split6_into(src: &[f32], dst: &mut [Vec<f32>; 3]) {
    let [hi, mid, lo] = dst;
    let hi = grown(hi, src.len());
    let mid = grown(mid, src.len());
    let lo = grown(lo, src.len());
    for (((h, md), l), &x) in hi
        .iter_mut()
        .zip(mid.iter_mut())
        .zip(lo.iter_mut())
        .zip(src)
    {
        (*h, *md, *l) = bf16x6_split(x);
    }
}
