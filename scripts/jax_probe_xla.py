#!/usr/bin/env python3
"""Measures, on random f32 inputs, which evaluation order JAX's CPU backend uses for the ops of
an outer-loop file (the diagnosis behind tests/data/jax_corpus/agreement-jax.tsv): the per-example
dot of a flax kernel, the mean of squares, tanh, the replica sum, and optax.adamw's update, each
eagerly (one XLA executable per op) and under jax.jit. Prints the fraction of inputs on which
JAX's result equals each candidate model, bit for bit. Models (every product and sum rounded
to f32 unless an FMA is named):

- dot x[in]·k[in, 1] under jax.vmap: `plain` sequential sum from 0; `fma` the chain
  s = fma(x_i, k_i, s) from s = 0;
- the kernel and bias gradients of that layer under jax.grad of its MSE: the kernel's as a
  plain or FMA chain over the examples, the bias's as a sequential sum;
- mean of n squares: sequential from 0, plain or as an FMA chain, then / n;
- tanh: correctly rounded (the f64 tanh rounded once);
- jnp.sum over the replica axis: sequential ((x0 + x1) + x2) + ...;
- adamw (optax 0.2.8, jax_enable_x64 off as MaxText's test runs): the moments
  m = (1-b1)·g + b1·m, v = (1-b2)·(g·g) + b2·v plain or as fma((1-b1), g, b1·m); the bias
  correction bc = 1 − b^t in f32 (b rounded to f32, b^t correctly rounded) or in f64 (rounded
  once); m̂ = m / bc or m · (1/bc).

Needs jax 0.10.2, jaxlib 0.10.2, optax 0.2.8 (outside the repo).

    /work/venv-jax/bin/python scripts/jax_probe_xla.py
"""
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import optax

f = np.float32
rng = np.random.default_rng(0)


def fma(a, b, c):
    """One rounding of the exact a·b + c (f64 holds the product of two f32 exactly; the sum
    is rounded twice, innocuous at f32 for these magnitudes)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(f)


def seq_plain(a, b):
    s = f(0)
    for x, y in zip(a, b):
        s = f(s + f(x * y))
    return s


def seq_fma(a, b):
    s = f(0)
    for x, y in zip(a, b):
        s = fma(x, y, s)
    return s


def modes(fn):
    return (("eager", fn), ("jit", jax.jit(fn)))


def dots():
    print("dot x[in]·k[in, 1] per example under jax.vmap (40 x 8 examples)")
    fn0 = jax.vmap(lambda x, k: jax.lax.dot_general(x, k, (((0,), (0,)), ((), ()))), in_axes=(0, None))
    for mode, fn in modes(fn0):
        for n_in in (1, 2, 3, 4, 6, 8):
            hits = {"plain": 0, "fma": 0}
            tot = 0
            for _ in range(40):
                x = rng.standard_normal((8, n_in)).astype(f)
                k = rng.standard_normal((n_in, 1)).astype(f)
                got = np.asarray(fn(x, k))[:, 0]
                for e in range(8):
                    tot += 1
                    hits["plain"] += got[e] == seq_plain(x[e], k[:, 0])
                    hits["fma"] += got[e] == seq_fma(x[e], k[:, 0])
            print(f"  {mode:5s} in={n_in}: " + "  ".join(f"{k} {v / tot:.3f}" for k, v in hits.items()))


def grads(trials=100):
    """The gradients of a flax kernel [3, 1] and bias under jax.grad of the per-example
    vmapped linear layer's MSE, against dy = (2/B)·(pred − y) (pred the FMA chain):
    the kernel gradient as a plain or FMA chain over the B examples, the bias gradient as a
    sequential sum."""
    def apply(params, x):
        one = lambda p, xe: jax.lax.dot_general(xe, p["k"], (((0,), (0,)), ((), ()))) + p["b"]
        return jax.vmap(one, in_axes=(None, 0))(params, x)

    def loss(params, x, y):
        return jnp.mean(jnp.square(apply(params, x) - y))

    print(f"kernel and bias gradients of a linear 3->1 layer ({trials} draws)")
    for mode, g in modes(jax.grad(loss)):
        for B in (2, 3, 4, 8):
            hits = {"kernel plain": 0, "kernel fma": 0, "bias sequential": 0}
            for _ in range(trials):
                x = rng.standard_normal((B, 3)).astype(f)
                k = rng.standard_normal((3, 1)).astype(f)
                b = rng.standard_normal(1).astype(f)
                y = rng.standard_normal((B, 1)).astype(f)
                gr = g({"k": jnp.asarray(k), "b": jnp.asarray(b)}, x, y)
                pred = np.array([seq_fma(x[e], k[:, 0]) for e in range(B)], f) + b[0]
                dy = (f(2.0 / B) * (pred - y[:, 0]).astype(f)).astype(f)
                gk, gb = np.asarray(gr["k"])[:, 0], np.asarray(gr["b"])[0]
                hits["kernel plain"] += np.mean([gk[i] == seq_plain(x[:, i], dy) for i in range(3)])
                hits["kernel fma"] += np.mean([gk[i] == seq_fma(x[:, i], dy) for i in range(3)])
                s = f(0)
                for d in dy:
                    s = f(s + d)
                hits["bias sequential"] += gb == s
            print(f"  {mode:5s} B={B}: " + "  ".join(f"{k} {v / trials:.3f}" for k, v in hits.items()))


def means(trials=300):
    print(f"mean of n squares ({trials} draws)")
    for mode, fn in modes(lambda r: jnp.mean(jnp.square(r))):
        for n in (2, 3, 4, 6, 8, 16):
            hits = {"plain": 0, "fma": 0}
            for _ in range(trials):
                r = rng.standard_normal(n).astype(f)
                got = f(fn(r))
                hits["plain"] += got == f(seq_plain(r, r) / f(n))
                hits["fma"] += got == f(seq_fma(r, r) / f(n))
            print(f"  {mode:5s} n={n:2d}: " + "  ".join(f"{k} {v / trials:.3f}" for k, v in hits.items()))


def tanh():
    x = rng.standard_normal(20000).astype(f) * f(2)
    cr = np.tanh(x.astype(np.float64)).astype(f)
    for mode, fn in modes(jnp.tanh):
        print(f"tanh {mode:5s}: correctly rounded on {np.mean(np.asarray(fn(x)) == cr):.3f} of 20000 N(0, 4) inputs")


def replica_sums(trials=300):
    for mode, fn in modes(lambda v: jnp.sum(v, axis=0)):
        for n in (3, 4):
            h = 0
            for _ in range(trials):
                v = rng.standard_normal(n).astype(f)
                s = f(0)
                for a in v:
                    s = f(s + a)
                h += f(fn(v)) == s
            print(f"jnp.sum over {n} replicas {mode:5s}: sequential on {h / trials:.3f}")


def adamw(n=4000):
    b1, b2, eps = 0.9, 0.999, 1e-8
    tx = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

    def upd(g, m, v, count):
        u, s = tx.update(g, optax.ScaleByAdamState(count=count, mu=m, nu=v))
        return u, s.mu, s.nu

    g = rng.standard_normal(n).astype(f)
    m = rng.standard_normal(n).astype(f) * f(0.1)
    v = np.abs(rng.standard_normal(n).astype(f)) * f(0.1)
    c1, B1, c2, B2 = f(1 - b1), f(b1), f(1 - b2), f(b2)

    def sqrt(x):
        return np.sqrt(np.asarray(x, np.float64)).astype(f)

    print(f"optax.scale_by_adam(b1={b1}, b2={b2}), x64 off, {n} elements")
    for mode, fn in modes(upd):
        for t in (1, 2, 7):
            U, M, V = (np.asarray(a) for a in fn(g, m, v, jnp.array(t - 1, jnp.int32)))
            bc32 = [f(1) - f(float(Fraction(float(f(b))) ** t)) for b in (b1, b2)]
            bc64 = [f(1 - b ** t) for b in (b1, b2)]
            row = {
                "m plain": np.mean(M == c1 * g + B1 * m),
                "m fma(c1,g,b1·m)": np.mean(M == fma(c1, g, B1 * m)),
                "v plain": np.mean(V == c2 * (g * g) + B2 * v),
                "v fma(c2,g·g,b2·v)": np.mean(V == fma(c2, g * g, B2 * v)),
            }
            for name, (k1, k2) in (("bc f32", bc32), ("bc f64", bc64)):
                row[f"u m/bc, {name}"] = np.mean(U == (M / k1) / (sqrt(V / k2) + f(eps)))
                row[f"u m·(1/bc), {name}"] = np.mean(U == (M * (f(1) / k1)) / (sqrt(V * (f(1) / k2)) + f(eps)))
            print(f"  {mode:5s} t={t}: " + "  ".join(f"{k} {x:.3f}" for k, x in row.items()))


def main():
    print(f"jax {jax.__version__}, optax {optax.__version__}, backend {jax.default_backend()}, "
          f"x64 {jax.config.jax_enable_x64}")
    dots()
    grads()
    means()
    tanh()
    replica_sums()
    adamw()


if __name__ == "__main__":
    main()
