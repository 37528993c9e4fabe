//! CSV export. The row structs below serialize the columns [`crate::results::schema`]
//! declares (tests compare their headers with it); `results/README.md` documents every
//! column with its type. Floats are written as Python's `repr` writes them (shortest
//! round-trip digits, `1.25e-06`, `inf`, `-inf`), except "not a number", which is `NaN`:
//! the spellings pandas, polars and DuckDB all read as floats with no options (polars reads
//! `nan` as text).

use std::path::Path;

use serde::{Serialize, Serializer};

use std::ops::Range;
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;

use crate::check::comparison::Comparison;
#[cfg(doc)]
use crate::check::python_repr::py_repr;
use crate::check::StepLabel;
use crate::engine::{aggregate::SummaryEntry, evaluate::SeedValues, plan::GroupMeta};
use crate::results::schema;

fn float<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    let mut out = Vec::with_capacity(24);
    float_into(*x, &mut out);
    s.serialize_str(std::str::from_utf8(&out).expect("ASCII"))
}

/// One float field as the tables write it: [`py_repr`], except NaN, which is `NaN`.
pub fn float_into(x: f64, out: &mut Vec<u8>) {
    if x.is_nan() {
        out.extend_from_slice(b"NaN");
    } else {
        crate::check::python_repr::py_repr_into(x, out);
    }
}

/// The `micro_step` column of a step label: the micro-step, or -1 for a check made once
/// per optimizer step.
pub fn micro_step(l: StepLabel) -> i64 {
    l.micro.map_or(-1, i64::from)
}

/// One row of `seeds.csv`: one seed × check × comparison × policy. `usage_pct` is the value
/// the summary aggregates, so reading the file back reproduces the summary exactly.
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
    #[serde(serialize_with = "float")]
    pub usage_pct: f64,
    /// Largest |actual - expected| over all steps.
    #[serde(serialize_with = "float")]
    pub max_abs_diff: f64,
    /// Optimizer step of the worst usage, from 0.
    pub step: u32,
    /// Its gradient-accumulation micro-step, from 0; -1 for a check made once per step.
    pub micro_step: i64,
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
    /// Matmul-like checks: usage of the deterministic bound γ·Σ|a·b|, percent (`nan` otherwise).
    #[serde(serialize_with = "float")]
    pub theory_det_pct: f64,
    /// Matmul-like checks: usage of the probabilistic bound λ·√n·u·Σ|a·b|, percent.
    #[serde(serialize_with = "float")]
    pub theory_prob_pct: f64,
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
    #[serde(serialize_with = "float")]
    pub worst_usage_pct: f64,
    /// First seed (in seed order) reaching the largest usage.
    pub worst_seed: u64,
    /// Its optimizer step.
    pub worst_step: u32,
    /// Its micro-step, -1 for a check made once per step.
    pub worst_micro_step: i64,
    /// Median usage over seeds, percent (linear interpolation).
    #[serde(serialize_with = "float")]
    pub p50_usage_pct: f64,
    /// 95th-percentile usage over seeds, percent (linear interpolation).
    #[serde(serialize_with = "float")]
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
    /// `exact` (every usage kept) or `histogram` (`--summary-only`: 0.23 % log bins).
    pub quantile_method: &'a str,
    /// `gpd` (peaks over threshold, generalized Pareto fit accepted by Anderson–Darling) or
    /// `empirical` (too few seeds, an infinite usage, or the fit rejected).
    pub tail_method: &'a str,
    /// Usage exceeded with probability 1e-2 per seed (predicted), percent.
    #[serde(serialize_with = "float")]
    pub tail_p1e2_pct: f64,
    /// Usage exceeded with probability 1e-3 per seed (predicted), percent.
    #[serde(serialize_with = "float")]
    pub tail_p1e3_pct: f64,
    /// 95 % interval of it: low end.
    #[serde(serialize_with = "float")]
    pub tail_p1e3_lo_pct: f64,
    /// 95 % interval of it: high end (`inf` when the data cannot bound it).
    #[serde(serialize_with = "float")]
    pub tail_p1e3_hi_pct: f64,
    /// Usage exceeded with probability 1e-4 per seed (predicted), percent.
    #[serde(serialize_with = "float")]
    pub tail_p1e4_pct: f64,
    /// 95 % interval of it: low end.
    #[serde(serialize_with = "float")]
    pub tail_p1e4_lo_pct: f64,
    /// 95 % interval of it: high end.
    #[serde(serialize_with = "float")]
    pub tail_p1e4_hi_pct: f64,
    /// Matmul-like checks: largest usage over seeds of the deterministic bound γ_n·Σ|a·b|.
    #[serde(serialize_with = "float")]
    pub theory_det_usage_pct: f64,
    /// Matmul-like checks: largest usage over seeds of Higham & Mary's probabilistic bound
    /// λ·√n·u·Σ|a·b| at per-seed failure probability 1e-4.
    #[serde(serialize_with = "float")]
    pub theory_prob_usage_pct: f64,
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
    #[serde(serialize_with = "float")]
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

/// Appends one seed's `seeds.csv` rows (no header) to `out`: check, then comparison, then
/// policy. The bytes a [`SeedsWriter`] writes; a sweep's workers format them. Written field
/// by field without allocating (once `memo` has room for the group's entries): the same
/// bytes as serializing [`SeedRow`] with the csv writer ([`seed_rows_serde`], which the
/// tests compare against): fields quoted only when they hold a comma, a quote or a line
/// break (quotes doubled), floats as [`float_into`], `\n` after each row.
///
/// Float fields come from `memo` where the value is one it formatted before. A worker
/// keeps one memo for all its units: the groups of a family (a clean run and its mutants)
/// share their `ref-vs-f64` entries, their |expected| and their theory bounds, and a
/// check's two policies share its |diff| and |expected|, so most of a mutant's floats are
/// copies. An entry is used only when its value's bits are equal, and [`float_into`] is a
/// function of the bits, so the bytes are the same whatever the memo holds.
pub fn seed_rows(
    meta: &GroupMeta,
    seed: u64,
    res: &[SeedValues],
    out: &mut Vec<u8>,
    memo: &mut FloatMemo,
) {
    // The fields every row starts with, written once in `out` and copied from there.
    let mut prefix: Option<std::ops::Range<usize>> = None;
    let np = meta.policies.len();
    memo.fit(res.len());
    let mut k = 0;
    for check in &meta.checks {
        for comparison in Comparison::ALL {
            // The slot of this check and comparison's first policy: the policy-free
            // fields are memoized there.
            let k0 = k;
            for policy in &meta.policies {
                let sc = &res[k];
                match &prefix {
                    Some(r) => out.extend_from_within(r.clone()),
                    None => {
                        let start = out.len();
                        for f in [&meta.scenario, &meta.param, &meta.profile] {
                            field(out, f);
                            out.push(b',');
                        }
                        decimal(out, seed);
                        out.push(b',');
                        prefix = Some(start..out.len());
                    }
                }
                field(out, check);
                out.push(b',');
                field(out, comparison.name());
                out.push(b',');
                field(out, policy);
                out.push(b',');
                memo.write(k, USAGE, sc.usage_pct, out);
                out.push(b',');
                memo.write(k0, DIFF, sc.max_abs_diff, out);
                out.push(b',');
                decimal(out, u64::from(sc.worst_step.step));
                out.push(b',');
                match sc.worst_step.micro {
                    Some(m) => decimal(out, u64::from(m)),
                    None => out.extend_from_slice(b"-1"),
                }
                for n in [sc.mismatched, sc.elements, sc.nonfinite] {
                    out.push(b',');
                    decimal(out, u64::from(n));
                }
                out.push(b',');
                memo.write(k0, EXPECTED, sc.max_abs_expected, out);
                out.push(b',');
                field(out, &meta.mutant);
                out.push(b',');
                memo.write(k, DET, sc.theory_det_pct, out);
                out.push(b',');
                memo.write(k, PROB, sc.theory_prob_pct, out);
                out.push(b'\n');
                k += 1;
            }
            debug_assert_eq!(k - k0, np);
        }
    }
}

/// The float fields of a row that [`FloatMemo`] keeps, by index.
const USAGE: usize = 0;
const DIFF: usize = 1;
const EXPECTED: usize = 2;
const DET: usize = 3;
const PROB: usize = 4;

/// The last value [`seed_rows`] formatted per result slot and float field, with its
/// bytes (a [`float_into`] is at most 24 bytes).
#[derive(Debug, Default)]
pub struct FloatMemo {
    entries: Vec<[MemoEntry; 5]>,
}

/// len 0 (the default): never a formatted value, so never taken.
#[derive(Debug, Clone, Copy, Default)]
struct MemoEntry {
    bits: u64,
    len: u8,
    bytes: [u8; 24],
}

impl FloatMemo {
    /// Room for `slots` result slots.
    fn fit(&mut self, slots: usize) {
        if self.entries.len() < slots {
            self.entries.resize(slots, Default::default());
        }
    }

    /// Appends [`float_into`]`(x)` to `out`, copied from slot `k`'s entry for `field` when it
    /// holds the same bits, formatted (and kept there) otherwise.
    #[inline]
    fn write(&mut self, k: usize, field: usize, x: f64, out: &mut Vec<u8>) {
        let e = &mut self.entries[k][field];
        if e.len > 0 && e.bits == x.to_bits() {
            return out.extend_from_slice(&e.bytes[..e.len as usize]);
        }
        let start = out.len();
        float_into(x, out);
        let s = &out[start..];
        if s.len() <= e.bytes.len() {
            e.bits = x.to_bits();
            e.len = s.len() as u8;
            e.bytes[..s.len()].copy_from_slice(s);
        }
    }
}

/// `n` in decimal, as `Display` writes it.
fn decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// One CSV field as the csv writer's default (`QuoteStyle::Necessary`) writes it: as is,
/// or in double quotes with inner quotes doubled when it holds `,`, `"`, `\r` or `\n`.
fn field(out: &mut Vec<u8>, s: &str) {
    if !s.bytes().any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n')) {
        return out.extend_from_slice(s.as_bytes());
    }
    out.push(b'"');
    for b in s.bytes() {
        if b == b'"' {
            out.push(b'"');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// [`seed_rows`] through serde and the csv writer: the definition of its bytes.
pub fn seed_rows_serde(
    meta: &GroupMeta,
    seed: u64,
    res: &[SeedValues],
    out: &mut Vec<u8>,
) -> anyhow::Result<()> {
    let mut w = ::csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(out);
    let mut k = 0;
    for check in &meta.checks {
        for comparison in Comparison::ALL {
            for policy in &meta.policies {
                let sc = &res[k];
                k += 1;
                w.serialize(SeedRow {
                    scenario: &meta.scenario,
                    param: &meta.param,
                    profile: &meta.profile,
                    seed,
                    check,
                    comparison: comparison.name(),
                    policy,
                    usage_pct: sc.usage_pct,
                    max_abs_diff: sc.max_abs_diff,
                    step: sc.worst_step.step,
                    micro_step: micro_step(sc.worst_step),
                    mismatched: sc.mismatched,
                    elements: sc.elements,
                    nonfinite: sc.nonfinite,
                    max_abs_expected: sc.max_abs_expected,
                    mutant: &meta.mutant,
                    theory_det_pct: sc.theory_det_pct,
                    theory_prob_pct: sc.theory_prob_pct,
                })?;
            }
        }
    }
    w.flush()?;
    Ok(())
}

/// The header line of `seeds.csv`: the columns [`schema::SEEDS`] declares (the header the
/// csv writer writes for [`SeedRow`], which a test checks).
fn seeds_header() -> Vec<u8> {
    schema::header(schema::SEEDS).into_bytes()
}

/// Streams `seeds.csv` rows to a file: group order, then seed order, then check, comparison,
/// policy. Rows are flushed per chunk by the caller, so an interrupted sweep leaves whole
/// units behind. A new file gets its header before its first row, or at [`SeedsWriter::sync`]
/// when it has none (an empty shard's `seeds.csv` is a header, never 0 bytes).
pub struct SeedsWriter {
    w: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    header: Option<Vec<u8>>,
    buf: Vec<u8>,
    memo: FloatMemo,
}

impl SeedsWriter {
    /// Creates `path` (with a header), or appends to it without one.
    pub fn open(path: &Path, append: bool) -> anyhow::Result<Self> {
        let file = crate::sys::atomic_write::open_owned(path, append)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(Self {
            w: std::io::BufWriter::with_capacity(1 << 20, file),
            path: path.to_path_buf(),
            header: if append { None } else { Some(seeds_header()) },
            buf: Vec::new(),
            memo: FloatMemo::default(),
        })
    }

    /// Writes one seed's rows as [`seed_rows`] formatted them.
    pub fn write_rows(&mut self, rows: &[u8]) -> anyhow::Result<()> {
        use std::io::Write;
        if let Some(h) = self.header.take() {
            self.w
                .write_all(&h)
                .with_context(|| format!("cannot write {}", self.path.display()))?;
        }
        self.w
            .write_all(rows)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Writes one seed's rows.
    pub fn write(&mut self, meta: &GroupMeta, seed: u64, res: &[SeedValues]) -> anyhow::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        seed_rows(meta, seed, res, &mut buf, &mut self.memo);
        let done = self.write_rows(&buf);
        self.buf = buf;
        done
    }

    /// Flushes buffered rows to the file.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        use std::io::Write;
        self.w
            .flush()
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Writes a header still pending (a file that got no rows), flushes and syncs the file to
    /// disk (before it is renamed into place).
    pub fn sync(&mut self) -> anyhow::Result<()> {
        if let Some(h) = self.header.take() {
            use std::io::Write;
            self.w
                .write_all(&h)
                .with_context(|| format!("cannot write {}", self.path.display()))?;
        }
        self.flush()?;
        self.w
            .get_ref()
            .sync_all()
            .with_context(|| format!("cannot sync {}", self.path.display()))
    }
}

/// The bytes of `summary.csv`.
pub fn summary_csv(
    metas: &[GroupMeta],
    summaries: &[Vec<SummaryEntry>],
) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for (m, entries) in metas.iter().zip(summaries) {
        for e in entries {
            rows.push(SummaryRow {
                scenario: &m.scenario,
                param: &m.param,
                profile: &m.profile,
                check: &e.check,
                comparison: e.comparison.name(),
                policy: &e.policy,
                atol: e.tolerance.atol,
                rtol: e.tolerance.rtol,
                seeds: e.seeds,
                failing_seeds: e.failing_seeds,
                worst_usage_pct: e.worst_usage,
                worst_seed: e.worst_seed,
                worst_step: e.worst_step.step,
                worst_micro_step: micro_step(e.worst_step),
                p50_usage_pct: e.p50_usage,
                p95_usage_pct: e.p95_usage,
                max_abs_diff: e.max_abs_diff,
                max_abs_expected: e.max_abs_expected,
                nonfinite_seeds: e.nonfinite_seeds,
                mutant: &m.mutant,
                quantile_method: e.quantile_method,
                tail_method: match e.tail.as_ref().map(|t| t.method) {
                    Some(crate::stats::tail::TailMethod::Gpd) => "gpd",
                    _ => "empirical",
                },
                tail_p1e2_pct: tail_at(e, 0).0,
                tail_p1e3_pct: tail_at(e, 1).0,
                tail_p1e3_lo_pct: tail_at(e, 1).1,
                tail_p1e3_hi_pct: tail_at(e, 1).2,
                tail_p1e4_pct: tail_at(e, 2).0,
                tail_p1e4_lo_pct: tail_at(e, 2).1,
                tail_p1e4_hi_pct: tail_at(e, 2).2,
                theory_det_usage_pct: e.theory_det,
                theory_prob_usage_pct: e.theory_prob,
            });
        }
    }
    to_bytes(rows)
}

/// (value, lo, hi) of the i-th tail point, NaN when there is none.
fn tail_at(e: &SummaryEntry, i: usize) -> (f64, f64, f64) {
    match e.tail.as_ref().and_then(|t| t.points.get(i)) {
        Some(p) => (p.value, p.lo, p.hi),
        None => (f64::NAN, f64::NAN, f64::NAN),
    }
}

/// The bytes of `mutants.csv`: every mutant group's checks, in group order.
pub fn mutants_csv(
    metas: &[GroupMeta],
    summaries: &[Vec<SummaryEntry>],
) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for (m, entries) in metas.iter().zip(summaries) {
        if m.mutant.is_empty() {
            continue;
        }
        for e in entries {
            rows.push(MutantRow {
                mutant: &m.mutant,
                scenario: &m.scenario,
                param: &m.param,
                profile: &m.profile,
                check: &e.check,
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

/// One row of `plan.csv`: one result entry of one planned group, with the group's seeds in
/// this run (a shard's slice). `merge` and `--resume` read it back.
#[derive(Debug, Serialize, Deserialize)]
pub struct PlanRow {
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Profile spec.
    pub profile: String,
    /// Mutant, empty for the clean run.
    pub mutant: String,
    /// The comparison the test asserts.
    pub asserted: String,
    /// Whether the seed changes the scenario.
    pub seed_dependent: bool,
    /// First seed of this run's slice.
    pub first_seed: u64,
    /// Seeds in this run's slice.
    pub seeds: u64,
    /// Check name.
    pub check: String,
    /// Comparison.
    pub comparison: String,
    /// Policy.
    pub policy: String,
    /// The check's atol under the policy.
    pub atol: f64,
    /// The check's rtol under the policy.
    pub rtol: f64,
}

/// The bytes of `plan.csv`.
pub fn plan_csv(metas: &[GroupMeta], seeds: &[Range<u64>]) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for (m, r) in metas.iter().zip(seeds) {
        for (c, check) in m.checks.iter().enumerate() {
            for comparison in Comparison::ALL {
                for (p, policy) in m.policies.iter().enumerate() {
                    rows.push(PlanRow {
                        scenario: m.scenario.clone(),
                        param: m.param.clone(),
                        profile: m.profile.clone(),
                        mutant: m.mutant.clone(),
                        asserted: m.asserted.name().to_string(),
                        seed_dependent: m.seed_dependent,
                        first_seed: r.start,
                        seeds: r.end - r.start,
                        check: check.clone(),
                        comparison: comparison.name().to_string(),
                        policy: policy.clone(),
                        atol: m.tolerances[p][c].atol,
                        rtol: m.tolerances[p][c].rtol,
                    });
                }
            }
        }
    }
    to_bytes(rows)
}

/// Reads `plan.csv`: the groups and their seed slices, in plan order.
pub fn read_plan(path: &Path) -> anyhow::Result<Vec<(GroupMeta, Range<u64>)>> {
    let mut r = ::csv::Reader::from_path(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut out: Vec<(GroupMeta, Range<u64>)> = Vec::new();
    for (line, row) in r.deserialize::<PlanRow>().enumerate() {
        let row = row.with_context(|| format!("{}: row {}", path.display(), line + 2))?;
        let bad = |what: &str| anyhow::anyhow!("{}: row {}: {what}", path.display(), line + 2);
        let asserted =
            Comparison::parse(&row.asserted).ok_or_else(|| bad("unknown asserted comparison"))?;
        let key = (&row.scenario, &row.param, &row.profile, &row.mutant);
        let same = out
            .last()
            .map(|(m, _)| (&m.scenario, &m.param, &m.profile, &m.mutant) == key)
            .unwrap_or(false);
        if !same {
            out.push((
                GroupMeta {
                    scenario: row.scenario.clone(),
                    param: row.param.clone(),
                    profile: row.profile.clone(),
                    mutant: row.mutant.clone(),
                    checks: Vec::new(),
                    policies: Vec::new(),
                    tolerances: Vec::new(),
                    asserted,
                    seed_dependent: row.seed_dependent,
                },
                row.first_seed..row.first_seed + row.seeds,
            ));
        }
        let m = &mut out.last_mut().expect("pushed above").0;
        if !m.checks.contains(&row.check) {
            m.checks.push(row.check.clone());
        }
        if !m.policies.contains(&row.policy) {
            m.policies.push(row.policy.clone());
        }
        let c = m
            .checks
            .iter()
            .position(|x| x == &row.check)
            .expect("just ensured");
        let p = m
            .policies
            .iter()
            .position(|x| x == &row.policy)
            .expect("just ensured");
        if m.tolerances.len() <= p {
            m.tolerances.resize(p + 1, Vec::new());
        }
        if m.tolerances[p].len() <= c {
            m.tolerances[p].resize(
                c + 1,
                crate::check::Tolerance {
                    atol: 0.0,
                    rtol: 0.0,
                },
            );
        }
        m.tolerances[p][c] = crate::check::Tolerance {
            atol: row.atol,
            rtol: row.rtol,
        };
    }
    Ok(out)
}

/// One row of a per-seed file as read back (`seeds.csv` or `seeds.parquet`).
#[derive(Debug, Deserialize)]
pub(crate) struct SeedRowIn {
    pub(crate) scenario: String,
    pub(crate) param: String,
    pub(crate) profile: String,
    pub(crate) seed: u64,
    pub(crate) check: String,
    pub(crate) comparison: String,
    pub(crate) policy: String,
    pub(crate) usage_pct: f64,
    pub(crate) max_abs_diff: f64,
    pub(crate) step: u32,
    pub(crate) micro_step: i64,
    pub(crate) mismatched: u32,
    pub(crate) elements: u32,
    pub(crate) nonfinite: u32,
    pub(crate) max_abs_expected: f64,
    #[serde(default)]
    pub(crate) mutant: Option<String>,
    // Files written before the theory columns existed read as "no bound".
    #[serde(default = "nan")]
    pub(crate) theory_det_pct: f64,
    #[serde(default = "nan")]
    pub(crate) theory_prob_pct: f64,
}

fn nan() -> f64 {
    f64::NAN
}

/// A whole unit read back from `seeds.csv`.
#[derive(Debug)]
pub struct UnitIn {
    /// Index into the plan's groups.
    pub group: usize,
    /// Seed.
    pub seed: u64,
    /// Its values in result order.
    pub values: Vec<SeedValues>,
    /// Byte offset just after the unit's last row (CSV), or the number of rows read up to
    /// and including it (Parquet).
    pub end: u64,
}

/// Groups rows into units against a plan, validating each row's place (the check,
/// comparison, policy and seed the plan expects next) and values.
struct UnitCollector<'a> {
    path: &'a Path,
    metas: &'a [GroupMeta],
    allow_partial: bool,
    cur: Option<(usize, u64, Vec<SeedValues>)>,
    out: Vec<UnitIn>,
}

impl<'a> UnitCollector<'a> {
    fn new(path: &'a Path, metas: &'a [GroupMeta], allow_partial: bool) -> Self {
        Self {
            path,
            metas,
            allow_partial,
            cur: None,
            out: Vec::new(),
        }
    }

    /// Takes row number `line` (1 = the first data row after a header); `end` gives the
    /// position after it. `Ok(false)`: stop reading (a partial file's torn tail).
    fn push(
        &mut self,
        next: SeedRowIn,
        line: usize,
        end: impl FnOnce() -> u64,
    ) -> anyhow::Result<bool> {
        let path = self.path;
        let bad = |what: String| anyhow::anyhow!("{}: row {line}: {what}", path.display());
        let gi = match &self.cur {
            Some((gi, _, _)) => *gi,
            None => self
                .metas
                .iter()
                .position(|m| {
                    m.scenario == next.scenario
                        && m.param == next.param
                        && m.profile == next.profile
                        && m.mutant == next.mutant.as_deref().unwrap_or("")
                })
                .ok_or_else(|| bad("row of a group that is not in the plan".into()))?,
        };
        let m = &self.metas[gi];
        let (_, seed, vals) = self
            .cur
            .get_or_insert_with(|| (gi, next.seed, Vec::with_capacity(m.entries())));
        let k = vals.len();
        let (c, ci, p) = (
            k / (Comparison::ALL.len() * m.policies.len()),
            (k / m.policies.len()) % Comparison::ALL.len(),
            k % m.policies.len(),
        );
        if next.seed != *seed
            || next.check != m.checks[c]
            || next.comparison != Comparison::ALL[ci].name()
            || next.policy != m.policies[p]
        {
            if self.allow_partial {
                return Ok(false);
            }
            return Err(bad(format!(
                "expected {} {} {} of seed {seed}",
                m.checks[c],
                Comparison::ALL[ci].name(),
                m.policies[p]
            )));
        }
        if next.usage_pct.is_nan() || next.usage_pct < 0.0 {
            return Err(bad(format!(
                "usage_pct {} is not allowed; a usage is a number >= 0 or inf",
                next.usage_pct
            )));
        }
        let step = StepLabel {
            step: next.step,
            micro: match next.micro_step {
                -1 => None,
                m => Some(u32::try_from(m).map_err(|_| {
                    bad(format!(
                        "micro_step {m} is not allowed; a micro-step is -1 (none) or 0..=4294967295"
                    ))
                })?),
            },
        };
        vals.push(SeedValues {
            usage_pct: next.usage_pct,
            max_abs_diff: next.max_abs_diff,
            worst_step: step,
            mismatched: next.mismatched,
            elements: next.elements,
            nonfinite: next.nonfinite,
            max_abs_expected: next.max_abs_expected,
            theory_det_pct: next.theory_det_pct,
            theory_prob_pct: next.theory_prob_pct,
        });
        if vals.len() == m.entries() {
            let (gi, seed, values) = self.cur.take().expect("set above");
            self.out.push(UnitIn {
                group: gi,
                seed,
                values,
                end: end(),
            });
        }
        Ok(true)
    }

    fn finish(self) -> anyhow::Result<Vec<UnitIn>> {
        match &self.cur {
            Some((_, seed, _)) if !self.allow_partial => Err(anyhow::anyhow!(
                "{}: ends inside the rows of seed {seed} (a truncated file)",
                self.path.display()
            )),
            _ => Ok(self.out),
        }
    }
}

/// Reads the units of a per-seed file against a plan, in file order: `seeds.csv`, or a
/// Parquet file ([`crate::results::parquet`]) when `path` ends in `.parquet`. Stops (without
/// error) at the first incomplete unit when `allow_partial` (a sweep interrupted
/// mid-write); otherwise every row must belong to a complete unit of the plan.
pub fn read_units(
    path: &Path,
    metas: &[GroupMeta],
    allow_partial: bool,
) -> anyhow::Result<Vec<UnitIn>> {
    let mut units = UnitCollector::new(path, metas, allow_partial);
    if path.extension().is_some_and(|e| e == "parquet") {
        let mut line = 0usize;
        crate::results::parquet::for_each_row(path, |row| {
            line += 1;
            let n = line as u64;
            units.push(row, line, || n)
        })?;
        return units.finish();
    }
    let mut r = ::csv::Reader::from_path(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut rows = r.deserialize::<SeedRowIn>();
    let mut line = 1usize;
    loop {
        let next = match rows.next() {
            None => break,
            Some(Ok(row)) => row,
            Some(Err(e)) => {
                if allow_partial {
                    break;
                }
                return Err(anyhow::anyhow!("{}: row {}: {e}", path.display(), line + 1));
            }
        };
        line += 1;
        if !units.push(next, line, || rows.reader().position().byte())? {
            break;
        }
    }
    units.finish()
}

/// One row of `scale.csv`: one (K, TP) point under one policy.
#[derive(Debug, Serialize)]
pub struct ScaleRow<'a> {
    /// Profile spec.
    pub profile: &'a str,
    /// Reduction length.
    pub k: usize,
    /// TP degree (1: the unsharded fp32 matmul).
    pub tp: usize,
    /// Seeds.
    pub seeds: u64,
    /// Policy of the usage columns.
    pub policy: &'a str,
    /// Worst usage of sharded vs unsharded fp32 over seeds, percent.
    #[serde(serialize_with = "float")]
    pub worst_usage_pct: f64,
    /// 95th percentile of that usage, percent.
    #[serde(serialize_with = "float")]
    pub p95_usage_pct: f64,
    /// Median over seeds of the largest error against float64, in units of u·Σ|x·w|.
    #[serde(serialize_with = "float")]
    pub p50_err_u: f64,
    /// 95th percentile of that error.
    #[serde(serialize_with = "float")]
    pub p95_err_u: f64,
    /// Largest of that error.
    #[serde(serialize_with = "float")]
    pub max_err_u: f64,
    /// √K: the probabilistic bound λ·√K·u·Σ|x·w| has this shape (Higham & Mary 2019).
    #[serde(serialize_with = "float")]
    pub sqrt_k: f64,
    /// Largest |sharded − unsharded|.
    #[serde(serialize_with = "float")]
    pub max_abs_diff: f64,
    /// Largest |y|.
    #[serde(serialize_with = "float")]
    pub max_abs_y: f64,
}

/// The bytes of `scale.csv`.
pub fn scale_csv(
    profile: &str,
    policies: &[String],
    points: &[crate::results::scale::ScalePoint],
) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for pt in points {
        for (p, policy) in policies.iter().enumerate() {
            rows.push(ScaleRow {
                profile,
                k: pt.k,
                tp: pt.tp,
                seeds: pt.seeds,
                policy,
                worst_usage_pct: pt.worst_usage_pct[p],
                p95_usage_pct: pt.p95_usage_pct[p],
                p50_err_u: pt.p50_err,
                p95_err_u: pt.p95_err,
                max_err_u: pt.max_err,
                sqrt_k: pt.sqrt_k,
                max_abs_diff: pt.max_abs_diff,
                max_abs_y: pt.max_abs_y,
            });
        }
    }
    to_bytes(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Tolerance;

    fn meta(names: [&str; 5]) -> GroupMeta {
        GroupMeta {
            scenario: names[0].into(),
            param: names[1].into(),
            profile: names[2].into(),
            mutant: names[3].into(),
            checks: vec!["logits".into(), names[4].into()],
            policies: vec!["old".into(), "a,b".into()],
            tolerances: vec![
                vec![
                    Tolerance {
                        atol: 1e-6,
                        rtol: 1e-5
                    };
                    2
                ];
                2
            ],
            asserted: Comparison::ShardedVsRef,
            seed_dependent: true,
        }
    }

    /// The header the csv writer derives from a row struct.
    fn serde_header<T: Serialize>(row: T) -> String {
        let bytes = to_bytes([row]).unwrap();
        let s = String::from_utf8(bytes).unwrap();
        s[..=s.find('\n').unwrap()].to_string()
    }

    #[test]
    fn every_row_struct_serializes_the_declared_columns() {
        let seed = SeedRow {
            scenario: "",
            param: "",
            profile: "",
            seed: 0,
            check: "",
            comparison: "",
            policy: "",
            usage_pct: 0.0,
            max_abs_diff: 0.0,
            step: 0,
            micro_step: -1,
            mismatched: 0,
            elements: 0,
            nonfinite: 0,
            max_abs_expected: 0.0,
            mutant: "",
            theory_det_pct: 0.0,
            theory_prob_pct: 0.0,
        };
        assert_eq!(serde_header(seed), schema::header(schema::SEEDS));
        assert_eq!(
            String::from_utf8(seeds_header()).unwrap(),
            schema::header(schema::SEEDS)
        );
        let summary = SummaryRow {
            scenario: "",
            param: "",
            profile: "",
            check: "",
            comparison: "",
            policy: "",
            atol: 0.0,
            rtol: 0.0,
            seeds: 0,
            failing_seeds: 0,
            worst_usage_pct: 0.0,
            worst_seed: 0,
            worst_step: 0,
            worst_micro_step: -1,
            p50_usage_pct: 0.0,
            p95_usage_pct: 0.0,
            max_abs_diff: 0.0,
            max_abs_expected: 0.0,
            nonfinite_seeds: 0,
            mutant: "",
            quantile_method: "",
            tail_method: "",
            tail_p1e2_pct: 0.0,
            tail_p1e3_pct: 0.0,
            tail_p1e3_lo_pct: 0.0,
            tail_p1e3_hi_pct: 0.0,
            tail_p1e4_pct: 0.0,
            tail_p1e4_lo_pct: 0.0,
            tail_p1e4_hi_pct: 0.0,
            theory_det_usage_pct: 0.0,
            theory_prob_usage_pct: 0.0,
        };
        assert_eq!(serde_header(summary), schema::header(schema::SUMMARY));
        let mutant = MutantRow {
            mutant: "",
            scenario: "",
            param: "",
            profile: "",
            check: "",
            comparison: "",
            policy: "",
            detected_seeds: 0,
            seeds: 0,
            min_usage_pct: 0.0,
        };
        assert_eq!(serde_header(mutant), schema::header(schema::MUTANTS));
        let plan = PlanRow {
            scenario: String::new(),
            param: String::new(),
            profile: String::new(),
            mutant: String::new(),
            asserted: String::new(),
            seed_dependent: true,
            first_seed: 0,
            seeds: 0,
            check: String::new(),
            comparison: String::new(),
            policy: String::new(),
            atol: 0.0,
            rtol: 0.0,
        };
        assert_eq!(serde_header(plan), schema::header(schema::PLAN));
        let scale = ScaleRow {
            profile: "",
            k: 0,
            tp: 0,
            seeds: 0,
            policy: "",
            worst_usage_pct: 0.0,
            p95_usage_pct: 0.0,
            p50_err_u: 0.0,
            p95_err_u: 0.0,
            max_err_u: 0.0,
            sqrt_k: 0.0,
            max_abs_diff: 0.0,
            max_abs_y: 0.0,
        };
        assert_eq!(serde_header(scale), schema::header(schema::SCALE));
        let rec = crate::report::size::RecRow {
            scenario: String::new(),
            param: String::new(),
            profile: String::new(),
            check: String::new(),
            shape: "",
            atol: None,
            rtol: None,
            flake_rate: 0.0,
            target_pct: 0.0,
            predicted_pct: None,
            predicted_upper_pct: None,
            tail_method: "",
            seeds: 0,
            seeds_needed_gpd: 0,
            seeds_needed_empirical: 0,
            binding_profile: String::new(),
            binding_check: String::new(),
            note: String::new(),
        };
        assert_eq!(serde_header(rec), schema::header(schema::RECOMMENDATIONS));
    }

    #[test]
    fn not_a_number_is_written_as_every_reader_parses_it() {
        let mut out = Vec::new();
        for x in [
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.25e-6,
        ] {
            float_into(x, &mut out);
            out.push(b' ');
        }
        assert_eq!(out, b"NaN NaN inf -inf 1.25e-06 ");
    }

    #[test]
    fn hand_written_rows_are_the_csv_writers_bytes() {
        // Floats from random bit patterns (NaN, infinities, subnormals, -0.0 among them) and
        // names that need quoting: the two writers must agree byte for byte.
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let specials = [
            f64::NAN,
            f64::INFINITY,
            -0.0,
            0.0,
            5e-324,
            1e16,
            9.999e15,
            1e-5,
            123.0,
        ];
        let metas = [
            meta([
                "deepspeed-tied-row-parallel",
                "35-3-False-0",
                "cpu-fma",
                "",
                "tied_grad",
            ]),
            meta(["a\"b", "x,y", "p\nq", "missing-allreduce", "c\r"]),
        ];
        // One memo for every round, as a worker keeps one: rounds that repeat some of the
        // round before's values take those from it.
        let mut memo = FloatMemo::default();
        let mut prev: Vec<SeedValues> = Vec::new();
        for round in 0..300 {
            let m = &metas[round % 2];
            let mut float = || {
                let r = next();
                match r % 4 {
                    0 => specials[(r >> 8) as usize % specials.len()],
                    1 => f64::from_bits(next()),
                    _ => (r >> 11) as f64 / (1u64 << 40) as f64 * 10f64.powi((r % 13) as i32 - 6),
                }
            };
            let res: Vec<SeedValues> = (0..m.entries())
                .map(|i| SeedValues {
                    usage_pct: float(),
                    max_abs_diff: float(),
                    worst_step: StepLabel {
                        step: i as u32 % 4,
                        micro: (i % 3 == 0).then_some(i as u32 % 2),
                    },
                    mismatched: i as u32 * 7,
                    elements: [670, 0, u32::MAX][i % 3],
                    nonfinite: i as u32 % 2,
                    max_abs_expected: float(),
                    theory_det_pct: float(),
                    theory_prob_pct: float(),
                })
                .collect();
            let mut res = res;
            if round % 3 == 1 {
                for (i, (r, p)) in res.iter_mut().zip(&prev).enumerate() {
                    match i % 4 {
                        0 => *r = *p,
                        1 => {
                            (r.max_abs_expected, r.theory_det_pct) =
                                (p.max_abs_expected, p.theory_det_pct)
                        }
                        2 => r.max_abs_diff = p.max_abs_diff,
                        _ => {}
                    }
                }
            }
            let seed = if round == 5 { u64::MAX } else { next() };
            let (mut fast, mut serde, mut memoized) = (Vec::new(), Vec::new(), Vec::new());
            seed_rows(m, seed, &res, &mut fast, &mut FloatMemo::default());
            seed_rows_serde(m, seed, &res, &mut serde).unwrap();
            seed_rows(m, seed, &res, &mut memoized, &mut memo);
            assert_eq!(
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&serde),
                "round {round}"
            );
            assert_eq!(
                String::from_utf8_lossy(&memoized),
                String::from_utf8_lossy(&serde),
                "round {round}, memoized"
            );
            prev = res;
        }
    }
}
