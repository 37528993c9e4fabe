//! The commands, independent of clap: typed options in, text and files out.

use std::path::PathBuf;

use crate::catalog::{Catalog, Selection};
use crate::config::RngKind;
use crate::error::InputError;
use crate::evaluate::Comparison;
use anyhow::Context;

use crate::export::csv::{mutants_csv, plan_csv, read_plan, read_units, summary_csv, SeedsWriter};
use crate::export::frontiers::FrontierWriter;
use crate::export::table::{mutant_summary, sweep_summary};
use crate::export::{prepare_dir, write_atomic};
use crate::fingerprint::Fingerprint;
use crate::limits::pool;
use crate::sweep::{
    run, summarize, units, GroupAgg, GroupMeta, SeedRange, SeedValues, Shard, SummaryEntry,
    UnitSink,
};

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
    /// `--max-memory`: bytes this run may use (default: the machine's available memory).
    pub max_memory: Option<u64>,
}

/// Loads the catalog of `common` and prints what its configs override to stderr.
pub fn load_catalog(common: &Common) -> anyhow::Result<Catalog> {
    let catalog = Catalog::load(&common.configs, common.rng)?;
    for n in &catalog.notes {
        eprintln!("note: {n}");
    }
    Ok(catalog)
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
    /// Only this slice of the seeds.
    pub shard: Option<Shard>,
    /// No per-seed file; bounded-memory quantiles.
    pub summary_only: bool,
    /// Continue an interrupted sweep in `out`.
    pub resume: bool,
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

/// Runs a sweep; returns the process exit code.
///
/// Files in `--out` (see [`crate::folder`]; a new sweep first removes the files of any earlier
/// one): `fingerprint.txt` and `plan.csv` first (what this run computes, for `merge` and
/// `--resume`), then `seeds.csv.partial` streamed chunk by chunk with a `.progress`
/// checkpoint after each chunk, then `mutants.csv` (with mutants) and `summary.csv`, and last
/// the rename of `seeds.csv.partial` to `seeds.csv`. With `--summary-only` no per-seed file is
/// written and quantiles come from bounded histograms. A kill at any moment leaves a folder
/// that `--resume` completes byte-identically.
pub fn sweep(o: &SweepOptions) -> anyhow::Result<i32> {
    if o.seeds == 0 {
        return Err(InputError::flag("--seeds", "0 is not allowed; give at least 1 seed").into());
    }
    if o.threads == Some(0) {
        return Err(
            InputError::flag("--threads", "0 is not allowed; give at least 1 thread").into(),
        );
    }
    crate::limits::check_threads(o.threads)?;
    let catalog = load_catalog(&o.common)?;
    let groups = catalog.plan(&o.common.selection)?;
    crate::limits::check_seed_range(&catalog, &groups, o.first_seed, o.seeds)?;
    let metas: Vec<GroupMeta> = groups.iter().map(|g| GroupMeta::of(&catalog, g)).collect();
    let range = SeedRange {
        first: o.first_seed,
        count: o.seeds,
        shard: o.shard,
    };
    let plan = units(&catalog, &groups, &range);
    check_sweep_memory(&catalog, &groups, &metas, &plan, o)?;
    let pool = pool(o.threads)?;
    let mode = if o.summary_only {
        "summary-only"
    } else {
        "per-seed"
    };
    let fingerprint = Fingerprint::of_sweep(&catalog, &groups, &metas, &range, mode);
    let slices: Vec<std::ops::Range<u64>> = plan.iter().map(|(_, r)| r.clone()).collect();
    let plan_bytes = plan_csv(&metas, &slices)?;
    let plan_path = o.out.join("plan.csv");
    let partial = o.out.join("seeds.csv.partial");
    let progress = o.out.join(".progress");
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
        if let Some(f) = crate::folder::FILES
            .iter()
            .find(|f| crate::folder::has(&o.out, f.name))
        {
            return Err(InputError::flag(
                "--resume",
                format!(
                    "{} holds {} but no {}: not a sweep this seedsweep can continue; drop \
                     --resume to start over",
                    o.out.display(),
                    f.name,
                    crate::fingerprint::FILE
                ),
            )
            .into());
        }
        // Killed before it wrote anything: --resume starts it, so that the same command
        // can always be rerun after a kill.
        eprintln!(
            "note: {} holds no sweep yet; --resume starts it",
            o.out.display()
        );
    }
    let lock = if let Some(old) = old {
        let lock = crate::folder::open_existing(&o.out, "--resume")?;
        let diff = fingerprint.diff(&old, "now", "in the folder", &[], 12);
        if !diff.is_empty() {
            return Err(InputError::flag(
                "--resume",
                format!(
                    "{} holds a different sweep; run the command that started it, or drop \
                     --resume to replace it. Differences:\n  {}",
                    o.out.display(),
                    diff.join("\n  ")
                ),
            )
            .into());
        }
        let finished = if o.summary_only {
            crate::folder::has(&o.out, "summary.csv")
        } else {
            crate::folder::has(&o.out, "seeds.csv")
                && !crate::folder::has(&o.out, "seeds.csv.partial")
        };
        if finished {
            let _ = std::fs::remove_file(&progress);
            emitln(&format!(
                "nothing to resume: {} holds the finished sweep of this command",
                o.out.display()
            ));
            return Ok(0);
        }
        if std::fs::read(&plan_path).ok().as_deref() != Some(&plan_bytes[..]) {
            // Derived from the fingerprint, which matched: a kill before it was written.
            write_atomic(&plan_path, &plan_bytes)?;
        }
        let (units_done, bytes) = read_progress(&progress);
        let have = std::fs::metadata(&partial).map(|m| m.len()).ok();
        if o.summary_only || units_done == 0 || have.is_none_or(|len| len < bytes) {
            // Nothing trustworthy to continue from: start the seeds over in this folder.
            let _ = std::fs::remove_file(&progress);
        } else {
            truncate(&partial, bytes)?;
            let read = read_units(&partial, &metas, false)?;
            let expected = plan
                .iter()
                .flat_map(|(gi, r)| r.clone().map(move |seed| (*gi, seed)));
            for (u, (gi, seed)) in read.iter().zip(expected) {
                if (u.group, u.seed) != (gi, seed) {
                    anyhow::bail!(
                        "--resume: {} does not follow the plan at seed {}; delete it to start over",
                        partial.display(),
                        u.seed
                    );
                }
                aggs[u.group].feed(&metas[u.group], u.seed, &u.values);
            }
            skip = read.len() as u64;
        }
        frontiers_skip = resume_frontiers(&o.out, &metas, &plan, skip)?;
        lock
    } else {
        let lock = crate::folder::prepare_new(&o.out, "--out")?;
        write_atomic(
            &o.out.join(crate::fingerprint::FILE),
            fingerprint.to_text().as_bytes(),
        )?;
        write_atomic(&plan_path, &plan_bytes)?;
        lock
    };
    crate::interrupt::hint_on_interrupt(format!(
        "\ninterrupted: {} is kept; continue it with the same command and --resume\n",
        o.out.display()
    ));
    let writer = if o.summary_only {
        None
    } else {
        Some(SeedsWriter::open(&partial, skip > 0)?)
    };
    let frontiers_partial = o.out.join(crate::export::frontiers::PARTIAL);
    let mut sink = FileSink {
        writer,
        metas: &metas,
        partial: &partial,
        progress: &progress,
        frontiers: Some(FrontierWriter::open(&frontiers_partial, frontiers_skip)?),
    };
    pool.install(|| {
        run(
            &catalog, &groups, &metas, &plan, skip, &mut aggs, o.quiet, &mut sink,
        )
    })?;
    let writer = sink.writer.take();
    let frontiers_file = finish_frontiers(&o.out, sink.frontiers.take())?;
    let summaries: Vec<Vec<SummaryEntry>> = metas
        .iter()
        .zip(&aggs)
        .map(|(m, a)| summarize(m, a))
        .collect();
    let mut written = finish_outputs(&o.out, &metas, &aggs, &summaries, writer, &partial)?;
    written.extend(frontiers_file);
    let _ = std::fs::remove_file(&progress);
    drop(lock);
    emit(&sweep_summary(&metas, &aggs, &summaries));
    emit(&mutant_summary(&metas, &aggs, &summaries));
    emitln(&format!("wrote {}", written.join(", ")));
    Ok(if o.fail_on_exceed && exceeded(&metas, &summaries) {
        EXIT_EXCEEDED
    } else {
        0
    })
}

/// The memory of the seed-runs in flight: one per worker thread (at most one per unit), each
/// as large as the largest group's (see [`crate::limits::per_run`]).
fn seed_runs_memory(
    catalog: &Catalog,
    groups: &[crate::catalog::Group],
    threads: Option<usize>,
    units: u64,
) -> (u64, String) {
    let t = (crate::limits::effective_threads(threads) as u64).min(units.max(1));
    match groups
        .iter()
        .map(|g| crate::limits::per_run(catalog, g))
        .max_by_key(|(b, _)| *b)
    {
        Some((b, what)) => (
            b.saturating_mul(t),
            format!(
                "{t} thread(s) x {} per seed-run: {what}",
                crate::limits::human(b)
            ),
        ),
        None => (0, String::new()),
    }
}

/// Refuses a sweep whose estimated memory exceeds what is available (see [`crate::limits`]).
fn check_sweep_memory(
    catalog: &Catalog,
    groups: &[crate::catalog::Group],
    metas: &[GroupMeta],
    plan: &[(usize, std::ops::Range<u64>)],
    o: &SweepOptions,
) -> anyhow::Result<()> {
    let units: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let mut parts = vec![seed_runs_memory(catalog, groups, o.threads, units)];
    let mut results = 0u64;
    for (m, (_, r)) in metas.iter().zip(plan) {
        let n = r.end - r.start;
        let per_entry = if o.summary_only {
            (crate::sweep::tail_keep(n.min(usize::MAX as u64) as usize) as u64)
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
    Ok(crate::limits::check_memory(&parts, o.common.max_memory)?)
}

/// The sweep's sink: rows to `seeds.csv.partial`, and after every chunk a flush and a
/// `.progress` checkpoint `(units, bytes)` that `--resume` trusts.
struct FileSink<'a> {
    writer: Option<SeedsWriter>,
    metas: &'a [GroupMeta],
    partial: &'a std::path::Path,
    progress: &'a std::path::Path,
    /// `frontiers.bin.partial`, flushed before each checkpoint (so it never holds fewer
    /// units than the checkpoint says).
    frontiers: Option<FrontierWriter>,
}

impl UnitSink for FileSink<'_> {
    fn unit(&mut self, group: usize, seed: u64, values: &[SeedValues]) -> anyhow::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.write(&self.metas[group], seed, values),
            None => Ok(()),
        }
    }
    fn frontiers(&mut self, group: usize, seed: u64, f: &[Vec<(f64, f64)>]) -> anyhow::Result<()> {
        match self.frontiers.as_mut() {
            Some(w) => w.write(group, seed, f),
            None => Ok(()),
        }
    }
    fn chunk_done(&mut self, units_so_far: u64) -> anyhow::Result<()> {
        if let Some(f) = self.frontiers.as_mut() {
            f.flush()?;
        }
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        w.flush()?;
        let bytes = std::fs::metadata(self.partial)
            .with_context(|| format!("cannot stat {}", self.partial.display()))?
            .len();
        write_atomic(
            self.progress,
            format!("{units_so_far} {bytes}\n").as_bytes(),
        )
    }
}

/// Flushes `frontiers.bin.partial` and moves it to `frontiers.bin`; returns the path.
fn finish_frontiers(
    out: &std::path::Path,
    w: Option<FrontierWriter>,
) -> anyhow::Result<Option<String>> {
    let Some(mut w) = w else { return Ok(None) };
    w.flush()?;
    drop(w);
    let from = out.join(crate::export::frontiers::PARTIAL);
    let to = out.join(crate::export::frontiers::FILE);
    std::fs::rename(&from, &to)
        .with_context(|| format!("cannot move {} to {}", from.display(), to.display()))?;
    Ok(Some(to.display().to_string()))
}

/// `--resume`: keeps the first `skip` records of `frontiers.bin.partial` (they must follow
/// the plan, as the `seeds.csv.partial` units did) and cuts what was written after them.
/// Returns whether to append (false: start the file afresh, nothing was done).
fn resume_frontiers(
    out: &std::path::Path,
    metas: &[GroupMeta],
    plan: &[(usize, std::ops::Range<u64>)],
    skip: u64,
) -> anyhow::Result<bool> {
    if skip == 0 {
        return Ok(false);
    }
    let path = out.join(crate::export::frontiers::PARTIAL);
    let done = out.join(crate::export::frontiers::FILE);
    if !path.exists() && done.exists() {
        // Killed between the rename of frontiers.bin and that of seeds.csv: the finished
        // file goes back to being the partial one and is cut to the checkpoint below.
        std::fs::rename(&done, &path)
            .with_context(|| format!("cannot move {} to {}", done.display(), path.display()))?;
    }
    let bad = || {
        InputError::flag(
            "--resume",
            format!(
                "{} is missing or holds fewer units than seeds.csv.partial; delete {} to start over",
                path.display(),
                out.display()
            ),
        )
    };
    if !path.exists() {
        return Err(bad().into());
    }
    let recs = crate::export::frontiers::read_frontiers(&path, metas, true)?;
    if (recs.len() as u64) < skip {
        return Err(bad().into());
    }
    let expected = plan
        .iter()
        .flat_map(|(gi, r)| r.clone().map(move |seed| (*gi, seed)));
    for (r, (gi, seed)) in recs.iter().zip(expected).take(skip as usize) {
        if (r.group, r.seed) != (gi, seed) {
            anyhow::bail!(
                "--resume: {} does not follow the plan at seed {}; delete it to start over",
                path.display(),
                r.seed
            );
        }
    }
    truncate(&path, recs[skip as usize - 1].end)?;
    Ok(true)
}

/// Whether a clean group fails its asserted comparison for some seed.
fn exceeded(metas: &[GroupMeta], summaries: &[Vec<SummaryEntry>]) -> bool {
    metas
        .iter()
        .zip(summaries)
        .filter(|(m, _)| m.mutant.is_empty())
        .any(|(m, entries)| {
            entries
                .iter()
                .any(|e| e.comparison == m.asserted && e.failing_seeds > 0)
        })
}

/// Writes the summaries atomically (`mutants.csv` before `summary.csv`), then closes the
/// per-seed file and renames it into place: the last step, so that a folder with `seeds.csv`
/// (or, with `--summary-only`, `summary.csv`) and no `seeds.csv.partial` is a finished sweep
/// and a kill before it leaves a folder `--resume` completes. Returns the paths written.
fn finish_outputs(
    out: &std::path::Path,
    metas: &[GroupMeta],
    aggs: &[GroupAgg],
    summaries: &[Vec<SummaryEntry>],
    writer: Option<SeedsWriter>,
    partial: &std::path::Path,
) -> anyhow::Result<Vec<String>> {
    let mut written = Vec::new();
    let mut writer = writer;
    if let Some(w) = writer.as_mut() {
        w.flush()?;
    }
    // Groups that ran no seed here (another shard's) have nothing to summarize.
    let keep: Vec<usize> = (0..metas.len()).filter(|&i| aggs[i].seeds > 0).collect();
    let ms: Vec<GroupMeta> = keep.iter().map(|&i| metas[i].clone()).collect();
    let ss: Vec<Vec<SummaryEntry>> = keep.iter().map(|&i| summaries[i].clone()).collect();
    if ms.iter().any(|m| !m.mutant.is_empty()) {
        write_atomic(&out.join("mutants.csv"), &mutants_csv(&ms, &ss)?)?;
        written.push(out.join("mutants.csv").display().to_string());
    }
    write_atomic(&out.join("summary.csv"), &summary_csv(&ms, &ss)?)?;
    written.insert(0, out.join("summary.csv").display().to_string());
    if let Some(mut w) = writer {
        w.sync()?;
        drop(w);
        let seeds = out.join("seeds.csv");
        std::fs::rename(partial, &seeds)
            .with_context(|| format!("cannot move {} to {}", partial.display(), seeds.display()))?;
        written.insert(0, seeds.display().to_string());
    }
    Ok(written)
}

/// `(units, bytes)` from a `.progress` checkpoint, or zeros.
fn read_progress(path: &std::path::Path) -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (0, 0);
    };
    let mut it = text.split_whitespace().map(|t| t.parse::<u64>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(u), Some(b)) => (u, b),
        _ => (0, 0),
    }
}

/// Cuts `path` to `len` bytes (drops rows written after the last checkpoint).
fn truncate(path: &std::path::Path, len: u64) -> anyhow::Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("--resume: cannot open {}", path.display()))?;
    f.set_len(len)
        .with_context(|| format!("--resume: cannot truncate {}", path.display()))
}

/// `merge` options.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Shard output directories.
    pub dirs: Vec<PathBuf>,
    /// Where the merged files go.
    pub out: PathBuf,
}

/// Combines shard outputs into the files one run over all seeds writes, byte for byte.
///
/// Every shard must be a finished per-seed sweep folder with the same fingerprint (all but
/// the shard line), the shards together must be exactly shards `0..N` of `N`, once each (so
/// their seeds are disjoint and cover the range with no gap), and every `seeds.csv` must hold
/// exactly the seed-runs its `plan.csv` lists, with well-formed rows and usages that are
/// numbers >= 0 or inf. Anything else is an error naming the shard and the problem.
pub fn merge(o: &MergeOptions) -> anyhow::Result<i32> {
    use crate::fingerprint::SHARD_KEY;
    if o.dirs.is_empty() {
        return Err(InputError::flag("merge", "give at least one shard directory").into());
    }
    let out_real = std::fs::canonicalize(&o.out).ok();
    let mut fps: Vec<Fingerprint> = Vec::new();
    let mut plans = Vec::new();
    let mut shards: Vec<(u64, u64)> = Vec::new();
    for d in &o.dirs {
        let bad = |what: String| anyhow::anyhow!("merge: {}: {what}", d.display());
        if !d.is_dir() {
            return Err(bad("is not a folder".into()));
        }
        if out_real.is_some() && std::fs::canonicalize(d).ok() == out_real {
            return Err(bad(
                "is also --out; give the merged output another folder".into()
            ));
        }
        let fp = Fingerprint::read(d)?.ok_or_else(|| {
            bad(format!(
                "has no {}: not a sweep folder (or one written by an older seedsweep; rerun that shard)",
                crate::fingerprint::FILE
            ))
        })?;
        if crate::folder::has(d, "seeds.csv.partial") {
            return Err(bad(
                "is unfinished (seeds.csv.partial is there); complete it with `sweep ... --resume`"
                    .into(),
            ));
        }
        if fp.get("output.mode") != Some("per-seed") {
            return Err(bad(
                "is a --summary-only sweep: it keeps no per-seed file, so it cannot be merged"
                    .into(),
            ));
        }
        if !crate::folder::has(d, "seeds.csv") {
            return Err(bad(
                "has no seeds.csv (an unfinished shard cannot be merged)".into(),
            ));
        }
        let shard = match fp.get(SHARD_KEY) {
            Some("none") => (0, 1),
            Some(v) => v
                .split_once('/')
                .and_then(|(i, n)| Some((i.parse::<u64>().ok()?, n.parse::<u64>().ok()?)))
                .filter(|(i, n)| i < n)
                .ok_or_else(|| bad(format!("bad {SHARD_KEY} `{v}` in its fingerprint")))?,
            None => return Err(bad(format!("its fingerprint has no {SHARD_KEY}"))),
        };
        let plan_path = d.join("plan.csv");
        if !plan_path.exists() {
            return Err(bad(
                "has no plan.csv; is it a sweep output directory?".into()
            ));
        }
        plans.push(read_plan(&plan_path).map_err(|e| bad(format!("{e:#}")))?);
        fps.push(fp);
        shards.push(shard);
    }
    for i in 1..o.dirs.len() {
        let diff = fps[i].diff(
            &fps[0],
            &format!("in {}", o.dirs[i].display()),
            &format!("in {}", o.dirs[0].display()),
            &[SHARD_KEY],
            12,
        );
        if !diff.is_empty() {
            anyhow::bail!(
                "merge: {} comes from a different sweep than {}:\n  {}",
                o.dirs[i].display(),
                o.dirs[0].display(),
                diff.join("\n  ")
            );
        }
    }
    let n = shards[0].1;
    let mut seen: Vec<Option<usize>> = vec![None; n.min(1 << 20) as usize];
    for (k, &(i, count)) in shards.iter().enumerate() {
        if count != n || n > 1 << 20 {
            anyhow::bail!(
                "merge: {} is shard {i}/{count} but {} is shard {}/{n}: shards of one sweep share N",
                o.dirs[k].display(),
                o.dirs[0].display(),
                shards[0].0
            );
        }
        if let Some(j) = seen[i as usize] {
            anyhow::bail!(
                "merge: {} and {} are both shard {i}/{n}: their seeds overlap",
                o.dirs[j].display(),
                o.dirs[k].display()
            );
        }
        seen[i as usize] = Some(k);
    }
    let missing: Vec<String> = (0..n)
        .filter(|&i| seen[i as usize].is_none())
        .map(|i| format!("{i}/{n}"))
        .collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "merge: shard(s) {} missing: their seeds would be a gap in the merged range; give \
             every shard's folder",
            missing.join(", ")
        );
    }
    let metas: Vec<GroupMeta> = plans[0].iter().map(|(m, _)| m.clone()).collect();
    for (d, p) in o.dirs.iter().zip(&plans) {
        let same = p.len() == metas.len() && p.iter().zip(&metas).all(|((a, _), b)| a == b);
        if !same {
            anyhow::bail!(
                "merge: {} comes from a different sweep than {} (plan.csv differs beyond the seed slices)",
                d.display(),
                o.dirs[0].display()
            );
        }
    }
    // Every group's seeds, from all shards, in seed order; each shard's file must hold
    // exactly the seed-runs of its plan, in plan order.
    let mut per_group: Vec<Vec<(u64, Vec<SeedValues>)>> = vec![Vec::new(); metas.len()];
    for (d, plan) in o.dirs.iter().zip(&plans) {
        let path = d.join("seeds.csv");
        let read = read_units(&path, &metas, false).map_err(|e| anyhow::anyhow!("merge: {e:#}"))?;
        let expected: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
        let mut want = plan
            .iter()
            .enumerate()
            .flat_map(|(gi, (_, r))| r.clone().map(move |s| (gi, s)));
        for u in &read {
            match want.next() {
                Some(w) if w == (u.group, u.seed) => {}
                _ => anyhow::bail!(
                    "merge: {}: seed {} of {} {} is not where its plan.csv puts it",
                    path.display(),
                    u.seed,
                    metas[u.group].scenario,
                    metas[u.group].param
                ),
            }
        }
        if read.len() as u64 != expected {
            anyhow::bail!(
                "merge: {}: holds {} of the {expected} seed-runs its plan.csv lists (an empty or truncated file)",
                path.display(),
                read.len()
            );
        }
        for u in read {
            per_group[u.group].push((u.seed, u.values));
        }
    }
    let mut slices = Vec::new();
    for (gi, list) in per_group.iter_mut().enumerate() {
        list.sort_by_key(|(seed, _)| *seed);
        if let Some(w) = list.windows(2).find(|w| w[0].0 == w[1].0) {
            anyhow::bail!(
                "merge: seed {} of {} {} appears in two shards",
                w[0].0,
                metas[gi].scenario,
                metas[gi].param
            );
        }
        if let Some(w) = list.windows(2).find(|w| w[1].0 != w[0].0 + 1) {
            anyhow::bail!(
                "merge: seeds {}..{} of {} {} are in no shard",
                w[0].0 + 1,
                w[1].0,
                metas[gi].scenario,
                metas[gi].param
            );
        }
        let start = list
            .first()
            .map(|(s, _)| *s)
            .unwrap_or_else(|| plans.iter().map(|p| p[gi].1.start).min().unwrap_or(0));
        slices.push(start..start + list.len() as u64);
    }
    let lock = crate::folder::prepare_new(&o.out, "--out")?;
    write_atomic(
        &o.out.join(crate::fingerprint::FILE),
        fps[0].with(SHARD_KEY, "none").to_text().as_bytes(),
    )?;
    write_atomic(&o.out.join("plan.csv"), &plan_csv(&metas, &slices)?)?;
    let partial = o.out.join("seeds.csv.partial");
    let mut writer = SeedsWriter::open(&partial, false)?;
    let mut aggs: Vec<GroupAgg> = metas
        .iter()
        .zip(&per_group)
        .map(|(m, l)| GroupAgg::new(m, false, l.len()))
        .collect();
    for (gi, list) in per_group.iter().enumerate() {
        for (seed, vals) in list {
            aggs[gi].feed(&metas[gi], *seed, vals);
            writer.write(&metas[gi], *seed, vals)?;
        }
    }
    let summaries: Vec<Vec<SummaryEntry>> = metas
        .iter()
        .zip(&aggs)
        .map(|(m, a)| summarize(m, a))
        .collect();
    let frontiers = merge_frontiers(o, &metas, &per_group)?;
    let mut written = finish_outputs(&o.out, &metas, &aggs, &summaries, Some(writer), &partial)?;
    written.extend(frontiers);
    drop(lock);
    emit(&sweep_summary(&metas, &aggs, &summaries));
    emit(&mutant_summary(&metas, &aggs, &summaries));
    emitln(&format!(
        "merged {} shard(s); wrote {}",
        o.dirs.len(),
        written.join(", ")
    ));
    Ok(0)
}

/// `merge` of the shards' `frontiers.bin`: every group's records in seed order, checked
/// against the seeds merged from `seeds.csv`. None (and a note) when some shard has none.
fn merge_frontiers(
    o: &MergeOptions,
    metas: &[GroupMeta],
    per_group: &[Vec<(u64, Vec<SeedValues>)>],
) -> anyhow::Result<Option<String>> {
    use crate::export::frontiers::{read_frontiers, FILE, PARTIAL};
    if let Some(d) = o.dirs.iter().find(|d| !d.join(FILE).exists()) {
        emitln(&format!(
            "note: {} has no {FILE} (swept by an older seedsweep); the merged directory has none, so `size` on it cannot run",
            d.display()
        ));
        return Ok(None);
    }
    let mut recs: Vec<Vec<(u64, crate::export::frontiers::SeedFrontiers)>> =
        vec![Vec::new(); metas.len()];
    for d in &o.dirs {
        for r in read_frontiers(&d.join(FILE), metas, false)? {
            recs[r.group].push((r.seed, r.frontiers));
        }
    }
    let partial = o.out.join(PARTIAL);
    let mut w = FrontierWriter::open(&partial, false)?;
    for (gi, list) in recs.iter_mut().enumerate() {
        list.sort_by_key(|(seed, _)| *seed);
        let seeds: Vec<u64> = list.iter().map(|(s, _)| *s).collect();
        let want: Vec<u64> = per_group[gi].iter().map(|(s, _)| *s).collect();
        if seeds != want {
            anyhow::bail!(
                "merge: the {FILE} records of {} {} {} do not match the seeds of seeds.csv",
                metas[gi].scenario,
                metas[gi].param,
                metas[gi].profile
            );
        }
        for (seed, f) in list.iter() {
            w.write(gi, *seed, f)?;
        }
    }
    finish_frontiers(&o.out, Some(w))
}

/// Re-runs one seed; returns the process exit code.
pub fn repro(o: &ReproOptions) -> anyhow::Result<i32> {
    let catalog = load_catalog(&o.common)?;
    let groups = catalog.plan(&o.common.selection)?;
    crate::limits::check_memory(
        &[seed_runs_memory(&catalog, &groups, Some(1), 1)],
        o.common.max_memory,
    )?;
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
    emit(&outcome.text);
    Ok(if o.fail_on_exceed && outcome.exceeded {
        EXIT_EXCEEDED
    } else {
        0
    })
}

/// `list`: scenarios with their parametrizations and checks, profiles, modifiers, policies.
pub fn list(common: &Common) -> anyhow::Result<String> {
    let catalog = load_catalog(common)?;
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

/// Seed-runs per second of `groups` over `seeds` seeds each, run + evaluate, no output files.
pub fn measure(
    catalog: &Catalog,
    groups: &[crate::catalog::Group],
    seeds: u64,
    kernels: crate::backend::Kernels,
    threads: usize,
) -> anyhow::Result<(u64, f64)> {
    use rayon::prelude::*;
    // Units are indexed, not collected: their count may be large.
    let n_units = (groups.len() as u64)
        .checked_mul(seeds)
        .ok_or_else(|| InputError::flag("--seeds", "seeds x groups overflows u64"))?;
    let start = std::time::Instant::now();
    let checksum: f64 = pool(Some(threads))?.install(|| {
        (0..n_units)
            .into_par_iter()
            .map(|i| ((i / seeds) as usize, i % seeds))
            .map_init(
                || {
                    (
                        crate::scenario::Workspace::with_kernels(kernels),
                        Vec::new(),
                    )
                },
                |(ws, out), (gi, s)| {
                    let g = &groups[gi];
                    let first = catalog.scenarios[g.scenario].common().first_seed;
                    crate::sweep::run_unit(catalog, g, first + s, ws, out);
                    out.first().map(|r| r.usage).unwrap_or(0.0)
                },
            )
            .sum()
    });
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

/// `scale` options.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// Configs (for profiles).
    pub common: Common,
    /// Profile spec.
    pub profile: String,
    /// Reduction lengths.
    pub ks: Vec<usize>,
    /// TP degrees.
    pub tps: Vec<usize>,
    /// Seeds per point.
    pub seeds: u64,
    /// Rows of the synthetic input.
    pub rows: usize,
    /// Output columns.
    pub cols: usize,
    /// Policy names.
    pub policies: Vec<String>,
    /// Worker threads.
    pub threads: Option<usize>,
    /// Output directory.
    pub out: PathBuf,
}

/// Runs `scale`: writes `scale.csv` (and `scale.svg`) into `--out` and prints a table.
pub fn scale(o: &ScaleOptions) -> anyhow::Result<i32> {
    if o.seeds == 0 {
        return Err(InputError::flag("--seeds", "0 is not allowed; give at least 1 seed").into());
    }
    for &k in &o.ks {
        if !(1..=1 << 20).contains(&k) {
            return Err(InputError::flag(
                "--k",
                format!("{k} is out of range; allowed: 1..=1048576"),
            )
            .into());
        }
    }
    for &tp in &o.tps {
        if !(1..=64).contains(&tp) {
            return Err(
                InputError::flag("--tp", format!("{tp} is out of range; allowed: 1..=64")).into(),
            );
        }
    }
    if o.rows == 0 || o.cols == 0 {
        return Err(InputError::flag("--rows/--cols", "must be >= 1").into());
    }
    if o.threads == Some(0) {
        return Err(
            InputError::flag("--threads", "0 is not allowed; give at least 1 thread").into(),
        );
    }
    crate::limits::check_threads(o.threads)?;
    let catalog = load_catalog(&o.common)?;
    for name in &catalog.from_configs {
        let i = catalog.scenario_index(name, "--config")?;
        let c = catalog.scenarios[i].common();
        if c.extra_profiles.profiles.is_empty() && c.extra_profiles.modifiers.is_empty() {
            return Err(InputError::flag(
                "--config",
                format!(
                    "{} defines no [profiles.*] or [modifiers.*] table; scale draws its own \
                     synthetic data and uses only a config's profiles",
                    c.file
                ),
            )
            .into());
        }
    }
    let profile = catalog.profiles.resolve(&o.profile, "--profile")?;
    {
        // Per thread, one seed of the largest K: x and W in f32 and f64 (values and magnitudes),
        // and the m x n outputs of every computation; plus every seed's measures of one K.
        let kmax = o.ks.iter().copied().max().unwrap_or(1) as u64;
        let (m, n) = (o.rows as u64, o.cols as u64);
        let per_seed_run = (m.saturating_add(n))
            .saturating_mul(kmax)
            .saturating_mul(4 + 3 * 8)
            .saturating_add(
                m.saturating_mul(n)
                    .saturating_mul(8 * 4 + 4 * (o.tps.len() as u64 + 2)),
            );
        let t = (crate::limits::effective_threads(o.threads) as u64).min(o.seeds);
        let measures = o.seeds.saturating_mul(
            (o.tps.len() as u64 + 1).saturating_mul(o.policies.len() as u64 + 2) * 8 + 128,
        );
        crate::limits::check_memory(
            &[
                (
                    per_seed_run.saturating_mul(t),
                    format!(
                        "{t} thread(s) x {} per seed at K = {kmax} (--rows {m}, --cols {n})",
                        crate::limits::human(per_seed_run)
                    ),
                ),
                (measures, format!("the measures of {} seeds", o.seeds)),
            ],
            o.common.max_memory,
        )?;
    }
    let shared = crate::config::builtin_policies()?;
    let mut policies = Vec::new();
    for name in &o.policies {
        let p = shared.iter().find(|p| &p.name == name).ok_or_else(|| {
            let valid: Vec<&str> = shared.iter().map(|p| p.name.as_str()).collect();
            InputError::flag(
                "--policy",
                crate::error::unknown_name("policy", name, &valid),
            )
        })?;
        policies.push((p.name.clone(), p.default));
    }
    let pool = pool(o.threads)?;
    prepare_dir(&o.out, "--out")?;
    let spec = crate::scale::ScaleSpec {
        ks: o.ks.clone(),
        tps: o.tps.clone(),
        rows: o.rows,
        cols: o.cols,
        seeds: o.seeds,
        policies,
    };
    let points = pool.install(|| crate::scale::run(&spec, &profile));
    let csv = crate::export::csv::scale_csv(&profile.name, &o.policies, &points)?;
    write_atomic(&o.out.join("scale.csv"), &csv)?;
    let svg = crate::export::svg::scale_plot(&points, &o.policies[0], 0);
    write_atomic(&o.out.join("scale.svg"), svg.as_bytes())?;
    let mut header: Vec<String> = ["K", "TP", "p50 err/u·Σ|xw|", "p95", "max", "√K"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for p in &o.policies {
        header.push(format!("{p}: worst"));
        header.push("p95".into());
    }
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|pt| {
            let mut r = vec![
                pt.k.to_string(),
                if pt.tp == 1 {
                    "1 (ref)".into()
                } else {
                    pt.tp.to_string()
                },
                format!("{:.3}", pt.p50_err),
                format!("{:.3}", pt.p95_err),
                format!("{:.3}", pt.max_err),
                format!("{:.1}", pt.sqrt_k),
            ];
            for (w, p) in pt.worst_usage_pct.iter().zip(&pt.p95_usage_pct) {
                r.push(crate::export::table::pct(w / 100.0));
                r.push(crate::export::table::pct(p / 100.0));
            }
            r
        })
        .collect();
    emitln(&format!(
        "{} on x (rows x K, tanh N(0,1)) . W^T (cols x K, N(0,1)), {} seeds per point; errors against float64 in units of u*sum|x*w| (u = 2^-24), usage of sharded vs unsharded fp32",
        profile.name, o.seeds
    ));
    emit(&crate::export::table::render(&header, &rows, 0));
    emitln(&format!(
        "wrote {} and {}",
        o.out.join("scale.csv").display(),
        o.out.join("scale.svg").display()
    ));
    Ok(0)
}

/// Writes to stdout; a closed pipe (`seedsweep ... | head`) ends output quietly instead of
/// panicking. Files are always written before anything is printed.
pub fn emit(s: &str) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_all(s.as_bytes()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("Error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// [`emit`] with a newline.
pub fn emitln(s: &str) {
    emit(&format!("{s}\n"));
}

/// `size` options.
#[derive(Debug, Clone)]
pub struct SizeOptions {
    /// Selection (mutants default to all) and configs.
    pub common: Common,
    /// A finished sweep directory to size from (no re-run); `None` sweeps in-process.
    pub dir: Option<PathBuf>,
    /// Seeds (in-process only; default 1000).
    pub seeds: Option<u64>,
    /// First seed (in-process only).
    pub first_seed: Option<u64>,
    /// Per-seed failure probability.
    pub flake_rate: f64,
    /// Target usage at that probability, percent.
    pub target: f64,
    /// Worker threads.
    pub threads: Option<usize>,
    /// Markdown output file.
    pub markdown: Option<PathBuf>,
    /// `recommendations.csv` path (default: DIR/recommendations.csv; none in-process).
    pub out: Option<PathBuf>,
    /// Fresh seeds to validate the recommendation on.
    pub validate: Option<u64>,
}

/// Whether `name` passes an optional name filter.
fn selected(filter: &Option<Vec<String>>, name: &str) -> bool {
    filter.as_ref().is_none_or(|v| v.iter().any(|x| x == name))
}

/// Whether a scenario asserts with chex (a JAX test).
fn is_jax(catalog: &Catalog, scenario: &str) -> bool {
    catalog
        .scenarios
        .iter()
        .find(|s| s.common().name == scenario)
        // A JAX test is one whose framework has execution modes (xla-eager / xla-jit).
        .is_some_and(|s| !s.execution_modifiers().is_empty())
}

/// Reads a sweep directory's `plan.csv` and `frontiers.bin` into the groups `size` sizes,
/// filtered by the selection's scenario, param, profile and mutant names.
fn load_sized(
    dir: &std::path::Path,
    catalog: &Catalog,
    sel: &Selection,
) -> anyhow::Result<Vec<crate::size::GroupData>> {
    use crate::export::frontiers::{read_frontiers, FILE};
    let plan_path = dir.join("plan.csv");
    if !plan_path.exists() {
        return Err(InputError::flag(
            "size DIR",
            format!(
                "{} has no plan.csv; give a directory written by `seedsweep sweep`",
                dir.display()
            ),
        )
        .into());
    }
    let plan = read_plan(&plan_path)?;
    let metas: Vec<GroupMeta> = plan.iter().map(|(m, _)| m.clone()).collect();
    let fpath = dir.join(FILE);
    if !fpath.exists() {
        return Err(InputError::flag(
            "size DIR",
            format!(
                "{} has no {FILE} (an unfinished sweep, or one from an older seedsweep); run the sweep again, or size without DIR",
                dir.display()
            ),
        )
        .into());
    }
    let mut data: Vec<crate::size::GroupData> = metas
        .iter()
        .map(|m| crate::size::GroupData {
            meta: m.clone(),
            seeds: Vec::new(),
            fr: vec![Vec::new(); m.checks.len()],
            jax: is_jax(catalog, &m.scenario),
        })
        .collect();
    for r in read_frontiers(&fpath, &metas, false)? {
        let d = &mut data[r.group];
        if d.seeds.last().is_some_and(|&s| s >= r.seed) {
            anyhow::bail!(
                "{}: seeds of {} {} {} are not ascending at {}",
                fpath.display(),
                d.meta.scenario,
                d.meta.param,
                d.meta.profile,
                r.seed
            );
        }
        d.seeds.push(r.seed);
        for (c, f) in r.frontiers.into_iter().enumerate() {
            d.fr[c].push(f);
        }
    }
    for (d, (_, range)) in data.iter().zip(&plan) {
        let want: Vec<u64> = range.clone().collect();
        if d.seeds != want {
            anyhow::bail!(
                "{}: holds {} seeds of {} {} {}, plan.csv says {}..{}; is the sweep finished?",
                fpath.display(),
                d.seeds.len(),
                d.meta.scenario,
                d.meta.param,
                d.meta.profile,
                range.start,
                range.end
            );
        }
    }
    let mutants_all = sel
        .mutants
        .as_ref()
        .is_some_and(|v| v.iter().any(|m| m == "all"));
    Ok(data
        .into_iter()
        .filter(|d| {
            selected(&sel.scenarios, &d.meta.scenario)
                && selected(&sel.params, &d.meta.param)
                && selected(&sel.profiles, &d.meta.profile)
                && (d.meta.mutant.is_empty()
                    || mutants_all
                    || sel
                        .mutants
                        .as_ref()
                        .is_some_and(|v| v.contains(&d.meta.mutant)))
        })
        .collect())
}

/// `--validate N`: sweeps N fresh seeds after each clean group's sized range under the
/// recommended per-check balanced pairs; returns (text, markdown).
fn validate(
    catalog: &Catalog,
    data: &[crate::size::GroupData],
    report: &crate::size::SizeReport,
    n: u64,
    flake: f64,
) -> anyhow::Result<(String, String)> {
    use crate::check::py_repr;
    use crate::export::table::{pct, render};
    use crate::size::{clopper_pearson, usages};
    use crate::stats::tail::seeds_needed_empirical;
    let mut text = String::new();
    let mut md = format!(
        "\n### Validation on fresh seeds (`--validate {n}`)\n\nEach profile re-run on {n} seeds after the sized range, under the recommended balanced pair of each check. Flake rate = seeds with usage > 100 %, with its 95 % Clopper–Pearson interval; the observed usage at p = {} is the empirical quantile (shown only from {} seeds on).\n\n| scenario | param | profile | check | atol | rtol | failing seeds | flake rate [95 % CI] | observed at p | predicted [upper] |\n|---|---|---|---|---|---|---|---|---|---|\n",
        py_repr(flake),
        seeds_needed_empirical(flake)
    );
    let mut rows = Vec::new();
    for (scenario, param, pairs) in &report.validate {
        for d in data.iter().filter(|d| {
            d.meta.mutant.is_empty() && &d.meta.scenario == scenario && &d.meta.param == param
        }) {
            let Some(&last) = d.seeds.last() else {
                continue;
            };
            let si = catalog.scenario_index(scenario, "--validate")?;
            let s = &catalog.scenarios[si];
            let pi =
                s.param_ids()
                    .iter()
                    .position(|p| p == param)
                    .ok_or_else(|| {
                        InputError::flag(
                    "--validate",
                    format!("scenario {scenario} has no parametrization {param} in this catalog"),
                )
                    })?;
            let group = crate::catalog::Group {
                scenario: si,
                param: pi,
                profile: catalog.profiles.resolve(&d.meta.profile, "--validate")?,
                policy_names: Vec::new(),
                tolerances: Vec::new(),
                mutant: None,
            };
            let first = last
                .checked_add(1)
                .filter(|f| f.checked_add(n - 1).is_some())
                .ok_or_else(|| InputError::flag("--validate", "the seed range overflows u64"))?;
            let range = SeedRange {
                first: Some(first),
                count: n,
                shard: None,
            };
            let fr = crate::size::collect_labelled(catalog, &[group], &range, "validate")
                .pop()
                .unwrap_or_default();
            let seeds = fr.first().map(|c| c.len()).unwrap_or(0);
            let mut any_fail = vec![false; seeds];
            let mut add = |check: &str,
                           atol: String,
                           rtol: String,
                           fails: usize,
                           obs: String,
                           pred: String| {
                let (lo, hi) = clopper_pearson(fails, seeds);
                let rate = format!(
                    "{} [{}, {}]",
                    py_repr(fails as f64 / seeds.max(1) as f64),
                    fmt_rate(lo),
                    fmt_rate(hi)
                );
                rows.push(vec![
                    d.meta.profile.clone(),
                    check.to_string(),
                    format!("({atol}, {rtol})"),
                    format!("{fails}/{seeds}"),
                    rate.clone(),
                    obs.clone(),
                    pred.clone(),
                ]);
                md.push_str(&format!(
                    "| {scenario} | `{param}` | `{}` | `{check}` | {atol} | {rtol} | {fails}/{seeds} | {rate} | {obs} | {pred} |\n",
                    d.meta.profile
                ));
            };
            for (c, (check, tol)) in pairs.iter().enumerate() {
                if tol.atol.is_nan() {
                    continue;
                }
                let u = usages(&fr[c], *tol);
                let fails = u.iter().filter(|&&x| x > 100.0).count();
                for (i, &x) in u.iter().enumerate() {
                    any_fail[i] |= x > 100.0;
                }
                let obs = if seeds >= seeds_needed_empirical(flake) {
                    let mut s = u.clone();
                    s.sort_by(f64::total_cmp);
                    pct(crate::stats::quantile_sorted(&s, 1.0 - flake) / 100.0)
                } else {
                    "n/a".to_string()
                };
                let b = crate::stats::tail::sizing_bound(&usages(&d.fr[c], *tol), flake);
                let pred = format!("{} [{}]", pct(b.value / 100.0), pct(b.hi / 100.0));
                add(
                    check,
                    py_repr(tol.atol),
                    py_repr(tol.rtol),
                    fails,
                    obs,
                    pred,
                );
            }
            let fails = any_fail.iter().filter(|&&f| f).count();
            add(
                "any check",
                "per check".into(),
                "per check".into(),
                fails,
                "-".into(),
                "-".into(),
            );
            text.push_str(&format!(
                "validation: {scenario} [{param}] {} on seeds {first}..{} ({seeds} fresh)\n",
                d.meta.profile,
                first + seeds as u64 - 1
            ));
        }
    }
    let header: Vec<String> = [
        "profile",
        "check",
        "(atol, rtol)",
        "failing",
        "flake rate [95% CI]",
        &format!("observed @p={}", py_repr(flake)),
        "predicted [upper]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    text.push_str(&render(&header, &rows, 1));
    Ok((text, md))
}

fn fmt_rate(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.2e}")
    }
}

/// Runs `size`.
pub fn size(o: &SizeOptions) -> anyhow::Result<i32> {
    if o.seeds == Some(0) {
        return Err(InputError::flag("--seeds", "0 is not allowed; give at least 1 seed").into());
    }
    if !(o.flake_rate > 0.0 && o.flake_rate < 1.0) {
        return Err(InputError::flag(
            "--flake-rate",
            format!(
                "{} is not allowed; give a probability in (0, 1)",
                o.flake_rate
            ),
        )
        .into());
    }
    if !(o.target > 0.0 && o.target.is_finite()) {
        return Err(InputError::flag(
            "--target",
            format!("{} is not allowed; give a percentage > 0", o.target),
        )
        .into());
    }
    if o.threads == Some(0) {
        return Err(
            InputError::flag("--threads", "0 is not allowed; give at least 1 thread").into(),
        );
    }
    crate::limits::check_threads(o.threads)?;
    if o.validate == Some(0) {
        return Err(
            InputError::flag("--validate", "0 is not allowed; give at least 1 seed").into(),
        );
    }
    if o.dir.is_some() && (o.seeds.is_some() || o.first_seed.is_some()) {
        return Err(InputError::flag(
            if o.seeds.is_some() {
                "--seeds"
            } else {
                "--first-seed"
            },
            "not allowed with DIR: the seeds are those the sweep in DIR ran",
        )
        .into());
    }
    let catalog = load_catalog(&o.common)?;
    let csv_path = o
        .out
        .clone()
        .or_else(|| o.dir.as_ref().map(|d| d.join("recommendations.csv")));
    for (path, flag) in [(&o.markdown, "--markdown"), (&csv_path, "--out")] {
        if let Some(path) = path {
            // Fail on a bad path (a folder, an unwritable place) before the work starts.
            crate::export::output::check(path, flag)?;
        }
    }
    let pool = pool(o.threads)?;
    let data = match &o.dir {
        Some(dir) => load_sized(dir, &catalog, &o.common.selection)?,
        None => {
            let groups = catalog.plan(&o.common.selection)?;
            let seeds = o.seeds.unwrap_or(1000);
            crate::limits::check_seed_range(&catalog, &groups, o.first_seed, seeds)?;
            let range = SeedRange {
                first: o.first_seed,
                count: seeds,
                shard: None,
            };
            {
                // `size` keeps every seed's frontiers of every group in memory for the fits.
                let plan = units(&catalog, &groups, &range);
                let n: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
                let per_unit = groups
                    .iter()
                    .map(|g| GroupMeta::of(&catalog, g).entries() as u64)
                    .max()
                    .unwrap_or(0)
                    .saturating_mul(std::mem::size_of::<crate::evaluate::SeedCheck>() as u64 + 8);
                crate::limits::check_memory(
                    &[
                        seed_runs_memory(&catalog, &groups, o.threads, n),
                        (
                            n.saturating_mul(per_unit),
                            format!("the results of {n} seed-run(s), kept for the tail fits"),
                        ),
                    ],
                    o.common.max_memory,
                )?;
            }
            let fr = pool.install(|| crate::size::collect(&catalog, &groups, &range));
            groups
                .iter()
                .zip(fr)
                .map(|(g, fr)| {
                    let meta = GroupMeta::of(&catalog, g);
                    crate::size::GroupData {
                        seeds: crate::sweep::group_seeds(&catalog, g, &range).collect(),
                        jax: is_jax(&catalog, &meta.scenario),
                        meta,
                        fr,
                    }
                })
                .collect()
        }
    };
    if !data
        .iter()
        .any(|d| d.meta.mutant.is_empty() && !d.seeds.is_empty())
    {
        return Err(InputError::flag(
            "size",
            "nothing to size: the selection has no clean (non-mutant) group with seeds",
        )
        .into());
    }
    let mut report = pool.install(|| crate::size::size(&data, o.flake_rate, o.target));
    let mut vtext = String::new();
    if let Some(n) = o.validate {
        let (t, m) = pool.install(|| validate(&catalog, &data, &report, n, o.flake_rate))?;
        vtext = t;
        report.markdown.push_str(&m);
    }
    if let Some(path) = &csv_path {
        write_atomic(path, &crate::size::recommendations_csv(&report.rows)?)?;
    }
    if let Some(path) = &o.markdown {
        write_atomic(path, report.markdown.as_bytes())?;
    }
    emit(&report.text);
    emit(&vtext);
    for path in [&csv_path, &o.markdown]
        .into_iter()
        .flatten()
        .filter(|p| p.as_os_str() != "-")
    {
        emitln(&format!("wrote {}", path.display()));
    }
    if report.missed > 0 {
        emitln(&format!(
            "warning: {} mutant(s) are not caught on every seed under the recommended tolerances",
            report.missed
        ));
    }
    Ok(0)
}
