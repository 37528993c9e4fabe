#!/usr/bin/env python3
"""Measure torch's CPU f32 sqrt (MKL vsSqrt) on ALL 2^32 f32 inputs and write the fixtures
seedsweep's `sqrt_mkl_f32` is tested against.

torch.sqrt on a float32 CPU tensor runs ATen's vml::vsqrt, i.e. MKL's vmsSqrt(VML_HA). On
this machine (AMD EPYC, MKL 2024.2) that is not the correctly rounded root: about 17 % of
inputs in [1, 4) are one ulp off. This script records what torch returns:

  * tests/data/mkl_sqrt_digests.txt: per-chunk digests (chunk = 2^24 inputs in bit order,
    digest = sum mod 2^64 of splitmix64(out_bits | in_bits << 32), as in
    scripts/mkl_tanh_table.py) of torch's output over all 2^32 inputs; the ignored Rust test
    `mkl_sqrt::exhaustive_sqrt_digests` recomputes them from `sqrt_mkl_f32`. The script also
    prints how many inputs differ from the correctly rounded root (numpy's float64 sqrt
    rounded once to f32, which is the correctly rounded f32 root: 53 >= 2*24 + 2) and by
    how many ulps.
  * tests/data/mkl_sqrt_sample.txt: input bits, torch's bits and the correctly rounded bits
    for a few thousand inputs: seeded random positive normals, a run of consecutive inputs
    near 1, 2 and 4, the boundaries of the kernel's fast range (FLT_MIN, 0x7f7ff000), and
    special inputs (zeros, subnormals, infinities, NaNs, negatives). About a sixth of them
    are torch's +-1-ulp cases.

Conditions are printed and written into both files: the result is a fact about this torch
build, its MKL, this CPU and one thread. Run it as
    ATEN_CPU_CAPABILITY=avx2 python3 scripts/mkl_sqrt_check.py
(a few minutes of CPU). `--check-conditions` instead compares torch on a sample (2^20
random inputs plus the sample file's) under the current environment (thread count,
ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, MKL_CBWR), at several tensor lengths, storage
offsets, a stride and in place, and MKL's own vmsSqrt in its three accuracy modes (VML_LA,
VML_HA, VML_EP), against the committed sample and against a scalar model of the
algorithm (`model_sqrt` below, which needs this CPU's rsqrt table, read from
src/kernels/data/rsqrt12_zen.bin).
"""
import argparse
import os
import platform
import sys
import time

import numpy as np
import torch

CHUNK_LOG2 = 24
CHUNK = 1 << CHUNK_LOG2


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def conditions():
    mkl = [l.strip() for l in torch.__config__.show().splitlines() if "Math Kernel Library" in l]
    return {
        "torch": torch.__version__,
        "mkl": mkl[0].lstrip("- ") if mkl else "none",
        "cpu": cpu_model(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"),
        "MKL_ENABLE_INSTRUCTIONS": os.environ.get("MKL_ENABLE_INSTRUCTIONS", "(unset)"),
        "threads": torch.get_num_threads(),
    }


def digest(start, out_bits):
    """Sum over the chunk (mod 2^64) of splitmix64(out_bits | input_bits << 32)."""
    k = np.arange(start, start + len(out_bits), dtype=np.uint64)
    z = out_bits.astype(np.uint64) | (k << np.uint64(32))
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        return int(z.sum(dtype=np.uint64))


def correctly_rounded(x):
    """Correctly rounded f32 sqrt of finite non-negative f32 inputs (float64 sqrt, one
    rounding); other inputs get numpy's value (NaN for negatives), which is not compared."""
    with np.errstate(invalid="ignore"):
        return np.sqrt(x.astype(np.float64)).astype(np.float32)


def torch_sqrt(x):
    return torch.sqrt(torch.from_numpy(np.ascontiguousarray(x))).numpy().view(np.uint32)


def scan(args):
    torch.set_num_threads(1)
    cond = conditions()
    print("conditions:", cond, flush=True)
    digests = []
    hist = {}
    n_chunks = args.chunks or (1 << 32) // CHUNK
    t0 = time.time()
    for c in range(n_chunks):
        start = c * CHUNK
        bits = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        y = torch_sqrt(x)
        digests.append(digest(start, y))
        fin = np.isfinite(x) & (x >= 0)
        crb = correctly_rounded(x).view(np.uint32)
        dist = y[fin].astype(np.int64) - crb[fin].astype(np.int64)
        for u, n in zip(*np.unique(dist, return_counts=True)):
            hist[int(u)] = hist.get(int(u), 0) + int(n)
        if c % 32 == 31:
            print(f"  chunk {c + 1}/{n_chunks}, {time.time() - t0:.0f} s", flush=True)
    print(f"torch - correctly rounded (ulps) over finite non-negative inputs: {dict(sorted(hist.items()))}")
    with open(args.digests, "w") as f:
        f.write("# scripts/mkl_sqrt_check.py: per-chunk digests of torch.sqrt over all 2^32 f32 inputs\n")
        f.write("# (chunk = 2^24 inputs in bit order); digest = sum mod 2^64 of\n")
        f.write("# splitmix64(out_bits | in_bits << 32).\n")
        for k, v in cond.items():
            f.write(f"# {k}: {v}\n")
        f.write(f"# torch - correctly rounded (ulps), finite non-negative inputs: {dict(sorted(hist.items()))}\n")
        f.write("# chunk torch_sqrt\n")
        for c, a in enumerate(digests):
            f.write(f"{c} {a:016x}\n")
    print(f"digests -> {args.digests}")
    write_sample(args, cond)


def sample_inputs():
    rng = np.random.default_rng(21)
    parts = [
        # Random positive normals, uniform in the bits (every binade alike).
        rng.integers(0x00800000, 0x7F800000, size=3000, dtype=np.uint64).astype(np.uint32),
        # Values of the size Adam's exp_avg_sq takes (1e-12 .. 1e-2).
        (10.0 ** rng.uniform(-12, -2, size=1000)).astype(np.float32).view(np.uint32),
        # Consecutive inputs from 1, from 2 up and down, and below 4.
        np.arange(0x3F800000, 0x3F800000 + 200, dtype=np.uint32),
        np.arange(0x40000000 - 100, 0x40000000 + 100, dtype=np.uint32),
        np.arange(0x40800000 - 200, 0x40800000, dtype=np.uint32),
        # The edges of the fast range: smallest normals, largest subnormals, the top segment.
        np.arange(0x00800000 - 8, 0x00800000 + 8, dtype=np.uint32),
        np.arange(0x7F7FF000 - 8, 0x7F7FF000 + 8, dtype=np.uint32),
        np.arange(0x7F800000 - 8, 0x7F800000, dtype=np.uint32),
        # Zeros, subnormals, infinities, NaNs (quiet and signalling, both signs), negatives.
        np.array([0x00000000, 0x80000000, 0x00000001, 0x00000002, 0x00400000, 0x007FFFFF,
                  0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
                  0x7FA00000, 0x7FFFFFFF, 0xFFFFFFFF, 0xBF800000, 0x80000001, 0x80800000,
                  0xFF7FFFFF, 0xC0000000], dtype=np.uint32),
    ]
    return np.unique(np.concatenate(parts))


def write_sample(args, cond):
    torch.set_num_threads(1)
    ins = sample_inputs()
    x = ins.view(np.float32)
    y = torch_sqrt(x)
    cr = correctly_rounded(x).view(np.uint32)
    fin = np.isfinite(x) & (x >= 0)
    off = int(((y != cr) & fin).sum())
    with open(args.sample, "w") as f:
        f.write("# scripts/mkl_sqrt_check.py sample: input_bits torch_sqrt_bits correctly_rounded_bits (hex;\n")
        f.write("# the last column is numpy's float64 sqrt rounded to f32, NaN for negative inputs)\n")
        for k, v in cond.items():
            f.write(f"# {k}: {v}\n")
        f.write(f"# inputs: {len(ins)}; finite non-negative inputs where torch differs from the correctly rounded root: {off}\n")
        for a, b, c in zip(ins, y, cr):
            f.write(f"{a:08x} {b:08x} {c:08x}\n")
    print(f"sample of {len(ins)} inputs ({off} where torch is not correctly rounded) -> {args.sample}")


def model_sqrt(x, table):
    """Scalar numpy model of the kernel (float32 arithmetic, no FMA); see
    src/kernels/mkl_sqrt.rs for the algorithm and the order of operations."""
    f32 = np.float32
    bits = x.view(np.uint32)
    fast = (bits >= 0x00800000) & (bits < 0x7F7FF000)
    out = correctly_rounded(x).view(np.uint32).copy()
    # Special inputs (torch's values): -0 -> -0, NaN -> quieted, other negatives -> 0x7fc00000.
    nan = np.isnan(x)
    out[nan] = bits[nan] | np.uint32(0x00400000)
    neg = (bits > 0x80000000) & ~nan
    out[neg] = 0x7FC00000
    b = bits[fast].astype(np.int64)
    e = (b >> 23) - 127
    q = e & 1
    k = (e - q) >> 1
    idx = q * 4096 + ((b >> 11) & 0xFFF)
    rbits = (0x3F000000 | (table[idx].astype(np.int64) << 11)) - (k << 23)
    r = rbits.astype(np.uint32).view(np.float32)
    xf = x[fast]
    with np.errstate(all="ignore"):
        y = (xf * r).astype(f32)
        h = (f32(0.5) * r).astype(f32)
        ee = (f32(0.5) - (y * h).astype(f32)).astype(f32)
        y1 = (y + (y * ee).astype(f32)).astype(f32)
        h1 = (h + (h * ee).astype(f32)).astype(f32)
        d = (xf - (y1 * y1).astype(f32)).astype(f32)
        res = (y1 + (d * h1).astype(f32)).astype(f32)
    out[fast] = res.view(np.uint32)
    return out


def check_conditions(args):
    """Torch's sqrt under this process's environment against the committed sample and the
    scalar model, on several layouts."""
    if args.threads:
        torch.set_num_threads(args.threads)
    cond = conditions()
    table = np.fromfile(args.table, dtype="<u2")
    assert len(table) == 8192, "rsqrt table must hold 2 x 4096 entries"
    rng = np.random.default_rng(22)
    rnd = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    sample = np.array([[int(w, 16) for w in l.split()] for l in open(args.sample) if not l.startswith("#")],
                      dtype=np.uint64).astype(np.uint32)
    ins = np.concatenate([sample[:, 0], rnd])
    want = model_sqrt(ins.view(np.float32), table)
    x = torch.from_numpy(ins.view(np.float32).copy())
    results = {"contiguous": torch.sqrt(x).numpy().view(np.uint32)}
    for length in (1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 40, 350, 2049):
        out = np.empty(len(ins), dtype=np.uint32)
        for off in range(0, len(ins), length):
            out[off:off + length] = torch.sqrt(x[off:off + length]).numpy().view(np.uint32)
        results[f"length {length}"] = out
    for shift in (1, 2, 3, 5):
        buf = torch.empty(len(ins) + shift, dtype=torch.float32)
        buf[shift:] = x
        results[f"offset {shift}"] = torch.sqrt(buf[shift:]).numpy().view(np.uint32)
    buf = torch.empty(2 * len(ins), dtype=torch.float32)
    buf[0::2] = x
    results["stride 2"] = torch.sqrt(buf[0::2]).numpy().view(np.uint32)
    y = x.clone()
    torch.sqrt_(y)
    results["in place"] = y.numpy().view(np.uint32)
    # MKL's own entry point with each accuracy mode (torch passes VML_HA), where exported.
    import ctypes
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        vms = lib.VMSSQRT_
    except (OSError, AttributeError):
        vms = None
    if vms is not None:
        xin = ins.view(np.float32).copy()
        for name, mode in (("VML_LA", 0x1), ("VML_HA", 0x2), ("VML_EP", 0x3)):
            out = np.empty_like(xin)
            n, m = ctypes.c_int64(len(xin)), ctypes.c_int64(mode)
            vms(ctypes.byref(n), xin.ctypes.data_as(ctypes.c_void_p),
                out.ctypes.data_as(ctypes.c_void_p), ctypes.byref(m))
            results[f"vmsSqrt {name}"] = out.view(np.uint32)
    else:
        print("  (MKL's vmsSqrt is not exported by this build: accuracy modes not checked)")
    print("conditions:", cond)
    ok = bool(np.array_equal(want[:len(sample)], sample[:, 1]))
    print(f"  model vs committed sample: {'agree' if ok else 'DIFFER'}")
    for name, got in results.items():
        agree = int((got == want).sum())
        ok &= agree == len(ins)
        print(f"  {name:12}: {agree}/{len(ins)} agree with the model")
    print("ALL AGREE" if ok else "DIFFERENCES FOUND")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--digests", default="tests/data/mkl_sqrt_digests.txt")
    ap.add_argument("--sample", default="tests/data/mkl_sqrt_sample.txt")
    ap.add_argument("--table", default="src/kernels/data/rsqrt12_zen.bin")
    ap.add_argument("--check-conditions", action="store_true")
    ap.add_argument("--chunks", type=int, default=0, help="scan only the first N chunks (a quick trial)")
    ap.add_argument("--threads", type=int, default=0, help="with --check-conditions: torch.set_num_threads")
    a = ap.parse_args()
    if a.check_conditions:
        sys.exit(check_conditions(a))
    scan(a)


if __name__ == "__main__":
    main()
