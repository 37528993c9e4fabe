#!/usr/bin/env python3
"""Measure torch's CPU f32 tanh (MKL vmsTanh) on ALL 2^32 f32 inputs against the correctly
rounded tanh, and write the exception table seedsweep embeds (src/kernels/data/mkl_tanh_f32.bin).

For every f32 bit pattern x (in chunks of 2^24, in order), this computes
  * torch.tanh(x) with torch.set_num_threads(1), on one contiguous tensor per chunk;
  * the correctly rounded tanh: numpy's float64 tanh rounded once to f32. Where that float64
    value lies within 2^-44 (relative) of an f32 rounding boundary, i.e. where the float64
    error (a few float64 ulps) could put it on the wrong side, the value is recomputed with
    mpmath at 200 bits and rounded exactly.
Every non-NaN input where the two differ goes into the table. NaN inputs are checked
separately: torch must return the input quieted (bits | 0x00400000), which seedsweep does.

Output (see --out): a little-endian binary of sorted u32 pairs (input bits, torch's output
bits), negative and positive inputs alike. Also written: per-chunk digests of torch's output
and of the correctly rounded output (tests/data/mkl_tanh_digests.txt, which the ignored Rust
test `exhaustive_tanh_digests` recomputes over all 2^32 inputs), and a sample fixture of
inputs with torch's and the correctly rounded bits (tests/data/mkl_tanh_sample.txt).

Conditions are printed and written into the digest file: the result is a fact about this
torch build, its MKL, this CPU and one thread. Run it as
    ATEN_CPU_CAPABILITY=avx2 python3 scripts/mkl_tanh_table.py
(a few minutes of CPU). `--check-conditions` instead compares a sample (every table entry
plus 2^20 random inputs, at several tensor lengths and offsets) against the committed table
under the current environment (thread count, ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS).
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
MASK64 = (1 << 64) - 1


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
    """Sum over the chunk (mod 2^64) of splitmix64(out_bits | input_bits << 32).

    The Rust test computes the same; any differing element changes it (with overwhelming
    probability)."""
    k = np.arange(start, start + len(out_bits), dtype=np.uint64)
    z = out_bits.astype(np.uint64) | (k << np.uint64(32))
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        return int(z.sum(dtype=np.uint64))


def exact_round_tanh(xs):
    """Correctly rounded f32 tanh of f32 inputs `xs` via mpmath (200 bits)."""
    import mpmath

    mpmath.mp.prec = 200
    out = np.empty(len(xs), dtype=np.float32)
    for i, x in enumerate(xs):
        t = mpmath.tanh(mpmath.mpf(float(x)))
        # The two f32 neighbours of t, then pick the nearer (no exact ties: tanh of a
        # nonzero rational is irrational).
        f = np.float32(float(t))
        if mpmath.mpf(float(f)) > t:
            lo, hi = np.nextafter(f, np.float32(-np.inf)), f
        else:
            lo, hi = f, np.nextafter(f, np.float32(np.inf))
        mid = (mpmath.mpf(float(lo)) + mpmath.mpf(float(hi))) / 2
        out[i] = lo if t < mid else hi
    return out


def correctly_rounded(x):
    """Correctly rounded f32 tanh of the f32 array `x` (see module doc); also returns the
    number of boundary cases resolved with mpmath."""
    t64 = np.tanh(x.astype(np.float64))
    cr = t64.astype(np.float32)
    d = np.abs(t64) * 2.0**-44
    near = (t64 + d).astype(np.float32) != (t64 - d).astype(np.float32)
    near &= np.isfinite(x)
    idx = np.nonzero(near)[0]
    if len(idx):
        cr[idx] = exact_round_tanh(x[idx])
    return cr, len(idx)


def scan(args):
    torch.set_num_threads(1)
    cond = conditions()
    print("conditions:", cond, flush=True)
    keys, vals = [], []
    torch_digests, cr_digests = [], []
    ulp_hist = {}
    boundary = 0
    nan_bad = 0
    n_chunks = args.chunks or (1 << 32) // CHUNK
    t0 = time.time()
    for c in range(n_chunks):
        start = c * CHUNK
        bits = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        y = torch.tanh(torch.from_numpy(x)).numpy().view(np.uint32)
        cr, nb = correctly_rounded(x)
        boundary += nb
        crb = cr.view(np.uint32).copy()
        nan = np.isnan(x)
        # NaN: torch returns the input quieted; so does seedsweep (and so the CR column).
        crb[nan] = bits[nan] | np.uint32(0x00400000)
        nan_bad += int((y[nan] != crb[nan]).sum())
        diff = np.nonzero((y != crb) & ~nan)[0]
        if len(diff):
            keys.append(bits[diff].copy())
            vals.append(y[diff].copy())
            dist = np.abs(y[diff].astype(np.int64) - crb[diff].astype(np.int64))
            for u, n in zip(*np.unique(dist, return_counts=True)):
                ulp_hist[int(u)] = ulp_hist.get(int(u), 0) + int(n)
        torch_digests.append(digest(start, y))
        cr_digests.append(digest(start, crb))
        if c % 16 == 15:
            n = sum(len(k) for k in keys)
            print(f"  chunk {c + 1}/{n_chunks}: {n} exceptions so far, {time.time() - t0:.0f} s", flush=True)
    keys = np.concatenate(keys) if keys else np.zeros(0, np.uint32)
    vals = np.concatenate(vals) if vals else np.zeros(0, np.uint32)
    order = np.argsort(keys, kind="stable")
    keys, vals = keys[order], vals[order]
    table = np.empty(2 * len(keys), dtype="<u4")
    table[0::2] = keys
    table[1::2] = vals
    with open(args.out, "wb") as f:
        f.write(table.tobytes())
    print(f"exceptions: {len(keys)} of 2^32 non-NaN-or-NaN inputs "
          f"({len(keys) / 2**32 * 100:.5f} %), table {table.nbytes} bytes -> {args.out}")
    print(f"ulp distance histogram: {dict(sorted(ulp_hist.items()))}")
    print(f"boundary cases resolved with mpmath: {boundary}; NaN inputs not quieted-identity: {nan_bad}")
    # Symmetry: is torch's tanh odd on the table?
    pos = keys < 0x80000000
    pk, pv = keys[pos], vals[pos]
    nk, nv = keys[~pos] ^ np.uint32(0x80000000), vals[~pos] ^ np.uint32(0x80000000)
    odd = len(pk) == len(nk) and np.array_equal(pk, np.sort(nk)) and np.array_equal(
        pv, nv[np.argsort(nk, kind="stable")])
    print(f"positive {len(pk)}, negative {len(nk)}, odd-symmetric: {odd}")
    xs = keys.view(np.float32)
    for lo, hi in ((0, 2**-12), (2**-12, 0.125), (0.125, 0.5), (0.5, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, np.inf)):
        m = (np.abs(xs) >= lo) & (np.abs(xs) < hi)
        print(f"  |x| in [{lo:g}, {hi:g}): {int(m.sum())}")
    with open(args.digests, "w") as f:
        f.write("# scripts/mkl_tanh_table.py: per-chunk digests over all 2^32 f32 inputs (chunk = 2^24 inputs\n")
        f.write("# in bit order); digest = sum mod 2^64 of splitmix64(out_bits | in_bits << 32).\n")
        for k, v in cond.items():
            f.write(f"# {k}: {v}\n")
        f.write(f"# exceptions: {len(keys)}; boundary cases resolved with mpmath: {boundary}\n")
        f.write("# chunk torch_mkl_tanh correctly_rounded\n")
        for c, (a, b) in enumerate(zip(torch_digests, cr_digests)):
            f.write(f"{c} {a:016x} {b:016x}\n")
    print(f"digests -> {args.digests}")
    write_sample(args, keys, vals, cond)


def write_sample(args, keys, vals, cond):
    """A sample fixture: every 64th table entry plus 4096 seeded random inputs (CR agrees)."""
    rng = np.random.default_rng(11)
    rnd = rng.integers(0, 1 << 32, size=4096, dtype=np.uint64).astype(np.uint32)
    rnd = rnd[~np.isnan(rnd.view(np.float32))]
    # Also normal(0, 2) inputs, the scenario's range.
    nrm = (rng.standard_normal(4096) * 2).astype(np.float32).view(np.uint32)
    ins = np.unique(np.concatenate([keys[::64], rnd, nrm]))
    torch.set_num_threads(1)
    y = torch.tanh(torch.from_numpy(ins.view(np.float32).copy())).numpy().view(np.uint32)
    cr, _ = correctly_rounded(ins.view(np.float32))
    with open(args.sample, "w") as f:
        f.write("# scripts/mkl_tanh_table.py sample: input_bits torch_tanh_bits correctly_rounded_bits (hex)\n")
        for k, v in cond.items():
            f.write(f"# {k}: {v}\n")
        for a, b, c in zip(ins, y, cr.view(np.uint32)):
            f.write(f"{a:08x} {b:08x} {c:08x}\n")
    print(f"sample of {len(ins)} inputs -> {args.sample}")


def check_conditions(args):
    """Torch's tanh vs the committed table on a sample, under this process's environment."""
    if args.threads:
        torch.set_num_threads(args.threads)
    cond = conditions()
    table = np.fromfile(args.out, dtype="<u4")
    keys, vals = table[0::2], table[1::2]
    rng = np.random.default_rng(12)
    rnd = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    rnd = rnd[~np.isnan(rnd.view(np.float32))]
    ins = np.concatenate([keys, rnd])
    cr, _ = correctly_rounded(ins.view(np.float32))
    want = cr.view(np.uint32).copy()
    pos = np.searchsorted(keys, ins)
    hit = (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == ins)
    want[hit] = vals[pos[hit]]
    x = torch.from_numpy(ins.view(np.float32).copy())
    results = {}
    # One big contiguous tensor.
    results["contiguous"] = torch.tanh(x).numpy().view(np.uint32)
    # Small tensors of each length 1..40 (vector body vs tail), and shifted storage offsets.
    for length in (1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 40, 350, 2049):
        out = np.empty(len(ins), dtype=np.uint32)
        for off in range(0, len(ins), length):
            out[off:off + length] = torch.tanh(x[off:off + length]).numpy().view(np.uint32)
        results[f"length {length}"] = out
    for shift in (1, 2, 3, 5):
        buf = torch.empty(len(ins) + shift, dtype=torch.float32)
        buf[shift:] = x
        results[f"offset {shift}"] = torch.tanh(buf[shift:]).numpy().view(np.uint32)
    # Non-contiguous (stride 2) input.
    buf = torch.empty(2 * len(ins), dtype=torch.float32)
    buf[0::2] = x
    results["stride 2"] = torch.tanh(buf[0::2]).numpy().view(np.uint32)
    # In place, and as a (B, S, H) slice like the scenarios' hidden states.
    y = x.clone()
    torch.tanh_(y)
    results["in place"] = y.numpy().view(np.uint32)
    print("conditions:", cond)
    ok = True
    for name, got in results.items():
        agree = int((got == want).sum())
        ok &= agree == len(ins)
        print(f"  {name:12}: {agree}/{len(ins)} agree with the table")
    print("ALL AGREE" if ok else "DIFFERENCES FOUND")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="src/kernels/data/mkl_tanh_f32.bin")
    ap.add_argument("--digests", default="tests/data/mkl_tanh_digests.txt")
    ap.add_argument("--sample", default="tests/data/mkl_tanh_sample.txt")
    ap.add_argument("--check-conditions", action="store_true")
    ap.add_argument("--chunks", type=int, default=0, help="scan only the first N chunks (a quick trial)")
    ap.add_argument("--threads", type=int, default=0, help="with --check-conditions: torch.set_num_threads")
    a = ap.parse_args()
    if a.check_conditions:
        sys.exit(check_conditions(a))
    scan(a)


if __name__ == "__main__":
    main()
