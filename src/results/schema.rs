//! The one declaration of every table seedsweep writes: each file's columns, in order, with
//! the type a reader (pandas, polars, DuckDB, or this crate) gets from them. The row structs
//! of [`crate::results::csv`] and [`crate::report::size`] must serialize exactly these headers, the
//! Parquet schema of [`crate::results::parquet`] is built from [`SEEDS`], and
//! `results/README.md` documents each column with the type named here; tests check all
//! three against this module, so a column changes in one place.
//!
//! How a value is written, per type (CSV):
//! - [`ColType::Str`]: as is (quoted when it holds a comma, a quote or a line break);
//! - [`ColType::OptStr`]: a string, or an empty field for "none" (Parquet: null);
//! - [`ColType::UInt`], [`ColType::Int`]: decimal digits (a leading `-` for `Int`);
//! - [`ColType::Float`]: Python's `repr` digits, `NaN` for "not available", `inf` / `-inf`;
//!   the spellings pandas, polars and DuckDB all read as a float with no options;
//! - [`ColType::OptFloat`]: a float, or an empty field for "none";
//! - [`ColType::Bool`]: `true` or `false`.

/// The type of one column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    /// A string.
    Str,
    /// A string, or none (empty in CSV, null in Parquet).
    OptStr,
    /// An unsigned 64-bit integer.
    UInt,
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
        match self {
            ColType::Str => true,
            ColType::OptStr => true,
            ColType::UInt => {
                field.bytes().all(|b| b.is_ascii_digit()) && field.parse::<u64>().is_ok()
            }
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

/// One column: its name and type.
pub type Column = (&'static str, ColType);

use ColType::*;

/// `seeds.csv` and `seeds.parquet`.
pub const SEEDS: &[Column] = &[
    ("scenario", Str),
    ("param", Str),
    ("profile", Str),
    ("seed", UInt),
    ("check", Str),
    ("comparison", Str),
    ("policy", Str),
    ("usage_pct", Float),
    ("max_abs_diff", Float),
    ("step", Int),
    ("micro_step", Int),
    ("mismatched", Int),
    ("elements", Int),
    ("nonfinite", Int),
    ("max_abs_expected", Float),
    ("mutant", OptStr),
    ("theory_det_pct", Float),
    ("theory_prob_pct", Float),
];

/// `summary.csv`.
pub const SUMMARY: &[Column] = &[
    ("scenario", Str),
    ("param", Str),
    ("profile", Str),
    ("check", Str),
    ("comparison", Str),
    ("policy", Str),
    ("atol", Float),
    ("rtol", Float),
    ("seeds", Int),
    ("failing_seeds", Int),
    ("worst_usage_pct", Float),
    ("worst_seed", UInt),
    ("worst_step", Int),
    ("worst_micro_step", Int),
    ("p50_usage_pct", Float),
    ("p95_usage_pct", Float),
    ("max_abs_diff", Float),
    ("max_abs_expected", Float),
    ("nonfinite_seeds", Int),
    ("mutant", OptStr),
    ("quantile_method", Str),
    ("tail_method", Str),
    ("tail_p1e2_pct", Float),
    ("tail_p1e3_pct", Float),
    ("tail_p1e3_lo_pct", Float),
    ("tail_p1e3_hi_pct", Float),
    ("tail_p1e4_pct", Float),
    ("tail_p1e4_lo_pct", Float),
    ("tail_p1e4_hi_pct", Float),
    ("theory_det_usage_pct", Float),
    ("theory_prob_usage_pct", Float),
];

/// `mutants.csv`.
pub const MUTANTS: &[Column] = &[
    ("mutant", Str),
    ("scenario", Str),
    ("param", Str),
    ("profile", Str),
    ("check", Str),
    ("comparison", Str),
    ("policy", Str),
    ("detected_seeds", Int),
    ("seeds", Int),
    ("min_usage_pct", Float),
];

/// `plan.csv`.
pub const PLAN: &[Column] = &[
    ("scenario", Str),
    ("param", Str),
    ("profile", Str),
    ("mutant", OptStr),
    ("asserted", Str),
    ("seed_dependent", Bool),
    ("first_seed", UInt),
    ("seeds", UInt),
    ("check", Str),
    ("comparison", Str),
    ("policy", Str),
    ("atol", Float),
    ("rtol", Float),
];

/// `scale.csv`.
pub const SCALE: &[Column] = &[
    ("profile", Str),
    ("k", Int),
    ("tp", Int),
    ("seeds", Int),
    ("policy", Str),
    ("worst_usage_pct", Float),
    ("p95_usage_pct", Float),
    ("p50_err_u", Float),
    ("p95_err_u", Float),
    ("max_err_u", Float),
    ("sqrt_k", Float),
    ("max_abs_diff", Float),
    ("max_abs_y", Float),
];

/// `recommendations.csv`.
pub const RECOMMENDATIONS: &[Column] = &[
    ("scenario", Str),
    ("param", Str),
    ("profile", Str),
    ("check", Str),
    ("shape", Str),
    ("atol", OptFloat),
    ("rtol", OptFloat),
    ("flake_rate", Float),
    ("target_pct", Float),
    ("predicted_pct", OptFloat),
    ("predicted_upper_pct", OptFloat),
    ("tail_method", Str),
    ("seeds", Int),
    ("seeds_needed_gpd", Int),
    ("seeds_needed_empirical", Int),
    ("binding_profile", OptStr),
    ("binding_check", OptStr),
    ("note", OptStr),
];

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

/// The header line of a table, as the csv writer writes it (with `\n`).
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
}
