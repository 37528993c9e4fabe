//! The seed-run engine. Every command's seed-runs go through these modules, in pipeline order:
//!
//! ```text
//! plan       groups × seed range × shard → work units (group, seed) in output order;
//!            the chunked parallel loop that hands results back in that order
//! run        one unit → three traces (float64, fp32 reference, fp32 sharded):
//!            the only call of Scenario::run
//! evaluate   traces → one row per check × comparison × policy, and tolerance frontiers
//! aggregate  rows in seed order → running aggregates → summaries and tail estimates;
//!            frontiers per group in seed order
//! ```
//!
//! [`unit`] is one work unit run and evaluated; [`drive`] is the whole sweep loop (plan →
//! run → evaluate → aggregate, and each unit encoded by the sink's [`UnitEncoder`] on the
//! workers and handed to the [`UnitSink`] in output order), which shares the work of a seed
//! across the groups of a [`Family`]. The engine defines what it hands on ([`Unit`]) and the
//! two traits; the output formats implement them (in `results`, and the sweep folder's
//! sink in `sweepdir`), so nothing here depends on a file format.

pub mod aggregate;
pub mod budget;
pub mod catalog;
pub mod evaluate;
pub mod exactness;
pub mod held;
pub mod plan;
pub mod run;

use std::ops::Range;

use crate::engine::catalog::{Catalog, Group};
use crate::exec::scenario::Workspace;
use crate::stats::frontier::AnchorScan;
use aggregate::GroupAgg;
use evaluate::{unit_frontiers_scanned, SeedCheck, SeedFrontiers, SeedValues};
pub use held::UnitBytes;
use plan::{Family, GroupMeta};

/// Runs one work unit, a group at one seed (its mutant injected into the sharded
/// computation), in `ws`, and evaluates every check × comparison × policy into `out`
/// (layout of [`evaluate::evaluate`]). The traces stay in `ws.traces`, except for a
/// parametrization that [`crate::exec::scenario::Scenario::streams`]: that one runs and is
/// evaluated step by step ([`run::run_group_streamed`]), and `ws.traces` is left empty.
pub fn unit(catalog: &Catalog, g: &Group, seed: u64, ws: &mut Workspace, out: &mut Vec<SeedCheck>) {
    unit_observed(catalog, g, seed, ws, out, &mut |_| {});
}

/// [`unit`], handing `observe` the very traces the evaluation reads, right after it has
/// read them: once with every step, or, for a parametrization that streams, once per
/// training step with that step's slots (in step order; a lent slot's buffer is valid only
/// during the call). What `observe` sees is what `out` was computed from, and nothing else:
/// `repro --dump` writes its files from here ([`crate::results::dump::DumpWriter`]).
pub fn unit_observed(
    catalog: &Catalog,
    g: &Group,
    seed: u64,
    ws: &mut Workspace,
    out: &mut Vec<SeedCheck>,
    observe: &mut dyn FnMut(&crate::exec::scenario::Traces),
) {
    let s = &catalog.scenarios[g.scenario];
    if s.streams(g.param) {
        *out = run::run_group_streamed_observed(catalog, g, seed, ws, false, observe).0;
        return;
    }
    run::run_group(catalog, g, seed, ws);
    evaluate::evaluate(s.checks(g.param), &g.tolerances, &ws.traces, out);
    observe(&ws.traces);
}

/// One finished work unit, as [`drive`] hands it to a sink's [`UnitEncoder`]: a group at one
/// seed, its values in result order (layout of [`evaluate::evaluate`]) and, for a clean
/// group whose sink wants them, its frontiers in the asserted comparison (`[check]`). A
/// mutant group's frontiers are never computed: whether a bug is caught, on which seeds and
/// by how much is in its values.
#[derive(Debug, Clone, Copy)]
pub struct Unit<'a> {
    /// Index of the group in the plan.
    pub group: usize,
    /// The group.
    pub meta: &'a GroupMeta,
    /// The seed.
    pub seed: u64,
    /// One value per check × comparison × policy.
    pub values: &'a [SeedValues],
    /// `[check]` frontiers; `None` for a mutant group, or when the sink wants none.
    pub frontiers: Option<&'a SeedFrontiers>,
}

/// Turns finished units into the bytes a [`UnitSink`] writes. It runs on the worker threads
/// (every unit is encoded where it was computed, in parallel), so the sink only writes.
pub trait UnitEncoder: Sync {
    /// A worker's own state, kept across the units it encodes (one per worker thread).
    type Scratch: Default + Send;
    /// Appends `unit`'s bytes to `out` (both parts empty on entry).
    fn encode(&self, unit: &Unit<'_>, scratch: &mut Self::Scratch, out: &mut UnitBytes);
}

/// Where finished units go, in output order: every unit's bytes as its [`UnitEncoder`]
/// made them.
pub trait UnitSink {
    /// The encoder the workers use.
    type Encoder: UnitEncoder;
    /// The encoder for this sink's units.
    fn encoder(&self) -> Self::Encoder;
    /// Whether the clean groups' frontiers are computed and handed to the encoder.
    fn wants_frontiers(&self) -> bool;
    /// One unit of group `group`, encoded.
    fn unit(&mut self, group: usize, bytes: &UnitBytes) -> anyhow::Result<()>;
    /// Every unit so far has been given to [`UnitSink::unit`]: a safe point to checkpoint.
    fn chunk_done(&mut self, units_so_far: u64) -> anyhow::Result<()>;
    /// Where results held back past [`held::HELD_IN_MEMORY`] may go, in unnamed temporary
    /// files ([`held`]); None keeps them all in memory.
    fn spill_dir(&self) -> Option<&std::path::Path> {
        None
    }
}

/// Bytes one unit's results take while held back for a family (see [`plan::families`]), at
/// most: with a per-seed table (`rows`), a clean unit's formatted rows (a CSV row is under
/// 400 bytes; `--summary-only` formats none) and a mutant unit's values (at most 64 bytes
/// per entry); a clean unit's frontier record (a few points per check); and the vectors'
/// own headers.
pub fn held_unit_bytes(meta: &GroupMeta, rows: bool) -> u64 {
    let entries = meta.entries() as u64;
    if !meta.mutant.is_empty() {
        return if rows { 16 + entries * 64 } else { 0 } + 64;
    }
    let rows = if rows { entries * 400 } else { 0 };
    let frontiers = 16 + meta.checks.len() as u64 * (4 + 8 * 16);
    rows + frontiers + 64
}

/// The most bytes [`drive`] holds back at once for `families`: the results of every
/// group of one family over its seeds (nothing for a family of one group, whose units go
/// straight to the sink); `rows` as for [`held_unit_bytes`].
pub fn held_bytes(families: &[Family], metas: &[GroupMeta], rows: bool) -> u64 {
    families
        .iter()
        .filter(|f| f.groups.len() > 1)
        .map(|f| {
            let n = f.seeds.end - f.seeds.start;
            f.groups
                .clone()
                .map(|gi| n.saturating_mul(held_unit_bytes(&metas[gi], rows)))
                .fold(0u64, u64::saturating_add)
        })
        .max()
        .unwrap_or(0)
}

/// One seed's results: per run of the family its values, and per group (of those still to
/// hand on) its encoded unit.
type SeedResult = (Vec<Vec<SeedValues>>, Vec<UnitBytes>);

/// Runs every unit of `plan` after the first `skip` (already fed by a resume) on the current
/// rayon pool, family by family (`families`, from [`plan::families`] of `plan`): the seeds
/// of a family in chunks ([`plan::in_chunks_of`], about [`plan::CHUNK`] computations a
/// chunk), each seed computing the family's runs once ([`run::run_family`]; a group that
/// streams is alone in its family and runs step by step, [`run::run_group_streamed`]). Every
/// group's aggregate is fed in seed order as its results come; the workers encode every
/// unit ([`UnitSink::encoder`]; the clean groups' frontiers are computed only when the sink
/// wants them, a mutant group's never), and the sink gets them in output order
/// (group-major): the family's first group as its chunks finish, the others held back and
/// handed on when the family's seeds are done ([`held::Held`]: up to `held_budget` bytes in
/// memory, the rest in temporary files in [`UnitSink::spill_dir`]). A checkpoint
/// ([`UnitSink::chunk_done`]) follows every chunk and every held-back group.
#[allow(clippy::too_many_arguments)]
pub fn drive<S: UnitSink>(
    catalog: &Catalog,
    groups: &[Group],
    metas: &[GroupMeta],
    plan: &[(usize, Range<u64>)],
    families: &[Family],
    skip: u64,
    aggs: &mut [GroupAgg],
    quiet: bool,
    held_budget: usize,
    sink: &mut S,
) -> anyhow::Result<()> {
    let total: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let pb = crate::sys::progress::bar(total, quiet, "sweep");
    pb.inc(skip.min(total));
    // Units of the families before the current one, and units handed to the sink.
    let mut before = 0u64;
    let mut emitted = skip;
    let encoder = sink.encoder();
    let encoder = &encoder;
    let want_frontiers = sink.wants_frontiers();
    let spill_dir = sink.spill_dir().map(std::path::Path::to_path_buf);
    for f in families {
        let n = f.seeds.end - f.seeds.start;
        let len = n * f.groups.len() as u64;
        if before + len <= skip {
            before += len;
            continue;
        }
        // Output index of group j of the family at `seed`.
        let index = |j: usize, seed: u64| before + j as u64 * n + (seed - f.seeds.start);
        let mut held = held::Held::new(f.groups.len(), held_budget, spill_dir.as_deref());
        plan::in_chunks_of(
            plan::CHUNK / f.runs.len(),
            f.seeds.clone(),
            || {
                let scans: Vec<AnchorScan> = Vec::new();
                (
                    Workspace::default(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    scans,
                    <S::Encoder as UnitEncoder>::Scratch::default(),
                )
            },
            |(ws, pts, out, prev, scans, scratch), &seed| -> anyhow::Result<SeedResult> {
                let mut values = Vec::with_capacity(f.runs.len());
                let mut frontiers: Vec<Option<SeedFrontiers>> = Vec::with_capacity(f.runs.len());
                let first = &groups[f.groups.start];
                if catalog.scenarios[first.scenario].streams(first.param) {
                    // Alone in its family ([`plan::families`]): step by step.
                    let wanted = want_frontiers && first.mutant.is_none();
                    let (out, fr) = run::run_group_streamed(catalog, first, seed, ws, wanted);
                    values.push(out.iter().map(SeedValues::from).collect::<Vec<_>>());
                    frontiers.push(wanted.then_some(fr));
                } else {
                    run::run_family(catalog, groups, f, seed, ws, |g, parts, ws| {
                        let s = catalog.scenarios[g.scenario].as_ref();
                        // Same reference and float64 traces as the run before (a family's
                        // groups have equal checks and tolerances): its ref-vs-f64 entries.
                        let reuse = (!parts.reference).then_some(&prev[..]);
                        let checks = s.checks(g.param);
                        // A clean run's frontiers, when wanted, with their anchor scans in
                        // the asserted comparison's statistics pass; a mutant's never.
                        let wanted = want_frontiers && g.mutant.is_none();
                        if g.mutant.is_some() {
                            evaluate::evaluate_mutant(
                                checks,
                                &g.tolerances,
                                &ws.traces,
                                reuse,
                                out,
                            );
                        } else {
                            let scan_in = wanted.then(|| (s.asserted_comparison(), &mut *scans));
                            evaluate::evaluate_scanning(
                                checks,
                                &g.tolerances,
                                &ws.traces,
                                reuse,
                                out,
                                scan_in,
                            );
                        }
                        values.push(out.iter().map(SeedValues::from).collect::<Vec<_>>());
                        frontiers.push(
                            wanted.then(|| unit_frontiers_scanned(s, g.param, ws, pts, scans)),
                        );
                        std::mem::swap(out, prev);
                    });
                }
                let mut bytes = Vec::new();
                let mut fresh = 0;
                for (j, gi) in f.groups.clone().enumerate() {
                    if index(j, seed) < skip {
                        continue;
                    }
                    fresh += 1;
                    let mut b = UnitBytes::default();
                    let unit = Unit {
                        group: gi,
                        meta: &metas[gi],
                        seed,
                        values: &values[f.source[j]],
                        frontiers: frontiers[f.source[j]].as_ref(),
                    };
                    encoder.encode(&unit, scratch, &mut b);
                    bytes.push(b);
                }
                pb.inc(fresh);
                Ok((values, bytes))
            },
            |seeds, results| {
                let start = emitted;
                for (&seed, res) in seeds.iter().zip(results) {
                    let (values, bytes) = res?;
                    let mut bytes = bytes.into_iter();
                    for (j, gi) in f.groups.clone().enumerate() {
                        if index(j, seed) < skip {
                            continue;
                        }
                        aggs[gi].feed(&metas[gi], seed, &values[f.source[j]]);
                        let b = bytes.next().expect("bytes for every unit still to hand on");
                        if j == 0 {
                            sink.unit(gi, &b)?;
                            emitted += 1;
                        } else {
                            held.push(j, b)?;
                        }
                    }
                }
                if emitted > start {
                    sink.chunk_done(emitted)?;
                }
                Ok(())
            },
        )?;
        for j in 1..f.groups.len() {
            held.hand_on(
                j,
                f.groups.start + j,
                sink,
                &mut emitted,
                plan::CHUNK as u64,
            )?;
        }
        before += len;
    }
    pb.finish_and_clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::catalog::Selection;

    fn t1_groups(catalog: &Catalog, profiles: &str) -> Vec<Group> {
        catalog
            .select(&Selection {
                scenarios: Some(vec!["deepspeed-tied-row-parallel".into()]),
                profiles: Some(profiles.split(',').map(String::from).collect()),
                mutants: Some(vec!["all".into()]),
                ..Default::default()
            })
            .unwrap()
    }

    #[test]
    fn families_share_a_param_and_its_structural_twin_but_nothing_else() {
        let catalog = Catalog::load(&[] as &[&str], None).unwrap();
        let groups = t1_groups(&catalog, "cpu-fma,f32");
        let range = plan::SeedRange {
            first: None,
            count: 3,
            shard: None,
        };
        let plan = plan::units(&catalog, &groups, &range);
        let fams = plan::families(&catalog, &groups, &plan, u64::MAX, |_| 0);
        let s = &catalog.scenarios[groups[0].scenario];
        let ids: Vec<Vec<&str>> = fams
            .iter()
            .map(|f| {
                let mut v: Vec<&str> = f
                    .groups
                    .clone()
                    .map(|gi| s.param_ids()[groups[gi].param])
                    .collect();
                v.dedup();
                v
            })
            .collect();
        // 35-3-True-0 differs from 35-3-False-0 only in its id and the embedding's
        // column-sharded lookup, which the executor runs as the plain lookup.
        assert_eq!(
            ids,
            [
                vec!["32-None-False-0"],
                vec!["35-3-False-0", "35-3-True-0"],
                vec!["32-3-False-2"]
            ]
        );
        let twin = &fams[1];
        let half = twin.groups.len() / 2;
        // The twin reports the runs of 35-3-False-0, group for group.
        assert_eq!(twin.source[half..], twin.source[..half]);
        assert_eq!(twin.runs.len(), half);
        // The float64 trace once; the reference again only where the profile changes.
        let per_profile = half / 2;
        for (i, &(gi, parts)) in twin.runs.iter().enumerate() {
            assert_eq!(parts.f64, i == 0, "run {i}");
            assert_eq!(parts.reference, i % per_profile == 0, "run {i}");
            assert_eq!(groups[gi].mutant.is_none(), i % per_profile == 0, "run {i}");
        }
        // With no room to hold results back, every group is its own family.
        let alone = plan::families(&catalog, &groups, &plan, 0, |_| 1);
        assert_eq!(alone.len(), groups.len());
    }

    #[test]
    fn a_family_computes_what_each_of_its_groups_computes_alone() {
        // Independent path: every group run and evaluated on its own (all three traces
        // computed by `Scenario::run`) in a fresh workspace, against the shared runs.
        let catalog = Catalog::load(&[] as &[&str], None).unwrap();
        let groups = t1_groups(&catalog, "cpu-fma,cpu-fma+allreduce-bf16");
        let range = plan::SeedRange {
            first: None,
            count: 1,
            shard: None,
        };
        let plan = plan::units(&catalog, &groups, &range);
        let fams = plan::families(&catalog, &groups, &plan, u64::MAX, |_| 0);
        for seed in [8173, 8199] {
            let mut ws = Workspace::default();
            for f in &fams {
                let mut shared = Vec::new();
                run::run_family(&catalog, &groups, f, seed, &mut ws, |g, _, ws| {
                    let mut out = Vec::new();
                    let s = &catalog.scenarios[g.scenario];
                    evaluate::evaluate(s.checks(g.param), &g.tolerances, &ws.traces, &mut out);
                    shared.push(format!("{out:?}"));
                });
                for (j, gi) in f.groups.clone().enumerate() {
                    let mut alone = Workspace::default();
                    let mut out = Vec::new();
                    unit(&catalog, &groups[gi], seed, &mut alone, &mut out);
                    // Debug text compares every field, NaN theory columns included.
                    assert_eq!(
                        shared[f.source[j]],
                        format!("{out:?}"),
                        "group {gi} seed {seed}"
                    );
                }
            }
        }
    }
}
