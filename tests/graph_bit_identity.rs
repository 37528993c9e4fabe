//! Bit-identity gate of the graph executor: T1 (`deepspeed-tied-row-parallel`) and T2
//! (`deepspeed-row-parallel`) expressed as resolved graphs give the same three traces
//! (f64, reference, sharded: every value's bits, every slot's check, step and role, the
//! condition and self-expected slots included) as the hand-written scenario modules, for
//! every parametrization, every built-in profile and a set of modifiers, every mutant each
//! supports, and 30 seeds (10 per mutant). The scenarios' metadata (ids, checks, check names, mutants in
//! order, policies, summary) must be equal too.
//!
//! The configs are the pre-language files, kept in `tests/data/legacy/` because the
//! hand-written modules read that format; the graphs are built from the same tables here.

#[path = "common/legacy_graphs.rs"]
mod legacy_graphs;

use legacy_graphs::{t1_graphs, t2_graphs};
use seedsweep::config::parse_scenario_config;
use seedsweep::graph::scenario::merged_check_names;
use seedsweep::graph::GraphScenario;
use seedsweep::mutant::Mutant;
use seedsweep::profile::ProfileRegistry;
use seedsweep::scenario::{build, Scenario, Workspace};

const T1: &str = include_str!("data/legacy/deepspeed_tied_row_parallel.toml");
const T2: &str = include_str!("data/legacy/deepspeed_row_parallel.toml");

fn pair(text: &str, file: &str, rng: Option<&str>) -> (Box<dyn Scenario>, GraphScenario) {
    let text = match rng {
        Some(r) => text.replace("rng = \"torch\"", &format!("rng = \"{r}\"")),
        None => text.to_string(),
    };
    let common = parse_scenario_config(file, &text).unwrap();
    let old = build(common.clone()).unwrap();
    let graphs = if common.kind == "deepspeed-tied-row-parallel" {
        t1_graphs(&common)
    } else {
        t2_graphs(&common)
    };
    let names = merged_check_names(&graphs);
    let summary = old.summary();
    let new = GraphScenario::new(common, graphs, names, summary).unwrap();
    (old, new)
}

fn same_traces(
    a: &seedsweep::scenario::Traces,
    b: &seedsweep::scenario::Traces,
) -> Result<(), String> {
    for (name, x, y) in [
        ("f64", &a.f64, &b.f64),
        ("reference", &a.reference, &b.reference),
        ("sharded", &a.sharded, &b.sharded),
    ] {
        if x.slots != y.slots {
            return Err(format!(
                "{name}: slots differ: {:?} vs {:?}",
                x.slots.len(),
                y.slots.len()
            ));
        }
        if let Some(i) = (0..x.values.len().max(y.values.len()))
            .find(|&i| x.values.get(i).map(|v| v.to_bits()) != y.values.get(i).map(|v| v.to_bits()))
        {
            return Err(format!(
                "{name}: value {i} differs: {:?} vs {:?}",
                x.values.get(i),
                y.values.get(i)
            ));
        }
    }
    Ok(())
}

fn profiles() -> Vec<seedsweep::profile::Profile> {
    let reg = ProfileRegistry::builtin().unwrap();
    let mut out: Vec<_> = reg.profiles().cloned().collect();
    for spec in [
        "cpu-fma+mkl-threads-2",
        "cpu-fma+tanh-cr",
        "cpu-fma+allreduce-tree",
        "cpu-fma+allreduce-bf16",
        "cpu-fma+torch-avx512",
        "f32+allreduce-rank-order",
    ] {
        out.push(reg.resolve(spec, "--profile").unwrap());
    }
    out
}

fn gate(text: &str, file: &str, rng: Option<&str>, seeds: u64) {
    let (old, new) = pair(text, file, rng);
    assert_eq!(old.param_ids(), new.param_ids());
    assert_eq!(old.all_check_names(), new.all_check_names());
    assert_eq!(
        old.mutants(),
        new.mutants(),
        "derived mutants, in today's order"
    );
    assert_eq!(old.policies(), new.policies());
    assert_eq!(old.summary(), new.summary());
    let mut mutants: Vec<Option<Mutant>> = vec![None];
    mutants.extend(old.mutants().iter().copied().map(Some));
    let (mut wa, mut wb) = (Workspace::default(), Workspace::default());
    let mut runs = 0;
    for param in 0..old.param_ids().len() {
        assert_eq!(
            old.checks(param),
            new.checks(param),
            "checks of param {param}"
        );
        for profile in profiles() {
            for &mutant in &mutants {
                wa.mutant = mutant;
                wb.mutant = mutant;
                let first = old.common().first_seed;
                // Every seed for the clean runs; a third of them for each mutant.
                let n = if mutant.is_none() {
                    seeds
                } else {
                    seeds.div_ceil(3)
                };
                for seed in first..first + n {
                    old.run(param, seed, &profile, &mut wa);
                    new.run(param, seed, &profile, &mut wb);
                    if let Err(e) = same_traces(&wa.traces, &wb.traces) {
                        panic!(
                            "{file} param {} profile {} mutant {:?} seed {seed}: {e}",
                            old.param_ids()[param],
                            profile.name,
                            mutant.map(|m| m.name())
                        );
                    }
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 0);
}

/// FNV-1a 64 over every slot (check, step, micro, role, length) and every value's bits of the
/// three traces.
fn digest(t: &seedsweep::scenario::Traces, h: &mut u64) {
    let mut eat = |x: u64| {
        for b in x.to_le_bytes() {
            *h ^= b as u64;
            *h = h.wrapping_mul(0x100000001b3);
        }
    };
    for tr in [&t.f64, &t.reference, &t.sharded] {
        for s in &tr.slots {
            eat(s.check as u64);
            eat(s.step.step as u64);
            eat(s.step.micro.map_or(u64::MAX, |m| m as u64));
            eat(s.role as u64);
            eat(s.len as u64);
        }
        for v in &tr.values {
            eat(v.to_bits());
        }
    }
}

/// One line per (parametrization, profile, mutant): the digest of 10 seeds' traces.
fn golden_lines(s: &dyn Scenario, name: &str) -> Vec<String> {
    let mut mutants: Vec<Option<Mutant>> = vec![None];
    mutants.extend(s.mutants().iter().copied().map(Some));
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    for (param, id) in s.param_ids().iter().enumerate() {
        for profile in profiles() {
            for &mutant in &mutants {
                ws.mutant = mutant;
                let mut h = 0xcbf29ce484222325u64;
                let first = s.common().first_seed;
                for seed in first..first + 10 {
                    s.run(param, seed, &profile, &mut ws);
                    digest(&ws.traces, &mut h);
                }
                out.push(format!(
                    "{name} {id} {} {} {h:016x}",
                    profile.name,
                    mutant.map_or("clean", |m| m.name())
                ));
            }
        }
    }
    out
}

const GOLDEN: &str = include_str!("data/graph_golden_t1t2.txt");

/// The golden digests were written from the hand-written T1/T2 modules (before their
/// removal) with `SEEDSWEEP_WRITE_GOLDEN=1 cargo test --release --test graph_bit_identity
/// golden`; the graphs must reproduce them, so the gate outlives the modules.
#[test]
fn graphs_reproduce_the_golden_digests_of_the_hand_written_modules() {
    let mut lines = Vec::new();
    for (text, file) in [(T1, "t1"), (T2, "t2")] {
        let (old, new) = pair(text, file, None);
        let s: &dyn Scenario = if std::env::var_os("SEEDSWEEP_WRITE_GOLDEN").is_some() {
            old.as_ref()
        } else {
            &new
        };
        lines.extend(golden_lines(s, old.common().kind.as_str()));
    }
    let text = lines.join("\n") + "\n";
    if std::env::var_os("SEEDSWEEP_WRITE_GOLDEN").is_some() {
        std::fs::write(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/graph_golden_t1t2.txt"
            ),
            &text,
        )
        .unwrap();
        return;
    }
    assert_eq!(GOLDEN.lines().count(), lines.len());
    for (want, got) in GOLDEN.lines().zip(&lines) {
        assert_eq!(want, got);
    }
}

#[test]
fn t1_graph_is_bit_identical_to_the_hand_written_module() {
    gate(T1, "t1", None, 30);
}

#[test]
fn t2_graph_is_bit_identical_to_the_hand_written_module() {
    gate(T2, "t2", None, 30);
}

#[test]
fn chacha_init_and_inputs_are_bit_identical_too() {
    gate(T1, "t1-chacha", Some("chacha"), 6);
    gate(T2, "t2-chacha", Some("chacha"), 6);
}

#[test]
fn the_comparison_detects_a_different_computation() {
    // Seeds 8173 and 8174 draw different weights: the gate's comparison must report it.
    let (old, new) = pair(T1, "t1", None);
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "--profile")
        .unwrap();
    let (mut wa, mut wb) = (Workspace::default(), Workspace::default());
    old.run(1, 8173, &profile, &mut wa);
    new.run(1, 8174, &profile, &mut wb);
    assert!(same_traces(&wa.traces, &wb.traces).is_err());
    new.run(1, 8173, &profile, &mut wb);
    assert!(same_traces(&wa.traces, &wb.traces).is_ok());
}

#[test]
fn merged_check_names_keep_each_graphs_order() {
    let common = parse_scenario_config("t2", T2).unwrap();
    let graphs = t2_graphs(&common);
    assert_eq!(
        merged_check_names(&graphs),
        [
            "logits",
            "loss",
            "input_grad",
            "projection_grad",
            "head_grad",
            "bias_grad",
            "sgd_update",
            "projection_weight",
            "head_weight",
            "bias"
        ]
    );
}
