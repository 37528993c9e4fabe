//! Prints the f32 activation kernels of `model::activations` (gelu, gelu_tanh, silu and their
//! backward passes with dy = 1) for f32 bit patterns read from stdin, one line per kernel;
//! `scripts/activations_torch.py` compares them with torch.
use seedsweep::ops::activations::*;
use std::io::Read;
fn main() {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap();
    let xs: Vec<f32> = s
        .split_whitespace()
        .map(|w| f32::from_bits(w.parse().unwrap()))
        .collect();
    let mut a = xs.clone();
    gelu(&mut a);
    let mut b = xs.clone();
    gelu_tanh(&mut b);
    let mut c = xs.clone();
    silu(&mut c);
    let ones = vec![1.0f32; xs.len()];
    let mut d = vec![0.0; xs.len()];
    gelu_backward(&ones, &xs, &mut d);
    let mut e = vec![0.0; xs.len()];
    gelu_tanh_backward(&ones, &xs, &mut e);
    let mut f = vec![0.0; xs.len()];
    silu_backward(&ones, &xs, &mut f);
    for v in [a, b, c, d, e, f] {
        println!(
            "{}",
            v.iter()
                .map(|x| x.to_bits().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
