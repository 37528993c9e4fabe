#!/usr/bin/env python3
"""Fixture for the LayerNorm kernels of src/ops/norm.rs: torch's CPU `F.layer_norm`, forward
and backward, over the widths where ATen's kernel changes its order of operations.

ATen's float32 LayerNorm (aten/src/ATen/native/cpu/layer_norm_kernel.cpp and moments_utils.h,
AVX2 build: 8 lanes) takes a row's moments in full 8-lane vectors, 16 vectors to a Welford
chunk, chunks merged by a cascade whose depth grows with the chunk count, and the last
N % 8 elements by a scalar tail; its backward reduces ds and db over full vectors and a
ragged tail, and splits the rows over threads, each thread with its own weight and bias
gradient buffer. The cases cover: widths below one vector (1..7), one vector and a tail
(9, 12, 15), several vectors with and without a tail (16, 17, 24, 31, 35, 40, 64), several
chunks (256, 257, 300: cascade merges), many chunks (1000: depth 3); affine (random weight
and bias) and not; 1 to 11 rows; inputs of mean 0.5 and, up to width 64 and at 300, of a
large mean (100, where Welford's rounding shows); at 1 thread, up to width 64 and at 300 at
2 threads, and at widths 3, 12 and 35 at 4 and 8 threads (the rows split over the threads;
rows are independent, so the forward and the input gradient cannot depend on the split, the
weight and bias gradients do).

Each case draws x, the weight, bias and output gradient dy with torch's generator, runs
`F.layer_norm` and `torch.autograd.grad` of `(y * dy).sum()` (eager,
ATEN_CPU_CAPABILITY=avx2, torch.set_num_threads(threads)), and writes every input and output
as IEEE-754 binary32 bit patterns (8 hex digits per element, row-major) to
tests/data/torch_layernorm.json, which tests/suite/norm_fixture.rs reads.

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/layernorm_torch.py
"""
import json
import os
import struct

import torch
import torch.nn.functional as F

EPS = 1e-5
# (width, rows): the width picks the kernel's path, the rows the thread split.
SHAPES = [(1, 3), (2, 2), (3, 5), (5, 3), (7, 2), (8, 3), (9, 3), (12, 5), (15, 3), (16, 4),
          (17, 3), (24, 2), (31, 3), (35, 7), (40, 3), (64, 2), (256, 1), (257, 1), (300, 3),
          (1000, 1)]


def hexs(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}" for v in flat)


def main():
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX2":
        raise SystemExit(f"CPU capability is {cap}; run with ATEN_CPU_CAPABILITY=avx2")
    torch.manual_seed(0)
    cases = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        assert torch.get_num_threads() == threads
        for n, rows in SHAPES:
            if threads > 1 and 64 < n != 300:
                continue
            for affine in (True, False):
                for offset in (0.5, 100.0):
                    if n > 64 and offset != 0.5 and (n != 300 or threads > 1):
                        continue
                    if n > 300 and not affine:
                        continue
                    x = (torch.randn(rows, n) * 2 + offset).requires_grad_(True)
                    w = torch.randn(n).requires_grad_(True) if affine else None
                    b = torch.randn(n).requires_grad_(True) if affine else None
                    dy = torch.randn(rows, n)
                    y = F.layer_norm(x, [n], w, b, EPS)
                    grads = torch.autograd.grad(y, [x] + ([w, b] if affine else []), dy)
                    case = {"threads": threads, "rows": rows, "n": n, "eps": EPS, "affine": affine,
                            "x": hexs(x), "dy": hexs(dy), "y": hexs(y), "dx": hexs(grads[0])}
                    if affine:
                        case.update(weight=hexs(w), bias=hexs(b), dweight=hexs(grads[1]),
                                    dbias=hexs(grads[2]))
                    cases.append(case)
    # More threads than 2 (the thread counts of the revealed-order profiles): the weight and
    # bias gradients of row counts that split unevenly (11 rows at 4 threads: 3+3+3+2; at 8
    # threads: 2+2+2+2+2+1, six threads used).
    for threads in (4, 8):
        torch.set_num_threads(threads)
        assert torch.get_num_threads() == threads
        for n, rows in [(3, 11), (12, 7), (35, 11)]:
            x = (torch.randn(rows, n) * 2 + 0.5).requires_grad_(True)
            w = torch.randn(n).requires_grad_(True)
            b = torch.randn(n).requires_grad_(True)
            dy = torch.randn(rows, n)
            y = F.layer_norm(x, [n], w, b, EPS)
            dx, dw, db = torch.autograd.grad(y, [x, w, b], dy)
            cases.append({"threads": threads, "rows": rows, "n": n, "eps": EPS, "affine": True,
                          "x": hexs(x), "dy": hexs(dy), "y": hexs(y), "dx": hexs(dx), "weight": hexs(w),
                          "bias": hexs(b), "dweight": hexs(dw), "dbias": hexs(db)})
    doc = {"generator": "scripts/layernorm_torch.py", "torch": torch.__version__, "cpu_capability": cap,
           "mode": "eager", "encoding": "hex: 8 hex digits per f32 (u32 bits), row-major", "cases": cases}
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "torch_layernorm.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
