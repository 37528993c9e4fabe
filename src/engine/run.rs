//! Running one seed into three traces: the only place that calls [`Scenario::run`].
//!
//! A seed-run is one (scenario, parametrization, profile, mutant) at one seed, computed three
//! ways into `ws.traces`: the float64 ground truth, the unsharded fp32 reference and the
//! sharded fp32 computation (with the mutant, if any, injected into the sharded one). Every
//! command's seed-runs come through [`run_seed`] (directly, or through [`run_group`] for a
//! planned group), so what a seed-run is, is decided here once.
//!
//! Sharing the float64 trace later (issue 12) is a change here: the float64 computation
//! depends on (scenario, parametrization, seed) only, not on the profile or the mutant. A
//! `run_seed_groups(catalog, groups, seed, ws, each)` beside [`run_group`] would run the
//! float64 computation once into a `Trace` kept in the workspace, then, for every group of
//! that (scenario, param), only the reference and sharded computations (through a new
//! default method on [`Scenario`] whose default runs all three, so scenarios that do not
//! implement it keep working), copying the kept trace into `ws.traces.f64` before handing
//! the traces to `each`. The one change outside this module: the work item that
//! [`crate::engine::drive`] hands to [`crate::engine::plan::in_order`] becomes (seed, the
//! groups that share a scenario and param) instead of (group, seed), with the results still
//! handed on in output order. No other module calls [`Scenario::run`], so nothing else
//! changes.

use crate::catalog::{Catalog, Group};
use crate::mutant::Mutant;
use crate::profile::Profile;
use crate::scenario::{Scenario, Workspace};

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
