//! `examples/ci/github-actions.yml` runs: every `seedsweep` command of its `run:` steps is run
//! here, in order, in a temporary folder, with this build's binary in place of
//! `target/release/seedsweep` and `$GITHUB_STEP_SUMMARY` pointing at a file; each must exit 0
//! (the example's gates pass on its scenario and policy), and the files the upload step names
//! must exist.

use std::path::Path;
use std::process::Command;

/// The shell commands of the workflow's `run:` steps, in order: a one-line `run: CMD`, or the
/// indented lines of a `run: |` block.
fn run_commands(yaml: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start();
        if let Some(rest) = t.strip_prefix("run:") {
            let rest = rest.trim();
            if rest == "|" {
                let indent = l.len() - t.len();
                i += 1;
                let mut block = Vec::new();
                while i < lines.len() {
                    let b = lines[i];
                    let bi = b.len() - b.trim_start().len();
                    if !b.trim().is_empty() && bi <= indent {
                        break;
                    }
                    if !b.trim().is_empty() {
                        block.push(b.trim().to_string());
                    }
                    i += 1;
                }
                out.extend(block);
                continue;
            }
            out.push(rest.to_string());
        }
        i += 1;
    }
    out
}

/// The paths listed under the upload step's `path: |`.
fn uploaded(yaml: &str) -> Vec<String> {
    let start = yaml
        .find("path: |")
        .expect("an upload step with a path list");
    yaml[start..]
        .lines()
        .skip(1)
        .map(str::trim)
        .take_while(|l| !l.is_empty() && !l.contains(':'))
        .map(String::from)
        .collect()
}

#[test]
fn the_github_actions_example_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let yaml = std::fs::read_to_string(root.join("examples/ci/github-actions.yml")).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("seedsweep");
    let tmp = tempfile::tempdir().unwrap();
    let summary = tmp.path().join("step-summary.md");
    let commands: Vec<String> = run_commands(&yaml)
        .into_iter()
        .filter(|c| c.contains("target/release/seedsweep "))
        .collect();
    assert!(commands.len() >= 2, "sweep and report: {commands:?}");
    assert!(commands
        .iter()
        .any(|c| c.contains(" sweep ") && c.contains("--fail-on-exceed")));
    for c in &commands {
        let cmd = c.replace("target/release/seedsweep", &bin.display().to_string());
        let out = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .current_dir(tmp.path())
            .env("GITHUB_STEP_SUMMARY", &summary)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{c}\nexit {:?}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("## seedsweep sweep: ✅ passed"), "{md}");
    for p in uploaded(&yaml) {
        assert!(
            tmp.path().join(&p).is_file(),
            "the upload step names {p}, which is missing"
        );
    }
}
