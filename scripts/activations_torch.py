#!/usr/bin/env python3
"""Bit-for-bit agreement of seedsweep's f32 activation kernels (src/ops/activations.rs) with
torch's CPU kernels, one thread, eager.

Tensors of several lengths (1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 8192: lengths that leave
a scalar remainder after ATen's vectorized loop of 16 elements on the AVX2 build, 32 on the
AVX512 one, and lengths that do not) at several scales (SCALE * randn after
torch.manual_seed(0)), plus special values (+-0, subnormals, large |x|, +-inf, NaN). Each
tensor runs as one contiguous tensor through F.gelu, F.gelu(approximate="tanh"), F.silu and
their backward kernels (torch.ops.aten.gelu_backward / silu_backward with a randn dy), and
through examples/activation_probe. Agreement is printed per op and per code path torch takes
for the element: for the exact gelu, oneDNN (a tensor of two or more elements) or ATen's
scalar lambda (one element); for the others, ATen's vectorized lambda or its scalar
remainder. A NaN counts as agreeing with a NaN (its sign and payload are the compiler's
choice of operand order in both).

    cargo build --release --example activation_probe
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/activations_torch.py
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/activations_torch.py \\
        --fixture tests/data/torch_activations_avx2.json
    /work/venv/bin/python scripts/activations_torch.py \\
        --fixture tests/data/torch_activations_avx512.json
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 /work/venv/bin/python \\
        scripts/activations_torch.py --fixture tests/data/torch_activations_avx2_onednn_avx2.json

oneDNN picks its own ISA from the CPU (capped by ONEDNN_MAX_CPU_ISA), which decides the exact
gelu's forward kernel; the probe is told the ISA this run's oneDNN uses. --fixture writes the
inputs and torch's output bits of all six ops for every tensor but the 8192-element ones
(tests/suite/activations_fixture.rs checks them without Python). The probe is read from
$CARGO_TARGET_DIR (default target/).
"""
import argparse
import json
import os
import platform
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 8192]
SCALES = [0.5, 2.0, 8.0]
OPS = ["gelu", "gelu_tanh", "silu", "gelu_bwd", "gelu_tanh_bwd", "silu_bwd"]


def specials():
    """Signed zeros, subnormals, tiny and large magnitudes, the f32 extremes, inf and NaN, and
    the edges of glibc erff's and expf's ranges, in a tensor of 41 elements (a scalar
    remainder on both builds)."""
    v = [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.17549435e-38, 1e-30, -1e-30, 3.7e-9,
         -3.7e-9, 1e-4, 0.84375, -0.84375, 1.25, -1.25, 2.857142, 6.0, -6.0, 8.49, -8.49,
         9.0, -9.0, 14.2, -14.2, 14.5, -14.5, 20.0, -20.0, 1e10, -1e10, 3.4028235e38,
         -3.4028235e38, float("inf"), float("-inf"), float("nan"), 5.0, -5.0, 0.5, -0.5, 1.0]
    return torch.tensor(v, dtype=torch.float32)


def tensors():
    """(name, x, dy) for every measured tensor."""
    out = []
    torch.manual_seed(0)
    for scale in SCALES:
        for n in LENGTHS:
            x = torch.randn(n) * scale
            dy = torch.randn(n)
            out.append((f"n{n}-s{scale:g}", x, dy))
    x = specials()
    torch.manual_seed(1)
    out.append(("specials", x, torch.randn(len(x))))
    # The same specials twice (82 elements): most of them in ATen's vectorized part.
    xs = x.repeat(2)
    out.append(("specials-x2", xs, torch.randn(len(xs))))
    # Each special alone: ATen's scalar lambda for the exact gelu too.
    for i, v in enumerate(x.tolist()):
        out.append((f"special-{i}", torch.tensor([v]), torch.randn(1)))
    return out


def onednn_isa():
    """The ISA oneDNN's JIT kernels use here: AVX-512 (512) when the CPU has it and
    ONEDNN_MAX_CPU_ISA does not cap it below, else AVX2 (2)."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if cap.startswith(("SSE", "AVX2", "AVX_")) or cap == "AVX":
        return 2
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return 512 if " avx512f" in flags and " avx512bw" in flags else 2


def bits(t):
    return t.contiguous().numpy().view(np.uint32)


def torch_ops(x, dy):
    return {
        "gelu": F.gelu(x),
        "gelu_tanh": F.gelu(x, approximate="tanh"),
        "silu": F.silu(x),
        "gelu_bwd": torch.ops.aten.gelu_backward(dy, x),
        "gelu_tanh_bwd": torch.ops.aten.gelu_backward(dy, x, approximate="tanh"),
        "silu_bwd": torch.ops.aten.silu_backward(dy, x),
    }


def hexbits(b):
    """f32 bit patterns as one string of 8 hex digits each."""
    return "".join(f"{v:08x}" for v in b.tolist())


def agree(a, b):
    """Elementwise: equal bits, or both NaN."""
    fa, fb = a.view(np.float32), b.view(np.float32)
    return (a == b) | (np.isnan(fa) & np.isnan(fb))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", help="write the fixture JSON here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cap = torch.backends.cpu.get_cpu_capability()
    block = 32 if cap.startswith("AVX512") else 16
    dnnl = onednn_isa()
    ts = tensors()
    lines = []
    for _, x, dy in ts:
        n = len(x)
        lines.append(" ".join(map(str, [block, dnnl, n, *bits(x).tolist(),
                                         *bits(dy).tolist()])))
    tgt = os.environ.get("CARGO_TARGET_DIR", "target")
    probe = os.path.join(tgt, "release", "examples", "activation_probe")
    res = subprocess.run([probe], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout.strip().split("\n")
    libc = platform.libc_ver()
    print(f"torch {torch.__version__}, ATen capability {cap} (block {block}), oneDNN ISA "
          f"{'AVX-512' if dnnl == 512 else 'AVX2'}, threads {torch.get_num_threads()}, "
          f"{libc[0]} {libc[1]}")
    # Per op: the two code paths' (agreeing, total) counts.
    paths = {op: ("oneDNN", "ATen scalar") if op.startswith("gelu") and "tanh" not in op
             else ("ATen vectorized", "ATen scalar") for op in OPS}
    tot = {op: [[0, 0], [0, 0]] for op in OPS}
    fixture = []
    for (name, x, dy), line in zip(ts, res):
        n = len(x)
        ours = np.array(list(map(int, line.split())), dtype=np.uint32).reshape(len(OPS), n)
        ref = torch_ops(x, dy)
        row = []
        for k, op in enumerate(OPS):
            vec = (n if n >= 2 else 0) if paths[op][0] == "oneDNN" else n - n % block
            ok = agree(ours[k], bits(ref[op]))
            tot[op][0][0] += int(ok[:vec].sum())
            tot[op][0][1] += vec
            tot[op][1][0] += int(ok[vec:].sum())
            tot[op][1][1] += n - vec
            row.append(f"{op} {int(ok.sum())}/{n}")
        if not name.startswith("special-"):
            print(f"{name:14} " + "  ".join(row))
        if not name.startswith("n8192"):
            fixture.append({
                "name": name,
                "x": hexbits(bits(x)),
                "dy": hexbits(bits(dy)),
                **{op: hexbits(bits(ref[op])) for op in OPS},
            })
    print("total by code path:")
    for op in OPS:
        (a, b), (c, d) = tot[op]
        print(f"  {op:14} {paths[op][0]} {a}/{b} | {paths[op][1]} {c}/{d}")
    if args.fixture:
        meta = {
            "torch": torch.__version__,
            "capability": cap,
            "block": block,
            "onednn_isa": dnnl,
            "threads": torch.get_num_threads(),
            "libc": f"{libc[0]} {libc[1]}",
            "generator": "scripts/activations_torch.py",
            "note": "arrays are f32 bit patterns, 8 hex digits each; each tensor is one "
                    "contiguous torch tensor",
        }
        with open(args.fixture, "w") as f:
            json.dump({"meta": meta, "tensors": fixture}, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {args.fixture}")


if __name__ == "__main__":
    main()
