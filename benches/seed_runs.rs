//! T1 seed-runs per second (criterion). One seed-run is one parametrization × one seed ×
//! the three computations (f64, unsharded fp32, sharded fp32) × 3 steps, plus the evaluation
//! of every check, through the engine (`seedsweep::engine::unit`, what `sweep` runs per
//! unit). The `scalar-reference` rows are the baseline in the same process: the same
//! seed-run with one scalar dot product per matmul element. `seedsweep bench` prints the ratio
//! and the 1→2 thread scaling directly.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::engine::unit;
use seedsweep::exec::scenario::Workspace;
use seedsweep::ops::backend::Kernels;

fn t1_seed_runs(c: &mut Criterion) {
    let catalog = Catalog::load(&[] as &[&str], None).expect("built-in configs load");
    let sel = Selection {
        scenarios: Some(vec!["deepspeed-tied-row-parallel".into()]),
        ..Default::default()
    };
    let groups = catalog.select(&sel).expect("built-in selection is valid");
    let mut group = c.benchmark_group("t1_seed_run");
    group.throughput(Throughput::Elements(1));
    for g in &groups {
        let s = &catalog.scenarios[g.scenario];
        let id = s.param_ids()[g.param];
        for (kernels, name) in [
            (Kernels::Fast, "fast"),
            (Kernels::ScalarReference, "scalar-reference"),
        ] {
            let mut ws = Workspace::with_kernels(kernels);
            let mut out = Vec::new();
            let mut seed = 8173u64;
            group.bench_function(format!("{id}/{name}"), |b| {
                b.iter(|| {
                    unit(&catalog, g, seed, &mut ws, &mut out);
                    seed += 1;
                    out[0].usage
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, t1_seed_runs);
criterion_main!(benches);
