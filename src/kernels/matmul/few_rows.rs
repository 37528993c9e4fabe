//! `x·Wᵀ` (`nt`) with at most [`FEW_ROWS`] rows and a big `W`, on AVX-512F: the rows of `x`
//! are the sixteen lanes of one register, and every row of `W` is read once, in order, each
//! element broadcast, instead of transposing `W` first (a pass that reads and writes all of
//! it). Each element of the product is the chain the model's kernel computes (f32: per K
//! block `t = +0; t = fma(a, b, t)` or `t = t + fl(a·b)`, blocks added left to right; f64:
//! `c = +0; c = c + fl(a·b)`), so the bits are the transposing path's.

use super::{grown, Accum, KSplit, Mat, MatMut, MatmulModel, Passes};
use crate::kernels::isa::Isa;

/// Most rows of `a` for which `x·Wᵀ` runs [`nt_few_rows_avx512`]: one 512-bit register of
/// f32 holds a column of them.
pub(super) const FEW_ROWS: usize = 16;
/// Bytes of `b` from which `x·Wᵀ` with few rows runs [`nt_few_rows_avx512`] instead of
/// transposing `b` (a full pass over it, written and read again, for each product).
pub(super) const FEW_ROWS_NT_FROM: usize = 64 << 10;

/// Whether [`MatmulModel::matmul_nt`] of this shape takes [`nt_few_rows_avx512`] on `isa`:
/// AVX-512F, plain f32 inputs, a chain accumulation (FMA or multiply-add), at most
/// [`FEW_ROWS`] rows and a `b` of [`FEW_ROWS_NT_FROM`] bytes or more.
pub(super) fn few_rows_nt_runs(
    model: &MatmulModel,
    m: usize,
    k: usize,
    n: usize,
    isa: Isa,
) -> bool {
    model.passes == Passes::F32
        && model.accum != Accum::Pairwise
        && (1..=FEW_ROWS).contains(&m)
        && n.saturating_mul(k).saturating_mul(4) >= FEW_ROWS_NT_FROM
        && isa.avx512()
}

/// Whether [`matmul_nt_f64`](super::matmul_nt_f64) and
/// [`matmul_nt_abs_f64`](super::matmul_nt_abs_f64) of this shape take
/// [`nt_few_rows_f64_avx512`] on `isa`: AVX-512F, at most [`FEW_ROWS`] rows and a `b` of
/// [`FEW_ROWS_NT_F64_FROM`] bytes or more.
pub(super) fn few_rows_nt_f64_runs(m: usize, k: usize, n: usize, isa: Isa) -> bool {
    (1..=FEW_ROWS).contains(&m)
        && n.saturating_mul(k).saturating_mul(8) >= FEW_ROWS_NT_F64_FROM
        && isa.avx512()
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
pub(super) unsafe fn nt_few_rows_avx512<const FMA: bool>(
    a: Mat<'_, f32>,
    b: Mat<'_, f32>,
    c: &mut [f32],
    split: KSplit,
    at: &mut Vec<f32>,
    ct: &mut Vec<f32>,
) {
    let (m, k, n, ldb) = (a.rows, a.cols, b.rows, b.rs);
    debug_assert!(a.is_row_major() && b.cols == k && b.cs == 1);
    let (a, b) = (a.data, b.data);
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
pub(super) const FEW_ROWS_NT_F64_FROM: usize = 64 << 10;

/// `matmul_nt_f64` into `c` (when `PLAIN`) and the same of |a| and |b| into `cabs` (when
/// `ABS`; `matmul_nt_abs_f64`) for 1 ≤ m ≤ [`FEW_ROWS`], from one read of `b`. Each element
/// is the sum `matmul_f64` computes on the transposed `b`, in its own accumulator:
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
pub(super) unsafe fn nt_few_rows_f64_avx512<const PLAIN: bool, const ABS: bool>(
    a: Mat<'_, f64>,
    b: Mat<'_, f64>,
    c: &mut [f64],
    cabs: &mut [f64],
    scratch: &mut Vec<f64>,
) {
    let (m, k, n) = (a.rows, a.cols, b.rows);
    debug_assert!(a.is_row_major() && b.is_row_major() && b.cols == k);
    let (a, b) = (a.data, b.data);
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

/// [`matmul_nt_f64`](super::matmul_nt_f64) into `c` and
/// [`matmul_nt_abs_f64`](super::matmul_nt_abs_f64) into `cabs` from one read of `b` (n × k),
/// bit for bit each, and true, where both take the few-rows kernel on `isa` (few rows, a big
/// `b`, AVX-512F); false, with nothing written, elsewhere.
///
/// Panics unless the shapes agree and `a` and `b` are row-major.
pub fn matmul_nt_and_abs_f64(
    a: Mat<'_, f64>,
    b: Mat<'_, f64>,
    c: MatMut<'_, f64>,
    cabs: MatMut<'_, f64>,
    scratch: &mut Vec<f64>,
    isa: Isa,
) -> bool {
    let (m, k, n) = super::shapes("matmul_nt_and_abs_f64", &a, &b.t(), &c);
    super::shapes("matmul_nt_and_abs_f64", &a, &b.t(), &cabs);
    a.row_major("matmul_nt_and_abs_f64");
    b.row_major("matmul_nt_and_abs_f64");
    #[cfg(target_arch = "x86_64")]
    if few_rows_nt_f64_runs(m, k, n, isa) {
        // SAFETY: the `Isa` reaches AVX-512F (few_rows_nt_f64_runs); the shapes were checked.
        unsafe { nt_few_rows_f64_avx512::<true, true>(a, b, c.data, cabs.data, scratch) };
        return true;
    }
    let _ = (m, k, n, c, cabs, scratch, isa);
    false
}
