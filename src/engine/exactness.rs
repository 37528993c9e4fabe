//! What a run does not mirror bit for bit: the parts of a scenario that a profile claiming a
//! framework's arithmetic does not cover exactly, said at the start of `check` and `sweep`
//! (on stderr), and refused under `--strict-exactness`.
//!
//! A profile claims torch's CPU arithmetic when it computes its matmuls by torch's own CPU
//! orders: the generative MKL models at one and two threads (`order_model = "mkl-sgemm-1t"`,
//! `cpu-fma+mkl-threads-1`; `"mkl-sgemm-2t"`, `cpu-fma+mkl-threads-2`) or orders revealed
//! from torch on the CPU (`cpu-fma+mkl-threads-4`/`-8`, `configs/revealed/`). Under such a
//! profile:
//! - **Matmul shapes.** The order model covers every shape. Under revealed orders, every f32
//!   matmul whose role and shape they do not cover runs by the profile's own kernel model,
//!   which is not claimed exact. The shapes are found by running the first seed of the
//!   parametrization once ([`matmul_gaps`]): exactly the calls a sweep makes.
//! - **Ops.** The kernels that the differential harness (`scripts/torch_mirror.py`,
//!   `tests/suite/torch_corpus.rs`) and the op fixtures found not bit-exact with torch 2.15
//!   ([`op_gaps`]; docs/conformance.md is the table with the measured rates).
//!
//! Other profiles (the GPU and TPU models, `pairwise`, `splitk-4`, plain `cpu-fma`) are
//! numerics models, not mirrors of one framework build, and claim nothing here.

use crate::exec::scenario::{Scenario, Workspace};
use crate::kernels::mkl_sqrt::SqrtKernel;
use crate::scenario::ir::{Activation, LossKind, Op, Optimizer, ResolvedGraph};
use crate::scenario::profile::Profile;

/// One part of a run that is not covered exactly, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// What (`gelu (erf) forward and backward`, `matmul forward 4x8 over 8`).
    pub what: String,
    /// Why it is not exact.
    pub why: String,
}

/// Whether `profile` claims torch's CPU arithmetic bit for bit (see the module doc).
pub fn claims_torch(profile: &Profile) -> bool {
    profile.xla.is_none()
        && (profile.order_model.is_some()
            || profile
                .orders
                .as_ref()
                .is_some_and(|o| o.meta.device == "cpu"))
}

/// The thread count a torch-claiming profile models: its order model's, else its revealed
/// orders', else 1.
fn threads(profile: &Profile) -> usize {
    crate::kernels::mkl_sgemm::torch_threads(
        profile.order_model,
        profile.orders.as_ref().map(|o| o.meta.threads),
    )
}

/// The ops of `g` whose kernels are not bit-exact with torch 2.15 under `profile` (empty
/// when the profile claims nothing).
pub fn op_gaps(g: &ResolvedGraph, profile: &Profile) -> Vec<Gap> {
    if !claims_torch(profile) {
        return Vec::new();
    }
    let mut gaps = Vec::new();
    let mut add = |what: String, why: &str| {
        if !gaps.iter().any(|x: &Gap| x.what == what) {
            gaps.push(Gap {
                what,
                why: why.to_string(),
            });
        }
    };
    // The rates below are docs/conformance.md's (torch 2.15, AVX2 kernels, 1 and 2 threads).
    let threads = threads(profile);
    for layer in &g.layers {
        match &layer.op {
            Op::Activation { kind, x, .. }
                if threads > 1
                    && matches!(kind, Activation::GeluTanh | Activation::Silu)
                    && g.rows(*x) * g.width(*x) >= 16_384 =>
            {
                add(
                    format!(
                        "`{}`: {kind:?} on {} elements at {threads} threads",
                        layer.name,
                        g.rows(*x) * g.width(*x)
                    ),
                    "ATen splits a tensor this large into per-thread ranges, each with its own \
                     scalar tail; not modelled",
                )
            }
            Op::Sdpa {
                q, k, heads, cp, ..
            } if *cp > 1 => {
                let s = &g.tensors[q.0].shape;
                let (c, d) = (s[1] / cp, s[2] / heads);
                add(
                    format!(
                        "`{}`: ring attention's block log-sum-exp and merge",
                        layer.name
                    ),
                    "the block's torch.logsumexp is MKL's vmsExp/vmsLn with ATen's sum (modelled \
                     by SLEEF's exp and log and a sum in order) and logsigmoid's log1p is \
                     SLEEF's log1pf_u10 (modelled correctly rounded): against torch's own ring \
                     with the block op of scripts/ring_attention_torch.py, 97.1 % of out, 94.9 % \
                     of dq, 78.0 % of dk and 89.6 % of dv elements identical \
                     (tests/suite/ring_attention.rs); the real test's CUDA kernels are not \
                     modelled",
                );
                if c * c * d >= 400 {
                    add(
                        format!(
                            "`{}`: ring attention's block bmm at {c} x {c} x head_dim {d}",
                            layer.name
                        ),
                        "a block of chunk * chunk * head_dim >= 400 goes to MKL's batched sgemm \
                         in torch; the ring's blocks are modelled in the naive kernel's order \
                         only",
                    );
                }
            }
            Op::Sdpa { q, k, heads, .. } => {
                let k_bias = g
                    .layers
                    .iter()
                    .any(|l| matches!(l.op, Op::Linear { out, bias: Some(_), .. } if out == *k));
                if g.parallel.tp > 1 && k_bias {
                    add(
                        format!("`{}`: the key projection's bias gradient", layer.name),
                        "it is zero in exact arithmetic (softmax is shift invariant), so its \
                         value is rounding noise of the key gradient's column sums; the sharded \
                         computation's noise differs from torch's (measured on \
                         configs/examples/attention_tp2.toml: 110 of 140 tensors identical \
                         under AdamW, which scales the noise to the learning rate; 128 of 128 \
                         under SGD)",
                    );
                }
                let s = &g.tensors[q.0].shape;
                let sh = crate::ops::attention::AttnShape {
                    batch: s[0],
                    seq: s[1],
                    heads: *heads,
                    head_dim: s[2] / heads,
                };
                let order = crate::ops::attention::BmmOrder::of(profile.order_model);
                if !crate::ops::attention::naive_bmm(sh)
                    && !crate::ops::attention::mkl_bmm(sh, order)
                {
                    add(
                        format!(
                            "`{}`: attention's bmm at seq {} x seq {} x head_dim {}",
                            layer.name, sh.seq, sh.seq, sh.head_dim
                        ),
                        "seq * seq * head_dim >= 400: ATen's bmm goes to MKL's batched sgemm, \
                         whose orders are modelled only under the order models mkl-sgemm-1t and \
                         mkl-sgemm-2t and not for seq or head_dim 1 (modelled: the naive kernel \
                         below 400)",
                    );
                }
            }
            Op::Moe {
                x,
                act,
                ffn,
                experts,
                combine,
                reference_combine,
                ..
            } => {
                let einsum = crate::scenario::ir::MoeCombine::Einsum;
                if (*combine == einsum || *reference_combine == einsum)
                    && g.width(*x) * experts >= 400
                {
                    add(
                        format!(
                            "`{}`: the einsum combine above ATen's naive bmm size",
                            layer.name
                        ),
                        "torch's per-token bmm over the experts (hidden x experts >= 400) runs \
                         MKL's batched order, which seedsweep does not model there (the profile's \
                         matmul computes it)",
                    );
                }
                add(
                    format!("`{}`: top-k among equal router probabilities", layer.name),
                    "torch's CPU topk does not promise an order among equal values; seedsweep \
                     takes the lower expert first (src/ops/moe.rs). Only a token with two \
                     equal probabilities at the k-th place can differ",
                );
                let other_reader = g
                    .layers
                    .iter()
                    .any(|l| !std::ptr::eq(l, layer) && l.op.reads(*x));
                if other_reader {
                    add(
                        format!("`{}`: its input's gradient with another reader", layer.name),
                        "autograd adds the experts' and the router's input gradients one by one \
                         into the input's buffer, interleaved with the other reader's; seedsweep \
                         hands the moe layer's sum over as one contribution",
                    );
                }
                if !matches!(
                    g.train.optimizer,
                    crate::scenario::ir::Optimizer::Sgd { weight_decay, momentum, .. }
                        if weight_decay == 0.0 && momentum == 0.0
                ) {
                    add(
                        format!("`{}`: an expert no token chose", layer.name),
                        "seedsweep gives it a zero gradient; torch leaves its .grad None and the \
                         optimizer skips it, which differs from a zero step under momentum, \
                         Adam or weight decay",
                    );
                }
                if threads > 1
                    && matches!(act, Activation::GeluTanh | Activation::Silu)
                    && g.rows(*x) * ffn >= 16_384
                {
                    add(
                        format!(
                            "`{}`: the experts' {act:?} at {threads} threads",
                            layer.name
                        ),
                        "an expert's activation on 16,384 or more elements: ATen splits it into \
                         per-thread ranges, each with its own scalar tail; not modelled",
                    );
                }
            }
            // LayerNorm and RMSNorm have no gap: bit-exact at 1, 2, 4 and 8 threads
            // (src/ops/norm.rs, tests/suite/norm_fixture.rs); nor has the embedding's backward
            // (exact in the conformance probes).
            _ => {}
        }
    }
    if matches!(g.loss.kind, LossKind::Sum) && !g.train.micro_steps.is_power_of_two() {
        add(
            format!("sum loss over {} micro-steps", g.train.micro_steps),
            "its gradient is torch's expanded constant 1/micro-steps (a stride-0 tensor), whose \
             rows ATen sums in an order not modelled: a bias gradient fed by it may differ in \
             the last bit (measured on corpus file fuzz-136)",
        );
    }
    if let LossKind::VocabParallelCrossEntropy { .. } = g.loss.kind {
        add(
            "vocab-parallel cross-entropy".into(),
            "torch.exp and torch.log are MKL's vmsExp/vmsLn, modelled by correctly rounded ones",
        );
    }
    // Adam's `exp_avg_sq.sqrt()` is MKL's vsSqrt: exact under `sqrt = "mkl"`
    // (`sqrt_mkl_f32`, measured on all 2^32 inputs), a correctly rounded model otherwise.
    if let Optimizer::Adam { decoupled, .. } = g.train.optimizer {
        if profile.sqrt != SqrtKernel::Mkl {
            add(
                if decoupled { "AdamW" } else { "Adam" }.into(),
                "torch's exp_avg_sq.sqrt() is MKL's vsSqrt, not correctly rounded; the \
                 profile's sqrt is the correctly rounded one (add `+sqrt-mkl`)",
            );
        }
    }
    gaps
}

/// The matmuls of parametrization `param` at its first seed that `profile`'s revealed orders
/// do not cover (empty when the profile claims nothing, and under an order model, which
/// covers every shape): the seed is run once, and the shapes that missed the orders during
/// that run are returned.
pub fn matmul_gaps(s: &dyn Scenario, param: usize, profile: &Profile) -> Vec<Gap> {
    if !claims_torch(profile) || profile.order_model.is_some() {
        return Vec::new();
    }
    let seed = s.common().first_seed;
    let shapes = crate::ops::backend::unrevealed_shapes_of(|| {
        let mut ws = Workspace::default();
        s.run(param, seed, profile, &mut ws);
    });
    if shapes.is_empty() {
        return Vec::new();
    }
    let listed: Vec<String> = shapes
        .iter()
        .map(|(role, rows, red, cols)| format!("{} {rows}x{cols} over {red}", role.name()))
        .collect();
    vec![Gap {
        what: format!(
            "{} matmul shape(s) without a revealed order ({})",
            shapes.len(),
            listed.join(", ")
        ),
        why: "the profile's FMA-chain model computes them (scripts/reveal_order.py reveals them)"
            .into(),
    }]
}

/// Every gap of (scenario `s`, parametrization `param`) under `profile`.
pub fn gaps(s: &dyn Scenario, param: usize, profile: &Profile) -> Vec<Gap> {
    let mut v = s
        .graph(param)
        .map(|g| op_gaps(g, profile))
        .unwrap_or_default();
    v.extend(matmul_gaps(s, param, profile));
    v
}

/// The parametrizations of one warning: all of them when they are (`all 9 parametrizations`),
/// else their ids.
fn param_list(params: &[&str], of: usize) -> String {
    if params.len() == of && of > 1 {
        format!("all {of} parametrizations")
    } else {
        params.join(", ")
    }
}

/// The stderr lines for one set of gaps shared by every (parametrization, profile) pair of
/// `params` × `profiles` of one scenario (`of`: how many parametrizations it has): a header
/// naming them, then one line per gap.
pub fn describe(
    scenario: &str,
    params: &[&str],
    of: usize,
    profiles: &[&str],
    gaps: &[Gap],
) -> String {
    let mut out = format!(
        "{scenario} [{}] under {} is not covered exactly by torch's measured kernels ({} \
         part(s)):",
        param_list(params, of),
        profiles.join(", "),
        gaps.len()
    );
    for g in gaps {
        out.push_str(&format!("\n  {}: {}", g.what, g.why));
    }
    out
}

/// One warning: a scenario, the parametrizations and profiles it holds for, and its gaps.
struct Warning<'a> {
    scenario: usize,
    params: Vec<&'a str>,
    profiles: Vec<&'a str>,
    gaps: Vec<Gap>,
}

/// Merges warnings that say the same: first the parametrizations of one (scenario, profile)
/// with equal gaps, then the profiles of equal (scenario, parametrizations, gaps); every
/// warning then stands for exactly the pairs params × profiles it names. Order of first
/// appearance is kept.
fn merge(found: Vec<Warning<'_>>) -> Vec<Warning<'_>> {
    let same_gaps = |a: &[Gap], b: &[Gap]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.what == y.what && x.why == y.why)
    };
    let mut by_profile: Vec<Warning> = Vec::new();
    for w in found {
        match by_profile.iter_mut().find(|m| {
            m.scenario == w.scenario && m.profiles == w.profiles && same_gaps(&m.gaps, &w.gaps)
        }) {
            Some(m) => m.params.extend(w.params),
            None => by_profile.push(w),
        }
    }
    let mut out: Vec<Warning> = Vec::new();
    for w in by_profile {
        match out.iter_mut().find(|m| {
            m.scenario == w.scenario && m.params == w.params && same_gaps(&m.gaps, &w.gaps)
        }) {
            Some(m) => m.profiles.extend(w.profiles),
            None => out.push(w),
        }
    }
    out
}

/// Says on stderr what is not covered exactly, once for every set of (parametrization,
/// profile) pairs of a scenario that share the same gaps (the clean groups of `groups`); with
/// `strict`, returns an error naming `flag` and every gap instead.
pub fn announce(
    catalog: &crate::engine::catalog::Catalog,
    groups: &[crate::engine::catalog::Group],
    strict: bool,
    flag: &str,
) -> anyhow::Result<()> {
    let mut seen: Vec<(usize, usize, &str)> = Vec::new();
    let mut found = Vec::new();
    for g in groups.iter().filter(|g| g.mutant.is_none()) {
        let key = (g.scenario, g.param, g.profile.name.as_str());
        if seen.contains(&key) || !claims_torch(&g.profile) {
            continue;
        }
        seen.push(key);
        let s = catalog.scenarios[g.scenario].as_ref();
        let gaps = gaps(s, g.param, &g.profile);
        if !gaps.is_empty() {
            found.push(Warning {
                scenario: g.scenario,
                params: vec![s.param_ids()[g.param]],
                profiles: vec![g.profile.name.as_str()],
                gaps,
            });
        }
    }
    let lines: Vec<String> = merge(found)
        .iter()
        .map(|w| {
            let s = catalog.scenarios[w.scenario].as_ref();
            describe(
                &s.common().name,
                &w.params,
                s.param_ids().len(),
                &w.profiles,
                &w.gaps,
            )
        })
        .collect();
    if lines.is_empty() {
        return Ok(());
    }
    if strict {
        anyhow::bail!(
            "{flag}: refusing a run that is not bit-exact with torch (without {flag} these are \
             warnings; docs/conformance.md has the measured rates):\n{}",
            lines.join("\n")
        );
    }
    for l in lines {
        eprintln!("warning: {l}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::profile::ProfileRegistry;

    /// Warnings that say the same are merged into rectangles of parametrizations × profiles,
    /// and never claim a pair that was not found: (a, X), (b, X), (a, Y) with one gap are
    /// "a, b under X" and "a under Y", not "a, b under X, Y"; other gaps stay apart.
    #[test]
    fn equal_warnings_merge_into_exact_rectangles() {
        let gap = |w: &str| {
            vec![Gap {
                what: w.into(),
                why: "because".into(),
            }]
        };
        let w = |params: &[&'static str], profile: &'static str, g: &str| Warning {
            scenario: 0,
            params: params.to_vec(),
            profiles: vec![profile],
            gaps: gap(g),
        };
        let merged = merge(vec![
            w(&["a"], "X", "topk"),
            w(&["b"], "X", "topk"),
            w(&["a"], "Y", "topk"),
            w(&["a"], "Z", "exp"),
            w(&["b"], "Y", "topk"),
        ]);
        let shown: Vec<(Vec<&str>, Vec<&str>, &str)> = merged
            .iter()
            .map(|m| {
                (
                    m.params.clone(),
                    m.profiles.clone(),
                    m.gaps[0].what.as_str(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                (vec!["a", "b"], vec!["X", "Y"], "topk"),
                (vec!["a"], vec!["Z"], "exp"),
            ]
        );
        let merged = merge(vec![
            w(&["a"], "X", "topk"),
            w(&["b"], "X", "topk"),
            w(&["a"], "Y", "topk"),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(
            (merged[0].params.clone(), merged[0].profiles.clone()),
            (vec!["a", "b"], vec!["X"])
        );
        assert_eq!(
            (merged[1].params.clone(), merged[1].profiles.clone()),
            (vec!["a"], vec!["Y"])
        );
        let text = describe("ring", &["a", "b"], 2, &["X", "Y"], &gap("attn"));
        assert!(
            text.starts_with("ring [all 2 parametrizations] under X, Y is not covered"),
            "{text}"
        );
        assert!(describe("ring", &["a"], 2, &["X"], &gap("attn")).starts_with("ring [a] under X "));
    }

    /// The order models claim torch at their thread counts, like the revealed files at theirs;
    /// the numerics models claim nothing.
    #[test]
    fn claims_and_thread_counts_of_the_builtin_profiles() {
        let r = ProfileRegistry::builtin().unwrap();
        for (name, claims, t) in [
            ("cpu-fma+mkl-threads-1", true, 1),
            ("cpu-fma+mkl-threads-2", true, 2),
            ("cpu-fma+mkl-threads-4", true, 4),
            ("cpu-fma+mkl-threads-8", true, 8),
            ("cpu-fma", false, 1),
        ] {
            let p = r.resolve(name, "--profile").unwrap();
            assert_eq!((claims_torch(&p), threads(&p)), (claims, t), "{name}");
        }
    }

    /// A one-layer file trained with `optimizer`.
    fn graph(optimizer: &str) -> ResolvedGraph {
        let text = format!(
            r#"
name = "gap"
dims = {{ rows = 4, width = 3 }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["rows", "width"] }},
  {{ name = "t", draw = "randn", shape = ["rows", "width"] }},
]
layers = [{{ name = "fc", op = "linear", input = "x", out = "width" }}]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 2, optimizer = "{optimizer}", lr = 0.01 }}
checks = [{{ name = "w", tensor = "fc.weight" }}]
"#
        );
        let mut f = crate::scenario::load("gap.toml", &text).unwrap();
        f.lowered.remove(0)
    }

    fn whats(g: &ResolvedGraph, profile: &str) -> Vec<String> {
        let p = ProfileRegistry::builtin()
            .unwrap()
            .resolve(profile, "--profile")
            .unwrap();
        op_gaps(g, &p).into_iter().map(|x| x.what).collect()
    }

    #[test]
    fn adam_is_a_gap_only_with_the_correctly_rounded_sqrt() {
        for (opt, name) in [("adam", "Adam"), ("adamw", "AdamW")] {
            let g = graph(opt);
            assert!(whats(&g, "cpu-fma+mkl-threads-1").is_empty(), "{opt}");
            assert_eq!(whats(&g, "cpu-fma+mkl-threads-1+sqrt-cr"), [name]);
            // A profile that claims nothing has no gaps.
            assert!(whats(&g, "cpu-fma+sqrt-cr").is_empty(), "{opt}");
        }
        assert!(whats(&graph("sgd"), "cpu-fma+mkl-threads-1+sqrt-cr").is_empty());
    }

    fn attention(seq: usize, tp: usize, k_bias: bool) -> ResolvedGraph {
        let text = format!(
            r#"
name = "attn"
dims = {{ batch = 2, seq = {seq}, hidden = 16 }}
parallel = {{ tp = {tp} }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["batch", "seq", "hidden"] }},
  {{ name = "t", draw = "randn", shape = ["batch", "seq", "hidden"] }},
]
layers = [
  {{ name = "q", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "k", op = "linear", input = "x", out = "hidden", parallel = "column", bias = {k_bias} }},
  {{ name = "v", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "a", op = "sdpa", inputs = ["q", "k", "v"], heads = 4 }},
  {{ name = "o", op = "linear", out = "hidden", parallel = "row" }},
]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.01 }}
checks = [{{ name = "a", tensor = "a.out" }}]
"#
        );
        let mut f = crate::scenario::load("attn.toml", &text).unwrap();
        f.lowered.remove(0)
    }

    #[test]
    fn attention_gaps_are_its_large_bmm_and_a_sharded_key_bias() {
        let p = "cpu-fma+mkl-threads-1";
        // seq² · head_dim = 6·6·4 = 144 < 400: the naive bmm, modelled.
        assert!(whats(&attention(6, 2, false), p).is_empty());
        assert!(whats(&attention(6, 1, true), p).is_empty());
        assert_eq!(whats(&attention(6, 2, true), p).len(), 1);
        // 10·10·4 = 400: MKL's batched sgemm, modelled at one and two threads
        // (tests/suite/sdpa_bmm_fixture.rs), not at four (revealed orders, no order model).
        assert!(whats(&attention(10, 1, false), p).is_empty());
        assert!(whats(&attention(10, 1, false), "cpu-fma+mkl-threads-2").is_empty());
        let w = whats(&attention(10, 1, false), "cpu-fma+mkl-threads-4");
        assert!(
            w.len() == 1 && w[0].contains("seq 10 x seq 10 x head_dim 4"),
            "{w:?}"
        );
    }
    fn moe(optimizer: &str, residual: bool, tokens: usize) -> ResolvedGraph {
        let extra = if residual {
            r#", { name = "r", op = "add", inputs = ["m", "x"] }"#
        } else {
            ""
        };
        let text = format!(
            r#"
name = "moe"
dims = {{ rows = {tokens}, hidden = 8 }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["rows", "hidden"] }},
  {{ name = "t", draw = "randn", shape = ["rows", "hidden"] }},
]
layers = [{{ name = "m", op = "moe", input = "x", experts = 4, top_k = 2, ffn = 2048 }}{extra}]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "{optimizer}", lr = 0.01 }}
checks = [{{ name = "o", tensor = "m.out" }}]
"#
        );
        let mut f = crate::scenario::load("moe.toml", &text).unwrap();
        f.lowered.remove(0)
    }

    #[test]
    fn moe_gaps_are_ties_unused_experts_other_readers_and_large_activations() {
        let p = "cpu-fma+mkl-threads-1";
        let has = |w: &[String], s: &str| w.iter().any(|x| x.contains(s));
        // Always listed: top-k among equal probabilities.
        let w = whats(&moe("sgd", false, 4), p);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(has(&w, "top-k among equal router probabilities"), "{w:?}");
        // An expert no token chose, under a stateful optimizer.
        assert!(has(
            &whats(&moe("adam", false, 4), p),
            "an expert no token chose"
        ));
        // Its input read by another layer too.
        assert!(has(&whats(&moe("sgd", true, 4), p), "with another reader"));
        // An expert's silu of 8 tokens x 2048 = 16,384 elements at two threads.
        let w = whats(&moe("sgd", false, 8), "cpu-fma+mkl-threads-2");
        assert!(has(&w, "the experts' Silu at 2 threads"), "{w:?}");
        assert!(!has(&whats(&moe("sgd", false, 8), p), "Silu"));
    }

    /// The einsum combine is a gap above ATen's naive bmm size (`hidden · experts >= 400`),
    /// whichever computation combines so, and exact below it.
    #[test]
    fn einsum_combine_is_a_gap_above_the_naive_bmm_size() {
        let graph = |hidden: usize, keys: &str| {
            let text = format!(
                r#"
name = "moe"
dims = {{ rows = 6, hidden = {hidden} }}
inputs = [{{ name = "x", draw = "randn", shape = ["rows", "hidden"] }}]
layers = [{{ name = "m", op = "moe", input = "x", experts = 8, top_k = 2, ffn = 4, {keys} }}]
loss = {{ op = "sum" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.01 }}
checks = [{{ name = "o", tensor = "m.out" }}]
"#
            );
            crate::scenario::load("moe.toml", &text)
                .unwrap()
                .lowered
                .remove(0)
        };
        let gap = |g: &ResolvedGraph| {
            whats(g, "cpu-fma+mkl-threads-1")
                .iter()
                .any(|w| w.contains("einsum combine above ATen's naive bmm size"))
        };
        // 49 x 8 = 392 < 400: torch's naive kernel, modelled
        assert!(!gap(&graph(49, r#"combine = "einsum""#)));
        // 50 x 8 = 400: MKL's batched order
        assert!(gap(&graph(50, r#"combine = "einsum""#)));
        assert!(gap(&graph(50, r#"reference_combine = "einsum""#)));
        assert!(!gap(&graph(50, r#"combine = "elementwise""#)));
    }
}
