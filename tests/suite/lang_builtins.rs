//! The DeepSpeed built-ins written in the scenario language describe what the hand-written
//! scenarios compute: the same parametrization ids, the same checks per parametrization (name,
//! shape, self-consistency, the reduction behind matmul outputs), policies with the same
//! tolerances, and the mutants derived from the graph equal today's lists. And
//! `seedsweep check` prints the resolved graph (snapshot).

use seedsweep::engine::catalog::Catalog;
use seedsweep::scenario::ir::CheckTensor;
use seedsweep::scenario::{describe::check_text, parse_file};

fn lang(path: &str) -> seedsweep::scenario::ScenarioFile {
    let text = std::fs::read_to_string(path).unwrap();
    parse_file(path, &text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_language_files_match_the_hand_written_builtins() {
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    for path in [
        "configs/deepspeed_tied_row_parallel.toml",
        "configs/deepspeed_row_parallel.toml",
    ] {
        let file = lang(path);
        let si = catalog
            .scenario_index(&file.common.name, "--scenario")
            .unwrap();
        let old = &catalog.scenarios[si];
        assert_eq!(
            old.param_ids(),
            file.graphs
                .iter()
                .map(|g| g.id.as_str())
                .collect::<Vec<_>>(),
            "{path}"
        );
        assert_eq!(old.common().first_seed, file.common.first_seed);
        assert_eq!(old.common().rng, file.common.rng);
        assert_eq!(old.common().profiles, file.common.profiles);
        assert_eq!(old.common().default_policies, file.common.default_policies);
        assert_eq!(old.policies(), &file.policies[..], "{path}");
        assert_eq!(old.asserted_comparison(), file.compare);
        for (pi, g) in file.lowered.iter().enumerate() {
            let want = old.checks(pi);
            assert_eq!(want.len(), g.checks.len(), "{path} {}", g.id);
            for (w, c) in want.iter().zip(&g.checks) {
                assert_eq!(w.name, c.name, "{path} {}", g.id);
                assert_eq!(w.shape, c.shape, "{path} {} {}", g.id, c.name);
                assert_eq!(w.reduction, c.reduction, "{path} {} {}", g.id, c.name);
                assert_eq!(
                    w.self_consistent,
                    matches!(c.tensor, CheckTensor::SgdUpdate(_)),
                    "{path} {} {}",
                    g.id,
                    c.name
                );
            }
            assert_eq!(old.mutants(), &g.mutants()[..], "{path} {}", g.id);
        }
    }
}

#[test]
fn the_tied_head_lowers_to_the_tests_construction_order_and_tie() {
    let file = lang("configs/deepspeed_tied_row_parallel.toml");
    let g = &file.lowered[1]; // 35-3-False-0
    let names: Vec<&str> = g.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "embedding.weight",
            "projection.weight",
            "projection.bias",
            "head.weight"
        ]
    );
    assert_eq!(g.params[3].tie, Some(seedsweep::scenario::ir::ParamId(0)));
    assert_eq!(g.params[0].shape, [67, 35]);
    assert_eq!(
        g.params[0].init,
        seedsweep::scenario::ir::ParamInit::Draw(seedsweep::scenario::ir::TorchInit::Normal {
            mean: 0.0,
            std: 1.0,
            zero_row: Some(3)
        })
    );
    // ids[0, 0] = padding_idx, after the draws of every step.
    assert_eq!(
        g.inputs.fixups,
        [seedsweep::scenario::ir::Fixup::Set {
            input: seedsweep::scenario::ir::InputId(0),
            index: 0,
            value: 3
        }]
    );
    assert_eq!(g.inputs.seed_base, 100);
    // padding_idx = None: no fix-up.
    assert!(file.lowered[0].inputs.fixups.is_empty());
    // zero_stage 2 partitions the gradients: its tied_grad check is skipped.
    assert_eq!(file.graphs[3].skipped.len(), 1);
    assert_eq!(file.graphs[3].skipped[0].0, "tied_grad");
    assert!(file.lowered[3].checks.iter().all(|c| c.name != "tied_grad"));
}

#[test]
fn check_prints_the_resolved_tied_head() {
    let file = lang("configs/deepspeed_tied_row_parallel.toml");
    insta::assert_snapshot!(check_text(&file).unwrap());
}

#[test]
fn check_describes_the_outer_loop_files() {
    // `seedsweep check` on the two DiLoCo files: replicas, sync period, the all-reduces with
    // their ranks and wire dtype, the outer optimizer, the checks and the mutants.
    for (name, path) in [
        ("check_maxtext_diloco", "configs/maxtext_diloco.toml"),
        ("check_diloco", "configs/diloco.toml"),
    ] {
        let text = seedsweep::scenario::describe::check_path(std::path::Path::new(path))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        insta::assert_snapshot!(name, text);
    }
}

use crate::common::legacy_graphs;

/// The language files lower to exactly the graphs the executor's bit-identity gate
/// (tests/suite/golden_t1_t2.rs) proves equal, trace for trace, to the hand-written modules.
#[test]
fn the_language_files_lower_to_the_graphs_proven_bit_identical() {
    for (lang_path, legacy, t1) in [
        (
            "configs/deepspeed_tied_row_parallel.toml",
            include_str!("../data/legacy/deepspeed_tied_row_parallel.toml"),
            true,
        ),
        (
            "configs/deepspeed_row_parallel.toml",
            include_str!("../data/legacy/deepspeed_row_parallel.toml"),
            false,
        ),
    ] {
        for rng in ["torch", "chacha"] {
            let common = seedsweep::scenario::config::parse_scenario_config(
                "legacy.toml",
                &legacy.replace("rng = \"torch\"", &format!("rng = \"{rng}\"")),
            )
            .unwrap();
            let want = if t1 {
                legacy_graphs::t1_graphs(&common)
            } else {
                legacy_graphs::t2_graphs(&common)
            };
            let text = std::fs::read_to_string(lang_path)
                .unwrap()
                .replace("rng = \"torch\"", &format!("rng = \"{rng}\""));
            let file = parse_file(lang_path, &text).unwrap();
            assert_eq!(file.lowered.len(), want.len());
            for (got, want) in file.lowered.iter().zip(&want) {
                // `dims` is for printing only; the language lists every dim of the file.
                let mut got = got.clone();
                got.dims = want.dims.clone();
                assert_eq!(&got, want, "{lang_path} {} ({rng})", want.id);
            }
        }
    }
}
