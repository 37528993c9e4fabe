//! A/B timing of T1 seed-runs: the hand-written module against the same scenario as resolved
//! graphs through the executor, interleaved in one process (rounds alternate A and B so that
//! machine load hits both alike). Prints the best round of each, in seed-runs per second, for
//! the default profile `cpu-fma`, one thread.
//!
//! `cargo run --release --example graph_ab -- [ROUNDS] [SEEDS_PER_ROUND]`

#[path = "../tests/common/legacy_graphs.rs"]
mod legacy_graphs;

use std::time::Instant;

use seedsweep::config::parse_scenario_config;
use seedsweep::graph::scenario::merged_check_names;
use seedsweep::graph::GraphScenario;
use seedsweep::profile::ProfileRegistry;
use seedsweep::scenario::{build, Scenario, Workspace};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("integer arguments"))
        .collect();
    let rounds = args.first().copied().unwrap_or(10);
    let seeds = args.get(1).copied().unwrap_or(200);
    for (file, text) in [
        (
            "t1",
            include_str!("../tests/data/legacy/deepspeed_tied_row_parallel.toml"),
        ),
        (
            "t2",
            include_str!("../tests/data/legacy/deepspeed_row_parallel.toml"),
        ),
    ] {
        let common = parse_scenario_config(file, text).unwrap();
        let old = build(common.clone()).unwrap();
        let graphs = if file == "t1" {
            legacy_graphs::t1_graphs(&common)
        } else {
            legacy_graphs::t2_graphs(&common)
        };
        let names = merged_check_names(&graphs);
        let new = GraphScenario::new(common, graphs, names, old.summary()).unwrap();
        let profile = ProfileRegistry::builtin()
            .unwrap()
            .resolve("cpu-fma", "--profile")
            .unwrap();
        let scenarios: [&dyn Scenario; 2] = [old.as_ref(), &new];
        let mut best = [f64::INFINITY; 2];
        let mut ws = [Workspace::default(), Workspace::default()];
        for _ in 0..rounds {
            for (i, s) in scenarios.iter().enumerate() {
                let t = Instant::now();
                for seed in 0..seeds {
                    for p in 0..s.param_ids().len() {
                        s.run(p, 8173 + seed, &profile, &mut ws[i]);
                    }
                }
                best[i] = best[i].min(t.elapsed().as_secs_f64());
            }
        }
        let n = (seeds as usize * old.param_ids().len()) as f64;
        println!(
            "{file}: hand-written {:.0} seed-runs/s, graph executor {:.0} seed-runs/s (ratio {:.3}; best of {rounds} rounds of {n} runs)",
            n / best[0],
            n / best[1],
            best[0] / best[1]
        );
    }
}
