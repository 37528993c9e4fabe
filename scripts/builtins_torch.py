#!/usr/bin/env python3
"""Fixtures for the issue-8 built-in scenarios, from real PyTorch on the CPU at one thread.

For every scenario below, every parametrization and a handful of seeds, this script runs the
test's model twice in torch:
- `reference`: the unsharded computation, as the real test computes its expectation;
- `sharded`: the sharded computation, every rank simulated in this one process: each rank's
  partial is computed with real torch ops on that rank's slices, and every collective sums the
  ranks' buffers in the order of seedsweep's default profile `cpu-fma` (NCCL ring,
  `src/kernels/allreduce.rs`: chunk c of a buffer of L elements is [c*L//n, (c+1)*L//n) and is
  summed ((x[c+1] + x[c+2]) + ...) + x[c], ranks mod n), in fp32 with torch's own `+`.
and writes tests/data/builtin_<scenario>.json with every checked tensor of both computations
as IEEE-754 binary32 bit patterns, plus the inputs and initial parameters the Rust test needs
for its independent f64 check. `tests/suite/builtin_fixtures.rs` reads them.

Scenarios (the real tests are cited in each configs/<name>.toml):
- deepspeed-tp-row-parallel     DeepSpeed TestTpLayerFwdBwd::testRowParallel   (tp 2, 4)
- deepspeed-tp-column-parallel  DeepSpeed TestTpLayerFwdBwd::testColumnParallel (tp 2, 4)
- megatron-tp-mlp               Megatron ColumnParallelLinear -> gelu -> RowParallelLinear
- megatron-vocab-parallel-ce    Megatron vocab_parallel_cross_entropy           (tp 2, 4)
- fsdp-zero2-grad-acc           FSDP SHARD_GRAD_OP (ZeRO-2), DP 4, 2 micro-steps per step
- deepspeed-uneven-tp3-row-parallel  TestRowParallelOutputHeadTraining at TP 3 (shards 6/6/4)

Conditions: torch.set_num_threads(1), eager, and ATEN_CPU_CAPABILITY=avx2 (the `cpu-fma`
profile models torch's AVX2 ATen kernels; MKL's sgemm dispatches on the CPU by itself). The
script refuses to run under another capability unless --any-capability is given.

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/builtins_torch.py          # all
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/builtins_torch.py --only megatron-tp-mlp

Seeds follow the scenario language (docs/scenario-language.md): the sweep seed seeds the
weights (`torch.manual_seed(seed)`, then the modules in construction order with torch's
defaults), and micro-step m of step s draws its inputs after
`torch.manual_seed(data_seed + micro_steps*s + m)`.

Every tensor carries `fnv1a64`, the 64-bit FNV-1a hash of its little-endian f32 bytes, so
every tensor is compared bit for bit; its elements (`hex`: 8 hex digits per element, the u32
bit pattern, row-major) are stored where it is small (see `compact`), which keeps each file
at 20-70 KB.
"""
import argparse
import json
import math
import os
import platform

import torch
import torch.nn as nn
import torch.nn.functional as F

# The encoding and collective helpers are the differential harness's (one definition of the
# digest, the ring order and FSDP's predivide factor for both scripts).
from torch_mirror import fnv1a64, fsdp_predivide, ring_all_reduce, u32s

HEX_LIMIT = 32           # tensors up to this size keep every element at every step
HEX_LIMIT_FIRST = 820    # ... and up to this size at the first step / micro-step
FIRST_SEED = 8173


# ---------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------

def enc(t):
    """A tensor as {shape, fnv1a64, hex}; `compact` drops `hex` from the large ones."""
    words = u32s(t)
    return {"shape": list(t.shape), "fnv1a64": f"{fnv1a64(words):016x}",
            "hex": "".join(f"{w:08x}" for w in words)}


enc_full = enc


# Tensors recorded after an optimizer step (their label is the step), not needed in full.
POST_STEP = {"params", "projection_weight", "head_weight", "bias", "fc1_weight", "fc1_bias",
             "fc2_weight", "fc2_bias"}


def compact(tensors, first_run, hex_limit=HEX_LIMIT):
    """Keeps `hex` of tensors of at most HEX_LIMIT elements, and, in the first run (seed) of
    each parametrization, of at most HEX_LIMIT_FIRST elements at the first step or micro-step
    (label `0.0`, or `0` for a forward / backward tensor, or no label); the digest stays on
    all. Initial parameters (`@init`) keep their digest only: the Rust test regenerates them."""
    for key, t in tensors.items():
        name, label = key.split("@", 1) if "@" in key else (key, "")
        n = math.prod(t["shape"]) if t["shape"] else 1
        first = first_run and (label in ("", "0.0") or (label == "0" and name not in POST_STEP))
        if "hex" in t and not (n <= hex_limit or (first and n <= HEX_LIMIT_FIRST)):
            del t["hex"]


def enc_int(t):
    return {"shape": list(t.shape), "values": [int(v) for v in t.reshape(-1).tolist()]}


# ---------------------------------------------------------------------------------------
# collectives in cpu-fma's order
# ---------------------------------------------------------------------------------------

class RingAllReduce(torch.autograd.Function):
    """The ring all-reduce inside one autograd graph: forward sums the partials in ring order,
    backward hands the output gradient unchanged to every partial (DeepSpeed's RowParallel and
    Megatron's reduce_from_tensor_model_parallel_region backward)."""

    @staticmethod
    def forward(ctx, *parts):
        ctx.n = len(parts)
        return ring_all_reduce(parts)

    @staticmethod
    def backward(ctx, g):
        return tuple(g for _ in range(ctx.n))


def ring_reduce_scatter(parts):
    """Ring reduce-scatter of equal-length 1-D fp32 buffers whose length is a multiple of n:
    rank c receives chunk c, summed in the same order as the ring all-reduce's chunk c."""
    n = len(parts)
    length = parts[0].numel()
    assert length % n == 0
    full = ring_all_reduce(parts)
    k = length // n
    return [full[c * k:(c + 1) * k].clone() for c in range(n)]


def all_reduce_max(parts):
    out = parts[0].clone()
    for p in parts[1:]:
        out = torch.maximum(out, p)
    return out


def chunk_ranges(total, n):
    """torch.chunk's split of `total` into n pieces: ceil(total/n) each, the last smaller."""
    size = -(-total // n)
    out, start = [], 0
    while start < total:
        out.append((start, min(start + size, total)))
        start += size
    return out


def deepspeed_shards(total, tp, grain):
    """DeepSpeed's near-even rule with a grain (src/ops/tp.rs::shard_size)."""
    grains = total // grain
    out, start = [], 0
    for r in range(tp):
        size = (grains // tp + (1 if r < grains % tp else 0)) * grain
        if r + 1 == tp:
            size += total - grains * grain
        out.append((start, start + size))
        start += size
    return out


# ---------------------------------------------------------------------------------------
# DeepSpeed TestTpLayerFwdBwd (tests/unit/model_parallelism/test_autotp_training.py)
# ---------------------------------------------------------------------------------------

TP_LAYER_PARAMS = [  # pytest ids: the lower decorator (tp_overlap_comm) first, then tp_size
    ("True-2", 2, True), ("True-4", 4, True), ("False-2", 2, False), ("False-4", 4, False),
]
TP_HIDDEN = 128


TP_DATA_SEED = 0


def tp_layer_inputs(seed):
    """The compared layer and the input, drawn as the scenario language draws them: the sweep
    seed seeds the weights, `torch.manual_seed(seed); nn.Linear(128, 128)`, which at seed 42 is
    the test's own `process_linear_layer` (its `torch.manual_seed(42)`); the input,
    `randn(1, 128)` with requires_grad, after `torch.manual_seed(TP_DATA_SEED)` ([data] seed).
    (In the test the input comes from whatever state the harness left the generator in, after
    `SequentialLinearModel(128)`'s draws; it is broadcast from the TP group's first rank, so
    every rank holds the same input.)"""
    torch.manual_seed(seed)
    lin = nn.Linear(TP_HIDDEN, TP_HIDDEN)
    torch.manual_seed(TP_DATA_SEED)
    x = torch.randn(1, TP_HIDDEN, requires_grad=True)
    return x, lin


def run_tp_row(param, seed):
    _, tp, _overlap = param
    x, lin = tp_layer_inputs(seed)
    w0, b0 = lin.weight.detach().clone(), lin.bias.detach().clone()
    # reference: process_linear_layer
    out_ref = lin(x)
    out_ref.sum().backward()
    ref = {"out@0": enc(out_ref), "weight_grad@0": enc(lin.weight.grad), "bias_grad@0": enc(lin.bias.grad)}
    # sharded: LinearAllreduce (training mode): weight chunked along dim -1, bias replicated
    xs = torch.chunk(x.detach(), tp, dim=-1)
    ws = [nn.Parameter(c.contiguous()) for c in torch.chunk(w0, tp, dim=-1)]
    bs = [nn.Parameter(b0.clone()) for _ in range(tp)]
    partial = [torch.matmul(xs[r], ws[r].transpose(-1, -2)) for r in range(tp)]
    reduced = ring_all_reduce(partial)
    # RowParallel.backward passes the gradient through; each rank's graph: out_r = allreduce + b
    outs = []
    for r in range(tp):
        red = reduced.clone().requires_grad_(True)
        o = red + bs[r]
        o.sum().backward()
        partial[r].backward(red.grad)
        outs.append(o)
    shd = {"out@0": enc(outs[0]), "weight_grad@0": enc(torch.cat([w.grad for w in ws], dim=1)),
           "bias_grad@0": enc(bs[0].grad)}
    for r in range(1, tp):
        assert torch.equal(outs[r], outs[0]) and torch.equal(bs[r].grad, bs[0].grad)
    inputs = {"x@0": enc_full(x), "weight@init": enc(w0), "bias@init": enc(b0)}
    return {"reference": ref, "sharded": shd}, inputs, {"w": w0, "b": b0}


def run_tp_column(param, seed):
    _, tp, overlap = param
    x, lin = tp_layer_inputs(seed)
    w0, b0 = lin.weight.detach().clone(), lin.bias.detach().clone()
    out_ref = lin(x)
    out_ref.sum().backward()
    ref = {"out@0": enc(out_ref), "weight_grad@0": enc(lin.weight.grad), "bias_grad@0": enc(lin.bias.grad)}
    # sharded: LinearLayer (training mode): weight and bias chunked along dim 0
    ws = [nn.Parameter(c.contiguous()) for c in torch.chunk(w0, tp, dim=0)]
    bs = [nn.Parameter(c.contiguous()) for c in torch.chunk(b0, tp, dim=0)]
    outs = []
    for r in range(tp):
        xin = x.detach().clone().requires_grad_(True)
        if not overlap:
            # ColumnParallel.apply is the identity forward; then matmul and `output + bias`
            o = torch.matmul(xin, ws[r].transpose(-1, -2)) + bs[r]
            o.sum().backward()
        else:
            # AsyncColumnParallel: same forward ops; its hand-written backward
            o = torch.matmul(xin, ws[r].transpose(-1, -2)) + bs[r]
            g = torch.ones_like(o)
            ws[r].grad = g.view(-1, g.shape[-1]).t().matmul(xin.view(-1, xin.shape[-1]))
            bs[r].grad = g.sum(0)
        outs.append(o)
    shd = {"out@0": enc(torch.cat(outs, dim=-1)), "weight_grad@0": enc(torch.cat([w.grad for w in ws], dim=0)),
           "bias_grad@0": enc(torch.cat([b.grad for b in bs], dim=0))}
    inputs = {"x@0": enc_full(x), "weight@init": enc(w0), "bias@init": enc(b0)}
    return {"reference": ref, "sharded": shd}, inputs, {"w": w0, "b": b0}


# ---------------------------------------------------------------------------------------
# Megatron TP MLP: ColumnParallelLinear -> gelu -> RowParallelLinear
# (megatron/core/tensor_parallel/layers.py, megatron/core/transformer/mlp.py)
# ---------------------------------------------------------------------------------------

MLP_PARAMS = [("16-64-2", 16, 64, 2), ("16-64-4", 16, 64, 4)]
MLP_SEQ, MLP_BATCH, MLP_STEPS, MLP_LR, MLP_INPUT_SEED = 4, 2, 3, 0.1, 100


def mlp_init(seed, h, f):
    """torch's layer defaults in module construction order, as the language's `[init]
    scheme = "torch"`: `torch.manual_seed(seed); fc1 = nn.Linear(h, f); fc2 = nn.Linear(f, h)`.
    (Megatron itself draws its master weights with init_method_normal(0.02) and zeroes the
    biases; the block's arithmetic, which is what this scenario mirrors, does not depend on
    the init.)"""
    torch.manual_seed(seed)
    fc1 = nn.Linear(h, f)
    fc2 = nn.Linear(f, h)
    return (fc1.weight.detach().clone(), fc1.bias.detach().clone(),
            fc2.weight.detach().clone(), fc2.bias.detach().clone())


def mlp_inputs(step, h):
    torch.manual_seed(MLP_INPUT_SEED + step)
    x = torch.randn(MLP_SEQ, MLP_BATCH, h)
    target = torch.randn(MLP_SEQ, MLP_BATCH, h)
    return x, target


def mlp_run(seed, h, f, tp, rec, inputs_rec=None):
    """One training run at TP degree tp (tp = 1 is the reference: Megatron's own layers
    without model parallelism). Forward and backward written as Megatron's
    LinearWithGradAccumulationAndAsyncCommunication computes them:
    fwd `out = matmul(x, W.t())` then `out + b` (column-parallel: bias inside, per rank);
    row-parallel: `matmul(h_r, W2_r.t())`, all-reduce, then `+ b2` (autograd of an add);
    bwd `grad_input = grad_out.matmul(W)`, `grad_W = grad_out2d.t().matmul(x2d)`,
    `grad_b = grad_out2d.sum(dim=0)`; column-parallel all-reduces grad_input."""
    w1, b1, w2, b2 = mlp_init(seed, h, f)
    cols = chunk_ranges(f, tp)  # Megatron divides evenly (f % tp == 0)
    for step in range(MLP_STEPS):
        x, target = mlp_inputs(step, h)
        if inputs_rec is not None:
            inputs_rec[f"x@{step}"] = enc_full(x)
            inputs_rec[f"target@{step}"] = enc_full(target)
        x2d = x.reshape(-1, h)
        a_r, h_r, part = [], [], []
        for lo, hi in cols:
            a = torch.matmul(x, w1[lo:hi].t()) + b1[lo:hi]
            hh = F.gelu(a)
            a_r.append(a)
            h_r.append(hh)
            part.append(torch.matmul(hh, w2[:, lo:hi].contiguous().t()))
        y_ = part[0] if tp == 1 else ring_all_reduce(part)
        y = y_ + b2
        loss = F.mse_loss(y, target)
        dy = torch.ops.aten.mse_loss_backward(torch.tensor(1.0), y, target, 1)  # reduction Mean
        db2 = dy.sum(dim=(0, 1))
        dy2d = dy.reshape(-1, h)
        dx_part, dw1, db1, dw2 = [], [], [], []
        for r, (lo, hi) in enumerate(cols):
            dh = dy.matmul(w2[:, lo:hi].contiguous())
            dw2.append(dy2d.t().matmul(h_r[r].reshape(-1, hi - lo)))
            da = torch.ops.aten.gelu_backward(dh, a_r[r])
            da2d = da.reshape(-1, hi - lo)
            dx_part.append(da.matmul(w1[lo:hi]))
            dw1.append(da2d.t().matmul(x2d))
            db1.append(da2d.sum(dim=0))
        dx = dx_part[0] if tp == 1 else ring_all_reduce(dx_part)
        g_w1, g_b1, g_w2 = torch.cat(dw1, 0), torch.cat(db1, 0), torch.cat(dw2, 1)
        rec[f"out@{step}"] = enc(y)
        rec[f"loss@{step}"] = enc(loss.reshape(1))
        rec[f"input_grad@{step}"] = enc(dx)
        rec[f"fc1_weight_grad@{step}"] = enc(g_w1)
        rec[f"fc1_bias_grad@{step}"] = enc(g_b1)
        rec[f"fc2_weight_grad@{step}"] = enc(g_w2)
        rec[f"fc2_bias_grad@{step}"] = enc(db2)
        # torch.optim.SGD (single-tensor path on the CPU): p.add_(g, alpha=-lr), per rank shard
        new_w1 = []
        for r, (lo, hi) in enumerate(cols):
            p = w1[lo:hi].clone()
            p.add_(dw1[r], alpha=-MLP_LR)
            new_w1.append(p)
        new_b1 = [b1[lo:hi].clone().add_(db1[r], alpha=-MLP_LR) for r, (lo, hi) in enumerate(cols)]
        new_w2 = [w2[:, lo:hi].clone().add_(dw2[r], alpha=-MLP_LR) for r, (lo, hi) in enumerate(cols)]
        w1, b1, w2 = torch.cat(new_w1, 0), torch.cat(new_b1, 0), torch.cat(new_w2, 1)
        b2 = b2.clone().add_(db2, alpha=-MLP_LR)
        rec[f"fc1_weight@{step}"] = enc(w1)
        rec[f"fc2_weight@{step}"] = enc(w2)
        rec[f"fc2_bias@{step}"] = enc(b2)


def run_mlp(param, seed):
    _, h, f, tp = param
    ref, shd, inputs = {}, {}, {}
    mlp_run(seed, h, f, 1, ref, inputs)
    mlp_run(seed, h, f, tp, shd)
    w1, b1, w2, b2 = mlp_init(seed, h, f)
    inputs["fc1_weight@init"] = enc(w1)
    inputs["fc1_bias@init"] = enc(b1)
    inputs["fc2_weight@init"] = enc(w2)
    inputs["fc2_bias@init"] = enc(b2)
    return {"reference": ref, "sharded": shd}, inputs, None


# ---------------------------------------------------------------------------------------
# Megatron vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py)
# ---------------------------------------------------------------------------------------

CE_PARAMS = [("16-16-32-2", 16, 16, 32, 2), ("16-16-32-4", 16, 16, 32, 4)]  # tokens, hidden, vocab, tp
CE_DATA_SEED = 100


def vocab_parallel_ce(logits_parts, target):
    """Megatron's _VocabParallelCrossEntropy forward and backward, rank by rank on the ranks'
    vocab slices (`logits_parts`, each tokens x vocab/tp, contiguous), with the grad_output of
    `loss.mean()`. One part is Megatron at a model-parallel world of one (every all-reduce the
    identity). Returns the per-token loss, its mean and every rank's gradient of its slice."""
    tp = len(logits_parts)
    tokens, part = logits_parts[0].shape
    lp = [l.clone() for l in logits_parts]
    maxes = [torch.max(l, dim=-1)[0] for l in lp]
    logits_max = all_reduce_max(maxes)
    pred_parts, sum_parts, masks, mtargets = [], [], [], []
    for r in range(tp):
        lp[r] -= logits_max.unsqueeze(dim=-1)
        start, end = r * part, (r + 1) * part
        mask = (target < start) | (target >= end)
        mt = target.clone() - start
        mt[mask] = 0
        arange = torch.arange(0, tokens)
        pred = lp[r][arange, mt].clone().contiguous()
        pred[mask] = 0.0
        torch.exp(lp[r], out=lp[r])
        sum_parts.append(lp[r].sum(dim=-1))
        pred_parts.append(pred)
        masks.append(mask)
        mtargets.append(mt)
    if tp == 1:
        predicted, sum_exp = pred_parts[0], sum_parts[0]
    else:
        predicted, sum_exp = ring_all_reduce(pred_parts), ring_all_reduce(sum_parts)
    loss = torch.log(sum_exp) - predicted
    mean = loss.mean()
    grad_out = torch.ones(()).expand(tokens) / tokens  # MeanBackward0: grad.expand(...) / numel
    grads = []
    for r in range(tp):
        lp[r].div_(sum_exp.unsqueeze(dim=-1))
        arange = torch.arange(0, tokens)
        update = 1.0 - masks[r].view(-1).float()
        lp[r][arange, mtargets[r]] -= update
        lp[r].mul_(grad_out.unsqueeze(dim=-1))
        grads.append(lp[r])
    return loss, mean, grads


def run_vocab_ce(param, seed):
    """Megatron's output layer and loss: a ColumnParallelLinear head without bias
    (gather_output=False: each rank keeps its vocab slice of the logits), then
    vocab_parallel_cross_entropy and the mean over tokens. Weights from the sweep seed
    (`torch.manual_seed(seed); nn.Linear(hidden, vocab, bias=False)`), inputs after
    `torch.manual_seed(100)`: x = randn(tokens, hidden), target = randint(vocab, (tokens,)).
    Backward as Megatron's linear: grad_W = grad_out.t().matmul(x), grad_x = grad_out.matmul(W)
    summed over ranks by the column-parallel all-reduce."""
    _, tokens, hidden, vocab, tp = param
    torch.manual_seed(seed)
    head = nn.Linear(hidden, vocab, bias=False)
    w = head.weight.detach().clone()
    torch.manual_seed(CE_DATA_SEED)
    x = torch.randn(tokens, hidden)
    target = torch.randint(vocab, (tokens,))
    out = {}
    for name, t in (("reference", 1), ("sharded", tp)):
        cols = chunk_ranges(vocab, t)
        parts = [torch.matmul(x, w[lo:hi].t()) for lo, hi in cols]
        _, mean, grads = vocab_parallel_ce(parts, target)
        dw = torch.cat([g.t().matmul(x) for g in grads], 0)
        dx_parts = [g.matmul(w[lo:hi]) for g, (lo, hi) in zip(grads, cols)]
        dx = dx_parts[0] if t == 1 else ring_all_reduce(dx_parts)
        out[name] = {"logits@0": enc(torch.cat(parts, -1)), "loss@0": enc(mean.reshape(1)),
                     "head_weight_grad@0": enc(dw), "input_grad@0": enc(dx)}
    inputs = {"x@0": enc_full(x), "target@0": enc_int(target), "head_weight@init": enc(w)}
    return out, inputs, None


# ---------------------------------------------------------------------------------------
# FSDP SHARD_GRAD_OP (ZeRO-2), DP 4, gradient accumulation
# (torch/distributed/fsdp/_runtime_utils.py: _reduce_grad, _accumulate_sharded_grad;
#  test/distributed/fsdp/test_fsdp_grad_acc.py)
# ---------------------------------------------------------------------------------------

FSDP_PARAMS = [("16-32-4-2", 16, 32, 4, 2)]  # hidden, vocab, dp, micro-steps
FSDP_LOCAL, FSDP_STEPS, FSDP_LR, FSDP_MOMENTUM, FSDP_INPUT_SEED = 4, 3, 0.01, 0.9, 100


FSDP_NAMES = ["fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"]


def fsdp_model(seed, h, v):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(h, h), nn.Tanh(), nn.Linear(h, v))


def fsdp_inputs(step, micro, accum, dp, h, v):
    torch.manual_seed(FSDP_INPUT_SEED + accum * step + micro)
    x = torch.randn(dp * FSDP_LOCAL, h)
    labels = torch.randint(v, (dp * FSDP_LOCAL,))
    return x, labels


def flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors])


def run_fsdp(param, seed):
    _, h, v, dp, accum = param
    inputs = {}
    # reference: one process, the global micro-batch of all ranks, (loss / accum).backward(),
    # torch.optim.SGD(momentum=0.9) on the full parameters
    model = fsdp_model(seed, h, v)
    inputs["params@init"] = enc_full(flat([p.detach() for p in model.parameters()]))
    opt = torch.optim.SGD(model.parameters(), lr=FSDP_LR, momentum=FSDP_MOMENTUM)
    ref = {}
    for step in range(FSDP_STEPS):
        opt.zero_grad(set_to_none=True)
        for micro in range(accum):
            x, labels = fsdp_inputs(step, micro, accum, dp, h, v)
            inputs[f"x@{step}.{micro}"] = enc_full(x)
            inputs[f"labels@{step}.{micro}"] = enc_int(labels)
            loss = F.cross_entropy(model(x), labels)
            (loss / accum).backward()
        ref[f"grad@{step}"] = enc(flat([p.grad for p in model.parameters()]))
        opt.step()
        for pname, p in zip(FSDP_NAMES, model.parameters()):
            ref[f"{pname}@{step}"] = enc(p.detach())
    shd = fsdp_sharded(seed, h, v, dp, accum, sync_every_micro_step=True)
    no_sync = fsdp_sharded(seed, h, v, dp, accum, sync_every_micro_step=False)
    return {"reference": ref, "sharded": shd, "sharded_sync_at_step": no_sync}, inputs, None


def fsdp_sharded(seed, h, v, dp, accum, sync_every_micro_step):
    """FSDP2 (fully_shard) / ZeRO-2 at DP `dp`: every parameter sharded on dim 0 (rank r holds
    rows [r*n/dp, (r+1)*n/dp)); each rank runs its replica of the module (the all-gathered full
    parameters: a copy) on its rows of the global micro-batch with (loss / accum).backward().
    With `sync_every_micro_step` (FSDP's and ZeRO-2's default): after every micro-step each
    parameter's gradient is divided by the predivide factor, ring-reduce-scattered (rank c
    receives rows c, summed in the ring order of cpu-fma's all-reduce for chunk c; FSDP2 packs
    all parameters into one reduce-scatter buffer rank-major, which gives every element the same
    order), divided by the postdivide factor, and accumulated into the rank's gradient shard
    (first stored, then +=). Without it (no_sync / set_requires_gradient_sync(False) on all
    but the last micro-step, the pattern of DeepSpeed's ZeRO-1 and of DDP's no_sync): gradients
    accumulate locally (first stored, then +=) and are reduce-scattered once after the last
    micro-step. Then SGD with momentum on every shard."""
    model = fsdp_model(seed, h, v)
    full = [p.detach().clone() for p in model.parameters()]
    for p in full:
        assert p.shape[0] % dp == 0
    pre = fsdp_predivide(dp)
    post = dp / pre

    def rows(p, r):
        k = p.shape[0] // dp
        return p[r * k:(r + 1) * k]

    shards = [[rows(p, r).clone() for p in full] for r in range(dp)]
    bufs = [[None] * len(full) for _ in range(dp)]
    out = {}

    def reduce_scatter(local):  # local[r][i]: rank r's gradient of parameter i
        reduced = [[None] * len(full) for _ in range(dp)]
        for i in range(len(full)):
            parts = []
            for r in range(dp):
                g = local[r][i].clone()
                if pre > 1:
                    g.div_(pre)
                parts.append(g)
            summed = ring_all_reduce(parts)
            for r in range(dp):
                piece = rows(summed, r).clone()
                if post > 1:
                    piece.div_(post)
                reduced[r][i] = piece
        return reduced

    for step in range(FSDP_STEPS):
        saved = [[None] * len(full) for _ in range(dp)]
        local_acc = [[None] * len(full) for _ in range(dp)]
        for micro in range(accum):
            x, labels = fsdp_inputs(step, micro, accum, dp, h, v)
            params = [torch.cat([shards[r][i] for r in range(dp)]) for i in range(len(full))]
            local = []
            for r in range(dp):
                replica = fsdp_model(0, h, v)
                with torch.no_grad():
                    for p, val in zip(replica.parameters(), params):
                        p.copy_(val)
                sl = slice(r * FSDP_LOCAL, (r + 1) * FSDP_LOCAL)
                loss = F.cross_entropy(replica(x[sl]), labels[sl])
                (loss / accum).backward()
                local.append([p.grad.detach().clone() for p in replica.parameters()])
            if sync_every_micro_step:
                new = reduce_scatter(local)
                for r in range(dp):
                    for i in range(len(full)):
                        saved[r][i] = new[r][i] if saved[r][i] is None else saved[r][i].add_(new[r][i])
            else:
                for r in range(dp):
                    for i in range(len(full)):
                        g = local[r][i]
                        local_acc[r][i] = g if local_acc[r][i] is None else local_acc[r][i].add_(g)
        if not sync_every_micro_step:
            saved = reduce_scatter(local_acc)
        out[f"grad@{step}"] = enc(flat([torch.cat([saved[r][i] for r in range(dp)])
                                        for i in range(len(full))]))
        for r in range(dp):
            for i in range(len(full)):
                p = nn.Parameter(shards[r][i])
                p.grad = saved[r][i]
                o = torch.optim.SGD([p], lr=FSDP_LR, momentum=FSDP_MOMENTUM)
                if bufs[r][i] is not None:
                    o.state[p]["momentum_buffer"] = bufs[r][i]
                o.step()
                bufs[r][i] = o.state[p]["momentum_buffer"]
                shards[r][i] = p.detach()
        for i, pname in enumerate(FSDP_NAMES):
            out[f"{pname}@{step}"] = enc(torch.cat([shards[r][i] for r in range(dp)]))
    return out


# ---------------------------------------------------------------------------------------
# DeepSpeed TestRowParallelOutputHeadTraining at TP 3, uneven shards (6/6/4)
# (tests/unit/model_parallelism/test_autotp_training.py; scripts/crosscheck_torch.py::run_t2)
# ---------------------------------------------------------------------------------------

UNEVEN_PARAMS = [("16-input_shape0-lm_head-True", 16, (4,), True),
                 ("16-input_shape1-lm_head-False", 16, (2, 3), False)]
UNEVEN_V, UNEVEN_TP, UNEVEN_GRAIN, UNEVEN_STEPS, UNEVEN_ACCUM, UNEVEN_LR = 67, 3, 2, 5, 2, 0.05


def run_t2_tp(seed, hidden, shape, bias, shards, rec, inputs_rec=None):
    """T2's model and loop (crosscheck_torch.py::run_t2), the head's partial logits summed by
    the ring all-reduce over len(shards) ranks (one shard: the plain nn.Linear head)."""
    torch.manual_seed(seed)
    proj = nn.Linear(hidden, hidden)
    head = nn.Linear(hidden, UNEVEN_V, bias=bias)
    if inputs_rec is not None:
        inputs_rec["projection_weight@init"] = enc_full(proj.weight)
        inputs_rec["projection_bias@init"] = enc_full(proj.bias)
        inputs_rec["head_weight@init"] = enc_full(head.weight)
        if bias:
            inputs_rec["head_bias@init"] = enc_full(head.bias)
    opt = torch.optim.SGD(list(proj.parameters()) + list(head.parameters()), lr=UNEVEN_LR)
    for step in range(UNEVEN_STEPS):
        opt.zero_grad()
        for micro in range(UNEVEN_ACCUM):
            torch.manual_seed(100 + UNEVEN_ACCUM * step + micro)
            x = torch.randn(*shape, hidden, requires_grad=True)
            labels = torch.randint(UNEVEN_V, shape)
            if inputs_rec is not None:
                inputs_rec[f"x@{step}.{micro}"] = enc_full(x)
                inputs_rec[f"labels@{step}.{micro}"] = enc_int(labels)
            hh = torch.tanh(proj(x))
            if len(shards) > 1:
                parts = [F.linear(hh[..., lo:hi].contiguous(), head.weight[:, lo:hi].contiguous())
                         for lo, hi in shards]
                summed = RingAllReduce.apply(*parts)
                logits = summed + head.bias if bias else summed
            else:
                logits = head(hh)
            label = f"{step}.{micro}"
            rec[f"logits@{label}"] = enc(logits)
            loss = F.cross_entropy(logits.reshape(-1, UNEVEN_V), labels.reshape(-1))
            rec[f"loss@{label}"] = enc(loss.reshape(1))
            (loss / UNEVEN_ACCUM).backward()
            rec[f"input_grad@{label}"] = enc(x.grad)
            rec[f"projection_grad@{label}"] = enc(proj.weight.grad)
            rec[f"head_grad@{label}"] = enc(head.weight.grad)
            if bias:
                rec[f"bias_grad@{label}"] = enc(head.bias.grad)
        old = proj.weight.detach().clone()
        rec[f"sgd_update_expected@{step}.{UNEVEN_ACCUM - 1}"] = enc(old - UNEVEN_LR * proj.weight.grad)
        opt.step()
        rec[f"sgd_update@{step}.{UNEVEN_ACCUM - 1}"] = enc(proj.weight)
        rec[f"projection_weight@{step}"] = enc(proj.weight)
        rec[f"head_weight@{step}"] = enc(head.weight)
        if bias:
            rec[f"bias@{step}"] = enc(head.bias)


def run_uneven(param, seed):
    _, hidden, shape, bias = param
    shards = deepspeed_shards(hidden, UNEVEN_TP, UNEVEN_GRAIN)
    assert [hi - lo for lo, hi in shards] == [6, 6, 4]
    assert shards == chunk_ranges(hidden, UNEVEN_TP), "torch.chunk gives the same 6/6/4"
    ref, shd, inputs = {}, {}, {}
    run_t2_tp(seed, hidden, shape, bias, [(0, hidden)], ref, inputs)
    run_t2_tp(seed, hidden, shape, bias, shards, shd)
    return {"reference": ref, "sharded": shd}, inputs, None


# ---------------------------------------------------------------------------------------

SCENARIOS = {
    # name: (parametrizations, runner, seeds, tensors kept in full at every seed up to,
    #        first seed: the scenario file's first_seed)
    "deepspeed-tp-row-parallel": (TP_LAYER_PARAMS, run_tp_row, 2, 128, 42),
    "deepspeed-tp-column-parallel": (TP_LAYER_PARAMS, run_tp_column, 2, 128, 42),
    "megatron-tp-mlp": (MLP_PARAMS, run_mlp, 2, HEX_LIMIT, FIRST_SEED),
    "megatron-vocab-parallel-ce": (CE_PARAMS, run_vocab_ce, 2, HEX_LIMIT, FIRST_SEED),
    "fsdp-zero2-grad-acc": (FSDP_PARAMS, run_fsdp, 3, HEX_LIMIT, FIRST_SEED),
    "deepspeed-uneven-tp3-row-parallel": (UNEVEN_PARAMS, run_uneven, 2, HEX_LIMIT, FIRST_SEED),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    ap.add_argument("--out-dir", default="tests/data")
    ap.add_argument("--first-seed", type=int, help="default: each scenario file's first_seed")
    ap.add_argument("--any-capability", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX2" and not a.any_capability:
        ap.error(f"CPU capability is {cap}; run with ATEN_CPU_CAPABILITY=avx2 (cpu-fma) or pass --any-capability")
    for name in a.only or sorted(SCENARIOS):
        params, runner, n_seeds, hex_limit, first_seed = SCENARIOS[name]
        if a.first_seed is not None:
            first_seed = a.first_seed
        runs = []
        for param in params:
            for seed in range(first_seed, first_seed + n_seeds):
                comps, inputs, _ = runner(param, seed)
                for tensors in [inputs] + list(comps.values()):
                    compact(tensors, seed == first_seed, hex_limit)
                runs.append({"param": param[0], "seed": seed, "inputs": inputs, **comps})
        doc = {
            "scenario": name,
            "generator": "scripts/builtins_torch.py",
            "conditions": {
                "torch": torch.__version__,
                "cpu_capability": cap,
                "aten_cpu_capability_env": os.environ.get("ATEN_CPU_CAPABILITY"),
                "mkl": bool(torch.backends.mkl.is_available()),
                "threads": torch.get_num_threads(),
                "mode": "eager",
                "machine": platform.machine(),
                "collective_order": "ring (profile cpu-fma: src/kernels/allreduce.rs AllReduceAlgo::Ring, wire f32)",
            },
            "encoding": "hex: 8 hex digits per element (u32 bit pattern of the f32), row-major; "
                        "fnv1a64: FNV-1a 64 of the little-endian f32 bytes; values: integers",
            "runs": runs,
        }
        path = os.path.join(a.out_dir, f"builtin_{name}.json")
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        same = total = 0
        for run in runs:
            for key, t in run["reference"].items():
                s = run["sharded"].get(key)
                total += 1
                same += s is not None and s["fnv1a64"] == t["fnv1a64"]
        print(f"{path}: {len(runs)} runs, {os.path.getsize(path)} bytes; "
              f"{same}/{total} tensors identical between reference and sharded")


if __name__ == "__main__":
    main()
