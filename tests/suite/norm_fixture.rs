//! `src/ops/norm.rs` against real PyTorch: `tests/data/torch_norm.json`, written by
//! `scripts/norm_torch.py` (torch 2.15 on the CPU, one thread, eager, `ATEN_CPU_CAPABILITY=avx2`):
//! `F.layer_norm` and `F.rms_norm` with weight (and bias) on 3 rows of widths 16, 35, 64, 200
//! and 300, forward and the backward of `(y · dy).sum()`. Every element is compared bit for bit.

use seedsweep::ops::norm::{
    layer_norm, layer_norm_backward, layer_norm_backward_threads, rms_norm, rms_norm_backward,
};
use serde_json::Value;

fn bits(v: &Value, key: &str) -> Vec<f32> {
    let h = v[key].as_str().unwrap_or_else(|| panic!("no {key}"));
    (0..h.len() / 8)
        .map(|i| f32::from_bits(u32::from_str_radix(&h[8 * i..8 * i + 8], 16).unwrap()))
        .collect()
}

/// (elements identical, elements) of `got` against the fixture's `key`.
fn same(case: &Value, key: &str, got: &[f32]) -> (usize, usize) {
    let want = bits(case, key);
    assert_eq!(want.len(), got.len(), "{key}: length");
    let s = want
        .iter()
        .zip(got)
        .filter(|(a, b)| a.to_bits() == b.to_bits())
        .count();
    (s, want.len())
}

fn cases() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/torch_norm.json");
    let text = std::fs::read_to_string(path).expect("regenerate with scripts/norm_torch.py");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["threads"], 1);
    assert_eq!(json["cpu_capability"], "AVX2");
    json["cases"].as_array().unwrap().clone()
}

/// LayerNorm: ATen's `RowwiseMoments` cascade and the forward and backward orders of
/// `norm.rs` reproduce torch on every element of y, dx, dweight and dbias at every width of
/// the fixture (16, 35, 64, 200, 300: full vectors, a ragged tail, several Welford chunks
/// with cascade merges). Asserted: every element identical.
#[test]
fn layer_norm_matches_torch_bit_for_bit() {
    let mut checked = 0;
    for c in cases().iter().filter(|c| c["kind"] == "layernorm") {
        let n = c["n"].as_u64().unwrap() as usize;
        let eps = c["eps"].as_f64().unwrap();
        let (x, w, b, dy) = (
            bits(c, "x"),
            bits(c, "weight"),
            bits(c, "bias"),
            bits(c, "dy"),
        );
        let mut y = vec![0.0f32; x.len()];
        layer_norm(&x, Some(&w), Some(&b), eps, n, &mut y);
        let mut dx = vec![0.0f32; x.len()];
        let (mut dw, mut db) = (vec![0.0f32; n], vec![0.0f32; n]);
        layer_norm_backward(
            &x,
            Some(&w),
            &dy,
            eps,
            n,
            Some(&mut dx),
            Some(&mut dw),
            Some(&mut db),
        );
        for (key, got) in [("y", &y), ("dx", &dx), ("dweight", &dw), ("dbias", &db)] {
            let (s, t) = same(c, key, got);
            assert_eq!(s, t, "layernorm n = {n} {key}: {s}/{t} identical");
            checked += t;
        }
    }
    assert_eq!(
        checked,
        3 * (16 + 35 + 64 + 200 + 300) * 2 + (16 + 35 + 64 + 200 + 300) * 2
    );
}

/// LayerNorm at every width where ATen's kernel changes its order, affine and not, 1 to 11
/// rows, at 1, 2, 4 and 8 threads: `tests/data/torch_layernorm.json`, written by
/// `scripts/layernorm_torch.py` (torch 2.15 on the CPU, eager, `ATEN_CPU_CAPABILITY=avx2`,
/// `torch.set_num_threads(threads)`): widths 1 to 7 (no full vector), 8 to 64 with and
/// without a ragged tail, 256, 257 and 300 (cascade merges), 1000 (stack depth 3); inputs of
/// mean 0.5 and 100; at 2 threads up to width 64 and at 300, at 4 and 8 threads widths 3, 12
/// and 35 on row counts that split unevenly. [`layer_norm_backward_threads`] runs at the case's thread count (the
/// rows split over threads, each with its own weight and bias gradient buffer). Asserted:
/// every element of y, dx, dweight and dbias identical, and every case's shape checked.
#[test]
fn layer_norm_matches_torch_at_every_width_and_thread_count() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/torch_layernorm.json"
    );
    let text = std::fs::read_to_string(path).expect("regenerate with scripts/layernorm_torch.py");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["cpu_capability"], "AVX2");
    let cases = json["cases"].as_array().unwrap();
    let mut scratch = Vec::new();
    let (mut elements, mut seen) = (0usize, std::collections::BTreeSet::new());
    for c in cases {
        let n = c["n"].as_u64().unwrap() as usize;
        let threads = c["threads"].as_u64().unwrap() as usize;
        let affine = c["affine"].as_bool().unwrap();
        let eps = c["eps"].as_f64().unwrap();
        let (x, dy) = (bits(c, "x"), bits(c, "dy"));
        let (w, b) = if affine {
            (Some(bits(c, "weight")), Some(bits(c, "bias")))
        } else {
            (None, None)
        };
        let mut y = vec![0.0f32; x.len()];
        layer_norm(&x, w.as_deref(), b.as_deref(), eps, n, &mut y);
        let mut dx = vec![0.0f32; x.len()];
        let (mut dw, mut db) = (vec![0.0f32; n], vec![0.0f32; n]);
        layer_norm_backward_threads(
            &x,
            w.as_deref(),
            &dy,
            eps,
            n,
            threads,
            &mut scratch,
            Some(&mut dx),
            affine.then_some(&mut dw[..]),
            affine.then_some(&mut db[..]),
        );
        let mut outs = vec![("y", &y), ("dx", &dx)];
        if affine {
            outs.extend([("dweight", &dw), ("dbias", &db)]);
        }
        for (key, got) in outs {
            let (s, t) = same(c, key, got);
            assert_eq!(
                s, t,
                "layernorm n = {n}, rows {}, affine {affine}, {threads} thread(s): {key} {s}/{t} identical",
                c["rows"]
            );
            elements += t;
        }
        seen.insert((n, threads, affine));
    }
    // Every width at 1 thread, affine and not, and the 2-thread widths (up to 64, and 300).
    for n in [1, 3, 7, 9, 12, 15, 17, 35, 64, 257, 300] {
        assert!(
            seen.contains(&(n, 1, true)) && seen.contains(&(n, 1, false)),
            "{n}"
        );
    }
    for n in [3, 7, 12, 35, 300] {
        assert!(seen.contains(&(n, 2, true)), "{n} at 2 threads");
    }
    for threads in [4, 8] {
        for n in [3, 12, 35] {
            assert!(
                seen.contains(&(n, threads, true)),
                "{n} at {threads} threads"
            );
        }
    }
    eprintln!(
        "layernorm: {} cases, {elements} elements identical to torch",
        cases.len()
    );
}

/// RMSNorm: `norm.rs` follows torch's CPU composite and its autograd op by op, with ATen's
/// reduction orders; every element of y, dx and dweight is identical to torch's (torch 2.15,
/// CPU, float32, one thread, `ATEN_CPU_CAPABILITY=avx2`, eager), at every width of the fixture
/// (16, 35, 64, 200, 300: multiples of 8 lanes and ragged, vector counts below and above the
/// 4-way ILP, columns in and past the 32-column blocks of `sum(0)`).
#[test]
fn rms_norm_matches_torch() {
    let mut checked = 0;
    for c in cases().iter().filter(|c| c["kind"] == "rmsnorm") {
        let n = c["n"].as_u64().unwrap() as usize;
        let eps = c["eps"].as_f64().unwrap();
        let (x, w, dy) = (bits(c, "x"), bits(c, "weight"), bits(c, "dy"));
        let mut y = vec![0.0f32; x.len()];
        rms_norm(&x, Some(&w), eps, n, &mut y);
        let mut dx = vec![0.0f32; x.len()];
        let mut dw = vec![0.0f32; n];
        let mut scratch = Vec::new();
        rms_norm_backward(
            &x,
            Some(&w),
            &dy,
            eps,
            n,
            Some(&mut dx),
            Some(&mut dw),
            false,
            &mut scratch,
        );
        for (key, got) in [("y", &y), ("dx", &dx), ("dweight", &dw)] {
            let (s, t) = same(c, key, got);
            assert_eq!(s, t, "rmsnorm n = {n} {key}: {s}/{t} identical to torch");
            checked += t;
        }
    }
    assert!(checked > 0);
}

/// The example block (layernorm -> column -> gelu -> row -> residual add at TP 2) runs in the
/// executor, replicated and with a sequence-parallel layernorm. Rows are independent, so the
/// forward (the block's output at the first step) is the same bits either way; the norm
/// weight gradient differs only by the order of its row sum (per-rank partials all-reduced),
/// so it stays within a few ulp of the replicated one (1e-6 relative to the largest
/// element: two orders of an 8-term sum of values of one sign class differ by a few unit
/// roundoffs, 6e-8 each).
#[test]
fn the_prenorm_example_runs_replicated_and_sequence_parallel() {
    use seedsweep::exec::scenario::{Scenario, Workspace};
    use seedsweep::scenario::profile::ProfileRegistry;
    let file = "configs/examples/tp2_prenorm_block.toml";
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "test")
        .unwrap();
    let run = |text: &str| {
        let sf = seedsweep::scenario::load(file, text).unwrap_or_else(|e| panic!("{e}"));
        let s = seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{e}"));
        let mut ws = Workspace::default();
        s.run(0, 8173, &profile, &mut ws);
        let names: Vec<&str> = s.checks(0).iter().map(|c| c.name).collect();
        let t = &ws.traces.sharded;
        assert!(!t.values.is_empty() && t.values.iter().all(|v| v.is_finite()));
        let get = |name: &str| {
            let slot = t
                .slots
                .iter()
                .find(|sl| names[sl.check] == name && sl.step.to_string() == "0")
                .unwrap();
            t.data(slot).to_vec()
        };
        (get("out"), get("ln_weight_grad"))
    };
    let (out_sp, gw_sp) = run(&text);
    let replicated = text.replace(
        r#"op = "layernorm", input = "x", parallel = "sequence" }"#,
        r#"op = "layernorm", input = "x" }"#,
    );
    assert_ne!(replicated, text);
    let (out, gw) = run(&replicated);
    assert_eq!(
        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        out_sp.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    let m = gw.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    for (a, b) in gw.iter().zip(&gw_sp) {
        assert!((a - b).abs() <= 1e-6 * m, "{a} vs {b}");
    }
}
