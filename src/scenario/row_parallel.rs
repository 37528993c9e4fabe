//! T2: DeepSpeed's `TestRowParallelOutputHeadTraining` (untied head), mirrored exactly
//! (`../shared/docs/mission.md`, "T2").
//!
//! Model: `projection = Linear(H, H)`, `head = Linear(H, vocab, bias)`, forward
//! `head(tanh(projection(x)))`, the head row-parallel over H with its bias added once after
//! the all-reduce. Training: `steps` optimizer steps of `accum` micro-steps. Micro-step m of
//! step s: `torch.manual_seed(input_seed + accum·s + m)`, `x = randn(*input_shape, H)`,
//! `labels = randint(vocab, input_shape)`; forward; backward of `loss / accum`
//! (cross-entropy gradient weight `(1/accum) / tokens`); gradients accumulated
//! (first stored, then `acc + g`); after the last micro-step, SGD on every parameter.
//!
//! Checks at every micro-step (step label `s.m`): `logits`, `loss`, `input_grad` (x.grad),
//! `projection_grad` and `head_grad` (accumulated; every rank's shard of the head gradient
//! together form the full matrix, so one full comparison has the same worst element),
//! `bias_grad` (with bias). At the last micro-step, `sgd_update`: the sharded projection
//! weight after the step against `old - lr·grad` written as the test writes it (product and
//! difference each rounded), from the same computation's own values. After each step (label
//! `s`): `projection_weight`, `head_weight`, `bias` (with bias).

use std::ops::Range;

use serde::Deserialize;

use crate::backend::{Backend, F32Backend, F64Backend};
use crate::check::StepLabel;
use crate::config::{in_range, resolve_policies, section, CommonConfig, Policy, RngKind};
use crate::error::InputError;
use crate::model::layers::{
    accumulate, add_row_bias, column_sums, cross_entropy, linear, sgd, sgd_unfused, tanh_backward,
    tanh_torch,
};
use crate::model::tp::{
    row_parallel_backward, row_parallel_forward, shard_ranges, RowParallelBuffers,
};
use crate::mutant::{Mutant, TpFaults};
use crate::profile::Profile;
use crate::real::Real;
use crate::rng::chacha::ChaChaStream;
use crate::rng::torch::TorchGenerator;
use crate::scenario::{CheckSpec, Reduction, Scenario, Workspace};
use crate::trace::{SlotRole, Trace};

/// Scenario kind name.
pub const KIND: &str = "deepspeed-row-parallel";

const CHECK_NAMES: &[&str] = &[
    "logits",
    "loss",
    "input_grad",
    "projection_grad",
    "head_grad",
    "bias_grad",
    "sgd_update",
    "projection_weight",
    "head_weight",
    "bias",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelToml {
    vocab: usize,
    tp: usize,
    #[serde(default = "one")]
    tp_grain: usize,
    steps: usize,
    accum: usize,
    lr: f64,
    input_seed: u64,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamToml {
    id: String,
    hidden: usize,
    input_shape: Vec<usize>,
    #[serde(default = "lm_head")]
    head: String,
    bias: bool,
}

/// The head attribute names the DeepSpeed test parametrizes.
const HEADS: &[&str] = &["lm_head", "embed_out"];

fn lm_head() -> String {
    "lm_head".into()
}

#[derive(Debug, Clone, Copy)]
struct CheckIdx {
    logits: usize,
    loss: usize,
    input_grad: usize,
    projection_grad: usize,
    head_grad: usize,
    bias_grad: Option<usize>,
    sgd_update: usize,
    projection_weight: usize,
    head_weight: usize,
    bias: Option<usize>,
}

/// Inputs of one micro-step.
#[derive(Debug, Clone)]
struct MicroInputs {
    x: Vec<f32>,
    labels: Vec<i64>,
}

/// One parametrization, validated, with its seed-independent inputs.
#[derive(Debug, Clone)]
pub struct Param {
    /// pytest id.
    pub id: String,
    /// Hidden size.
    pub hidden: usize,
    /// Leading input dimensions.
    pub input_shape: Vec<usize>,
    /// Attribute name of the head (numerically irrelevant).
    pub head: String,
    /// Whether the head has a bias.
    pub bias: bool,
    tokens: usize,
    shards: Vec<Range<usize>>,
    checks: Vec<CheckSpec>,
    idx: CheckIdx,
    inputs: Vec<MicroInputs>,
}

/// The T2 scenario.
#[derive(Debug)]
pub struct RowParallel {
    common: CommonConfig,
    vocab: usize,
    tp: usize,
    steps: usize,
    accum: usize,
    lr: f32,
    params: Vec<Param>,
    policies: Vec<Policy>,
}

impl RowParallel {
    /// Validates the config.
    pub fn new(common: CommonConfig) -> Result<Self, InputError> {
        let file = common.file.clone();
        let m: ModelToml = section(&file, "model", &common.model)?;
        in_range(&file, "model.vocab", m.vocab, 2, 1 << 20)?;
        in_range(&file, "model.tp", m.tp, 1, 64)?;
        in_range(&file, "model.tp_grain", m.tp_grain, 1, 1 << 20)?;
        in_range(&file, "model.steps", m.steps, 1, 1000)?;
        in_range(&file, "model.accum", m.accum, 1, 64)?;
        crate::config::lr_in_range(&file, "model.lr", m.lr)?;
        if common.params.is_empty() {
            return Err(InputError::config(
                &file,
                "params",
                "at least one [[params]] entry is required",
            ));
        }
        let mut params: Vec<Param> = Vec::new();
        for (i, t) in common.params.iter().enumerate() {
            let key = format!("params[{i}]");
            let p: ParamToml = section(&file, &key, t)?;
            crate::profile::validate_name(&file, &format!("{key}.id"), &p.id)?;
            if params.iter().any(|q| q.id == p.id) {
                return Err(InputError::config(
                    &file,
                    format!("{key}.id"),
                    format!("duplicate id `{}`", p.id),
                ));
            }
            in_range(&file, &format!("{key}.hidden"), p.hidden, 1, 1 << 16)?;
            if !HEADS.contains(&p.head.as_str()) {
                return Err(InputError::config(
                    &file,
                    format!("{key}.head"),
                    format!("`{}` is not allowed; allowed: {}", p.head, HEADS.join(", ")),
                ));
            }
            if p.input_shape.is_empty() || p.input_shape.contains(&0) || p.input_shape.len() > 4 {
                return Err(InputError::config(
                    &file,
                    format!("{key}.input_shape"),
                    "must list 1 to 4 leading dimensions, each >= 1 (e.g. [4] or [2, 3])",
                ));
            }
            let tokens: usize = p.input_shape.iter().product();
            in_range(&file, &format!("{key}.input_shape"), tokens, 1, 1 << 16)?;
            let h = p.hidden;
            let with = |last: usize| -> Vec<usize> {
                let mut s = p.input_shape.clone();
                s.push(last);
                s
            };
            let mut checks = Vec::new();
            let mut add = |c: CheckSpec| {
                checks.push(c);
                checks.len() - 1
            };
            let shards = shard_ranges(h, m.tp, m.tp_grain);
            let mut logits_spec = CheckSpec::new("logits", with(m.vocab));
            logits_spec.reduction = Some(Reduction {
                k: h,
                max_shard: shards.iter().map(|r| r.len()).max().unwrap_or(0),
                ranks: m.tp,
            });
            let logits = add(logits_spec);
            let loss = add(CheckSpec::new("loss", vec![]));
            let input_grad = add(CheckSpec::new("input_grad", with(h)));
            let projection_grad = add(CheckSpec::new("projection_grad", vec![h, h]));
            let head_grad = add(CheckSpec::new("head_grad", vec![m.vocab, h]));
            let bias_grad = p
                .bias
                .then(|| add(CheckSpec::new("bias_grad", vec![m.vocab])));
            let sgd_update = add(CheckSpec {
                name: "sgd_update",
                shape: vec![h, h],
                self_consistent: true,
                reduction: None,
            });
            let projection_weight = add(CheckSpec::new("projection_weight", vec![h, h]));
            let head_weight = add(CheckSpec::new("head_weight", vec![m.vocab, h]));
            let bias = p.bias.then(|| add(CheckSpec::new("bias", vec![m.vocab])));
            let idx = CheckIdx {
                logits,
                loss,
                input_grad,
                projection_grad,
                head_grad,
                bias_grad,
                sgd_update,
                projection_weight,
                head_weight,
                bias,
            };
            let mut inputs = Vec::new();
            for s in 0..m.steps {
                for mi in 0..m.accum {
                    let seed = m.input_seed + (m.accum * s + mi) as u64;
                    inputs.push(draw_inputs(common.rng, seed, m.vocab, tokens, h));
                }
            }
            params.push(Param {
                id: p.id,
                hidden: h,
                input_shape: p.input_shape,
                head: p.head,
                bias: p.bias,
                tokens,
                shards,
                checks,
                idx,
                inputs,
            });
        }
        let policies = resolve_policies(&common, CHECK_NAMES)?;
        Ok(Self {
            common,
            vocab: m.vocab,
            tp: m.tp,
            steps: m.steps,
            accum: m.accum,
            lr: m.lr as f32,
            params,
            policies,
        })
    }
}

/// Micro-step inputs: torch: `manual_seed(seed)`, `x = randn(tokens·hidden)`,
/// `labels = randint(vocab, tokens)`. ChaCha: streams `x` (standard normals) and `labels`.
fn draw_inputs(rng: RngKind, seed: u64, vocab: usize, tokens: usize, hidden: usize) -> MicroInputs {
    let mut x = vec![0f32; tokens * hidden];
    let mut labels = vec![0i64; tokens];
    match rng {
        RngKind::Torch => {
            let mut g = TorchGenerator::new(seed);
            g.randn(&mut x);
            g.randint(vocab as u64, &mut labels);
        }
        RngKind::ChaCha => {
            ChaChaStream::new(seed, "x").fill_normal(&mut x, 0.0, 1.0);
            let mut s = ChaChaStream::new(seed, "labels");
            for l in labels.iter_mut() {
                *l = (s.next_u32() % vocab as u32) as i64;
            }
        }
    }
    MicroInputs { x, labels }
}

#[derive(Debug, Default)]
struct Init {
    p: Vec<f32>,
    pb: Vec<f32>,
    w: Vec<f32>,
    hb: Vec<f32>,
}

#[derive(Debug, Default)]
struct Bufs<R> {
    cond: Vec<R>,
    p: Vec<R>,
    pb: Vec<R>,
    w: Vec<R>,
    hb: Vec<R>,
    x: Vec<R>,
    h: Vec<R>,
    logits: Vec<R>,
    dlogits: Vec<R>,
    dh: Vec<R>,
    dpre: Vec<R>,
    dx: Vec<R>,
    g_p: Vec<R>,
    g_pb: Vec<R>,
    g_w: Vec<R>,
    g_hb: Vec<R>,
    acc_p: Vec<R>,
    acc_pb: Vec<R>,
    acc_w: Vec<R>,
    acc_hb: Vec<R>,
    old_p: Vec<R>,
    expect: Vec<R>,
    expect64: Vec<f64>,
    rp: RowParallelBuffers<R>,
}

/// Gives `v` length `n`. Contents are unspecified when the length was already `n`: every
/// buffer is fully written before it is read (the thread-count determinism test would expose
/// a stale read, since seeds land on threads differently).
fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, R::ZERO);
    }
}

fn load<R: Real>(v: &mut Vec<R>, src: &[f32]) {
    v.clear();
    v.extend(src.iter().map(|&x| R::from_f32(x)));
}

/// Per-thread buffers of this scenario.
#[derive(Debug, Default)]
pub struct T2Buffers {
    init: Init,
    torch: Option<TorchGenerator>,
    b32: Bufs<f32>,
    b64: Bufs<f64>,
    f64_backend: F64Backend,
}

impl RowParallel {
    /// Initial weights in the test's construction order: projection weight (kaiming), bias,
    /// head weight (kaiming), head bias if any.
    fn draw_init(&self, p: &Param, seed: u64, gen: &mut Option<TorchGenerator>, init: &mut Init) {
        let (v, h) = (self.vocab, p.hidden);
        sized(&mut init.p, h * h);
        sized(&mut init.pb, h);
        sized(&mut init.w, v * h);
        sized(&mut init.hb, if p.bias { v } else { 0 });
        match self.common.rng {
            RngKind::Torch => {
                let g = gen.get_or_insert_with(|| TorchGenerator::new(seed));
                g.reseed(seed);
                g.kaiming_uniform_linear(&mut init.p, h);
                g.linear_bias_uniform(&mut init.pb, h);
                g.kaiming_uniform_linear(&mut init.w, h);
                if p.bias {
                    g.linear_bias_uniform(&mut init.hb, h);
                }
            }
            RngKind::ChaCha => {
                let bound = 1.0 / (h as f32).sqrt();
                ChaChaStream::new(seed, "projection.weight").fill_uniform(
                    &mut init.p,
                    -bound,
                    bound,
                );
                ChaChaStream::new(seed, "projection.bias").fill_uniform(
                    &mut init.pb,
                    -bound,
                    bound,
                );
                ChaChaStream::new(seed, "head.weight").fill_uniform(&mut init.w, -bound, bound);
                ChaChaStream::new(seed, "head.bias").fill_uniform(&mut init.hb, -bound, bound);
            }
        }
    }

    /// One computation: `shards` has one range for the unsharded model; `mutant` injects a
    /// bug (sharded computation only).
    #[allow(clippy::too_many_arguments)]
    fn compute<B: Backend>(
        &self,
        be: &mut B,
        p: &Param,
        init: &Init,
        shards: &[Range<usize>],
        mutant: Option<Mutant>,
        condition: bool,
        bf: &mut Bufs<B::R>,
        trace: &mut Trace,
    ) {
        let (v, h, t) = (self.vocab, p.hidden, p.tokens);
        let lr = B::R::from_f32(self.lr);
        let scale = B::R::ONE / B::R::from_f64(self.accum as f64);
        let faults = TpFaults::of(mutant);
        load(&mut bf.p, &init.p);
        load(&mut bf.pb, &init.pb);
        load(&mut bf.w, &init.w);
        load(&mut bf.hb, &init.hb);
        for (buf, n) in [
            (&mut bf.x, t * h),
            (&mut bf.h, t * h),
            (&mut bf.dh, t * h),
            (&mut bf.dpre, t * h),
            (&mut bf.dx, t * h),
            (&mut bf.logits, t * v),
            (&mut bf.dlogits, t * v),
            (&mut bf.g_p, h * h),
            (&mut bf.acc_p, h * h),
            (&mut bf.old_p, h * h),
            (&mut bf.expect, h * h),
            (&mut bf.g_pb, h),
            (&mut bf.acc_pb, h),
            (&mut bf.g_w, v * h),
            (&mut bf.acc_w, v * h),
        ] {
            sized(buf, n);
        }
        let nb = if p.bias { v } else { 0 };
        sized(&mut bf.g_hb, nb);
        sized(&mut bf.acc_hb, nb);
        bf.expect64.clear();
        bf.expect64.resize(h * h, 0.0);
        for s in 0..self.steps {
            for mi in 0..self.accum {
                let micro = &p.inputs[s * self.accum + mi];
                let label = StepLabel::micro(s as u32, mi as u32);
                let first = mi == 0;
                load(&mut bf.x, &micro.x);
                linear(be, &bf.x, &bf.p, Some(&bf.pb), &mut bf.h, t, h, h);
                tanh_torch(be, &mut bf.h);
                if shards.len() == 1 && p.bias {
                    // Unsharded with a bias: torch's head is F.linear(h, W, b), one addmm.
                    linear(be, &bf.h, &bf.w, Some(&bf.hb), &mut bf.logits, t, h, v);
                } else {
                    row_parallel_forward(
                        be,
                        &bf.h,
                        &bf.w,
                        &mut bf.logits,
                        t,
                        h,
                        v,
                        shards,
                        faults,
                        &mut bf.rp,
                    );
                    if p.bias {
                        add_row_bias(&mut bf.logits, &bf.hb, v);
                    }
                }
                trace.record(p.idx.logits, label, &bf.logits);
                if condition {
                    crate::model::condition::record_condition(
                        be,
                        &bf.h,
                        &bf.w,
                        t,
                        h,
                        v,
                        &mut bf.cond,
                        p.idx.logits,
                        label,
                        trace,
                    );
                }
                let loss = cross_entropy(be, &bf.logits, &micro.labels, v, scale, &mut bf.dlogits);
                trace.record(p.idx.loss, label, &[loss]);
                row_parallel_backward(
                    be,
                    &bf.h,
                    &bf.w,
                    &bf.dlogits,
                    Some(&mut bf.g_w),
                    Some(&mut bf.dh),
                    t,
                    h,
                    v,
                    shards,
                    faults,
                    &mut bf.rp,
                );
                if mutant == Some(Mutant::DroppedHeadGrad) {
                    bf.g_w.fill(B::R::ZERO);
                }
                if p.bias {
                    column_sums(&bf.dlogits, v, &mut bf.g_hb);
                }
                tanh_backward(&bf.dh, &bf.h, &mut bf.dpre);
                be.matmul_tn(&bf.dpre, &bf.x, &mut bf.g_p, h, t, h);
                column_sums(&bf.dpre, h, &mut bf.g_pb);
                be.matmul(&bf.dpre, &bf.p, &mut bf.dx, t, h, h);
                accumulate(&mut bf.acc_p, &bf.g_p, first);
                accumulate(&mut bf.acc_pb, &bf.g_pb, first);
                accumulate(&mut bf.acc_w, &bf.g_w, first);
                accumulate(&mut bf.acc_hb, &bf.g_hb, first);
                trace.record(p.idx.input_grad, label, &bf.dx);
                trace.record(p.idx.projection_grad, label, &bf.acc_p);
                trace.record(p.idx.head_grad, label, &bf.acc_w);
                if let Some(c) = p.idx.bias_grad {
                    trace.record(c, label, &bf.acc_hb);
                }
                if mi + 1 == self.accum {
                    bf.old_p.copy_from_slice(&bf.p);
                    sgd(&mut bf.p, &bf.acc_p, lr);
                    sgd(&mut bf.pb, &bf.acc_pb, lr);
                    sgd(&mut bf.w, &bf.acc_w, lr);
                    sgd(&mut bf.hb, &bf.acc_hb, lr);
                    // The test's expectation `old - lr * grad`, in this computation's
                    // arithmetic and exactly-rounded f64 on the same values.
                    sgd_unfused(&bf.old_p, &bf.acc_p, lr, &mut bf.expect);
                    let lr64 = lr.to_f64();
                    for ((e, &o), &g) in bf.expect64.iter_mut().zip(&bf.old_p).zip(&bf.acc_p) {
                        *e = o.to_f64() - lr64 * g.to_f64();
                    }
                    trace.record(p.idx.sgd_update, label, &bf.p);
                    trace.record_role(
                        p.idx.sgd_update,
                        label,
                        SlotRole::SelfExpectedF32,
                        &bf.expect,
                    );
                    trace.record_role(
                        p.idx.sgd_update,
                        label,
                        SlotRole::SelfExpectedF64,
                        &bf.expect64,
                    );
                    let step = StepLabel::step(s as u32);
                    trace.record(p.idx.projection_weight, step, &bf.p);
                    trace.record(p.idx.head_weight, step, &bf.w);
                    if let Some(c) = p.idx.bias {
                        trace.record(c, step, &bf.hb);
                    }
                }
            }
        }
    }
}

impl Scenario for RowParallel {
    fn common(&self) -> &CommonConfig {
        &self.common
    }
    fn param_ids(&self) -> Vec<&str> {
        self.params.iter().map(|p| p.id.as_str()).collect()
    }
    fn checks(&self, param: usize) -> &[CheckSpec] {
        &self.params[param].checks
    }
    fn all_check_names(&self) -> &'static [&'static str] {
        CHECK_NAMES
    }
    fn mutants(&self) -> &'static [Mutant] {
        &[
            Mutant::WrongShardOffset,
            Mutant::MissingAllreduce,
            Mutant::DroppedHeadGrad,
            Mutant::MissingInputGradGather,
            Mutant::Bf16Allreduce,
        ]
    }
    fn policies(&self) -> &[Policy] {
        &self.policies
    }
    fn summary(&self) -> String {
        format!(
            "vocab {}, TP {}, {} steps x {} micro-steps, lr {}",
            self.vocab, self.tp, self.steps, self.accum, self.lr
        )
    }
    fn run(&self, param: usize, seed: u64, profile: &Profile, ws: &mut Workspace) {
        let p = &self.params[param];
        let mut traces = std::mem::take(&mut ws.traces);
        traces.clear();
        let kernels = ws.kernels;
        let mutant = ws.mutant;
        let (bufs, scratch) = ws.buffers::<T2Buffers>();
        self.draw_init(p, seed, &mut bufs.torch, &mut bufs.init);
        let whole = 0..p.hidden;
        let single = std::slice::from_ref(&whole);
        self.compute(
            &mut bufs.f64_backend,
            p,
            &bufs.init,
            single,
            None,
            true,
            &mut bufs.b64,
            &mut traces.f64,
        );
        let mut be = F32Backend::new(profile, scratch).with_kernels(kernels);
        self.compute(
            &mut be,
            p,
            &bufs.init,
            single,
            None,
            false,
            &mut bufs.b32,
            &mut traces.reference,
        );
        self.compute(
            &mut be,
            p,
            &bufs.init,
            &p.shards,
            mutant,
            false,
            &mut bufs.b32,
            &mut traces.sharded,
        );
        ws.traces = traces;
    }
}
