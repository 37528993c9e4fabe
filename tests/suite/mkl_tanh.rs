//! MKL's f32 tanh (what torch 2.15's CPU `torch.tanh` calls) against torch itself.
//!
//! * `sample_matches_torch`: `tests/data/mkl_tanh_sample.txt`, written by
//!   `scripts/mkl_tanh_table.py` from real torch (torch 2.15.0, MKL 2024.2, one thread; the
//!   file header names the CPU), holds input bits, torch's tanh bits and the correctly rounded
//!   bits (mpmath-checked at rounding boundaries). [`tanh_mkl_f32`] must give torch's bits and
//!   [`tanh_cr_f32`] the correctly rounded ones, for every line.
//! * `table_is_sorted_and_every_entry_is_an_exception`: the embedded table is strictly
//!   sorted (the binary search needs it), has no NaN key, and every entry differs from the
//!   correctly rounded value (by exactly one ulp, as measured).
//! * `exhaustive_tanh_digests` (ignored: 2^32 evaluations, about a minute per core): per-chunk
//!   digests of both kernels over all 2^32 inputs equal the digests the script computed from
//!   torch's output and from the correctly rounded output (`tests/data/mkl_tanh_digests.txt`).
//!   Run it with `cargo test --release --test suite -- mkl_tanh:: --ignored`.

use crate::common::splitmix::chunk_digest;
use rayon::prelude::*;
use seedsweep::kernels::torch_ops::{mkl_tanh_table_len, tanh_cr_f32, tanh_mkl_f32};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");
const TABLE: &[u8] = include_bytes!("../../src/kernels/data/mkl_tanh_f32.bin");

fn read(name: &str) -> String {
    let path = format!("{DATA}{name}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {path}: {e}; regenerate it with scripts/mkl_tanh_table.py")
    })
}

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s, 16).unwrap_or_else(|e| panic!("bad hex `{s}`: {e}"))
}

#[test]
fn sample_matches_torch() {
    let text = read("mkl_tanh_sample.txt");
    let (mut n, mut not_cr) = (0, 0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<u32> = line.split_whitespace().map(hex).collect();
        let (x, torch, cr) = (f32::from_bits(f[0]), f[1], f[2]);
        assert_eq!(
            tanh_mkl_f32(x).to_bits(),
            torch,
            "tanh_mkl_f32({x:e} = {:08x})",
            f[0]
        );
        assert_eq!(
            tanh_cr_f32(x).to_bits(),
            cr,
            "tanh_cr_f32({x:e} = {:08x})",
            f[0]
        );
        n += 1;
        not_cr += usize::from(torch != cr);
    }
    // The sample holds every 64th table entry besides random inputs, so it exercises both
    // branches of the kernel.
    assert!(n > 8000, "only {n} sample lines");
    assert!(
        not_cr >= mkl_tanh_table_len() / 64,
        "only {not_cr} sample inputs where MKL differs from the correctly rounded tanh"
    );
}

fn word(i: usize) -> u32 {
    u32::from_le_bytes(TABLE[i..i + 4].try_into().unwrap())
}

#[test]
fn table_is_sorted_and_every_entry_is_an_exception() {
    assert_eq!(TABLE.len() % 8, 0);
    let n = TABLE.len() / 8;
    assert_eq!(n, mkl_tanh_table_len());
    assert!(n > 0, "empty table");
    let mut prev: Option<u32> = None;
    for i in 0..n {
        let (key, val) = (word(8 * i), word(8 * i + 4));
        if let Some(p) = prev {
            assert!(p < key, "entry {i}: {key:08x} not above {p:08x}");
        }
        prev = Some(key);
        let x = f32::from_bits(key);
        assert!(!x.is_nan(), "entry {i}: NaN key");
        assert_eq!(tanh_mkl_f32(x).to_bits(), val, "entry {i}");
        let cr = tanh_cr_f32(x).to_bits();
        // Same sign, one ulp apart (the bits of same-signed floats are ordered).
        assert!(
            (cr ^ val) & 0x8000_0000 == 0 && cr.abs_diff(val) == 1,
            "entry {i}: input {key:08x}: MKL {val:08x}, correctly rounded {cr:08x}"
        );
    }
}

#[test]
#[ignore = "2^32 evaluations of each kernel; run with --ignored"]
fn exhaustive_tanh_digests() {
    let text = read("mkl_tanh_digests.txt");
    let rows: Vec<(u64, u64, u64)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                u64::from_str_radix(f[1], 16).unwrap(),
                u64::from_str_radix(f[2], 16).unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 256, "256 chunks of 2^24 inputs");
    let bad: Vec<String> = rows
        .par_iter()
        .filter_map(|&(c, mkl, cr)| {
            let start = c << 24;
            let got_mkl = chunk_digest(start, 1 << 24, tanh_mkl_f32);
            let got_cr = chunk_digest(start, 1 << 24, tanh_cr_f32);
            (got_mkl != mkl || got_cr != cr).then(|| {
                format!(
                    "chunk {c}: mkl {got_mkl:016x} vs {mkl:016x}, cr {got_cr:016x} vs {cr:016x}"
                )
            })
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
