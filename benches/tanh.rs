//! The f32 tanh of a slice: the fast-path kernel (`fp::tanh_slice`) against the exact scalar
//! kernels it reproduces bit for bit, in elements per second. Inputs are T1-like
//! pre-activations (|x| mostly below 3), from a fixed linear congruential sequence.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seedsweep::kernels::tanh_slice::tanh_slice;
use seedsweep::kernels::torch_ops::{tanh_cr_f32, tanh_mkl_f32, TanhKernel};

fn tanh(c: &mut Criterion) {
    // A 64-bit LCG (Knuth's MMIX constants) mapped to [-3, 3): fixed, cheap, no generator crate.
    let mut s = 8173u64;
    let input: Vec<f32> = (0..350)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect();
    let mut buf = input.clone();
    let mut group = c.benchmark_group("tanh_350");
    group.throughput(Throughput::Elements(input.len() as u64));
    for (kernel, name, exact) in [
        (TanhKernel::Mkl, "mkl", tanh_mkl_f32 as fn(f32) -> f32),
        (
            TanhKernel::CorrectlyRounded,
            "cr",
            tanh_cr_f32 as fn(f32) -> f32,
        ),
    ] {
        group.bench_function(format!("{name}/fast-slice"), |b| {
            b.iter(|| {
                buf.copy_from_slice(&input);
                tanh_slice(&mut buf, kernel);
                buf[0]
            })
        });
        group.bench_function(format!("{name}/scalar-exact"), |b| {
            b.iter(|| {
                for (y, &x) in buf.iter_mut().zip(&input) {
                    *y = exact(x);
                }
                buf[0]
            })
        });
    }
    group.finish();
}

criterion_group!(benches, tanh);
criterion_main!(benches);
