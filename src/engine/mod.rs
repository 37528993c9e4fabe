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
//! run → evaluate → aggregate, and each unit handed to a [`UnitSink`] in output order).

pub mod aggregate;
pub mod evaluate;
pub mod plan;
pub mod run;

use std::ops::Range;

use crate::catalog::{Catalog, Group};
use crate::export::frontiers::SeedFrontiers;
use crate::scenario::Workspace;
use aggregate::GroupAgg;
use evaluate::{unit_frontiers, SeedCheck, SeedValues};
use plan::GroupMeta;

/// Runs one work unit, a group at one seed (its mutant injected into the sharded
/// computation), in `ws`, and evaluates every check × comparison × policy into `out`
/// (layout of [`evaluate::evaluate`]). The traces stay in `ws.traces`.
pub fn unit(catalog: &Catalog, g: &Group, seed: u64, ws: &mut Workspace, out: &mut Vec<SeedCheck>) {
    run::run_group(catalog, g, seed, ws);
    let s = &catalog.scenarios[g.scenario];
    evaluate::evaluate(s.checks(g.param), &g.tolerances, &ws.traces, out);
}

/// Where finished units go, in output order.
pub trait UnitSink {
    /// One unit's results.
    fn unit(&mut self, group: usize, seed: u64, values: &[SeedValues]) -> anyhow::Result<()>;
    /// Every unit so far has been given to [`UnitSink::unit`]: a safe point to checkpoint.
    fn chunk_done(&mut self, units_so_far: u64) -> anyhow::Result<()>;
    /// One unit's tolerance frontiers in the asserted comparison, `[check]` (after
    /// [`UnitSink::unit`] for the same unit). Default: discarded.
    fn frontiers(
        &mut self,
        _group: usize,
        _seed: u64,
        _frontiers: &[Vec<(f64, f64)>],
    ) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Runs every unit of `plan` after the first `skip` (already fed by a resume) on the current
/// rayon pool, in chunks of [`plan::CHUNK`] ([`plan::in_order`]), feeding `aggs` and the sink
/// for each unit in output order.
#[allow(clippy::too_many_arguments)]
pub fn drive(
    catalog: &Catalog,
    groups: &[Group],
    metas: &[GroupMeta],
    plan: &[(usize, Range<u64>)],
    skip: u64,
    aggs: &mut [GroupAgg],
    quiet: bool,
    sink: &mut dyn UnitSink,
) -> anyhow::Result<()> {
    let total: u64 = plan.iter().map(|(_, r)| r.end - r.start).sum();
    let pb = crate::progress::bar(total, quiet, "sweep");
    pb.inc(skip.min(total));
    // Units lazily in output order, skipping the resumed ones.
    let pending = plan
        .iter()
        .flat_map(|(gi, r)| r.clone().map(move |seed| (*gi, seed)))
        .skip(skip as usize);
    let mut so_far = skip;
    let mut values = Vec::new();
    plan::in_order(
        pending,
        || (Workspace::default(), Vec::new()),
        |(ws, pts), &(gi, seed)| -> (Vec<SeedCheck>, SeedFrontiers) {
            let mut out = Vec::new();
            unit(catalog, &groups[gi], seed, ws, &mut out);
            let g = &groups[gi];
            let fr = unit_frontiers(catalog.scenarios[g.scenario].as_ref(), g.param, ws, pts);
            pb.inc(1);
            (out, fr)
        },
        |chunk, results| {
            for (&(gi, seed), (res, fr)) in chunk.iter().zip(&results) {
                values.clear();
                values.extend(res.iter().map(SeedValues::from));
                aggs[gi].feed(&metas[gi], seed, &values);
                sink.unit(gi, seed, &values)?;
                sink.frontiers(gi, seed, fr)?;
            }
            so_far += chunk.len() as u64;
            sink.chunk_done(so_far)
        },
    )?;
    pb.finish_and_clear();
    Ok(())
}
