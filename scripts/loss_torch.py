#!/usr/bin/env python3
"""Fixture for src/ops/loss.rs and the f32 cross-entropy: torch's CPU `F.mse_loss` (mean),
`y.sum()` and `F.cross_entropy` (mean over tokens), forward and backward.

The inputs are not stored: every value is drawn from a SplitMix64 stream that
tests/suite/loss_fixture.rs draws again (`draw` below; the Rust twin is
tests/suite/common/splitmix.rs): a sign, an exponent in a range and a full 23-bit mantissa,
so that every sum rounds. Sizes 1, 7, 16, 17, 100, 1000 and 4099 exercise ATen's cascade sum
(one vector of 8, a tail, the 4 interleaved partial sums, the cascade's 16-element blocks and
its third level). torch runs at one thread, eager, with ATEN_CPU_CAPABILITY=avx2; the same
inputs widened to float64 give the float64 results that the f64 truth is held to.

Written to tests/data/torch_loss.json as bit patterns (8 hex digits per f32, 16 per f64):

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/loss_torch.py
"""
import json
import os
import struct

import torch
import torch.nn.functional as F

SIZES = [1, 7, 16, 17, 100, 1000, 4099]
# The backward seed: `(loss / micro_steps).backward()` at 3 micro-steps (1/3 rounded to f32).
SCALE = 1.0 / 3.0
# Float64 gradients are stored for the sizes up to this (elementwise: the small ones suffice).
F64_GRAD_MAX = 100
CE_VOCAB = 3
IGNORE_INDEX = -100

MASK = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def draw_bits(stream, i, e_lo, e_hi):
    """f32 bits of element i of `stream`: sign from bit 63, exponent e_lo + (bits 23..38 mod
    the range), mantissa bits 0..22."""
    h = splitmix64(((stream & 0xFFFFFFFF) << 32) | (i & 0xFFFFFFFF))
    e = e_lo + ((h >> 23) & 0xFFFF) % (e_hi - e_lo + 1)
    return ((h >> 63) << 31) | ((127 + e) << 23) | (h & 0x7FFFFF)


def draw(stream, n, e_lo, e_hi):
    vals = [struct.unpack("<f", struct.pack("<I", draw_bits(stream, i, e_lo, e_hi)))[0] for i in range(n)]
    return torch.tensor(vals, dtype=torch.float32)


def draw_labels(stream, n, vocab, ignore_every):
    out = []
    for i in range(n):
        h = splitmix64(((stream & 0xFFFFFFFF) << 32) | i)
        out.append(IGNORE_INDEX if ignore_every and i % ignore_every == ignore_every - 1 else h % vocab)
    return torch.tensor(out, dtype=torch.int64)


def h32(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}" for v in flat)


def h64(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<Q', struct.pack('<d', v))[0]:016x}" for v in flat)


def main():
    torch.set_num_threads(1)
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX2":
        raise SystemExit(f"CPU capability is {cap}; run with ATEN_CPU_CAPABILITY=avx2")
    scale32 = torch.tensor(SCALE, dtype=torch.float32)
    cases = []
    for k, n in enumerate(SIZES):
        # Streams: 100 + k (prediction), 200 + k (target), 300 + k (logits), 400 + k (labels).
        y = draw(100 + k, n, -3, 1)
        t = draw(200 + k, n, -3, 1)
        case = {"n": n, "y_stream": 100 + k, "t_stream": 200 + k}
        for dt, h in [(torch.float32, h32), (torch.float64, h64)]:
            suffix = "" if dt == torch.float32 else "_f64"
            yy = y.to(dt).requires_grad_(True)
            loss = F.mse_loss(yy, t.to(dt))
            (dy,) = torch.autograd.grad(loss, yy, scale32.to(dt))
            case["mse" + suffix] = h(loss)
            if dt == torch.float32 or n <= F64_GRAD_MAX:
                case["mse_dy" + suffix] = h(dy)
            yy = y.to(dt).requires_grad_(True)
            s = yy.sum()
            (dy,) = torch.autograd.grad(s, yy, scale32.to(dt))
            case["sum" + suffix] = h(s)
            if dy.ne(scale32.to(dt)).any():
                raise SystemExit("SumBackward is not the seed expanded")
        cases.append(case)
    ce = []
    for k, n in enumerate(SIZES):
        for ignore_every in [0, 5] if n >= 5 else [0]:
            logits = draw(300 + k, n * CE_VOCAB, -2, 2).reshape(n, CE_VOCAB).requires_grad_(True)
            labels = draw_labels(400 + k, n, CE_VOCAB, ignore_every)
            loss = F.cross_entropy(logits, labels, reduction="mean")
            (dl,) = torch.autograd.grad(loss, logits, scale32)
            case = {"tokens": n, "vocab": CE_VOCAB, "logits_stream": 300 + k, "labels_stream": 400 + k,
                    "ignore_every": ignore_every, "loss": h32(loss)}
            if n <= F64_GRAD_MAX:
                case["dlogits"] = h32(dl)
            ce.append(case)
    doc = {
        "generator": "scripts/loss_torch.py",
        "torch": torch.__version__,
        "cpu_capability": cap,
        "threads": torch.get_num_threads(),
        "scale": h32(scale32),
        "ignore_index": IGNORE_INDEX,
        "encoding": "hex: 8 hex digits per f32 (u32 bits), 16 per f64 (u64 bits); inputs drawn, not stored",
        "draw": {"y": [-3, 1], "t": [-3, 1], "logits": [-2, 2]},
        "cases": cases,
        "cross_entropy": ce,
    }
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "torch_loss.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {len(cases)} loss cases, {len(ce)} cross-entropy cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
