#!/usr/bin/env python3
"""Fixture for src/ops/softmax.rs: torch's CPU `F.softmax(x, -1)` forward and its backward
(`y.backward(dy)`), float32, bit for bit, and float64 for the truth's error bound.

Rows of widths 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100 and 257 (below, at and
around the 8- and 16-lane vectors of ATen's `reduce_all`, with ragged tails), 3 rows each, of
`s * randn` for s = 0.5, 4 and 30 (30 makes most exponentials underflow-adjacent and the sum
dominated by one term), and an output gradient `randn`. torch runs at one thread, eager, with
the CPU capability of the environment (`ATEN_CPU_CAPABILITY=avx2` or the machine's AVX512).

Written to tests/data/torch_softmax_<capability>.json as bit patterns (8 hex digits per f32,
16 per f64):

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/softmax_torch.py
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/softmax_torch.py --threads 2
    /work/venv/bin/python scripts/softmax_torch.py        # on an AVX512 machine

At two threads ATen runs the backward's row loop inside its OpenMP region (another compiled
copy of it, see src/ops/softmax.rs); the file is then torch_softmax_<capability>_t2.json.
"""
import argparse
import json
import os
import struct

import torch
import torch.nn.functional as F

WIDTHS = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 257]
SCALES = [0.5, 4.0, 30.0]
ROWS = 3


def h32(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}" for v in flat)


def h64(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<Q', struct.pack('<d', v))[0]:016x}" for v in flat)


def run(x, dy):
    x = x.clone().requires_grad_(True)
    y = F.softmax(x, -1)
    y.backward(dy)
    return y, x.grad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    threads = ap.parse_args().threads
    torch.set_num_threads(threads)
    cap = torch.backends.cpu.get_cpu_capability()
    gen = torch.Generator().manual_seed(35)
    cases = []
    for n in WIDTHS:
        for s in SCALES:
            x = torch.randn(ROWS, n, generator=gen) * s
            dy = torch.randn(ROWS, n, generator=gen)
            y, dx = run(x, dy)
            y64, dx64 = run(x.double(), dy.double())
            cases.append({
                "n": n, "rows": ROWS, "scale": s,
                "x": h32(x), "dy": h32(dy), "y": h32(y), "dx": h32(dx),
                "y64": h64(y64), "dx64": h64(dx64),
            })
    doc = {
        "torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_capability": cap,
        "cases": cases,
    }
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                       f"torch_softmax_{cap.lower()}{'' if threads == 1 else f'_t{threads}'}.json")
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"wrote {out}: {len(cases)} cases, capability {cap}")


if __name__ == "__main__":
    main()
