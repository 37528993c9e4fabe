#!/usr/bin/env python3
"""Writes the conformance probes: one tiny scenario file per op (and per shape or option that
changes its kernel), with nothing upstream of the op but drawn inputs, so that torch and
seedsweep feed the op bit-identical operands and every difference is the op's own. Beside
them, `probes.tsv` maps every (file, check) to its row of the table: op, direction.
`tests/suite/conformance.rs` compares seedsweep with the probes' torch fixtures and writes
the table docs/conformance.md.

Regenerate everything (probes, torch fixtures at 1 and 2 threads, the table):

    python3 scripts/conformance_probes.py --out tests/data/conformance
    for t in 1 2; do ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/torch_mirror.py \\
        tests/data/conformance/*.toml --seeds 5 --threads $t --all-hex --stored-bits 4096; done
    SEEDSWEEP_BLESS_CORPUS=1 cargo test --release --test suite conformance::

Backward rows take their upstream gradient from a loss whose own backward row is in the
table (MSE's), so a backward row is the op's own only where that row is exact.
"""
import argparse
import os

HEAD = 'default_profiles = ["cpu-fma+mkl-threads-1"]\nfirst_seed = 1\n'


class Probes:
    def __init__(self):
        self.files = {}
        self.rows = []

    def add(self, name, body, checks):
        """checks: [(check name, tensor, op, direction)]"""
        name = name.replace(" + ", "-plus-").replace(" ", "-")
        text = f'name = "{name}"\n{HEAD}{body}'
        for c, t, op, d in checks:
            text += f'\n[[checks]]\nname = "{c}"\ntensor = "{t}"\n'
            self.rows.append((name, c, op, d))
        self.files[name] = text


def linear(p, m, k, n, bias):
    b = "true" if bias else "false"
    shape = f"{m}x{k}x{n}"
    checks = [("out", "fc.out", f"linear {shape}" + (" + bias" if bias else ""), "forward")]
    checks += [("x_grad", "x.grad", f"linear {shape}", "backward (input)"),
               ("w_grad", "fc.weight.grad", f"linear {shape}", "backward (weight)")]
    if bias:
        checks.append(("b_grad", "fc.bias.grad", f"linear {shape}", "backward (bias)"))
    p.add(f"linear-{shape}-{'bias' if bias else 'nobias'}", f'''
dims = {{ m = {m}, k = {k}, n = {n} }}
inputs = [{{ name = "x", draw = "randn", shape = ["m", "k"], grad = true }}]
layers = [{{ name = "fc", op = "linear", input = "x", out = "n", bias = {b} }}]
loss = {{ op = "sum" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
''', checks)


def elementwise(p, op, extra="", rows=8, width=37, label=None, suffix=None, steps=1, params=True):
    """params: the op's weight (and bias) gradients are checked (layernorm and rmsnorm with
    their default affine weights)."""
    label = label or op
    suffix = suffix if suffix is not None else (extra and '-' + extra.split('=')[0].strip())
    p.add(f"op-{op}{'-' + str(width) if width != 37 else ''}{suffix}", f'''
dims = {{ rows = {rows}, width = {width} }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["rows", "width"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["rows", "width"] }},
]
layers = [{{ name = "a", op = "{op}", input = "x"{extra} }}]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = {steps}, optimizer = "sgd", lr = 0.1 }}
''', [("out", "a.out", label, "forward")]
        # MSE's own rows only from the probe whose op is exact (relu): elsewhere its input is
        # the op's output, whose differences are the op's
        + ([("loss", "loss", "mse loss", "forward (value)"), ("dy", "a.out.grad", "mse loss", "backward")]
           if op == "relu" else [])
        + [("x_grad", "x.grad", label, "backward (input)")]
        + ([("w_grad", "a.weight.grad", label, "backward (weight)")]
           if params and op in ("layernorm", "rmsnorm") else [])
        + ([("b_grad", "a.bias.grad", label, "backward (bias)")] if params and op == "layernorm" else []))


def rmsnorm(p, name, label, rows, width, extra="", residual=False):
    """An rmsnorm probe beyond `elementwise`'s: other row counts, eps, no weight, or the norm
    inside a residual add (x's gradient then has three parts: the add's and the norm's two)."""
    layers = f'{{ name = "a", op = "rmsnorm", input = "x"{extra} }}'
    checks = [("out", "a.out", label, "forward")]
    if residual:
        layers += ',\n  { name = "r", op = "residual-add", inputs = ["x", "a"] }'
        checks = []
    checks.append(("x_grad", "x.grad", label, "backward (input)"))
    if "affine = false" not in extra and not residual:
        checks.append(("w_grad", "a.weight.grad", label, "backward (weight)"))
    p.add(name, f'''
dims = {{ rows = {rows}, width = {width} }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["rows", "width"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["rows", "width"] }},
]
layers = [
  {layers},
]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
''', checks)


def cross_entropy(p, rows, classes):
    p.add(f"loss-ce-{rows}x{classes}", f'''
dims = {{ rows = {rows}, classes = {classes} }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["rows", "classes"], grad = true }},
  {{ name = "labels", draw = "randint", high = "classes", shape = ["rows"] }},
]
layers = [{{ name = "a", op = "relu", input = "x" }}]
loss = {{ op = "cross-entropy", labels = "labels" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
''', [("loss", "loss", f"cross-entropy {rows}x{classes}", "forward (value)"),
      ("dy", "a.out.grad", f"cross-entropy {rows}x{classes}", "backward")])


def optimizer(p, name, train):
    # An embedding's weight gradient is a scatter-add of the loss gradient (exact), so the
    # optimizer sees the same gradient in both; 3 steps exercise its state.
    p.add(f"optim-{name}", f'''
dims = {{ rows = 12, vocab = 10, dim = 7 }}
inputs = [
  {{ name = "ids", draw = "randint", high = "vocab", shape = ["rows"] }},
  {{ name = "t", draw = "randn", shape = ["rows", "dim"] }},
]
layers = [{{ name = "emb", op = "embedding", input = "ids", num = "vocab", dim = "dim" }}]
loss = {{ op = "mse", target = "t" }}
train = {train}
''', [("w_grad", "emb.weight.grad", "embedding", "backward (weight)"),
      ("w", "emb.weight", name, "step")])


def tp_mlp(p, tp, rule, hidden, ffn):
    p.add(f"tp{tp}-mlp-{rule}-{hidden}x{ffn}", f'''
dims = {{ tokens = 6, hidden = {hidden}, ffn = {ffn} }}
parallel = {{ tp = {tp}, shard_rule = "{rule}" }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["tokens", "hidden"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["tokens", "hidden"] }},
]
layers = [
  {{ name = "fc1", op = "linear", input = "x", out = "ffn", parallel = "column" }},
  {{ name = "act", op = "relu" }},
  {{ name = "fc2", op = "linear", out = "hidden", parallel = "row" }},
]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
''', [("fc1_out", "fc1.out", f"column-parallel linear tp {tp}", "forward"),
      ("fc2_out", "fc2.out", f"row-parallel linear + all-reduce tp {tp}", "forward"),
      ("x_grad", "x.grad", f"column-parallel input-gradient all-reduce tp {tp}", "backward (input)")])


def tp_softmax(p, tp, rule, hidden, ffn):
    """softmax between a gathered column-parallel layer and a row-parallel one."""
    p.add(f"tp{tp}-softmax-{rule}-{hidden}x{ffn}", f'''
dims = {{ tokens = 6, hidden = {hidden}, ffn = {ffn} }}
parallel = {{ tp = {tp}, shard_rule = "{rule}" }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["tokens", "hidden"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["tokens", "hidden"] }},
]
layers = [
  {{ name = "fc1", op = "linear", input = "x", out = "ffn", parallel = "column-gather" }},
  {{ name = "sm", op = "softmax" }},
  {{ name = "fc2", op = "linear", out = "hidden", parallel = "row" }},
]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 2, optimizer = "sgd", lr = 0.1 }}
''', [("sm_out", "sm.out", f"softmax between column-gather and row tp {tp}", "forward"),
      ("sm_grad", "fc1.out.grad", f"softmax between column-gather and row tp {tp}", "backward (input)")])


def sdpa(p, batch, seq, heads, width, causal, scale=None):
    """Scaled-dot-product attention alone (torch's math path) on drawn q, k, v."""
    extra = (", causal = true" if causal else "") + (f", scale = {scale}" if scale else "")
    label = f"sdpa {batch}x{seq}x{heads}x{width // heads}" + (" causal" if causal else "") + (
        f" scale {scale}" if scale else "")
    p.add(f"op-sdpa-{batch}x{seq}x{heads}x{width // heads}{'-causal' if causal else ''}{'-scale' if scale else ''}", f'''
dims = {{ batch = {batch}, seq = {seq}, width = {width} }}
inputs = [
  {{ name = "q", draw = "randn", shape = ["batch", "seq", "width"], grad = true }},
  {{ name = "k", draw = "randn", shape = ["batch", "seq", "width"], grad = true }},
  {{ name = "v", draw = "randn", shape = ["batch", "seq", "width"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["batch", "seq", "width"] }},
]
layers = [{{ name = "a", op = "sdpa", inputs = ["q", "k", "v"], heads = {heads}{extra} }}]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
''', [("out", "a.out", label, "forward"),
      ("q_grad", "q.grad", label, "backward (q)"),
      ("k_grad", "k.grad", label, "backward (k)"),
      ("v_grad", "v.grad", label, "backward (v)")])


def rope(p, batch, seq, heads, width, theta):
    """Rotary embeddings alone (HF's rotate_half) on a drawn input."""
    label = f"rope {batch}x{seq}x{heads}x{width // heads} theta {int(theta)}"
    p.add(f"op-rope-{batch}x{seq}x{heads}x{width // heads}-theta{int(theta)}", f'''
dims = {{ batch = {batch}, seq = {seq}, width = {width} }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["batch", "seq", "width"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["batch", "seq", "width"] }},
]
layers = [{{ name = "r", op = "rope", input = "x", heads = {heads}, theta = {theta} }}]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
''', [("out", "r.out", label, "forward"),
      ("x_grad", "x.grad", label, "backward")])


def rope_sdpa(p, batch, seq, heads, width, theta):
    """Rotary embeddings on q and k before a causal sdpa, on drawn q, k, v."""
    label = f"rope on q, k + causal sdpa {batch}x{seq}x{heads}x{width // heads}"
    p.add(f"op-rope-sdpa-{batch}x{seq}x{heads}x{width // heads}", f'''
dims = {{ batch = {batch}, seq = {seq}, width = {width} }}
inputs = [
  {{ name = "q", draw = "randn", shape = ["batch", "seq", "width"], grad = true }},
  {{ name = "k", draw = "randn", shape = ["batch", "seq", "width"], grad = true }},
  {{ name = "v", draw = "randn", shape = ["batch", "seq", "width"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["batch", "seq", "width"] }},
]
layers = [
  {{ name = "qr", op = "rope", input = "q", heads = {heads}, theta = {theta} }},
  {{ name = "kr", op = "rope", input = "k", heads = {heads}, theta = {theta} }},
  {{ name = "a", op = "sdpa", inputs = ["qr", "kr", "v"], heads = {heads}, causal = true }},
]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
''', [("qr_out", "qr.out", label, "forward (rope on q)"),
      ("out", "a.out", label, "forward"),
      ("q_grad", "q.grad", label, "backward (q, through rope)"),
      ("k_grad", "k.grad", label, "backward (k, through rope)"),
      ("v_grad", "v.grad", label, "backward (v)")])


def tp_rope_attention(p, tp, rule, heads, hidden, seq=6, batch=2, theta=10000.0):
    """Megatron's attention with rotary q and k: column-parallel q, k, v holding whole heads,
    rope on q and k per rank, causal sdpa, row-parallel output projection."""
    label = f"head-sharded rope + causal sdpa tp {tp} ({heads} heads)"
    p.add(f"tp{tp}-rope-attention-{rule}-{heads}x{hidden}", f'''
dims = {{ batch = {batch}, seq = {seq}, hidden = {hidden}, heads = {heads} }}
parallel = {{ tp = {tp}, shard_rule = "{rule}" }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["batch", "seq", "hidden"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["batch", "seq", "hidden"] }},
]
layers = [
  {{ name = "q", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "k", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "v", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "qr", op = "rope", input = "q", heads = "heads", theta = {theta} }},
  {{ name = "kr", op = "rope", input = "k", heads = "heads", theta = {theta} }},
  {{ name = "attn", op = "sdpa", inputs = ["qr", "kr", "v"], heads = "heads", causal = true }},
  {{ name = "o", op = "linear", out = "hidden", parallel = "row" }},
]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 2, optimizer = "sgd", lr = 0.1 }}
''', [("qr_out", "qr.out", label, "forward (rope on q)"),
      ("attn_out", "attn.out", label, "forward"),
      ("o_out", "o.out", label, "forward (row-parallel output)"),
      ("q_grad", "q.out.grad", label, "backward (q, through rope)"),
      ("x_grad", "x.grad", label, "backward (input, three column layers)"),
      ("q_w", "q.weight", label, "step (q weight)")])


def tp_attention(p, tp, rule, heads, hidden, seq=5, batch=2):
    """Megatron's attention: column-parallel q, k, v holding whole heads, causal sdpa per
    rank, a row-parallel output projection. Another seq or batch than (5, 2): the attention's
    own rows only (the others are the linear rows'), to keep the fixtures small."""
    small = (seq, batch) == (5, 2)
    label = f"head-sharded causal sdpa tp {tp} ({heads} heads" + (
        ")" if small else f", batch {batch}, seq {seq} x head_dim {hidden // heads})")
    checks = [("attn_out", "attn.out", label, "forward"),
              ("o_out", "o.out", label, "forward (row-parallel output)"),
              ("q_grad", "q.out.grad", label, "backward (q)"),
              ("x_grad", "x.grad", label, "backward (input, three column layers)"),
              ("q_w", "q.weight", label, "step (q weight)")]
    if not small:
        checks = [c for c in checks if c[0] in ("attn_out", "q_grad")]
    p.add(f"tp{tp}-attention-{rule}-{heads}x{hidden}" + ("" if small else f"-b{batch}s{seq}"), f'''
dims = {{ batch = {batch}, seq = {seq}, hidden = {hidden}, heads = {heads} }}
parallel = {{ tp = {tp}, shard_rule = "{rule}" }}
inputs = [
  {{ name = "x", draw = "randn", shape = ["batch", "seq", "hidden"], grad = true }},
  {{ name = "t", draw = "randn", shape = ["batch", "seq", "hidden"] }},
]
layers = [
  {{ name = "q", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "k", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "v", op = "linear", input = "x", out = "hidden", parallel = "column" }},
  {{ name = "attn", op = "sdpa", inputs = ["q", "k", "v"], heads = "heads", causal = true }},
  {{ name = "o", op = "linear", out = "hidden", parallel = "row" }},
]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 2, optimizer = "sgd", lr = 0.1 }}
''', checks)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    p = Probes()
    for m, k, n in [(1, 64, 32), (4, 8, 8), (4, 16, 16), (3, 35, 19), (8, 16, 23), (6, 36, 25)]:
        for bias in (True, False):
            linear(p, m, k, n, bias)
    for op in ("tanh", "gelu", "gelu-tanh", "relu", "silu"):
        elementwise(p, op)
    for width in (16, 35):
        elementwise(p, "layernorm", width=width, label=f"layernorm width {width}")
        elementwise(p, "rmsnorm", width=width, label=f"rmsnorm width {width}")
    # a width below one vector (ATen's scalar row sums), more rows than one 16-row cascade
    # block of sum(0), another eps, no weight, and x's gradient summed with a residual's
    rmsnorm(p, "op-rmsnorm-6", "rmsnorm width 6", 8, 6)
    rmsnorm(p, "op-rmsnorm-35x24-eps", "rmsnorm width 35, 24 rows, eps 1e-5", 24, 35,
            extra=", eps = 1e-5")
    rmsnorm(p, "op-rmsnorm-35-noaffine", "rmsnorm width 35, no weight", 8, 35,
            extra=", affine = false")
    rmsnorm(p, "op-rmsnorm-35-residual", "rmsnorm width 35 inside a residual add", 8, 35,
            residual=True)
    # LayerNorm where ATen's kernel changes its order: no full vector (3, 7), one vector and
    # a tail (12), a tail after several vectors (35), cascade merges of Welford chunks (300);
    # affine (2 steps, so that the second step's weight and bias are not 1 and 0) and not;
    # row counts that split unevenly over 2 threads (5, 3).
    for width, rows in [(3, 8), (7, 8), (12, 5), (35, 8), (300, 3)]:
        if width != 35:
            elementwise(p, "layernorm", width=width, rows=rows, steps=2,
                        label=f"layernorm width {width}")
        elementwise(p, "layernorm", extra=", affine = false", suffix="-noaffine", width=width,
                    rows=rows, steps=2, params=False, label=f"layernorm width {width}, no affine")
    # softmax over the last dim: below one 8-lane vector (5), whole vectors (16), a ragged
    # tail after several vectors (37, 100)
    for width in (5, 16, 37, 100):
        elementwise(p, "softmax", width=width, label=f"softmax width {width}")
    for rows, classes in [(16, 37), (6, 8)]:
        cross_entropy(p, rows, classes)
    optimizer(p, "sgd", '{ steps = 3, optimizer = "sgd", lr = 0.1 }')
    optimizer(p, "sgd + weight decay", '{ steps = 3, optimizer = "sgd", lr = 0.1, weight_decay = 0.1 }')
    optimizer(p, "momentum", '{ steps = 3, optimizer = "momentum", lr = 0.1 }')
    optimizer(p, "momentum + dampening", '{ steps = 3, optimizer = "momentum", lr = 0.1, dampening = 0.5 }')
    optimizer(p, "nesterov", '{ steps = 3, optimizer = "nesterov", lr = 0.1 }')
    optimizer(p, "adam", '{ steps = 3, optimizer = "adam", lr = 0.01 }')
    optimizer(p, "adam + weight decay", '{ steps = 3, optimizer = "adam", lr = 0.01, weight_decay = 0.1 }')
    optimizer(p, "adamw", '{ steps = 3, optimizer = "adamw", lr = 0.01 }')
    for tp, rule, h, f in [(2, "megatron", 8, 16), (4, "megatron", 8, 16), (3, "deepspeed", 10, 17)]:
        tp_mlp(p, tp, rule, h, f)
    for tp, rule, h, f in [(2, "megatron", 8, 20), (3, "deepspeed", 10, 17)]:
        tp_softmax(p, tp, rule, h, f)
    # attention below ATen's naive-bmm size (seq * seq * head_dim < 400)
    sdpa(p, 2, 5, 2, 8, False)
    sdpa(p, 2, 5, 2, 8, True)
    sdpa(p, 1, 6, 3, 24, True, scale=0.3)
    sdpa(p, 3, 3, 1, 7, False)
    for tp, rule, heads, hidden in [(2, "megatron", 4, 16), (4, "megatron", 4, 16), (2, "megatron", 2, 12)]:
        tp_attention(p, tp, rule, heads, hidden)
    # attention above it: MKL's batched sgemm (seq 16 x seq 16 x head_dim 16 = 4096), packed
    # copies (batch 2, 2 heads), strided views (batch 1, 4 heads), and head-sharded at tp 2
    # (batch 1: the whole run's views are strided, each rank's one head packed)
    sdpa(p, 2, 16, 2, 32, False)
    sdpa(p, 2, 16, 2, 32, True)
    sdpa(p, 1, 16, 4, 64, True)
    tp_attention(p, 2, "megatron", 2, 32, seq=16, batch=1)
    # rotary embeddings: tiny head_dim (2), a vector of cos/sin (8), two vectors of pow (64),
    # other thetas; then on q and k before sdpa, unsharded and head-sharded at tp 2
    rope(p, 2, 5, 2, 8, 10000.0)
    rope(p, 1, 7, 3, 6, 1000000.0)
    rope(p, 1, 9, 4, 8, 500000.0)
    rope(p, 1, 16, 1, 64, 100000.0)
    rope_sdpa(p, 2, 6, 2, 16, 10000.0)
    rope_sdpa(p, 1, 16, 2, 32, 500000.0)
    tp_rope_attention(p, 2, "megatron", 4, 16)
    tp_rope_attention(p, 2, "megatron", 2, 32, seq=8, batch=1, theta=500000.0)
    for name, text in p.files.items():
        with open(os.path.join(a.out, name + ".toml"), "w") as f:
            f.write(text)
    with open(os.path.join(a.out, "probes.tsv"), "w") as f:
        f.write("# file\tcheck\top\tdirection (scripts/conformance_probes.py)\n")
        for name, c, op, d in p.rows:
            f.write(f"{name}.toml\t{c}\t{op}\t{d}\n")
    print(f"{len(p.files)} probes in {a.out}")


if __name__ == "__main__":
    main()
