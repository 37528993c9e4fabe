//! [`GraphScenario`]: a scenario given as one resolved graph per parametrization, run by the
//! executor ([`crate::graph::exec`]).

use std::collections::HashSet;
use std::sync::Mutex;

use crate::backend::{F32Backend, F64Backend};
use crate::config::{resolve_policies, CommonConfig, Policy};
use crate::error::InputError;
use crate::evaluate::Comparison;
use crate::graph::exec::{phase, Bufs, Phase, Plan};
use crate::graph::init::{draw_inputs, draw_params};
use crate::graph::ir::{
    Activation, CheckTensor, DrawKind, EmbeddingParallel, LinearParallel, LossKind, NormParallel,
    Op, Optimizer, ResolvedGraph,
};
use crate::mutant::Mutant;
use crate::profile::Profile;
use crate::rng::torch::TorchGenerator;
use crate::scenario::{CheckSpec, Scenario, Workspace};

/// A scenario described by resolved graphs.
#[derive(Debug)]
pub struct GraphScenario {
    common: CommonConfig,
    plans: Vec<Plan>,
    policies: Vec<Policy>,
    check_names: &'static [&'static str],
    mutants: &'static [Mutant],
    summary: String,
    compare: Comparison,
}

/// Per-thread buffers of every graph scenario.
#[derive(Debug, Default)]
pub struct GraphBuffers {
    init: Vec<Vec<f32>>,
    torch: Option<TorchGenerator>,
    b32: Bufs<f32>,
    b64: Bufs<f64>,
    f64_backend: F64Backend,
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
            validate(&common.file, &g)?;
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
            plans,
            policies,
            check_names: leak_slice(names),
            mutants: leak_slice(mutants),
            summary,
            compare: Comparison::ShardedVsRef,
        })
    }

    /// The scenario of a file in the scenario language ([`crate::lang`]): its lowered
    /// graphs, its check names in file order, its comparison; the summary `list` prints is
    /// [`summary_of`] the first graph.
    pub fn from_file(file: crate::lang::ScenarioFile) -> Result<Self, InputError> {
        let summary = file.lowered.first().map(summary_of).unwrap_or_default();
        let mut s = Self::new(file.common, file.lowered, file.check_names, summary)?;
        s.compare = file.compare;
        Ok(s)
    }

    /// The prepared graphs, one per parametrization.
    pub fn graphs(&self) -> impl Iterator<Item = &ResolvedGraph> {
        self.plans.iter().map(|p| &p.graph)
    }
}

/// One line on what a seed-run of `g` computes: its named dimensions, degrees, steps and
/// optimizer (`hidden 32, vocab 67, TP 2, 3 steps, sgd lr 0.05`).
pub fn summary_of(g: &ResolvedGraph) -> String {
    let mut parts: Vec<String> = g.dims.iter().map(|(n, v)| format!("{n} {v}")).collect();
    if g.parallel.tp > 1 {
        parts.push(format!("TP {}", g.parallel.tp));
    }
    if g.parallel.dp > 1 {
        parts.push(format!("DP {}", g.parallel.dp));
    }
    let t = &g.train;
    parts.push(if t.micro_steps > 1 {
        format!("{} steps x {} micro-steps", t.steps, t.micro_steps)
    } else {
        format!("{} steps", t.steps)
    });
    let opt = match t.optimizer {
        Optimizer::Sgd {
            momentum, nesterov, ..
        } if momentum != 0.0 => {
            if nesterov {
                "sgd nesterov"
            } else {
                "sgd momentum"
            }
        }
        Optimizer::Sgd { .. } => "sgd",
        Optimizer::Adam {
            decoupled: true, ..
        } => "adamw",
        Optimizer::Adam { .. } => "adam",
    };
    parts.push(format!("{opt} lr {}", t.optimizer.lr() as f32));
    parts.join(", ")
}

fn err(file: &str, key: String, msg: impl Into<String>) -> InputError {
    InputError::config(file, key, msg)
}

/// What the executor supports today, and the shape facts it relies on.
fn validate(file: &str, g: &ResolvedGraph) -> Result<(), InputError> {
    let id = &g.id;
    let at = |what: String| format!("params[{id}].{what}");
    let numel = |shape: &[usize]| shape.iter().product::<usize>();
    if g.parallel.dp != 1 {
        return Err(err(
            file,
            at("parallel.dp".into()),
            "data parallelism is not supported by the executor yet; allowed: 1",
        ));
    }
    if g.train.outer.is_some() {
        return Err(err(
            file,
            at("train.outer".into()),
            "the DiLoCo outer loop is not supported by the executor yet",
        ));
    }
    let plain_sgd = matches!(
        g.train.optimizer,
        Optimizer::Sgd { momentum, weight_decay, .. } if momentum == 0.0 && weight_decay == 0.0
    );
    if !plain_sgd
        && g.checks
            .iter()
            .any(|c| matches!(c.tensor, CheckTensor::SgdUpdate(_)))
    {
        return Err(err(
            file,
            at("checks".into()),
            "an sgd-update check needs plain SGD (no momentum, no weight decay)",
        ));
    }
    if g.train.steps == 0 || g.train.micro_steps == 0 {
        return Err(err(
            file,
            at("train".into()),
            "steps and micro_steps must be >= 1",
        ));
    }
    let tensor = |t: crate::graph::ir::TensorId, key: String| {
        if t.0 < g.tensors.len() {
            Ok(())
        } else {
            Err(err(file, key, format!("tensor index {} out of range", t.0)))
        }
    };
    let param = |p: crate::graph::ir::ParamId, key: String| {
        if p.0 < g.params.len() {
            Ok(())
        } else {
            Err(err(
                file,
                key,
                format!("parameter index {} out of range", p.0),
            ))
        }
    };
    for (i, p) in g.params.iter().enumerate() {
        if let Some(t) = p.tie {
            if t.0 >= i || g.params[t.0].tie.is_some() || g.params[t.0].shape != p.shape {
                return Err(err(
                    file,
                    at(format!("params[{i}].tie")),
                    "must name an earlier, untied parameter of the same shape",
                ));
            }
        }
    }
    for (i, d) in g.inputs.draws.iter().enumerate() {
        if let DrawKind::Randint { high } = d.kind {
            if high == 0 || high >= 1 << 32 {
                return Err(err(
                    file,
                    at(format!("inputs[{i}].high")),
                    format!("{high} is not allowed; allowed: 1..2^32"),
                ));
            }
            if d.tensor.is_some() {
                return Err(err(
                    file,
                    at(format!("inputs[{i}]")),
                    "an integer input cannot feed an activation; layers read it by its id",
                ));
            }
        }
        if let Some(t) = d.tensor {
            tensor(t, at(format!("inputs[{i}].tensor")))?;
            if g.tensors[t.0].shape != d.shape {
                return Err(err(
                    file,
                    at(format!("inputs[{i}].shape")),
                    "must equal the shape of the tensor it feeds",
                ));
            }
        }
    }
    let int_input = |inp: crate::graph::ir::InputId, key: String| -> Result<usize, InputError> {
        match g.inputs.draws.get(inp.0) {
            Some(d) if matches!(d.kind, DrawKind::Randint { .. }) => Ok(numel(&d.shape)),
            _ => Err(err(file, key, "must name an integer (randint) input")),
        }
    };
    for f in &g.inputs.fixups {
        let crate::graph::ir::Fixup::Set { input, index, .. } = *f;
        let n = int_input(input, at("inputs.fixups".into()))?;
        if index >= n {
            return Err(err(
                file,
                at("inputs.fixups".into()),
                format!("index {index} is out of range for an input of {n} elements"),
            ));
        }
    }
    let mut produced = vec![false; g.tensors.len()];
    for d in &g.inputs.draws {
        if let Some(t) = d.tensor {
            produced[t.0] = true;
        }
    }
    for (li, l) in g.layers.iter().enumerate() {
        let key = |k: &str| at(format!("layers[{li}].{k}"));
        let out = l.op.output();
        tensor(out, key("out"))?;
        let read = |t: crate::graph::ir::TensorId| -> Result<(), InputError> {
            tensor(t, key("x"))?;
            if produced[t.0] {
                Ok(())
            } else {
                Err(err(
                    file,
                    key("x"),
                    format!("reads `{}` before anything writes it", g.tensors[t.0].name),
                ))
            }
        };
        match l.op {
            Op::Embedding {
                ids,
                table,
                parallel,
                padding_idx,
                ..
            } => {
                param(table, key("table"))?;
                let n = int_input(ids, key("ids"))?;
                let ts = &g.params[table.0].shape;
                if ts.len() != 2 || ts[1] != g.width(out) || n != g.rows(out) {
                    return Err(err(
                        file,
                        key("table"),
                        "the table must be [rows, dim] with dim the output's last dimension and \
                         one output row per id",
                    ));
                }
                if let Some(p) = padding_idx {
                    if p < 0 || p as usize >= ts[0] {
                        return Err(err(
                            file,
                            key("padding_idx"),
                            format!("{p} is out of range; allowed: 0..{}", ts[0]),
                        ));
                    }
                }
                if let Some(d) = g.inputs.draws.get(ids.0) {
                    if let DrawKind::Randint { high } = d.kind {
                        if high as usize > ts[0] {
                            return Err(err(
                                file,
                                key("ids"),
                                format!("ids drawn below {high} exceed the table's {} rows", ts[0]),
                            ));
                        }
                    }
                }
                for f in &g.inputs.fixups {
                    let crate::graph::ir::Fixup::Set { input, value, .. } = *f;
                    if input == ids && (value < 0 || value as usize >= ts[0]) {
                        return Err(err(
                            file,
                            at("inputs.fixups".into()),
                            format!(
                                "value {value} is out of range for the table's {} rows",
                                ts[0]
                            ),
                        ));
                    }
                }
                if parallel == EmbeddingParallel::Vocab
                    && g.parallel.shard_rule.ranges(ts[0], g.parallel.tp).is_none()
                {
                    return Err(err(
                        file,
                        key("parallel"),
                        format!(
                            "{} table rows do not split over tp = {} under the shard rule",
                            ts[0], g.parallel.tp
                        ),
                    ));
                }
            }
            Op::Linear {
                x,
                weight,
                bias,
                parallel,
                ..
            } => {
                read(x)?;
                param(weight, key("weight"))?;
                let (k, n) = (g.width(x), g.width(out));
                if g.params[weight.0].shape != [n, k] || g.rows(x) != g.rows(out) {
                    return Err(err(
                        file,
                        key("weight"),
                        format!("the weight must be [{n}, {k}] (out, in) and rows must match"),
                    ));
                }
                if let Some(b) = bias {
                    param(b, key("bias"))?;
                    if g.params[b.0].shape != [n] {
                        return Err(err(file, key("bias"), format!("the bias must be [{n}]")));
                    }
                }
                let split = match parallel {
                    LinearParallel::None => None,
                    LinearParallel::Row => Some(("input features", k)),
                    LinearParallel::Column | LinearParallel::ColumnGather => {
                        Some(("output features", n))
                    }
                };
                if let Some((what, total)) = split {
                    if g.parallel.shard_rule.ranges(total, g.parallel.tp).is_none() {
                        return Err(err(
                            file,
                            key("parallel"),
                            format!(
                                "{total} {what} do not split over tp = {} under the shard rule",
                                g.parallel.tp
                            ),
                        ));
                    }
                }
            }
            Op::Activation { kind, x, .. } => {
                read(x)?;
                if g.tensors[x.0].shape != g.tensors[out.0].shape {
                    return Err(err(file, key("out"), "must have the input's shape"));
                }
                let _ = kind;
            }
            Op::Norm {
                x,
                weight,
                bias,
                parallel,
                ..
            } => {
                read(x)?;
                if g.tensors[x.0].shape != g.tensors[out.0].shape {
                    return Err(err(file, key("out"), "must have the input's shape"));
                }
                let n = g.width(x);
                for (p, what) in [(weight, "weight"), (bias, "bias")] {
                    if let Some(p) = p {
                        param(p, key(what))?;
                        if g.params[p.0].shape != [n] {
                            return Err(err(file, key(what), format!("the {what} must be [{n}]")));
                        }
                    }
                }
                let seq = g.tensors[x.0].shape.first().copied().unwrap_or(1);
                if parallel == NormParallel::Sequence
                    && g.parallel.shard_rule.ranges(seq, g.parallel.tp).is_none()
                {
                    return Err(err(
                        file,
                        key("parallel"),
                        format!(
                            "a sequence of {seq} tokens does not split over tp = {} under the \
                             shard rule",
                            g.parallel.tp
                        ),
                    ));
                }
            }
            Op::ResidualAdd { a, b, .. } => {
                read(a)?;
                read(b)?;
                let shape = &g.tensors[out.0].shape;
                if &g.tensors[a.0].shape != shape || &g.tensors[b.0].shape != shape {
                    return Err(err(
                        file,
                        key("out"),
                        "both operands must have the output's shape",
                    ));
                }
            }
        }
        produced[out.0] = true;
    }
    tensor(g.loss.input, at("loss.input".into()))?;
    match g.loss.kind {
        LossKind::CrossEntropy { labels } | LossKind::VocabParallelCrossEntropy { labels } => {
            let n = int_input(labels, at("loss.labels".into()))?;
            if n != g.rows(g.loss.input) {
                return Err(err(
                    file,
                    at("loss.labels".into()),
                    "one label per logits row is required",
                ));
            }
            if let Some(d) = g.inputs.draws.get(labels.0) {
                if let DrawKind::Randint { high } = d.kind {
                    if high as usize > g.width(g.loss.input) {
                        return Err(err(
                            file,
                            at("loss.labels".into()),
                            "labels are drawn beyond the number of classes",
                        ));
                    }
                }
            }
        }
        LossKind::Mse { target } => match g.inputs.draws.get(target.0) {
            Some(d)
                if d.kind == DrawKind::Randn
                    && d.shape.iter().product::<usize>()
                        == g.tensors[g.loss.input.0].shape.iter().product::<usize>() => {}
            _ => {
                return Err(err(
                    file,
                    at("loss.target".into()),
                    "must name a randn input with as many elements as the loss input",
                ))
            }
        },
        LossKind::Sum => {}
    }
    if let LossKind::VocabParallelCrossEntropy { .. } = g.loss.kind {
        let v = g.width(g.loss.input);
        if g.parallel.shard_rule.ranges(v, g.parallel.tp).is_none() {
            return Err(err(
                file,
                at("loss.parallel".into()),
                format!(
                    "a vocabulary of {v} does not split over tp = {} under the shard rule",
                    g.parallel.tp
                ),
            ));
        }
    }
    for (ci, c) in g.checks.iter().enumerate() {
        let key = at(format!("checks[{ci}]"));
        let n = match c.tensor {
            CheckTensor::Loss => 1,
            CheckTensor::Activation(t) | CheckTensor::Grad(t) => {
                tensor(t, key.clone())?;
                numel(&g.tensors[t.0].shape)
            }
            CheckTensor::ParamGrad(p) | CheckTensor::Param(p) | CheckTensor::SgdUpdate(p) => {
                param(p, key.clone())?;
                numel(&g.params[p.0].shape)
            }
        };
        if numel(&c.shape) != n {
            return Err(err(
                file,
                format!("{key}.shape"),
                format!(
                    "{:?} does not hold the {n} elements of the checked tensor",
                    c.shape
                ),
            ));
        }
        if let CheckTensor::Grad(t) = c.tensor {
            let leaf = g.inputs.draws.iter().any(|d| d.tensor == Some(t));
            if !leaf && g.producer(t).is_none() {
                return Err(err(file, key, "the gradient of a tensor nothing writes"));
            }
        }
    }
    Ok(())
}

/// A single shard covering `r`.
fn one(r: std::ops::Range<usize>) -> Vec<std::ops::Range<usize>> {
    std::iter::once(r).collect()
}

/// Prepares a validated graph.
fn plan(g: ResolvedGraph) -> Plan {
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
            Op::Activation { x, .. } | Op::Norm { x, .. } => {
                needs_grad[out.0] = needs_grad[out.0] || needs_grad[x.0]
            }
            Op::ResidualAdd { a, b, .. } => {
                needs_grad[out.0] = needs_grad[out.0] || needs_grad[a.0] || needs_grad[b.0]
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
                let other_reader = g.layers.iter().enumerate().any(|(lj, o)| {
                    lj != li
                        && match o.op {
                            Op::Linear { x: r, .. }
                            | Op::Activation { x: r, .. }
                            | Op::Norm { x: r, .. } => r == x,
                            Op::ResidualAdd { a, b, .. } => a == x || b == x,
                            Op::Embedding { .. } => false,
                        }
                });
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
    let inputs = draw_inputs(&g);
    let lr = g.train.optimizer.lr() as f32;
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
        lr,
        in_place,
    }
}

impl Scenario for GraphScenario {
    fn common(&self) -> &CommonConfig {
        &self.common
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
    fn run(&self, param: usize, seed: u64, profile: &Profile, ws: &mut Workspace) {
        let plan = &self.plans[param];
        let mut traces = std::mem::take(&mut ws.traces);
        traces.clear();
        let kernels = ws.kernels;
        let mutant = ws.mutant;
        let (bufs, scratch) = ws.buffers::<GraphBuffers>();
        draw_params(&plan.graph, seed, &mut bufs.torch, &mut bufs.init);
        plan.compute(
            &mut bufs.f64_backend,
            &bufs.init,
            false,
            None,
            true,
            &mut bufs.b64,
            &mut traces.f64,
        );
        let mut be = F32Backend::new(profile, scratch).with_kernels(kernels);
        plan.compute(
            &mut be,
            &bufs.init,
            false,
            None,
            false,
            &mut bufs.b32,
            &mut traces.reference,
        );
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
}
