//! `--format parquet`, through the CLI: the same table as `seeds.csv`, value for value; the
//! same summary, plan and frontiers; shards merge to the unsharded file byte for byte;
//! `report` reads it; bad combinations are refused naming the flag.

use assert_cmd::Command;
use std::path::Path;

use seedsweep::results::csv::{read_plan, read_units};

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").expect("binary is built by cargo test")
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

const SELECT: [&str; 6] = [
    "--param",
    "35-3-False-0,32-3-False-2",
    "--mutants",
    "missing-allreduce",
    "--seeds",
    "24",
];

fn sweep(out: &Path, extra: &[&str]) {
    seedsweep()
        .args(["sweep", "--quiet"])
        .args(SELECT)
        .args(extra)
        .arg("--out")
        .arg(out)
        .assert()
        .success();
}

#[test]
fn parquet_holds_the_csv_table_value_for_value_and_changes_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let (c, p) = (tmp.path().join("csv"), tmp.path().join("pq"));
    sweep(&c, &[]);
    sweep(&p, &["--format", "parquet"]);
    for f in ["plan.csv", "summary.csv", "mutants.csv", "frontiers.bin"] {
        assert!(
            read(&c.join(f)) == read(&p.join(f)),
            "{f} differs between formats"
        );
    }
    assert!(!p.join("seeds.csv").exists() && !p.join("seeds.bin.partial").exists());
    let metas: Vec<_> = read_plan(&c.join("plan.csv"))
        .unwrap()
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    let a = read_units(&c.join("seeds.csv"), &metas, false).unwrap();
    let b = read_units(&p.join("seeds.parquet"), &metas, false).unwrap();
    // The clean groups' units: a mutant group writes no per-seed rows.
    assert_eq!(a.len(), 2 * 24);
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.group, x.seed), (y.group, y.seed));
        for (u, v) in x.values.iter().zip(&y.values) {
            let bits = |s: &seedsweep::engine::evaluate::SeedValues| {
                (
                    s.usage_pct.to_bits(),
                    s.max_abs_diff.to_bits(),
                    s.worst_step,
                    (s.mismatched, s.elements, s.nonfinite),
                    s.max_abs_expected.to_bits(),
                    s.theory_det_pct.to_bits(),
                    s.theory_prob_pct.to_bits(),
                    s.routing_flips,
                )
            };
            assert_eq!(bits(u), bits(v), "seed {}", x.seed);
        }
    }
    let fp = String::from_utf8(read(&p.join("fingerprint.txt"))).unwrap();
    assert!(fp.contains("output.mode = per-seed-parquet"), "{fp}");
    // report reads the Parquet table and says so.
    seedsweep().arg("report").arg(&p).assert().success();
    let html = String::from_utf8(read(&p.join("report.html"))).unwrap();
    assert!(
        html.contains("seeds.parquet"),
        "the report names its per-seed file"
    );
    assert!(html.contains("Charts are histograms of per-seed usage."));
}

#[test]
fn parquet_shards_merge_to_the_unsharded_file_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let single = tmp.path().join("single");
    sweep(&single, &["--format", "parquet"]);
    let mut dirs = Vec::new();
    for i in 0..3 {
        let d = tmp.path().join(format!("s{i}"));
        sweep(&d, &["--format", "parquet", "--shard", &format!("{i}/3")]);
        dirs.push(d);
    }
    let merged = tmp.path().join("merged");
    seedsweep()
        .arg("merge")
        .args(&dirs)
        .arg("--out")
        .arg(&merged)
        .assert()
        .success();
    for f in [
        "seeds.parquet",
        "summary.csv",
        "mutants.csv",
        "plan.csv",
        "frontiers.bin",
        "fingerprint.txt",
    ] {
        assert!(
            read(&single.join(f)) == read(&merged.join(f)),
            "{f} differs"
        );
    }
    // A CSV shard does not merge with Parquet ones: the fingerprints name the difference.
    let c = tmp.path().join("c2");
    sweep(&c, &["--shard", "2/3"]);
    let out = seedsweep()
        .arg("merge")
        .args(&dirs[..2])
        .arg(&c)
        .arg("--out")
        .arg(tmp.path().join("mixed"))
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("output.mode"), "{err}");
}

#[test]
fn bad_format_flags_are_refused_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, want) in [
        (vec!["--format", "json"], "allowed: csv, parquet"),
        (
            vec!["--format", "parquet", "--summary-only"],
            "--summary-only writes no per-seed table",
        ),
    ] {
        let out = seedsweep()
            .args(["sweep", "--seeds", "2", "--out"])
            .arg(tmp.path().join("x"))
            .args(&args)
            .assert()
            .failure();
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(err.contains("--format") && err.contains(want), "{err}");
        assert!(
            !tmp.path().join("x").exists(),
            "nothing is written before the error"
        );
    }
}
