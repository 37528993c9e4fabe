//! `seedsweep merge`: combine the folders of `sweep --shard I/N` into the folder one sweep
//! over all seeds writes, byte for byte.

use std::path::PathBuf;

use crate::commands::{emit, status};
use crate::engine::aggregate::{summarize_all, GroupAgg, SummaryEntry};
use crate::report::table::{mutant_summary, sweep_summary};
use crate::results::csv::plan_csv;
use crate::results::seeds_file::SeedsOut;
use crate::sweepdir::checkpoint::finish_outputs;
use crate::sweepdir::fingerprint::SHARD_KEY;
use crate::sys::atomic_write::write_atomic;

/// `merge` options.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Shard output directories.
    pub dirs: Vec<PathBuf>,
    /// Where the merged files go.
    pub out: PathBuf,
    /// Only report each shard's state (`--check`): nothing is read beyond fingerprints,
    /// plans and checkpoints, and nothing is written.
    pub check: bool,
    /// No status lines.
    pub quiet: bool,
}

/// `merge --check`: one tab-separated line per shard folder on stdout (`shard`, `state`,
/// `folder`, `detail`; states `done`, `partial`, `not-started`, `missing`, `other`), plus a
/// `missing` line (folder `-`) for each shard index no folder holds, and a one-line verdict
/// on stderr. Exit 0 when shards `0..N` are all done, once each; 1 otherwise.
pub fn check(dirs: &[PathBuf]) -> i32 {
    let (lines, ok) = crate::sweepdir::shard_set::status(dirs);
    let mut out = String::from("shard\tstate\tfolder\tdetail\n");
    for l in &lines {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            l.shard.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
            l.state,
            l.dir
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| "-".into()),
            l.detail.replace(['\t', '\n'], " ")
        ));
    }
    emit(&out);
    let done = lines.iter().filter(|l| l.state == "done").count();
    if ok {
        eprintln!("merge --check: all {done} shard(s) done; `merge` can combine them");
        0
    } else {
        let not: Vec<String> = lines
            .iter()
            .filter(|l| l.state != "done")
            .map(|l| {
                format!(
                    "{} ({})",
                    l.dir
                        .as_ref()
                        .map(|d| d.display().to_string())
                        .unwrap_or_else(|| format!(
                            "shard {}",
                            l.shard.map(|s| s.to_string()).unwrap_or_default()
                        )),
                    l.state
                )
            })
            .collect();
        eprintln!(
            "merge --check: not ready: {done} shard folder(s) done; not done: {}",
            not.join(", ")
        );
        1
    }
}

/// Combines shard outputs into the files one run over all seeds writes, byte for byte: the
/// shards are read and checked ([`crate::sweepdir::shard_set::read`]), every clean group's
/// rows are aggregated in seed order as a sweep aggregates them, every mutant group's
/// counts are merged from the shards' `mutants.csv`, and the folder is written as a sweep
/// writes it.
pub fn merge(o: &MergeOptions) -> anyhow::Result<i32> {
    if o.check {
        return Ok(check(&o.dirs));
    }
    let set = crate::sweepdir::shard_set::read(&o.dirs, &o.out)?;
    let (metas, per_group) = (&set.metas, &set.per_group);
    let lock = crate::sweepdir::folder::prepare_new(&o.out, "--out")?;
    let fingerprint = set.fingerprint.with(SHARD_KEY, "none").without_checksums();
    write_atomic(
        &o.out.join(crate::sweepdir::fingerprint::FILE),
        fingerprint.to_text().as_bytes(),
    )?;
    write_atomic(&o.out.join("plan.csv"), &plan_csv(metas, &set.slices))?;
    // The merged per-seed file takes the shards' format (their fingerprints agree on it).
    let partial = o.out.join(set.format.partial());
    let mut writer = SeedsOut::open(set.format, &partial, false)?;
    let mut aggs: Vec<GroupAgg> = metas
        .iter()
        .zip(per_group)
        .map(|(m, l)| GroupAgg::new(m, false, l.len()))
        .collect();
    for (gi, list) in per_group.iter().enumerate() {
        for (seed, vals) in list {
            aggs[gi].feed(&metas[gi], *seed, vals);
            writer.write(&metas[gi], gi, *seed, vals)?;
        }
        // A mutant group: its shards' counts, which merge exactly.
        for part in &set.mutant_parts[gi] {
            aggs[gi].merge_caught(part.seeds, &part.entries, &part.any);
        }
    }
    let summaries: Vec<Vec<SummaryEntry>> = summarize_all(metas, &aggs);
    let frontiers =
        match crate::sweepdir::shard_set::merge_frontiers(&o.dirs, &o.out, metas, per_group)? {
            Ok(path) => Some(path),
            Err(note) => {
                status(o.quiet, &note);
                None
            }
        };
    let mut written = finish_outputs(&o.out, metas, &aggs, &summaries, Some(writer), &partial)?;
    written.extend(frontiers);
    crate::sweepdir::fingerprint::record_checksums(&o.out, &fingerprint)?;
    drop(lock);
    emit(&sweep_summary(metas, &aggs, &summaries));
    emit(&mutant_summary(metas, &aggs, &summaries));
    status(
        o.quiet,
        &format!(
            "merged {} shard(s); wrote {}",
            o.dirs.len(),
            written.join(", ")
        ),
    );
    Ok(0)
}
