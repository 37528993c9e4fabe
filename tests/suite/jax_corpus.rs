//! The outer-loop differential corpus: scenario files with a DiLoCo outer loop
//! (`scripts/gen_outer_corpus.py`, and the built-in outer-loop files) run by real JAX
//! (`scripts/jax_mirror.py`) and by seedsweep, compared bit for bit.
//!
//! `tests/data/jax_corpus/` holds, for every generated file `outer-NNN.toml`, the fixture
//! `outer-NNN.jax-<execution>.json` (its own execution mode), and under `builtin/` the
//! fixtures of `configs/diloco.toml`, `configs/maxtext_diloco.toml` and
//! `tests/data/diloco_variants/*.toml` in both execution modes: what every check records in
//! JAX 0.10.2 / optax 0.2.8 on the CPU (float32, `jax_enable_x64` off, as MaxText's test
//! runs) for 5 seeds (one for a file that writes its data), in torch_mirror.py's fixture
//! format, with one computation: the replicas simulated on one device as the JAX test does
//! (`jax.vmap`), their sums in JAX's order. Drawn data is seedsweep's own (the fixture's
//! `conditions.data`): these fixtures test the arithmetic, not the generator.
//!
//! seedsweep runs each file at `f32+allreduce-rank-order+xla-<execution>`: the file's default
//! profile `f32` and execution mode, with the all-reduce in rank order so that the sharded
//! computation sums the replicas as the one-device JAX test does (with the default ring the
//! two agree only at 2 replicas); both its computations (sharded and reference) are compared
//! with the fixture. `agreement-jax.tsv` holds the measured agreement of the fixtures that
//! are not bit-exact and the summary; the test asserts the measured counts equal the
//! recorded ones (`SEEDSWEEP_BLESS_CORPUS=1 cargo test --release --test suite jax_corpus::`
//! rewrites the table).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::torch_corpus::{check_table, compare, Counts};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jax_corpus/");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The scenario file of a built-in fixture `builtin/<stem>.jax-<execution>.json`.
fn builtin_toml(stem: &str) -> PathBuf {
    [
        format!("{ROOT}/configs/{stem}.toml"),
        format!("{ROOT}/tests/data/diloco_variants/{stem}.toml"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("no scenario file for the built-in fixture {stem}"))
}

/// Every (label, scenario file, fixture), sorted by label: the generated files, then the
/// built-ins (label `builtin/<fixture stem>`).
fn fixtures() -> Vec<(String, PathBuf, PathBuf)> {
    let list = |dir: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        v.sort();
        v
    };
    let mut out = Vec::new();
    for fx in list(DIR) {
        let name = fx.file_name().unwrap().to_string_lossy().to_string();
        let (stem, _) = name
            .split_once(".jax-")
            .expect("<stem>.jax-<execution>.json");
        out.push((name.clone(), fx.with_file_name(format!("{stem}.toml")), fx));
    }
    for fx in list(&format!("{DIR}builtin/")) {
        let name = fx.file_name().unwrap().to_string_lossy().to_string();
        let (stem, _) = name
            .split_once(".jax-")
            .expect("<stem>.jax-<execution>.json");
        out.push((format!("builtin/{name}"), builtin_toml(stem), fx));
    }
    out
}

/// Compares one fixture: its conditions, then every tensor at the profile of its execution.
fn measure(toml: &Path, fixture: &Path) -> Counts {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    let c = &json["conditions"];
    let what = fixture.display();
    assert_eq!(json["generator"], "scripts/jax_mirror.py", "{what}");
    assert_eq!(c["jax"], "0.10.2", "{what}");
    assert_eq!(c["optax"], "0.2.8", "{what}");
    assert_eq!(c["backend"], "cpu", "{what}");
    assert_eq!(c["precision"], "f32", "{what}");
    assert_eq!(c["x64"], false, "{what}");
    let execution = c["execution"].as_str().expect("execution");
    assert!(
        fixture
            .to_string_lossy()
            .ends_with(&format!(".jax-{execution}.json")),
        "{what}: named after another execution mode"
    );
    assert!(
        json["runs"][0]["sharded"].is_null(),
        "{what}: one computation"
    );
    compare(
        toml,
        &json,
        &format!("f32+allreduce-rank-order+xla-{execution}"),
    )
}

#[test]
fn outer_loop_corpus_matches_jax() {
    let all = fixtures();
    let generated = all.iter().filter(|f| !f.0.starts_with("builtin/")).count();
    assert!(
        generated >= 30,
        "the corpus has {generated} generated fixtures"
    );
    assert!(
        all.len() - generated >= 10,
        "the built-in outer-loop files have fixtures in both modes"
    );
    let rows: Vec<(String, Counts)> = all
        .iter()
        .map(|(label, toml, fx)| (label.clone(), measure(toml, fx)))
        .collect();
    check_table(
        DIR,
        "agreement-jax.tsv",
        "Measured agreement with JAX 0.10.2 (CPU, f32), each fixture at profile \
         f32+allreduce-rank-order+xla-<its execution>, of the fixtures that are not bit-exact",
        "jax corpus",
        &rows,
    );
}

/// A diagnostic, not a check: compares one fixture and prints its counts and first
/// difference. `SEEDSWEEP_MIRROR=path/to/fixture.jax-jit.json` (with
/// `SEEDSWEEP_CORPUS_DEBUG=<file stem>` to list every differing tensor), then
/// `cargo test --release --test suite jax_corpus::diagnose -- --ignored --nocapture`.
#[test]
#[ignore = "a diagnostic: needs SEEDSWEEP_MIRROR"]
fn diagnose() {
    let fx = PathBuf::from(std::env::var("SEEDSWEEP_MIRROR").expect("SEEDSWEEP_MIRROR"));
    let (label, toml, _) = fixtures()
        .into_iter()
        .find(|f| f.2 == fx)
        .unwrap_or_else(|| panic!("{} is no corpus fixture", fx.display()));
    let c = measure(&toml, &fx);
    eprintln!("{label}: {c:?}");
}
