//! The matmul kernels against their definitions: every model and shape against the scalar
//! dot products, the nt/tn forms against explicit transposition, the f64 forms against the
//! naive loop. (Each compilation forced against the portable one: `tests/isa_paths.rs`.)

use super::super::dot::{dot_blocked, dot_f64};
use super::few_rows::{FEW_ROWS_NT_F64_FROM, FEW_ROWS_NT_FROM};
use super::float64::F64_WIDE_GROUPS_FROM;
use super::transpose::transpose_f64_map;
use super::*;
use crate::kernels::isa::Isa;

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
fn reference(model: &MatmulModel, a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
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
                model.matmul(
                    Mat::new(&a, m, k),
                    Mat::new(&b, k, n),
                    MatMut::new(&mut c, m, n),
                    &mut s,
                );
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
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
            model.matmul(
                Mat::new(&a, m, k),
                Mat::new(&b, k, n),
                MatMut::new(&mut c, m, n),
                &mut s,
            );
            assert_same_bits(&c, &want, &format!("{model:?} n={n}"));
            model.matmul(
                Mat::new(&a, m, k),
                Mat::new(&b, k, n),
                MatMut::new(&mut c, m, n),
                &mut MatmulScratch::with_isa(Isa::PORTABLE),
            );
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
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
                model.matmul(
                    Mat::new(&a, m, k),
                    Mat::new(&b, k, n),
                    MatMut::new(&mut c, m, n),
                    &mut s,
                );
                assert_same_bits(&c, &want, &what);
                c.fill(f32::NAN);
                model.matmul(
                    Mat::new(&a, m, k),
                    Mat::new(&b, k, n),
                    MatMut::new(&mut c, m, n),
                    &mut MatmulScratch::with_isa(Isa::PORTABLE),
                );
                assert_same_bits(&c, &want, &format!("portable {what}"));
                let at = transpose(&a, m, k);
                c.fill(f32::NAN);
                model.matmul_tn(
                    Mat::new(&at, k, m),
                    Mat::new(&b, k, n),
                    MatMut::new(&mut c, m, n),
                    &mut s,
                );
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
    let run = |model: MatmulModel, s: &mut MatmulScratch| {
        let mut c = vec![0.0; m * n];
        model.matmul(
            Mat::new(&a, m, k),
            Mat::new(&b, k, n),
            MatMut::new(&mut c, m, n),
            s,
        );
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
    for model in all_models() {
        for &k in &[0usize, 1, 35, 193] {
            let (m, n) = (1 + rng.below(11), 1 + rng.below(70));
            let a = rng.vec(m * k);
            let b = rng.vec(k * n);
            let mut want = vec![0.0; m * n];
            model.matmul(
                Mat::new(&a, m, k),
                Mat::new(&b, k, n),
                MatMut::new(&mut want, m, n),
                &mut s,
            );
            // nt: pass b as (n×k).
            let bt = transpose(&b, k, n);
            let mut c = vec![f32::NAN; m * n];
            model.matmul_nt(
                Mat::new(&a, m, k),
                Mat::new(&bt, n, k),
                MatMut::new(&mut c, m, n),
                &mut s,
            );
            assert_same_bits(&c, &want, &format!("nt {model:?} {m}x{k}x{n}"));
            // tn: pass a as (k×m).
            let at = transpose(&a, m, k);
            let mut c = vec![f32::NAN; m * n];
            model.matmul_tn(
                Mat::new(&at, k, m),
                Mat::new(&b, k, n),
                MatMut::new(&mut c, m, n),
                &mut s,
            );
            assert_same_bits(&c, &want, &format!("tn {model:?} {m}x{k}x{n}"));
        }
    }
}

/// `matmul_nt` with few rows and a big `b` (the shapes of the transpose-free AVX-512F kernel,
/// which `tests/isa_paths.rs` checks against this portable path) equals `matmul` on the
/// explicitly transposed `b`, for every model, with
/// row counts from 1 to 16, column counts that leave a remainder of 1 to 7 beside the
/// groups of eight, and reduction lengths that end blocks early, on and off block edges.
#[test]
fn few_rows_nt_equals_explicit_transposition() {
    let mut rng = Rng(47);
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
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
            model.matmul(
                Mat::new(&a, m, k),
                Mat::new(&bt, k, n),
                MatMut::new(&mut want, m, n),
                &mut s,
            );
            let mut c = vec![f32::NAN; m * n];
            model.matmul_nt(
                Mat::new(&a, m, k),
                Mat::new(&b, n, k),
                MatMut::new(&mut c, m, n),
                &mut s,
            );
            assert_same_bits(&c, &want, &format!("{model:?} {m}x{k}x{n}"));
        }
    }
}

/// `matmul_tn_rows` of any row range equals those rows of `matmul_tn`, for every model
/// (a fused optimizer step consumes a weight gradient by such panels).
#[test]
fn tn_rows_equal_rows_of_tn() {
    let mut rng = Rng(41);
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
    for model in all_models() {
        for &k in &[1usize, 10, 193] {
            let (m, n) = (1 + rng.below(40), 1 + rng.below(70));
            let a = rng.vec(k * m);
            let b = rng.vec(k * n);
            let mut want = vec![0.0; m * n];
            model.matmul_tn(
                Mat::new(&a, k, m),
                Mat::new(&b, k, n),
                MatMut::new(&mut want, m, n),
                &mut s,
            );
            let r0 = rng.below(m);
            let r1 = r0 + 1 + rng.below(m - r0);
            let mut c = vec![f32::NAN; (r1 - r0) * n];
            model.matmul_tn_rows(
                Mat::new(&a, k, m),
                Mat::new(&b, k, n),
                MatMut::new(&mut c, (r0..r1).len(), n),
                r0..r1,
                &mut s,
            );
            let what = format!("{model:?} {m}x{k}x{n} rows {r0}..{r1}");
            assert_same_bits(&c, &want[r0 * n..r1 * n], &what);
        }
    }
}

/// `matmul_nt` on shapes that take the panels (b of 1 MiB and more, few rows; the last
/// panel narrower) equals `matmul` on the explicitly transposed b, for every model.
#[test]
fn nt_panels_equal_explicit_transposition() {
    let mut rng = Rng(23);
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
    for (m, k, n) in [(10, 64, 4103), (3, 513, 700)] {
        let w = nt_panel_width(m, k, n, 4).expect("these shapes take the panels");
        assert!(n % w != 0, "the last panel is a partial one");
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let bt = transpose(&b, k, n);
        for model in all_models().into_iter().filter(|_| rng.below(4) == 0) {
            let mut want = vec![0.0; m * n];
            let (am, bm) = (Mat::new(&a, m, k), Mat::new(&b, k, n));
            model.matmul(am, bm, MatMut::new(&mut want, m, n), &mut s);
            let mut c = vec![f32::NAN; m * n];
            let btm = Mat::new(&bt, n, k);
            model.matmul_nt(am, btm, MatMut::new(&mut c, m, n), &mut s);
            assert_same_bits(&c, &want, &format!("nt {model:?} {m}x{k}x{n}"));
        }
    }
}

/// The f32 transpose (8 × 8 tiles on AVX2, a ragged edge by a tile moved back over the one
/// before it, scalar below 8 rows or columns) against the naive copy on every shape up to
/// 19 × 19 and on T1's shapes, bit for bit; the destination starts as NaN, so an element no
/// tile writes shows. Portable here; each compilation in `tests/isa_paths.rs`.
#[test]
fn transposes_agree_with_naive() {
    let mut rng = Rng(8);
    let shapes = (0..20).flat_map(|r| (0..20).map(move |c| (r, c)));
    for (rows, cols) in shapes.chain([(67, 35), (35, 67), (10, 35), (35, 10), (10, 67)]) {
        let src = rng.vec(rows * cols);
        let want = transpose(&src, rows, cols);
        let mut dst = vec![f32::NAN; rows * cols];
        let d = MatMut::new(&mut dst, cols, rows);
        transpose_f32(Mat::new(&src, rows, cols), d, Isa::PORTABLE);
        assert_same_bits(&dst, &want, &format!("{rows}x{cols}"));
    }
}

/// The portable f64 transpose (32 × 32 tiles; the AVX-512F register blocks are checked in
/// `tests/isa_paths.rs`), plain
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
        transpose_f64(
            Mat::new(&src, rows, cols),
            MatMut::new(&mut dst, cols, rows),
            Isa::PORTABLE,
        );
        transpose_f64_map::<true>(&src, &mut abs, rows, cols, Isa::PORTABLE);
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
    for model in all_models() {
        let mut c = vec![f32::NAN; 6];
        model.matmul(
            Mat::new(&[], 2, 0),
            Mat::new(&[], 0, 3),
            MatMut::new(&mut c, 2, 3),
            &mut s,
        );
        assert!(c.iter().all(|x| x.to_bits() == 0), "{model:?}");
        model.matmul(
            Mat::new(&[], 0, 4),
            Mat::new(&[1.0; 4], 4, 1),
            MatMut::new(&mut [], 0, 1),
            &mut s,
        );
        model.matmul(
            Mat::new(&[1.0; 4], 4, 1),
            Mat::new(&[], 1, 0),
            MatMut::new(&mut [], 4, 0),
            &mut s,
        );
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
        Mat::new(&[1.0; 5], 2, 3),
        Mat::new(&[1.0; 6], 3, 2),
        MatMut::new(&mut [0.0; 4], 2, 2),
        &mut MatmulScratch::with_isa(Isa::PORTABLE),
    );
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
    model.matmul_nt(
        Mat::new(&a, m, k),
        Mat::new(&b, n, k),
        MatMut::new(&mut c, m, n),
        &mut s,
    );
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
        model.matmul_nt(
            Mat::new(&a, m, k),
            Mat::new(&b, n, k),
            MatMut::new(&mut c, m, n),
            &mut s,
        );
        model.matmul(
            Mat::new(&a[..2 * k], 2, k),
            Mat::new(&b, k, n),
            MatMut::new(&mut c[..2 * n], 2, n),
            &mut s,
        );
    }
    assert_eq!(ptrs(&s), before, "scratch was reallocated");
}

/// c = a·b by the portable f64 kernel (each compilation against it: `tests/isa_paths.rs`).
fn every_f64_kernel(
    a: &[f64],
    b: &[f64],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<(&'static str, Vec<f64>)> {
    let mut c = vec![f64::NAN; m * n];
    let (am, bm) = (Mat::new(a, m, k), Mat::new(b, k, n));
    matmul_f64(am, bm, MatMut::new(&mut c, m, n), Isa::PORTABLE);
    vec![("portable", c)]
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
    matmul_nt_f64(
        Mat::new(a, m, k),
        Mat::new(&bt, n, k),
        MatMut::new(&mut c, m, n),
        &mut Vec::new(),
        Isa::PORTABLE,
    );
    assert_eq!(bits(&c), bits(want), "matmul_nt_f64 {m}x{k}x{n}");
    let mut at = vec![0.0; m * k];
    for i in 0..m {
        for kk in 0..k {
            at[kk * m + i] = a[i * k + kk];
        }
    }
    let mut c = vec![f64::NAN; m * n];
    matmul_tn_f64(
        Mat::new(&at, k, m),
        Mat::new(b, k, n),
        MatMut::new(&mut c, m, n),
        Isa::PORTABLE,
    );
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
        matmul_nt_f64(
            Mat::new(&abs(&a), m, k),
            Mat::new(&abs(&b), n, k),
            MatMut::new(&mut want, m, n),
            &mut Vec::new(),
            Isa::PORTABLE,
        );
        let mut got = vec![f64::NAN; m * n];
        matmul_nt_abs_f64(
            Mat::new(&a, m, k),
            Mat::new(&b, n, k),
            MatMut::new(&mut got, m, n),
            &mut vec![7.0; 3],
            Isa::PORTABLE,
        );
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n}");
        let mut plain = vec![f64::NAN; m * n];
        matmul_nt_f64(
            Mat::new(&a, m, k),
            Mat::new(&b, n, k),
            MatMut::new(&mut plain, m, n),
            &mut Vec::new(),
            Isa::PORTABLE,
        );
        assert_ne!(bits(&plain), bits(&want), "the signs change the result");
    }
}

/// `matmul_nt_f64` and `matmul_nt_abs_f64` with few rows and a big `b` (the shapes of the
/// transpose-free AVX-512F kernel, checked against this portable path in
/// `tests/isa_paths.rs`) equal `matmul_f64` on the explicitly
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
        transpose_f64(
            Mat::new(&b, n, k),
            MatMut::new(&mut bt, k, n),
            Isa::PORTABLE,
        );
        let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<f64>>();
        let mut want = vec![0.0; m * n];
        matmul_f64(
            Mat::new(&a, m, k),
            Mat::new(&bt, k, n),
            MatMut::new(&mut want, m, n),
            Isa::PORTABLE,
        );
        let mut want_abs = vec![0.0; m * n];
        matmul_f64(
            Mat::new(&abs(&a), m, k),
            Mat::new(&abs(&bt), k, n),
            MatMut::new(&mut want_abs, m, n),
            Isa::PORTABLE,
        );
        let (mut c, mut c_abs, mut scratch) =
            (vec![f64::NAN; m * n], vec![f64::NAN; m * n], Vec::new());
        matmul_nt_f64(
            Mat::new(&a, m, k),
            Mat::new(&b, n, k),
            MatMut::new(&mut c, m, n),
            &mut scratch,
            Isa::PORTABLE,
        );
        matmul_nt_abs_f64(
            Mat::new(&a, m, k),
            Mat::new(&b, n, k),
            MatMut::new(&mut c_abs, m, n),
            &mut scratch,
            Isa::PORTABLE,
        );
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
        matmul_tn_f64(
            Mat::new(&a, k, m),
            Mat::new(&b, k, n),
            MatMut::new(&mut want, m, n),
            Isa::PORTABLE,
        );
        for (r0, r1) in [(0, m), (0, 1), (3, 12), (5, m), (m - 1, m), (4, 4)] {
            let mut c = vec![f64::NAN; (r1 - r0) * n];
            matmul_tn_f64_rows(
                Mat::new(&a, k, m),
                Mat::new(&b, k, n),
                MatMut::new(&mut c, (r0..r1).len(), n),
                r0..r1,
                Isa::PORTABLE,
            );
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
    let mut s = MatmulScratch::with_isa(Isa::PORTABLE);
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
            model.matmul(
                Mat::new(&a, 1, k),
                Mat::new(&b, k, 1),
                MatMut::new(&mut c, 1, 1),
                &mut s,
            );
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
