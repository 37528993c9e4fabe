//! Every check that a vector compilation gives the bits of its portable definition, one trial
//! per (check, dispatch level), each path forced through an explicit [`Isa`].
//!
//! The built-in test harness cannot skip a test at run time, so a check that needs AVX-512F
//! on a CPU without it would pass while comparing the portable path with itself. This binary
//! uses `libtest-mimic` instead (`harness = false` in Cargo.toml): a trial whose level the
//! CPU lacks is reported as ignored, with the reason ("needs AVX-512F and AVX-512DQ"), and
//! `cargo test` counts it as ignored, never as passed. The usual flags work (a name filter,
//! `--exact`, `--list`, `--test-threads`).
//!
//! Trial names are `module::check::level`, level one of `portable`, `avx2`, `avx512`
//! ([`Level::name`]). A check whose portable path is its definition has no portable trial.
//!
//! `SEEDSWEEP_TEST_PRETEND_NO_AVX512=1` reports every AVX-512 trial as ignored, as on a CPU
//! without it (to see the skip path work on a machine that has it); `SEEDSWEEP_ISA` does not
//! affect this binary, whose trials force their level explicitly.

use libtest_mimic::{Arguments, Completion, Trial};
use seedsweep::kernels::isa::{Isa, Level};

/// One check, run on each of `levels`.
struct Check {
    name: &'static str,
    levels: &'static [Level],
    run: fn(Isa),
}

const VECTOR: &[Level] = &[Level::Avx2, Level::Avx512];
const ALL: &[Level] = &[Level::Portable, Level::Avx2, Level::Avx512];
const AVX2: &[Level] = &[Level::Avx2];
const AVX512: &[Level] = &[Level::Avx512];

fn checks() -> Vec<Check> {
    let mut v = Vec::new();
    v.extend(matmul_paths::checks());
    v.extend(elementwise_paths::checks());
    v.extend(check_paths::checks());
    v.extend(stats_paths::checks());
    v.extend(frontier_paths::checks());
    v
}

fn main() {
    let args = Arguments::from_args();
    let pretend_no_avx512 = std::env::var_os("SEEDSWEEP_TEST_PRETEND_NO_AVX512")
        .is_some_and(|v| !v.is_empty() && v != "0");
    let mut trials = Vec::new();
    for c in checks() {
        for &level in c.levels {
            let name = format!("{}::{}", c.name, level.name());
            let isa = if pretend_no_avx512 && level == Level::Avx512 {
                None
            } else {
                Isa::new(level)
            };
            let run = c.run;
            trials.push(Trial::ignorable_test(name, move || match isa {
                Some(isa) => {
                    run(isa);
                    Ok(Completion::Completed)
                }
                None => Ok(Completion::ignored_with(level.needs())),
            }));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}

/// SplitMix64, so that a failure names a reproducible input.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A xorshift64 step (the generator several of the moved checks were written with).
pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// The bit patterns of `v`.
pub fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The bit patterns of `v`.
pub fn bits64(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The matmul kernels: each compilation against the portable one, bit for bit.
mod matmul_paths {
    use super::{bits32, bits64, Check, Rng, AVX512, VECTOR};
    use seedsweep::kernels::isa::Isa;
    use seedsweep::kernels::matmul::{
        matmul_f64, matmul_nt_abs_f64, matmul_nt_and_abs_f64, matmul_nt_f64, matmul_tn_f64,
        matmul_tn_f64_rows, transpose_f32, transpose_f64, Accum, KSplit, Mat, MatMut, MatmulModel,
        MatmulScratch, Passes,
    };
    use seedsweep::kernels::round::Tf32Mode;

    pub fn checks() -> Vec<Check> {
        vec![
            Check {
                name: "matmul::f32_products_equal_the_portable_ones",
                levels: VECTOR,
                run: f32_products_equal_the_portable_ones,
            },
            Check {
                name: "matmul::f32_transpose_equals_the_naive_copy",
                levels: VECTOR,
                run: f32_transpose_equals_the_naive_copy,
            },
            Check {
                name: "matmul::f64_products_equal_the_portable_ones",
                levels: VECTOR,
                run: f64_products_equal_the_portable_ones,
            },
            Check {
                name: "matmul::f64_transpose_equals_the_naive_copy",
                levels: AVX512,
                run: f64_transpose_equals_the_naive_copy,
            },
            Check {
                name: "matmul::nt_and_abs_in_one_pass_equal_the_two_products",
                levels: AVX512,
                run: nt_and_abs_in_one_pass_equal_the_two_products,
            },
        ]
    }

    /// Uniform in [-1, 1) with 24 random bits, times 2^e, e in -6..=6; 1 in 32 values is ±0.
    fn val(rng: &mut Rng) -> f32 {
        let r = rng.next_u64();
        if r.is_multiple_of(32) {
            return if r & 64 == 0 { 0.0 } else { -0.0 };
        }
        let u = ((r >> 40) as f32) * 2f32.powi(-23) - 1.0;
        let e = ((r >> 8) % 13) as i32 - 6;
        u * 2f32.powi(e)
    }

    fn vec32(rng: &mut Rng, len: usize) -> Vec<f32> {
        (0..len).map(|_| val(rng)).collect()
    }

    fn vec64(rng: &mut Rng, len: usize) -> Vec<f64> {
        (0..len)
            .map(|_| val(rng) as f64 * (1.0 + 1e-9 * val(rng) as f64))
            .collect()
    }

    fn transpose<T: Copy + Default>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
        let mut t = vec![T::default(); x.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = x[r * cols + c];
            }
        }
        t
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
        let passes = [
            Passes::F32,
            Passes::Bf16x1,
            Passes::Bf16x3,
            Passes::Bf16x6,
            Passes::Tf32(Tf32Mode::Rne),
            Passes::Tf32(Tf32Mode::Rna),
            Passes::Tf32(Tf32Mode::Trunc),
        ];
        let mut v = vec![];
        for split in splits {
            for accum in [Accum::Fma, Accum::MulAdd, Accum::Pairwise] {
                for passes in passes {
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

    /// `matmul`, `matmul_nt`, `matmul_tn`, `matmul_tn_rows` and `matmul_nt_cols` of every
    /// model on `isa` against the portable kernel: random shapes (m up to 40 rows: whole and
    /// ragged spans and register tiles of every height, reduction lengths on and off the
    /// split's block edges), the few-rows shapes of `x·Wᵀ` (1 to 16 rows, a big `W`: the
    /// transpose-free kernel on AVX-512F) and the panel shapes (a `W` of 1 MiB and more).
    fn f32_products_equal_the_portable_ones(isa: Isa) {
        const KS: [usize; 10] = [1, 18, 35, 191, 192, 193, 257, 383, 384, 385];
        let mut rng = Rng(4);
        let (mut fast_s, mut port_s) = (
            MatmulScratch::with_isa(isa),
            MatmulScratch::with_isa(Isa::PORTABLE),
        );
        let mut shapes: Vec<(usize, usize, usize)> = (0..2 * all_models().len())
            .map(|_| {
                (
                    1 + rng.below(40),
                    KS[rng.below(KS.len())],
                    1 + rng.below(80),
                )
            })
            .collect();
        let big = [
            (10, 193, 101),
            (16, 512, 37),
            (1, 35, 500),
            (7, 400, 45),
            (3, 2, 8200),
            (10, 64, 4103),
            (3, 513, 700),
        ];
        let models = all_models();
        for (idx, &(m, k, n)) in shapes.iter().enumerate() {
            let model = models[idx % models.len()];
            check_f32_forms(&mut rng, model, m, k, n, &mut fast_s, &mut port_s, isa);
        }
        shapes.clear();
        for (m, k, n) in big {
            for (idx, model) in models.iter().enumerate() {
                if idx % 6 == (m + k + n) % 6 {
                    check_f32_forms(&mut rng, *model, m, k, n, &mut fast_s, &mut port_s, isa);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_f32_forms(
        rng: &mut Rng,
        model: MatmulModel,
        m: usize,
        k: usize,
        n: usize,
        fast_s: &mut MatmulScratch,
        port_s: &mut MatmulScratch,
        isa: Isa,
    ) {
        let what = format!("{model:?} {m}x{k}x{n} on {isa:?}");
        let a = vec32(rng, m * k);
        let b = vec32(rng, k * n);
        let (mut fast, mut port) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
        let (am, bm) = (Mat::new(&a, m, k), Mat::new(&b, k, n));
        model.matmul(am, bm, MatMut::new(&mut fast, m, n), fast_s);
        model.matmul(am, bm, MatMut::new(&mut port, m, n), port_s);
        assert_eq!(bits32(&fast), bits32(&port), "nn {what}");
        let bt = transpose(&b, k, n);
        let btm = Mat::new(&bt, n, k);
        model.matmul_nt(am, btm, MatMut::new(&mut fast, m, n), fast_s);
        model.matmul_nt(am, btm, MatMut::new(&mut port, m, n), port_s);
        assert_eq!(bits32(&fast), bits32(&port), "nt {what}");
        let at = transpose(&a, m, k);
        let atm = Mat::new(&at, k, m);
        model.matmul_tn(atm, bm, MatMut::new(&mut fast, m, n), fast_s);
        model.matmul_tn(atm, bm, MatMut::new(&mut port, m, n), port_s);
        assert_eq!(bits32(&fast), bits32(&port), "tn {what}");
        let r0 = rng.below(m);
        let r1 = r0 + 1 + rng.below(m - r0);
        let rows = (r1 - r0) * n;
        model.matmul_tn_rows(
            atm,
            bm,
            MatMut::new(&mut fast[..rows], r1 - r0, n),
            r0..r1,
            fast_s,
        );
        assert_eq!(
            bits32(&fast[..rows]),
            bits32(&port[r0 * n..r1 * n]),
            "tn rows {r0}..{r1} {what}"
        );
        // x·Wᵀ with W the columns 3..3 + k of a wider matrix, read in place where the
        // few-rows kernel runs; the product of the gathered columns either way.
        let width = k + 5;
        let w: Vec<f32> = (0..n * width)
            .map(|i| {
                if (3..3 + k).contains(&(i % width)) {
                    bt[(i / width) * k + i % width - 3]
                } else {
                    f32::NAN
                }
            })
            .collect();
        let wm = Mat::new(&w, n, width).columns(3..3 + k);
        fast.fill(f32::NAN);
        if model.matmul_nt_cols(am, wm, MatMut::new(&mut fast, m, n), fast_s) {
            model.matmul_nt(am, btm, MatMut::new(&mut port, m, n), port_s);
            assert_eq!(bits32(&fast), bits32(&port), "nt cols {what}");
        }
    }

    /// The f32 transpose against the naive copy on every shape up to 19 × 19 and on T1's
    /// shapes; the destination starts as NaN, so an element no tile writes shows.
    fn f32_transpose_equals_the_naive_copy(isa: Isa) {
        let mut rng = Rng(8);
        let shapes = (0..20).flat_map(|r| (0..20).map(move |c| (r, c)));
        for (rows, cols) in shapes.chain([(67, 35), (35, 67), (10, 35), (35, 10), (10, 67)]) {
            let src = vec32(&mut rng, rows * cols);
            let mut dst = vec![f32::NAN; rows * cols];
            transpose_f32(
                Mat::new(&src, rows, cols),
                MatMut::new(&mut dst, cols, rows),
                isa,
            );
            assert_eq!(
                bits32(&dst),
                bits32(&transpose(&src, rows, cols)),
                "{rows}x{cols}"
            );
        }
    }

    /// The f64 transpose (8 × 8 register blocks on AVX-512F) against the naive copy.
    fn f64_transpose_equals_the_naive_copy(isa: Isa) {
        let mut rng = Rng(9);
        let shapes = (0..20).flat_map(|r| (0..20).map(move |c| (r, c)));
        for (rows, cols) in shapes.chain([(67, 35), (35, 67), (64, 64)]) {
            let src = vec64(&mut rng, rows * cols);
            let mut dst = vec![f64::NAN; rows * cols];
            transpose_f64(
                Mat::new(&src, rows, cols),
                MatMut::new(&mut dst, cols, rows),
                isa,
            );
            assert_eq!(
                bits64(&dst),
                bits64(&transpose(&src, rows, cols)),
                "{rows}x{cols}"
            );
        }
    }

    /// Every f64 form on `isa` against the portable one: random small shapes, every row
    /// group and column block (m 1..=11, n 1..=40 and 67), big `b` (8-row groups and 9 to 12
    /// rows as one group on AVX-512F, panels), and few rows with a big `b` (the
    /// transpose-free kernel); `nt_abs` with signed inputs.
    fn f64_products_equal_the_portable_ones(isa: Isa) {
        let mut rng = Rng(6);
        let mut shapes: Vec<(usize, usize, usize)> = (0..50)
            .map(|_| (1 + rng.below(11), rng.below(40), 1 + rng.below(41)))
            .collect();
        for m in 1..=11 {
            for n in (1..=40).chain([67]) {
                shapes.push((m, [0, 1, 10, 35][(m + n) % 4], n));
            }
        }
        shapes.extend([
            (10, 300, 451),
            (19, 37, 3600),
            (1, 512, 257),
            (9, 2, 66_000),
            (8, 290, 457),
            (11, 290, 457),
            (12, 290, 457),
            (13, 290, 457),
            (15, 290, 457),
            (10, 512, 130),
            (16, 100, 303),
            (1, 2048, 9),
            (3, 20, 1003),
            (9, 64, 129),
            (70, 40, 5000),
        ]);
        let (mut s1, mut s2) = (Vec::new(), Vec::new());
        for (m, k, n) in shapes {
            let what = format!("{m}x{k}x{n} on {isa:?}");
            let a: Vec<f64> = vec64(&mut rng, m * k).iter().map(|x| x - 0.25).collect();
            let b: Vec<f64> = vec64(&mut rng, k * n)
                .iter()
                .map(|x| x / 3.0 + 0.1)
                .collect();
            let (am, bm) = (Mat::new(&a, m, k), Mat::new(&b, k, n));
            let (mut fast, mut port) = (vec![f64::NAN; m * n], vec![f64::NAN; m * n]);
            matmul_f64(am, bm, MatMut::new(&mut fast, m, n), isa);
            matmul_f64(am, bm, MatMut::new(&mut port, m, n), Isa::PORTABLE);
            assert_eq!(bits64(&fast), bits64(&port), "nn {what}");
            let bt = transpose(&b, k, n);
            let btm = Mat::new(&bt, n, k);
            matmul_nt_f64(am, btm, MatMut::new(&mut fast, m, n), &mut s1, isa);
            matmul_nt_f64(
                am,
                btm,
                MatMut::new(&mut port, m, n),
                &mut s2,
                Isa::PORTABLE,
            );
            assert_eq!(bits64(&fast), bits64(&port), "nt {what}");
            matmul_nt_abs_f64(am, btm, MatMut::new(&mut fast, m, n), &mut s1, isa);
            matmul_nt_abs_f64(
                am,
                btm,
                MatMut::new(&mut port, m, n),
                &mut s2,
                Isa::PORTABLE,
            );
            assert_eq!(bits64(&fast), bits64(&port), "nt abs {what}");
            let at = transpose(&a, m, k);
            let atm = Mat::new(&at, k, m);
            matmul_tn_f64(atm, bm, MatMut::new(&mut fast, m, n), isa);
            matmul_tn_f64(atm, bm, MatMut::new(&mut port, m, n), Isa::PORTABLE);
            assert_eq!(bits64(&fast), bits64(&port), "tn {what}");
            let r0 = rng.below(m);
            let r1 = r0 + rng.below(m - r0 + 1);
            let rows = (r1 - r0) * n;
            let c = MatMut::new(&mut fast[..rows], r1 - r0, n);
            matmul_tn_f64_rows(atm, bm, c, r0..r1, isa);
            assert_eq!(
                bits64(&fast[..rows]),
                bits64(&port[r0 * n..r1 * n]),
                "tn rows {what}"
            );
        }
    }

    /// Both products from one pass (`matmul_nt_and_abs_f64`) equal `matmul_nt_f64` and
    /// `matmul_nt_abs_f64` on the portable path where the few-rows kernel runs (1 to 16 rows,
    /// a remainder beside the groups of four columns, signed inputs), and nothing is written
    /// where it does not (a small `b`, or more than 16 rows).
    fn nt_and_abs_in_one_pass_equal_the_two_products(isa: Isa) {
        let mut rng = Rng(31);
        for (m, k, n, takes) in [
            (1, 40, 300, true),
            (10, 64, 203, true),
            (16, 33, 250, true),
            (3, 5, 7, false),
            (17, 64, 300, false),
        ] {
            let a: Vec<f64> = (0..m * k).map(|_| val(&mut rng) as f64 - 0.5).collect();
            let b: Vec<f64> = (0..k * n)
                .map(|_| val(&mut rng) as f64 / 3.0 - 0.2)
                .collect();
            let (am, bm) = (Mat::new(&a, m, k), Mat::new(&b, n, k));
            let (mut c, mut cabs) = (vec![f64::NAN; m * n], vec![f64::NAN; m * n]);
            let (cm, cabsm) = (MatMut::new(&mut c, m, n), MatMut::new(&mut cabs, m, n));
            let fused = matmul_nt_and_abs_f64(am, bm, cm, cabsm, &mut Vec::new(), isa);
            assert_eq!(fused, takes, "{m}x{k}x{n}");
            if !fused {
                assert!(
                    c.iter().chain(&cabs).all(|x| x.is_nan()),
                    "{m}x{k}x{n} written"
                );
                continue;
            }
            let (mut want, mut want_abs) = (vec![0.0; m * n], vec![0.0; m * n]);
            let p = Isa::PORTABLE;
            matmul_nt_f64(am, bm, MatMut::new(&mut want, m, n), &mut Vec::new(), p);
            matmul_nt_abs_f64(am, bm, MatMut::new(&mut want_abs, m, n), &mut Vec::new(), p);
            assert_eq!(bits64(&c), bits64(&want), "{m}x{k}x{n}");
            assert_eq!(bits64(&cabs), bits64(&want_abs), "abs {m}x{k}x{n}");
        }
    }
}

/// Elementwise kernels, torch's cross-entropy, the revealed programs' lanes, the generator
/// and the layers: each compilation against the portable one (or against the scalar
/// definition where the portable path is that definition).
mod elementwise_paths {
    use super::{bits32, bits64, xorshift, Check, Rng, AVX2, AVX512, VECTOR};
    use seedsweep::kernels::exp_slice::exp_slice_on;
    use seedsweep::kernels::isa::{Isa, Level};
    use seedsweep::kernels::revealed::{Program, RevealedMatmul, Role, MAX_LANE_DEPTH};
    use seedsweep::kernels::tanh64_slice::tanh64_slice_on;
    use seedsweep::kernels::tanh_slice::tanh_slice_on;
    use seedsweep::kernels::torch_ops::{
        exp_f32_lanes_on, log_softmax_cross_entropy_f32_on, TanhKernel, TorchIsa, IGNORE_INDEX,
    };
    use seedsweep::ops::layers::{cross_entropy_generic_on, embedding_backward_add_on};
    use seedsweep::ops::real::Real;
    use seedsweep::rng::torch::TorchGenerator;

    pub fn checks() -> Vec<Check> {
        vec![
            Check {
                name: "exp_slice::edges_and_branches_match_libm",
                levels: AVX512,
                run: |isa| f64_edges(isa, true),
            },
            Check {
                name: "exp_slice::random_inputs_over_the_whole_range_match_libm",
                levels: AVX512,
                run: |isa| f64_random(isa, true),
            },
            Check {
                name: "tanh64_slice::edges_and_branches_match_libm",
                levels: AVX512,
                run: |isa| f64_edges(isa, false),
            },
            Check {
                name: "tanh64_slice::random_inputs_over_the_whole_range_match_libm",
                levels: AVX512,
                run: |isa| f64_random(isa, false),
            },
            Check {
                name: "tanh_slice::block_kernels_equal_the_portable_one",
                levels: VECTOR,
                run: tanh_slice_equals_the_portable_one,
            },
            Check {
                name: "torch_ops::exp16_equals_exp_core_over_the_f32_range",
                levels: AVX512,
                run: exp16_equals_exp_core_over_the_f32_range,
            },
            Check {
                name: "torch_ops::cross_entropy_equals_ce_core",
                levels: VECTOR,
                run: cross_entropy_equals_ce_core,
            },
            Check {
                name: "revealed::exceptions_in_lanes_equal_the_portable_ones",
                levels: AVX512,
                run: exceptions_in_lanes_equal_the_portable_ones,
            },
            Check {
                name: "rng::generator_draws_equal_the_portable_ones",
                levels: VECTOR,
                run: generator_draws_equal_the_portable_ones,
            },
            Check {
                name: "real::fma_update_matches_the_scalar_fma",
                levels: AVX2,
                run: fma_update_matches_the_scalar_fma,
            },
            Check {
                name: "layers::dispatched_layers_equal_their_portable_bodies",
                levels: AVX512,
                run: dispatched_layers_equal_their_portable_bodies,
            },
        ]
    }

    /// `exp` (`exp`) or `tanh` of every element of `xs` on `isa`, against libm, bit for bit.
    fn assert_f64_slice(isa: Isa, exp: bool, xs: &[f64]) {
        let mut got = xs.to_vec();
        if exp {
            exp_slice_on(isa, &mut got);
        } else {
            tanh64_slice_on(isa, &mut got);
        }
        for (&x, &y) in xs.iter().zip(&got) {
            let want = if exp { libm::exp(x) } else { libm::tanh(x) };
            assert!(
                y.to_bits() == want.to_bits(),
                "{}({x:e}) = {y:e}, libm gives {want:e}",
                if exp { "exp" } else { "tanh" }
            );
        }
    }

    /// Every branch of the algorithm and every range edge, with neighbours one ulp away and
    /// both signs, ±0, ±∞, NaN, subnormals, and slice lengths 0–17 (the masked tail). exp:
    /// the thresholds of the argument reduction (0.5·ln2, 1.5·ln2, 2⁻²⁸) and of the range
    /// (708.39…, 709.78…, −745.13…) and results near the smallest normal; tanh: its branch
    /// points, expm1's reduction points, the lane range's ends and each change of k.
    fn f64_edges(isa: Isa, exp: bool) {
        let mut xs = vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1.0,
            -1.0,
            20.0,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
            f64::from_bits(0x000f_ffff_ffff_ffff),
        ];
        let words: &[u64] = if exp {
            &[0x3e30_0000, 0x3fd6_2e42, 0x3ff0_a2b2, 0x4086_232b]
        } else {
            // LOW, HIGH, tanh's branch points, expm1's reduction points (as |y|/2), 20.
            &[
                0x3c80_0000,
                0x4033_687a,
                0x3fd0_58ae,
                0x3fe1_93ea,
                0x3fd6_2e42 - 0x0010_0000,
                0x3ff0_a2b2 - 0x0010_0000,
                0x4034_0000,
            ]
        };
        let mut edges: Vec<u64> = Vec::new();
        for &hw in words {
            for low in [0u64, 1, 0xffff_ffff] {
                edges.push((hw << 32) | low);
            }
        }
        if exp {
            for v in [709.782712893384f64, 745.1332191019411, 708.3964185322641] {
                edges.push(v.to_bits());
            }
            for i in 0..200 {
                xs.push(-707.0 - i as f64 * 0.01);
            }
        } else {
            for k in 1..=57 {
                edges.push((((k as f64 - 0.5) * std::f64::consts::LN_2) / 2.0).to_bits());
            }
        }
        for b in edges {
            for d in -2i64..=2 {
                let v = f64::from_bits((b as i64 + d) as u64);
                xs.extend([v, -v]);
            }
        }
        assert_f64_slice(isa, exp, &xs);
        for n in 0..=17 {
            assert_f64_slice(isa, exp, &xs[..n]);
            assert_f64_slice(isa, exp, &xs[xs.len() - n..]);
        }
    }

    /// Ten million inputs over every binade that matters (exp: |x| from 2⁻³⁰ to 2¹⁰; tanh:
    /// 2⁻⁶⁰ to 2⁶; both signs, uniformly random significands) and a million in the range the
    /// sweeps use (exp: [−100, 0]; tanh: [−4, 4]).
    fn f64_random(isa: Isa, exp: bool) {
        let mut rng = Rng(if exp { 7 } else { 11 });
        let (lo, span) = if exp { (30, 41) } else { (60, 67) };
        let mut xs = Vec::with_capacity(1 << 20);
        for _ in 0..10 {
            xs.clear();
            for _ in 0..1_000_000 {
                let r = rng.next_u64();
                let e = 1023 - lo + (r >> 57) % span;
                let v = f64::from_bits((e << 52) | (r & ((1 << 52) - 1)));
                xs.push(if r & (1 << 56) != 0 { -v } else { v });
            }
            assert_f64_slice(isa, exp, &xs);
        }
        xs.clear();
        for _ in 0..1_000_000 {
            let u = rng.unit();
            xs.push(if exp { -100.0 * u } else { 8.0 * u - 4.0 });
        }
        assert_f64_slice(isa, exp, &xs);
    }

    /// The f32 tanh of a slice on `isa` against the portable compilation, both kernels: a
    /// stride of the fast path's range (both signs) and the special inputs, in slices of
    /// every length to 70 (ragged blocks, pending batches).
    fn tanh_slice_equals_the_portable_one(isa: Isa) {
        let (lo, hi) = (2f32.powi(-12).to_bits(), 9.0f32.to_bits());
        let mut xs: Vec<f32> = (lo..=hi).step_by(97).map(f32::from_bits).collect();
        xs.extend(xs.clone().iter().map(|x| -x));
        xs.extend([
            0.0,
            -0.0,
            f32::from_bits(1),
            f32::MIN_POSITIVE,
            100.0,
            f32::MAX,
        ]);
        xs.extend([
            f32::INFINITY,
            -f32::INFINITY,
            f32::NAN,
            2f32.powi(-13),
            9.01,
        ]);
        for kernel in [TanhKernel::Mkl, TanhKernel::CorrectlyRounded] {
            let (mut got, mut want) = (xs.clone(), xs.clone());
            tanh_slice_on(isa, &mut got, kernel);
            tanh_slice_on(Isa::PORTABLE, &mut want, kernel);
            assert_eq!(bits32(&got), bits32(&want), "{kernel:?}");
            for len in 0..70 {
                let (mut g, mut w) = (xs[..len].to_vec(), xs[..len].to_vec());
                tanh_slice_on(isa, &mut g, kernel);
                tanh_slice_on(Isa::PORTABLE, &mut w, kernel);
                assert_eq!(bits32(&g), bits32(&w), "{kernel:?} len {len}");
            }
        }
    }

    /// The sixteen-lane SLEEF exponential of the cross-entropy kernel against the scalar
    /// kernel (its FMA build) lane by lane: every 61st bit pattern (70 M inputs: every binade
    /// of both signs, NaNs and infinities included), then every input within 64 ulps of the
    /// cut-offs −104 and 100, of q's rounding points (d·log2 e at half-integers) for
    /// |q| ≤ 160, and of ±0.
    fn exp16_equals_exp_core_over_the_f32_range(isa: Isa) {
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(61).map(f32::from_bits).collect();
        let mut around = |c: f32| {
            for k in -64i32..=64 {
                xs.push(f32::from_bits(c.to_bits().wrapping_add_signed(k)));
            }
        };
        around(-104.0);
        around(100.0);
        around(0.0);
        around(-0.0);
        for h in -320..=320 {
            around((h as f32 + 0.5) / std::f32::consts::LOG2_E);
        }
        let scalar = Isa::new(Level::Avx2).expect("AVX-512 includes AVX2 and FMA");
        let (mut got, mut want) = (vec![0.0f32; xs.len()], vec![0.0f32; xs.len()]);
        exp_f32_lanes_on(isa, &xs, &mut got);
        exp_f32_lanes_on(scalar, &xs, &mut want);
        for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "exp({x:e}) = bits {:#x}, want {:#x}",
                g.to_bits(),
                w.to_bits()
            );
        }
    }

    /// Equal bit patterns, or both NaN. Which NaN comes out of a row holding NaN and ±∞
    /// logits is not part of either kernel's definition: x86 returns a NaN operand (or the
    /// negative default NaN for ∞ − ∞), and which one follows the compiler's order of
    /// commutative operations and the instructions it picks (measured: on this project's AMD
    /// EPYC one case's loss is +qNaN from the vector kernel and −qNaN from the scalar one;
    /// every non-NaN value agrees bit for bit). No output sees a NaN's sign.
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan()
    }

    /// torch's cross-entropy, forward and backward, on `isa` (the AVX-512 vector kernel, or
    /// the scalar kernel's FMA build) against the portable build (software `fmaf`), for both
    /// of torch's lane counts: 3000 cases of mostly ordinary logits, rows with specials or
    /// huge spreads, all-equal rows (zero maxima of both signs), and ignored labels.
    fn cross_entropy_equals_ce_core(isa: Isa) {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || xorshift(&mut state);
        let logit = |scale: f32, next: &mut dyn FnMut() -> u64| match next() % 40 {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            3 => 0.0,
            4 => -0.0,
            _ => ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale,
        };
        for case in 0..3000 {
            let v = 1 + (next() % 70) as usize;
            let n = 1 + (next() % 40) as usize;
            let special = case % 4 == 0;
            let scale = [1.0, 20.0, 300.0, 1e-30][(next() % 4) as usize];
            let logits: Vec<f32> = (0..n * v)
                .map(|_| {
                    if special {
                        logit(scale, &mut next)
                    } else if case % 7 == 1 {
                        [0.0, -0.0][(next() % 2) as usize]
                    } else {
                        ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
                    }
                })
                .collect();
            let labels: Vec<i64> = (0..n)
                .map(|_| {
                    if next() % 9 == 0 {
                        IGNORE_INDEX
                    } else {
                        (next() % v as u64) as i64
                    }
                })
                .collect();
            let grad_scale = [1.0, 0.5, 1.0 / 3.0][(next() % 3) as usize];
            for torch in [TorchIsa::Avx512, TorchIsa::Avx2] {
                let (mut got, mut want) = (vec![7.0f32; n * v], vec![0.0f32; n * v]);
                let lg = log_softmax_cross_entropy_f32_on(
                    isa, &logits, &labels, v, grad_scale, &mut got, torch,
                );
                let lw = log_softmax_cross_entropy_f32_on(
                    Isa::PORTABLE,
                    &logits,
                    &labels,
                    v,
                    grad_scale,
                    &mut want,
                    torch,
                );
                assert!(
                    same(lg, lw),
                    "case {case} {torch:?}: loss {:#x} vs {:#x}",
                    lg.to_bits(),
                    lw.to_bits()
                );
                for (j, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        same(g, w),
                        "case {case} {torch:?}: dlogit {j} {:#x} vs {:#x}",
                        g.to_bits(),
                        w.to_bits()
                    );
                }
            }
        }
    }

    /// A random program over `lo..hi` (chains, single terms fused or rounded, pairs),
    /// right-leaning when `deep` (a stack as deep as the terms).
    fn random_program(rng: &mut u64, lo: usize, hi: usize, deep: bool) -> String {
        let len = hi - lo;
        let pick = xorshift(rng) % 4;
        if len == 1 {
            return format!("{lo}{}", if pick.is_multiple_of(2) { "r" } else { "f" });
        }
        if !deep && (pick == 0 || len <= 2 && pick == 1) {
            return format!("[{lo}..{hi}]{}", if pick == 0 { "f" } else { "r" });
        }
        let mid = if deep {
            lo + 1
        } else {
            lo + 1 + (xorshift(rng) as usize) % (len - 1)
        };
        format!(
            "({} {})",
            random_program(rng, lo, mid, deep),
            random_program(rng, mid, hi, deep)
        )
    }

    /// The sixteen-lane exceptions against the portable ones, bit for bit, in every role
    /// (with and without the bias term): random programs (chains, fused and rounded terms,
    /// pairs; one deeper than the lanes' stack, which runs the portable way) on a random
    /// grid, so that runs of one program in a row are cut by program changes, row ends and
    /// the 16-lane limit; operands with mixed signs and magnitudes, and zeros.
    fn exceptions_in_lanes_equal_the_portable_ones(isa: Isa) {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for case in 0..40 {
            let (rows, red, cols) = (1 + case % 3, 1 + (case * 7) % 41, 1 + (case * 13) % 45);
            let bias = case % 4 == 3;
            let mut seed = xorshift(&mut rng) | 1;
            let mut programs = vec![Program::fma_chain(red)];
            for k in 0..4 {
                let text = random_program(&mut seed, 0, red, k == 3 && red > MAX_LANE_DEPTH);
                programs.push(Program::parse(&text, red).expect(&text));
            }
            let grid: Vec<u16> = (0..rows * cols)
                .map(|_| {
                    let r = xorshift(&mut rng) % 8;
                    if r < 3 {
                        0
                    } else {
                        (r % 4 + 1) as u16
                    }
                })
                .collect();
            let rm = RevealedMatmul::new(rows, red, cols, programs, grid, bias);
            let mut value = || {
                let r = xorshift(&mut rng);
                if r.is_multiple_of(9) {
                    0.0
                } else {
                    let m = (r >> 11) as f32 / (1u64 << 53) as f32 * 4.0 - 2.0;
                    m * 2f32.powi((r % 17) as i32 - 8)
                }
            };
            let a: Vec<f32> = (0..rows.max(red) * red.max(rows))
                .map(|_| value())
                .collect();
            let b: Vec<f32> = (0..cols.max(red) * red.max(cols))
                .map(|_| value())
                .collect();
            let bb: Vec<f32> = (0..cols).map(|_| value()).collect();
            for role in [
                Role::Forward,
                Role::ForwardBias,
                Role::GradInput,
                Role::GradWeight,
            ] {
                let bias_in = (bias && role == Role::ForwardBias).then_some(&bb[..]);
                let (mut got, mut want) = (vec![7.0f32; rows * cols], vec![7.0f32; rows * cols]);
                let mut stack = Vec::new();
                rm.run_exceptions(isa, role, &a, &b, bias_in, &mut got, &mut stack);
                rm.run_exceptions(Isa::PORTABLE, role, &a, &b, bias_in, &mut want, &mut stack);
                assert_eq!(bits32(&got), bits32(&want), "case {case}, {role:?}");
            }
        }
    }

    /// torch's generator on `isa` (the AVX-512 twist and uniform transform, the FMA
    /// Box–Muller block) against the portable one: the same draws, uniform fills and normal
    /// fills (every octant of `sincos256` over many blocks, ragged tails), for several seeds
    /// and across twists.
    fn generator_draws_equal_the_portable_ones(isa: Isa) {
        for seed in [0u64, 1, 5489, 8173, 2024, 0xdead_beef] {
            let mut fast = TorchGenerator::new(seed).on(isa);
            let mut port = TorchGenerator::new(seed).on(Isa::PORTABLE);
            for _ in 0..2000 {
                assert_eq!(fast.next_u32(), port.next_u32(), "seed {seed}");
            }
            for (len, lo, hi) in [(1, 0.0, 1.0), (621, -0.169, 0.169), (5000, -1.0 / 3.0, 0.5)] {
                let (mut g, mut w) = (vec![0.0f32; len], vec![0.0f32; len]);
                fast.uniform_(&mut g, lo, hi);
                port.uniform_(&mut w, lo, hi);
                assert_eq!(bits32(&g), bits32(&w), "uniform seed {seed} len {len}");
            }
            for len in [16, 37, 20_000 * 16] {
                let (mut g, mut w) = (vec![0.0f32; len], vec![0.0f32; len]);
                fast.normal_(&mut g, 0.25, 1.5);
                port.normal_(&mut w, 0.25, 1.5);
                assert_eq!(bits32(&g), bits32(&w), "normal seed {seed} len {len}");
            }
            assert_eq!(
                fast.next_u32(),
                port.next_u32(),
                "seed {seed} after the fills"
            );
        }
    }

    /// `p = fma(g, a, p)` on `isa` against libm's `fma`/`fmaf`, in f32 and f64.
    fn fma_update_matches_the_scalar_fma(isa: Isa) {
        let g: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 3.1).collect();
        let mut fast: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut slow = fast.clone();
        f32::fma_update_on(isa, &mut fast, &g, -0.05);
        for (w, &d) in slow.iter_mut().zip(&g) {
            *w = libm::fmaf(d, -0.05, *w);
        }
        assert_eq!(bits32(&fast), bits32(&slow));
        let g: Vec<f64> = (0..1000).map(|i| (i as f64 * 0.37).sin() * 3.1).collect();
        let mut fast: Vec<f64> = (0..1000).map(|i| (i as f64 * 0.11).cos()).collect();
        let mut slow = fast.clone();
        f64::fma_update_on(isa, &mut fast, &g, -0.05);
        for (w, &d) in slow.iter_mut().zip(&g) {
            *w = libm::fma(d, -0.05, *w);
        }
        assert_eq!(bits64(&fast), bits64(&slow));
    }

    /// The cross-entropy and embedding backward on `isa` against their portable bodies, bit
    /// for bit, in f64 and f32 on random logits, labels and ids (padding included).
    fn dispatched_layers_equal_their_portable_bodies(isa: Isa) {
        fn check<R: Real + std::fmt::Debug>(isa: Isa, seed: u64) {
            let mut state = seed;
            let mut next = move || xorshift(&mut state);
            let (t, n, dim) = (10, 67, 35);
            let unit = |r: u64| (r >> 11) as f64 / (1u64 << 53) as f64;
            let logits: Vec<R> = (0..t * n)
                .map(|_| R::from_f64(unit(next()) * 8.0 - 4.0))
                .collect();
            let labels: Vec<i64> = (0..t).map(|_| (next() % n as u64) as i64).collect();
            let (mut d1, mut d2) = (vec![R::ZERO; t * n], vec![R::ZERO; t * n]);
            let scale = R::from_f64(0.5);
            let l1 = cross_entropy_generic_on(isa, &logits, &labels, n, scale, &mut d1);
            let l2 = cross_entropy_generic_on(Isa::PORTABLE, &logits, &labels, n, scale, &mut d2);
            assert_eq!(l1.to_f64().to_bits(), l2.to_f64().to_bits());
            let same = |x: &[R], y: &[R]| {
                x.iter()
                    .zip(y)
                    .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits())
            };
            assert!(same(&d1, &d2));
            let dx: Vec<R> = (0..t * dim)
                .map(|_| R::from_f64(unit(next()) - 0.5))
                .collect();
            let ids: Vec<i64> = (0..t).map(|_| (next() % 8) as i64).collect();
            let grad0: Vec<R> = (0..n * dim)
                .map(|i| R::from_f64(if i % 7 == 0 { -0.0 } else { unit(next()) - 0.5 }))
                .collect();
            let (mut g1, mut g2) = (grad0.clone(), grad0);
            let (mut row, mut named) = (Vec::new(), Vec::new());
            embedding_backward_add_on(isa, &dx, dim, &ids, Some(3), &mut g1, &mut row, &mut named);
            embedding_backward_add_on(
                Isa::PORTABLE,
                &dx,
                dim,
                &ids,
                Some(3),
                &mut g2,
                &mut row,
                &mut named,
            );
            assert!(same(&g1, &g2));
        }
        for seed in [1, 2, 3, 0x9e37_79b9] {
            check::<f64>(isa, seed);
            check::<f32>(isa, seed);
        }
    }
}

/// Tolerances and usage: each compilation of the statistics against the definitions.
mod check_paths {
    use super::{Check, ALL, AVX512};
    use seedsweep::check::usage::{
        compare, magnitude_stats_on, max_ratio_on, max_ratio_portable, pair_kernel_applies,
        pair_stats_finite2_on, pair_stats_finite_on, pair_stats_finite_scan_on, usage_stats_on,
        PairStats,
    };
    use seedsweep::check::Tolerance;
    use seedsweep::kernels::isa::Isa;
    use seedsweep::stats::frontier::{scan_anchors_portable, AnchorScan};

    /// Elements from which the screened AVX-512 kernel seeds its maxima (`SAMPLE_FROM` in
    /// `src/check/pair_avx512.rs`).
    const SAMPLE_FROM: usize = 128;

    pub fn checks() -> Vec<Check> {
        vec![
            Check {
                name: "check::fast_stats_agree_with_the_reference_definition",
                levels: ALL,
                run: fast_stats_agree_with_the_reference_definition,
            },
            Check {
                name: "check::fast_path_agrees_with_the_definition_on_finite_data",
                levels: ALL,
                run: fast_path_agrees_with_the_definition_on_finite_data,
            },
            Check {
                name: "check::max_ratio_equals_its_definition",
                levels: AVX512,
                run: max_ratio_equals_its_definition,
            },
            Check {
                name: "check::screened_kernel_equals_the_portable_definition",
                levels: AVX512,
                run: screened_kernel_equals_the_portable_definition,
            },
            Check {
                name: "check::statistics_with_the_anchor_scan_equal_both_definitions",
                levels: AVX512,
                run: statistics_with_the_anchor_scan_equal_both_definitions,
            },
            Check {
                name: "check::counts_are_exact_at_the_rounding_edge_of_one",
                levels: AVX512,
                run: counts_are_exact_at_the_rounding_edge_of_one,
            },
            Check {
                name: "check::overflowing_differences_and_non_finite_inputs",
                levels: AVX512,
                run: overflowing_differences_and_non_finite_inputs,
            },
            Check {
                name: "check::subnormal_differences_against_the_definition",
                levels: AVX512,
                run: subnormal_differences_against_the_definition,
            },
        ]
    }

    const OLD: Tolerance = Tolerance {
        atol: 1e-6,
        rtol: 1e-5,
    };

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Pairs built to sit on the screen's edges: usages within a few ulps of 1 and of a
    /// running maximum (under either tolerance), exact zeros, equal values, magnitudes from
    /// 1e-300 to 1e300 (differences that overflow, allowances above 2¹⁰⁰⁰), and now and then
    /// a NaN or an infinity.
    fn pairs(rng: &mut XorShift, n: usize, tols: [Tolerance; 2]) -> (Vec<f64>, Vec<f64>) {
        let (mut a, mut e) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let target = 10f64.powi((rng.next() % 7) as i32 - 3) * (0.5 + rng.unit());
        for _ in 0..n {
            let r = rng.next();
            let y = match r % 5 {
                0 => 0.0,
                1 => (rng.unit() - 0.5) * 10f64.powi((rng.next() % 601) as i32 - 300),
                _ => (rng.unit() - 0.5) * 10f64.powi((rng.next() % 9) as i32 - 4),
            };
            let t = tols[(r >> 8) as usize % 2];
            let den = t.atol + t.rtol * y.abs();
            let ulps = ((rng.next() % 9) as f64 - 4.0) * f64::EPSILON;
            let x = match (r >> 16) % 11 {
                0 => y,
                1 => y + den * (1.0 + ulps),
                2 => y - den * (1.0 + ulps),
                3 => y + den * target * (1.0 + ulps),
                4 => y + den * target * (1.0 - 2.0 * f64::EPSILON),
                5 => [f64::NAN, f64::INFINITY, f64::MAX, -f64::MAX][(r >> 24) as usize % 4],
                6 => -y,
                _ => y + den * target * (rng.unit() - 0.5) * 2.0,
            };
            // Non-finite values stay rare, so that most slices are finite.
            let x = if !x.is_finite() && !rng.next().is_multiple_of(8) {
                y
            } else {
                x
            };
            a.push(x);
            e.push(y);
        }
        (a, e)
    }

    fn bits(r: Option<PairStats>) -> Option<[(u64, usize); 4]> {
        r.map(|(p, (md, me))| {
            [
                (p[0].0.to_bits(), p[0].1),
                (p[1].0.to_bits(), p[1].1),
                (md.to_bits(), 0),
                (me.to_bits(), 0),
            ]
        })
    }

    pub fn screened_kernel_equals_the_portable_definition(isa: Isa) {
        let tol_sets = [
            [OLD, Tolerance::TORCH_FP32],
            [
                Tolerance {
                    atol: 1e-3,
                    rtol: 0.0,
                },
                // A subnormal atol, and allowances that overflow to +∞.
                Tolerance {
                    atol: 2e-310,
                    rtol: 1e300,
                },
            ],
            [
                Tolerance {
                    atol: 1e-2,
                    rtol: 1e-2,
                },
                Tolerance {
                    atol: 1.0,
                    rtol: 3.0,
                },
            ],
        ];
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut finite = 0;
        for case in 0..6000 {
            let tols = tol_sets[case % tol_sets.len()];
            // Every third case long enough for the sampled seed of the maxima, some over
            // several runs of 64 blocks (512 pairs).
            let n = if case % 3 == 0 {
                SAMPLE_FROM + (rng.next() % 1200) as usize
            } else {
                (rng.next() % 70) as usize
            };
            let (mut a, e) = pairs(&mut rng, n, tols);
            if n >= SAMPLE_FROM {
                // Long slices kept finite, or nearly all would hold a NaN or an infinity
                // and give None whatever the maxima.
                for (x, &y) in a.iter_mut().zip(&e) {
                    if !x.is_finite() {
                        *x = y;
                    }
                }
            }
            assert!(pair_kernel_applies(&a, &e, tols[0], tols[1]));
            let want = pair_stats_finite_on(Isa::PORTABLE, &a, &e, tols[0], tols[1]);
            finite += want.is_some() as usize;
            let got = pair_stats_finite_on(isa, &a, &e, tols[0], tols[1]);
            assert_eq!(bits(got), bits(want), "case {case}: {a:?} {e:?}");
            // Two actual tensors against the same expected one, in one pass: a second actual
            // from its own draw, with e's values (so usages of its own) and, now and then,
            // a non-finite value in only one of the two.
            let (mut a2, _) = pairs(&mut rng, n, tols);
            for (k, x) in a2.iter_mut().enumerate() {
                let y = e[k];
                *x = y + (*x - y).clamp(-1e3, 1e3) * 0.5;
                if !x.is_finite() && case % 2 == 0 {
                    *x = y;
                }
            }
            let want2 = pair_stats_finite_on(Isa::PORTABLE, &a2, &e, tols[0], tols[1]);
            let [g1, g2] = pair_stats_finite2_on(isa, &a, &a2, &e, tols[0], tols[1]);
            assert_eq!(bits(g1), bits(want), "case {case}, fused first");
            assert_eq!(
                bits(g2),
                bits(want2),
                "case {case}, fused second: {a2:?} {e:?}"
            );
        }
        // The generator is meant to give mostly finite slices, where the screen works.
        assert!(finite > 3000, "{finite} finite cases");
    }

    /// The asserted comparison's statistics with its frontier's anchor scan in the same pass
    /// ([`crate::check::usage::pair_stats_finite_scan`]) against the two definitions one after the
    /// other: [`pair_stats_impl`] and `scan_anchors_portable`, continuing a scan of earlier
    /// pairs as a check's later steps do, over the same generated slices as above (exact
    /// zeros, usages on the screen's edges, non-finite values, differences that overflow), and
    /// from a scan that an infinite d already ended.
    pub fn statistics_with_the_anchor_scan_equal_both_definitions(isa: Isa) {
        let tols = [OLD, Tolerance::TORCH_FP32];
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        let mut scanned_finite = 0;
        for case in 0..3000 {
            let mut start = AnchorScan::default();
            // A scan already under way on an earlier slice (every fifth case: none; one in
            // fifty: an earlier infinite d).
            if case % 5 != 0 {
                let len = (rng.next() % 40) as usize;
                let (a0, e0) = pairs(&mut rng, len, tols);
                scan_anchors_portable(&a0, &e0, &mut start);
            }
            if case % 50 == 7 {
                scan_anchors_portable(&[f64::MAX], &[-f64::MAX], &mut start);
                assert!(start.is_infinite());
            }
            let n = if case % 3 == 0 {
                SAMPLE_FROM + (rng.next() % 1200) as usize
            } else {
                (rng.next() % 70) as usize
            };
            let (mut a, mut e) = pairs(&mut rng, n, tols);
            if case % 2 == 0 {
                for (x, &y) in a.iter_mut().zip(&e) {
                    if !x.is_finite() {
                        *x = y;
                    }
                }
            }
            if case % 97 == 3 && n > 0 {
                // A finite pair whose difference overflows.
                let k = (rng.next() % n as u64) as usize;
                (a[k], e[k]) = (f64::MAX, -f64::MAX);
            }
            let want = pair_stats_finite_on(Isa::PORTABLE, &a, &e, tols[0], tols[1]);
            let mut want_scan = start;
            scan_anchors_portable(&a, &e, &mut want_scan);
            let mut got_scan = start;
            let got = pair_stats_finite_scan_on(isa, &a, &e, tols[0], tols[1], &mut got_scan);
            assert_eq!(bits(got), bits(want), "case {case}");
            assert_eq!(
                format!("{got_scan:?}"),
                format!("{want_scan:?}"),
                "case {case}: {a:?} {e:?}"
            );
            scanned_finite += usize::from(want.is_some() && !want_scan.is_infinite());
        }
        assert!(scanned_finite > 1000, "{scanned_finite} finite cases");
    }

    /// The count without division at its edge: d on every float within 6 ulps of w and of 2w,
    /// counted in screened blocks (an early usage of 5 makes every later block pass the
    /// screen) and in divided ones (no such element: the first blocks set u near 1). With
    /// e = 0 the allowance is atol and d = |a| exactly. Allowances from normal to subnormal
    /// (5e-324 is the smallest subnormal, where ulp(w) = w).
    pub fn counts_are_exact_at_the_rounding_edge_of_one(isa: Isa) {
        let mut edge_counted = 0;
        for atol in [
            1e-6,
            1e-5,
            3e-7,
            1.0,
            1.9999999999999998,
            1e-300,
            3e-310,
            7.5e100,
        ] {
            let t = Tolerance { atol, rtol: 1e-5 };
            let w = atol;
            let mut d: Vec<f64> = Vec::new();
            for base in [w, w * 2.0] {
                for j in -6i64..=6 {
                    d.push(f64::from_bits((base.to_bits() as i64 + j) as u64));
                }
            }
            for lead in [None, Some(5.0 * w)] {
                let a: Vec<f64> = lead.into_iter().chain(d.iter().copied()).collect();
                let e = vec![0.0; a.len()];
                let want = pair_stats_finite_on(Isa::PORTABLE, &a, &e, t, OLD);
                let got = pair_stats_finite_on(isa, &a, &e, t, OLD);
                assert_eq!(bits(got), bits(want), "atol {atol}, lead {lead:?}");
                edge_counted += want.unwrap().0[0].1;
            }
        }
        // The edge cases are on both sides: some but not all of the 26 per run count.
        assert!(edge_counted > 0 && edge_counted < 16 * 26, "{edge_counted}");
    }

    /// Finite inputs whose difference overflows (a usage of +∞, not `None`) and non-finite
    /// values on either side.
    pub fn overflowing_differences_and_non_finite_inputs(isa: Isa) {
        let t = [OLD, Tolerance::TORCH_FP32];
        for (x, y) in [
            (f64::MAX, -f64::MAX),
            (f64::INFINITY, 1.0),
            (f64::NAN, 1.0),
            (1.0, f64::NEG_INFINITY),
            (1.0, f64::NAN),
        ] {
            let mut a = vec![0.5; 19];
            let mut e = vec![0.5; 19];
            a[11] = x;
            e[11] = y;
            let want = pair_stats_finite_on(Isa::PORTABLE, &a, &e, t[0], t[1]);
            let got = pair_stats_finite_on(isa, &a, &e, t[0], t[1]);
            assert_eq!(bits(got), bits(want), "{x} vs {y}");
        }
    }

    /// Subnormal differences, where fl(u·w − d) can round a small negative value to −0: the
    /// screen must read the sign bit, not compare with 0 (d/w can then exceed u by more than
    /// half an ulp of u).
    pub fn subnormal_differences_against_the_definition(isa: Isa) {
        // Exhaustively, two elements of 1 to 40 units of 2⁻¹⁰⁷⁴ under 64 atols in [0.5, 1):
        // the first sets u, the second is screened against it.
        for k in 0..64 {
            let t = Tolerance {
                atol: 0.5 + k as f64 / 128.0 + 1e-3,
                rtol: 1e-5,
            };
            for d0 in 1..=40u64 {
                for d1 in 1..=40u64 {
                    let a = [f64::from_bits(d0), f64::from_bits(d1)];
                    let want = pair_stats_finite_on(Isa::PORTABLE, &a, &[0.0; 2], t, OLD);
                    let got = pair_stats_finite_on(isa, &a, &[0.0; 2], t, OLD);
                    assert_eq!(bits(got), bits(want), "{d0} {d1} units, atol {}", t.atol);
                }
            }
        }
        // Cases where fl(u·w − d) is −0 while fl(d/w) > u, found by an exact-rational search
        // (atol, rtol, e₀, e₁, d₀, d₁ as bit patterns; all subnormal but rtol, so that
        // a = e + d is exact). The first block sets u from (e₀, d₀); the second block holds
        // (e₁, d₁), which a comparison of z with 0 would wrongly screen.
        for [atol, rtol, e0, e1, d0, d1] in [
            [
                0x3c3d753446f20,
                0x3fe99be1214e6fac,
                0x18e2cab,
                0xc51368,
                0x2,
                0x2,
            ],
            [
                0x70cdc22117302,
                0x3ffbee66cd091127,
                0x1e50167c,
                0xd,
                0xe,
                0xe,
            ],
            [0x11bd15fcef, 0x3ff29ab23884e2a8, 0x17ee9b, 0x16, 0xf, 0xf],
        ]
        .map(|c| c.map(f64::from_bits))
        {
            let t = Tolerance { atol, rtol };
            let (mut a, mut e) = (vec![0.0; 16], vec![0.0; 16]);
            (a[0], e[0], a[8], e[8]) = (e0 + d0, e0, e1 + d1, e1);
            assert_eq!(((a[0] - e[0]), (a[8] - e[8])), (d0, d1));
            let want = pair_stats_finite_on(Isa::PORTABLE, &a, &e, t, t);
            let got = pair_stats_finite_on(isa, &a, &e, t, t);
            assert_eq!(bits(got), bits(want), "atol {atol:e}, rtol {rtol}");
        }
        let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
        for case in 0..3000 {
            let t = Tolerance {
                atol: 0.5 + 1.5 * rng.unit(),
                rtol: 1e-5,
            };
            let n = 1 + (rng.next() % 40) as usize;
            let a: Vec<f64> = (0..n)
                .map(|_| f64::from_bits(1 + rng.next() % (1 << (1 + rng.next() % 20))))
                .collect();
            let e = vec![0.0; n];
            let want = pair_stats_finite_on(Isa::PORTABLE, &a, &e, t, OLD);
            let got = pair_stats_finite_on(isa, &a, &e, t, OLD);
            assert_eq!(bits(got), bits(want), "case {case}: {a:?}, atol {}", t.atol);
        }
    }

    pub fn fast_stats_agree_with_the_reference_definition(isa: Isa) {
        let a = [1.0, 2.0 + 1e-3, f64::NAN, 4.0, f64::INFINITY, 0.0, -3.0];
        let e = [1.0, 2.0, 3.0, 4.0, f64::INFINITY, 1e-7, f64::NEG_INFINITY];
        for tol in [
            OLD,
            Tolerance::TORCH_FP32,
            Tolerance {
                atol: 0.0,
                rtol: 0.0,
            },
        ] {
            let s = compare(&a, &e, tol);
            let (u, m, nf) = usage_stats_on(isa, &a, &e, tol);
            assert_eq!((u, m, nf), (s.usage, s.mismatched, s.nonfinite), "{tol:?}");
            assert_eq!(
                usage_stats_on(Isa::PORTABLE, &a, &e, tol),
                (u, m, nf),
                "portable path"
            );
            assert_eq!(
                magnitude_stats_on(isa, &a, &e),
                (s.max_abs_diff, s.max_abs_expected)
            );
            assert_eq!(
                magnitude_stats_on(Isa::PORTABLE, &a, &e),
                (s.max_abs_diff, s.max_abs_expected)
            );
        }
    }

    pub fn fast_path_agrees_with_the_definition_on_finite_data(isa: Isa) {
        // Finite data takes the division-only path; compare element by element with the
        // reference definition.
        let e: Vec<f64> = (0..103).map(|i| ((i as f64) * 0.37).sin() * 10.0).collect();
        let a: Vec<f64> = e
            .iter()
            .enumerate()
            .map(|(i, v)| v + (i % 7) as f64 * 3e-6)
            .collect();
        for tol in [
            OLD,
            Tolerance::TORCH_FP32,
            Tolerance {
                atol: 1e-9,
                rtol: 0.0,
            },
        ] {
            let s = compare(&a, &e, tol);
            assert_eq!(
                usage_stats_on(isa, &a, &e, tol),
                (s.usage, s.mismatched, s.nonfinite),
                "{tol:?}"
            );
            assert_eq!(
                magnitude_stats_on(isa, &a, &e),
                (s.max_abs_diff, s.max_abs_expected)
            );
        }
        for len in [0, 1, 5, 103] {
            let (a, e) = (&a[..len], &e[..len]);
            let (pair, mags) = pair_stats_finite_on(isa, a, e, OLD, Tolerance::TORCH_FP32).unwrap();
            assert_eq!(
                pair_stats_finite_on(Isa::PORTABLE, a, e, OLD, Tolerance::TORCH_FP32).unwrap(),
                (pair, mags),
                "portable path, len {len}"
            );
            assert_eq!(pair[0], usage_stats_on(isa, a, e, OLD), "len {len}");
            assert_eq!(
                pair[1],
                usage_stats_on(isa, a, e, Tolerance::TORCH_FP32),
                "len {len}"
            );
            assert_eq!(mags, magnitude_stats_on(isa, a, e), "len {len}");
        }
        assert!(pair_stats_finite_on(isa, &[f64::NAN], &[1.0], OLD, OLD).is_none());
        assert!(pair_stats_finite_on(
            isa,
            &[1.0],
            &[1.0],
            OLD,
            Tolerance {
                atol: 0.0,
                rtol: 1e-6
            }
        )
        .is_none());
    }

    /// The dispatched `max_ratio` (AVX-512 with the division screen, where the CPU has it)
    /// against its definition, bit for bit: random conditions and expectations of mixed sign
    /// and scale, runs that rise (every block raises the maximum) and fall (the screen skips
    /// almost every block), zeros, NaN and infinities, atol 0, and every length around the
    /// block size.
    pub fn max_ratio_equals_its_definition(isa: Isa) {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let specials = [
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            1e-310,
            1e300,
        ];
        let tols = [
            Tolerance {
                atol: 1e-6,
                rtol: 1e-5,
            },
            Tolerance {
                atol: 0.0,
                rtol: 1.3e-6,
            },
            Tolerance {
                atol: 1e-5,
                rtol: 0.0,
            },
            Tolerance {
                atol: 0.0,
                rtol: 0.0,
            },
        ];
        let mut cases = 0;
        for len in (0..40).chain([255, 256, 257, 1000]) {
            for shape in 0..4 {
                let mut cond = Vec::with_capacity(len);
                let mut exp = Vec::with_capacity(len);
                for i in 0..len {
                    let r = next();
                    let scale = f64::powi(2.0, (r % 40) as i32 - 20);
                    let unit = (next() >> 11) as f64 / (1u64 << 53) as f64;
                    let (c, e) = match shape {
                        0 => (unit * scale, (unit - 0.5) * scale),
                        1 => (i as f64 + unit, 1.0),
                        2 => ((len - i) as f64 + unit, 1.0),
                        _ => (
                            if r % 5 == 0 {
                                specials[(r / 5 % 7) as usize].abs()
                            } else {
                                unit
                            },
                            if r % 3 == 0 {
                                specials[(r / 3 % 7) as usize]
                            } else {
                                unit - 0.5
                            },
                        ),
                    };
                    cond.push(c);
                    exp.push(e);
                }
                for t in tols {
                    let (got, want) = (
                        max_ratio_on(isa, &cond, &exp, t),
                        max_ratio_portable(&cond, &exp, t),
                    );
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "len {len} shape {shape} {t:?}"
                    );
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 44 * 4 * 4);
    }
}

/// Statistics: the GPD fit's vector sums and lanes, and the frontier's vector passes.
mod stats_paths {
    use super::{Check, Rng, AVX512, VECTOR};
    use seedsweep::kernels::isa::Isa;
    use seedsweep::stats::frontier::{
        keep_pairs_on, keep_pairs_portable, pair_point, scan_anchors_on, scan_anchors_portable,
        scan_pairs_on, scan_pairs_portable, screen_both_on, staircase_by_sorting,
        staircase_in_place_on, AnchorScan,
    };
    use seedsweep::stats::gpd_sums::{
        excess_sum_on, excess_sum_portable, log_lanes_on, phi_sum_on, phi_sum_portable,
    };

    pub fn checks() -> Vec<Check> {
        vec![
            Check {
                name: "gpd_sums::lane_log1p_is_libm_log1p",
                levels: AVX512,
                run: lane_log1p_is_libm_log1p,
            },
            Check {
                name: "gpd_sums::lane_log_is_libm_log",
                levels: AVX512,
                run: lane_log_is_libm_log,
            },
            Check {
                name: "gpd_sums::excess_sum_equals_its_definition",
                levels: AVX512,
                run: excess_sum_equals_its_definition,
            },
            Check {
                name: "gpd_sums::phi_sum_equals_its_definition",
                levels: AVX512,
                run: phi_sum_equals_its_definition,
            },
            Check {
                name: "frontier::the_screen_equals_its_definition",
                levels: AVX512,
                run: the_screen_equals_its_definition,
            },
            Check {
                name: "frontier::streamed_passes_and_staircase_equal_the_portable_ones",
                levels: VECTOR,
                run: streamed_passes_and_staircase_equal_the_portable_ones,
            },
        ]
    }

    /// Uniform exponents: `count` values 2^(lo + span·u), u uniform in [0, 1), negated when
    /// `signed` and the draw says so (an xorshift stream from `seed`).
    fn log_spaced(seed: u64, count: usize, lo: f64, span: f64, signed: bool) -> Vec<f64> {
        let mut s = seed;
        (0..count)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let mag = 2f64.powf((s >> 11) as f64 / (1u64 << 53) as f64 * span + lo);
                if signed && s & 1 == 1 {
                    -mag
                } else {
                    mag
                }
            })
            .collect()
    }

    /// The 16 floats around `x` (8 ulps below to 7 above).
    fn ulps_around(x: f64) -> impl Iterator<Item = f64> {
        (x.to_bits() - 8..x.to_bits() + 8).map(f64::from_bits)
    }

    /// 4096 floats of one high word `hw`, spread over its low words.
    fn high_word(hw: u64) -> impl Iterator<Item = f64> {
        (0..4096u64)
            .map(move |j| f64::from_bits(hw << 32 | (j.wrapping_mul(0x9E37_79B9) & 0xffff_ffff)))
    }

    /// The lanes on `isa` over `xs` (log1p or log), each equal to libm's bit for bit.
    fn assert_lanes(isa: Isa, xs: &[f64], log1p: bool, name: &str) {
        let mut got = xs.to_vec();
        log_lanes_on(isa, log1p, &mut got);
        for (x, y) in xs.iter().zip(got) {
            let want = if log1p {
                libm::log1p(*x)
            } else {
                libm::log(*x)
            };
            assert_eq!(
                y.to_bits(),
                want.to_bits(),
                "{name}({x:e}) = {y:e}, libm {want:e}"
            );
        }
    }

    /// `log1p` lane by lane against `libm::log1p`, bit for bit: log-spaced magnitudes of both
    /// signs from 2⁻⁵³ to 10³⁰⁰ (x > −1), and a few ulps around every branch point of the
    /// scalar code (the k = 0 bounds, k = 2, k = 54, and −1).
    pub fn lane_log1p_is_libm_log1p(isa: Isa) {
        let mut xs = log_spaced(0x2545_F491_4F6C_DD1D, 400_000, -53.0, 1050.0, true);
        let edges = [
            f64::from_bits(0x3fda_827a_0000_0000),
            -f64::from_bits(0x3fd2_bec4_0000_0000),
            -f64::from_bits(0x3fd2_bec5_0000_0000),
            2f64.sqrt() * 2.0 - 1.0,
            2f64.powi(53),
            2f64.powi(54),
            -1.0 + f64::EPSILON,
            2f64.powi(-53),
            1e-4,
            -1e-4,
        ];
        xs.extend(edges.into_iter().flat_map(ulps_around));
        // Whole high words next to the k = 0 bounds: both reductions are accurate, so they
        // agree on most inputs, and only many low words tell them apart.
        for hw in [0x3fda_8279u64, 0x3fda_827a, 0xbfd2_bec4, 0xbfd2_bec5] {
            xs.extend(high_word(hw));
        }
        xs.retain(|&x| x > -1.0 && x.is_finite());
        assert_lanes(isa, &xs, true, "log1p");
    }

    /// The sum against its definition: GPD-like excesses at shapes across [−0.5, 2] (the fit
    /// range), ξ = 0, scales that put terms on both sides of the series cutoff, values past
    /// the support's end (None), and NaN or infinite values (the portable fallback).
    pub fn excess_sum_equals_its_definition(isa: Isa) {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut nones = 0;
        for case in 0..3000 {
            let n = (next() * 90.0) as usize;
            let shift = if case % 3 == 0 { 0.0 } else { next() };
            let mut values: Vec<f64> = (0..n)
                .map(|_| shift + (-libm::log(1.0 - next())) * 10f64.powi((case % 7) as i32 - 3))
                .collect();
            if case % 50 == 7 && n > 3 {
                values[n / 2] = [f64::NAN, f64::INFINITY][case % 2];
            }
            let xi = [-0.5, -0.2, 0.0, 1e-9, 0.1, 0.7, 2.0][case % 7];
            let sigma = 10f64.powi((case % 11) as i32 - 5) * (0.5 + next());
            let want = excess_sum_portable(&values, shift, xi, sigma);
            let got = excess_sum_on(isa, &values, shift, xi, sigma);
            nones += want.is_none() as usize;
            assert_eq!(
                got.map(f64::to_bits),
                want.map(f64::to_bits),
                "case {case}: xi {xi} sigma {sigma}"
            );
        }
        // Negative shapes with small scales leave the support in some cases, not in all.
        assert!(nones > 0 && nones < 1500, "{nones} outside the support");
    }

    /// `log` lane by lane against `libm::log`, bit for bit: log-spaced normal positive
    /// inputs over the whole exponent range, whole high words around the reduction's bound
    /// √2/2 and around 1, and a few ulps around 1, 2, √2 and the smallest normal.
    pub fn lane_log_is_libm_log(isa: Isa) {
        let mut xs = log_spaced(0x5DEE_CE66_D1CE_4E5B, 400_000, -1021.0, 2044.0, false);
        for hw in [
            0x3fe6_a09du64,
            0x3fe6_a09e,
            0x3fef_ffff,
            0x3ff0_0000,
            0x3ff6_a09e,
        ] {
            xs.extend(high_word(hw));
        }
        let edges = [
            1.0,
            2.0,
            2f64.sqrt(),
            f64::MIN_POSITIVE * 16.0,
            f64::MAX / 2.0,
        ];
        xs.extend(edges.into_iter().flat_map(ulps_around));
        assert_lanes(isa, &xs, false, "log");
    }

    /// The profile sum against its definition in all three branches of `ln1p_phi_z` (s > 1,
    /// −1 < s ≤ 1 with s down to 1e-300, s ≤ −1; s = ±1 exactly), with normalized excesses
    /// holding exact zeros and ones, tiny and huge s (arguments of `log` that underflow: the
    /// portable fallback), and NaN.
    pub fn phi_sum_equals_its_definition(isa: Isa) {
        let mut st = 0xD1B5_4A32_D192_ED03u64;
        let mut next = || {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            (st >> 11) as f64 / (1u64 << 53) as f64
        };
        let ss = [
            -1e300,
            -800.0,
            -40.0,
            -3.0,
            -1.0,
            -0.999,
            -0.3,
            -1e-9,
            -1e-300,
            0.0,
            1e-300,
            1e-17,
            0.2,
            1.0,
            1.0000001,
            2.5,
            30.0,
            750.0,
            1e300,
            f64::NAN,
        ];
        for case in 0..3000 {
            let n = (next() * 70.0) as usize;
            let shift = if case % 2 == 0 { 0.0 } else { next() * 3.0 };
            let mut ys: Vec<f64> = (0..n).map(|_| -libm::log(1.0 - next())).collect();
            if n > 2 {
                ys[case % n] = 0.0;
            }
            let values: Vec<f64> = ys.iter().map(|y| shift + y).collect();
            // As the fit computes it: z = 1 exactly at the largest excess.
            let ymax = values.iter().map(|v| v - shift).fold(0.0f64, f64::max);
            if ymax <= 0.0 {
                continue;
            }
            let s = ss[case % ss.len()];
            let want = phi_sum_portable(&values, shift, ymax, s);
            let got = phi_sum_on(isa, &values, shift, ymax, s);
            assert_eq!(got.to_bits(), want.to_bits(), "case {case}: s {s}, n {n}");
        }
    }

    /// Pairs on the frontier's edges: exact zeros, equal values, magnitudes from 1e-300 to
    /// 1e300, differences a few ulps apart, NaN and infinities now and then.
    fn frontier_pairs(rng: &mut Rng, n: usize) -> (Vec<f64>, Vec<f64>) {
        let (mut a, mut e) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let r = rng.next_u64();
            let y = match r % 6 {
                0 => 0.0,
                1 => (rng.unit() - 0.5) * 10f64.powi((rng.below(601) as i32) - 300),
                _ => (rng.unit() - 0.5) * 10f64.powi(rng.below(9) as i32 - 4),
            };
            let x = match (r >> 8) % 9 {
                0 => y,
                1 => -y,
                2 => [f64::NAN, f64::INFINITY, -f64::INFINITY][rng.below(3)],
                3 => y * (1.0 + f64::EPSILON * rng.below(9) as f64),
                _ => y + (rng.unit() - 0.5) * 1e-5 * (1.0 + y.abs()),
            };
            a.push(x);
            e.push(y);
        }
        (a, e)
    }

    /// The frontier's passes on `isa` against their portable definitions, point for point
    /// and anchor for anchor: `scan_pairs` (AVX2), `scan_anchors` and `keep_pairs` (AVX-512F,
    /// with and without anchors, continuing an earlier scan), and the insertion staircase
    /// (AVX-512F) against the staircase by sorting, on slices of every length to 300.
    /// Expected values over many binades (or, `narrow`, over four, so that many share a
    /// table index), actual values a few ulps off, some equal, some zero, and (with `odd`)
    /// NaNs and infinities.
    fn screen_pairs(rng: &mut Rng, n: usize, narrow: bool, odd: bool) -> (Vec<f64>, Vec<f64>) {
        (0..n)
            .map(|_| {
                let bits = rng.next_u64();
                let ulps = (rng.next_u64() % 256) as i64 - 128;
                let kind = rng.next_u64() % 16;
                let e = if narrow {
                    f64::from_bits(0x3ff0_0000_0000_0000 + bits % 0x0040_0000_0000_0000)
                } else {
                    f64::from_bits(bits % 0x4100_0000_0000_0000)
                };
                let a = f64::from_bits(e.to_bits().wrapping_add_signed(ulps));
                match kind {
                    0 => (e, e),
                    1 => (a, 0.0),
                    2 if odd => (f64::NAN, e),
                    3 if odd => (a, f64::INFINITY),
                    4 => (-a, -e),
                    _ => (a, e),
                }
            })
            .unzip()
    }

    /// The streamed frontier's screen on `isa` keeps the points its definition keeps, in
    /// order, against the table of another set's staircase (300 random cases of up to 300
    /// pairs, narrow and wide exponent ranges, with and without NaN and infinities).
    fn the_screen_equals_its_definition(isa: Isa) {
        let mut rng = Rng(0x5c2e);
        for case in 0..300 {
            let (narrow, odd) = (case % 2 == 0, case % 3 == 0);
            let n = rng.below(300);
            let (a, e) = screen_pairs(&mut rng, n, narrow, odd);
            let m = rng.below(40);
            let (sa, se) = screen_pairs(&mut rng, m, narrow, false);
            let mut stairs: Vec<_> = sa
                .iter()
                .zip(&se)
                .map(|(&x, &y)| pair_point(x, y))
                .collect();
            stairs.retain(|q| q.0 > 0.0);
            staircase_by_sorting(&mut stairs);
            let [got, want] = screen_both_on(isa, &a, &e, &stairs);
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "case {case}");
        }
    }

    fn streamed_passes_and_staircase_equal_the_portable_ones(isa: Isa) {
        let mut rng = Rng(0x51ce);
        for case in 0..1500 {
            let n = if case % 10 == 0 {
                200 + rng.below(2000)
            } else {
                rng.below(300)
            };
            let (a, e) = frontier_pairs(&mut rng, n);
            let cut = rng.below(n + 1);
            let what = format!("case {case}, n {n}, on {isa:?}");
            let (mut s1, mut s2) = (AnchorScan::default(), AnchorScan::default());
            let (mut p1, mut p2) = (Vec::new(), Vec::new());
            scan_pairs_on(isa, &a[..cut], &e[..cut], &mut s1, &mut p1);
            scan_pairs_on(isa, &a[cut..], &e[cut..], &mut s1, &mut p1);
            scan_pairs_portable(&a[..cut], &e[..cut], &mut s2, &mut p2);
            scan_pairs_portable(&a[cut..], &e[cut..], &mut s2, &mut p2);
            let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
                v.iter().map(|q| (q.0.to_bits(), q.1.to_bits())).collect()
            };
            assert_eq!(bits(&p1), bits(&p2), "scan_pairs points {what}");
            let (f1, f2) = (s1.finish(), s2.finish());
            assert_eq!(
                format!("{f1:?}"),
                format!("{f2:?}"),
                "scan_pairs anchors {what}"
            );
            let (mut s1, mut s2) = (AnchorScan::default(), AnchorScan::default());
            scan_anchors_on(isa, &a[..cut], &e[..cut], &mut s1);
            scan_anchors_on(isa, &a[cut..], &e[cut..], &mut s1);
            scan_anchors_portable(&a[..cut], &e[..cut], &mut s2);
            scan_anchors_portable(&a[cut..], &e[cut..], &mut s2);
            let (f1, f2) = (s1.finish(), s2.finish());
            assert_eq!(format!("{f1:?}"), format!("{f2:?}"), "scan_anchors {what}");
            let finite = p2.iter().copied().filter(|q| q.0.is_finite() && q.0 > 0.0);
            let cloud = seedsweep::stats::frontier::Anchors::of(finite);
            for an in [f2.as_ref(), cloud.as_ref(), None] {
                let (mut k1, mut k2) = (vec![(1.0, 2.0)], vec![(1.0, 2.0)]);
                keep_pairs_on(isa, &a, &e, an, &mut k1);
                keep_pairs_portable(&a, &e, an, &mut k2);
                assert_eq!(format!("{k1:?}"), format!("{k2:?}"), "keep_pairs {what}");
            }
            let mut pts: Vec<(f64, f64)> = p2.iter().copied().filter(|q| q.0 > 0.0).collect();
            let mut want = pts.clone();
            staircase_by_sorting(&mut want);
            staircase_in_place_on(isa, &mut pts);
            assert_eq!(format!("{pts:?}"), format!("{want:?}"), "staircase {what}");
        }
    }
}

/// The frontier's vector passes (`src/stats/frontier/simd.rs` and `avx512.rs`) against their
/// portable definitions, on the edges of their tests.
mod frontier_paths {
    use super::{Check, AVX512, VECTOR};
    use seedsweep::kernels::isa::Isa;
    use seedsweep::stats::frontier::{
        keep_pairs_on, keep_pairs_portable, scan_anchors_on, scan_anchors_portable, scan_pairs_on,
        scan_pairs_portable, AnchorScan, Anchors, HULL_MARGIN,
    };

    pub fn checks() -> Vec<Check> {
        vec![
            Check {
                name: "frontier::vector_passes_equal_the_portable_definitions",
                levels: VECTOR,
                run: vector_passes_equal_the_portable_definitions,
            },
            Check {
                name: "frontier::keep_pairs_on_its_tests_boundaries_equals_its_definition",
                levels: AVX512,
                run: keep_pairs_on_its_tests_boundaries_equals_its_definition,
            },
            Check {
                name: "frontier::keep_pairs_around_its_block_screen_equals_its_definition",
                levels: AVX512,
                run: keep_pairs_around_its_block_screen_equals_its_definition,
            },
            Check {
                name: "frontier::two_pass_kernels_equal_their_definitions",
                levels: AVX512,
                run: two_pass_kernels_equal_their_definitions,
            },
            Check {
                name:
                    "frontier::without_anchors_equal_pairs_keep_nothing_and_one_difference_counts",
                levels: AVX512,
                run: without_anchors_equal_pairs_keep_nothing_and_one_difference_counts,
            },
            Check {
                name: "frontier::an_infinite_best_ratio_leaves_later_points_seen",
                levels: AVX512,
                run: an_infinite_best_ratio_leaves_later_points_seen,
            },
        ]
    }

    /// Pairs mixing equal values, NaN and infinities on either side, zeros, tiny and huge
    /// magnitudes, repeated points and ties in ratio.
    fn pairs(seed: u64, n: usize) -> (Vec<f64>, Vec<f64>) {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let special = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e-300,
            2.0,
        ];
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let r = next();
            let y = match r % 7 {
                0 => special[(r >> 8) as usize % special.len()],
                1 => ((r >> 8) % 5) as f64,
                _ => {
                    ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 10f64.powi((r % 9) as i32 - 4)
                }
            };
            let r2 = next();
            let x = match r2 % 6 {
                0 => y,
                1 => special[(r2 >> 8) as usize % special.len()],
                2 => y * 2.0,
                3 => ((r2 >> 8) % 5) as f64,
                _ => y + ((r2 >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e-6 * y.abs().max(1e-3),
            };
            a.push(x);
            e.push(y);
        }
        (a, e)
    }

    pub fn vector_passes_equal_the_portable_definitions(isa: Isa) {
        for seed in 0..400u64 {
            let n = (seed as usize * 7) % 67;
            let (a, e) = pairs(seed, n);
            // Two runs offered in order (a check of two slots), into a scan that may already
            // hold points.
            let cut = n / 3;
            let (mut s1, mut s2) = (AnchorScan::default(), AnchorScan::default());
            let (mut p1, mut p2) = (Vec::new(), Vec::new());
            if seed % 3 == 0 {
                s1.add((0.5, 0.25));
                s2.add((0.5, 0.25));
            }
            scan_pairs_on(isa, &a[..cut], &e[..cut], &mut s1, &mut p1);
            scan_pairs_on(isa, &a[cut..], &e[cut..], &mut s1, &mut p1);
            scan_pairs_portable(&a[..cut], &e[..cut], &mut s2, &mut p2);
            scan_pairs_portable(&a[cut..], &e[cut..], &mut s2, &mut p2);
            let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
                v.iter().map(|q| (q.0.to_bits(), q.1.to_bits())).collect()
            };
            assert_eq!(bits(&p1), bits(&p2), "points, seed {seed}");
            let (f1, f2) = (s1.finish(), s2.finish());
            assert_eq!(format!("{f1:?}"), format!("{f2:?}"), "anchors, seed {seed}");
            // The filter, with these anchors and with anchors from a finite cloud (the
            // random pairs often hold an infinite d, which leaves no anchors).
            let finite: Vec<(f64, f64)> = p2.iter().copied().filter(|q| q.0.is_finite()).collect();
            for an in [f1, Anchors::of(finite.iter().copied())]
                .into_iter()
                .flatten()
            {
                for pts in [&p2, &finite] {
                    let mut v = pts.clone();
                    an.retain_on(isa, &mut v);
                    let want: Vec<_> = pts.iter().copied().filter(|&q| an.keep(q)).collect();
                    assert_eq!(bits(&v), bits(&want), "retain, seed {seed} {an:?}");
                }
            }
        }
    }

    /// The points [`keep_pairs`] keeps under `an`, checked bit for bit against its portable
    /// definition.
    fn kept_by_both(isa: Isa, a: &[f64], e: &[f64], an: &Anchors) -> Vec<(f64, f64)> {
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        keep_pairs_on(isa, a, e, Some(an), &mut fast);
        keep_pairs_portable(a, e, Some(an), &mut slow);
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|q| (q.0.to_bits(), q.1.to_bits())).collect()
        };
        assert_eq!(bits(&fast), bits(&slow));
        slow
    }

    /// The keep pass on the edges of its tests, against its definition: anchors
    /// p₀ = (d, e) = (1, 0.25) (the largest d/e) and p* = (2, 1) (the largest d); points
    /// between them at, one ulp above and one ulp below the chord test's boundary km·h, at
    /// and around h itself, and around the below-p₀ test's two boundaries (d = km·d₀ and
    /// d·e₀ = km·d₀·e), each duplicated, plus copies of the anchors. Each point is the pair
    /// (d − e, −e) with e < d a multiple of d's ulp, so that the pair gives exactly (d, e).
    pub fn keep_pairs_on_its_tests_boundaries_equals_its_definition(isa: Isa) {
        let km = 1.0 - HULL_MARGIN;
        let (p0, ps) = ((1.0f64, 0.25f64), (2.0f64, 1.0f64));
        let q52 = |x: f64| (x * 2f64.powi(52)).round() / 2f64.powi(52);
        let q53 = |x: f64| (x * 2f64.powi(53)).round() / 2f64.powi(53);
        let around = |x: f64| [x.next_down().next_down(), x.next_down(), x, x.next_up()];
        let mut pts = vec![p0, ps, p0, ps];
        for k in 1..200 {
            let e = q52(0.25 + 0.75 * k as f64 / 200.0);
            let t = (e - p0.1) / (ps.1 - p0.1);
            let h = p0.0 + (ps.0 - p0.0) * t;
            for d in around(km * h).into_iter().chain(around(h)) {
                pts.push((d, e));
            }
            // Below p₀: d around km·d₀, and e around the ray's boundary km·d₀·e = d·e₀.
            let d = 0.5 + 0.5 * k as f64 / 200.0;
            for dd in around(km * p0.0) {
                pts.push((dd, q53(0.3)));
            }
            let e_ray = q53(d * p0.1 / (km * p0.0));
            for ee in [e_ray - 2f64.powi(-53), e_ray, e_ray + 2f64.powi(-53)] {
                pts.push((d, ee));
            }
        }
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for &(d, ee) in &pts {
            let (x, y) = (d - ee, -ee);
            assert_eq!((x - y).abs(), d, "the pair gives d exactly");
            for _ in 0..2 {
                a.push(x);
                e.push(y);
            }
        }
        let mut scan = AnchorScan::default();
        scan_anchors_portable(&a, &e, &mut scan);
        let an = scan.finish().expect("anchors");
        assert_eq!(an.points(), (p0, ps), "the intended anchors");
        let slow = kept_by_both(isa, &a, &e, &an);
        // Both sides of each boundary occur: some points are kept, some dropped.
        assert!(
            !slow.is_empty() && slow.len() < a.len() / 2,
            "{}",
            slow.len()
        );
    }

    /// The keep pass's block screen (`avx512::keep_finite`) against the definition, on
    /// points around the screen's own edges: below p₀'s ray and below the chord by factors
    /// c = 1 − 2⁻⁴⁰ give or take a few ulps (dropped by the test either way), d exactly d₀
    /// and one ulp either side with e between the anchors (d = d₀ is kept: neither below
    /// p₀ nor strictly between the anchors), e at the screen range's ends 2^±200, and a kept
    /// point now and then among blocks of dropped ones, over several runs of 64 blocks.
    pub fn keep_pairs_around_its_block_screen_equals_its_definition(isa: Isa) {
        let (p0, ps) = ((1.0f64, 0.25f64), (2.0f64, 1.0f64));
        let c = 1.0 - 2f64.powi(-40);
        let around = |x: f64| {
            [
                x.next_down().next_down(),
                x.next_down(),
                x,
                x.next_up(),
                x.next_up().next_up(),
            ]
        };
        let q = |x: f64, ulp: f64| (x / ulp).round() * ulp;
        let mut pts = vec![p0, ps];
        for k in 1..400 {
            let f = k as f64 / 400.0;
            // Left of p₀: the ray d = r₀·e.
            let e = q(0.25 * f, 2f64.powi(-56));
            for d in around(c * 4.0 * e) {
                pts.push((d, e));
            }
            // Between the anchors: the chord, d = d₀ and its neighbours.
            let e = q(0.25 + 0.75 * f, 2f64.powi(-54));
            let h = 1.0 + (e - 0.25) / 0.75;
            for d in around(c * h).into_iter().chain(around(p0.0)) {
                pts.push((d, e));
            }
            // Right of p*: under d* (dominated) and at it.
            for d in around(c * ps.0) {
                pts.push((d, q(1.0 + f, 2f64.powi(-52))));
            }
            // Far below (a block the screen skips), then now and then a kept point.
            for j in 0..16 {
                pts.push((0.25 * f, q(0.3 + 0.001 * j as f64, 2f64.powi(-54))));
            }
            if k % 7 == 0 {
                // Above the chord (kept), with a ratio below r₀ = 4 and d below d* = 2.
                let e = q(0.4 + 0.5 * f, 2f64.powi(-54));
                let h = 1.0 + (e - 0.25) / 0.75;
                pts.push((q(h * 1.001, 2f64.powi(-52)), e));
            }
        }
        // e at the ends of the screen's range: below the ray, and dominated by p*.
        for ee in around(2f64.powi(-200)) {
            pts.push((ee * 1e-3, ee));
        }
        for ee in around(2f64.powi(200)) {
            pts.push((0.5, ee));
        }
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for &(d, ee) in &pts {
            // The pair (ee + d, ee) gives d exactly when it is exact, as it is for these
            // multiples of small powers of two; pairs where it is not are kept as they are
            // (both sides still see the same pair).
            a.push(ee + d);
            e.push(ee);
        }
        let mut scan = AnchorScan::default();
        scan_anchors_portable(&a, &e, &mut scan);
        let an = scan.finish().expect("anchors");
        let slow = kept_by_both(isa, &a, &e, &an);
        // Kept points and dropped ones, d = d₀ between the anchors among the kept.

        assert!(
            slow.len() > 400 && slow.len() < a.len() / 4,
            "{}",
            slow.len()
        );
        let p0 = an.points().0;
        assert!(slow.iter().any(|q| q.0 == p0.0 && q.1 > p0.1));
        assert!(slow
            .iter()
            .any(|q| q.1 >= 0.4 && q.0 > 1.0005 * (1.0 + (q.1 - 0.25) / 0.75)));
    }

    /// Finite pairs on the anchor screen's edges: ratios d/e within a few ulps of each
    /// other (the best-ratio test), differences equal to the largest so far (the p* test),
    /// exact zeros in d and in e, and magnitudes from 1e-300 to 1e300.
    fn finite_pairs(seed: u64, n: usize) -> (Vec<f64>, Vec<f64>) {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let ratio = 10f64.powi((next() % 9) as i32 - 4);
        let (mut a, mut e) = (Vec::new(), Vec::new());
        for k in 0..n {
            let r = next();
            let y = match r % 6 {
                0 => 0.0,
                1 => ((r >> 8) % 5) as f64 - 2.0,
                2 => {
                    (((r >> 11) as f64) / (1u64 << 53) as f64 - 0.5)
                        * 10f64.powi((r % 601) as i32 - 300)
                }
                _ => {
                    (((r >> 11) as f64) / (1u64 << 53) as f64 - 0.5)
                        * 10f64.powi((r % 7) as i32 - 3)
                }
            };
            let r2 = next();
            let ulps = ((r2 >> 8) % 7) as f64 - 3.0;
            let x = match r2 % 7 {
                0 => y,
                1 => y + y.abs() * ratio * (1.0 + ulps * f64::EPSILON),
                2 => y - y.abs() * ratio,
                3 => y + (k % 3) as f64 * 1e-3,
                4 => ((r2 >> 16) % 3) as f64,
                _ => {
                    y + (((r2 >> 11) as f64) / (1u64 << 53) as f64 - 0.5)
                        * ratio
                        * y.abs().max(1e-6)
                }
            };
            a.push(x);
            e.push(y);
        }
        (a, e)
    }

    pub fn two_pass_kernels_equal_their_definitions(isa: Isa) {
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|q| (q.0.to_bits(), q.1.to_bits())).collect()
        };
        for seed in 0..3000u64 {
            let n = (seed as usize * 13) % 150;
            let (a, e) = if seed % 4 == 0 {
                pairs(seed, n)
            } else {
                finite_pairs(seed, n)
            };
            let cut = (seed as usize % 5) * n / 5;
            let (mut s1, mut s2) = (AnchorScan::default(), AnchorScan::default());
            if seed % 3 == 0 {
                s1.add((0.5, 0.25));
                s2.add((0.5, 0.25));
            }
            scan_anchors_on(isa, &a[..cut], &e[..cut], &mut s1);
            scan_anchors_on(isa, &a[cut..], &e[cut..], &mut s1);
            scan_anchors_portable(&a[..cut], &e[..cut], &mut s2);
            scan_anchors_portable(&a[cut..], &e[cut..], &mut s2);
            assert_eq!(format!("{s1:?}"), format!("{s2:?}"), "scan, seed {seed}");
            let an = s2.finish();
            let (mut p1, mut p2) = (vec![(9.0, 9.0)], vec![(9.0, 9.0)]);
            keep_pairs_on(isa, &a, &e, an.as_ref(), &mut p1);
            keep_pairs_portable(&a, &e, an.as_ref(), &mut p2);
            assert_eq!(bits(&p1), bits(&p2), "kept, seed {seed}");
            // And the same as buffering every point and filtering (the one-pass form).
            let (mut s3, mut p3) = (AnchorScan::default(), Vec::new());
            if seed % 3 == 0 {
                s3.add((0.5, 0.25));
            }
            scan_pairs_portable(&a, &e, &mut s3, &mut p3);
            s3.filter(&mut p3);
            assert_eq!(bits(&p1[1..]), bits(&p3), "filtered, seed {seed}");
        }
    }

    /// Without anchors, pairs that are all equal (±0 and ±∞ included) keep no point, and
    /// one pair that differs anywhere (by an ulp, or a NaN on either side, which never
    /// equals) sends the pass to the definition: the vector pass against it.
    pub fn without_anchors_equal_pairs_keep_nothing_and_one_difference_counts(isa: Isa) {
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|p| (p.0.to_bits(), p.1.to_bits())).collect()
        };
        for n in [0usize, 1, 7, 8, 9, 16, 61] {
            let e: Vec<f64> = (0..n)
                .map(|i| match i % 5 {
                    0 => 0.0,
                    1 => f64::INFINITY,
                    2 => -1.5 * i as f64,
                    _ => 1e-3 * i as f64,
                })
                .collect();
            let mut a = e.clone();
            a.iter_mut().step_by(3).for_each(|x| {
                if *x == 0.0 {
                    *x = -0.0;
                }
            });
            let (mut p1, mut p2) = (vec![(9.0, 9.0)], vec![(9.0, 9.0)]);
            keep_pairs_on(isa, &a, &e, None, &mut p1);
            keep_pairs_portable(&a, &e, None, &mut p2);
            assert_eq!(bits(&p1), bits(&p2), "equal, n {n}");
            assert_eq!(p1.len(), 1, "equal pairs keep nothing, n {n}");
            for at in (0..n).step_by(4) {
                for (x, y) in [
                    (f64::from_bits(e[at].to_bits() + 1), e[at]),
                    (f64::NAN, e[at]),
                    (a[at], f64::NAN),
                ] {
                    let (mut a2, mut e2) = (a.clone(), e.clone());
                    (a2[at], e2[at]) = (x, y);
                    let (mut p1, mut p2) = (Vec::new(), Vec::new());
                    keep_pairs_on(isa, &a2, &e2, None, &mut p1);
                    keep_pairs_portable(&a2, &e2, None, &mut p2);
                    assert_eq!(bits(&p1), bits(&p2), "n {n}, at {at}, ({x}, {y})");
                    assert!(!p1.is_empty(), "n {n}, at {at}: the differing pair is kept");
                }
            }
        }
    }

    /// A best ratio d/e that overflows to +∞ (d = 1 over a subnormal e) and later points
    /// with e = 0 (below p*, so only the e = 0 flag records them) or a subnormal e: the
    /// vector scan must still see them. (Its screen once compared ratios with the bound
    /// +∞ − +∞ = NaN and let such a block through as quiet, leaving the flag unset.)
    pub fn an_infinite_best_ratio_leaves_later_points_seen(isa: Isa) {
        let tiny = 1e-320;
        for later in [(0.5, 0.0), (0.25, 0.0), (0.75, 3e-321), (2.0, 5e-324)] {
            for at in [8, 9, 15, 16, 40] {
                let mut a = vec![0.5; at + 3];
                let mut e = a.clone();
                (a[1], e[1]) = (1.0 + tiny, tiny);
                (a[at], e[at]) = (later.0 + later.1, later.1);
                let (mut fast, mut slow) = (AnchorScan::default(), AnchorScan::default());
                scan_anchors_on(isa, &a, &e, &mut fast);
                scan_anchors_portable(&a, &e, &mut slow);
                assert!(slow.best_ratio() == Some(f64::INFINITY));
                assert_eq!(
                    format!("{fast:?}"),
                    format!("{slow:?}"),
                    "{later:?} at {at}"
                );
            }
        }
    }
}
