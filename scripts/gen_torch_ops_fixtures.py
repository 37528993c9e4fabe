#!/usr/bin/env python3
"""Generate tests/data/torch_ops.json: torch CPU reference outputs (as u32 bit
patterns) for the fp32 ops mirrored by src/kernels/torch_ops.rs.

Usage:  python3 scripts/gen_torch_ops_fixtures.py [--out PATH] [--scale K] [--seed S]

--scale multiplies the number of random cases (the committed fixture uses 1;
larger values are for one-off agreement studies and are not committed).

Ops covered (all float32, contiguous, default threads):
  tanh            torch.tanh(x)                       (MKL vmsTanh on x86 builds)
  cross_entropy   F.cross_entropy(logits, labels, reduction='mean') and
                  logits.grad after loss.backward(grad_scale)
  tanh_backward   torch.ops.aten.tanh_backward(dy, y)
  column_sums     x.sum(0) for an (n x h) tensor
  sgd             torch.optim.SGD([p], lr).step()  (== p.add_(g, alpha=-lr))
"""

import argparse
import json
import math
import struct

import torch
import torch.nn.functional as F


def bits(t):
    """float32 tensor -> list of u32 bit patterns."""
    t = t.detach().contiguous().to(torch.float32).reshape(-1)
    return [v & 0xFFFFFFFF for v in t.view(torch.int32).tolist()]


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def from_bits(u):
    return torch.tensor([u], dtype=torch.int64).to(torch.int32).view(torch.float32)[0].item()


def tanh_inputs(gen, scale):
    xs = []
    # signed zeros, denormals, tiny, normal-min, huge, inf, nan
    special_bits = [
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00012345, 0x807FFFFF,
        0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
        0x7FC00000, 0xFFC00000,
    ]
    xs += [from_bits(b) for b in special_bits]
    for v in [1e-30, 1e-20, 1e-10, 1e-7, 1e-5, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0,
              10.0, 15.0, 20.0, 50.0, 88.0, 89.0, 100.0, 1e10, 1e30]:
        xs += [v, -v]
    # +-16 ulps around binade boundaries 2^-14 .. 2^4 and around the
    # saturation thresholds (SLEEF's 8.664339742, tanh rounding to 1 near 9.01)
    centers = [2.0 ** k for k in range(-14, 5)] + [8.664339742, 9.010913848876953, 0.55, 0.625]
    for c in centers:
        b = f32_bits(c)
        for d in range(-16, 17):
            v = from_bits(b + d)
            xs += [v, -v]
    # realistic pre-activations ~ N(0, 2), plus log-uniform magnitudes
    xs += (torch.randn(1750 * scale, generator=gen) * 2.0).tolist()
    mags = torch.exp(torch.empty(700 * scale).uniform_(math.log(1e-6), math.log(12.0), generator=gen))
    signs = torch.where(torch.rand(700 * scale, generator=gen) < 0.5, -1.0, 1.0)
    xs += (mags * signs).tolist()
    return torch.tensor(xs, dtype=torch.float32)


def ce_logits(gen, n, v, kind):
    if kind == "normal":
        x = torch.randn(n, v, generator=gen) * 3.0
    elif kind == "uniform15":
        x = torch.empty(n, v).uniform_(-15.0, 15.0, generator=gen)
    elif kind == "peaked":
        x = torch.randn(n, v, generator=gen) * 0.5
        idx = torch.randint(0, v, (n,), generator=gen)
        x[torch.arange(n), idx] = 15.0
    elif kind == "small":
        x = torch.randn(n, v, generator=gen) * 0.05
    elif kind == "ties":
        x = torch.randint(-3, 4, (n, v), generator=gen).to(torch.float32) * 2.5
    else:
        raise ValueError(kind)
    return x.clamp(-15.0, 15.0).contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/torch_ops.json")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    scale = args.scale

    out = {
        "meta": {
            "torch_version": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl": bool(torch.backends.mkl.is_available()),
            "num_threads": torch.get_num_threads(),
            "seed": args.seed,
            "scale": scale,
            "encoding": "all floats are IEEE-754 binary32 bit patterns (u32)",
            "generator": "scripts/gen_torch_ops_fixtures.py",
        }
    }

    # --- tanh --------------------------------------------------------------
    x = tanh_inputs(gen, scale)
    out["tanh"] = {"x": bits(x), "y": bits(torch.tanh(x))}

    # --- cross entropy -----------------------------------------------------
    cases = []
    kinds = ["normal", "uniform15", "peaked", "small", "ties"]
    ns = [4, 5, 8, 10, 17, 7, 6, 9, 33]
    scales_ = [1.0, 0.5, 1.0, 0.5, 0.25, 1.0 / 3.0, 1.0]
    n_cases = 5 * scale
    for c in range(n_cases):
        n = ns[c % len(ns)]
        v = 67
        kind = kinds[c % len(kinds)]
        gs = scales_[c % len(scales_)]
        logits = ce_logits(gen, n, v, kind).requires_grad_(True)
        labels = torch.randint(0, v, (n,), generator=gen)
        loss = F.cross_entropy(logits, labels, reduction="mean")
        loss.backward(torch.tensor(gs, dtype=torch.float32))
        cases.append({
            "n": n, "v": v, "kind": kind,
            "grad_scale": f32_bits(gs),
            "logits": bits(logits),
            "labels": labels.tolist(),
            "loss": bits(loss)[0],
            "dlogits": bits(logits.grad),
        })
    out["cross_entropy"] = cases

    # --- tanh backward -----------------------------------------------------
    tb = []
    for size in [100 * scale, 131, 33, 16, 7]:
        y = torch.tanh(torch.randn(size, generator=gen) * 2.0)
        dy = torch.randn(size, generator=gen) * 0.1
        r = torch.ops.aten.tanh_backward(dy, y)
        tb.append({"dy": bits(dy), "y": bits(y), "out": bits(r)})
    out["tanh_backward"] = tb

    # --- column sums -------------------------------------------------------
    cs = []
    for (n, h) in [(4, 32), (7, 35), (10, 33), (10, 67), (17, 33), (40, 3), (3, 5)] * scale:
        xm = torch.randn(n, h, generator=gen) * 0.5
        cs.append({"n": n, "h": h, "x": bits(xm), "out": bits(xm.sum(0))})
    out["column_sums"] = cs

    # --- SGD ---------------------------------------------------------------
    sg = []
    for (size, lr) in [(35, 0.1), (32 * 32, 0.05), (67 * 35, 0.01)] * scale:
        p0 = torch.randn(size, generator=gen) * 0.3
        g = torch.randn(size, generator=gen) * 0.05
        p = torch.nn.Parameter(p0.clone())
        p.grad = g.clone()
        torch.optim.SGD([p], lr=lr).step()
        sg.append({"lr": f32_bits(lr), "lr_f64": lr, "p": bits(p0), "g": bits(g), "out": bits(p)})
    out["sgd"] = sg

    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
