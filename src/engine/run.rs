//! Running one seed into three traces: the only place that calls [`Scenario::run`].
//!
//! A seed-run is one (scenario, parametrization, profile, mutant) at one seed, computed three
//! ways into `ws.traces`: the float64 ground truth, the unsharded fp32 reference and the
//! sharded fp32 computation (with the mutant, if any, injected into the sharded one). Every
//! command's seed-runs come through [`run_seed`] (directly, or through [`run_group`] for a
//! planned group), so what a seed-run is, is decided here once.
//!
//! Work shared inside one seed (issue 12): a [`Family`] of groups computes at each seed the
//! float64 trace once, the reference once per profile and the sharded trace once per
//! distinct (profile, mutant) ([`run_family`], through [`Scenario::run_parts`], whose
//! default runs all three, so scenarios that do not implement it stay correct). A group
//! whose traces would be large runs step by step instead ([`run_group_streamed`], through
//! [`Scenario::run_stepwise`]). No other module calls [`Scenario::run`].

use crate::engine::catalog::{Catalog, Group};
use crate::engine::evaluate::{SeedCheck, StreamedEval};
use crate::engine::plan::Family;
use crate::exec::scenario::{Parts, Scenario, Traces, Workspace};
use crate::scenario::mutant::Mutant;
use crate::scenario::profile::Profile;

/// Runs `s` at parametrization `param` and `seed` in `profile`, with `mutant` (or none)
/// injected into the sharded computation, leaving the three traces in `ws.traces`.
pub fn run_seed(
    s: &dyn Scenario,
    param: usize,
    seed: u64,
    profile: &Profile,
    mutant: Option<Mutant>,
    ws: &mut Workspace,
) {
    ws.mutant = mutant;
    s.run(param, seed, profile, ws);
}

/// Runs one planned group at `seed` one training step at a time where its scenario
/// [`Scenario::streams`] it (otherwise all at once), folding each step's traces into the
/// evaluation of every check × comparison × policy and, when `frontiers`, the check's
/// tolerance frontiers ([`StreamedEval`]): memory O(model) instead of O(steps × model).
pub fn run_group_streamed(
    catalog: &Catalog,
    g: &Group,
    seed: u64,
    ws: &mut Workspace,
    frontiers: bool,
) -> (Vec<SeedCheck>, Vec<Vec<(f64, f64)>>) {
    run_group_streamed_observed(catalog, g, seed, ws, frontiers, &mut |_| {})
}

/// [`run_group_streamed`], handing `observe` each step's traces right after the evaluation
/// has folded them in (see [`crate::engine::unit_observed`]).
pub fn run_group_streamed_observed(
    catalog: &Catalog,
    g: &Group,
    seed: u64,
    ws: &mut Workspace,
    frontiers: bool,
    observe: &mut dyn FnMut(&Traces),
) -> (Vec<SeedCheck>, Vec<Vec<(f64, f64)>>) {
    let s = catalog.scenarios[g.scenario].as_ref();
    let checks = s.checks(g.param);
    let asserted = s.asserted_comparison();
    let mut ev = StreamedEval::new(checks, g.tolerances.len(), frontiers);
    ws.mutant = g.mutant;
    s.run_stepwise(g.param, seed, &g.profile, ws, &mut |traces| {
        ev.step(checks, &g.tolerances, traces, asserted);
        observe(traces);
    });
    ev.finish()
}

/// Runs one planned group at `seed` (its profile, and its mutant injected into the sharded
/// computation) into `ws.traces`.
pub fn run_group(catalog: &Catalog, g: &Group, seed: u64, ws: &mut Workspace) {
    run_seed(
        catalog.scenarios[g.scenario].as_ref(),
        g.param,
        seed,
        &g.profile,
        g.mutant,
        ws,
    );
}

/// Runs the computations of family `f` at `seed` in order, handing each run's group, what
/// it recomputed besides the sharded trace, and the workspace holding its three traces to
/// `each` (`f.runs[i]` is the i-th call).
pub fn run_family(
    catalog: &Catalog,
    groups: &[Group],
    f: &Family,
    seed: u64,
    ws: &mut Workspace,
    mut each: impl FnMut(&Group, Parts, &mut Workspace),
) {
    for &(gi, parts) in &f.runs {
        let g = &groups[gi];
        ws.mutant = g.mutant;
        catalog.scenarios[g.scenario].run_parts(g.param, seed, &g.profile, parts, ws);
        each(g, parts, ws);
    }
}
