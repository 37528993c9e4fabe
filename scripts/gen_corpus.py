#!/usr/bin/env python3
"""Differential fuzzing: draws random valid scenario files from the whole language, small
enough that each runs in milliseconds, for scripts/torch_mirror.py to run in real PyTorch and
`cargo test` (tests/suite/torch_corpus.rs) to compare with seedsweep bit for bit.

What a file may draw (docs/scenario-language.md):
- inputs: `randn` activations (with or without `grad`), `randint` ids (with a `set` fix-up)
  and labels, `randn` targets; 2-D or 3-D (a list dim spliced into the shape);
- layers: embedding (`none`, `vocab`, `column-gather`, `padding_idx`), linear (`none`,
  `column`, `column-gather`, `row`, with or without bias, tied to the embedding), tanh, gelu,
  gelu-tanh, relu, silu, layernorm and rmsnorm (`affine`, `eps`, `sequence`), residual-add,
  softmax (after the block, where the tensor is whole; added after the committed 200-file
  corpus was drawn, so `--seed 1` now draws other files than tests/data/torch_corpus holds);
  with `--elementwise P` (default 0: off) also, each with
  probability P, a SwiGLU block (`silu`-or-other(gate) `mul` up, gate and up of one
  parallelism, then the down projection), the residual spelt `add`, and fixed inputs
  (`draw = "fixed"`: the model input or mse target as float `values`, the labels as int64);
  with `--attention P` (default 0: off) also, in a 3-D file with probability P, an attention
  block after the MLP: q, k, v projections (head-sharded column layers under the Megatron
  rule), `rope` on q and k, `sdpa`, and the output projection;
  with `--moe P` (default 0: off) also, with probability P, a mixture-of-experts layer after
  the MLP (on its whole output): 2-8 experts, top_k 1..=experts, any expert activation, gated
  or not, `norm_topk` or not, and in files without tp or dp (--moe makes more of them) often
  `expert_parallel` 2-4 (a degree dividing the experts, at most the tokens), and in 2 files of
  5 `combine = "einsum"` (half of them against `reference_combine = "elementwise"`);
- losses: cross-entropy (plain, and vocab-parallel behind a column head), mse, sum;
- train: steps, micro-steps, sgd / momentum / nesterov / adam / adamw with their options;
- parallel: tp 1-4 under both shard rules (uneven DeepSpeed shards, grains), or dp 2-4 with
  ZeRO 0, 2, 3 and both grad_sync modes;
- checks: activations, their gradients, the loss, input gradients, parameter gradients at
  the micro-step or the step, parameters, sgd-update, in recording order; one or two
  `[[params]]` entries.

Every file is checked by `seedsweep check` (pass the binary with --seedsweep); a file it
refuses is a generator bug and stops the script.

    python3 scripts/gen_corpus.py --count 200 --seed 1 --out tests/data/torch_corpus \\
        --seedsweep target/release/seedsweep
"""
import argparse
import os
import random
import subprocess
import sys

ACTS = ["tanh", "gelu", "gelu-tanh", "relu", "silu"]
OPTS = ["sgd", "momentum", "nesterov", "adam", "adamw"]


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int,)):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def table(name, kv):
    lines = [f"[{name}]"] + [f"{k} = {toml_value(v)}" for k, v in kv.items()]
    return "\n".join(lines)


def array_table(name, kv):
    lines = [f"[[{name}]]"] + [f"{k} = {toml_value(v)}" for k, v in kv.items()]
    return "\n".join(lines)


class Gen:
    def __init__(self, rng, index, elementwise=0.0, prefix="fuzz", attention=0.0, moe=0.0):
        self.r = rng
        self.i = index
        self.elem = elementwise
        self.attn = attention
        self.moe_p = moe
        self.prefix = prefix

    def moe_chance(self, scale=1.0):
        """A mixture-of-experts draw, only with --moe (no draw at all without it, so that the
        files of earlier versions regenerate unchanged)."""
        return self.moe_p > 0 and self.chance(self.moe_p * scale)

    def moe(self, cur, tokens, tp, dp):
        """A mixture-of-experts layer on the whole tensor `cur` (`tokens` rows): the forms
        src/scenario/resolve.rs accepts (top_k in 1..=experts; expert_parallel only with
        tp = dp = 1, dividing the experts, at most the tokens; the generator's tp = 1 files use
        the DeepSpeed rule, so the tokens need not divide)."""
        r = self
        experts = r.pick([2, 3, 4, 4, 6, 8])
        l = {"name": "moe", "op": "moe", "input": cur, "experts": experts,
             "top_k": r.r.randint(1, experts), "ffn": r.r.randint(2, 12)}
        if r.chance(0.6):
            l["activation"] = r.pick(ACTS)
        if r.chance(0.5):
            l["gated"] = True
        if r.chance(0.4):
            l["norm_topk"] = True
        if tp == 1 and dp == 1 and r.chance(0.7):
            degrees = [n for n in (2, 3, 4) if experts % n == 0 and n <= tokens]
            if degrees:
                l["expert_parallel"] = r.pick(degrees)
        # The combine, from a stream of its own (the file's index), so that the draws above
        # and every later one are those of earlier versions: MaxText's einsum for the sharded
        # computation in 2 files of 5, half of them against an elementwise reference.
        side = random.Random(f"moe-combine-{self.i}")
        if side.random() < 0.4:
            l["combine"] = "einsum"
            if side.random() < 0.5:
                l["reference_combine"] = "elementwise"
        return l

    def attn_chance(self):
        """An attention block's draw, only with --attention (no draw without it, so that the
        files of earlier versions regenerate unchanged)."""
        return self.attn > 0 and self.chance(self.attn)

    def attention(self, dims, tp, rule, cur):
        """An attention block on the whole 3-D tensor `cur` ([lead0, lead1, hidden]): q, k, v
        projections to `attn` = heads x head_dim features (column-parallel, holding whole heads,
        when the Megatron rule splits on head boundaries), rope on q and k (each with
        probability 0.7, measured thetas), sdpa (causal or not), the output projection back to
        `hidden` (row-parallel after column layers)."""
        r = self
        head_dim = r.pick([2, 4, 6, 8])
        heads = r.pick([1, 2, 4]) * (tp if tp > 1 and rule == "megatron" else 1)
        dims["heads"] = heads
        dims["attn"] = heads * head_dim
        par = "column" if tp > 1 and rule == "megatron" and r.chance(0.7) else None
        layers = []
        for n in ("q", "k", "v"):
            l = {"name": n, "op": "linear", "input": cur, "out": "attn"}
            if par:
                l["parallel"] = par
            layers.append(l)
        qk = []
        theta = r.pick([10000.0, 500000.0, 1000000.0])
        for n in ("q", "k"):
            if r.chance(0.7):
                layers.append({"name": n + "r", "op": "rope", "input": n, "heads": "heads",
                               "theta": theta})
                qk.append(n + "r")
            else:
                qk.append(n)
        s = {"name": "attn_sdpa", "op": "sdpa", "inputs": qk + ["v"], "heads": "heads"}
        if r.chance(0.5):
            s["causal"] = True
        layers.append(s)
        o = {"name": "o", "op": "linear", "out": "hidden"}
        if par:
            o["parallel"] = "row"
        layers.append(o)
        return layers

    def elem_chance(self):
        """A new feature's draw, only with --elementwise (no draw at all without it, so that
        the corpus of earlier versions regenerates unchanged)."""
        return self.elem > 0 and self.chance(self.elem)

    def fixed_floats(self, n):
        return [round(self.r.r.gauss(0.0, 1.0), 3) for _ in range(n)]

    def pick(self, xs):
        return self.r.pick(xs)

    def chance(self, p):
        return self.r.chance(p)

    def scenario(self):
        r = self
        mode = r.pick(["tp", "tp", "tp", "dp", "none"])
        if r.moe_chance(0.5):
            mode = "none"  # expert parallelism needs tp = dp = 1
        tp = r.pick([2, 3, 4]) if mode == "tp" else 1
        dp = r.pick([2, 3, 4]) if mode == "dp" else 1
        rule = "megatron" if (tp > 1 and r.chance(0.35)) else "deepspeed"
        grain = r.pick([1, 1, 1, 2]) if rule == "deepspeed" and tp > 1 else 1
        mult = tp if rule == "megatron" else 1

        def width(lo, hi, m=1):
            v = r.r.randint(lo, hi)
            return max(m, (v // m) * m) if m > 1 else v

        # (--attention makes more files 3-D: its block needs [batch, seq, hidden])
        three_d = dp == 1 and (r.chance(0.3) or r.attn_chance())
        dims = {}
        if three_d:
            dims["lead"] = [r.pick([1, 2, 3]), r.pick([2, 3, 4])]
            lead = ["lead"]
            tokens = dims["lead"][0] * dims["lead"][1]
        else:
            tokens = r.pick([2, 3, 4, 5, 6, 8]) if dp == 1 else dp * r.pick([1, 2, 3])
            if dp > 1 and r.chance(0.3):
                tokens += 1  # an uneven batch split (DeepSpeed's rule)
            dims["tokens"] = tokens
            lead = ["tokens"]
        hidden = width(4, 16, mult)
        dims["hidden"] = hidden
        inputs, layers, checks_act, grads_in = [], [], [], []
        embed = r.chance(0.3)
        # sequence parallelism splits axis 0 (Megatron's sequence axis)
        axis0 = dims["lead"][0] if three_d else tokens
        sp_ok = tp > 1 and (axis0 % tp == 0 if rule == "megatron" else axis0 >= tp)
        if embed:
            vocab_in = width(6, 20, mult)
            dims["vocab_in"] = vocab_in
            ids = {"name": "ids", "draw": "randint", "high": "vocab_in", "shape": lead}
            pad = None
            if r.chance(0.4):
                pad = r.r.randint(0, vocab_in - 1)
                ids["set"] = [{"index": [0] * len(self.shape_len(dims, lead)), "value": "emb.padding_idx"}]
            inputs.append(ids)
            e = {"name": "emb", "op": "embedding", "input": "ids", "num": "vocab_in", "dim": "hidden"}
            if pad is not None:
                e["padding_idx"] = pad
            if tp > 1:
                e["parallel"] = r.pick(["none", "vocab", "column-gather"])
            layers.append(e)
            cur = "emb"
        else:
            grad = r.chance(0.5) and dp == 1
            x = {"name": "x", "draw": "randn", "shape": lead + ["hidden"]}
            if r.elem_chance():
                n = 1
                for v in self.shape_len(dims, lead):
                    n *= v
                x["draw"] = "fixed"
                x["values"] = r.fixed_floats(n * hidden)
            if grad:
                x["grad"] = True
                grads_in.append("x")
            inputs.append(x)
            cur = "x"
        residual_src = cur
        # an optional pre-norm
        if r.chance(0.45):
            kind = r.pick(["layernorm", "rmsnorm"])
            n = {"name": "norm", "op": kind, "input": cur}
            if r.chance(0.3):
                n["affine"] = False
            if r.chance(0.2):
                n["eps"] = r.pick([1e-5, 1e-6, 1e-3])
            if sp_ok and r.chance(0.4):
                n["parallel"] = "sequence"
            layers.append(n)
            cur = "norm"
        # the MLP block
        ffn = width(4, 24, mult)
        dims["ffn"] = ffn
        act = r.pick(ACTS)
        style = r.pick(["tp", "tp", "plain"]) if tp > 1 else "plain"
        fc1 = {"name": "fc1", "op": "linear", "input": cur, "out": "ffn"}
        fc2 = {"name": "fc2", "op": "linear", "out": "hidden"}
        if r.chance(0.25):
            fc1["bias"] = False
        if r.chance(0.25):
            fc2["bias"] = False
        if style == "tp":
            fc1["parallel"] = "column"
            fc2["parallel"] = "row"
        elif tp > 1 and r.chance(0.5):
            fc1["parallel"] = "column-gather"
        if any(l.get("parallel") == "sequence" for l in layers) and "parallel" not in fc1:
            fc1["parallel"] = "column-gather"  # a sequence-parallel output is gathered by a column layer
        if r.elem_chance():
            # SwiGLU-style: act(gate) * up, gate and up split alike, then the down projection
            up = {"name": "up", "op": "linear", "input": cur, "out": "ffn"}
            if "parallel" in fc1:
                up["parallel"] = fc1["parallel"]
            if r.chance(0.25):
                up["bias"] = False
            fc2["input"] = "glu"
            layers += [fc1, {"name": "act", "op": act, "input": "fc1"}, up,
                       {"name": "glu", "op": "mul", "inputs": ["act", "up"]}, fc2]
        else:
            layers += [fc1, {"name": "act", "op": act}, fc2]
        cur = "fc2"
        if r.chance(0.4):
            spelling = "add" if r.elem_chance() else "residual-add"
            layers.append({"name": "res", "op": spelling, "inputs": [residual_src, "fc2"]})
            cur = "res"
        if r.chance(0.3):
            layers.append({"name": "act2", "op": r.pick(ACTS + ["softmax"])})
            cur = "act2"
        if r.moe_chance():
            layers.append(r.moe(cur, tokens, tp, dp))
            cur = "moe"
        if three_d and r.attn_chance():
            layers += r.attention(dims, tp, rule, cur)
            cur = "o"
        # the head and the loss
        loss_kind = r.pick(["cross-entropy", "cross-entropy", "mse", "sum"])
        loss = {}
        if loss_kind == "cross-entropy":
            classes = width(4, 20, mult)
            dims["classes"] = classes
            head = {"name": "head", "op": "linear", "out": "classes", "bias": r.chance(0.5)}
            if tp > 1:
                head["parallel"] = r.pick(["none", "row", "column", "column-gather"])
            if embed and r.chance(0.3) and head.get("parallel", "none") in ("none", "row") \
                    and layers[0].get("parallel", "none") == "none":
                # a tied head: the table's shape
                head["out"] = "vocab_in"
                head["tie"] = "emb"
                del dims["classes"]
                classes_name = "vocab_in"
            else:
                classes_name = "classes"
            layers.append(head)
            lab = {"name": "labels", "draw": "randint", "high": classes_name, "shape": lead}
            if r.elem_chance():
                n = 1
                for v in self.shape_len(dims, lead):
                    n *= v
                lab = {"name": "labels", "draw": "fixed", "shape": lead,
                       "values": [r.r.randint(0, dims[classes_name] - 1) for _ in range(n)]}
            inputs.append(lab)
            loss = {"op": "cross-entropy", "labels": "labels"}
            if head.get("parallel") == "column":
                loss["parallel"] = "vocab"
            cur = "head"
        elif loss_kind == "mse":
            tgt = {"name": "target", "draw": "randn", "shape": lead + ["hidden"]}
            if r.elem_chance():
                n = 1
                for v in self.shape_len(dims, lead):
                    n *= v
                tgt["draw"] = "fixed"
                tgt["values"] = r.fixed_floats(n * hidden)
            inputs.append(tgt)
            loss = {"op": "mse", "target": "target"}
        else:
            loss = {"op": "sum"}
        # train
        opt = r.pick(OPTS)
        train = {"steps": r.pick([1, 2, 3]), "micro_steps": r.pick([1, 1, 2, 3]), "optimizer": opt,
                 "lr": r.pick([0.1, 0.05, 1e-3, 0.3])}
        if opt in ("momentum", "nesterov"):
            if r.chance(0.4):
                train["momentum"] = r.pick([0.5, 0.9, 0.99])
            if opt == "momentum" and r.chance(0.3):
                train["dampening"] = r.pick([0.1, 0.5])
        if opt in ("adam", "adamw"):
            if r.chance(0.3):
                train["betas"] = [r.pick([0.8, 0.9]), r.pick([0.99, 0.999])]
            if r.chance(0.3):
                train["eps"] = r.pick([1e-6, 1e-8])
        if r.chance(0.3):
            train["weight_decay"] = r.pick([0.01, 0.1])
        parallel = {"tp": tp, "dp": dp, "shard_rule": rule}
        if grain > 1:
            parallel["tp_grain"] = grain
        if dp > 1:
            parallel["zero_stage"] = r.pick([0, 0, 2, 3])
            if parallel["zero_stage"] >= 2 and train["micro_steps"] > 1 and r.chance(0.5):
                parallel["grad_sync"] = "step"
        return dims, parallel, inputs, layers, loss, train, grads_in, cur

    def shape_len(self, dims, lead):
        out = []
        for d in lead:
            v = dims[d]
            out.extend(v if isinstance(v, list) else [v])
        return out

    def checks(self, layers, loss, train, parallel, grads_in):
        r = self
        dp, zero = parallel["dp"], parallel.get("zero_stage", 0)
        micro = train["micro_steps"]
        acts = [l["name"] for l in layers]
        fwd, bwd_micro, bwd_step, params = [], [], [], []
        for a in acts:
            if r.chance(0.25):
                fwd.append({"name": f"{a}_out", "tensor": f"{a}.out"})
        if loss["op"] != "sum" and r.chance(0.7):
            fwd.append({"name": "loss", "tensor": "loss"})
        for x in grads_in:
            bwd_micro.append({"name": f"{x}_grad", "tensor": f"{x}.grad"})
        # which outputs torch gives a gradient: those downstream of a parameter or of an
        # input with `grad` (a norm without affine on a plain input has none)
        live = set(grads_in)
        grad_of = []
        prev = None
        for l in layers:
            srcs = l.get("inputs") or [l.get("input", prev)]
            has_w = l["op"] in ("embedding", "linear", "moe") or (
                l["op"] in ("layernorm", "rmsnorm") and l.get("affine", True))
            if has_w or any(x in live for x in srcs):
                live.add(l["name"])
                grad_of.append(l["name"])
            prev = l["name"]
        if dp == 1:
            for a in grad_of:
                if r.chance(0.12):
                    bwd_micro.append({"name": f"{a}_out_grad", "tensor": f"{a}.out.grad"})
        weights = []
        for l in layers:
            if l["op"] == "moe":
                weights.append(f"{l['name']}.router.weight")
                for e in range(l["experts"]):
                    for w in ("w1", "w2", "w3") if l.get("gated") else ("w1", "w2"):
                        weights.append(f"{l['name']}.experts.{e}.{w}.weight")
                continue
            if l["op"] in ("embedding", "linear", "layernorm", "rmsnorm"):
                if l["op"] in ("layernorm", "rmsnorm") and l.get("affine") is False:
                    continue
                weights.append(f"{l['name']}.weight")
                if l["op"] == "layernorm" or (l["op"] == "linear" and l.get("bias", True)):
                    weights.append(f"{l['name']}.bias")
        for w in weights:
            if w.endswith(".weight") and w.split(".")[0] in [l["name"] for l in layers if l.get("tie")]:
                continue
            if not (dp > 1 and zero >= 2) and r.chance(0.35):
                if micro > 1 and dp == 1 and r.chance(0.5):
                    bwd_micro.append({"name": f"{w.replace('.', '_')}_grad_micro", "tensor": f"{w}.grad",
                                      "at": "micro-step"})
                else:
                    bwd_step.append({"name": f"{w.replace('.', '_')}_grad", "tensor": f"{w}.grad"})
            if r.chance(0.45):
                params.append({"name": w.replace(".", "_"), "tensor": w})
        if train["optimizer"] == "sgd" and "weight_decay" not in train and r.chance(0.3):
            lin = [l["name"] for l in layers if l["op"] == "linear" and not l.get("tie")]
            if lin:
                params.append({"name": "sgd_update", "tensor": f"{r.pick(lin)}.weight", "kind": "sgd-update"})
        out = fwd + bwd_micro + bwd_step + params
        if not out:
            out = [{"name": "loss", "tensor": "loss"}] if loss["op"] != "sum" else \
                [{"name": "last_out", "tensor": f"{acts[-1]}.out"}]
        return out

    def file(self):
        dims, parallel, inputs, layers, loss, train, grads_in, cur = self.scenario()
        checks = self.checks(layers, loss, train, parallel, grads_in)
        name = f"{self.prefix}-{self.i:03d}"
        parts = [f'name = "{name}"',
                 f'description = "generated by scripts/gen_corpus.py"',
                 'default_profiles = ["cpu-fma+mkl-threads-1"]',
                 f"first_seed = {self.r.randint(0, 10_000)}",
                 table("dims", dims), table("parallel", parallel),
                 table("data", {"seed": self.r.randint(0, 1000)})]
        parts += [array_table("inputs", i) for i in inputs]
        parts += [array_table("layers", l) for l in layers]
        parts.append(table("loss", loss))
        parts.append(table("train", train))
        parts += [array_table("checks", c) for c in checks]
        # a second parametrization: another width
        params = [{"id": "a"}]
        if self.chance(0.4):
            mult = parallel["tp"] if parallel["shard_rule"] == "megatron" else 1
            alt = max(mult, (dims["ffn"] + self.r.randint(1, 6)) // mult * mult)
            params.append({"id": "b", "ffn": alt})
        parts += [array_table("params", p) for p in params]
        return name, "\n\n".join(parts) + "\n"


class R:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def pick(self, xs):
        return self.r.choice(xs)

    def chance(self, p):
        return self.r.random() < p

    def randint(self, lo, hi):
        return self.r.randint(lo, hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="index of the first file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seedsweep", required=True, help="the seedsweep binary that checks every file")
    ap.add_argument("--elementwise", type=float, default=0.0,
                    help="probability of each of SwiGLU (mul), `add` and fixed inputs (default 0: off)")
    ap.add_argument("--attention", type=float, default=0.0,
                    help="probability of an attention block (q, k, v, rope, sdpa, o) in a 3-D file (default 0: off)")
    ap.add_argument("--moe", type=float, default=0.0,
                    help="probability of a mixture-of-experts layer after the MLP (default 0: off)")
    ap.add_argument("--prefix", default="fuzz", help="file name prefix (default fuzz)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    made = 0
    attempt = 0
    while made < a.count:
        idx = a.start + made
        rng = R(a.seed * 1_000_003 + idx * 7919 + attempt)
        g = Gen(rng, idx, a.elementwise, a.prefix, a.attention, a.moe)
        g.r = rng
        name, text = g.file()
        path = os.path.join(a.out, f"{name}.toml")
        with open(path, "w") as f:
            f.write(text)
        res = subprocess.run([a.seedsweep, "check", path], capture_output=True, text=True)
        if res.returncode != 0:
            msg = (res.stderr or res.stdout).strip().splitlines()
            print(f"{path}: refused by seedsweep check: {msg[-1] if msg else res.returncode}", file=sys.stderr)
            attempt += 1
            if attempt > 50:
                sys.exit("too many refused files: the generator draws invalid scenarios")
            continue
        attempt = 0
        made += 1
    print(f"{made} files in {a.out}")


if __name__ == "__main__":
    main()
