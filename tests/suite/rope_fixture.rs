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
        assert!(dx.iter().any(|v| *v == 0.0));
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
