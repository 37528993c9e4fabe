//! The CSV codec of every table, derived from the column declarations of
//! [`crate::results::schema`]: one writer and one reader for all of them. `results/README.md`
//! documents every column with its type. Floats are written as Python's `repr` writes them
//! (shortest round-trip digits, `1.25e-06`, `inf`, `-inf`), except "not a number", which is
//! `NaN`: the spellings pandas, polars and DuckDB all read as floats with no options (polars
//! reads `nan` as text); columns declared [`Col::shortest`] as the `csv` crate writes an
//! `f64`. Fields are quoted as the `csv` crate quotes them (only when they hold a comma, a
//! quote or a line break; quotes doubled).
//!
//! Columns are read by header name: a file may order them otherwise, hold columns no table
//! declares (ignored), and lack the columns declared [`Col::optional_on_read`].

use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::check::comparison::Comparison;
#[cfg(doc)]
use crate::check::python_repr::py_repr;
use crate::check::{StepLabel, Tolerance};
use crate::engine::aggregate::{Caught, GroupAgg, SummaryEntry};
use crate::engine::evaluate::SeedValues;
use crate::engine::plan::GroupMeta;
use crate::results::schema::{
    Access, Col, MutantRow, PlanRow, Role, RowFamily, ScaleRow, SeedRow, Spelling, SummaryRow,
    ANY_CHECK, MUTANT_COLUMNS, PLAN_COLUMNS, SCALE_COLUMNS, SEED_COLUMNS, SUMMARY_COLUMNS,
};

/// One float field in Python spelling: [`py_repr`], except NaN, which is `NaN`.
pub fn float_into(x: f64, out: &mut Vec<u8>) {
    if x.is_nan() {
        out.extend_from_slice(b"NaN");
    } else {
        crate::check::python_repr::py_repr_into(x, out);
    }
}

/// One float field as the `csv` crate writes an `f64` (shortest round-trip digits, `ryu`).
fn float_shortest_into(x: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(ryu::Buffer::new().format(x).as_bytes());
}

/// The `micro_step` column of a step label: the micro-step, or -1 for a check made once
/// per optimizer step.
pub fn micro_step(l: StepLabel) -> i64 {
    l.micro.map_or(-1, i64::from)
}

/// `n` in decimal, as `Display` writes it.
#[inline]
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

/// `n` in decimal, with a leading `-` when negative.
fn signed(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    decimal(out, n.unsigned_abs());
}

/// One CSV field as the csv writer's default (`QuoteStyle::Necessary`) writes it: as is,
/// or in double quotes with inner quotes doubled when it holds `,`, `"`, `\r` or `\n`.
#[inline]
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

/// The last float [`write_row`] formatted per (slot, column), with its bytes, and per column
/// the one it formatted last. A worker keeps one memo for all the units it formats: most
/// float fields of a row repeat one formatted before (a check's policies share its |diff|
/// and |expected|; twin parametrizations report the same values), and those are copied
/// instead of formatted. An entry is used only when its value's bits are equal, and a
/// float's spelling is a function of its bits, so the bytes are the same whatever the memo
/// holds.
#[derive(Debug, Default)]
pub struct FloatMemo {
    /// `slots × columns` entries.
    entries: Vec<MemoEntry>,
    /// One entry per column: the last value formatted or copied there.
    last: Vec<MemoEntry>,
    columns: usize,
}

/// len 0 (the default): never a formatted value, so never taken.
#[derive(Debug, Clone, Copy, Default)]
struct MemoEntry {
    bits: u64,
    len: u8,
    bytes: [u8; 24],
}

impl MemoEntry {
    fn holds(&self, bits: u64) -> bool {
        self.len > 0 && self.bits == bits
    }
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
    fn keep(&mut self, bits: u64, s: &[u8]) {
        if s.len() <= self.bytes.len() {
            self.bits = bits;
            self.len = s.len() as u8;
            self.bytes[..s.len()].copy_from_slice(s);
        }
    }
}

impl FloatMemo {
    /// Room for `slots` slots of `columns` columns.
    fn fit(&mut self, slots: usize, columns: usize) {
        if self.columns != columns {
            *self = Self {
                columns,
                last: vec![MemoEntry::default(); columns],
                ..Self::default()
            };
        }
        if self.entries.len() < slots * columns {
            self.entries.resize(slots * columns, MemoEntry::default());
        }
    }

    /// Appends `x` in `spelling` to `out`: copied from slot `k`'s entry of column `col`, or
    /// from the column's last value, when either holds the same bits; formatted (and kept in
    /// both) otherwise.
    #[inline]
    fn write(&mut self, k: usize, col: usize, x: f64, spelling: Spelling, out: &mut Vec<u8>) {
        let bits = x.to_bits();
        let e = &mut self.entries[k * self.columns + col];
        if e.holds(bits) {
            out.extend_from_slice(e.bytes());
            self.last[col] = *e;
            return;
        }
        let last = &self.last[col];
        if last.holds(bits) {
            out.extend_from_slice(last.bytes());
            *e = *last;
            return;
        }
        let start = out.len();
        float_in(x, spelling, out);
        e.keep(bits, &out[start..]);
        self.last[col] = *e;
    }
}

/// One float in `spelling`.
fn float_in(x: f64, spelling: Spelling, out: &mut Vec<u8>) {
    match spelling {
        Spelling::Python => float_into(x, out),
        Spelling::Shortest => float_shortest_into(x, out),
    }
}

/// Appends one row (with `\n`) of the table `cols` to `out`, column by column as its
/// declaration says. `memo`: a worker's formatted floats and the row's slot (see
/// [`FloatMemo`]); without it every float is formatted.
pub fn write_row<F: RowFamily>(
    cols: &[Col<F>],
    row: &F::Row<'_>,
    out: &mut Vec<u8>,
    memo: Option<(&mut FloatMemo, usize)>,
) {
    write_fields(cols, 0..cols.len(), row, out, memo);
    out.push(b'\n');
}

/// Appends the fields of columns `range` of `row`, each after a comma but the first
/// column's: part of a row as [`write_row`] writes it.
fn write_fields<F: RowFamily>(
    cols: &[Col<F>],
    range: Range<usize>,
    row: &F::Row<'_>,
    out: &mut Vec<u8>,
    mut memo: Option<(&mut FloatMemo, usize)>,
) {
    for i in range {
        let c = &cols[i];
        if i > 0 {
            out.push(b',');
        }
        match c.access {
            Access::Str(get, _) => field(out, get(row)),
            Access::OptStr(get, _) => field(out, get(row).unwrap_or("")),
            Access::U64(get, _) => decimal(out, get(row)),
            Access::OptU64(get, _) => {
                if let Some(x) = get(row) {
                    decimal(out, x)
                }
            }
            Access::I64(get, _) => signed(out, get(row)),
            Access::Usize(get, _) => decimal(out, get(row) as u64),
            Access::U32(get, _) => decimal(out, u64::from(get(row))),
            Access::OptU32(get, _) => match get(row) {
                Some(x) => decimal(out, u64::from(x)),
                None => out.extend_from_slice(b"-1"),
            },
            Access::F64(get, _) => match memo.as_mut() {
                Some((m, k)) => m.write(*k, i, get(row), c.spelling, out),
                None => float_in(get(row), c.spelling, out),
            },
            Access::OptF64(get, _) => {
                if let Some(x) = get(row) {
                    float_in(x, c.spelling, out)
                }
            }
            Access::Bool(get, _) => {
                out.extend_from_slice(if get(row) { b"true" } else { b"false" })
            }
        }
    }
}

/// The header line of the table `cols` (with `\n`).
pub fn header<F: RowFamily>(cols: &[Col<F>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, c) in cols.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        field(&mut out, c.name);
    }
    out.push(b'\n');
    out
}

/// A whole table: its header and `rows`.
pub fn table<'s, 'a: 's, F: RowFamily>(
    cols: &[Col<F>],
    rows: impl IntoIterator<Item = &'s F::Row<'a>>,
) -> Vec<u8>
where
    F::Row<'a>: 's,
{
    let mut out = header(cols);
    for r in rows {
        write_row(cols, r, &mut out, None);
    }
    out
}

/// Sets column `c` of `row` from one CSV field, parsed as its declaration says; the error
/// says what the field holds and what the column allows.
fn set_field<'a, F: RowFamily>(c: &Col<F>, row: &mut F::Row<'a>, s: &'a str) -> Result<(), String> {
    let bad = |allowed: &str| format!("column {} holds `{s}`; allowed: {allowed}", c.name);
    let float = |s: &str| s.parse::<f64>().map_err(|_| bad("a float"));
    match c.access {
        Access::Str(_, set) => set(row, s),
        Access::OptStr(_, set) => set(row, (!s.is_empty()).then_some(s)),
        Access::U64(_, set) => set(row, s.parse().map_err(|_| bad("0..=18446744073709551615"))?),
        Access::OptU64(_, set) => set(
            row,
            match s {
                "" => None,
                _ => Some(
                    s.parse()
                        .map_err(|_| bad("empty or 0..=18446744073709551615"))?,
                ),
            },
        ),
        Access::I64(_, set) => set(row, s.parse().map_err(|_| bad("an integer"))?),
        Access::Usize(_, set) => set(row, s.parse().map_err(|_| bad("a count >= 0"))?),
        Access::U32(_, set) => set(row, s.parse().map_err(|_| bad("0..=4294967295"))?),
        Access::OptU32(_, set) => set(
            row,
            match s {
                "-1" => None,
                _ => Some(s.parse().map_err(|_| bad("-1 (none) or 0..=4294967295"))?),
            },
        ),
        Access::F64(_, set) => set(row, float(s)?),
        Access::OptF64(_, set) => set(
            row,
            match s {
                "" => None,
                _ => Some(float(s)?),
            },
        ),
        Access::Bool(_, set) => set(row, s.parse().map_err(|_| bad("true or false"))?),
    }
    Ok(())
}

/// Reads the CSV table `cols` at `path` in file order and calls `each(row, line, end)` for
/// every row: `line` its line number (2 for the first row after the header), `end` the byte
/// offset just after it. `each` returns whether to go on. Columns are found by header name
/// (see the module doc). A malformed row is an error naming the file and row, or with
/// `allow_partial` (the torn tail of an interrupted write) the end of the read.
pub fn read_rows<F: RowFamily>(
    cols: &[Col<F>],
    path: &Path,
    allow_partial: bool,
    mut each: impl FnMut(F::Row<'_>, usize, u64) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let mut r = ::csv::Reader::from_path(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let head = r
        .byte_headers()
        .with_context(|| format!("{}: cannot read the header", path.display()))?
        .clone();
    if head.is_empty() {
        // An empty file: no header, no rows.
        return Ok(());
    }
    let mut at: Vec<Option<usize>> = Vec::with_capacity(cols.len());
    for c in cols {
        let p = head.iter().position(|h| h == c.name.as_bytes());
        if p.is_none() && !c.optional_on_read {
            anyhow::bail!("{}: has no column `{}`", path.display(), c.name);
        }
        at.push(p);
    }
    let mut rec = ::csv::ByteRecord::new();
    let mut line = 1usize;
    loop {
        match r.read_byte_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) if allow_partial => break,
            Err(e) => anyhow::bail!("{}: row {}: {e}", path.display(), line + 1),
        }
        line += 1;
        let row = (|| -> Result<F::Row<'_>, String> {
            let mut row = F::Row::default();
            for (c, p) in cols.iter().zip(&at) {
                let Some(p) = *p else { continue };
                let raw = rec.get(p).ok_or_else(|| format!("no field {}", c.name))?;
                let s = std::str::from_utf8(raw)
                    .map_err(|_| format!("column {} is not UTF-8", c.name))?;
                set_field(c, &mut row, s)?;
            }
            Ok(row)
        })();
        let row = match row {
            Ok(row) => row,
            Err(_) if allow_partial => break,
            Err(e) => anyhow::bail!("{}: row {line}: {e}", path.display()),
        };
        if !each(row, line, r.position().byte())? {
            break;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// seeds.csv

/// The rows of one unit, in result order (check, then comparison, then policy), each
/// handed to `each` with its entry index.
pub fn unit_rows<'a>(
    meta: &'a GroupMeta,
    seed: u64,
    values: &[SeedValues],
    mut each: impl FnMut(usize, &SeedRow<'a>),
) {
    let mut k = 0;
    for check in &meta.checks {
        for comparison in Comparison::ALL {
            for policy in &meta.policies {
                let row = SeedRow {
                    scenario: &meta.scenario,
                    param: &meta.param,
                    profile: &meta.profile,
                    seed,
                    check,
                    comparison: comparison.name(),
                    policy,
                    mutant: (!meta.mutant.is_empty()).then_some(meta.mutant.as_str()),
                    values: values[k],
                };
                each(k, &row);
                k += 1;
            }
        }
    }
}

/// Appends one seed's `seeds.csv` rows (no header) to `out`: the bytes a [`SeedsWriter`]
/// writes; a sweep's workers format them. Written field by field without allocating once
/// `memo` has room for the group's entries (see [`FloatMemo`]); the leading columns that
/// identify the unit ([`Role::Unit`]: the group's names and the seed) are formatted once and
/// copied into every row.
pub fn seed_rows(
    meta: &GroupMeta,
    seed: u64,
    values: &[SeedValues],
    out: &mut Vec<u8>,
    memo: &mut FloatMemo,
) {
    let cols = SEED_COLUMNS;
    let lead = cols.iter().take_while(|c| c.role == Role::Unit).count();
    memo.fit(values.len(), cols.len());
    let mut prefix: Option<Range<usize>> = None;
    unit_rows(meta, seed, values, |k, row| {
        match &prefix {
            Some(p) => out.extend_from_within(p.clone()),
            None => {
                let start = out.len();
                write_fields(cols, 0..lead, row, out, None);
                prefix = Some(start..out.len());
            }
        }
        write_fields(cols, lead..cols.len(), row, out, Some((&mut *memo, k)));
        out.push(b'\n');
    });
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
            header: if append {
                None
            } else {
                Some(header(SEED_COLUMNS))
            },
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

/// A whole unit read back from a per-seed file.
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
        next: &SeedRow<'_>,
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
                        && m.mutant == next.mutant.unwrap_or("")
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
        let u = next.values.usage_pct;
        if u.is_nan() || u < 0.0 {
            return Err(bad(format!(
                "usage_pct {u} is not allowed; a usage is a number >= 0 or inf"
            )));
        }
        vals.push(next.values);
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
/// mid-write); otherwise every row must belong to a complete unit of the plan. Mutant
/// groups write no per-seed rows; a file holds the clean groups' units.
pub fn read_units(
    path: &Path,
    metas: &[GroupMeta],
    allow_partial: bool,
) -> anyhow::Result<Vec<UnitIn>> {
    let mut units = UnitCollector::new(path, metas, allow_partial);
    if path.extension().is_some_and(|e| e == "parquet") {
        let mut line = 0usize;
        crate::results::parquet::for_each_row(SEED_COLUMNS, path, |row| {
            line += 1;
            let n = line as u64;
            units.push(&row, line, || n)
        })?;
        return units.finish();
    }
    read_rows(SEED_COLUMNS, path, allow_partial, |row, line, end| {
        units.push(&row, line, || end)
    })?;
    units.finish()
}

// ---------------------------------------------------------------------------------------
// summary.csv, mutants.csv

/// The bytes of `summary.csv`: every clean group's entries, in group order (a mutant group
/// has no summary rows: `mutants.csv` says what it answers).
pub fn summary_csv(metas: &[GroupMeta], summaries: &[Vec<SummaryEntry>]) -> Vec<u8> {
    let mut rows = Vec::new();
    for (m, entries) in metas.iter().zip(summaries) {
        if !m.mutant.is_empty() {
            continue;
        }
        for e in entries {
            rows.push(SummaryRow {
                scenario: m.scenario.clone(),
                param: m.param.clone(),
                profile: m.profile.clone(),
                check: e.check.clone(),
                comparison: e.comparison.name().into(),
                policy: e.policy.clone(),
                atol: e.tolerance.atol,
                rtol: e.tolerance.rtol,
                seeds: e.seeds,
                failing_seeds: e.failing_seeds,
                worst_usage_pct: e.worst_usage,
                worst_seed: e.worst_seed,
                worst_step: e.worst_step,
                p50_usage_pct: e.p50_usage,
                p95_usage_pct: e.p95_usage,
                max_abs_diff: e.max_abs_diff,
                max_abs_expected: e.max_abs_expected,
                nonfinite_seeds: e.nonfinite_seeds,
                mutant: None,
                quantile_method: e.quantile_method.into(),
                tail_method: match e.tail.as_ref().map(|t| t.method) {
                    Some(crate::stats::tail::TailMethod::Gpd) => "gpd",
                    _ => "empirical",
                }
                .into(),
                tail: [0, 1, 2].map(|i| tail_at(e, i)),
                theory_det_usage_pct: e.theory_det,
                theory_prob_usage_pct: e.theory_prob,
                seeds_with_flips: e.flip_seeds.map(|n| n as u64),
            });
        }
    }
    table(SUMMARY_COLUMNS, &rows)
}

/// (value, lo, hi) of the i-th tail point, NaN when there is none.
fn tail_at(e: &SummaryEntry, i: usize) -> (f64, f64, f64) {
    match e.tail.as_ref().and_then(|t| t.points.get(i)) {
        Some(p) => (p.value, p.lo, p.hi),
        None => (f64::NAN, f64::NAN, f64::NAN),
    }
}

/// A `mutants.csv` row of group `m` from `c`.
fn mutant_row(
    m: &GroupMeta,
    seeds: usize,
    check: &str,
    cmp: Comparison,
    policy: &str,
    c: Caught,
) -> MutantRow {
    MutantRow {
        mutant: m.mutant.clone(),
        scenario: m.scenario.clone(),
        param: m.param.clone(),
        profile: m.profile.clone(),
        check: check.into(),
        comparison: cmp.name().into(),
        policy: policy.into(),
        detected_seeds: c.detected,
        seeds,
        first_detected_seed: c.first,
        min_usage_pct: c.min_usage,
        max_usage_pct: c.max_usage,
    }
}

/// The bytes of `mutants.csv`: every mutant group with seeds, in group order: its entries
/// (check × comparison × policy), then per policy the checks of the asserted comparison
/// together ([`ANY_CHECK`]).
pub fn mutants_csv(metas: &[GroupMeta], aggs: &[GroupAgg]) -> Vec<u8> {
    let mut rows = Vec::new();
    for (m, a) in metas.iter().zip(aggs) {
        if m.mutant.is_empty() || a.seeds == 0 {
            continue;
        }
        let mut k = 0;
        for check in &m.checks {
            for cmp in Comparison::ALL {
                for policy in &m.policies {
                    rows.push(mutant_row(
                        m,
                        a.seeds,
                        check,
                        cmp,
                        policy,
                        a.entry_caught(k),
                    ));
                    k += 1;
                }
            }
        }
        for (p, policy) in m.policies.iter().enumerate() {
            rows.push(mutant_row(
                m,
                a.seeds,
                ANY_CHECK,
                m.asserted,
                policy,
                a.any_caught(p),
            ));
        }
    }
    table(MUTANT_COLUMNS, &rows)
}

/// One mutant group's part of a `mutants.csv`: its seeds, and per entry and per policy how
/// it is caught ([`GroupAgg::merge_caught`] takes them).
#[derive(Debug, Clone, PartialEq)]
pub struct MutantPart {
    /// Seeds evaluated.
    pub seeds: usize,
    /// Per entry (check × comparison × policy).
    pub entries: Vec<Caught>,
    /// Per policy: the checks of the asserted comparison together.
    pub any: Vec<Caught>,
}

/// Reads a `mutants.csv` against the plan: per group, its part when the file holds one
/// (`None` for clean groups and for mutant groups without seeds there). Every row must be
/// where [`mutants_csv`] writes it; anything else is an error naming the file and row.
pub fn read_mutants(path: &Path, metas: &[GroupMeta]) -> anyhow::Result<Vec<Option<MutantPart>>> {
    let mut out: Vec<Option<MutantPart>> = vec![None; metas.len()];
    let mut cur: Option<usize> = None;
    read_rows(MUTANT_COLUMNS, path, false, |r, line, _| {
        let bad = |what: String| anyhow::anyhow!("{}: row {line}: {what}", path.display());
        let same = |m: &GroupMeta| {
            (&m.mutant, &m.scenario, &m.param, &m.profile)
                == (&r.mutant, &r.scenario, &r.param, &r.profile)
        };
        let gi = match cur.filter(|&g| same(&metas[g])) {
            Some(g) => g,
            None => {
                let g = metas
                    .iter()
                    .position(|m| !m.mutant.is_empty() && same(m))
                    .ok_or_else(|| bad("row of a mutant group that is not in the plan".into()))?;
                if out[g].is_some() {
                    return Err(bad("a second block of rows of one mutant group".into()));
                }
                out[g] = Some(MutantPart {
                    seeds: r.seeds,
                    entries: Vec::new(),
                    any: Vec::new(),
                });
                cur = Some(g);
                g
            }
        };
        let m = &metas[gi];
        let part = out[gi].as_mut().expect("made above");
        let c = Caught {
            detected: r.detected_seeds,
            first: r.first_detected_seed,
            min_usage: r.min_usage_pct,
            max_usage: r.max_usage_pct,
        };
        let k = part.entries.len();
        let (check, cmp, policy) = if k < m.entries() {
            let np = m.policies.len();
            let ci = (k / np) % Comparison::ALL.len();
            (
                m.checks[k / (np * Comparison::ALL.len())].as_str(),
                Comparison::ALL[ci],
                m.policies[k % np].as_str(),
            )
        } else if part.any.len() < m.policies.len() {
            (ANY_CHECK, m.asserted, m.policies[part.any.len()].as_str())
        } else {
            return Err(bad("more rows than the group's checks and policies".into()));
        };
        if (r.check.as_str(), r.comparison.as_str(), r.policy.as_str())
            != (check, cmp.name(), policy)
            || r.seeds != part.seeds
            || r.detected_seeds > r.seeds
        {
            return Err(bad(format!(
                "expected {check} {} {policy} of {} seeds",
                cmp.name(),
                part.seeds
            )));
        }
        if k < m.entries() {
            part.entries.push(c);
        } else {
            part.any.push(c);
        }
        Ok(true)
    })?;
    for (gi, part) in out.iter().enumerate() {
        if let Some(p) = part {
            let m = &metas[gi];
            if p.entries.len() != m.entries() || p.any.len() != m.policies.len() {
                anyhow::bail!(
                    "{}: the rows of {} {} {} {} end early (a truncated file)",
                    path.display(),
                    m.scenario,
                    m.param,
                    m.profile,
                    m.mutant
                );
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// plan.csv

/// The bytes of `plan.csv`.
pub fn plan_csv(metas: &[GroupMeta], seeds: &[Range<u64>]) -> Vec<u8> {
    let mut rows = Vec::new();
    for (m, r) in metas.iter().zip(seeds) {
        for (c, check) in m.checks.iter().enumerate() {
            for comparison in Comparison::ALL {
                for (p, policy) in m.policies.iter().enumerate() {
                    rows.push(PlanRow {
                        scenario: m.scenario.clone(),
                        param: m.param.clone(),
                        profile: m.profile.clone(),
                        mutant: (!m.mutant.is_empty()).then(|| m.mutant.clone()),
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
    table(PLAN_COLUMNS, &rows)
}

/// Reads `plan.csv`: the groups and their seed slices, in plan order.
pub fn read_plan(path: &Path) -> anyhow::Result<Vec<(GroupMeta, Range<u64>)>> {
    let mut out: Vec<(GroupMeta, Range<u64>)> = Vec::new();
    read_rows(PLAN_COLUMNS, path, false, |row, line, _| {
        let bad = |what: &str| anyhow::anyhow!("{}: row {line}: {what}", path.display());
        let asserted =
            Comparison::parse(&row.asserted).ok_or_else(|| bad("unknown asserted comparison"))?;
        let mutant = row.mutant.clone().unwrap_or_default();
        let key = (&row.scenario, &row.param, &row.profile, &mutant);
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
                    mutant,
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
                Tolerance {
                    atol: 0.0,
                    rtol: 0.0,
                },
            );
        }
        m.tolerances[p][c] = Tolerance {
            atol: row.atol,
            rtol: row.rtol,
        };
        Ok(true)
    })?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// scale.csv

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
                profile: profile.into(),
                k: pt.k,
                tp: pt.tp,
                seeds: pt.seeds,
                policy: policy.clone(),
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
    Ok(table(SCALE_COLUMNS, &rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::schema::{
        self, MutantRows, PlanRows, RecRow, RecRows, ScaleRows, SummaryRows, RECOMMENDATION_COLUMNS,
    };

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

    /// The header every table writes is the declared columns' names.
    #[test]
    fn every_table_writes_the_declared_header() {
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        assert_eq!(text(header(SEED_COLUMNS)), schema::header(schema::SEEDS));
        assert_eq!(
            text(header(SUMMARY_COLUMNS)),
            schema::header(schema::SUMMARY)
        );
        assert_eq!(
            text(header(MUTANT_COLUMNS)),
            schema::header(schema::MUTANTS)
        );
        assert_eq!(text(header(PLAN_COLUMNS)), schema::header(schema::PLAN));
        assert_eq!(text(header(SCALE_COLUMNS)), schema::header(schema::SCALE));
        assert_eq!(
            text(header(RECOMMENDATION_COLUMNS)),
            schema::header(schema::RECOMMENDATIONS)
        );
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

    /// The definition of a row's bytes: every field formatted on its own (strings as they
    /// are, integers by `Display`, floats by [`float_into`] or `ryu`) and written by the
    /// `csv` crate, which does the quoting.
    fn by_the_csv_crate<F: RowFamily>(cols: &[Col<F>], row: &F::Row<'_>) -> Vec<u8> {
        let fields: Vec<Vec<u8>> = cols
            .iter()
            .map(|c| {
                let mut f = Vec::new();
                let float = |x: f64, f: &mut Vec<u8>| match c.spelling {
                    Spelling::Python => float_into(x, f),
                    Spelling::Shortest => {
                        f.extend_from_slice(ryu::Buffer::new().format(x).as_bytes())
                    }
                };
                match c.access {
                    Access::Str(g, _) => f.extend_from_slice(g(row).as_bytes()),
                    Access::OptStr(g, _) => f.extend_from_slice(g(row).unwrap_or("").as_bytes()),
                    Access::U64(g, _) => f.extend_from_slice(g(row).to_string().as_bytes()),
                    Access::OptU64(g, _) => {
                        if let Some(x) = g(row) {
                            f.extend_from_slice(x.to_string().as_bytes())
                        }
                    }
                    Access::I64(g, _) => f.extend_from_slice(g(row).to_string().as_bytes()),
                    Access::Usize(g, _) => f.extend_from_slice(g(row).to_string().as_bytes()),
                    Access::U32(g, _) => f.extend_from_slice(g(row).to_string().as_bytes()),
                    Access::OptU32(g, _) => {
                        f.extend_from_slice(g(row).map_or(-1, i64::from).to_string().as_bytes())
                    }
                    Access::F64(g, _) => float(g(row), &mut f),
                    Access::OptF64(g, _) => {
                        if let Some(x) = g(row) {
                            float(x, &mut f)
                        }
                    }
                    Access::Bool(g, _) => f.extend_from_slice(g(row).to_string().as_bytes()),
                }
                f
            })
            .collect();
        let mut w = ::csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        w.write_record(&fields).unwrap();
        w.into_inner().unwrap()
    }

    #[test]
    fn rows_are_the_csv_crates_bytes_with_or_without_the_memo() {
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
            let mut res: Vec<SeedValues> = (0..m.entries())
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
                    routing_flips: [None, Some(0), Some(i as u64 * 3), Some(u64::MAX - 1)][i % 4],
                })
                .collect();
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
            let mut want = Vec::new();
            unit_rows(m, seed, &res, |_, row| {
                want.extend(by_the_csv_crate(SEED_COLUMNS, row))
            });
            let (mut fast, mut memoized) = (Vec::new(), Vec::new());
            seed_rows(m, seed, &res, &mut fast, &mut FloatMemo::default());
            seed_rows(m, seed, &res, &mut memoized, &mut memo);
            assert_eq!(
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&want),
                "round {round}"
            );
            assert_eq!(
                String::from_utf8_lossy(&memoized),
                String::from_utf8_lossy(&want),
                "round {round}, memoized"
            );
            prev = res;
        }
    }

    /// Every table's rows read back as written, and are written as the `csv` crate writes
    /// their fields.
    #[test]
    fn every_table_reads_back_what_it_writes() {
        fn round_trip<F: RowFamily>(cols: &[Col<F>], rows: &[F::Row<'static>])
        where
            for<'a> F::Row<'a>: std::fmt::Debug,
        {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.csv");
            let bytes = table(cols, rows);
            let mut want = header(cols);
            for r in rows {
                want.extend(by_the_csv_crate(cols, r));
            }
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                String::from_utf8_lossy(&want)
            );
            std::fs::write(&path, &bytes).unwrap();
            let mut back = Vec::new();
            read_rows(cols, &path, false, |row, _, _| {
                back.push(format!("{row:?}"));
                Ok(true)
            })
            .unwrap();
            let orig: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
            assert_eq!(back, orig);
        }
        let summary = SummaryRow {
            scenario: "a,\"b\"".into(),
            worst_step: StepLabel::micro(2, 1),
            // 1e-2 has no interval columns.
            tail: [
                (f64::INFINITY, 0.0, 0.0),
                (-0.0, 1e-300, 3.5),
                (0.1, 0.2, 0.3),
            ],
            quantile_method: "exact".into(),
            ..Default::default()
        };
        round_trip::<SummaryRows>(SUMMARY_COLUMNS, &[summary.clone(), SummaryRow::default()]);
        let mutant = MutantRow {
            mutant: "missing-allreduce".into(),
            check: ANY_CHECK.into(),
            first_detected_seed: Some(8173),
            min_usage_pct: 1e-7,
            max_usage_pct: f64::INFINITY,
            ..Default::default()
        };
        round_trip::<MutantRows>(MUTANT_COLUMNS, &[mutant, MutantRow::default()]);
        let plan = PlanRow {
            mutant: Some("m".into()),
            seed_dependent: true,
            atol: 1e-6,
            rtol: 0.00001,
            ..Default::default()
        };
        round_trip::<PlanRows>(PLAN_COLUMNS, &[plan, PlanRow::default()]);
        round_trip::<ScaleRows>(SCALE_COLUMNS, &[ScaleRow::default()]);
        let rec = RecRow {
            atol: Some(2.8e-5),
            rtol: None,
            target_pct: 50.0,
            note: "why, \"this\"".into(),
            ..Default::default()
        };
        round_trip::<RecRows>(RECOMMENDATION_COLUMNS, &[rec, RecRow::default()]);
    }

    #[test]
    fn a_missing_optional_column_reads_as_the_default_and_a_missing_required_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        // An old summary: no micro-step, tail or theory columns, and one extra column.
        std::fs::write(
            &path,
            "extra,scenario,param,profile,check,comparison,policy,atol,rtol,seeds,failing_seeds,worst_usage_pct,worst_seed,worst_step,p50_usage_pct,p95_usage_pct,max_abs_diff,max_abs_expected,nonfinite_seeds,quantile_method\n\
             x,s,p,f,c,sharded-vs-ref,old,1e-06,1e-05,3,1,inf,7,2,0.0,inf,inf,1.0,1,exact\n",
        )
        .unwrap();
        let mut rows = Vec::new();
        read_rows(SUMMARY_COLUMNS, &path, false, |r, _, _| {
            rows.push(r);
            Ok(true)
        })
        .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].worst_step, StepLabel::step(2));
        assert_eq!((rows[0].worst_seed, rows[0].seeds), (7, 3));
        assert!(rows[0].mutant.is_none());
        std::fs::write(&path, "scenario\ns\n").unwrap();
        let e = read_rows(SUMMARY_COLUMNS, &path, false, |_, _, _| Ok(true)).unwrap_err();
        assert!(e.to_string().contains("has no column `param`"), "{e}");
    }
}
