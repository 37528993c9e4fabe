//! Regression tests of issue 9: output safety, one sweep per folder, resume and merge
//! integrity, strict input, resource limits, and the smaller defects. Each test is named for
//! what it protects.

use crate::common::checkpoint;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::str::contains;

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").unwrap()
}

/// `T1` of the issue, 3 seeds.
const T1: [&str; 4] = [
    "--scenario",
    "deepspeed-tied-row-parallel",
    "--param",
    "35-3-False-0",
];

fn sweep_into(out: &Path, seeds: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    seedsweep()
        .arg("sweep")
        .args(T1)
        .args(["--seeds", seeds, "--quiet"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .assert()
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn builtin_config(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("configs")
            .join(name),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// Output safety

#[cfg(unix)]
#[test]
fn report_out_symlink_is_followed_not_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    sweep_into(&dir, "3", &[]).success();
    let real = tmp.path().join("real.html");
    std::fs::write(&real, "old").unwrap();
    let link = tmp.path().join("link.html");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    seedsweep()
        .arg("report")
        .arg(&dir)
        .arg("--out")
        .arg(&link)
        .assert()
        .success();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(String::from_utf8(read(&real)).unwrap().contains("<html"));
}

#[cfg(unix)]
#[test]
fn size_markdown_into_a_fifo_writes_in_place_and_keeps_the_fifo() {
    use std::os::unix::fs::FileTypeExt;
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("evidence.md");
    if !std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
    {
        eprintln!("mkfifo unavailable; skipped");
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    seedsweep()
        .arg("size")
        .args(T1)
        .args(["--seeds", "3", "--markdown"])
        .arg(&fifo)
        .assert()
        .success();
    let text = reader.join().unwrap();
    assert!(text.contains("## Evidence"), "{text}");
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}

#[cfg(unix)]
#[test]
fn device_outputs_are_written_in_place_never_replaced() {
    use std::os::unix::fs::FileTypeExt;
    seedsweep()
        .arg("size")
        .args(T1)
        .args(["--seeds", "2", "--markdown", "/dev/null"])
        .assert()
        .success();
    // /dev/full refuses every write: an error, and the device stays (as root the old code
    // replaced it with a regular file).
    if Path::new("/dev/full").exists() {
        seedsweep()
            .arg("size")
            .args(T1)
            .args(["--seeds", "2", "--markdown", "/dev/full"])
            .assert()
            .code(1)
            .stderr(contains("/dev/full"));
        assert!(std::fs::metadata("/dev/full")
            .unwrap()
            .file_type()
            .is_char_device());
    }
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn markdown_dash_means_stdout() {
    seedsweep()
        .arg("size")
        .args(T1)
        .args(["--seeds", "2", "--markdown", "-"])
        .assert()
        .success()
        .stdout(contains("## Evidence"));
}

#[test]
fn a_folder_given_as_an_output_file_is_refused_before_work() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    sweep_into(&dir, "2", &[]).success();
    seedsweep()
        .arg("report")
        .arg(&dir)
        .arg("--out")
        .arg(tmp.path())
        .assert()
        .code(1)
        .stderr(contains("--out").and(contains("is a folder")));
    seedsweep()
        .arg("size")
        .args(T1)
        .args(["--seeds", "2", "--markdown"])
        .arg(tmp.path())
        .assert()
        .code(1)
        .stderr(contains("--markdown").and(contains("is a folder")));
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

use predicates::prelude::PredicateBooleanExt;

// ---------------------------------------------------------------------------------------
// A sweep folder is one sweep

fn config_with_lr(dir: &Path, lr: &str) -> PathBuf {
    let p = dir.join(format!("t1-lr{lr}.toml"));
    std::fs::write(
        &p,
        builtin_config("deepspeed_tied_row_parallel.toml")
            .replace("lr = 0.05", &format!("lr = {lr}")),
    )
    .unwrap();
    p
}

#[test]
fn resume_refuses_a_changed_config_value_and_names_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    let a = config_with_lr(tmp.path(), "0.05");
    let b = config_with_lr(tmp.path(), "0.5");
    sweep_into(&out, "3", &["--config", a.to_str().unwrap()]).success();
    // Pretend it was interrupted: drop the finished files.
    std::fs::rename(out.join("seeds.csv"), out.join("seeds.csv.partial")).unwrap();
    sweep_into(&out, "3", &["--config", b.to_str().unwrap(), "--resume"])
        .code(1)
        .stderr(
            contains("different sweep")
                .and(contains("train.lr"))
                .and(contains("0.5")),
        );
}

#[test]
fn resume_refuses_a_different_profile_definition_not_just_a_different_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    let text = builtin_config("deepspeed_tied_row_parallel.toml");
    let mk = |name: &str, split: &str| {
        let p = tmp.path().join(name);
        std::fs::write(
            &p,
            format!(
                "{text}\n[profiles.mine]\nsplit = \"{split}\"\naccum = \"fma\"\npasses = \"f32\"\nallreduce = \"ring\"\nwire = \"f32\"\n"
            ),
        )
        .unwrap();
        p
    };
    let a = mk("a.toml", "single");
    let b = mk("b.toml", "chunks:2");
    sweep_into(
        &out,
        "2",
        &["--config", a.to_str().unwrap(), "--profile", "mine"],
    )
    .success();
    std::fs::rename(out.join("seeds.csv"), out.join("seeds.csv.partial")).unwrap();
    sweep_into(
        &out,
        "2",
        &[
            "--config",
            b.to_str().unwrap(),
            "--profile",
            "mine",
            "--resume",
        ],
    )
    .code(1)
    .stderr(contains("profile.mine"));
}

#[test]
fn a_kill_during_the_final_write_resumes_to_identical_files() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    sweep_into(&full, "5", &["--mutants", "all"]).success();
    // State 1: killed after frontiers.bin was renamed and summary.csv was written but before
    // seeds.csv was renamed into place, with a temporary file of an interrupted atomic write.
    let cut = tmp.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    for f in [
        "fingerprint.txt",
        "plan.csv",
        "summary.csv",
        "mutants.csv",
        "frontiers.bin",
    ] {
        std::fs::copy(full.join(f), cut.join(f)).unwrap();
    }
    let seeds = read(&full.join("seeds.csv"));
    std::fs::write(cut.join("seeds.csv.partial"), &seeds).unwrap();
    // 35-3-False-0 has 4 checks x 3 comparisons x 2 policies = 24 rows per seed-run.
    let units = (String::from_utf8(seeds.clone()).unwrap().lines().count() - 1) / 24;
    std::fs::write(cut.join(".progress"), format!("{units} {}\n", seeds.len())).unwrap();
    std::fs::write(cut.join(".summary.csv.tmp-999999"), "torn").unwrap();
    sweep_into(&cut, "5", &["--mutants", "all", "--resume"]).success();
    for f in [
        "seeds.csv",
        "summary.csv",
        "mutants.csv",
        "plan.csv",
        "fingerprint.txt",
        "frontiers.bin",
    ] {
        assert!(read(&full.join(f)) == read(&cut.join(f)), "{f} differs");
    }
    for gone in [
        ".summary.csv.tmp-999999",
        "seeds.csv.partial",
        "frontiers.bin.partial",
        ".progress",
    ] {
        assert!(!cut.join(gone).exists(), "{gone} left behind");
    }
    // State 2: killed after the rename, before .progress was removed: finished.
    std::fs::write(cut.join(".progress"), "30 1\n").unwrap();
    sweep_into(&cut, "5", &["--mutants", "all", "--resume"])
        .success()
        .stderr(contains("nothing to resume"));
    assert!(!cut.join(".progress").exists());
}

#[test]
fn resume_on_a_finished_folder_does_not_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    sweep_into(&out, "3", &[]).success();
    let before = std::fs::metadata(out.join("seeds.csv"))
        .unwrap()
        .modified()
        .unwrap();
    sweep_into(&out, "3", &["--resume"])
        .success()
        .stderr(contains("nothing to resume"));
    let after = std::fs::metadata(out.join("seeds.csv"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after, "seeds.csv was rewritten");
}

#[test]
fn resume_of_a_summary_only_sweep_restarts_it_to_identical_output() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    sweep_into(&full, "4", &["--summary-only"]).success();
    let cut = tmp.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    for f in ["fingerprint.txt", "plan.csv"] {
        std::fs::copy(full.join(f), cut.join(f)).unwrap();
    }
    sweep_into(&cut, "4", &["--summary-only", "--resume"]).success();
    assert!(read(&full.join("summary.csv")) == read(&cut.join("summary.csv")));
}

#[test]
fn resume_into_an_empty_folder_starts_the_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never-started");
    sweep_into(&out, "2", &["--resume"])
        .success()
        .stderr(contains("holds no sweep yet"));
    assert!(out.join("seeds.csv").exists());
}

#[test]
fn a_new_sweep_removes_the_previous_sweeps_files_and_keeps_others() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    sweep_into(&out, "3", &["--mutants", "all"]).success();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    assert!(out.join("mutants.csv").exists());
    seedsweep()
        .args([
            "sweep",
            "--scenario",
            "diloco",
            "--seeds",
            "2",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    assert!(!out.join("mutants.csv").exists(), "stale mutants.csv kept");
    assert_eq!(read(&out.join("notes.txt")), b"mine");
    // After a --summary-only run no stale seeds.csv stays, and report reads a consistent folder.
    sweep_into(&out, "5", &["--summary-only"]).success();
    assert!(!out.join("seeds.csv").exists(), "stale seeds.csv kept");
    seedsweep().arg("report").arg(&out).assert().success();
}

#[test]
fn readme_command_order_leaves_a_reportable_folder() {
    // The README's order: a sweep, a summary-only sweep, a mutants sweep, then report, all
    // into one folder (results/latest in the README).
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("latest");
    sweep_into(&out, "4", &[]).success();
    sweep_into(&out, "6", &["--summary-only"]).success();
    sweep_into(&out, "3", &["--mutants", "all"]).success();
    seedsweep().arg("report").arg(&out).assert().success();
}

#[cfg(unix)]
#[test]
fn an_owned_name_that_is_a_symlink_is_refused_not_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    std::fs::create_dir_all(&out).unwrap();
    let elsewhere = tmp.path().join("precious.csv");
    std::fs::write(&elsewhere, "precious").unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("seeds.csv")).unwrap();
    sweep_into(&out, "2", &[])
        .code(1)
        .stderr(contains("not a regular file"));
    assert_eq!(read(&elsewhere), b"precious");
    assert!(std::fs::symlink_metadata(out.join("seeds.csv"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_second_writer_is_stopped_by_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    std::fs::create_dir_all(&out).unwrap();
    // A live process on this host holds the lock: this test process.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    std::fs::write(
        out.join(".seedsweep.lock"),
        format!("{} {host}\n", std::process::id()),
    )
    .unwrap();
    sweep_into(&out, "2", &[])
        .code(1)
        .stderr(contains("in use by another seedsweep"));
    assert!(!out.join("seeds.csv").exists());
    // A dead writer's lock (a kill -9) is taken over.
    if Path::new("/proc/self").exists() {
        std::fs::write(out.join(".seedsweep.lock"), format!("4194304 {host}\n")).unwrap();
        sweep_into(&out, "2", &[]).success();
        assert!(!out.join(".seedsweep.lock").exists());
    }
}

#[test]
fn two_concurrent_sweeps_into_one_folder_never_tear_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    let spawn = |seeds: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_seedsweep"))
            .arg("sweep")
            .args(T1)
            .args(["--seeds", seeds, "--quiet", "--out"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn("3000");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let b = spawn("4000");
    let (ra, rb) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let ok = [ra.status.success(), rb.status.success()];
    assert!(ok.iter().any(|x| *x), "neither sweep finished");
    if ok.iter().all(|x| *x) {
        // Sequential after all (the first finished before the second started): fine.
        return;
    }
    let loser = if ok[0] { &rb } else { &ra };
    assert!(String::from_utf8_lossy(&loser.stderr).contains("in use by another seedsweep"));
    let seeds = if ok[0] { 3000 } else { 4000 };
    // The winner's folder is whole: its summary counts every one of its seeds.
    let summary = String::from_utf8(read(&out.join("summary.csv"))).unwrap();
    assert!(
        summary.contains(&format!(",{seeds},")),
        "summary: {summary}"
    );
}

// ---------------------------------------------------------------------------------------
// merge validates

fn shard(tmp: &Path, name: &str, seeds: &str, shard: &str) -> PathBuf {
    let d = tmp.join(name);
    sweep_into(&d, seeds, &["--shard", shard]).success();
    d
}

fn merge(dirs: &[&Path], out: &Path) -> assert_cmd::assert::Assert {
    seedsweep()
        .arg("merge")
        .args(dirs)
        .arg("--out")
        .arg(out)
        .assert()
}

#[test]
fn merge_refuses_missing_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let a = shard(tmp.path(), "a", "8", "0/4");
    let c = shard(tmp.path(), "c", "8", "2/4");
    merge(&[&a, &c], &tmp.path().join("m"))
        .code(1)
        .stderr(contains("1/4, 3/4 missing"));
    assert!(!tmp.path().join("m").join("plan.csv").exists());
}

#[test]
fn merge_refuses_shards_of_different_seed_counts_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let a = shard(tmp.path(), "a", "10", "0/2");
    let b = shard(tmp.path(), "b", "20", "1/2");
    merge(&[&a, &b], &tmp.path().join("m"))
        .code(1)
        .stderr(contains("different sweep").and(contains("seeds.count")));
}

#[test]
fn merge_refuses_the_same_shard_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let a = shard(tmp.path(), "a", "6", "0/2");
    let b = tmp.path().join("b");
    copy_dir(&a, &b);
    merge(&[&a, &b], &tmp.path().join("m"))
        .code(1)
        .stderr(contains("both shard 0/2"));
}

/// Drops the checksum lines from `dir`'s fingerprint: a shard as an older seedsweep wrote it,
/// whose rows merge still validates one by one.
fn without_checksums(dir: &Path) {
    let p = dir.join("fingerprint.txt");
    let text = String::from_utf8(read(&p)).unwrap();
    assert!(text.contains("\nfile."), "no checksums to drop");
    let kept: String = text
        .split_inclusive('\n')
        .filter(|l| !l.starts_with("file."))
        .collect();
    std::fs::write(&p, kept).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn merge_refuses_truncated_empty_or_binary_seed_files() {
    let tmp = tempfile::tempdir().unwrap();
    let a = shard(tmp.path(), "a", "6", "0/2");
    let b = shard(tmp.path(), "b", "6", "1/2");
    // Checksums would refuse any edit first (edited_or_damaged_shards_are_refused...); without
    // them, as an older seedsweep wrote shards, the rows themselves are checked.
    without_checksums(&b);
    let good = read(&b.join("seeds.csv"));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated mid-row", good[..good.len() - 30].to_vec(), "b"),
        (
            "truncated at a unit",
            {
                let text = String::from_utf8(good.clone()).unwrap();
                let keep: usize = text.split_inclusive('\n').take(1 + 24).map(str::len).sum();
                good[..keep].to_vec()
            },
            "holds 1 of the 3",
        ),
        ("empty", Vec::new(), "holds 0 of the 3"),
        ("binary", vec![0u8, 159, 146, 150, 255, 10, 1, 2, 3], "b"),
    ];
    for (what, bytes, needle) in cases {
        std::fs::write(b.join("seeds.csv"), &bytes).unwrap();
        merge(&[&a, &b], &tmp.path().join("m"))
            .code(1)
            .stderr(contains("merge").and(contains(needle)))
            .stderr(contains("seeds.csv"));
        eprintln!("{what}: refused");
    }
}

#[test]
fn merge_refuses_nan_and_negative_usages() {
    let tmp = tempfile::tempdir().unwrap();
    let a = shard(tmp.path(), "a", "4", "0/2");
    let b = shard(tmp.path(), "b", "4", "1/2");
    without_checksums(&b);
    let good = String::from_utf8(read(&b.join("seeds.csv"))).unwrap();
    let header: Vec<&str> = good.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "usage_pct").unwrap();
    for bad in ["NaN", "-1.5"] {
        let mut lines: Vec<String> = good.lines().map(str::to_string).collect();
        let mut cells: Vec<String> = lines[1].split(',').map(str::to_string).collect();
        cells[col] = bad.into();
        lines[1] = cells.join(",");
        std::fs::write(b.join("seeds.csv"), lines.join("\n") + "\n").unwrap();
        merge(&[&a, &b], &tmp.path().join("m"))
            .code(1)
            .stderr(contains("usage_pct"));
    }
}

#[test]
fn merge_refuses_an_unfinished_or_summary_only_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let a = shard(tmp.path(), "a", "4", "0/2");
    let b = tmp.path().join("b");
    sweep_into(&b, "4", &["--shard", "1/2", "--summary-only"]).success();
    merge(&[&a, &b], &tmp.path().join("m"))
        .code(1)
        .stderr(contains("--summary-only"));
}

// ---------------------------------------------------------------------------------------
// Strict input

#[test]
fn duplicate_names_in_a_list_are_errors() {
    for (flag, v) in [
        ("--policy", "old,old"),
        ("--profile", "cpu-fma,cpu-fma"),
        ("--scenario", "diloco,diloco"),
        ("--param", "35-3-False-0,35-3-False-0"),
    ] {
        seedsweep()
            .args(["sweep", "--seeds", "1", "--quiet", flag, v])
            .assert()
            .code(1)
            .stderr(contains(flag).and(contains("given twice")));
    }
    let tmp = tempfile::tempdir().unwrap();
    let a = config_with_lr(tmp.path(), "0.05");
    let b = config_with_lr(tmp.path(), "0.1");
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--config"])
        .arg(&a)
        .arg("--config")
        .arg(&b)
        .arg("--out")
        .arg(tmp.path().join("o"))
        .assert()
        .code(1)
        .stderr(contains("--config").and(contains("again")));
}

#[test]
fn a_config_cannot_silently_redefine_a_builtin_profile_or_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let text = builtin_config("deepspeed_tied_row_parallel.toml");
    let profile = "[profiles.cpu-fma]\nsplit = \"chunks:2\"\naccum = \"fma\"\npasses = \"f32\"\nallreduce = \"ring\"\nwire = \"f32\"\n";
    let p = tmp.path().join("p.toml");
    std::fs::write(&p, format!("{text}\n{profile}")).unwrap();
    seedsweep()
        .arg("list")
        .arg("--config")
        .arg(&p)
        .assert()
        .code(1)
        .stderr(contains("profiles.cpu-fma").and(contains("override = true")));
    let o = tmp.path().join("o.toml");
    std::fs::write(
        &o,
        format!("{text}\n{}", profile.replace("]\n", "]\noverride = true\n")),
    )
    .unwrap();
    seedsweep()
        .arg("list")
        .arg("--config")
        .arg(&o)
        .assert()
        .success()
        .stderr(contains("overrides the profile `cpu-fma`"));
    let q = tmp.path().join("q.toml");
    std::fs::write(
        &q,
        format!("{text}\n[policies.torch-default]\ndefault = {{ atol = 1.0, rtol = 1.0 }}\n"),
    )
    .unwrap();
    seedsweep()
        .arg("list")
        .arg("--config")
        .arg(&q)
        .assert()
        .code(1)
        .stderr(contains("policies.torch-default").and(contains("override = true")));
}

#[test]
fn numeric_and_enumerated_config_keys_are_checked_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let t1 = builtin_config("deepspeed_tied_row_parallel.toml");
    let t2 = builtin_config("deepspeed_row_parallel.toml");
    let cases = [
        (t1.replace("lr = 0.05", "lr = 1e39"), "train.lr"),
        (t1.replace("zero_stage = 2", "zero_stage = 7"), "zero_stage"),
        (
            t2.replacen("parallel = \"row\"", "parallel = \"rows\"", 1),
            "layers[2].parallel",
        ),
        (
            t1.replace(
                "default_policies = [\"old\", \"torch-default\"]",
                "default_policies = []",
            ),
            "default_policies",
        ),
        (
            t1.replace("default_profiles = [\"cpu-fma\"]", "default_profiles = []"),
            "default_profiles",
        ),
        (
            t1.replace(
                "default = { atol = 1e-6, rtol = 1e-5 }",
                "default = { atol = 1e300, rtol = 1e-5 }",
            ),
            "atol",
        ),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        assert_ne!(text, &t1, "case {i} did not change the config");
        let p = tmp.path().join(format!("c{i}.toml"));
        std::fs::write(&p, text).unwrap();
        seedsweep()
            .args(["sweep", "--seeds", "1", "--quiet", "--config"])
            .arg(&p)
            .arg("--out")
            .arg(tmp.path().join("o"))
            .assert()
            .code(1)
            .stderr(contains(*key));
    }
}

// ---------------------------------------------------------------------------------------
// Resource limits and panics

#[test]
fn seed_ranges_that_overflow_u64_are_errors_for_every_command() {
    let max = "18446744073709551615";
    for args in [
        vec!["sweep", "--seeds", max, "--summary-only", "--quiet"],
        vec!["sweep", "--seeds", max, "--quiet"],
        vec!["size", "--seeds", max],
        vec!["size", "--seeds", "2", "--first-seed", max],
        vec!["sweep", "--seeds", "2", "--first-seed", max, "--quiet"],
    ] {
        let tmp = tempfile::tempdir().unwrap();
        seedsweep()
            .current_dir(tmp.path())
            .args(&args)
            .args(T1)
            .assert()
            .code(1)
            .stderr(contains("overflow u64"));
    }
}

#[test]
fn huge_seed_counts_are_refused_by_the_memory_estimate_not_aborted() {
    let tmp = tempfile::tempdir().unwrap();
    for extra in [&["--summary-only"][..], &[][..]] {
        seedsweep()
            .current_dir(tmp.path())
            .arg("sweep")
            .args(T1)
            .args([
                "--seeds",
                "18446744073709551615",
                "--first-seed",
                "0",
                "--quiet",
            ])
            .args(extra)
            .assert()
            .code(1)
            .stderr(contains("--max-memory"));
    }
    assert!(!tmp.path().join("results").exists(), "files written");
}

#[test]
fn allowed_sizes_beyond_memory_are_refused_naming_the_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("big.toml");
    std::fs::write(
        &p,
        builtin_config("deepspeed_tied_row_parallel.toml").replace("hidden = 35", "hidden = 16384"),
    )
    .unwrap();
    seedsweep()
        .args([
            "sweep",
            "--param",
            "35-3-False-0",
            "--seeds",
            "1",
            "--quiet",
        ])
        // The bound from the model: about 5.1 GiB at hidden = 16,384 (4.1 GiB of f64 and
        // f32 parameters, a quarter more).
        .args(["--max-memory", "4G", "--config"])
        .arg(&p)
        .arg("--out")
        .arg(tmp.path().join("o"))
        .assert()
        .code(1)
        .stderr(contains("projection_weight 16384x16384").and(contains("big.toml")));
    assert!(
        !tmp.path().join("o").exists(),
        "files written before refusal"
    );
    seedsweep()
        .args([
            "scale",
            "--rows",
            "100000",
            "--cols",
            "100000",
            "--max-memory",
            "8G",
            "--out",
        ])
        .arg(tmp.path().join("sc"))
        .assert()
        .code(1)
        .stderr(contains("--rows 100000"));
    seedsweep()
        .args(["bench", "--seeds", "100000000000000"])
        .assert()
        .code(2)
        .stderr(contains("--seeds").and(contains("1..=10000000")));
}

#[test]
fn too_many_threads_are_refused_naming_the_flag_before_any_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    // Out of range at the flag: a usage error (exit 2), before anything is written.
    sweep_into(&out, "2", &["--threads", "100000"])
        .code(2)
        .stderr(contains("--threads").and(contains("1..=1024")));
    assert!(!out.exists());
}

#[test]
fn long_names_and_repeated_modifiers_do_not_panic() {
    let spec = format!("cpu-fma{}", "+allreduce-bf16".repeat(5000));
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--profile", &spec])
        .assert()
        .code(1)
        .stderr(contains("--profile"));
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("long.toml");
    let long = "p".repeat(10 << 20);
    std::fs::write(
        &p,
        builtin_config("deepspeed_tied_row_parallel.toml")
            .replace("id = \"35-3-False-0\"", &format!("id = \"{long}\"")),
    )
    .unwrap();
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--config"])
        .arg(&p)
        .arg("--out")
        .arg(tmp.path().join("o"))
        .assert()
        .code(1)
        .stderr(contains("at most"));
    // A table with a cell wider than u16::MAX renders (it used to panic on the format width).
    let wide = "w".repeat(70_000);
    let t = seedsweep::report::table::render(&["h".to_string()], &[vec![wide.clone()]], 1);
    assert!(t.contains(&wide));
}

// ---------------------------------------------------------------------------------------
// Smaller defects

#[test]
fn scale_svg_reference_lines_have_their_own_coordinates() {
    let tmp = tempfile::tempdir().unwrap();
    seedsweep()
        .args([
            "scale",
            "--k",
            "32,256,2048",
            "--tp",
            "2",
            "--seeds",
            "3",
            "--out",
        ])
        .arg(tmp.path())
        .assert()
        .success();
    let svg = String::from_utf8(read(&tmp.path().join("scale.svg"))).unwrap();
    let lines: Vec<&str> = svg
        .split("<line ")
        .filter(|l| {
            (l.contains("stroke-dasharray=\"4 3\"") || l.contains("stroke-dasharray=\"1 3\""))
                // Not the legend row's samples of the two dash patterns.
                && !l.contains("y1=\"30.0\"")
        })
        .map(|l| l.split("stroke").next().unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{svg}");
    assert_ne!(lines[0], lines[1], "sqrt(K) and K lines coincide");
}

#[test]
fn scale_refuses_flags_it_cannot_honour() {
    seedsweep()
        .args(["scale", "--rng", "chacha"])
        .assert()
        .code(2)
        .stderr(contains("--rng"));
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("t1.toml");
    std::fs::write(&p, builtin_config("deepspeed_tied_row_parallel.toml")).unwrap();
    seedsweep()
        .arg("scale")
        .arg("--config")
        .arg(&p)
        .arg("--out")
        .arg(tmp.path().join("o"))
        .assert()
        .code(1)
        .stderr(contains("--config").and(contains("no [profiles.*]")));
    // A config with a profile does take effect.
    let q = tmp.path().join("prof.toml");
    std::fs::write(
        &q,
        format!(
            "{}\n[profiles.mine]\nsplit = \"chunks:2\"\naccum = \"fma\"\npasses = \"f32\"\nallreduce = \"ring\"\nwire = \"f32\"\n",
            builtin_config("deepspeed_tied_row_parallel.toml")
        ),
    )
    .unwrap();
    seedsweep()
        .args([
            "scale",
            "--k",
            "32",
            "--tp",
            "2",
            "--seeds",
            "2",
            "--profile",
            "mine",
            "--config",
        ])
        .arg(&q)
        .arg("--out")
        .arg(tmp.path().join("o"))
        .assert()
        .success()
        .stdout(contains("mine on x"));
}

#[test]
fn a_negative_number_names_its_flag() {
    for args in [
        ["sweep", "--seeds", "-1"],
        ["sweep", "--first-seed", "-1"],
        ["size", "--threads", "-2"],
    ] {
        seedsweep()
            .args(args)
            .assert()
            .code(2)
            .stderr(contains(args[1]).and(contains("-")));
    }
}

#[cfg(unix)]
#[test]
fn ctrl_c_keeps_the_folder_and_hints_at_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_seedsweep"))
        .arg("sweep")
        .args(T1)
        .args(["--seeds", "20000", "--quiet", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the sweep has started writing.
    let t = std::time::Instant::now();
    while !out.join("plan.csv").exists() && t.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let ok = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("--resume"), "{err}");
    assert!(out.join("fingerprint.txt").exists());
}

// ---------------------------------------------------------------------------------------
// The third reliability pass: nothing of the user's touched, no empty run passes a gate,
// one memory gate, bounded inputs, integrity end to end

/// A folder a user made, with files whose names seedsweep also writes.
fn users_folder(tmp: &Path) -> PathBuf {
    let d = tmp.join("mine");
    std::fs::create_dir_all(&d).unwrap();
    for f in [
        "report.html",
        "recommendations.csv",
        "mutants.csv",
        "summary.csv",
        "plan.csv",
        "notes.txt",
    ] {
        std::fs::write(d.join(f), format!("the user's {f}")).unwrap();
    }
    d
}

fn assert_untouched(d: &Path) {
    for f in [
        "report.html",
        "recommendations.csv",
        "mutants.csv",
        "summary.csv",
        "plan.csv",
        "notes.txt",
    ] {
        assert_eq!(
            read(&d.join(f)),
            format!("the user's {f}").as_bytes(),
            "{f}"
        );
    }
    let names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 6, "files added: {names:?}");
}

#[test]
fn a_folder_seedsweep_did_not_write_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let d = users_folder(tmp.path());
    for extra in [&[][..], &["--resume"][..], &["--summary-only"][..]] {
        let out = seedsweep()
            .arg("sweep")
            .args(T1)
            .args(["--seeds", "2", "--quiet"])
            .args(extra)
            .arg("--out")
            .arg(&d)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {e}");
        assert!(e.contains("not a seedsweep sweep folder"), "{e}");
        assert!(!e.contains("drop --resume") && !e.contains("delete"), "{e}");
        assert_untouched(&d);
    }
    let s0 = shard(tmp.path(), "s0", "2", "0/2");
    let s1 = shard(tmp.path(), "s1", "2", "1/2");
    merge(&[&s0, &s1], &d)
        .code(1)
        .stderr(contains("not a seedsweep sweep folder"));
    assert_untouched(&d);
    // An empty folder, and one holding seedsweep's own sweep, are fine.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    sweep_into(&empty, "2", &[]).success();
    sweep_into(&empty, "3", &[]).success();
}

#[cfg(unix)]
#[test]
fn merge_refuses_an_out_that_is_or_holds_a_shard_by_inode_not_spelling() {
    let tmp = tempfile::tempdir().unwrap();
    let s0 = shard(tmp.path(), "s0", "2", "0/2");
    let s1 = shard(tmp.path(), "s1", "2", "1/2");
    let seeds = read(&s1.join("seeds.csv"));
    // Another spelling of shard 1: a symlink to it.
    let alias = tmp.path().join("alias");
    std::os::unix::fs::symlink(&s1, &alias).unwrap();
    merge(&[&s0, &s1], &alias)
        .code(1)
        .stderr(contains("is also --out"));
    // The folder that holds the shards.
    merge(&[&s0, &s1], tmp.path())
        .code(1)
        .stderr(contains("is inside --out"));
    assert_eq!(read(&s1.join("seeds.csv")), seeds);
}

#[cfg(unix)]
#[test]
fn a_planted_probe_link_is_never_written_through() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let out = tmp.path().join("s");
    std::fs::create_dir(&out).unwrap();
    // The probe's old fixed name, and a temporary file's old predictable name for a range of
    // process ids, all links to the victim.
    std::os::unix::fs::symlink(&victim, out.join(".seedsweep-write-probe")).unwrap();
    sweep_into(&out, "2", &[]).success();
    assert_eq!(read(&victim), b"precious");
    assert!(
        std::fs::symlink_metadata(out.join(".seedsweep-write-probe"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn a_seed_range_that_would_wrap_is_an_error_not_an_empty_pass() {
    let tmp = tempfile::tempdir().unwrap();
    // 2^64 - 10 + 10 seeds ends past u64: before, the range wrapped to nothing and exited 0.
    seedsweep()
        .current_dir(tmp.path())
        .arg("sweep")
        .args(T1)
        .args([
            "--first-seed",
            "18446744073709551606",
            "--seeds",
            "10",
            "--quiet",
            "--fail-on-exceed",
        ])
        .assert()
        .code(1)
        .stderr(contains("--first-seed"));
    assert!(!tmp.path().join("results").exists());
    // The last range that fits runs its seeds.
    seedsweep()
        .current_dir(tmp.path())
        .arg("sweep")
        .args(T1)
        .args([
            "--first-seed",
            "18446744073709551605",
            "--seeds",
            "10",
            "--quiet",
        ])
        .assert()
        .success();
    let seeds = String::from_utf8(read(&tmp.path().join("results/latest/seeds.csv"))).unwrap();
    assert!(
        seeds.contains(",18446744073709551614,"),
        "the last seed ran"
    );
}

#[test]
fn an_empty_shard_fails_a_gate_and_writes_a_header() {
    let tmp = tempfile::tempdir().unwrap();
    // One seed in two shards: shard 0 holds none.
    let d = tmp.path().join("s0");
    sweep_into(&d, "1", &["--shard", "0/2", "--fail-on-exceed"])
        .code(3)
        .stderr(contains("evaluated no seed-runs"));
    let csv = String::from_utf8(read(&d.join("seeds.csv"))).unwrap();
    assert!(csv.starts_with("scenario,param,profile,seed,"), "{csv:?}");
    assert_eq!(csv.lines().count(), 1, "{csv}");
    // Merged with the shard that holds the seed, it equals one run.
    let d1 = tmp.path().join("s1");
    sweep_into(&d1, "1", &["--shard", "1/2"]).success();
    let single = tmp.path().join("single");
    sweep_into(&single, "1", &[]).success();
    let m = tmp.path().join("m");
    merge(&[&d, &d1], &m).success();
    assert_eq!(read(&m.join("seeds.csv")), read(&single.join("seeds.csv")));
}

#[test]
fn max_memory_messages_say_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    seedsweep()
        .current_dir(tmp.path())
        .arg("sweep")
        .args(T1)
        .args(["--seeds", "1", "--max-memory", "1e400"])
        .assert()
        .code(1)
        .stderr(contains("too large"));
    let p = tmp.path().join("pol.toml");
    let text = builtin_config("deepspeed_tied_row_parallel.toml")
        + "\n[policies.huge]\ndescription = \"x\"\ndefault = { atol = 1e308, rtol = 0.0 }\n";
    std::fs::write(&p, text).unwrap();
    let out = seedsweep()
        .current_dir(tmp.path())
        .args(["sweep", "--seeds", "1", "--quiet", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("1e+308 is not allowed"), "{e}");
    assert!(e.len() < 400, "echoed at length: {e}");
}

/// `seedsweep ARGS` under an address-space limit of `kb` KiB (`ulimit -v`).
#[cfg(target_os = "linux")]
fn under_ulimit(kb: u64, args: &[&str]) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kb} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_seedsweep"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn an_address_space_limit_gives_a_clear_refusal_in_every_command() {
    // T1 at hidden 8192 needs about 1.3 GiB per seed-run: under a 1,000,000 KiB limit the
    // allocator would abort the process; the estimate refuses it first, not blaming a flag
    // that was not given.
    let cfg = "configs/examples/t1_h8192.toml";
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let out = out.to_str().unwrap();
    let explain = vec![
        "explain",
        "--config",
        cfg,
        "--scenario",
        "t1-h8192",
        "--check",
        "logits",
        "--step",
        "1",
        "--observed",
        "0.5",
    ];
    for args in [
        vec![
            "sweep",
            "--config",
            cfg,
            "--seeds",
            "1",
            "--threads",
            "1",
            "--quiet",
            "--out",
            out,
        ],
        vec!["repro", "--config", cfg, "--scenario", "t1-h8192"],
        explain.clone(),
    ] {
        let o = under_ulimit(1_000_000, &args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains("not enough memory"), "{args:?}: {e}");
        assert!(e.contains("RLIMIT_AS"), "{args:?}: {e}");
        assert!(!e.contains("invalid value for --max-memory"), "{e}");
    }
    // explain honours --max-memory too.
    seedsweep()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(&explain)
        .args(["--max-memory", "64M"])
        .assert()
        .code(1)
        .stderr(contains("--max-memory"));
}

#[test]
fn element_counts_that_overflow_are_refused_by_check_and_explain() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("big.toml");
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("configs/examples/row_parallel_head_tp4.toml"),
    )
    .unwrap()
    .replace(
        r#"params = [{ id = "30", hidden = 30 }, { id = "64", hidden = 64 }]"#,
        r#"params = [{ id = "big", hidden = 64, batch = [1048576, 1048576, 1048576, 65536] }]"#,
    );
    assert!(text.contains("1048576"));
    std::fs::write(&p, text).unwrap();
    seedsweep()
        .arg("check")
        .arg(&p)
        .assert()
        .code(1)
        .stderr(contains("params[big].dims").and(contains("more than 2^40 elements")));
    seedsweep()
        .args([
            "explain",
            "--scenario",
            "row-parallel-head-tp4",
            "--check",
            "logits",
        ])
        .args(["--step", "1", "--observed", "0.5", "--config"])
        .arg(&p)
        .assert()
        .code(1)
        .stderr(contains("more than 2^40 elements"));
}

#[test]
fn inputs_are_bounded_parametrizations_and_config_size() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("configs/examples/row_parallel_head_tp4.toml"),
    )
    .unwrap();
    let many: Vec<String> = (0..5000)
        .map(|i| format!("{{ id = \"p{i}\", hidden = 30 }}"))
        .collect();
    let text = base.replace(
        r#"params = [{ id = "30", hidden = 30 }, { id = "64", hidden = 64 }]"#,
        &format!("params = [{}]", many.join(", ")),
    );
    let p = tmp.path().join("many.toml");
    std::fs::write(&p, text).unwrap();
    let start = std::time::Instant::now();
    for cmd in [
        &["check"][..],
        &["sweep", "--seeds", "1", "--param", "p0", "--config"][..],
    ] {
        seedsweep()
            .current_dir(tmp.path())
            .args(cmd)
            .arg(&p)
            .assert()
            .code(1)
            .stderr(contains("5000 parametrizations is too many"));
    }
    // Refused at once, not after building 5,000 graphs (tens of seconds before); 20 s is
    // far above the refusal and far below the build, even on a loaded machine.
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    if Path::new("/dev/zero").exists() {
        for cmd in [&["check"][..], &["sweep", "--seeds", "1", "--config"][..]] {
            seedsweep()
                .current_dir(tmp.path())
                .args(cmd)
                .arg("/dev/zero")
                .assert()
                .code(1)
                .stderr(contains("larger than 16 MiB"));
        }
    }
}

#[test]
fn edited_or_damaged_shards_are_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    for format in ["csv", "parquet"] {
        let file = if format == "csv" {
            "seeds.csv"
        } else {
            "seeds.parquet"
        };
        let s0 = tmp.path().join(format!("{format}-0"));
        let s1 = tmp.path().join(format!("{format}-1"));
        sweep_into(&s0, "4", &["--shard", "0/2", "--format", format]).success();
        sweep_into(&s1, "4", &["--shard", "1/2", "--format", format]).success();
        let fp = String::from_utf8(read(&s1.join("fingerprint.txt"))).unwrap();
        assert!(fp.contains(&format!("file.{file}.sha256 = ")), "{fp}");
        // One bit flipped in the middle of the shard's per-seed file.
        let mut bytes = read(&s1.join(file));
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x04;
        std::fs::write(s1.join(file), &bytes).unwrap();
        let m = tmp.path().join(format!("{format}-m"));
        merge(&[&s0, &s1], &m)
            .code(1)
            .stderr(contains(file).and(contains("is not the file the sweep wrote")));
        assert!(!m.join("summary.csv").exists());
        // --resume, report and size check the same.
        sweep_into(
            &s1,
            "4",
            &["--shard", "1/2", "--format", format, "--resume"],
        )
        .code(1)
        .stderr(contains("is not the file the sweep wrote"));
        seedsweep()
            .arg("report")
            .arg(&s1)
            .args(["--out", "-"])
            .assert()
            .code(1)
            .stderr(contains("is not the file the sweep wrote"));
    }
    // An edited summary is caught too.
    let s = tmp.path().join("one");
    sweep_into(&s, "2", &[]).success();
    let text = String::from_utf8(read(&s.join("summary.csv"))).unwrap();
    std::fs::write(s.join("summary.csv"), text.replacen(",2,", ",3,", 1)).unwrap();
    seedsweep()
        .arg("size")
        .arg(&s)
        .assert()
        .code(1)
        .stderr(contains("summary.csv").and(contains("is not the file the sweep wrote")));
}

#[test]
fn a_truncated_frontiers_file_of_a_parquet_sweep_names_the_parquet_partial() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p");
    let args = |resume: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_seedsweep"));
        c.arg("sweep")
            .args(T1)
            .args([
                "--seeds", "20000", "--quiet", "--format", "parquet", "--out",
            ])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if resume {
            c.arg("--resume");
        }
        c
    };
    // Killed after its first checkpoint.
    let mut child = args(false).spawn().unwrap();
    checkpoint::wait_for_first_checkpoint(&mut child, &out);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        out.join("seeds.bin.partial").exists(),
        "not killed mid-sweep"
    );
    // Cut to a third: its header stays, most of its records are gone (a torn tail included).
    let f = out.join("frontiers.bin.partial");
    let bytes = read(&f);
    std::fs::write(&f, &bytes[..bytes.len() / 3]).unwrap();
    let o = args(true).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("fewer units than seeds.bin.partial"), "{e}");
    assert!(!e.contains("seeds.csv.partial"), "{e}");
}
