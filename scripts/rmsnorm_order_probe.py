#!/usr/bin/env python3
"""Checks the order of operations that src/ops/norm.rs states for RMSNorm against real torch.

Emulates, in numpy float32 (one rounding per op), torch's CPU `F.rms_norm` as torch 2.15 runs
it (`_fused_rms_norm` has no CPU kernel: the composite `rms_norm_composite` of
aten/src/ATen/native/layer_norm.cpp) and the autograd of that composite, with ATen's
reduction orders (aten/src/ATen/native/cpu/SumKernel.cpp, `cascade_sum`):

  forward   s = sum(x*x, -1) (inner order), ms = s / N, r = 1 / sqrt(ms + eps), y = (x*r)*w
  backward  g = dy*w, dw = sum(dy*(x*r), 0) (outer order), a = g*r, gr = sum(g*x, -1),
            d1 = (gr*-0.5) * ((r*r)*r), dm = d1 / N, dp = dm * (x*2),
            dx = a + dp, or (res + a) + dp where x also feeds a residual add

and compares every element's bits with torch's on many shapes (widths below, at and past one
8-lane vector and the 32-column blocks, row counts past one 16-row cascade block, 3-D
inputs), with and without weight, two eps, at the thread count given. It also shows that the
rejected candidates (mean as a multiply by 1/N; the residual summed after a + dp) differ from
torch. Exit status 1 if any emulated element differs.

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/rmsnorm_order_probe.py --threads 1

Measured (torch 2.15.0, AVX2, eager): every element identical at 1 and 2 threads (2,301,296 y,
1,150,648 dx, 1,150,648 dx beside a residual, 14,872 dw); the rejected candidates: 87.0 % of y
(mean by reciprocal), 65.4 % of dx (residual added last).
"""
import argparse
import sys

import numpy as np
import torch
import torch.nn.functional as F

f32 = np.float32


def ceil_log2(n):
    return 0 if n <= 1 else int(n - 1).bit_length()


def add(a, b):
    return np.asarray(np.asarray(a, f32) + np.asarray(b, f32), f32)


def cascade(vals, like):
    """multi_row_sum: 4 levels, level_step 2^max(4, ceil_log2(n)/4), for one (vector) column."""
    size = len(vals)
    lp = max(4, ceil_log2(size) // 4)
    step, mask = 1 << lp, (1 << lp) - 1
    acc = [np.zeros_like(like) for _ in range(4)]
    i = 0
    while i + step <= size:
        for _ in range(step):
            acc[0] = add(acc[0], vals[i])
            i += 1
        for j in range(1, 4):
            acc[j] = add(acc[j], acc[j - 1])
            acc[j - 1] = np.zeros_like(like)
            if i & (mask << (j * lp)):
                break
    while i < size:
        acc[0] = add(acc[0], vals[i])
        i += 1
    for j in range(1, 4):
        acc[0] = add(acc[0], acc[j])
    return acc[0]


def ilp4(vals, like):
    """row_sum: element i to partial i % 4 (each a cascade), leftovers to partial 0, then
    ((p0 + p1) + p2) + p3."""
    size, si = len(vals), len(vals) // 4
    p = [cascade([vals[4 * i + k] for i in range(si)], like) for k in range(4)]
    for i in range(si * 4, size):
        p[0] = add(p[0], vals[i])
    return add(add(add(p[0], p[1]), p[2]), p[3])


def inner_sum(row):
    """sum over a contiguous last dim (vectorized_inner_sum for n >= 8), stored as 0 + s."""
    n = len(row)
    if n < 8:
        return add(0, ilp4(list(row), f32(0)))
    vs = n // 8
    lanes = ilp4([row[8 * i:8 * i + 8] for i in range(vs)], np.zeros(8, f32))
    acc = f32(0)
    for v in row[vs * 8:]:
        acc = add(acc, v)
    for v in lanes:
        acc = add(acc, v)
    return add(0, acc)


def col_sums(a):
    """sum(0) of a row-major m x h tensor (vectorized_outer_sum / scalar_outer_sum)."""
    m, h = a.shape
    if h == 1:
        return np.array([inner_sum(a[:, 0])], f32)
    block = 32 if h >= 8 else 4
    cascaded = h // block * block
    out = np.zeros(h, f32)
    for c in range(h):
        col = list(a[:, c])
        out[c] = add(0, cascade(col, f32(0)) if c < cascaded else ilp4(col, f32(0)))
    return out


def emulate(x, w, dy, eps, res=None, mean_by_reciprocal=False, residual_last=False):
    m, n = x.shape
    s = np.array([inner_sum((x * x).astype(f32)[i]) for i in range(m)], f32)[:, None]
    ms = (s * (f32(1) / f32(n))).astype(f32) if mean_by_reciprocal else (s / f32(n)).astype(f32)
    r = (f32(1) / np.sqrt(add(ms, f32(eps)))).astype(f32)
    t = (x * r).astype(f32)
    y = (t * w).astype(f32) if w is not None else t
    g = (dy * w).astype(f32) if w is not None else dy
    dw = col_sums((dy * t).astype(f32)) if w is not None else None
    a = (g * r).astype(f32)
    gr = np.array([inner_sum((g * x).astype(f32)[i]) for i in range(m)], f32)[:, None]
    d1 = ((gr * f32(-0.5)).astype(f32) * ((r * r).astype(f32) * r).astype(f32)).astype(f32)
    dp = ((d1 / f32(n)).astype(f32) * (x * f32(2)).astype(f32)).astype(f32)
    if res is None:
        dx = add(a, dp)
    elif residual_last:
        dx = add(res, add(a, dp))
    else:
        dx = add(add(res, a), dp)
    return y, dx, dw


def same(a, b):
    a, b = np.asarray(a, f32), np.asarray(b, f32)
    return int((a.view(np.uint32) == b.view(np.uint32)).sum()), a.size


def torch_case(shape, affine, eps, seed, residual):
    gen = torch.Generator().manual_seed(seed)
    n = shape[-1]
    x = torch.randn(*shape, generator=gen)
    w = torch.randn(n, generator=gen) * 0.5 + 1 if affine else None
    up = torch.randn(*shape, generator=gen)
    xt = x.clone().requires_grad_(True)
    wt = w.clone().requires_grad_(True) if affine else None
    y = F.rms_norm(xt, (n,), wt, eps)
    y.retain_grad()
    (xt + y if residual else y).backward(up)
    flat = lambda t: t.detach().reshape(-1, n).numpy()
    return (flat(x), w.numpy() if affine else None, flat(y.grad), flat(y), flat(xt.grad),
            wt.grad.numpy() if affine else None, flat(up) if residual else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    shapes = [(8, 16), (8, 35), (6, 6), (5, 11), (6, 9), (40, 67), (3, 7, 35), (17, 3), (33, 40),
              (100, 300), (20, 1), (64, 8), (9, 130), (300, 5), (2, 5, 33), (256, 160), (64, 1000)]
    tally = {"y": [0, 0], "dx": [0, 0], "dw": [0, 0], "dx (residual)": [0, 0]}
    rejected = {"y, mean as s * (1/N)": [0, 0], "dx, residual added after a + dp": [0, 0]}
    for shape in shapes:
        for affine in (True, False):
            for eps in (1e-5, 1e-6):
                for seed in range(2):
                    for residual in (False, True):
                        x, w, dy, ty, tdx, tdw, res = torch_case(shape, affine, eps, seed, residual)
                        y, dx, dw = emulate(x, w, dy, eps, res)
                        key = "dx (residual)" if residual else "dx"
                        for k, (got, want) in [("y", (y, ty)), (key, (dx, tdx))] + (
                                [("dw", (dw, tdw))] if affine else []):
                            s, t = same(got, want)
                            tally[k][0] += s
                            tally[k][1] += t
                        y2, _, _ = emulate(x, w, dy, eps, res, mean_by_reciprocal=True)
                        s, t = same(y2, ty)
                        rejected["y, mean as s * (1/N)"][0] += s
                        rejected["y, mean as s * (1/N)"][1] += t
                        if residual:
                            _, dx2, _ = emulate(x, w, dy, eps, res, residual_last=True)
                            s, t = same(dx2, tdx)
                            rejected["dx, residual added after a + dp"][0] += s
                            rejected["dx, residual added after a + dp"][1] += t
    ok = True
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {a.threads} thread(s)")
    for k, (s, t) in tally.items():
        print(f"  stated order, {k}: {s}/{t} elements identical")
        ok &= s == t
    for k, (s, t) in rejected.items():
        print(f"  rejected candidate ({k}): {s}/{t} elements identical")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
