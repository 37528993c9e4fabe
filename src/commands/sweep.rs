//! `seedsweep sweep`: run the seeds of the selected groups into a sweep folder.

use std::path::PathBuf;

use crate::check::comparison::Comparison;
use crate::commands::{emit_text, load_catalog, status, CiOutputs, Common, EXIT_EXCEEDED};
use crate::engine::aggregate::{exceeded, summarize_all, tail_keep, GroupAgg, SummaryEntry};
use crate::engine::catalog::Catalog;
use crate::engine::held::HELD_IN_MEMORY;
use crate::engine::held_bytes;
use crate::engine::plan::{
    families, seed_runs_memory, units, Family, GroupMeta, SeedRange, Shard, ShardChoice,
};
use crate::report::table::{mutant_summary, sweep_summary};
use crate::results::csv::plan_csv;
use crate::results::frontiers::FrontierWriter;
use crate::results::rowlog::RowLogWriter;
use crate::results::seeds_file::{SeedsFormat, SeedsOut};
use crate::sweepdir::checkpoint::{
    finish_frontiers, finish_outputs, resume_units, FileSink, PROGRESS,
};
use crate::sweepdir::fingerprint::{Fingerprint, SHARD_KEY};
use crate::sys::atomic_write::write_atomic;
use crate::sys::error::InputError;
use crate::sys::limits::pool;

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
    /// Refuse a run that a torch-mirroring profile does not cover exactly
    /// ([`crate::engine::exactness`]); else its gaps are warnings.
    pub strict_exactness: bool,
    /// Only this slice of the seeds, as the flags or the scheduler say (an existing shard
    /// folder outranks it under `--resume`).
    pub shard: ShardChoice,
    /// No per-seed file; bounded-memory quantiles.
    pub summary_only: bool,
    /// Continue an interrupted sweep in `out`.
    pub resume: bool,
    /// Format of the per-seed file (`--format`).
    pub format: SeedsFormat,
    /// `--json`, `--junit-xml`, `--markdown` and the gates beyond `--fail-on-exceed`.
    pub ci: CiOutputs,
}

/// Runs a sweep; returns the process exit code.
///
/// Files in `--out` (see [`crate::sweepdir::folder`]; a new sweep first removes the files of any earlier
/// one): `fingerprint.txt` and `plan.csv` first (what this run computes, for `merge` and
/// `--resume`), then `seeds.csv.partial` (or, with `--format parquet`, `seeds.bin.partial`)
/// streamed chunk by chunk with a `.progress` checkpoint after each chunk, then
/// `mutants.csv` (with mutants) and `summary.csv`, and last the per-seed file put in place
/// (`seeds.csv` renamed, or `seeds.parquet` converted; see [`SeedsOut::finish`]). With `--summary-only` no per-seed file is
/// written and quantiles come from bounded histograms. A kill at any moment leaves a folder
/// that `--resume` completes byte-identically.
pub fn sweep(o: &SweepOptions) -> anyhow::Result<i32> {
    let catalog = load_catalog(&o.common)?;
    let groups = catalog.select(&o.common.selection)?;
    crate::engine::budget::check_seed_range(&catalog, &groups, o.first_seed, o.seeds)?;
    let metas: Vec<GroupMeta> = groups.iter().map(|g| GroupMeta::of(&catalog, g)).collect();
    let mode = if o.summary_only {
        "summary-only"
    } else {
        o.format.mode()
    };
    let range = SeedRange {
        first: o.first_seed,
        count: o.seeds,
        shard: decide_shard(o, &catalog, &groups, &metas, mode)?,
    };
    let plan = units(&catalog, &groups, &range);
    if range.shard.is_none() && plan.iter().all(|(_, r)| r.is_empty()) {
        // check_seed_range rules this out; kept as the last guard against an empty run.
        return Err(InputError::flag("--seeds", "this selection gives no seed-runs").into());
    }
    // A family is never split: what it holds back past HELD_IN_MEMORY goes to temporary
    // files (engine::held), so its groups share their runs at any seed count.
    let fams = families(&catalog, &groups, &plan, u64::MAX, |_| 0);
    check_sweep_memory(&catalog, &groups, &metas, &plan, &fams, o)?;
    crate::engine::exactness::announce(
        &catalog,
        &groups,
        o.strict_exactness,
        "--strict-exactness",
    )?;
    let pool = pool(o.threads)?;
    let fingerprint = Fingerprint::of_sweep(&catalog, &groups, &metas, &range, mode);
    let slices: Vec<std::ops::Range<u64>> = plan.iter().map(|(_, r)| r.clone()).collect();
    let plan_bytes = plan_csv(&metas, &slices);
    let plan_path = o.out.join("plan.csv");
    let partial = o.out.join(o.format.partial());
    let progress = o.out.join(PROGRESS);
    let mut aggs: Vec<GroupAgg> = metas
        .iter()
        .zip(&plan)
        .map(|(m, (_, r))| GroupAgg::new(m, o.summary_only, (r.end - r.start) as usize))
        .collect();
    let mut skip = 0u64;
    let mut frontiers_skip = false;
    let old = if o.resume && o.out.is_dir() {
        Fingerprint::read(&o.out)?
    } else {
        None
    };
    if o.resume && old.is_none() {
        // Only a new or empty folder is started under --resume; anything else is not ours.
        crate::sweepdir::folder::check_ours(&o.out, "--resume")?;
        // Killed before it wrote anything: --resume starts it, so that the same command
        // can always be rerun after a kill.
        eprintln!(
            "note: {} holds no sweep yet; --resume starts it",
            o.out.display()
        );
    }
    let lock = if let Some(old) = old {
        let lock = crate::sweepdir::folder::open_existing(&o.out, "--resume")?;
        let diff = fingerprint.diff(&old, "now", "in the folder", &[], 12);
        if !diff.is_empty() {
            return Err(InputError::flag(
                "--resume",
                format!(
                    "{} holds a different sweep; run the command that started it, or give \
                     another --out (--resume never replaces a sweep). Differences:\n  {}",
                    o.out.display(),
                    diff.join("\n  ")
                ),
            )
            .into());
        }
        let finished = if o.summary_only {
            crate::sweepdir::folder::has(&o.out, "summary.csv")
        } else {
            crate::sweepdir::folder::has(&o.out, o.format.file())
                && !crate::sweepdir::folder::has(&o.out, o.format.partial())
        };
        if finished {
            // Its files must be the ones it wrote; a sweep killed between its last file and
            // its checksums gets them now.
            if crate::sweepdir::fingerprint::verify_checksums(&o.out, &old, "--resume")?
                == crate::sweepdir::fingerprint::Checked::NoneRecorded
            {
                crate::sweepdir::fingerprint::record_checksums(&o.out, &fingerprint)?;
            }
            let _ = std::fs::remove_file(&progress);
            // Printed even with --quiet: the command did none of the work it names.
            eprintln!(
                "nothing to resume: {} holds the finished sweep of this command",
                o.out.display()
            );
            return Ok(0);
        }
        if std::fs::read(&plan_path).ok().as_deref() != Some(&plan_bytes[..]) {
            // Derived from the fingerprint, which matched: a kill before it was written.
            write_atomic(&plan_path, &plan_bytes)?;
        }
        (skip, frontiers_skip) =
            resume_units(&o.out, &metas, &plan, &mut aggs, o.summary_only, o.format)?;
        lock
    } else {
        let lock = crate::sweepdir::folder::prepare_new(&o.out, "--out")?;
        write_atomic(
            &o.out.join(crate::sweepdir::fingerprint::FILE),
            fingerprint.to_text().as_bytes(),
        )?;
        write_atomic(&plan_path, &plan_bytes)?;
        lock
    };
    crate::sys::interrupt::hint_on_interrupt(format!(
        "\ninterrupted: {} is kept; continue it with the same command and --resume\n",
        o.out.display()
    ));
    let writer = if o.summary_only {
        None
    } else {
        Some(SeedsOut::open(o.format, &partial, skip > 0)?)
    };
    let frontiers_partial = o.out.join(crate::results::frontiers::PARTIAL);
    // The mutant groups' values, for --resume (a mutant group writes no per-seed rows).
    let mutants = if writer.is_some() && metas.iter().any(|m| !m.mutant.is_empty()) {
        Some(RowLogWriter::open(
            &o.out.join(crate::results::rowlog::MUTANTS_PARTIAL),
            skip > 0,
        )?)
    } else {
        None
    };
    let mut sink = FileSink {
        writer,
        mutants,
        metas: &metas,
        partial: &partial,
        progress: &progress,
        frontiers: Some(FrontierWriter::open(&frontiers_partial, frontiers_skip)?),
    };
    pool.install(|| {
        crate::engine::drive(
            &catalog,
            &groups,
            &metas,
            &plan,
            &fams,
            skip,
            &mut aggs,
            o.quiet,
            HELD_IN_MEMORY,
            &mut sink,
        )
    })?;
    // The last phase (tail fits, the summary, and with Parquet the row log's conversion) has
    // no seed count to show: a ticking line says what it is doing.
    let phase = crate::sys::progress::phase(o.quiet, "sweep", "finishing frontiers.bin");
    let writer = sink.writer.take();
    let frontiers_file = finish_frontiers(&o.out, sink.frontiers.take())?;
    phase.set_message("summarizing: quantiles and tail fits");
    let summaries: Vec<Vec<SummaryEntry>> = pool.install(|| summarize_all(&metas, &aggs));
    phase.set_message(format!("writing summary.csv and {}", o.format.file()));
    let mut written = finish_outputs(&o.out, &metas, &aggs, &summaries, writer, &partial)?;
    phase.finish_and_clear();
    written.extend(frontiers_file);
    crate::sweepdir::fingerprint::record_checksums(&o.out, &fingerprint)?;
    let _ = std::fs::remove_file(&progress);
    drop(lock);
    let data = o.ci.stdout_is_data();
    emit_text(&sweep_summary(&metas, &aggs, &summaries), data);
    emit_text(&mutant_summary(&metas, &aggs, &summaries), data);
    status(o.quiet, &format!("wrote {}", written.join(", ")));
    let failed = if o.ci.wanted() {
        let outputs = o.ci.json.is_some() || o.ci.junit_xml.is_some() || o.ci.markdown.is_some();
        let ctx = crate::report::verdict::ReproContext::new(&o.common.configs, o.common.rng);
        let mut ws = crate::exec::scenario::Workspace::default();
        // torch's message at the worst seed of each failing case: one seed rerun each.
        let message = |gi: usize, k: usize| {
            if !outputs {
                return None;
            }
            let m = &metas[gi];
            let e = &summaries[gi][k];
            let np = m.policies.len();
            let (c, p) = (k / (np * Comparison::ALL.len()), k % np);
            crate::commands::repro::message_at(
                &catalog,
                &groups[gi],
                e.worst_seed,
                c,
                p,
                e.comparison,
                e.worst_step,
                &mut ws,
            )
        };
        let verdict = crate::report::verdict::of_sweep(
            &metas,
            &aggs,
            &summaries,
            o.ci.gates(o.fail_on_exceed),
            &ctx,
            message,
        );
        let files = o.ci.write(&verdict)?;
        if !files.is_empty() {
            status(o.quiet, &format!("wrote {}", files.join(", ")));
        }
        if let Some(line) = verdict.failure_line() {
            eprintln!("{line}");
        }
        verdict.failed()
    } else {
        let failed = o.fail_on_exceed && exceeded(&metas, &summaries);
        if failed {
            eprintln!(
                "seedsweep sweep: FAILED: {}",
                exceeded_line(&metas, &summaries)
            );
        }
        failed
    };
    // A gate never passes on no data: an empty shard (more shards than seeds) evaluated none.
    let evaluated: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let no_data = o.fail_on_exceed && evaluated == 0;
    if no_data {
        eprintln!(
            "--fail-on-exceed: this run evaluated no seed-runs (shard {} of {} seeds holds \
             none), so nothing shows that the checks pass; failing",
            range
                .shard
                .map(|s| s.to_string())
                .unwrap_or_else(|| "the whole range".into()),
            o.seeds
        );
    }
    Ok(if failed || no_data { EXIT_EXCEEDED } else { 0 })
}

/// One line naming what exceeded: how many checks, and the first with its worst seed.
fn exceeded_line(metas: &[GroupMeta], summaries: &[Vec<SummaryEntry>]) -> String {
    let mut n = 0;
    let mut first = None;
    for (m, entries) in metas.iter().zip(summaries) {
        if !m.mutant.is_empty() {
            continue;
        }
        for e in entries {
            if e.comparison == m.asserted && e.failing_seeds > 0 {
                n += 1;
                first.get_or_insert((m, e));
            }
        }
    }
    match first {
        None => "no check exceeded".into(),
        Some((m, e)) => format!(
            "{n} check x policy case(s) exceeded their tolerance, first {} [{}] {} {} policy {}: \
             {} of {} seeds, worst {} at seed {} step {} (repro: seedsweep repro --scenario {} \
             --param {} --profile {} --policy {} --seed {})",
            m.scenario,
            m.param,
            m.profile,
            e.check,
            e.policy,
            e.failing_seeds,
            e.seeds,
            crate::report::verdict::pct(e.worst_usage),
            e.worst_seed,
            e.worst_step,
            m.scenario,
            m.param,
            m.profile,
            e.policy,
            e.worst_seed
        ),
    }
}

/// The shard this run computes. An existing folder that holds this same sweep (its
/// fingerprint equal but for the shard line) decides under `--resume`, whatever the flags or
/// the scheduler's variables say, and the note says so; without `--resume` a disagreement is
/// refused (the folder holds another shard's work, which a new sweep would replace).
/// Otherwise the flags' or scheduler's shard ([`ShardChoice`]) stands, and an unknown one is
/// an error.
fn decide_shard(
    o: &SweepOptions,
    catalog: &Catalog,
    groups: &[crate::engine::catalog::Group],
    metas: &[GroupMeta],
    mode: &str,
) -> anyhow::Result<Option<Shard>> {
    let old = if o.out.is_dir() {
        if o.resume {
            Fingerprint::read(&o.out)?
        } else {
            // A new sweep replaces an unreadable fingerprint's folder as before.
            Fingerprint::read(&o.out).ok().flatten()
        }
    } else {
        None
    };
    let held = old.and_then(|old| {
        let probe = Fingerprint::of_sweep(
            catalog,
            groups,
            metas,
            &SeedRange {
                first: o.first_seed,
                count: o.seeds,
                shard: None,
            },
            mode,
        );
        let same = probe.diff(&old, "", "", &[SHARD_KEY], 1).is_empty();
        same.then(|| old.shard())
    });
    let held = match held {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            return Err(InputError::flag("--out", format!("{}: {e}", o.out.display())).into())
        }
    };
    let show = |s: Option<Shard>| {
        s.map(|s| s.to_string())
            .unwrap_or_else(|| "the whole range".into())
    };
    match (&o.shard, held) {
        (ShardChoice::Known { shard, .. }, Some(h)) if *shard == h => Ok(h),
        (choice, Some(h)) if o.resume => {
            let said = match choice {
                ShardChoice::Known { shard, from } => format!("{from} gives {}", show(*shard)),
                ShardChoice::Unknown { .. } => {
                    "the scheduler's variables cannot say which shard this is".into()
                }
            };
            eprintln!(
                "note: {} holds shard {} of this sweep; continuing that shard, as its \
                 fingerprint says ({said})",
                o.out.display(),
                show(h)
            );
            Ok(h)
        }
        (choice, Some(h)) => {
            let this = match choice {
                ShardChoice::Known { shard, from } => {
                    format!("this run is {} ({from})", show(*shard))
                }
                ShardChoice::Unknown { msg, .. } => format!("this run's shard is unknown: {msg}"),
            };
            Err(InputError::flag(
                "--out",
                format!(
                    "{} holds shard {} of this same sweep, but {this}. Add --resume to continue \
                     shard {} there (its fingerprint decides), or give another --out",
                    o.out.display(),
                    show(h),
                    show(h)
                ),
            )
            .into())
        }
        (ShardChoice::Known { shard, .. }, None) => Ok(*shard),
        (ShardChoice::Unknown { flag, msg }, None) => {
            Err(InputError::flag(flag, msg.clone()).into())
        }
    }
}

/// Refuses a sweep whose estimated memory exceeds what is available (see [`crate::sys::limits`]).
fn check_sweep_memory(
    catalog: &Catalog,
    groups: &[crate::engine::catalog::Group],
    metas: &[GroupMeta],
    plan: &[(usize, std::ops::Range<u64>)],
    fams: &[Family],
    o: &SweepOptions,
) -> anyhow::Result<()> {
    let units: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let mut parts = vec![seed_runs_memory(catalog, groups, o.threads, units)];
    let mut results = 0u64;
    for (m, (_, r)) in metas.iter().zip(plan) {
        if !m.mutant.is_empty() {
            // A mutant group keeps counts and extremes per entry, whatever its seeds.
            continue;
        }
        let n = r.end - r.start;
        let per_entry = if o.summary_only {
            (tail_keep(n.min(usize::MAX as u64) as usize) as u64)
                .saturating_mul(16)
                .saturating_add(crate::stats::histogram::BYTES as u64)
        } else {
            n.saturating_mul(8)
        };
        results = results.saturating_add(per_entry.saturating_mul(m.entries() as u64));
    }
    parts.push((
        results,
        if o.summary_only {
            "the summary histograms and tails".to_string()
        } else {
            format!("{units} seed-run(s) of per-seed usages kept for exact quantiles (--summary-only keeps less)")
        },
    ));
    // At most HELD_IN_MEMORY of it stays in memory (the rest goes to temporary files).
    let held = held_bytes(fams, metas, !o.summary_only).min(HELD_IN_MEMORY as u64);
    if held > 0 {
        parts.push((
            held,
            "the results of a seed range held back while the groups that share its work run"
                .to_string(),
        ));
    }
    Ok(crate::sys::limits::check_memory(
        &parts,
        o.common.max_memory,
    )?)
}
