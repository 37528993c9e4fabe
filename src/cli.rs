//! Command-line definitions. This is the only module that knows clap; it turns the parsed
//! arguments into the typed options of [`crate::commands`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::check::comparison::Comparison;
use crate::commands::bench::BenchOptions;
use crate::commands::repro::ReproOptions;
use crate::commands::sweep::SweepOptions;
use crate::commands::{Action, Common};
use crate::engine::catalog::Selection;
use crate::engine::plan::{Shard, ShardChoice};
use crate::scenario::config::RngKind;
use crate::sys::error::InputError;

/// Seed-sweep numerical divergence harness: mirrors sharded-vs-unsharded ML tests bit-exactly
/// on the CPU and reports how much of each check's tolerance every seed uses.
#[derive(Debug, Parser)]
#[command(name = "seedsweep", version, about, long_about = None)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sweep N seeds of the selected scenarios and write seeds.csv and summary.csv.
    Sweep(SweepArgs),
    /// Re-run one seed and print torch-style mismatch messages for every failing check.
    Repro(ReproArgs),
    /// List scenarios, parametrizations, checks, profiles and policies.
    List(SelectArgs),
    /// Measure seed-runs per second against the scalar-reference baseline (default: T1).
    Bench(BenchArgs),
    /// Rank numerics profiles by how well they explain an observed value.
    Explain(ExplainArgs),
    /// Combine the output directories of `sweep --shard` runs into one, byte for byte.
    Merge(MergeArgs),
    /// Write a self-contained HTML report (SVG charts, no network) of a sweep directory.
    Report(ReportArgs),
    /// Recommend tolerances from a seed sweep (tail fit at a flake rate) and check that they
    /// still catch the injected bugs; optionally write a pull-request Evidence section.
    Size(SizeArgs),
    /// How divergence grows with the reduction length K and the TP degree (synthetic
    /// row-parallel shapes), next to the √K·u theory line; writes scale.csv and scale.svg.
    Scale(ScaleArgs),
    /// Validate a scenario file (docs/scenario-language.md) and print its resolved graph:
    /// every tensor's shape per rank, the collectives, the optimizer and the checks.
    Check(CheckArgs),
}

/// `check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A scenario file in the language.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Fail when a default profile that mirrors torch's CPU does not cover the file exactly
    /// (without it, such gaps are listed on stderr as warnings).
    #[arg(long)]
    strict_exactness: bool,
}

/// `report` flags.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A sweep output directory (plan.csv, summary.csv, and seeds.csv / mutants.csv if any).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Output file (default: DIR/report.html).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// No progress bar and no status lines on stderr (errors and warnings still print).
    #[arg(long, short)]
    quiet: bool,
}

/// `size` flags.
#[derive(Debug, Args)]
pub struct SizeArgs {
    /// A finished sweep directory: size from its frontiers.bin without re-running (the
    /// selection flags then filter its groups). Without DIR, `size` sweeps in-process.
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    filter: Filter,
    /// Seeds per (parametrization, profile) when sweeping in-process [default: 1000].
    #[arg(long, value_parser = seed_count, allow_negative_numbers = true)]
    seeds: Option<u64>,
    /// First seed (default: each scenario's own).
    #[arg(long, allow_negative_numbers = true, value_name = "S")]
    first_seed: Option<u64>,
    /// Per-seed failure probability the recommendation must tolerate.
    #[arg(
        long,
        value_parser = flake_rate,
        allow_negative_numbers = true,
        default_value_t = 1e-4,
        value_name = "P"
    )]
    flake_rate: f64,
    /// Largest predicted usage at that probability, percent.
    #[arg(
        long,
        value_parser = target_pct,
        allow_negative_numbers = true,
        default_value_t = 50.0,
        value_name = "PCT"
    )]
    target: f64,
    /// Worker threads (default: SLURM_CPUS_PER_TASK where set, else the cores this process
    /// may use: its CPU affinity and cgroup CPU quota).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true, value_name = "N")]
    threads: Option<usize>,
    /// Also write the Evidence section as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Where recommendations.csv goes (default: DIR/recommendations.csv; without DIR, only
    /// when given).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Sweep N fresh seeds after the sized range under the recommended tolerances and report
    /// the observed flake rate and quantile next to the predicted ones.
    #[arg(long, value_parser = seed_count, value_name = "N")]
    validate: Option<u64>,
    /// No progress bar and no status lines on stderr (errors and warnings still print).
    #[arg(long, short)]
    quiet: bool,
}

/// `scale` flags.
#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Scenario config file(s) whose `[profiles.*]` / `[modifiers.*]` tables add profiles for
    /// --profile (scale draws its own synthetic data: it uses nothing else of a config).
    #[arg(long = "config", value_name = "FILE")]
    configs: Vec<PathBuf>,
    /// Memory this run may use, e.g. 8G (default: the machine's available memory).
    #[arg(long, value_name = "SIZE")]
    max_memory: Option<String>,
    /// Numerics profile.
    #[arg(long, default_value = "cpu-fma", value_name = "PROFILE")]
    profile: String,
    /// Reduction lengths (hidden sizes), comma-separated.
    #[arg(
        long,
        value_parser = reduction_len,
        allow_negative_numbers = true,
        value_delimiter = ',',
        default_value = "32,64,128,256,512,1024,2048,4096,8192,16384",
        value_name = "K"
    )]
    k: Vec<usize>,
    /// TP degrees, comma-separated (1..=64).
    #[arg(
        long,
        value_parser = tp_degree,
        allow_negative_numbers = true,
        value_delimiter = ',',
        default_value = "2,4,8,16,32,64",
        value_name = "TP"
    )]
    tp: Vec<usize>,
    /// Seeds per point.
    #[arg(long, value_parser = seed_count, allow_negative_numbers = true, default_value_t = 50)]
    seeds: u64,
    /// Rows (tokens) of the synthetic input.
    #[arg(long, value_parser = at_least_one, allow_negative_numbers = true, default_value_t = 8)]
    rows: usize,
    /// Output columns of the synthetic layer.
    #[arg(long, value_parser = at_least_one, allow_negative_numbers = true, default_value_t = 64)]
    cols: usize,
    /// Policies for the usage columns (shared policies: torch-default, chex-default, ...).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "torch-default",
        value_name = "POLICY"
    )]
    policy: Vec<String>,
    /// Worker threads (default: SLURM_CPUS_PER_TASK where set, else the cores this process
    /// may use: its CPU affinity and cgroup CPU quota).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true, value_name = "N")]
    threads: Option<usize>,
    /// Output directory.
    #[arg(long, default_value = "results/scale", value_name = "DIR")]
    out: PathBuf,
    /// No progress bar and no status lines on stderr (errors and warnings still print).
    #[arg(long, short)]
    quiet: bool,
}

/// `explain` flags.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    select: SelectArgs,
    /// Scenario name.
    #[arg(long, value_name = "NAME")]
    scenario: String,
    /// Parametrization id (needed when the scenario has several).
    #[arg(long, value_name = "ID")]
    param: Option<String>,
    /// Check name (e.g. loss, logits).
    #[arg(long, value_name = "NAME")]
    check: String,
    /// Step as printed by sweep/repro (e.g. 2, or 1.0 for a micro-step).
    #[arg(long, value_name = "STEP")]
    step: String,
    /// Flat element index within the check's tensor (0 for scalars).
    #[arg(
        long,
        allow_negative_numbers = true,
        default_value_t = 0,
        value_name = "I"
    )]
    index: usize,
    /// The value observed on the real hardware.
    #[arg(long, value_name = "VALUE", allow_negative_numbers = true)]
    observed: f64,
    /// Seed (default: the scenario's own).
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    seed: Option<u64>,
    /// Candidate profiles, comma-separated (default: every known profile).
    #[arg(long, value_delimiter = ',', value_name = "PROFILE")]
    profile: Option<Vec<String>>,
    /// Computation to read: sharded (default) or reference.
    #[arg(long, default_value = "sharded", value_name = "NAME")]
    computation: String,
    /// Output format: table or csv.
    #[arg(long, default_value = "table", value_name = "FORMAT")]
    format: String,
}

/// `bench` flags.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    filter: Filter,
    /// Seeds per (parametrization, profile); the baseline runs a tenth of them.
    #[arg(long, value_parser = bench_seed_count, allow_negative_numbers = true, default_value_t = 500)]
    seeds: u64,
}

/// Flags shared by the commands.
#[derive(Debug, Args)]
pub struct SelectArgs {
    /// Scenario config file(s) to add or replace (copy one from configs/). Repeatable.
    #[arg(long = "config", value_name = "FILE")]
    pub configs: Vec<PathBuf>,
    /// Random generator for initial weights and inputs: torch (bit-exact torch CPU) or chacha.
    #[arg(long, value_name = "NAME")]
    pub rng: Option<String>,
    /// Memory this run may use, e.g. 8G (default: the machine's available memory). A run whose
    /// estimate exceeds it is refused before it starts.
    #[arg(long, value_name = "SIZE")]
    pub max_memory: Option<String>,
}

/// Selection flags.
#[derive(Debug, Args)]
pub struct Filter {
    /// Scenario name(s), comma-separated (default: all, or those of --config files).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub scenario: Option<Vec<String>>,
    /// Parametrization id(s) as pytest spells them, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_name = "ID")]
    pub param: Option<Vec<String>>,
    /// Numerics profile(s), comma-separated; compose modifiers with '+' (default: the config's).
    #[arg(long, value_delimiter = ',', value_name = "PROFILE")]
    pub profile: Option<Vec<String>>,
    /// Tolerance policies, comma-separated (default: the config's, e.g. old,torch-default).
    #[arg(long, value_delimiter = ',', value_name = "POLICY")]
    pub policy: Option<Vec<String>>,
    /// Also run injected bugs in the sharded computation: `all` or names, comma-separated
    /// (see `list`); each mutant is reported next to the clean run.
    #[arg(long, value_delimiter = ',', value_name = "MUTANT")]
    pub mutants: Option<Vec<String>>,
}

/// `sweep` flags.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    filter: Filter,
    /// Number of seeds per (parametrization, profile).
    #[arg(long, value_parser = seed_count, allow_negative_numbers = true, default_value_t = 40)]
    seeds: u64,
    /// First seed (default: each scenario's own, 8173 for the DeepSpeed tests).
    #[arg(long, allow_negative_numbers = true, value_name = "S")]
    first_seed: Option<u64>,
    /// Worker threads (default: SLURM_CPUS_PER_TASK where set, else the cores this process
    /// may use: its CPU affinity and cgroup CPU quota). Output is identical for any value.
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true, value_name = "N")]
    threads: Option<usize>,
    /// Output directory.
    #[arg(long, default_value = "results/latest", value_name = "DIR")]
    out: PathBuf,
    /// No progress bar and no status lines on stderr (errors and warnings still print).
    #[arg(long, short)]
    quiet: bool,
    /// Exit with code 3 when a check fails for some seed in the comparison its test asserts.
    #[arg(long)]
    fail_on_exceed: bool,
    /// Refuse to start when a profile that mirrors torch's CPU does not cover a scenario
    /// exactly (an op, matmul shape or thread count without a bit-exact kernel); without it,
    /// such gaps are listed on stderr as warnings.
    #[arg(long)]
    strict_exactness: bool,
    /// Run only slice I of N of the seeds (0-based), e.g. 2/8. Without it, a Slurm array task
    /// (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) or a Kubernetes indexed job
    /// (JOB_COMPLETION_INDEX with --shard-count) shards itself. Combine shards with `merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Number of shards for a Kubernetes indexed job (JOB_COMPLETION_INDEX).
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    shard_count: Option<u64>,
    /// Write only summary.csv (and frontiers.bin, streamed, for `size DIR`): memory stays
    /// bounded for millions of seeds (p50/p95 from 0.23 % log-bins instead of exact).
    #[arg(long)]
    summary_only: bool,
    /// Continue an interrupted sweep in --out (same command and flags).
    #[arg(long)]
    resume: bool,
    /// Format of the per-seed table: csv (seeds.csv) or parquet (seeds.parquet: the same
    /// columns in about a tenth of the bytes; pandas, polars and DuckDB read it)
    #[arg(long, value_name = "FORMAT", default_value = "csv")]
    format: String,
    #[command(flatten)]
    ci: CiArgs,
}

/// The CI outputs and gates of `sweep` and `repro`.
#[derive(Debug, Args)]
pub struct CiArgs {
    /// Write the verdict as JSON to FILE (`-`: stdout, which then carries nothing else; the
    /// tables go to stderr). Schema: docs/verdict-json.md.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the verdict as JUnit XML to FILE: one test case per check and policy (and per
    /// mutant), failures carrying torch's message and the repro command.
    #[arg(long = "junit-xml", value_name = "FILE")]
    junit_xml: Option<PathBuf>,
    /// Write the verdict as Markdown to FILE (e.g. "$GITHUB_STEP_SUMMARY").
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Exit with code 3 when an injected bug (--mutants) escapes the test on some seed.
    #[arg(long)]
    fail_on_missed_mutant: bool,
    /// Exit with code 3 when the predicted per-seed probability that a check of the asserted
    /// comparison exceeds its tolerance is above P (from the tail fit; 0 <= P < 1; sweep only).
    #[arg(long, value_parser = max_flake_rate, allow_negative_numbers = true, value_name = "P")]
    max_flake_rate: Option<f64>,
}

/// Validates the CI flags: at most one of them writes to stdout, a file's folder exists, P
/// is a probability, and a mutant gate has mutants to judge.
fn ci_outputs(a: CiArgs, mutants: bool) -> Result<crate::commands::CiOutputs, InputError> {
    let mut dash = Vec::new();
    for (flag, path) in [
        ("--json", &a.json),
        ("--junit-xml", &a.junit_xml),
        ("--markdown", &a.markdown),
    ] {
        let Some(path) = path else { continue };
        if path.as_os_str().is_empty() {
            return Err(InputError::flag(
                flag,
                "an empty path is not allowed; give FILE or -",
            ));
        }
        if path.as_os_str() == "-" {
            dash.push(flag);
            continue;
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = parent {
            if !dir.is_dir() {
                return Err(InputError::flag(
                    flag,
                    format!(
                        "the folder {} does not exist; create it or give another FILE",
                        dir.display()
                    ),
                ));
            }
        }
        if path.is_dir() {
            return Err(InputError::flag(
                flag,
                format!("{} is a folder; give a file path", path.display()),
            ));
        }
    }
    if dash.len() > 1 {
        return Err(InputError::flag(
            dash[1],
            format!(
                "{} already writes to stdout (-); give this one a FILE",
                dash[0]
            ),
        ));
    }
    if a.fail_on_missed_mutant && !mutants {
        return Err(InputError::flag(
            "--fail-on-missed-mutant",
            "there are no mutants to judge; add --mutants all (or names)",
        ));
    }
    Ok(crate::commands::CiOutputs {
        json: a.json,
        junit_xml: a.junit_xml,
        markdown: a.markdown,
        fail_on_missed_mutant: a.fail_on_missed_mutant,
        max_flake_rate: a.max_flake_rate,
    })
}

/// `merge` flags.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard output directories (each written by `sweep --shard`).
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Output directory.
    #[arg(
        long,
        allow_negative_numbers = true,
        default_value = "results/latest",
        value_name = "DIR"
    )]
    out: PathBuf,
    /// Only say which shards are done, partial, not started or missing (tab-separated on
    /// stdout; exit 0 when all are done), reading no rows and writing nothing.
    #[arg(long)]
    check: bool,
    /// No status lines on stderr (errors and warnings still print).
    #[arg(long, short)]
    quiet: bool,
}

/// Resolves the shard of this process: `--shard I/N`, else a Slurm array task, else a
/// Kubernetes indexed job (`JOB_COMPLETION_INDEX` with `--shard-count`), else the whole
/// range. `env` reads the environment (a parameter so tests can supply one).
///
/// A Slurm array's variables are checked against each other: the task id lies in
/// `SLURM_ARRAY_TASK_MIN..=SLURM_ARRAY_TASK_MAX` on the `SLURM_ARRAY_TASK_STEP` grid, and
/// `SLURM_ARRAY_TASK_COUNT` is that grid's size; slice `(id - min) / step` of `count`. An
/// array starting at 0 or 1 is a fan-out; one that starts higher, or a one-task array whose
/// id is not 0, is tasks resubmitted alone (`sbatch --array=2`), whose variables no longer
/// say how many shards the sweep has: that is [`ShardChoice::Unknown`], which an existing
/// shard folder resolves under `--resume` and anything else refuses.
pub fn resolve_shard(
    flag: Option<&str>,
    shard_count: Option<u64>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ShardChoice, InputError> {
    let parse = |what: &str, v: &str| -> Result<u64, InputError> {
        v.trim()
            .parse::<u64>()
            .map_err(|_| InputError::flag(what, format!("`{v}` is not a non-negative integer")))
    };
    let check = |flag: &str, index: u64, count: u64| -> Result<Shard, InputError> {
        if count == 0 || index >= count {
            return Err(InputError::flag(
                flag,
                format!("shard {index} of {count} is not allowed; need 0 <= index < count"),
            ));
        }
        Ok(Shard { index, count })
    };
    if let Some(f) = flag {
        let (i, n) = f
            .split_once('/')
            .ok_or_else(|| InputError::flag("--shard", format!("`{f}` is not I/N (e.g. 0/4)")))?;
        let shard = check("--shard", parse("--shard", i)?, parse("--shard", n)?)?;
        return Ok(ShardChoice::Known {
            shard: Some(shard),
            from: format!("--shard {shard}"),
        });
    }
    if let Some(id) = env("SLURM_ARRAY_TASK_ID") {
        return slurm_shard(parse("SLURM_ARRAY_TASK_ID", &id)?, &env, &parse, &check);
    }
    if let Some(i) = env("JOB_COMPLETION_INDEX") {
        let n = shard_count.ok_or_else(|| {
            InputError::flag(
                "--shard-count",
                "JOB_COMPLETION_INDEX is set (Kubernetes indexed job): give the job's completions",
            )
        })?;
        let shard = check(
            "JOB_COMPLETION_INDEX",
            parse("JOB_COMPLETION_INDEX", &i)?,
            n,
        )?;
        return Ok(ShardChoice::Known {
            shard: Some(shard),
            from: format!(
                "the Kubernetes indexed job (JOB_COMPLETION_INDEX={i}, --shard-count {n})"
            ),
        });
    }
    if shard_count.is_some() {
        return Err(InputError::flag(
            "--shard-count",
            "only meaningful with JOB_COMPLETION_INDEX set (a Kubernetes indexed job)",
        ));
    }
    Ok(ShardChoice::whole())
}

/// The shard of a Slurm array task `id` (see [`resolve_shard`]).
fn slurm_shard(
    id: u64,
    env: &impl Fn(&str) -> Option<String>,
    parse: &impl Fn(&str, &str) -> Result<u64, InputError>,
    check: &impl Fn(&str, u64, u64) -> Result<Shard, InputError>,
) -> Result<ShardChoice, InputError> {
    let var = |k: &str| env(k).map(|v| parse(k, &v)).transpose();
    let count = var("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
        InputError::flag(
            "SLURM_ARRAY_TASK_COUNT",
            "is not set although SLURM_ARRAY_TASK_ID is; give --shard I/N",
        )
    })?;
    let min = var("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    let max = var("SLURM_ARRAY_TASK_MAX")?;
    let step = var("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1);
    let vars = format!(
        "SLURM_ARRAY_TASK_ID={id}, SLURM_ARRAY_TASK_COUNT={count}, SLURM_ARRAY_TASK_MIN={min}{}, SLURM_ARRAY_TASK_STEP={step}",
        max.map(|m| format!(", SLURM_ARRAY_TASK_MAX={m}")).unwrap_or_default()
    );
    let unknown = |why: String| {
        Ok(ShardChoice::Unknown {
            flag: "--shard".into(),
            msg: format!(
                "this Slurm array task's variables ({vars}) {why}; give --shard {id}/N with the \
                 shard count N of the original array (scripts/slurm_sweep.sh does), or add \
                 --resume in the shard's existing folder, whose fingerprint says which shard it is"
            ),
        })
    };
    let inconsistent = |why: String| {
        Err(InputError::flag(
            "SLURM_ARRAY_TASK_ID",
            format!("inconsistent Slurm array variables ({vars}): {why}; give --shard I/N"),
        ))
    };
    if step == 0 {
        return inconsistent("a step of 0".into());
    }
    if id < min || max.is_some_and(|m| id > m || m < min) {
        return inconsistent("the task id is outside min..=max".into());
    }
    if !(id - min).is_multiple_of(step) {
        return inconsistent("the task id is not on the array's step grid".into());
    }
    if let Some(m) = max {
        if (m - min) / step + 1 != count {
            return unknown(format!(
                "describe an irregular array ({count} task(s) between {min} and {m}), so they \
                 cannot say which slice this is"
            ));
        }
    }
    if count == 1 && id != 0 {
        return unknown(format!(
            "describe a one-task array whose task is not 0: a task resubmitted alone \
             (sbatch --array={id}) no longer knows how many shards its sweep has"
        ));
    }
    if min > 1 {
        return unknown(format!(
            "describe an array that starts at {min}: tasks resubmitted apart from their fan-out \
             no longer know how many shards their sweep has"
        ));
    }
    // Arrays may start at 1 (--array=1-N): slice (id - min) / step.
    let shard = check("SLURM_ARRAY_TASK_ID", (id - min) / step, count)?;
    Ok(ShardChoice::Known {
        shard: Some(shard),
        from: format!("the Slurm array task ({vars})"),
    })
}

/// `--threads`, or where it is not given a Slurm task's `SLURM_CPUS_PER_TASK` (a task
/// otherwise starts a thread per core of the node); without either, rayon's default, which
/// honours the process's CPU affinity and its cgroup CPU quota (a Kubernetes CPU limit).
fn threads(flag: Option<usize>) -> Result<Option<usize>, InputError> {
    threads_from(flag, |k| std::env::var(k).ok())
}

fn threads_from(
    flag: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<usize>, InputError> {
    if flag.is_some() {
        return Ok(flag);
    }
    match env("SLURM_CPUS_PER_TASK") {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .map(Some)
            .ok_or_else(|| {
                InputError::flag(
                    "SLURM_CPUS_PER_TASK",
                    format!("`{v}` is not a thread count >= 1; give --threads N"),
                )
            }),
    }
}

/// `repro` flags.
#[derive(Debug, Args)]
pub struct ReproArgs {
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    filter: Filter,
    /// The seed to re-run (default: each scenario's own first seed).
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    seed: Option<u64>,
    /// Which comparison gets torch-style messages: sharded-vs-ref, ref-vs-f64, sharded-vs-f64
    /// (default: the one each scenario's test asserts).
    #[arg(long, value_name = "NAME")]
    comparison: Option<String>,
    /// Exit with code 3 when a check of that comparison exceeds its tolerance.
    #[arg(long)]
    fail_on_exceed: bool,
    /// Also write every tensor the evaluation read (the three computations' checked tensors,
    /// expectations and conditions) into DIR: one CSV file and one .npy file per tensor.
    #[arg(long, value_name = "DIR")]
    dump: Option<PathBuf>,
    #[command(flatten)]
    ci: CiArgs,
    /// No progress bar and no status lines on stderr (errors and warnings still print).
    #[arg(long, short)]
    quiet: bool,
}

/// Refuses a name given twice in one list (it would produce duplicate rows).
fn no_duplicates<T: PartialEq + std::fmt::Display>(flag: &str, l: &[T]) -> Result<(), InputError> {
    for (i, a) in l.iter().enumerate() {
        if l[..i].contains(a) {
            return Err(InputError::flag(
                flag,
                format!("`{a}` is given twice; give each name once"),
            ));
        }
    }
    Ok(())
}

fn common(select: &SelectArgs, filter: Option<&Filter>) -> Result<Common, InputError> {
    let rng = match &select.rng {
        None => None,
        Some(s) => Some(RngKind::parse(s).ok_or_else(|| {
            InputError::flag(
                "--rng",
                format!("`{s}` is not allowed; allowed: torch, chacha"),
            )
        })?),
    };
    let selection = match filter {
        None => Selection::default(),
        Some(f) => Selection {
            scenarios: f.scenario.clone(),
            params: f.param.clone(),
            profiles: f.profile.clone(),
            policies: f.policy.clone(),
            mutants: f.mutants.clone(),
        },
    };
    for (flag, list) in [
        ("--scenario", &selection.scenarios),
        ("--param", &selection.params),
        ("--profile", &selection.profiles),
        ("--policy", &selection.policies),
        ("--mutants", &selection.mutants),
    ] {
        if let Some(l) = list {
            if l.is_empty() || l.iter().any(|s| s.trim().is_empty()) {
                return Err(InputError::flag(
                    flag,
                    "empty name; give one or more comma-separated names",
                ));
            }
            no_duplicates(flag, l)?;
        }
    }
    let max_memory = match &select.max_memory {
        None => None,
        Some(s) => Some(
            crate::sys::limits::parse_size(s).map_err(|m| InputError::flag("--max-memory", m))?,
        ),
    };
    Ok(Common {
        configs: select.configs.clone(),
        rng,
        selection,
        max_memory,
    })
}

/// `--format`: a per-seed table format; refused beside `--summary-only`, which writes none.
fn seeds_format(
    value: &str,
    summary_only: bool,
) -> Result<crate::results::seeds_file::SeedsFormat, InputError> {
    use crate::results::seeds_file::SeedsFormat;
    let f = SeedsFormat::parse(value).ok_or_else(|| {
        InputError::flag(
            "--format",
            format!("`{value}` is not allowed; allowed: csv, parquet"),
        )
    })?;
    if summary_only && f != SeedsFormat::Csv {
        return Err(InputError::flag(
            "--format",
            "--summary-only writes no per-seed table, so it takes no --format; drop one of them",
        ));
    }
    Ok(f)
}

/// Turns parsed arguments into options.
pub fn into_action(cli: Cli) -> Result<Action, InputError> {
    Ok(match cli.command {
        Command::Sweep(a) => Action::Sweep(SweepOptions {
            common: common(&a.select, Some(&a.filter))?,
            seeds: a.seeds,
            first_seed: a.first_seed,
            threads: threads(a.threads)?,
            out: a.out,
            quiet: a.quiet,
            fail_on_exceed: a.fail_on_exceed,
            strict_exactness: a.strict_exactness,
            shard: resolve_shard(a.shard.as_deref(), a.shard_count, |k| std::env::var(k).ok())?,
            summary_only: a.summary_only,
            resume: a.resume,
            format: seeds_format(&a.format, a.summary_only)?,
            ci: ci_outputs(a.ci, a.filter.mutants.is_some())?,
        }),
        Command::Repro(a) => {
            let comparison = match &a.comparison {
                None => None,
                Some(c) => Some(Comparison::parse(c).ok_or_else(|| {
                    InputError::flag(
                        "--comparison",
                        format!("`{c}` is not allowed; allowed: sharded-vs-ref, ref-vs-f64, sharded-vs-f64"),
                    )
                })?),
            };
            Action::Repro(ReproOptions {
                common: common(&a.select, Some(&a.filter))?,
                seed: a.seed,
                comparison,
                fail_on_exceed: a.fail_on_exceed,
                dump: a.dump,
                quiet: a.quiet,
                ci: {
                    if a.ci.max_flake_rate.is_some() {
                        return Err(InputError::flag(
                            "--max-flake-rate",
                            "repro runs one seed, which has no tail to predict a flake rate \
                             from; gate on it with `sweep --max-flake-rate P`",
                        ));
                    }
                    ci_outputs(a.ci, a.filter.mutants.is_some())?
                },
            })
        }
        Command::List(a) => Action::List(common(&a, None)?),
        Command::Explain(a) => {
            if !a.observed.is_finite() {
                return Err(InputError::flag("--observed", "must be a finite number"));
            }
            let computation = crate::commands::explain::Computation::parse(&a.computation)
                .ok_or_else(|| {
                    InputError::flag(
                        "--computation",
                        format!(
                            "`{}` is not allowed; allowed: sharded, reference",
                            a.computation
                        ),
                    )
                })?;
            let csv = match a.format.as_str() {
                "csv" => true,
                "table" => false,
                other => {
                    return Err(InputError::flag(
                        "--format",
                        format!("`{other}` is not allowed; allowed: table, csv"),
                    ))
                }
            };
            Action::Explain {
                common: common(&a.select, None)?,
                query: crate::commands::explain::ExplainQuery {
                    scenario: a.scenario,
                    param: a.param,
                    check: a.check,
                    step: a.step,
                    index: a.index,
                    observed: a.observed,
                    seed: a.seed,
                    profiles: a.profile,
                    computation,
                },
                csv,
            }
        }
        Command::Check(a) => Action::Check(a.file, a.strict_exactness),
        Command::Report(a) => {
            let out = a.out.unwrap_or_else(|| a.dir.join("report.html"));
            Action::Report(a.dir, out, a.quiet)
        }
        Command::Size(a) => {
            let mut common = common(&a.select, Some(&a.filter))?;
            if common.selection.mutants.is_none() {
                common.selection.mutants = Some(vec!["all".into()]);
            }
            Action::Size(crate::commands::size::SizeOptions {
                common,
                dir: a.dir,
                seeds: a.seeds,
                first_seed: a.first_seed,
                flake_rate: a.flake_rate,
                target: a.target,
                threads: threads(a.threads)?,
                markdown: a.markdown,
                out: a.out,
                validate: a.validate,
                quiet: a.quiet,
            })
        }
        Command::Scale(a) => Action::Scale(crate::commands::scale::ScaleOptions {
            common: {
                no_duplicates("--k", &a.k)?;
                no_duplicates("--tp", &a.tp)?;
                no_duplicates("--policy", &a.policy)?;
                common(
                    &SelectArgs {
                        configs: a.configs.clone(),
                        rng: None,
                        max_memory: a.max_memory.clone(),
                    },
                    None,
                )?
            },
            profile: a.profile,
            ks: a.k,
            tps: a.tp,
            seeds: a.seeds,
            rows: a.rows,
            cols: a.cols,
            policies: a.policy,
            threads: threads(a.threads)?,
            out: a.out,
            quiet: a.quiet,
        }),
        Command::Merge(a) => Action::Merge(crate::commands::merge::MergeOptions {
            dirs: a.dirs,
            out: a.out,
            check: a.check,
            quiet: a.quiet,
        }),
        Command::Bench(a) => Action::Bench(BenchOptions {
            common: common(&a.select, Some(&a.filter))?,
            seeds: a.seeds,
        }),
    })
}

/// `--seeds` (and `--validate`): a count of seeds, at least 1.
fn seed_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("0 is not allowed; give at least 1 seed".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`{s}` is not a count of seeds; allowed: 1..={}",
            u64::MAX
        )),
    }
}

/// `--threads`: 1..=[`MAX_THREADS`](crate::sys::limits::MAX_THREADS) worker threads.
fn thread_count(s: &str) -> Result<usize, String> {
    let max = crate::sys::limits::MAX_THREADS;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        Ok(0) => Err(format!(
            "0 is not allowed; give at least 1 thread (allowed: 1..={max})"
        )),
        _ => Err(format!("`{s}` is not allowed; allowed: 1..={max}")),
    }
}

/// A float flag's value, or a message naming what is allowed.
fn float(s: &str, allowed: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .map_err(|_| format!("`{s}` is not a number; allowed: {allowed}"))
}

/// `size --flake-rate`: a per-seed probability in (0, 1).
fn flake_rate(s: &str) -> Result<f64, String> {
    let p = float(s, "a probability in (0, 1)")?;
    if p > 0.0 && p < 1.0 {
        Ok(p)
    } else {
        Err(format!("{p} is not allowed; give a probability in (0, 1)"))
    }
}

/// `sweep --max-flake-rate`: a per-seed probability in [0, 1).
fn max_flake_rate(s: &str) -> Result<f64, String> {
    let allowed = "a per-seed probability P with 0 <= P < 1 (e.g. 1e-4)";
    let p = float(s, allowed)?;
    if (0.0..1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not allowed; give {allowed}"))
    }
}

/// `size --target`: a percentage > 0.
fn target_pct(s: &str) -> Result<f64, String> {
    let t = float(s, "a percentage > 0")?;
    if t > 0.0 && t.is_finite() {
        Ok(t)
    } else {
        Err(format!("{t} is not allowed; give a percentage > 0"))
    }
}

/// `bench --seeds`: 1..=[`MAX_BENCH_SEEDS`](crate::commands::bench::MAX_BENCH_SEEDS).
fn bench_seed_count(s: &str) -> Result<u64, String> {
    let max = crate::commands::bench::MAX_BENCH_SEEDS;
    match s.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not allowed; allowed: 1..={max}")),
    }
}

/// `scale --k`: a reduction length in 1..=2^20.
fn reduction_len(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(k) if (1..=1 << 20).contains(&k) => Ok(k),
        _ => Err(format!("`{s}` is out of range; allowed: 1..=1048576")),
    }
}

/// `scale --tp`: a TP degree in 1..=64.
fn tp_degree(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(tp) if (1..=64).contains(&tp) => Ok(tp),
        _ => Err(format!("`{s}` is out of range; allowed: 1..=64")),
    }
}

/// `scale --rows` / `--cols`: at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{s}` is not allowed; allowed: 1 or more")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_are_checked_at_the_flag_naming_what_is_allowed() {
        assert_eq!(seed_count("1"), Ok(1));
        assert!(seed_count("0").unwrap_err().contains("at least 1 seed"));
        assert!(seed_count("-1").unwrap_err().contains("allowed: 1..="));
        assert_eq!(thread_count("1024"), Ok(1024));
        for bad in ["0", "1025", "x"] {
            assert!(thread_count(bad).unwrap_err().contains("1..=1024"), "{bad}");
        }
        assert_eq!(flake_rate("1e-4"), Ok(1e-4));
        for bad in ["0", "1", "-1", "nan", "x"] {
            assert!(flake_rate(bad).unwrap_err().contains("(0, 1)"), "{bad}");
        }
        assert_eq!(max_flake_rate("0"), Ok(0.0));
        for bad in ["1", "-0.1", "nan"] {
            assert!(
                max_flake_rate(bad).unwrap_err().contains("0 <= P < 1"),
                "{bad}"
            );
        }
        assert_eq!(target_pct("50"), Ok(50.0));
        for bad in ["0", "-1", "inf", "nan"] {
            assert!(target_pct(bad).unwrap_err().contains("> 0"), "{bad}");
        }
        assert_eq!(reduction_len("1048576"), Ok(1 << 20));
        assert!(reduction_len("1048577").is_err() && reduction_len("0").is_err());
        assert!(tp_degree("65").is_err() && tp_degree("0").is_err());
        assert_eq!(tp_degree("64"), Ok(64));
        assert!(at_least_one("0").is_err());
        assert!(bench_seed_count("10000001")
            .unwrap_err()
            .contains("1..=10000000"));
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn known(c: Result<ShardChoice, InputError>) -> Option<Shard> {
        match c.unwrap() {
            ShardChoice::Known { shard, .. } => shard,
            other => panic!("not known: {other:?}"),
        }
    }

    fn unknown(c: Result<ShardChoice, InputError>) -> String {
        match c.unwrap() {
            ShardChoice::Unknown { flag, msg } => format!("{flag}: {msg}"),
            other => panic!("not unknown: {other:?}"),
        }
    }

    #[test]
    fn shard_flag_wins_and_is_validated() {
        let s = resolve_shard(Some("2/8"), None, env(&[("SLURM_ARRAY_TASK_ID", "5")]));
        assert_eq!(known(s), Some(Shard { index: 2, count: 8 }));
        assert!(resolve_shard(Some("8/8"), None, env(&[])).is_err());
        assert!(resolve_shard(Some("x"), None, env(&[]))
            .unwrap_err()
            .to_string()
            .contains("--shard"));
    }

    #[test]
    fn slurm_and_kubernetes_shard_themselves() {
        let s = resolve_shard(
            None,
            None,
            env(&[
                ("SLURM_ARRAY_TASK_ID", "3"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ]),
        );
        assert_eq!(known(s), Some(Shard { index: 3, count: 4 }));
        let s = resolve_shard(
            None,
            None,
            env(&[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_MAX", "4"),
                ("SLURM_ARRAY_TASK_STEP", "1"),
            ]),
        );
        assert_eq!(known(s), Some(Shard { index: 3, count: 4 }));
        // --array=0-6:2 is four tasks 0, 2, 4, 6: task 4 is slice 2 of 4.
        let s = resolve_shard(
            None,
            None,
            env(&[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "6"),
                ("SLURM_ARRAY_TASK_STEP", "2"),
            ]),
        );
        assert_eq!(known(s), Some(Shard { index: 2, count: 4 }));
        let s = resolve_shard(None, Some(5), env(&[("JOB_COMPLETION_INDEX", "4")]));
        assert_eq!(known(s), Some(Shard { index: 4, count: 5 }));
        let e = resolve_shard(None, None, env(&[("JOB_COMPLETION_INDEX", "4")])).unwrap_err();
        assert!(e.to_string().contains("--shard-count"));
        assert_eq!(known(resolve_shard(None, None, env(&[]))), None);
    }

    #[test]
    fn a_task_resubmitted_alone_does_not_guess_its_shard() {
        // What Slurm sets for `sbatch --array=2`: a one-task array.
        let one = env(&[
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "1"),
            ("SLURM_ARRAY_TASK_MIN", "2"),
            ("SLURM_ARRAY_TASK_MAX", "2"),
            ("SLURM_ARRAY_TASK_STEP", "1"),
        ]);
        let m = unknown(resolve_shard(None, None, &one));
        assert!(m.starts_with("--shard: "), "{m}");
        assert!(m.contains("--shard 2/N"), "{m}");
        assert!(m.contains("--resume"), "{m}");
        // --shard settles it.
        assert_eq!(
            known(resolve_shard(Some("2/4"), None, &one)),
            Some(Shard { index: 2, count: 4 })
        );
        // Tasks 2 and 3 of a 0-based fan-out, resubmitted together (--array=2-3).
        let two = env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "2"),
            ("SLURM_ARRAY_TASK_MIN", "2"),
            ("SLURM_ARRAY_TASK_MAX", "3"),
        ]);
        assert!(unknown(resolve_shard(None, None, two)).contains("starts at 2"));
        // An irregular array (--array=0,1,5): count does not fit min/max/step.
        let odd = env(&[
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "5"),
        ]);
        assert!(unknown(resolve_shard(None, None, odd)).contains("irregular"));
        // A lone task 0 is the whole sweep as shard 0/1.
        let zero = env(&[
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "1"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "0"),
        ]);
        assert_eq!(
            known(resolve_shard(None, None, zero)),
            Some(Shard { index: 0, count: 1 })
        );
    }

    #[test]
    fn threads_come_from_the_flag_then_slurm() {
        let slurm = env(&[("SLURM_CPUS_PER_TASK", "6")]);
        assert_eq!(threads_from(Some(2), &slurm).unwrap(), Some(2));
        assert_eq!(threads_from(None, &slurm).unwrap(), Some(6));
        assert_eq!(threads_from(None, env(&[])).unwrap(), None);
        let e = threads_from(None, env(&[("SLURM_CPUS_PER_TASK", "0")])).unwrap_err();
        assert!(e.to_string().contains("SLURM_CPUS_PER_TASK"), "{e}");
    }

    #[test]
    fn inconsistent_slurm_variables_are_refused_by_name() {
        for (vars, want) in [
            (
                &[
                    ("SLURM_ARRAY_TASK_ID", "7"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                    ("SLURM_ARRAY_TASK_MIN", "0"),
                    ("SLURM_ARRAY_TASK_MAX", "3"),
                ][..],
                "outside min..=max",
            ),
            (
                &[
                    ("SLURM_ARRAY_TASK_ID", "3"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                    ("SLURM_ARRAY_TASK_MIN", "0"),
                    ("SLURM_ARRAY_TASK_MAX", "6"),
                    ("SLURM_ARRAY_TASK_STEP", "2"),
                ][..],
                "step grid",
            ),
            (
                &[
                    ("SLURM_ARRAY_TASK_ID", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                    ("SLURM_ARRAY_TASK_STEP", "0"),
                ][..],
                "step of 0",
            ),
            (
                &[("SLURM_ARRAY_TASK_ID", "1")][..],
                "SLURM_ARRAY_TASK_COUNT",
            ),
            (
                &[
                    ("SLURM_ARRAY_TASK_ID", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "x"),
                ][..],
                "not a non-negative integer",
            ),
        ] {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let e = resolve_shard(None, None, |k: &str| {
                vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(want), "{e}");
            assert!(e.contains("SLURM_ARRAY_TASK"), "{e}");
        }
    }
}
