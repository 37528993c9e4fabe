//! `seedsweep explain`: which numerics profile explains an observed value?
//!
//! Runs one (scenario, parametrization, seed) in every candidate profile, reads the value of
//! one element of one check at one step from the chosen computation (the sharded one by
//! default: what the real run computes), and ranks the profiles by `|value - observed|`
//! (ties keep the candidates' order).
//!
//! Default candidates: the scenario's default profiles, then every other known profile in name
//! order; for a scenario with execution modes ([`crate::exec::scenario::Scenario::execution_modifiers`],
//! JAX eager and jit) each of them once per mode (`f32+xla-eager`, `f32+xla-jit`, ...).

use crate::check::python_repr::py_repr;
use crate::commands::{emit, load_catalog, Common};
use crate::engine::catalog::{Catalog, Group, Selection};
use crate::exec::scenario::Workspace;
use crate::report::table::render;
use crate::scenario::profile::Profile;
use crate::sys::error::{unknown_name, InputError};

/// Runs `explain`: prints the ranked candidates as a table, or as CSV with `csv`.
pub fn run(common: &Common, query: &ExplainQuery, csv: bool) -> anyhow::Result<i32> {
    let catalog = load_catalog(common)?;
    let (cands, seed) = explain(&catalog, query, common.max_memory)?;
    if csv {
        emit(&to_csv(&cands));
    } else {
        emit(&to_table(query, seed, &cands));
    }
    Ok(0)
}

/// Which computation the value is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Computation {
    /// The sharded computation (what the test runs).
    Sharded,
    /// The unsharded fp32 reference.
    Reference,
}

impl Computation {
    /// Parses `sharded` or `reference`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "sharded" => Some(Self::Sharded),
            "reference" => Some(Self::Reference),
            _ => None,
        }
    }
}

/// What to explain.
#[derive(Debug, Clone)]
pub struct ExplainQuery {
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id (required when the scenario has several).
    pub param: Option<String>,
    /// Check name.
    pub check: String,
    /// Step label as printed (`2`, `1.0`).
    pub step: String,
    /// Flat element index (0 for scalars).
    pub index: usize,
    /// The observed value.
    pub observed: f64,
    /// Seed (default: the scenario's first seed).
    pub seed: Option<u64>,
    /// Candidate profile specs (default: every known profile).
    pub profiles: Option<Vec<String>>,
    /// Computation to read.
    pub computation: Computation,
}

/// One ranked candidate. Candidates at the same distance share a rank (1, 1, 3, ...).
#[derive(Debug, Clone)]
pub struct Candidate {
    /// 1-based rank.
    pub rank: usize,
    /// Profile spec.
    pub profile: String,
    /// The value it gives.
    pub value: f64,
    /// `|value - observed|`.
    pub abs_diff: f64,
    /// `abs_diff / |observed|`.
    pub rel_diff: f64,
}

/// Runs the query; returns the candidates, best first, and the seed used (`None` for a
/// scenario whose data do not depend on the seed).
pub fn explain(
    catalog: &Catalog,
    q: &ExplainQuery,
    max_memory: Option<u64>,
) -> Result<(Vec<Candidate>, Option<u64>), InputError> {
    let si = catalog.scenario_index(&q.scenario, "--scenario")?;
    let s = &catalog.scenarios[si];
    let ids = s.param_ids();
    let param = match &q.param {
        Some(p) => ids
            .iter()
            .position(|id| id == p)
            .ok_or_else(|| InputError::flag("--param", unknown_name("parametrization", p, &ids)))?,
        None if ids.len() == 1 => 0,
        None => {
            return Err(InputError::flag(
                "--param",
                format!(
                    "scenario {} has several parametrizations; choose one of: {}",
                    q.scenario,
                    ids.join(", ")
                ),
            ))
        }
    };
    let checks = s.checks(param);
    let check = checks
        .iter()
        .position(|c| c.name == q.check)
        .ok_or_else(|| {
            let names: Vec<&str> = checks.iter().map(|c| c.name).collect();
            InputError::flag("--check", unknown_name("check", &q.check, &names))
        })?;
    let profiles: Vec<Profile> = match &q.profiles {
        Some(specs) => specs
            .iter()
            .map(|p| catalog.profiles.resolve(p, "--profile"))
            .collect::<Result<_, _>>()?,
        None => {
            let mut bases: Vec<String> = s.common().profiles.clone();
            for p in catalog.profiles.profile_names() {
                if !bases.iter().any(|b| b == p) {
                    bases.push(p.to_string());
                }
            }
            let modes = s.execution_modifiers();
            let specs: Vec<String> = if modes.is_empty() {
                bases
            } else {
                bases
                    .iter()
                    .flat_map(|b| modes.iter().map(move |m| format!("{b}+{m}")))
                    .collect()
            };
            specs
                .iter()
                .map(|p| catalog.profiles.resolve(p, "--profile"))
                .collect::<Result<_, _>>()?
        }
    };
    // Resolve through the planner so the group carries the scenario's policies (unused here,
    // but it validates the selection the same way `sweep` does).
    let groups: Vec<Group> = catalog.select(&Selection {
        scenarios: Some(vec![q.scenario.clone()]),
        params: Some(vec![ids[param].to_string()]),
        profiles: Some(profiles.iter().map(|p| p.name.clone()).collect()),
        policies: None,
        mutants: None,
    })?;
    // One seed-run at a time, on this thread: refused before it starts when it cannot fit.
    crate::sys::limits::check_memory(
        &[crate::engine::plan::seed_runs_memory(
            catalog,
            &groups,
            Some(1),
            1,
        )],
        max_memory,
    )?;
    let seed = q.seed.unwrap_or(s.common().first_seed);
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    for profile in &profiles {
        crate::engine::run::run_seed(s.as_ref(), param, seed, profile, None, &mut ws);
        let trace = match q.computation {
            Computation::Sharded => &ws.traces.sharded,
            Computation::Reference => &ws.traces.reference,
        };
        let steps: Vec<String> = trace
            .slots
            .iter()
            .filter(|sl| sl.check == check && sl.role == crate::exec::trace::SlotRole::Value)
            .map(|sl| sl.step.to_string())
            .collect();
        let slot = trace
            .slots
            .iter()
            .find(|sl| {
                sl.check == check
                    && sl.role == crate::exec::trace::SlotRole::Value
                    && sl.step.to_string() == q.step
            })
            .ok_or_else(|| {
                let valid: Vec<&str> = steps.iter().map(String::as_str).collect();
                InputError::flag("--step", unknown_name("step", &q.step, &valid))
            })?;
        if q.index >= slot.len {
            return Err(InputError::flag(
                "--index",
                format!(
                    "{} is out of range; check {} has {} elements (0..{})",
                    q.index, q.check, slot.len, slot.len
                ),
            ));
        }
        let value = trace.data(slot)[q.index];
        let abs_diff = (value - q.observed).abs();
        out.push(Candidate {
            rank: 0,
            profile: profile.name.clone(),
            value,
            abs_diff,
            rel_diff: abs_diff / q.observed.abs(),
        });
    }
    out.sort_by(|a, b| a.abs_diff.total_cmp(&b.abs_diff));
    // Competition ranking: profiles that give the same distance share a rank.
    for i in 0..out.len() {
        out[i].rank = if i > 0 && out[i].abs_diff == out[i - 1].abs_diff {
            out[i - 1].rank
        } else {
            i + 1
        };
    }
    Ok((out, s.seed_dependent().then_some(seed)))
}

/// CSV with the columns `rank,profile,value,abs_diff,rel_diff` (floats in Python repr).
pub fn to_csv(cands: &[Candidate]) -> String {
    let mut s = String::from("rank,profile,value,abs_diff,rel_diff\n");
    for c in cands {
        s.push_str(&format!(
            "{},{},{},{},{}\n",
            c.rank,
            c.profile,
            py_repr(c.value),
            py_repr(c.abs_diff),
            py_repr(c.rel_diff)
        ));
    }
    s
}

/// A readable table.
pub fn to_table(q: &ExplainQuery, seed: Option<u64>, cands: &[Candidate]) -> String {
    let header: Vec<String> = ["rank", "profile", "value", "|value - observed|", "relative"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let rows: Vec<Vec<String>> = cands
        .iter()
        .map(|c| {
            vec![
                c.rank.to_string(),
                c.profile.clone(),
                py_repr(c.value),
                format!("{:.3e}", c.abs_diff),
                format!("{:.3e}", c.rel_diff),
            ]
        })
        .collect();
    let seed = match seed {
        Some(s) => format!("seed {s}"),
        None => "fixed data".to_string(),
    };
    format!(
        "{} {} step {} [{}], {}: observed {}\n{}",
        q.scenario,
        q.check,
        q.step,
        q.index,
        seed,
        py_repr(q.observed),
        render(&header, &rows, 2)
    )
}
