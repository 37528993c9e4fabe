//! MKL's f32 sqrt (what torch 2.15's CPU `torch.sqrt` calls) against torch itself, and the
//! software copy of the CPU's reciprocal square root estimate it is built on.
//!
//! * `sample_matches_torch`: `tests/data/mkl_sqrt_sample.txt`, written by
//!   `scripts/mkl_sqrt_check.py` from real torch (torch 2.15.0, MKL 2024.2, one thread,
//!   `ATEN_CPU_CAPABILITY=avx2`; the file header names the CPU), holds input bits, torch's
//!   sqrt bits and the correctly rounded bits. [`sqrt_mkl_f32`] must give torch's bits for
//!   every line; where torch is not correctly rounded it is one ulp off.
//! * `rsqrt_table_matches_this_cpu` (ignored, x86-64 only: it compares with the CPU it runs
//!   on, and the committed table is the AMD Zen 4 CPU's): [`rsqrt12_zen`] equals the CPU's
//!   `rsqrtps` on every positive normal f32 (2^31 - 2^24 inputs, in eight lanes at a time and
//!   through `rsqrtss`). With `SEEDSWEEP_BLESS_RSQRT=1` it first rewrites
//!   `src/kernels/data/rsqrt12_zen.bin` from the CPU (then rebuild and rerun). Run it with
//!   `cargo test --release --test suite -- mkl_sqrt:: --ignored`.
//! * `exhaustive_sqrt_digests` (ignored: 2^32 evaluations): per-chunk digests of
//!   [`sqrt_mkl_f32`] over all 2^32 inputs equal the digests the script computed from
//!   torch's output (`tests/data/mkl_sqrt_digests.txt`).

use crate::common::splitmix::chunk_digest;
use rayon::prelude::*;
use seedsweep::kernels::mkl_sqrt::{rsqrt12_zen, sqrt_mkl_f32};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");

fn read(name: &str) -> String {
    let path = format!("{DATA}{name}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {path}: {e}; regenerate it with scripts/mkl_sqrt_check.py")
    })
}

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s, 16).unwrap_or_else(|e| panic!("bad hex `{s}`: {e}"))
}

#[test]
fn sample_matches_torch() {
    let text = read("mkl_sqrt_sample.txt");
    let (mut n, mut finite, mut not_cr) = (0, 0, 0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<u32> = line.split_whitespace().map(hex).collect();
        let (x, torch, cr) = (f32::from_bits(f[0]), f[1], f[2]);
        assert_eq!(
            sqrt_mkl_f32(x).to_bits(),
            torch,
            "sqrt_mkl_f32({x:e} = {:08x})",
            f[0]
        );
        n += 1;
        if x.is_finite() && x >= 0.0 {
            finite += 1;
            // The script's correctly rounded column is seedsweep's correctly rounded root.
            assert_eq!(((x as f64).sqrt() as f32).to_bits(), cr, "{:08x}", f[0]);
            assert!(
                torch.abs_diff(cr) <= 1,
                "{:08x}: {torch:08x} vs {cr:08x}",
                f[0]
            );
            not_cr += usize::from(torch != cr);
        }
    }
    // The sample exercises both outcomes: in [1, 4) about 17 % of torch's roots are one ulp
    // off; the sample holds a few thousand finite inputs.
    assert!(n > 4000, "only {n} sample lines");
    assert!(
        not_cr * 20 > finite,
        "only {not_cr} of {finite} finite sample inputs where torch is not correctly rounded"
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "compares with this CPU's rsqrtps (the committed table is AMD Zen 4's); run with --ignored"]
fn rsqrt_table_matches_this_cpu() {
    use std::arch::x86_64::{
        _mm256_loadu_ps, _mm256_rsqrt_ps, _mm256_storeu_ps, _mm_cvtss_f32, _mm_rsqrt_ss, _mm_set_ss,
    };
    // SAFETY: AVX is checked at run time before `lanes` runs; SSE is x86-64's baseline.
    #[target_feature(enable = "avx")]
    unsafe fn lanes(x: &[f32; 8]) -> [f32; 8] {
        let mut o = [0f32; 8];
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_rsqrt_ps(_mm256_loadu_ps(x.as_ptr()))) };
        o
    }
    fn scalar(x: f32) -> f32 {
        // SAFETY: SSE is part of the x86-64 baseline.
        unsafe { _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x))) }
    }
    assert!(std::arch::is_x86_feature_detected!("avx"));
    if std::env::var_os("SEEDSWEEP_BLESS_RSQRT").is_some() {
        let mut bytes = Vec::with_capacity(16384);
        for q in 0..2u32 {
            for m in 0..4096u32 {
                let r = scalar(f32::from_bits(((127 + q) << 23) | (m << 11))).to_bits();
                assert_eq!(r >> 23, 126, "estimate outside [0.5, 1)");
                assert_eq!(r & 0x7ff, 0, "estimate with more than 12 fraction bits");
                bytes.extend_from_slice(&(((r >> 11) & 0xfff) as u16).to_le_bytes());
            }
        }
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/kernels/data/rsqrt12_zen.bin"
        );
        std::fs::write(path, bytes).unwrap();
        eprintln!("wrote {path}: rebuild and rerun without SEEDSWEEP_BLESS_RSQRT");
    }
    // Every positive normal input, in blocks of 2^20 bit patterns.
    let bad: u64 = (0x008u32..0x7f8)
        .into_par_iter()
        .map(|block| {
            let mut bad = 0u64;
            for base in (block << 20..(block + 1) << 20).step_by(8) {
                let xs: [f32; 8] = std::array::from_fn(|k| f32::from_bits(base + k as u32));
                // SAFETY: AVX was detected above.
                let hw = unsafe { lanes(&xs) };
                for (k, &x) in xs.iter().enumerate() {
                    let sw = rsqrt12_zen(x).to_bits();
                    let ok = hw[k].to_bits() == sw && scalar(x).to_bits() == sw;
                    if !ok && bad < 4 {
                        eprintln!(
                            "x {:08x}: cpu {:08x}, table {sw:08x}",
                            x.to_bits(),
                            hw[k].to_bits()
                        );
                    }
                    bad += u64::from(!ok);
                }
            }
            bad
        })
        .sum();
    assert_eq!(
        bad, 0,
        "{bad} positive normal inputs where the table differs from this CPU"
    );
}

#[test]
#[ignore = "2^32 evaluations; run with --ignored"]
fn exhaustive_sqrt_digests() {
    let text = read("mkl_sqrt_digests.txt");
    let rows: Vec<(u64, u64)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                u64::from_str_radix(f[1], 16).unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 256, "256 chunks of 2^24 inputs");
    let bad: Vec<String> = rows
        .par_iter()
        .filter_map(|&(c, want)| {
            let got = chunk_digest(c << 24, 1 << 24, sqrt_mkl_f32);
            (got != want).then(|| format!("chunk {c}: {got:016x} vs torch's {want:016x}"))
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
