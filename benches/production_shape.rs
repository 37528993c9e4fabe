//! One production-shape seed-run (criterion): T1's test at V = 32,000 and H = 512
//! (`configs/examples/production_head_v32000_h512.toml`), the three computations over its 3
//! steps and the evaluation of every check, through the engine (`seedsweep::engine::unit`,
//! what `sweep` runs per unit), on one thread. A seed-run takes seconds, so criterion takes
//! its minimum of 10 samples. `seedsweep bench --config FILE --seeds 1` prints the same
//! seed-run's rate beside the scalar baseline and the 1 → 2 thread ratio.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::engine::unit;
use seedsweep::exec::scenario::Workspace;

const FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../configs/examples/production_head_v32000_h512.toml"
);

fn production_seed_run(c: &mut Criterion) {
    let catalog = Catalog::load(&[FILE], None).expect("the production-shape example loads");
    let sel = Selection {
        scenarios: Some(vec!["production-head-v32000-h512".into()]),
        ..Default::default()
    };
    let groups = catalog
        .select(&sel)
        .expect("the example's selection is valid");
    let mut group = c.benchmark_group("production_shape");
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_secs(1));
    group.measurement_time(std::time::Duration::from_secs(30));
    group.throughput(Throughput::Elements(1));
    let g = &groups[0];
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    let mut seed = 8173u64;
    group.bench_function("v32000-h512/seed-run", |b| {
        b.iter(|| {
            unit(&catalog, g, seed, &mut ws, &mut out);
            seed += 1;
            out[0].usage
        })
    });
    group.finish();
}

criterion_group!(benches, production_seed_run);
criterion_main!(benches);
