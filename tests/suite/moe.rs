//! The mixture-of-experts layer (`op = "moe"`, `src/ops/moe.rs`) against real torch.
//!
//! The files: `tests/data/moe/*.toml` and the built-ins `configs/maxtext_moe_dense_test.toml` and
//! `configs/maxtext_moe_dense_vs_loop.toml`;
//! for each `F.toml`, `tests/data/moe/` holds `F.torch1.json` (and `F.torch2.json` where
//! present): `scripts/torch_mirror.py F.toml --threads T -o ...` in torch 2.15 on the CPU
//! (`ATEN_CPU_CAPABILITY=avx2`, eager, T threads), every check of both computations as FNV-1a
//! digests of the f32 bits. Every tensor is compared bit for bit with seedsweep's trace at the
//! profile of that thread count (`torch_corpus::measure`), and the measured counts are written
//! to `agreement.tsv`; the test asserts the measured rows equal the recorded ones (regenerate
//! with `SEEDSWEEP_BLESS_CORPUS=1`), so a regression and an improvement both fail it.

use std::path::{Path, PathBuf};

use super::torch_corpus::{assert_agreement, toml_files};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/moe/");

fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = toml_files(DIR);
    v.push(root.join("configs/maxtext_moe_dense_test.toml"));
    v.push(root.join("configs/maxtext_moe_dense_vs_loop.toml"));
    v.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    v
}

#[test]
fn moe_files_against_torch() {
    assert_agreement(DIR, "tests/data/moe", &files());
}

/// The built-in's first-step output (check `output`) of `trace`, widened to f64.
pub(crate) fn output(
    s: &dyn seedsweep::exec::scenario::Scenario,
    t: &seedsweep::exec::trace::Trace,
) -> Vec<f64> {
    use seedsweep::exec::trace::SlotRole;
    let checks = s.checks(0);
    let slot = t
        .slots
        .iter()
        .find(|sl| &*checks[sl.check].name == "output" && sl.role == SlotRole::Value)
        .expect("the output check records");
    t.data(slot).to_vec()
}

/// A scenario file's text, built.
pub(crate) fn built(name: &str, text: &str) -> Box<dyn seedsweep::exec::scenario::Scenario> {
    let sf = seedsweep::scenario::load(name, text).unwrap_or_else(|e| panic!("{e}"));
    Box::new(seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{e}")))
}

pub(crate) fn builtin() -> Box<dyn seedsweep::exec::scenario::Scenario> {
    built(
        "maxtext_moe_dense_test.toml",
        include_str!("../../configs/maxtext_moe_dense_test.toml"),
    )
}

/// The float64 truth of the built-in is the MoE formula, evaluated here independently from
/// the drawn weights and inputs (torch's generator, in the construction order the file
/// documents: router, then each expert's w1, w2, w3; the input after `manual_seed(0)`):
/// sums left to right, `libm`'s exp, top-2 of the probabilities, renormalised, SwiGLU experts,
/// the combine. The two f64 evaluations sum in possibly different orders: each output is a
/// few sums of at most 112 terms of magnitude below 10, so they agree to well within
/// 1e-12 (112 · 2^-53 · 10 ≈ 1.2e-13); a wrong draw order, routing or formula moves outputs
/// by 1e-3 or more. The routing the truth recorded is the independent top-2.
#[test]
fn f64_truth_is_the_moe_formula() {
    use seedsweep::exec::scenario::Workspace;
    use seedsweep::rng::torch::TorchGenerator;
    use seedsweep::scenario::profile::ProfileRegistry;
    let (t, h, f, ne, k) = (128usize, 32usize, 112usize, 8usize, 2usize);
    let s = builtin();
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "test")
        .unwrap();
    let mut ws = Workspace::default();
    for seed in [0u64, 1, 2] {
        s.run(0, seed, &profile, &mut ws);
        let mut g = TorchGenerator::new(seed);
        let mut draw = |n: usize, fan_in: usize| {
            let mut w = vec![0f32; n];
            g.kaiming_uniform_linear(&mut w, fan_in);
            w.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>()
        };
        let router = draw(ne * h, h);
        let experts: Vec<[Vec<f64>; 3]> = (0..ne)
            .map(|_| [draw(f * h, h), draw(h * f, f), draw(f * h, h)])
            .collect();
        let mut x32 = vec![0f32; t * h];
        TorchGenerator::new(0).randn(&mut x32);
        let x: Vec<f64> = x32.iter().map(|&v| f64::from(v)).collect();
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).fold(0.0, |acc, (p, q)| acc + p * q);
        let mut want = vec![0f64; t * h];
        let mut routing = Vec::new();
        for tt in 0..t {
            let xr = &x[tt * h..(tt + 1) * h];
            let logits: Vec<f64> = (0..ne)
                .map(|e| dot(xr, &router[e * h..(e + 1) * h]))
                .collect();
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let ex: Vec<f64> = logits.iter().map(|&l| libm::exp(l - m)).collect();
            let sum: f64 = ex.iter().sum();
            let p: Vec<f64> = ex.iter().map(|&v| v / sum).collect();
            let mut idx: Vec<usize> = (0..ne).collect();
            idx.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap().then(a.cmp(&b)));
            let chosen = &idx[..k];
            let s2: f64 = chosen.iter().map(|&e| p[e]).sum();
            let mut set: Vec<u32> = chosen.iter().map(|&e| e as u32).collect();
            set.sort_unstable();
            routing.extend(set);
            routing.push(u32::MAX);
            let mut order = chosen.to_vec();
            order.sort_unstable();
            for &e in &order {
                let [w1, w2, w3] = &experts[e];
                let hid: Vec<f64> = (0..f)
                    .map(|j| {
                        let a = dot(xr, &w1[j * h..(j + 1) * h]);
                        let u = dot(xr, &w3[j * h..(j + 1) * h]);
                        a / (1.0 + libm::exp(-a)) * u
                    })
                    .collect();
                let wt = p[e] / s2;
                for o in 0..h {
                    want[tt * h + o] += wt * dot(&hid, &w2[o * f..(o + 1) * f]);
                }
            }
        }
        let got = output(s.as_ref(), &ws.traces.f64);
        assert_eq!(got.len(), want.len());
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-12, "seed {seed}: f64 truth off by {worst}");
        assert_eq!(ws.traces.f64.routing, routing, "seed {seed}: routing");
    }
}

/// Routing flips are their own failure mode: under the TPU's one-pass bf16 matmuls the fp32
/// reference routes some tokens to other experts than the float64 truth, and those tokens'
/// outputs differ by a whole expert's contribution (far above any rounding of the same
/// routing), while the outputs of the tokens routed alike stay within rounding. Measured on
/// the built-in's first 40 seeds: every token whose routing flipped is where the largest
/// differences are. Under cpu-fma the same seeds route identically in all three computations.
#[test]
fn routing_flips_move_whole_tokens() {
    use seedsweep::exec::scenario::Workspace;
    use seedsweep::scenario::profile::ProfileRegistry;
    let h = 32;
    let s = builtin();
    let reg = ProfileRegistry::builtin().unwrap();
    let fma = reg.resolve("cpu-fma", "test").unwrap();
    let tpu = reg.resolve("tpu-bf16", "test").unwrap();
    let mut ws = Workspace::default();
    let mut flipped_seeds = 0;
    for seed in 0..40u64 {
        s.run(0, seed, &fma, &mut ws);
        let tr = &ws.traces;
        assert_eq!(tr.sharded.routing_flips(&tr.reference), 0, "seed {seed}");
        assert_eq!(tr.reference.routing_flips(&tr.f64), 0, "seed {seed}");
        s.run(0, seed, &tpu, &mut ws);
        let tr = &ws.traces;
        let flips = tr.reference.routing_flips(&tr.f64);
        if flips == 0 {
            continue;
        }
        flipped_seeds += 1;
        let (r, t) = (
            output(s.as_ref(), &tr.reference),
            output(s.as_ref(), &tr.f64),
        );
        let sets = |v: &[u32]| -> Vec<Vec<u32>> {
            v.split(|&e| e == u32::MAX)
                .filter(|s| !s.is_empty())
                .map(|s| s.to_vec())
                .collect()
        };
        let (rs, ts) = (sets(&tr.reference.routing), sets(&tr.f64.routing));
        let row_diff = |tok: usize| {
            (0..h)
                .map(|o| (r[tok * h + o] - t[tok * h + o]).abs())
                .fold(0.0, f64::max)
        };
        let flipped: Vec<usize> = (0..rs.len()).filter(|&i| rs[i] != ts[i]).collect();
        assert_eq!(flipped.len() as u64, flips, "seed {seed}");
        let alike_worst = (0..rs.len())
            .filter(|i| !flipped.contains(i))
            .map(row_diff)
            .fold(0.0, f64::max);
        let flipped_worst = flipped.iter().map(|&i| row_diff(i)).fold(0.0, f64::max);
        assert!(
            flipped_worst > alike_worst,
            "seed {seed}: flipped tokens differ by {flipped_worst}, others by {alike_worst}"
        );
    }
    assert!(flipped_seeds > 0, "no seed flipped under tpu-bf16");
    eprintln!("tpu-bf16: {flipped_seeds} of 40 seeds route some token differently from f64");
}

/// Expert parallelism on a bf16 wire (`+allreduce-bf16`): a token whose chosen experts all
/// live on its own rank never crosses the wire, so its output is the reference's bit for bit;
/// a token with an expert on another rank has that expert's input and output rounded to bf16
/// on the way, and differs. On the f32 wire every token is the reference's (the per-rank
/// router blocks of 32 rows happen to round as the whole batch here, so the routing agrees).
/// Built-in: 128 tokens over 4 ranks (32 each), 8 experts (rank r holds 2r and 2r + 1).
#[test]
fn bf16_wire_rounds_only_the_rows_that_travel() {
    use seedsweep::exec::scenario::Workspace;
    use seedsweep::scenario::profile::ProfileRegistry;
    let h = 32;
    let s = builtin();
    let reg = ProfileRegistry::builtin().unwrap();
    let mut ws = Workspace::default();
    let (mut travelled_differ, mut travelled) = (0, 0);
    for seed in 0..10u64 {
        for (profile, wire_bf16) in [("cpu-fma", false), ("cpu-fma+allreduce-bf16", true)] {
            s.run(0, seed, &reg.resolve(profile, "test").unwrap(), &mut ws);
            let tr = &ws.traces;
            assert_eq!(tr.sharded.routing_flips(&tr.reference), 0, "seed {seed}");
            let (a, b) = (
                output(s.as_ref(), &tr.sharded),
                output(s.as_ref(), &tr.reference),
            );
            let sets: Vec<&[u32]> = tr
                .reference
                .routing
                .split(|&e| e == u32::MAX)
                .filter(|s| !s.is_empty())
                .collect();
            assert_eq!(sets.len(), 128);
            for (tok, set) in sets.iter().enumerate() {
                let same = (0..h).all(|o| a[tok * h + o].to_bits() == b[tok * h + o].to_bits());
                let crosses = set.iter().any(|&e| e as usize / 2 != tok / 32);
                if !wire_bf16 || !crosses {
                    assert!(same, "{profile} seed {seed} token {tok} ({set:?})");
                } else {
                    travelled += 1;
                    travelled_differ += usize::from(!same);
                }
            }
        }
    }
    // Nearly every travelling token differs (an output that rounds back onto the same f32
    // after the bf16 round trips would be a coincidence); at least one must.
    assert!(travelled_differ > 0 && travelled > 0);
    eprintln!("bf16 wire: {travelled_differ} of {travelled} travelling tokens differ");
}
