//! Scenario validation: what the executor supports and the shape facts it relies on, checked
//! on the lowered graphs ([`crate::scenario::ir`]) when a file is loaded, so that `check`
//! refuses exactly what a sweep would, before anything is drawn or allocated.

use crate::scenario::ir::*;
use crate::scenario::shard::dp_rows;
use crate::sys::error::InputError;

fn err(file: &str, key: String, msg: impl Into<String>) -> InputError {
    InputError::config(file, key, msg)
}

/// The most elements one tensor may have (4 TiB of f32): far past any machine's memory, and
/// small enough that sizes computed from it never overflow.
pub const MAX_ELEMENTS: u64 = 1 << 40;

/// Validates every parametrization's graph as the executor will (`seedsweep check` refuses
/// what a sweep would), without drawing or allocating anything.
pub fn validate_graphs(file: &str, graphs: &[ResolvedGraph]) -> Result<(), InputError> {
    graphs.iter().try_for_each(|g| validate(file, g))
}

/// What the executor supports today, and the shape facts it relies on.
pub fn validate(file: &str, g: &ResolvedGraph) -> Result<(), InputError> {
    let id = &g.id;
    let at = |what: String| format!("params[{id}].{what}");
    // Element counts in checked arithmetic first: a list-valued dim can make a product that
    // wraps around, which every later size computation would take for a small tensor.
    let shapes = g
        .tensors
        .iter()
        .map(|t| (&t.name, &t.shape))
        .chain(g.params.iter().map(|p| (&p.name, &p.shape)));
    for (name, shape) in shapes {
        let n = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
            .filter(|n| *n <= MAX_ELEMENTS);
        if n.is_none() {
            return Err(err(
                file,
                at("dims".into()),
                format!(
                    "tensor {name} of shape {shape:?} has more than 2^40 elements (the most a \
                     tensor may have); make its dims smaller"
                ),
            ));
        }
    }
    let numel = |shape: &[usize]| shape.iter().product::<usize>();
    if let Some(o) = &g.train.outer {
        validate_outer(file, g, o)?;
    } else if g.parallel.dp > 1 {
        validate_dp(file, g)?;
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
    let tensor = |t: crate::scenario::ir::TensorId, key: String| {
        if t.0 < g.tensors.len() {
            Ok(())
        } else {
            Err(err(file, key, format!("tensor index {} out of range", t.0)))
        }
    };
    let param = |p: crate::scenario::ir::ParamId, key: String| {
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
        let fixed_ok = match (d.kind, &d.values) {
            (DrawKind::Fixed { int64 }, Some(v)) => {
                matches!(v, FixedValues::I64(_)) == int64 && v.len() == numel(&d.shape)
            }
            (DrawKind::Fixed { .. }, None) => false,
            (_, v) => v.is_none(),
        };
        if !fixed_ok {
            return Err(err(
                file,
                at(format!("inputs[{i}].values")),
                "a fixed input needs one value of its type per element; a drawn one none",
            ));
        }
        if d.kind == (DrawKind::Fixed { int64: true }) && d.tensor.is_some() {
            return Err(err(
                file,
                at(format!("inputs[{i}]")),
                "an integer input cannot feed an activation; layers read it by its id",
            ));
        }
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
            // An outer loop's replica sees its block of the leading axis.
            let mut shape = d.shape.clone();
            if let (Some(o), Some(rows)) = (&g.train.outer, shape.first_mut()) {
                *rows /= o.replicas.max(1);
            }
            if g.tensors[t.0].shape != shape {
                return Err(err(
                    file,
                    at(format!("inputs[{i}].shape")),
                    "must equal the shape of the tensor it feeds",
                ));
            }
        }
    }
    let int_input = |inp: crate::scenario::ir::InputId, key: String| -> Result<usize, InputError> {
        match g.inputs.draws.get(inp.0) {
            Some(d) if matches!(d.kind, DrawKind::Randint { .. }) => Ok(numel(&d.shape)),
            Some(d) if d.kind == (DrawKind::Fixed { int64: true }) => Ok(numel(&d.shape)),
            _ => Err(err(
                file,
                key,
                "must name an integer (randint or fixed int64) input",
            )),
        }
    };
    for f in &g.inputs.fixups {
        let crate::scenario::ir::Fixup::Set { input, index, .. } = *f;
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
        let read = |t: crate::scenario::ir::TensorId| -> Result<(), InputError> {
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
                    if let Some(FixedValues::I64(v)) = &d.values {
                        if v.iter().any(|&x| x < 0 || x as usize >= ts[0]) {
                            return Err(err(
                                file,
                                key("ids"),
                                format!("fixed ids outside the table's {} rows", ts[0]),
                            ));
                        }
                    }
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
                    let crate::scenario::ir::Fixup::Set { input, value, .. } = *f;
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
                layout,
                ..
            } => {
                read(x)?;
                param(weight, key("weight"))?;
                if layout == WeightLayout::InOut && parallel != LinearParallel::None {
                    return Err(err(
                        file,
                        key("parallel"),
                        "a flax kernel ([in, out]) layer is not tensor-parallel; allowed: none",
                    ));
                }
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
            Op::Sdpa { q, k, v, heads, .. } => {
                for t in [q, k, v] {
                    read(t)?;
                }
                let shape = &g.tensors[out.0].shape;
                if shape.len() != 3
                    || heads == 0
                    || !shape[2].is_multiple_of(heads)
                    || [q, k, v].iter().any(|t| &g.tensors[t.0].shape != shape)
                {
                    return Err(err(
                        file,
                        key("inputs"),
                        "q, k, v and the output must be one [batch, seq, heads·head_dim] shape",
                    ));
                }
            }
            Op::Rope { x, ref tables, .. } => {
                read(x)?;
                let shape = &g.tensors[x.0].shape;
                if g.tensors[out.0].shape != *shape
                    || shape.len() != 3
                    || tables.seq != shape[1]
                    || tables.head_dim == 0
                    || !shape[2].is_multiple_of(tables.head_dim)
                {
                    return Err(err(
                        file,
                        key("out"),
                        "must have the input's [batch, seq, heads·head_dim] shape",
                    ));
                }
            }
            Op::Softmax { x, .. } => {
                read(x)?;
                if g.tensors[x.0].shape != g.tensors[out.0].shape {
                    return Err(err(file, key("out"), "must have the input's shape"));
                }
            }
            Op::Moe {
                x,
                router,
                experts,
                top_k,
                ffn,
                gated,
                ep,
                ..
            } => {
                read(x)?;
                if g.tensors[x.0].shape != g.tensors[out.0].shape {
                    return Err(err(file, key("out"), "must have the input's shape"));
                }
                if top_k == 0 || top_k > experts {
                    return Err(err(file, key("top_k"), "must be 1..=experts"));
                }
                if ep == 0 || !experts.is_multiple_of(ep) {
                    return Err(err(
                        file,
                        key("expert_parallel"),
                        "must divide the number of experts",
                    ));
                }
                let h = g.width(x);
                param(router, key("router"))?;
                if g.params[router.0].shape != [experts, h] {
                    return Err(err(
                        file,
                        key("router"),
                        format!("must be [{experts}, {h}]"),
                    ));
                }
                for e in 0..experts {
                    let parts: &[(usize, [usize; 2])] = if gated {
                        &[(0, [ffn, h]), (1, [h, ffn]), (2, [ffn, h])]
                    } else {
                        &[(0, [ffn, h]), (1, [h, ffn])]
                    };
                    for &(j, shape) in parts {
                        let p = Op::moe_param(router, gated, e, j);
                        param(p, key("experts"))?;
                        if g.params[p.0].shape != shape {
                            return Err(err(
                                file,
                                key("experts"),
                                format!("expert {e}'s weight {} must be {shape:?}", j + 1),
                            ));
                        }
                    }
                }
            }
            Op::Binary { a, b, .. } => {
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
                if let Some(FixedValues::I64(v)) = &d.values {
                    let n = g.width(g.loss.input);
                    if v.iter().any(|&x| x < 0 || x as usize >= n) {
                        return Err(err(
                            file,
                            at("loss.labels".into()),
                            "fixed labels outside the number of classes",
                        ));
                    }
                }
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
                if matches!(d.kind, DrawKind::Randn | DrawKind::Fixed { int64: false })
                    && d.shape.iter().product::<usize>()
                        == g.tensors[g.loss.input.0].shape.iter().product::<usize>() => {}
            Some(d)
                if d.kind == DrawKind::Given
                    && g.train.outer.as_ref().is_some_and(|o| {
                        d.shape.iter().product::<usize>()
                            == o.replicas
                                * g.tensors[g.loss.input.0].shape.iter().product::<usize>()
                    }) => {}
            _ => return Err(err(
                file,
                at("loss.target".into()),
                "must name a float (randn or fixed) input with as many elements as the loss input",
            )),
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
            CheckTensor::LossTokens => {
                if !matches!(g.loss.kind, LossKind::VocabParallelCrossEntropy { .. })
                    || g.parallel.dp > 1
                {
                    return Err(err(
                        file,
                        key,
                        "per-token losses are a vocab-parallel cross-entropy's, at dp = 1",
                    ));
                }
                g.rows(g.loss.input)
            }
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

/// What the data-parallel executor ([`crate::exec::graph`]'s `dp` module) relies on.
fn validate_dp(file: &str, g: &ResolvedGraph) -> Result<(), InputError> {
    let id = &g.id;
    let at = |what: String| format!("params[{id}].{what}");
    let dp = g.parallel.dp;
    if g.parallel.tp > 1 {
        return Err(err(
            file,
            at("parallel".into()),
            format!(
                "tp = {} with dp = {dp}: tensor and data parallelism together are not \
                 supported by the executor yet; allowed: tp = 1 or dp = 1",
                g.parallel.tp
            ),
        ));
    }
    let Some((batch, _)) = dp_rows(g) else {
        return Err(err(
            file,
            at("parallel.dp".into()),
            format!(
                "the global batch (the first input's leading dimension) does not split into \
                 {dp} non-empty rank blocks under the shard rule"
            ),
        ));
    };
    for (i, d) in g.inputs.draws.iter().enumerate() {
        if d.shape.first() != Some(&batch) {
            return Err(err(
                file,
                at(format!("inputs[{i}].shape")),
                format!(
                    "with dp = {dp} every input's leading dimension is the global batch \
                     ({batch}); this one is {:?}",
                    d.shape
                ),
            ));
        }
    }
    let rep = g.parallel.replicate;
    if rep > 1 && !batch.is_multiple_of(dp) {
        return Err(err(
            file,
            at("parallel.dp_shard".into()),
            format!(
                "the HSDP mesh dp_replicate × dp_shard = {rep} × {} = {dp} ranks must divide \
                 the global batch evenly (every rank a local batch of the same size, as \
                 torchtitan's); the batch (the first input's leading dimension) is {batch}; \
                 allowed: a batch that is a multiple of {dp}",
                dp / rep
            ),
        ));
    }
    for t in &g.tensors {
        if t.shape.len() < 2 || t.shape[0] != batch {
            return Err(err(
                file,
                at("layers".into()),
                format!(
                    "with dp = {dp} every activation must be [batch ({batch}), ...] with at \
                     least two dimensions; `{}` is {:?}",
                    t.name, t.shape
                ),
            ));
        }
    }
    for (ci, c) in g.checks.iter().enumerate() {
        let key = at(format!("checks[{ci}]"));
        match c.tensor {
            CheckTensor::Grad(_) => {
                return Err(err(
                    file,
                    key,
                    format!(
                        "with dp = {dp} a rank's activation gradient is of its own loss, not \
                         the global one; check activations, the loss or parameters"
                    ),
                ))
            }
            CheckTensor::ParamGrad(_) if g.train.grad_reduce != GradReduce::AllReduce => {
                return Err(err(
                    file,
                    key,
                    "under a reduce-scatter no rank holds a parameter's full gradient",
                ))
            }
            CheckTensor::ParamGrad(_) if c.at == At::MicroStep && g.train.micro_steps > 1 => {
                return Err(err(
                    file,
                    key,
                    format!(
                        "with dp = {dp} the gradient is all-reduced once per step; at = \
                         \"micro-step\" is not allowed, allowed: \"step\""
                    ),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// What the outer-loop wrapper runs ([`crate::exec::outer_loop`]): the replicas are the dp
/// ranks, no tensor parallelism, linear layers as flax kernels, the mse loss on the last
/// layer, plain sgd or adamw inside (optax's formulas) and sgd with momentum outside.
fn validate_outer(
    file: &str,
    g: &ResolvedGraph,
    o: &crate::scenario::ir::OuterLoop,
) -> Result<(), InputError> {
    if g.parallel.tp != 1 || g.parallel.dp != o.replicas {
        return Err(err(
            file,
            "parallel".into(),
            format!(
                "an outer loop runs its replicas as the dp ranks: tp must be 1 and dp = {} (the replicas)",
                o.replicas
            ),
        ));
    }
    for (li, l) in g.layers.iter().enumerate() {
        match l.op {
            Op::Linear {
                bias: Some(_),
                parallel: LinearParallel::None,
                layout: WeightLayout::InOut,
                ..
            }
            | Op::Activation {
                kind: Activation::Tanh,
                ..
            } => {}
            _ => {
                return Err(err(
                    file,
                    format!("layers[{li}]"),
                    "an outer-loop model is linear layers (flax kernels with a bias, no tensor                      parallelism) and tanh",
                ))
            }
        }
    }
    let last = g.layers.last().map(|l| l.op.output());
    if !matches!(g.loss.kind, LossKind::Mse { .. }) || Some(g.loss.input) != last {
        return Err(err(
            file,
            "loss".into(),
            "an outer loop trains on the mse loss of the last layer",
        ));
    }
    if g.train.micro_steps != 1 || g.train.steps != o.steps {
        return Err(err(
            file,
            "train".into(),
            "an outer loop's inner steps are its steps, without micro-steps",
        ));
    }
    let inner_ok = match g.train.optimizer {
        Optimizer::Sgd {
            momentum,
            dampening,
            nesterov,
            weight_decay,
            ..
        } => momentum == 0.0 && dampening == 0.0 && !nesterov && weight_decay == 0.0,
        Optimizer::Adam { decoupled, .. } => decoupled,
    };
    if !inner_ok {
        return Err(err(
            file,
            "train.optimizer".into(),
            "an outer loop's inner optimizer is plain sgd or adamw (optax's)",
        ));
    }
    if !matches!(
        o.optimizer,
        Optimizer::Sgd { dampening, weight_decay, .. } if dampening == 0.0 && weight_decay == 0.0
    ) {
        return Err(err(
            file,
            "train.outer.optimizer".into(),
            "the outer optimizer is sgd with momentum (optax.sgd), no dampening or weight decay",
        ));
    }
    if o.sync_period == 0 || o.steps == 0 {
        return Err(err(
            file,
            "train.outer".into(),
            "sync_period and steps must be >= 1",
        ));
    }
    if let OuterData::Fixed { init, x, y } = &o.data {
        let np: usize = g
            .params
            .iter()
            .map(|p| p.shape.iter().product::<usize>())
            .sum();
        let per = |i: usize| {
            g.inputs
                .draws
                .get(i)
                .map_or(0, |d| d.shape.iter().product())
        };
        let target = match g.loss.kind {
            LossKind::Mse { target } => target.0,
            _ => 0,
        };
        let xi = (0..g.inputs.draws.len())
            .find(|&i| i != target)
            .unwrap_or(0);
        for (what, got, n) in [
            ("init", init.len(), np),
            ("x", x.len(), per(xi)),
            ("y", y.len(), per(target)),
        ] {
            if got != n {
                return Err(err(
                    file,
                    "inputs".into(),
                    format!("fixed {what} holds {got} values; the model needs {n}"),
                ));
            }
        }
    }
    Ok(())
}
