//! `seedsweep bench`: seed-runs per second through the engine, fast kernels against the
//! scalar-reference baseline in the same process.

use crate::commands::{load_catalog, Common};
use crate::engine::catalog::Catalog;
use crate::engine::plan::{families, in_order, seed_runs_memory};
use crate::sys::error::InputError;
use crate::sys::limits::pool;

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
/// through the engine as a sweep runs them, without aggregation or output files: the
/// groups' families ([`families`]) seed by seed in [`in_order`] chunks, each family's
/// distinct computations run and evaluated once per seed ([`crate::engine::run::run_family`];
/// parametrizations whose resolved computations are equal, such as T1's `35-3-True-0` and
/// `35-3-False-0`, share one run and its evaluation, which a sweep reports under each id);
/// a group that streams runs step by step. Returns (seed-runs, seed-runs/s, distinct
/// computations run).
pub fn measure(
    catalog: &Catalog,
    groups: &[crate::engine::catalog::Group],
    seeds: u64,
    kernels: crate::ops::backend::Kernels,
    threads: usize,
) -> anyhow::Result<(u64, f64, u64)> {
    use crate::engine::{evaluate, run};
    let plan: Vec<(usize, std::ops::Range<u64>)> = groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let first = catalog.scenarios[g.scenario].common().first_seed;
            (gi, first..first + seeds)
        })
        .collect();
    // No results are held back here, so no family is cut short by a memory budget.
    let fams = families(catalog, groups, &plan, u64::MAX, |_| 0);
    // Units are indexed, not collected: their count may be large.
    let n_units = (groups.len() as u64)
        .checked_mul(seeds)
        .ok_or_else(|| InputError::flag("--seeds", "seeds x groups overflows u64"))?;
    let computations: u64 = fams.iter().map(|f| f.runs.len() as u64 * seeds).sum();
    let start = std::time::Instant::now();
    let mut checksum = 0.0f64;
    pool(Some(threads))?.install(|| {
        in_order(
            fams.iter()
                .enumerate()
                .flat_map(|(fi, f)| f.seeds.clone().map(move |seed| (fi, seed))),
            || {
                (
                    crate::exec::scenario::Workspace::with_kernels(kernels),
                    Vec::new(),
                    Vec::new(),
                )
            },
            |(ws, out, prev), &(fi, seed)| {
                let f = &fams[fi];
                let first = &groups[f.groups.start];
                if catalog.scenarios[first.scenario].streams(first.param) {
                    let (out, _) = run::run_group_streamed(catalog, first, seed, ws, false);
                    return out.first().map_or(0.0, |r| r.usage);
                }
                let mut sum = 0.0;
                run::run_family(catalog, groups, f, seed, ws, |g, parts, ws| {
                    let checks = catalog.scenarios[g.scenario].checks(g.param);
                    let reuse = (!parts.reference).then_some(&prev[..]);
                    evaluate::evaluate_scanning(
                        checks,
                        &g.tolerances,
                        &ws.traces,
                        reuse,
                        out,
                        None,
                    );
                    sum += out.first().map_or(0.0, |r| r.usage);
                    std::mem::swap(out, prev);
                });
                sum
            },
            |_, usages| {
                checksum += usages.iter().sum::<f64>();
                Ok(())
            },
        )
    })?;
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(checksum);
    Ok((n_units, n_units as f64 / secs, computations))
}

/// `bench`: seed-runs per second of the fast kernels against the scalar-reference baseline in
/// the same process, on 1 thread and on all threads. One seed-run is one parametrization ×
/// one seed × the three computations (f64, reference, sharded) over all steps, plus the
/// evaluation of every check.
pub fn bench(o: &BenchOptions) -> anyhow::Result<String> {
    let catalog = load_catalog(&o.common)?;
    let mut sel = o.common.selection.clone();
    if sel.scenarios.is_none() && o.common.configs.is_empty() {
        sel.scenarios = Some(vec!["deepspeed-tied-row-parallel".into()]);
    }
    let groups = catalog.select(&sel)?;
    crate::engine::budget::check_seed_range(&catalog, &groups, None, o.seeds)?;
    let all = rayon::current_num_threads();
    crate::sys::limits::check_memory(
        &[seed_runs_memory(&catalog, &groups, Some(all), o.seeds)],
        o.common.max_memory,
    )?;
    use crate::ops::backend::Kernels;
    // Per scenario (the plan lists a scenario's groups together): its groups, measured on
    // their own.
    let scenarios: Vec<(usize, &[crate::engine::catalog::Group])> = groups
        .chunk_by(|a, b| a.scenario == b.scenario)
        .map(|gs| (gs[0].scenario, gs))
        .collect();
    let baseline_seeds = (o.seeds / 10).max(1);
    let mut rows = Vec::new();
    for (si, gs) in &scenarios {
        // Warm-up: grows every buffer and faults in the code.
        measure(&catalog, gs, 1, Kernels::Fast, 1)?;
        let (_, base, _) = measure(&catalog, gs, baseline_seeds, Kernels::ScalarReference, 1)?;
        let (n1, fast1, computed) = measure(&catalog, gs, o.seeds, Kernels::Fast, 1)?;
        let (_, fastn, _) = measure(&catalog, gs, o.seeds, Kernels::Fast, all)?;
        rows.push(Row {
            scenario: *si,
            groups: gs.len(),
            runs: n1,
            computed,
            base,
            fast1,
            fastn,
        });
    }
    let mut out = String::new();
    out.push_str(&format!(
        "seed-runs/s (run + evaluate as a sweep runs them, no output), {} seeds per parametrization x profile x mutant; \
         baseline: scalar reference kernels, 1 thread, {baseline_seeds} seeds\n\
         computed: distinct computations per seed among a scenario's groups (parametrizations whose \
         resolved computations are equal share one run and its evaluation, as in a sweep)\n",
        o.seeds
    ));
    let name_w = scenarios
        .iter()
        .map(|(si, _)| catalog.scenarios[*si].common().name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    out.push_str(&format!(
        "{:<name_w$}  {:>6}  {:>8}  {:>10}  {:>10}  {:>8}  {:>10}  {:>8}\n",
        "scenario",
        "groups",
        "computed",
        "baseline",
        "1 thread",
        "x base",
        format!("{all} threads"),
        format!("1->{all}"),
    ));
    for r in &rows {
        out.push_str(&format!(
            "{:<name_w$}  {:>6}  {:>8}  {:>10}  {:>10}  {:>7.2}x  {:>10}  {:>7.2}x\n",
            catalog.scenarios[r.scenario].common().name,
            r.groups,
            r.computed / (r.runs / r.groups as u64).max(1),
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
    /// Distinct computations among the runs (equal parametrizations run once).
    computed: u64,
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
