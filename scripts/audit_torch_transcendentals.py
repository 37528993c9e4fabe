#!/usr/bin/env python3
"""Audit seedsweep's f32 transcendental kernels against real torch on this CPU, bit for bit.

Each function is compared on ALL 2^32 f32 inputs where torch exposes it for arbitrary
inputs, otherwise on a stated dense sample, and the agreement rate is printed. seedsweep's
values come from `target/release/examples/kernel_dump` (build it with
`cargo build --release --example kernel_dump`), which streams the Rust kernel's output.

    python3 scripts/audit_torch_transcendentals.py tanh        # all 2^32: torch.tanh (MKL vmsTanh)
    ATEN_CPU_CAPABILITY=avx2 python3 scripts/audit_torch_transcendentals.py exp   # all 2^32
    ATEN_CPU_CAPABILITY=avx2 python3 scripts/audit_torch_transcendentals.py log   # dense sample

* tanh: `torch.tanh` against `tanh_mkl_f32` (cpu-fma's default) and `tanh_cr_f32`
  (modifier tanh-cr).
* exp: ATen's `Vectorized<float>::exp` (SLEEF expf_u10), the exp of log-softmax forward and
  backward, exposed exactly by `torch._log_softmax_backward_data(g, y, 1, float32)` with a
  row `g = [-1, 0, ..., 0]`: the kernel computes `g - exp(y) * sum(g)` as
  `fma(-exp(y), -1, 0) = exp(y)` for every column but the first. Against `exp_f32`.
* log: ATen's `Vectorized<float>::log` (SLEEF logf_u10), the log of log-softmax's
  log-sum-exp. No op takes it on arbitrary inputs, so rows `[0] * m + [a]` go through
  `F.log_softmax`: element 0 is `(0 - 0) - log(s)` with `s` the row's sum of exponentials,
  which this script recomputes exactly in f32 in ATen's lane order (8 lanes for AVX2, 16 for
  AVX512; `exp(a)` taken from the exp exposure above). Sample: for every m in 1..66 (the
  scenarios' sums lie in [1, 67]), 2^16 values of `a = log(u)` with u on a uniform grid in
  (0, 1), so s runs densely through [m, m+1). Against `log_f32`.

torch runs with one thread. NaN outputs count as agreeing when both are NaN with the same
bits (tanh) or both NaN (exp and log, whose NaN payloads no scenario can observe).
"""
import argparse
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

CHUNK = 1 << 24
DUMP = "target/release/examples/kernel_dump"


def rust_range(kernel, first, count):
    out = subprocess.run([DUMP, kernel, str(first), str(count)], capture_output=True, check=True).stdout
    return np.frombuffer(out, dtype="<u4")


def rust_inputs(kernel, bits):
    out = subprocess.run([DUMP, kernel, "-"], input=bits.astype("<u4").tobytes(), capture_output=True,
                         check=True).stdout
    return np.frombuffer(out, dtype="<u4")


def torch_exp(x):
    """Vectorized<float>::exp of every element of the 1-D f32 array x (see module doc)."""
    w = 4096
    pad = (-len(x)) % w
    rows = np.concatenate([x, np.zeros(pad, np.float32)]).reshape(-1, w)
    y = np.zeros((rows.shape[0], w + 1), np.float32)
    y[:, 1:] = rows
    g = np.zeros_like(y)
    g[:, 0] = -1
    gi = torch._log_softmax_backward_data(torch.from_numpy(g), torch.from_numpy(y), 1, torch.float32)
    return gi.numpy()[:, 1:].reshape(-1)[:len(x)].view(np.uint32)


def chunks(limit):
    n = limit or (1 << 32) // CHUNK
    for c in range(n):
        start = c * CHUNK
        yield c, n, start, np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)


def audit_tanh(a):
    agree = {"tanh-mkl": 0, "tanh-cr": 0}
    total = 0
    first = {}
    t0 = time.time()
    for c, n, start, bits in chunks(a.chunks):
        y = torch.tanh(torch.from_numpy(bits.view(np.float32))).numpy().view(np.uint32)
        for k in agree:
            r = rust_range(k, start, CHUNK)
            same = r == y
            agree[k] += int(same.sum())
            if k not in first and not same.all():
                i = int(np.nonzero(~same)[0][0])
                first[k] = (hex(bits[i]), hex(y[i]), hex(r[i]))
        total += CHUNK
        if c % 32 == 31:
            print(f"  chunk {c + 1}/{n}, {time.time() - t0:.0f} s: {agree}", flush=True)
    report("torch.tanh", agree, total, first)


def audit_exp(a):
    agree, total, first = {"exp-sleef": 0}, 0, {}
    t0 = time.time()
    for c, n, start, bits in chunks(a.chunks):
        y = torch_exp(bits.view(np.float32))
        r = rust_range("exp-sleef", start, CHUNK)
        same = (r == y) | (np.isnan(r.view(np.float32)) & np.isnan(y.view(np.float32)))
        agree["exp-sleef"] += int(same.sum())
        if not first and not same.all():
            i = int(np.nonzero(~same)[0][0])
            first["exp-sleef"] = (hex(bits[i]), hex(y[i]), hex(r[i]))
        total += CHUNK
        if c % 32 == 31:
            print(f"  chunk {c + 1}/{n}, {time.time() - t0:.0f} s: {agree}", flush=True)
    report("Vectorized<float>::exp (via _log_softmax_backward_data)", agree, total, first)


def lane_sum(e, m, lanes):
    """ATen's log-softmax row sum of exponentials for rows [1] * m + [e] (f32, exact order)."""
    n = m + 1
    if n < lanes:
        return np.float32(m) + e  # integers are exact; one rounding
    acc = np.zeros((len(e), lanes), np.float32)
    for j in range(n):
        v = e if j == m else np.float32(1)
        acc[:, j % lanes] = acc[:, j % lanes] + v
    w = lanes
    while w > 1:
        half = w // 2
        acc[:, :half] = acc[:, :half] + acc[:, half:w]
        w = half
    return acc[:, 0]


def audit_log(a):
    lanes = 16 if torch.backends.cpu.get_cpu_capability() == "AVX512" else 8
    per_m = 1 << a.log_per_m
    u = (np.arange(per_m, dtype=np.float64) + 0.5) / per_m
    av = np.log(u).astype(np.float32)
    e = torch_exp(av).view(np.float32)
    agree, total, first = {"log-sleef": 0}, 0, {}
    distinct = set()
    for m in range(1, 67):
        rows = np.zeros((per_m, m + 1), np.float32)
        rows[:, m] = av
        lse = -F.log_softmax(torch.from_numpy(rows), dim=1).numpy()[:, 0]
        s = lane_sum(e, m, lanes).astype(np.float32)
        r = rust_inputs("log-sleef", s.view(np.uint32)).view(np.float32)
        same = r.view(np.uint32) == lse.view(np.uint32)
        agree["log-sleef"] += int(same.sum())
        total += per_m
        distinct.update(np.unique(s.view(np.uint32)).tolist())
        if not first and not same.all():
            i = int(np.nonzero(~same)[0][0])
            first["log-sleef"] = (m, float(s[i]), float(lse[i]), float(r[i]))
    print(f"  {len(distinct)} distinct sums s in [1, 67], {lanes} lanes")
    report("Vectorized<float>::log (via F.log_softmax)", agree, total, first)


def report(what, agree, total, first):
    print(f"{what}: torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} thread(s)")
    for k, v in agree.items():
        print(f"  {k}: {v}/{total} agree ({100 * v / total:.6f} %), {total - v} differ"
              + (f"; first difference (input, torch, ours): {first[k]}" if k in first else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("function", choices=["tanh", "exp", "log"])
    ap.add_argument("--chunks", type=int, default=0, help="only the first N chunks of 2^24 inputs (a trial)")
    ap.add_argument("--log-per-m", type=int, default=16, help="log: 2^N sample sums per [m, m+1)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    {"tanh": audit_tanh, "exp": audit_exp, "log": audit_log}[a.function](a)


if __name__ == "__main__":
    sys.exit(main())
