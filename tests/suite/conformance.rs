//! The conformance table: every op of the language, forward and backward, at one and two
//! torch threads, measured against real PyTorch on probes that isolate it
//! (`scripts/conformance_probes.py`: nothing upstream of the op but drawn inputs, so both
//! sides feed it bit-identical operands). The probes' torch fixtures
//! (`tests/data/conformance/*.torch{1,2}.json`, `scripts/torch_mirror.py`: torch 2.15, CPU,
//! AVX2 kernels, eager, 5 seeds, every element's bits) are compared here with seedsweep at
//! `cpu-fma+mkl-threads-1` and `cpu-fma+mkl-threads-2`, and the measured table must equal
//! `docs/conformance.md`: a kernel change that changes a rate fails this test until the table
//! is regenerated (`SEEDSWEEP_BLESS_CORPUS=1 cargo test --release --test suite
//! conformance::`), so the document never claims what the code does not do.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::torch_corpus::measure;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/conformance/");
const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/conformance.md");

/// (op, direction) → per thread count: [elements, identical].
type Table = BTreeMap<(String, String), [[usize; 2]; 2]>;

fn measured() -> Table {
    let rows = std::fs::read_to_string(format!("{DIR}probes.tsv")).expect("probes.tsv");
    let mut table = Table::new();
    let mut files: BTreeMap<String, Vec<(String, String, String)>> = BTreeMap::new();
    for line in rows
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "probes.tsv: {line}");
        files.entry(f[0].to_string()).or_default().push((
            f[1].to_string(),
            f[2].to_string(),
            f[3].to_string(),
        ));
    }
    assert!(files.len() >= 30, "{} probes", files.len());
    for (file, checks) in &files {
        let toml = std::path::PathBuf::from(format!("{DIR}{file}"));
        let stem = file.trim_end_matches(".toml");
        for (ti, threads) in [1, 2].into_iter().enumerate() {
            let fixture = toml.with_file_name(format!("{stem}.torch{threads}.json"));
            let c = measure(&toml, &fixture, &format!("cpu-fma+mkl-threads-{threads}"));
            for (check, op, dir) in checks {
                let pc = c
                    .per_check
                    .get(check)
                    .unwrap_or_else(|| panic!("{file}: no tensor of check {check}"));
                // Per seed (5) and computation (2): one tensor per step.
                assert!(
                    pc[0] >= 10 && pc[0].is_multiple_of(10),
                    "{file} {check}: {} tensors, not one per seed, computation and step",
                    pc[0]
                );
                assert!(pc[2] > 0, "{file} {check}: bits compared");
                let e = &mut table.entry((op.clone(), dir.clone())).or_default()[ti];
                e[0] += pc[2];
                e[1] += pc[3];
            }
        }
    }
    table
}

fn cell(e: [usize; 2]) -> String {
    if e[0] == e[1] {
        format!("exact ({})", e[0])
    } else {
        format!(
            "{:.1} % ({} / {})",
            100.0 * e[1] as f64 / e[0] as f64,
            e[1],
            e[0]
        )
    }
}

fn render(t: &Table) -> String {
    let mut s = String::from(
        "# Conformance: seedsweep against real PyTorch, op by op\n\n\
         Measured by `tests/suite/conformance.rs` on the probes of `scripts/conformance_probes.py`\n\
         (each op alone behind drawn inputs, 5 seeds, every element's bits), against torch 2.15.0\n\
         on the CPU (x86-64, ATen's AVX2 kernels via `ATEN_CPU_CAPABILITY=avx2`, MKL, eager) at\n\
         one thread under profile `cpu-fma+mkl-threads-1` and at two threads under\n\
         `cpu-fma+mkl-threads-2`, both computations (the unsharded reference and the sharded one,\n\
         which is the reference where a probe has no parallelism). A cell is `exact (elements)` or the share of elements with\n\
         identical bits. Backward rows get their upstream gradient from the MSE loss (its own\n\
         row); the optimizer rows from an embedding's weight gradient (a scatter-add, its own row).\n\
         Regenerate: see `scripts/conformance_probes.py`; this file is written by the test and\n\
         checked against the measurement on every `cargo test`.\n\n\
         | op | direction | 1 thread | 2 threads |\n|---|---|---|---|\n",
    );
    for ((op, dir), [one, two]) in t {
        writeln!(s, "| {op} | {dir} | {} | {} |", cell(*one), cell(*two)).unwrap();
    }
    s
}

#[test]
fn conformance_table_is_what_the_probes_measure() {
    let table = render(&measured());
    let Some(doc) = super::common::recorded::bless_or_recorded(DOC, &table) else {
        return;
    };
    assert_eq!(
        doc, table,
        "docs/conformance.md is not what the probes measure; regenerate it (its header says how)"
    );
}
