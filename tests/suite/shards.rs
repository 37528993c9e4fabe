//! Sharding, merging, resuming and summary-only sweeps, through the CLI.

use crate::common::checkpoint;
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

// ---------------------------------------------------------------------------------------
// The cluster: retried tasks, resubmitted tasks, and which shards are done

const T1: [&str; 4] = [
    "--scenario",
    "deepspeed-tied-row-parallel",
    "--param",
    "35-3-False-0",
];

/// A sweep process of T1 with the scheduler's variables cleared, then `env` set.
fn t1_process(
    out: &Path,
    seeds: u64,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_seedsweep"));
    c.arg("sweep")
        .args(T1)
        .args(["--quiet", "--seeds", &seeds.to_string()])
        .args(extra)
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null());
    for k in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_COUNT",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_STEP",
        "SLURM_CPUS_PER_TASK",
        "JOB_COMPLETION_INDEX",
        "SEEDSWEEP_LOCK_LEASE",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied());
    c
}

/// Starts shard `shard` of a `seeds`-seed T1 sweep into `out` and `kill -9`s it once its
/// first checkpoint is written: what an OOM kill or a lost node leaves.
fn killed_shard(out: &Path, seeds: u64, shard: &str) {
    let mut child = t1_process(
        out,
        seeds,
        &["--shard", shard],
        &[("SEEDSWEEP_LOCK_LEASE", "1")],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    checkpoint::wait_for_first_checkpoint(&mut child, out);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        out.join("seeds.csv.partial").exists(),
        "not killed mid-sweep"
    );
    assert!(
        out.join(".seedsweep.lock").exists(),
        "a kill -9 leaves its lock"
    );
}

fn assert_merge_equals(single: &Path, dirs: &[&Path], merged: &Path) {
    seedsweep()
        .arg("merge")
        .args(dirs)
        .arg("--out")
        .arg(merged)
        .assert()
        .success();
    for f in [
        "seeds.csv",
        "summary.csv",
        "plan.csv",
        "frontiers.bin",
        "fingerprint.txt",
    ] {
        assert!(
            read(&single.join(f)) == read(&merged.join(f)),
            "{f} differs from the single run"
        );
    }
}

#[test]
fn a_pod_retried_on_a_new_host_after_kill_9_resumes_once_the_lease_expires() {
    // 24,000 seeds in two shards: 12,000 seed-runs (three 4,096-run chunks) in shard 1.
    let tmp = tempfile::tempdir().unwrap();
    let (single, s0, s1) = (
        tmp.path().join("single"),
        tmp.path().join("shard-0"),
        tmp.path().join("shard-1"),
    );
    assert!(t1_process(&single, 24_000, &[], &[])
        .status()
        .unwrap()
        .success());
    assert!(t1_process(&s0, 24_000, &["--shard", "0/2"], &[])
        .status()
        .unwrap()
        .success());
    killed_shard(&s1, 24_000, "1/2");
    // The pod ran on host seedsweep-shards-1-aaaaa; its retry runs on another host, so the
    // dead pid cannot be checked: only the unrenewed lease tells.
    let lock = s1.join(".seedsweep.lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    let host = text
        .split_whitespace()
        .find(|w| w.starts_with("host="))
        .expect("a host= field")
        .to_string();
    std::fs::write(&lock, text.replace(&host, "host=seedsweep-shards-1-aaaaa")).unwrap();
    // The retry, as the manifest runs it: the index from Kubernetes and --resume.
    let start = std::time::Instant::now();
    let retry = t1_process(
        &s1,
        24_000,
        &["--shard-count", "2", "--resume"],
        &[("JOB_COMPLETION_INDEX", "1"), ("SEEDSWEEP_LOCK_LEASE", "1")],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&retry.stderr);
    assert!(retry.status.success(), "{stderr}");
    assert!(stderr.contains("seedsweep-shards-1-aaaaa"), "{stderr}");
    assert!(stderr.contains("waiting up to 1 s"), "{stderr}");
    assert!(start.elapsed() >= std::time::Duration::from_secs(1));
    assert!(!lock.exists(), "the finished retry removes its lock");
    assert_merge_equals(&single, &[&s0, &s1], &tmp.path().join("merged"));
}

#[test]
fn a_task_resubmitted_alone_continues_the_shard_its_folder_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let single = tmp.path().join("single");
    assert!(t1_process(&single, 40_000, &[], &[])
        .status()
        .unwrap()
        .success());
    let dirs: Vec<_> = (0..4)
        .map(|i| tmp.path().join(format!("shard {i}")))
        .collect();
    for i in [0, 1, 3] {
        let shard = format!("{i}/4");
        assert!(t1_process(&dirs[i], 40_000, &["--shard", &shard], &[])
            .status()
            .unwrap()
            .success());
    }
    killed_shard(&dirs[2], 40_000, "2/4");
    // `merge --check`: three done, one partial; and a folder never started, one missing.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let check = seedsweep()
        .args(["merge", "--check"])
        .args(&dirs)
        .arg(&empty)
        .arg(tmp.path().join("nowhere"))
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1));
    let table = String::from_utf8(check.stdout).unwrap();
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows[0], ["shard", "state", "folder", "detail"]);
    let state = |r: &Vec<&str>| (r[0].to_string(), r[1].to_string());
    let got: Vec<(String, String)> = rows[1..].iter().map(state).collect();
    let want: Vec<(String, String)> = [
        ("0/4", "done"),
        ("1/4", "done"),
        ("2/4", "partial"),
        ("3/4", "done"),
        ("?", "not-started"),
        ("?", "missing"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want, "{table}");
    assert!(rows[3][3].contains("of 10000 seed-runs"), "{table}");
    // Slurm's variables for `sbatch --array=2`: a one-task array.
    let alone = [
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "1"),
        ("SLURM_ARRAY_TASK_MIN", "2"),
        ("SLURM_ARRAY_TASK_MAX", "2"),
        ("SLURM_ARRAY_TASK_STEP", "1"),
        ("SEEDSWEEP_LOCK_LEASE", "1"),
    ];
    // Without --resume: refused, the shard's files untouched, and no advice to replace it.
    let plan = read(&dirs[2].join("plan.csv"));
    let partial = read(&dirs[2].join("seeds.csv.partial"));
    let no = t1_process(&dirs[2], 40_000, &[], &alone).output().unwrap();
    let e = String::from_utf8_lossy(&no.stderr);
    assert!(!no.status.success());
    assert!(e.contains("holds shard 2/4 of this same sweep"), "{e}");
    assert!(e.contains("Add --resume"), "{e}");
    assert!(!e.contains("drop --resume"), "{e}");
    assert_eq!(read(&dirs[2].join("plan.csv")), plan);
    assert_eq!(read(&dirs[2].join("seeds.csv.partial")), partial);
    // In a folder that holds nothing, the task cannot know its shard: refused, naming --shard.
    let fresh = tmp.path().join("fresh");
    let no = t1_process(&fresh, 40_000, &["--resume"], &alone)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&no.stderr);
    assert!(!no.status.success());
    assert!(e.contains("--shard 2/N"), "{e}");
    assert!(!fresh.join("seeds.csv").exists() && !fresh.join("plan.csv").exists());
    // With --resume the folder decides, and says so.
    let yes = t1_process(&dirs[2], 40_000, &["--resume"], &alone)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&yes.stderr);
    assert!(yes.status.success(), "{e}");
    assert!(
        e.contains("holds shard 2/4 of this sweep; continuing that shard"),
        "{e}"
    );
    let check = seedsweep()
        .args(["merge", "--check"])
        .args(&dirs)
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let refs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
    assert_merge_equals(&single, &refs, &tmp.path().join("merged"));
}

#[test]
fn resume_into_a_folder_of_another_sweep_never_advises_replacing_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("s");
    assert!(t1_process(&d, 6, &["--shard", "1/2"], &[])
        .status()
        .unwrap()
        .success());
    let before = read(&d.join("seeds.csv"));
    let out = t1_process(&d, 7, &["--shard", "1/2", "--resume"], &[])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(e.contains("holds a different sweep"), "{e}");
    assert!(e.contains("another --out"), "{e}");
    assert!(!e.contains("drop --resume"), "{e}");
    assert_eq!(read(&d.join("seeds.csv")), before);
}

#[cfg(unix)]
#[test]
fn sigterm_keeps_the_shard_and_releases_its_lock() {
    // scancel sends SIGTERM: the folder stays resumable and the lock goes with the writer, so
    // that a retry on another host does not wait for the lease.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("shard-1");
    let mut child = t1_process(&out, 24_000, &["--shard", "1/2"], &[])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    checkpoint::wait_for_first_checkpoint(&mut child, &out);
    assert!(out.join(".seedsweep.lock").exists());
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(128 + 15));
    assert!(String::from_utf8_lossy(&done.stderr).contains("--resume"));
    assert!(
        out.join("seeds.csv.partial").exists(),
        "not interrupted mid-sweep"
    );
    assert!(
        !out.join(".seedsweep.lock").exists(),
        "the lock was left behind"
    );
}
