//! Tensor parallelism: the row-parallel and the column-parallel linear layers (their shard
//! sizes are [`crate::scenario::shard`]'s).

use ndarray::{ArrayView2, ArrayViewMut2};
use std::ops::Range;

use crate::kernels::round::bf16_rne;
use crate::ops::backend::Backend;
use crate::ops::real::Real;
use crate::scenario::mutant::TpFaults;
pub use crate::scenario::shard::{shard_ranges, shard_size};

/// `buf` (at least `rows × cols` long) as a `rows × cols` row-major matrix view.
fn matrix<R>(buf: &[R], rows: usize, cols: usize) -> ArrayView2<'_, R> {
    ArrayView2::from_shape((rows, cols), &buf[..rows * cols]).expect("a rows × cols buffer")
}

/// `buf` (at least `rows × cols` long) as a writable `rows × cols` row-major matrix view.
fn matrix_mut<R>(buf: &mut [R], rows: usize, cols: usize) -> ArrayViewMut2<'_, R> {
    ArrayViewMut2::from_shape((rows, cols), &mut buf[..rows * cols]).expect("a rows × cols buffer")
}

/// Copies columns `cols` of the `rows × width` matrix `src` into `dst` (`rows × cols.len()`):
/// a rank's shard of the last dimension (a copy, no arithmetic).
pub fn gather_columns<R: Real>(
    src: &[R],
    rows: usize,
    width: usize,
    cols: Range<usize>,
    dst: &mut [R],
) {
    let w = cols.len();
    if w == 0 {
        return;
    }
    // Row by row, one contiguous copy each (an `assign` of the strided column view went
    // element by element: 8 % of a V = 32,000 run).
    let src = matrix(src, rows, width);
    for (mut d, s) in matrix_mut(dst, rows, w)
        .rows_mut()
        .into_iter()
        .zip(src.rows())
    {
        let s = &row(&s)[cols.clone()];
        row_mut(&mut d).copy_from_slice(s);
    }
}

/// A row of a row-major matrix view as a slice.
fn row<'a, R>(r: &'a ndarray::ArrayView1<'_, R>) -> &'a [R] {
    r.as_slice()
        .expect("a row of a row-major matrix is contiguous")
}

/// A row of a writable row-major matrix view as a slice.
fn row_mut<'a, R>(r: &'a mut ndarray::ArrayViewMut1<'_, R>) -> &'a mut [R] {
    r.as_slice_mut()
        .expect("a row of a row-major matrix is contiguous")
}

/// Writes `src` (`rows × cols.len()`) into columns `cols` of the `rows × width` matrix `dst`
/// (an all-gather along the last dimension: a copy, no arithmetic).
pub fn scatter_columns<R: Real>(
    src: &[R],
    rows: usize,
    width: usize,
    cols: Range<usize>,
    dst: &mut [R],
) {
    let w = cols.len();
    if w == 0 {
        return;
    }
    let src = matrix(src, rows, w);
    for (mut d, s) in matrix_mut(dst, rows, width)
        .rows_mut()
        .into_iter()
        .zip(src.rows())
    {
        row_mut(&mut d)[cols.clone()].copy_from_slice(row(&s));
    }
}

/// Reusable buffers of [`row_parallel_forward`] and [`row_parallel_backward`].
#[derive(Debug, Default, Clone)]
pub struct RowParallelBuffers<R> {
    x_shard: Vec<R>,
    w_shard: Vec<R>,
    partials: Vec<R>,
    g_shard: Vec<R>,
}

fn grow<R: Real>(v: &mut Vec<R>, len: usize) {
    if v.len() < len {
        v.resize(len, R::ZERO);
    }
}

/// The weight columns rank `r` uses: its own shard, or with the `shifted_weights` fault the
/// shard moved left by one for every rank after the first.
fn weight_cols(cols: &Range<usize>, r: usize, faults: TpFaults) -> Range<usize> {
    if faults.shifted_weights && r > 0 && cols.start > 0 {
        cols.start - 1..cols.end - 1
    } else {
        cols.clone()
    }
}

/// Whether `shards` are consecutive ranges from 0 to `k` (empty ones allowed): every column
/// belongs to exactly one rank.
fn tiles(shards: &[Range<usize>], k: usize) -> bool {
    let mut end = 0;
    for s in shards {
        if s.start != end || s.end < s.start {
            return false;
        }
        end = s.end;
    }
    end == k
}

/// Row-parallel linear forward, `y = x · Wᵀ` with the input dimension `k` split over ranks
/// (`shards`): rank r computes the partial `x[:, s_r] · W[:, s_r]ᵀ` with the backend's matmul
/// (a reduction of length |s_r|; the weight's columns read in place where the backend can,
/// [`Backend::matmul_nt_cols`]), then the partials are summed by the backend's all-reduce
/// in its order. An empty shard contributes a zero partial. With one shard this is exactly
/// the unsharded `x · Wᵀ`. `x` is `m × k`, `w` is `n × k`, `y` is `m × n`. Bias, if any, is
/// added by the caller after the all-reduce. `faults` injects a mutant's bug (see
/// [`TpFaults`]); `TpFaults::default()` is the correct layer.
#[allow(clippy::too_many_arguments)]
pub fn row_parallel_forward<B: Backend>(
    be: &mut B,
    x: &[B::R],
    w: &[B::R],
    y: &mut [B::R],
    m: usize,
    k: usize,
    n: usize,
    shards: &[Range<usize>],
    faults: TpFaults,
    buf: &mut RowParallelBuffers<B::R>,
) {
    if shards.len() == 1 {
        be.matmul_nt(x, w, y, m, k, n);
        return;
    }
    let tp = shards.len();
    grow(&mut buf.partials, tp * m * n);
    for (r, cols) in shards.iter().enumerate() {
        let part = &mut buf.partials[r * m * n..(r + 1) * m * n];
        let ks = cols.len();
        if ks == 0 {
            part.fill(B::R::ZERO);
            continue;
        }
        grow(&mut buf.x_shard, m * ks);
        gather_columns(x, m, k, cols.clone(), &mut buf.x_shard[..m * ks]);
        let wc = weight_cols(cols, r, faults);
        // The weight's columns in place where the backend reads them so (the same product).
        if be.matmul_nt_cols(&buf.x_shard[..m * ks], w, k, wc.clone(), part, m, n) {
            continue;
        }
        grow(&mut buf.w_shard, n * ks);
        gather_columns(w, n, k, wc, &mut buf.w_shard[..n * ks]);
        be.matmul_nt(
            &buf.x_shard[..m * ks],
            &buf.w_shard[..n * ks],
            part,
            m,
            ks,
            n,
        );
    }
    if faults.bf16_inputs {
        for v in &mut buf.partials[..tp * m * n] {
            *v = B::R::from_f64(bf16_rne(v.to_f64() as f32) as f64);
        }
    }
    if faults.no_allreduce {
        y.copy_from_slice(&buf.partials[..m * n]);
    } else {
        be.all_reduce(&buf.partials[..tp * m * n], tp, y);
    }
}

/// Row-parallel linear backward for `y = x · Wᵀ` given `dy` (`m × n`):
/// - `dw` (`n × k`): rank r computes its shard `dyᵀ · x[:, s_r]` (a reduction over the m
///   rows), written into its columns;
/// - `dx` (`m × k`): rank r computes `dy · W[:, s_r]` (a reduction over the n outputs), and
///   the shards are all-gathered (copied) into `dx`.
///
/// The input gradient needs no all-reduce: each rank's slice is complete. When the shards
/// tile 0..k, no fault moves or drops a shard and the backend's products are column by
/// column ([`Backend::columns_independent`]), the ranks' shards are computed as the two
/// whole products `dyᵀ · x` and `dy · W`: the same elements, bit for bit, without copying
/// the weight's columns out and the results back. Either output may be skipped with
/// `None`. With the `shifted_weights` fault, each rank's gradient lands on
/// (and its input gradient reads) its shifted columns; with `no_input_grad_gather`, only
/// rank 0's slice of `dx` is filled and the rest is zero.
#[allow(clippy::too_many_arguments)]
pub fn row_parallel_backward<B: Backend>(
    be: &mut B,
    x: &[B::R],
    w: &[B::R],
    dy: &[B::R],
    dw: Option<&mut [B::R]>,
    dx: Option<&mut [B::R]>,
    m: usize,
    k: usize,
    n: usize,
    shards: &[Range<usize>],
    faults: TpFaults,
    buf: &mut RowParallelBuffers<B::R>,
) {
    // One shard; or shards that tile 0..k in order, unshifted, every one gathered, on a
    // backend whose products are column by column (`columns_independent`): each rank's
    // `dyᵀ · x[:, s_r]` and `dy · W[:, s_r]` are then columns s_r of the whole products,
    // bit for bit, and the gathers and scatters only move them into place.
    let whole = shards.len() == 1
        || (!faults.shifted_weights
            && !faults.no_input_grad_gather
            && tiles(shards, k)
            && be.columns_independent());
    if whole {
        if let Some(dw) = dw {
            be.matmul_tn(dy, x, dw, n, m, k);
        }
        if let Some(dx) = dx {
            be.matmul(dy, w, dx, m, n, k);
        }
        return;
    }
    if let Some(dw) = dw {
        if faults.shifted_weights {
            // Shifted shards leave the last column unwritten; it must not keep stale values.
            dw.fill(B::R::ZERO);
        }
        for (r, cols) in shards.iter().enumerate() {
            let ks = cols.len();
            if ks == 0 {
                continue;
            }
            grow(&mut buf.x_shard, m * ks);
            grow(&mut buf.g_shard, n * ks);
            gather_columns(x, m, k, cols.clone(), &mut buf.x_shard[..m * ks]);
            be.matmul_tn(
                dy,
                &buf.x_shard[..m * ks],
                &mut buf.g_shard[..n * ks],
                n,
                m,
                ks,
            );
            scatter_columns(
                &buf.g_shard[..n * ks],
                n,
                k,
                weight_cols(cols, r, faults),
                dw,
            );
        }
    }
    if let Some(dx) = dx {
        if faults.no_input_grad_gather {
            dx.fill(B::R::ZERO);
        }
        for (r, cols) in shards.iter().enumerate() {
            let ks = cols.len();
            if ks == 0 || (faults.no_input_grad_gather && r > 0) {
                continue;
            }
            grow(&mut buf.w_shard, n * ks);
            grow(&mut buf.g_shard, m * ks);
            gather_columns(
                w,
                n,
                k,
                weight_cols(cols, r, faults),
                &mut buf.w_shard[..n * ks],
            );
            be.matmul(
                dy,
                &buf.w_shard[..n * ks],
                &mut buf.g_shard[..m * ks],
                m,
                n,
                ks,
            );
            scatter_columns(&buf.g_shard[..m * ks], m, k, cols.clone(), dx);
        }
    }
}

/// Column-parallel linear forward (Megatron `ColumnParallelLinear`, DeepSpeed `LinearLayer`),
/// `y = x · Wᵀ + b` with the output features `n` split over ranks (`shards`): rank r computes
/// `x · W[s_r, :]ᵀ` with the backend's matmul (its rows of W are contiguous), then adds its
/// bias slice `y_r[t][o] = y_r[t][o] + b[s_r][o]` with one rounding (`output + bias` after the
/// matmul, as both frameworks write it), and its block lands in columns `s_r` of `y` (the
/// gathered view; an all-gather is a copy). With one shard the caller uses the plain linear
/// layer instead (torch's `addmm` for an unsharded `nn.Linear`). `x` is `m × k`, `w` is
/// `n × k`, `y` is `m × n`.
#[allow(clippy::too_many_arguments)]
pub fn column_parallel_forward<B: Backend>(
    be: &mut B,
    x: &[B::R],
    w: &[B::R],
    bias: Option<&[B::R]>,
    y: &mut [B::R],
    m: usize,
    k: usize,
    n: usize,
    shards: &[Range<usize>],
    buf: &mut RowParallelBuffers<B::R>,
) {
    for rows in shards {
        let ns = rows.len();
        if ns == 0 {
            continue;
        }
        grow(&mut buf.g_shard, m * ns);
        let part = &mut buf.g_shard[..m * ns];
        be.matmul_nt(x, &w[rows.start * k..rows.end * k], part, m, k, ns);
        if let Some(b) = bias {
            for row in part.chunks_exact_mut(ns) {
                for (v, &bb) in row.iter_mut().zip(&b[rows.clone()]) {
                    *v = *v + bb;
                }
            }
        }
        scatter_columns(part, m, n, rows.clone(), y);
    }
}

/// Column-parallel linear backward for `y = x · Wᵀ (+ b)` given `dy` (`m × n`, the gathered
/// view), rank r working on its columns `dy_r = dy[:, s_r]`:
/// - `dw` rows `s_r` = `dy_rᵀ · x` (a reduction over the m rows);
/// - `db[s_r]` = column sums of `dy_r` ([`crate::ops::layers::column_sums`]);
/// - `dx` = the backend's all-reduce over ranks of `dy_r · W[s_r, :]` (each a reduction over
///   `|s_r|` outputs): the column-parallel input-gradient all-reduce.
///
/// `no_allreduce` keeps rank 0's partial (the missing-allreduce mutant); `bf16_inputs`
/// rounds the partials to bf16 before the all-reduce.
#[allow(clippy::too_many_arguments)]
pub fn column_parallel_backward<B: Backend>(
    be: &mut B,
    x: &[B::R],
    w: &[B::R],
    dy: &[B::R],
    dw: Option<&mut [B::R]>,
    db: Option<&mut [B::R]>,
    dx: Option<&mut [B::R]>,
    m: usize,
    k: usize,
    n: usize,
    shards: &[Range<usize>],
    faults: TpFaults,
    buf: &mut RowParallelBuffers<B::R>,
) {
    let tp = shards.len();
    let (mut dw, mut db) = (dw, db);
    let want_dx = dx.is_some();
    if want_dx {
        grow(&mut buf.partials, tp * m * k);
    }
    for (r, rows) in shards.iter().enumerate() {
        let ns = rows.len();
        if ns == 0 {
            if want_dx {
                buf.partials[r * m * k..(r + 1) * m * k].fill(B::R::ZERO);
            }
            continue;
        }
        grow(&mut buf.g_shard, m * ns);
        gather_columns(dy, m, n, rows.clone(), &mut buf.g_shard[..m * ns]);
        let dyr = &buf.g_shard[..m * ns];
        if let Some(dw) = dw.as_deref_mut() {
            be.matmul_tn(dyr, x, &mut dw[rows.start * k..rows.end * k], ns, m, k);
        }
        if let Some(db) = db.as_deref_mut() {
            <B::R as Real>::column_sums(dyr, ns, &mut db[rows.clone()]);
        }
        if want_dx {
            be.matmul(
                dyr,
                &w[rows.start * k..rows.end * k],
                &mut buf.partials[r * m * k..(r + 1) * m * k],
                m,
                ns,
                k,
            );
        }
    }
    if let Some(dx) = dx {
        let parts = &mut buf.partials[..tp * m * k];
        if faults.bf16_inputs {
            for v in parts.iter_mut() {
                *v = B::R::from_f64(bf16_rne(v.to_f64() as f32) as f64);
            }
        }
        if faults.no_allreduce {
            dx.copy_from_slice(&parts[..m * k]);
        } else {
            be.all_reduce(parts, tp, dx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_follow_deepspeed_near_even_rule() {
        assert_eq!(shard_ranges(35, 2, 1), vec![0..18, 18..35]);
        assert_eq!(shard_ranges(32, 2, 1), vec![0..16, 16..32]);
        assert_eq!(shard_ranges(35, 4, 1), vec![0..9, 9..18, 18..27, 27..35]);
        // More ranks than columns: the tail ranks hold empty shards.
        let r = shard_ranges(3, 5, 1);
        assert_eq!(r, vec![0..1, 1..2, 2..3, 3..3, 3..3]);
        // Grain 64 on 200 columns over 2 ranks: 3 grains -> 128 + 64, remainder 8 to the last.
        assert_eq!(shard_ranges(200, 2, 64), vec![0..128, 128..200]);
    }

    #[test]
    fn shards_cover_the_dimension_for_every_tp_degree_up_to_64() {
        for total in [1, 17, 32, 35, 100, 4096] {
            for tp in 1..=64 {
                let r = shard_ranges(total, tp, 1);
                assert_eq!(r.len(), tp);
                assert_eq!(r.last().unwrap().end, total, "total {total} tp {tp}");
            }
        }
    }

    #[test]
    fn column_parallel_output_and_weight_grads_equal_the_unsharded_layer() {
        // Splitting the output features changes no reduction: every output element and every
        // weight-gradient row is the same dot product, so the f64 results are bit-identical;
        // the input gradient is a sum of per-rank partials (rank order in f64), which only
        // regroups the reduction over the outputs, so it agrees to f64 rounding (1e-12 on
        // O(1) values of 7 terms).
        use crate::ops::backend::{Backend, F64Backend};
        let (m, k, n) = (2, 3, 7);
        let x: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let w: Vec<f64> = (0..n * k).map(|i| (i as f64 * 0.91).cos()).collect();
        let b: Vec<f64> = (0..n).map(|i| i as f64 * 0.1).collect();
        let dy: Vec<f64> = (0..m * n).map(|i| (i as f64 * 0.53).sin()).collect();
        let mut be = F64Backend::default();
        let mut y1 = vec![0.0; m * n];
        crate::ops::layers::linear(&mut be, &x, &w, Some(&b), &mut y1, m, k, n);
        let shards = shard_ranges(n, 3, 1);
        let mut buf = RowParallelBuffers::default();
        let mut y2 = vec![0.0; m * n];
        column_parallel_forward(
            &mut be,
            &x,
            &w,
            Some(&b),
            &mut y2,
            m,
            k,
            n,
            &shards,
            &mut buf,
        );
        assert_eq!(y1, y2);
        let (mut dw1, mut dx1) = (vec![0.0; n * k], vec![0.0; m * k]);
        be.matmul_tn(&dy, &x, &mut dw1, n, m, k);
        be.matmul(&dy, &w, &mut dx1, m, n, k);
        let (mut dw2, mut db2, mut dx2) = (vec![0.0; n * k], vec![0.0; n], vec![0.0; m * k]);
        column_parallel_backward(
            &mut be,
            &x,
            &w,
            &dy,
            Some(&mut dw2),
            Some(&mut db2),
            Some(&mut dx2),
            m,
            k,
            n,
            &shards,
            TpFaults::default(),
            &mut buf,
        );
        assert_eq!(dw1, dw2);
        for (a, b) in dx1.iter().zip(&dx2) {
            assert!((a - b).abs() < 1e-12);
        }
        let mut db1 = vec![0.0; n];
        crate::ops::layers::column_sums(&dy, n, &mut db1);
        assert_eq!(db1, db2);
    }

    /// A row-parallel layer's x, W and dy.
    type Operands<'a, R> = (&'a [R], &'a [R], &'a [R]);
    /// Its output, weight gradient and input gradient.
    type Products<R> = (Vec<R>, Vec<R>, Vec<R>);

    /// Rank by rank, as the ranks compute it (each its own column shard, gathered into its
    /// own matrices, then scattered): the definition the whole-product path of
    /// `row_parallel_backward` and the in-place path of `row_parallel_forward` must equal.
    fn rank_by_rank<B: Backend>(
        be: &mut B,
        (x, w, dy): Operands<'_, B::R>,
        (m, k, n): (usize, usize, usize),
        shards: &[Range<usize>],
    ) -> Products<B::R> {
        let zero = B::R::from_f64(0.0);
        let (mut parts, mut dw, mut dx) = (
            vec![zero; shards.len() * m * n],
            vec![zero; n * k],
            vec![zero; m * k],
        );
        for (r, cols) in shards.iter().enumerate() {
            let ks = cols.len();
            let (mut xs, mut ws) = (vec![zero; m * ks], vec![zero; n * ks]);
            gather_columns(x, m, k, cols.clone(), &mut xs);
            gather_columns(w, n, k, cols.clone(), &mut ws);
            if ks > 0 {
                be.matmul_nt(&xs, &ws, &mut parts[r * m * n..(r + 1) * m * n], m, ks, n);
            }
            let mut g = vec![zero; n * ks];
            be.matmul_tn(dy, &xs, &mut g, n, m, ks);
            scatter_columns(&g, n, k, cols.clone(), &mut dw);
            let mut g = vec![zero; m * ks];
            be.matmul(dy, &ws, &mut g, m, n, ks);
            scatter_columns(&g, m, k, cols.clone(), &mut dx);
        }
        let mut y = vec![zero; m * n];
        be.all_reduce(&parts, shards.len(), &mut y);
        (y, dw, dx)
    }

    /// The layer as the computations run it: `row_parallel_forward` and
    /// `row_parallel_backward`, no fault.
    fn as_layer<B: Backend>(
        be: &mut B,
        (x, w, dy): Operands<'_, B::R>,
        (m, k, n): (usize, usize, usize),
        shards: &[Range<usize>],
    ) -> Products<B::R> {
        let zero = B::R::from_f64(0.0);
        let mut buf = RowParallelBuffers::default();
        let (mut y, mut dw, mut dx) = (vec![zero; m * n], vec![zero; n * k], vec![zero; m * k]);
        let f = TpFaults::default();
        row_parallel_forward(be, x, w, &mut y, m, k, n, shards, f, &mut buf);
        let (dwm, dxm) = (Some(&mut dw[..]), Some(&mut dx[..]));
        row_parallel_backward(be, x, w, dy, dwm, dxm, m, k, n, shards, f, &mut buf);
        (y, dw, dx)
    }

    /// `row_parallel_forward` (the weight's columns read in place where the backend can) and
    /// `row_parallel_backward` (whole products on a backend whose products are column by
    /// column) give, bit for bit, what the ranks compute with their own gathered shards:
    /// fp32 under chain, split-K, pairwise and bf16x3 profiles, on shapes that take the
    /// few-rows kernel and shapes that do not, even, uneven and partly empty shards; and
    /// float64. A profile with revealed orders (per shape of a whole product) is not column
    /// by column and takes the ranks' own products.
    #[test]
    fn row_parallel_equals_the_ranks_computing_their_own_shards() {
        use crate::kernels::matmul::MatmulScratch;
        use crate::ops::backend::{F32Backend, F64Backend};
        use crate::scenario::profile::ProfileRegistry;
        let registry = ProfileRegistry::builtin().unwrap();
        let value = |i: usize, s: f64| ((i as f64 * s).sin() * 1.7) as f32;
        // (m, k, n, ranks): 10 rows and a 64 KiB shard take the few-rows kernel.
        for (m, k, n, tp) in [
            (10, 64, 600, 2),
            (10, 35, 67, 2),
            (3, 19, 40, 3),
            (4, 3, 9, 5),
        ] {
            let x: Vec<f32> = (0..m * k).map(|i| value(i, 0.37)).collect();
            let w: Vec<f32> = (0..n * k).map(|i| value(i, 0.113)).collect();
            let dy: Vec<f32> = (0..m * n).map(|i| value(i, 0.71)).collect();
            let shards = shard_ranges(k, tp, 1);
            let shape = (m, k, n);
            for name in [
                "cpu-fma",
                "cpu-nofma",
                "splitk-4",
                "pairwise",
                "tpu-bf16x3",
                "cpu-fma+mkl-threads-2",
            ] {
                let profile = registry.resolve(name, "--profile").unwrap();
                let mut scratch = MatmulScratch::default();
                let mut be = F32Backend::new(&profile, &mut scratch);
                assert_eq!(be.columns_independent(), !name.contains("mkl"), "{name}");
                let want = rank_by_rank(&mut be, (&x, &w, &dy), shape, &shards);
                let got = as_layer(&mut be, (&x, &w, &dy), shape, &shards);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let what = format!("{name} {m}x{k}x{n} tp {tp}");
                assert_eq!(bits(&got.0), bits(&want.0), "forward {what}");
                assert_eq!(bits(&got.1), bits(&want.1), "weight gradient {what}");
                assert_eq!(bits(&got.2), bits(&want.2), "input gradient {what}");
            }
            let wide = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
            let (x, w, dy) = (wide(&x), wide(&w), wide(&dy));
            let mut be = F64Backend::default();
            let want = rank_by_rank(&mut be, (&x, &w, &dy), shape, &shards);
            let got = as_layer(&mut be, (&x, &w, &dy), shape, &shards);
            assert_eq!(got, want, "f64 {m}x{k}x{n} tp {tp}");
        }
    }

    /// `tiles` accepts exactly the consecutive ranges from 0 to k.
    #[test]
    fn tiles_checks_coverage() {
        assert!(tiles(&[0..3, 3..3, 3..7], 7));
        assert!(tiles(std::slice::from_ref(&(0..7)), 7));
        assert!(!tiles(&[0..3, 4..7], 7));
        assert!(!tiles(&[0..3, 3..6], 7));
        assert!(!tiles(&[1..3, 3..7], 7));
    }

    #[test]
    fn column_gather_and_scatter_round_trip() {
        let src: Vec<f64> = (0..12).map(f64::from).collect();
        let mut shard = vec![0.0; 6];
        gather_columns(&src, 3, 4, 1..3, &mut shard);
        assert_eq!(shard, vec![1.0, 2.0, 5.0, 6.0, 9.0, 10.0]);
        let mut back = vec![0.0; 12];
        scatter_columns(&shard, 3, 4, 1..3, &mut back);
        assert_eq!(back[1], 1.0);
        assert_eq!(back[10], 10.0);
        assert_eq!(back[0], 0.0);
    }
}
