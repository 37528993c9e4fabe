//! T1: DeepSpeed's `TestTiedRowParallelOutputHeadTraining`, mirrored exactly
//! (`../shared/docs/mission.md`, "T1").
//!
//! Model: embedding `W` (vocab × hidden) tied to a row-parallel output head, a projection
//! `P`, `b` (hidden × hidden) with tanh. Per step s:
//! 1. inputs (seed-independent): `torch.manual_seed(input_seed + s)`, `ids = randint(vocab,
//!    (batch, seq))`, `ids[0,0] = padding_idx` if any, `labels = randint(vocab, (batch, seq))`;
//! 2. forward: `x = W[ids]`; `h = tanh(x·Pᵀ + b)`; `logits = h·Wᵀ`, the head row-parallel:
//!    rank r computes `h[:, s_r]·W[:, s_r]ᵀ`, the partials are all-reduced (1 rank: the
//!    unsharded matmul);
//! 3. loss: mean cross-entropy over the batch·seq tokens;
//! 4. backward: `dW_head = dlogitsᵀ·h` (per rank shard), `dh = dlogits·W` (per rank, gathered),
//!    `dpre = dh·(1 - h²)`, `dP = dpreᵀ·x`, `db = Σ_t dpre`, `dx = dpre·P`,
//!    `dW_emb` = rows of dx scatter-added by token id (padding row excluded),
//!    tied gradient `dW = dW_head + dW_emb`;
//! 5. SGD (lr) on W, P, b.
//!
//! Checks per step: `logits`, `tied_grad` (zero_stage 0 only), `head_weight` (W after the
//! step), `projection_weight` (P after the step). The embedding_spec variant row-shards the
//! embedding lookup too, which is the same lookup numerically (a gather is a copy).

use std::ops::Range;

use serde::Deserialize;

use crate::backend::{Backend, F32Backend, F64Backend};
use crate::check::StepLabel;
use crate::config::{in_range, resolve_policies, section, CommonConfig, Policy, RngKind};
use crate::error::InputError;
use crate::model::layers::{
    column_sums, cross_entropy, embedding_backward, embedding_lookup, linear, sgd, tanh_backward,
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
use crate::trace::Trace;

/// Scenario kind name.
pub const KIND: &str = "deepspeed-tied-row-parallel";

const CHECK_NAMES: &[&str] = &["logits", "tied_grad", "head_weight", "projection_weight"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelToml {
    vocab: usize,
    batch: usize,
    seq: usize,
    tp: usize,
    #[serde(default = "one")]
    tp_grain: usize,
    steps: usize,
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
    padding_idx: Option<i64>,
    #[serde(default)]
    embedding_spec: bool,
    #[serde(default)]
    zero_stage: u32,
}

/// One parametrization, validated, with its seed-independent inputs.
#[derive(Debug, Clone)]
pub struct Param {
    /// pytest id.
    pub id: String,
    /// Hidden size.
    pub hidden: usize,
    /// Padding index, if any.
    pub padding_idx: Option<i64>,
    /// Row-shard the embedding too.
    pub embedding_spec: bool,
    /// ZeRO stage (0 also checks the full tied gradient).
    pub zero_stage: u32,
    shards: Vec<Range<usize>>,
    checks: Vec<CheckSpec>,
    idx: CheckIdx,
    /// Per step: token ids, then labels.
    inputs: Vec<(Vec<i64>, Vec<i64>)>,
}

#[derive(Debug, Clone, Copy)]
struct CheckIdx {
    logits: usize,
    tied_grad: Option<usize>,
    head_weight: usize,
    projection_weight: usize,
}

/// The T1 scenario.
#[derive(Debug)]
pub struct TiedRowParallel {
    common: CommonConfig,
    vocab: usize,
    tokens: usize,
    batch: usize,
    seq: usize,
    tp: usize,
    steps: usize,
    lr: f32,
    params: Vec<Param>,
    policies: Vec<Policy>,
}

impl TiedRowParallel {
    /// Validates the config.
    pub fn new(common: CommonConfig) -> Result<Self, InputError> {
        let file = common.file.clone();
        let m: ModelToml = section(&file, "model", &common.model)?;
        in_range(&file, "model.vocab", m.vocab, 2, 1 << 20)?;
        in_range(&file, "model.batch", m.batch, 1, 4096)?;
        in_range(&file, "model.seq", m.seq, 1, 4096)?;
        in_range(&file, "model.tp", m.tp, 1, 64)?;
        in_range(&file, "model.tp_grain", m.tp_grain, 1, 1 << 20)?;
        in_range(&file, "model.steps", m.steps, 1, 1000)?;
        crate::config::lr_in_range(&file, "model.lr", m.lr)?;
        if common.params.is_empty() {
            return Err(InputError::config(
                &file,
                "params",
                "at least one [[params]] entry is required",
            ));
        }
        let tokens = m.batch * m.seq;
        let mut params = Vec::new();
        for (i, t) in common.params.iter().enumerate() {
            let key = format!("params[{i}]");
            let p: ParamToml = section(&file, &key, t)?;
            crate::profile::validate_name(&file, &format!("{key}.id"), &p.id)?;
            if params.iter().any(|q: &Param| q.id == p.id) {
                return Err(InputError::config(
                    &file,
                    format!("{key}.id"),
                    format!("duplicate id `{}`", p.id),
                ));
            }
            in_range(&file, &format!("{key}.hidden"), p.hidden, 1, 1 << 16)?;
            if p.zero_stage > 3 {
                return Err(InputError::config(
                    &file,
                    format!("{key}.zero_stage"),
                    format!(
                        "{} is not allowed; allowed: 0, 1, 2, 3 (DeepSpeed ZeRO stages)",
                        p.zero_stage
                    ),
                ));
            }
            if let Some(pad) = p.padding_idx {
                if pad < 0 || pad as usize >= m.vocab {
                    return Err(InputError::config(
                        &file,
                        format!("{key}.padding_idx"),
                        format!(
                            "{pad} is out of range; allowed: 0..{} (leave it out for None)",
                            m.vocab
                        ),
                    ));
                }
            }
            let shards = shard_ranges(p.hidden, m.tp, m.tp_grain);
            let mut logits_spec = CheckSpec::new("logits", vec![m.batch, m.seq, m.vocab]);
            logits_spec.reduction = Some(Reduction {
                k: p.hidden,
                max_shard: shards.iter().map(|r| r.len()).max().unwrap_or(0),
                ranks: m.tp,
            });
            let mut checks = vec![logits_spec];
            let tied_grad = (p.zero_stage == 0).then(|| {
                checks.push(CheckSpec::new("tied_grad", vec![m.vocab, p.hidden]));
                checks.len() - 1
            });
            checks.push(CheckSpec::new("head_weight", vec![m.vocab, p.hidden]));
            let head_weight = checks.len() - 1;
            checks.push(CheckSpec::new(
                "projection_weight",
                vec![p.hidden, p.hidden],
            ));
            let idx = CheckIdx {
                logits: 0,
                tied_grad,
                head_weight,
                projection_weight: checks.len() - 1,
            };
            let inputs = (0..m.steps)
                .map(|s| {
                    draw_inputs(
                        common.rng,
                        m.input_seed + s as u64,
                        m.vocab,
                        tokens,
                        p.padding_idx,
                    )
                })
                .collect();
            params.push(Param {
                id: p.id,
                hidden: p.hidden,
                padding_idx: p.padding_idx,
                embedding_spec: p.embedding_spec,
                zero_stage: p.zero_stage,
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
            tokens,
            batch: m.batch,
            seq: m.seq,
            tp: m.tp,
            steps: m.steps,
            lr: m.lr as f32,
            params,
            policies,
        })
    }
}

/// Step inputs: with the torch generator, `manual_seed(seed)`, `ids = randint(vocab, tokens)`,
/// `ids[0] = padding_idx` if any, `labels = randint(vocab, tokens)`. With ChaCha, the streams
/// `input_ids` and `labels` of `seed`, each draw `next_u32() % vocab`.
fn draw_inputs(
    rng: RngKind,
    seed: u64,
    vocab: usize,
    tokens: usize,
    padding: Option<i64>,
) -> (Vec<i64>, Vec<i64>) {
    let mut ids = vec![0i64; tokens];
    let mut labels = vec![0i64; tokens];
    match rng {
        RngKind::Torch => {
            let mut g = TorchGenerator::new(seed);
            g.randint(vocab as u64, &mut ids);
            if let Some(p) = padding {
                ids[0] = p;
            }
            g.randint(vocab as u64, &mut labels);
        }
        RngKind::ChaCha => {
            let mut s = ChaChaStream::new(seed, "input_ids");
            for v in ids.iter_mut() {
                *v = (s.next_u32() % vocab as u32) as i64;
            }
            if let Some(p) = padding {
                ids[0] = p;
            }
            let mut s = ChaChaStream::new(seed, "labels");
            for v in labels.iter_mut() {
                *v = (s.next_u32() % vocab as u32) as i64;
            }
        }
    }
    (ids, labels)
}

/// Initial fp32 weights of one seed.
#[derive(Debug, Default)]
struct Init {
    w: Vec<f32>,
    p: Vec<f32>,
    b: Vec<f32>,
    discard: Vec<f32>,
}

/// Model state and activations of one computation.
#[derive(Debug, Default)]
struct Bufs<R> {
    cond: Vec<R>,
    w: Vec<R>,
    w_emb: Vec<R>,
    p: Vec<R>,
    b: Vec<R>,
    x: Vec<R>,
    h: Vec<R>,
    logits: Vec<R>,
    dlogits: Vec<R>,
    dw_head: Vec<R>,
    dh: Vec<R>,
    dpre: Vec<R>,
    dp: Vec<R>,
    db: Vec<R>,
    dx: Vec<R>,
    dw: Vec<R>,
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

/// Per-thread buffers of this scenario.
#[derive(Debug, Default)]
pub struct T1Buffers {
    init: Init,
    torch: Option<TorchGenerator>,
    b32: Bufs<f32>,
    b64: Bufs<f64>,
    f64_backend: F64Backend,
}

impl TiedRowParallel {
    /// Draws the initial weights of `seed`, in the test's construction order.
    fn draw_init(&self, p: &Param, seed: u64, gen: &mut Option<TorchGenerator>, init: &mut Init) {
        let (v, h) = (self.vocab, p.hidden);
        sized(&mut init.w, v * h);
        sized(&mut init.p, h * h);
        sized(&mut init.b, h);
        sized(&mut init.discard, v * h);
        match self.common.rng {
            RngKind::Torch => {
                let g = gen.get_or_insert_with(|| TorchGenerator::new(seed));
                g.reseed(seed);
                g.normal_(&mut init.w, 0.0, 1.0);
                g.kaiming_uniform_linear(&mut init.p, h);
                g.linear_bias_uniform(&mut init.b, h);
                // lm_head's own weight: drawn, then replaced by the tied embedding.
                g.kaiming_uniform_linear(&mut init.discard, h);
            }
            RngKind::ChaCha => {
                let bound = 1.0 / (h as f32).sqrt();
                ChaChaStream::new(seed, "embedding.weight").fill_normal(&mut init.w, 0.0, 1.0);
                ChaChaStream::new(seed, "projection.weight").fill_uniform(
                    &mut init.p,
                    -bound,
                    bound,
                );
                ChaChaStream::new(seed, "projection.bias").fill_uniform(&mut init.b, -bound, bound);
            }
        }
        if let Some(pad) = p.padding_idx {
            let row = pad as usize * h;
            init.w[row..row + h].fill(0.0);
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
        let (v, h, t) = (self.vocab, p.hidden, self.tokens);
        let lr = B::R::from_f32(self.lr);
        bf.w.clear();
        bf.w.extend(init.w.iter().map(|&x| B::R::from_f32(x)));
        let drift = mutant == Some(Mutant::TiedWeightsDrift);
        let faults = TpFaults::of(mutant);
        if drift {
            bf.w_emb.clear();
            bf.w_emb.extend_from_slice(&bf.w);
        }
        bf.p.clear();
        bf.p.extend(init.p.iter().map(|&x| B::R::from_f32(x)));
        bf.b.clear();
        bf.b.extend(init.b.iter().map(|&x| B::R::from_f32(x)));
        sized(&mut bf.x, t * h);
        sized(&mut bf.h, t * h);
        sized(&mut bf.logits, t * v);
        sized(&mut bf.dlogits, t * v);
        sized(&mut bf.dw_head, v * h);
        sized(&mut bf.dh, t * h);
        sized(&mut bf.dpre, t * h);
        sized(&mut bf.dp, h * h);
        sized(&mut bf.db, h);
        sized(&mut bf.dx, t * h);
        sized(&mut bf.dw, v * h);
        for (s, (ids, labels)) in p.inputs.iter().enumerate() {
            let step = StepLabel::step(s as u32);
            // Forward.
            let table = if drift { &bf.w_emb } else { &bf.w };
            embedding_lookup(table, h, ids, &mut bf.x);
            linear(be, &bf.x, &bf.p, Some(&bf.b), &mut bf.h, t, h, h);
            tanh_torch(be, &mut bf.h);
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
            trace.record(p.idx.logits, step, &bf.logits);
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
                    step,
                    trace,
                );
            }
            cross_entropy(be, &bf.logits, labels, v, B::R::ONE, &mut bf.dlogits);
            // Backward through the head (per rank), then the projection.
            row_parallel_backward(
                be,
                &bf.h,
                &bf.w,
                &bf.dlogits,
                Some(&mut bf.dw_head),
                Some(&mut bf.dh),
                t,
                h,
                v,
                shards,
                faults,
                &mut bf.rp,
            );
            tanh_backward(&bf.dh, &bf.h, &mut bf.dpre);
            be.matmul_tn(&bf.dpre, &bf.x, &mut bf.dp, h, t, h);
            column_sums(&bf.dpre, h, &mut bf.db);
            be.matmul(&bf.dpre, &bf.p, &mut bf.dx, t, h, h);
            // Embedding contribution, then the tied sum (head contribution + embedding).
            embedding_backward(&bf.dx, h, ids, p.padding_idx, &mut bf.dw);
            match mutant {
                Some(Mutant::DroppedHeadGrad) => {}
                Some(Mutant::DroppedEmbeddingGrad) => bf.dw.copy_from_slice(&bf.dw_head),
                Some(Mutant::TiedWeightsDrift) => {
                    // Two copies, each updated from its own contribution only; the head's
                    // gradient is what `head.weight.grad` shows.
                    sgd(&mut bf.w_emb, &bf.dw, lr);
                    bf.dw.copy_from_slice(&bf.dw_head);
                }
                _ => {
                    for (g, &hd) in bf.dw.iter_mut().zip(&bf.dw_head) {
                        *g = hd + *g;
                    }
                }
            }
            if let Some(c) = p.idx.tied_grad {
                trace.record(c, step, &bf.dw);
            }
            sgd(&mut bf.w, &bf.dw, lr);
            sgd(&mut bf.p, &bf.dp, lr);
            sgd(&mut bf.b, &bf.db, lr);
            trace.record(p.idx.head_weight, step, &bf.w);
            trace.record(p.idx.projection_weight, step, &bf.p);
        }
    }
}

impl Scenario for TiedRowParallel {
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
            Mutant::DroppedEmbeddingGrad,
            Mutant::TiedWeightsDrift,
            Mutant::MissingInputGradGather,
            Mutant::Bf16Allreduce,
        ]
    }
    fn policies(&self) -> &[Policy] {
        &self.policies
    }
    fn summary(&self) -> String {
        format!(
            "vocab {}, batch {}x{}, TP {}, {} steps, lr {}",
            self.vocab, self.batch, self.seq, self.tp, self.steps, self.lr
        )
    }
    fn run(&self, param: usize, seed: u64, profile: &Profile, ws: &mut Workspace) {
        let p = &self.params[param];
        let mut traces = std::mem::take(&mut ws.traces);
        traces.clear();
        let kernels = ws.kernels;
        let mutant = ws.mutant;
        let (bufs, scratch) = ws.buffers::<T1Buffers>();
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
