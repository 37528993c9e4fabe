//! Prints seedsweep's f32 activation kernels (`ops::activations`) for tensors read from stdin,
//! for `scripts/activations_torch.py` to compare with torch bit for bit.
//!
//! Each input line is one contiguous tensor: `block onednn n x_1 … x_n dy_1 … dy_n` (f32 bit
//! patterns as decimal integers; `block` is ATen's vectorized-loop block, 16 for AVX2, 32 for
//! AVX512; `onednn` is the ISA of oneDNN's kernels, 2 for AVX2, 512 for AVX-512). Each output line holds, for that tensor, `gelu`, `gelu_tanh`, `silu`, then the
//! backward passes of the three with that `dy`, `n` bit patterns each.
use seedsweep::kernels::torch_ops::OneDnnIsa;
use seedsweep::ops::activations::*;
use std::io::{BufRead, Write};

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout());
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        let w: Vec<u32> = line
            .split_whitespace()
            .map(|w| w.parse().expect("integer"))
            .collect();
        if w.is_empty() {
            continue;
        }
        let (block, n) = (w[0] as usize, w[2] as usize);
        let onednn = match w[1] {
            2 => OneDnnIsa::Avx2,
            512 => OneDnnIsa::Avx512,
            other => panic!("onednn ISA {other}: allowed 2, 512"),
        };
        let xs: Vec<f32> = w[3..3 + n].iter().map(|&b| f32::from_bits(b)).collect();
        let dy: Vec<f32> = w[3 + n..3 + 2 * n]
            .iter()
            .map(|&b| f32::from_bits(b))
            .collect();
        let lp = TorchLoop {
            onednn,
            ..TorchLoop::whole(block, n.max(1))
        };
        let mut a = xs.clone();
        gelu(&mut a, &lp);
        let mut b = xs.clone();
        gelu_tanh(&mut b, &lp);
        let mut c = xs.clone();
        silu(&mut c, &lp);
        let mut d = vec![0.0; n];
        gelu_backward(&dy, &xs, &mut d, &lp);
        let mut e = vec![0.0; n];
        gelu_tanh_backward(&dy, &xs, &mut e, &lp);
        let mut f = vec![0.0; n];
        silu_backward(&dy, &xs, &mut f, &lp);
        let all: Vec<String> = [a, b, c, d, e, f]
            .iter()
            .flatten()
            .map(|v| v.to_bits().to_string())
            .collect();
        writeln!(out, "{}", all.join(" ")).expect("stdout");
    }
}
