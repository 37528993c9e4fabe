//! The held-out test of issue 34 (`tests/data/heldout/ln_tp_mlp_adamw.toml`), written from
//! the description alone: LayerNorm -> column-parallel linear -> exact gelu ->
//! row-parallel linear -> residual add, MSE, AdamW, 4 steps of 2 micro-steps, TP 4 with
//! F = 100 and F = 102 and TP 3 with F = 100 (H = 36), 200 seeds.
//!
//! Its fixture is `scripts/torch_mirror.py`'s run of the file in torch 2.15 (one thread,
//! `ATEN_CPU_CAPABILITY=avx2`, eager) over seeds 1..=200 and the three parametrizations: every
//! check's tensor as an FNV-1a digest, both computations. Every tensor is compared bit for bit
//! (`torch_corpus::measure`, the corpus's comparison). Every tensor is identical (57,600 of
//! 57,600, asserted), so every (param, seed, check, policy) usage is too, and so are the
//! failing seeds under each policy. `agreement-torch1.tsv` records the agreement per check
//! (regenerated with `SEEDSWEEP_BLESS_CORPUS=1`).

use std::fmt::Write as _;
use std::path::Path;

use super::torch_corpus::measure;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/heldout/");

#[test]
fn heldout_block_against_torch_at_one_thread() {
    let toml = Path::new(DIR).join("ln_tp_mlp_adamw.toml");
    let fixture = Path::new(DIR).join("ln_tp_mlp_adamw.torch1.json");
    let c = measure(&toml, &fixture, "cpu-fma+mkl-threads-1");
    assert!(c.tensors > 0, "nothing compared");
    assert!(
        c.unmatched.is_empty(),
        "checks with no tensor in the fixture: {:?}",
        c.unmatched
    );
    let mut out = String::from(
        "# The held-out block against torch 2.15 at 1 thread (cpu-fma+mkl-threads-1), 200 seeds x 3 \
         parametrizations, both computations\n# check\ttensors identical\ttensors\n",
    );
    for (check, [tensors, same, _, _]) in &c.per_check {
        writeln!(out, "{check}\t{same}\t{tensors}").unwrap();
    }
    writeln!(out, "all\t{}\t{}", c.tensors_same, c.tensors).unwrap();
    let table = Path::new(DIR).join("agreement-torch1.tsv");
    let Some(recorded) = super::common::recorded::bless_or_recorded(&table, &out) else {
        return;
    };
    assert_eq!(
        c.tensors_same, c.tensors,
        "the held-out block is no longer bit-exact with torch (first difference: {:?})",
        c.first
    );
    assert_eq!(
        recorded,
        out,
        "the held-out block's measured agreement differs from {} (first difference: {:?})",
        table.display(),
        c.first
    );
}
