//! `seedsweep size`: recommendations, mutant verification and the Markdown evidence.

use assert_cmd::Command;

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").expect("binary is built by cargo test")
}

fn size_markdown(args: &[&str]) -> (String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let md = tmp.path().join("evidence.md");
    let out = seedsweep()
        .arg("size")
        .args(args)
        .arg("--markdown")
        .arg(&md)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    (
        String::from_utf8(out).unwrap(),
        std::fs::read_to_string(&md).unwrap(),
    )
}

#[test]
fn markdown_evidence_is_stable() {
    // A small, fully deterministic sizing run; the snapshot pins the whole Evidence section
    // (numbers included): any change in the numerics or the format shows up in review.
    let (_, md) = size_markdown(&[
        "--scenario",
        "deepspeed-tied-row-parallel",
        "--param",
        "35-3-False-0",
        "--seeds",
        "120",
        "--mutants",
        "missing-allreduce,bf16-allreduce",
    ]);
    insta::assert_snapshot!("size_t1_35_3_false_0_120_seeds", md);
}

/// Reads a CSV into (header, rows).
fn read_csv(path: &std::path::Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let header = r.headers().unwrap().iter().map(String::from).collect();
    let rows = r
        .records()
        .map(|x| x.unwrap().iter().map(String::from).collect())
        .collect();
    (header, rows)
}

fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

fn sweep(dir: &std::path::Path, seeds: &str, extra: &[&str]) {
    seedsweep()
        .args([
            "sweep",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--param",
            "35-3-False-0",
            "--seeds",
            seeds,
        ])
        .args(extra)
        .arg("--out")
        .arg(dir)
        .assert()
        .success();
}

#[test]
fn recommendations_meet_the_target_and_catch_every_structural_bug() {
    let tmp = tempfile::tempdir().unwrap();
    let csv_path = tmp.path().join("rec.csv");
    let md_path = tmp.path().join("evidence.md");
    let out = seedsweep()
        .args([
            "size",
            "--scenario",
            "deepspeed-row-parallel",
            "--param",
            "35-input_shape1-lm_head-True",
            "--seeds",
            "150",
            "--flake-rate",
            "1e-3",
            "--target",
            "50",
            "--out",
        ])
        .arg(&csv_path)
        .arg("--markdown")
        .arg(&md_path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let md = std::fs::read_to_string(&md_path).unwrap();
    assert!(
        md.contains("torch.testing.assert_close(actual_logits, expected_logits, atol="),
        "{md}"
    );
    assert!(text.contains("sgd_update"));
    for m in [
        "wrong-shard-offset",
        "missing-allreduce",
        "dropped-head-grad",
        "missing-input-grad-gather",
    ] {
        assert!(
            md.contains(&format!("| `{m}` | `cpu-fma` | 150/150 |")),
            "{m} not caught on every seed:\n{md}"
        );
    }
    // Every recommendation's upper bound (what it is sized on) is at or below the target,
    // and the point estimate at or below the upper bound.
    let (h, rows) = read_csv(&csv_path);
    let (up, pt) = (col(&h, "predicted_upper_pct"), col(&h, "predicted_pct"));
    let mut sized = 0;
    for r in &rows {
        if r[up].is_empty() {
            continue;
        }
        let (u, p): (f64, f64) = (r[up].parse().unwrap(), r[pt].parse().unwrap());
        assert!(u <= 50.0 && p <= u, "{r:?}");
        sized += 1;
    }
    assert!(sized >= rows.len() / 2, "{sized} of {}", rows.len());
}

/// `size DIR` reads the sweep's frontiers and needs no re-run: it gives exactly what sizing
/// in-process on the same seeds gives, and writes DIR/recommendations.csv with the
/// documented columns, one row per (profile or all) × (check or all) × shape.
#[test]
fn size_dir_matches_the_in_process_sizing_and_writes_the_documented_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sweep");
    sweep(&dir, "300", &["--mutants", "missing-allreduce"]);
    let text_dir = seedsweep()
        .arg("size")
        .arg(&dir)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let in_process = tmp.path().join("in.csv");
    seedsweep()
        .args([
            "size",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--param",
            "35-3-False-0",
            "--seeds",
            "300",
            "--mutants",
            "missing-allreduce",
            "--out",
        ])
        .arg(&in_process)
        .assert()
        .success();
    let from_dir = std::fs::read(dir.join("recommendations.csv")).unwrap();
    assert!(from_dir == std::fs::read(&in_process).unwrap());
    let text = String::from_utf8(text_dir).unwrap();
    assert!(text.contains("balanced (atol, rtol)") && text.contains("missing-allreduce"));
    let (h, rows) = read_csv(&dir.join("recommendations.csv"));
    let want = "scenario,param,profile,check,shape,atol,rtol,flake_rate,target_pct,predicted_pct,predicted_upper_pct,tail_method,seeds,seeds_needed_gpd,seeds_needed_empirical,binding_profile,binding_check,note";
    assert_eq!(h.join(","), want);
    // 1 profile + all, 4 checks + all, 3 shapes.
    assert_eq!(rows.len(), 2 * 5 * 3);
    let (prof, check, shape, bp) = (
        col(&h, "profile"),
        col(&h, "check"),
        col(&h, "shape"),
        col(&h, "binding_profile"),
    );
    for r in &rows {
        assert!(
            ["atol-at-torch-rtol", "rtol-at-zero-atol", "balanced"].contains(&r[shape].as_str())
        );
        if r[prof] == "all" {
            assert_eq!(r[bp], "cpu-fma");
        }
    }
    assert!(rows.iter().any(|r| r[check] == "all" && r[prof] == "all"));
    // At 300 seeds and p = 1e-4 (a GPD needs 1,000), every row is conservative.
    let tm = col(&h, "tail_method");
    assert!(rows
        .iter()
        .all(|r| r[tm] == "conservative" || r[tm] == "not-estimable"));
    assert!(text
        .lines()
        .any(|l| l.starts_with("warning:") && l.contains("300 seeds are too few")));
}

/// The recommendation holds for every selected profile and names the one that binds.
#[test]
fn the_all_profiles_recommendation_is_the_largest_and_names_its_profile() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sweep");
    sweep(&dir, "200", &["--profile", "cpu-fma,pairwise"]);
    seedsweep()
        .arg("size")
        .arg(&dir)
        .args(["--flake-rate", "1e-2"])
        .assert()
        .success();
    let (h, rows) = read_csv(&dir.join("recommendations.csv"));
    let (prof, check, shape, atol, bp) = (
        col(&h, "profile"),
        col(&h, "check"),
        col(&h, "shape"),
        col(&h, "atol"),
        col(&h, "binding_profile"),
    );
    for r in rows
        .iter()
        .filter(|r| r[prof] == "all" && r[shape] == "balanced")
    {
        let per: Vec<f64> = rows
            .iter()
            .filter(|x| x[prof] != "all" && x[check] == r[check] && x[shape] == "balanced")
            .map(|x| x[atol].parse().unwrap())
            .collect();
        assert_eq!(per.len(), 2);
        let all: f64 = r[atol].parse().unwrap();
        assert_eq!(all, per.iter().copied().fold(0.0, f64::max), "{r:?}");
        let binding = rows
            .iter()
            .find(|x| x[prof] == r[bp] && x[check] == r[check] && x[shape] == "balanced")
            .unwrap();
        assert_eq!(binding[atol], r[atol]);
    }
}

/// 50 seeds cannot support a 1e-4 flake rate: `size` says so on a `warning:` line and
/// recommends more than the 50 seeds' worst usage sized to the target would.
#[test]
fn fifty_seeds_at_1e4_warn_and_recommend_conservatively() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sweep");
    sweep(&dir, "50", &[]);
    let out = seedsweep()
        .arg("size")
        .arg(&dir)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("warning:") && l.contains("50 seeds are too few")),
        "{text}"
    );
    let (h, rows) = read_csv(&dir.join("recommendations.csv"));
    let r = rows
        .iter()
        .find(|r| {
            r[col(&h, "profile")] == "all"
                && r[col(&h, "check")] == "logits"
                && r[col(&h, "shape")] == "balanced"
        })
        .unwrap();
    assert_eq!(r[col(&h, "tail_method")], "conservative");
    // The worst of the 50 seeds under torch's default, from summary.csv.
    let (sh, srows) = read_csv(&dir.join("summary.csv"));
    let worst: f64 = srows
        .iter()
        .find(|x| {
            x[col(&sh, "check")] == "logits"
                && x[col(&sh, "comparison")] == "sharded-vs-ref"
                && x[col(&sh, "policy")] == "torch-default"
        })
        .unwrap()[col(&sh, "worst_usage_pct")]
    .parse()
    .unwrap();
    let atol: f64 = r[col(&h, "atol")].parse().unwrap();
    assert!(atol > 1e-5 * worst / 50.0, "atol {atol} vs worst {worst}");
}

/// `--validate N` sweeps fresh seeds after the sized range and reports them.
#[test]
fn validate_sweeps_fresh_seeds_after_the_sized_range() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sweep");
    sweep(&dir, "120", &[]);
    let md = tmp.path().join("e.md");
    let out = seedsweep()
        .arg("size")
        .arg(&dir)
        .args(["--flake-rate", "1e-2", "--validate", "400", "--markdown"])
        .arg(&md)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    // Sized on 8173..8292; validated on the next 400.
    assert!(text.contains("on seeds 8293..8692 (400 fresh)"), "{text}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("Validation on fresh seeds"), "{md}");
    assert!(md.contains("| `logits` |") && md.contains("/400 |"), "{md}");
}

#[test]
fn jax_scenarios_get_chex_assertions() {
    let (_, md) = size_markdown(&["--scenario", "diloco", "--seeds", "100", "--profile", "f32"]);
    assert!(
        md.contains("chex.assert_trees_all_close(actual_loss, expected_loss, atol="),
        "{md}"
    );
    assert!(!md.contains("torch.testing"));
}

#[test]
fn bad_flake_rate_names_the_flag() {
    seedsweep()
        .args(["size", "--flake-rate", "2"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--flake-rate"));
}
