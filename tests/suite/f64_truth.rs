//! The float64 truth is float64 throughout (issue 34, item 5): every op of the ground-truth
//! computation, run through its f64 path (the generic code at `R = f64`, the
//! [`F64Backend`]), against an independent float64 computation written here, and two whole
//! scenario files whose float64 traces are evaluated independently step by step.
//!
//! Two kinds of expectation:
//! - **bit for bit** where the op's doc states an order of operations that an independent
//!   loop can follow (the f64 matmuls, the collectives, embedding, residual add, tanh): any
//!   f32 constant or f32 round trip inside changes the bits;
//! - **within a stated bound** where the truth uses a framework's order (LayerNorm's Welford
//!   cascade, RMSNorm, cross-entropy) and the independent code the textbook formula: the bound
//!   is a reassociation bound of f64 (a sum of n terms in any order is within γ_n ≈ n·u of the
//!   exact sum relative to the sum of the terms' magnitudes, u = 2^-53; Higham, *Accuracy and
//!   Stability of Numerical Algorithms*, 2nd ed., §4.2), and every input is chosen so that an
//!   f32-rounded constant (eps, 1/N, ...) moves the result by orders of magnitude more than
//!   that bound; each test says by how much.
//!
//! Transcendentals on the independent side come from the pure-Rust `libm` crate, never the
//! platform's.

use std::ops::Range;

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::exec::trace::SlotRole;
use seedsweep::exec::GraphScenario;
use seedsweep::kernels::isa::{Isa, Level};
use seedsweep::ops::backend::{Backend, F64Backend};
use seedsweep::ops::layers::{
    column_sums, cross_entropy, embedding_backward, embedding_backward_add, embedding_lookup,
    linear, tanh_backward, tanh_inplace,
};
use seedsweep::ops::norm::{
    layer_norm, layer_norm_backward, residual_add, rms_norm, rms_norm_backward,
    sequence_parallel_norm_backward,
};
use seedsweep::ops::optim::OptState;
use seedsweep::ops::real::Real;
use seedsweep::ops::tp::{
    column_parallel_backward, column_parallel_forward, row_parallel_backward, row_parallel_forward,
    RowParallelBuffers,
};
use seedsweep::ops::vocab_parallel::{
    vocab_parallel_cross_entropy, vocab_parallel_embedding, VocabParallelBuffers,
};
use seedsweep::results::dump::role_name;
use seedsweep::rng::torch::TorchGenerator;
use seedsweep::scenario::ir::{NormKind, Optimizer};
use seedsweep::scenario::mutant::TpFaults;
use seedsweep::scenario::profile::{ProfileRegistry, XlaMode};

/// Unit roundoff of binary64.
const U: f64 = 1.0 / 9_007_199_254_740_992.0;

// ---------------------------------------------------------------------------------------
// inputs and comparisons
// ---------------------------------------------------------------------------------------

/// `n` values in [-scale, scale) with all 53 significand bits random (splitmix64 of `seed`):
/// almost none is an f32, so a round trip through f32 anywhere changes the result.
fn values(seed: u64, n: usize, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 11) as f64 / 9_007_199_254_740_992.0 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Every ISA level this CPU runs (the f64 kernels have one body per level).
fn isas() -> Vec<Isa> {
    Level::ALL.iter().filter_map(|&l| Isa::new(l)).collect()
}

fn assert_bits(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            a.to_bits() == b.to_bits(),
            "{what}[{i}]: {a:e} ({:#018x}) vs independent {b:e} ({:#018x})",
            a.to_bits(),
            b.to_bits()
        );
    }
}

/// `|got - want| <= tol(i)` everywhere; returns the largest `|got - want| / tol(i)`.
fn assert_within(got: &[f64], want: &[f64], tol: impl Fn(usize) -> f64, what: &str) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst: f64 = 0.0;
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let t = tol(i);
        let d = (a - b).abs();
        assert!(
            d <= t,
            "{what}[{i}]: {a:e} vs independent {b:e}: |diff| {d:e} > {t:e}"
        );
        worst = worst.max(d / t);
    }
    worst
}

/// `|got - want| > floor` somewhere: the comparison that must fail does.
fn differs(got: &[f64], want: &[f64], floor: impl Fn(usize) -> f64) -> bool {
    got.iter()
        .zip(want)
        .enumerate()
        .any(|(i, (a, b))| (a - b).abs() > floor(i))
}

/// Independent `c = a·b` (`a` m×k, `b` k×n): each element `+0`, then `c + a·b` over the
/// reduction index ascending, the product and the sum each rounded (Rust never fuses).
fn mm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for kk in 0..k {
                s += a[i * k + kk] * b[kk * n + j];
            }
            c[i * n + j] = s;
        }
    }
    c
}

/// `a` (r×c) transposed.
fn tr(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut t = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = a[i * c + j];
        }
    }
    t
}

fn abs(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| x.abs()).collect()
}

/// Columns `cols` of the r×c matrix `a`.
fn cols_of(a: &[f64], r: usize, c: usize, cols: Range<usize>) -> Vec<f64> {
    (0..r)
        .flat_map(|i| a[i * c + cols.start..i * c + cols.end].to_vec())
        .collect()
}

/// `parts` (rank-major, each `len` long) summed in rank order from rank 0's:
/// `((p0 + p1) + p2) + …`, what the float64 collectives are documented to compute.
fn rank_order_sum(parts: &[Vec<f64>]) -> Vec<f64> {
    let mut out = parts[0].clone();
    for p in &parts[1..] {
        for (o, x) in out.iter_mut().zip(p) {
            *o += x;
        }
    }
    out
}

/// Uneven shards of `n` over `tp` ranks (the first ones one larger), as DeepSpeed's rule.
fn shards(n: usize, tp: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for r in 0..tp {
        let len = n / tp + usize::from(r < n % tp);
        out.push(start..start + len);
        start += len;
    }
    out
}

// ---------------------------------------------------------------------------------------
// matmuls, linear layers, collectives: bit for bit
// ---------------------------------------------------------------------------------------

/// Every f64 product of the backend (the linear layer's forward, input and weight gradients,
/// the condition |x|·|W|ᵀ, the fused and the row-panel forms) on every ISA level, for shapes
/// that take the few-rows, the blocked and the ragged paths: bit for bit the written order
/// (`c = +0`, then `c + a·b` ascending; `float64.rs`'s doc), with full-precision operands.
#[test]
fn f64_matmuls_are_the_written_order_on_every_isa() {
    for isa in isas() {
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 7, 5),
            (3, 33, 17),
            (9, 16, 40),
            (12, 5, 64),
            (13, 19, 9),
            (24, 64, 33),
        ] {
            let what = format!("{isa:?} {m}x{k}x{n}");
            let mut be = F64Backend::with_isa(isa);
            let a = values(1 + m as u64, m * k, 2.0);
            let b = values(2 + n as u64, k * n, 1.5);
            let bt = tr(&b, k, n);
            let want = mm(&a, &b, m, k, n);
            let mut c = vec![f64::NAN; m * n];
            be.matmul(&a, &b, &mut c, m, k, n);
            assert_bits(&c, &want, &format!("{what} matmul"));
            c.fill(f64::NAN);
            be.matmul_nt(&a, &bt, &mut c, m, k, n);
            assert_bits(&c, &want, &format!("{what} matmul_nt"));
            let want_abs = mm(&abs(&a), &abs(&b), m, k, n);
            c.fill(f64::NAN);
            be.matmul_nt_abs(&a, &bt, &mut c, m, k, n);
            assert_bits(&c, &want_abs, &format!("{what} matmul_nt_abs"));
            let mut cabs = vec![f64::NAN; m * n];
            c.fill(f64::NAN);
            if be.matmul_nt_and_abs(&a, &bt, &mut c, &mut cabs, m, k, n) {
                assert_bits(&c, &want, &format!("{what} matmul_nt_and_abs"));
                assert_bits(&cabs, &want_abs, &format!("{what} matmul_nt_and_abs |.|"));
            }
            // aᵀ·b with a given k×m.
            let at = tr(&a, m, k);
            c.fill(f64::NAN);
            be.matmul_tn(&at, &b, &mut c, m, k, n);
            assert_bits(&c, &want, &format!("{what} matmul_tn"));
            for rows in [0..m, m / 2..m, 0..m.div_ceil(2)] {
                let mut part = vec![f64::NAN; rows.len() * n];
                assert!(be.matmul_tn_rows(&at, &b, &mut part, m, k, n, rows.clone()));
                assert_bits(
                    &part,
                    &want[rows.start * n..rows.end * n],
                    &format!("{what} matmul_tn_rows {rows:?}"),
                );
            }
            // The linear layer: x·Wᵀ, then + b per row (one rounding each).
            let bias = values(3, n, 0.5);
            let want_b: Vec<f64> = want
                .iter()
                .enumerate()
                .map(|(i, &v)| v + bias[i % n])
                .collect();
            c.fill(f64::NAN);
            linear(&mut be, &a, &bt, Some(&bias), &mut c, m, k, n);
            assert_bits(&c, &want_b, &format!("{what} linear with bias"));
            c.fill(f64::NAN);
            linear(&mut be, &a, &bt, None, &mut c, m, k, n);
            assert_bits(&c, &want, &format!("{what} linear"));
        }
    }
}

/// The float64 collectives: an all-reduce is the rank-order sum (the truth has no wire
/// dtype: the bf16 all-reduce of the f64 backend is the same sum, nothing rounded to bf16),
/// bit for bit.
#[test]
fn f64_collectives_sum_in_rank_order_without_rounding() {
    for tp in [1usize, 2, 3, 4, 7] {
        let len = 37;
        let parts: Vec<Vec<f64>> = (0..tp).map(|r| values(10 + r as u64, len, 3.0)).collect();
        let flat: Vec<f64> = parts.concat();
        let want = rank_order_sum(&parts);
        let mut be = F64Backend::default();
        let mut out = vec![f64::NAN; len];
        be.all_reduce(&flat, tp, &mut out);
        assert_bits(&out, &want, &format!("all_reduce tp {tp}"));
        out.fill(f64::NAN);
        be.all_reduce_bf16(&flat, tp, &mut out);
        assert_bits(&out, &want, &format!("all_reduce_bf16 tp {tp}"));
    }
}

/// Column- and row-parallel linear layers at TP 3 over uneven shards, forward and backward,
/// through the f64 backend: each rank's partial is the written-order product over its shard
/// and the partials are summed in rank order, bit for bit. (The truth itself runs unsharded;
/// this is the f64 path of the layers with their collectives.)
#[test]
fn f64_tensor_parallel_linear_layers_are_rank_partials_summed_in_rank_order() {
    let (m, k, n, tp) = (5usize, 10usize, 11usize, 3usize);
    let x = values(20, m * k, 1.0);
    let w = values(21, n * k, 0.7);
    let b = values(22, n, 0.3);
    let dy = values(23, m * n, 0.9);
    let mut be = F64Backend::default();
    let mut buf = RowParallelBuffers::default();
    // Column-parallel: the output features split.
    let sh = shards(n, tp);
    let mut y = vec![f64::NAN; m * n];
    column_parallel_forward(&mut be, &x, &w, Some(&b), &mut y, m, k, n, &sh, &mut buf);
    let want: Vec<f64> = mm(&x, &tr(&w, n, k), m, k, n)
        .iter()
        .enumerate()
        .map(|(i, &v)| v + b[i % n])
        .collect();
    assert_bits(&y, &want, "column-parallel forward");
    let (mut dw, mut db, mut dx) = (
        vec![f64::NAN; n * k],
        vec![f64::NAN; n],
        vec![f64::NAN; m * k],
    );
    column_parallel_backward(
        &mut be,
        &x,
        &w,
        &dy,
        Some(&mut dw),
        Some(&mut db),
        Some(&mut dx),
        m,
        k,
        n,
        &sh,
        TpFaults::default(),
        &mut buf,
    );
    assert_bits(&dw, &mm(&tr(&dy, m, n), &x, n, m, k), "column-parallel dW");
    let col_sums: Vec<f64> = (0..n)
        .map(|j| (1..m).fold(dy[j], |s, i| s + dy[i * n + j]))
        .collect();
    assert_bits(&db, &col_sums, "column-parallel db");
    let parts: Vec<Vec<f64>> = sh
        .iter()
        .map(|r| {
            let dyr = cols_of(&dy, m, n, r.clone());
            mm(&dyr, &w[r.start * k..r.end * k], m, r.len(), k)
        })
        .collect();
    assert_bits(&dx, &rank_order_sum(&parts), "column-parallel dx");
    // Row-parallel: the input features split; the bias after the all-reduce is the caller's.
    let sh = shards(k, tp);
    y.fill(f64::NAN);
    row_parallel_forward(
        &mut be,
        &x,
        &w,
        &mut y,
        m,
        k,
        n,
        &sh,
        TpFaults::default(),
        &mut buf,
    );
    let parts: Vec<Vec<f64>> = sh
        .iter()
        .map(|r| {
            let xr = cols_of(&x, m, k, r.clone());
            let wr = cols_of(&w, n, k, r.clone());
            mm(&xr, &tr(&wr, n, r.len()), m, r.len(), n)
        })
        .collect();
    assert_bits(&y, &rank_order_sum(&parts), "row-parallel forward");
    dw.fill(f64::NAN);
    dx.fill(f64::NAN);
    row_parallel_backward(
        &mut be,
        &x,
        &w,
        &dy,
        Some(&mut dw),
        Some(&mut dx),
        m,
        k,
        n,
        &sh,
        TpFaults::default(),
        &mut buf,
    );
    assert_bits(&dw, &mm(&tr(&dy, m, n), &x, n, m, k), "row-parallel dW");
    assert_bits(&dx, &mm(&dy, &w, m, n, k), "row-parallel dx");
    // The f64 bias gradient (`column_sums` at f64): rows in order from row 0.
    let mut cs = vec![f64::NAN; n];
    column_sums(&dy, n, &mut cs);
    assert_bits(&cs, &col_sums, "column_sums");
}

// ---------------------------------------------------------------------------------------
// embedding, residual add, tanh: bit for bit
// ---------------------------------------------------------------------------------------

/// Embedding forward (a copy), backward (each row the sum of its tokens' gradients in token
/// order from +0, the padding row skipped), the in-place second contribution, the
/// vocab-parallel embedding at TP 3 (each element one looked-up value plus zeros in rank
/// order), and the residual add: bit for bit.
#[test]
fn f64_embedding_and_residual_add_are_exact() {
    let (rows, dim) = (10usize, 6usize);
    let table = values(30, rows * dim, 1.0);
    let ids: Vec<i64> = vec![3, 0, 9, 3, 7, 3, 1, 9];
    let t = ids.len();
    let mut out = vec![f64::NAN; t * dim];
    embedding_lookup(&table, dim, &ids, &mut out);
    let want: Vec<f64> = ids
        .iter()
        .flat_map(|&id| table[id as usize * dim..(id as usize + 1) * dim].to_vec())
        .collect();
    assert_bits(&out, &want, "embedding lookup");
    let mut be = F64Backend::default();
    let mut vp = VocabParallelBuffers::default();
    for tp in [1usize, 3] {
        out.fill(f64::NAN);
        vocab_parallel_embedding(
            &mut be,
            &table,
            dim,
            &ids,
            &shards(rows, tp),
            &mut out,
            &mut vp,
        );
        assert_bits(&out, &want, &format!("vocab-parallel embedding tp {tp}"));
    }
    let dx = values(31, t * dim, 0.8);
    for padding in [None, Some(3i64)] {
        let mut want = vec![0.0; rows * dim];
        for (tok, &id) in ids.iter().enumerate() {
            if Some(id) == padding {
                continue;
            }
            for j in 0..dim {
                want[id as usize * dim + j] += dx[tok * dim + j];
            }
        }
        let mut g = vec![f64::NAN; rows * dim];
        embedding_backward(&dx, dim, &ids, padding, &mut g);
        assert_bits(
            &g,
            &want,
            &format!("embedding backward, padding {padding:?}"),
        );
        let prior = values(32, rows * dim, 0.4);
        let mut g = prior.clone();
        let (mut row, mut named) = (Vec::new(), Vec::new());
        embedding_backward_add(&dx, dim, &ids, padding, &mut g, &mut row, &mut named);
        let sum: Vec<f64> = prior.iter().zip(&want).map(|(a, b)| a + b).collect();
        assert_bits(
            &g,
            &sum,
            &format!("embedding backward add, padding {padding:?}"),
        );
    }
    let (a, b) = (values(33, 50, 2.0), values(34, 50, 0.01));
    let mut o = vec![f64::NAN; 50];
    residual_add(&a, &b, &mut o);
    let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_bits(&o, &want, "residual add");
}

/// tanh forward is `libm::tanh` of each element (the backend's f64 tanh and the XLA path's),
/// backward `dy·(1 − y·y)` rounded after the square, the difference and the product; and
/// f64 exp (which cross-entropy uses) is `libm::exp`: bit for bit, over arguments from 1e-300
/// to 40 of both signs (the vectorized ranges and the scalar tails alike).
#[test]
fn f64_tanh_and_exp_are_libm_bit_for_bit() {
    let mut x: Vec<f64> = values(40, 997, 5.0);
    x.extend([
        0.0, -0.0, 1e-300, -1e-300, 1e-9, 0.5, 19.0, 20.5, 22.0, -22.0, 40.0, -40.0, 710.0,
    ]);
    let want: Vec<f64> = x.iter().map(|&v| libm::tanh(v)).collect();
    let mut y = x.clone();
    F64Backend::default().tanh(&mut y);
    assert_bits(&y, &want, "backend tanh");
    let mut y2 = x.clone();
    tanh_inplace(&mut y2);
    assert_bits(&y2, &want, "tanh_inplace (XLA path)");
    let dy = values(41, x.len(), 1.3);
    let mut d = vec![f64::NAN; x.len()];
    tanh_backward(&dy, &y, &mut d);
    let want_d: Vec<f64> = dy
        .iter()
        .zip(&y)
        .map(|(&g, &h)| g * (1.0 - h * h))
        .collect();
    assert_bits(&d, &want_d, "tanh backward");
    let args: Vec<f64> = x.iter().map(|v| -v.abs() * 8.0).collect();
    let mut e = args.clone();
    <f64 as Real>::exp_slice(&mut e);
    let want_e: Vec<f64> = args.iter().map(|&v| libm::exp(v)).collect();
    assert_bits(&e, &want_e, "exp_slice");
}

// ---------------------------------------------------------------------------------------
// LayerNorm, RMSNorm: within a reassociation bound that an f32 eps exceeds
// ---------------------------------------------------------------------------------------

/// Rows for the norms: width `n`, rows of scale 1 and rows of scale 1e-3 (variance ~1e-6, of
/// the order of eps, where eps decides the result: LayerNorm's 1e-5 rounded to f32 is off by
/// 2.5e-14, which moves rstd by ~1e-9 relative there, 10^5 times the bounds below).
fn norm_rows(seed: u64, n: usize) -> Vec<f64> {
    let mut x = values(seed, n, 1.0);
    x.extend(values(seed + 1, n, 1e-3));
    // A row offset from zero by its own spread (mean and deviations of one order).
    x.extend(values(seed + 2, n, 1e-3).iter().map(|v| v + 7e-4));
    x
}

/// Textbook LayerNorm of one row in f64: two-pass mean and variance, `rstd = 1/sqrt(var +
/// eps)`; returns (xhat, rstd).
fn ln_row(x: &[f64], eps: f64) -> (Vec<f64>, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    (x.iter().map(|v| (v - mean) * rstd).collect(), rstd)
}

/// LayerNorm forward and backward (dx, dgamma, dbeta) at eps = 1e-5 given as the double, at
/// widths with and without a ragged tail and over several Welford chunks, against the
/// textbook formulas. Bounds (u = 2^-53), per element, both sides' distance from the exact
/// value: the mean and variance are sums of n terms (γ_n relative to Σ|terms|: the row's
/// deviations are of one order, so relative to the result) and a handful of further
/// operations: forward `4(n + 8)·u·(|xhat|·|γ| + |β|)`; dx `8(n + 8)·u·M` with M the sum of
/// the magnitudes of the backward formula's terms; dgamma/dbeta `4(rows + n + 8)·u` times the
/// sum of the magnitudes they add. An f32-rounded eps is then caught: checked below.
#[test]
fn f64_layer_norm_matches_the_textbook_formulas() {
    let eps = 1e-5;
    let mut worst: f64 = 0.0;
    for n in [5usize, 16, 35, 300] {
        let x = norm_rows(50 + n as u64, n);
        let rows = x.len() / n;
        let gamma: Vec<f64> = values(60, n, 0.5).iter().map(|v| v + 1.0).collect();
        let beta = values(61, n, 0.2);
        let dy = values(62, rows * n, 1.0);
        let mut y = vec![f64::NAN; rows * n];
        layer_norm(&x, Some(&gamma), Some(&beta), eps, n, &mut y);
        let (mut dx, mut dg, mut db) = (
            vec![f64::NAN; rows * n],
            vec![f64::NAN; n],
            vec![f64::NAN; n],
        );
        layer_norm_backward(
            &x,
            Some(&gamma),
            &dy,
            eps,
            n,
            Some(&mut dx),
            Some(&mut dg),
            Some(&mut db),
        );
        let (mut want_y, mut tol_y) = (vec![0.0; rows * n], vec![0.0; rows * n]);
        let (mut want_dx, mut tol_dx) = (vec![0.0; rows * n], vec![0.0; rows * n]);
        let (mut want_dg, mut mag_dg) = (vec![0.0; n], vec![0.0; n]);
        let (mut want_db, mut mag_db) = (vec![0.0; n], vec![0.0; n]);
        let nf = n as f64;
        let mut y_f32eps = vec![0.0; rows * n];
        for r in 0..rows {
            let xr = &x[r * n..(r + 1) * n];
            let dyr = &dy[r * n..(r + 1) * n];
            let (xh, rstd) = ln_row(xr, eps);
            let (xh32, _) = ln_row(xr, eps as f32 as f64);
            let g: Vec<f64> = (0..n).map(|j| dyr[j] * gamma[j]).collect();
            let mean_g = g.iter().sum::<f64>() / nf;
            let mean_gx = (0..n).map(|j| g[j] * xh[j]).sum::<f64>() / nf;
            let mag_g = g.iter().map(|v| v.abs()).sum::<f64>() / nf;
            let mag_gx = (0..n).map(|j| (g[j] * xh[j]).abs()).sum::<f64>() / nf;
            let mean = xr.iter().sum::<f64>() / nf;
            // ATen's ds = Σ dy·γ·x is over the uncentred x.
            let mag_gx_raw = (0..n).map(|j| (g[j] * xr[j]).abs()).sum::<f64>() / nf;
            for j in 0..n {
                let i = r * n + j;
                want_y[i] = xh[j] * gamma[j] + beta[j];
                y_f32eps[i] = xh32[j] * gamma[j] + beta[j];
                tol_y[i] = 4.0 * (nf + 8.0) * U * ((xh[j] * gamma[j]).abs() + beta[j].abs());
                want_dx[i] = rstd * (g[j] - mean_g - xh[j] * mean_gx);
                // The truth's dx = b·x + a·dy·γ + c, b from ds and db·mean (uncentred): the
                // terms b·x and b·mean are of size rstd³·(|x| + |mean|)·(mean|g·x| +
                // |mean|·mean|g|) before they cancel to b·(x − mean).
                let m_terms = rstd * (g[j].abs() + mag_g + xh[j].abs() * mag_gx)
                    + rstd.powi(3) * (xr[j].abs() + mean.abs()) * (mag_gx_raw + mean.abs() * mag_g);
                tol_dx[i] = 8.0 * (nf + 8.0) * U * m_terms;
                want_dg[j] += dyr[j] * xh[j];
                mag_dg[j] += (dyr[j] * xh[j]).abs();
                want_db[j] += dyr[j];
                mag_db[j] += dyr[j].abs();
            }
        }
        let what = format!("width {n}");
        let bound = |mag: &Vec<f64>| {
            let k = 4.0 * ((rows + n) as f64 + 8.0) * U;
            mag.iter().map(|m| k * m).collect::<Vec<f64>>()
        };
        let (tdg, tdb) = (bound(&mag_dg), bound(&mag_db));
        worst = worst.max(assert_within(
            &y,
            &want_y,
            |i| tol_y[i],
            &format!("{what} y"),
        ));
        worst = worst.max(assert_within(
            &dx,
            &want_dx,
            |i| tol_dx[i],
            &format!("{what} dx"),
        ));
        worst = worst.max(assert_within(
            &dg,
            &want_dg,
            |i| tdg[i],
            &format!("{what} dgamma"),
        ));
        worst = worst.max(assert_within(
            &db,
            &want_db,
            |i| tdb[i],
            &format!("{what} dbeta"),
        ));
        // The bound separates eps from its f32 rounding: the textbook evaluation with the
        // f32 eps lies outside it (by orders of magnitude on the small rows).
        assert!(
            differs(&y_f32eps, &want_y, |i| tol_y[i] * 1e3),
            "{what}: an f32-rounded eps would pass the forward bound"
        );
    }
    eprintln!("layer norm: largest |diff| / bound {worst:.3}");
}

/// RMSNorm forward and backward at its default eps 1e-6 (the double), against the textbook
/// `y = x·w / sqrt(mean(x²) + eps)`, `dx = r·g − x·r³·mean(g·x)` (g = dy·w), `dw = Σ dy·x·r`.
/// Bounds as for LayerNorm: forward `4(n + 8)·u·|y|` (every term of mean(x²) is positive, so
/// γ_n is relative to the result), dx `8(n + 8)·u·(r·|g| + |x|·r³·mean|g·x|)`, dw
/// `4(rows + n + 8)·u·Σ|dy·x·r|`. An f32-rounded eps (off by 4.5e-14) moves r by ~1e-8
/// relative on the rows of scale 1e-3: checked below.
#[test]
fn f64_rms_norm_matches_the_textbook_formulas() {
    let eps = 1e-6;
    let mut worst: f64 = 0.0;
    for n in [4usize, 16, 35] {
        let x = norm_rows(70 + n as u64, n);
        let rows = x.len() / n;
        let w: Vec<f64> = values(80, n, 0.5).iter().map(|v| v + 1.0).collect();
        let dy = values(81, rows * n, 1.0);
        let mut y = vec![f64::NAN; rows * n];
        rms_norm(&x, Some(&w), eps, n, &mut y);
        let (mut dx, mut dw) = (vec![f64::NAN; rows * n], vec![f64::NAN; n]);
        rms_norm_backward(
            &x,
            Some(&w),
            &dy,
            eps,
            n,
            Some(&mut dx),
            Some(&mut dw),
            false,
            &mut Vec::new(),
        );
        let nf = n as f64;
        let (mut want_y, mut want_dx, mut tol_dx) = (
            vec![0.0; rows * n],
            vec![0.0; rows * n],
            vec![0.0; rows * n],
        );
        let (mut want_dw, mut mag_dw) = (vec![0.0; n], vec![0.0; n]);
        let mut y_f32eps = vec![0.0; rows * n];
        for r in 0..rows {
            let xr = &x[r * n..(r + 1) * n];
            let dyr = &dy[r * n..(r + 1) * n];
            let ms = xr.iter().map(|v| v * v).sum::<f64>() / nf;
            let rr = 1.0 / (ms + eps).sqrt();
            let rr32 = 1.0 / (ms + eps as f32 as f64).sqrt();
            let g: Vec<f64> = (0..n).map(|j| dyr[j] * w[j]).collect();
            let mean_gx = (0..n).map(|j| g[j] * xr[j]).sum::<f64>() / nf;
            let mag_gx = (0..n).map(|j| (g[j] * xr[j]).abs()).sum::<f64>() / nf;
            for j in 0..n {
                let i = r * n + j;
                want_y[i] = xr[j] * w[j] / (ms + eps).sqrt();
                y_f32eps[i] = xr[j] * rr32 * w[j];
                want_dx[i] = rr * g[j] - xr[j] * rr * rr * rr * mean_gx;
                tol_dx[i] =
                    8.0 * (nf + 8.0) * U * (rr * g[j].abs() + xr[j].abs() * rr * rr * rr * mag_gx);
                want_dw[j] += dyr[j] * xr[j] * rr;
                mag_dw[j] += (dyr[j] * xr[j] * rr).abs();
            }
        }
        let what = format!("width {n}");
        let tol_y = |i: usize| 4.0 * (nf + 8.0) * U * want_y[i].abs();
        let k = 4.0 * ((rows + n) as f64 + 8.0) * U;
        worst = worst.max(assert_within(&y, &want_y, tol_y, &format!("{what} y")));
        worst = worst.max(assert_within(
            &dx,
            &want_dx,
            |i| tol_dx[i],
            &format!("{what} dx"),
        ));
        worst = worst.max(assert_within(
            &dw,
            &want_dw,
            |j| k * mag_dw[j],
            &format!("{what} dw"),
        ));
        assert!(
            differs(&y_f32eps, &want_y, |i| tol_y(i) * 1e3),
            "{what}: an f32-rounded eps would pass the forward bound"
        );
    }
    eprintln!("rms norm: largest |diff| / bound {worst:.3}");
}

/// Megatron's sequence-parallel norm backward through the f64 backend at TP 3 over uneven
/// token shards: dx is the unsharded backward's, the weight and bias gradients the per-rank
/// partials over their rows summed in rank order, bit for bit; for both norms.
#[test]
fn f64_sequence_parallel_norm_backward_is_rank_partials_in_rank_order() {
    let (rows, n, tp) = (7usize, 9usize, 3usize);
    let x = values(90, rows * n, 1.0);
    let w: Vec<f64> = values(91, n, 0.5).iter().map(|v| v + 1.0).collect();
    let dy = values(92, rows * n, 1.0);
    let sh = shards(rows, tp);
    for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
        let (mut dx, mut dw, mut db) = (
            vec![f64::NAN; rows * n],
            vec![f64::NAN; n],
            vec![f64::NAN; n],
        );
        sequence_parallel_norm_backward(
            &mut F64Backend::default(),
            kind,
            &x,
            Some(&w),
            &dy,
            1e-5,
            n,
            &sh,
            Some(&mut dx),
            Some(&mut dw),
            Some(&mut db),
            false,
            &mut Vec::new(),
            &mut Vec::new(),
        );
        let mut want_dx = vec![0.0; rows * n];
        let (mut pw, mut pb) = (Vec::new(), Vec::new());
        match kind {
            NormKind::LayerNorm => {
                layer_norm_backward(&x, Some(&w), &dy, 1e-5, n, Some(&mut want_dx), None, None)
            }
            NormKind::RmsNorm => rms_norm_backward(
                &x,
                Some(&w),
                &dy,
                1e-5,
                n,
                Some(&mut want_dx),
                None,
                false,
                &mut Vec::new(),
            ),
        }
        for r in &sh {
            let (xs, ds) = (&x[r.start * n..r.end * n], &dy[r.start * n..r.end * n]);
            let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
            match kind {
                NormKind::LayerNorm => {
                    layer_norm_backward(xs, Some(&w), ds, 1e-5, n, None, Some(&mut a), Some(&mut b))
                }
                NormKind::RmsNorm => rms_norm_backward(
                    xs,
                    Some(&w),
                    ds,
                    1e-5,
                    n,
                    None,
                    Some(&mut a),
                    false,
                    &mut Vec::new(),
                ),
            }
            pw.push(a);
            pb.push(b);
        }
        assert_bits(&dx, &want_dx, &format!("{kind:?} dx"));
        assert_bits(&dw, &rank_order_sum(&pw), &format!("{kind:?} dweight"));
        if kind == NormKind::LayerNorm {
            assert_bits(&db, &rank_order_sum(&pb), "layer norm dbias");
        }
    }
}

// ---------------------------------------------------------------------------------------
// cross-entropy (plain and vocab-parallel): within a few ulps of libm
// ---------------------------------------------------------------------------------------

/// Textbook mean cross-entropy in f64 with `libm`: per token `log Σ exp(z − m) − (z_label −
/// m)`, the mean over the tokens, and `d(scale·mean)/dz = (softmax − onehot)·scale / T`.
/// Returns (loss, gradient, loss bound, per-element gradient bound): exp and log are within
/// one ulp (libm's accuracy) and a sum of V positive terms within γ_V, so the loss is within
/// `(V + 8)·u` relative to `Σ_t (|log s| + |z_label − m|) / T` and each gradient element
/// within `(V + 8)·u·(softmax + onehot)·scale/T` (both sides; ×2).
fn ce_textbook(z: &[f64], labels: &[i64], v: usize, scale: f64) -> (f64, Vec<f64>, f64, Vec<f64>) {
    let t = labels.len();
    let k = 2.0 * (v as f64 + 8.0) * U;
    let (mut loss, mut mag) = (0.0, 0.0);
    let (mut grad, mut tol) = (vec![0.0; t * v], vec![0.0; t * v]);
    for (r, &label) in labels.iter().enumerate() {
        let row = &z[r * v..(r + 1) * v];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|&x| libm::exp(x - m)).sum();
        let term = libm::log(s) - (row[label as usize] - m);
        loss += term;
        mag += libm::log(s).abs() + (row[label as usize] - m).abs();
        for (j, &x) in row.iter().enumerate() {
            let p = libm::exp(x - m) / s;
            let onehot = f64::from(u8::from(j == label as usize));
            grad[r * v + j] = (p - onehot) * scale / t as f64;
            tol[r * v + j] = k * (p + onehot) * scale / t as f64;
        }
    }
    (loss / t as f64, grad, k * mag / t as f64, tol)
}

/// The f64 cross-entropy (the backend's, `cross_entropy_generic`) and Megatron's
/// vocab-parallel cross-entropy through the f64 backend (one shard, as the truth runs it,
/// and TP 3 over uneven vocabulary shards), with the gradient seed 1/2 (two micro-steps) and
/// T = 6 tokens (1/T and scale/T are not f32 values: an f32 rounding of either moves every
/// gradient by ~1e-8 relative, 10^6 times the bound), against the textbook.
#[test]
fn f64_cross_entropy_matches_the_textbook_with_libm() {
    let (t, v) = (6usize, 13usize);
    let z = values(100, t * v, 6.0);
    let labels: Vec<i64> = vec![0, 12, 5, 5, 7, 1];
    let scale = 0.5;
    let (want, want_g, tol_l, tol_g) = ce_textbook(&z, &labels, v, scale);
    let mut be = F64Backend::default();
    let mut g = vec![f64::NAN; t * v];
    let loss = cross_entropy(&mut be, &z, &labels, v, scale, &mut g);
    assert_within(&[loss], &[want], |_| tol_l, "cross-entropy loss");
    assert_within(&g, &want_g, |i| tol_g[i], "cross-entropy gradient");
    let wrong: Vec<f64> = want_g
        .iter()
        .map(|x| x * (scale / t as f64) as f32 as f64 / (scale / t as f64))
        .collect();
    assert!(
        differs(&wrong, &want_g, |i| tol_g[i]),
        "an f32-rounded 1/T would pass"
    );
    let mut buf = VocabParallelBuffers::default();
    for tp in [1usize, 3] {
        g.fill(f64::NAN);
        let loss = vocab_parallel_cross_entropy(
            &mut be,
            &z,
            &labels,
            v,
            &shards(v, tp),
            scale,
            &mut g,
            &mut buf,
        );
        let what = format!("vocab-parallel cross-entropy tp {tp}");
        assert_within(&[loss], &[want], |_| tol_l, &format!("{what} loss"));
        assert_within(&g, &want_g, |i| tol_g[i], &format!("{what} gradient"));
    }
}

// ---------------------------------------------------------------------------------------
// the XLA path's f64 kernels
// ---------------------------------------------------------------------------------------

/// The JAX (XLA) kernels at f64, as an outer-loop graph's truth runs them: SGD
/// `p + (−lr)·g` eagerly and `fma(g, −lr, p)` under jit, tanh's derivative
/// `(dy + dy·y)·(1 − y)` eagerly, MSE's gradient `(2/N)·(y − t)`, bit for bit with every
/// constant the double (lr = 0.1, 2/N with N = 6: neither an f32); and optax's adamw at
/// β = (0.9, 0.999), eps 1e-8, weight decay 1e-4 (none of them an f32) against its textbook
/// formulas, within a bound of a few u per operation, the bias corrections' `1 − β^t`
/// conditioned by `1/(1 − β^t)` (an f32 β₂ moves `1 − β₂^t` by 1e-5 relative, checked
/// below).
#[test]
fn f64_xla_kernels_use_double_constants() {
    let n = 6;
    let p0 = values(110, n, 1.0);
    let g = values(111, n, 0.3);
    let lr = 0.1;
    for (mode, fused) in [(XlaMode::Eager, false), (XlaMode::Jit, true)] {
        let mut p = p0.clone();
        let mut st = OptState::default();
        seedsweep::ops::xla::step(mode, Optimizer::sgd(lr), 1, &mut p, &g, &mut st);
        let want: Vec<f64> = p0
            .iter()
            .zip(&g)
            .map(|(&w, &d)| {
                if fused {
                    d.mul_add(-lr, w)
                } else {
                    w + (-lr) * d
                }
            })
            .collect();
        assert_bits(&p, &want, &format!("{mode:?} sgd"));
        let (dy, y) = (values(112, n, 1.0), values(113, n, 0.9));
        let mut dx = vec![f64::NAN; n];
        seedsweep::ops::xla::tanh_backward(mode, &dy, &y, &mut dx);
        let want: Vec<f64> = dy
            .iter()
            .zip(&y)
            .map(|(&d, &h)| {
                let gy = if fused { d.mul_add(h, d) } else { d + d * h };
                gy * (1.0 - h)
            })
            .collect();
        assert_bits(&dx, &want, &format!("{mode:?} tanh backward"));
        let tgt = values(114, n, 1.0);
        let mut d = vec![f64::NAN; n];
        seedsweep::ops::xla::mse(mode, &y, &tgt, 3, &mut d);
        let want: Vec<f64> = y
            .iter()
            .zip(&tgt)
            .map(|(a, b)| (2.0 / 6.0) * (a - b))
            .collect();
        assert_bits(&d, &want, &format!("{mode:?} mse gradient"));
    }
    let (b1, b2, eps, wd) = (0.9, 0.999, 1e-8, 1e-4);
    let adam = Optimizer::Adam {
        lr,
        beta1: b1,
        beta2: b2,
        eps,
        weight_decay: wd,
        decoupled: true,
    };
    for mode in [XlaMode::Eager, XlaMode::Jit] {
        let mut p = p0.clone();
        let mut st = OptState::default();
        let (mut m, mut v, mut want) = (vec![0.0; n], vec![0.0; n], p0.clone());
        let (mut tol, mut wrong) = (vec![0.0; n], p0.clone());
        for step in 1..=3 {
            let gs: Vec<f64> = g.iter().map(|x| x * step as f64).collect();
            seedsweep::ops::xla::step(mode, adam, step, &mut p, &gs, &mut st);
            for i in 0..n {
                m[i] = (1.0 - b1) * gs[i] + b1 * m[i];
                v[i] = (1.0 - b2) * gs[i] * gs[i] + b2 * v[i];
                let mh = m[i] / (1.0 - libm::pow(b1, step as f64));
                let vh = v[i] / (1.0 - libm::pow(b2, step as f64));
                let u = mh / (vh.sqrt() + eps) + wd * want[i];
                // b^t within 2 ulps either way (powi against libm's pow) is within 4u/(1 − b^t)
                // relative once subtracted from 1; m̂/√v̂ then within the sum of those and 8u.
                let t = step as f64;
                let rel = 8.0 * U
                    + 4.0 * U / (1.0 - libm::pow(b1, t))
                    + 2.0 * U / (1.0 - libm::pow(b2, t));
                tol[i] +=
                    4.0 * U * want[i].abs() + lr * (rel * u.abs() + 4.0 * U * (wd * want[i]).abs());
                want[i] -= lr * u;
                // The same with β₂ rounded to f32.
                let b2f = b2 as f32 as f64;
                let vh32 = v[i] / (1.0 - libm::pow(b2f, step as f64));
                wrong[i] -= lr * (mh / (vh32.sqrt() + eps) + wd * wrong[i]);
            }
        }
        assert_within(&p, &want, |i| tol[i], &format!("{mode:?} adamw"));
        assert!(
            differs(&wrong, &want, |i| tol[i] * 1e3),
            "an f32 beta2 would pass"
        );
    }
}

// ---------------------------------------------------------------------------------------
// whole scenarios: the float64 trace against an independent float64 evaluation
// ---------------------------------------------------------------------------------------

/// Loads a scenario file's text, runs `param` at `seed` (profile `cpu-fma`: the float64 trace
/// depends on no profile) and returns the float64 trace's slots by (check, step, role).
fn f64_trace(
    text: &str,
    param: usize,
    seed: u64,
) -> std::collections::BTreeMap<(String, String, &'static str), Vec<f64>> {
    let sf = seedsweep::scenario::load("f64_truth.toml", text).unwrap_or_else(|e| panic!("{e}"));
    let s: GraphScenario = seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{e}"));
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "test")
        .unwrap();
    let mut ws = Workspace::default();
    s.run(param, seed, &profile, &mut ws);
    let checks = s.checks(param);
    let t = &ws.traces.f64;
    let mut out = std::collections::BTreeMap::new();
    for slot in &t.slots {
        let k = (
            checks[slot.check].name.to_string(),
            slot.step.to_string(),
            role_name(slot.role),
        );
        assert!(out.insert(k, t.data(slot).to_vec()).is_none());
    }
    out
}

/// Compares the float64 trace with the independent evaluation: every slot the truth recorded
/// must be evaluated here (and the reverse), each within `TOL` of the tensor's largest
/// magnitude. Returns the largest |diff| / (that magnitude), and asserts that `f32_eps`,
/// the same evaluation with the norms' eps rounded to f32, is caught.
fn compare_traces(
    truth: &std::collections::BTreeMap<(String, String, &'static str), Vec<f64>>,
    mine: &std::collections::BTreeMap<(String, String, &'static str), Vec<f64>>,
    f32_eps: &std::collections::BTreeMap<(String, String, &'static str), Vec<f64>>,
    what: &str,
) -> f64 {
    assert_eq!(
        truth.keys().collect::<Vec<_>>(),
        mine.keys().collect::<Vec<_>>(),
        "{what}: the recorded slots"
    );
    let mut worst: f64 = 0.0;
    let mut caught = 0;
    for (k, got) in truth {
        let want = &mine[k];
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
        let name = format!("{what} {} at {} ({})", k.0, k.1, k.2);
        let r = assert_within(got, want, |_| TOL * scale, &name) * TOL;
        worst = worst.max(r);
        caught += usize::from(differs(&f32_eps[k], want, |_| 100.0 * TOL * scale));
    }
    eprintln!(
        "{what}: an f32 eps moves {caught} of {} tensors by > 100 x the tolerance",
        truth.len()
    );
    assert!(
        caught * 2 > truth.len(),
        "{what}: an f32 eps is caught in only {caught} of {} tensors",
        truth.len()
    );
    worst
}

/// The whole-scenario tolerance, relative to each tensor's largest magnitude. The two
/// evaluations differ only in the order of f64 operations (LayerNorm's Welford cascade and
/// ATen's backward formula against two passes and the textbook one, a fused SGD update
/// against `p − lr·g`, the loss reduction): each reassociation is within γ_n ≈ n·u ≤ 20u =
/// 2.2e-15 of its result's scale, and two training steps through these blocks amplify that
/// little (measured: at most 8.7e-16 over both files and all seeds, printed by the tests);
/// 1e-13 leaves a margin of ~100. An f32-rounded constant moves results by ~1e-9 and more
/// (eps = 0.3 rounded to f32 is off by 4e-8 relative, which moves rstd by ~4e-9 relative on
/// rows of variance ~1): the same evaluation with the f32 eps must differ by more than
/// 100 × the tolerance in most tensors (asserted).
const TOL: f64 = 1e-13;

/// A pre-norm MLP block, f64 truth against the textbook: LayerNorm (eps 0.3) →
/// column-parallel fc1 → tanh → row-parallel fc2 → residual add with the input → RMSNorm
/// (eps 0.3) → MSE, TP 4, 2 steps × 2 micro-steps of SGD at lr 0.25 (an f32 value: the
/// learning rate's own plumbing is tested elsewhere), torch's draws.
const BLOCK: &str = r#"
name = "f64-block"
rng = "torch"
dims = { tokens = 6, hidden = 12, ffn = 20 }
parallel = { tp = 4 }
data = { seed = 7 }
inputs = [
  { name = "x", draw = "randn", shape = ["tokens", "hidden"], grad = true },
  { name = "target", draw = "randn", shape = ["tokens", "hidden"] },
]
layers = [
  { name = "ln", op = "layernorm", input = "x", eps = 0.3 },
  { name = "fc1", op = "linear", out = "ffn", parallel = "column" },
  { name = "act", op = "tanh" },
  { name = "fc2", op = "linear", out = "hidden", parallel = "row" },
  { name = "res", op = "residual-add", inputs = ["fc2.out", "x"] },
  { name = "rms", op = "rmsnorm", eps = 0.3 },
]
loss = { op = "mse", target = "target" }
train = { steps = 2, micro_steps = 2, optimizer = "sgd", lr = 0.25 }
checks = [
  { name = "ln_out", tensor = "ln.out" },
  { name = "fc1_out", tensor = "fc1.out" },
  { name = "act_out", tensor = "act.out" },
  { name = "fc2_out", tensor = "fc2.out" },
  { name = "res_out", tensor = "res.out" },
  { name = "out", tensor = "rms.out" },
  { name = "loss", tensor = "loss" },
  { name = "x_grad", tensor = "x.grad" },
  { name = "ln_w_grad", tensor = "ln.weight.grad", at = "micro-step" },
  { name = "ln_b_grad", tensor = "ln.bias.grad", at = "micro-step" },
  { name = "fc1_w_grad", tensor = "fc1.weight.grad", at = "micro-step" },
  { name = "fc1_b_grad", tensor = "fc1.bias.grad", at = "micro-step" },
  { name = "fc2_w_grad", tensor = "fc2.weight.grad", at = "micro-step" },
  { name = "fc2_b_grad", tensor = "fc2.bias.grad", at = "micro-step" },
  { name = "rms_w_grad", tensor = "rms.weight.grad", at = "micro-step" },
  { name = "ln_weight", tensor = "ln.weight" },
  { name = "fc1_weight", tensor = "fc1.weight" },
  { name = "fc2_bias", tensor = "fc2.bias" },
  { name = "rms_weight", tensor = "rms.weight" },
]
"#;

fn to64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// `x·Wᵀ + b` (x m×k, W n×k) and its condition `|x|·|W|ᵀ`.
fn lin(
    x: &[f64],
    w: &[f64],
    b: Option<&[f64]>,
    m: usize,
    k: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = mm(x, &tr(w, n, k), m, k, n);
    if let Some(b) = b {
        for (i, v) in y.iter_mut().enumerate() {
            *v += b[i % n];
        }
    }
    (y, mm(&abs(x), &tr(&abs(w), n, k), m, k, n))
}

/// Textbook LayerNorm rows: (y, xhat, rstd per row).
fn ln_fwd(x: &[f64], w: &[f64], b: &[f64], eps: f64, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut xh, mut rs) = (Vec::new(), Vec::new(), Vec::new());
    for row in x.chunks(n) {
        let (h, r) = ln_row(row, eps);
        y.extend((0..n).map(|j| h[j] * w[j] + b[j]));
        xh.extend(h);
        rs.push(r);
    }
    (y, xh, rs)
}

/// Textbook LayerNorm backward: (dx, dw, db).
fn ln_bwd(
    xh: &[f64],
    rs: &[f64],
    w: &[f64],
    dy: &[f64],
    n: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let nf = n as f64;
    let (mut dx, mut dw, mut db) = (vec![0.0; xh.len()], vec![0.0; n], vec![0.0; n]);
    for (r, &rstd) in rs.iter().enumerate() {
        let o = r * n;
        let g: Vec<f64> = (0..n).map(|j| dy[o + j] * w[j]).collect();
        let mg = g.iter().sum::<f64>() / nf;
        let mgx = (0..n).map(|j| g[j] * xh[o + j]).sum::<f64>() / nf;
        for j in 0..n {
            dx[o + j] = rstd * (g[j] - mg - xh[o + j] * mgx);
            dw[j] += dy[o + j] * xh[o + j];
            db[j] += dy[o + j];
        }
    }
    (dx, dw, db)
}

/// Textbook RMSNorm: (y, r per row).
fn rms_fwd(x: &[f64], w: &[f64], eps: f64, n: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut rs) = (Vec::new(), Vec::new());
    for row in x.chunks(n) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
        let r = 1.0 / (ms + eps).sqrt();
        y.extend((0..n).map(|j| row[j] * r * w[j]));
        rs.push(r);
    }
    (y, rs)
}

/// Textbook RMSNorm backward: (dx, dw).
fn rms_bwd(x: &[f64], rs: &[f64], w: &[f64], dy: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut dx, mut dw) = (vec![0.0; x.len()], vec![0.0; n]);
    for (r, &rr) in rs.iter().enumerate() {
        let o = r * n;
        let g: Vec<f64> = (0..n).map(|j| dy[o + j] * w[j]).collect();
        let mgx = (0..n).map(|j| g[j] * x[o + j]).sum::<f64>() / n as f64;
        for j in 0..n {
            dx[o + j] = rr * g[j] - x[o + j] * rr * rr * rr * mgx;
            dw[j] += dy[o + j] * x[o + j] * rr;
        }
    }
    (dx, dw)
}

fn col_sums(a: &[f64], n: usize) -> Vec<f64> {
    let mut s = vec![0.0; n];
    for row in a.chunks(n) {
        for (o, v) in s.iter_mut().zip(row) {
            *o += v;
        }
    }
    s
}

fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

type Slots = std::collections::BTreeMap<(String, String, &'static str), Vec<f64>>;

/// The block scenario evaluated here, with the norms' `eps`.
fn block_by_hand(seed: u64, eps: f64) -> Slots {
    let (t, h, f, steps, micro) = (6usize, 12usize, 20usize, 2usize, 2usize);
    let (lr, scale) = (0.25, 0.5);
    // Init: torch's defaults in layer order (the norms draw nothing: weight 1, bias 0).
    let mut gen = TorchGenerator::new(seed);
    let mut draw = |n: usize, fan_in: usize, bias: bool| {
        let mut v = vec![0.0f32; n];
        if bias {
            gen.linear_bias_uniform(&mut v, fan_in);
        } else {
            gen.kaiming_uniform_linear(&mut v, fan_in);
        }
        to64(&v)
    };
    let mut w1 = draw(f * h, h, false);
    let mut b1 = draw(f, h, true);
    let mut w2 = draw(h * f, f, false);
    let mut b2 = draw(h, f, true);
    let (mut lw, mut lb, mut rw) = (vec![1.0; h], vec![0.0; h], vec![1.0; h]);
    let mut out = Slots::new();
    let mut put = |name: &str, step: String, role: SlotRole, v: Vec<f64>| {
        out.insert((name.to_string(), step, role_name(role)), v);
    };
    for s in 0..steps {
        let mut acc: Vec<Vec<f64>> = Vec::new();
        for m in 0..micro {
            let label = format!("{s}.{m}");
            let mut g = TorchGenerator::new(7 + (micro * s + m) as u64);
            let mut x32 = vec![0.0f32; t * h];
            let mut t32 = vec![0.0f32; t * h];
            g.randn(&mut x32);
            g.randn(&mut t32);
            let (x, tg) = (to64(&x32), to64(&t32));
            let (ln, xh, rs) = ln_fwd(&x, &lw, &lb, eps, h);
            let (h1, c1) = lin(&ln, &w1, Some(&b1), t, h, f);
            let a: Vec<f64> = h1.iter().map(|&v| libm::tanh(v)).collect();
            let (h2, c2) = lin(&a, &w2, Some(&b2), t, f, h);
            let r = add(&h2, &x);
            let (y, rr) = rms_fwd(&r, &rw, eps, h);
            let nn = (t * h) as f64;
            let loss = y
                .iter()
                .zip(&tg)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
                / nn;
            let dy: Vec<f64> = y
                .iter()
                .zip(&tg)
                .map(|(a, b)| 2.0 * (a - b) / nn * scale)
                .collect();
            let (dr, drw) = rms_bwd(&r, &rr, &rw, &dy, h);
            let dw2 = mm(&tr(&dr, t, h), &a, h, t, f);
            let db2 = col_sums(&dr, h);
            let da = mm(&dr, &w2, t, h, f);
            let dh1: Vec<f64> = da.iter().zip(&a).map(|(d, y)| d * (1.0 - y * y)).collect();
            let dw1 = mm(&tr(&dh1, t, f), &ln, f, t, h);
            let db1 = col_sums(&dh1, f);
            let dln = mm(&dh1, &w1, t, f, h);
            let (dxl, dlw, dlb) = ln_bwd(&xh, &rs, &lw, &dln, h);
            let dx = add(&dxl, &dr);
            let grads = vec![dlw, dlb, dw1, db1, dw2, db2, drw];
            acc = if m == 0 {
                grads
            } else {
                acc.iter().zip(&grads).map(|(a, g)| add(a, g)).collect()
            };
            let v = SlotRole::Value;
            put("ln_out", label.clone(), v, ln);
            put("fc1_out", label.clone(), v, h1);
            put("fc1_out", label.clone(), SlotRole::Condition, c1);
            put("act_out", label.clone(), v, a);
            put("fc2_out", label.clone(), v, h2);
            put("fc2_out", label.clone(), SlotRole::Condition, c2);
            put("res_out", label.clone(), v, r);
            put("out", label.clone(), v, y);
            put("loss", label.clone(), v, vec![loss]);
            put("x_grad", label.clone(), v, dx);
            for (name, g) in [
                "ln_w_grad",
                "ln_b_grad",
                "fc1_w_grad",
                "fc1_b_grad",
                "fc2_w_grad",
                "fc2_b_grad",
                "rms_w_grad",
            ]
            .iter()
            .zip(&acc)
            {
                put(name, label.clone(), v, g.clone());
            }
        }
        for (p, g) in [
            &mut lw, &mut lb, &mut w1, &mut b1, &mut w2, &mut b2, &mut rw,
        ]
        .into_iter()
        .zip(&acc)
        {
            for (w, d) in p.iter_mut().zip(g) {
                *w -= lr * d;
            }
        }
        let v = SlotRole::Value;
        put("ln_weight", s.to_string(), v, lw.clone());
        put("fc1_weight", s.to_string(), v, w1.clone());
        put("fc2_bias", s.to_string(), v, b2.clone());
        put("rms_weight", s.to_string(), v, rw.clone());
    }
    out
}

#[test]
fn f64_trace_of_a_prenorm_mlp_block_matches_an_independent_evaluation() {
    let mut worst: f64 = 0.0;
    for seed in [0u64, 8173, 99] {
        let truth = f64_trace(BLOCK, 0, seed);
        let mine = block_by_hand(seed, 0.3);
        let f32_eps = block_by_hand(seed, 0.3f32 as f64);
        worst = worst.max(compare_traces(
            &truth,
            &mine,
            &f32_eps,
            &format!("seed {seed}"),
        ));
    }
    eprintln!("block: largest |diff| / max|tensor| {worst:.2e} (tolerance {TOL:e})");
}

/// A vocab-parallel head, f64 truth against the textbook: vocab-parallel embedding (torch's
/// N(0, 1) table) → RMSNorm (eps 0.3) → column-parallel head → vocab-parallel cross-entropy,
/// TP 4; and the same model unsharded with the plain cross-entropy (`plain`); 2 SGD steps at
/// lr 0.5.
const VOCAB: &str = r#"
name = "f64-vocab"
rng = "torch"
dims = { tokens = 6, hidden = 10, vocab = 24 }
parallel = { tp = 4, shard_rule = "megatron" }
data = { seed = 11 }
inputs = [
  { name = "ids", draw = "randint", high = "vocab", shape = ["tokens"] },
  { name = "labels", draw = "randint", high = "vocab", shape = ["tokens"] },
]
layers = [
  { name = "emb", op = "embedding", input = "ids", num = "vocab", dim = "hidden", parallel = "vocab" },
  { name = "norm", op = "rmsnorm", eps = 0.3 },
  { name = "head", op = "linear", out = "vocab", bias = false, parallel = "column" },
]
loss = { op = "cross-entropy", labels = "labels", parallel = "vocab" }
train = { steps = 2, optimizer = "sgd", lr = 0.5 }
checks = [
  { name = "emb_out", tensor = "emb.out" },
  { name = "norm_out", tensor = "norm.out" },
  { name = "logits", tensor = "head.out" },
  { name = "loss", tensor = "loss" },
  { name = "head_w_grad", tensor = "head.weight.grad" },
  { name = "norm_w_grad", tensor = "norm.weight.grad" },
  { name = "emb_w_grad", tensor = "emb.weight.grad" },
  { name = "emb_weight", tensor = "emb.weight" },
  { name = "head_weight", tensor = "head.weight" },
]

[[params]]
id = "vocab"

[[params]]
id = "plain"
emb.parallel = "none"
head.parallel = "none"
loss.parallel = "none"
"#;

/// The vocab scenario evaluated here, with the norm's `eps`.
fn vocab_by_hand(seed: u64, eps: f64) -> Slots {
    let (t, h, v, steps, lr) = (6usize, 10usize, 24usize, 2usize, 0.5);
    let mut gen = TorchGenerator::new(seed);
    let mut table = vec![0.0f32; v * h];
    gen.normal_(&mut table, 0.0, 1.0);
    let mut head = vec![0.0f32; v * h];
    gen.kaiming_uniform_linear(&mut head, h);
    let (mut table, mut head, mut nw) = (to64(&table), to64(&head), vec![1.0; h]);
    let mut out = Slots::new();
    for s in 0..steps {
        let label = s.to_string();
        let mut g = TorchGenerator::new(11 + s as u64);
        let (mut ids, mut labels) = (vec![0i64; t], vec![0i64; t]);
        g.randint(v as u64, &mut ids);
        g.randint(v as u64, &mut labels);
        let e: Vec<f64> = ids
            .iter()
            .flat_map(|&i| table[i as usize * h..(i as usize + 1) * h].to_vec())
            .collect();
        let (y, rr) = rms_fwd(&e, &nw, eps, h);
        let (z, cz) = lin(&y, &head, None, t, h, v);
        let (loss, dz, _, _) = ce_textbook(&z, &labels, v, 1.0);
        let dhead = mm(&tr(&dz, t, v), &y, v, t, h);
        let dy = mm(&dz, &head, t, v, h);
        let (de, dnw) = rms_bwd(&e, &rr, &nw, &dy, h);
        let mut dtable = vec![0.0; v * h];
        for (tok, &i) in ids.iter().enumerate() {
            for j in 0..h {
                dtable[i as usize * h + j] += de[tok * h + j];
            }
        }
        for (p, gr) in [(&mut table, &dtable), (&mut head, &dhead), (&mut nw, &dnw)] {
            for (w, d) in p.iter_mut().zip(gr) {
                *w -= lr * d;
            }
        }
        let val = SlotRole::Value;
        for (name, role, x) in [
            ("emb_out", val, e),
            ("norm_out", val, y),
            ("logits", val, z),
            ("logits", SlotRole::Condition, cz),
            ("loss", val, vec![loss]),
            ("head_w_grad", val, dhead),
            ("norm_w_grad", val, dnw),
            ("emb_w_grad", val, dtable),
            ("emb_weight", val, table.clone()),
            ("head_weight", val, head.clone()),
        ] {
            out.insert((name.to_string(), label.clone(), role_name(role)), x);
        }
    }
    out
}

#[test]
fn f64_trace_of_a_vocab_parallel_head_matches_an_independent_evaluation() {
    let mut worst: f64 = 0.0;
    for param in [0usize, 1] {
        for seed in [0u64, 8173] {
            let truth = f64_trace(VOCAB, param, seed);
            let mine = vocab_by_hand(seed, 0.3);
            // The embedding output at step 0 is the drawn table's rows, exactly.
            assert_bits(
                &truth[&("emb_out".into(), "0".into(), "value")],
                &mine[&("emb_out".into(), "0".into(), "value")],
                "emb_out at 0",
            );
            let f32_eps = vocab_by_hand(seed, 0.3f32 as f64);
            let what = format!("param {param} seed {seed}");
            worst = worst.max(compare_traces(&truth, &mine, &f32_eps, &what));
        }
    }
    eprintln!("vocab head: largest |diff| / max|tensor| {worst:.2e} (tolerance {TOL:e})");
}

/// `mul` and `add` in the float64 truth, bit for bit, with gradient accumulation: `p = a·b`,
/// `s = p + a` on fixed inputs (f32 values whose products need more than 24 bits), MSE. The
/// independent side: `p = a·b` and `s = p + a` in f64; from the truth's own `s.grad` (the MSE
/// gradient, tested elsewhere): `p.grad = s.grad` (AddBackward0), `b.grad = p.grad·a`, and
/// `a.grad = s.grad + p.grad·b` (the add's contribution first, as the backward runs the layers
/// in reverse; then MulBackward0's added, one rounding each). The same products rounded to f32
/// differ (asserted), so an f32 step anywhere would be caught.
#[test]
fn f64_mul_and_add_with_accumulation_are_exact() {
    let text = r#"
name = "f64-mul-add"
inputs = [
  { name = "a", draw = "fixed", shape = [2, 3], grad = true, values = [0.1, -0.7, 1.3333, 2.71821, -0.45, 3.14152] },
  { name = "b", draw = "fixed", shape = [2, 3], grad = true, values = [1.7, 0.333, -2.2, 0.9, 5.5, -0.123] },
  { name = "t", draw = "fixed", shape = [2, 3], values = [0.5, 0.25, -1.0, 2.0, 0.0, 1.5] },
]
layers = [
  { name = "p", op = "mul", inputs = ["a", "b"] },
  { name = "s", op = "add", inputs = ["p", "a"] },
]
loss = { op = "mse", target = "t" }
checks = [
  { name = "p", tensor = "p.out" },
  { name = "s", tensor = "s.out" },
  { name = "a_grad", tensor = "a.grad" },
  { name = "b_grad", tensor = "b.grad" },
  { name = "p_grad", tensor = "p.out.grad" },
  { name = "s_grad", tensor = "s.out.grad" },
]
"#;
    let tr = f64_trace(text, 0, 0);
    let get = |c: &str| tr[&(c.to_string(), "0".to_string(), "value")].clone();
    let f = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| f64::from(x as f32)).collect() };
    let a = f(&[0.1, -0.7, 1.3333, 2.71821, -0.45, 3.14152]);
    let b = f(&[1.7, 0.333, -2.2, 0.9, 5.5, -0.123]);
    let p: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    let s: Vec<f64> = p.iter().zip(&a).map(|(x, y)| x + y).collect();
    assert_bits(&get("p"), &p, "mul forward");
    assert_bits(&get("s"), &s, "add forward");
    let ds = get("s_grad");
    assert_bits(&get("p_grad"), &ds, "add backward");
    let db: Vec<f64> = ds.iter().zip(&a).map(|(g, x)| g * x).collect();
    let da: Vec<f64> = ds.iter().zip(&b).map(|(g, y)| g + g * y).collect();
    assert_bits(&get("b_grad"), &db, "mul backward (b)");
    assert_bits(&get("a_grad"), &da, "mul + add backward accumulated (a)");
    let p32: Vec<f64> = p.iter().map(|&x| f64::from(x as f32)).collect();
    assert!(
        differs(&p32, &p, |_| 0.0),
        "the products are f32 values: the test would not catch an f32 rounding"
    );
}
