//! `src/ops/softmax.rs` against real PyTorch: `tests/data/torch_softmax_avx2.json`,
//! `tests/data/torch_softmax_avx512.json` (one thread) and `tests/data/torch_softmax_avx2_t2.json`
//! (two threads), written by `scripts/softmax_torch.py` (torch 2.15 on the CPU, eager;
//! `ATEN_CPU_CAPABILITY=avx2`, and the default AVX512 build of an AMD EPYC):
//! `F.softmax(x, -1)` and its backward on rows of 1 to 257 elements of `s·randn`
//! (s = 0.5, 4, 30), 3 rows each, 45 cases per file.
//!
//! float32 is compared bit for bit, forward and backward, with the lane count of the file's
//! build (8 for AVX2, 16 for AVX512). The float64 truth (exact formula, `libm` exp, left-to-right
//! sums) is held to torch's float64 run within an error bound, not bit for bit: torch's float64
//! kernel uses SLEEF's double exp (≤ 1 ulp) and sums in its lanes, so each output differs by a
//! few ulps of the row's largest terms (bound below).

use crate::common::splitmix::{hex32, hex64};
use seedsweep::ops::softmax::SoftmaxReal;
use serde_json::Value;

fn fixture(cap: &str, threads: usize) -> Value {
    let suffix = if threads == 1 {
        String::new()
    } else {
        format!("_t{threads}")
    };
    let path = format!(
        "{}/tests/data/torch_softmax_{cap}{suffix}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("regenerate with scripts/softmax_torch.py");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["threads"], threads);
    assert_eq!(json["cpu_capability"], cap.to_uppercase());
    assert!(json["torch"].as_str().unwrap().starts_with("2.15"));
    json
}

fn field32(c: &Value, k: &str) -> Vec<f32> {
    hex32(c[k].as_str().unwrap())
}

fn identical(a: &[f32], b: &[f32]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() == y.to_bits())
        .count()
}

fn check_f32(cap: &str, lanes: usize, threads: usize) {
    let doc = fixture(cap, threads);
    let (mut same_y, mut same_dx, mut total) = (0, 0, 0);
    let mut bad = Vec::new();
    for c in doc["cases"].as_array().unwrap() {
        let n = c["n"].as_u64().unwrap() as usize;
        let (x, dy) = (field32(c, "x"), field32(c, "dy"));
        let mut y = vec![0.0f32; x.len()];
        f32::softmax_rows(&x, n, &mut y, lanes);
        let mut dx = vec![0.0f32; x.len()];
        f32::softmax_backward_rows(&dy, &y, n, &mut dx, lanes, threads);
        let (ty, tdx) = (field32(c, "y"), field32(c, "dx"));
        let (a, b) = (identical(&y, &ty), identical(&dx, &tdx));
        if a != y.len() || b != dx.len() {
            bad.push(format!(
                "n={n} scale={}: y {a}/{} dx {b}/{}",
                c["scale"],
                y.len(),
                dx.len()
            ));
        }
        same_y += a;
        same_dx += b;
        total += y.len();
    }
    assert!(
        bad.is_empty(),
        "{cap}: forward {same_y}/{total}, backward {same_dx}/{total} identical; {bad:?}"
    );
}

#[test]
fn f32_matches_torch_avx2_bit_for_bit() {
    check_f32("avx2", 8, 1);
}

/// At two threads torch runs the backward's rows in its OpenMP region, another compiled copy
/// of the row loop (no fused tail): 3 rows per case, so every case runs there.
#[test]
fn f32_matches_torch_avx2_two_threads_bit_for_bit() {
    check_f32("avx2", 8, 2);
}

/// The model's two copies do differ on these rows (else the two-thread test could not fail
/// for a wrong choice of copy).
#[test]
fn the_two_compiled_copies_differ_on_the_fixture() {
    let doc = fixture("avx2", 1);
    let mut differ = 0;
    for c in doc["cases"].as_array().unwrap() {
        let n = c["n"].as_u64().unwrap() as usize;
        let (dy, y) = (field32(c, "dy"), field32(c, "y"));
        let mut a = vec![0.0f32; y.len()];
        let mut b = vec![0.0f32; y.len()];
        f32::softmax_backward_rows(&dy, &y, n, &mut a, 8, 1);
        f32::softmax_backward_rows(&dy, &y, n, &mut b, 8, 2);
        differ += y.len() - identical(&a, &b);
    }
    assert!(differ > 0);
}

#[test]
fn f32_matches_torch_avx512_bit_for_bit() {
    check_f32("avx512", 16, 1);
}

/// The float64 truth against torch's float64 kernel: |Δy| ≤ 8·ε·max(y) per row (each output
/// is e_i/s with e_i within 1 ulp of the exact exp on either side and s a sum of ≤ 257 such
/// terms, whose relative error is ≤ (n + 2)·ε; 8·ε·max holds with room for n ≤ 257 because the
/// sum's error is relative to s ≥ max e = 1), and |Δdx| ≤ 64·ε·(max|dy| + |dot|)·max(y) for
/// the backward's dot product of ≤ 257 terms.
#[test]
fn f64_truth_within_rounding_of_torch_f64() {
    let doc = fixture("avx2", 1);
    for c in doc["cases"].as_array().unwrap() {
        let n = c["n"].as_u64().unwrap() as usize;
        let x: Vec<f64> = field32(c, "x").iter().map(|&v| v as f64).collect();
        let dy: Vec<f64> = field32(c, "dy").iter().map(|&v| v as f64).collect();
        let mut y = vec![0.0; x.len()];
        f64::softmax_rows(&x, n, &mut y, 8);
        let mut dx = vec![0.0; x.len()];
        f64::softmax_backward_rows(&dy, &y, n, &mut dx, 8, 1);
        let (ty, tdx) = (
            hex64(c["y64"].as_str().unwrap()),
            hex64(c["dx64"].as_str().unwrap()),
        );
        let eps = f64::EPSILON;
        for r in 0..x.len() / n {
            let rs = r * n..(r + 1) * n;
            let ymax = y[rs.clone()].iter().cloned().fold(0.0, f64::max);
            let gmax = dy[rs.clone()].iter().map(|v| v.abs()).fold(0.0, f64::max);
            let dot: f64 = dy[rs.clone()]
                .iter()
                .zip(&y[rs.clone()])
                .map(|(a, b)| a * b)
                .sum();
            for i in rs {
                let ey = 8.0 * eps * ymax;
                assert!(
                    (y[i] - ty[i]).abs() <= ey,
                    "n={n} y[{i}] {} vs {}",
                    y[i],
                    ty[i]
                );
                let ed = 64.0 * eps * (gmax + dot.abs()) * ymax.max(y[i]);
                assert!(
                    (dx[i] - tdx[i]).abs() <= ed,
                    "n={n} dx[{i}] {} vs {}",
                    dx[i],
                    tdx[i]
                );
            }
        }
    }
}
