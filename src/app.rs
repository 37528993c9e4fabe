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
    /// Exit with [`EXIT_EXCEEDED`] when a `sharded-vs-ref` check fails for some seed.
    pub fail_on_exceed: bool,
}

/// `repro` options.
#[derive(Debug, Clone)]
pub struct ReproOptions {
    /// Selection and configs.
    pub common: Common,
    /// The seed, or each scenario's configured first seed.
    pub seed: Option<u64>,
    /// Which comparison gets torch-style messages.
    pub comparison: Comparison,
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
    println!(
        "wrote {} and {}",
        o.out.join("seeds.csv").display(),
        o.out.join("summary.csv").display()
    );
    let exceeded = summaries
        .iter()
        .flatten()
        .any(|e| e.comparison == Comparison::ShardedVsRef && e.failing_seeds > 0);
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
    out.push_str(
        "\nCOMPARISONS\n  sharded-vs-ref (what the test asserts), ref-vs-f64, sharded-vs-f64\n",
    );
    Ok(out)
}
