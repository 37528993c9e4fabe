#!/usr/bin/env python3
"""Cross-check seedsweep's T3 mirror (scenario `maxtext-diloco`) against real JAX on the CPU.

Runs MaxText's DiLoCoTest::test_diloco_training_simulation_with_mesh computation (mission.md,
T3) with jax + optax, independently of seedsweep, in two execution modes and three precisions,
and records at every step the reported loss, the outer parameters and every replica's inner
parameters:

  modes
  eager  `diloco_train_step` called directly, as the test does (drjax.program does not jit;
         drjax.map_fn is jax.vmap): every op of the inner step is its own XLA executable and
         rounds separately; only the sync inside jax.lax.cond is compiled.
  jit    jax.jit of the whole diloco_train_step: one XLA executable per step, in which XLA's CPU
         backend contracts multiply-adds into FMA.

  precisions
  f64    jax_enable_x64, every array float64 (the hand-computed constants' ground truth);
  f32    every array float32 (JAX on the CPU ignores dot precision: plain f32 dots);
  bf16   float32, but every dot, forward and backward, rounds its inputs to bfloat16
         (round to nearest even) and accumulates in f32: one-pass bf16, XLA's DEFAULT precision
         on TPU. The CPU ignores `precision=`, so the rounding is written out with a custom VJP.

The structure follows the test and MaxText's diloco.py: the per-example nnx.Linear forward
(dot_general(x, kernel) + bias) under jax.vmap(in_axes=(None, 0)); loss
mean(square(logits - labels)); flax's TrainState.apply_gradients (tx.update, then
optax.apply_updates, step + 1) with optax.sgd(0.1); the replicas' train steps vmapped
(drjax.map_fn); the reported loss the replicas' sum divided by 2 (typed_reduce_mean); the sync,
under jax.lax.cond(step % 3 == 0), takes outer - inner per replica, jnp.mean over replicas
(drjax.reduce_mean), optax.sgd(1.0, momentum=0.9, nesterov=True), and replaces every replica's
parameters. flax and drjax are not needed: their few lines are written out here.

`--fixture PATH` writes every recorded value (f32 and f64 as exact bit patterns, plus the f64
values as Python floats) as JSON; tests/data/jax_maxtext_diloco.json is that file, read by
tests/suite/diloco.rs. `--contraction` measures, on random inputs, which f32 multiply-adds XLA's CPU
backend contracts into one FMA inside one jitted executable, and prints the optimized HLO of
the jitted step's loss fusion.

The tests never need this script. Needs `pip install jax optax` (pinned with JAX 0.10.2,
jaxlib 0.10.2, optax 0.2.8).

    python3 scripts/crosscheck_jax.py                       # both modes, all precisions
    python3 scripts/crosscheck_jax.py --fixture tests/data/jax_maxtext_diloco.json
    python3 scripts/crosscheck_jax.py --contraction
"""
import argparse
import dataclasses
import importlib.metadata
import json
import struct

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

NUM_REPLICAS, NUM_STEPS, SYNC_PERIOD = 2, 4, 3
MODES = ("eager", "jit")
PRECISIONS = ("f64", "f32", "bf16")


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class TrainState:
    """flax.training.train_state.TrainState's fields that the test's step touches."""

    step: jax.Array
    params: dict
    opt_state: object

    def apply_gradients(self, tx, grads):
        # flax: updates, new_opt_state = tx.update(grads, opt_state, params);
        # new_params = optax.apply_updates(params, updates); step + 1.
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


def make_apply(dtype, bf16):
    """The test's vmapped_apply: nnx.Linear(2, 1) per example, y = dot_general(x, kernel) +
    bias, under jax.vmap(in_axes=(None, 0)). With bf16, the dot's inputs (forward and both
    backward dots) are rounded to bf16 first."""

    def q(a):
        return jnp.asarray(a, jnp.bfloat16).astype(dtype)

    def plain_dot(x, k):  # nnx.Linear: dot_general contracting x's last axis with k's first
        return jax.lax.dot_general(x, k, (((x.ndim - 1,), (0,)), ((), ())))

    @jax.custom_vjp
    def bf16_dot(x, k):
        return plain_dot(q(x), q(k))

    def fwd(x, k):
        return bf16_dot(x, k), (x, k)

    def bwd(res, g):
        x, k = res
        return plain_dot(q(g), q(k).T), jnp.outer(q(x), q(g))

    bf16_dot.defvjp(fwd, bwd)
    dot = bf16_dot if bf16 else plain_dot

    def apply_one(params, x):
        y = dot(x, params["kernel"])
        return y + jnp.reshape(params["bias"], (1,) * (y.ndim - 1) + (-1,))

    return jax.vmap(apply_one, in_axes=(None, 0))


def build(precision):
    dtype = jnp.float64 if precision == "f64" else jnp.float32
    vmapped_apply = make_apply(dtype, precision == "bf16")
    tx = optax.sgd(learning_rate=0.1)
    outer_tx = optax.sgd(1.0, momentum=0.9, nesterov=True)

    def train_step(state, batch):
        def loss_fn(params, batch):
            inputs, labels = batch
            logits = vmapped_apply(params, inputs)
            residual = logits - labels
            sq_residual = jnp.square(residual)
            return jnp.mean(sq_residual)

        loss, grad = jax.value_and_grad(loss_fn)(state.params, batch)
        return state.apply_gradients(tx, grad), loss

    def broadcast(tree):  # drjax.broadcast
        return jax.tree.map(lambda a: jnp.stack([a] * NUM_REPLICAS), tree)

    def synchronize(state):
        broadcast_outer = broadcast(state.params)
        delta = jax.tree.map(lambda x, y: y - x, state.inner_state.params, broadcast_outer)
        pseudo_grad = jax.tree.map(lambda d: jnp.mean(d, axis=0), delta)  # drjax.reduce_mean
        updates, new_opt_state = outer_tx.update(pseudo_grad, state.outer_opt_state, state.params)
        new_outer = optax.apply_updates(state.params, updates)
        inner = jax.vmap(lambda s: dataclasses.replace(s, params=new_outer))(state.inner_state)
        return dataclasses.replace(
            state, params=new_outer, outer_opt_state=new_opt_state, inner_state=inner
        )

    def diloco_train_step(state, batch):
        inner_state, losses = jax.vmap(train_step)(state.inner_state, batch)
        total = jnp.sum(losses, axis=0)  # drjax.reduce_sum
        avg = (total / NUM_REPLICAS).astype(total.dtype)  # typed_reduce_mean
        new_step = inner_state.step[0]
        state = dataclasses.replace(state, inner_state=inner_state, step=new_step)
        state = jax.lax.cond(new_step % SYNC_PERIOD == 0, synchronize, lambda s: s, state)
        return state, avg

    params = {"kernel": jnp.array([[2.0], [1.0]], dtype), "bias": jnp.array([1.0], dtype)}
    inner = TrainState(jnp.array(0, jnp.int32), params, tx.init(params))
    state = DiLoCoState(
        inner_state=broadcast(inner),
        params=params,
        outer_opt_state=outer_tx.init(params),
        step=jnp.array(0, jnp.int32),
    )
    inputs = jnp.array([[[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]], dtype)
    labels = jnp.array([[[1.0], [2.0]], [[2.0], [3.0]]], dtype)
    return diloco_train_step, state, (inputs, labels)


def flat(p):
    return [float(v) for v in np.concatenate([np.ravel(p["kernel"]), np.ravel(p["bias"])])]


def simulate(precision, mode):
    step_fn, state, batch = build(precision)
    if mode == "jit":
        step_fn = jax.jit(step_fn)
    out = []
    for step in range(1, NUM_STEPS + 1):
        state, loss = step_fn(state, batch)
        inner = state.inner_state.params
        out.append(
            {
                "step": step,
                "loss": float(loss),
                "outer": flat(state.params),
                "inner": [flat(jax.tree.map(lambda a, r=r: a[r], inner)) for r in range(2)],
            }
        )
    return out


def bits(v, precision):
    if precision == "f64":
        return struct.unpack("<Q", struct.pack("<d", v))[0]
    f = np.float32(v)
    assert float(f) == v, "an f32 run must hold f32 values"
    return int(f.view(np.uint32))


def fixture(path, runs):
    doc = {
        "meta": {
            "jax": jax.__version__,
            "jaxlib": importlib.metadata.version("jaxlib"),
            "optax": optax.__version__,
            "backend": jax.default_backend(),
            "generator": "scripts/crosscheck_jax.py --fixture",
        },
        "runs": [],
    }
    for (precision, mode), steps in runs.items():
        doc["runs"].append(
            {
                "precision": precision,
                "mode": mode,
                "steps": [
                    {
                        "step": s["step"],
                        "loss": s["loss"],
                        "loss_bits": bits(s["loss"], precision),
                        "outer_bits": [bits(v, precision) for v in s["outer"]],
                        "inner_bits": [[bits(v, precision) for v in r] for r in s["inner"]],
                    }
                    for s in steps
                ],
            }
        )
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def contraction():
    """Fractions of random inputs on which a jitted f32 expression equals the plain
    (separately rounded) and the fused (one FMA) evaluation, then the loss fusion's HLO."""
    f = np.float32
    rng = np.random.default_rng(0)
    n = 4000

    def fma(a, b, c):  # exact product in f64, one rounding to f32 (double rounding negligible)
        return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + c).astype(f)

    tx = optax.sgd(0.1)

    def sgd(p, g):
        u, _ = tx.update(g, tx.init(p), p)
        return optax.apply_updates(p, u)

    p, g = (rng.standard_normal((n, 3)).astype(f) for _ in range(2))
    got = np.asarray(jax.jit(jax.vmap(sgd))(p, g))
    print(f"sgd p + (-0.1)g, jit    plain {np.mean(got == p + g * f(-0.1)):.3f}  "
          f"fma {np.mean(got == fma(g, f(-0.1), p)):.3f}")
    got = np.asarray(jax.vmap(sgd)(p, g))
    print(f"sgd p + (-0.1)g, eager  plain {np.mean(got == p + g * f(-0.1)):.3f}  "
          f"fma {np.mean(got == fma(g, f(-0.1), p)):.3f}")

    otx = optax.sgd(1.0, momentum=0.9, nesterov=True)

    def outer(o, t, i0, i1):
        g = jnp.mean(jnp.stack([o - i0, o - i1]), axis=0)
        u, s = otx.update(g, (optax.TraceState(trace=t), optax.EmptyState()), o)
        return optax.apply_updates(o, u), s[0].trace

    o, t = (rng.standard_normal((n, 3)).astype(f) for _ in range(2))
    i0 = o + rng.standard_normal((n, 3)).astype(f) * f(0.1)
    i1 = o + rng.standard_normal((n, 3)).astype(f) * f(0.1)
    new_o, new_t = (np.asarray(v) for v in jax.jit(jax.vmap(outer))(o, t, i0, i1))
    g = ((o - i0) + (o - i1)) * f(0.5)
    t_fma = fma(t, f(0.9), g)
    print(f"trace g + 0.9t          plain {np.mean(new_t == g + f(0.9) * t):.3f}  "
          f"fma {np.mean(new_t == t_fma):.3f}")
    print(f"outer o - (g + 0.9t')   plain {np.mean(new_o == o - (g + f(0.9) * t_fma)):.3f}  "
          f"fma {np.mean(new_o == o - fma(t_fma, f(0.9), g)):.3f}")

    # The per-replica loss as the jitted step computes it: residual, square and mean in one
    # fusion (pred and y are inputs here, so the residual is computed inside it).
    pred, y = (rng.standard_normal((n, 2)).astype(f) for _ in range(2))
    got = np.asarray(jax.jit(jax.vmap(lambda p, y: jnp.mean(jnp.square(p - y))))(pred, y))
    r = pred - y
    plain = (r[:, 0] * r[:, 0] + r[:, 1] * r[:, 1]) * f(0.5)
    fma01 = fma(r[:, 0], r[:, 0], r[:, 1] * r[:, 1]) * f(0.5)
    fma10 = fma(r[:, 1], r[:, 1], r[:, 0] * r[:, 0]) * f(0.5)
    print(f"mean of 2 squares       plain {np.mean(got == plain):.3f}  "
          f"fma(r0,r0,r1*r1) {np.mean(got == fma01):.3f}  fma(r1,r1,r0*r0) {np.mean(got == fma10):.3f}")

    # The same inside the real jitted step (its loss fusion: dot output + bias - label, square,
    # reduce over the examples, * 0.5, reduce over the replicas, * 0.5), on random kernels,
    # biases and labels. One-hot inputs keep the dot exact, so pred = kernel entry.
    step_fn, state, batch = build("f32")
    jstep = jax.jit(step_fn)
    x = np.array([[[0, 1], [1, 0]], [[1, 0], [0, 1]]], f)
    trials = 1000
    hits = {"plain": 0, "fma(r0,r0,r1*r1)": 0, "fma(r1,r1,r0*r0)": 0}
    for _ in range(trials):
        k = rng.standard_normal((2, 2, 1)).astype(f)
        b = rng.standard_normal((2, 1)).astype(f)
        y = rng.standard_normal((2, 2, 1)).astype(f)
        inner = dataclasses.replace(state.inner_state, params={"kernel": k, "bias": b})
        _, got = jstep(dataclasses.replace(state, inner_state=inner), (x, y))
        got = f(got)
        pred = np.einsum("rei,rio->reo", x, k)  # exact: one-hot rows
        r = (pred + b[:, None, :]) - y  # (replica, example, 1), each op rounded
        r0, r1 = r[:, 0, 0], r[:, 1, 0]
        for name, per in (
            ("plain", (r0 * r0 + r1 * r1) * f(0.5)),
            ("fma(r0,r0,r1*r1)", fma(r0, r0, r1 * r1) * f(0.5)),
            ("fma(r1,r1,r0*r0)", fma(r1, r1, r0 * r0) * f(0.5)),
        ):
            hits[name] += (per[0] + per[1]) * f(0.5) == got
    print("loss of the jitted step  " + "  ".join(f"{k} {v / trials:.3f}" for k, v in hits.items()))

    hlo = jstep.lower(state, batch).compile().as_text()
    print("optimized HLO of the jitted f32 step, fusions with a reduce:")
    for block in hlo.split("\n\n"):
        if " reduce(" in block and "fused_computation" in block.split("\n")[0]:
            print(block)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contraction", action="store_true", help="measure XLA CPU's FMA contraction")
    ap.add_argument("--fixture", metavar="PATH", help="write every recorded value as JSON")
    args = ap.parse_args()
    print(f"jax {jax.__version__}, optax {optax.__version__}, backend {jax.default_backend()}")
    if args.contraction:
        contraction()
        return
    runs = {(p, m): simulate(p, m) for p in PRECISIONS for m in MODES}
    for (precision, mode), steps in runs.items():
        for s in steps:
            print(f"{precision:4s} {mode:5s} step {s['step']}  loss {s['loss']!r}  "
                  f"outer {s['outer']!r}")
    for precision in PRECISIONS:
        e, j = runs[(precision, "eager")], runs[(precision, "jit")]
        diff = [s["step"] for s, t in zip(e, j) if s["loss"] != t["loss"]]
        print(f"{precision}: eager and jit losses differ at steps {diff}")
    if args.fixture:
        fixture(args.fixture, runs)
        print(f"wrote {args.fixture}")


if __name__ == "__main__":
    main()
