#!/usr/bin/env python3
"""The differential harness: any scenario file of the language, run in real PyTorch.

Reads a scenario file (docs/scenario-language.md) with its `[[params]]` and builds the test in
PyTorch as a test author would write it, every rank simulated in this one process:

- modules constructed in `[init] order` after `torch.manual_seed(seed)` with torch's own
  defaults (`nn.Linear`, `nn.Embedding`, `nn.LayerNorm`, `nn.RMSNorm`), a tied layer's own
  draws consumed before `head.weight = embedding.weight`;
- inputs drawn per micro-step after `torch.manual_seed(data.seed + micro_steps*s + m)`;
- the reference: the unsharded model, `F.linear` (torch's `addmm`) and friends, autograd,
  `(loss / micro_steps).backward()`, `torch.optim.*(foreach=False)`;
- the sharded computation: every rank's shard of a parameter is its own leaf tensor, sliced
  from the same initial tensor; each rank's partial is computed separately with real torch
  ops (`matmul` then `+ bias`, as Megatron's and DeepSpeed's layers write it); the
  collectives are autograd functions that sum the ranks' buffers in the order of the
  profile's collective (`cpu-fma`: the NCCL ring of src/kernels/allreduce.rs, chunk c of a
  buffer of L elements is [c*L//n, (c+1)*L//n) and is summed ((x[c+1] + x[c+2]) + ...) + x[c],
  ranks mod n, in fp32 with torch's own `+`);
- data parallelism: every rank's replica on its block of the batch, DDP's all-reduce or
  FSDP2/ZeRO-2's packed reduce-scatter with FSDP's pre- and postdivide factors; HSDP
  (`dp_replicate` x `dp_shard`, rank r*dp_shard + s): parameters sharded over dp_shard, the
  packed reduce-scatter within each shard group, then each shard all-reduced over its
  replicate group (FSDP2's foreach_reduce, torch 2.15), both in the ring order;
- `compare = "layout-vs-layout"`: the reference computation is the same test under the
  `[parallel.reference]` layout (the fixture's `reference` is that layout's simulated run).

It records what every check of the file records, per parametrization and seed, for both
computations, and writes them bit for bit (FNV-1a 64 of the f32 bytes, plus the u32 bit
patterns of every tensor up to --hex-limit elements at the first seed's first step) as one
JSON fixture. A file without tp or dp has one computation: its fixture has no `sharded`
table, and seedsweep's sharded computation is compared with `reference`.

Fixed inputs are built as the test writes them (`torch.tensor(values)`, or
`torch.range(...)` / `torch.arange(...)` with `.repeat(...)`, nothing drawn); an input sharded
on its last dim is every rank's own slice; `mul` / `add` are `a * b` / `a + b` rank by rank; a
vocab-parallel cross-entropy's per-token output is recorded as `loss.tokens`.

Where an op or option has no faithful torch counterpart (a ChaCha generator, an outer loop,
teacher draws, a float64 comparison), the script says so and stops: it never approximates
silently.

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/torch_mirror.py FILE.toml \\
        --seeds 5 --threads 1 -o fixture.json

Conditions recorded in the fixture: torch version, CPU capability, MKL, thread count, eager.
"""
import argparse
import copy
import json
import math
import os
import platform
import struct
import sys
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F


ALL_HEX = False  # --all-hex: bit patterns at every seed and step


class Unsupported(Exception):
    """A key or option this harness cannot run faithfully in torch."""


# ---------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------

def u32s(t):
    t = t.detach().contiguous().to(torch.float32).reshape(-1)
    return [v & 0xFFFFFFFF for v in t.view(torch.int32).tolist()]


def fnv1a64(words):
    h = 0xCBF29CE484222325
    for w in words:
        for b in struct.pack("<I", w):
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def enc(t, hex_limit):
    words = u32s(t)
    out = {"shape": list(t.shape), "fnv1a64": f"{fnv1a64(words):016x}"}
    if len(words) <= hex_limit:
        out["hex"] = "".join(f"{w:08x}" for w in words)
    return out


# ---------------------------------------------------------------------------------------
# the file: dims, params, defaults
# ---------------------------------------------------------------------------------------

LAYER_KEYS = {"name", "op", "input", "inputs", "parallel", "attr", "out", "bias", "tie", "num",
              "dim", "padding_idx", "eps", "affine", "heads", "causal", "scale", "theta",
              "style", "experts", "top_k", "ffn", "activation", "gated", "norm_topk", "expert_parallel",
              "combine", "reference_combine"}
TABLES = ("parallel", "train", "loss", "data", "init")


def resolve_int(v, dims, what):
    if isinstance(v, bool):
        raise Unsupported(f"{what}: a boolean where an integer is expected")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        if v not in dims:
            raise Unsupported(f"{what}: unknown dim {v!r}")
        d = dims[v]
        if isinstance(d, list):
            raise Unsupported(f"{what}: list dim {v!r} where one integer is needed")
        return d
    raise Unsupported(f"{what}: {v!r} is not an integer or a dim")


def resolve_shape(shape, dims, what):
    out = []
    for s in shape:
        if isinstance(s, str) and isinstance(dims.get(s), list):
            out.extend(dims[s])
        else:
            out.append(resolve_int(s, dims, what))
    return out


def parametrizations(doc):
    """[(id, resolved file dict)] for every [[params]] entry (or one `default`)."""
    entries = doc.get("params") or [{"id": "default"}]
    out = []
    for entry in entries:
        d = copy.deepcopy(doc)
        d.pop("params", None)
        dims = dict(d.get("dims", {}))
        layers = {l["name"]: l for l in d.get("layers", [])}
        inputs = {i["name"]: i for i in d.get("inputs", [])}
        checks = {c["name"]: c for c in d.get("checks", [])}
        for key, val in entry.items():
            if key == "id":
                continue
            if key in dims:
                dims[key] = val
            elif key in layers:
                layers[key].update(val)
            elif key in inputs:
                inputs[key].update(val)
            elif key in TABLES:
                d.setdefault(key, {}).update(val)
            elif key == "checks":
                for cname, kv in val.items():
                    checks[cname].update(kv)
            else:
                raise Unsupported(f"params[{entry['id']}].{key}: names nothing")
        d["dims"] = dims
        out.append((entry["id"], d))
    return out


def shard_ranges(total, n, rule, grain):
    """The shard rule (src/scenario/shard.rs): DeepSpeed's near-even rule in grains, or
    Megatron's equal split."""
    if rule == "megatron":
        if total % n:
            raise Unsupported(f"megatron shard rule: {total} does not split over {n}")
        s = total // n
        return [(r * s, (r + 1) * s) for r in range(n)]
    grains = total // grain
    out, start = [], 0
    for r in range(n):
        size = (grains // n + (1 if r < grains % n else 0)) * grain
        if r + 1 == n:
            size += total - grains * grain
        out.append((start, start + size))
        start += size
    return out


# ---------------------------------------------------------------------------------------
# collectives in the profile's order (cpu-fma: the ring)
# ---------------------------------------------------------------------------------------

def ring_all_reduce(parts):
    """NCCL ring all-reduce of equal-shape fp32 tensors (src/kernels/allreduce.rs `Ring`)."""
    n = len(parts)
    if n == 1:
        return parts[0].detach().clone()
    shape = parts[0].shape
    flat = [p.detach().contiguous().reshape(-1) for p in parts]
    length = flat[0].numel()
    out = torch.empty(length, dtype=torch.float32)
    for c in range(n):
        lo, hi = c * length // n, (c + 1) * length // n
        if lo == hi:
            continue
        s = flat[(c + 1) % n][lo:hi].clone()
        for t in range(2, n + 1):
            s = s + flat[(c + t) % n][lo:hi]
        out[lo:hi] = s
    return out.reshape(shape)


def ring_reduce_rows(parts, rows):
    """Reduce-scatter over the ranks' token rows: the rows of rank c (`rows[c]`, of dim 0 of
    the flattened [tokens, width] buffers) are summed in the ring order of chunk c, from rank
    c+1 around to rank c. Returns the whole summed tensor."""
    n = len(parts)
    shape = parts[0].shape
    flat = [p.detach().contiguous().reshape(-1, shape[-1]) for p in parts]
    out = torch.empty_like(flat[0])
    for c, (lo, hi) in enumerate(rows):
        s = flat[(c + 1) % n][lo:hi].clone()
        for t in range(2, n + 1):
            s = s + flat[(c + t) % n][lo:hi]
        out[lo:hi] = s
    return out.reshape(shape)


class AllReduce(torch.autograd.Function):
    """Megatron's reduce_from_tensor_model_parallel_region / DeepSpeed's RowParallel: forward
    sums the ranks' partials in ring order, backward hands the gradient to every rank."""

    @staticmethod
    def forward(ctx, *parts):
        ctx.n = len(parts)
        return ring_all_reduce(parts)

    @staticmethod
    def backward(ctx, g):
        return tuple(g for _ in range(ctx.n))


class ReduceScatterRows(torch.autograd.Function):
    """The row-parallel reduce-scatter before a sequence-parallel norm (summed per token rows
    in their owner's ring order); backward: the all-gather, every rank the whole gradient."""

    @staticmethod
    def forward(ctx, rows, *parts):
        ctx.n = len(parts)
        return ring_reduce_rows(parts, rows)

    @staticmethod
    def backward(ctx, g):
        return (None,) + tuple(g for _ in range(ctx.n))


class CopyToRanks(torch.autograd.Function):
    """Megatron's copy_to_tensor_model_parallel_region / DeepSpeed's ColumnParallel: every
    rank gets the input (identity), backward all-reduces the ranks' input gradients."""

    @staticmethod
    def forward(ctx, n, x):
        return tuple(x.clone() for _ in range(n))

    @staticmethod
    def backward(ctx, *gs):
        gs = [torch.zeros(()) if g is None else g for g in gs]
        return None, ring_all_reduce(gs)


class ScatterLast(torch.autograd.Function):
    """Megatron's scatter_to_tensor_model_parallel_region: forward splits the last dim into
    the ranks' shards, backward all-gathers (a copy)."""

    @staticmethod
    def forward(ctx, ranges, x):
        return tuple(x[..., lo:hi].contiguous() for lo, hi in ranges)

    @staticmethod
    def backward(ctx, *gs):
        return None, torch.cat(gs, dim=-1)


# ---------------------------------------------------------------------------------------
# a value flowing through the graph: whole, or sharded on its last dim or its rows
# ---------------------------------------------------------------------------------------

class GatherLast(torch.autograd.Function):
    """Megatron's gather_from_tensor_model_parallel_region: forward all-gathers the ranks'
    last-dim shards (a copy); backward hands each rank its own slice of the gradient as a
    contiguous tensor (`_split_along_last_dim`: `.contiguous()`), not a strided view of the
    whole (torch.cat's backward), which ATen's reductions would sum in another order."""

    @staticmethod
    def forward(ctx, *parts):
        ctx.widths = [p.shape[-1] for p in parts]
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, g):
        out, lo = [], 0
        for w in ctx.widths:
            out.append(g[..., lo:lo + w].contiguous())
            lo += w
        return tuple(out)


class MoeExpert(nn.Module):
    """One expert: w1 (hidden -> ffn), w2 (ffn -> hidden), gated w3 (hidden -> ffn), no
    biases, constructed in that order (Mixtral's block-sparse MLP)."""

    def __init__(self, h, f, gated):
        super().__init__()
        self.w1 = nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)
        if gated:
            self.w3 = nn.Linear(h, f, bias=False)


class MoeModule(nn.Module):
    """The router nn.Linear(hidden, experts, bias=False), then the experts in order."""

    def __init__(self, h, ne, f, gated):
        super().__init__()
        self.router = nn.Linear(h, ne, bias=False)
        self.experts = nn.ModuleList([MoeExpert(h, f, gated) for _ in range(ne)])


class Sharded:
    """Per-rank tensors of one activation, split on `dim` (-1: features, 0: token rows) by
    `ranges`."""

    def __init__(self, parts, ranges, dim):
        self.parts, self.ranges, self.dim = list(parts), ranges, dim

    def whole(self):
        if self.dim == -1:
            return GatherLast.apply(*self.parts)
        shape = self.parts[0].shape
        return torch.cat([p.reshape(-1, shape[-1]) for p in self.parts], 0)


def view_whole(v):
    return v.whole() if isinstance(v, Sharded) else v


# ---------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------

class Model:
    """One parametrization, resolved."""

    def __init__(self, file, pid, d):
        self.file, self.pid, self.d = file, pid, d
        dims = d["dims"]
        self.dims = dims
        if d.get("rng", "torch") != "torch":
            raise Unsupported("rng: only \"torch\" has a torch counterpart (ChaCha streams are seedsweep's own)")
        if d.get("compare", "sharded-vs-ref") not in ("sharded-vs-ref", "layout-vs-layout"):
            raise Unsupported("compare: only \"sharded-vs-ref\" and \"layout-vs-layout\" (float64 constants are not a torch computation)")
        if "outer" in d.get("train", {}):
            raise Unsupported("train.outer: an outer loop is a JAX test (not run by this torch harness)")
        par = d.get("parallel", {})
        self.tp = par.get("tp", 1)
        # HSDP: dp_replicate x dp_shard ranks (seedsweep has checked that dp agrees).
        self.rep = par.get("dp_replicate", 1)
        self.dp = self.rep * par["dp_shard"] if "dp_shard" in par else par.get("dp", 1)
        self.rule = par.get("shard_rule", "deepspeed")
        self.grain = par.get("tp_grain", 1)
        self.zero = par.get("zero_stage", 0)
        self.grad_sync = par.get("grad_sync", "micro-step" if self.zero >= 2 else "step")
        if self.tp > 1 and self.dp > 1:
            raise Unsupported("parallel: tp and dp together (refused by seedsweep too)")
        self.data_seed = d.get("data", {}).get("seed", 0)
        # A file without parameters may leave [train] out: one step of forward and loss.
        tr = d.get("train", {"steps": 1, "optimizer": "sgd", "lr": 1.0})
        self.steps = tr["steps"]
        self.micro = tr.get("micro_steps", 1)
        self.opt = tr["optimizer"]
        self.lr = tr["lr"]
        self.tr = tr
        self.inputs = []
        for i in d.get("inputs", []):
            if i["draw"] not in ("randn", "randint", "fixed"):
                raise Unsupported(f"inputs.{i['name']}.draw = {i['draw']!r}: only randn, randint and fixed")
            self.inputs.append(i)
        self.layers = d.get("layers", [])
        self.ep = max([self.ival(l.get("expert_parallel", 1), "expert_parallel")
                       for l in self.layers if l.get("op") == "moe"] or [1])
        # a moe layer whose reference combines otherwise: two computations even unsharded
        self.two_combines = any(
            l.get("reference_combine", l.get("combine", "elementwise")) != l.get("combine", "elementwise")
            for l in self.layers if l.get("op") == "moe")
        for l in self.layers:
            for k in l:
                if k not in LAYER_KEYS:
                    raise Unsupported(f"layers.{l['name']}.{k}: unknown to this harness")
        self.by_name = {l["name"]: l for l in self.layers}
        self.loss = d["loss"]
        self.init = d.get("init", {})
        if self.init.get("scheme", "torch") != "torch":
            raise Unsupported("init.scheme: only \"torch\"")
        self.checks = d.get("checks", [])

    # -- sizes --------------------------------------------------------------------------

    def shape_of_input(self, i):
        return resolve_shape(i["shape"], self.dims, f"inputs.{i['name']}.shape")

    def ival(self, v, what):
        return resolve_int(v, self.dims, what)

    # -- init -----------------------------------------------------------------------------

    def build_modules(self, seed):
        """torch.manual_seed(seed), then the modules in init order with torch's defaults.
        Returns {layer: module} (norms included; activations have none) and the widths."""
        widths = {}
        for i in self.inputs:
            shp = self.shape_of_input(i)
            widths[i["name"]] = shp[-1] if shp else 1
        mods = {}
        # in-features: walk the layers in forward order
        specs = {}
        prev = None
        for l in self.layers:
            src = l.get("input", prev)
            op = l["op"]
            if op == "embedding":
                num, dim = self.ival(l["num"], "num"), self.ival(l["dim"], "dim")
                pad = l.get("padding_idx")
                specs[l["name"]] = ("embedding", num, dim, None if pad is None else self.ival(pad, "padding_idx"))
                widths[l["name"]] = dim
            elif op == "linear":
                k = widths[src]
                n = self.ival(l["out"], "out")
                specs[l["name"]] = ("linear", k, n, l.get("bias", True))
                widths[l["name"]] = n
            elif op in ("layernorm", "rmsnorm"):
                k = widths[src]
                eps = l.get("eps", 1e-5 if op == "layernorm" else 1e-6)
                specs[l["name"]] = (op, k, eps, l.get("affine", True))
                widths[l["name"]] = k
            elif op in ("residual-add", "add", "mul"):
                a, b = l["inputs"]
                widths[l["name"]] = widths[a]
            elif op == "sdpa":
                widths[l["name"]] = widths[l["inputs"][0]]
            elif op == "moe":
                k = widths[src]
                specs[l["name"]] = ("moe", k, self.ival(l["experts"], "experts"),
                                    self.ival(l["ffn"], "ffn"), l.get("gated", False))
                widths[l["name"]] = k
            else:
                widths[l["name"]] = widths[src]
            prev = l["name"]
        self.widths = widths
        with_weights = [l["name"] for l in self.layers if l["op"] in ("embedding", "linear", "layernorm", "rmsnorm", "moe")]
        order = self.init.get("order", with_weights)
        torch.manual_seed(seed)
        for name in order:
            s = specs[name]
            if s[0] == "embedding":
                mods[name] = nn.Embedding(s[1], s[2], padding_idx=s[3])
            elif s[0] == "linear":
                mods[name] = nn.Linear(s[1], s[2], bias=s[3])
            elif s[0] == "moe":
                mods[name] = MoeModule(s[1], s[2], s[3], s[4])
            elif s[0] == "layernorm":
                mods[name] = nn.LayerNorm(s[1], eps=s[2], elementwise_affine=s[3])
            else:
                mods[name] = nn.RMSNorm(s[1], eps=s[2], elementwise_affine=s[3])
        for l in self.layers:
            if l.get("tie"):
                mods[l["name"]].weight = mods[l["tie"]].weight
        return mods

    # -- inputs ---------------------------------------------------------------------------

    def draw_inputs(self, gm):
        torch.manual_seed(self.data_seed + gm)
        vals = {}
        for i in self.inputs:
            shp = self.shape_of_input(i)
            if i["draw"] == "randn":
                vals[i["name"]] = torch.randn(*shp)
            elif i["draw"] == "fixed":
                # torch.tensor(values) draws nothing: the generator is not advanced
                vals[i["name"]] = self.fixed_tensor(i, shp)
            else:
                vals[i["name"]] = torch.randint(self.ival(i["high"], "high"), tuple(shp))
        for i in self.inputs:
            for fix in i.get("set", []):
                v = fix["value"]
                if isinstance(v, str) and "." in v:
                    layer, key = v.split(".", 1)
                    v = self.by_name[layer].get(key)
                    if v is None:
                        continue
                v = self.ival(v, "set.value")
                vals[i["name"]][tuple(fix["index"])] = v
        return vals

    def fixed_tensor(self, i, shp):
        """`values` as the test writes them: a list (`torch.tensor(values)`, int64 when every
        number is an integer, else float32; `dtype` overrides), or a generator
        (`torch.range(start, end, step).repeat(*r)`, `torch.arange(...).repeat(*r)`). With
        `per_rank` the values are every TP rank's own shard of the last dim: the global tensor
        is the shard repeated over the ranks, `torch.cat([local] * tp, -1)`."""
        v = i["values"]
        dtype = {"float32": torch.float32, "int64": torch.int64}.get(i.get("dtype"))
        if isinstance(v, dict):
            if "range" in v:
                t = torch.range(*v["range"])  # float32, the end included (deprecated, as tests write it)
            else:
                t = torch.arange(*v["arange"])
            if "repeat" in v:
                t = t.repeat(*v["repeat"])
            if dtype is not None:
                t = t.to(dtype)
        else:
            t = torch.tensor(v, dtype=dtype)
        if i.get("per_rank"):
            t = torch.cat([t.reshape(*shp[:-1], -1)] * self.tp, -1)
        return t.reshape(shp).contiguous()

    # -- checks ---------------------------------------------------------------------------

    def check_at(self, c):
        kind = c.get("kind", "value")
        t = c["tensor"]
        if "at" in c:
            return c["at"]
        if kind == "sgd-update":
            return "update"
        if self.is_param(t) or (t.endswith(".grad") and self.is_param(t[:-5])):
            return "step"
        return "micro-step"

    def is_param(self, t):
        parts = t.split(".")
        if len(parts) >= 3 and parts[0] in self.by_name and self.by_name[parts[0]].get("op") == "moe":
            # a moe layer's router.weight or experts.<e>.<w1|w2|w3>.weight
            return parts[1:] == ["router", "weight"] or (
                len(parts) == 5 and parts[1] == "experts" and parts[3] in ("w1", "w2", "w3")
                and parts[4] == "weight")
        return len(parts) == 2 and parts[0] in self.by_name and parts[1] in ("weight", "bias")

    def label(self, at, s, m):
        if at in ("micro-step", "update") and self.micro > 1:
            return f"{s}.{m}"
        return f"{s}"


class Run:
    """One computation (reference or sharded) of one seed."""

    def __init__(self, model, seed, sharded, hex_limit, first=True):
        self.m, self.seed, self.sharded, self.hex_limit = model, seed, sharded, hex_limit
        self.first = first
        self.rec = {}

    # -- parameters -------------------------------------------------------------------------

    def setup_params(self):
        m = self.m
        mods = m.build_modules(self.seed)
        self.mods = mods
        tp = m.tp if self.sharded else 1
        self.tpn = tp
        # params: name -> leaf tensors per rank (or one), with how they combine for checks
        self.leaves = {}   # "layer.weight" -> (list of leaves, dim for cat or None if single)
        self.layer_ranges = {}
        tied_to = {l["name"]: l["tie"] for l in m.layers if l.get("tie")}
        self.tied_to = tied_to
        for l in m.layers:
            name, op = l["name"], l["op"]
            par = l.get("parallel", "none")
            if name not in mods:
                continue
            mod = mods[name]
            if name in tied_to:
                continue  # uses its table's leaves
            if op == "moe":
                ep = self.m.ival(l.get("expert_parallel", 1), "expert_parallel") if self.sharded else 1
                r = mod.router.weight.detach().clone()
                # expert parallelism: every rank its own router replica, its gradients
                # all-reduced over the ranks (the "replicas" of after_backward)
                self.leaves[name + ".router.weight"] = (
                    [r.clone().requires_grad_() for _ in range(ep)], "replicas" if ep > 1 else None)
                for e, ex in enumerate(mod.experts):
                    for j in ("w1", "w2", "w3"):
                        lin = getattr(ex, j, None)
                        if lin is not None:
                            self.leaves[f"{name}.experts.{e}.{j}.weight"] = (
                                [lin.weight.detach().clone().requires_grad_()], None)
                continue
            w = mod.weight.detach().clone() if getattr(mod, "weight", None) is not None else None
            b = mod.bias.detach().clone() if getattr(mod, "bias", None) is not None else None
            if tp > 1 and op == "linear" and par in ("column", "column-gather"):
                rg = shard_ranges(w.shape[0], tp, m.rule, m.grain)
                self.layer_ranges[name] = rg
                self.leaves[name + ".weight"] = ([w[lo:hi].clone().requires_grad_() for lo, hi in rg], 0)
                if b is not None:
                    self.leaves[name + ".bias"] = ([b[lo:hi].clone().requires_grad_() for lo, hi in rg], 0)
            elif tp > 1 and op == "linear" and par == "row":
                rg = shard_ranges(w.shape[1], tp, m.rule, m.grain)
                self.layer_ranges[name] = rg
                self.leaves[name + ".weight"] = ([w[:, lo:hi].clone().requires_grad_() for lo, hi in rg], 1)
                if b is not None:
                    self.leaves[name + ".bias"] = ([b.clone().requires_grad_()], None)
            elif tp > 1 and op == "embedding" and par == "vocab":
                rg = shard_ranges(w.shape[0], tp, m.rule, m.grain)
                self.layer_ranges[name] = rg
                self.leaves[name + ".weight"] = ([w[lo:hi].clone().requires_grad_() for lo, hi in rg], 0)
            elif tp > 1 and op == "embedding" and par == "column-gather":
                rg = shard_ranges(w.shape[1], tp, m.rule, m.grain)
                self.layer_ranges[name] = rg
                self.leaves[name + ".weight"] = ([w[:, lo:hi].clone().requires_grad_() for lo, hi in rg], 1)
            elif tp > 1 and op in ("layernorm", "rmsnorm") and par == "sequence":
                # every rank its own copy; the partial gradients are all-reduced over tp
                if w is not None:
                    self.leaves[name + ".weight"] = ([w.clone().requires_grad_() for _ in range(tp)], "replicas")
                if b is not None:
                    self.leaves[name + ".bias"] = ([b.clone().requires_grad_() for _ in range(tp)], "replicas")
            else:
                if w is not None:
                    self.leaves[name + ".weight"] = ([w.clone().requires_grad_()], None)
                if b is not None:
                    self.leaves[name + ".bias"] = ([b.clone().requires_grad_()], None)
        for name, table in tied_to.items():
            mod = mods[name]
            if getattr(mod, "bias", None) is not None:
                self.leaves[name + ".bias"] = ([mod.bias.detach().clone().requires_grad_()], None)
        self.opt_params = []
        for key, (ls, how) in self.leaves.items():
            self.opt_params.extend(ls[:1] if how == "replicas" else ls)

    def param_value(self, key):
        key = self.resolve_tied(key)
        if key not in self.leaves:
            return None  # an optional check on a parameter this parametrization lacks
        ls, how = self.leaves[key]
        if how is None or how == "replicas":
            return ls[0].detach()
        return torch.cat([t.detach() for t in ls], how)

    def param_grad(self, key):
        key = self.resolve_tied(key)
        if key not in self.leaves:
            return None
        ls, how = self.leaves[key]
        if how is None or how == "replicas":
            g = ls[0].grad
            if g is None and ".experts." in key:
                # an expert no token chose: torch leaves .grad None; seedsweep records zeros
                return torch.zeros_like(ls[0])
            return None if g is None else g.detach()
        if any(t.grad is None for t in ls):
            return None
        return torch.cat([t.grad.detach() for t in ls], how)

    def resolve_tied(self, key):
        layer, what = key.split(".", 1)
        if what == "weight" and layer in self.tied_to:
            return self.tied_to[layer] + ".weight"
        return key

    def weight_for(self, layer, r=None):
        """The weight (rank r's shard) a layer computes with."""
        key = self.resolve_tied(layer + ".weight")
        ls, how = self.leaves[key]
        own = layer + ".weight" == key
        if not own:
            # a tied layer: slices of its table's (single) leaf
            w = ls[0] if how is None else torch.cat(ls, how)
            if r is None:
                return w
            par = self.m.by_name[layer].get("parallel", "none")
            lo, hi = self.layer_ranges_for(layer, w)[r]
            return w[lo:hi] if par in ("column", "column-gather") else w[:, lo:hi]
        if r is None:
            return ls[0]
        return ls[0] if how is None else ls[r]

    def layer_ranges_for(self, layer, w):
        if layer not in self.layer_ranges:
            par = self.m.by_name[layer].get("parallel", "none")
            total = w.shape[0] if par in ("column", "column-gather") else w.shape[1]
            self.layer_ranges[layer] = shard_ranges(total, self.tpn, self.m.rule, self.m.grain)
        return self.layer_ranges[layer]

    def bias_for(self, layer, r=None):
        key = layer + ".bias"
        if key not in self.leaves:
            return None
        ls, how = self.leaves[key]
        if r is None or how is None:
            return ls[0]
        return ls[r]

    # -- forward ----------------------------------------------------------------------------

    def forward(self, vals, acts):
        """Runs the layers on `vals` (inputs), filling `acts` (name -> value)."""
        m = self.m
        tp = self.tpn
        prev = None
        env = dict(vals)
        for i in m.inputs:
            if i.get("parallel", "none") == "last-dim" and tp > 1:
                # every rank's own tensor: its shard of the last dim, as the test builds it
                x = vals[i["name"]]
                rg = shard_ranges(x.shape[-1], tp, m.rule, m.grain)
                env[i["name"]] = Sharded([x[..., lo:hi].clone() for lo, hi in rg], rg, -1)
        for li, l in enumerate(m.layers):
            name, op = l["name"], l["op"]
            par = l.get("parallel", "none")
            src = l.get("input", prev)
            x = env.get(src) if op not in ("residual-add", "add", "mul", "sdpa") else None
            if op == "embedding":
                ids = x
                pad = self.mods[name].padding_idx
                if tp > 1 and par == "vocab":
                    rg = self.layer_ranges[name]
                    parts = []
                    for r, (lo, hi) in enumerate(rg):
                        mask = (ids < lo) | (ids >= hi)
                        mids = ids.clone() - lo
                        mids[mask] = 0
                        # The padding row stays the padding row of the rank that holds it
                        # (its gradient is zero there, as in the unsharded embedding).
                        lpad = pad - lo if pad is not None and lo <= pad < hi else None
                        o = F.embedding(mids, self.weight_for(name, r), padding_idx=lpad)
                        o = o.masked_fill(mask.unsqueeze(-1), 0.0)
                        parts.append(o)
                    y = AllReduce.apply(*parts)
                elif tp > 1 and par == "column-gather":
                    parts = [F.embedding(ids, self.weight_for(name, r), padding_idx=pad) for r in range(tp)]
                    y = GatherLast.apply(*parts)
                else:
                    y = F.embedding(ids, self.weight_for(name), padding_idx=pad)
            elif op == "linear":
                y = self.linear(l, name, par, x, li)
            elif op in ("tanh", "gelu", "gelu-tanh", "relu", "silu"):
                fn = {"tanh": torch.tanh, "gelu": F.gelu,
                      "gelu-tanh": lambda t: F.gelu(t, approximate="tanh"),
                      "relu": F.relu, "silu": F.silu}[op]
                if isinstance(x, Sharded):
                    y = Sharded([fn(p) for p in x.parts], x.ranges, x.dim)
                else:
                    y = fn(x)
            elif op in ("layernorm", "rmsnorm"):
                y = self.norm(l, name, op, par, x)
            elif op == "sdpa":
                y = self.sdpa(l, name, [env[t] for t in l["inputs"]])
            elif op == "rope":
                y = self.rope(l, name, x)
            elif op == "softmax":
                if isinstance(x, Sharded):
                    raise Unsupported(f"layers.{name}: a softmax on a sharded input")
                y = F.softmax(x, -1)
            elif op == "moe":
                if isinstance(x, Sharded):
                    raise Unsupported(f"layers.{name}: a moe layer on a sharded input")
                y = self.moe(l, name, x)
            elif op in ("residual-add", "add", "mul"):
                # `a + b` / `a * b` as the test writes it (SwiGLU: `F.silu(gate(x)) * up(x)`),
                # rank by rank on sharded operands.
                fn = (lambda p, q: p * q) if op == "mul" else (lambda p, q: p + q)
                a, b = (env[t] for t in l["inputs"])
                if isinstance(a, Sharded) or isinstance(b, Sharded):
                    if not (isinstance(a, Sharded) and isinstance(b, Sharded) and a.ranges == b.ranges and a.dim == b.dim):
                        raise Unsupported(f"layers.{name}: {op} of differently sharded tensors")
                    y = Sharded([fn(p, q) for p, q in zip(a.parts, b.parts)], a.ranges, a.dim)
                else:
                    y = fn(a, b)
            else:
                raise Unsupported(f"layers.{name}.op = {op!r}")
            env[name] = y
            acts[name] = y
            prev = name
        return env

    def linear(self, l, name, par, x, li):
        tp = self.tpn
        if tp > 1 and par in ("column", "column-gather", "row"):
            rg = self.layer_ranges_for(name, self.weight_for(name))
        if tp > 1 and par in ("column", "column-gather"):
            if isinstance(x, Sharded):
                if x.dim != 0:
                    raise Unsupported(f"layers.{name}: a column layer on a feature-sharded input")
                x = x.whole()  # sequence parallelism: all-gather the token rows (a copy)
            xs = CopyToRanks.apply(tp, x)
            parts = []
            for r in range(tp):
                o = torch.matmul(xs[r], self.weight_for(name, r).t())
                b = self.bias_for(name, r)
                if b is not None:
                    o = o + b
                parts.append(o)
            y = Sharded(parts, rg, -1)
            if par == "column-gather":
                y = y.whole()
            return y
        if tp > 1 and par == "row":
            if isinstance(x, Sharded) and x.dim == -1:
                if x.ranges != rg:
                    raise Unsupported(f"layers.{name}: a row layer whose input was split differently")
                xs = x.parts
            else:
                x = view_whole(x)
                xs = ScatterLast.apply(rg, x)
            parts = [torch.matmul(xs[r], self.weight_for(name, r).t()) for r in range(tp)]
            nxt = self.next_consumer(li)
            if nxt is not None and nxt.get("op") in ("layernorm", "rmsnorm") and nxt.get("parallel") == "sequence":
                rows = self.token_ranges(parts[0])
                y = ReduceScatterRows.apply(rows, *parts)
            else:
                y = AllReduce.apply(*parts)
            b = self.bias_for(name)
            if b is not None:
                y = y + b
            return y
        x = view_whole(x)
        return F.linear(x, self.weight_for(name), self.bias_for(name))

    def moe(self, l, name, x):
        """The mixture-of-experts layer as src/ops/moe.rs describes it: router F.linear,
        softmax, torch.topk, optional renormalisation, every expert (ascending) on its tokens
        gathered with x[tok], and out.index_add_ of the weighted outputs. Under expert
        parallelism (sharded computation) each rank routes its own token block with its own
        router replica, on its own copy of its rows (`.clone()`: a rank holds its block as
        its own tensor; MKL's product of a slice at an offset into the whole batch can round
        differently); the all-to-alls move rows without arithmetic (the f32 wire)."""
        m = self.m
        k = m.ival(l["top_k"], "top_k")
        ne = m.ival(l["experts"], "experts")
        gated = l.get("gated", False)
        act = {"tanh": torch.tanh, "gelu": F.gelu,
               "gelu-tanh": lambda t: F.gelu(t, approximate="tanh"),
               "relu": F.relu, "silu": F.silu}[l.get("activation", "silu")]
        ep = m.ival(l.get("expert_parallel", 1), "expert_parallel") if self.sharded else 1
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        routers = self.leaves[name + ".router.weight"][0]
        if ep > 1:
            rg = shard_ranges(x2.shape[0], ep, m.rule, 1)
            logits = torch.cat([F.linear(x2[lo:hi].clone(), routers[r]) for r, (lo, hi) in enumerate(rg)], 0)
        else:
            logits = F.linear(x2, routers[0])
        probs = F.softmax(logits, -1)
        w, idx = torch.topk(probs, k, dim=-1)
        if l.get("norm_topk", False):
            w = w / w.sum(-1, keepdim=True)
        combine = l.get("combine", "elementwise")
        if not self.sharded:
            combine = l.get("reference_combine", combine)
        out = torch.zeros_like(x2)
        if combine == "einsum":
            # MaxText's dense combine: every expert's output [T, E, H] (zero rows where a
            # token did not choose it) and the weights [T, E] (zero there), one einsum
            ys = torch.zeros(x2.shape[0], ne, x2.shape[1])
            ws = torch.zeros(x2.shape[0], ne)
        for e in range(ne):
            tok, slot = torch.where(idx == e)
            if tok.numel() == 0:
                continue
            xe = x2[tok]
            w1 = self.leaves[f"{name}.experts.{e}.w1.weight"][0][0]
            w2 = self.leaves[f"{name}.experts.{e}.w2.weight"][0][0]
            hcur = act(F.linear(xe, w1))
            if gated:
                w3 = self.leaves[f"{name}.experts.{e}.w3.weight"][0][0]
                hcur = hcur * F.linear(xe, w3)
            ye = F.linear(hcur, w2)
            if combine == "einsum":
                ys = ys.index_put((tok, torch.full_like(tok, e)), ye)
                ws = ws.index_put((tok, torch.full_like(tok, e)), w[tok, slot])
                continue
            out.index_add_(0, tok, ye * w[tok, slot].unsqueeze(-1))
        if combine == "einsum":
            out = torch.einsum("teh,te->th", ys, ws)
        return out.reshape(shape)

    def sdpa(self, l, name, qkv):
        """F.scaled_dot_product_attention in torch's MATH backend (the default CPU backend is
        the flash kernel, which seedsweep does not model) on [batch, seq, heads*head_dim]
        tensors, with the head reshape/transpose a model writes around it; head-sharded when
        q, k and v are column-parallel outputs (each rank attends with its own heads)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        heads = self.m.ival(l["heads"], "heads")
        causal = l.get("causal", False)
        scale = l.get("scale")
        width = (qkv[0].parts[0] if isinstance(qkv[0], Sharded) else qkv[0]).shape[-1]
        if isinstance(qkv[0], Sharded):
            width = sum(hi - lo for lo, hi in qkv[0].ranges)
        d = width // heads

        def attend(q, k, v):
            b, s, w = q.shape
            h = w // d
            q4, k4, v4 = (t.reshape(b, s, h, d).transpose(1, 2) for t in (q, k, v))
            with sdpa_kernel(SDPBackend.MATH):
                o = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal, scale=scale)
            return o.transpose(1, 2).reshape(b, s, w)

        if any(isinstance(t, Sharded) for t in qkv):
            if not all(isinstance(t, Sharded) and t.dim == -1 and t.ranges == qkv[0].ranges for t in qkv):
                raise Unsupported(f"layers.{name}: q, k, v sharded differently")
            return Sharded([attend(*ps) for ps in zip(*(t.parts for t in qkv))], qkv[0].ranges, -1)
        return attend(*qkv)

    def rope(self, l, name, x):
        """Rotary embeddings as HF Llama writes them: fp32 tables from
        `inv_freq = 1.0 / (theta ** (arange(0, dim, 2).float() / dim))`, `outer(t, inv_freq)`,
        `cat((freqs, freqs), -1)`, `.cos()`, `.sin()` (positions 0..seq), then
        `(q * cos) + (rotate_half(q) * sin)` on the [batch, seq, heads, head_dim] view;
        rank by rank on a head-sharded (column-parallel) input."""
        if l.get("style", "half") != "half":
            raise Unsupported(f"layers.{name}.style = {l['style']!r}")
        heads = self.m.ival(l["heads"], "heads")
        theta = l.get("theta", 10000.0)
        if isinstance(x, Sharded):
            if x.dim != -1:
                raise Unsupported(f"layers.{name}: rope on a sequence-sharded input")
            width, seq = sum(hi - lo for lo, hi in x.ranges), x.parts[0].shape[1]
        else:
            width, seq = x.shape[-1], x.shape[1]
        d = width // heads
        inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

        def rotate_half(t):
            t1 = t[..., : t.shape[-1] // 2]
            t2 = t[..., t.shape[-1] // 2 :]
            return torch.cat((-t2, t1), dim=-1)

        def apply(t):
            b, s, w = t.shape
            q = t.reshape(b, s, w // d, d)
            return ((q * cos) + (rotate_half(q) * sin)).reshape(b, s, w)

        if isinstance(x, Sharded):
            return Sharded([apply(p) for p in x.parts], x.ranges, -1)
        return apply(x)

    def next_consumer(self, li):
        name = self.m.layers[li]["name"]
        for j in range(li + 1, len(self.m.layers)):
            l = self.m.layers[j]
            srcs = l.get("inputs") or [l.get("input", self.m.layers[j - 1]["name"])]
            if name in srcs:
                return l
        return None

    def token_ranges(self, t):
        """Megatron's sequence parallelism splits axis 0 (the sequence of its [s, b, h]
        layout) by the shard rule; as ranges of the rows of the flattened [tokens, width]."""
        inner = t.numel() // (t.shape[0] * t.shape[-1]) if t.dim() > 1 else 1
        return [(lo * inner, hi * inner)
                for lo, hi in shard_ranges(t.shape[0], self.tpn, self.m.rule, self.m.grain)]

    def norm(self, l, name, op, par, x):
        tp = self.tpn
        mod = self.mods[name]
        eps = mod.eps

        def apply(t, w, b):
            if op == "layernorm":
                return F.layer_norm(t, (t.shape[-1],), w, b, eps)
            return F.rms_norm(t, (t.shape[-1],), w, eps)

        if tp > 1 and par == "sequence":
            x = view_whole(x)
            width = x.shape[-1]
            x2 = x.reshape(-1, width)
            rows = self.token_ranges(x)
            parts = []
            for r, (lo, hi) in enumerate(rows):
                w = self.leaves[name + ".weight"][0][r] if name + ".weight" in self.leaves else None
                b = self.leaves[name + ".bias"][0][r] if name + ".bias" in self.leaves else None
                parts.append(apply(x2[lo:hi], w, b))
            # all-gather of the ranks' rows (a copy), back to the input's shape
            return torch.cat(parts, 0).reshape(x.shape)
        if isinstance(x, Sharded):
            raise Unsupported(f"layers.{name}: a norm on a sharded input")
        w = self.leaves[name + ".weight"][0][0] if name + ".weight" in self.leaves else None
        b = self.leaves[name + ".bias"][0][0] if name + ".bias" in self.leaves else None
        return apply(x, w, b)

    # -- loss -------------------------------------------------------------------------------

    def loss(self, env, vals):
        m = self.m
        lo = m.loss
        src = lo.get("input") or m.layers[-1]["name"]
        y = env[src]
        op = lo["op"]
        par = lo.get("parallel", "none")
        if op == "cross-entropy" and par == "vocab":
            # Megatron's vocab-parallel cross-entropy; the unsharded computation runs the same
            # function at a model-parallel world of one (every all-reduce the identity).
            if self.tpn > 1 and (not isinstance(y, Sharded) or y.dim != -1):
                raise Unsupported("loss.parallel = vocab on unsharded logits")
            if not isinstance(y, Sharded):
                y = Sharded([y], [(0, y.shape[-1])], -1)
            labels = vals[lo["labels"]]
            per_token = VocabParallelCE.apply(labels.reshape(-1), y.ranges,
                                              *[p.reshape(-1, p.shape[-1]) for p in y.parts])
            self.token_losses = per_token.reshape(labels.shape)
            return per_token.mean(), True
        if op == "cross-entropy":
            y = view_whole(y)
            labels = vals[lo["labels"]]
            return F.cross_entropy(y.reshape(-1, y.shape[-1]), labels.reshape(-1)), True
        if op == "mse":
            y = view_whole(y)
            return F.mse_loss(y, vals[lo["target"]]), True
        if op == "sum":
            if isinstance(y, Sharded):
                total = None
                for p in y.parts:
                    s = p.sum()
                    total = s if total is None else total + s
                return total, False
            return y.sum(), False
        raise Unsupported(f"loss.op = {op!r}")

    # -- one training run -----------------------------------------------------------------

    def record(self, cname, label, t):
        if t is None:
            return
        # bit patterns for the first seed's first step; digests for everything
        limit = self.hex_limit if (ALL_HEX or (self.first and label.split(".")[0] == "0")) else 0
        self.rec[f"{cname}@{label}"] = enc(t.detach().reshape(t.shape), limit)

    def run(self):
        m = self.m
        if self.sharded and m.dp > 1:
            return self.run_dp()
        self.setup_params()
        opt = make_optimizer(m, self.opt_params)
        checks = m.checks
        for s in range(m.steps):
            for p in self.opt_params:
                p.grad = None
            for p in self.all_leaves():
                p.grad = None
            olds = {}
            for mi in range(m.micro):
                vals = m.draw_inputs(s * m.micro + mi)
                for i in m.inputs:
                    if i.get("grad"):
                        vals[i["name"]].requires_grad_(True)
                acts = {}
                env = self.forward(vals, acts)
                for name, v in acts.items():
                    for t in (v.parts if isinstance(v, Sharded) else [v]):
                        if t.requires_grad:
                            t.retain_grad()
                loss, valued = self.loss(env, vals)
                last = mi + 1 == m.micro
                for c in checks:
                    at = m.check_at(c)
                    t = c["tensor"]
                    if at == "step" and not last:
                        continue
                    if t == "loss":
                        self.record(c["name"], m.label(at, s, mi), loss.reshape(1))
                    elif t == "loss.tokens":
                        # the function's output, before the test's `.mean()`
                        self.record(c["name"], m.label(at, s, mi), self.token_losses)
                    elif t in acts:
                        self.record(c["name"], m.label(at, s, mi), view_whole(acts[t]))
                    elif t.endswith(".out") and t[:-4] in acts:
                        self.record(c["name"], m.label(at, s, mi), view_whole(acts[t[:-4]]))
                self.before_backward()
                if loss.requires_grad:  # a loss on fixed inputs alone has nothing to differentiate
                    (loss / m.micro if m.micro > 1 else loss).backward()
                self.after_backward()
                for c in checks:
                    at = m.check_at(c)
                    t = c["tensor"]
                    if not t.endswith(".grad") or (at == "step" and not last):
                        continue
                    base = t[:-5]
                    if m.is_param(base):
                        self.record(c["name"], m.label(at, s, mi), self.param_grad(base))
                    elif base in vals:
                        self.record(c["name"], m.label(at, s, mi), vals[base].grad)
                    else:
                        layer = base[:-4] if base.endswith(".out") else base
                        v = acts.get(layer)
                        if v is None:
                            continue
                        gs = [t.grad for t in (v.parts if isinstance(v, Sharded) else [v])]
                        if any(g is None for g in gs):
                            continue
                        self.record(c["name"], m.label(at, s, mi),
                                    Sharded(gs, v.ranges, v.dim).whole() if isinstance(v, Sharded) else gs[0])
                if last:
                    for c in checks:
                        if c.get("kind") == "sgd-update":
                            olds[c["name"]] = self.param_value(c["tensor"]).clone()
            opt.step()
            self.after_step()
            for c in checks:
                at = m.check_at(c)
                t = c["tensor"]
                if m.is_param(t):
                    label = m.label(at, s, m.micro - 1)
                    self.record(c["name"], label, self.param_value(t))
                    if c.get("kind") == "sgd-update" and c["name"] in olds:
                        g = self.param_grad(t)
                        self.record(c["name"] + "_expected", label, olds[c["name"]] - m.lr * g)
        return self.rec

    def all_leaves(self):
        for ls, _ in self.leaves.values():
            yield from ls

    def before_backward(self):
        """Sequence-parallel norms: each rank's replica starts the backward without a
        gradient, so that after it `.grad` holds this micro-step's partial alone."""
        self.sp_acc = {}
        for key, (ls, how) in self.leaves.items():
            if how == "replicas":
                self.sp_acc[key] = ls[0].grad
                for t in ls:
                    t.grad = None

    def after_backward(self):
        """Sequence-parallel norms: the ranks' partial weight gradients of this micro-step are
        all-reduced over tp, then accumulated (first stored, then `acc + g`)."""
        for key, (ls, how) in self.leaves.items():
            if how != "replicas":
                continue
            red = ring_all_reduce([t.grad for t in ls])
            acc = self.sp_acc.get(key)
            acc = red if acc is None else acc + red
            for t in ls:
                t.grad = acc.clone()

    def after_step(self):
        for key, (ls, how) in self.leaves.items():
            if how == "replicas":
                with torch.no_grad():
                    for t in ls[1:]:
                        t.copy_(ls[0])

    # -- data parallelism ---------------------------------------------------------------------

    def run_dp(self):
        m = self.m
        dp = m.dp
        self.setup_params()  # tp is 1: single leaves
        names = list(self.leaves)
        full = {k: self.leaves[k][0][0].detach().clone() for k in names}
        zero = m.zero
        # FSDP's divide factors from the whole data-parallel size (HSDP: shard x replicate)
        pre = fsdp_predivide(dp) if zero >= 2 else 1.0
        post = dp / pre
        # HSDP: parameters sharded over the shard group of nshard ranks
        nshard = dp // m.rep
        # the shards (zero >= 2) or the whole parameters (the optimizer steps identical copies)
        if zero >= 2:
            chunks = {k: chunk_rows(full[k].shape[0], nshard) for k in names}
            shards = {k: [full[k][lo:hi].clone().requires_grad_() for lo, hi in chunks[k]] for k in names}
            opt_params = [t for k in names for t in shards[k] if t.numel() > 0]
        else:
            whole = {k: full[k].clone().requires_grad_() for k in names}
            opt_params = list(whole.values())
        opt = make_optimizer(m, opt_params)
        batch = m.shape_of_input(m.inputs[0])[0]
        rows = shard_ranges(batch, dp, m.rule, m.grain)

        def current():
            if zero >= 2:
                return {k: torch.cat([t.detach() for t in shards[k]], 0) for k in names}
            return {k: whole[k].detach() for k in names}

        for s in range(m.steps):
            saved = {k: [None] * nshard for k in names} if zero >= 2 else None
            local_acc = [dict() for _ in range(dp)]
            for p in opt_params:
                p.grad = None
            for mi in range(m.micro):
                vals = m.draw_inputs(s * m.micro + mi)
                params = current()
                last = mi + 1 == m.micro
                losses, acts_r, local = [], [], []
                for r, (lo, hi) in enumerate(rows):
                    # Each rank owns its batch (its own allocation, as on its own process),
                    # not a view into the others' rows.
                    rv = {k: v[lo:hi].clone() for k, v in vals.items()}
                    rep = Run(m, self.seed, False, self.hex_limit)
                    rep.mods = self.mods
                    rep.tpn = 1
                    rep.tied_to = self.tied_to
                    rep.layer_ranges = {}
                    rep.leaves = {k: ([params[k].clone().requires_grad_()], None) for k in names}
                    acts = {}
                    env = rep.forward(rv, acts)
                    loss, _ = rep.loss(env, rv)
                    (loss / m.micro if m.micro > 1 else loss).backward()
                    losses.append(loss.detach().reshape(1))
                    acts_r.append(acts)
                    # an expert no token of this rank chose has no .grad: DDP (with
                    # find_unused_parameters) reduces zeros for it, as seedsweep does
                    local.append({k: (rep.leaves[k][0][0].grad.detach().clone()
                                      if rep.leaves[k][0][0].grad is not None
                                      else torch.zeros_like(rep.leaves[k][0][0]))
                                  for k in names})
                # forward checks
                for c in m.checks:
                    at = m.check_at(c)
                    t = c["tensor"]
                    if at == "step" and not last:
                        continue
                    if t == "loss":
                        self.record(c["name"], m.label(at, s, mi), ring_all_reduce(losses) / dp)
                    else:
                        layer = t[:-4] if t.endswith(".out") else t
                        if layer in acts_r[0]:
                            self.record(c["name"], m.label(at, s, mi),
                                        torch.cat([view_whole(a[layer]).detach() for a in acts_r], 0))
                if zero >= 2 and m.grad_sync == "micro-step":
                    if m.rep > 1:
                        red = hsdp_reduce(local, names, chunks, m.rep, nshard, pre, post)
                    else:
                        red = reduce_scatter_packed(local, names, chunks, dp, pre, post)
                    for k in names:
                        for r in range(nshard):
                            saved[k][r] = red[k][r] if saved[k][r] is None else saved[k][r] + red[k][r]
                else:
                    for r in range(dp):
                        for k in names:
                            g = local[r][k]
                            local_acc[r][k] = g if k not in local_acc[r] else local_acc[r][k] + g
            if zero >= 2:
                if m.grad_sync != "micro-step":
                    if m.rep > 1:
                        saved = hsdp_reduce(local_acc, names, chunks, m.rep, nshard, pre, post)
                    else:
                        saved = reduce_scatter_packed(local_acc, names, chunks, dp, pre, post)
                for k in names:
                    for r in range(nshard):
                        shards[k][r].grad = saved[k][r]
            else:
                for k in names:
                    parts = [local_acc[r][k] / dp for r in range(dp)]
                    whole[k].grad = ring_all_reduce(parts)
                for c in m.checks:
                    t = c["tensor"]
                    if t.endswith(".grad") and m.is_param(t[:-5]):
                        key = self.resolve_tied(t[:-5])
                        self.record(c["name"], m.label(m.check_at(c), s, m.micro - 1), whole[key].grad)
            opt.step()
            cur = current()
            for c in m.checks:
                t = c["tensor"]
                if m.is_param(t):
                    self.record(c["name"], m.label(m.check_at(c), s, m.micro - 1), cur[self.resolve_tied(t)])
        return self.rec


def chunk_rows(rows, n):
    """FSDP2's shard of dim 0: rows c*ceil(rows/n) .. for rank c (torch.chunk, padded)."""
    size = -(-rows // n)
    return [(min(c * size, rows), min((c + 1) * size, rows)) for c in range(n)]


def fsdp_predivide(world):
    """FSDP's _get_gradient_predivide_factor."""
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return float(factor)


def reduce_scatter_packed(local, names, chunks, dp, pre, post):
    """FSDP2's reduce-scatter: every rank's gradients divided by `pre`, packed rank-major
    (block c: shard c of every parameter in order, zero-padded to ceil(rows/dp) rows), summed
    by the ring all-reduce on the packed buffer (so block c is summed in chunk c's order),
    divided by `post`. Returns {param: [shard per rank]}."""
    packed = []
    for r in range(dp):
        pieces = []
        for k in names:
            g = local[r][k]
            if pre > 1:
                g = g / pre
            rows = g.shape[0]
            size = -(-rows // dp)
            row_len = g[0].numel() if rows else 0
            for c in range(dp):
                lo, hi = chunks[k][c]
                piece = torch.zeros(size * row_len)
                piece[: (hi - lo) * row_len] = g[lo:hi].reshape(-1)
                pieces.append((c, piece))
        # rank-major: block c holds shard c of every parameter
        blocks = [torch.cat([p for c2, p in pieces if c2 == c]) for c in range(dp)]
        packed.append(torch.cat(blocks))
    total = ring_all_reduce(packed)
    out = {k: [None] * dp for k in names}
    pos = 0
    for c in range(dp):
        for k in names:
            lo, hi = chunks[k][c]
            rows = hi - lo
            shape = list(local[0][k].shape)
            row_len = math.prod(shape[1:]) if len(shape) > 1 else 1
            size = -(-shape[0] // dp) * row_len
            piece = total[pos:pos + rows * row_len].clone().reshape([rows] + shape[1:])
            if post > 1:
                piece = piece / post
            out[k][c] = piece
            pos += size
    return out


def hsdp_reduce(local, names, chunks, rep, nshard, pre, post):
    """FSDP2's HSDP reduction (torch 2.15 foreach_reduce): every rank's gradients divided by
    `pre` and packed in `nshard` blocks (block c: shard c of every parameter, zero-padded to
    ceil(rows/nshard) rows); each shard group r (ranks r*nshard ..) sums its packed buffers
    by the ring all-reduce (block c in chunk c's order: the reduce-scatter); then every
    shard c is all-reduced over its replicate group (block c of each group's result, in
    group order, the ring's chunks of that block), and divided by `post`.
    Returns {param: [shard per shard rank]}."""
    packed = []
    for g in range(rep * nshard):
        blocks = []
        for c in range(nshard):
            pieces = []
            for k in names:
                grad = local[g][k]
                if pre > 1:
                    grad = grad / pre
                rows = grad.shape[0]
                size = -(-rows // nshard)
                row_len = grad[0].numel() if rows else 0
                lo, hi = chunks[k][c]
                piece = torch.zeros(size * row_len)
                piece[: (hi - lo) * row_len] = grad[lo:hi].reshape(-1)
                pieces.append(piece)
            blocks.append(torch.cat(pieces))
        packed.append(torch.cat(blocks))
    groups = [ring_all_reduce(packed[r * nshard:(r + 1) * nshard]) for r in range(rep)]
    block = groups[0].numel() // nshard
    total = torch.empty(nshard * block, dtype=torch.float32)
    for c in range(nshard):
        total[c * block:(c + 1) * block] = ring_all_reduce(
            [groups[r][c * block:(c + 1) * block] for r in range(rep)])
    out = {k: [None] * nshard for k in names}
    pos = 0
    for c in range(nshard):
        for k in names:
            lo, hi = chunks[k][c]
            rows = hi - lo
            shape = list(local[0][k].shape)
            row_len = math.prod(shape[1:]) if len(shape) > 1 else 1
            size = -(-shape[0] // nshard) * row_len
            piece = total[pos:pos + rows * row_len].clone().reshape([rows] + shape[1:])
            if post > 1:
                piece = piece / post
            out[k][c] = piece
            pos += size
    return out


class VocabParallelCE(torch.autograd.Function):
    """Megatron's _VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py),
    rank by rank on the ranks' vocab slices: max, sum-exp and target logit all-reduced (max
    exactly, the sums in ring order). Returns the per-token loss."""

    @staticmethod
    def forward(ctx, target, ranges, *parts):
        lp = [p.detach().clone() for p in parts]
        maxes = [torch.max(l, dim=-1)[0] for l in lp]
        logits_max = maxes[0].clone()
        for mx in maxes[1:]:
            logits_max = torch.maximum(logits_max, mx)
        tokens = lp[0].shape[0]
        preds, sums, masks, mts = [], [], [], []
        for r, (lo, hi) in enumerate(ranges):
            lp[r] -= logits_max.unsqueeze(dim=-1)
            mask = (target < lo) | (target >= hi)
            mt = target.clone() - lo
            mt[mask] = 0
            ar = torch.arange(0, tokens)
            pred = lp[r][ar, mt].clone().contiguous()
            pred[mask] = 0.0
            torch.exp(lp[r], out=lp[r])
            sums.append(lp[r].sum(dim=-1))
            preds.append(pred)
            masks.append(mask)
            mts.append(mt)
        predicted, sum_exp = ring_all_reduce(preds), ring_all_reduce(sums)
        loss = torch.log(sum_exp) - predicted
        for r in range(len(lp)):
            lp[r].div_(sum_exp.unsqueeze(dim=-1))
        ctx.save = (lp, masks, mts)
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        lp, masks, mts = ctx.save
        grads = []
        tokens = lp[0].shape[0]
        for r in range(len(lp)):
            g = lp[r].clone()
            ar = torch.arange(0, tokens)
            update = 1.0 - masks[r].view(-1).float()
            g[ar, mts[r]] -= update
            g.mul_(grad_out.unsqueeze(dim=-1))
            grads.append(g)
        return (None, None) + tuple(grads)


class NoParams:
    """A model without parameters: nothing to step (torch.optim refuses an empty list)."""

    def step(self):
        pass


def make_optimizer(m, params):
    if not params:
        return NoParams()
    tr = m.tr
    o = m.opt
    wd = tr.get("weight_decay", 0.01 if o == "adamw" else 0.0)
    if o == "sgd":
        return torch.optim.SGD(params, lr=m.lr, weight_decay=wd, foreach=False)
    if o in ("momentum", "nesterov"):
        return torch.optim.SGD(params, lr=m.lr, momentum=tr.get("momentum", 0.9),
                               dampening=tr.get("dampening", 0.0), nesterov=o == "nesterov",
                               weight_decay=wd, foreach=False)
    if o in ("adam", "adamw"):
        cls = torch.optim.Adam if o == "adam" else torch.optim.AdamW
        return cls(params, lr=m.lr, betas=tuple(tr.get("betas", [0.9, 0.999])),
                   eps=tr.get("eps", 1e-8), weight_decay=wd, foreach=False)
    raise Unsupported(f"train.optimizer = {o!r}")


# ---------------------------------------------------------------------------------------

def conditions(threads):
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability_env": os.environ.get("ATEN_CPU_CAPABILITY"),
        "mkl": bool(torch.backends.mkl.is_available()),
        "threads": threads,
        "mode": "eager",
        "machine": platform.machine(),
        "collective_order": "ring (profile cpu-fma: src/kernels/allreduce.rs, wire f32)",
    }


def mirror(path, seeds, first_seed, threads, hex_limit):
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    torch.set_num_threads(threads)
    runs = []
    fs = doc.get("first_seed", 0) if first_seed is None else first_seed
    for pid, d in parametrizations(doc):
        model = Model(path, pid, d)
        # layout-vs-layout: the reference is the test under [parallel.reference] (its shard
        # rule and grain those of [parallel])
        par = d.get("parallel", {})
        ref_model = None
        if d.get("compare") == "layout-vs-layout":
            rd = copy.deepcopy(d)
            rp = dict(par.get("reference", {}))
            for k in ("shard_rule", "tp_grain"):
                if k in par:
                    rp[k] = par[k]
            rd["parallel"] = rp
            ref_model = Model(path, pid, rd)
        for seed in range(fs, fs + seeds):
            first = seed == fs
            if ref_model is not None:
                sharded_ref = ref_model.tp > 1 or ref_model.dp > 1
                ref = Run(ref_model, seed, sharded_ref, hex_limit, first).run()
            else:
                ref = Run(model, seed, False, hex_limit, first).run()
            run = {"param": pid, "seed": seed, "reference": ref}
            if model.tp > 1 or model.dp > 1 or model.ep > 1 or model.two_combines:
                run["sharded"] = Run(model, seed, True, hex_limit, first).run()
            # else one computation: the sharded one is the reference (written once)
            runs.append(run)
    return runs


def compact(doc, hex_limit):
    """The fixture's stored form: per parametrization, the sorted tensor keys once
    (`keys`); per run and computation, the keys' FNV-1a 64 digests concatenated in that order
    (16 hex digits each); and the bit patterns (`bits`: key -> 8 hex digits per element) of
    the tensors that have them and hold at most `hex_limit` elements."""
    keys = {}
    out_runs = []
    for r in doc["runs"]:
        comps = {c: r[c] for c in ("reference", "sharded") if c in r}
        ks = sorted(comps["reference"])
        prev = keys.setdefault(r["param"], ks)
        if prev != ks:
            raise SystemExit(f"{doc['file']}: seeds of {r['param']} record different tensors")
        run = {"param": r["param"], "seed": r["seed"]}
        for c, tensors in comps.items():
            if sorted(tensors) != ks:
                raise SystemExit(f"{doc['file']}: {c} records other tensors than reference")
            run[c] = "".join(tensors[k]["fnv1a64"] for k in ks)
            bits = {k: t["hex"] for k, t in tensors.items()
                    if "hex" in t and len(t["hex"]) // 8 <= hex_limit}
            if bits:
                run[c + "_bits"] = bits
        out_runs.append(run)
    doc = dict(doc)
    doc["keys"] = keys
    doc["runs"] = out_runs
    doc["encoding"] = ("keys[param]: the tensors `check@label` in sorted order; runs[].reference / "
                       ".sharded: their FNV-1a 64 digests (of the little-endian f32 bytes, 16 hex "
                       "digits each) concatenated in that order; runs[].<comp>_bits: key -> 8 hex "
                       "digits per element (the u32 bit pattern, row-major) for the tensors that keep "
                       "them (the first seed's step 0, at most --stored-bits elements); no `sharded`: "
                       "the computation is the reference")
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, help="default: the file's first_seed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hex-limit", type=int, default=4096)
    ap.add_argument("--stored-bits", type=int, default=64,
                    help="keep bit patterns of tensors up to this many elements (default 64)")
    ap.add_argument("-o", "--out", help="the fixture (one file given), else FILE.torch<T>.json beside each")
    ap.add_argument("--all-hex", action="store_true", help="bit patterns at every seed and step")
    ap.add_argument("--any-capability", action="store_true")
    a = ap.parse_args()
    global ALL_HEX
    ALL_HEX = a.all_hex
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX2" and not a.any_capability:
        ap.error(f"CPU capability is {cap}; run with ATEN_CPU_CAPABILITY=avx2 (cpu-fma) or pass --any-capability")
    if a.out and len(a.files) != 1:
        ap.error("-o takes one file")
    status = 0
    for path in a.files:
        try:
            runs = mirror(path, a.seeds, a.first_seed, a.threads, a.hex_limit)
        except Unsupported as e:
            print(f"{path}: not run: {e}", file=sys.stderr)
            status = 2
            continue
        doc = {"file": os.path.basename(path), "generator": "scripts/torch_mirror.py",
               "conditions": conditions(a.threads), "runs": runs}
        doc = compact(doc, a.stored_bits)
        out = a.out or os.path.splitext(path)[0] + f".torch{a.threads}.json"
        with open(out, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print(f"{path}: {len(runs)} runs -> {out}")
    sys.exit(status)


if __name__ == "__main__":
    main()
