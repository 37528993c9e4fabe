//! The CI verdict of `sweep` and `repro`: `--json`, `--junit-xml`, `--markdown`, the gates and
//! exit code 3 with one line on stderr (docs/verdict-json.md).

use std::collections::BTreeMap;
use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").expect("binary is built by cargo test")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// T1 at 35-3-False-0: under policy `old` the logits exceed on some of 200 seeds.
const T1: [&str; 4] = [
    "--scenario",
    "deepspeed-tied-row-parallel",
    "--param",
    "35-3-False-0",
];

/// summary.csv rows by (check, comparison, policy), for the clean group.
fn summary(dir: &Path) -> BTreeMap<(String, String, String), BTreeMap<String, String>> {
    let mut r = csv::Reader::from_path(dir.join("summary.csv")).unwrap();
    let head: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let mut out = BTreeMap::new();
    for rec in r.records() {
        let rec = rec.unwrap();
        let row: BTreeMap<String, String> = head
            .iter()
            .cloned()
            .zip(rec.iter().map(String::from))
            .collect();
        if !row["mutant"].is_empty() {
            continue;
        }
        out.insert(
            (
                row["check"].clone(),
                row["comparison"].clone(),
                row["policy"].clone(),
            ),
            row,
        );
    }
    out
}

#[test]
fn json_on_stdout_is_the_only_stdout_and_agrees_with_the_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let out = seedsweep()
        .args(["sweep", "--seeds", "200", "--mutants", "all", "--json", "-"])
        .args(T1)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Every byte of stdout is one JSON document.
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stdout = text(&out.stdout);
    assert!(
        text(&out.stderr).contains("deepspeed-tied-row-parallel"),
        "tables on stderr"
    );
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["command"], "sweep");
    assert_eq!(v["verdict"], "pass", "no gate asked for");
    let sum = summary(&dir);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), sum.len(), "one case per clean summary row");
    let mut exceeding = 0;
    for c in cases {
        let key = (
            c["check"].as_str().unwrap().to_string(),
            c["comparison"].as_str().unwrap().to_string(),
            c["policy"].as_str().unwrap().to_string(),
        );
        let row = &sum[&key];
        // The same digits as summary.csv (both are Python-repr digits of the same f64; the
        // text is compared, because serde_json's default float parser may be an ulp off).
        let w = &row["worst_usage_pct"];
        let json_w = if w == "inf" {
            "\"inf\"".to_string()
        } else {
            w.clone()
        };
        assert!(
            stdout.contains(&format!("\"worst_usage_pct\": {json_w},")),
            "{key:?}: {w}"
        );
        assert_eq!(c["worst_seed"].to_string(), row["worst_seed"]);
        assert_eq!(c["worst_step"].to_string(), row["worst_step"]);
        assert_eq!(c["failing_seeds"].to_string(), row["failing_seeds"]);
        let n: usize = row["failing_seeds"].parse().unwrap();
        let list = c["failing_seed_list"].as_array().unwrap();
        assert_eq!(list.len(), n.min(20));
        let asserted = c["asserted"].as_bool().unwrap();
        assert_eq!(asserted, key.1 == "sharded-vs-ref");
        let repro = c["repro"].as_str().unwrap();
        assert!(repro.starts_with("seedsweep repro --scenario deepspeed-tied-row-parallel --param 35-3-False-0 --profile cpu-fma"));
        assert!(
            repro.ends_with(&format!("--seed {}", row["worst_seed"])),
            "{repro}"
        );
        if asserted && n > 0 {
            exceeding += 1;
            assert_eq!(c["status"], "exceeds");
            let m = c["message"].as_str().unwrap();
            assert!(m.starts_with("Tensor-likes are not close!"), "{m}");
        } else {
            assert!(c["message"].is_null());
        }
        // The tail: the summary's columns, and a flake rate in [0, 1].
        let t = &c["tail"];
        assert_eq!(t["method"].as_str().unwrap(), row["tail_method"]);
        let r = t["flake_rate_at_tolerance"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&r), "{r}");
        if n > 0 && t["flake_rate_method"] == "observed" {
            assert_eq!(r, n as f64 / 200.0);
        }
        // T1's mutants are all caught by the logits on every seed (the mutant table of the
        // README), so the logits list them as caught.
        if key.0 == "logits" && asserted {
            assert!(c["mutants_missed"].as_array().unwrap().is_empty());
            assert!(c["mutants_caught"].as_array().unwrap().len() >= 5);
        }
    }
    assert!(exceeding > 0, "policy old exceeds on some seed of 200");
    assert!(!v["mutants"].as_array().unwrap().is_empty());
}

#[test]
fn gates_exit_3_with_one_line_naming_the_first_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        seedsweep()
            .args(["sweep", "--seeds", "200", "-q"])
            .args(T1)
            .args(extra)
            .arg("--out")
            .arg(tmp.path().join("g"))
            .output()
            .unwrap()
    };
    for gate in [
        vec!["--fail-on-exceed"],
        vec!["--max-flake-rate", "1e-4"],
        vec!["--fail-on-exceed", "--json", "/dev/null"],
    ] {
        let out = run(&gate);
        assert_eq!(out.status.code(), Some(3), "{gate:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{gate:?}: {err}");
        assert!(err.starts_with("seedsweep sweep: FAILED: "), "{err}");
        assert!(err.contains("logits policy old"), "{err}");
        assert!(err.contains("seedsweep repro --scenario"), "{err}");
    }
    // Only the policy that passes: no gate fails. torch-default's worst logits usage over
    // these seeds is about a third of its tolerance (README's T1 table), so a flake rate of
    // 0.5 per seed is far above any prediction.
    for gate in [
        vec!["--fail-on-exceed", "--policy", "torch-default"],
        vec!["--max-flake-rate", "0.5", "--policy", "torch-default"],
    ] {
        let out = run(&gate);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{gate:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stderr), "");
    }
}

/// Tags of an XML document balance, and it has the JUnit shape: testsuites > testsuite >
/// testcase (> failure | system-out).
fn assert_junit_shape(xml: &str) -> (usize, usize) {
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "));
    let mut stack: Vec<String> = Vec::new();
    let (mut cases, mut failures) = (0, 0);
    let body = &xml[xml.find("?>").unwrap() + 2..];
    let mut rest = body;
    while let Some(i) = rest.find('<') {
        let j = rest[i..].find('>').unwrap() + i;
        let tag = &rest[i + 1..j];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "unbalanced </{name}>");
        } else {
            let name = tag.split_whitespace().next().unwrap().to_string();
            let parent = stack.last().map(String::as_str);
            match name.as_str() {
                "testsuites" => assert_eq!(parent, None),
                "testsuite" => assert_eq!(parent, Some("testsuites")),
                "testcase" => {
                    assert_eq!(parent, Some("testsuite"));
                    cases += 1;
                }
                "failure" | "system-out" => {
                    assert_eq!(parent, Some("testcase"));
                    failures += usize::from(name == "failure");
                }
                other => panic!("unexpected element {other}"),
            }
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        rest = &rest[j + 1..];
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
    (cases, failures)
}

#[test]
fn junit_and_markdown_carry_torch_messages_and_repro_commands_identically_for_any_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for threads in ["1", "2"] {
        let d = tmp.path().join(threads);
        std::fs::create_dir(&d).unwrap();
        seedsweep()
            .args(["sweep", "--seeds", "200", "-q", "--mutants", "all"])
            .args(T1)
            .args(["--threads", threads, "--out"])
            .arg(d.join("s"))
            .arg("--junit-xml")
            .arg(d.join("j.xml"))
            .arg("--markdown")
            .arg(d.join("m.md"))
            .arg("--json")
            .arg(d.join("v.json"))
            .assert()
            .success();
        files.push(d);
    }
    for f in ["j.xml", "m.md", "v.json"] {
        let a = std::fs::read(files[0].join(f)).unwrap();
        let b = std::fs::read(files[1].join(f)).unwrap();
        assert!(a == b, "{f} differs between --threads 1 and 2");
    }
    let xml = std::fs::read_to_string(files[0].join("j.xml")).unwrap();
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(files[0].join("v.json")).unwrap()).unwrap();
    let asserted: Vec<&Value> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["asserted"] == true)
        .collect();
    let mutants = v["mutants"].as_array().unwrap();
    let (cases, failures) = assert_junit_shape(&xml);
    assert_eq!(cases, asserted.len() + mutants.len());
    let exceeding = asserted.iter().filter(|c| c["failing_seeds"] != 0).count();
    let missed = mutants.iter().filter(|m| m["status"] != "caught").count();
    assert_eq!(failures, exceeding + missed);
    assert!(xml.contains(&format!("tests=\"{cases}\" failures=\"{failures}\"")));
    assert!(xml.contains("Tensor-likes are not close!"));
    assert!(xml.contains("repro: seedsweep repro --scenario deepspeed-tied-row-parallel"));
    let md = std::fs::read_to_string(files[0].join("m.md")).unwrap();
    assert!(md.starts_with("## seedsweep sweep: ✅ passed\n"));
    assert!(md.contains("### Failing checks") && md.contains("```sh\nseedsweep repro "));
    // Failing rows first.
    let first_row = md
        .lines()
        .find(|l| l.starts_with("| ⚠️") || l.starts_with("| ✅"))
        .unwrap();
    assert!(first_row.starts_with("| ⚠️ exceeds"), "{first_row}");
}

#[test]
fn repro_writes_the_verdict_of_its_seed() {
    let out = seedsweep()
        .args([
            "repro",
            "--seed",
            "8199",
            "--policy",
            "old",
            "--fail-on-exceed",
            "--json",
            "-",
        ])
        .args(T1)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["command"], "repro");
    assert_eq!(v["verdict"], "fail");
    let logits = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "logits" && c["asserted"] == true)
        .unwrap();
    assert_eq!(logits["status"], "fail");
    assert_eq!(logits["worst_seed"], 8199);
    assert!(logits["message"]
        .as_str()
        .unwrap()
        .starts_with("Tensor-likes are not close!"));
    // The human report went to stderr, with the same message.
    assert!(text(&out.stderr).contains("Tensor-likes are not close!"));
    let last = text(&out.stderr);
    assert!(last
        .trim_end()
        .lines()
        .last()
        .unwrap()
        .starts_with("seedsweep repro: FAILED: "));
}

#[test]
fn bad_ci_flags_are_refused_naming_the_flag() {
    for (args, want) in [
        (vec!["--json", "-", "--markdown", "-"], "--markdown"),
        (vec!["--max-flake-rate", "1"], "--max-flake-rate"),
        (vec!["--max-flake-rate", "-0.1"], "--max-flake-rate"),
        (vec!["--fail-on-missed-mutant"], "--fail-on-missed-mutant"),
        (vec!["--junit-xml", "/no/such/folder/j.xml"], "--junit-xml"),
    ] {
        let out = seedsweep()
            .args([
                "sweep",
                "--seeds",
                "2",
                "-q",
                "--out",
                "/tmp/never-written-37",
            ])
            .args(&args)
            .output()
            .unwrap();
        // A value out of range is a usage error (clap, exit 2); a combination is refused
        // after parsing (exit 1). Either names the flag and writes nothing.
        let code = if want == "--max-flake-rate" { 2 } else { 1 };
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!Path::new("/tmp/never-written-37").exists());
    }
    // One seed has no tail: repro refuses the flake-rate gate instead of ignoring it.
    let out = seedsweep()
        .args(["repro", "--max-flake-rate", "0.01"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--max-flake-rate"));
}
