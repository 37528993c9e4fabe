#!/usr/bin/env python3
"""Fixture for src/ops/norm.rs: torch's CPU LayerNorm and RMSNorm, forward and backward.

For a few row widths N (one AVX2 vector, a tail, several vectors, several Welford chunks),
3 rows each, this draws x, weight, bias and the output gradient dy with torch's generator,
runs `F.layer_norm` / `F.rms_norm` forward and `torch.autograd.grad` of `(y * dy).sum()`
backward (torch.set_num_threads(1), eager, ATEN_CPU_CAPABILITY=avx2), and writes every input
and output as IEEE-754 binary32 bit patterns (8 hex digits per element, row-major) to
tests/data/torch_norm.json, which tests/suite/norm_fixture.rs reads.

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/norm_torch.py
"""
import json
import os
import struct

import torch
import torch.nn.functional as F

WIDTHS = [16, 35, 64, 200, 300]
ROWS = 3
EPS = 1e-5


def hexs(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}" for v in flat)


def main():
    torch.set_num_threads(1)
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX2":
        raise SystemExit(f"CPU capability is {cap}; run with ATEN_CPU_CAPABILITY=avx2")
    torch.manual_seed(0)
    cases = []
    for kind in ["layernorm", "rmsnorm"]:
        for n in WIDTHS:
            x = (torch.randn(ROWS, n) * 2 + 0.5).requires_grad_(True)
            w = torch.randn(n).requires_grad_(True)
            b = torch.randn(n).requires_grad_(True)
            dy = torch.randn(ROWS, n)
            if kind == "layernorm":
                y = F.layer_norm(x, [n], w, b, EPS)
                dx, dw, db = torch.autograd.grad(y, [x, w, b], dy)
            else:
                y = F.rms_norm(x, [n], w, EPS)
                dx, dw = torch.autograd.grad(y, [x, w], dy)
                db = None
            case = {"kind": kind, "rows": ROWS, "n": n, "eps": EPS, "x": hexs(x), "weight": hexs(w),
                    "dy": hexs(dy), "y": hexs(y), "dx": hexs(dx), "dweight": hexs(dw)}
            if kind == "layernorm":
                case["bias"] = hexs(b)
                case["dbias"] = hexs(db)
            cases.append(case)
    doc = {"generator": "scripts/norm_torch.py", "torch": torch.__version__, "cpu_capability": cap,
           "threads": torch.get_num_threads(), "encoding": "hex: 8 hex digits per f32 (u32 bits), row-major",
           "cases": cases}
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "torch_norm.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
