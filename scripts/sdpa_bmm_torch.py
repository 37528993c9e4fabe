#!/usr/bin/env python3
"""The order of ATen's batched matmuls (`bmm`) in F.scaled_dot_product_attention's math path
above the naive kernel's size (contraction * rows * cols >= 400), where torch 2.15 calls MKL's
batched sgemm: measured against the one-thread sgemm model of src/kernels/mkl_sgemm.rs applied
to every batch element at its real address (src/ops/attention.rs, "MKL's batched products").

  grid     runs sdpa (math backend) forward and backward on random shapes, captures every
           aten.bmm with its operands' strides and addresses (a TorchDispatchMode), and
           compares each batch element of torch's output with the model, bit for bit: the
           role follows the layout (x packed, W a transposed view: 'forward'; both packed:
           'grad-input'; x a transposed view: 'grad-weight'), the peels follow the row
           addresses of x (forward) and C (gradients). Prints the products that differ and
           the count of exact ones.
  fixture  writes tests/data/torch_sdpa_bmm_avx2.json: sdpa forward and backward on inputs
           drawn by SplitMix64 (scripts/reveal_order.py's draw, scaled by 1/8), outputs as
           8-hex-digit f32 bit patterns, for tests/suite/sdpa_bmm_fixture.rs. A case with
           `groups` runs each group of heads as its own call on its own column slice (a
           tensor-parallel rank's heads).

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/sdpa_bmm_torch.py grid --seed 1 --shapes 20
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/sdpa_bmm_torch.py fixture
    ... --threads 2 (both): torch.set_num_threads(2); the fixture is then
    tests/data/torch_sdpa_bmm_avx2_t2.json. At two threads a bmm of one batch element
    (batch * heads of the call == 1) is MKL's two-thread sgemm (its rows split as
    mkl_order_model.tail_2t says), every other one the one-thread order per batch element.

Eager, float32, one thread unless --threads.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mkl_order_model as mm  # noqa: E402
import reveal_order as ro  # noqa: E402


class Capture(TorchDispatchMode):
    """Every aten.bmm's operands (values, strides, float offset of the data) and output."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.bmm.default:
            x, y = args
            self.calls.append([(t.detach().numpy().copy(), t.stride(), t.data_ptr() // 4)
                               for t in (x, y, out)])
        return out


def role_of(xs, ys):
    return {(False, False): "grad-input", (False, True): "forward",
            (True, False): "grad-weight"}.get((xs[2] != 1, ys[2] != 1))


def tree_at(role, rows, red, cols, j, x_row, c_row, narrow=False):
    """mkl_order_model.tree with the peels at the real row offsets (mkl_sgemm::element_at);
    `narrow`: the role's narrow kernel whatever the shape (two threads' tail rows)."""
    kern = mm.kernel(role, rows, cols)
    if narrow:
        kern = "dot-tn" if role == "forward" else "chain-nn"
    if kern == "dot-tn":
        p = (-x_row) % 4
        return mm.vdot(red, p, 4, 4) if j < cols // 4 * 4 else mm.vdot(red, p, 8, 8)
    if kern == "chain-nn":
        p = (-c_row) % 4
        return mm.p8(red) if (p > 0 and cols - p >= 4 and j < p) else mm.chain(range(red))
    assert kern == "main", kern
    return mm.tree(role, rows, red, cols, 0, j)


def model_at(role, a, b, x0, xld, c0, cld, split2=False):
    """`split2`: MKL at two threads on a bmm of one batch element, which it splits as sgemm
    (mkl_order_model.tail_2t's rows in the narrow kernel); with several batch elements each is
    the one-thread order."""
    rows, red = a.shape
    cols = b.shape[1]
    r1 = mm.tail_2t(rows, red, cols) if split2 else None
    groups = {}
    for i in range(rows):
        for j in range(cols):
            t = tree_at(role, rows, red, cols, j, x0 + i * xld, c0 + i * cld,
                        r1 is not None and i >= r1)
            groups.setdefault(t, []).append((i, j))
    out = np.zeros((rows, cols), np.float32)
    for t, els in groups.items():
        I = np.array([e[0] for e in els])
        J = np.array([e[1] for e in els])
        out[I, J] = mm.evaluate(t, a[I], b[:, J].T)
    # MKL's accumulators start at +0 (src/kernels/mkl_sgemm.rs); mm.evaluate starts a chain
    # at its first term, which differs only when every term is -0 (a row of da under the
    # causal mask where p = 1): adding +0 gives the +0 start's sign.
    return out + np.float32(0.0)


def sdpa(q, k, v, g, B, S, H, D, causal, mode=None):
    """torch's math-path sdpa on [B, S, H*D] leaves, backward with g; returns out, dq, dk, dv."""
    x = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        if mode is not None:
            mode.__enter__()
        try:
            qh, kh, vh = [t.view(B, S, H, D).transpose(1, 2) for t in x]
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
            out = o.transpose(1, 2).reshape(B, S, H * D)
            out.backward(g)
        finally:
            if mode is not None:
                mode.__exit__(None, None, None)
    return out.detach(), x[0].grad, x[1].grad, x[2].grad


def grid(args):
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    total = exact = 0
    for it in range(args.shapes):
        S = int(rng.integers(args.seq[0], args.seq[1] + 1))
        D = int(rng.integers(args.dim[0], args.dim[1] + 1))
        BH = int(rng.integers(1, args.bh + 1))
        divs = [h for h in range(1, BH + 1) if BH % h == 0]
        H = divs[int(rng.integers(0, len(divs)))]
        B = BH // H
        causal = bool(rng.integers(0, 2))
        rnd = lambda *s: torch.tensor((rng.standard_normal(s) * np.exp2(rng.integers(-2, 3, s))).astype(np.float32))
        q, k, v, g = (rnd(B, S, H * D) for _ in range(4))
        cap = Capture()
        sdpa(q, k, v, g, B, S, H, D, causal, cap)
        for n, ((X, xs, xp), (Y, ys, _), (O, os_, op)) in enumerate(cap.calls):
            M, K = X.shape[1:]
            N = Y.shape[2]
            if M * K * N < 400:
                continue
            role = role_of(xs, ys)
            total += 1
            bad = 0
            for b in range(X.shape[0]):
                got = model_at(role, X[b], Y[b], xp + b * xs[0], xs[1], op + b * os_[0], os_[1],
                               args.threads == 2 and X.shape[0] == 1)
                bad += int((got.view(np.uint32) != O[b].view(np.uint32)).sum())
            exact += bad == 0
            if bad:
                print(f"differs: B {B} S {S} H {H} D {D} causal {causal}, bmm #{n} {role} "
                      f"{M}x{K}x{N}: {bad} elements", flush=True)
    print(f"{exact} of {total} products at or above the naive size bit-exact "
          f"(seed {args.seed}, {args.shapes} sdpa calls, {args.threads} thread(s))")


# (batch, seq, heads, head_dim, causal, head groups (one call per group) or None)
CASES = [
    (2, 9, 3, 7, True, None),       # copies, narrow kernels, batch elements off 16 bytes
    (1, 9, 3, 7, False, None),      # batch 1: strided views
    (3, 8, 1, 9, True, None),       # one head: packed views
    (1, 12, 2, 16, True, None),     # the main kernel, batch 1
    (1, 5, 2, 20, False, None),     # narrow scores, main p.v
    (2, 6, 2, 12, True, None),
    (2, 9, 4, 7, True, [2, 2]),     # two ranks of two heads
    (1, 7, 4, 9, False, [1, 3]),    # uneven ranks: one head, three heads
    (2, 4, 2, 8, False, None),      # below the naive size (4*4*8 = 128)
    (1, 7, 1, 24, True, None),      # one batch element: at two threads MKL splits its rows
    (1, 10, 2, 20, False, [1, 1]),  # the same on each of two ranks
]


def h32(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}" for v in flat)


def fixture(args):
    torch.set_num_threads(args.threads)
    cases = []
    for n, (B, S, H, D, causal, groups) in enumerate(CASES):
        W = H * D
        q, k, v, g = (torch.tensor(ro.draw(100 * n + s, B * S * W) / np.float32(8)).view(B, S, W)
                      for s in range(1, 5))
        outs = [torch.empty(B, S, W) for _ in range(4)]
        c0 = 0
        for hr in groups or [H]:
            cols = slice(c0, c0 + hr * D)
            part = [t[:, :, cols].contiguous() for t in (q, k, v, g)]
            for o, r in zip(outs, sdpa(*part, B, S, hr, D, causal)):
                o[:, :, cols] = r
            c0 += hr * D
        cases.append({"batch": B, "seq": S, "heads": H, "head_dim": D, "causal": causal,
                      "groups": groups or [], "seeds": [100 * n + s for s in range(1, 5)],
                      "out": h32(outs[0]), "dq": h32(outs[1]), "dk": h32(outs[2]), "dv": h32(outs[3])})
    doc = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "threads": args.threads, "inputs": "reveal_order.draw(seed) / 8 for q, k, v and the output gradient",
           "cases": cases}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                        "torch_sdpa_bmm_avx2" + ("" if args.threads == 1 else f"_t{args.threads}") + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=0)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--shapes", type=int, default=20)
    g.add_argument("--seq", type=lambda s: [int(x) for x in s.split("-")], default=[3, 64])
    g.add_argument("--dim", type=lambda s: [int(x) for x in s.split("-")], default=[4, 64])
    g.add_argument("--bh", type=int, default=8, help="largest batch * heads")
    g.add_argument("--threads", type=int, default=1)
    f = sub.add_parser("fixture")
    f.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    grid(a) if a.cmd == "grid" else fixture(a)


if __name__ == "__main__":
    main()
