//! Revealed MKL orders against torch: `configs/revealed/mkl-threads-{1,2}.toml` (revealed by
//! `scripts/reveal_order.py` with torch 2.15.0 (MKL), AVX512 capability, x86-64, at
//! `torch.set_num_threads(N)`) executed by `seedsweep::kernels::revealed` must reproduce
//! torch's outputs on the SplitMix64 inputs recorded in `tests/data/mkl_threads_*_validation.toml`
//! (one input set per role and shape of the built-in T1/T2 scenarios: 63 matmuls, 50,245
//! elements per thread count) bit for bit. The one-thread FMA chain of `cpu-fma` is checked
//! against both, so the test also shows what the thread count changes.

use seedsweep::kernels::matmul::{Mat, MatMut, MatmulScratch};
use seedsweep::kernels::revealed::Role;
use seedsweep::scenario::profile::ProfileRegistry;
use seedsweep::scenario::revealed_file::RevealedOrders;
use serde::Deserialize;

#[derive(Deserialize)]
struct Validation {
    threads: u32,
    case: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    role: String,
    rows: usize,
    red: usize,
    cols: usize,
    seed: u64,
    out: String,
}

/// SplitMix64 (Steele, Lea, Flood 2014), as `scripts/reveal_order.py` draws its inputs.
pub(crate) fn draw(seed: u64, count: usize) -> Vec<f32> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let (u, e) = ((z >> 40) as f64, ((z >> 8) & 7) as i32);
            // Exact: a 24-bit integer times a power of two.
            ((u - 8_388_608.0) * 2f64.powi(e - 26)) as f32
        })
        .collect()
}

fn load(threads: u32) -> (RevealedOrders, Validation) {
    let dir = env!("CARGO_MANIFEST_DIR");
    let rev_path = format!("{dir}/configs/revealed/mkl-threads-{threads}.toml");
    let val_path = format!("{dir}/tests/data/mkl_threads_{threads}_validation.toml");
    let orders =
        RevealedOrders::parse(&rev_path, &std::fs::read_to_string(&rev_path).unwrap()).unwrap();
    let val: Validation = toml::from_str(&std::fs::read_to_string(&val_path).unwrap()).unwrap();
    assert_eq!((orders.meta.threads, val.threads), (threads, threads));
    (orders, val)
}

/// The operands of a case as the role stores them, and torch's output bits.
fn operands(c: &Case) -> (Role, Vec<f32>, Vec<f32>, Vec<u32>) {
    let role = Role::parse(&c.role).unwrap();
    let mut a = draw(c.seed, c.rows * c.red);
    if role == Role::ForwardBias {
        // The script sets a's last column to 1: b's last row is the bias.
        for i in 0..c.rows {
            a[i * c.red + c.red - 1] = 1.0;
        }
    }
    let b = draw(c.seed + (1 << 32), c.red * c.cols);
    let transpose = |x: &[f32], r: usize, k: usize| -> Vec<f32> {
        (0..r * k).map(|i| x[(i % r) * k + i / r]).collect()
    };
    let (a, b) = match role {
        Role::Forward => (a, transpose(&b, c.red, c.cols)),
        // x (rows × k), then w (cols × k) followed by the bias (cols).
        Role::ForwardBias => {
            let k = c.red - 1;
            let x = (0..c.rows * k)
                .map(|i| a[(i / k) * c.red + i % k])
                .collect();
            let mut w = transpose(&b[..k * c.cols], k, c.cols);
            w.extend_from_slice(&b[k * c.cols..]);
            (x, w)
        }
        Role::GradInput => (a, b),
        Role::GradWeight => (transpose(&a, c.rows, c.red), b),
    };
    let out = (0..c.rows * c.cols)
        .map(|i| u32::from_str_radix(&c.out[8 * i..8 * i + 8], 16).unwrap())
        .collect();
    (role, a, b, out)
}

/// (matching elements, elements) of the revealed programs and of cpu-fma's kernels.
type Rates = ((usize, usize), (usize, usize), Vec<String>, (usize, usize));

/// (revealed ok, total), (cpu-fma ok, total), the first misses, and (cpu-fma ok, total) over
/// the cases of 4 or more output rows and 16 or more output columns (MKL's main sgemm kernel).
fn rates(threads: u32) -> Rates {
    let (orders, val) = load(threads);
    let fma = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "--profile")
        .unwrap()
        .matmul;
    let mut scratch = MatmulScratch::default();
    let (mut rev_ok, mut fma_ok, mut total) = (0, 0, 0);
    let (mut wide_ok, mut wide) = (0, 0);
    let mut misses = Vec::new();
    let mut stack = Vec::new();
    for c in &val.case {
        let (role, a, b, want) = operands(c);
        let m = orders
            .get(role, c.rows, c.red, c.cols)
            .unwrap_or_else(|| panic!("{} {}x{}x{} not revealed", c.role, c.rows, c.red, c.cols));
        let mut got = vec![0.0f32; c.rows * c.cols];
        let mut base = vec![0.0f32; c.rows * c.cols];
        let k1 = c.red - 1;
        if role == Role::ForwardBias {
            let (w, bias) = b.split_at(k1 * c.cols);
            m.run_bias(&a, w, bias, &mut got, &mut stack);
        } else {
            m.run(role, &a, &b, &mut got, &mut stack);
        }
        match role {
            Role::Forward => {
                let (am, bm) = (Mat::new(&a, c.rows, c.red), Mat::new(&b, c.cols, c.red));
                fma.matmul_nt(am, bm, MatMut::new(&mut base, c.rows, c.cols), &mut scratch)
            }
            Role::ForwardBias => {
                // cpu-fma: the matmul, then the bias added (MKL's one-thread addmm).
                let (w, bias) = b.split_at(k1 * c.cols);
                let (am, wm) = (Mat::new(&a, c.rows, k1), Mat::new(w, c.cols, k1));
                fma.matmul_nt(am, wm, MatMut::new(&mut base, c.rows, c.cols), &mut scratch);
                for row in base.chunks_exact_mut(c.cols) {
                    for (v, &bb) in row.iter_mut().zip(bias) {
                        *v += bb;
                    }
                }
            }
            Role::GradInput => {
                let (am, bm) = (Mat::new(&a, c.rows, c.red), Mat::new(&b, c.red, c.cols));
                fma.matmul(am, bm, MatMut::new(&mut base, c.rows, c.cols), &mut scratch)
            }
            Role::GradWeight => {
                let (am, bm) = (Mat::new(&a, c.red, c.rows), Mat::new(&b, c.red, c.cols));
                fma.matmul_tn(am, bm, MatMut::new(&mut base, c.rows, c.cols), &mut scratch)
            }
        }
        // The backend's fast path: cpu-fma's kernels for every element, then the programs of
        // the exceptions only. It must give the same bits as running every program.
        let mut fast = base.clone();
        let bias_part = (role == Role::ForwardBias).then(|| &b[k1 * c.cols..]);
        m.run_exceptions(
            scratch.isa(),
            role,
            &a,
            &b,
            bias_part,
            &mut fast,
            &mut stack,
        );
        let same = fast
            .iter()
            .zip(&got)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "fast path differs: {} {}x{}x{}",
            c.role, c.rows, c.red, c.cols
        );
        for (i, &w) in want.iter().enumerate() {
            total += 1;
            if got[i].to_bits() == w {
                rev_ok += 1;
            } else if misses.len() < 5 {
                misses.push(format!(
                    "{} {}x{}x{} element {i}",
                    c.role, c.rows, c.red, c.cols
                ));
            }
            fma_ok += usize::from(base[i].to_bits() == w);
            if c.rows >= 4 && c.cols >= 16 {
                wide += 1;
                wide_ok += usize::from(base[i].to_bits() == w);
            }
        }
    }
    ((rev_ok, total), (fma_ok, total), misses, (wide_ok, wide))
}

#[test]
fn revealed_one_thread_orders_reproduce_torch_bit_for_bit() {
    let ((ok, n), (fma_ok, _), misses, (wide_ok, wide)) = rates(1);
    eprintln!("1 thread: revealed {ok}/{n}, cpu-fma {fma_ok}/{n} ({wide_ok}/{wide} of 4+ rows x 16+ columns)");
    assert_eq!(ok, n, "{misses:?}");
    // At one thread MKL's order on shapes of 4 or more rows and 16 or more columns is the FMA
    // chain cpu-fma computes; its single-row and narrow-output kernels (the newer built-ins'
    // shapes) are not, so there cpu-fma must miss some elements and the revealed orders are
    // what makes the profile exact: the check can fail.
    assert_eq!(wide_ok, wide);
    assert!(wide > 0 && fma_ok < n, "cpu-fma matched all {n}");
}

#[test]
fn revealed_two_thread_orders_reproduce_torch_bit_for_bit() {
    let ((ok, n), (fma_ok, _), misses, _) = rates(2);
    eprintln!("2 threads: revealed {ok}/{n}, cpu-fma {fma_ok}/{n}");
    assert_eq!(ok, n, "{misses:?}");
    // Two threads change the bits of some elements, so the one-thread rule must miss some:
    // the check can fail.
    assert!(fma_ok < n, "cpu-fma matched all {n}");
}

#[test]
fn revealed_four_and_eight_thread_orders_reproduce_torch_bit_for_bit() {
    for t in [4, 8] {
        let ((ok, n), (fma_ok, _), misses, _) = rates(t);
        eprintln!("{t} threads: revealed {ok}/{n}, cpu-fma {fma_ok}/{n}");
        assert_eq!(ok, n, "{t} threads: {misses:?}");
        assert!(fma_ok < n, "{t} threads: cpu-fma matched all {n}");
    }
}

#[test]
fn the_mkl_thread_modifiers_carry_the_revealed_files() {
    use seedsweep::kernels::mkl_sgemm::OrderModel;
    let r = ProfileRegistry::builtin().unwrap();
    let fma = r.resolve("cpu-fma", "--profile").unwrap();
    assert!(fma.orders.is_none() && fma.order_model.is_none());
    let one = r.resolve("cpu-fma+mkl-threads-1", "--profile").unwrap();
    assert_eq!(
        (one.orders.is_none(), one.order_model),
        (true, Some(OrderModel::MklSgemm1t)),
        "one thread: the order model of every shape, not a per-shape file"
    );
    assert_eq!(
        fma,
        {
            let mut p = one;
            p.name = "cpu-fma".into();
            p.description = fma.description.clone();
            p.order_model = None;
            p
        },
        "cpu-fma is one thread, without the order model of MKL's small kernels"
    );
    // Two threads: the two-thread order model, not the per-shape file (which the model
    // reproduces, tests/suite/mkl_order_model.rs).
    let two = r.resolve("cpu-fma+mkl-threads-2", "--profile").unwrap();
    assert_eq!(
        (two.orders.is_none(), two.order_model),
        (true, Some(OrderModel::MklSgemm2t))
    );
    // A later thread count replaces the model (and the model a file).
    let four = r
        .resolve("cpu-fma+mkl-threads-1+mkl-threads-4", "--profile")
        .unwrap();
    assert!(four.order_model.is_none() && four.orders.is_some());
    let back = r
        .resolve("cpu-fma+mkl-threads-4+mkl-threads-1", "--profile")
        .unwrap();
    assert!(back.order_model.is_some() && back.orders.is_none());
    for t in [4u32, 8] {
        let p = r
            .resolve(&format!("cpu-fma+mkl-threads-{t}"), "--profile")
            .unwrap();
        let o = p.orders.expect("orders");
        assert_eq!((o.meta.threads, o.meta.device.as_str()), (t, "cpu"));
        // The built-in files and the committed ones the tests above validate are the same.
        let (file, _) = load(t);
        assert_eq!(
            o.shapes().collect::<Vec<_>>(),
            file.shapes().collect::<Vec<_>>()
        );
    }
}

#[test]
fn every_matmul_of_the_builtin_torch_scenarios_is_revealed() {
    // The built-in files cover every (role, shape) T1 and T2 call at their default configs, so
    // no matmul of cpu-fma+mkl-threads-4/8 falls back to the one-thread model (2 threads run
    // the order model, which covers every shape). The counter is
    // process-wide: the test runs alone in its own process, where no other test's matmuls
    // can move it.
    if !crate::common::alone::in_own_process(
        "revealed_orders::every_matmul_of_the_builtin_torch_scenarios_is_revealed",
    ) {
        return;
    }
    use seedsweep::engine::catalog::{Catalog, Selection};
    use seedsweep::exec::scenario::Workspace;
    use seedsweep::ops::backend::UNREVEALED_MATMULS;
    use std::sync::atomic::Ordering;
    let c = Catalog::load(&[] as &[&str], None).unwrap();
    for t in [4, 8] {
        let groups = c
            .select(&Selection {
                scenarios: Some(vec![
                    "deepspeed-tied-row-parallel".into(),
                    "deepspeed-row-parallel".into(),
                ]),
                profiles: Some(vec![format!("cpu-fma+mkl-threads-{t}")]),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(groups.len(), 7, "4 T1 and 3 T2 parametrizations");
        let before = UNREVEALED_MATMULS.load(Ordering::Relaxed);
        let mut ws = Workspace::default();
        for g in &groups {
            c.scenarios[g.scenario].run(g.param, 8199, &g.profile, &mut ws);
        }
        assert_eq!(
            UNREVEALED_MATMULS.load(Ordering::Relaxed),
            before,
            "{t} threads"
        );
    }
    // The counter does count: DiLoCo's 2x2 dots are not in the files.
    let g = &c
        .select(&Selection {
            scenarios: Some(vec!["maxtext-diloco".into()]),
            profiles: Some(vec!["cpu-fma+mkl-threads-4".into()]),
            ..Default::default()
        })
        .unwrap()[0];
    let before = UNREVEALED_MATMULS.load(Ordering::Relaxed);
    c.scenarios[g.scenario].run(g.param, 0, &g.profile, &mut Workspace::default());
    assert!(UNREVEALED_MATMULS.load(Ordering::Relaxed) > before);
}

/// The two-thread file passed with `--config` and the `mkl-threads-2` modifier (now the
/// two-thread order model, which writes every program of the file) sweep T1/T2 identically.
#[test]
fn a_revealed_file_loaded_with_config_sweeps_as_the_modifier_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/revealed/mkl-threads-2.toml"
    );
    let sweep = |out: &str, extra: &[&str]| {
        let mut cmd = assert_cmd::Command::cargo_bin("seedsweep").unwrap();
        cmd.args(["sweep", "--seeds", "6", "--quiet", "--scenario"])
            .arg("deepspeed-tied-row-parallel,deepspeed-row-parallel")
            .args(extra)
            .arg("--out")
            .arg(dir.path().join(out))
            .assert()
            .success();
        std::fs::read_to_string(dir.path().join(out).join("summary.csv")).unwrap()
    };
    let a = sweep("a", &["--profile", "cpu-fma+mkl-threads-2"]);
    let b = sweep(
        "b",
        &["--config", file, "--profile", "cpu-fma-mkl-2-threads"],
    );
    let c = sweep("c", &["--profile", "cpu-fma"]);
    assert_eq!(
        a.replace("cpu-fma+mkl-threads-2", "P"),
        b.replace("cpu-fma-mkl-2-threads", "P")
    );
    // And the thread count matters for these seeds: the one-thread sweep differs.
    assert_ne!(
        a.replace("cpu-fma+mkl-threads-2", "P"),
        c.replace("cpu-fma", "P")
    );
}
