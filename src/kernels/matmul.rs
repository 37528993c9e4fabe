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
//! matmul on the split inputs and fold the terms left to right in f32.
//!
//! Kernel structure: for each span of up to 16 rows of `c` and each K block, the
//! innermost loop runs over `j` (contiguous output elements, each lane an
//! independent chain) in register tiles of 4 (3, 2) rows × 16 columns, so that each
//! load of `b` serves every row of a tile, and every tile of the span runs over one
//! column strip of `b` before the next (a lone last row, and n < 8, take
//! single-row tiles). `x·Wᵀ` with a big `W` and few rows transposes `W` one
//! cache-sized panel of columns at a time. None of this changes any element's
//! order, only which elements are computed together. The kernel body is one `#[inline(always)]` function compiled
//! twice: once under `#[target_feature(enable = "avx2,fma")]` (chosen at run time
//! on x86_64 when both features are present) and once portably. IEEE fma,
//! multiplication and addition are correctly rounded, so both compilations give
//! bit-identical results (tested).

// The public matmul signatures (a, b, c, m, k, n, scratch) are fixed by the
// crate's API; the internal kernels thread the same arguments through.
#![allow(clippy::too_many_arguments)]

use std::ops::Range;

use super::round::{bf16_rne, bf16x3_split, bf16x6_split, tf32, Tf32Mode};

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
    fn blocks(&self, k: usize) -> Blocks {
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
struct Blocks {
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

/// Reusable buffers for [`MatmulModel`]. They grow on demand and never
/// shrink, so once they have grown to the largest shapes used, matmuls
/// allocate nothing.
#[derive(Default)]
pub struct MatmulScratch {
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

/// The `a` operand: element `(i, kk)` is `data[i * rs + kk * ks]`.
#[derive(Clone, Copy)]
struct AView<'a> {
    data: &'a [f32],
    rs: usize,
    ks: usize,
}

/// Whether the avx2+fma compilation of the kernel is used on this machine.
pub fn fast_path_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl MatmulModel {
    /// c (m×n) = a (m×k) · b (k×n), row-major. c is overwritten.
    ///
    /// Panics unless `a.len() == m*k`, `b.len() == k*n`, `c.len() == m*n`.
    pub fn matmul(
        &self,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
    ) {
        check_lens(a, b, c, m, k, n);
        let av = AView {
            data: a,
            rs: k,
            ks: 1,
        };
        self.run(av, b, c, m, k, n, s, true);
    }

    /// c (m×n) = a (m×k) · bᵀ where b is (n×k) row-major (torch `F.linear`:
    /// x · Wᵀ). `b` is transposed into scratch, then the same kernel runs; for a big `b`
    /// and few rows one cache-sized panel of columns at a time ([`nt_panel_width`]).
    ///
    /// Panics unless `a.len() == m*k`, `b.len() == n*k`, `c.len() == m*n`.
    pub fn matmul_nt(
        &self,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
    ) {
        self.nt(a, b, c, m, k, n, s, true);
    }

    /// c (m×n) = aᵀ · b where a is (k×m) row-major (weight gradients: dYᵀ · X).
    /// The kernel reads `a` with strides (element (i, kk) at `kk*m + i`), which
    /// is equivalent to transposing it first.
    ///
    /// Panics unless `a.len() == k*m`, `b.len() == k*n`, `c.len() == m*n`.
    pub fn matmul_tn(
        &self,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
    ) {
        self.tn(a, b, c, m, k, n, s, true);
    }

    /// Rows `rows` of [`matmul_tn`](Self::matmul_tn)'s c (m×n), written to `c_rows`
    /// (`rows.len()`×n): the same kernel on a view of the same `a` starting at column
    /// `rows.start`, so every element is the chain `matmul_tn` computes for it (rows are
    /// independent; how rows are grouped into register tiles does not change an element's
    /// order). A weight gradient can so be consumed panel by panel without ever being whole.
    ///
    /// Panics unless `a.len() == k*m`, `b.len() == k*n`, `rows` lies in `0..m` and
    /// `c_rows.len() == rows.len()*n`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_tn_rows(
        &self,
        a: &[f32],
        b: &[f32],
        c_rows: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        rows: Range<usize>,
        s: &mut MatmulScratch,
    ) {
        assert!(
            a.len() == k * m && b.len() == k * n && rows.start <= rows.end && rows.end <= m,
            "matmul_tn_rows: operand lengths or row range"
        );
        assert_eq!(
            c_rows.len(),
            rows.len() * n,
            "matmul_tn_rows: c_rows length"
        );
        if rows.is_empty() {
            return;
        }
        let av = AView {
            data: &a[rows.start..],
            rs: 1,
            ks: m,
        };
        self.run(av, b, c_rows, rows.len(), k, n, s, true);
    }

    /// Scratch elements [`matmul_nt`](Self::matmul_nt) of this shape takes under this model
    /// on this CPU (the few-rows kernel's two buffers, one transposed panel with its block of
    /// `c`, or all of `b` transposed), not counting the input-precision pieces: what a memory
    /// bound counts.
    pub fn nt_scratch_elems(&self, m: usize, k: usize, n: usize) -> usize {
        if few_rows_nt_runs(self, m, k, n) {
            return (k + n) * FEW_ROWS;
        }
        match nt_panel_width(m, k, n, 4) {
            Some(w) => k * w + m * w,
            None => k * n,
        }
    }

    /// [`matmul`](Self::matmul) forced onto the portable kernel (no avx2/fma
    /// target features). Bit-identical to `matmul`; exists for tests/benches.
    pub fn matmul_portable(
        &self,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
    ) {
        check_lens(a, b, c, m, k, n);
        let av = AView {
            data: a,
            rs: k,
            ks: 1,
        };
        self.run(av, b, c, m, k, n, s, false);
    }

    fn nt(
        &self,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
        fast: bool,
    ) {
        check_lens(a, b, c, m, k, n);
        let av = AView {
            data: a,
            rs: k,
            ks: 1,
        };
        #[cfg(target_arch = "x86_64")]
        if fast && few_rows_nt_runs(self, m, k, n) {
            // SAFETY: avx512f was detected (few_rows_nt_runs); the lengths were checked.
            return unsafe { self.few_rows(a, b, k, c, m, k, n, s) };
        }
        let mut bt = std::mem::take(&mut s.bt);
        match nt_panel_width(m, k, n, 4) {
            None => {
                transpose_into(b, n, k, grown(&mut bt, k * n), fast);
                self.run(av, &bt[..k * n], c, m, k, n, s, fast);
            }
            Some(width) => {
                // Panel by panel: rows j0..j0 + p of b (contiguous) transposed into a k × p
                // panel that stays in cache while every row of c takes its p columns.
                let mut cp = std::mem::take(&mut s.panel);
                for j0 in (0..n).step_by(width) {
                    let p = width.min(n - j0);
                    transpose_into(&b[j0 * k..(j0 + p) * k], p, k, grown(&mut bt, k * p), fast);
                    let cp = grown(&mut cp, m * p);
                    self.run(av, &bt[..k * p], cp, m, k, p, s, fast);
                    scatter_columns(cp, c, n, j0, p);
                }
                s.panel = cp;
            }
        }
        s.bt = bt;
    }

    /// [`MatmulModel::matmul_nt`] with `b` the columns `cols` of `w` (n × `width`, row-major:
    /// a rank's shard of a row-parallel weight), read in place, and true, where the few-rows
    /// kernel runs for this shape ([`nt_few_rows_avx512`], which reads every row of `b`
    /// once anyway); false, with nothing written, elsewhere (the caller then gathers the
    /// columns and calls `matmul_nt`). The same kernel on the same values: the product of
    /// the gathered columns, bit for bit.
    ///
    /// Panics unless `a.len() == m·cols.len()`, `w.len() == n·width`, `c.len() == m·n` and
    /// `cols.end ≤ width`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_nt_cols(
        &self,
        a: &[f32],
        w: &[f32],
        width: usize,
        cols: std::ops::Range<usize>,
        c: &mut [f32],
        m: usize,
        n: usize,
        s: &mut MatmulScratch,
    ) -> bool {
        let k = cols.len();
        assert!(
            cols.end <= width && a.len() == m * k && w.len() == n * width && c.len() == m * n,
            "matmul_nt_cols: shapes"
        );
        #[cfg(target_arch = "x86_64")]
        if k > 0 && few_rows_nt_runs(self, m, k, n) {
            // SAFETY: avx512f was detected (few_rows_nt_runs); row j of the shard is
            // w[j·width + cols.start..][..k], inside the slice from cols.start for every j < n
            // (checked by the kernel).
            unsafe { self.few_rows(a, &w[cols.start..], width, c, m, k, n, s) };
            return true;
        }
        let _ = s;
        false
    }

    /// [`nt_few_rows_avx512`] in this model's accumulation (FMA chains or multiply-add),
    /// with `b`'s rows `ldb` apart, its buffers from `s`.
    ///
    /// # Safety
    /// As [`nt_few_rows_avx512`]'s.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn few_rows(
        &self,
        a: &[f32],
        b: &[f32],
        ldb: usize,
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
    ) {
        let (at, ct) = (&mut s.bt, &mut s.panel);
        if self.accum == Accum::Fma {
            nt_few_rows_avx512::<true>(a, b, ldb, c, m, k, n, self.split, at, ct)
        } else {
            nt_few_rows_avx512::<false>(a, b, ldb, c, m, k, n, self.split, at, ct)
        }
    }

    fn tn(
        &self,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
        fast: bool,
    ) {
        check_lens(a, b, c, m, k, n);
        let av = AView {
            data: a,
            rs: 1,
            ks: m,
        };
        self.run(av, b, c, m, k, n, s, fast);
    }

    /// `b` is k×n contiguous; `a` is read through its view.
    fn run(
        &self,
        a: AView<'_>,
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        s: &mut MatmulScratch,
        fast: bool,
    ) {
        let MatmulScratch {
            pa,
            pb,
            term,
            acc,
            pw,
            ..
        } = s;
        let kern = Kernel {
            split: self.split,
            accum: self.accum,
            m,
            k,
            n,
            fast,
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
                map_into(b, &mut pb[0], bf16_rne);
                TERMS_1
            }
            Passes::Tf32(mode) => {
                map_into(a.data, &mut pa[0], |x| tf32(x, mode));
                map_into(b, &mut pb[0], |x| tf32(x, mode));
                TERMS_1
            }
            Passes::Bf16x3 => {
                split3_into(a.data, pa);
                split3_into(b, pb);
                TERMS_3
            }
            Passes::Bf16x6 => {
                split6_into(a.data, pa);
                split6_into(b, pb);
                TERMS_6
            }
        };
        let na = a.data.len();
        let nb = b.len();
        let term = grown(term, m * n);
        for (t, &(ia, ib)) in terms.iter().enumerate() {
            let ap = AView {
                data: &pa[ia][..na],
                ..a
            };
            let bp = &pb[ib][..nb];
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

/// Most rows of `a` for which `x·Wᵀ` runs [`nt_few_rows_avx512`]: one 512-bit register of
/// f32 holds a column of them.
const FEW_ROWS: usize = 16;
/// Bytes of `b` from which `x·Wᵀ` with few rows runs [`nt_few_rows_avx512`] instead of
/// transposing `b` (a full pass over it, written and read again, for each product).
const FEW_ROWS_NT_FROM: usize = 64 << 10;

/// Whether [`MatmulModel::matmul_nt`] of this shape takes [`nt_few_rows_avx512`] on this CPU:
/// AVX-512F, plain f32 inputs, a chain accumulation (FMA or multiply-add), at most
/// [`FEW_ROWS`] rows and a `b` of [`FEW_ROWS_NT_FROM`] bytes or more.
fn few_rows_nt_runs(model: &MatmulModel, m: usize, k: usize, n: usize) -> bool {
    model.passes == Passes::F32
        && model.accum != Accum::Pairwise
        && (1..=FEW_ROWS).contains(&m)
        && n.saturating_mul(k).saturating_mul(4) >= FEW_ROWS_NT_FROM
        && avx512_path_available()
}

/// Whether [`matmul_nt_f64`] and [`matmul_nt_abs_f64`] of this shape take
/// [`nt_few_rows_f64_avx512`] on this CPU: AVX-512F, at most [`FEW_ROWS`] rows and a `b` of
/// [`FEW_ROWS_NT_F64_FROM`] bytes or more.
fn few_rows_nt_f64_runs(m: usize, k: usize, n: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        (1..=FEW_ROWS).contains(&m)
            && n.saturating_mul(k).saturating_mul(8) >= FEW_ROWS_NT_F64_FROM
            && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, k, n);
        false
    }
}

/// `at[kk·16 + i]` = `f(a[i][kk])` for i < m (a is m × k), 0 for m ≤ i < 16: the rows of `a`
/// as the 16 lanes of the few-rows kernels.
#[cfg(target_arch = "x86_64")]
fn rows_as_lanes<T: Copy + Default>(a: &[T], m: usize, k: usize, at: &mut [T], f: impl Fn(T) -> T) {
    for kk in 0..k {
        for i in 0..FEW_ROWS {
            at[kk * FEW_ROWS + i] = if i < m {
                f(a[i * k + kk])
            } else {
                T::default()
            };
        }
    }
}

/// `c[i][j]` = `ct[j·16 + i]` for every row i of `c` (m × n): the few-rows kernels' lanes back
/// into rows.
#[cfg(target_arch = "x86_64")]
fn lanes_as_rows<T: Copy>(ct: &[T], c: &mut [T], n: usize) {
    for (i, row) in c.chunks_exact_mut(n).enumerate() {
        for (j, x) in row.iter_mut().enumerate() {
            *x = ct[j * FEW_ROWS + i];
        }
    }
}

/// `c` (m×n) = `a` (m×k) · `b`ᵀ (`b` n×k) for m ≤ [`FEW_ROWS`], each element the chain the
/// model's kernel computes (`chain_span`): per block r of `split` over k, in ascending
/// order, t = +0 then t = fma(a[i][kk], b[j][kk], t) (`FMA`) or t = t + fl(a[i][kk]·b[j][kk])
/// for kk in r ascending; c[i][j] = the first block's t, then c[i][j] + t for each later
/// block. (fma and multiplication are commutative in their two factors, addition in its
/// two operands, so the operand order of the vector instructions does not matter.)
///
/// The lanes are the rows of `a`: `at` (k × 16) holds `a` transposed, zero beyond row m, made
/// once; every row of `b` is then read once, in order, each element broadcast to the 16
/// lanes. Eight rows of `b` (columns of `c`) at a time keep eight chains in flight. `c` is
/// built transposed in `ct` (n × 16) and copied back. For a big `b` and few rows this reads
/// `b` once instead of transposing it (a pass that reads and writes all of it) and then
/// reading the transposed copy.
///
/// Row j of `b` starts at `b[j·ldb]` (ldb ≥ k): `ldb = k` for a whole n × k matrix, or the
/// width of a wider matrix whose columns from `b`'s start are taken in place
/// ([`MatmulModel::matmul_nt_cols`]).
///
/// # Safety
/// The CPU must support AVX-512F; `a.len() == m·k`, `c.len() == m·n`, 1 ≤ m ≤ 16, and
/// `b` holds the n rows: `(n − 1)·ldb + k ≤ b.len()` (checked).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn nt_few_rows_avx512<const FMA: bool>(
    a: &[f32],
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    split: KSplit,
    at: &mut Vec<f32>,
    ct: &mut Vec<f32>,
) {
    use std::arch::x86_64::*;
    assert!(
        (1..=FEW_ROWS).contains(&m)
            && a.len() == m * k
            && ldb >= k
            && (n == 0 || (n - 1) * ldb + k <= b.len())
            && c.len() == m * n,
        "nt_few_rows: shapes"
    );
    let at = grown(at, k * FEW_ROWS);
    rows_as_lanes(a, m, k, at, |x| x);
    let ct = grown(ct, n * FEW_ROWS);
    #[inline(always)]
    unsafe fn step<const FMA: bool>(t: __m512, av: __m512, bv: f32) -> __m512 {
        let bv = _mm512_set1_ps(bv);
        if FMA {
            _mm512_fmadd_ps(av, bv, t)
        } else {
            _mm512_add_ps(t, _mm512_mul_ps(av, bv))
        }
    }
    let (ap, bp) = (at.as_ptr(), b.as_ptr());
    let mut j = 0;
    while j < n {
        let w = if n - j >= 8 { 8 } else { 1 };
        let mut cv = [_mm512_setzero_ps(); 8];
        let mut first = true;
        for r in split.blocks(k) {
            let mut t = [_mm512_setzero_ps(); 8];
            if w == 8 {
                for kk in r {
                    // SAFETY: kk < k and j + 7 < n: every index is inside `at` and `b`.
                    let av = _mm512_loadu_ps(ap.add(kk * FEW_ROWS));
                    for (g, tg) in t.iter_mut().enumerate() {
                        *tg = step::<FMA>(*tg, av, *bp.add((j + g) * ldb + kk));
                    }
                }
            } else {
                for kk in r {
                    // SAFETY: as above, for the one column j < n.
                    let av = _mm512_loadu_ps(ap.add(kk * FEW_ROWS));
                    t[0] = step::<FMA>(t[0], av, *bp.add(j * ldb + kk));
                }
            }
            for (cg, &tg) in cv.iter_mut().zip(&t).take(w) {
                *cg = if first { tg } else { _mm512_add_ps(*cg, tg) };
            }
            first = false;
        }
        for (g, &cg) in cv.iter().enumerate().take(w) {
            // SAFETY: j + g < n, and ct holds n × 16.
            _mm512_storeu_ps(ct.as_mut_ptr().add((j + g) * FEW_ROWS), cg);
        }
        j += w;
    }
    lanes_as_rows(ct, c, n);
}

/// Bytes of `b` from which `x·Wᵀ` in f64 with at most [`FEW_ROWS`] rows runs
/// [`nt_few_rows_f64_avx512`] instead of transposing `b`.
const FEW_ROWS_NT_F64_FROM: usize = 64 << 10;

/// [`matmul_nt_f64`] into `c` (when `PLAIN`) and the same of |a| and |b| into `cabs` (when
/// `ABS`; [`matmul_nt_abs_f64`]) for 1 ≤ m ≤ [`FEW_ROWS`], from one read of `b`. Each element
/// is the sum [`matmul_f64`] computes on the transposed `b`, in its own accumulator:
/// c = +0, then c = c + fl(a[i][kk]·b[j][kk]) for kk ascending (a product, then a sum, never
/// fused), of the values or of their absolute values (|x| clears the sign bit: exact). The
/// lanes are the rows of `a` (two registers of eight): `at` (k × 16) holds `a` transposed,
/// zero beyond row m, and its absolute lanes are taken per kk; each row of `b` is read once,
/// in order, each element broadcast (and its absolute value). Four rows of `b` at a time
/// keep eight sums of each kind in flight. The results are built transposed (n × 16 each)
/// and copied back. An output whose form is off is not touched (it may be empty).
///
/// # Safety
/// The CPU must support AVX-512F; `a.len() == m·k`, `b.len() == n·k`, and `c.len() == m·n`
/// when `PLAIN`, `cabs.len() == m·n` when `ABS` (checked), 1 ≤ m ≤ 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn nt_few_rows_f64_avx512<const PLAIN: bool, const ABS: bool>(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    cabs: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    scratch: &mut Vec<f64>,
) {
    use std::arch::x86_64::*;
    assert!(
        (1..=FEW_ROWS).contains(&m)
            && a.len() == m * k
            && b.len() == n * k
            && (!PLAIN || c.len() == m * n)
            && (!ABS || cabs.len() == m * n),
        "nt_few_rows_f64: shapes"
    );
    let (nc, na) = (
        if PLAIN { n * FEW_ROWS } else { 0 },
        if ABS { n * FEW_ROWS } else { 0 },
    );
    scratch.resize(k * FEW_ROWS + nc + na, 0.0);
    let (at, rest) = scratch.split_at_mut(k * FEW_ROWS);
    let (ct, cta) = rest.split_at_mut(nc);
    rows_as_lanes(a, m, k, at, |x: f64| x);
    let (ap, bp) = (at.as_ptr(), b.as_ptr());
    let mut j = 0;
    while j < n {
        let w = if n - j >= 4 { 4 } else { 1 };
        let mut s = [[_mm512_setzero_pd(); 2]; 4];
        let mut sa = [[_mm512_setzero_pd(); 2]; 4];
        for kk in 0..k {
            // SAFETY: kk < k: the 16 values of `at` from kk·16 are inside it.
            let (a0, a1) = (
                _mm512_loadu_pd(ap.add(kk * FEW_ROWS)),
                _mm512_loadu_pd(ap.add(kk * FEW_ROWS + 8)),
            );
            let (p0, p1) = (_mm512_abs_pd(a0), _mm512_abs_pd(a1));
            for g in 0..w {
                // SAFETY: j + g < n and kk < k: inside `b`.
                let x = *bp.add((j + g) * k + kk);
                if PLAIN {
                    let xv = _mm512_set1_pd(x);
                    s[g][0] = _mm512_add_pd(s[g][0], _mm512_mul_pd(a0, xv));
                    s[g][1] = _mm512_add_pd(s[g][1], _mm512_mul_pd(a1, xv));
                }
                if ABS {
                    let xa = _mm512_set1_pd(x.abs());
                    sa[g][0] = _mm512_add_pd(sa[g][0], _mm512_mul_pd(p0, xa));
                    sa[g][1] = _mm512_add_pd(sa[g][1], _mm512_mul_pd(p1, xa));
                }
            }
        }
        for g in 0..w {
            // SAFETY: j + g < n, and ct (when PLAIN) and cta (when ABS) hold n × 16.
            if PLAIN {
                let p = ct.as_mut_ptr().add((j + g) * FEW_ROWS);
                _mm512_storeu_pd(p, s[g][0]);
                _mm512_storeu_pd(p.add(8), s[g][1]);
            }
            if ABS {
                let q = cta.as_mut_ptr().add((j + g) * FEW_ROWS);
                _mm512_storeu_pd(q, sa[g][0]);
                _mm512_storeu_pd(q.add(8), sa[g][1]);
            }
        }
        j += w;
    }
    if PLAIN {
        lanes_as_rows(ct, c, n);
    }
    if ABS {
        lanes_as_rows(cta, cabs, n);
    }
}

/// [`matmul_nt_f64`] into `c` and [`matmul_nt_abs_f64`] into `cabs` from one read of `b`, bit
/// for bit each, and true, where both take the few-rows kernel (few rows, a big `b`,
/// AVX-512F); false, with nothing written, elsewhere.
#[allow(clippy::too_many_arguments)]
pub fn matmul_nt_and_abs_f64(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    cabs: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    scratch: &mut Vec<f64>,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if few_rows_nt_f64_runs(m, k, n) {
        // SAFETY: avx512f was detected (few_rows_nt_f64_runs); the kernel checks the lengths.
        unsafe { nt_few_rows_f64_avx512::<true, true>(a, b, c, cabs, m, k, n, scratch) };
        return true;
    }
    let _ = (a, b, c, cabs, m, k, n, scratch);
    false
}

/// Copies the m × p panel `cp` into columns j0..j0 + p of `c` (m × n).
fn scatter_columns<T: Copy>(cp: &[T], c: &mut [T], n: usize, j0: usize, p: usize) {
    for (row, src) in c.chunks_exact_mut(n).zip(cp.chunks_exact(p)) {
        row[j0..j0 + p].copy_from_slice(src);
    }
}

/// `dst` (cols×rows) = transpose of `src` (rows×cols): pure data movement, so
/// both versions below give identical results.
fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut [f32], fast: bool) {
    assert!(src.len() == rows * cols && dst.len() == rows * cols);
    #[cfg(target_arch = "x86_64")]
    {
        if fast && fast_path_available() {
            // SAFETY: avx2 was detected just above; lengths were checked.
            unsafe { transpose_avx2(src, rows, cols, dst) };
            return;
        }
    }
    let _ = fast;
    transpose_scalar(src, rows, cols, dst);
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

fn check_lens(a: &[f32], b: &[f32], c: &[f32], m: usize, k: usize, n: usize) {
    assert_eq!(a.len(), m * k, "matmul: a has the wrong length");
    assert_eq!(b.len(), k * n, "matmul: b has the wrong length");
    assert_eq!(c.len(), m * n, "matmul: c has the wrong length");
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

/// One f32 matmul term in a split/accum order.
#[derive(Clone, Copy)]
struct Kernel {
    split: KSplit,
    accum: Accum,
    m: usize,
    k: usize,
    n: usize,
    fast: bool,
}

impl Kernel {
    /// `c = a · b` in the model order. `acc` holds at least n, `pw` at least
    /// (longest block)·n elements when accum is Pairwise.
    fn run(&self, a: AView<'_>, b: &[f32], c: &mut [f32], acc: &mut [f32], pw: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.fast && avx512_path_available() {
                // SAFETY: avx512f, avx2 and fma were detected on this CPU just above.
                unsafe { kernel_avx512(self, a, b, c, acc, pw) };
                return;
            }
            if self.fast && fast_path_available() {
                // SAFETY: avx2 and fma were detected on this CPU just above.
                unsafe { kernel_avx2_fma(self, a, b, c, acc, pw) };
                return;
            }
        }
        kernel_body_g::<GROUP_ROWS>(self, a, b, c, acc, pw);
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: run the AVX2 kernel on this thread even where AVX-512 is available, so that
    /// both compilations are compared with the portable one on an AVX-512 machine.
    static AVX2_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the AVX-512 compilation of the chain kernel is used on this machine.
fn avx512_path_available() -> bool {
    #[cfg(test)]
    if AVX2_ONLY.with(|f| f.get()) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        fast_path_available() && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The kernel compiled for AVX-512F (with AVX2 and FMA): the same chains, with register
/// tiles of [`GROUP_ROWS_AVX512`] rows (a 16-column tile row is one 512-bit register, so
/// twice the rows keep as many independent chains in flight as the AVX2 tiles do).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn kernel_avx512(
    kern: &Kernel,
    a: AView<'_>,
    b: &[f32],
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
    a: AView<'_>,
    b: &[f32],
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
    a: AView<'_>,
    b: &[f32],
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
    a: AView<'_>,
    b: &[f32],
    c: &mut [f32],
    acc: &mut [f32],
) {
    let (m, k, n) = (kern.m, kern.k, kern.n);
    if n == 0 {
        return;
    }
    if n < 8 {
        // Single-row tiles of the exact width.
        for i in 0..m {
            chain_row::<FMA>(
                a,
                i,
                b,
                n,
                kern.split,
                k,
                &mut c[i * n..(i + 1) * n],
                &mut acc[..n],
            );
        }
        return;
    }
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(SPAN_ROWS);
        let c_rows = &mut c[i * n..(i + rows) * n];
        if rows == 1 {
            // A lone row: [`chain_row`]'s wide tiles keep more chains in flight.
            chain_row::<FMA>(a, i, b, n, kern.split, k, c_rows, &mut acc[..n]);
        } else {
            chain_span::<FMA, G>(
                a,
                i,
                rows,
                b,
                n,
                kern.split,
                k,
                c_rows,
                &mut acc[..rows * n],
            );
        }
        i += rows;
    }
}

/// Rows of `c` the chain kernel computes in one span ([`chain_span`]): they share each
/// tile strip of `b` while it is in L1.
const SPAN_ROWS: usize = 16;

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
    a: AView<'_>,
    i: usize,
    b: &[f32],
    n: usize,
    split: KSplit,
    k: usize,
    c_row: &mut [f32],
    acc: &mut [f32],
) {
    let a_off = i * a.rs;
    let mut first = true;
    for r in split.blocks(k) {
        if first {
            chain_block::<FMA>(a, a_off, b, n, r, c_row);
            first = false;
        } else {
            chain_block::<FMA>(a, a_off, b, n, r, acc);
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
    a: AView<'_>,
    i: usize,
    rows: usize,
    b: &[f32],
    n: usize,
    split: KSplit,
    k: usize,
    c_rows: &mut [f32],
    acc: &mut [f32],
) {
    let mut first = true;
    for r in split.blocks(k) {
        let dst: &mut [f32] = if first { c_rows } else { acc };
        let mut j = 0;
        while j + 16 <= n {
            span_tiles::<16, FMA, G>(a, i, rows, b, n, r.clone(), j, dst);
            j += 16;
        }
        if j < n {
            if n - j <= 8 {
                span_tiles::<8, FMA, G>(a, i, rows, b, n, r.clone(), n - 8, dst);
            } else if n >= 16 {
                span_tiles::<16, FMA, G>(a, i, rows, b, n, r.clone(), n - 16, dst);
            } else {
                // 8 < n < 16: two 8-wide tiles.
                span_tiles::<8, FMA, G>(a, i, rows, b, n, r.clone(), 0, dst);
                span_tiles::<8, FMA, G>(a, i, rows, b, n, r.clone(), n - 8, dst);
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
    a: AView<'_>,
    i: usize,
    rows: usize,
    b: &[f32],
    n: usize,
    r: Range<usize>,
    j: usize,
    dst: &mut [f32],
) {
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
            10 => tile_rows::<10, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            9 => tile_rows::<9, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            8 => tile_rows::<8, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            7 => tile_rows::<7, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            6 => tile_rows::<6, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            5 => tile_rows::<5, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            4 => tile_rows::<4, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            3 => tile_rows::<3, W, FMA>(a, i + g, b, n, r.clone(), j, d),
            _ => {
                debug_assert_eq!(take, 2);
                tile_rows::<2, W, FMA>(a, i + g, b, n, r.clone(), j, d)
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
    a: AView<'_>,
    i: usize,
    b: &[f32],
    n: usize,
    r: Range<usize>,
    j: usize,
    dst: &mut [f32],
) {
    let mut t = [[0.0f32; W]; R];
    // Every index the loop reads grows with kk and q, so checking the last ones once covers
    // them all and the loop runs without per-load bounds checks.
    if let Some(last) = r.end.checked_sub(1).filter(|_| !r.is_empty()) {
        assert!(last * n + j + W <= b.len(), "tile_rows: b too short");
        assert!(
            (i + R - 1) * a.rs + last * a.ks < a.data.len(),
            "tile_rows: a too short"
        );
    }
    // One loop, instantiated per layout of `a` with its own element accessor, so that the
    // two layouts the model's products use read a's element of row q through one base
    // pointer plus a constant offset (a transposed view, rs = 1: the R values of one kk are
    // adjacent) or through one pointer per row (row-major, ks = 1), not through an address
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
            *base.add(i + kk * a.ks).add(q)
        });
    } else if a.ks == 1 {
        let rows: [*const f32; R] = std::array::from_fn(|q| unsafe { base.add((i + q) * a.rs) });
        run::<R, W, FMA>(&mut t, b, n, j, r, |kk, q| unsafe { *rows[q].add(kk) });
    } else {
        run::<R, W, FMA>(&mut t, b, n, j, r, |kk, q| unsafe {
            *base.add((i + q) * a.rs + kk * a.ks)
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
    a: AView<'_>,
    a_off: usize,
    b: &[f32],
    n: usize,
    r: Range<usize>,
    dst: &mut [f32],
) {
    let mut j = 0;
    while n - j >= 72 {
        tile::<64, 0, FMA>(a, a_off, b, n, r.clone(), j, 0, dst);
        j += 64;
    }
    let rest = n - j;
    let full = rest / 8 * 8;
    macro_rules! go {
        ($wa:literal, $wb:literal, $jb:expr) => {
            tile::<$wa, $wb, FMA>(a, a_off, b, n, r, j, $jb, dst)
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
    a: AView<'_>,
    a_off: usize,
    b: &[f32],
    n: usize,
    r: Range<usize>,
    ja: usize,
    jb: usize,
    dst: &mut [f32],
) {
    let mut ta = [0.0f32; WA];
    let mut tb = [0.0f32; WB];
    // As in `tile_rows`: the last indices checked once, the loop without bounds checks.
    if let Some(last) = r.end.checked_sub(1).filter(|_| !r.is_empty()) {
        assert!(ja + WA <= n && jb + WB <= n, "tile: columns past n");
        assert!(last * n + n <= b.len(), "tile: b too short");
        assert!(a_off + last * a.ks < a.data.len(), "tile: a too short");
    }
    for kk in r {
        // SAFETY: kk ≤ the last index checked above: a's element, and row kk of b with both
        // column ranges inside it, are within their slices.
        let av = unsafe { *a.data.get_unchecked(a_off + kk * a.ks) };
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
fn pairwise_matmul(kern: &Kernel, a: AView<'_>, b: &[f32], c: &mut [f32], pw: &mut [f32]) {
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
                let av = a.data[a_off + kk * a.ks];
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

/// c (m×n) = a (m×k) · b (k×n), all row-major, f64: every element is
/// `c = 0; c = c + a[i][kk]·b[kk][j]` for kk ascending, the product and the sum each rounded
/// (no FMA). The loop runs j innermost over contiguous memory, so it vectorizes without
/// changing any element's order.
pub fn matmul_f64(a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { matmul_f64_avx512(a, b, c, m, k, n) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { matmul_f64_avx2(a, b, c, m, k, n) };
        }
    }
    matmul_f64_impl::<F64_GROUP_ROWS>(a, b, c, m, k, n);
}

/// [`matmul_f64`] compiled for AVX-512F: the same operations per element (a product and a
/// sum, each rounded: Rust never contracts them into an FMA), eight lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn matmul_f64_avx512(a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
    matmul_f64_impl::<F64_GROUP_ROWS_AVX512>(a, b, c, m, k, n);
}

/// [`matmul_f64`] compiled for AVX2: the same operations per element, wider vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn matmul_f64_avx2(a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
    matmul_f64_impl::<F64_GROUP_ROWS>(a, b, c, m, k, n);
}

/// Columns per register block of the f64 kernels: the accumulators of one block stay in
/// registers across the whole reduction.
const F64_BLOCK: usize = 16;

/// Rows of `c` per register group of [`f64_rows`] (4 × 16 columns: 16 AVX2 registers).
const F64_GROUP_ROWS: usize = 4;

/// Rows of `c` per register group of [`f64_rows`] in the AVX-512 compilations for a big `b`
/// (8 × 16 columns: 16 of the 32 registers), so that `b` is read from memory once per 8
/// rows of `c` instead of once per 4 (rows are independent: grouping does not change any
/// element). See [`f64_grouped`].
const F64_GROUP_ROWS_AVX512: usize = 8;

/// Bytes of `b` from which the AVX-512 compilations group [`F64_GROUP_ROWS_AVX512`] rows:
/// below it `b` stays in the core's caches, and T1's small products (widths 35 and 67, a
/// few rows) ran about a third slower with 8-row groups than with 4.
const F64_WIDE_GROUPS_FROM: usize = 1 << 20;

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
fn matmul_f64_impl<const G: usize>(
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
/// one cache-sized panel of columns at a time ([`nt_panel_width`]).
pub fn matmul_nt_f64(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    scratch: &mut Vec<f64>,
) {
    nt_f64::<false>(a, b, c, m, k, n, scratch)
}

/// Scratch elements [`matmul_nt_f64`], [`matmul_nt_abs_f64`] or [`matmul_nt_and_abs_f64`] of
/// this shape takes on this CPU (the few-rows kernel's buffers, two of `c`'s for both
/// products, or |a| and one transposed panel with its block of `c`, or all of `b`
/// transposed): what a memory bound counts.
pub fn nt_f64_scratch_elems(m: usize, k: usize, n: usize) -> usize {
    if few_rows_nt_f64_runs(m, k, n) {
        return (k + 2 * n) * FEW_ROWS;
    }
    m * k + nt_panel_width(m, k, n, 8).map_or(k * n, |w| k * w + m * w)
}

/// c (m×n) = |a| · |b|ᵀ, b (n×k) row-major: `Σ_k |a[i][k]·b[j][k]|`, the scale of a matmul's
/// rounding-error bounds. [`matmul_nt_f64`] of the absolute values, bit for bit (|x| is
/// exact), with |b| taken while `b` is transposed into the scratch instead of in a copy of
/// all of `b` (131 MB for a 32,000 × 512 head).
pub fn matmul_nt_abs_f64(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    scratch: &mut Vec<f64>,
) {
    nt_f64::<true>(a, b, c, m, k, n, scratch)
}

/// [`matmul_nt_f64`], of |a| and |b| when `ABS`. Scratch: |a| (m × k) when `ABS`, then `b`
/// transposed, all at once or one panel at a time ([`nt_panel_width`]) with the panel's
/// block of c.
fn nt_f64<const ABS: bool>(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    scratch: &mut Vec<f64>,
) {
    assert_eq!(a.len(), m * k, "matmul_nt_f64: a has the wrong length");
    assert_eq!(b.len(), k * n, "matmul_nt_f64: b has the wrong length");
    assert_eq!(c.len(), m * n, "matmul_nt_f64: c has the wrong length");
    #[cfg(target_arch = "x86_64")]
    if few_rows_nt_f64_runs(m, k, n) {
        // SAFETY: avx512f was detected (few_rows_nt_f64_runs); the lengths were checked above.
        return unsafe {
            if ABS {
                nt_few_rows_f64_avx512::<false, true>(a, b, &mut [], c, m, k, n, scratch)
            } else {
                nt_few_rows_f64_avx512::<true, false>(a, b, c, &mut [], m, k, n, scratch)
            }
        };
    }
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
        transpose_f64_map::<ABS>(b, rest, n, k);
        return matmul_f64(a, rest, c, m, k, n);
    };
    // Panel by panel, as `MatmulModel::matmul_nt` does: rows j0..j0 + p of b transposed
    // into a k × p panel, then the m × p block of c, copied into its columns.
    let (bt, cp) = rest.split_at_mut(k * width);
    for j0 in (0..n).step_by(width) {
        let p = width.min(n - j0);
        transpose_f64_map::<ABS>(&b[j0 * k..(j0 + p) * k], &mut bt[..k * p], p, k);
        matmul_f64(a, &bt[..k * p], &mut cp[..m * p], m, k, p);
        scatter_columns(&cp[..m * p], c, n, j0, p);
    }
}

/// `dst` (cols × rows) = `src` (rows × cols)ᵀ, both row-major, in 32 × 32 tiles so that
/// both sides are walked a cache line at a time (a copy: no arithmetic).
pub fn transpose_f64(src: &[f64], dst: &mut [f64], rows: usize, cols: usize) {
    transpose_f64_map::<false>(src, dst, rows, cols)
}

/// [`transpose_f64`], of the absolute values when `ABS` (|x| clears the sign bit: exact).
/// Where the CPU has AVX-512F, the 8 × 8 blocks are transposed in registers
/// ([`transpose_f64_avx512`]); the result is the same copy.
fn transpose_f64_map<const ABS: bool>(src: &[f64], dst: &mut [f64], rows: usize, cols: usize) {
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
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above); the lengths were
            // checked above.
            return unsafe { transpose_f64_avx512::<ABS>(src, dst, rows, cols) };
        }
    }
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

/// c (m×n) = aᵀ · b, a (k×m) row-major, f64, same order as [`matmul_f64`]: all its rows
/// through [`matmul_tn_f64_rows`].
pub fn matmul_tn_f64(a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
    assert_eq!(a.len(), m * k, "matmul_tn_f64: a has the wrong length");
    assert_eq!(b.len(), k * n, "matmul_tn_f64: b has the wrong length");
    assert_eq!(c.len(), m * n, "matmul_tn_f64: c has the wrong length");
    matmul_tn_f64_rows(a, b, c, m, k, n, 0..m);
}

/// Rows `rows` of [`matmul_tn_f64`]'s c (m×n), written to `c_rows` (`rows.len()`×n), each
/// element by the same operations in the same order as `matmul_tn_f64` (the same register
/// blocks, chosen by the size of `b`; rows are independent of each other).
///
/// Panics unless `a.len() == k*m`, `b.len() == k*n`, `rows` lies in `0..m` and
/// `c_rows.len() == rows.len()*n`.
pub fn matmul_tn_f64_rows(
    a: &[f64],
    b: &[f64],
    c_rows: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
    rows: Range<usize>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { matmul_tn_f64_rows_avx512(a, b, c_rows, m, k, n, rows) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { matmul_tn_f64_rows_avx2(a, b, c_rows, m, k, n, rows) };
        }
    }
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

#[cfg(test)]
mod tests {
    use super::super::dot::{dot_blocked, dot_f64};
    use super::*;

    /// Deterministic generator (SplitMix64) so failures are reproducible.
    struct Rng(u64);
    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next_u64() % n as u64) as usize
        }
        /// Uniform in [-1, 1) with 24 random bits, times 2^e, e in -6..=6;
        /// 1 in 32 values is ±0 so signed-zero handling is exercised.
        fn val(&mut self) -> f32 {
            let r = self.next_u64();
            if r.is_multiple_of(32) {
                return if r & 64 == 0 { 0.0 } else { -0.0 };
            }
            let u = ((r >> 40) as f32) * 2f32.powi(-23) - 1.0;
            let e = ((r >> 8) % 13) as i32 - 6;
            u * 2f32.powi(e)
        }
        fn vec(&mut self, len: usize) -> Vec<f32> {
            (0..len).map(|_| self.val()).collect()
        }
    }

    /// Independent per-element reference: dot_blocked on explicit row/column
    /// vectors of the rounded / split inputs, terms folded left to right.
    fn reference(
        model: &MatmulModel,
        a: &[f32],
        b: &[f32],
        m: usize,
        k: usize,
        n: usize,
    ) -> Vec<f32> {
        let dot = |x: &[f32], y: &[f32]| dot_blocked(x, y, model.split, model.accum);
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let row: Vec<f32> = a[i * k..(i + 1) * k].to_vec();
                let col: Vec<f32> = (0..k).map(|kk| b[kk * n + j]).collect();
                let map =
                    |v: &[f32], f: &dyn Fn(f32) -> f32| v.iter().map(|&x| f(x)).collect::<Vec<_>>();
                c[i * n + j] = match model.passes {
                    Passes::F32 => dot(&row, &col),
                    Passes::Bf16x1 => dot(&map(&row, &bf16_rne), &map(&col, &bf16_rne)),
                    Passes::Tf32(md) => {
                        let f = move |x| tf32(x, md);
                        dot(&map(&row, &f), &map(&col, &f))
                    }
                    Passes::Bf16x3 => {
                        let ah = map(&row, &|x| bf16x3_split(x).0);
                        let al = map(&row, &|x| bf16x3_split(x).1);
                        let bh = map(&col, &|x| bf16x3_split(x).0);
                        let bl = map(&col, &|x| bf16x3_split(x).1);
                        (dot(&al, &bh) + dot(&ah, &bl)) + dot(&ah, &bh)
                    }
                    Passes::Bf16x6 => {
                        let p = |v: &[f32], q: usize| {
                            v.iter()
                                .map(|&x| {
                                    let s = bf16x6_split(x);
                                    [s.0, s.1, s.2][q]
                                })
                                .collect::<Vec<_>>()
                        };
                        let (ah, am, al) = (p(&row, 0), p(&row, 1), p(&row, 2));
                        let (bh, bm, bl) = (p(&col, 0), p(&col, 1), p(&col, 2));
                        ((((dot(&am, &bm) + dot(&ah, &bl)) + dot(&al, &bh)) + dot(&ah, &bm))
                            + dot(&am, &bh))
                            + dot(&ah, &bh)
                    }
                };
            }
        }
        c
    }

    fn all_passes() -> Vec<Passes> {
        vec![
            Passes::F32,
            Passes::Bf16x1,
            Passes::Bf16x3,
            Passes::Bf16x6,
            Passes::Tf32(Tf32Mode::Rne),
            Passes::Tf32(Tf32Mode::Rna),
            Passes::Tf32(Tf32Mode::Trunc),
        ]
    }

    fn all_models() -> Vec<MatmulModel> {
        let splits = [
            KSplit::Single,
            KSplit::Mkl,
            KSplit::Blocked(1),
            KSplit::Blocked(7),
            KSplit::Blocked(64),
            KSplit::Chunks(3),
            KSplit::Chunks(5),
        ];
        let mut v = vec![];
        for &split in &splits {
            for accum in [Accum::Fma, Accum::MulAdd, Accum::Pairwise] {
                for passes in all_passes() {
                    v.push(MatmulModel {
                        split,
                        accum,
                        passes,
                    });
                }
            }
        }
        v
    }

    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let mut t = vec![0.0; x.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = x[r * cols + c];
            }
        }
        t
    }

    #[track_caller]
    fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len());
        for (idx, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{what}: element {idx}: got {g:e} want {w:e}"
            );
        }
    }

    fn blocks(split: KSplit, k: usize) -> Vec<usize> {
        let mut v = vec![];
        split.for_each_block(k, |r| v.push(r.len()));
        v
    }

    #[test]
    fn mkl_blocks_match_measurements() {
        let mkl = |k| blocks(KSplit::Mkl, k);
        assert_eq!(mkl(0), Vec::<usize>::new());
        assert_eq!(mkl(1), vec![1]);
        assert_eq!(mkl(18), vec![18]);
        assert_eq!(mkl(192), vec![192]);
        assert_eq!(mkl(193), vec![96, 96, 1]);
        assert_eq!(mkl(200), vec![100, 100]);
        assert_eq!(mkl(256), vec![128, 128]);
        assert_eq!(mkl(257), vec![128, 128, 1]);
        assert_eq!(mkl(300), vec![150, 150]);
        assert_eq!(mkl(383), vec![191, 191, 1]);
        assert_eq!(mkl(384), vec![192, 192]);
        assert_eq!(mkl(385), vec![192, 192, 1]);
        assert_eq!(mkl(1001), vec![192, 192, 192, 192, 192, 41]);
    }

    #[test]
    fn other_splits_blocks() {
        assert_eq!(blocks(KSplit::Single, 35), vec![35]);
        assert_eq!(blocks(KSplit::Single, 0), Vec::<usize>::new());
        assert_eq!(blocks(KSplit::Blocked(7), 18), vec![7, 7, 4]);
        assert_eq!(blocks(KSplit::Blocked(7), 14), vec![7, 7]);
        assert_eq!(blocks(KSplit::Blocked(64), 35), vec![35]);
        // Chunks(4) of 10: [0,2) [2,5) [5,7) [7,10).
        let mut v = vec![];
        KSplit::Chunks(4).for_each_block(10, |r| v.push(r));
        assert_eq!(v, vec![0..2, 2..5, 5..7, 7..10]);
        // Chunks(5) of 3: bounds 0,0,1,1,2,3 -> [0,1) [1,2) [2,3); empties skipped.
        let mut v = vec![];
        KSplit::Chunks(5).for_each_block(3, |r| v.push(r));
        assert_eq!(v, vec![0..1, 1..2, 2..3]);
        // Blocks are contiguous and cover 0..k for every split.
        for split in [
            KSplit::Mkl,
            KSplit::Blocked(5),
            KSplit::Chunks(7),
            KSplit::Single,
        ] {
            for k in 0..800 {
                let mut next = 0;
                split.for_each_block(k, |r| {
                    assert_eq!(r.start, next);
                    assert!(r.end > r.start);
                    next = r.end;
                });
                assert_eq!(next, k, "{split:?} k={k}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "Blocked(0)")]
    fn blocked_zero_panics() {
        KSplit::Blocked(0).for_each_block(3, |_| {});
    }

    const KS: [usize; 10] = [1, 18, 35, 191, 192, 193, 257, 383, 384, 385];

    #[test]
    fn every_model_matches_scalar_reference() {
        let mut rng = Rng(1);
        let mut s = MatmulScratch::default();
        let models = all_models();
        for &k in &KS {
            // Shapes: a random small one and one whose n exercises the 32-wide
            // tiles, the 8-wide tiles and a ragged tail (n = 67 = 32 + 32 + 3).
            for (m, n) in [(1 + rng.below(3), 1 + rng.below(12)), (2, 67)] {
                let a = rng.vec(m * k);
                let b = rng.vec(k * n);
                for model in &models {
                    // The reference is slow at large k; sample the models there.
                    if k > 200 && rng.below(3) != 0 {
                        continue;
                    }
                    let want = reference(model, &a, &b, m, k, n);
                    let mut c = vec![f32::NAN; m * n];
                    model.matmul(&a, &b, &mut c, m, k, n, &mut s);
                    assert_same_bits(&c, &want, &format!("{model:?} m={m} k={k} n={n}"));
                }
            }
        }
    }

    /// Every tile shape of the chain kernel (full 64-wide tiles, 8..64-wide
    /// final tiles, the overlapping 8-wide tail, n < 8) against the reference.
    #[test]
    fn every_row_width_matches_scalar_reference() {
        let mut rng = Rng(9);
        let mut s = MatmulScratch::default();
        for n in 1..=140 {
            for (split, accum) in [
                (KSplit::Single, Accum::Fma),
                (KSplit::Blocked(4), Accum::MulAdd),
                (KSplit::Chunks(2), Accum::Pairwise),
            ] {
                let model = MatmulModel {
                    split,
                    accum,
                    passes: Passes::F32,
                };
                let (m, k) = (2, 9);
                let a = rng.vec(m * k);
                let b = rng.vec(k * n);
                let want = reference(&model, &a, &b, m, k, n);
                let mut c = vec![f32::NAN; m * n];
                model.matmul(&a, &b, &mut c, m, k, n, &mut s);
                assert_same_bits(&c, &want, &format!("{model:?} n={n}"));
                model.matmul_portable(&a, &b, &mut c, m, k, n, &mut s);
                assert_same_bits(&c, &want, &format!("portable {model:?} n={n}"));
            }
        }
    }

    /// Every row count of the span kernel (spans of 16 rows and a shorter last one, tiles of
    /// 4, 3 and 2 rows with five left as 3 + 2, a lone last row; 16- and 8-wide tiles, the
    /// overlapping ragged end, n < 8) against the reference, for `a` read by rows (`matmul`)
    /// and by columns (`matmul_tn`).
    #[test]
    fn every_row_count_matches_scalar_reference() {
        let mut rng = Rng(21);
        let mut s = MatmulScratch::default();
        let widths = [
            1, 5, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 67, 100,
        ];
        for m in (1..=22).chain([31, 32, 33, 37]) {
            for &n in &widths {
                for (split, accum) in [
                    (KSplit::Single, Accum::Fma),
                    (KSplit::Mkl, Accum::Fma),
                    (KSplit::Blocked(4), Accum::MulAdd),
                    (KSplit::Chunks(3), Accum::Fma),
                ] {
                    let model = MatmulModel {
                        split,
                        accum,
                        passes: Passes::F32,
                    };
                    let k = [0, 1, 9, 40][rng.below(4)];
                    let a = rng.vec(m * k);
                    let b = rng.vec(k * n);
                    let want = reference(&model, &a, &b, m, k, n);
                    let what = format!("{model:?} m={m} k={k} n={n}");
                    let mut c = vec![f32::NAN; m * n];
                    model.matmul(&a, &b, &mut c, m, k, n, &mut s);
                    assert_same_bits(&c, &want, &what);
                    c.fill(f32::NAN);
                    model.matmul_portable(&a, &b, &mut c, m, k, n, &mut s);
                    assert_same_bits(&c, &want, &format!("portable {what}"));
                    let at = transpose(&a, m, k);
                    c.fill(f32::NAN);
                    model.matmul_tn(&at, &b, &mut c, m, k, n, &mut s);
                    assert_same_bits(&c, &want, &format!("tn {what}"));
                }
            }
        }
    }

    /// The models really are different orders on this data; otherwise the
    /// comparison above could not tell a wrong order from a right one.
    #[test]
    fn models_are_distinguishable() {
        let mut rng = Rng(2);
        let (m, k, n) = (3, 385, 40);
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let mut s = MatmulScratch::default();
        let run = |model: MatmulModel, s: &mut MatmulScratch| {
            let mut c = vec![0.0; m * n];
            model.matmul(&a, &b, &mut c, m, k, n, s);
            c.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        let base = MatmulModel {
            split: KSplit::Single,
            accum: Accum::Fma,
            passes: Passes::F32,
        };
        let mut seen = vec![run(base, &mut s)];
        let variants = [
            MatmulModel {
                split: KSplit::Mkl,
                ..base
            },
            MatmulModel {
                split: KSplit::Chunks(3),
                ..base
            },
            MatmulModel {
                accum: Accum::MulAdd,
                ..base
            },
            MatmulModel {
                accum: Accum::Pairwise,
                ..base
            },
            MatmulModel {
                passes: Passes::Bf16x1,
                ..base
            },
            MatmulModel {
                passes: Passes::Bf16x3,
                ..base
            },
            MatmulModel {
                passes: Passes::Bf16x6,
                ..base
            },
            MatmulModel {
                passes: Passes::Tf32(Tf32Mode::Rne),
                ..base
            },
            MatmulModel {
                passes: Passes::Tf32(Tf32Mode::Rna),
                ..base
            },
            MatmulModel {
                passes: Passes::Tf32(Tf32Mode::Trunc),
                ..base
            },
        ];
        for v in variants {
            let r = run(v, &mut s);
            assert!(
                !seen.contains(&r),
                "{v:?} gives the same bits as an earlier model"
            );
            seen.push(r);
        }
    }

    #[test]
    fn nt_and_tn_equal_explicit_transposition() {
        let mut rng = Rng(3);
        let mut s = MatmulScratch::default();
        for model in all_models() {
            for &k in &[0usize, 1, 35, 193] {
                let (m, n) = (1 + rng.below(11), 1 + rng.below(70));
                let a = rng.vec(m * k);
                let b = rng.vec(k * n);
                let mut want = vec![0.0; m * n];
                model.matmul(&a, &b, &mut want, m, k, n, &mut s);
                // nt: pass b as (n×k).
                let bt = transpose(&b, k, n);
                let mut c = vec![f32::NAN; m * n];
                model.matmul_nt(&a, &bt, &mut c, m, k, n, &mut s);
                assert_same_bits(&c, &want, &format!("nt {model:?} {m}x{k}x{n}"));
                // tn: pass a as (k×m).
                let at = transpose(&a, m, k);
                let mut c = vec![f32::NAN; m * n];
                model.matmul_tn(&at, &b, &mut c, m, k, n, &mut s);
                assert_same_bits(&c, &want, &format!("tn {model:?} {m}x{k}x{n}"));
            }
        }
    }

    /// `matmul_nt` with few rows and a big `b` (the transpose-free kernel where the CPU has
    /// AVX-512F) equals `matmul` on the explicitly transposed `b`, for every model, with
    /// row counts from 1 to 16, column counts that leave a remainder of 1 to 7 beside the
    /// groups of eight, and reduction lengths that end blocks early, on and off block edges.
    #[test]
    fn few_rows_nt_equals_explicit_transposition() {
        let mut rng = Rng(47);
        let mut s = MatmulScratch::default();
        for (m, k, n) in [
            (10, 193, 101),
            (16, 512, 37),
            (1, 35, 500),
            (7, 400, 45),
            (3, 2, 8200),
        ] {
            assert!(
                n * k * 4 >= FEW_ROWS_NT_FROM,
                "{m}x{k}x{n} takes the kernel"
            );
            let a = rng.vec(m * k);
            let b = rng.vec(n * k);
            let bt = transpose(&b, n, k);
            for model in all_models() {
                let mut want = vec![0.0; m * n];
                model.matmul(&a, &bt, &mut want, m, k, n, &mut s);
                let mut c = vec![f32::NAN; m * n];
                model.matmul_nt(&a, &b, &mut c, m, k, n, &mut s);
                assert_same_bits(&c, &want, &format!("{model:?} {m}x{k}x{n}"));
            }
        }
    }

    /// `matmul_tn_rows` of any row range equals those rows of `matmul_tn`, for every model
    /// (a fused optimizer step consumes a weight gradient by such panels).
    #[test]
    fn tn_rows_equal_rows_of_tn() {
        let mut rng = Rng(41);
        let mut s = MatmulScratch::default();
        for model in all_models() {
            for &k in &[1usize, 10, 193] {
                let (m, n) = (1 + rng.below(40), 1 + rng.below(70));
                let a = rng.vec(k * m);
                let b = rng.vec(k * n);
                let mut want = vec![0.0; m * n];
                model.matmul_tn(&a, &b, &mut want, m, k, n, &mut s);
                let r0 = rng.below(m);
                let r1 = r0 + 1 + rng.below(m - r0);
                let mut c = vec![f32::NAN; (r1 - r0) * n];
                model.matmul_tn_rows(&a, &b, &mut c, m, k, n, r0..r1, &mut s);
                let what = format!("{model:?} {m}x{k}x{n} rows {r0}..{r1}");
                assert_same_bits(&c, &want[r0 * n..r1 * n], &what);
            }
        }
    }

    /// `matmul_nt` on shapes that take the panels (b of 1 MiB and more, few rows; the last
    /// panel narrower) equals `matmul` on the explicitly transposed b, for every model, on
    /// the fast and the portable kernels.
    #[test]
    fn nt_panels_equal_explicit_transposition() {
        let mut rng = Rng(23);
        let mut s = MatmulScratch::default();
        for (m, k, n) in [(10, 64, 4103), (3, 513, 700)] {
            let w = nt_panel_width(m, k, n, 4).expect("these shapes take the panels");
            assert!(n % w != 0, "the last panel is a partial one");
            let a = rng.vec(m * k);
            let b = rng.vec(k * n);
            let bt = transpose(&b, k, n);
            for model in all_models().into_iter().filter(|_| rng.below(4) == 0) {
                for fast in [true, false] {
                    let mut want = vec![0.0; m * n];
                    model.run(
                        AView {
                            data: &a,
                            rs: k,
                            ks: 1,
                        },
                        &b,
                        &mut want,
                        m,
                        k,
                        n,
                        &mut s,
                        fast,
                    );
                    let mut c = vec![f32::NAN; m * n];
                    model.nt(&a, &bt, &mut c, m, k, n, &mut s, fast);
                    assert_same_bits(&c, &want, &format!("nt {model:?} {m}x{k}x{n} fast={fast}"));
                }
            }
        }
    }

    /// The f32 transpose, portable and AVX2 (8 × 8 tiles, a ragged edge by a tile moved
    /// back over the one before it, scalar below 8 rows or columns), against the naive copy
    /// on every shape up to 19 × 19 and on T1's shapes, bit for bit; the destination starts
    /// as NaN, so an element no tile writes shows.
    #[test]
    fn transposes_agree_with_naive() {
        let mut rng = Rng(8);
        let shapes = (0..20).flat_map(|r| (0..20).map(move |c| (r, c)));
        for (rows, cols) in shapes.chain([(67, 35), (35, 67), (10, 35), (35, 10), (10, 67)]) {
            let src = rng.vec(rows * cols);
            let want = transpose(&src, rows, cols);
            for fast in [false, true] {
                let mut dst = vec![f32::NAN; rows * cols];
                transpose_into(&src, rows, cols, &mut dst, fast);
                assert_same_bits(&dst, &want, &format!("{rows}x{cols} fast={fast}"));
            }
        }
    }

    /// The f64 transpose (8 × 8 register blocks where the CPU has AVX-512F, a ragged edge
    /// by a block moved back over the one before it, scalar below 8 rows or columns), plain
    /// and of the absolute values, against the naive copy on every shape up to 19 × 19 and
    /// on T1's 67 × 35 and 35 × 67, bit for bit; the destination starts as NaN, so an
    /// element no block writes shows.
    #[test]
    fn f64_transposes_agree_with_naive() {
        let mut rng = Rng(9);
        let shapes = (0..20).flat_map(|r| (0..20).map(move |c| (r, c)));
        for (rows, cols) in shapes.chain([(67, 35), (35, 67), (64, 64)]) {
            let src: Vec<f64> = (0..rows * cols)
                .map(|_| rng.val() as f64 * (1.0 + 1e-9 * rng.val() as f64))
                .collect();
            let mut dst = vec![f64::NAN; rows * cols];
            let mut abs = vec![f64::NAN; rows * cols];
            transpose_f64(&src, &mut dst, rows, cols);
            transpose_f64_map::<true>(&src, &mut abs, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    let v = src[r * cols + c];
                    let what = format!("{rows}x{cols} at ({r}, {c})");
                    assert_eq!(dst[c * rows + r].to_bits(), v.to_bits(), "{what}");
                    assert_eq!(abs[c * rows + r].to_bits(), v.abs().to_bits(), "abs {what}");
                }
            }
        }
    }

    #[test]
    fn k_zero_and_empty_shapes() {
        let mut s = MatmulScratch::default();
        for model in all_models() {
            let mut c = vec![f32::NAN; 6];
            model.matmul(&[], &[], &mut c, 2, 0, 3, &mut s);
            assert!(c.iter().all(|x| x.to_bits() == 0), "{model:?}");
            model.matmul(&[], &[1.0; 4], &mut [], 0, 4, 1, &mut s);
            model.matmul(&[1.0; 4], &[], &mut [], 4, 1, 0, &mut s);
        }
    }

    #[test]
    #[should_panic(expected = "wrong length")]
    fn wrong_length_panics() {
        let model = MatmulModel {
            split: KSplit::Single,
            accum: Accum::Fma,
            passes: Passes::F32,
        };
        model.matmul(
            &[1.0; 5],
            &[1.0; 6],
            &mut [0.0; 4],
            2,
            3,
            2,
            &mut MatmulScratch::default(),
        );
    }

    #[test]
    fn portable_and_fast_paths_agree_bitwise() {
        if !fast_path_available() {
            eprintln!("avx2+fma not available: the fast path is the portable path here");
        }
        for avx2_only in [false, true] {
            AVX2_ONLY.with(|f| f.set(avx2_only));
            fast_paths_agree_with_portable(avx2_only);
        }
        AVX2_ONLY.with(|f| f.set(false));
    }

    /// Random shapes (m up to 40 rows: whole and ragged spans and register tiles of every
    /// height) in every model, fast against portable, bit for bit.
    fn fast_paths_agree_with_portable(avx2_only: bool) {
        let mut rng = Rng(4);
        let mut s = MatmulScratch::default();
        for model in all_models().into_iter().chain(all_models()) {
            let k = KS[rng.below(KS.len())];
            let (m, n) = (1 + rng.below(40), 1 + rng.below(80));
            let a = rng.vec(m * k);
            let b = rng.vec(k * n);
            let mut fast = vec![0.0; m * n];
            let mut port = vec![0.0; m * n];
            model.matmul(&a, &b, &mut fast, m, k, n, &mut s);
            model.matmul_portable(&a, &b, &mut port, m, k, n, &mut s);
            let what = format!("{model:?} m={m} k={k} n={n} avx2_only={avx2_only}");
            assert_same_bits(&fast, &port, &what);
            let bt = transpose(&b, k, n);
            model.nt(&a, &bt, &mut fast, m, k, n, &mut s, true);
            model.nt(&a, &bt, &mut port, m, k, n, &mut s, false);
            assert_same_bits(&fast, &port, &format!("nt {what}"));
            let at = transpose(&a, m, k);
            model.tn(&at, &b, &mut fast, m, k, n, &mut s, true);
            model.tn(&at, &b, &mut port, m, k, n, &mut s, false);
            assert_same_bits(&fast, &port, &format!("tn {what}"));
        }
    }

    #[test]
    fn scratch_stops_growing() {
        let model = MatmulModel {
            split: KSplit::Mkl,
            accum: Accum::Pairwise,
            passes: Passes::Bf16x6,
        };
        let mut rng = Rng(5);
        let (m, k, n) = (4, 257, 19);
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let mut c = vec![0.0; m * n];
        let mut s = MatmulScratch::default();
        model.matmul_nt(&a, &b, &mut c, m, k, n, &mut s);
        let ptrs = |s: &MatmulScratch| {
            let mut v = vec![
                s.bt.as_ptr(),
                s.term.as_ptr(),
                s.acc.as_ptr(),
                s.pw.as_ptr(),
            ];
            v.extend(s.pa.iter().chain(&s.pb).map(|x| x.as_ptr()));
            v
        };
        let before = ptrs(&s);
        for _ in 0..3 {
            model.matmul_nt(&a, &b, &mut c, m, k, n, &mut s);
            model.matmul(&a[..2 * k], &b, &mut c[..2 * n], 2, k, n, &mut s);
        }
        assert_eq!(ptrs(&s), before, "scratch was reallocated");
    }

    /// c = a·b by every f64 kernel this CPU can run (portable, AVX2, AVX-512F) and by the
    /// dispatching entry points, named: all must give the same bits.
    fn every_f64_kernel(
        a: &[f64],
        b: &[f64],
        m: usize,
        k: usize,
        n: usize,
    ) -> Vec<(&'static str, Vec<f64>)> {
        let mut out = Vec::new();
        let mut run = |name: &'static str, f: &dyn Fn(&mut [f64])| {
            let mut c = vec![f64::NAN; m * n];
            f(&mut c);
            out.push((name, c));
        };
        run("portable", &|c| {
            matmul_f64_impl::<F64_GROUP_ROWS>(a, b, c, m, k, n)
        });
        run("dispatch", &|c| matmul_f64(a, b, c, m, k, n));
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                run("avx2", &|c| unsafe { matmul_f64_avx2(a, b, c, m, k, n) });
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports AVX-512F (checked just above).
                run("avx512", &|c| unsafe {
                    matmul_f64_avx512(a, b, c, m, k, n)
                });
            }
        }
        out
    }

    /// Asserts that every f64 kernel, and the nt and tn forms on the transposed operands,
    /// give `want` (c = a·b, m×k by k×n) bit for bit.
    fn assert_f64_forms(a: &[f64], b: &[f64], m: usize, k: usize, n: usize, want: &[f64]) {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (name, c) in every_f64_kernel(a, b, m, k, n) {
            assert_eq!(bits(&c), bits(want), "{name} {m}x{k}x{n}");
        }
        let mut bt = vec![0.0; k * n];
        for kk in 0..k {
            for j in 0..n {
                bt[j * k + kk] = b[kk * n + j];
            }
        }
        let mut c = vec![f64::NAN; m * n];
        matmul_nt_f64(a, &bt, &mut c, m, k, n, &mut Vec::new());
        assert_eq!(bits(&c), bits(want), "matmul_nt_f64 {m}x{k}x{n}");
        let mut at = vec![0.0; m * k];
        for i in 0..m {
            for kk in 0..k {
                at[kk * m + i] = a[i * k + kk];
            }
        }
        let mut c = vec![f64::NAN; m * n];
        matmul_tn_f64(&at, b, &mut c, m, k, n);
        assert_eq!(bits(&c), bits(want), "matmul_tn_f64 {m}x{k}x{n}");
    }

    #[test]
    fn f64_variants_match_naive_triple_loop() {
        let mut rng = Rng(6);
        for _ in 0..50 {
            let (m, k, n) = (1 + rng.below(11), rng.below(40), 1 + rng.below(41));
            check_f64_shape(&mut rng, m, k, n);
        }
    }

    /// Random a (m × k) and b (k × n), and the three f64 forms against the naive loop
    /// (`c = 0; c = c + a·b` for kk ascending), bit for bit; the naive loop also equals
    /// `dot_f64` of the row and the column.
    fn check_f64_shape(rng: &mut Rng, m: usize, k: usize, n: usize) {
        let a: Vec<f64> = (0..m * k)
            .map(|_| rng.val() as f64 * (1.0 + 1e-9))
            .collect();
        let b: Vec<f64> = (0..k * n).map(|_| rng.val() as f64 / 3.0).collect();
        let mut want = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for kk in 0..k {
                    acc += a[i * k + kk] * b[kk * n + j];
                }
                let row: Vec<f64> = (0..k).map(|kk| a[i * k + kk]).collect();
                let col: Vec<f64> = (0..k).map(|kk| b[kk * n + j]).collect();
                assert_eq!(acc.to_bits(), dot_f64(&row, &col).to_bits());
                want[i * n + j] = acc;
            }
        }
        assert_f64_forms(&a, &b, m, k, n, &want);
    }

    /// Every row group (4, and the 1–3 rows left over) and every column block (16, 8, the
    /// 8-wide block ending at n over a ragged end of every width 1–7, and below 8 columns
    /// each width 1–7) of the f64 kernels, for the three forms, against the naive loop
    /// (`c = 0; c = c + a·b` for kk ascending) bit for bit: m = 1..=11, n = 1..=40 and 67.
    #[test]
    fn f64_every_row_group_and_column_block_matches_naive_loop() {
        let mut rng = Rng(41);
        for m in 1..=11 {
            for n in (1..=40).chain([67]) {
                let k = [0, 1, 10, 35][(m + n) % 4];
                check_f64_shape(&mut rng, m, k, n);
            }
        }
    }

    /// Both products from one pass (`matmul_nt_and_abs_f64`) equal `matmul_nt_f64` and
    /// `matmul_nt_abs_f64` bit for bit where the few-rows kernel runs (1 to 16 rows, a
    /// remainder beside the groups of four columns, signed inputs), and nothing is written
    /// where it does not (a small `b`, or more than 16 rows).
    #[test]
    fn nt_and_abs_in_one_pass_equal_the_two_products() {
        let mut rng = Rng(31);
        for (m, k, n) in [
            (1, 40, 300),
            (10, 64, 203),
            (16, 33, 250),
            (3, 5, 7),
            (17, 64, 300),
        ] {
            let a: Vec<f64> = (0..m * k).map(|_| rng.val() as f64 - 0.5).collect();
            let b: Vec<f64> = (0..k * n).map(|_| rng.val() as f64 / 3.0 - 0.2).collect();
            let (mut c, mut cabs) = (vec![f64::NAN; m * n], vec![f64::NAN; m * n]);
            let fused = matmul_nt_and_abs_f64(&a, &b, &mut c, &mut cabs, m, k, n, &mut Vec::new());
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(fused, few_rows_nt_f64_runs(m, k, n), "{m}x{k}x{n}");
            if !fused {
                assert!(
                    c.iter().chain(&cabs).all(|x| x.is_nan()),
                    "{m}x{k}x{n} written"
                );
                continue;
            }
            let (mut want, mut want_abs) = (vec![0.0; m * n], vec![0.0; m * n]);
            matmul_nt_f64(&a, &b, &mut want, m, k, n, &mut Vec::new());
            matmul_nt_abs_f64(&a, &b, &mut want_abs, m, k, n, &mut Vec::new());
            assert_eq!(bits(&c), bits(&want), "{m}x{k}x{n}");
            assert_eq!(bits(&cabs), bits(&want_abs), "abs {m}x{k}x{n}");
        }
    }

    /// |a|·|b|ᵀ equals `matmul_nt_f64` of explicit absolute-value copies, bit for bit, on
    /// shapes with and without panels (signed inputs, so the absolute values matter).
    #[test]
    fn nt_abs_equals_nt_of_the_absolute_values() {
        let mut rng = Rng(29);
        for (m, k, n) in [(3, 5, 7), (10, 300, 451), (4, 64, 2100), (70, 40, 5000)] {
            let a: Vec<f64> = (0..m * k).map(|_| rng.val() as f64 - 0.5).collect();
            let b: Vec<f64> = (0..k * n).map(|_| rng.val() as f64 / 3.0 - 0.2).collect();
            let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
            let mut want = vec![f64::NAN; m * n];
            matmul_nt_f64(&abs(&a), &abs(&b), &mut want, m, k, n, &mut Vec::new());
            let mut got = vec![f64::NAN; m * n];
            matmul_nt_abs_f64(&a, &b, &mut got, m, k, n, &mut vec![7.0; 3]);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n}");
            let mut plain = vec![f64::NAN; m * n];
            matmul_nt_f64(&a, &b, &mut plain, m, k, n, &mut Vec::new());
            assert_ne!(bits(&plain), bits(&want), "the signs change the result");
        }
    }

    /// `matmul_nt_f64` and `matmul_nt_abs_f64` with few rows and a big `b` (the
    /// transpose-free kernel where the CPU has AVX-512F) equal `matmul_f64` on the explicitly
    /// transposed `b` (of the absolute values), for 1 to 16 rows and column counts that
    /// leave a remainder beside the groups of four.
    #[test]
    fn f64_few_rows_nt_equals_explicit_transposition() {
        let mut rng = Rng(53);
        for (m, k, n) in [
            (10, 512, 130),
            (16, 100, 303),
            (1, 2048, 9),
            (3, 20, 1003),
            (9, 64, 129),
        ] {
            assert!(
                n * k * 8 >= FEW_ROWS_NT_F64_FROM,
                "{m}x{k}x{n} takes the kernel"
            );
            let a: Vec<f64> = (0..m * k).map(|_| rng.val() as f64 * 1.000_000_3).collect();
            let b: Vec<f64> = (0..n * k).map(|_| rng.val() as f64 * 0.999_999_1).collect();
            let mut bt = vec![0.0; k * n];
            transpose_f64(&b, &mut bt, n, k);
            let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<f64>>();
            let mut want = vec![0.0; m * n];
            matmul_f64(&a, &bt, &mut want, m, k, n);
            let mut want_abs = vec![0.0; m * n];
            matmul_f64(&abs(&a), &abs(&bt), &mut want_abs, m, k, n);
            let (mut c, mut c_abs, mut scratch) =
                (vec![f64::NAN; m * n], vec![f64::NAN; m * n], Vec::new());
            matmul_nt_f64(&a, &b, &mut c, m, k, n, &mut scratch);
            matmul_nt_abs_f64(&a, &b, &mut c_abs, m, k, n, &mut scratch);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
            assert_eq!(bits(&c), bits(&want), "{m}x{k}x{n}");
            assert_eq!(bits(&c_abs), bits(&want_abs), "|·| {m}x{k}x{n}");
        }
    }

    #[test]
    fn f64_tn_rows_equal_rows_of_tn() {
        // Every row range of a small product, and of one whose b takes the 8-row groups
        // (b ≥ F64_WIDE_GROUPS_FROM bytes), with ranges that start and end off a group.
        let mut rng = Rng(43);
        for (m, k, n) in [(13, 10, 37), (21, 10, 13_200)] {
            let a: Vec<f64> = (0..k * m).map(|_| rng.val() as f64 * 1.000_000_1).collect();
            let b: Vec<f64> = (0..k * n).map(|_| rng.val() as f64 * 0.999_999_7).collect();
            let mut want = vec![0.0; m * n];
            matmul_tn_f64(&a, &b, &mut want, m, k, n);
            for (r0, r1) in [(0, m), (0, 1), (3, 12), (5, m), (m - 1, m), (4, 4)] {
                let mut c = vec![f64::NAN; (r1 - r0) * n];
                matmul_tn_f64_rows(&a, &b, &mut c, m, k, n, r0..r1);
                let same = c
                    .iter()
                    .zip(&want[r0 * n..r1 * n])
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{m}x{k}x{n} rows {r0}..{r1}");
            }
        }
    }

    #[test]
    fn f64_forms_for_big_b_match_naive_triple_loop() {
        // b of F64_WIDE_GROUPS_FROM bytes and more (big heads: groups of 8 rows in the
        // AVX-512 compilations, and 9 to 12 rows as one group; once a tiled path of its
        // own): m leaves every remainder 0..=7 of a group of 8, and odd k and n leave
        // partial register blocks on every side. Naive: per element, c = 0; c = c + a*b
        // over k ascending.
        let mut rng = Rng(7);
        for (m, k, n) in [
            (10, 300, 451),
            (19, 37, 3600),
            (1, 512, 257),
            (9, 2, 66_000),
            (8, 290, 457),
            (11, 290, 457),
            (12, 290, 457),
            (13, 290, 457),
            (14, 290, 457),
            (15, 290, 457),
        ] {
            assert!(k * n * 8 >= F64_WIDE_GROUPS_FROM);
            // matmul_nt_f64 takes its panels here (assert_f64_forms checks it too).
            assert!(nt_panel_width(m, k, n, 8).is_some());
            check_f64_shape(&mut rng, m, k, n);
        }
    }

    /// Error of the pass schemes against the exact dot product, for inputs in
    /// the normal range (here |x| in [2^-8, 2^6] or 0, so no product or
    /// partial sum underflows). With S = Σ|a_k b_k| and u = 2^-24:
    ///
    /// - Representation. 3x: a = hi + lo + d with |lo| <= 2^-7|a|,
    ///   |d| <= 2^-15|a| (round.rs); the missing part of a·b is
    ///   with A = hi_a + lo_a, ab = A·B + A·d_b + d_a·b and A·B lacks only
    ///   lo_a·lo_b, so the missing part is at most
    ///   (2^-14 + 2^-15(1 + 2^-15) + 2^-15)|ab| <= (2^-13 + 2^-29)|ab|.
    ///   6x: a = hi + mid + lo exactly, |mid| <= 2^-7|a|, |lo| <= 2^-15|a|;
    ///   missing mid·lo + lo·mid + lo·lo <= (2^-21 + 2^-30)|ab|.
    ///   1x (bf16 RNE, relative error <= 2^-8 per input):
    ///   <= (2^-7 + 2^-16)|ab|.
    /// - Accumulation. Every term is summed by a binary tree (chains, pairwise
    ///   trees and block combination alike) of depth <= K - 1 with one rounding
    ///   per node (fma included), then T terms are folded with T - 1 more
    ///   roundings: error <= γ_{K+T} Σ_t Σ_k |p_tk|, γ_n = nu/(1 - nu). The
    ///   term products sum to at most (1 + 2^-5) S, and γ_{K+T} <= 1.0001 (K+T) u
    ///   for K + T < 2^10; we use 2 (K + T) u, which covers both factors.
    /// - The f64 reference sums exact products with error <= K 2^-53 S, covered
    ///   by the slack above.
    #[test]
    fn pass_schemes_error_within_derived_bounds() {
        let mut rng = Rng(7);
        let mut s = MatmulScratch::default();
        let u = 2f64.powi(-24);
        let mut worst = [0f64; 3];
        for trial in 0..400 {
            let k = if trial % 4 == 0 {
                1 + rng.below(400)
            } else {
                1 + rng.below(8)
            };
            let gen = |rng: &mut Rng| loop {
                let x = rng.val();
                if x == 0.0 || x.abs() >= 2f32.powi(-8) {
                    break x;
                }
            };
            let a: Vec<f32> = (0..k).map(|_| gen(&mut rng)).collect();
            let b: Vec<f32> = (0..k).map(|_| gen(&mut rng)).collect();
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let sabs: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (*x as f64 * *y as f64).abs())
                .sum();
            let split = [KSplit::Single, KSplit::Mkl, KSplit::Chunks(3)][rng.below(3)];
            let accum = [Accum::Fma, Accum::MulAdd, Accum::Pairwise][rng.below(3)];
            let kf = k as f64;
            let cases = [
                (
                    Passes::Bf16x1,
                    2f64.powi(-7) + 2f64.powi(-16) + 2.0 * (kf + 1.0) * u,
                ),
                (
                    Passes::Bf16x3,
                    2f64.powi(-13) + 2f64.powi(-29) + 2.0 * (kf + 3.0) * u,
                ),
                (
                    Passes::Bf16x6,
                    2f64.powi(-21) + 2f64.powi(-30) + 2.0 * (kf + 6.0) * u,
                ),
            ];
            for (idx, (passes, rel)) in cases.into_iter().enumerate() {
                let model = MatmulModel {
                    split,
                    accum,
                    passes,
                };
                let mut c = [0.0f32];
                model.matmul(&a, &b, &mut c, 1, k, 1, &mut s);
                let err = (c[0] as f64 - exact).abs();
                assert!(
                    err <= rel * sabs,
                    "{model:?} k={k}: err {err:e} > {:e}",
                    rel * sabs
                );
                if sabs > 0.0 {
                    worst[idx] = worst[idx].max(err / sabs);
                }
            }
        }
        // Sanity: the schemes are ordered as expected, and 1x really exceeds the
        // 3x representation bound somewhere (so the 3x check has teeth).
        assert!(worst[0] > 2f64.powi(-13), "{worst:?}");
        assert!(worst[1] > worst[2], "{worst:?}");
    }
}
