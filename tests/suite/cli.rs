//! The CLI as a user runs it.

use assert_cmd::Command;
use std::path::Path;

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").expect("binary is built by cargo test")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Finds the summary row with the given key columns and returns the value of `column`.
fn summary_value(csv: &str, key: &[(&str, &str)], column: &str) -> Vec<String> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let out: Vec<String> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| key.iter().all(|(k, v)| f[col(k)] == *v))
        .map(|f| f[col(column)].to_string())
        .collect();
    assert!(!out.is_empty(), "no summary row matches {key:?}");
    out
}

#[test]
fn sweep_writes_both_csvs_with_the_documented_columns() {
    let dir = tempfile::tempdir().unwrap();
    seedsweep()
        .args(["sweep", "--seeds", "3", "--quiet", "--out"])
        .arg(dir.path())
        .assert()
        .success()
        .stdout(predicates_contains("deepspeed-tied-row-parallel"));
    let seeds = read(&dir.path().join("seeds.csv"));
    let summary = read(&dir.path().join("summary.csv"));
    assert!(seeds.starts_with(
        "scenario,param,profile,seed,check,comparison,policy,usage_pct,max_abs_diff,step,micro_step,mismatched,elements"
    ));
    assert!(summary.starts_with(
        "scenario,param,profile,check,comparison,policy,atol,rtol,seeds,failing_seeds,worst_usage_pct,worst_seed,worst_step,worst_micro_step,p50_usage_pct,p95_usage_pct,max_abs_diff,max_abs_expected"
    ));
    // DeepSpeed: 4 T1 params x (3 or 4 checks) + 3 T2 params x (8 or 10 checks), in 1 profile,
    // x 3 comparisons x 2 policies.
    let t1_checks = 4 + 4 + 4 + 3;
    let t2_checks = 8 + 10 + 10;
    // Issue 8's built-ins: deepspeed-tp-row-parallel, 4 params x 3 checks (policies deepspeed,
    // torch-default); deepspeed-uneven-tp3-row-parallel, T2's checks at TP 3 (10 + 8).
    let tp_layer_checks = 4 * 3;
    let uneven_checks = 10 + 8;
    let deepspeed_rows = (t1_checks + t2_checks + tp_layer_checks + uneven_checks) * 3 * 2;
    // megatron-vocab-parallel-ce: 2 params x 4 checks x 3 comparisons x 1 policy
    // (torch-default).
    let vocab_ce_rows = 2 * 4 * 3;
    // maxtext-diloco (T3) and diloco: 1 param x 2 profiles (f32, tpu-bf16) x 4 checks (loss,
    // outer_unchanged, outer_params, inner_equals_outer) x 3 comparisons x 3 policies each.
    let diloco_rows = 2 * 4 * 3 * 3;
    // deepspeed-tp-column-parallel: 4 params x 3 checks x 3 comparisons x 2 policies
    // (deepspeed, torch-default); megatron-tp-mlp: 2 params x 10 checks x 3 x 1;
    // fsdp-zero2-grad-acc: 1 param x 4 checks x 3 x 1.
    // megatron-vocab-parallel-ce-test: 1 param x 2 checks x 3 comparisons x 1 policy.
    // torchtitan-fsdp-vs-hsdp: 1 param x 5 checks x 3 x 1.
    // maxtext-moe-dense-test: 1 param x 3 profiles x 1 check x 3 comparisons x 2 policies;
    // maxtext-moe-dense-vs-loop the same in 2 profiles.
    // pytorch-ring-attention-sdpa-test: 9 params x 4 checks x 3 x 2 policies (efficient-flat,
    // torch-default).
    let new_rows =
        4 * 3 * 3 * 2 + 2 * 10 * 3 + 4 * 3 + 2 * 3 + 5 * 3 + 3 * 3 * 2 + 2 * 3 * 2 + 9 * 4 * 3 * 2;
    assert_eq!(
        summary.lines().count() - 1,
        deepspeed_rows + new_rows + vocab_ce_rows + 2 * diloco_rows
    );
    // Per seed, except T3: its data are fixed, so it runs once whatever --seeds says.
    assert_eq!(
        seeds.lines().count() - 1,
        3 * (deepspeed_rows + new_rows + vocab_ce_rows) + diloco_rows + 3 * diloco_rows
    );
}

fn predicates_contains(s: &'static str) -> impl predicates::Predicate<[u8]> {
    predicates::str::contains(s).from_utf8()
}

use predicates::prelude::PredicateStrExt;

#[test]
fn default_sweep_reproduces_the_deepspeed_tolerance_figures() {
    let dir = tempfile::tempdir().unwrap();
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "40",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--out",
        ])
        .arg(dir.path())
        .assert()
        .success();
    let summary = read(&dir.path().join("summary.csv"));
    let num = |v: &String| v.parse::<f64>().unwrap();
    // The old logits tolerance (1e-6 / 1e-5) fails for some of seeds 8173..8212, and the worst
    // seed uses between 100 % and 200 % of it (the pull request measured 1.19x on GPUs).
    let old: Vec<f64> = summary_value(
        &summary,
        &[
            ("check", "logits"),
            ("comparison", "sharded-vs-ref"),
            ("policy", "old"),
        ],
        "worst_usage_pct",
    )
    .iter()
    .map(num)
    .collect();
    let worst_old = old.iter().cloned().fold(0.0, f64::max);
    assert!(
        (100.0..200.0).contains(&worst_old),
        "worst old logits usage {worst_old}%"
    );
    // Under torch's default no seed fails any T1 check, and the logits use under half of it.
    for f in summary_value(
        &summary,
        &[
            ("comparison", "sharded-vs-ref"),
            ("policy", "torch-default"),
        ],
        "failing_seeds",
    ) {
        assert_eq!(f, "0");
    }
    for u in summary_value(
        &summary,
        &[
            ("check", "logits"),
            ("comparison", "sharded-vs-ref"),
            ("policy", "torch-default"),
        ],
        "worst_usage_pct",
    ) {
        assert!(num(&u) < 50.0, "torch-default logits usage {u}%");
    }
    // Every other check stays under 3 % of the default limit.
    for check in ["tied_grad", "head_weight", "projection_weight"] {
        for u in summary_value(
            &summary,
            &[
                ("check", check),
                ("comparison", "sharded-vs-ref"),
                ("policy", "torch-default"),
            ],
            "worst_usage_pct",
        ) {
            assert!(num(&u) < 3.0, "{check}: torch-default usage {u}%");
        }
    }
    // Logits reach |13| or so, where one fp32 ulp is about 1e-6, and even the unsharded fp32
    // reference differs from float64 by a few 1e-6.
    let max_logit = summary_value(
        &summary,
        &[("check", "logits"), ("comparison", "ref-vs-f64")],
        "max_abs_expected",
    )
    .iter()
    .map(num)
    .fold(0.0, f64::max);
    assert!((12.0..15.0).contains(&max_logit), "max |logit| {max_logit}");
    let ref_f64 = summary_value(
        &summary,
        &[("check", "logits"), ("comparison", "ref-vs-f64")],
        "max_abs_diff",
    )
    .iter()
    .map(num)
    .fold(0.0, f64::max);
    assert!(
        (1e-6..1e-5).contains(&ref_f64),
        "ref-vs-f64 logits max diff {ref_f64}"
    );
}

#[test]
fn output_is_byte_identical_for_one_and_two_threads() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for (dir, threads) in [(&a, "1"), (&b, "2")] {
        seedsweep()
            .args([
                "sweep",
                "--seeds",
                "6",
                "--quiet",
                "--threads",
                threads,
                "--out",
            ])
            .arg(dir.path())
            .assert()
            .success();
    }
    for f in ["seeds.csv", "summary.csv"] {
        assert_eq!(
            read(&a.path().join(f)),
            read(&b.path().join(f)),
            "{f} differs between 1 and 2 threads"
        );
    }
}

#[test]
fn repro_prints_torch_style_mismatch_for_a_failing_seed() {
    seedsweep()
        .args([
            "repro",
            "--seed",
            "8199",
            "--param",
            "35-3-False-0",
            "--policy",
            "old",
        ])
        .assert()
        .success()
        .stdout(predicates_contains("Mismatched elements: "))
        .stdout(predicates_contains("/ 670 ("))
        .stdout(predicates_contains("(up to 1e-06 allowed)"))
        .stdout(predicates_contains("(up to 1e-05 allowed)"));
}

#[test]
fn repro_fail_on_exceed_exits_with_code_3_only_when_a_check_exceeds() {
    seedsweep()
        .args([
            "repro",
            "--seed",
            "8199",
            "--param",
            "35-3-False-0",
            "--policy",
            "old",
            "--fail-on-exceed",
        ])
        .assert()
        .code(3);
    seedsweep()
        .args([
            "repro",
            "--seed",
            "8199",
            "--param",
            "35-3-False-0",
            "--policy",
            "torch-default",
            "--fail-on-exceed",
        ])
        .assert()
        .success();
}

/// The `Mismatched elements: N / M` counts of the torch-style messages in `text`.
fn mismatch_counts(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("Mismatched elements: "))
        .map(|rest| {
            let (n, tail) = rest.split_once(" / ").expect("N / M");
            let m = tail.split_whitespace().next().expect("M");
            (n.parse().unwrap(), m.parse().unwrap())
        })
        .collect()
}

#[test]
fn repro_mutants_runs_the_mutant_and_shows_its_failure() {
    // Once the clean run printed its table twice: the mutant was never injected.
    let out = seedsweep()
        .args([
            "repro",
            "--seed",
            "8199",
            "--param",
            "35-3-False-0",
            "--mutants",
            "missing-allreduce",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let sections: Vec<&str> = text.split("== ").filter(|s| !s.is_empty()).collect();
    assert_eq!(
        sections.len(),
        2,
        "one clean and one mutant section:\n{text}"
    );
    let (clean, mutant) = (sections[0], sections[1]);
    let head = |s: &str| s.lines().next().unwrap().to_string();
    assert!(!head(clean).contains("mutant"), "{}", head(clean));
    assert!(
        head(mutant).contains("mutant missing-allreduce"),
        "the mutant's table names it: {}",
        head(mutant)
    );
    // The clean run: seed 8199's one logit over the old tolerance.
    assert_eq!(mismatch_counts(clean), vec![(1, 670)]);
    // Without the all-reduce every rank's logits miss the other ranks' partial sums, so
    // most elements mismatch, under every policy (torch-default included).
    let m = mismatch_counts(mutant);
    assert!(!m.is_empty(), "the mutant fails:\n{mutant}");
    assert!(
        m.iter().any(|&(n, total)| total == 670 && 2 * n > total),
        "most logits mismatch under the mutant: {m:?}"
    );
    assert!(mutant.contains("policy torch-default"), "{mutant}");
    assert!(!clean.contains("policy torch-default"), "{clean}");
    // Each group's dump has its own file: the mutant's is named for it.
    let dump = tempfile::tempdir().unwrap();
    seedsweep()
        .args([
            "repro",
            "--seed",
            "8199",
            "--param",
            "35-3-False-0",
            "--mutants",
            "missing-allreduce",
            "--dump",
        ])
        .arg(dump.path())
        .assert()
        .success();
    let mut names: Vec<String> = std::fs::read_dir(dump.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            // Each CSV dump, and the folder of its tensors as .npy files.
            "deepspeed-tied-row-parallel__35-3-False-0__cpu-fma__missing-allreduce__seed8199",
            "deepspeed-tied-row-parallel__35-3-False-0__cpu-fma__missing-allreduce__seed8199.csv",
            "deepspeed-tied-row-parallel__35-3-False-0__cpu-fma__seed8199",
            "deepspeed-tied-row-parallel__35-3-False-0__cpu-fma__seed8199.csv",
        ]
    );
    // `--fail-on-exceed` counts clean runs only (a mutant is meant to fail), as in `sweep`.
    seedsweep()
        .args([
            "repro",
            "--seed",
            "8199",
            "--param",
            "35-3-False-0",
            "--policy",
            "torch-default",
            "--mutants",
            "missing-allreduce",
            "--fail-on-exceed",
        ])
        .assert()
        .success();
}

#[test]
fn list_shows_scenarios_params_checks_profiles_and_policies() {
    let out = seedsweep()
        .arg("list")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    for s in [
        "deepspeed-tied-row-parallel",
        "deepspeed-row-parallel",
        "35-3-True-0",
        "35-input_shape2-embed_out-True",
        "tied_grad",
        "sgd_update",
        "cpu-fma",
        "cpu-nofma",
        "pairwise",
        "splitk-4",
        "torch-default",
        "old",
        "allreduce-bf16",
    ] {
        assert!(out.contains(s), "list output lacks {s}");
    }
}

#[test]
fn unknown_scenario_is_an_error_listing_the_valid_ones() {
    seedsweep()
        .args(["sweep", "--scenario", "nope", "--quiet"])
        .assert()
        .code(1)
        .stderr(predicates_contains("--scenario"))
        .stderr(predicates_contains("deepspeed-tied-row-parallel"));
}

#[test]
fn zero_seeds_is_an_error_naming_the_flag() {
    seedsweep()
        .args(["sweep", "--seeds", "0", "--quiet"])
        .assert()
        .code(2)
        .stderr(predicates_contains("--seeds"));
}

#[test]
fn unwritable_out_fails_before_any_work_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--out"])
        .arg(file.join("sub"))
        .assert()
        .code(1)
        .stderr(predicates_contains("--out"));
}

#[test]
fn malformed_toml_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "scenario = \"deepspeed-tied-row-parallel\"\n[model\n").unwrap();
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--config"])
        .arg(&cfg)
        .assert()
        .code(1)
        .stderr(predicates_contains("bad.toml"));
}

#[test]
fn bad_config_value_names_file_and_key_and_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../configs/deepspeed_tied_row_parallel.toml")
        .replace("tp = 2 ", "tp = 65 ");
    let cfg = dir.path().join("tp65.toml");
    std::fs::write(&cfg, text).unwrap();
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--config"])
        .arg(&cfg)
        .assert()
        .code(1)
        .stderr(predicates_contains("tp65.toml"))
        .stderr(predicates_contains("parallel.tp"))
        .stderr(predicates_contains("1..=64"));
    let text = include_str!("../../configs/deepspeed_tied_row_parallel.toml")
        .replace("lr = 0.05", "lr = 0.05\nlrr = 3");
    std::fs::write(&cfg, text).unwrap();
    seedsweep()
        .args(["list", "--config"])
        .arg(&cfg)
        .assert()
        .code(1)
        .stderr(predicates_contains("train.lrr"));
}

#[test]
fn a_copied_config_with_other_shapes_runs_and_replaces_the_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../configs/deepspeed_tied_row_parallel.toml")
        .replace("tp = 2 ", "tp = 4 ")
        .replace("steps = 3", "steps = 2");
    let cfg = dir.path().join("tp4.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = dir.path().join("out");
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "2",
            "--quiet",
            "--param",
            "35-3-False-0",
            "--config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let summary = read(&out.join("summary.csv"));
    // Only the config's scenario is swept, with 2 steps (worst_step is 0 or 1).
    assert!(summary
        .lines()
        .skip(1)
        .all(|l| l.starts_with("deepspeed-tied-row-parallel,35-3-False-0,")));
    assert!(summary.lines().skip(1).all(|l| {
        let step = l.split(',').nth(12).unwrap();
        step == "0" || step == "1"
    }));
}

#[test]
fn unknown_profile_and_policy_list_the_valid_ones() {
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--profile", "cpu-fmaa"])
        .assert()
        .code(1)
        .stderr(predicates_contains("--profile"))
        .stderr(predicates_contains("cpu-nofma"));
    seedsweep()
        .args(["sweep", "--seeds", "1", "--quiet", "--policy", "strict"])
        .assert()
        .code(1)
        .stderr(predicates_contains("--policy"))
        .stderr(predicates_contains("torch-default"));
}

#[test]
fn explain_ranks_tpu_bf16_first_for_the_tpu7x_loss() {
    let out = seedsweep()
        .args([
            "explain",
            "--scenario",
            "maxtext-diloco",
            "--check",
            "loss",
            "--step",
            "2",
            "--observed",
            "0.647502",
            "--format",
            "csv",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("rank,profile,value,abs_diff,rel_diff"));
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("1,tpu-bf16+xla-eager,0.6475024223327637,"),
        "{out}"
    );
}

#[test]
fn explain_ranks_plain_f32_first_for_the_v6e_loss() {
    let out = seedsweep()
        .args([
            "explain",
            "--scenario",
            "maxtext-diloco",
            "--check",
            "loss",
            "--step",
            "2",
            "--observed",
            "0.65000009",
            "--format",
            "csv",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    // Several profiles give the same fp32 value here; they share rank 1, and f32 is one of them.
    let firsts: Vec<&str> = out
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("1,"))
        .collect();
    assert!(
        firsts
            .iter()
            .any(|l| l.starts_with("1,f32+xla-eager,0.6500000953674316,")),
        "{out}"
    );
    assert!(!firsts.iter().any(|l| l.contains("tpu-bf16,")), "{out}");
}

/// `explain --format csv` rows (without the header) for T3's loss at `step`.
fn explain_t3_loss(step: &str, observed: &str) -> Vec<String> {
    let out = seedsweep()
        .args([
            "explain",
            "--scenario",
            "maxtext-diloco",
            "--check",
            "loss",
            "--step",
            step,
            "--observed",
            observed,
            "--format",
            "csv",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

#[test]
fn explain_tells_jax_eager_from_jit_at_step_three() {
    // Real JAX 0.10.2 on the CPU (tests/data/jax_maxtext_diloco.json): f32 step-3 loss
    // 0.44809991121292114 eagerly (as MaxText's test runs), 0.4480999708175659 under jax.jit.
    let rows = explain_t3_loss("3", "0.44809991121292114");
    assert!(
        rows[0].starts_with("1,f32+xla-eager,0.44809991121292114,0.0,"),
        "{rows:?}"
    );
    assert!(
        !rows
            .iter()
            .any(|r| r.starts_with("1,") && r.contains("xla-jit")),
        "{rows:?}"
    );
    let rows = explain_t3_loss("3", "0.4480999708175659");
    assert!(
        rows[0].starts_with("1,f32+xla-jit,0.4480999708175659,0.0,"),
        "{rows:?}"
    );
    assert!(
        !rows
            .iter()
            .any(|r| r.starts_with("1,") && r.contains("xla-eager")),
        "{rows:?}"
    );
}

#[test]
fn explain_rejects_unknown_checks_and_steps_with_the_valid_ones() {
    seedsweep()
        .args([
            "explain",
            "--scenario",
            "maxtext-diloco",
            "--check",
            "logits",
            "--step",
            "2",
            "--observed",
            "1",
        ])
        .assert()
        .code(1)
        .stderr(predicates_contains("--check"))
        .stderr(predicates_contains("loss"));
    seedsweep()
        .args([
            "explain",
            "--scenario",
            "maxtext-diloco",
            "--check",
            "loss",
            "--step",
            "9",
            "--observed",
            "1",
        ])
        .assert()
        .code(1)
        .stderr(predicates_contains("--step"));
}

#[test]
fn repro_of_t3_reports_against_the_float64_constants_by_default() {
    seedsweep()
        .args([
            "repro",
            "--scenario",
            "maxtext-diloco",
            "--profile",
            "tpu-bf16",
            "--policy",
            "chex-default",
            "--fail-on-exceed",
        ])
        .assert()
        .code(3)
        .stdout(predicates_contains(
            "-- loss at step 2 (sharded-vs-f64, policy chex-default",
        ));
}

#[test]
fn logits_carry_error_bound_columns_that_cover_the_observed_usage() {
    let dir = tempfile::tempdir().unwrap();
    seedsweep()
        .args([
            "sweep",
            "--seeds",
            "10",
            "--quiet",
            "--scenario",
            "deepspeed-tied-row-parallel",
            "--out",
        ])
        .arg(dir.path())
        .assert()
        .success();
    let summary = read(&dir.path().join("summary.csv"));
    let mut lines = summary.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (check, cmp, worst, det, prob) = (
        col("check"),
        col("comparison"),
        col("worst_usage_pct"),
        col("theory_det_usage_pct"),
        col("theory_prob_usage_pct"),
    );
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        if f[check] == "logits" {
            let w: f64 = f[worst].parse().unwrap();
            let d: f64 = f[det].parse().unwrap();
            let p: f64 = f[prob].parse().unwrap();
            // The γ_n bound covers the final reduction's rounding; the observed sharded-vs-ref
            // difference of these small layers is far inside it.
            if f[cmp] == "sharded-vs-ref" {
                assert!(d > w && p > w, "{l}");
            }
            assert!(d.is_finite() && p.is_finite());
        } else {
            assert_eq!((f[det], f[prob]), ("NaN", "NaN"), "{l}");
        }
    }
}

/// `repro` names on stderr the matmul shapes a profile's revealed orders lack: the Megatron
/// MLP's 8-row shapes are not revealed at four threads (`mkl-threads-4`); the order models of
/// one and two threads cover them.
#[test]
fn repro_names_the_matmul_shapes_a_revealed_profile_lacks() {
    let run = |profile: &str| {
        let out = seedsweep()
            .args([
                "repro",
                "--scenario",
                "megatron-tp-mlp",
                "--profile",
                profile,
            ])
            .assert()
            .success()
            .get_output()
            .clone();
        String::from_utf8(out.stderr).unwrap()
    };
    let four = run("cpu-fma+mkl-threads-4");
    assert!(
        four.contains("revealed orders do not cover")
            && four.contains("forward 8x64 over 16")
            && four.contains("reveal_order.py --shapes")
            && four.contains("8x16x64"),
        "{four}"
    );
    // The order models cover every shape, at one thread and at two.
    for p in ["cpu-fma+mkl-threads-1", "cpu-fma+mkl-threads-2"] {
        let out = run(p);
        assert!(!out.contains("do not cover"), "{p}: {out}");
    }
}

#[test]
fn bench_reports_every_selected_scenario_with_its_ratios() {
    let out = seedsweep()
        .args([
            "bench",
            "--seeds",
            "2",
            "--scenario",
            "deepspeed-tied-row-parallel,deepspeed-row-parallel",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text
        .lines()
        .find(|l| l.starts_with("scenario"))
        .unwrap_or_else(|| panic!("no table header in\n{text}"));
    assert!(
        header.contains("baseline") && header.contains("1->2"),
        "{header}"
    );
    // One row per scenario: its group count (T1: 4 parametrizations, T2: 3), the distinct
    // computations per seed (T1's 35-3-True-0 computes what 35-3-False-0 does, so 3 of 4),
    // the baseline rate, the 1-thread rate, the ratio to the baseline, the 2-thread rate
    // and 1 -> 2.
    for (name, groups, computed) in [
        ("deepspeed-tied-row-parallel", 4, 3),
        ("deepspeed-row-parallel", 3, 3),
    ] {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name} in\n{text}"));
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(f.len(), 8, "{row}");
        assert_eq!(f[1], groups.to_string(), "{row}");
        assert_eq!(f[2], computed.to_string(), "{row}");
        for rate in [f[3], f[4], f[6]] {
            assert!(rate.parse::<f64>().unwrap() > 0.0, "{row}");
        }
        for ratio in [f[5], f[7]] {
            let r: f64 = ratio.trim_end_matches('x').parse().unwrap();
            assert!(r.is_finite() && r > 0.0, "{row}");
        }
    }
    assert!(text.contains("fast kernels, 1 thread:"), "{text}");
}

/// `check` and `sweep` say what a torch-mirroring profile does not cover exactly, and
/// `--strict-exactness` refuses it before any work (engine::exactness).
#[test]
fn strict_exactness_refuses_what_is_not_covered_and_passes_what_is() {
    let root = env!("CARGO_MANIFEST_DIR");
    // megatron-vocab-parallel-ce: torch.exp/log are MKL's, not modelled (docs/conformance.md).
    let ce = format!("{root}/configs/megatron_vocab_parallel_cross_entropy.toml");
    seedsweep()
        .args(["check", &ce])
        .assert()
        .success()
        .stderr(predicates_contains(
            // both parametrizations share the gap: one warning names them together
            "warning: megatron-vocab-parallel-ce [all 2 parametrizations] under cpu-fma+mkl-threads-1",
        ))
        .stderr(predicates_contains(
            "vocab-parallel cross-entropy: torch.exp",
        ));
    seedsweep()
        .args(["check", "--strict-exactness", &ce])
        .assert()
        .code(1)
        .stderr(predicates_contains("--strict-exactness: refusing"))
        .stderr(predicates_contains("vmsExp"));
    // The uneven TP 3 head: every kernel and matmul shape covered (bit-exact with its torch
    // fixture, builtin_fixtures::deepspeed_uneven_tp3_matches_torch_bit_for_bit).
    let uneven = format!("{root}/configs/deepspeed_uneven_tp3_row_parallel.toml");
    let out = seedsweep()
        .args(["check", "--strict-exactness", &uneven])
        .assert()
        .success();
    assert!(
        !String::from_utf8_lossy(&out.get_output().stderr).contains("warning"),
        "no gap under its revealed orders"
    );
    // sweep refuses before writing anything.
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("out");
    seedsweep()
        .args([
            "sweep",
            "--scenario",
            "megatron-vocab-parallel-ce",
            "--seeds",
            "1",
            "--quiet",
        ])
        .arg("--strict-exactness")
        .arg("--out")
        .arg(&folder)
        .assert()
        .code(1)
        .stderr(predicates_contains("vocab-parallel cross-entropy"));
    assert!(!folder.exists(), "nothing written");
}
