//! A bounded, seeded fuzz of the command line and of config files: random subcommands with
//! random (mostly hostile) flag values, and random mutations of the built-in scenario configs
//! passed with `--config`. No run may panic (exit 101, "panicked at") or abort (killed by a
//! signal other than the harness's own timeout).
//!
//! CI runs it for a few seconds. Longer: `SEEDSWEEP_FUZZ_SECS=600 SEEDSWEEP_FUZZ_SEED=1
//! cargo test --release --test suite -- fuzz:: --nocapture` (it prints its counts).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const SMALL_COUNTS: &[&str] = &[
    "1",
    "2",
    "3",
    "1",
    "2",
    "5",
    "1",
    "0",
    "-1",
    "18446744073709551615",
    "18446744073709551614",
    "abc",
    "1e3",
    "",
    "3.5",
];
const SEEDS_AT: &[&str] = &[
    "0",
    "1",
    "8173",
    "18446744073709551615",
    "18446744073709551614",
    "-5",
    "x",
];
const THREADS: &[&str] = &[
    "1",
    "2",
    "0",
    "100000",
    "-1",
    "1025",
    "18446744073709551615",
];
const SCENARIOS: &[&str] = &[
    "deepspeed-tied-row-parallel",
    "deepspeed-row-parallel",
    "maxtext-diloco",
    "diloco",
    "deepspeed-tied-row-parallel,deepspeed-tied-row-parallel",
    "nope",
    "",
    ",",
];
const PARAMS: &[&str] = &[
    "35-3-False-0",
    "32-None-False-0",
    "32-3-False-2",
    "35-3-False-0,35-3-False-0",
    "nope",
    "",
];
const PROFILES: &[&str] = &[
    "cpu-fma",
    "cpu-nofma",
    "cpu-fma+allreduce-bf16",
    "cpu-fma+allreduce-bf16+allreduce-bf16",
    "tpu-bf16,gpu-tf32",
    "cpu-fma,cpu-fma",
    "nope",
    "cpu-fma+nope",
    "+",
    "",
];
const POLICIES: &[&str] = &["old", "torch-default", "old,old", "nope", "exact", ""];
const MUTANTS: &[&str] = &["all", "nope", "all,all", ""];
const SIZES: &[&str] = &["512M", "1K", "0", "-1G", "8X", "1e30T"];

/// A long or odd string.
fn odd(r: &mut Rng) -> String {
    match r.below(5) {
        0 => "x".repeat(1 + r.below(20_000)),
        1 => "cpu-fma".to_string() + &"+allreduce-bf16".repeat(1 + r.below(5_000)),
        2 => "é\u{1}\u{7f}\n".into(),
        3 => "../../etc".into(),
        _ => "-".into(),
    }
}

/// A mutation of one built-in scenario config.
fn mutate_config(r: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for _ in 0..1 + r.below(3) {
        if lines.is_empty() {
            break;
        }
        let i = r.below(lines.len());
        match r.below(10) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 | 3 => {
                // Replace a value with a hostile one.
                if let Some((k, _)) = lines[i].clone().split_once(" = ") {
                    let v = r.pick(&[
                        "0",
                        "-1",
                        "1e39",
                        "nan",
                        "inf",
                        "65536",
                        "16384",
                        "4096",
                        "1000",
                        "9223372036854775807",
                        "\"nope\"",
                        "[]",
                        "7",
                        "true",
                        "0.5",
                    ]);
                    lines[i] = format!("{k} = {v}");
                }
            }
            4 => lines.push(
                r.pick(&[
                    "[profiles.cpu-fma]\nsplit = \"single\"\naccum = \"fma\"\npasses = \"f32\"\nallreduce = \"ring\"\nwire = \"f32\"",
                    "[profiles.cpu-fma]\noverride = true\nsplit = \"single\"\naccum = \"fma\"\npasses = \"f32\"\nallreduce = \"ring\"\nwire = \"f32\"",
                    "[policies.torch-default]\ndefault = { atol = 1.0, rtol = 1.0 }",
                    "[modifiers.allreduce-bf16]\nwire = \"f32\"",
                    "[policies.big]\ndefault = { atol = 1e300, rtol = -1 }",
                ])
                .to_string(),
            ),
            5 => {
                if lines[i].starts_with("default_") {
                    let k = lines[i].split(" = ").next().unwrap_or("").to_string();
                    lines[i] = format!("{k} = []");
                }
            }
            6 => {
                let cut = r.below(lines[i].len() + 1);
                let l: String = lines[i].chars().take(cut).collect();
                lines[i] = l;
            }
            7 => lines.insert(i, "\u{1}\u{ff}garbage = = ]".into()),
            8 => {
                if lines[i].starts_with("id = ") {
                    lines[i] = format!("id = \"{}\"", "p".repeat(1 + r.below(200_000)));
                }
            }
            _ => {
                if lines[i].starts_with("hidden = ") {
                    lines[i] = format!(
                        "hidden = {}",
                        r.pick(&["65536", "16384", "1", "0", "100000"])
                    );
                }
            }
        }
    }
    lines.join("\n")
}

/// One random command line (relative to the working folder `dir`).
fn command_line(r: &mut Rng, dir: &Path, configs: &[String]) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let sub = r.pick(&[
        "sweep", "sweep", "sweep", "repro", "list", "bench", "explain", "merge", "report", "size",
        "size", "scale", "scale", "bogus",
    ]);
    a.push(sub.into());
    let out_choices = |r: &mut Rng| -> String {
        r.pick(&[
            "o1",
            "o2",
            "o3",
            "file.txt",
            "/dev/null",
            "fifo",
            "link",
            "-",
            "o1/plan.csv",
        ])
        .to_string()
    };
    let flag = |a: &mut Vec<String>, r: &mut Rng, name: &str, vals: &[&str]| {
        a.push(name.into());
        if r.chance(15) {
            a.push(odd(r));
        } else {
            a.push(r.pick(vals).into());
        }
    };
    let select = |a: &mut Vec<String>, r: &mut Rng| {
        if r.chance(3) && !configs.is_empty() {
            a.push("--config".into());
            a.push(configs[r.below(configs.len())].clone());
            if r.chance(4) {
                a.push("--config".into());
                a.push(configs[r.below(configs.len())].clone());
            }
        }
        if r.chance(8) {
            a.push("--rng".into());
            a.push(r.pick(&["torch", "chacha", "nope"]).into());
        }
        a.push("--max-memory".into());
        a.push(if r.chance(10) {
            r.pick(SIZES).into()
        } else {
            "512M".into()
        });
    };
    match sub {
        "sweep" | "repro" | "size" | "bench" => {
            select(&mut a, r);
            if r.chance(2) {
                flag(&mut a, r, "--scenario", SCENARIOS);
            } else {
                a.extend(["--scenario".into(), "deepspeed-tied-row-parallel".into()]);
            }
            if r.chance(2) {
                flag(&mut a, r, "--param", PARAMS);
            }
            if r.chance(3) {
                flag(&mut a, r, "--profile", PROFILES);
            }
            if r.chance(3) {
                flag(&mut a, r, "--policy", POLICIES);
            }
            if r.chance(5) {
                flag(&mut a, r, "--mutants", MUTANTS);
            }
            match sub {
                "repro" => {
                    if r.chance(2) {
                        flag(&mut a, r, "--seed", SEEDS_AT);
                    }
                    if r.chance(4) {
                        a.extend(["--dump".into(), out_choices(r)]);
                    }
                }
                "bench" => flag(&mut a, r, "--seeds", SMALL_COUNTS),
                _ => {
                    flag(&mut a, r, "--seeds", SMALL_COUNTS);
                    if r.chance(3) {
                        flag(&mut a, r, "--first-seed", SEEDS_AT);
                    }
                    if r.chance(3) {
                        flag(&mut a, r, "--threads", THREADS);
                    }
                    if sub == "sweep" {
                        a.extend(["--quiet".into(), "--out".into(), out_choices(r)]);
                        if r.chance(3) {
                            a.push("--resume".into());
                        }
                        if r.chance(3) {
                            a.push("--summary-only".into());
                        }
                        if r.chance(4) {
                            flag(
                                &mut a,
                                r,
                                "--shard",
                                &["0/2", "1/2", "2/2", "0/0", "x", "1/4"],
                            );
                        }
                    } else {
                        if r.chance(3) {
                            a.extend(["--markdown".into(), out_choices(r)]);
                        }
                        if r.chance(4) {
                            flag(&mut a, r, "--flake-rate", &["0.01", "0", "1", "-1", "nan"]);
                        }
                        if r.chance(4) {
                            flag(&mut a, r, "--target", &["50", "0", "-1", "inf"]);
                        }
                    }
                }
            }
        }
        "list" => select(&mut a, r),
        "explain" => {
            select(&mut a, r);
            flag(&mut a, r, "--scenario", SCENARIOS);
            if r.chance(2) {
                flag(&mut a, r, "--param", PARAMS);
            }
            flag(&mut a, r, "--check", &["logits", "loss", "nope"]);
            flag(&mut a, r, "--step", &["1", "0", "1.0", "99", "x"]);
            flag(&mut a, r, "--observed", &["0.5", "-1", "nan", "1e300"]);
            if r.chance(3) {
                flag(&mut a, r, "--index", &["0", "99999999", "-1"]);
            }
            if r.chance(3) {
                flag(&mut a, r, "--profile", PROFILES);
            }
        }
        "merge" => {
            for _ in 0..r.below(4) {
                a.push(
                    r.pick(&["o1", "o2", "o3", "nope", "file.txt", "/dev/null"])
                        .into(),
                );
            }
            a.extend(["--out".into(), out_choices(r)]);
        }
        "report" => {
            a.push(r.pick(&["o1", "o2", "o3", "nope", "file.txt"]).into());
            if r.chance(2) {
                a.extend(["--out".into(), out_choices(r)]);
            }
        }
        "scale" => {
            if r.chance(4) && !configs.is_empty() {
                a.push("--config".into());
                a.push(configs[r.below(configs.len())].clone());
            }
            a.extend(["--max-memory".into(), "512M".into()]);
            flag(
                &mut a,
                r,
                "--k",
                &["8,16", "32", "0", "16,16", "1048577", "-4"],
            );
            flag(&mut a, r, "--tp", &["2", "2,4", "0", "65", "2,2"]);
            flag(&mut a, r, "--seeds", SMALL_COUNTS);
            if r.chance(3) {
                flag(&mut a, r, "--rows", &["2", "0", "100000", "-1"]);
            }
            if r.chance(3) {
                flag(&mut a, r, "--cols", &["4", "0", "100000"]);
            }
            if r.chance(4) {
                flag(&mut a, r, "--profile", PROFILES);
            }
            if r.chance(4) {
                flag(&mut a, r, "--policy", POLICIES);
            }
            if r.chance(5) {
                flag(&mut a, r, "--rng", &["chacha"]);
            }
            a.extend(["--out".into(), out_choices(r)]);
        }
        _ => {
            a.push(odd(r));
        }
    }
    let _ = dir;
    a
}

#[derive(Default, Debug)]
struct Counts {
    runs: u64,
    ok: u64,
    errors: u64,
    usage: u64,
    other: u64,
    timeouts: u64,
    panics: u64,
    aborts: u64,
}

#[test]
fn no_command_line_or_config_mutation_panics_or_aborts() {
    let secs: u64 = std::env::var("SEEDSWEEP_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let seed: u64 = std::env::var("SEEDSWEEP_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    let mut r = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("file.txt"), "not a sweep\n").unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("file.txt", dir.join("link")).unwrap();
        let _ = Command::new("mkfifo").arg(dir.join("fifo")).status();
        // One reader drains the FIFO for the whole test (never joined), so that a command
        // writing into it does not block.
        let p = dir.join("fifo");
        std::thread::spawn(move || loop {
            if std::fs::read(&p).is_err() {
                std::thread::sleep(Duration::from_millis(50));
            }
        });
    }
    let mut last_report = Instant::now();
    let configs_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs");
    let bases: Vec<String> = [
        "deepspeed_tied_row_parallel.toml",
        "deepspeed_row_parallel.toml",
        "maxtext_diloco.toml",
        "diloco.toml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(configs_dir.join(f)).unwrap())
    .collect();
    let start = Instant::now();
    let mut c = Counts::default();
    let mut failures: Vec<String> = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        // Fresh config mutations for this run.
        let mut configs = Vec::new();
        for k in 0..2 {
            let base = &bases[r.below(bases.len())];
            let name = format!("cfg{k}.toml");
            std::fs::write(dir.join(&name), mutate_config(&mut r, base)).unwrap();
            configs.push(name);
        }
        let args = command_line(&mut r, dir, &configs);
        let mut child = Command::new(env!("CARGO_BIN_EXE_seedsweep"))
            .args(&args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let err_thread = std::thread::spawn(move || {
            use std::io::Read;
            let mut s = String::new();
            let _ = std::io::BufReader::new(stderr)
                .take(1 << 20)
                .read_to_string(&mut s);
            s
        });
        let t = Instant::now();
        let limit = Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if t.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let stderr = err_thread.join().unwrap_or_default();
        c.runs += 1;
        let shown: Vec<String> = args
            .iter()
            .map(|s| s.chars().take(60).collect::<String>())
            .collect();
        match status {
            None => c.timeouts += 1,
            Some(s) => match s.code() {
                Some(0) => c.ok += 1,
                Some(1) => c.errors += 1,
                Some(2) => c.usage += 1,
                Some(101) => {
                    c.panics += 1;
                    failures.push(format!("panic: {shown:?}\n{stderr}"));
                }
                Some(_) => c.other += 1,
                None => {
                    c.aborts += 1;
                    failures.push(format!("signal: {shown:?} {s:?}\n{stderr}"));
                }
            },
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            eprintln!(
                "fuzz seed {seed}, {:.0} s so far: {c:?}",
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        if stderr.contains("panicked at") && status.and_then(|s| s.code()) != Some(101) {
            c.panics += 1;
            failures.push(format!("panic message: {shown:?}\n{stderr}"));
        }
    }
    eprintln!("fuzz seed {seed}, {secs} s: {c:?}");
    assert!(
        failures.is_empty(),
        "{} failing run(s):\n{}",
        failures.len(),
        failures.join("\n---\n")
    );
    // /dev/null was offered as an output path: it must still be a device.
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        assert!(std::fs::symlink_metadata(dir.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        if dir.join("fifo").exists() {
            assert!(std::fs::symlink_metadata(dir.join("fifo"))
                .unwrap()
                .file_type()
                .is_fifo());
        }
    }
}

/// A mutation of a scenario-language file: structural edits (lines dropped, repeated,
/// truncated, shuffled into other tables), hostile values, oversized tables and strings, deep
/// nesting, and raw byte damage.
fn mutate_scenario(r: &mut Rng, text: &str) -> String {
    if r.chance(8) {
        // Raw damage: a byte flipped or the file cut anywhere (maybe inside a UTF-8 sequence;
        // lossy decoding stands in for a reader that refuses it).
        let mut b = text.as_bytes().to_vec();
        if r.chance(2) {
            b.truncate(r.below(b.len() + 1));
        } else if !b.is_empty() {
            let i = r.below(b.len());
            b[i] ^= 1 << r.below(8);
        }
        return String::from_utf8_lossy(&b).into_owned();
    }
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for _ in 0..1 + r.below(4) {
        if lines.is_empty() {
            break;
        }
        let i = r.below(lines.len());
        match r.below(12) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                let j = r.below(lines.len());
                lines.insert(j, l);
            }
            2..=4 => {
                // A value replaced with a hostile one, keeping the key.
                if let Some((k, _)) = lines[i].clone().split_once(" = ") {
                    let v = r.pick(&[
                        "0",
                        "-1",
                        "1",
                        "3",
                        "1048576",
                        "1048577",
                        "[1048576, 1048576, 1048576, 65536]",
                        "[0]",
                        "[]",
                        "1e39",
                        "1e308",
                        "nan",
                        "-inf",
                        "9223372036854775807",
                        "\"nope\"",
                        "\"\"",
                        "true",
                        "0.5",
                        "{}",
                        "{ a = 1 }",
                        "\"row\"",
                        "\"column\"",
                        "\"cross-entropy\"",
                        "\"adamw\"",
                    ]);
                    lines[i] = format!("{k} = {v}");
                }
            }
            5 => {
                // Inside an inline table or list: a field's value replaced.
                if let Some(p) = lines[i].find("= ") {
                    let cut = p + 2 + r.below(lines[i].len() - p - 1);
                    let tail: String = lines[i].chars().skip(cut).collect();
                    let head: String = lines[i].chars().take(p + 2).collect();
                    lines[i] = format!(
                        "{head}{}{tail}",
                        r.pick(&["0, ", "\"x\", ", "-7, ", "[], "])
                    );
                }
            }
            6 => {
                let cut = r.below(lines[i].len() + 1);
                lines[i] = lines[i].chars().take(cut).collect();
            }
            7 => lines.insert(
                i,
                r.pick(&[
                    "unknown_key = 1",
                    "[[layers]]",
                    "[train]",
                    "dims = { batch = 1048576, hidden = 1048576 }",
                    "parallel = { tp = 1048576 }",
                    "parallel = { tp = 3, dp = 7 }",
                    "layers = []",
                    "checks = []",
                    "inputs = []",
                ])
                .to_string(),
            ),
            8 => {
                // Oversized: a table or string many times over.
                let n = 1 + r.below(3000);
                lines.push(format!("description = \"{}\"", "y".repeat(n * 50)));
            }
            9 => {
                // Deep nesting (a parser that recursed without a limit would overflow its stack).
                let d = 10 + r.below(5000);
                lines.push(format!("deep = {}{}", "[".repeat(d), "]".repeat(d)));
            }
            10 => {
                // Many parametrizations.
                let n = 1 + r.below(6000);
                let many: Vec<String> = (0..n).map(|k| format!("{{ id = \"p{k}\" }}")).collect();
                lines.push(format!("params = [{}]", many.join(", ")));
            }
            _ => {
                let j = r.below(lines.len());
                lines.swap(i, j);
            }
        }
    }
    lines.join("\n")
}

#[test]
fn no_scenario_file_mutation_panics() {
    // In-process through the same function `seedsweep check FILE` runs (parse, resolve,
    // lower, validate; nothing is allocated for tensors): every mutation must give the text or
    // a clear error naming the file, never a panic.
    let secs: u64 = std::env::var("SEEDSWEEP_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("SEEDSWEEP_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(11);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut bases: Vec<(String, String)> = Vec::new();
    for dir in [root.clone(), root.join("examples")] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let text = std::fs::read_to_string(&p).unwrap();
                let outer = seedsweep::scenario::outer::is_outer_file(&text);
                if seedsweep::scenario::is_scenario_file(&text) || outer {
                    bases.push((p.display().to_string(), text));
                }
            }
        }
    }
    bases.sort();
    assert!(bases.len() >= 8, "scenario files found: {}", bases.len());
    let mut r = Rng(seed);
    let start = Instant::now();
    let (mut runs, mut ok, mut errors) = (0u64, 0u64, 0u64);
    let mut panics: Vec<String> = Vec::new();
    // Every base file unchanged first, then mutations until the time is up.
    let mut k = 0usize;
    while k < bases.len() || start.elapsed() < Duration::from_secs(secs) {
        let (name, base) = &bases[k % bases.len()];
        let text = if k < bases.len() {
            base.clone()
        } else {
            mutate_scenario(&mut r, base)
        };
        k += 1;
        runs += 1;
        let got = std::panic::catch_unwind(|| {
            seedsweep::scenario::describe::check_source("fuzz.toml", &text)
        });
        match got {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(e)) => {
                errors += 1;
                let msg = format!("{e:#}");
                if !msg.contains("fuzz.toml") || msg.trim().is_empty() {
                    panics.push(format!("an error that names no file, from {name}: {msg}"));
                }
            }
            Err(p) => {
                let what = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let path = std::env::temp_dir().join(format!("seedsweep-fuzz-panic-{runs}.toml"));
                let _ = std::fs::write(&path, &text);
                panics.push(format!(
                    "panic from a mutation of {name} ({}): {what}",
                    path.display()
                ));
            }
        }
        if k < bases.len() {
            assert_eq!(ok + errors, runs);
        }
    }
    eprintln!(
        "scenario fuzz: {runs} files, {ok} accepted, {errors} clear errors, {} failures",
        panics.len()
    );
    assert!(ok >= bases.len() as u64, "a base file was refused");
    assert!(panics.is_empty(), "{}", panics.join("\n"));
}
