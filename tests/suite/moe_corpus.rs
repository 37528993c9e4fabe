//! Generated files with mixture-of-experts layers against real torch:
//! `tests/data/moe_corpus/moe-NNN.toml` are `scripts/gen_corpus.py --count 10 --seed 38 --moe
//! 1.0 --prefix moe` (the corpus generator's files, each with a `moe` layer after the MLP block:
//! 2 to 8 experts, top 1 to 7, silu, gelu, gelu-tanh and tanh experts, 4 gated, 7 with
//! `norm_topk`; under tp 2-4 (5 files), dp 4 with ZeRO 2 and 3 (2 files), and expert
//! parallelism over 2 ranks (`moe-003`, `moe-005`)). For each `F.toml` the directory holds
//! `F.torch1.json` and `F.torch2.json`: `scripts/torch_mirror.py F.toml --seeds 5 --threads T`
//! in torch 2.15 on the CPU (`ATEN_CPU_CAPABILITY=avx2`, eager, T = 1 and 2 threads), every
//! check of both computations (the unsharded reference and the simulated sharded one) as
//! FNV-1a digests of the f32 bits. Every tensor is compared with seedsweep's trace at the
//! profile of that thread count (`torch_corpus::measure`), and the measured counts are written
//! to `agreement.tsv`; the test asserts the measured rows equal the recorded ones (regenerate
//! with `SEEDSWEEP_BLESS_CORPUS=1`), so a regression and an improvement both fail it.
//!
//! Measured: 5 of the 10 files bit-exact at 1 and 2 threads (`moe-001`, `-002`, `-004`, `-006`,
//! `-009`). Four more differ only in parameter values of experts that no token chose during a
//! whole step (checked per seed by re-running the mirror's routing), the listed gap of
//! docs/scenario-language.md: torch leaves such an expert's `.grad` `None` and the optimizer
//! skips it, seedsweep steps it with a zero gradient, which differs under Adam (`moe-000`: 2
//! of 460 tensors, `experts.1.w1.weight` after step 2), momentum (`moe-008`: 2 of 280),
//! weight decay (`moe-005`: 2 of 140; `moe-007`: 6 of 1290); no gradient or activation
//! differs in them, and `torch_corpus::diagnose` finds no differing element among the stored
//! bit patterns (the differing tensors are at seeds whose bits the fixture does not keep).
//! `moe-003` (expert parallelism over 2 ranks, 3 tokens each) agrees in the reference computation
//! and differs in the sharded one from the first forward on: 686 of 1120 tensors identical at 1
//! thread, 658 at 2; `diagnose` names `fc1.bias` after step 1 (-2.7946323e-2 against torch's
//! -2.794633e-2), and `head.out` of step 1 already differs, in seed 6400 in the rows of rank 1's
//! tokens only. The cause is on the torch side of the comparison: the mirror computes rank 1's
//! router logits as `F.linear(x2[3:6], router)` on a view into the whole batch, and in torch 2.15
//! that gives other bits than the same rows as their own tensor (`x2[3:6].clone()`, what a real
//! rank holds), equal instead to rows 3..6 of the whole batch's product (why the view's address
//! matters to the sgemm was not established). With the mirror changed to `.clone()` (not committed:
//! the fixtures are the committed mirror's output) every tensor of `moe-003` is identical at 1 and
//! 2 threads. `moe-005` has the same split, and its rank-1 logits also differ between the view and
//! a copy, but its combine weights are exactly 1 (2 experts, top 1, `norm_topk`) and every check,
//! the router's gradient included, agrees apart from the gap above (not examined further).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::torch_corpus::measure;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/moe_corpus/");

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
fn moe_files_against_torch_at_one_and_two_threads() {
    let mut out = String::from(
        "# Files of tests/data/moe_corpus against torch 2.15 (AVX2, eager), both computations\n\
         # file\tthreads\ttensors identical\ttensors\telements identical\telements\n",
    );
    let mut inexact = Vec::new();
    let files = files();
    assert_eq!(files.len(), 10);
    for toml in files {
        let name = toml.file_stem().unwrap().to_string_lossy().to_string();
        for threads in [1, 2] {
            let fixture = Path::new(DIR).join(format!("{name}.torch{threads}.json"));
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
    let table = Path::new(DIR).join("agreement.tsv");
    eprintln!("not bit-exact: {inexact:#?}");
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
