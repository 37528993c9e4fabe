//! T1's fp32 products under the `cpu-fma` profile's model (MKL's K blocking, FMA chains,
//! plain fp32 passes), at the shapes of its sharded and reference runs (hidden 35, vocab 67,
//! ten tokens): `x·Wᵀ` (the layers' forward, the head's two shards), `dy·W` (input
//! gradients) and `dyᵀ·x` (weight gradients). Ten-row products take one register tile of
//! ten rows under AVX-512. Inputs are fixed (no generator crate).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seedsweep::kernels::matmul::{Accum, KSplit, Mat, MatMut, MatmulModel, MatmulScratch, Passes};

fn products(c: &mut Criterion) {
    let model = MatmulModel {
        split: KSplit::Mkl,
        accum: Accum::Fma,
        passes: Passes::F32,
    };
    let mut s = MatmulScratch::default();
    let mut group = c.benchmark_group("t1_fp32_products");
    // (m, k, n, form): "nt" a·bᵀ, "nn" a·b, "tn" aᵀ·b.
    for (m, k, n, form) in [
        (10usize, 35usize, 35usize, "nt"),
        (10, 35, 67, "nt"),
        (10, 17, 67, "nt"),
        (10, 67, 35, "nn"),
        (10, 35, 35, "nn"),
        (67, 10, 35, "tn"),
        (35, 10, 35, "tn"),
    ] {
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7_919) % 1_000) as f32 * 1e-3 - 0.5)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 104_729) % 1_000) as f32 * 1e-3 - 0.5)
            .collect();
        let mut out = vec![0.0f32; m * n];
        group.throughput(Throughput::Elements((m * k * n) as u64));
        group.bench_function(format!("{form} {m}x{k}x{n}"), |bch| {
            bch.iter(|| {
                let c = MatMut::new(&mut out, m, n);
                match form {
                    "nt" => model.matmul_nt(Mat::new(&a, m, k), Mat::new(&b, n, k), c, &mut s),
                    "nn" => model.matmul(Mat::new(&a, m, k), Mat::new(&b, k, n), c, &mut s),
                    _ => model.matmul_tn(Mat::new(&a, k, m), Mat::new(&b, k, n), c, &mut s),
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, products);
criterion_main!(benches);
