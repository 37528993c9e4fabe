//! `seedsweep repro`: re-run one seed and show every failure the way torch printed it.
//!
//! Each selected group (clean, and each `--mutants` one with its bug injected into the
//! sharded computation) is run and evaluated by [`crate::engine::unit`], like one unit of a
//! sweep; this module only renders the result.

use std::fmt::Write as _;

use std::path::PathBuf;

use crate::check::comparison::Comparison;
use crate::check::torch_message::torch_mismatch_message;
use crate::check::usage::compare;
use crate::commands::{emit_text, load_catalog, status, CiOutputs, Common, EXIT_EXCEEDED};
use crate::engine::catalog::{Catalog, Group};
use crate::engine::evaluate::{for_each_pair, SeedCheck};
use crate::engine::plan::seed_runs_memory;
use crate::exec::scenario::Workspace;
use crate::report::table::{pct, render, sci};
use crate::sys::atomic_write::prepare_dir;

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
    /// No status lines on stderr.
    pub quiet: bool,
    /// `--json`, `--junit-xml`, `--markdown` and the gates beyond `--fail-on-exceed`.
    pub ci: CiOutputs,
}

/// Re-runs one seed; returns the process exit code.
pub fn run(o: &ReproOptions) -> anyhow::Result<i32> {
    let catalog = load_catalog(&o.common)?;
    let groups = catalog.select(&o.common.selection)?;
    crate::sys::limits::check_memory(
        &[seed_runs_memory(&catalog, &groups, Some(1), 1)],
        o.common.max_memory,
    )?;
    if let Some(dir) = &o.dump {
        prepare_dir(dir, "--dump")?;
    }
    let ctx = crate::report::verdict::ReproContext::new(&o.common.configs, o.common.rng);
    let outcome = repro(
        &ctx,
        &catalog,
        &groups,
        |g| {
            o.seed
                .unwrap_or(catalog.scenarios[g.scenario].common().first_seed)
        },
        o.comparison,
        o.dump.as_deref(),
    )?;
    let data = o.ci.stdout_is_data();
    emit_text(&outcome.text, data);
    for d in &outcome.dumped {
        status(o.quiet, &format!("dumped {d}"));
    }
    note_unrevealed();
    let mut verdict = crate::report::verdict::of_repro(outcome.cases, outcome.mutants);
    verdict.apply_gates(o.ci.gates(o.fail_on_exceed));
    let files = o.ci.write(&verdict)?;
    if !files.is_empty() {
        status(o.quiet, &format!("wrote {}", files.join(", ")));
    }
    if let Some(line) = verdict.failure_line() {
        eprintln!("{line}");
    }
    Ok(if verdict.failed() { EXIT_EXCEEDED } else { 0 })
}

/// On stderr: the matmul shapes a profile's revealed orders did not cover in this run (the
/// profile's own kernel computed them, so they are not claimed bit-exact with the framework
/// the orders came from), as `F.linear` dimensions `m x k x n` for `scripts/reveal_order.py`.
fn note_unrevealed() {
    use crate::kernels::revealed::Role;
    let shapes = crate::ops::backend::unrevealed_shapes();
    if shapes.is_empty() {
        return;
    }
    let mut linear: Vec<(usize, usize, usize)> = shapes
        .iter()
        .map(|&(role, rows, red, cols)| match role {
            Role::Forward => (rows, red, cols),
            Role::ForwardBias => (rows, red - 1, cols),
            Role::GradInput => (rows, cols, red),
            Role::GradWeight => (red, cols, rows),
        })
        .collect();
    linear.sort_unstable();
    linear.dedup();
    let listed: Vec<String> = shapes
        .iter()
        .map(|(role, rows, red, cols)| format!("{} {rows}x{cols} over {red}", role.name()))
        .collect();
    let dims: Vec<String> = linear
        .iter()
        .map(|(m, k, n)| format!("{m}x{k}x{n}"))
        .collect();
    eprintln!(
        "note: the profile's revealed orders do not cover {} matmul shape(s), which its own \
         kernel computed: {}; to reveal them: scripts/reveal_order.py --shapes {}",
        shapes.len(),
        listed.join(", "),
        dims.join(",")
    );
}

/// torch's mismatch message for check `check` under policy `policy` of group `g` at `seed`
/// and `step`, in `comparison` (None when the check is within its tolerance there): the
/// message the test raises on that seed, for the CI verdict of a sweep. Reruns the seed.
#[allow(clippy::too_many_arguments)]
pub fn message_at(
    catalog: &Catalog,
    g: &Group,
    seed: u64,
    check: usize,
    policy: usize,
    comparison: Comparison,
    step: crate::check::StepLabel,
    ws: &mut Workspace,
) -> Option<String> {
    let mut results = Vec::new();
    crate::engine::unit(catalog, g, seed, ws, &mut results);
    let s = &catalog.scenarios[g.scenario];
    let c = &s.checks(g.param)[check];
    let tol = g.tolerances[policy][check];
    let mut msg = None;
    for_each_pair(&ws.traces, check, c, comparison, |at, a, e| {
        if msg.is_none() && at == step && compare(a, e, tol).usage > 1.0 {
            msg = torch_mismatch_message(a, e, &c.shape, tol, comparison.both_f32());
        }
    });
    msg
}

/// What `repro` found.
pub struct ReproOutcome {
    /// The report text.
    pub text: String,
    /// Whether any check of the messaged comparison exceeded its tolerance in a clean
    /// (non-mutant) group.
    pub exceeded: bool,
    /// The dump files written (`--dump`).
    pub dumped: Vec<String>,
    /// Per clean group, check, comparison and policy: the seed's case for the verdict
    /// (comparison `asserted` = the messaged one), without gates.
    pub cases: Vec<crate::report::verdict::Case>,
    /// Per mutant group and policy: whether the seed catches it.
    pub mutants: Vec<crate::report::verdict::MutantCase>,
}

/// Runs `seed` for every group and reports usages and torch-style messages for every
/// (check, step) of `message_comparison` (default: the comparison each scenario's test
/// asserts) that exceeds under a selected policy.
///
/// A mutant group's table is headed `mutant NAME`, and its messages show the failure the
/// bug causes.
///
/// With `dump`, the traces each group's evaluation read are also written to
/// `DIR/<scenario>__<param>__<profile>__seed<seed>.csv` and the folder of that name (one
/// `.npy` file per tensor), with `__<mutant>` before `__seed` for a mutant group (see
/// [`crate::results::dump`]).
pub fn repro(
    ctx: &crate::report::verdict::ReproContext,
    catalog: &Catalog,
    groups: &[Group],
    seed_for: impl Fn(&Group) -> u64,
    message_comparison: Option<Comparison>,
    dump: Option<&std::path::Path>,
) -> anyhow::Result<ReproOutcome> {
    let mut ws = Workspace::default();
    let mut text = String::new();
    let mut exceeded = false;
    let mut results: Vec<SeedCheck> = Vec::new();
    let mut dumped = Vec::new();
    let mut cases = Vec::new();
    let mut mutants = Vec::new();
    for g in groups {
        let s = &catalog.scenarios[g.scenario];
        let seed = seed_for(g);
        let param = s.param_ids()[g.param];
        let checks = s.checks(g.param);
        let message_comparison = message_comparison.unwrap_or(s.asserted_comparison());
        // Empty for the clean run; "  mutant NAME" in the header, "__NAME" in dump names.
        let mutant = g.mutant.map(|m| m.name());
        // The dump is written from the traces the evaluation reads, as it reads them (every
        // step at once, or step by step for a parametrization that streams).
        let mut writer = match dump {
            Some(dir) => Some(crate::results::dump::DumpWriter::create(
                dir,
                &format!(
                    "{}__{}__{}{}__seed{}",
                    s.common().name,
                    param,
                    g.profile.name,
                    mutant.map(|m| format!("__{m}")).unwrap_or_default(),
                    seed
                ),
            )?),
            None => None,
        };
        let mut dump_error = None;
        // Routing flips of moe layers per comparison (sharded-vs-ref, ref-vs-f64,
        // sharded-vs-f64), summed over the observed steps (each holds its own steps' routing).
        let mut flips = [0u64; 3];
        let mut routed = false;
        // The group's mutant, if any, is injected into the sharded computation.
        crate::engine::unit_observed(catalog, g, seed, &mut ws, &mut results, &mut |t| {
            if let (Some(w), None) = (writer.as_mut(), &dump_error) {
                dump_error = w.add(checks, t).err();
            }
            routed |= !t.reference.routing.is_empty();
            flips[0] += t.sharded.routing_flips(&t.reference);
            flips[1] += t.reference.routing_flips(&t.f64);
            flips[2] += t.sharded.routing_flips(&t.f64);
        });
        if let Some(e) = dump_error {
            return Err(e);
        }
        if let Some(w) = writer {
            dumped.extend(w.finish()?);
        }
        let seed_note = if s.seed_dependent() {
            format!("seed {seed}")
        } else {
            "fixed data (seed-independent)".to_string()
        };
        let _ = writeln!(
            text,
            "== {} [{}]  profile {}{}  {}",
            s.common().name,
            param,
            g.profile.name,
            mutant.map(|m| format!("  mutant {m}")).unwrap_or_default(),
            seed_note
        );
        if routed {
            let _ = writeln!(
                text,
                "routing flips (tokens whose chosen experts differ, summed over moe layers and micro-steps): sharded-vs-ref {}, ref-vs-f64 {}, sharded-vs-f64 {}",
                flips[0], flips[1], flips[2]
            );
        }
        let mut header = vec!["check".to_string(), "comparison".to_string()];
        for p in &g.policy_names {
            header.push(format!("{p}: usage"));
            header.push("step".into());
            header.push("mismatched".into());
        }
        header.push("max|diff|".into());
        header.push("max|expected|".into());
        let np = g.policy_names.len();
        let mut rows = Vec::new();
        let mut k = 0;
        for c in checks {
            for cmp in Comparison::ALL {
                let mut row = vec![c.name.to_string(), cmp.name().to_string()];
                let first = &results[k];
                for p in 0..np {
                    let r = &results[k + p];
                    let flag = if r.usage > 1.0 { " FAIL" } else { "" };
                    row.push(format!("{}{flag}", pct(r.usage)));
                    row.push(r.worst_step.to_string());
                    row.push(format!("{} / {}", r.mismatched, r.elements));
                }
                row.push(sci(first.max_abs_diff));
                row.push(format!("{:.4}", first.max_abs_expected));
                rows.push(row);
                k += np;
            }
        }
        text.push_str(&render(&header, &rows, 2));
        // The seed's cases for the verdict: a clean group's every check, comparison and
        // policy, with the first message of the messaged comparison; a mutant group's
        // policies.
        let meta = crate::engine::plan::GroupMeta::of(catalog, g);
        let first_case = cases.len();
        let mut k = 0;
        for (ci, c) in checks.iter().enumerate() {
            for cmp in Comparison::ALL {
                for (pi, policy) in g.policy_names.iter().enumerate() {
                    let r = &results[k];
                    k += 1;
                    if mutant.is_some() {
                        continue;
                    }
                    let fails = r.usage > 1.0;
                    cases.push(crate::report::verdict::Case {
                        scenario: meta.scenario.clone(),
                        param: meta.param.clone(),
                        profile: meta.profile.clone(),
                        check: c.name.to_string(),
                        comparison: cmp,
                        asserted: cmp == message_comparison,
                        policy: policy.clone(),
                        tolerance: g.tolerances[pi][ci],
                        seeds: 1,
                        worst_usage_pct: r.usage * 100.0,
                        worst_seed: seed,
                        worst_step: r.worst_step,
                        failing_seeds: usize::from(fails),
                        failing_seed_list: if fails { vec![seed] } else { Vec::new() },
                        tail: None,
                        mutants_caught: Vec::new(),
                        mutants_missed: Vec::new(),
                        repro: crate::report::verdict::repro_command(ctx, &meta, policy, cmp, seed),
                        message: None,
                        failures: Vec::new(),
                    });
                }
            }
        }
        if mutant.is_some() {
            let np = g.policy_names.len();
            for (pi, policy) in g.policy_names.iter().enumerate() {
                let ci = Comparison::ALL
                    .iter()
                    .position(|c| *c == message_comparison)
                    .expect("one of ALL");
                let missing: Vec<String> = checks
                    .iter()
                    .enumerate()
                    .filter(|(c, _)| {
                        results[(c * Comparison::ALL.len() + ci) * np + pi].usage <= 1.0
                    })
                    .map(|(_, ch)| ch.name.to_string())
                    .collect();
                mutants.push(crate::report::verdict::MutantCase {
                    scenario: meta.scenario.clone(),
                    param: meta.param.clone(),
                    profile: meta.profile.clone(),
                    mutant: meta.mutant.clone(),
                    policy: policy.clone(),
                    caught_seeds: usize::from(missing.len() < checks.len()),
                    seeds: 1,
                    checks_missing: missing,
                    fails_gate: false,
                });
            }
        }
        // Messages, check by check and step by step, as the test would raise them.
        for (ci, c) in checks.iter().enumerate() {
            for (pi, policy) in g.policy_names.iter().enumerate() {
                let tol = g.tolerances[pi][ci];
                for_each_pair(&ws.traces, ci, c, message_comparison, |step, a, e| {
                    if compare(a, e, tol).usage <= 1.0 {
                        return;
                    }
                    // A mutant is expected to fail: only clean runs count for
                    // `--fail-on-exceed`, as in `sweep`.
                    exceeded |= mutant.is_none();
                    if let Some(msg) =
                        torch_mismatch_message(a, e, &c.shape, tol, message_comparison.both_f32())
                    {
                        let _ = writeln!(
                            text,
                            "\n-- {} at step {} ({}, policy {}: atol={}, rtol={})",
                            c.name,
                            step,
                            message_comparison.name(),
                            policy,
                            crate::check::python_repr::py_repr(tol.atol),
                            crate::check::python_repr::py_repr(tol.rtol)
                        );
                        text.push_str(&msg);
                        text.push('\n');
                        if mutant.is_none() {
                            // The verdict carries the message of the worst step.
                            let cmp = Comparison::ALL
                                .iter()
                                .position(|c| *c == message_comparison)
                                .expect("one of ALL");
                            let case = &mut cases[first_case
                                + (ci * Comparison::ALL.len() + cmp) * g.policy_names.len()
                                + pi];
                            if step == case.worst_step || case.message.is_none() {
                                case.message = Some(msg);
                            }
                        }
                    }
                });
            }
        }
        text.push('\n');
    }
    Ok(ReproOutcome {
        text,
        exceeded,
        dumped,
        cases,
        mutants,
    })
}
