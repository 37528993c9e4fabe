//! `seedsweep size`: recommend tolerances from a sweep folder's frontiers, or from seeds run
//! in-process through the engine, and validate them on fresh seeds (the maths is in
//! [`crate::report::size`]).

use std::path::PathBuf;

use crate::commands::{emit_text, is_stdout, load_catalog, status, Common};
use crate::engine::aggregate::{collect_for_sizing, collect_frontiers, SizingData};
use crate::engine::catalog::{Catalog, Selection};
use crate::engine::plan::{group_seeds, seed_runs_memory, units, GroupMeta, SeedRange};
use crate::report::size as report;
use crate::results::csv::{read_mutants, read_plan};
use crate::sys::atomic_write::write_atomic;
use crate::sys::error::InputError;
use crate::sys::limits::pool;

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
    /// No progress bar and no status lines.
    pub quiet: bool,
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

/// Reads a sweep directory's `plan.csv`, `frontiers.bin` (the clean groups') and
/// `mutants.csv` (the mutant groups') into the groups `size` sizes, filtered by the
/// selection's scenario, param, profile and mutant names.
fn load_sized(
    dir: &std::path::Path,
    catalog: &Catalog,
    sel: &Selection,
) -> anyhow::Result<Vec<report::GroupData>> {
    use crate::results::frontiers::{read_frontiers, FILE};
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
    let mut data: Vec<report::GroupData> = metas
        .iter()
        .map(|m| report::GroupData {
            meta: m.clone(),
            seeds: Vec::new(),
            fr: if m.mutant.is_empty() {
                vec![Vec::new(); m.checks.len()]
            } else {
                Vec::new()
            },
            mutant_min_usage: Vec::new(),
            jax: is_jax(catalog, &m.scenario),
        })
        .collect();
    for r in read_frontiers(&fpath, &metas, false)? {
        let d = &mut data[r.group];
        if !d.meta.mutant.is_empty() {
            anyhow::bail!(
                "{}: holds frontiers of the mutant group {} {} {} {} (a sweep by an older seedsweep); sweep again",
                fpath.display(),
                d.meta.scenario,
                d.meta.param,
                d.meta.profile,
                d.meta.mutant
            );
        }
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
    // The mutant groups: their seeds from the plan, their smallest usages from mutants.csv.
    if plan
        .iter()
        .any(|(m, r)| !m.mutant.is_empty() && !r.is_empty())
    {
        let mpath = dir.join("mutants.csv");
        let parts = read_mutants(&mpath, &metas)?;
        for ((d, (m, range)), part) in data.iter_mut().zip(&plan).zip(parts) {
            if m.mutant.is_empty() {
                continue;
            }
            let n = (range.end - range.start) as usize;
            match part {
                Some(p) if p.seeds == n => {
                    let ai = crate::check::comparison::Comparison::ALL
                        .iter()
                        .position(|&c| c == m.asserted)
                        .expect("the asserted comparison is one of ALL");
                    d.mutant_min_usage = (0..m.checks.len())
                        .map(|c| {
                            (0..m.policies.len())
                                .map(|pi| p.entries[m.index(c, ai, pi)].min_usage)
                                .collect()
                        })
                        .collect();
                    d.seeds = range.clone().collect();
                }
                None if n == 0 => {}
                _ => anyhow::bail!(
                    "{}: does not hold the {n} seeds plan.csv lists for {} {} {} {}; is the sweep finished?",
                    mpath.display(),
                    m.scenario,
                    m.param,
                    m.profile,
                    m.mutant
                ),
            }
        }
    }
    for (d, (m, range)) in data.iter().zip(&plan) {
        let want: Vec<u64> = range.clone().collect();
        if m.mutant.is_empty() && d.seeds != want {
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
    data: &[report::GroupData],
    pairs: &[report::ValidatePairs],
    n: u64,
    flake: f64,
    quiet: bool,
) -> anyhow::Result<(String, String)> {
    use crate::check::python_repr::py_repr;
    use crate::report::table::{pct, render};
    use crate::stats::binomial::clopper_pearson;
    use crate::stats::tail::seeds_needed_empirical;
    use report::usages;
    let mut text = String::new();
    let mut md = format!(
        "\n### Validation on fresh seeds (`--validate {n}`)\n\nEach profile re-run on {n} seeds after the sized range, under the recommended balanced pair of each check. Flake rate = seeds with usage > 100 %, with its 95 % Clopper–Pearson interval; the observed usage at p = {} is the empirical quantile (shown only from {} seeds on).\n\n| scenario | param | profile | check | atol | rtol | failing seeds | flake rate [95 % CI] | observed at p | predicted [upper] |\n|---|---|---|---|---|---|---|---|---|---|\n",
        py_repr(flake),
        seeds_needed_empirical(flake)
    );
    let mut rows = Vec::new();
    for (scenario, param, pairs) in pairs {
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
            let group = crate::engine::catalog::Group {
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
            let fr = collect_frontiers(catalog, &[group], &range, "validate", quiet)
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
                    s.sort_unstable_by(f64::total_cmp);
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
            crate::sys::atomic_write::check(path, flag)?;
        }
    }
    let pool = pool(o.threads)?;
    let data = match &o.dir {
        Some(dir) => {
            if let Ok(Some(fp)) = crate::sweepdir::fingerprint::Fingerprint::read(dir) {
                crate::sweepdir::fingerprint::verify_checksums(dir, &fp, "size")?;
            }
            load_sized(dir, &catalog, &o.common.selection)?
        }
        None => {
            let groups = catalog.select(&o.common.selection)?;
            let seeds = o.seeds.unwrap_or(1000);
            crate::engine::budget::check_seed_range(&catalog, &groups, o.first_seed, seeds)?;
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
                    .saturating_mul(
                        std::mem::size_of::<crate::engine::evaluate::SeedCheck>() as u64 + 8,
                    );
                crate::sys::limits::check_memory(
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
            let results =
                pool.install(|| collect_for_sizing(&catalog, &groups, &range, "size", o.quiet));
            groups
                .iter()
                .zip(results)
                .map(|(g, r)| {
                    let meta = GroupMeta::of(&catalog, g);
                    let (fr, mutant_min_usage) = match r {
                        SizingData::Frontiers(fr) => (fr, Vec::new()),
                        SizingData::Mutant(agg) => {
                            let ai = crate::check::comparison::Comparison::ALL
                                .iter()
                                .position(|&c| c == meta.asserted)
                                .expect("the asserted comparison is one of ALL");
                            let min = (0..meta.checks.len())
                                .map(|c| {
                                    (0..meta.policies.len())
                                        .map(|p| agg.entry_caught(meta.index(c, ai, p)).min_usage)
                                        .collect()
                                })
                                .collect();
                            (Vec::new(), min)
                        }
                    };
                    report::GroupData {
                        seeds: group_seeds(&catalog, g, &range).collect(),
                        jax: is_jax(&catalog, &meta.scenario),
                        meta,
                        fr,
                        mutant_min_usage,
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
    let sizing = pool.install(|| report::size(&data, o.flake_rate, o.target));
    let mut markdown = report::markdown::render_markdown(&sizing);
    let mut vtext = String::new();
    if let Some(n) = o.validate {
        let pairs = sizing.validate_pairs();
        let (t, m) =
            pool.install(|| validate(&catalog, &data, &pairs, n, o.flake_rate, o.quiet))?;
        vtext = t;
        markdown.push_str(&m);
    }
    if let Some(path) = &csv_path {
        write_atomic(path, &report::csv::render_csv(&sizing))?;
    }
    if let Some(path) = &o.markdown {
        write_atomic(path, markdown.as_bytes())?;
    }
    // With `--out -` or `--markdown -` stdout carries that file alone.
    let stdout_is_data = [&csv_path, &o.markdown]
        .into_iter()
        .flatten()
        .any(|p| is_stdout(p));
    emit_text(&report::text::render_text(&sizing), stdout_is_data);
    emit_text(&vtext, stdout_is_data);
    for path in [&csv_path, &o.markdown]
        .into_iter()
        .flatten()
        .filter(|p| !is_stdout(p))
    {
        status(o.quiet, &format!("wrote {}", path.display()));
    }
    let missed = sizing.missed();
    if missed > 0 {
        eprintln!(
            "warning: {missed} mutant(s) are not shown to be caught on every seed under the recommended tolerances"
        );
    }
    Ok(0)
}
