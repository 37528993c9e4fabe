//! Golden gate of the two DiLoCo built-ins (`diloco`, `maxtext-diloco`): digests of the three
//! traces (f64, reference, sharded: every slot's check, step, micro-step, role and length,
//! every value's bits, the self-expected slots included) and of the scenarios' metadata, for
//! every built-in profile plus the modifiers that change a DiLoCo run (JAX execution mode,
//! all-reduce order and wire), every mutant each scenario lists, and a few seeds.
//!
//! `tests/data/graph_golden_diloco.txt` was written from the hand-written scenario modules
//! (`src/scenario/diloco.rs`, `src/scenario/maxtext_diloco.rs`, before their removal) with
//! `SEEDSWEEP_WRITE_GOLDEN=1` set (today: `SEEDSWEEP_WRITE_GOLDEN=1 cargo test --release --test
//! suite -- golden_diloco::`); whatever runs the scenarios now must reproduce it, so the gate
//! outlives the modules. The variants in `tests/data/diloco_variants/` (an MLP with AdamW on 3
//! replicas and 6 examples, a 2-output linear model with plain momentum, a sync after every
//! step on 2 examples) reach the code paths the built-in config does not; each is loaded with
//! `--config` semantics (it replaces the built-in `diloco`).

use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::exec::scenario::{Scenario, Traces, Workspace};
use seedsweep::scenario::mutant::Mutant;

/// FNV-1a 64 step.
fn eat(h: &mut u64, x: u64) {
    for b in x.to_le_bytes() {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100000001b3);
    }
}

fn digest(t: &Traces, h: &mut u64) {
    for tr in [&t.f64, &t.reference, &t.sharded] {
        eat(h, tr.slots.len() as u64);
        for s in &tr.slots {
            eat(h, s.check as u64);
            eat(h, s.step.step as u64);
            eat(h, s.step.micro.map_or(u64::MAX, |m| m as u64));
            eat(h, s.role as u64);
            eat(h, s.len as u64);
        }
        for v in &tr.values {
            eat(h, v.to_bits());
        }
    }
}

fn text_digest(s: &str) -> u64 {
    let mut h = 0xcbf29ce484222325u64;
    for b in s.bytes() {
        eat(&mut h, b as u64);
    }
    h
}

/// Every built-in profile, then with each modifier that a DiLoCo run reads.
fn profile_specs(c: &Catalog) -> Vec<String> {
    let mut out = Vec::new();
    for p in c.profiles.profiles() {
        out.push(p.name.clone());
        for m in ["xla-eager", "xla-jit"] {
            out.push(format!("{}+{m}", p.name));
        }
    }
    for spec in [
        "f32+allreduce-tree",
        "f32+allreduce-bf16",
        "f32+allreduce-rank-order",
        "tpu-bf16+allreduce-tree+xla-eager",
        "cpu-nofma+allreduce-bf16+xla-jit",
    ] {
        out.push(spec.to_string());
    }
    out
}

/// The scenario's metadata, one line: ids, checks (name, shape, self-consistency), check
/// names, mutants, policies (their debug text, digested), summary, seed dependence, the
/// asserted comparison and the execution modifiers.
fn meta_line(name: &str, s: &dyn Scenario) -> String {
    let checks: Vec<String> = (0..s.param_ids().len())
        .flat_map(|p| {
            s.checks(p)
                .iter()
                .map(|c| format!("{}{:?}{}", c.name, c.shape, c.self_consistent))
                .collect::<Vec<_>>()
        })
        .collect();
    format!(
        "meta {name} ids={:?} checks={:?} names={:?} mutants={:?} policies={:016x} summary={:?} \
         seed_dependent={} asserted={:?} modifiers={:?}",
        s.param_ids(),
        checks,
        s.all_check_names(),
        s.mutants().iter().map(|m| m.name()).collect::<Vec<_>>(),
        text_digest(&format!("{:?}", s.policies())),
        s.summary(),
        s.seed_dependent(),
        s.asserted_comparison(),
        s.execution_modifiers(),
    )
}

fn golden_lines(name: &str, configs: &[&str], scenario: &str, seeds: u64) -> Vec<String> {
    let c = Catalog::load(configs, None).expect("configs load");
    let specs = profile_specs(&c);
    let groups = c
        .select(&Selection {
            scenarios: Some(vec![scenario.to_string()]),
            profiles: Some(specs),
            mutants: Some(vec!["all".to_string()]),
            ..Default::default()
        })
        .expect("selection resolves");
    let s = &c.scenarios[groups[0].scenario];
    let mut out = vec![meta_line(name, s.as_ref())];
    let mut ws = Workspace::default();
    for g in &groups {
        ws.mutant = g.mutant;
        let mut h = 0xcbf29ce484222325u64;
        let first = s.common().first_seed;
        for seed in first..first + seeds {
            s.run(g.param, seed, &g.profile, &mut ws);
            digest(&ws.traces, &mut h);
        }
        out.push(format!(
            "{name} {} {} {} {h:016x}",
            s.param_ids()[g.param],
            g.profile.name,
            g.mutant.map_or("clean", Mutant::name)
        ));
    }
    out
}

const GOLDEN: &str = include_str!("../data/graph_golden_diloco.txt");

fn variant(name: &str) -> String {
    format!(
        "{}/tests/data/diloco_variants/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn diloco_builtins_reproduce_the_golden_digests_of_the_hand_written_modules() {
    let mut lines = Vec::new();
    lines.extend(golden_lines("maxtext-diloco", &[], "maxtext-diloco", 2));
    lines.extend(golden_lines("diloco", &[], "diloco", 4));
    for v in ["mlp_adamw", "linear_momentum", "two_examples_every_step"] {
        let path = variant(v);
        lines.extend(golden_lines(v, &[path.as_str()], "diloco", 3));
    }
    let text = lines.join("\n") + "\n";
    if std::env::var_os("SEEDSWEEP_WRITE_GOLDEN").is_some() {
        std::fs::write(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/graph_golden_diloco.txt"
            ),
            &text,
        )
        .unwrap();
        return;
    }
    assert_eq!(
        GOLDEN.lines().count(),
        lines.len(),
        "number of golden lines"
    );
    for (want, got) in GOLDEN.lines().zip(&lines) {
        assert_eq!(want, got);
    }
}

#[test]
fn the_digest_sees_a_different_seed_and_a_different_mode() {
    // The gate must be able to fail: two seeds of `diloco`, and f32 eager against f32 jit of
    // `maxtext-diloco` (they part at step 3), give different digests.
    let c = Catalog::load(&[] as &[&str], None).unwrap();
    let one = |scenario: &str, profile: &str, seed: u64| {
        let g = c
            .select(&Selection {
                scenarios: Some(vec![scenario.to_string()]),
                profiles: Some(vec![profile.to_string()]),
                ..Default::default()
            })
            .unwrap();
        let mut ws = Workspace::default();
        c.scenarios[g[0].scenario].run(g[0].param, seed, &g[0].profile, &mut ws);
        let mut h = 0xcbf29ce484222325u64;
        digest(&ws.traces, &mut h);
        h
    };
    assert_ne!(one("diloco", "f32", 1), one("diloco", "f32", 2));
    assert_eq!(one("diloco", "f32", 1), one("diloco", "f32", 1));
    assert_ne!(
        one("maxtext-diloco", "f32+xla-eager", 0),
        one("maxtext-diloco", "f32+xla-jit", 0)
    );
}
