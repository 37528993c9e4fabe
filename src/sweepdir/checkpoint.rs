//! Checkpoint and resume of a sweep folder, and the finishing renames.
//!
//! While a sweep runs, `seeds.csv.partial`, `frontiers.bin.partial` and (with mutants)
//! `mutants.bin.partial` grow chunk by chunk and, after every chunk, `.progress` records
//! `(units, bytes, mutant bytes)`: how many work units the partial files hold between them
//! and how long `seeds.csv.partial` and `mutants.bin.partial` were then. `--resume` trusts
//! only that checkpoint: it cuts the partial files back to it, feeds the units they hold to
//! the aggregates, and runs the rest. The last steps ([`finish_outputs`]) write the summaries and
//! rename the partial files into place, so a folder with `seeds.csv` (or, with
//! `--summary-only`, `summary.csv`) and no `seeds.csv.partial` is a finished sweep and a kill
//! at any moment before leaves a folder `--resume` completes byte-identically.

use std::ops::Range;
use std::path::Path;

use anyhow::Context;

use crate::engine::aggregate::{GroupAgg, SummaryEntry};
use crate::engine::plan::GroupMeta;
use crate::engine::{UnitBytes, UnitSink};
use crate::results::csv::{mutants_csv, summary_csv};
use crate::results::frontiers::FrontierWriter;
use crate::results::rowlog::{self, RowLogWriter};
use crate::results::seeds_file::{for_each_partial_unit, SeedsFormat, SeedsOut};
use crate::results::sink::SweepEncoder;
use crate::sys::atomic_write::write_atomic;
use crate::sys::error::InputError;

/// The checkpoint file in a sweep folder.
pub const PROGRESS: &str = ".progress";

/// The sweep's sink: a clean unit's rows to the partial per-seed file (`seeds.csv.partial`,
/// or `seeds.bin.partial` with `--format parquet`) and its frontier record to
/// `frontiers.bin.partial`, a mutant unit's values to `mutants.bin.partial`; after every
/// chunk a flush and a `.progress` checkpoint `(units, bytes[, mutant bytes])` that
/// `--resume` trusts.
pub struct FileSink<'a> {
    /// The partial per-seed file (none with `--summary-only`).
    pub writer: Option<SeedsOut>,
    /// `mutants.bin.partial`: the mutant groups' values (none with `--summary-only`, or
    /// without mutants).
    pub mutants: Option<RowLogWriter>,
    /// The groups, for the rows' layout.
    pub metas: &'a [GroupMeta],
    /// Path of the partial per-seed file.
    pub partial: &'a Path,
    /// Path of `.progress`.
    pub progress: &'a Path,
    /// `frontiers.bin.partial`, flushed before each checkpoint (so it never holds fewer
    /// units than the checkpoint says).
    pub frontiers: Option<FrontierWriter>,
}

impl UnitSink for FileSink<'_> {
    type Encoder = SweepEncoder;
    fn encoder(&self) -> SweepEncoder {
        SweepEncoder {
            rows: self.writer.as_ref().map(SeedsOut::format),
            frontiers: self.frontiers.is_some(),
        }
    }
    fn wants_frontiers(&self) -> bool {
        self.frontiers.is_some()
    }
    fn unit(&mut self, group: usize, (rows, frontiers): &UnitBytes) -> anyhow::Result<()> {
        if !self.metas[group].mutant.is_empty() {
            return match self.mutants.as_mut() {
                Some(w) => w.write_record(rows),
                None => Ok(()),
            };
        }
        if let Some(w) = self.writer.as_mut() {
            w.write_formatted(rows)?;
        }
        match self.frontiers.as_mut() {
            Some(w) => w.write_record(frontiers),
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
        let len = |p: &Path| -> anyhow::Result<u64> {
            Ok(std::fs::metadata(p)
                .with_context(|| format!("cannot stat {}", p.display()))?
                .len())
        };
        let bytes = len(self.partial)?;
        let mut line = format!("{units_so_far} {bytes}");
        if let Some(m) = self.mutants.as_mut() {
            m.flush()?;
            let mpath = self
                .partial
                .with_file_name(crate::results::rowlog::MUTANTS_PARTIAL);
            line.push_str(&format!(" {}", len(&mpath)?));
        }
        line.push('\n');
        write_atomic(self.progress, line.as_bytes())
    }
    fn spill_dir(&self) -> Option<&Path> {
        // The sweep folder: results held back take about as much room as the rows the
        // sweep writes there anyway.
        self.partial.parent()
    }
}

/// Flushes `frontiers.bin.partial` and moves it to `frontiers.bin`; returns the path.
pub fn finish_frontiers(out: &Path, w: Option<FrontierWriter>) -> anyhow::Result<Option<String>> {
    let Some(mut w) = w else { return Ok(None) };
    w.flush()?;
    drop(w);
    let from = out.join(crate::results::frontiers::PARTIAL);
    let to = out.join(crate::results::frontiers::FILE);
    std::fs::rename(&from, &to)
        .with_context(|| format!("cannot move {} to {}", from.display(), to.display()))?;
    Ok(Some(to.display().to_string()))
}

/// The first `n` units of `plan` in output order (group-major, then seed).
fn prefix(plan: &[(usize, Range<u64>)], n: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
    plan.iter()
        .flat_map(|(gi, r)| r.clone().map(move |seed| (*gi, seed)))
        .take(n as usize)
}

/// `--resume` of the per-seed rows: from the `.progress` checkpoint, cuts the partial
/// per-seed file of `format` and `mutants.bin.partial` back to it, checks that their units
/// follow `plan` (the clean groups' units in the one, the mutant groups' in the other),
/// feeds them to `aggs` and cuts `frontiers.bin.partial` to the same units. Returns `(skip,
/// append_frontiers)`: the units already done, and whether to append to
/// `frontiers.bin.partial`. With nothing trustworthy to continue from (no checkpoint, a short
/// file, `--summary-only`), the seeds start over in this folder: `(0, false)`.
pub fn resume_units(
    out: &Path,
    metas: &[GroupMeta],
    plan: &[(usize, Range<u64>)],
    aggs: &mut [GroupAgg],
    summary_only: bool,
    format: SeedsFormat,
) -> anyhow::Result<(u64, bool)> {
    let partial = out.join(format.partial());
    let mpartial = out.join(rowlog::MUTANTS_PARTIAL);
    let progress = out.join(PROGRESS);
    let mut skip = 0u64;
    let p = read_progress(&progress);
    let len = |path: &Path| std::fs::metadata(path).map(|m| m.len()).ok();
    let mutants = metas.iter().any(|m| !m.mutant.is_empty());
    let mutants_ok = !mutants
        || matches!((p.mutant_bytes, len(&mpartial)), (Some(want), Some(have)) if have >= want);
    if summary_only || p.units == 0 || len(&partial).is_none_or(|l| l < p.bytes) || !mutants_ok {
        // Nothing trustworthy to continue from: start the seeds over in this folder.
        let _ = std::fs::remove_file(&progress);
    } else {
        let not_the_plan = |path: &Path, seed: u64| {
            anyhow::anyhow!(
                "--resume: {} does not follow the plan at seed {seed}; delete it to start over",
                path.display(),
            )
        };
        let clean = |&(gi, _): &(usize, u64)| metas[gi].mutant.is_empty();
        truncate(&partial, p.bytes)?;
        let mut expected = prefix(plan, p.units).filter(clean);
        if prefix(plan, p.units).any(|u| clean(&u)) {
            for_each_partial_unit(format, &partial, metas, |group, seed, values| {
                if expected.next() != Some((group, seed)) {
                    return Err(not_the_plan(&partial, seed));
                }
                aggs[group].feed(&metas[group], seed, values);
                Ok(())
            })?;
        }
        if let Some((_, seed)) = expected.next() {
            return Err(not_the_plan(&partial, seed));
        }
        if let Some(mb) = p.mutant_bytes.filter(|_| mutants) {
            truncate(&mpartial, mb)?;
            let mut expected = prefix(plan, p.units).filter(|u| !clean(u));
            rowlog::for_each_unit(&mpartial, metas, false, |group, seed, values, _| {
                if expected.next() != Some((group, seed)) {
                    return Err(not_the_plan(&mpartial, seed));
                }
                aggs[group].feed(&metas[group], seed, values);
                Ok(())
            })?;
            if let Some((_, seed)) = expected.next() {
                return Err(not_the_plan(&mpartial, seed));
            }
        }
        skip = p.units;
    }
    let frontiers_skip = resume_frontiers(out, metas, plan, skip, format.partial())?;
    Ok((skip, frontiers_skip))
}

/// `--resume`: keeps the records of `frontiers.bin.partial` of the clean units among the
/// first `skip` (they must follow the plan, as the per-seed file's units did) and cuts what
/// was written after them. Returns whether to append (false: start the file afresh, nothing
/// was done).
fn resume_frontiers(
    out: &Path,
    metas: &[GroupMeta],
    plan: &[(usize, Range<u64>)],
    skip: u64,
    rows_partial: &str,
) -> anyhow::Result<bool> {
    if skip == 0 {
        return Ok(false);
    }
    let path = out.join(crate::results::frontiers::PARTIAL);
    let done = out.join(crate::results::frontiers::FILE);
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
                "{} is missing or holds fewer units than {rows_partial}; delete {} to start over",
                path.display(),
                out.display()
            ),
        )
    };
    if !path.exists() {
        return Err(bad().into());
    }
    let recs = crate::results::frontiers::read_frontiers(&path, metas, true)?;
    let expected: Vec<(usize, u64)> = prefix(plan, skip)
        .filter(|&(gi, _)| metas[gi].mutant.is_empty())
        .collect();
    if recs.len() < expected.len() {
        return Err(bad().into());
    }
    for (r, &(gi, seed)) in recs.iter().zip(&expected) {
        if (r.group, r.seed) != (gi, seed) {
            anyhow::bail!(
                "--resume: {} does not follow the plan at seed {}; delete it to start over",
                path.display(),
                r.seed
            );
        }
    }
    let end = match expected.len() {
        0 => crate::results::frontiers::MAGIC.len() as u64,
        n => recs[n - 1].end,
    };
    truncate(&path, end)?;
    Ok(true)
}

/// Writes the summaries atomically (`mutants.csv` before `summary.csv`), removes
/// `mutants.bin.partial` (no longer needed), then closes the per-seed file and renames it
/// into place: the last step, so that a folder with `seeds.csv` (or, with `--summary-only`,
/// `summary.csv`) and no `seeds.csv.partial` is a finished sweep and a kill before it leaves
/// a folder `--resume` completes. Returns the paths written.
pub fn finish_outputs(
    out: &Path,
    metas: &[GroupMeta],
    aggs: &[GroupAgg],
    summaries: &[Vec<SummaryEntry>],
    writer: Option<SeedsOut>,
    partial: &Path,
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
    let ags: Vec<GroupAgg> = keep.iter().map(|&i| aggs[i].clone()).collect();
    if ms.iter().any(|m| !m.mutant.is_empty()) {
        write_atomic(&out.join("mutants.csv"), &mutants_csv(&ms, &ags))?;
        written.push(out.join("mutants.csv").display().to_string());
    }
    write_atomic(&out.join("summary.csv"), &summary_csv(&ms, &ss))?;
    written.insert(0, out.join("summary.csv").display().to_string());
    let mpartial = out.join(rowlog::MUTANTS_PARTIAL);
    match std::fs::remove_file(&mpartial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("cannot remove {}", mpartial.display()))
        }
        _ => {}
    }
    if let Some(w) = writer {
        let seeds = w.finish(out, metas, partial)?;
        written.insert(0, seeds.display().to_string());
    }
    Ok(written)
}

/// A `.progress` checkpoint: `units bytes[ mutant_bytes]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Units handed to the sink.
    pub units: u64,
    /// Length of the partial per-seed file then.
    pub bytes: u64,
    /// Length of `mutants.bin.partial` then (a sweep with mutants).
    pub mutant_bytes: Option<u64>,
}

/// The `.progress` checkpoint, or zeros.
pub(crate) fn read_progress(path: &Path) -> Progress {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Progress::default();
    };
    let mut it = text.split_whitespace().map(|t| t.parse::<u64>().ok());
    match (it.next().flatten(), it.next().flatten(), it.next()) {
        (Some(units), Some(bytes), m) => Progress {
            units,
            bytes,
            mutant_bytes: m.flatten(),
        },
        _ => Progress::default(),
    }
}

/// Cuts `path` to `len` bytes (drops rows written after the last checkpoint).
fn truncate(path: &Path, len: u64) -> anyhow::Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("--resume: cannot open {}", path.display()))?;
    f.set_len(len)
        .with_context(|| format!("--resume: cannot truncate {}", path.display()))
}
