//! The commands, independent of clap: typed options in, text and files out.

use std::path::PathBuf;

use crate::catalog::{Catalog, Selection};
use crate::config::RngKind;
use crate::error::InputError;
use crate::evaluate::Comparison;
use crate::export::{csv::write_sweep, prepare_dir, table::sweep_summary};
use crate::sweep::{run, summarize, SeedRange};

/// Exit code when `--fail-on-exceed` was given and a check exceeded its tolerance.
pub const EXIT_EXCEEDED: i32 = 3;

/// Options shared by the commands that select work.
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// Extra scenario configs.
    pub configs: Vec<PathBuf>,
    /// Generator override.
    pub rng: Option<RngKind>,
    /// The selection.
    pub selection: Selection,
}

/// `sweep` options.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// Selection and configs.
    pub common: Common,
    /// Number of seeds.
    pub seeds: u64,
    /// First seed, or each scenario's own.
    pub first_seed: Option<u64>,
    /// Worker threads (default: all cores).
    pub threads: Option<usize>,
    /// Output directory.
    pub out: PathBuf,
    /// No progress bar.
    pub quiet: bool,
    /// Exit with [`EXIT_EXCEEDED`] when a check fails for some seed in the comparison its test
    /// asserts.
    pub fail_on_exceed: bool,
}

/// `repro` options.
#[derive(Debug, Clone)]
pub struct ReproOptions {
    /// Selection and configs.
    pub common: Common,
    /// The seed, or each scenario's configured first seed.
    pub seed: Option<u64>,
    /// Which comparison gets torch-style messages (default: each scenario's asserted one).
    pub comparison: Option<Comparison>,
    /// Exit with [`EXIT_EXCEEDED`] when a check of that comparison exceeds.
    pub fail_on_exceed: bool,
    /// Directory for raw trace dumps.
    pub dump: Option<PathBuf>,
}

fn pool(threads: Option<usize>) -> anyhow::Result<rayon::ThreadPool> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        b = b.num_threads(n);
    }
    Ok(b.build()?)
}

/// Runs a sweep; returns the process exit code.
pub fn sweep(o: &SweepOptions) -> anyhow::Result<i32> {
    if o.seeds == 0 {
        return Err(InputError::flag("--seeds", "0 is not allowed; give at least 1 seed").into());
    }
    if o.threads == Some(0) {
        return Err(
            InputError::flag("--threads", "0 is not allowed; give at least 1 thread").into(),
        );
    }
    if let Some(first) = o.first_seed {
        if first.checked_add(o.seeds - 1).is_none() {
            return Err(InputError::flag("--first-seed", "the seed range overflows u64").into());
        }
    }
    let catalog = Catalog::load(&o.common.configs, o.common.rng)?;
    let groups = catalog.plan(&o.common.selection)?;
    prepare_dir(&o.out, "--out")?;
    let range = SeedRange {
        first: o.first_seed,
        count: o.seeds,
    };
    let results = pool(o.threads)?.install(|| run(&catalog, &groups, &range, o.quiet));
    let summaries: Vec<_> = groups
        .iter()
        .zip(&results)
        .map(|(g, r)| summarize(&catalog, g, r))
        .collect();
    write_sweep(&o.out, &catalog, &groups, &results, &summaries)?;
    print!("{}", sweep_summary(&catalog, &groups, &results, &summaries));
    print!(
        "{}",
        crate::export::table::mutant_summary(&catalog, &groups, &results, &summaries)
    );
    let mutants = if groups.iter().any(|g| g.mutant.is_some()) {
        format!(", {}", o.out.join("mutants.csv").display())
    } else {
        String::new()
    };
    println!(
        "wrote {}, {}{}",
        o.out.join("seeds.csv").display(),
        o.out.join("summary.csv").display(),
        mutants
    );
    let exceeded = groups
        .iter()
        .zip(&summaries)
        .filter(|(g, _)| g.mutant.is_none())
        .any(|(g, entries)| {
            let asserted = catalog.scenarios[g.scenario].asserted_comparison();
            entries
                .iter()
                .any(|e| e.comparison == asserted && e.failing_seeds > 0)
        });
    Ok(if o.fail_on_exceed && exceeded {
        EXIT_EXCEEDED
    } else {
        0
    })
}

/// Re-runs one seed; returns the process exit code.
pub fn repro(o: &ReproOptions) -> anyhow::Result<i32> {
    let catalog = Catalog::load(&o.common.configs, o.common.rng)?;
    let groups = catalog.plan(&o.common.selection)?;
    if let Some(dir) = &o.dump {
        prepare_dir(dir, "--dump")?;
    }
    let outcome = crate::repro::repro(
        &catalog,
        &groups,
        |g| {
            o.seed
                .unwrap_or(catalog.scenarios[g.scenario].common().first_seed)
        },
        o.comparison,
        o.dump.as_deref(),
    )?;
    print!("{}", outcome.text);
    Ok(if o.fail_on_exceed && outcome.exceeded {
        EXIT_EXCEEDED
    } else {
        0
    })
}

/// `list`: scenarios with their parametrizations and checks, profiles, modifiers, policies.
pub fn list(common: &Common) -> anyhow::Result<String> {
    let catalog = Catalog::load(&common.configs, common.rng)?;
    let mut out = String::from("SCENARIOS\n");
    for s in &catalog.scenarios {
        let c = s.common();
        out.push_str(&format!(
            "  {}  ({}; first seed {}; rng {}; {})\n    {}\n",
            c.name,
            c.file,
            c.first_seed,
            c.rng.name(),
            s.summary(),
            c.description
        ));
        out.push_str("    params:\n");
        for (i, id) in s.param_ids().iter().enumerate() {
            let checks: Vec<&str> = s.checks(i).iter().map(|c| c.name).collect();
            out.push_str(&format!("      {id}  checks: {}\n", checks.join(", ")));
        }
        out.push_str(&format!(
            "    default profiles: {}; default policies: {}\n",
            c.profiles.join(", "),
            c.default_policies.join(", ")
        ));
        out.push_str("    policies:\n");
        for p in s.policies() {
            let overrides: Vec<String> = p
                .checks
                .iter()
                .map(|(k, t)| format!("{k}={}/{}", t.atol, t.rtol))
                .collect();
            let extra = if overrides.is_empty() {
                String::new()
            } else {
                format!("; overrides {}", overrides.join(", "))
            };
            out.push_str(&format!(
                "      {:<14} atol {} rtol {}{}  — {}\n",
                p.name, p.default.atol, p.default.rtol, extra, p.description
            ));
        }
    }
    out.push_str("\nPROFILES\n");
    for p in catalog.profiles.profiles() {
        out.push_str(&format!("  {:<16} {}\n", p.name, p.description));
    }
    out.push_str("\nMODIFIERS (compose as PROFILE+MODIFIER)\n");
    for m in catalog.profiles.modifier_names() {
        out.push_str(&format!(
            "  {:<22} {}\n",
            m,
            catalog.profiles.modifier_description(m).unwrap_or_default()
        ));
    }
    out.push_str("\nMUTANTS (--mutants all|NAME,...; injected into the sharded computation)\n");
    for m in crate::mutant::Mutant::ALL {
        let users: Vec<&str> = catalog
            .scenarios
            .iter()
            .filter(|s| s.mutants().contains(&m))
            .map(|s| s.common().name.as_str())
            .collect();
        if !users.is_empty() {
            out.push_str(&format!("  {:<26} {}\n", m.name(), users.join(", ")));
        }
    }
    out.push_str(
        "\nCOMPARISONS\n  sharded-vs-ref (what the test asserts), ref-vs-f64, sharded-vs-f64\n",
    );
    Ok(out)
}

/// `bench` options.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Selection and configs (default: the T1 scenario).
    pub common: Common,
    /// Seeds per parametrization and profile for the measured runs.
    pub seeds: u64,
}

/// Seed-runs per second of `groups` over `seeds` seeds each, run + evaluate, no output files.
pub fn measure(
    catalog: &Catalog,
    groups: &[crate::catalog::Group],
    seeds: u64,
    kernels: crate::backend::Kernels,
    threads: usize,
) -> anyhow::Result<(u64, f64)> {
    use rayon::prelude::*;
    let units: Vec<(usize, u64)> = (0..groups.len())
        .flat_map(|g| (0..seeds).map(move |s| (g, s)))
        .collect();
    let start = std::time::Instant::now();
    let checksum: f64 = pool(Some(threads))?.install(|| {
        units
            .par_iter()
            .map_init(
                || crate::scenario::Workspace::with_kernels(kernels),
                |ws, &(gi, s)| {
                    let g = &groups[gi];
                    let sc = &catalog.scenarios[g.scenario];
                    sc.run(g.param, sc.common().first_seed + s, &g.profile, ws);
                    let mut out = Vec::new();
                    crate::evaluate::evaluate(
                        sc.checks(g.param),
                        &g.tolerances,
                        &ws.traces,
                        &mut out,
                    );
                    out.first().map(|r| r.usage).unwrap_or(0.0)
                },
            )
            .sum()
    });
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(checksum);
    Ok((units.len() as u64, units.len() as f64 / secs))
}

/// `bench`: seed-runs per second of the fast kernels against the scalar-reference baseline in
/// the same process, on 1 thread and on all threads. One seed-run is one parametrization ×
/// one seed × the three computations (f64, reference, sharded) over all steps, plus the
/// evaluation of every check.
pub fn bench(o: &BenchOptions) -> anyhow::Result<String> {
    if o.seeds == 0 {
        return Err(InputError::flag("--seeds", "0 is not allowed; give at least 1 seed").into());
    }
    let catalog = Catalog::load(&o.common.configs, o.common.rng)?;
    let mut sel = o.common.selection.clone();
    if sel.scenarios.is_none() && o.common.configs.is_empty() {
        sel.scenarios = Some(vec!["deepspeed-tied-row-parallel".into()]);
    }
    let groups = catalog.plan(&sel)?;
    let all = rayon::current_num_threads();
    use crate::backend::Kernels;
    // Warm-up: grows every buffer and faults in the code.
    measure(&catalog, &groups, 2, Kernels::Fast, 1)?;
    let baseline_seeds = (o.seeds / 10).max(1);
    let (nb, base) = measure(
        &catalog,
        &groups,
        baseline_seeds,
        Kernels::ScalarReference,
        1,
    )?;
    let (n1, fast1) = measure(&catalog, &groups, o.seeds, Kernels::Fast, 1)?;
    let (nn, fastn) = measure(&catalog, &groups, o.seeds, Kernels::Fast, all)?;
    let mut out = String::new();
    out.push_str(&format!(
        "seed-runs: {} parametrization(s) x profile(s), {} seeds each\n",
        groups.len(),
        o.seeds
    ));
    out.push_str(&format!(
        "  baseline (scalar reference kernels), 1 thread: {base:>10.0} seed-runs/s  ({nb} runs)\n"
    ));
    out.push_str(&format!(
        "  fast kernels, 1 thread:                        {fast1:>10.0} seed-runs/s  ({n1} runs)  {:.2}x baseline\n",
        fast1 / base
    ));
    out.push_str(&format!(
        "  fast kernels, {all} threads:                       {fastn:>10.0} seed-runs/s  ({nn} runs)  {:.2}x baseline, {:.2}x 1 thread\n",
        fastn / base,
        fastn / fast1
    ));
    Ok(out)
}
