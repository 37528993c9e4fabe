//! The tolerance frontier's passes over one check (7,035 elements, the size of T1's tied
//! gradient over its three steps): the anchor scan, the keep pass and the Pareto staircase,
//! each as the sweep runs it (vectorized where the CPU has AVX-512F; the staircase by
//! insertion) against its portable definition, in elements per second. The pairs are
//! T1-like: f32 values, the actual up to three ulps from the expected (one in seven equal),
//! and some exact zeros, from a fixed linear congruential sequence.
//!
//! A second group times a big shape's frontier (2²³ such pairs, a 16,384 × 512 table): the
//! streamed fold's [`FrontierStream`] over chunks of 8,192 pairs (one read: anchor scan and
//! screened staircase) against the definition, every point made, prefiltered and its
//! frontier taken.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seedsweep::stats::frontier::{
    frontier as frontier_of, keep_pairs, keep_pairs_portable, pair_point, prefilter, scan_anchors,
    scan_anchors_portable, staircase_by_sorting, staircase_in_place, AnchorScan, FrontierStream,
};

fn pairs(n: usize) -> (Vec<f64>, Vec<f64>) {
    // A 64-bit LCG (Knuth's MMIX constants): fixed, cheap, no generator crate.
    let mut s = 8173u64;
    let mut unit = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let (mut a, mut e) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let y = ((unit() - 0.5) * 0.8) as f32;
        // A few ulps of y away, as rounding differences are.
        let k = (unit() * 7.0) as i32 - 3;
        let x = if i % 97 == 0 {
            0.0
        } else {
            f32::from_bits((y.to_bits() as i32 + k) as u32)
        };
        let y = if i % 97 == 0 { 0.0 } else { y };
        a.push(f64::from(x));
        e.push(f64::from(y));
    }
    (a, e)
}

fn frontier(c: &mut Criterion) {
    let n = 7035;
    let (a, e) = pairs(n);
    let mut scan = AnchorScan::default();
    scan_anchors_portable(&a, &e, &mut scan);
    let anchors = scan.finish();
    let mut kept = Vec::new();
    keep_pairs_portable(&a, &e, anchors.as_ref(), &mut kept);
    let mut group = c.benchmark_group("frontier_7035");
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("scan/sweep", |b| {
        b.iter(|| {
            let mut s = AnchorScan::default();
            scan_anchors(&a, &e, &mut s);
            s
        })
    });
    group.bench_function("scan/portable", |b| {
        b.iter(|| {
            let mut s = AnchorScan::default();
            scan_anchors_portable(&a, &e, &mut s);
            s
        })
    });
    let mut pts = Vec::with_capacity(n);
    group.bench_function("keep/sweep", |b| {
        b.iter(|| {
            pts.clear();
            keep_pairs(&a, &e, anchors.as_ref(), &mut pts);
            pts.len()
        })
    });
    group.bench_function("keep/portable", |b| {
        b.iter(|| {
            pts.clear();
            keep_pairs_portable(&a, &e, anchors.as_ref(), &mut pts);
            pts.len()
        })
    });
    group.finish();
    // The staircase of the points the keep pass keeps, per kept point.
    let mut group = c.benchmark_group(format!("staircase_{}", kept.len()));
    group.throughput(Throughput::Elements(kept.len() as u64));
    group.bench_function("insertion", |b| {
        b.iter(|| {
            pts.clone_from(&kept);
            staircase_in_place(&mut pts);
            pts.len()
        })
    });
    group.bench_function("sorting", |b| {
        b.iter(|| {
            pts.clone_from(&kept);
            staircase_by_sorting(&mut pts);
            pts.len()
        })
    });
    group.finish();
}

fn streamed(c: &mut Criterion) {
    let n = 1 << 23;
    let (a, e) = pairs(n);
    let stream = || {
        let mut s = FrontierStream::default();
        for (ca, ce) in a.chunks(8192).zip(e.chunks(8192)) {
            s.offer(ca, ce);
        }
        s.finish()
    };
    let definition = || {
        let mut pts: Vec<_> = a.iter().zip(&e).map(|(&x, &y)| pair_point(x, y)).collect();
        prefilter(&mut pts);
        let mut f = Vec::new();
        frontier_of(pts.iter().copied(), &mut f);
        f
    };
    assert_eq!(
        stream(),
        definition(),
        "the streamed frontier is the definition's"
    );
    let mut group = c.benchmark_group("frontier_stream_8m");
    group.throughput(Throughput::Elements(n as u64));
    group.sample_size(10);
    group.bench_function("stream/sweep", |b| b.iter(stream));
    group.bench_function("all_points/definition", |b| b.iter(definition));
    group.finish();
}

criterion_group!(benches, frontier, streamed);
criterion_main!(benches);
