//! [`GraphScenario`]: a scenario given as one resolved graph per parametrization, run by the
//! executor ([`crate::exec::graph`]).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Mutex;

use crate::check::comparison::Comparison;
use crate::exec::graph::{phase, Bufs, Phase, Plan};
use crate::exec::init::{draw_inputs, draw_params, draw_teacher, InputValue};
use crate::exec::outer_loop::{self, OuterBufs, OuterInputs, OuterPlan};
use crate::exec::scenario::{CheckSpec, Parts, Scenario, Workspace};
use crate::ops::activations::TorchParts;
use crate::ops::backend::{F32Backend, F64Backend};
use crate::rng::torch::TorchGenerator;
use crate::scenario::config::{resolve_policies, CommonConfig, Policy};
use crate::scenario::ir::{
    Activation, CheckTensor, EmbeddingParallel, LinearParallel, LossKind, NormParallel, Op,
    Optimizer, OuterData, ResolvedGraph, WeightLayout,
};
use crate::scenario::mutant::Mutant;
use crate::scenario::profile::Profile;
use crate::scenario::shard::dp_rows;
use crate::sys::error::InputError;

/// A scenario described by resolved graphs.
#[derive(Debug)]
pub struct GraphScenario {
    common: CommonConfig,
    plans: Vec<Plan>,
    /// Per parametrization: whether it runs step by step ([`plan_streams`]), decided once.
    streams: Vec<bool>,
    policies: Vec<Policy>,
    check_names: &'static [&'static str],
    mutants: &'static [Mutant],
    summary: String,
    compare: Comparison,
    seed_dependent: bool,
    modifiers: &'static [&'static str],
}

/// Per-thread buffers of every graph scenario.
#[derive(Debug, Default)]
pub struct GraphBuffers {
    init: Vec<Vec<f32>>,
    torch: Option<TorchGenerator>,
    b32: Bufs<f32>,
    /// The reference layout's computation (`compare = "layout-vs-layout"`), in buffers of its
    /// own so that neither layout resizes the other's data-parallel buffers every seed.
    b32r: Bufs<f32>,
    /// The sharded computation's buffers when it runs in lockstep with the reference
    /// ([`Scenario::run_stepwise`]); empty otherwise.
    b32s: Bufs<f32>,
    b64: Bufs<f64>,
    f64_backend: F64Backend,
    /// (plan address, seed) of the parameters in `init`.
    drawn_key: Option<(usize, u64)>,
    o32: OuterBufs<f32>,
    o64: OuterBufs<f64>,
    /// An outer loop's data drawn for this seed, and the draw's scratch.
    drawn: OuterInputs,
    x: Vec<f32>,
    y: Vec<f32>,
    name: String,
    teacher: Vec<f32>,
}

impl GraphBuffers {
    /// The initial parameters of `plan` at `seed` in `init`. They depend on (graph, seed)
    /// only: drawn again unless this workspace's last draw was for this very plan and seed.
    fn draw(&mut self, plan: &Plan, seed: u64) {
        let key = (plan as *const Plan as usize, seed);
        if self.drawn_key != Some(key) {
            draw_params(&plan.graph, seed, &mut self.torch, &mut self.init);
            self.drawn_key = Some(key);
        }
    }
}

#[cfg(test)]
impl GraphBuffers {
    /// Every replica's parameters after the last outer-loop run: the sharded f32
    /// computation's (it runs after the reference in the same buffers) and the f64 ground
    /// truth's, flat and replica-major.
    pub(crate) fn final_inner(&self) -> (&[f32], &[f64]) {
        (self.o32.final_inner(), self.o64.final_inner())
    }
}

/// A `'static` copy of `s`, shared by every caller asking for the same text (check names
/// must be `'static` for [`CheckSpec`]); each distinct name is stored once per process.
pub fn intern(s: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = guard.get_or_insert_with(HashSet::new);
    if let Some(&n) = set.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(n);
    n
}

fn leak_slice<T>(v: Vec<T>) -> &'static [T] {
    Box::leak(v.into_boxed_slice())
}

/// Every check name of `graphs`, merged so that each graph's own order is kept: a name a
/// later graph adds goes right after the name preceding it in that graph.
pub fn merged_check_names(graphs: &[ResolvedGraph]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for g in graphs {
        let mut pos = 0;
        for c in &g.checks {
            match out.iter().position(|n| *n == c.name) {
                Some(i) => pos = i + 1,
                None => {
                    out.insert(pos, c.name.clone());
                    pos += 1;
                }
            }
        }
    }
    out
}

impl GraphScenario {
    /// Validates the graphs (what the executor supports, shapes it relies on) and prepares
    /// them: inputs drawn, shards computed. `check_names` are the names policies may refer to
    /// (in `list` order); `summary` is the one line `list` prints.
    pub fn new(
        common: CommonConfig,
        graphs: Vec<ResolvedGraph>,
        check_names: Vec<String>,
        summary: String,
        compare: Comparison,
    ) -> Result<Self, InputError> {
        if graphs.is_empty() {
            return Err(InputError::config(
                &common.file,
                "params",
                "at least one parametrization is required",
            ));
        }
        let mut plans = Vec::with_capacity(graphs.len());
        let mut mutants: Vec<Mutant> = Vec::new();
        for g in graphs {
            for m in g.mutants() {
                if !mutants.contains(&m) {
                    mutants.push(m);
                }
            }
            plans.push(plan(g));
        }
        mutants.sort_by_key(|m| Mutant::ALL.iter().position(|a| a == m));
        let names: Vec<&'static str> = check_names.iter().map(|n| intern(n)).collect();
        let policies = resolve_policies(&common, &names)?;
        Ok(Self {
            common,
            streams: plans.iter().map(plan_streams).collect(),
            plans,
            policies,
            check_names: leak_slice(names),
            mutants: leak_slice(mutants),
            summary,
            compare,
            seed_dependent: true,
            modifiers: &[],
        })
    }

    /// The scenario of one graph with an outer loop ([`crate::scenario::ir::OuterLoop`]), run by
    /// the executor's outer-loop wrapper ([`crate::exec::outer_loop`]); `compare` is the
    /// comparison the test asserts.
    pub fn outer(
        common: CommonConfig,
        graph: ResolvedGraph,
        compare: Comparison,
        summary: String,
    ) -> Result<Self, InputError> {
        let file = common.file.clone();
        let Some(o) = graph.train.outer.as_ref() else {
            return Err(InputError::config(&file, "train.outer", "required"));
        };
        let np: usize = graph
            .params
            .iter()
            .map(|p| p.shape.iter().product::<usize>())
            .sum();
        let (checks, idx, names) = outer_loop::checks_of(&file, o, np)?;
        let seed_dependent = !matches!(o.data, OuterData::Fixed { .. });
        let mutants = graph.mutants();
        let fixed = outer_loop::fixed_inputs(&graph);
        let mut p = plan(graph);
        p.checks = checks;
        p.outer = Some(OuterPlan { idx, np, fixed });
        let names: Vec<&'static str> = names.iter().map(|n| intern(n)).collect();
        let policies = resolve_policies(&common, &names)?;
        Ok(Self {
            common,
            plans: vec![p],
            streams: vec![false],
            policies,
            check_names: leak_slice(names),
            mutants: leak_slice(mutants),
            summary,
            compare,
            seed_dependent,
            modifiers: outer_loop::EXECUTION_MODIFIERS,
        })
    }

    /// Prepares the reference layouts (`compare = "layout-vs-layout"`): `references[i]` is
    /// parametrization i's graph under `[parallel.reference]`, whose sharded computation
    /// then runs as the reference computation. An empty list leaves every reference
    /// unsharded.
    pub fn with_references(
        mut self,
        references: Vec<Option<ResolvedGraph>>,
    ) -> Result<Self, InputError> {
        if references.is_empty() {
            return Ok(self);
        }
        if references.len() != self.plans.len() {
            return Err(InputError::config(
                &self.common.file,
                "parallel.reference",
                "one reference layout per parametrization is required",
            ));
        }
        for (i, r) in references.into_iter().enumerate() {
            if let Some(g) = r {
                // A mutant is injected into the sharded computation only: the mutants stay
                // the sharded layout's.
                self.plans[i].reference = Some(Box::new(plan(g)));
                self.streams[i] = false;
            }
        }
        Ok(self)
    }

    /// The outer loop's check indices (an outer-loop scenario).
    #[cfg(test)]
    pub(crate) fn outer_idx(&self) -> outer_loop::OuterIdx {
        self.plans[0].outer.as_ref().expect("an outer loop").idx
    }

    /// The outer loop (an outer-loop scenario).
    #[cfg(test)]
    pub(crate) fn outer_loop(&self) -> &crate::scenario::ir::OuterLoop {
        self.plans[0]
            .graph
            .train
            .outer
            .as_ref()
            .expect("an outer loop")
    }

    /// The first graph.
    #[cfg(test)]
    pub(crate) fn graph0(&self) -> &ResolvedGraph {
        &self.plans[0].graph
    }

    /// The prepared graphs, one per parametrization.
    pub fn graphs(&self) -> impl Iterator<Item = &ResolvedGraph> {
        self.plans.iter().map(|p| &p.graph)
    }
}

/// The graph one data-parallel rank runs: every input and activation cut to the rank's
/// `rows` of the global batch (the leading dimension).
fn rank_graph(g: &ResolvedGraph, rows: usize) -> ResolvedGraph {
    let mut r = g.clone();
    for d in &mut r.inputs.draws {
        d.shape[0] = rows;
        // A fixed input's rank block is handed over with the drawn ones (`rank_inputs`).
        d.values = None;
    }
    for t in &mut r.tensors {
        t.shape[0] = rows;
    }
    r.parallel.dp = 1;
    r.parallel.replicate = 1;
    r
}

/// Rank `rows`' block of every micro-step's inputs (the leading dimension of each draw).
fn rank_inputs(
    g: &ResolvedGraph,
    inputs: &[Vec<InputValue>],
    rows: &std::ops::Range<usize>,
) -> Vec<Vec<InputValue>> {
    inputs
        .iter()
        .map(|step| {
            step.iter()
                .zip(&g.inputs.draws)
                .map(|(v, d)| {
                    let inner: usize = d.shape[1..].iter().product();
                    let span = rows.start * inner..rows.end * inner;
                    InputValue {
                        f: v.f
                            .get(span.clone())
                            .map(<[f32]>::to_vec)
                            .unwrap_or_default(),
                        i: v.i.get(span).map(<[i64]>::to_vec).unwrap_or_default(),
                    }
                })
                .collect()
        })
        .collect()
}

/// A single shard covering `r`.
fn one(r: std::ops::Range<usize>) -> Vec<std::ops::Range<usize>> {
    std::iter::once(r).collect()
}

/// Prepares a validated graph: its inputs drawn, and with `dp > 1` one plan per rank on
/// the rank's block of them.
fn plan(g: ResolvedGraph) -> Plan {
    // An outer loop's inputs are its data, per seed or written in the file, and its
    // data-parallel ranks are its replicas (the outer-loop wrapper runs them).
    if g.train.outer.is_some() {
        return plan_with(g, Vec::new());
    }
    let inputs = draw_inputs(&g);
    let ranks = match dp_rows(&g) {
        Some((_, blocks)) if g.parallel.dp > 1 => blocks
            .iter()
            .map(|b| plan_with(rank_graph(&g, b.len()), rank_inputs(&g, &inputs, b)))
            .collect(),
        _ => Vec::new(),
    };
    let mut p = plan_with(g, inputs);
    p.ranks = ranks;
    for r in &mut p.ranks {
        // A rank's gradients are reduced across the ranks before any step.
        r.fused_sgd.fill(false);
    }
    p
}

/// Per parameter: whether its optimizer step may be taken panel by panel as its gradient is
/// computed, without the gradient ever being whole ([`Plan::fused_sgd`]). That needs a step
/// that is elementwise and reads nothing but the parameter and its gradient (plain SGD: no
/// momentum, no weight decay), one micro-step per step (no accumulation), no outer loop, and a
/// parameter that only its own torch-layout linear layer uses (not tied, not a table, not a
/// bias) and whose gradient no check reads (no `.grad` or SGD-update check). The data-parallel
/// ranks' plans never fuse ([`plan`]): their gradients are reduced first.
fn fused_sgd(g: &ResolvedGraph, storage: &[usize], tied_table: Option<usize>) -> Vec<bool> {
    let np = g.params.len();
    let plain_sgd = matches!(
        g.train.optimizer,
        Optimizer::Sgd { momentum, weight_decay, .. } if momentum == 0.0 && weight_decay == 0.0
    );
    if !plain_sgd || g.train.micro_steps != 1 || g.train.outer.is_some() {
        return vec![false; np];
    }
    let mut uses = vec![0usize; np];
    let mut torch_weight = vec![false; np];
    for l in &g.layers {
        match l.op {
            Op::Embedding { table, .. } => uses[storage[table.0]] += 1,
            Op::Linear {
                weight,
                bias,
                layout,
                ..
            } => {
                uses[storage[weight.0]] += 1;
                torch_weight[storage[weight.0]] = layout == WeightLayout::OutIn;
                if let Some(b) = bias {
                    uses[storage[b.0]] += 1;
                }
            }
            Op::Norm { weight, bias, .. } => {
                for p in weight.iter().chain(bias.iter()) {
                    uses[storage[p.0]] += 1;
                }
            }
            Op::Activation { .. }
            | Op::Binary { .. }
            | Op::Softmax { .. }
            | Op::Sdpa { .. }
            | Op::Rope { .. }
            | Op::Moe { .. } => {}
        }
    }
    let mut grad_read = vec![false; np];
    for c in &g.checks {
        if let CheckTensor::ParamGrad(p) | CheckTensor::SgdUpdate(p) = c.tensor {
            grad_read[storage[p.0]] = true;
        }
    }
    (0..np)
        .map(|i| {
            storage[i] == i
                && storage.iter().filter(|&&s| s == i).count() == 1
                && uses[i] == 1
                && torch_weight[i]
                && !grad_read[i]
                && tied_table != Some(i)
        })
        .collect()
}

/// Per layer ([`Plan::act_parts`]): for an activation, the torch tensors the sharded
/// computation's ranks hold its input in, as the scenario's resolution splits it
/// (`crate::scenario::resolve`'s `Split`): a column-parallel linear's output (not gathered) is
/// one tensor per rank's out-features, a sequence-parallel norm's one per rank's token rows,
/// an activation or residual add keeps its input's; everything else is whole on every rank.
fn act_parts(g: &ResolvedGraph) -> Vec<TorchParts> {
    let several = |r: Option<Vec<Range<usize>>>| match r {
        Some(r) if r.len() > 1 => Some(r),
        _ => None,
    };
    let mut held = vec![TorchParts::Whole; g.tensors.len()];
    let mut parts = Vec::with_capacity(g.layers.len());
    for l in &g.layers {
        let out = l.op.output();
        let (here, out_parts) = match l.op {
            Op::Linear {
                parallel: LinearParallel::Column,
                ..
            } => {
                let n = g.width(out);
                let r = several(g.parallel.shard_rule.ranges(n, g.parallel.tp));
                (
                    TorchParts::Whole,
                    r.map_or(TorchParts::Whole, TorchParts::Columns),
                )
            }
            Op::Norm {
                x,
                parallel: NormParallel::Sequence,
                ..
            } => {
                let seq = g.tensors[x.0].shape.first().copied().unwrap_or(1);
                let per = g.rows(x) / seq.max(1);
                let r = several(g.parallel.shard_rule.ranges(seq, g.parallel.tp))
                    .map(|r| r.into_iter().map(|r| r.start * per..r.end * per).collect());
                (
                    TorchParts::Whole,
                    r.map_or(TorchParts::Whole, TorchParts::Rows),
                )
            }
            Op::Activation { x, .. } => (held[x.0].clone(), held[x.0].clone()),
            Op::Binary { a, .. } => (TorchParts::Whole, held[a.0].clone()),
            // Head-sharded: each rank's output holds its heads' columns, as q's; the ranks'
            // head groups decide the layout of torch's batched products.
            Op::Sdpa { q, .. } => (held[q.0].clone(), held[q.0].clone()),
            // Elementwise per head: each rank rotates the heads it holds.
            Op::Rope { x, .. } => (held[x.0].clone(), held[x.0].clone()),
            _ => (TorchParts::Whole, TorchParts::Whole),
        };
        held[out.0] = out_parts;
        parts.push(here);
    }
    parts
}

/// Prepares a validated graph with its inputs.
fn plan_with(g: ResolvedGraph, inputs: Vec<Vec<InputValue>>) -> Plan {
    let storage: Vec<usize> = (0..g.params.len())
        .map(|i| g.params[i].tie.map_or(i, |t| t.0))
        .collect();
    let numel: Vec<usize> = g.tensors.iter().map(|t| t.shape.iter().product()).collect();
    // A tensor needs a gradient if a parameter or a checked leaf lies upstream of it.
    let mut needs_grad = vec![false; g.tensors.len()];
    for c in &g.checks {
        if let CheckTensor::Grad(t) = c.tensor {
            needs_grad[t.0] = true;
        }
    }
    let mut sharded = Vec::new();
    let mut whole = Vec::new();
    for l in &g.layers {
        let out = l.op.output();
        match l.op {
            Op::Embedding {
                table,
                parallel: EmbeddingParallel::Vocab,
                ..
            } => {
                needs_grad[out.0] = true;
                let rows = g.params[table.0].shape[0];
                whole.push(one(0..rows));
                sharded.push(
                    g.parallel
                        .shard_rule
                        .ranges(rows, g.parallel.tp)
                        .unwrap_or_else(|| one(0..rows)),
                );
                continue;
            }
            Op::Embedding { .. } => needs_grad[out.0] = true,
            Op::Moe { x, ep, .. } => {
                // The expert-parallel ranks' token blocks (one block unsharded).
                needs_grad[out.0] = true;
                let rows = g.rows(x);
                whole.push(one(0..rows));
                sharded.push(if ep > 1 {
                    g.parallel
                        .shard_rule
                        .ranges(rows, ep)
                        .unwrap_or_else(|| one(0..rows))
                } else {
                    one(0..rows)
                });
                continue;
            }
            Op::Linear { x, parallel, .. } => {
                needs_grad[out.0] = true;
                let k = g.width(x);
                whole.push(one(0..k));
                let n = g.width(out);
                sharded.push(match parallel {
                    LinearParallel::Row => g
                        .parallel
                        .shard_rule
                        .ranges(k, g.parallel.tp)
                        .unwrap_or_else(|| one(0..k)),
                    LinearParallel::Column | LinearParallel::ColumnGather => g
                        .parallel
                        .shard_rule
                        .ranges(n, g.parallel.tp)
                        .unwrap_or_else(|| one(0..n)),
                    LinearParallel::None => one(0..k),
                });
                continue;
            }
            Op::Norm {
                x,
                weight,
                parallel: NormParallel::Sequence,
                ..
            } => {
                needs_grad[out.0] = needs_grad[out.0] || needs_grad[x.0] || weight.is_some();
                // Token rows per rank: the first dimension split by the shard rule, each
                // index covering `rows / seq` rows.
                let seq = g.tensors[x.0].shape.first().copied().unwrap_or(1);
                let per = g.rows(x) / seq.max(1);
                let ranges = g
                    .parallel
                    .shard_rule
                    .ranges(seq, g.parallel.tp)
                    .unwrap_or_else(|| one(0..seq));
                whole.push(one(0..g.rows(x)));
                sharded.push(
                    ranges
                        .into_iter()
                        .map(|r| r.start * per..r.end * per)
                        .collect(),
                );
                continue;
            }
            Op::Norm {
                weight: Some(_), ..
            } => needs_grad[out.0] = true,
            Op::Activation { x, .. }
            | Op::Norm { x, .. }
            | Op::Softmax { x, .. }
            | Op::Rope { x, .. } => needs_grad[out.0] = needs_grad[out.0] || needs_grad[x.0],
            Op::Binary { a, b, .. } => {
                needs_grad[out.0] = needs_grad[out.0] || needs_grad[a.0] || needs_grad[b.0]
            }
            Op::Sdpa { q, k, v, .. } => {
                needs_grad[out.0] =
                    needs_grad[out.0] || needs_grad[q.0] || needs_grad[k.0] || needs_grad[v.0]
            }
        }
        whole.push(one(0..g.width(out)));
        sharded.push(one(0..g.width(out)));
    }
    needs_grad[g.loss.input.0] = true;
    let mut by_phase: [Vec<usize>; 3] = Default::default();
    let mut keeps_old = Vec::new();
    for (i, c) in g.checks.iter().enumerate() {
        let ph = match phase(c.tensor) {
            Phase::Forward => 0,
            Phase::Backward => 1,
            Phase::Step => 2,
        };
        by_phase[ph].push(i);
        if let CheckTensor::SgdUpdate(p) = c.tensor {
            let s = storage[p.0];
            if !keeps_old.contains(&s) {
                keeps_old.push(s);
            }
        }
    }
    let tied_table = g.tied_embedding_head().map(|(t, _)| storage[t.0]);
    let fused_sgd = fused_sgd(&g, &storage, tied_table);
    let checks = g
        .checks
        .iter()
        .map(|c| CheckSpec {
            name: intern(&c.name),
            shape: c.shape.clone(),
            self_consistent: matches!(c.tensor, CheckTensor::SgdUpdate(_)),
            reduction: c.reduction,
        })
        .collect();
    let in_place = g
        .layers
        .iter()
        .enumerate()
        .map(|(li, l)| match l.op {
            Op::Activation {
                kind: Activation::Tanh | Activation::Relu,
                x,
                ..
            } => {
                let other_reader = g
                    .layers
                    .iter()
                    .enumerate()
                    .any(|(lj, o)| lj != li && o.op.reads(x));
                let checked = g
                    .checks
                    .iter()
                    .any(|c| c.tensor == CheckTensor::Activation(x));
                let drawn = g.inputs.draws.iter().any(|d| d.tensor == Some(x));
                !other_reader && !checked && !drawn && g.loss.input != x
            }
            _ => false,
        })
        .collect();
    let act_parts = act_parts(&g);
    let lr = g.train.optimizer.lr();
    let loss_shards = match g.loss.kind {
        LossKind::VocabParallelCrossEntropy { .. } => g
            .parallel
            .shard_rule
            .ranges(g.width(g.loss.input), g.parallel.tp)
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    Plan {
        graph: g,
        checks,
        inputs,
        sharded,
        whole,
        storage,
        numel,
        needs_grad,
        by_phase,
        keeps_old,
        tied_table,
        fused_sgd,
        lr,
        in_place,
        act_parts,
        loss_shards,
        ranks: Vec::new(),
        reference: None,
        outer: None,
    }
}

impl Scenario for GraphScenario {
    fn common(&self) -> &CommonConfig {
        &self.common
    }
    fn graph(&self, param: usize) -> Option<&ResolvedGraph> {
        self.plans.get(param).map(|p| &p.graph)
    }
    fn param_ids(&self) -> Vec<&str> {
        self.plans.iter().map(|p| p.graph.id.as_str()).collect()
    }
    fn checks(&self, param: usize) -> &[CheckSpec] {
        &self.plans[param].checks
    }
    fn all_check_names(&self) -> &'static [&'static str] {
        self.check_names
    }
    fn policies(&self) -> &[Policy] {
        &self.policies
    }
    fn mutants(&self) -> &'static [Mutant] {
        self.mutants
    }
    fn summary(&self) -> String {
        self.summary.clone()
    }
    fn asserted_comparison(&self) -> Comparison {
        self.compare
    }
    fn seed_dependent(&self) -> bool {
        self.seed_dependent
    }
    fn execution_modifiers(&self) -> &'static [&'static str] {
        self.modifiers
    }
    fn run(&self, param: usize, seed: u64, profile: &Profile, ws: &mut Workspace) {
        self.run_parts(param, seed, profile, Parts::ALL, ws)
    }
    fn run_parts(
        &self,
        param: usize,
        seed: u64,
        profile: &Profile,
        parts: Parts,
        ws: &mut Workspace,
    ) {
        let plan = &self.plans[param];
        if plan.outer.is_some() {
            return run_outer(plan, seed, profile, ws);
        }
        let mut traces = std::mem::take(&mut ws.traces);
        let kernels = ws.kernels;
        let mutant = ws.mutant;
        let (bufs, scratch) = ws.buffers::<GraphBuffers>();
        bufs.draw(plan, seed);
        if parts.f64 {
            traces.f64.clear();
            plan.compute(
                &mut bufs.f64_backend,
                &bufs.init,
                false,
                None,
                true,
                &mut bufs.b64,
                &mut traces.f64,
            );
        }
        let mut be = F32Backend::new(profile, scratch).with_kernels(kernels);
        if parts.reference {
            traces.reference.clear();
            match &plan.reference {
                // Two layouts: the reference is the reference layout's sharded computation
                // (never with the mutant), from the same initial parameters and inputs.
                Some(rp) => rp.compute(
                    &mut be,
                    &bufs.init,
                    true,
                    None,
                    false,
                    &mut bufs.b32r,
                    &mut traces.reference,
                ),
                None => plan.compute(
                    &mut be,
                    &bufs.init,
                    false,
                    None,
                    false,
                    &mut bufs.b32,
                    &mut traces.reference,
                ),
            }
        }
        traces.sharded.clear();
        plan.compute(
            &mut be,
            &bufs.init,
            true,
            mutant,
            false,
            &mut bufs.b32,
            &mut traces.sharded,
        );
        ws.traces = traces;
    }
    fn run_bytes(&self, param: usize, profile: &Profile, mutant: Option<Mutant>) -> Option<u128> {
        let plan = &self.plans[param];
        // The outer loop's replicas run through their own buffers: the check-tensor estimate.
        if plan.outer.is_some() {
            return None;
        }
        // Two layouts: the reference layout's computation holds its own buffers besides.
        let reference = plan.reference.as_ref().map_or(0, |rp| {
            rp.run_bytes(&profile.matmul, profile.order_model, None, false)
        });
        Some(
            plan.run_bytes(
                &profile.matmul,
                profile.order_model,
                mutant,
                self.streams[param],
            ) + reference,
        )
    }
    fn streams(&self, param: usize) -> bool {
        self.streams[param]
    }
    fn run_stepwise(
        &self,
        param: usize,
        seed: u64,
        profile: &Profile,
        ws: &mut Workspace,
        each_step: &mut dyn FnMut(&crate::exec::scenario::Traces),
    ) {
        if !self.streams(param) {
            self.run(param, seed, profile, ws);
            return each_step(&ws.traces);
        }
        let plan = &self.plans[param];
        let mut traces = std::mem::take(&mut ws.traces);
        let kernels = ws.kernels;
        let mutant = ws.mutant;
        let (bufs, scratch) = ws.buffers::<GraphBuffers>();
        bufs.draw(plan, seed);
        // The three computations of [`Plan::compute`], each with its own buffers, advanced
        // one step at a time: the same micro-steps on the same inputs in the same order per
        // computation, so the same values.
        let (c64, cref, csh) = (
            plan.step_ctx(false, None, true, None),
            plan.step_ctx(false, None, false, None),
            plan.step_ctx(true, mutant, false, None),
        );
        plan.load_state(&c64, &bufs.init, &mut bufs.b64);
        plan.load_state(&cref, &bufs.init, &mut bufs.b32);
        // The last computation to load takes the drawn buffers instead of a copy (no
        // parameter-sized copy is kept), and gives them back after the last step; `init`
        // then holds no draw, so the next run draws again (a streamed group is alone in its
        // family, so its seeds are not run twice in a row anyway).
        plan.load_state_taking(&csh, &mut bufs.init, &mut bufs.b32s);
        bufs.drawn_key = None;
        // Gradients no check records: one set of buffers for the two fp32 computations,
        // handed to the sharded one for its step and back after it.
        let shared_grads = plan.unrecorded_grads();
        let mut be = F32Backend::new(profile, scratch).with_kernels(kernels);
        // The checks of parameters and their gradients are lent, not copied: views of the
        // computations' own buffers, which nothing modifies until the next step begins,
        // and the traces are cleared before it does (and at the end).
        for t in [&mut traces.f64, &mut traces.reference, &mut traces.sharded] {
            // SAFETY: every trace is cleared at the top of each step, before `plan.step`
            // modifies the buffers, and lending ends (clearing it) after the last step.
            unsafe { t.lend(true) };
        }
        for s in 0..plan.graph.train.steps {
            traces.f64.clear();
            traces.reference.clear();
            traces.sharded.clear();
            // The float64 step on one side of a join, the two fp32 steps (which share `be`
            // and the unrecorded gradients) on the other: the three touch disjoint buffers,
            // and each computes what it computes alone, so the values do not depend on which
            // thread runs which side. A sweep of one big seed gets two cores; with every
            // worker busy on its own seed, the join runs both sides on this thread.
            let (f64_backend, b64, b32, b32s) = (
                &mut bufs.f64_backend,
                &mut bufs.b64,
                &mut bufs.b32,
                &mut bufs.b32s,
            );
            let (t64, tref, tsh) = (&mut traces.f64, &mut traces.reference, &mut traces.sharded);
            rayon::join(
                || plan.step(f64_backend, &c64, s, b64, t64),
                || {
                    plan.step(&mut be, &cref, s, b32, tref);
                    b32.swap_unrecorded_grads(b32s, &shared_grads);
                    plan.step(&mut be, &csh, s, b32s, tsh);
                    b32.swap_unrecorded_grads(b32s, &shared_grads);
                },
            );
            each_step(&traces);
        }
        for t in [&mut traces.f64, &mut traces.reference, &mut traces.sharded] {
            // SAFETY: turning lending off clears the views.
            unsafe { t.lend(false) };
        }
        plan.return_taken(&mut bufs.init, &mut bufs.b32s);
        ws.traces = traces;
    }
    fn same_computation(&self, a: usize, b: usize) -> bool {
        // Two layouts: the reference layouts must agree too.
        let reference = |i: usize| {
            self.plans[i]
                .reference
                .as_ref()
                .map(|r| executed_form(&r.graph))
        };
        a == b
            || (executed_form(&self.plans[a].graph) == executed_form(&self.plans[b].graph)
                && reference(a) == reference(b))
    }
}

/// Trace bytes (three computations, f64 values, every recorded step) from which a
/// parametrization runs step by step ([`Scenario::streams`]): 256 MiB.
pub const STREAM_FROM: u128 = 256 << 20;

/// Whether `plan` runs step by step: more than one step, no data-parallel ranks or outer
/// loop (those run their own way), and traces over all steps of [`STREAM_FROM`] or more.
fn plan_streams(plan: &Plan) -> bool {
    if plan.outer.is_some() || !plan.ranks.is_empty() || plan.reference.is_some() {
        return false;
    }
    let t = &plan.graph.train;
    let records = (t.steps.max(1) * t.micro_steps.max(1)) as u128;
    let numel: u128 = plan
        .checks
        .iter()
        .map(|c| c.shape.iter().map(|&d| d as u128).product::<u128>())
        .sum();
    t.steps > 1 && 3 * 8 * numel * records >= STREAM_FROM
}

/// `g` as the executor sees it: the id (a name) cleared, and an embedding's
/// [`EmbeddingParallel::ColumnShardedLookup`] replaced by [`EmbeddingParallel::None`], which
/// [`Plan::compute`] runs in one match arm with it and which nothing else in the executor,
/// [`plan`] or [`crate::scenario::validate`] tells apart. Two graphs with equal executed forms are
/// prepared into equal plans and compute the same traces for every seed, profile and mutant.
/// The mutants a graph admits ([`ResolvedGraph::mutants`]) may still differ; a mutant runs
/// the same executor code on either graph.
fn executed_form(g: &ResolvedGraph) -> ResolvedGraph {
    let mut g = g.clone();
    g.id.clear();
    for l in &mut g.layers {
        if let Op::Embedding { parallel, .. } = &mut l.op {
            if *parallel == EmbeddingParallel::ColumnShardedLookup {
                *parallel = EmbeddingParallel::None;
            }
        }
    }
    g
}

/// One seed-run of an outer-loop graph: its data (written in the file, or drawn for `seed`),
/// then the f64 ground truth, the one-device reference and the sharded computation, all in
/// the profile's execution mode (the graph's default when the profile leaves it unset).
fn run_outer(plan: &Plan, seed: u64, profile: &Profile, ws: &mut Workspace) {
    let (Some(o), Some(op)) = (plan.graph.train.outer.as_ref(), plan.outer.as_ref()) else {
        return;
    };
    let mut traces = std::mem::take(&mut ws.traces);
    traces.clear();
    let kernels = ws.kernels;
    let mutant = ws.mutant;
    let (bufs, scratch) = ws.buffers::<GraphBuffers>();
    let data = match (&op.fixed, &o.data) {
        (Some(d), _) => d,
        (None, OuterData::Teacher { noise_std }) => {
            let b = &mut *bufs;
            draw_teacher(
                &plan.graph,
                o.replicas,
                *noise_std,
                seed,
                &mut b.drawn.init,
                &mut b.x,
                &mut b.y,
                &mut b.name,
                &mut b.teacher,
            );
            let values = outer_loop::input_values(&plan.graph, &b.x, &b.y);
            b.drawn.split(o.replicas, &values);
            &bufs.drawn
        }
        (None, OuterData::Fixed { .. }) => return,
    };
    let mode = profile.xla.unwrap_or(o.default_mode);
    plan.compute_outer(
        &mut bufs.f64_backend,
        mode,
        data,
        false,
        None,
        &mut bufs.o64,
        &mut traces.f64,
    );
    let mut be = F32Backend::new(profile, scratch).with_kernels(kernels);
    plan.compute_outer(
        &mut be,
        mode,
        data,
        false,
        None,
        &mut bufs.o32,
        &mut traces.reference,
    );
    plan.compute_outer(
        &mut be,
        mode,
        data,
        true,
        mutant,
        &mut bufs.o32,
        &mut traces.sharded,
    );
    ws.traces = traces;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The activation layers' [`Plan::act_parts`] of the example MLP file with `edit` applied,
    /// by layer name.
    fn act_parts_of(edit: impl Fn(&str) -> String) -> Vec<(String, TorchParts)> {
        let text = edit(include_str!("../../configs/examples/megatron_mlp_tp4.toml"));
        let sf =
            crate::scenario::file::parse_file("mlp.toml", &text).expect("the edited MLP parses");
        let g = sf.lowered[0].clone();
        let names: Vec<String> = g.layers.iter().map(|l| l.name.clone()).collect();
        let p = plan(g);
        names.into_iter().zip(p.act_parts).collect()
    }

    /// A column-parallel output is one torch tensor per rank's out-features, through a chain
    /// of elementwise layers; uneven shards keep their own widths; a gathered output, a
    /// replicated layer, and TP 1 are one tensor; a sequence-parallel norm's output is one
    /// per rank's token rows.
    #[test]
    fn activations_know_the_torch_tensors_of_their_input() {
        let cols = |r: &[Range<usize>]| TorchParts::Columns(r.to_vec());
        let mlp = act_parts_of(|t| t.to_string());
        assert_eq!(
            mlp[1],
            ("act".into(), cols(&[0..16, 16..32, 32..48, 48..64]))
        );
        assert_eq!(mlp[0].1, TorchParts::Whole);
        assert_eq!(mlp[2].1, TorchParts::Whole);
        // TP 3 over 100 features (uneven), gelu then silu.
        let uneven = act_parts_of(|t| {
            t.replace("ffn = 64", "ffn = 100")
                .replace(
                    "tp = 4, shard_rule = \"megatron\"",
                    "tp = 3, shard_rule = \"deepspeed\"",
                )
                .replace(
                    "{ name = \"act\", op = \"gelu\" },",
                    "{ name = \"act\", op = \"gelu\" },\n  { name = \"act2\", op = \"silu\" },",
                )
        });
        let want = cols(&[0..34, 34..67, 67..100]);
        assert_eq!(uneven[1], ("act".into(), want.clone()));
        assert_eq!(uneven[2], ("act2".into(), want));
        let gathered = act_parts_of(|t| {
            t.replace("parallel = \"column\"", "parallel = \"column-gather\"")
                .replace("parallel = \"row\"", "parallel = \"none\"")
        });
        assert_eq!(gathered[1].1, TorchParts::Whole);
        let tp1 = act_parts_of(|t| t.replace("tp = 4", "tp = 1"));
        assert_eq!(tp1[1].1, TorchParts::Whole);
        // A sequence-parallel norm straight into an activation: 8 tokens over 4 ranks.
        let seq = act_parts_of(|t| {
            t.replace(
                "{ name = \"fc1\", op = \"linear\", input = \"x\", out = \"ffn\", parallel = \"column\" },\n  { name = \"act\", op = \"gelu\" },",
                "{ name = \"ln\", op = \"layernorm\", input = \"x\", parallel = \"sequence\" },\n  { name = \"act\", op = \"gelu\" },\n  { name = \"fc1\", op = \"linear\", out = \"ffn\", parallel = \"column\" },\n  { name = \"act2\", op = \"gelu\" },",
            )
        });
        assert_eq!(
            seq[1],
            ("act".into(), TorchParts::Rows(vec![0..2, 2..4, 4..6, 6..8]))
        );
        assert_eq!(
            seq[3],
            ("act2".into(), cols(&[0..16, 16..32, 32..48, 48..64]))
        );
    }

    /// Per parameter name: whether T1 (`deepspeed-tied-row-parallel`, param 0) with `edit`
    /// applied to its file fuses the parameter's step ([`fused_sgd`]).
    fn fused(edit: impl Fn(&str) -> String) -> Vec<(String, bool)> {
        let text = edit(include_str!(
            "../../configs/deepspeed_tied_row_parallel.toml"
        ));
        let sf = crate::scenario::file::parse_file("t1.toml", &text).expect("the edited T1 parses");
        let g = sf.lowered[0].clone();
        let names: Vec<String> = g.params.iter().map(|p| p.name.clone()).collect();
        let p = plan(g);
        names.into_iter().zip(p.fused_sgd).collect()
    }

    fn flag(v: &[(String, bool)], name: &str) -> bool {
        v.iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no parameter {name} in {v:?}"))
            .1
    }

    /// T1 as written: only the projection weight, used by its own torch linear layer alone,
    /// its gradient unread; not the tied table (two users, a recorded gradient), not the
    /// bias. Each condition of `fused_sgd` turned off turns it off.
    #[test]
    fn which_steps_are_fused() {
        let t1 = fused(|t| t.to_string());
        assert!(flag(&t1, "projection.weight"), "{t1:?}");
        assert!(!flag(&t1, "projection.bias"), "{t1:?}");
        assert!(!flag(&t1, "embedding.weight"), "{t1:?}");
        let graded = fused(|t| {
            t.replace(
                "[[checks]]\nname = \"head_weight\"",
                "[[checks]]\nname = \"pg\"\ntensor = \"projection.weight.grad\"\nat = \"step\"\noptional = true\n\n\
                 [[checks]]\nname = \"head_weight\"",
            )
        });
        assert_eq!(graded.len(), t1.len());
        assert!(
            !flag(&graded, "projection.weight"),
            "a recorded gradient: {graded:?}"
        );
        let momentum = fused(|t| t.replace("optimizer = \"sgd\"", "optimizer = \"momentum\""));
        assert!(
            !flag(&momentum, "projection.weight"),
            "momentum: {momentum:?}"
        );
        let decay = fused(|t| t.replace("lr = 0.05", "lr = 0.05\nweight_decay = 0.01"));
        let adam = fused(|t| t.replace("optimizer = \"sgd\"", "optimizer = \"adam\""));
        assert!(!flag(&adam, "projection.weight"), "adam: {adam:?}");
        assert!(
            !flag(&decay, "projection.weight"),
            "weight decay: {decay:?}"
        );
        let micro = fused(|t| t.replace("steps = 3", "steps = 3\nmicro_steps = 2"));
        assert!(
            !flag(&micro, "projection.weight"),
            "accumulation: {micro:?}"
        );
    }
}
