//! The set of shard folders `merge` combines: reading and checking them (one sweep, shards
//! `0..N` of `N` once each, every `seeds.csv` exactly what its `plan.csv` lists for the
//! clean groups, every `mutants.csv` what it lists for the mutant groups) into every clean
//! group's per-seed rows in seed order and every mutant group's counts per shard, and
//! merging their `frontiers.bin` records.

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::engine::evaluate::SeedValues;
use crate::engine::plan::GroupMeta;
use crate::results::csv::{read_mutants, read_plan, read_units, MutantPart};
use crate::results::frontiers::FrontierWriter;
use crate::results::seeds_file::SeedsFormat;
use crate::sweepdir::fingerprint::{Fingerprint, SHARD_KEY};
use crate::sys::error::InputError;

/// A file's device and inode (symlinks followed): the same for every spelling of one path,
/// a bind mount included.
fn file_id(p: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::canonicalize(p).ok().map(|c| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            c.hash(&mut h);
            (0, h.finish())
        })
    }
}

/// Whether the folder `out` (its id) is the shard `dir` or one of its parent folders:
/// `Some("is")` or `Some("is inside")`, compared by device and inode.
fn out_holds(out: Option<(u64, u64)>, dir: &Path) -> Option<&'static str> {
    let out = out?;
    let real = std::fs::canonicalize(dir).ok()?;
    for (k, a) in real.ancestors().enumerate() {
        if file_id(a) == Some(out) {
            return Some(if k == 0 { "is also" } else { "is inside" });
        }
    }
    None
}

/// Finished shard folders of one sweep, read and checked.
pub struct ShardSet {
    /// The first shard's fingerprint (all agree but for the shard line).
    pub fingerprint: Fingerprint,
    /// The groups, as every shard's `plan.csv` lists them.
    pub metas: Vec<GroupMeta>,
    /// Every clean group's seeds from all shards, in seed order, with their rows (empty for
    /// a mutant group, which writes no per-seed rows).
    pub per_group: Vec<Vec<(u64, Vec<SeedValues>)>>,
    /// Every mutant group's counts, one part per shard that ran some of its seeds
    /// (`mutants.csv`; empty for a clean group).
    pub mutant_parts: Vec<Vec<MutantPart>>,
    /// Every group's merged seed slice.
    pub slices: Vec<Range<u64>>,
    /// The shards' per-seed file format (their fingerprints agree on it).
    pub format: SeedsFormat,
}

/// Reads the shard folders `dirs` (none of which may be `out`) into a [`ShardSet`].
///
/// Every shard must be a finished per-seed sweep folder with the same fingerprint (all but
/// the shard line), the shards together must be exactly shards `0..N` of `N`, once each (so
/// their seeds are disjoint and cover the range with no gap), and every `seeds.csv` must hold
/// exactly the seed-runs its `plan.csv` lists, with well-formed rows and usages that are
/// numbers >= 0 or inf. Anything else is an error naming the shard and the problem.
pub fn read(dirs: &[PathBuf], out: &Path) -> anyhow::Result<ShardSet> {
    if dirs.is_empty() {
        return Err(InputError::flag("merge", "give at least one shard directory").into());
    }
    let out_id = file_id(out);
    let mut fps: Vec<Fingerprint> = Vec::new();
    let mut plans = Vec::new();
    let mut formats = Vec::new();
    let mut shards: Vec<(u64, u64)> = Vec::new();
    for d in dirs {
        let bad = |what: String| anyhow::anyhow!("merge: {}: {what}", d.display());
        if !d.is_dir() {
            return Err(bad("is not a folder".into()));
        }
        if let Some(why) = out_holds(out_id, d) {
            return Err(bad(format!(
                "{why} --out {}; give the merged output a folder outside every shard",
                out.display()
            )));
        }
        let fp = Fingerprint::read(d)?.ok_or_else(|| {
            bad(format!(
                "has no {}: not a sweep folder (or one written by an older seedsweep; rerun that shard)",
                crate::sweepdir::fingerprint::FILE
            ))
        })?;
        let Some(format) = fp.get("output.mode").and_then(SeedsFormat::of_mode) else {
            return Err(bad(
                "is a --summary-only sweep: it keeps no per-seed file, so it cannot be merged"
                    .into(),
            ));
        };
        if crate::sweepdir::folder::has(d, format.partial()) {
            return Err(bad(format!(
                "is unfinished ({} is there); complete it with `sweep ... --resume`",
                format.partial()
            )));
        }
        if !crate::sweepdir::folder::has(d, format.file()) {
            return Err(bad(format!(
                "has no {} (an unfinished shard cannot be merged)",
                format.file()
            )));
        }
        // Its files must be the ones its sweep wrote (bit rot and edits are refused).
        if crate::sweepdir::fingerprint::verify_checksums(
            d,
            &fp,
            &format!("merge: {}", d.display()),
        )? == crate::sweepdir::fingerprint::Checked::NoneRecorded
        {
            eprintln!(
                "note: {} records no checksums (written by an older seedsweep, or killed as it \
                 finished: `sweep ... --resume` there adds them); its files are not verified",
                d.display()
            );
        }
        formats.push(format);
        let shard = match fp.shard().map_err(bad)? {
            None => (0, 1),
            Some(s) => (s.index, s.count),
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
    for i in 1..dirs.len() {
        let diff = fps[i].diff(
            &fps[0],
            &format!("in {}", dirs[i].display()),
            &format!("in {}", dirs[0].display()),
            &[SHARD_KEY],
            12,
        );
        if !diff.is_empty() {
            anyhow::bail!(
                "merge: {} comes from a different sweep than {}:\n  {}",
                dirs[i].display(),
                dirs[0].display(),
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
                dirs[k].display(),
                dirs[0].display(),
                shards[0].0
            );
        }
        if let Some(j) = seen[i as usize] {
            anyhow::bail!(
                "merge: {} and {} are both shard {i}/{n}: their seeds overlap",
                dirs[j].display(),
                dirs[k].display()
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
    for (d, p) in dirs.iter().zip(&plans) {
        let same = p.len() == metas.len() && p.iter().zip(&metas).all(|((a, _), b)| a == b);
        if !same {
            anyhow::bail!(
                "merge: {} comes from a different sweep than {} (plan.csv differs beyond the seed slices)",
                d.display(),
                dirs[0].display()
            );
        }
    }
    // Every clean group's seeds, from all shards, in seed order; each shard's file must hold
    // exactly the seed-runs of its plan's clean groups, in plan order. Every mutant group's
    // counts from each shard's mutants.csv, which must hold exactly its plan's mutant groups
    // with seeds.
    let format = formats.first().copied().unwrap_or_default();
    let mut per_group: Vec<Vec<(u64, Vec<SeedValues>)>> = vec![Vec::new(); metas.len()];
    let mut mutant_parts: Vec<Vec<MutantPart>> = vec![Vec::new(); metas.len()];
    let clean = |gi: usize| metas[gi].mutant.is_empty();
    for (d, plan) in dirs.iter().zip(&plans) {
        if plan
            .iter()
            .any(|(m, r)| !m.mutant.is_empty() && !r.is_empty())
        {
            let path = d.join("mutants.csv");
            let parts = read_mutants(&path, &metas).map_err(|e| anyhow::anyhow!("merge: {e:#}"))?;
            for (gi, ((m, r), part)) in plan.iter().zip(parts).enumerate() {
                if m.mutant.is_empty() {
                    continue;
                }
                let n = (r.end - r.start) as usize;
                match part {
                    Some(p) if p.seeds == n => mutant_parts[gi].push(p),
                    None if n == 0 => {}
                    other => anyhow::bail!(
                        "merge: {}: holds {} seeds of {} {} {} {}, its plan.csv says {n}",
                        path.display(),
                        other.map_or(0, |p| p.seeds),
                        m.scenario,
                        m.param,
                        m.profile,
                        m.mutant
                    ),
                }
            }
        }
        let path = d.join(format.file());
        let read = read_units(&path, &metas, false).map_err(|e| anyhow::anyhow!("merge: {e:#}"))?;
        let expected: u64 = plan
            .iter()
            .enumerate()
            .filter(|&(gi, _)| clean(gi))
            .map(|(_, (_, r))| r.end - r.start)
            .sum();
        let mut want = plan
            .iter()
            .enumerate()
            .filter(|&(gi, _)| clean(gi))
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
        if !clean(gi) {
            slices.push(mutant_slice(
                &metas[gi],
                plans.iter().map(|p| p[gi].1.clone()),
            )?);
            continue;
        }
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
    Ok(ShardSet {
        fingerprint: fps.swap_remove(0),
        metas,
        per_group,
        mutant_parts,
        slices,
        format,
    })
}

/// A mutant group's merged seed slice from its shards' slices: they must tile one range,
/// with no gap and no overlap.
fn mutant_slice(
    m: &GroupMeta,
    slices: impl Iterator<Item = Range<u64>>,
) -> anyhow::Result<Range<u64>> {
    let all: Vec<Range<u64>> = slices.collect();
    let mut parts: Vec<Range<u64>> = all.iter().filter(|r| !r.is_empty()).cloned().collect();
    parts.sort_by_key(|r| r.start);
    for w in parts.windows(2) {
        if w[1].start != w[0].end {
            anyhow::bail!(
                "merge: seeds {}..{} of {} {} {} {} are {} shard",
                w[0].end.min(w[1].start),
                w[0].end.max(w[1].start),
                m.scenario,
                m.param,
                m.profile,
                m.mutant,
                if w[1].start > w[0].end {
                    "in no"
                } else {
                    "in more than one"
                }
            );
        }
    }
    Ok(match (parts.first(), parts.last()) {
        (Some(a), Some(b)) => a.start..b.end,
        _ => {
            let start = all.iter().map(|r| r.start).min().unwrap_or(0);
            start..start
        }
    })
}

/// `merge` of the shards' `frontiers.bin`: every group's records in seed order, checked
/// against the seeds merged from `seeds.csv`, written to `out` (the path written), or, when
/// some shard has none, a note saying so (and nothing written).
pub fn merge_frontiers(
    dirs: &[PathBuf],
    out: &Path,
    metas: &[GroupMeta],
    per_group: &[Vec<(u64, Vec<SeedValues>)>],
) -> anyhow::Result<Result<String, String>> {
    use crate::results::frontiers::{read_frontiers, FILE, PARTIAL};
    if let Some(d) = dirs.iter().find(|d| !d.join(FILE).exists()) {
        return Ok(Err(format!(
            "note: {} has no {FILE} (swept by an older seedsweep); the merged directory has none, so `size` on it cannot run",
            d.display()
        )));
    }
    let mut recs: Vec<Vec<(u64, crate::results::frontiers::SeedFrontiers)>> =
        vec![Vec::new(); metas.len()];
    for d in dirs {
        for r in read_frontiers(&d.join(FILE), metas, false)? {
            recs[r.group].push((r.seed, r.frontiers));
        }
    }
    let partial = out.join(PARTIAL);
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
    Ok(Ok(crate::sweepdir::checkpoint::finish_frontiers(
        out,
        Some(w),
    )?
    .expect("a writer was given")))
}

/// One line of `merge --check`: a shard folder's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStatus {
    /// The shard its fingerprint names, where it has one.
    pub shard: Option<crate::engine::plan::Shard>,
    /// `done`, `partial`, `not-started`, `missing` or `other`.
    pub state: &'static str,
    /// The folder (`None`: a shard index that no given folder holds).
    pub dir: Option<PathBuf>,
    /// What it holds, and what completes it.
    pub detail: String,
}

/// The state of every shard folder in `dirs`, without reading their rows (`merge --check`),
/// and whether all of shards `0..N` are done, once each. A folder from another sweep than
/// the first one with a fingerprint, a second folder of one shard, or a shard count that
/// differs is `other`; a shard index that no folder holds gets a `missing` line of its own.
pub fn status(dirs: &[PathBuf]) -> (Vec<ShardStatus>, bool) {
    let mut lines: Vec<ShardStatus> = Vec::new();
    let mut fps: Vec<Option<Fingerprint>> = Vec::new();
    for d in dirs {
        let (shard, state, detail, fp) = one_status(d);
        lines.push(ShardStatus {
            shard,
            state,
            dir: Some(d.clone()),
            detail,
        });
        fps.push(fp);
    }
    let first = fps
        .iter()
        .enumerate()
        .find_map(|(i, f)| f.as_ref().map(|f| (i, f.clone())));
    let mut n = 1;
    if let Some((i0, f0)) = &first {
        n = lines[*i0].shard.map(|s| s.count).unwrap_or(1);
        let mut seen: Vec<Option<usize>> = vec![None; n.min(1 << 20) as usize];
        for i in 0..lines.len() {
            let Some(f) = &fps[i] else { continue };
            let diff = f.diff(
                f0,
                &format!("in {}", dirs[i].display()),
                &format!("in {}", dirs[*i0].display()),
                &[SHARD_KEY],
                1,
            );
            let count = lines[i].shard.map(|s| s.count).unwrap_or(1);
            let index = lines[i].shard.map(|s| s.index).unwrap_or(0);
            let d0 = dirs[*i0].display();
            let why = if !diff.is_empty() {
                Some(format!(
                    "from a different sweep than {d0} ({}); it cannot be merged with it",
                    diff[0]
                ))
            } else if count != n || n > 1 << 20 {
                Some(format!(
                    "shard {index}/{count}, but {d0} is one of {n} shards: shards of one sweep share N"
                ))
            } else {
                seen[index as usize].map(|j| {
                    format!(
                        "shard {index}/{n} again ({} holds it too)",
                        dirs[j].display()
                    )
                })
            };
            match why {
                Some(w) if lines[i].state != "other" => {
                    lines[i].state = "other";
                    lines[i].detail = w;
                }
                Some(_) => {}
                None => seen[index as usize] = Some(i),
            }
        }
        // (A bogus shard count past 2^20 is already `other`; no line per index for it.)
        for (i, s) in seen
            .iter()
            .enumerate()
            .take(if n > 1 << 20 { 0 } else { seen.len() })
        {
            if s.is_none() {
                lines.push(ShardStatus {
                    shard: Some(crate::engine::plan::Shard {
                        index: i as u64,
                        count: n,
                    }),
                    state: "missing",
                    dir: None,
                    detail: format!("no folder given holds shard {i}/{n}"),
                });
            }
        }
    }
    let done = lines.iter().filter(|l| l.state == "done").count() as u64;
    let ok = first.is_some() && lines.iter().all(|l| l.state == "done") && done == n;
    (lines, ok)
}

/// One folder's shard, state, detail and fingerprint.
fn one_status(
    d: &Path,
) -> (
    Option<crate::engine::plan::Shard>,
    &'static str,
    String,
    Option<Fingerprint>,
) {
    let other = |s: String| (None, "other", s, None);
    if std::fs::symlink_metadata(d).is_err() {
        return (None, "missing", "no such folder".into(), None);
    }
    if !d.is_dir() {
        return other("is not a folder".into());
    }
    let fp = match Fingerprint::read(d) {
        Err(e) => return other(format!("{e:#}")),
        Ok(None) => {
            return match crate::sweepdir::folder::FILES
                .iter()
                .find(|f| crate::sweepdir::folder::has(d, f.name))
            {
                Some(f) => other(format!(
                    "holds {} but no {}: not a sweep seedsweep can continue",
                    f.name,
                    crate::sweepdir::fingerprint::FILE
                )),
                None => (
                    None,
                    "not-started",
                    "holds no sweep yet; run its shard with `sweep ... --shard I/N --resume`"
                        .into(),
                    None,
                ),
            }
        }
        Ok(Some(fp)) => fp,
    };
    let shard = match fp.shard() {
        Ok(s) => s,
        Err(e) => return other(e),
    };
    let shard = Some(shard.unwrap_or(crate::engine::plan::Shard { index: 0, count: 1 }));
    let Some(format) = fp.get("output.mode").and_then(SeedsFormat::of_mode) else {
        return (
            shard,
            "other",
            "a --summary-only sweep: it keeps no per-seed file, so it cannot be merged".into(),
            Some(fp),
        );
    };
    let total: Option<u64> = read_plan(&d.join("plan.csv"))
        .ok()
        .map(|p| p.iter().map(|(_, r)| r.end - r.start).sum());
    let total_text = total.map(|t| t.to_string()).unwrap_or_else(|| "?".into());
    if crate::sweepdir::folder::has(d, format.partial())
        || !crate::sweepdir::folder::has(d, format.file())
    {
        let units = crate::sweepdir::checkpoint::read_progress(
            &d.join(crate::sweepdir::checkpoint::PROGRESS),
        )
        .units;
        return (
            shard,
            "partial",
            format!(
                "{units} of {total_text} seed-runs checkpointed; complete it with its sweep \
                 command and --resume (--out {})",
                d.display()
            ),
            Some(fp),
        );
    }
    (shard, "done", format!("{total_text} seed-runs"), Some(fp))
}
