//! The float64 ground truth's products at big shapes (`matmul_f64`, the order of every
//! element fixed: c = 0, then c = c + a·b for kk ascending, product and sum each rounded):
//! a head's `dy·W` at V = 32,000 and at H = 8,192, and three other shapes with a right-hand
//! side of 1 MiB or more, where the AVX-512 compilation groups 8 rows of `c` per register
//! block. Inputs are fixed (no generator crate).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seedsweep::kernels::isa::Isa;
use seedsweep::kernels::matmul::{matmul_f64, Mat, MatMut};

fn products(c: &mut Criterion) {
    let mut group = c.benchmark_group("matmul_f64");
    group.sample_size(10);
    for (m, k, n) in [
        (10usize, 32_000usize, 512usize),
        (10, 8_192, 8_192),
        (64, 2_048, 2_048),
        (128, 4_096, 1_024),
        (35, 4_096, 4_096),
    ] {
        let a: Vec<f64> = (0..m * k)
            .map(|i| ((i * 7_919) % 1_000) as f64 * 1e-3 - 0.5)
            .collect();
        let b: Vec<f64> = (0..k * n)
            .map(|i| ((i * 104_729) % 1_000) as f64 * 1e-3 - 0.5)
            .collect();
        let mut out = vec![0.0; m * n];
        group.throughput(Throughput::Elements((m * k * n) as u64));
        group.bench_function(format!("{m}x{k}x{n}"), |bch| {
            bch.iter(|| {
                let (am, bm) = (Mat::new(&a, m, k), Mat::new(&b, k, n));
                matmul_f64(am, bm, MatMut::new(&mut out, m, n), Isa::detected())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, products);
criterion_main!(benches);
