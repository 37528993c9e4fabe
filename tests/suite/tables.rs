//! Every table seedsweep writes matches the one declaration of its columns
//! (`seedsweep::results::schema`): the header names the declared columns in order, and every
//! field parses as its column's type with the spellings pandas, polars and DuckDB read with no
//! options. `results/README.md` documents each column with the same type. No Python needed;
//! `scripts/check_tables.py` is the cross-check with the three readers themselves.

use std::collections::BTreeMap;
use std::path::Path;

use assert_cmd::Command;
use seedsweep::results::schema::{self, ColType};

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").expect("binary is built by cargo test")
}

fn check(path: &Path) -> usize {
    let name = path.file_name().unwrap().to_str().unwrap();
    let cols = schema::of(name).unwrap_or_else(|| panic!("no schema for {name}"));
    let bytes = std::fs::read(path).unwrap();
    schema::check_csv(&bytes, cols).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_table_of_a_sweep_size_and_scale_has_the_declared_columns_and_types() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sweep");
    // T1 with its mutants (mutants.csv, a mutant column that is empty and filled), plus a
    // gradient-accumulation scenario (micro-steps) and one with infinite usages under a
    // zero tolerance. 120 seeds: above the 100 a tail fit needs, below the 368 an empirical
    // 1e-2 quantile needs, so the tail columns hold numbers and NaN.
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "120",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel,deepspeed-row-parallel",
            "--param",
            "35-3-False-0,32-input_shape0-lm_head-False",
            "--mutants",
            "all",
            "--out",
        ])
        .arg(&dir)
        .assert()
        .success();
    seedsweep()
        .arg("size")
        .arg(&dir)
        .args(["--scenario", "deepspeed-tied-row-parallel"])
        .assert()
        .success();
    let scale = tmp.path().join("scale");
    seedsweep()
        .args([
            "scale", "--k", "32,64", "--tp", "2", "--seeds", "3", "--out",
        ])
        .arg(&scale)
        .assert()
        .success();
    for f in [
        "seeds.csv",
        "summary.csv",
        "mutants.csv",
        "plan.csv",
        "recommendations.csv",
    ] {
        assert!(check(&dir.join(f)) > 0, "{f} has no rows");
    }
    assert!(check(&scale.join("scale.csv")) > 0);

    let seeds = std::fs::read_to_string(dir.join("seeds.csv")).unwrap();
    let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    for (name, text) in [("seeds.csv", &seeds), ("summary.csv", &summary)] {
        // The not-a-number spelling every reader takes, and never Python's lowercase one.
        assert!(text.contains(",NaN"), "{name} has no NaN to check");
        assert!(!text.contains("nan"), "{name} holds a lowercase nan");
    }
    // Both kinds of step: -1 for a per-step check, 0.. for a micro-step one; clean rows only
    // (a mutant group writes no per-seed rows: mutants.csv is its answer).
    let head: Vec<&str> = seeds.lines().next().unwrap().split(',').collect();
    let micro = head.iter().position(|h| *h == "micro_step").unwrap();
    let mutant = head.iter().position(|h| *h == "mutant").unwrap();
    let mut kinds = BTreeMap::new();
    for l in seeds.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        *kinds
            .entry((f[micro] == "-1", f[mutant].is_empty()))
            .or_insert(0) += 1;
    }
    assert_eq!(
        kinds.keys().collect::<Vec<_>>(),
        [&(false, true), &(true, true)],
        "step kinds x clean/mutant rows: {kinds:?}"
    );
    // mutants.csv: a detecting seed where the bug is caught, empty where a check never
    // catches it (the mutants include one some check misses on every seed).
    let mutants = std::fs::read_to_string(dir.join("mutants.csv")).unwrap();
    let head: Vec<&str> = mutants.lines().next().unwrap().split(',').collect();
    let first = head
        .iter()
        .position(|h| *h == "first_detected_seed")
        .unwrap();
    let firsts: Vec<&str> = mutants
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(first).unwrap())
        .collect();
    assert!(firsts.iter().any(|f| f.is_empty()) && firsts.iter().any(|f| !f.is_empty()));
}

#[test]
fn the_parquet_table_has_the_declared_columns_and_a_null_mutant_for_the_clean_run() {
    use parquet::basic::{Repetition, Type as Phys};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "4",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--param",
            "35-3-False-0",
            "--mutants",
            "missing-allreduce",
            "--format",
            "parquet",
            "--out",
        ])
        .arg(dir)
        .assert()
        .success();
    let r =
        SerializedFileReader::new(std::fs::File::open(dir.join("seeds.parquet")).unwrap()).unwrap();
    let cols = r
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .to_vec();
    assert_eq!(cols.len(), schema::SEEDS.len());
    for (c, (name, ty)) in cols.iter().zip(schema::SEEDS) {
        assert_eq!(c.name(), *name);
        let (phys, optional) = match ty {
            ColType::Str => (Phys::BYTE_ARRAY, false),
            ColType::OptStr => (Phys::BYTE_ARRAY, true),
            ColType::UInt | ColType::Int => (Phys::INT64, false),
            ColType::OptUInt => (Phys::INT64, true),
            ColType::Float => (Phys::DOUBLE, false),
            other => panic!("{name}: {other:?} is not a seeds column type"),
        };
        assert_eq!(c.physical_type(), phys, "{name}");
        let rep = c.self_type().get_basic_info().repetition();
        assert_eq!(rep == Repetition::OPTIONAL, optional, "{name}");
    }
    // Row by row: the mutant is null on every row, the clean group's (a mutant group writes
    // no per-seed rows).
    let mut nulls = 0;
    let mut named = 0;
    for row in r.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        let (_, v) = row
            .get_column_iter()
            .find(|(n, _)| n.as_str() == "mutant")
            .unwrap();
        match v {
            parquet::record::Field::Null => nulls += 1,
            parquet::record::Field::Str(s) => {
                assert_eq!(s, "missing-allreduce");
                named += 1;
            }
            other => panic!("mutant holds {other:?}"),
        }
    }
    assert!(nulls > 0 && named == 0, "{nulls} null, {named} named");
}

/// The column tables of `results/README.md`: per file section (`## seeds.csv ...`), the
/// type cell of each documented column.
fn documented_types(readme: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut section: Option<String> = None;
    for line in readme.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            section = h.split_whitespace().next().map(str::to_string);
            continue;
        }
        let Some(sec) = &section else { continue };
        let cells: Vec<&str> = line.split(" | ").collect();
        if !line.starts_with("| `") || cells.len() < 3 {
            continue;
        }
        let names = cells[0].trim_start_matches("| ");
        let ty = cells[1].trim().trim_matches('`');
        for n in names.split(", ") {
            let n = n.trim().trim_matches('`');
            out.entry(sec.clone())
                .or_default()
                .insert(n.to_string(), ty.to_string());
        }
    }
    out
}

#[test]
fn results_readme_documents_every_column_with_its_declared_type() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("results/README.md"))
            .unwrap();
    let docs = documented_types(&readme);
    for (file, cols) in schema::TABLES {
        let got = docs
            .get(*file)
            .unwrap_or_else(|| panic!("results/README.md has no `## {file}` column table"));
        let want: BTreeMap<String, String> = cols
            .iter()
            .map(|(n, t)| (n.to_string(), t.name().to_string()))
            .collect();
        assert_eq!(got, &want, "{file}: documented columns and types");
    }
}
