//! Times the f32 weight-gradient product `dyᵀ·x` of the V = 32,000 head (32,000 × 10 × 256,
//! one TP = 2 shard, the `cpu-fma` model) with normal `dy` and with `dy` scaled into f32's
//! subnormal range, which is what a softmax gradient becomes for tokens whose logits are far
//! below the maximum. On x86 each FMA with a subnormal operand or result takes a microcode
//! assist; the ratio printed is that cost.
//!
//!     cargo run --release --example subnormal_matmul

use std::time::Instant;

use seedsweep::kernels::matmul::{Accum, KSplit, Mat, MatMut, MatmulModel, MatmulScratch, Passes};

fn main() {
    let model = MatmulModel {
        split: KSplit::Mkl,
        accum: Accum::Fma,
        passes: Passes::F32,
    };
    let (m, k, n) = (32_000, 10, 256);
    let mut scratch = MatmulScratch::default();
    let values = |len: usize, scale: f32| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 % 1000) as f32 * 1e-3 - 0.5) * scale)
            .collect()
    };
    let x = values(k * n, 1.0);
    let mut c = vec![0f32; m * n];
    let mut best = Vec::new();
    for scale in [1.0f32, 1e-38] {
        let dy_t = values(k * m, scale);
        let mut t_min = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            let (a, b) = (Mat::new(&dy_t, k, m), Mat::new(&x, k, n));
            model.matmul_tn(a, b, MatMut::new(&mut c, m, n), &mut scratch);
            t_min = t_min.min(t.elapsed().as_secs_f64());
        }
        println!("dy scaled by {scale:e}: {:.1} ms (best of 3)", t_min * 1e3);
        best.push(t_min);
    }
    println!("subnormal / normal: {:.0}x", best[1] / best[0]);
}
