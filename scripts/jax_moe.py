#!/usr/bin/env python3
"""The MaxText MoE built-in run in real JAX: a mixture-of-experts file, computed by XLA on the CPU.

Validates `configs/maxtext_moe_dense_test.toml` (and any file of the same form: one `randn`
input feeding one `op = "moe"` layer, checks on that layer's output) against JAX, the framework
of the test it mirrors (MaxText `tests/moe_test.py::RoutedMoeTest::test_dense`). For every seed
it draws seedsweep's own data (torch's generator, through scripts/torch_mirror.py's `Model`:
the router, then each expert's w1, w2, w3, then the input; seedsweep draws the same bits, see
tests/suite/moe.rs) and computes the block's forward output three ways, each under `jax.jit`
in float32 with JAX's defaults (`jax_enable_x64` off), as the test runs:

- `seedsweep`: the formulation seedsweep computes (src/ops/moe.rs): router `x @ gate`, softmax
  over all experts, `lax.top_k` of the probabilities, renormalised (`norm_topk`), every expert
  in ascending order on the rows of its tokens (gathered), its output times the token's
  weight scatter-added (`.at[tok].add`) into a zero output;
- `maxtext-loop`: MaxText's reference `MoeLoopBlock`: `lax.top_k` of the logits, softmax over
  the k chosen, every expert run on every token and weighted by `sum((selected == e) * w)`
  (0 for a token that did not choose it), accumulated in expert order;
- `maxtext-dense`: `RoutedMoE.dense_matmul` without capacity (`capacity_factor` <= 0, the
  default): einsums `BSM,EMH->BSEH` for both up projections, `silu(w0) * w1`,
  `BSEH,EHM->BSEM`, then `BSEM,BSE->BSM` with the chosen weights scattered into `[B, S, E]`.

The last two (SwiGLU experts with softmax over the chosen, which equals renormalising the
chosen probabilities in exact arithmetic) are what the real test compares: `assert
allclose(dense, loop, rtol, atol)`. The script writes that comparison per seed (max |diff|
and the usage of each of the file's policies) as evidence of what rounding the test sees: in
float32 as on the CPU, with JAX's default matmul precision on a TPU emulated (every dot and
einsum operand rounded to bfloat16, float32 accumulation, elementwise work in float32), and
the latter with the dense block's combine einsum kept in float32 (how much the combine makes).

Records per seed and formulation the FNV-1a 64 digest of the output's f32 bits (row-major)
and of the routing in seedsweep's trace encoding (per token its chosen experts ascending, then
0xFFFFFFFF; u32 little-endian words), and, for the first `--bits-seeds` seeds, the output's
f32 bit patterns (8 hex digits each). tests/suite/moe.rs compares seedsweep's
reference computation with them and asserts the measured agreement
(tests/data/moe/agreement-jax.tsv).

    /work/venv/bin/python scripts/jax_moe.py configs/maxtext_moe_dense_test.toml \\
        --seeds 200 -o tests/data/moe/maxtext_moe_dense_test.jax.json
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/jax_moe.py \\
        configs/maxtext_moe_dense_test.toml --kernels

`--kernels` says why the outputs differ: kernel by kernel, on identical f32 inputs, how many
outputs of torch's CPU kernel (seedsweep's `cpu-fma` profiles equal torch's) and of XLA's are
bit-identical, and which path ran XLA's (a YNNPACK fusion or XLA's own emitter); then what XLA's
kernels are where measured: its standalone f32 exp against Cephes' with fused multiply-adds,
and its dot's summation tree at the block's shapes on either side of the row count where it
changes.

Needs torch 2.15 (for the draws), jax 0.10.2, jaxlib 0.10.2, numpy, in one venv outside the
repo (the tests never need Python). Anything the formulations above cannot run (another layer,
a non-randn input, tp/dp, several parametrizations, MaxText's formulations on non-SwiGLU
experts) is refused with the key named; the script never approximates.
"""
import argparse
import importlib.metadata
import json
import os
import platform
import sys
import tomllib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch_mirror as tm  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_platforms", "cpu")

ACTS = {
    "silu": jax.nn.silu,
    "gelu": lambda t: jax.nn.gelu(t, approximate=False),
    "gelu-tanh": lambda t: jax.nn.gelu(t, approximate=True),
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
}


def routing_words(idx):
    """seedsweep's Trace::routing: per token its chosen experts ascending, then u32::MAX."""
    words = []
    for row in np.asarray(idx):
        words.extend(sorted(int(e) for e in row))
        words.append(0xFFFFFFFF)
    return words


class Block:
    """The file's moe layer, resolved: sizes and flags; refuses what it cannot run."""

    def __init__(self, path):
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        ps = tm.parametrizations(doc)
        if len(ps) != 1:
            raise tm.Unsupported("params: one parametrization only")
        pid, d = ps[0]
        self.model = tm.Model(path, pid, d)
        m = self.model
        if m.tp > 1 or m.dp > 1:
            raise tm.Unsupported("parallel: tp/dp (the JAX formulations here are one device)")
        if len(m.inputs) != 1 or m.inputs[0]["draw"] != "randn":
            raise tm.Unsupported("inputs: exactly one input with draw = \"randn\"")
        if len(m.layers) != 1 or m.layers[0]["op"] != "moe":
            raise tm.Unsupported("layers: exactly one layer, op = \"moe\"")
        l = m.layers[0]
        self.name = l["name"]
        if l.get("input", m.inputs[0]["name"]) != m.inputs[0]["name"]:
            raise tm.Unsupported(f"layers.{self.name}.input: the file's input")
        for c in m.checks:
            if c["tensor"] not in (self.name, self.name + ".out"):
                raise tm.Unsupported(f"checks.{c['name']}.tensor: only the moe output (forward)")
        if m.micro != 1 or m.steps < 1:
            raise tm.Unsupported("train: the first step's forward is what is recorded")
        self.k = m.ival(l["top_k"], "top_k")
        self.ne = m.ival(l["experts"], "experts")
        self.act_name = l.get("activation", "silu")
        if self.act_name not in ACTS:
            raise tm.Unsupported(f"layers.{self.name}.activation = {self.act_name!r}")
        ref_combine = l.get("reference_combine", l.get("combine", "elementwise"))
        if ref_combine != "elementwise":
            raise tm.Unsupported(f"layers.{self.name}.reference_combine = {ref_combine!r}: the "
                                 "reference computation (the one compared) must combine elementwise")
        self.gated = l.get("gated", False)
        self.norm = l.get("norm_topk", False)
        # MaxText's blocks: SwiGLU experts, softmax over the chosen (= renormalised top-k)
        self.maxtext = self.gated and self.act_name == "silu" and self.norm
        self.policies = doc.get("policies", {})
        self.file = os.path.basename(path)

    def draws(self, seed):
        """(x [B, S, H], gate [H, E], wi0 [E, H, F], wi1 [E, H, F] or None, wo [E, F, H])."""
        m = self.model
        mod = m.build_modules(seed)[self.name]
        x = m.draw_inputs(0)[m.inputs[0]["name"]]

        def f(t):
            return np.ascontiguousarray(t.detach().numpy().astype(np.float32))

        gate = f(mod.router.weight.t())
        wi0 = np.stack([f(e.w1.weight.t()) for e in mod.experts])
        wi1 = np.stack([f(e.w3.weight.t()) for e in mod.experts]) if self.gated else None
        wo = np.stack([f(e.w2.weight.t()) for e in mod.experts])
        return f(x), gate, wi0, wi1, wo


def make_jits(b):
    act = ACTS[b.act_name]

    @jax.jit
    def route(x2, gate):
        p = jax.nn.softmax(x2 @ gate, axis=-1)
        w, idx = jax.lax.top_k(p, b.k)
        if b.norm:
            w = w / jnp.sum(w, axis=-1, keepdims=True)
        return w, idx

    if b.gated:
        @jax.jit
        def expert(xe, wi0, wi1, wo):
            return (act(xe @ wi0) * (xe @ wi1)) @ wo
    else:
        @jax.jit
        def expert(xe, wi0, wi1, wo):
            return act(xe @ wi0) @ wo

    @jax.jit
    def combine(out, tok, ye, wt):
        return out.at[tok].add(ye * wt[:, None])

    def seedsweep_form(x, gate, wi0, wi1, wo):
        x2 = jnp.asarray(x.reshape(-1, x.shape[-1]))
        w, idx = route(x2, jnp.asarray(gate))
        w, idx = np.asarray(w), np.asarray(idx)
        out = jnp.zeros_like(x2)
        for e in range(b.ne):
            tok, slot = np.nonzero(idx == e)
            if len(tok) == 0:
                continue
            ye = expert(x2[tok], wi0[e], None if wi1 is None else wi1[e], wo[e])
            out = combine(out, jnp.asarray(tok), ye, jnp.asarray(w[tok, slot]))
        return np.asarray(out), idx

    def maxtext_blocks(op, combine_op=None):
        """MaxText's two blocks with every dot and einsum operand passed through `op`: the
        identity (float32, as on the CPU), or a rounding to bfloat16 (what JAX's default matmul
        precision does on a TPU: one bf16 pass, float32 accumulation; elementwise work stays
        float32); the dense block's combine einsum through `combine_op` (default `op`)."""
        cop = op if combine_op is None else combine_op

        def topk_softmax(x, gate):
            logits = op(x) @ op(gate)
            tw, sel = jax.lax.top_k(logits, b.k)
            return jax.nn.softmax(tw.astype(jnp.float32), axis=-1), sel

        @jax.jit
        def loop_block(x, gate, wi0, wi1, wo):
            tw, sel = topk_softmax(x, gate)
            acc = jnp.zeros_like(x)
            for e in range(b.ne):
                we = jnp.sum(jnp.multiply(sel == e, tw), axis=-1)
                y = op(jax.nn.silu(op(x) @ op(wi0[e])) * (op(x) @ op(wi1[e]))) @ op(wo[e])
                acc += we[:, :, None] * y
            return acc, sel

        @jax.jit
        def dense_block(x, gate, wi0, wi1, wo):
            tw, sel = topk_softmax(x, gate)
            weights = jnp.sum(jax.nn.one_hot(sel, b.ne, dtype=jnp.float32) * tw[..., None], axis=-2)
            l0 = jnp.einsum("BSM,EMH -> BSEH", op(x), op(wi0))
            l1 = jnp.einsum("BSM,EMH -> BSEH", op(x), op(wi1))
            inter = jnp.einsum("BSEH,EHM -> BSEM", op(jax.nn.silu(l0) * l1), op(wo))
            return jnp.einsum("BSEM,BSE -> BSM", cop(inter), cop(weights)), sel

        return loop_block, dense_block

    loop_block, dense_block = maxtext_blocks(lambda t: t)
    bf16 = lambda t: t.astype(jnp.bfloat16).astype(jnp.float32)  # noqa: E731
    tpu_blocks = maxtext_blocks(bf16)
    # the same with the dense block's combine in float32: how much of the difference it makes
    tpu_f32_combine = maxtext_blocks(bf16, combine_op=lambda t: t)

    return seedsweep_form, loop_block, dense_block, tpu_blocks, tpu_f32_combine


def kernels(b, seed):
    """Per kernel, on the same f32 inputs (seed `seed`'s draws, every token through expert 0):
    how many outputs of torch's CPU kernel (what seedsweep's `cpu-fma` profiles compute) and of
    XLA's under `jax.jit` are bit-identical. Tells why the block's outputs differ."""
    import torch.nn.functional as F
    x, gate, wi0, wi1, wo = b.draws(seed)
    x2 = x.reshape(-1, x.shape[-1])
    t = torch.from_numpy
    up = F.linear(t(x2), t(wi0[0]).t().contiguous())
    mid = F.silu(up) * (F.linear(t(x2), t(wi1[0]).t().contiguous()) if wi1 is not None else 1.0)
    logits = F.linear(t(x2), t(gate).t().contiguous())
    mm = jax.jit(lambda p, q: p @ q)
    cases = [
        (f"router matmul {x2.shape[0]}x{x2.shape[1]} @ {gate.shape[0]}x{gate.shape[1]}",
         logits, mm, (x2, gate)),
        (f"expert up matmul {x2.shape[0]}x{x2.shape[1]} @ {wi0.shape[1]}x{wi0.shape[2]}",
         up, mm, (x2, wi0[0])),
        (f"expert down matmul {x2.shape[0]}x{wo.shape[1]} @ {wo.shape[1]}x{wo.shape[2]}",
         F.linear(mid, t(wo[0]).t().contiguous()), mm, (mid.numpy(), wo[0])),
        ("exp (of the router logits)", torch.exp(logits), jax.jit(jnp.exp), (logits.numpy(),)),
        ("softmax (of the router logits)", torch.softmax(logits, -1),
         jax.jit(lambda z: jax.nn.softmax(z, axis=-1)), (logits.numpy(),)),
        ("silu (of the up projection)", F.silu(up), jax.jit(jax.nn.silu), (up.numpy(),)),
    ]
    for what, tv, fn, args in cases:
        a = tv.detach().numpy().astype(np.float32).view(np.uint32)
        bj = np.asarray(fn(*args), dtype=np.float32).view(np.uint32)
        # which XLA CPU path ran it: a library fusion (YNNPACK, XNNPACK, oneDNN) or XLA's own
        hlo = fn.lower(*args).compile().as_text()
        libs = sorted({k for k in ("__ynn_fusion", "__xnn_fusion", "__onednn") if k in hlo})
        path = ", ".join(libs) if libs else "XLA's own emitter"
        print(f"{what}: {int((a == bj).sum())} of {a.size} identical ({(a == bj).mean() * 100:.1f} %); "
              f"XLA: {path}")


def fma32(a, b, c):
    """fma(a, b, c) in f32 for f32 arrays: the product is exact in f64; the f64 sum then rounds
    to f32 (a double rounding that can differ from one rounding only when the f64 sum lies
    within 2^-29 ulp of an f32 midpoint, which the probes below do not meet)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def cephes_expf(x):
    """Cephes' single-precision exp (S. Moshier; the constants are Cephes' expf.c) with every
    multiply-add fused: clamp, n = floor(fma(x, log2 e, 1/2)), r = x - n·C1 - n·C2 (two FMAs),
    the degree-5 polynomial by Horner in FMAs, y = fma(p, r², r) + 1, times 2^n."""
    f = np.float32
    c = lambda v: np.full_like(x, f(v))
    xx = np.clip(x, f(-87.8), f(88.8)).astype(f)
    n = np.floor(fma32(xx, c(1.44269504088896341), c(0.5))).astype(f)
    r = fma32(n, c(-0.693359375), xx)
    r = fma32(n, c(2.12194440e-4), r)
    y = c(1.9875691500e-4)
    for p in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        y = fma32(y, r, c(p))
    y = (fma32(y, (r * r).astype(f), r) + f(1)).astype(f)
    return (y * np.exp2(n.astype(np.float64))).astype(f)


def dot_structure(m, k, n):
    """The summation tree of XLA's f32 dot `a (m x k) @ b (k x n)` under jax.jit, told apart by
    FPRev probes (scripts/reveal_order.py's method): the size of the subtree where terms p and
    q first meet, for (0, 1) and (0, 2). A sequential chain gives 2 and 3; s interleaved
    accumulators (term t in accumulator t mod s) give (k, 2) for s = 2 and (k/2, k) for
    s = 4 combined as (acc0 + acc1) + (acc2 + acc3)."""
    mm = jax.jit(lambda p, q: p @ q)
    big = np.float32(2.0 ** 40)

    def meet(p, q):
        a = np.ones((m, k), np.float32)
        a[:, p], a[:, q] = big, -big
        s = k - np.asarray(mm(a, np.ones((k, n), np.float32))).astype(np.int64)
        return int(s[0, 0]) if (s == s[0, 0]).all() else None

    got = (meet(0, 1), meet(0, 2))
    for name, want in (("one sequential chain", (2, 3)), ("2 interleaved accumulators", (k, 2)),
                       ("4 interleaved accumulators", (k // 2, k))):
        if got == want:
            return name
    return f"another tree (subtree sizes {got})"


def xla_structure(b):
    """What XLA's kernels are, where measured: its standalone f32 exp against Cephes' with
    FMAs, and its dot's summation tree at the block's shapes, below and above the row count
    where it changes (measured with this script: 51 rows at 32x112 and 112x32, 2 at 32x8)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(200_000) * 5, rng.uniform(-87, 88, 100_000)]).astype(np.float32)
    j = np.asarray(jax.jit(jnp.exp)(x)).view(np.uint32)
    same = int((cephes_expf(x).view(np.uint32) == j).sum())
    print(f"XLA's f32 exp (jax.jit(jnp.exp)) equals Cephes' expf with fused multiply-adds on "
          f"{same} of {x.size} inputs")
    h = b.model.shape_of_input(b.model.inputs[0])[-1]
    f, e = b.model.ival(b.model.layers[0]["ffn"], "ffn"), b.ne
    for m, k, n in ((1, h, e), (128, h, e), (50, h, f), (51, h, f), (50, f, h), (51, f, h)):
        print(f"XLA's dot {m}x{k} @ {k}x{n}: {dot_structure(m, k, n)}")
    # which path runs a softmax over the experts depends on the row count
    sm = jax.jit(lambda z: jax.nn.softmax(z, axis=-1))
    for rows in (128, 4096):
        hlo = sm.lower(np.zeros((rows, e), np.float32)).compile().as_text()
        path = "a YNNPACK fusion" if "__ynn_fusion" in hlo else "XLA's own emitter"
        print(f"XLA's softmax over {rows}x{e}: {path}")


def conditions():
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line
                    break
    except OSError:
        pass
    isa = [f for f in ("avx512f", "avx2", "fma") if f" {f}" in flags]
    return {
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "torch (draws only)": torch.__version__,
        "backend": jax.default_backend(),
        "x64": bool(jax.config.jax_enable_x64),
        "mode": "jit",
        "machine": platform.machine(),
        "cpu_flags": isa,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def usage(a, b, atol, rtol):
    """torch.testing / jnp.allclose usage of |a − b| <= atol + rtol·|b|, in percent."""
    return float(np.max(np.abs(a.astype(np.float64) - b) / (atol + rtol * np.abs(b.astype(np.float64)))) * 100)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first-seed", type=int, help="default: the file's first_seed")
    ap.add_argument("--bits-seeds", type=int, default=1,
                    help="store the output bits of the first N seeds (default 1)")
    ap.add_argument("-o", "--out", help="the fixture to write (required unless --kernels)")
    ap.add_argument("--kernels", action="store_true",
                    help="only compare torch's and XLA's kernels one by one on the first seed's data")
    a = ap.parse_args()
    torch.set_num_threads(1)
    try:
        b = Block(a.file)
    except tm.Unsupported as e:
        print(f"{a.file}: not run: {e}", file=sys.stderr)
        sys.exit(2)
    with open(a.file, "rb") as f:
        first = tomllib.load(f).get("first_seed", 0) if a.first_seed is None else a.first_seed
    if a.kernels:
        kernels(b, first)
        xla_structure(b)
        return
    if not a.out:
        ap.error("-o/--out is required (or --kernels)")
    seedsweep_form, loop_block, dense_block, tpu_blocks, tpu_f32_combine = make_jits(b)
    forms = ["seedsweep"] + (["maxtext-loop", "maxtext-dense"] if b.maxtext else [])
    rec = {f: {"routing_fnv1a64": [], "output_fnv1a64": [], "output_bits": {}} for f in forms}
    test = {"max_abs_diff": [], "usage": {p: [] for p in b.policies}}
    tpu = {"max_abs_diff": [], "usage": {p: [] for p in b.policies}}
    tpu_f32c = {"max_abs_diff": [], "usage": {p: [] for p in b.policies}}
    for i, seed in enumerate(range(first, first + a.seeds)):
        x, gate, wi0, wi1, wo = b.draws(seed)
        outs = {}
        outs["seedsweep"] = seedsweep_form(x, gate, jnp.asarray(wi0),
                                           None if wi1 is None else jnp.asarray(wi1), jnp.asarray(wo))
        if b.maxtext:
            args = [jnp.asarray(v) for v in (x, gate, wi0, wi1, wo)]
            for f, fn in (("maxtext-loop", loop_block), ("maxtext-dense", dense_block)):
                o, sel = fn(*args)
                outs[f] = (np.asarray(o).reshape(-1, x.shape[-1]), np.asarray(sel).reshape(-1, b.k))
        for f, (o, idx) in outs.items():
            o = np.ascontiguousarray(o, dtype=np.float32)
            words = o.reshape(-1).view(np.uint32).tolist()
            # torch_mirror.py's digest: FNV-1a 64 of the words' little-endian bytes
            rec[f]["output_fnv1a64"].append(f"{tm.fnv1a64(words):016x}")
            rec[f]["routing_fnv1a64"].append(f"{tm.fnv1a64(routing_words(idx)):016x}")
            if i < a.bits_seeds:
                rec[f]["output_bits"][str(seed)] = "".join(f"{w:08x}" for w in words)
        if b.maxtext:
            tl, td = (np.asarray(fn(*args)[0]).reshape(-1, x.shape[-1]) for fn in tpu_blocks)
            td32 = np.asarray(tpu_f32_combine[1](*args)[0]).reshape(-1, x.shape[-1])
            for rec_, (dense, loop) in ((test, (outs["maxtext-dense"][0], outs["maxtext-loop"][0])),
                                        (tpu, (td, tl)), (tpu_f32c, (td32, tl))):
                rec_["max_abs_diff"].append(float(np.max(np.abs(dense.astype(np.float64) - loop))))
                for p, pol in b.policies.items():
                    tol = pol["default"]
                    rec_["usage"][p].append(round(usage(dense, loop, tol["atol"], tol["rtol"]), 3))
        if (i + 1) % 20 == 0:
            print(f"{i + 1} seeds", file=sys.stderr)
    doc = {
        "file": b.file,
        "generator": "scripts/jax_moe.py",
        "conditions": conditions(),
        "first_seed": first,
        "seeds": a.seeds,
        "encoding": ("formulations.<f>.output_fnv1a64[i] / routing_fnv1a64[i]: seed first_seed + i, "
                     "FNV-1a 64 of the output's little-endian f32 bytes (row-major [tokens, hidden]) and "
                     "of the routing as u32 words (per token its chosen experts ascending, then "
                     "0xFFFFFFFF); output_bits[seed]: 8 hex digits per element, the u32 bit pattern of each f32 (row-major)"),
        "formulations": rec,
    }
    if b.maxtext:
        doc["test_comparison"] = {
            "what": "maxtext-dense against maxtext-loop, as test_dense asserts allclose(actual, expected)",
            **test,
        }
        doc["test_comparison_tpu_precision"] = {
            "what": ("the same comparison with every dot and einsum operand rounded to bfloat16, "
                     "float32 accumulation: JAX's default matmul precision on a TPU, emulated on the "
                     "CPU (the test's dtype float32 does not change it)"),
            **tpu,
        }
        doc["test_comparison_tpu_precision_f32_combine"] = {
            "what": ("as test_comparison_tpu_precision, with the dense block's combine einsum "
                     "(BSEM,BSE->BSM) in float32: how much of the difference the combine makes"),
            **tpu_f32c,
        }
        for what, r in (("", test), (" at TPU default precision (emulated)", tpu),
                        (" at TPU default precision, the dense combine in float32", tpu_f32c)):
            worst = {p: max(v) for p, v in r["usage"].items()}
            print(f"test_dense's own comparison{what} over {a.seeds} seeds: max |diff| "
                  f"{max(r['max_abs_diff']):.3e}, worst usage {worst}", file=sys.stderr)
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{a.file}: {a.seeds} seeds -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
