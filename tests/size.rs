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

#[test]
fn recommendations_meet_the_target_and_catch_every_structural_bug() {
    let (text, md) = size_markdown(&[
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
    ]);
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
            md.contains(&format!("| `{m}` | 150/150 |")),
            "{m} not caught on every seed:\n{md}"
        );
    }
    // Every predicted usage column of the recommendation is at or below the target.
    for line in md
        .lines()
        .filter(|l| l.starts_with("| `") && l.contains("atol="))
    {
        let cell = line.trim_end_matches(" |").rsplit(" | ").next().unwrap();
        let v: f64 = cell.trim_end_matches('%').parse().unwrap();
        assert!(v <= 50.0, "{line}");
    }
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
        .code(1)
        .stderr(predicates::str::contains("--flake-rate"));
}
