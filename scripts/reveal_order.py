#!/usr/bin/env python3
"""Reveal the accumulation order of torch's f32 matmuls, per role, shape and thread count, and
write it as a seedsweep revealed-order file.

Method: FPRev (Xie, Gao, Wang, Xue, "FPRev: Revealing the Order of Floating-Point Summation by
Numerical Testing", USENIX ATC 2025, arXiv 2411.00442). For every pair of reduction indices
(p, q), the inputs are built so that the products are 1 everywhere except +M at p and -M at q,
with M = 2^40 large enough to swamp every partial sum of ones. All ones that are added into a
partial sum holding +M or -M before the two meet vanish; the output is therefore
K - |subtree(LCA(p, q))|, the number of terms outside the smallest subtree holding both. From
these sizes the summation tree of every output element is rebuilt exactly (every IEEE add is
binary). Every element gets its own tree: the pattern is put in every row of the patterned
operand and the other operand is all ones, so one matmul call reveals one (p, q) for all
elements at once; K(K-1)/2 calls per shape.

Swamping cannot see whether a product is rounded before it is added (all products are exact
here), so a second probe, in the spirit of FPRev's fused-operation tests, asks for every term t
of every element: with term t = (1 + 2^-12)^2 (not representable: its exact value needs 25
bits) and the term it joins first = -(1 + 2^-11), everything else 0, the output is 2^-24 when
t's product enters an FMA unrounded and 0 when it is rounded first.

Roles are the three matmuls of F.linear(x, W), x (m x k), W (n x k), as autograd calls them:
  forward      F.linear(x, W)        out (m x n), reduction over k   (seedsweep matmul_nt)
  forward-bias F.linear(x, W, b)     torch's addmm: the bias is reduction index k (red = k + 1)
  grad-input   dy @ W                out (m x k), reduction over n   (seedsweep matmul)
  grad-weight  dy.t() @ x            out (n x k), reduction over m   (seedsweep matmul_tn)
Each is keyed in the file by its output shape (rows, cols) and reduction length, as seedsweep's
backend sees it.

Output: a TOML file (`--out`) with one `[[matmul]]` table per (role, rows, red, cols): the
distinct element programs and which elements use which. A program is written as a tree over the
reduction indices: `[a..b]f` is the chain c = a_a*b_a; c = fma(a_t, b_t, c) for t = a+1..b-1,
`[a..b]r` the same chain with every product rounded first (c = c + fl(a_t*b_t)), `(X Y)` the
sum of two subtrees, and a leaf `tf`/`tr` a single term entering its parent fused or rounded.
seedsweep (`src/kernels/revealed.rs`) executes exactly that.

`--validate N` then draws N input sets per shape from SplitMix64 (seeds 1..N; src/scenario/revealed_file.rs
draws the same), runs torch, and writes torch's outputs as bit patterns (`--validation-out`), so
that seedsweep's tests check the revealed programs against torch bit for bit.

With `--name` and `--base` the file is also a profile: `seedsweep --config FILE` adds a profile
NAME that is BASE with every revealed matmul executed by its programs.

    python3 scripts/reveal_order.py --device cpu --threads 2 --out configs/revealed/x.toml
    python3 scripts/reveal_order.py --threads 1 --shapes 4x35x67,6x35x67 --roles forward

On a GPU (`--device cuda`) the same probes run through cuBLAS (TF32 is switched off); tensor
cores that add several products at once with extra internal precision are not binary trees and
are reported as such (the tree rebuild fails with a clear message); see FPRev's paper for the
multi-term extension, and Khattak & Mikaitis (arXiv 2512.07004) for bit-accurate models of
NVIDIA's matrix units.
"""
import argparse
import hashlib
import os
import platform
import sys

import numpy as np
import torch

BIG = 2.0**40
ROLES = ("forward", "forward-bias", "grad-input", "grad-weight")


def role_dims(role, m, k, n):
    """(rows, red, cols) of the output and reduction of `role` for F.linear dims (m, k, n)."""
    return {
        "forward": (m, k, n),
        "forward-bias": (m, k + 1, n),
        "grad-input": (m, n, k),
        "grad-weight": (n, m, k),
    }[role]


def matmul(role, a, b, device):
    """torch's matmul of `role` for out = a (rows x red) . b (red x cols), each operand stored
    as autograd stores it: forward F.linear(x = a, W = b^T contiguous); grad-input dy = a
    times W = b; grad-weight dy = a^T contiguous (red x rows), used as dy.t(). Every operand
    is a copy in memory torch allocated (64-byte aligned on the CPU, as in training), never a
    view of numpy's buffer: MKL's narrow kernels peel terms to 16-byte boundaries, so where an
    operand starts decides the order (src/kernels/mkl_sgemm.rs)."""
    ta = torch.tensor(np.ascontiguousarray(a, np.float32), device=device)
    tb = torch.tensor(np.ascontiguousarray(b, np.float32), device=device)
    if role == "forward":
        out = torch.nn.functional.linear(ta, tb.t().contiguous())
    elif role == "forward-bias":
        # The last reduction index is the bias: term a[:, K] * b[K, :] with a[:, K] equal in
        # every row, passed to addmm as the bias vector a[0, K] * b[K, :].
        bias = ta[0, -1] * tb[-1, :]
        out = torch.nn.functional.linear(ta[:, :-1].contiguous(), tb[:-1].t().contiguous(), bias)
    elif role == "grad-input":
        out = ta @ tb
    else:
        out = torch.mm(ta.t().contiguous().t(), tb)
    return out.cpu().numpy()


def lca_sizes(role, rows, red, cols, device):
    """Per distinct element: L[p, q] = |subtree(LCA(p, q))|. Returns (list of distinct size
    matrices, element -> index grid)."""
    sizes = np.zeros((rows, cols, red, red), np.int16)
    pat = np.ones((rows, red), np.float32)
    ones = np.ones((red, cols), np.float32)
    for p in range(red):
        for q in range(p + 1, red):
            pat[:, p], pat[:, q] = BIG, -BIG
            out = matmul(role, pat, ones, device).astype(np.float64)
            pat[:, p], pat[:, q] = 1.0, 1.0
            s = np.rint(red - out).astype(np.int16)
            sizes[:, :, p, q] = s
            sizes[:, :, q, p] = s
    distinct, grid, seen = [], np.zeros((rows, cols), np.int32), {}
    for i in range(rows):
        for j in range(cols):
            key = sizes[i, j].tobytes()
            if key not in seen:
                seen[key] = len(distinct)
                distinct.append(sizes[i, j].copy())
            grid[i, j] = seen[key]
    return distinct, grid


def build(leaves, sizes):
    """The binary tree over `leaves` (sorted) from the LCA subtree sizes: nested tuples."""
    if len(leaves) == 1:
        return leaves[0]
    p, n = leaves[0], len(leaves)
    other = [q for q in leaves[1:] if sizes[p, q] == n]
    mine = [q for q in leaves if q == p or sizes[p, q] < n]
    if not other or len(other) + len(mine) != n:
        sys.exit(
            f"the outputs are not a binary summation tree (leaves {leaves}): a multi-term or "
            "non-IEEE accumulator; this revealer handles binary IEEE adds only"
        )
    return (build(mine, sizes), build(other, sizes))


def leaves_of(node):
    return [node] if isinstance(node, int) else leaves_of(node[0]) + leaves_of(node[1])


def partners(tree, red):
    """partner[t]: the smallest leaf of the subtree that leaf t is first added to."""
    out = [0] * red

    def walk(node):
        if isinstance(node, int):
            return
        a, b = node
        for x, y in ((a, b), (b, a)):
            if isinstance(x, int):
                out[x] = min(leaves_of(y))
        walk(a)
        walk(b)

    walk(tree)
    return out


def fused_flags(role, rows, red, cols, trees, grid, device):
    """fused[i, j, t]: does term t's product enter its first add unrounded in element (i, j)?
    Term t = (1 + 2^-12)^2 (25 significant bits), its partner s = -(1 + 2^-11), the rest 0:
    the output is 2^-24 if t is fused, 0 if its product is rounded first. Elements with the
    same tree may differ here (measured), so the flags are per element."""
    x = np.float32(1 + 2.0**-12)
    neg = np.float32(-(1 + 2.0**-11))
    fused = np.zeros((rows, cols, red), bool)
    if red == 1:
        return fused
    part = np.array([partners(t, red) for t in trees])  # (distinct trees, red)
    last = red - 1 if role == "forward-bias" else red  # the bias leaf is not a product
    for t in range(last):
        s_of = part[grid, t]  # partner of t per element
        for s in np.unique(s_of):
            a = np.zeros((rows, red), np.float32)
            b = np.zeros((red, cols), np.float32)
            a[:, t], b[t, :] = x, x
            a[:, s], b[s, :] = neg, 1.0
            out = matmul(role, a, b, device)
            hit = s_of == s
            fused[hit, t] = out[hit] != 0.0
    return fused


def render(node, fused):
    """Program text of a tree with per-leaf fused flags (module doc)."""
    seq, cur = [], node
    while not isinstance(cur, int):
        a, b = cur
        if isinstance(a, int) and isinstance(b, int):
            seq.extend([max(a, b), min(a, b)])
            break
        if isinstance(b, int):
            seq.append(b)
            cur = a
        elif isinstance(a, int):
            seq.append(a)
            cur = b
        else:
            seq = None
            break
    if seq:
        seq.reverse()  # in the order the terms are added
        lo, n = seq[0], len(seq)
        flags = {fused[t] for t in seq[1:]}
        if seq == list(range(lo, lo + n)) and len(flags) == 1 and not fused[lo]:
            return f"[{lo}..{lo + n}]{'f' if flags.pop() else 'r'}"
    if isinstance(node, int):
        return f"{node}{'f' if fused[node] else 'r'}"
    a, b = node
    return f"({render(a, fused)} {render(b, fused)})"


def reveal(role, m, k, n, device):
    rows, red, cols = role_dims(role, m, k, n)
    distinct, grid = lca_sizes(role, rows, red, cols, device)
    trees = [build(list(range(red)), s) for s in distinct]
    fused = fused_flags(role, rows, red, cols, trees, grid, device)
    cache, progs = {}, []
    for i in range(rows):
        row = []
        for j in range(cols):
            key = (grid[i, j], fused[i, j].tobytes())
            if key not in cache:
                cache[key] = render(trees[grid[i, j]], fused[i, j])
            row.append(cache[key])
        progs.append(row)
    return rows, red, cols, progs


def compress(progs):
    """(programs, default index, row overrides, element overrides) of an element grid."""
    names, index = [], {}

    def idx(p):
        if p not in index:
            index[p] = len(names)
            names.append(p)
        return index[p]

    counts = {}
    for row in progs:
        for p in row:
            counts[p] = counts.get(p, 0) + 1
    default = idx(max(counts, key=lambda p: (counts[p], -len(p))))
    rows, elems = [], []
    for i, row in enumerate(progs):
        row_counts = {}
        for p in row:
            row_counts[p] = row_counts.get(p, 0) + 1
        major = max(row_counts, key=lambda p: row_counts[p])
        mi = idx(major)
        if mi != default:
            rows.append((i, mi))
        for j, p in enumerate(row):
            if idx(p) != mi:
                elems.append((i, j, idx(p)))
    return names, default, rows, elems


def parse_shapes(s):
    out = []
    for part in s.split(","):
        m, k, n = part.split("x")
        ms = range(int(m.split("-")[0]), int(m.split("-")[1]) + 1) if "-" in m else [int(m)]
        out.extend((mm, int(k), int(n)) for mm in ms)
    return out


def random_shapes(spec):
    """`N:LO-HI:SEED[,...]`: per part, N shapes (m, k, n), every dimension uniform in LO..HI."""
    out = []
    for part in spec.split(","):
        n, rng_, seed = part.split(":")
        lo, hi = (int(x) for x in rng_.split("-"))
        rng = np.random.default_rng(int(seed))
        out.extend(tuple(int(d) for d in rng.integers(lo, hi + 1, 3)) for _ in range(int(n)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (cpu)")
    ap.add_argument(
        "--shapes",
        default="1-64x35x67,1-64x18x67,1-64x17x67,1-64x16x67,1-64x32x67,1-64x35x35,1-64x32x32",
        help="F.linear dims m x k x n, m may be a range a-b (default: T1/T2's, m = 1..64)",
    )
    ap.add_argument("--random-shapes", metavar="N:LO-HI:SEED[,...]",
                    help="instead of --shapes: N shapes m x k x n, each dimension uniform in LO..HI "
                         "(numpy default_rng(SEED)); several parts separated by commas")
    ap.add_argument("--roles", default=",".join(ROLES))
    ap.add_argument("--out", help="revealed-order TOML to write (omit to only --validate)")
    ap.add_argument("--name", help="profile name the file defines when passed with --config")
    ap.add_argument("--base", default="cpu-fma",
                    help="profile whose other parts it takes (default cpu-fma)")
    ap.add_argument("--validate", type=int, default=0, metavar="N",
                    help="also record N random input sets per shape with torch's outputs")
    ap.add_argument("--validation-out", help="where --validate writes (TOML)")
    ap.add_argument("--digest-above", type=int, default=0, metavar="E",
                    help="--validate: outputs of more than E elements are written as the SHA-256 "
                         "of their bits (`digest`) instead of the bits (`out`); 0: never")
    args = ap.parse_args()
    if args.threads < 1:
        sys.exit("--threads must be >= 1")
    roles = args.roles.split(",")
    for r in roles:
        if r not in ROLES:
            sys.exit(f"--roles: `{r}` is not a role; allowed: {', '.join(ROLES)}")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("--device cuda: no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(args.threads)
    shapes = random_shapes(args.random_shapes) if args.random_shapes else parse_shapes(args.shapes)
    if args.validate and not args.validation_out:
        sys.exit("--validate needs --validation-out")
    if not args.out and not args.validate:
        sys.exit("nothing to do: give --out and/or --validate")
    if args.out:
        reveal_all(args, roles, shapes)
    if args.validate:
        write_validation(args, roles, shapes)


def reveal_all(args, roles, shapes):
    tmp = args.out + ".partial"
    cpu = platform.processor() or platform.machine()
    name = args.name or f"revealed-{args.device}-{args.threads}t"
    with open(tmp, "w") as f:
        f.write("# Revealed f32 matmul accumulation orders (scripts/reveal_order.py; FPRev, Xie et al.,\n")
        f.write("# USENIX ATC 2025, arXiv 2411.00442). Program syntax: scripts/reveal_order.py's doc.\n")
        f.write("[revealed]\n")
        f.write(f'device = "{args.device}"\n')
        f.write(f"threads = {args.threads}\n")
        f.write(f'torch = "{torch.__version__}"\n')
        f.write(f'cpu_capability = "{torch.backends.cpu.get_cpu_capability()}"\n')
        f.write(f'machine = "{cpu}"\n')
        f.write(f'name = "{name}"\nbase = "{args.base}"\n\n')
        for role in roles:
            for m, k, n in shapes:
                rows, red, cols, progs = reveal(role, m, k, n, args.device)
                names, default, row_o, elem_o = compress(progs)
                f.write("[[matmul]]\n")
                f.write(f'role = "{role}"\nrows = {rows}\nred = {red}\ncols = {cols}\n')
                f.write("programs = [" + ", ".join(f'"{p}"' for p in names) + "]\n")
                f.write(f"default = {default}\n")
                f.write("row_programs = [" + ", ".join(f"[{i}, {p}]" for i, p in row_o) + "]\n")
                f.write("element_programs = ["
                        + ", ".join(f"[{i}, {j}, {p}]" for i, j, p in elem_o) + "]\n\n")
                print(f"{role:11s} rows {rows:2d} red {red:2d} cols {cols:2d}: "
                      f"{len(names)} program(s), {len(row_o)} row and {len(elem_o)} element "
                      f"override(s)", flush=True)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")


MASK = (1 << 64) - 1


def splitmix64(state):
    """SplitMix64 (Steele, Lea, Flood 2014): returns (next state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def draw(seed, count):
    """`count` f32 values from SplitMix64(seed): v = (u - 2^23) * 2^(e - 26) with u the top 24
    bits and e = bits 8..10 (0..7), so |v| < 16 with up to 24 significant bits.
    src/scenario/revealed_file.rs draws the same values (exact: every step is exact in f64)."""
    out = np.empty(count, np.float32)
    state = seed
    for i in range(count):
        state, z = splitmix64(state)
        u = z >> 40
        e = (z >> 8) & 7
        out[i] = np.float32((u - 2**23) * 2.0 ** (e - 26))
    return out


def write_validation(args, roles, shapes):
    """One case per (role, shape) and seed 1..N: inputs from draw(), torch's output as
    8-hex-digit f32 bit patterns."""
    tmp = args.validation_out + ".partial"
    with open(tmp, "w") as f:
        f.write("# torch's outputs on SplitMix64 inputs (scripts/reveal_order.py --validate;\n")
        f.write(f"# torch {torch.__version__}, {args.threads} thread(s), {args.device}, "
                f"{torch.backends.cpu.get_cpu_capability()}). Inputs: draw(seed, rows*red) is a\n")
        f.write("# (rows x red, row-major), then draw(seed + 2^32, red*cols) is b (red x cols); for\n")
        f.write("# forward-bias a's last column is set to 1, so that b's last row is the bias.\n")
        if args.digest_above:
            f.write(f"# Outputs of more than {args.digest_above} elements: `digest`, the SHA-256 of their bits\n")
            f.write("# (f32 bit patterns as little-endian u32, row-major).\n")
        f.write(f"threads = {args.threads}\n\n")
        for role in roles:
            for m, k, n in shapes:
                rows, red, cols = role_dims(role, m, k, n)
                for seed in range(1, args.validate + 1):
                    a = draw(seed, rows * red).reshape(rows, red)
                    b = draw(seed + 2**32, red * cols).reshape(red, cols)
                    if role == "forward-bias":
                        a[:, -1] = 1.0  # the bias is b's last row
                    out = matmul(role, a, b, args.device)
                    bits = out.astype(np.float32).view(np.uint32).ravel()
                    f.write("[[case]]\n")
                    f.write(f'role = "{role}"\nrows = {rows}\nred = {red}\ncols = {cols}\n')
                    if args.digest_above and bits.size > args.digest_above:
                        digest = hashlib.sha256(bits.astype("<u4").tobytes()).hexdigest()
                        f.write(f'seed = {seed}\ndigest = "{digest}"\n\n')
                    else:
                        hexs = "".join(f"{int(v):08x}" for v in bits)
                        f.write(f'seed = {seed}\nout = "{hexs}"\n\n')
    os.replace(tmp, args.validation_out)
    print(f"wrote {args.validation_out}")


if __name__ == "__main__":
    main()
