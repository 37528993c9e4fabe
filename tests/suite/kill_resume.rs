//! `kill -9` at random moments of a sweep, each followed by `--resume` (every other trial also
//! kills that `--resume` once), then `--resume` to completion: the folder must be
//! byte-identical to an uninterrupted run's, with nothing left over.
//!
//! Fast by default (5,000 seeds = 2 checkpoint chunks, 2 trials). The full check of the issue:
//! `SEEDSWEEP_KILL_SEEDS=20000 SEEDSWEEP_KILL_TRIALS=20 cargo test --release --test suite -- kill_resume:: --nocapture`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// splitmix64: a fixed-seed generator for the kill moments (never the clock).
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn sweep(out: &Path, seeds: u64, resume: bool, format: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_seedsweep"));
    c.args(["sweep", "--format", format]).args(extra);
    c.args([
        "--quiet",
        "--scenario",
        "deepspeed-tied-row-parallel",
        "--param",
        "35-3-False-0",
        "--seeds",
        &seeds.to_string(),
        "--out",
    ])
    .arg(out)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if resume {
        c.arg("--resume");
    }
    c
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn kill_9_at_random_moments_then_resume_is_byte_identical() {
    kill_and_resume("csv", "seeds.csv", &[]);
}

/// The same for `--format parquet`, whose running file is the binary `seeds.bin.partial` and
/// whose finished file is converted at the end.
#[test]
fn kill_9_then_resume_is_byte_identical_in_parquet() {
    kill_and_resume("parquet", "seeds.parquet", &[]);
}

/// The same with mutants, whose values go to `mutants.bin.partial` while the sweep runs
/// (a mutant group writes no per-seed rows) and whose `mutants.csv` comes from them.
#[test]
fn kill_9_then_resume_with_mutants_is_byte_identical() {
    let mutants = ["--mutants", "missing-allreduce,bf16-allreduce"];
    kill_and_resume("csv", "seeds.csv", &mutants);
    kill_and_resume("parquet", "seeds.parquet", &mutants);
}

fn kill_and_resume(format: &str, seeds_file: &str, extra: &[&str]) {
    let seeds = env_u64("SEEDSWEEP_KILL_SEEDS", 5000);
    let trials = env_u64("SEEDSWEEP_KILL_TRIALS", 2);
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    let t0 = Instant::now();
    assert!(sweep(&full, seeds, false, format, extra)
        .status()
        .unwrap()
        .success());
    let t_full = t0.elapsed().as_micros() as u64;
    let mut rng = 0x5eed_0009u64;
    let (mut kills, mut missed) = (0, 0);
    // Kills `cmd` after a random wait below `max_us`; whether it was still running.
    let mut kill_at = |mut cmd: Command, max_us: u64| -> bool {
        let mut child = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_micros(next(&mut rng) % max_us.max(1)));
        let running = child.try_wait().unwrap().is_none();
        if running {
            child.kill().unwrap(); // SIGKILL
        }
        let status = child.wait().unwrap();
        assert!(status.code() != Some(101), "a sweep panicked");
        running
    };
    for i in 0..trials {
        // Each trial: a fresh sweep killed at a random moment of its run; every other trial
        // also kills the first --resume; then --resume to completion.
        let cut = tmp.path().join(format!("cut{i}"));
        let mut phases = vec![(sweep(&cut, seeds, false, format, extra), t_full * 9 / 10)];
        if i % 2 == 1 {
            phases.push((sweep(&cut, seeds, true, format, extra), t_full / 2));
        }
        for (cmd, max_us) in phases {
            if kill_at(cmd, max_us) {
                kills += 1;
            } else {
                missed += 1;
            }
        }
        assert!(sweep(&cut, seeds, true, format, extra)
            .status()
            .unwrap()
            .success());
        let mutants = if extra.is_empty() {
            None
        } else {
            Some("mutants.csv")
        };
        for f in [
            "fingerprint.txt",
            "plan.csv",
            seeds_file,
            "summary.csv",
            "frontiers.bin",
        ]
        .into_iter()
        .chain(mutants)
        {
            assert!(
                std::fs::read(full.join(f)).unwrap() == std::fs::read(cut.join(f)).unwrap(),
                "trial {i}: {f} differs after kills and --resume"
            );
        }
        assert_eq!(listing(&full), listing(&cut), "trial {i}: left-over files");
    }
    eprintln!(
        "{format}: {seeds} seeds, {trials} trials: {kills} kill -9 mid-run, {missed} runs finished before \
         their kill; uninterrupted run {:.1} s; every trial byte-identical after --resume",
        t_full as f64 / 1e6
    );
}
