//! Sharding, merging, resuming and summary-only sweeps, through the CLI.

use assert_cmd::Command;
use std::path::Path;

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").expect("binary is built by cargo test")
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

#[test]
fn merging_four_shards_reproduces_the_single_run_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let single = tmp.path().join("single");
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "9",
            "--quiet",
            "--mutants",
            "missing-allreduce,no-nesterov",
            "--out",
        ])
        .arg(&single)
        .assert()
        .success();
    let mut dirs = Vec::new();
    for i in 0..4 {
        let d = tmp.path().join(format!("shard{i}"));
        seedsweep()
            .args([
                "sweep",
                "--seeds",
                "9",
                "--quiet",
                "--mutants",
                "missing-allreduce,no-nesterov",
                "--shard",
            ])
            .arg(format!("{i}/4"))
            .arg("--out")
            .arg(&d)
            .env_remove("SLURM_ARRAY_TASK_ID")
            .assert()
            .success();
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
        "seeds.csv",
        "summary.csv",
        "mutants.csv",
        "plan.csv",
        "frontiers.bin",
    ] {
        assert!(
            read(&single.join(f)) == read(&merged.join(f)),
            "{f} differs after merge"
        );
    }
}

#[test]
fn a_slurm_array_task_shards_itself() {
    let tmp = tempfile::tempdir().unwrap();
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "8",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--param",
            "35-3-False-0",
            "--out",
        ])
        .arg(tmp.path())
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_TASK_COUNT", "4")
        .assert()
        .success();
    let summary = String::from_utf8(read(&tmp.path().join("summary.csv"))).unwrap();
    // Shard 1 of 4 of seeds 8173..8180 holds 8175 and 8176: 2 seeds per row.
    let row = summary.lines().nth(1).unwrap();
    assert_eq!(row.split(',').nth(8), Some("2"), "{row}");
    let seeds = String::from_utf8(read(&tmp.path().join("seeds.csv"))).unwrap();
    assert!(seeds
        .lines()
        .skip(1)
        .all(|l| l.contains(",8175,") || l.contains(",8176,")));
}

#[test]
fn merging_shards_of_different_sweeps_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "2",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--shard",
            "0/2",
            "--out",
        ])
        .arg(&a)
        .assert()
        .success();
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "2",
            "--quiet",
            "--scenario",
            "deepspeed-row-parallel",
            "--shard",
            "1/2",
            "--out",
        ])
        .arg(&b)
        .assert()
        .success();
    seedsweep()
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg("--out")
        .arg(tmp.path().join("m"))
        .assert()
        .code(1)
        .stderr(predicates::str::contains("different sweep"));
}

#[test]
fn resume_continues_an_interrupted_sweep_to_identical_files() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    let args = [
        "sweep",
        "--seeds",
        "12",
        "--quiet",
        "--scenario",
        "deepspeed-tied-row-parallel",
        "--param",
        "35-3-False-0,32-3-False-2",
    ];
    seedsweep()
        .args(args)
        .arg("--out")
        .arg(&full)
        .assert()
        .success();
    // Simulate a sweep killed after 5 units, in the middle of writing the 6th: the
    // fingerprint, the plan, a
    // checkpoint after unit 5, and a torn row behind it.
    let cut = tmp.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    std::fs::copy(full.join("plan.csv"), cut.join("plan.csv")).unwrap();
    std::fs::copy(full.join("fingerprint.txt"), cut.join("fingerprint.txt")).unwrap();
    let seeds = read(&full.join("seeds.csv"));
    let text = String::from_utf8(seeds.clone()).unwrap();
    // 35-3-False-0 has 4 checks x 3 comparisons x 2 policies = 24 rows per seed.
    let keep_lines = 1 + 5 * 24;
    let keep: usize = text
        .split_inclusive('\n')
        .take(keep_lines)
        .map(str::len)
        .sum();
    let mut partial = seeds[..keep].to_vec();
    partial.extend_from_slice(&seeds[keep..keep + 40]);
    std::fs::write(cut.join("seeds.csv.partial"), &partial).unwrap();
    std::fs::write(cut.join(".progress"), format!("5 {keep}\n")).unwrap();
    // frontiers.bin.partial: the header, the same 5 records and a torn 6th, as the sweep
    // leaves it (it is flushed before each checkpoint, so it never holds fewer units).
    let fr = read(&full.join("frontiers.bin"));
    let mut pos = 8;
    for _ in 0..6 {
        let checks = u32::from_le_bytes(fr[pos + 12..pos + 16].try_into().unwrap()) as usize;
        pos += 16;
        for _ in 0..checks {
            let m = u32::from_le_bytes(fr[pos..pos + 4].try_into().unwrap()) as usize;
            pos += 4 + 16 * m;
        }
    }
    std::fs::write(cut.join("frontiers.bin.partial"), &fr[..pos - 7]).unwrap();
    seedsweep()
        .args(args)
        .arg("--out")
        .arg(&cut)
        .arg("--resume")
        .assert()
        .success();
    for f in ["seeds.csv", "summary.csv", "plan.csv", "frontiers.bin"] {
        assert!(
            read(&full.join(f)) == read(&cut.join(f)),
            "{f} differs after resume"
        );
    }
    assert!(!cut.join("seeds.csv.partial").exists());
    assert!(!cut.join("frontiers.bin.partial").exists());
    // A different command cannot resume it.
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "13",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--out",
        ])
        .arg(&cut)
        .arg("--resume")
        .assert()
        .code(1)
        .stderr(predicates::str::contains("different sweep"));
}

#[test]
fn summary_only_writes_no_per_seed_file_and_flags_its_quantiles() {
    let tmp = tempfile::tempdir().unwrap();
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "20",
            "--quiet",
            "--summary-only",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--out",
        ])
        .arg(tmp.path())
        .assert()
        .success();
    assert!(!tmp.path().join("seeds.csv").exists());
    let summary = String::from_utf8(read(&tmp.path().join("summary.csv"))).unwrap();
    let header: Vec<&str> = summary.lines().next().unwrap().split(',').collect();
    let qm = header
        .iter()
        .position(|h| *h == "quantile_method")
        .expect("quantile_method column");
    assert!(summary
        .lines()
        .skip(1)
        .all(|l| l.split(',').nth(qm) == Some("histogram")));
    // Worst usage and failing counts are exact in both modes.
    let full = tempfile::tempdir().unwrap();
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "20",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--out",
        ])
        .arg(full.path())
        .assert()
        .success();
    let exact = String::from_utf8(read(&full.path().join("summary.csv"))).unwrap();
    // The frontiers `size DIR` reads are written in both modes, identically.
    assert!(read(&tmp.path().join("frontiers.bin")) == read(&full.path().join("frontiers.bin")));
    for (a, b) in summary.lines().zip(exact.lines()).skip(1) {
        let fa: Vec<&str> = a.split(',').collect();
        let fb: Vec<&str> = b.split(',').collect();
        assert_eq!(fa[..13], fb[..13], "keys, seeds, failing, worst must agree");
        // The tail columns read only the top of the sample, which summary-only keeps exactly.
        assert_eq!(fa[qm + 1..], fb[qm + 1..], "tail columns must agree");
    }
}

#[test]
fn bad_shard_values_name_the_flag() {
    seedsweep()
        .args(["sweep", "--seeds", "4", "--quiet", "--shard", "4/4"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--shard"));
    seedsweep()
        .args(["sweep", "--seeds", "4", "--quiet"])
        .env("JOB_COMPLETION_INDEX", "1")
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--shard-count"));
}
