//! The one declaration of every table seedsweep writes. Each file's columns are listed once,
//! in file order, as column descriptors ([`Col`]): the name, how a row holds the value (its
//! Rust type, a getter and a setter: [`Access`]), and from that the type a reader gets
//! ([`ColType`]), the CSV spelling, whether the value may be none, and for `seeds.csv`
//! whether the value is measured per entry (what the binary row log stores) or identifies the
//! row (what `plan.csv` already says). Every codec is derived from these lists:
//!
//! - the CSV writer and reader ([`crate::results::csv`]): header, fields, parsing;
//! - the Parquet schema, writer and reader of the per-seed table ([`crate::results::parquet`]);
//! - the binary row log of a running Parquet sweep ([`crate::results::rowlog`]);
//! - the HTML report's readers of `summary.csv`, `mutants.csv` and `recommendations.csv`
//!   ([`crate::report::html`]);
//! - `results/README.md` documents each column with the type named here, and
//!   `scripts/check_tables.py` reads these lists; tests check both.
//!
//! Adding a column to a table is one entry in its list (and, for `seeds.csv`, the field in
//! [`SeedValues`] the engine computes).
//!
//! How a value is written, per type (CSV):
//! - [`ColType::Str`]: as is (quoted when it holds a comma, a quote or a line break);
//! - [`ColType::OptStr`]: a string, or an empty field for "none" (Parquet: null);
//! - [`ColType::UInt`], [`ColType::Int`]: decimal digits (a leading `-` for `Int`; a
//!   micro-step column writes `-1` for "none");
//! - [`ColType::OptUInt`]: decimal digits, or an empty field for "none";
//! - [`ColType::Float`]: Python's `repr` digits, `NaN` for "not available", `inf` / `-inf`;
//!   the spellings pandas, polars and DuckDB all read as a float with no options (columns
//!   marked [`Col::shortest`] are written as the `csv` crate writes an `f64`: shortest
//!   round-trip digits, `1e-6`, `0.00001`);
//! - [`ColType::OptFloat`]: a float, or an empty field for "none";
//! - [`ColType::Bool`]: `true` or `false`.

use crate::check::StepLabel;
use crate::engine::evaluate::SeedValues;

/// The type of one column, as a reader of the file sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    /// A string.
    Str,
    /// A string, or none (empty in CSV, null in Parquet).
    OptStr,
    /// An unsigned 64-bit integer.
    UInt,
    /// An unsigned 64-bit integer, or none (an empty field).
    OptUInt,
    /// A signed 64-bit integer.
    Int,
    /// A 64-bit float (`NaN`, `inf`, `-inf` allowed).
    Float,
    /// A 64-bit float, or none (an empty field).
    OptFloat,
    /// `true` or `false`.
    Bool,
}

impl ColType {
    /// The name `results/README.md` uses for the type.
    pub const fn name(self) -> &'static str {
        match self {
            ColType::Str => "string",
            ColType::OptStr => "string or empty",
            ColType::UInt => "uint64",
            ColType::OptUInt => "uint64 or empty",
            ColType::Int => "int64",
            ColType::Float => "float64",
            ColType::OptFloat => "float64 or empty",
            ColType::Bool => "bool",
        }
    }

    /// Whether `field` (one CSV field, unquoted) is a value of this type.
    pub fn accepts(self, field: &str) -> bool {
        let float = |s: &str| {
            // Rust's parser also takes `infinity` and `+1`; the writers never produce those,
            // so only the spellings the readers share are accepted.
            matches!(s, "NaN" | "inf" | "-inf")
                || (!s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_digit() || b"+-.e".contains(&b))
                    && s.bytes().any(|b| b.is_ascii_digit())
                    && s.parse::<f64>().is_ok_and(f64::is_finite))
        };
        let uint = |s: &str| s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u64>().is_ok();
        match self {
            ColType::Str => true,
            ColType::OptStr => true,
            ColType::UInt => uint(field),
            ColType::OptUInt => field.is_empty() || uint(field),
            ColType::Int => {
                field
                    .trim_start_matches('-')
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                    && field.parse::<i64>().is_ok()
            }
            ColType::Float => float(field),
            ColType::OptFloat => field.is_empty() || float(field),
            ColType::Bool => matches!(field, "true" | "false"),
        }
    }
}

/// A family of row types: one table's row, borrowing its strings for `'a` where it can
/// (`seeds.csv`'s rows are written and read by the hundred million, so they borrow; the
/// other tables' rows own theirs).
pub trait RowFamily: 'static {
    /// One row.
    type Row<'a>: Default;
}

/// How a row holds one column's value: its Rust type, a getter and a setter. The variant
/// decides the column's [`ColType`], its CSV spelling, its Parquet type and its row-log
/// width.
pub enum Access<F: RowFamily + ?Sized> {
    /// A string ([`ColType::Str`]).
    Str(
        for<'r, 'a> fn(&'r F::Row<'a>) -> &'r str,
        for<'a> fn(&mut F::Row<'a>, &'a str),
    ),
    /// A string or none ([`ColType::OptStr`]).
    OptStr(
        for<'r, 'a> fn(&'r F::Row<'a>) -> Option<&'r str>,
        for<'a> fn(&mut F::Row<'a>, Option<&'a str>),
    ),
    /// A `u64` ([`ColType::UInt`]).
    U64(
        for<'r, 'a> fn(&'r F::Row<'a>) -> u64,
        for<'a> fn(&mut F::Row<'a>, u64),
    ),
    /// A `u64` or none ([`ColType::OptUInt`]).
    OptU64(
        for<'r, 'a> fn(&'r F::Row<'a>) -> Option<u64>,
        for<'a> fn(&mut F::Row<'a>, Option<u64>),
    ),
    /// An `i64` ([`ColType::Int`]).
    I64(
        for<'r, 'a> fn(&'r F::Row<'a>) -> i64,
        for<'a> fn(&mut F::Row<'a>, i64),
    ),
    /// A count (`usize`, never negative; [`ColType::Int`]).
    Usize(
        for<'r, 'a> fn(&'r F::Row<'a>) -> usize,
        for<'a> fn(&mut F::Row<'a>, usize),
    ),
    /// A `u32` ([`ColType::Int`]; 4 bytes in the row log).
    U32(
        for<'r, 'a> fn(&'r F::Row<'a>) -> u32,
        for<'a> fn(&mut F::Row<'a>, u32),
    ),
    /// A `u32` or none, written `-1` ([`ColType::Int`]; a micro-step).
    OptU32(
        for<'r, 'a> fn(&'r F::Row<'a>) -> Option<u32>,
        for<'a> fn(&mut F::Row<'a>, Option<u32>),
    ),
    /// An `f64` ([`ColType::Float`]).
    F64(
        for<'r, 'a> fn(&'r F::Row<'a>) -> f64,
        for<'a> fn(&mut F::Row<'a>, f64),
    ),
    /// An `f64` or none ([`ColType::OptFloat`]).
    OptF64(
        for<'r, 'a> fn(&'r F::Row<'a>) -> Option<f64>,
        for<'a> fn(&mut F::Row<'a>, Option<f64>),
    ),
    /// A `bool` ([`ColType::Bool`]).
    Bool(
        for<'r, 'a> fn(&'r F::Row<'a>) -> bool,
        for<'a> fn(&mut F::Row<'a>, bool),
    ),
}

impl<F: RowFamily + ?Sized> Clone for Access<F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F: RowFamily + ?Sized> Copy for Access<F> {}

/// What a column of `seeds.csv` holds: how the codecs of the per-seed table treat it (the
/// other tables' columns are all [`Role::Key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Identifies the row.
    Key,
    /// Identifies the unit (a group at one seed): the same on every row of the unit, so the
    /// CSV writer formats the leading run of such columns once per unit.
    Unit,
    /// A value measured per entry (check × comparison × policy of one seed): what the binary
    /// row log stores (the other columns come from the plan, the entry's place and the seed).
    Entry,
}

/// How a float column is spelled in CSV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// Python's `repr` digits (`1e-06`, `1e+16`), `NaN`, `inf`: the measured tables.
    Python,
    /// Shortest round-trip digits as the `csv` crate writes an `f64` (`1e-6`, `0.00001`,
    /// `50.0`): tolerances as configured, and `recommendations.csv`.
    Shortest,
}

/// One column: its name, how rows hold it, and what it is for the codecs.
pub struct Col<F: RowFamily + ?Sized> {
    /// The header name.
    pub name: &'static str,
    /// The value's Rust type with its getter and setter.
    pub access: Access<F>,
    /// What the column holds, for the per-seed table's codecs.
    pub role: Role,
    /// A reader accepts a file without this column (written before the column existed, or
    /// not needed by the readers), leaving the row's default.
    pub optional_on_read: bool,
    /// How a float column is spelled in CSV.
    pub spelling: Spelling,
}

impl<F: RowFamily + ?Sized> Clone for Col<F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F: RowFamily + ?Sized> Copy for Col<F> {}

impl<F: RowFamily + ?Sized> Col<F> {
    /// A column read and written as `access` says, in Python spelling, required on read.
    pub const fn new(name: &'static str, access: Access<F>) -> Self {
        Self {
            name,
            access,
            role: Role::Key,
            optional_on_read: false,
            spelling: Spelling::Python,
        }
    }

    /// Marks a measured per-entry value ([`Role::Entry`]).
    pub const fn entry(mut self) -> Self {
        self.role = Role::Entry;
        self
    }

    /// Marks a column that identifies the unit ([`Role::Unit`]).
    pub const fn unit(mut self) -> Self {
        self.role = Role::Unit;
        self
    }

    /// Marks a column a reader may find missing (see [`Col::optional_on_read`]).
    pub const fn optional_on_read(mut self) -> Self {
        self.optional_on_read = true;
        self
    }

    /// Floats spelled as the `csv` crate writes them ([`Spelling::Shortest`]).
    pub const fn shortest(mut self) -> Self {
        self.spelling = Spelling::Shortest;
        self
    }

    /// The type a reader of the file gets.
    pub const fn ty(&self) -> ColType {
        match self.access {
            Access::Str(..) => ColType::Str,
            Access::OptStr(..) => ColType::OptStr,
            Access::U64(..) => ColType::UInt,
            Access::OptU64(..) => ColType::OptUInt,
            Access::I64(..) | Access::Usize(..) | Access::U32(..) | Access::OptU32(..) => {
                ColType::Int
            }
            Access::F64(..) => ColType::Float,
            Access::OptF64(..) => ColType::OptFloat,
            Access::Bool(..) => ColType::Bool,
        }
    }
}

// Short constructors for the declarations below: one line per column.

const fn str<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> &'r str,
    set: for<'a> fn(&mut F::Row<'a>, &'a str),
) -> Col<F> {
    Col::new(name, Access::Str(get, set))
}
const fn opt_str<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> Option<&'r str>,
    set: for<'a> fn(&mut F::Row<'a>, Option<&'a str>),
) -> Col<F> {
    Col::new(name, Access::OptStr(get, set))
}
const fn uint<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> u64,
    set: for<'a> fn(&mut F::Row<'a>, u64),
) -> Col<F> {
    Col::new(name, Access::U64(get, set))
}
const fn opt_uint<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> Option<u64>,
    set: for<'a> fn(&mut F::Row<'a>, Option<u64>),
) -> Col<F> {
    Col::new(name, Access::OptU64(get, set))
}
const fn count<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> usize,
    set: for<'a> fn(&mut F::Row<'a>, usize),
) -> Col<F> {
    Col::new(name, Access::Usize(get, set))
}
const fn u32_<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> u32,
    set: for<'a> fn(&mut F::Row<'a>, u32),
) -> Col<F> {
    Col::new(name, Access::U32(get, set))
}
const fn micro<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> Option<u32>,
    set: for<'a> fn(&mut F::Row<'a>, Option<u32>),
) -> Col<F> {
    Col::new(name, Access::OptU32(get, set))
}
const fn float<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> f64,
    set: for<'a> fn(&mut F::Row<'a>, f64),
) -> Col<F> {
    Col::new(name, Access::F64(get, set))
}
const fn opt_float<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> Option<f64>,
    set: for<'a> fn(&mut F::Row<'a>, Option<f64>),
) -> Col<F> {
    Col::new(name, Access::OptF64(get, set))
}
const fn boolean<F: RowFamily>(
    name: &'static str,
    get: for<'r, 'a> fn(&'r F::Row<'a>) -> bool,
    set: for<'a> fn(&mut F::Row<'a>, bool),
) -> Col<F> {
    Col::new(name, Access::Bool(get, set))
}

// ---------------------------------------------------------------------------------------
// seeds.csv, seeds.parquet, seeds.bin.partial

/// One row of the per-seed table: one seed × check × comparison × policy of a clean group.
/// `values.usage_pct` is the value the summary aggregates, so reading the file back
/// reproduces the summary exactly.
#[derive(Debug, Clone, Copy)]
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
    /// The injected bug; none for the clean run (mutant groups write no per-seed rows).
    pub mutant: Option<&'a str>,
    /// The measured values.
    pub values: SeedValues,
}

impl Default for SeedRow<'_> {
    /// Empty names, zeros, and theory columns "not available" (NaN), which is what a file
    /// written before those columns existed reads as.
    fn default() -> Self {
        Self {
            scenario: "",
            param: "",
            profile: "",
            seed: 0,
            check: "",
            comparison: "",
            policy: "",
            mutant: None,
            values: SeedValues {
                theory_det_pct: f64::NAN,
                theory_prob_pct: f64::NAN,
                ..SeedValues::default()
            },
        }
    }
}

/// The rows of the per-seed table.
pub struct SeedRows;
impl RowFamily for SeedRows {
    type Row<'a> = SeedRow<'a>;
}

/// `seeds.csv`, `seeds.parquet` and (its entry columns) `seeds.bin.partial`.
pub const SEED_COLUMNS: &[Col<SeedRows>] = &[
    str::<SeedRows>("scenario", |r| r.scenario, |r, s| r.scenario = s).unit(),
    str::<SeedRows>("param", |r| r.param, |r, s| r.param = s).unit(),
    str::<SeedRows>("profile", |r| r.profile, |r, s| r.profile = s).unit(),
    uint::<SeedRows>("seed", |r| r.seed, |r, x| r.seed = x).unit(),
    str("check", |r| r.check, |r, s| r.check = s),
    str("comparison", |r| r.comparison, |r, s| r.comparison = s),
    str("policy", |r| r.policy, |r, s| r.policy = s),
    float::<SeedRows>(
        "usage_pct",
        |r| r.values.usage_pct,
        |r, x| r.values.usage_pct = x,
    )
    .entry(),
    float::<SeedRows>(
        "max_abs_diff",
        |r| r.values.max_abs_diff,
        |r, x| r.values.max_abs_diff = x,
    )
    .entry(),
    u32_::<SeedRows>(
        "step",
        |r| r.values.worst_step.step,
        |r, x| r.values.worst_step.step = x,
    )
    .entry(),
    micro::<SeedRows>(
        "micro_step",
        |r| r.values.worst_step.micro,
        |r, x| r.values.worst_step.micro = x,
    )
    .entry(),
    u32_::<SeedRows>(
        "mismatched",
        |r| r.values.mismatched,
        |r, x| r.values.mismatched = x,
    )
    .entry(),
    u32_::<SeedRows>(
        "elements",
        |r| r.values.elements,
        |r, x| r.values.elements = x,
    )
    .entry(),
    u32_::<SeedRows>(
        "nonfinite",
        |r| r.values.nonfinite,
        |r, x| r.values.nonfinite = x,
    )
    .entry(),
    float::<SeedRows>(
        "max_abs_expected",
        |r| r.values.max_abs_expected,
        |r, x| r.values.max_abs_expected = x,
    )
    .entry(),
    opt_str::<SeedRows>("mutant", |r| r.mutant, |r, s| r.mutant = s)
        .unit()
        .optional_on_read(),
    float::<SeedRows>(
        "theory_det_pct",
        |r| r.values.theory_det_pct,
        |r, x| r.values.theory_det_pct = x,
    )
    .entry()
    .optional_on_read(),
    float::<SeedRows>(
        "theory_prob_pct",
        |r| r.values.theory_prob_pct,
        |r, x| r.values.theory_prob_pct = x,
    )
    .entry()
    .optional_on_read(),
    opt_uint::<SeedRows>(
        "routing_flips",
        |r| r.values.routing_flips,
        |r, x| r.values.routing_flips = x,
    )
    .entry()
    .optional_on_read(),
];

// ---------------------------------------------------------------------------------------
// summary.csv

/// One row of `summary.csv`: one check × comparison × policy of a clean group over all its
/// seeds.
#[derive(Debug, Clone, Default)]
pub struct SummaryRow {
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Numerics profile spec.
    pub profile: String,
    /// Check name.
    pub check: String,
    /// Comparison.
    pub comparison: String,
    /// Tolerance policy.
    pub policy: String,
    /// The check's atol under the policy.
    pub atol: f64,
    /// The check's rtol under the policy.
    pub rtol: f64,
    /// Seeds evaluated.
    pub seeds: usize,
    /// Seeds whose usage exceeds 100 %.
    pub failing_seeds: usize,
    /// Largest usage over seeds, percent.
    pub worst_usage_pct: f64,
    /// First seed (in seed order) reaching the largest usage.
    pub worst_seed: u64,
    /// Its step and micro-step.
    pub worst_step: StepLabel,
    /// Median usage over seeds, percent (linear interpolation).
    pub p50_usage_pct: f64,
    /// 95th-percentile usage over seeds, percent (linear interpolation).
    pub p95_usage_pct: f64,
    /// Largest |actual - expected| over all seeds and steps.
    pub max_abs_diff: f64,
    /// Largest |expected| over all seeds and steps.
    pub max_abs_expected: f64,
    /// Seeds with a NaN/infinity mismatch.
    pub nonfinite_seeds: usize,
    /// The injected bug: none (mutant groups are in `mutants.csv`).
    pub mutant: Option<String>,
    /// `exact` (every usage kept) or `histogram` (`--summary-only`: 0.23 % log bins).
    pub quantile_method: String,
    /// `gpd` (peaks over threshold, generalized Pareto fit accepted by Anderson–Darling) or
    /// `empirical` (too few seeds, an infinite usage, or the fit rejected).
    pub tail_method: String,
    /// Usage exceeded with probability 1e-2, 1e-3, 1e-4 per seed (predicted), percent,
    /// each with its 95 % interval (NaN where there is none; 1e-2 has no interval).
    pub tail: [(f64, f64, f64); 3],
    /// Matmul-like checks: largest usage over seeds of the deterministic bound γ_n·Σ|a·b|.
    pub theory_det_usage_pct: f64,
    /// Matmul-like checks: largest usage over seeds of Higham & Mary's probabilistic bound
    /// λ·√n·u·Σ|a·b| at per-seed failure probability 1e-4.
    pub theory_prob_usage_pct: f64,
    /// Seeds whose `routing_flips` in `seeds.csv` is above 0; none for a scenario without a
    /// moe layer.
    pub seeds_with_flips: Option<u64>,
}

/// The rows of `summary.csv`.
pub struct SummaryRows;
impl RowFamily for SummaryRows {
    type Row<'a> = SummaryRow;
}

/// `summary.csv`.
pub const SUMMARY_COLUMNS: &[Col<SummaryRows>] = &[
    str("scenario", |r| &r.scenario, |r, s| r.scenario = s.into()),
    str("param", |r| &r.param, |r, s| r.param = s.into()),
    str("profile", |r| &r.profile, |r, s| r.profile = s.into()),
    str("check", |r| &r.check, |r, s| r.check = s.into()),
    str(
        "comparison",
        |r| &r.comparison,
        |r, s| r.comparison = s.into(),
    ),
    str("policy", |r| &r.policy, |r, s| r.policy = s.into()),
    float("atol", |r| r.atol, |r, x| r.atol = x),
    float("rtol", |r| r.rtol, |r, x| r.rtol = x),
    count("seeds", |r| r.seeds, |r, x| r.seeds = x),
    count(
        "failing_seeds",
        |r| r.failing_seeds,
        |r, x| r.failing_seeds = x,
    ),
    float(
        "worst_usage_pct",
        |r| r.worst_usage_pct,
        |r, x| r.worst_usage_pct = x,
    ),
    uint("worst_seed", |r| r.worst_seed, |r, x| r.worst_seed = x),
    u32_(
        "worst_step",
        |r| r.worst_step.step,
        |r, x| r.worst_step.step = x,
    ),
    micro::<SummaryRows>(
        "worst_micro_step",
        |r| r.worst_step.micro,
        |r, x| r.worst_step.micro = x,
    )
    .optional_on_read(),
    float(
        "p50_usage_pct",
        |r| r.p50_usage_pct,
        |r, x| r.p50_usage_pct = x,
    ),
    float(
        "p95_usage_pct",
        |r| r.p95_usage_pct,
        |r, x| r.p95_usage_pct = x,
    ),
    float(
        "max_abs_diff",
        |r| r.max_abs_diff,
        |r, x| r.max_abs_diff = x,
    ),
    float(
        "max_abs_expected",
        |r| r.max_abs_expected,
        |r, x| r.max_abs_expected = x,
    ),
    count(
        "nonfinite_seeds",
        |r| r.nonfinite_seeds,
        |r, x| r.nonfinite_seeds = x,
    ),
    opt_str::<SummaryRows>(
        "mutant",
        |r| r.mutant.as_deref(),
        |r, s| r.mutant = s.map(Into::into),
    )
    .optional_on_read(),
    str(
        "quantile_method",
        |r| &r.quantile_method,
        |r, s| r.quantile_method = s.into(),
    ),
    str::<SummaryRows>(
        "tail_method",
        |r| &r.tail_method,
        |r, s| r.tail_method = s.into(),
    )
    .optional_on_read(),
    float::<SummaryRows>("tail_p1e2_pct", |r| r.tail[0].0, |r, x| r.tail[0].0 = x)
        .optional_on_read(),
    float::<SummaryRows>("tail_p1e3_pct", |r| r.tail[1].0, |r, x| r.tail[1].0 = x)
        .optional_on_read(),
    float::<SummaryRows>("tail_p1e3_lo_pct", |r| r.tail[1].1, |r, x| r.tail[1].1 = x)
        .optional_on_read(),
    float::<SummaryRows>("tail_p1e3_hi_pct", |r| r.tail[1].2, |r, x| r.tail[1].2 = x)
        .optional_on_read(),
    float::<SummaryRows>("tail_p1e4_pct", |r| r.tail[2].0, |r, x| r.tail[2].0 = x)
        .optional_on_read(),
    float::<SummaryRows>("tail_p1e4_lo_pct", |r| r.tail[2].1, |r, x| r.tail[2].1 = x)
        .optional_on_read(),
    float::<SummaryRows>("tail_p1e4_hi_pct", |r| r.tail[2].2, |r, x| r.tail[2].2 = x)
        .optional_on_read(),
    float::<SummaryRows>(
        "theory_det_usage_pct",
        |r| r.theory_det_usage_pct,
        |r, x| r.theory_det_usage_pct = x,
    )
    .optional_on_read(),
    float::<SummaryRows>(
        "theory_prob_usage_pct",
        |r| r.theory_prob_usage_pct,
        |r, x| r.theory_prob_usage_pct = x,
    )
    .optional_on_read(),
    opt_uint::<SummaryRows>(
        "seeds_with_flips",
        |r| r.seeds_with_flips,
        |r, x| r.seeds_with_flips = x,
    )
    .optional_on_read(),
];

// ---------------------------------------------------------------------------------------
// mutants.csv

/// The `check` of a `mutants.csv` row about the test as a whole: the bug is caught on a
/// seed when some check of the asserted comparison exceeds its tolerance. Not a possible
/// check name (names are `[A-Za-z0-9._-]`).
pub const ANY_CHECK: &str = "(any)";

/// One row of `mutants.csv`: how one check (or [`ANY_CHECK`]) detects one injected bug over
/// the seeds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MutantRow {
    /// The injected bug.
    pub mutant: String,
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Numerics profile spec.
    pub profile: String,
    /// Check name, or [`ANY_CHECK`].
    pub check: String,
    /// Comparison.
    pub comparison: String,
    /// Tolerance policy.
    pub policy: String,
    /// Seeds on which the check exceeds its tolerance (usage > 100 %): the bug is caught.
    pub detected_seeds: usize,
    /// Seeds evaluated.
    pub seeds: usize,
    /// The first seed (in seed order) on which it is caught; none when it never is.
    pub first_detected_seed: Option<u64>,
    /// Smallest usage over seeds, percent: above 100 the check catches the bug on every
    /// seed, by that factor.
    pub min_usage_pct: f64,
    /// Largest usage over seeds, percent.
    pub max_usage_pct: f64,
}

/// The rows of `mutants.csv`.
pub struct MutantRows;
impl RowFamily for MutantRows {
    type Row<'a> = MutantRow;
}

/// `mutants.csv`.
pub const MUTANT_COLUMNS: &[Col<MutantRows>] = &[
    str("mutant", |r| &r.mutant, |r, s| r.mutant = s.into()),
    str("scenario", |r| &r.scenario, |r, s| r.scenario = s.into()),
    str("param", |r| &r.param, |r, s| r.param = s.into()),
    str("profile", |r| &r.profile, |r, s| r.profile = s.into()),
    str("check", |r| &r.check, |r, s| r.check = s.into()),
    str(
        "comparison",
        |r| &r.comparison,
        |r, s| r.comparison = s.into(),
    ),
    str("policy", |r| &r.policy, |r, s| r.policy = s.into()),
    count(
        "detected_seeds",
        |r| r.detected_seeds,
        |r, x| r.detected_seeds = x,
    ),
    count("seeds", |r| r.seeds, |r, x| r.seeds = x),
    opt_uint(
        "first_detected_seed",
        |r| r.first_detected_seed,
        |r, x| r.first_detected_seed = x,
    ),
    float(
        "min_usage_pct",
        |r| r.min_usage_pct,
        |r, x| r.min_usage_pct = x,
    ),
    float(
        "max_usage_pct",
        |r| r.max_usage_pct,
        |r, x| r.max_usage_pct = x,
    ),
];

// ---------------------------------------------------------------------------------------
// plan.csv

/// One row of `plan.csv`: one result entry of one planned group, with the group's seeds in
/// this run (a shard's slice). `merge`, `--resume`, `report` and `size DIR` read it back.
#[derive(Debug, Clone, Default)]
pub struct PlanRow {
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Profile spec.
    pub profile: String,
    /// Mutant, none for the clean run.
    pub mutant: Option<String>,
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

/// The rows of `plan.csv`.
pub struct PlanRows;
impl RowFamily for PlanRows {
    type Row<'a> = PlanRow;
}

/// `plan.csv`.
pub const PLAN_COLUMNS: &[Col<PlanRows>] = &[
    str("scenario", |r| &r.scenario, |r, s| r.scenario = s.into()),
    str("param", |r| &r.param, |r, s| r.param = s.into()),
    str("profile", |r| &r.profile, |r, s| r.profile = s.into()),
    opt_str(
        "mutant",
        |r| r.mutant.as_deref(),
        |r, s| r.mutant = s.map(Into::into),
    ),
    str("asserted", |r| &r.asserted, |r, s| r.asserted = s.into()),
    boolean(
        "seed_dependent",
        |r| r.seed_dependent,
        |r, x| r.seed_dependent = x,
    ),
    uint("first_seed", |r| r.first_seed, |r, x| r.first_seed = x),
    uint("seeds", |r| r.seeds, |r, x| r.seeds = x),
    str("check", |r| &r.check, |r, s| r.check = s.into()),
    str(
        "comparison",
        |r| &r.comparison,
        |r, s| r.comparison = s.into(),
    ),
    str("policy", |r| &r.policy, |r, s| r.policy = s.into()),
    float::<PlanRows>("atol", |r| r.atol, |r, x| r.atol = x).shortest(),
    float::<PlanRows>("rtol", |r| r.rtol, |r, x| r.rtol = x).shortest(),
];

// ---------------------------------------------------------------------------------------
// scale.csv

/// One row of `scale.csv`: one (K, TP) point under one policy.
#[derive(Debug, Clone, Default)]
pub struct ScaleRow {
    /// Profile spec.
    pub profile: String,
    /// Reduction length.
    pub k: usize,
    /// TP degree (1: the unsharded fp32 matmul).
    pub tp: usize,
    /// Seeds.
    pub seeds: u64,
    /// Policy of the usage columns.
    pub policy: String,
    /// Worst usage of sharded vs unsharded fp32 over seeds, percent.
    pub worst_usage_pct: f64,
    /// 95th percentile of that usage, percent.
    pub p95_usage_pct: f64,
    /// Median over seeds of the largest error against float64, in units of u·Σ|x·w|.
    pub p50_err_u: f64,
    /// 95th percentile of that error.
    pub p95_err_u: f64,
    /// Largest of that error.
    pub max_err_u: f64,
    /// √K: the probabilistic bound λ·√K·u·Σ|x·w| has this shape (Higham & Mary 2019).
    pub sqrt_k: f64,
    /// Largest |sharded − unsharded|.
    pub max_abs_diff: f64,
    /// Largest |y|.
    pub max_abs_y: f64,
}

/// The rows of `scale.csv`.
pub struct ScaleRows;
impl RowFamily for ScaleRows {
    type Row<'a> = ScaleRow;
}

/// `scale.csv`.
pub const SCALE_COLUMNS: &[Col<ScaleRows>] = &[
    str("profile", |r| &r.profile, |r, s| r.profile = s.into()),
    count("k", |r| r.k, |r, x| r.k = x),
    count("tp", |r| r.tp, |r, x| r.tp = x),
    count("seeds", |r| r.seeds as usize, |r, x| r.seeds = x as u64),
    str("policy", |r| &r.policy, |r, s| r.policy = s.into()),
    float(
        "worst_usage_pct",
        |r| r.worst_usage_pct,
        |r, x| r.worst_usage_pct = x,
    ),
    float(
        "p95_usage_pct",
        |r| r.p95_usage_pct,
        |r, x| r.p95_usage_pct = x,
    ),
    float("p50_err_u", |r| r.p50_err_u, |r, x| r.p50_err_u = x),
    float("p95_err_u", |r| r.p95_err_u, |r, x| r.p95_err_u = x),
    float("max_err_u", |r| r.max_err_u, |r, x| r.max_err_u = x),
    float("sqrt_k", |r| r.sqrt_k, |r, x| r.sqrt_k = x),
    float(
        "max_abs_diff",
        |r| r.max_abs_diff,
        |r, x| r.max_abs_diff = x,
    ),
    float("max_abs_y", |r| r.max_abs_y, |r, x| r.max_abs_y = x),
];

// ---------------------------------------------------------------------------------------
// recommendations.csv

/// One row of `recommendations.csv` (written by `size`).
#[derive(Debug, Clone, Default)]
pub struct RecRow {
    /// Scenario.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Profile, or `all` (holds for every selected profile).
    pub profile: String,
    /// Check, or `all` (one pair for every check of the test).
    pub check: String,
    /// Shape: `atol-at-torch-rtol`, `rtol-at-zero-atol` or `balanced`.
    pub shape: String,
    /// Recommended atol (empty when none).
    pub atol: Option<f64>,
    /// Recommended rtol (empty when none).
    pub rtol: Option<f64>,
    /// Per-seed failure probability sized for.
    pub flake_rate: f64,
    /// Target usage at that probability, percent.
    pub target_pct: f64,
    /// Point estimate of the usage at the flake rate under the pair, percent.
    pub predicted_pct: Option<f64>,
    /// Upper end of its 95 % interval, percent (≤ target).
    pub predicted_upper_pct: Option<f64>,
    /// `empirical`, `gpd`, `conservative` or `not-estimable`.
    pub tail_method: String,
    /// Seeds the estimate used.
    pub seeds: usize,
    /// Seeds a GPD extrapolation to the flake rate needs.
    pub seeds_needed_gpd: usize,
    /// Seeds a distribution-free bound at the flake rate needs.
    pub seeds_needed_empirical: usize,
    /// For profile `all`: the profile that needs the largest tolerance (empty otherwise).
    pub binding_profile: String,
    /// For check `all`: the check that alone needs the largest tolerance (empty otherwise).
    pub binding_check: String,
    /// Why a pair is empty, or how it was made conservative (empty otherwise).
    pub note: String,
}

/// The rows of `recommendations.csv`.
pub struct RecRows;
impl RowFamily for RecRows {
    type Row<'a> = RecRow;
}

/// An empty string as none (the optional string columns of `recommendations.csv`).
fn none_if_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// `recommendations.csv`. The report reads the columns up to `rtol`; the rest may be
/// missing from a file it reads.
pub const RECOMMENDATION_COLUMNS: &[Col<RecRows>] = &[
    str("scenario", |r| &r.scenario, |r, s| r.scenario = s.into()),
    str("param", |r| &r.param, |r, s| r.param = s.into()),
    str("profile", |r| &r.profile, |r, s| r.profile = s.into()),
    str("check", |r| &r.check, |r, s| r.check = s.into()),
    str("shape", |r| &r.shape, |r, s| r.shape = s.into()),
    opt_float::<RecRows>("atol", |r| r.atol, |r, x| r.atol = x).shortest(),
    opt_float::<RecRows>("rtol", |r| r.rtol, |r, x| r.rtol = x).shortest(),
    float::<RecRows>("flake_rate", |r| r.flake_rate, |r, x| r.flake_rate = x)
        .shortest()
        .optional_on_read(),
    float::<RecRows>("target_pct", |r| r.target_pct, |r, x| r.target_pct = x)
        .shortest()
        .optional_on_read(),
    opt_float::<RecRows>(
        "predicted_pct",
        |r| r.predicted_pct,
        |r, x| r.predicted_pct = x,
    )
    .shortest()
    .optional_on_read(),
    opt_float::<RecRows>(
        "predicted_upper_pct",
        |r| r.predicted_upper_pct,
        |r, x| r.predicted_upper_pct = x,
    )
    .shortest()
    .optional_on_read(),
    str::<RecRows>(
        "tail_method",
        |r| &r.tail_method,
        |r, s| r.tail_method = s.into(),
    )
    .optional_on_read(),
    count::<RecRows>("seeds", |r| r.seeds, |r, x| r.seeds = x).optional_on_read(),
    count::<RecRows>(
        "seeds_needed_gpd",
        |r| r.seeds_needed_gpd,
        |r, x| r.seeds_needed_gpd = x,
    )
    .optional_on_read(),
    count::<RecRows>(
        "seeds_needed_empirical",
        |r| r.seeds_needed_empirical,
        |r, x| r.seeds_needed_empirical = x,
    )
    .optional_on_read(),
    opt_str::<RecRows>(
        "binding_profile",
        |r| none_if_empty(&r.binding_profile),
        |r, s| r.binding_profile = s.unwrap_or_default().into(),
    )
    .optional_on_read(),
    opt_str::<RecRows>(
        "binding_check",
        |r| none_if_empty(&r.binding_check),
        |r, s| r.binding_check = s.unwrap_or_default().into(),
    )
    .optional_on_read(),
    opt_str::<RecRows>(
        "note",
        |r| none_if_empty(&r.note),
        |r, s| r.note = s.unwrap_or_default().into(),
    )
    .optional_on_read(),
];

// ---------------------------------------------------------------------------------------
// Every table: names and types

/// One column's name and type: what a reader of the file sees.
pub type Column = (&'static str, ColType);

/// `N` columns' names and types (`N` = the length of `cols`).
const fn names_and_types<F: RowFamily, const N: usize>(cols: &[Col<F>]) -> [Column; N] {
    let mut out = [("", ColType::Str); N];
    let mut i = 0;
    while i < N {
        out[i] = (cols[i].name, cols[i].ty());
        i += 1;
    }
    out
}

/// `seeds.csv` and `seeds.parquet`: names and types of [`SEED_COLUMNS`].
pub const SEEDS: &[Column] = &names_and_types::<_, { SEED_COLUMNS.len() }>(SEED_COLUMNS);
/// `summary.csv`: names and types of [`SUMMARY_COLUMNS`].
pub const SUMMARY: &[Column] = &names_and_types::<_, { SUMMARY_COLUMNS.len() }>(SUMMARY_COLUMNS);
/// `mutants.csv`: names and types of [`MUTANT_COLUMNS`].
pub const MUTANTS: &[Column] = &names_and_types::<_, { MUTANT_COLUMNS.len() }>(MUTANT_COLUMNS);
/// `plan.csv`: names and types of [`PLAN_COLUMNS`].
pub const PLAN: &[Column] = &names_and_types::<_, { PLAN_COLUMNS.len() }>(PLAN_COLUMNS);
/// `scale.csv`: names and types of [`SCALE_COLUMNS`].
pub const SCALE: &[Column] = &names_and_types::<_, { SCALE_COLUMNS.len() }>(SCALE_COLUMNS);
/// `recommendations.csv`: names and types of [`RECOMMENDATION_COLUMNS`].
pub const RECOMMENDATIONS: &[Column] =
    &names_and_types::<_, { RECOMMENDATION_COLUMNS.len() }>(RECOMMENDATION_COLUMNS);

/// Every table, by file name.
pub const TABLES: &[(&str, &[Column])] = &[
    ("seeds.csv", SEEDS),
    ("summary.csv", SUMMARY),
    ("mutants.csv", MUTANTS),
    ("plan.csv", PLAN),
    ("scale.csv", SCALE),
    ("recommendations.csv", RECOMMENDATIONS),
];

/// The schema of the table file `name` (`seeds.parquet` has `seeds.csv`'s).
pub fn of(name: &str) -> Option<&'static [Column]> {
    let name = if name == "seeds.parquet" {
        "seeds.csv"
    } else {
        name
    };
    TABLES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// The header line of a table, as the writers write it (with `\n`).
pub fn header(cols: &[Column]) -> String {
    let mut s = cols.iter().map(|c| c.0).collect::<Vec<_>>().join(",");
    s.push('\n');
    s
}

/// Checks CSV bytes against a schema: the header is exactly the columns, every record has
/// one field per column, and every field is a value of its column's type. Returns the
/// number of data rows, or what is wrong (row numbers count the header as row 1).
pub fn check_csv(bytes: &[u8], cols: &[Column]) -> Result<usize, String> {
    let mut r = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let head = r.headers().map_err(|e| format!("header: {e}"))?.clone();
    let names: Vec<&str> = head.iter().collect();
    let want: Vec<&str> = cols.iter().map(|c| c.0).collect();
    if names != want {
        return Err(format!("header is {names:?}; the schema says {want:?}"));
    }
    let mut n = 0;
    for (i, rec) in r.records().enumerate() {
        let rec = rec.map_err(|e| format!("row {}: {e}", i + 2))?;
        if rec.len() != cols.len() {
            return Err(format!(
                "row {}: {} fields, not {}",
                i + 2,
                rec.len(),
                cols.len()
            ));
        }
        for (field, (name, ty)) in rec.iter().zip(cols) {
            if !ty.accepts(field) {
                return Err(format!(
                    "row {}: column {name} holds `{field}`, not a {}",
                    i + 2,
                    ty.name()
                ));
            }
        }
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_accept_what_the_writers_write_and_nothing_looser() {
        for ok in [
            "0.0", "-0.0", "1.25e-06", "1e+16", "118.3", "NaN", "inf", "-inf", "7",
        ] {
            assert!(ColType::Float.accepts(ok), "{ok}");
        }
        for bad in ["nan", "Infinity", "", "3.1.2", "1e", "x", "+inf"] {
            assert!(!ColType::Float.accepts(bad), "{bad}");
        }
        assert!(ColType::OptFloat.accepts(""));
        assert!(ColType::Int.accepts("-1") && !ColType::Int.accepts("3.1"));
        assert!(ColType::UInt.accepts("18446744073709551615") && !ColType::UInt.accepts("-1"));
        assert!(ColType::OptUInt.accepts("") && ColType::OptUInt.accepts("8173"));
        assert!(!ColType::OptUInt.accepts("-1"));
        assert!(!ColType::Int.accepts("") && !ColType::UInt.accepts(""));
        assert!(ColType::Bool.accepts("true") && !ColType::Bool.accepts("True"));
    }

    #[test]
    fn column_names_are_unique_per_table() {
        for (file, cols) in TABLES {
            let mut names: Vec<_> = cols.iter().map(|c| c.0).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), cols.len(), "{file}");
        }
    }

    /// The row log stores the entry columns at fixed widths: every one has one.
    #[test]
    fn every_seeds_entry_column_has_a_row_log_width() {
        for c in SEED_COLUMNS.iter().filter(|c| c.role == Role::Entry) {
            assert!(
                crate::results::rowlog::width(&c.access).is_some(),
                "{} has no row-log width",
                c.name
            );
        }
    }

    /// Every column's getter returns what its setter stored, with every other column set
    /// too (each to its own value): a declaration whose getter and setter name different
    /// fields, or two columns that share one field, fails.
    #[test]
    fn getters_read_back_what_setters_store() {
        fn set<F: RowFamily>(row: &mut F::Row<'static>, c: &Col<F>, i: usize) {
            const NAMES: [&str; 40] = [
                "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12",
                "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24",
                "s25", "s26", "s27", "s28", "s29", "s30", "s31", "s32", "s33", "s34", "s35", "s36",
                "s37", "s38", "s39",
            ];
            match c.access {
                Access::Str(_, s) => s(row, NAMES[i]),
                Access::OptStr(_, s) => s(row, Some(NAMES[i])),
                Access::U64(_, s) => s(row, 100 + i as u64),
                Access::OptU64(_, s) => s(row, Some(100 + i as u64)),
                Access::I64(_, s) => s(row, -100 - i as i64),
                Access::Usize(_, s) => s(row, 100 + i),
                Access::U32(_, s) => s(row, 100 + i as u32),
                Access::OptU32(_, s) => s(row, Some(100 + i as u32)),
                Access::F64(_, s) => s(row, 0.25 + i as f64),
                Access::OptF64(_, s) => s(row, Some(0.25 + i as f64)),
                Access::Bool(_, s) => s(row, true),
            }
        }
        fn got<F: RowFamily>(row: &F::Row<'static>, c: &Col<F>, i: usize) -> bool {
            let name = format!("s{i}");
            match c.access {
                Access::Str(g, _) => g(row) == name,
                Access::OptStr(g, _) => g(row) == Some(name.as_str()),
                Access::U64(g, _) => g(row) == 100 + i as u64,
                Access::OptU64(g, _) => g(row) == Some(100 + i as u64),
                Access::I64(g, _) => g(row) == -100 - i as i64,
                Access::Usize(g, _) => g(row) == 100 + i,
                Access::U32(g, _) => g(row) == 100 + i as u32,
                Access::OptU32(g, _) => g(row) == Some(100 + i as u32),
                Access::F64(g, _) => g(row) == 0.25 + i as f64,
                Access::OptF64(g, _) => g(row) == Some(0.25 + i as f64),
                Access::Bool(g, _) => g(row),
            }
        }
        fn check<F: RowFamily>(file: &str, cols: &[Col<F>]) {
            let mut row = F::Row::default();
            for (i, c) in cols.iter().enumerate() {
                set(&mut row, c, i);
            }
            for (i, c) in cols.iter().enumerate() {
                assert!(got(&row, c, i), "{file}: column {}", c.name);
            }
        }
        check("seeds.csv", SEED_COLUMNS);
        check("summary.csv", SUMMARY_COLUMNS);
        check("mutants.csv", MUTANT_COLUMNS);
        check("plan.csv", PLAN_COLUMNS);
        check("scale.csv", SCALE_COLUMNS);
        check("recommendations.csv", RECOMMENDATION_COLUMNS);
    }
}
