//! `src/ops/rope.rs` against real PyTorch: `tests/data/rope_tables_torch.json`, written by
//! `scripts/rope_tables.py --check` (torch 2.15.0 on the CPU, eager, `ATEN_CPU_CAPABILITY=avx2`;
//! the tables were identical at 1 and 2 threads, which the script asserts).
//!
//! * Tables: for 8 (theta, head_dim, seq) cases of the measured domain, torch's `inv_freq`, the
//!   first rows and the last row of `emb.cos()` / `emb.sin()` bit for bit, and a position-weighted
//!   digest of every entry (`Σ bits[i]·(i+1) mod 2^64` over the row-major table).
//! * The op: HF's `(q * cos) + (rotate_half(q) * sin)` forward and its autograd backward on
//!   4 cases, every output and input-gradient element bit for bit (the gradients include +0
//!   and -0 entries, so the sign of a zero result checks the order of autograd's sums).

use seedsweep::ops::rope::{inv_freq_f32, rope_backward, rope_forward, RopeTables};
use serde_json::Value;

fn fixture() -> Value {
    let path = format!(
        "{}/tests/data/rope_tables_torch.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text =
        std::fs::read_to_string(path).expect("regenerate with scripts/rope_tables.py --check");
    serde_json::from_str(&text).unwrap()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn digest(t: &[f32]) -> u64 {
    t.iter().enumerate().fold(0u64, |a, (i, v)| {
        a.wrapping_add((v.to_bits() as u64).wrapping_mul(i as u64 + 1))
    })
}

fn bits(t: &[f32]) -> Vec<u32> {
    t.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn tables_match_torch() {
    let f = fixture();
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 8);
    for c in cases {
        let theta = c["theta"].as_f64().unwrap();
        let d = c["head_dim"].as_u64().unwrap() as usize;
        let seq = c["seq"].as_u64().unwrap() as usize;
        let what = format!("theta {theta} head_dim {d} seq {seq}");
        assert_eq!(
            bits(&inv_freq_f32(theta, d)),
            u32s(&c["inv_freq"]),
            "{what}: inv_freq"
        );
        let t = RopeTables::new(theta, d, 0, seq).unwrap();
        let first = seq.min(8) * d;
        assert_eq!(
            bits(&t.cos32[..first]),
            u32s(&c["cos_rows"]),
            "{what}: cos rows"
        );
        assert_eq!(
            bits(&t.sin32[..first]),
            u32s(&c["sin_rows"]),
            "{what}: sin rows"
        );
        assert_eq!(
            bits(&t.cos32[(seq - 1) * d..]),
            u32s(&c["cos_last"]),
            "{what}: cos last"
        );
        assert_eq!(
            bits(&t.sin32[(seq - 1) * d..]),
            u32s(&c["sin_last"]),
            "{what}: sin last"
        );
        assert_eq!(
            digest(&t.cos32),
            c["cos_digest"].as_u64().unwrap(),
            "{what}: cos digest"
        );
        assert_eq!(
            digest(&t.sin32),
            c["sin_digest"].as_u64().unwrap(),
            "{what}: sin digest"
        );
    }
}

#[test]
fn op_forward_backward_match_torch() {
    let f = fixture();
    let ops = f["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 4);
    for c in ops {
        let theta = c["theta"].as_f64().unwrap();
        let d = c["head_dim"].as_u64().unwrap() as usize;
        let seq = c["seq"].as_u64().unwrap() as usize;
        let heads = c["heads"].as_u64().unwrap() as usize;
        let t = RopeTables::new(theta, d, 0, seq).unwrap();
        let f32s = |k: &str| -> Vec<f32> { u32s(&c[k]).into_iter().map(f32::from_bits).collect() };
        let (x, g) = (f32s("x"), f32s("g"));
        let mut y = vec![0.0f32; x.len()];
        rope_forward(&x, heads * d, &t, &mut y);
        assert_eq!(
            bits(&y),
            u32s(&c["y"]),
            "forward, theta {theta} head_dim {d}"
        );
        let mut dx = vec![0.0f32; x.len()];
        rope_backward(&g, heads * d, &t, &mut dx);
        assert_eq!(
            bits(&dx),
            u32s(&c["dx"]),
            "backward, theta {theta} head_dim {d}"
        );
        // The gradient has zero entries whose sign is decided by the summation order.
        assert!(dx.contains(&0.0));
    }
}

/// Positions are global: a table starting at `offset` is the whole table's rows from there
/// (the sequence-sharding hook).
#[test]
fn offset_tables_are_the_whole_tables_rows() {
    let whole = RopeTables::new(500000.0, 16, 0, 40).unwrap();
    let part = RopeTables::new(500000.0, 16, 24, 16).unwrap();
    assert_eq!(bits(&part.cos32), bits(&whole.cos32[24 * 16..]));
    assert_eq!(bits(&part.sin32), bits(&whole.sin32[24 * 16..]));
    assert_eq!(part.cos64, whole.cos64[24 * 16..].to_vec());
}

/// Head-sharded attention with rope at tp 2 under every built-in profile: the f64 truth's
/// rope output is the rotation of its own q (float64 `libm`, computed here independently)
/// within 1e-12 relative (both round a handful of f64 operations, ~1e-16 each); the sharded
/// and the reference computations' rope outputs are identical bits (each rank rotates whole
/// heads of a column output whose elements are the reference's); and the f32 output is the
/// rotation of its f32 input within 2e-6 · (|x_i| + |x_{i+h}|): three roundings (3 · 2^-24),
/// cos and sin within 1.5 ulp of the exact value (torch's tables are at most one ulp from the
/// correctly rounded one), and the f32 angle's relative error (a few 2^-24 of an angle below
/// seq = 6) together stay below 28 · 2^-24 ≈ 1.7e-6.
#[test]
fn rope_runs_under_every_profile() {
    use seedsweep::exec::scenario::{Scenario, Workspace};
    use seedsweep::scenario::profile::ProfileRegistry;
    let text = r#"
name = "rope-every-profile"
dims = { batch = 2, seq = 6, hidden = 16, heads = 4 }
parallel = { tp = 2, shard_rule = "megatron" }
inputs = [
  { name = "x", draw = "randn", shape = ["batch", "seq", "hidden"], grad = true },
  { name = "t", draw = "randn", shape = ["batch", "seq", "hidden"] },
]
layers = [
  { name = "q", op = "linear", input = "x", out = "hidden", parallel = "column" },
  { name = "k", op = "linear", input = "x", out = "hidden", parallel = "column" },
  { name = "v", op = "linear", input = "x", out = "hidden", parallel = "column" },
  { name = "qr", op = "rope", input = "q", heads = "heads", theta = 500000 },
  { name = "kr", op = "rope", input = "k", heads = "heads" },
  { name = "attn", op = "sdpa", inputs = ["qr", "kr", "v"], heads = "heads", causal = true },
  { name = "o", op = "linear", out = "hidden", parallel = "row" },
]
loss = { op = "mse", target = "t" }
train = { steps = 1, optimizer = "sgd", lr = 0.1 }
checks = [{ name = "q", tensor = "q.out" }, { name = "qr", tensor = "qr.out" }]
"#;
    let reg = ProfileRegistry::builtin().unwrap();
    let names: Vec<String> = reg.profile_names().iter().map(|s| s.to_string()).collect();
    assert!(names.len() >= 10, "{names:?}");
    let tables = RopeTables::new(500000.0, 4, 0, 6).unwrap();
    for name in &names {
        let sf = seedsweep::scenario::load("rope.toml", text).unwrap_or_else(|e| panic!("{e}"));
        let s = seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{e}"));
        let profile = reg.resolve(name, "test").unwrap();
        let mut ws = Workspace::default();
        s.run(0, 0, &profile, &mut ws);
        let checks = s.checks(0);
        let get = |t: &seedsweep::exec::trace::Trace, check: &str| -> Vec<f64> {
            let slot = t
                .slots
                .iter()
                .find(|sl| &*checks[sl.check].name == check)
                .unwrap_or_else(|| panic!("{name}: no {check}"));
            t.data(slot).to_vec()
        };
        let (sq, sqr) = (get(&ws.traces.sharded, "q"), get(&ws.traces.sharded, "qr"));
        let (rq, rqr) = (
            get(&ws.traces.reference, "q"),
            get(&ws.traces.reference, "qr"),
        );
        let (fq, fqr) = (get(&ws.traces.f64, "q"), get(&ws.traces.f64, "qr"));
        assert_eq!(sq.len(), 2 * 6 * 16, "{name}");
        assert_eq!(
            sqr.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            rqr.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{name}: sharded vs reference rope output"
        );
        for (x, y, tol_rel, what) in [(&fq, &fqr, 1e-12, "f64"), (&rq, &rqr, 2e-6, "f32")] {
            for (r, (xr, yr)) in x.chunks(16).zip(y.chunks(16)).enumerate() {
                let row = (r % 6) * 4;
                for head in 0..4 {
                    for j in 0..2 {
                        let (a, b) = (xr[head * 4 + j], xr[head * 4 + j + 2]);
                        let (c, sn) = (tables.cos64[row + j], tables.sin64[row + j]);
                        let tol = tol_rel * (a.abs() + b.abs());
                        assert!(
                            (yr[head * 4 + j] - (a * c - b * sn)).abs() <= tol,
                            "{name} {what}"
                        );
                        assert!(
                            (yr[head * 4 + j + 2] - (b * c + a * sn)).abs() <= tol,
                            "{name} {what}"
                        );
                    }
                }
            }
        }
    }
}
