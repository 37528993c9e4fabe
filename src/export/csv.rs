//! CSV export. The row structs below *are* the schema; `results/README.md` documents every
//! column. Floats are written as Python's `repr` writes them (shortest round-trip digits,
//! `1.25e-06`, `inf`), so the files read back exactly in pandas or numpy.

use std::path::Path;

use serde::{Serialize, Serializer};

use crate::catalog::{Catalog, Group};
use crate::check::py_repr;
use crate::evaluate::Comparison;
use crate::export::write_atomic;
use crate::sweep::{GroupResult, SummaryEntry};

fn float<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&py_repr(*x))
}

fn pct<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&py_repr(*x * 100.0))
}

/// One row of `seeds.csv`: one seed × check × comparison × policy.
#[derive(Debug, Serialize)]
pub struct SeedRow<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// Parametrization id (pytest spelling).
    pub param: &'a str,
    /// Numerics profile spec.
    pub profile: &'a str,
    /// Seed (replaces the test's `torch.manual_seed`).
    pub seed: u64,
    /// Check name.
    pub check: &'a str,
    /// `sharded-vs-ref`, `ref-vs-f64` or `sharded-vs-f64`.
    pub comparison: &'a str,
    /// Tolerance policy.
    pub policy: &'a str,
    /// Worst element usage over all steps, in percent (> 100 fails).
    #[serde(serialize_with = "pct")]
    pub usage_pct: f64,
    /// Largest |actual - expected| over all steps.
    #[serde(serialize_with = "float")]
    pub max_abs_diff: f64,
    /// Step of the worst usage (`s`, or `s.m` for a micro-step).
    pub worst_step: String,
    /// Mismatched elements at the worst step.
    pub mismatched: u32,
    /// Elements compared at the worst step.
    pub elements: u32,
    /// Mismatches involving NaN or infinity, over all steps.
    pub nonfinite: u32,
    /// Largest |expected| over all steps.
    #[serde(serialize_with = "float")]
    pub max_abs_expected: f64,
    /// The injected bug (`--mutants`); empty for the clean run.
    pub mutant: &'a str,
}

/// One row of `summary.csv`: one check × comparison × policy of a group over all its seeds.
#[derive(Debug, Serialize)]
pub struct SummaryRow<'a> {
    /// Scenario name.
    pub scenario: &'a str,
    /// Parametrization id.
    pub param: &'a str,
    /// Numerics profile spec.
    pub profile: &'a str,
    /// Check name.
    pub check: &'a str,
    /// Comparison.
    pub comparison: &'a str,
    /// Tolerance policy.
    pub policy: &'a str,
    /// The check's atol under the policy.
    #[serde(serialize_with = "float")]
    pub atol: f64,
    /// The check's rtol under the policy.
    #[serde(serialize_with = "float")]
    pub rtol: f64,
    /// Seeds evaluated.
    pub seeds: usize,
    /// Seeds whose usage exceeds 100 %.
    pub failing_seeds: usize,
    /// Largest usage over seeds, percent.
    #[serde(serialize_with = "pct")]
    pub worst_usage_pct: f64,
    /// First seed (in seed order) reaching the largest usage.
    pub worst_seed: u64,
    /// Its step.
    pub worst_step: String,
    /// Median usage over seeds, percent (linear interpolation).
    #[serde(serialize_with = "pct")]
    pub p50_usage_pct: f64,
    /// 95th-percentile usage over seeds, percent (linear interpolation).
    #[serde(serialize_with = "pct")]
    pub p95_usage_pct: f64,
    /// Largest |actual - expected| over all seeds and steps.
    #[serde(serialize_with = "float")]
    pub max_abs_diff: f64,
    /// Largest |expected| over all seeds and steps.
    #[serde(serialize_with = "float")]
    pub max_abs_expected: f64,
    /// Seeds with a NaN/infinity mismatch.
    pub nonfinite_seeds: usize,
    /// The injected bug (`--mutants`); empty for the clean run.
    pub mutant: &'a str,
}

/// One row of `mutants.csv`: how one check detects one injected bug over the seeds.
#[derive(Debug, Serialize)]
pub struct MutantRow<'a> {
    /// The injected bug.
    pub mutant: &'a str,
    /// Scenario name.
    pub scenario: &'a str,
    /// Parametrization id.
    pub param: &'a str,
    /// Numerics profile spec.
    pub profile: &'a str,
    /// Check name.
    pub check: &'a str,
    /// Comparison.
    pub comparison: &'a str,
    /// Tolerance policy.
    pub policy: &'a str,
    /// Seeds on which the check exceeds its tolerance (usage > 100 %): the bug is caught.
    pub detected_seeds: usize,
    /// Seeds evaluated.
    pub seeds: usize,
    /// Smallest usage over seeds, percent: above 100 the check catches the bug on every seed.
    #[serde(serialize_with = "pct")]
    pub min_usage_pct: f64,
}

/// Serializes rows into CSV bytes.
fn to_bytes<T: Serialize>(rows: impl IntoIterator<Item = T>) -> anyhow::Result<Vec<u8>> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r)?;
    }
    w.into_inner()
        .map_err(|e| anyhow::anyhow!("csv buffer: {e}"))
}

/// The bytes of `seeds.csv`, in group order, then seed order, then check, comparison,
/// policy.
pub fn seeds_csv(
    catalog: &Catalog,
    groups: &[Group],
    results: &[GroupResult],
) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for (g, r) in groups.iter().zip(results) {
        let s = &catalog.scenarios[g.scenario];
        let scenario = s.common().name.as_str();
        let param = s.param_ids()[g.param];
        let checks = s.checks(g.param);
        for (seed, res) in r.seeds.iter().zip(&r.per_seed) {
            let mut k = 0;
            for c in checks {
                for comparison in Comparison::ALL {
                    for policy in &g.policy_names {
                        let sc = &res[k];
                        k += 1;
                        rows.push(SeedRow {
                            scenario,
                            param,
                            profile: &g.profile.name,
                            seed: *seed,
                            check: c.name,
                            comparison: comparison.name(),
                            policy,
                            usage_pct: sc.usage,
                            max_abs_diff: sc.max_abs_diff,
                            worst_step: sc.worst_step.to_string(),
                            mismatched: sc.mismatched,
                            elements: sc.elements,
                            nonfinite: sc.nonfinite,
                            max_abs_expected: sc.max_abs_expected,
                            mutant: g.mutant.map(|m| m.name()).unwrap_or(""),
                        });
                    }
                }
            }
        }
    }
    to_bytes(rows)
}

/// The bytes of `summary.csv`.
pub fn summary_csv(
    catalog: &Catalog,
    groups: &[Group],
    summaries: &[Vec<SummaryEntry>],
) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for (g, entries) in groups.iter().zip(summaries) {
        let s = &catalog.scenarios[g.scenario];
        for e in entries {
            rows.push(SummaryRow {
                scenario: &s.common().name,
                param: s.param_ids()[g.param],
                profile: &g.profile.name,
                check: e.check,
                comparison: e.comparison.name(),
                policy: &e.policy,
                atol: e.tolerance.atol,
                rtol: e.tolerance.rtol,
                seeds: e.seeds,
                failing_seeds: e.failing_seeds,
                worst_usage_pct: e.worst_usage,
                worst_seed: e.worst_seed,
                worst_step: e.worst_step.to_string(),
                p50_usage_pct: e.p50_usage,
                p95_usage_pct: e.p95_usage,
                max_abs_diff: e.max_abs_diff,
                max_abs_expected: e.max_abs_expected,
                nonfinite_seeds: e.nonfinite_seeds,
                mutant: g.mutant.map(|m| m.name()).unwrap_or(""),
            });
        }
    }
    to_bytes(rows)
}

/// The bytes of `mutants.csv`: every mutant group's checks, in group order.
pub fn mutants_csv(
    catalog: &Catalog,
    groups: &[Group],
    summaries: &[Vec<SummaryEntry>],
) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for (g, entries) in groups.iter().zip(summaries) {
        let Some(m) = g.mutant else { continue };
        let s = &catalog.scenarios[g.scenario];
        for e in entries {
            rows.push(MutantRow {
                mutant: m.name(),
                scenario: &s.common().name,
                param: s.param_ids()[g.param],
                profile: &g.profile.name,
                check: e.check,
                comparison: e.comparison.name(),
                policy: &e.policy,
                detected_seeds: e.failing_seeds,
                seeds: e.seeds,
                min_usage_pct: e.min_usage,
            });
        }
    }
    to_bytes(rows)
}

/// Writes both files atomically into `dir`.
pub fn write_sweep(
    dir: &Path,
    catalog: &Catalog,
    groups: &[Group],
    results: &[GroupResult],
    summaries: &[Vec<SummaryEntry>],
) -> anyhow::Result<()> {
    let seeds = seeds_csv(catalog, groups, results)?;
    let summary = summary_csv(catalog, groups, summaries)?;
    write_atomic(&dir.join("seeds.csv"), &seeds)?;
    write_atomic(&dir.join("summary.csv"), &summary)?;
    if groups.iter().any(|g| g.mutant.is_some()) {
        write_atomic(
            &dir.join("mutants.csv"),
            &mutants_csv(catalog, groups, summaries)?,
        )?;
    }
    Ok(())
}
