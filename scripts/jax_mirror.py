#!/usr/bin/env python3
"""The differential harness for outer-loop files: any `[train.outer]` scenario file, run in JAX.

Reads a scenario file with a DiLoCo outer loop (docs/scenario-language.md, "[train.outer]")
and runs it in real JAX + optax on the CPU as the test author writes it, the structure of
scripts/crosscheck_jax.py (MaxText's DiLoCoTest) generalised to what such a file may hold:

- the model: the file's chain of `linear` (flax kernel `[in, out]`: `dot_general(x, kernel)`
  then `+ bias`) and `tanh` layers, applied per example under `jax.vmap(in_axes=(None, 0))`;
- the loss `jnp.mean(jnp.square(logits - labels))`, `jax.value_and_grad`;
- flax's `TrainState.apply_gradients` (tx.update, optax.apply_updates, step + 1) with the inner
  optimizer `optax.sgd(lr)` or `optax.adamw(lr, b1, b2, eps, weight_decay=wd)`;
- the replicas' train steps under `jax.vmap` (drjax.map_fn), replica r on block r of every
  input's rows; the reported loss the replicas' `jnp.sum` divided by the replica count
  (typed_reduce_mean);
- the sync under `jax.lax.cond(step % sync_period == 0)`: `outer - inner_r` per replica,
  `jnp.mean` over the replicas (drjax.reduce_mean), the outer optimizer `optax.sgd(lr)`,
  `optax.sgd(lr, momentum)` or `optax.sgd(lr, momentum, nesterov=True)`, every replica's
  parameters replaced (inner optimizer state kept);
- execution: `eager` calls the step directly (every op its own XLA executable; the sync, inside
  `lax.cond`, is compiled), `jit` runs `jax.jit` of the step; the file's `execution`, or
  `--execution` to override it (the profile modifiers `+xla-eager` / `+xla-jit`).

JAX runs with its defaults (float32, `jax_enable_x64` off), as MaxText's test does. `--x64`
enables x64 (float32 arrays still; only weak-typed scalar arithmetic such as optax's
`1 - b**count` then runs in float64), as scripts/crosscheck_jax.py does for its f64 runs.

Data. A file that writes its data (`draw = "fixed"`, `[init] values`) is run on those values,
rounded to f32. A file whose data is drawn (ChaCha streams: `scheme = "flax"`, `randn` input,
`teacher` target) is run on seedsweep's own draws, printed for each seed by
`cargo run --release --example outer_draws -- FILE PARAM SEED` (pass the built binary with
`--draws`): the harness then tests the arithmetic, not the generator, which has its own tests
(src/rng/chacha.rs). `seedsweep repro --dump` writes the checked tensors, not the data.

Records what every check of the file records, at the step labels seedsweep uses (`k`, the
1-based inner step): `loss` (every step), `outer` value (after every sync), `outer` unchanged
(every other step: the outer parameters, and as `<check>_expected` their value before the
step), `replicas` equals-outer (after every sync: every replica's parameters, `[replicas, np]`,
and as `<check>_expected` the outer parameters tiled), parameters flat in table order (each
linear layer's kernel `[in, out]` row-major, then its bias). Written in torch_mirror.py's
fixture format (keys `check@label` sorted, FNV-1a 64 digests of the f32 bytes concatenated,
u32 bit patterns of tensors up to --stored-bits elements at the first seed), one computation,
`reference`: the replicas on one device, every sum over the replicas in JAX's own order.

Anything else (another op, loss, optimizer, tp > 1, several parametrizations) is refused with
the key named; the script never approximates.

    /work/venv-jax/bin/python scripts/jax_mirror.py FILE.toml [--seeds 5] \\
        [--execution eager|jit] [--draws target/release/examples/outer_draws] [-o OUT.json]
    /work/venv-jax/bin/python scripts/jax_mirror.py configs/maxtext_diloco.toml \\
        --validate tests/data/jax_maxtext_diloco.json

`--validate FIXTURE` runs the file in f32 and f64 (x64), eager and jit, and compares every
recorded value with scripts/crosscheck_jax.py's fixture (the MaxText test), bit for bit.

Needs jax 0.10.2, jaxlib 0.10.2, optax 0.2.8, numpy (outside the repo; the tests never need
Python).
"""
import argparse
import dataclasses
import importlib.metadata
import json
import os
import platform
import struct
import subprocess
import sys
import tomllib


def _early_x64():
    # jax_enable_x64 must be set before any array exists.
    return "--x64" in sys.argv or "--validate" in sys.argv


import jax  # noqa: E402

if _early_x64():
    jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402


class Unsupported(Exception):
    """A key or option this harness cannot run faithfully in JAX."""


# ---------------------------------------------------------------------------------------
# encoding (torch_mirror.py's)
# ---------------------------------------------------------------------------------------

def u32s(a):
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32)).reshape(-1)
    return [int(w) for w in a.view(np.uint32)]


def fnv1a64(words):
    h = 0xCBF29CE484222325
    for w in words:
        for b in struct.pack("<I", w):
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def enc(a, hex_limit):
    words = u32s(a)
    out = {"fnv1a64": f"{fnv1a64(words):016x}"}
    if len(words) <= hex_limit:
        out["hex"] = "".join(f"{w:08x}" for w in words)
    return out


def from_hex(h):
    return np.array([int(h[8 * i:8 * i + 8], 16) for i in range(len(h) // 8)],
                    dtype=np.uint32).view(np.float32)


# ---------------------------------------------------------------------------------------
# the file
# ---------------------------------------------------------------------------------------

TOP = {"name", "description", "first_seed", "rng", "default_profiles", "default_policies",
       "compare", "parallel", "inputs", "layers", "init", "loss", "train", "checks", "params",
       "policies", "profiles", "modifiers"}


def refuse_keys(table, allowed, where):
    for k in table:
        if k not in allowed:
            raise Unsupported(f"{where}{k}: not a key this harness mirrors")


@dataclasses.dataclass
class Spec:
    pid: str
    replicas: int
    layers: list          # [("linear", name, in, out) | ("tanh", name)]
    params: list          # [(name, shape)] in table order: kernel [in, out], bias [out]
    x_name: str
    y_name: str
    x_shape: list
    y_shape: list
    fixed: dict | None    # {"params": [np arrays], "x": np, "y": np} or None (drawn)
    steps: int
    inner: dict
    outer: dict
    execution: str
    checks: list          # [(name, kind)] kind: loss | outer_unchanged | outer_params | inner_equals_outer
    first_seed: int


def read_spec(path):
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    tr = doc.get("train", {})
    if "outer" not in tr:
        raise Unsupported("train.outer: not an outer-loop file (torch_mirror.py runs the others)")
    refuse_keys(doc, TOP, "")
    par = doc.get("parallel", {})
    refuse_keys(par, {"dp", "tp"}, "parallel.")
    if par.get("tp", 1) != 1:
        raise Unsupported("parallel.tp: an outer loop runs tp = 1")
    dp = par["dp"]
    params_tbl = doc.get("params") or [{"id": "0"}]
    if len(params_tbl) != 1 or set(params_tbl[0]) != {"id"}:
        raise Unsupported("params: one entry with its id only")
    pid = params_tbl[0]["id"]

    inputs = {}
    for i in doc.get("inputs", []):
        refuse_keys(i, {"name", "draw", "shape", "values", "noise_std"}, f"inputs.{i.get('name')}.")
        if len(i["shape"]) != 2 or i["shape"][0] % dp:
            raise Unsupported(f"inputs.{i['name']}.shape: [rows, features], rows a multiple of dp")
        inputs[i["name"]] = i
    loss = doc["loss"]
    refuse_keys(loss, {"op", "target"}, "loss.")
    if loss["op"] != "mse":
        raise Unsupported("loss.op: only mse")
    y_name = loss["target"]

    layers, params = [], []
    width = None
    prev = None
    for idx, l in enumerate(doc["layers"]):
        refuse_keys(l, {"name", "op", "input", "out", "bias"}, f"layers.{l['name']}.")
        src = l.get("input")
        if idx == 0:
            if src not in inputs:
                raise Unsupported("layers: the first layer reads an input")
            x_name = src
            width = inputs[src]["shape"][1]
        elif src is not None and src != prev:
            raise Unsupported(f"layers.{l['name']}.input: only a chain (each layer reads the one before)")
        if l["op"] == "linear":
            if not l.get("bias", True):
                raise Unsupported(f"layers.{l['name']}.bias: an outer-loop linear layer has a bias")
            n = l["out"]
            layers.append(("linear", l["name"], width, n))
            params.append((f"{l['name']}.kernel", [width, n]))
            params.append((f"{l['name']}.bias", [n]))
            width = n
        elif l["op"] == "tanh":
            if "out" in l or "bias" in l:
                raise Unsupported(f"layers.{l['name']}: tanh has no out or bias")
            layers.append(("tanh", l["name"]))
        else:
            raise Unsupported(f"layers.{l['name']}.op = {l['op']!r}: only linear and tanh")
        prev = f"{l['name']}.out"
    if layers[0][0] != "linear":
        raise Unsupported("layers: the chain starts with a linear layer")
    if inputs[y_name]["shape"][1] != width:
        raise Unsupported("loss.target: shape differs from the last layer's output")

    init = doc.get("init", {})
    refuse_keys(init, {"values", "scheme"}, "init.")
    xi, yi = inputs[x_name], inputs[y_name]
    if xi["draw"] == "fixed" and yi["draw"] == "fixed" and "values" in init:
        vals = init["values"]
        fixed = {
            "params": [np.asarray(vals[n], dtype=np.float64).astype(np.float32).reshape(s)
                       for n, s in params],
            "x": np.asarray(xi["values"], dtype=np.float64).astype(np.float32).reshape(xi["shape"]),
            "y": np.asarray(yi["values"], dtype=np.float64).astype(np.float32).reshape(yi["shape"]),
        }
    elif (xi["draw"], yi["draw"], init.get("scheme")) == ("randn", "teacher", "flax"):
        if doc.get("rng") != "chacha":
            raise Unsupported("rng: drawn outer-loop data is ChaCha's")
        fixed = None
    else:
        raise Unsupported("inputs/init: fixed values everywhere, or randn + teacher + scheme flax")
    if len(inputs) != 2:
        raise Unsupported("inputs: the model input and the target")

    refuse_keys(tr, {"steps", "optimizer", "lr", "betas", "eps", "weight_decay", "outer"}, "train.")
    if tr["optimizer"] == "sgd":
        inner = {"kind": "sgd", "lr": tr["lr"]}
    elif tr["optimizer"] == "adamw":
        b1, b2 = tr.get("betas", [0.9, 0.999])
        inner = {"kind": "adamw", "lr": tr["lr"], "b1": b1, "b2": b2, "eps": tr.get("eps", 1e-8),
                 "wd": tr.get("weight_decay", 1e-4)}
    else:
        raise Unsupported(f"train.optimizer = {tr['optimizer']!r}: only sgd and adamw")
    ou = tr["outer"]
    refuse_keys(ou, {"sync_period", "optimizer", "lr", "momentum", "execution"}, "train.outer.")
    oname = ou.get("optimizer", "nesterov")
    outer = {"kind": oname, "lr": ou["lr"], "sync": ou["sync_period"],
             "momentum": None if oname == "sgd" else ou.get("momentum", 0.9)}

    kinds = {("loss", "value"): "loss", ("outer", "value"): "outer_params",
             ("outer", "unchanged"): "outer_unchanged", ("replicas", "equals-outer"): "inner_equals_outer"}
    checks = []
    for c in doc.get("checks", []):
        refuse_keys(c, {"name", "tensor", "kind"}, f"checks.{c.get('name')}.")
        k = kinds.get((c["tensor"], c.get("kind", "value")))
        if k is None:
            raise Unsupported(f"checks.{c['name']}: not an outer-loop check")
        checks.append((c["name"], k))
    return Spec(pid, dp, layers, params, x_name, y_name, xi["shape"], yi["shape"], fixed,
                tr["steps"], inner, outer, ou.get("execution", "jit"), checks,
                doc.get("first_seed", 0))


def drawn_data(draws_bin, path, spec, seed):
    """seedsweep's own draws for `seed` (examples/outer_draws.rs)."""
    if not draws_bin:
        raise Unsupported("drawn data (ChaCha streams): pass --draws PATH/outer_draws")
    out = subprocess.run([draws_bin, path, spec.pid, str(seed)], check=True,
                         capture_output=True, text=True).stdout
    d = json.loads(out)
    if [p["name"] for p in d["params"]] != [n for n, _ in spec.params]:
        raise SystemExit(f"{path}: the draws name other parameters")
    params = [from_hex(p["bits"]).reshape(s) for p, (_, s) in zip(d["params"], spec.params)]
    return {"params": params, "x": from_hex(d["x"]["bits"]).reshape(spec.x_shape),
            "y": from_hex(d["y"]["bits"]).reshape(spec.y_shape)}


# ---------------------------------------------------------------------------------------
# the test, in JAX
# ---------------------------------------------------------------------------------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass
class TrainState:
    """flax.training.train_state.TrainState's fields that the step touches."""

    step: jax.Array
    params: dict
    opt_state: object

    def apply_gradients(self, tx, grads):
        updates, new_opt_state = tx.update(grads, self.opt_state, self.params)
        new_params = optax.apply_updates(self.params, updates)
        return TrainState(self.step + 1, new_params, new_opt_state)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DiLoCoState:
    inner_state: TrainState
    params: dict
    outer_opt_state: object
    step: jax.Array


def build(spec, dtype):
    n = spec.replicas

    def apply_one(params, x):
        for layer in spec.layers:
            if layer[0] == "linear":
                name = layer[1]
                k = params[name]["kernel"]
                y = jax.lax.dot_general(x, k, (((x.ndim - 1,), (0,)), ((), ())))
                x = y + jnp.reshape(params[name]["bias"], (1,) * (y.ndim - 1) + (-1,))
            else:
                x = jnp.tanh(x)
        return x

    vmapped_apply = jax.vmap(apply_one, in_axes=(None, 0))
    i = spec.inner
    if i["kind"] == "sgd":
        tx = optax.sgd(learning_rate=i["lr"])
    else:
        tx = optax.adamw(learning_rate=i["lr"], b1=i["b1"], b2=i["b2"], eps=i["eps"],
                         weight_decay=i["wd"])
    o = spec.outer
    if o["kind"] == "sgd":
        outer_tx = optax.sgd(o["lr"])
    else:
        outer_tx = optax.sgd(o["lr"], momentum=o["momentum"], nesterov=o["kind"] == "nesterov")

    def train_step(state, batch):
        def loss_fn(params, batch):
            inputs, labels = batch
            logits = vmapped_apply(params, inputs)
            return jnp.mean(jnp.square(logits - labels))

        loss, grad = jax.value_and_grad(loss_fn)(state.params, batch)
        return state.apply_gradients(tx, grad), loss

    def broadcast(tree):
        return jax.tree.map(lambda a: jnp.stack([a] * n), tree)

    def synchronize(state):
        broadcast_outer = broadcast(state.params)
        delta = jax.tree.map(lambda x, y: y - x, state.inner_state.params, broadcast_outer)
        pseudo_grad = jax.tree.map(lambda d: jnp.mean(d, axis=0), delta)
        updates, new_opt_state = outer_tx.update(pseudo_grad, state.outer_opt_state, state.params)
        new_outer = optax.apply_updates(state.params, updates)
        inner = jax.vmap(lambda s: dataclasses.replace(s, params=new_outer))(state.inner_state)
        return dataclasses.replace(state, params=new_outer, outer_opt_state=new_opt_state,
                                   inner_state=inner)

    def diloco_train_step(state, batch):
        inner_state, losses = jax.vmap(train_step)(state.inner_state, batch)
        total = jnp.sum(losses, axis=0)
        avg = (total / n).astype(total.dtype)
        new_step = inner_state.step[0]
        state = dataclasses.replace(state, inner_state=inner_state, step=new_step)
        state = jax.lax.cond(new_step % o["sync"] == 0, synchronize, lambda s: s, state)
        return state, avg

    def init_state(data):
        params = {}
        for (pname, _), v in zip(spec.params, data["params"]):
            layer, kind = pname.rsplit(".", 1)
            params.setdefault(layer, {})[kind] = jnp.asarray(v, dtype)
        inner = TrainState(jnp.array(0, jnp.int32), params, tx.init(params))
        state = DiLoCoState(inner_state=broadcast(inner), params=params,
                            outer_opt_state=outer_tx.init(params), step=jnp.array(0, jnp.int32))
        rows_x = spec.x_shape[0] // n
        x = jnp.asarray(np.asarray(data["x"]).reshape(n, rows_x, spec.x_shape[1]), dtype)
        y = jnp.asarray(np.asarray(data["y"]).reshape(n, rows_x, spec.y_shape[1]), dtype)
        return state, (x, y)

    return diloco_train_step, init_state


def flat(spec, params, replica=None):
    parts = []
    for pname, _ in spec.params:
        layer, kind = pname.rsplit(".", 1)
        a = np.asarray(params[layer][kind])
        if replica is not None:
            a = a[replica]
        parts.append(np.ravel(a))
    return np.concatenate(parts)


def program(spec, execution, dtype):
    """The step as the test calls it (`jax.jit` of it under jit) and the state's builder."""
    step_fn, init_state = build(spec, dtype)
    if execution == "jit":
        step_fn = jax.jit(step_fn)
    elif execution != "eager":
        raise Unsupported(f"execution = {execution!r}")
    return step_fn, init_state


def simulate(prog, spec, data):
    """Every step's loss, outer parameters before and after it, and every replica's
    parameters after it (flat)."""
    step_fn, init_state = prog
    state, batch = init_state(data)
    out = []
    for _ in range(spec.steps):
        before = flat(spec, state.params)
        state, loss = step_fn(state, batch)
        out.append({
            "loss": np.asarray(loss),
            "before": before,
            "outer": flat(spec, state.params),
            "inner": [flat(spec, state.inner_state.params, r) for r in range(spec.replicas)],
        })
    return out


def record(spec, steps, hex_limit):
    """{check@label: encoded tensor} as seedsweep's trace holds them."""
    rec = {}
    h = spec.outer["sync"]
    for k, s in enumerate(steps, start=1):
        sync = k % h == 0
        for name, kind in spec.checks:
            if kind == "loss":
                rec[f"{name}@{k}"] = enc(np.reshape(s["loss"], (1,)), hex_limit)
            elif kind == "outer_unchanged" and not sync:
                rec[f"{name}@{k}"] = enc(s["outer"], hex_limit)
                rec[f"{name}_expected@{k}"] = enc(s["before"], hex_limit)
            elif kind == "outer_params" and sync:
                rec[f"{name}@{k}"] = enc(s["outer"], hex_limit)
            elif kind == "inner_equals_outer" and sync:
                rec[f"{name}@{k}"] = enc(np.stack(s["inner"]), hex_limit)
                rec[f"{name}_expected@{k}"] = enc(np.stack([s["outer"]] * spec.replicas), hex_limit)
    return rec


def mirror(path, spec, seeds, first_seed, execution, draws_bin, stored_bits):
    fs = spec.first_seed if first_seed is None else first_seed
    if spec.fixed is not None:
        seeds = 1  # the file's data: every seed is the same run
    runs, keys = [], None
    prog = program(spec, execution, jnp.float32)
    for seed in range(fs, fs + seeds):
        data = spec.fixed if spec.fixed is not None else drawn_data(draws_bin, path, spec, seed)
        steps = simulate(prog, spec, data)
        rec = record(spec, steps, stored_bits if seed == fs else 0)
        ks = sorted(rec)
        keys = keys or ks
        if ks != keys:
            raise SystemExit(f"{path}: seeds record different tensors")
        run = {"param": spec.pid, "seed": seed,
               "reference": "".join(rec[k]["fnv1a64"] for k in ks)}
        bits = {k: t["hex"] for k, t in rec.items() if "hex" in t}
        if bits:
            run["reference_bits"] = bits
        runs.append(run)
    return {spec.pid: keys}, runs


def conditions(execution, data):
    return {
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "optax": optax.__version__,
        "backend": jax.default_backend(),
        "x64": bool(jax.config.jax_enable_x64),
        "execution": execution,
        "precision": "f32",
        "data": data,
        "machine": platform.machine(),
        "replica_sums": "JAX's own (jnp.sum / jnp.mean over the vmapped replica axis, one device)",
    }


# ---------------------------------------------------------------------------------------
# --validate: scripts/crosscheck_jax.py's fixture
# ---------------------------------------------------------------------------------------

def validate(path, spec, fixture):
    with open(fixture) as f:
        doc = json.load(f)
    if spec.fixed is None:
        raise SystemExit("--validate: the crosscheck fixture is of a file with fixed data")
    total = same = 0
    for run in doc["runs"]:
        prec, mode = run["precision"], run["mode"]
        if prec == "bf16":
            print(f"{prec} {mode}: skipped (this harness runs f32 and f64, not bf16 dots)")
            continue
        dtype = jnp.float64 if prec == "f64" else jnp.float32
        data = {k: ([np.asarray(p, np.float64) for p in v] if k == "params" else np.asarray(v, np.float64))
                for k, v in spec.fixed.items()} if prec == "f64" else spec.fixed
        steps = simulate(program(spec, mode, dtype), spec, data)

        def b(v):
            if prec == "f64":
                return struct.unpack("<Q", struct.pack("<d", float(v)))[0]
            return int(np.float32(v).view(np.uint32))

        bad = []
        for s, want in zip(steps, run["steps"], strict=True):
            got = ([b(s["loss"])] + [b(v) for v in s["outer"]]
                   + [b(v) for r in s["inner"] for v in r])
            exp = [want["loss_bits"]] + want["outer_bits"] + [v for r in want["inner_bits"] for v in r]
            total += len(exp)
            same += sum(g == e for g, e in zip(got, exp))
            if got != exp:
                bad.append(want["step"])
        print(f"{prec} {mode}: {'every value bit-identical' if not bad else f'differs at steps {bad}'}")
    print(f"{same} of {total} values bit-identical")
    return same == total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, help="default: the file's first_seed")
    ap.add_argument("--execution", choices=("eager", "jit"), help="default: the file's")
    ap.add_argument("--draws", metavar="BIN", help="the outer_draws example binary (drawn data)")
    ap.add_argument("--stored-bits", type=int, default=64,
                    help="keep bit patterns of tensors up to this many elements (default 64)")
    ap.add_argument("--x64", action="store_true", help="enable jax_enable_x64 (not MaxText's default)")
    ap.add_argument("--validate", metavar="FIXTURE", help="compare with crosscheck_jax.py's fixture")
    ap.add_argument("-o", "--out", help="the fixture (one file given), else FILE.jax-<execution>.json")
    a = ap.parse_args()
    if a.out and len(a.files) != 1:
        ap.error("-o takes one file")
    status = 0
    for path in a.files:
        try:
            spec = read_spec(path)
            if a.validate:
                status |= 0 if validate(path, spec, a.validate) else 1
                continue
            execution = a.execution or spec.execution
            keys, runs = mirror(path, spec, a.seeds, a.first_seed, execution, a.draws, a.stored_bits)
        except Unsupported as e:
            print(f"{path}: not run: {e}", file=sys.stderr)
            status = 2
            continue
        data = "file" if spec.fixed is not None else "seedsweep's ChaCha draws (examples/outer_draws.rs)"
        doc = {"file": os.path.basename(path), "generator": "scripts/jax_mirror.py",
               "conditions": conditions(execution, data), "keys": keys, "runs": runs,
               "encoding": ("keys[param]: the tensors `check@label` in sorted order; "
                            "runs[].reference: their FNV-1a 64 digests (of the little-endian f32 "
                            "bytes, 16 hex digits each) concatenated in that order; "
                            "runs[].reference_bits: key -> 8 hex digits per element (the u32 bit "
                            "pattern, row-major) for the tensors of at most --stored-bits elements "
                            "at the first seed; one computation (JAX's one-device replicas)")}
        out = a.out or os.path.splitext(path)[0] + f".jax-{execution}.json"
        with open(out, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print(f"{path}: {len(runs)} runs -> {out}")
    sys.exit(status)


if __name__ == "__main__":
    main()
