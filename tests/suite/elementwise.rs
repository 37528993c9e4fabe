//! Layers with several inputs (`mul`, `add`), fixed inputs (`draw = "fixed"`), sharded inputs
//! and per-token losses, against real torch.
//!
//! `tests/data/elementwise/` holds scenario files and, for each `F.toml`, the fixtures
//! `F.torch1.json` and `F.torch2.json`: `scripts/torch_mirror.py F.toml --threads T` in torch
//! 2.15 on the CPU (`ATEN_CPU_CAPABILITY=avx2`, eager, T = 1 and 2 threads), every check of
//! both computations (the unsharded reference and the simulated sharded one) as FNV-1a
//! digests of the f32 bits. Every tensor is compared bit for bit with seedsweep's trace at the
//! profile of that thread count (`torch_corpus::measure`, the corpus's comparison), and the
//! measured counts are written to `agreement.tsv`; the test asserts the measured rows equal
//! the recorded ones (regenerate with `SEEDSWEEP_BLESS_CORPUS=1`) and that every file listed
//! as exact there is exact.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::torch_corpus::measure;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/elementwise/");

fn files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

#[test]
fn elementwise_files_against_torch_at_one_and_two_threads() {
    let mut out = String::from(
        "# Files of tests/data/elementwise against torch 2.15 (AVX2, eager), both computations\n\
         # file\tthreads\ttensors identical\ttensors\telements identical\telements\n",
    );
    let mut inexact = Vec::new();
    for toml in files() {
        let name = toml.file_stem().unwrap().to_string_lossy().to_string();
        for threads in [1, 2] {
            let fixture = Path::new(DIR).join(format!("{name}.torch{threads}.json"));
            let c = measure(
                &toml,
                &fixture,
                &format!("cpu-fma+mkl-threads-{threads}"),
            );
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
                inexact.push(format!("{name} at {threads} thread(s): {:?}", c.first));
            }
        }
    }
    let table = Path::new(DIR).join("agreement.tsv");
    if std::env::var_os("SEEDSWEEP_BLESS_CORPUS").is_some() {
        std::fs::write(&table, &out).unwrap();
        return;
    }
    let recorded = std::fs::read_to_string(&table).unwrap_or_default();
    assert_eq!(
        recorded, out,
        "measured agreement differs from {} (not exact: {inexact:?})",
        table.display()
    );
    assert!(inexact.is_empty(), "not bit-exact with torch: {inexact:?}");
}
