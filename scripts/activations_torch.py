#!/usr/bin/env python3
"""Bit-for-bit agreement of seedsweep's f32 activation kernels (src/ops/activations.rs) with
torch's CPU kernels: 8192 elements of SCALE * randn after torch.manual_seed(0), one thread.

    cargo build --release --example activation_probe
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/activations_torch.py [SCALE]
"""
import subprocess
import sys

import numpy as np
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
scale = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
x = torch.randn(8192) * scale
bits = x.view(torch.int32).numpy().astype(np.uint32)
out = subprocess.run(["target/release/examples/activation_probe"], input=" ".join(map(str, bits)),
                     capture_output=True, text=True, check=True).stdout.split("\n")
ours = [np.array(list(map(int, l.split())), dtype=np.uint32) for l in out[:6]]
ones = torch.ones_like(x)
ref = [torch.nn.functional.gelu(x), torch.nn.functional.gelu(x, approximate="tanh"),
       torch.nn.functional.silu(x), torch.ops.aten.gelu_backward(ones, x),
       torch.ops.aten.gelu_backward(ones, x, approximate="tanh"), torch.ops.aten.silu_backward(ones, x)]
print(f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, scale {scale}")
for name, o, r in zip(["gelu", "gelu_tanh", "silu", "gelu_bwd", "gelu_tanh_bwd", "silu_bwd"], ours, ref):
    r = r.numpy().view(np.uint32)
    print(f"{name:14} {(o == r).sum()} / {len(r)}")
