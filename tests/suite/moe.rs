//! The mixture-of-experts layer (`op = "moe"`, `src/ops/moe.rs`) against real torch.
//!
//! The files: `tests/data/moe/*.toml` and the built-in `configs/maxtext_moe_dense_test.toml`;
//! for each `F.toml`, `tests/data/moe/` holds `F.torch1.json` (and `F.torch2.json` where
//! present): `scripts/torch_mirror.py F.toml --threads T -o ...` in torch 2.15 on the CPU
//! (`ATEN_CPU_CAPABILITY=avx2`, eager, T threads), every check of both computations as FNV-1a
//! digests of the f32 bits. Every tensor is compared bit for bit with seedsweep's trace at the
//! profile of that thread count (`torch_corpus::measure`), and the measured counts are written
//! to `agreement.tsv`; the test asserts the measured rows equal the recorded ones (regenerate
//! with `SEEDSWEEP_BLESS_CORPUS=1`), so a regression and an improvement both fail it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::torch_corpus::measure;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/moe/");

fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<PathBuf> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    let builtin = root.join("configs/maxtext_moe_dense_test.toml");
    if builtin.exists() {
        v.push(builtin);
    }
    v.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    v
}

#[test]
fn moe_files_against_torch() {
    let mut out = String::from(
        "# Files of tests/data/moe against torch 2.15 (AVX2, eager), both computations\n\
         # file\tthreads\ttensors identical\ttensors\telements identical\telements\n",
    );
    let mut inexact = Vec::new();
    let mut compared = 0;
    for toml in files() {
        let name = toml.file_stem().unwrap().to_string_lossy().to_string();
        for threads in [1, 2] {
            let fixture = Path::new(DIR).join(format!("{name}.torch{threads}.json"));
            if !fixture.exists() {
                continue;
            }
            compared += 1;
            let c = measure(&toml, &fixture, &format!("cpu-fma+mkl-threads-{threads}"));
            assert!(c.tensors > 0, "{name}: nothing compared");
            assert!(
                c.unmatched.is_empty(),
                "{name}: checks with no tensor in the fixture: {:?}",
                c.unmatched
            );
            writeln!(
                out,
                "{name}\t{threads}\t{}\t{}\t{}\t{}",
                c.tensors_same, c.tensors, c.elements_same, c.elements
            )
            .unwrap();
            if c.tensors_same != c.tensors {
                let checks: Vec<String> = c
                    .per_check
                    .iter()
                    .filter(|(_, v)| v[1] != v[0])
                    .map(|(k, v)| format!("{k} {}/{}", v[1], v[0]))
                    .collect();
                inexact.push(format!("{name} at {threads} thread(s): {checks:?}"));
            }
        }
    }
    assert!(compared > 0, "no fixture found in {DIR}");
    let table = Path::new(DIR).join("agreement.tsv");
    eprintln!("{out}\nnot bit-exact: {inexact:#?}");
    if std::env::var_os("SEEDSWEEP_BLESS_CORPUS").is_some() {
        std::fs::write(&table, &out).unwrap();
        return;
    }
    let recorded = std::fs::read_to_string(&table).unwrap_or_default();
    assert_eq!(
        recorded,
        out,
        "measured agreement differs from {} (not exact: {inexact:?})",
        table.display()
    );
}
