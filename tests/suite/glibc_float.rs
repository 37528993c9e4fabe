//! The ports of glibc 2.36's float `erff`, `expf` and `tanhf`
//! (`seedsweep::kernels::torch_ops::{glibc_erff, glibc_expf, glibc_tanhf}`: the scalar lambdas
//! of torch's gelu, silu and tanh-gelu kernels call them) against the C library itself.
//!
//! * `glibc_digests_cover_every_input` (ignored: 3 × 2^32 evaluations, a few minutes on one
//!   core): per-chunk digests of the three ports over all 2^32 inputs equal the digests
//!   `scripts/glibc_float_digests.py` computed from the system libm
//!   (`tests/data/glibc_float_digests.txt`: glibc 2.36, an AMD EPYC with FMA). Run it with
//!   `cargo test --release --test suite -- glibc_float:: --ignored`.
//! * `digest_file_is_complete` checks the file's shape (256 chunks, three digests each).

use crate::common::splitmix::chunk_digest;
use rayon::prelude::*;
use seedsweep::kernels::torch_ops::{glibc_erff, glibc_expf, glibc_tanhf};

/// (chunk, erff, expf, tanhf) digests of the fixture.
fn rows() -> Vec<(u64, [u64; 3])> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/glibc_float_digests.txt"
    );
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}; regenerate with scripts/glibc_float_digests.py"));
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let d = |i: usize| u64::from_str_radix(f[i], 16).unwrap();
            (f[0].parse().unwrap(), [d(1), d(2), d(3)])
        })
        .collect()
}

#[test]
fn digest_file_is_complete() {
    let r = rows();
    assert_eq!(r.len(), 256);
    for (i, (chunk, _)) in r.iter().enumerate() {
        assert_eq!(*chunk, i as u64);
    }
}

#[test]
#[ignore = "3 x 2^32 evaluations; run with --ignored"]
fn glibc_digests_cover_every_input() {
    let bad: Vec<String> = rows()
        .par_iter()
        .flat_map_iter(|&(chunk, want)| {
            let start = chunk << 24;
            let got = [
                chunk_digest(start, 1 << 24, glibc_erff),
                chunk_digest(start, 1 << 24, glibc_expf),
                chunk_digest(start, 1 << 24, glibc_tanhf),
            ];
            ["erff", "expf", "tanhf"]
                .into_iter()
                .zip(got.into_iter().zip(want))
                .filter(|(_, (g, w))| g != w)
                .map(move |(f, (g, w))| format!("{f} chunk {chunk}: {g:016x}, libm {w:016x}"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} chunks differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
