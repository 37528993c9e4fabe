//! Writes one f32 kernel's output for every f32 input, in input-bit order, to stdout as raw
//! little-endian f32 (2^32 values, 16 GiB, unless a range is given), for
//! `scripts/audit_torch_transcendentals.py`, which compares it with torch chunk by chunk.
//!
//!     cargo run --release --example kernel_dump -- KERNEL [FIRST_BITS COUNT]
//!     cargo run --release --example kernel_dump -- KERNEL - < inputs.u32   # LE u32 input bits
//!
//! KERNEL: `tanh-mkl` ([`tanh_mkl_f32`]), `tanh-cr` ([`tanh_cr_f32`]), `exp-sleef`
//! ([`exp_f32`]), `log-sleef` ([`log_f32`]).

use std::io::{Read, Write};

use seedsweep::kernels::torch_ops::{exp_f32, log_f32, tanh_cr_f32, tanh_mkl_f32};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: kernel_dump tanh-mkl|tanh-cr|exp-sleef|log-sleef [FIRST_BITS COUNT]";
    let kernel: fn(f32) -> f32 = match args.first().map(String::as_str) {
        Some("tanh-mkl") => tanh_mkl_f32,
        Some("tanh-cr") => tanh_cr_f32,
        Some("exp-sleef") => exp_f32,
        Some("log-sleef") => log_f32,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    if args.get(1).map(String::as_str) == Some("-") {
        let mut input = Vec::new();
        if std::io::stdin().read_to_end(&mut input).is_err() || input.len() % 4 != 0 {
            eprintln!("{usage}: stdin must hold little-endian u32 input bits");
            std::process::exit(2);
        }
        let out: Vec<u8> = input
            .chunks_exact(4)
            .flat_map(|b| {
                let x = f32::from_bits(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                kernel(x).to_bits().to_le_bytes()
            })
            .collect();
        let _ = std::io::stdout().lock().write_all(&out);
        return;
    }
    let (first, count) = match (args.get(1), args.get(2)) {
        (Some(a), Some(b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(a), Ok(b)) if a + b <= 1 << 32 => (a, b),
            _ => {
                eprintln!("{usage}: FIRST_BITS + COUNT must be at most 2^32");
                std::process::exit(2);
            }
        },
        _ => (0, 1 << 32),
    };
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 4 << 16];
    let mut k = first;
    while k < first + count {
        let n = (first + count - k).min(1 << 16);
        for (i, b) in buf.chunks_exact_mut(4).take(n as usize).enumerate() {
            let y = kernel(f32::from_bits((k + i as u64) as u32));
            b.copy_from_slice(&y.to_bits().to_le_bytes());
        }
        if out.write_all(&buf[..4 * n as usize]).is_err() {
            return; // reader closed the pipe
        }
        k += n;
    }
}
