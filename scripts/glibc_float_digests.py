#!/usr/bin/env python3
"""Per-chunk digests of the C library's float erff, expf and tanhf over all 2^32 inputs, the
oracle for seedsweep's ports of glibc 2.36's (src/kernels/torch_ops/activation.rs: the scalar
lambdas of torch's gelu, silu and tanh-gelu kernels call them through std::erf/exp/tanh).

It compiles a small C program with the system C compiler, linked against the system libm (the
library torch's wheels use), and writes tests/data/glibc_float_digests.txt:
chunk = 2^24 inputs in bit order; digest = sum mod 2^64 of splitmix64(out_bits | in_bits << 32),
the digest of scripts/mkl_tanh_table.py. `tests/suite/glibc_float.rs` (ignored by default:
3 x 2^32 evaluations) computes the same digests from the Rust ports.

    python3 scripts/glibc_float_digests.py [--out tests/data/glibc_float_digests.txt]

A few minutes on one core. The header records the glibc version and the CPU: glibc picks its
expf by CPU (an FMA build where the CPU has FMA), and glibc 2.41 replaced erff and tanhf by
CORE-MATH's correctly rounded ones, so another glibc gives other digests.
"""
import argparse
import os
import platform
import subprocess
import tempfile

C_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

int main(void) {
    for (uint64_t chunk = 0; chunk < 256; chunk++) {
        uint64_t d[3] = {0, 0, 0};
        for (uint64_t i = chunk << 24; i < (chunk + 1) << 24; i++) {
            float x = from_bits((uint32_t)i);
            float y[3] = {erff(x), expf(x), tanhf(x)};
            for (int k = 0; k < 3; k++)
                d[k] += splitmix64((uint64_t)bits(y[k]) | (i << 32));
        }
        printf("%llu %016llx %016llx %016llx\n", (unsigned long long)chunk,
               (unsigned long long)d[0], (unsigned long long)d[1], (unsigned long long)d[2]);
        fflush(stdout);
    }
    return 0;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/glibc_float_digests.txt")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "digests.c"), os.path.join(d, "digests")
        with open(src, "w") as f:
            f.write(C_SOURCE)
        # -fno-builtin: no compile-time folding of the calls; -O1 keeps the loop plain.
        subprocess.run(["cc", "-O1", "-fno-builtin", "-o", exe, src, "-lm"], check=True)
        rows = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    libc = platform.libc_ver()
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open(args.out, "w") as f:
        f.write("# scripts/glibc_float_digests.py: per-chunk digests over all 2^32 f32 inputs of the\n")
        f.write("# C library's erff, expf, tanhf (chunk = 2^24 inputs in bit order); digest = sum mod\n")
        f.write("# 2^64 of splitmix64(out_bits | in_bits << 32).\n")
        f.write(f"# libc: {libc[0]} {libc[1]}\n")
        f.write(f"# cpu: {cpu}\n")
        f.write("# chunk erff expf tanhf\n")
        f.write(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
