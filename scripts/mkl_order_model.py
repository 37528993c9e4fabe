#!/usr/bin/env python3
"""The one- and two-thread MKL sgemm order models of src/kernels/mkl_sgemm.rs, in Python, checked
against torch: how the rules were found and how to re-check them on another machine.

The model gives every output element of the four matmul roles of F.linear (forward,
forward-bias, grad-input, grad-weight; scripts/reveal_order.py's doc) a summation tree over its
reduction terms, from the shape and the element's position alone (the rules are in
src/kernels/mkl_sgemm.rs's doc). Two checks:

  check    random shapes, random inputs with varied exponents: torch's output against the
           model's trees evaluated exactly in f32 (numpy; an FMA is emulated exactly by a
           round-to-odd f64 sum), every element bit for bit; prints the exact cases per role.
  compare  a revealed-order file (scripts/reveal_order.py --out): the model's program text of
           every element against the file's.

    ATEN_CPU_CAPABILITY=avx2 python3 scripts/mkl_order_model.py check --shapes 200 --dims 1-130
    python3 scripts/mkl_order_model.py compare configs/revealed/mkl-threads-1.toml

`--threads 2` checks the two-thread model (torch.set_num_threads(2)) instead: MKL splits the
output rows between the threads at 4*ceil(ceil(rows/2)/4) unless the product is a gemv or small
(k <= 4, or k <= 16 and cols <= 16), and each thread's part runs the one-thread gemm kernels on
its rows, except that a part never takes the gemv kernel (a part of 1 to 3 rows is narrow), so
only rows 5-7 and 9-11 with cols >= 12 differ from one thread (`tree2`).

    ATEN_CPU_CAPABILITY=avx2 python3 scripts/mkl_order_model.py check --threads 2 --shapes 200 --dims 1-20
    python3 scripts/mkl_order_model.py compare configs/revealed/mkl-threads-2.toml

The operands are torch-allocated (reveal_order.matmul), as in training: MKL's narrow kernels
peel terms to 16-byte boundaries, so where a row starts decides its order.
"""
import argparse
import os
import sys
import tomllib
from functools import lru_cache

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reveal_order as ro  # noqa: E402

sys.setrecursionlimit(100000)
ROLES = ro.ROLES

# Trees: an int is a rounded term fl(a_t*b_t); ("F", s, e) the FMA chain over s..e from +0;
# (x, y) the rounded sum of two subtrees.


def chain(terms, start=None):
    node = start
    for t in terms:
        node = t if node is None else (node, t)
    return node


@lru_cache(maxsize=None)
def vdot(red, peel, lanes, step):
    """peel terms chained into s; `lanes` accumulators (lane 0 from s) over whole steps of
    `step` terms; lanes folded in halves to 4, then (l0 + l2) + (l1 + l3); the tail chained on.
    One rounded chain if fewer than `step` terms follow the peel."""
    if peel >= red or red - peel < step:
        return chain(range(red))
    s = chain(range(peel)) if peel else None
    q = (red - peel) // step * step // lanes
    ls = [chain([peel + l + lanes * i for i in range(q)], s if l == 0 else None) for l in range(lanes)]
    while len(ls) > 4:
        h = len(ls) // 2
        ls = [(ls[i], ls[i + h]) for i in range(h)]
    return chain(range(peel + lanes * q, red), ((ls[0], ls[2]), (ls[1], ls[3])))


@lru_cache(maxsize=None)
def p8(red):
    acc = None
    full = red // 8 * 8
    for b in range(0, full, 8):
        acc = (chain(range(b, b + 4), acc), chain(range(b + 4, b + 8)))
    return chain(range(full, red), acc)


def mkl_blocks(k):
    """KSplit::Mkl: one block up to 192; below 384 the even part in two halves (+ a last
    one if odd); else blocks of 192."""
    if k <= 192:
        return [(0, k)]
    if k < 384:
        e = k & ~1
        return [(0, e // 2), (e // 2, e)] + ([(e, k)] if k > e else [])
    return [(s, min(s + 192, k)) for s in range(0, k, 192)]


def kernel(role, rows, cols):
    if role in ("forward", "forward-bias") and (rows == 1 or cols == 1):
        return "gemv"
    if role == "grad-input" and cols == 1:
        return "chain" if rows == 1 else "gemv"
    if rows >= 4 and cols >= 12:
        return "main"
    return "dot-tn" if role in ("forward", "forward-bias") else "chain-nn"


def gemv(red, count, e):
    g = count // 4 * 4
    if e < g:
        return vdot(red, 4 - ((e | 3) * red) % 4, 4, 4)
    return vdot(red, 4, 8, 8) if (e - g) % 2 == 0 else vdot(red, 4, 4, 8)


def tree(role, rows, red, cols, i, j, narrow=False):
    """`narrow`: the narrow kernel of the role whatever the shape (two threads' tail rows)."""
    k = red - 1 if role == "forward-bias" else red
    kern = kernel(role, rows, cols)
    if narrow:
        kern = "dot-tn" if role in ("forward", "forward-bias") else "chain-nn"
    if kern == "main":
        node = None
        for n, (s, e) in enumerate(mkl_blocks(k)):
            node = ("F", s, e) if node is None else (node, ("F", s, e))
            if n == 0 and role == "forward-bias":
                node = (node, k)
        return node
    if kern == "gemv":
        count, e = (cols, j) if rows == 1 and role != "grad-input" else (rows, i)
        t = gemv(k, count, e)
    elif kern == "dot-tn":
        t = vdot(k, (-(i * k)) % 4, 4, 4) if j < cols // 4 * 4 else vdot(k, (-(i * k)) % 4, 8, 8)
    elif kern == "chain-nn":
        p = (-(i * cols)) % 4
        t = p8(k) if (p > 0 and cols - p >= 4 and j < p) else chain(range(k))
    else:
        t = chain(range(k))
    return (t, k) if role == "forward-bias" else t


def tail_2t(rows, k, cols):
    """First row of the second thread's part where MKL at 2 threads runs it with the narrow kernel
    (1 to 3 rows, cols >= 12), or None (every element in the one-thread order). k is MKL's (no
    bias term)."""
    if cols < 12 or k <= 4 or (k <= 16 and cols <= 16):
        return None
    r1 = -(-(-(-rows // 2)) // 4) * 4
    return r1 if 0 < rows - r1 < 4 else None


def tree2(role, rows, red, cols, i, j):
    """The two-thread order of element (i, j): the one-thread tree, or in the narrow tail rows
    the narrow kernel's tree (its peels follow the absolute row: the split is at a multiple of
    4 rows, so C's and x's row offsets mod 4 are those of the sub-problem's rows)."""
    k = red - 1 if role == "forward-bias" else red
    r1 = tail_2t(rows, k, cols)
    if r1 is None or i < r1:
        return tree(role, rows, red, cols, i, j)
    return tree(role, rows, red, cols, i, j, narrow=True)


# ---------------------------------------------------------------- exact f32 evaluation

def fma32(a, b, c):
    """fl32(a*b + c) exactly: the f64 product is exact, the f64 sum is rounded to odd (its
    error from TwoSum), and rounding that to f32 is then correct."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c = np.broadcast_to(c, p.shape).astype(np.float64)
    s = p + c
    bb = s - p
    e = (p - (s - bb)) + (c - bb)
    even = (s.view(np.int64) & 1) == 0
    s = np.where((e != 0) & even, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def evaluate(node, A, B):
    """The tree over rows of A, B (elements x terms): one f32 value per element."""
    if isinstance(node, (int, np.integer)):
        return (A[:, node] * B[:, node]).astype(np.float32)
    if isinstance(node[0], str):
        _, s, e = node
        c = np.zeros(A.shape[0], np.float32)
        for t in range(s, e):
            c = fma32(A[:, t], B[:, t], c)
        return c
    spine = []
    while not isinstance(node[0], (str, int, np.integer)) and isinstance(node[1], (int, np.integer)):
        spine.append(node[1])
        node = node[0]
    if spine:
        v = evaluate(node, A, B)
        for t in reversed(spine):
            v = (v + (A[:, t] * B[:, t]).astype(np.float32)).astype(np.float32)
        return v
    return (evaluate(node[0], A, B) + evaluate(node[1], A, B)).astype(np.float32)


def model_output(role, a, b, threads=1):
    rows, red = a.shape
    cols = b.shape[1]
    tr = tree2 if threads == 2 else tree
    groups = {}
    for i in range(rows):
        for j in range(cols):
            groups.setdefault(tr(role, rows, red, cols, i, j), []).append((i, j))
    out = np.zeros((rows, cols), np.float32)
    for t, els in groups.items():
        I = np.array([e[0] for e in els])
        J = np.array([e[1] for e in els])
        out[I, J] = evaluate(t, a[I], b[:, J].T)
    return out


def check(args):
    torch.set_num_threads(args.threads)
    lo, hi = (int(x) for x in args.dims.split("-"))
    rng = np.random.default_rng(args.seed)
    for role in args.roles.split(","):
        ok = 0
        for _ in range(args.shapes):
            m, k, n = (int(x) for x in rng.integers(lo, hi + 1, 3))
            rows, red, cols = ro.role_dims(role, m, k, n)
            rnd = lambda s: (rng.standard_normal(s) * np.exp2(rng.integers(-3, 4, s))).astype(np.float32)
            a, b = rnd((rows, red)), rnd((red, cols))
            if role == "forward-bias":
                a[:, -1] = 1.0
            want = ro.matmul(role, a, b, "cpu")
            got = model_output(role, a, b, args.threads)
            same = (want.view(np.uint32) == got.view(np.uint32)).all()
            ok += bool(same)
            if not same:
                print(f"  {role} rows {rows} red {red} cols {cols} ({kernel(role, rows, cols)}): differs")
        print(f"{role}: {ok}/{args.shapes} shapes bit-exact (dims {lo}..{hi}, seed {args.seed}, "
              f"{args.threads} thread(s))", flush=True)


def text(node, red):
    """reveal_order.py's program text of a tree."""
    fused = np.zeros(red, bool)

    def conv(n):
        if isinstance(n, (int, np.integer)):
            return int(n)
        if isinstance(n[0], str):
            _, s, e = n
            fused[s + 1:e] = True
            return chain(range(s, e))
        return (conv(n[0]), conv(n[1]))

    return ro.render(conv(node), fused)


def compare(args):
    d = tomllib.load(open(args.file, "rb"))
    threads = d["revealed"]["threads"]
    if threads not in (1, 2):
        sys.exit(f"{args.file}: {threads} threads; the models are for 1 and 2")
    tr = tree2 if threads == 2 else tree
    same = 0
    for mm in d["matmul"]:
        role, rows, red, cols = mm["role"], mm["rows"], mm["red"], mm["cols"]
        grid = np.full((rows, cols), mm["default"])
        for i, p in mm["row_programs"]:
            grid[i, :] = p
        for i, j, p in mm["element_programs"]:
            grid[i, j] = p
        bad = sum(text(tr(role, rows, red, cols, i, j), red) != mm["programs"][grid[i, j]]
                  for i in range(rows) for j in range(cols))
        same += bad == 0
        if bad:
            print(f"  {role} {rows}x{red}x{cols}: {bad} of {rows * cols} elements differ")
    print(f"{args.file}: {same}/{len(d['matmul'])} matmuls reproduced element for element")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="random shapes against torch")
    c.add_argument("--shapes", type=int, default=100, help="shapes per role")
    c.add_argument("--dims", default="1-130", help="F.linear dims m, k, n uniform in LO-HI")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--roles", default=",".join(ROLES))
    c.add_argument("--threads", type=int, choices=(1, 2), default=1,
                   help="torch.set_num_threads and the model checked (default 1)")
    c.set_defaults(fn=check)
    p = sub.add_parser("compare", help="a revealed-order file against the model")
    p.add_argument("file")
    p.set_defaults(fn=compare)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
