//! `seedsweep bench`: seed-runs per second through the engine, fast kernels against the
//! scalar-reference baseline in the same process.

use crate::catalog::Catalog;
use crate::commands::{load_catalog, Common};
use crate::engine::plan::{in_order, seed_runs_memory};
use crate::error::InputError;
use crate::limits::pool;

/// Largest `bench --seeds` (a measurement, not a sweep).
pub const MAX_BENCH_SEEDS: u64 = 10_000_000;

/// `bench` options.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Selection and configs (default: the T1 scenario).
    pub common: Common,
    /// Seeds per parametrization and profile for the measured runs.
    pub seeds: u64,
}

/// Seed-runs per second of `groups` over `seeds` seeds each from each scenario's first seed,
/// through the engine ([`crate::engine::unit`]: run + evaluate, in [`in_order`] chunks as a
/// sweep runs them), no aggregation and no output files.
pub fn measure(
    catalog: &Catalog,
    groups: &[crate::catalog::Group],
    seeds: u64,
    kernels: crate::backend::Kernels,
    threads: usize,
) -> anyhow::Result<(u64, f64)> {
    // Units are indexed, not collected: their count may be large.
    let n_units = (groups.len() as u64)
        .checked_mul(seeds)
        .ok_or_else(|| InputError::flag("--seeds", "seeds x groups overflows u64"))?;
    let start = std::time::Instant::now();
    let mut checksum = 0.0f64;
    pool(Some(threads))?.install(|| {
        in_order(
            (0..n_units).map(|i| ((i / seeds) as usize, i % seeds)),
            || {
                (
                    crate::scenario::Workspace::with_kernels(kernels),
                    Vec::new(),
                )
            },
            |(ws, out), &(gi, s)| {
                let g = &groups[gi];
                let first = catalog.scenarios[g.scenario].common().first_seed;
                crate::engine::unit(catalog, g, first + s, ws, out);
                out.first().map(|r| r.usage).unwrap_or(0.0)
            },
            |_, usages| {
                checksum += usages.iter().sum::<f64>();
                Ok(())
            },
        )
    })?;
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(checksum);
    Ok((n_units, n_units as f64 / secs))
}

/// `bench`: seed-runs per second of the fast kernels against the scalar-reference baseline in
/// the same process, on 1 thread and on all threads. One seed-run is one parametrization ×
/// one seed × the three computations (f64, reference, sharded) over all steps, plus the
/// evaluation of every check.
pub fn bench(o: &BenchOptions) -> anyhow::Result<String> {
    if !(1..=MAX_BENCH_SEEDS).contains(&o.seeds) {
        return Err(InputError::flag(
            "--seeds",
            format!("{} is not allowed; allowed: 1..={MAX_BENCH_SEEDS}", o.seeds),
        )
        .into());
    }
    let catalog = load_catalog(&o.common)?;
    let mut sel = o.common.selection.clone();
    if sel.scenarios.is_none() && o.common.configs.is_empty() {
        sel.scenarios = Some(vec!["deepspeed-tied-row-parallel".into()]);
    }
    let groups = catalog.plan(&sel)?;
    crate::limits::check_seed_range(&catalog, &groups, None, o.seeds)?;
    let all = rayon::current_num_threads();
    crate::limits::check_memory(
        &[seed_runs_memory(&catalog, &groups, Some(all), o.seeds)],
        o.common.max_memory,
    )?;
    use crate::backend::Kernels;
    // Per scenario (the plan lists a scenario's groups together): its groups, measured on
    // their own.
    let scenarios: Vec<(usize, &[crate::catalog::Group])> = groups
        .chunk_by(|a, b| a.scenario == b.scenario)
        .map(|gs| (gs[0].scenario, gs))
        .collect();
    let baseline_seeds = (o.seeds / 10).max(1);
    let mut rows = Vec::new();
    for (si, gs) in &scenarios {
        // Warm-up: grows every buffer and faults in the code.
        measure(&catalog, gs, 1, Kernels::Fast, 1)?;
        let (_, base) = measure(&catalog, gs, baseline_seeds, Kernels::ScalarReference, 1)?;
        let (n1, fast1) = measure(&catalog, gs, o.seeds, Kernels::Fast, 1)?;
        let (_, fastn) = measure(&catalog, gs, o.seeds, Kernels::Fast, all)?;
        rows.push(Row {
            scenario: *si,
            groups: gs.len(),
            runs: n1,
            base,
            fast1,
            fastn,
        });
    }
    let mut out = String::new();
    out.push_str(&format!(
        "seed-runs/s (run + evaluate, no output), {} seeds per parametrization x profile x mutant; \
         baseline: scalar reference kernels, 1 thread, {baseline_seeds} seeds\n",
        o.seeds
    ));
    let name_w = scenarios
        .iter()
        .map(|(si, _)| catalog.scenarios[*si].common().name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    out.push_str(&format!(
        "{:<name_w$}  {:>6}  {:>10}  {:>10}  {:>8}  {:>10}  {:>8}\n",
        "scenario",
        "groups",
        "baseline",
        "1 thread",
        "x base",
        format!("{all} threads"),
        format!("1->{all}"),
    ));
    for r in &rows {
        out.push_str(&format!(
            "{:<name_w$}  {:>6}  {:>10}  {:>10}  {:>7.2}x  {:>10}  {:>7.2}x\n",
            catalog.scenarios[r.scenario].common().name,
            r.groups,
            rate(r.base),
            rate(r.fast1),
            r.fast1 / r.base,
            rate(r.fastn),
            r.fastn / r.fast1,
        ));
    }
    // The selection as a whole: every seed-run weighted by its time (harmonic combination
    // of the per-scenario rates, i.e. total runs over total time).
    let total = |f: fn(&Row) -> f64| {
        let runs: f64 = rows.iter().map(|r| r.runs as f64).sum();
        runs / rows.iter().map(|r| r.runs as f64 / f(r)).sum::<f64>()
    };
    let (base, fast1, fastn) = (total(|r| r.base), total(|r| r.fast1), total(|r| r.fastn));
    let n1: u64 = rows.iter().map(|r| r.runs).sum();
    out.push_str(&format!(
        "  baseline (scalar reference kernels), 1 thread: {:>10} seed-runs/s\n",
        rate(base)
    ));
    out.push_str(&format!(
        "  fast kernels, 1 thread:                        {:>10} seed-runs/s  ({n1} runs)  {:.2}x baseline\n",
        rate(fast1),
        fast1 / base
    ));
    out.push_str(&format!(
        "  fast kernels, {all} threads:                       {:>10} seed-runs/s  ({n1} runs)  {:.2}x baseline, {:.2}x 1 thread\n",
        rate(fastn),
        fastn / base,
        fastn / fast1
    ));
    Ok(out)
}

/// One scenario's figures in seed-runs/s.
struct Row {
    scenario: usize,
    groups: usize,
    runs: u64,
    base: f64,
    fast1: f64,
    fastn: f64,
}

/// A rate with three significant digits at least (a production-shape seed-run takes seconds).
fn rate(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}
