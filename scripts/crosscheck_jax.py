#!/usr/bin/env python3
"""Cross-check seedsweep's T3 mirror (scenario `maxtext-diloco`) against real JAX on the CPU.

Runs MaxText's DiLoCoTest::test_diloco_training_simulation_with_mesh computation (mission.md,
T3) with jax + optax, independently of seedsweep, and prints the reported loss of steps 1-4 and
the outer parameters after the sync, in three precisions:

  f64   jax_enable_x64, every array float64 (the hand-computed constants' ground truth);
  f32   every array float32 (JAX on the CPU ignores dot precision: plain f32 dots);
  bf16  float32, but every dot, forward and backward, rounds its inputs to bfloat16
        (round to nearest even) and accumulates in f32: one-pass bf16, XLA's DEFAULT precision
        on TPU. The CPU ignores `precision=`, so the rounding is written out with a custom VJP.

The structure follows MaxText's diloco.py: the replicas' train steps are vmapped (drjax.map_fn),
the pseudo-gradient is jnp.mean over replicas of (outer - inner) (drjax.reduce_mean), the outer
optimizer is optax.sgd(1.0, momentum=0.9, nesterov=True), the reported loss is the replicas'
sum divided by 2 (typed_reduce_mean), and the model is nnx.Linear's dot_general + bias applied
per example under jax.vmap(in_axes=(None, 0)).

`--contraction` instead measures which f32 multiply-adds XLA's CPU backend fuses into one FMA
inside a jit (the elementwise order seedsweep's DiLoCo engine mirrors): the SGD update
p + (-lr) g, the Nesterov trace g + 0.9 t and update, and the loss's sum of squares.

The tests never need this script; it documents where the pinned values in
src/scenario/maxtext_diloco.rs and tests/diloco.rs came from. Needs `pip install jax optax`
(pinned with JAX 0.10.2, jaxlib 0.10.2, optax 0.2.8).

    python3 scripts/crosscheck_jax.py            # all three precisions
    python3 scripts/crosscheck_jax.py --contraction
"""
import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

NUM_REPLICAS, NUM_STEPS, SYNC_PERIOD = 2, 4, 3


def make_dense(dtype, bf16):
    """nnx.Linear's forward over a replica's examples, y = dot_general(x, kernel) + bias, with
    every dot's inputs optionally rounded to bf16 (the forward dot and the kernel-gradient dot
    x^T g; the input gradient is computed but unused, as in the test).

    The test applies the per-example layer with jax.vmap(in_axes=(None, 0)); JAX batches that
    into this one dot_general over the examples (and its transpose into one dot x^T g), which
    is what the optimized HLO shows, so the dots are written at that level here."""

    def q(a):
        return jnp.asarray(a, jnp.bfloat16).astype(dtype) if bf16 else a

    @jax.custom_vjp
    def dot(x, k):
        return jnp.dot(q(x), q(k))

    def fwd(x, k):
        return dot(x, k), (x, k)

    def bwd(res, g):
        x, k = res
        return jnp.dot(q(g), q(k).T), jnp.dot(q(x).T, q(g))

    dot.defvjp(fwd, bwd)

    def apply(params, x):  # examples x (2, 2) -> (2, 1)
        return dot(x, params["kernel"]) + params["bias"]

    return apply


def simulate(precision):
    dtype = jnp.float64 if precision == "f64" else jnp.float32
    vmapped_apply = make_dense(dtype, precision == "bf16")

    def loss_fn(params, batch):
        inputs, labels = batch
        residual = vmapped_apply(params, inputs) - labels
        return jnp.mean(jnp.square(residual))

    tx = optax.sgd(learning_rate=0.1)
    outer_tx = optax.sgd(1.0, momentum=0.9, nesterov=True)

    def train_step(params, opt_state, batch):
        loss, grad = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = tx.update(grad, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    inputs = jnp.array([[[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]], dtype)
    labels = jnp.array([[[1.0], [2.0]], [[2.0], [3.0]]], dtype)
    params = {"kernel": jnp.array([[2.0], [1.0]], dtype), "bias": jnp.array([1.0], dtype)}

    def bcast(tree):
        return jax.tree.map(lambda a: jnp.stack([a] * NUM_REPLICAS), tree)

    @jax.jit
    def diloco_step(inner, inner_opt, outer, outer_opt, step):
        inner, inner_opt, losses = jax.vmap(train_step)(inner, inner_opt, (inputs, labels))
        loss = (jnp.sum(losses) / NUM_REPLICAS).astype(dtype)

        def synchronize(state):
            inner, outer, outer_opt = state
            delta = jax.tree.map(lambda i, o: o - i, inner, bcast(outer))
            pseudo_grad = jax.tree.map(lambda d: jnp.mean(d, axis=0), delta)
            updates, outer_opt = outer_tx.update(pseudo_grad, outer_opt, outer)
            outer = optax.apply_updates(outer, updates)
            return bcast(outer), outer, outer_opt

        inner, outer, outer_opt = jax.lax.cond(
            step % SYNC_PERIOD == 0, synchronize, lambda s: s, (inner, outer, outer_opt)
        )
        return inner, inner_opt, outer, outer_opt, loss

    inner, inner_opt = bcast(params), jax.vmap(tx.init)(bcast(params))
    outer, outer_opt = params, outer_tx.init(params)
    out = []
    for step in range(1, NUM_STEPS + 1):
        inner, inner_opt, outer, outer_opt, loss = diloco_step(
            inner, inner_opt, outer, outer_opt, step
        )
        flat = np.concatenate([np.ravel(outer["kernel"]), np.ravel(outer["bias"])])
        out.append((step, float(loss), [float(v) for v in flat]))
    return out


def contraction():
    """Fractions of random inputs on which the jitted f32 expression equals the plain
    (separately rounded) and the fused (one FMA) evaluation."""
    f = np.float32
    rng = np.random.default_rng(0)
    n = 4000

    def fma(a, b, c):  # exact product in f64, one rounding to f32 (ties negligible here)
        return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + c).astype(f)

    tx = optax.sgd(0.1)

    def sgd(p, g):
        u, _ = tx.update(g, tx.init(p), p)
        return optax.apply_updates(p, u)

    p, g = (rng.standard_normal((n, 3)).astype(f) for _ in range(2))
    got = np.asarray(jax.jit(jax.vmap(sgd))(p, g))
    print(f"sgd p + (-0.1)g   plain {np.mean(got == p + g * f(-0.1)):.3f}  "
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
    print(f"trace g + 0.9t    plain {np.mean(new_t == g + f(0.9) * t):.3f}  "
          f"fma {np.mean(new_t == t_fma):.3f}")
    print(f"outer o - (g + 0.9t')  plain {np.mean(new_o == o - (g + f(0.9) * t_fma)):.3f}  "
          f"fma {np.mean(new_o == o - fma(t_fma, f(0.9), g)):.3f}")

    r = rng.standard_normal((n, 2)).astype(f)
    got = np.asarray(jax.jit(jax.vmap(lambda r: jnp.mean(jnp.square(r))))(r))
    plain = (r[:, 0] * r[:, 0] + r[:, 1] * r[:, 1]) * f(0.5)
    fused = fma(r[:, 1], r[:, 1], r[:, 0] * r[:, 0]) * f(0.5)
    print(f"mean of squares   plain {np.mean(got == plain):.3f}  fma {np.mean(got == fused):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contraction", action="store_true", help="measure XLA CPU's FMA contraction")
    args = ap.parse_args()
    print(f"jax {jax.__version__}, optax {optax.__version__}")
    if args.contraction:
        contraction()
        return
    for precision in ("f64", "f32", "bf16"):
        for step, loss, outer in simulate(precision):
            print(f"{precision:4s} step {step}  loss {loss!r}  outer {outer!r}")


if __name__ == "__main__":
    main()
