#!/usr/bin/env python3
"""Fixture for src/ops/optim.rs: torch's single-tensor CPU optimizers (`foreach=False`),
`torch.optim.SGD` (plain, weight decay, momentum, dampening, Nesterov), `Adam` and `AdamW`,
in float32 and float64.

Every optimizer and weight-decay setting that the scenario language's [train] table allows
(docs/scenario-language.md) runs at lr 1e-3 and 0.1, on parameters of 1, 7, 16, 17, 100 and
333 elements (one AVX2 vector of 8, a scalar tail, the kernels' 16-element unrolled body),
for STEPS steps whose gradients change every step. The inputs are not stored: parameters and
gradients are drawn from SplitMix64 streams that tests/suite/optim_fixture.rs draws again
(`draw_bits` below; the Rust twin is tests/suite/common/splitmix.rs), each a sign, an
exponent in a range and a full 23-bit mantissa. Gradients span 2^-28 to 2^0 so that Adam's
eps and the small-weight and large-weight branches of `lerp_` all matter.

Stored (bit patterns: 8 hex digits per f32, 16 per f64): the float32 parameters after the
last step, every size; the float64 parameters (the same f32 inputs widened) after the last
step, sizes up to 100; and both after step 1 for the sizes up to 17. For Adam and AdamW in
float32 at the sizes up to 17, every `exp_avg_sq` value whose square root a step took, with
torch's square root of it (`torch.sqrt` on a CPU tensor is MKL's vsSqrt, which is not the
correctly rounded square root), as sorted (input, output) pairs: the test runs seedsweep's
Adam with these roots to show that everything else in the update is torch's. And, for the bias corrections, Python's
`beta ** k` (CPython's float pow, i.e. the C library's `pow`) and `(1 - beta2 ** k) ** 0.5`
on a grid of betas and steps, which the test holds `libm::pow` to.

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/optim_torch.py
"""
import json
import os
import struct

import torch

SIZES = [1, 7, 16, 17, 100, 333]
# The parameters after step 1 are stored for the sizes up to this (a first divergence).
FIRST_MAX = 17
F64_MAX = 100
STEPS = 6
LRS = [1e-3, 0.1]
# (name as the language writes it, settings); adamw's default weight_decay is 0.01.
CONFIGS = [
    ("sgd", {"weight_decay": 0.0}),
    ("sgd", {"weight_decay": 0.01}),
    ("momentum", {"momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0}),
    ("momentum", {"momentum": 0.9, "dampening": 0.0, "weight_decay": 0.01}),
    ("momentum", {"momentum": 0.5, "dampening": 0.1, "weight_decay": 0.001}),
    ("nesterov", {"momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0}),
    ("nesterov", {"momentum": 0.7, "dampening": 0.0, "weight_decay": 0.01}),
    ("adam", {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}),
    ("adam", {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}),
    # 1 - beta1 >= 0.5: lerp_'s large-weight branch.
    ("adam", {"betas": [0.3, 0.9], "eps": 1e-6, "weight_decay": 0.0}),
    ("adamw", {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}),
    ("adamw", {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}),
    ("adamw", {"betas": [0.8, 0.99], "eps": 1e-7, "weight_decay": 0.1}),
    ("adamw", {"betas": [0.3, 0.9], "eps": 1e-6, "weight_decay": 0.01}),
]
POW_BETAS = [0.9, 0.999, 0.99, 0.95, 0.8, 0.5, 0.3]
POW_STEPS = 200

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


def h32(t):
    flat = t.detach().contiguous().reshape(-1).tolist()
    return "".join(f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}" for v in flat)


def h64(t):
    flat = t.detach().contiguous().reshape(-1).tolist() if isinstance(t, torch.Tensor) else t
    return "".join(f"{struct.unpack('<Q', struct.pack('<d', v))[0]:016x}" for v in flat)


def make(name, s, lr, params):
    if name in ("sgd", "momentum", "nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=s.get("momentum", 0.0), dampening=s.get("dampening", 0.0),
                               nesterov=name == "nesterov", weight_decay=s["weight_decay"], foreach=False)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=tuple(s["betas"]), eps=s["eps"], weight_decay=s["weight_decay"],
               foreach=False)


def main():
    torch.set_num_threads(1)
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX2":
        raise SystemExit(f"CPU capability is {cap}; run with ATEN_CPU_CAPABILITY=avx2")
    # Streams: 1000 + k parameters of size k; 2000 + 16·k + s the gradient of step s.
    cases = []
    oracle = {}
    for name, settings in CONFIGS:
        for lr in LRS:
            case = {"optimizer": name, "lr": lr, **settings, "f32": [], "f64": []}
            for k, n in enumerate(SIZES):
                p0 = draw(1000 + k, n, -4, 0)
                for dt in [torch.float32, torch.float64]:
                    if dt == torch.float64 and n > F64_MAX:
                        continue
                    p = torch.nn.Parameter(p0.to(dt, copy=True))
                    opt = make(name, settings, lr, [p])
                    snaps = []
                    for s in range(STEPS):
                        p.grad = draw(2000 + 16 * k + s, n, -28, 0).to(dt)
                        opt.step()
                        if name.startswith("adam") and dt == torch.float32 and n <= FIRST_MAX:
                            # The square roots this step took: `exp_avg_sq.sqrt()` on the
                            # same tensor (MKL's vsSqrt, not correctly rounded).
                            v = opt.state[p]["exp_avg_sq"]
                            bits_in = v.view(torch.int32).tolist()
                            bits_out = v.sqrt().view(torch.int32).tolist()
                            for a, b in zip(bits_in, bits_out):
                                oracle[a & 0xFFFFFFFF] = b & 0xFFFFFFFF
                        if s == 0 or s == STEPS - 1:
                            snaps.append((h32 if dt == torch.float32 else h64)(p))
                    key = "f32" if dt == torch.float32 else "f64"
                    entry = {"n": n, "param_stream": 1000 + k, "after_last": snaps[1]}
                    if n <= FIRST_MAX:
                        entry["after_1"] = snaps[0]
                    case[key].append(entry)
            cases.append(case)
    pows = {
        "betas": POW_BETAS,
        "steps": POW_STEPS,
        "pow": [h64([b ** float(k) for k in range(1, POW_STEPS + 1)]) for b in POW_BETAS],
        "sqrt_bc": [h64([(1 - b ** float(k)) ** 0.5 for k in range(1, POW_STEPS + 1)]) for b in POW_BETAS],
    }
    doc = {
        "generator": "scripts/optim_torch.py",
        "torch": torch.__version__,
        "cpu_capability": cap,
        "threads": torch.get_num_threads(),
        "foreach": False,
        "steps": STEPS,
        "encoding": "hex: 8 hex digits per f32 (u32 bits), 16 per f64 (u64 bits); inputs drawn, not stored",
        "draw": {"param": [-4, 0], "grad": [-28, 0], "grad_stream": "2000 + 16*size_index + step"},
        "cases": cases,
        "bias_correction": pows,
        "adam_sqrt_f32": "".join(f"{a:08x}{oracle[a]:08x}" for a in sorted(oracle)),
    }
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "torch_optim.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {len(cases)} optimizer cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
