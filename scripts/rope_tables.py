#!/usr/bin/env python3
"""Measure the fp32 rotary-embedding tables torch 2.15 builds on the CPU against the correctly
rounded chain, and write the deviation tables seedsweep embeds (src/kernels/data/rope_*.bin).

Files (little-endian u32): rope_pow_f32.bin (theta bits, dim, j, torch's pow bits) sorted;
rope_cos_f32.bin / rope_sin_f32.bin: sorted argument bits where torch is one ulp off the
correctly rounded value, bit 31 set where torch's bits are the correctly rounded bits + 1
(else - 1); rope_trig_near_f32.bin: (argument, torch cos, torch sin) for the arguments where
cos or sin lies near a midpoint.

The recipe measured is the one rotary tests write (HF Llama's `_compute_default_rope_parameters`
and `rotary_emb` with `t` in place of position_ids):

    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
    freqs    = torch.outer(torch.arange(seq).float(), inv_freq)
    emb      = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

Step by step, the correctly rounded chain seedsweep computes (src/ops/rope.rs) is
  e = f32(2j / dim)           (ATen's div kernel: one IEEE division; checked below)
  p = f32(theta ** e)         (torch.pow(Scalar, Tensor): SLEEF powf_u10 on the vector body,
                               the platform powf on the tail; neither is correctly rounded)
  r = f32(1 / p)              (`1.0 / t` is `t.reciprocal() * 1.0`: one IEEE division)
  a = f32(t * r)              (outer: one IEEE product)
  cos(a), sin(a)              (ATen's vml::vcos / vsin: MKL vmsCos / vmsSin, VML_HA; not
                               correctly rounded)
The correctly rounded value of pow, cos and sin is numpy's float64 value rounded once to f32;
where that float64 value lies within 2^-16 f32 ulp of a rounding midpoint it is recomputed with
mpmath at 200 bits. Every input where torch differs from the correctly rounded value, or where
the value lies that near a midpoint, goes into a table (so seedsweep never depends on rounding a
float64 value near a midpoint).

Only a measured DOMAIN is covered (the constants below, repeated in src/ops/rope.rs, which
refuses anything outside it): theta in THETAS, head_dim in HEAD_DIMS, positions < MAX_POS.
pow's table is keyed by (theta bits, dim, j): its vector body and scalar tail are different
functions, so the same exponent can round differently at another index. cos's and sin's are
keyed by the argument's bits (MKL's result was checked not to depend on the position in the
tensor: --check).

Run: ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/rope_tables.py  (about a minute)
     ... --check  re-measures the committed tables at 1 and 2 threads on whole [seq, dim]
     tables (the recipe itself) and writes tests/data/rope_tables_torch.json.
"""
import argparse
import json
import os
import sys

import mpmath
import numpy as np
import torch

THETAS = [10000.0, 100000.0, 500000.0, 1000000.0]
HEAD_DIMS = list(range(2, 34, 2)) + [48, 64, 80, 96, 128]
MAX_POS = 4096
NEAR = 2.0 ** -16  # in f32 ulps from a rounding midpoint

mpmath.mp.prec = 200


def near_mid(v):
    """Boolean mask: float64 values within NEAR f32 ulp of an f32 rounding midpoint."""
    a = np.abs(v)
    m, e = np.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    e = np.maximum(e, -125)  # f32 subnormal spacing floor
    scaled = np.ldexp(a, 24 - e)  # a / ulp32(a), exact
    frac = scaled - np.floor(scaled)
    return (np.abs(frac - 0.5) < NEAR) & (a != 0)



def pow_table():
    recs = []
    total = 0
    for theta in THETAS:
        th32 = np.float32(theta)
        for d in HEAD_DIMS:
            e = torch.arange(0, d, 2).float() / d
            e_np = (np.arange(0, d, 2, dtype=np.float64) / d).astype(np.float32)
            assert (e.numpy() == e_np).all(), "exponent division is not one IEEE division"
            p = (theta ** e).numpy()
            v = np.power(np.float64(th32), e_np.astype(np.float64))
            cr = v.astype(np.float32)
            near = near_mid(v)
            for i in np.nonzero(near)[0]:
                cr[i] = mp_f32(mpmath.power(mpmath.mpf(float(th32)), mpmath.mpf(float(e_np[i]))))
            r = (1.0 / (theta ** e)).numpy()
            assert (r == (np.float64(1.0) / p.astype(np.float64)).astype(np.float32)).all(), \
                "reciprocal is not one IEEE division"
            for j in np.nonzero((p != cr) | near)[0]:
                recs.append((int(th32.view(np.uint32)), d, int(j), int(p[j].view(np.uint32))))
            total += len(p)
    return recs, total


def mp_f32(x):
    """Round an mpmath real to the nearest f32 (ties to even), exactly."""
    if x == 0:
        return np.float32(0.0)
    s = -1 if x < 0 else 1
    a = abs(x)
    e = int(mpmath.floor(mpmath.log(a, 2)))
    e = max(e, -126)
    scaled = a * mpmath.mpf(2) ** (23 - e)
    while scaled >= 2 ** 24:
        e += 1
        scaled /= 2
    while scaled < 2 ** 23 and e > -126:
        e -= 1
        scaled *= 2
    n = int(mpmath.floor(scaled))
    frac = scaled - n
    if frac > 0.5 or (frac == 0.5 and n % 2 == 1):
        n += 1
    return np.float32(s * float(mpmath.ldexp(n, e - 23)))


def inv_freq_torch(theta, d):
    return (1.0 / (theta ** (torch.arange(0, d, 2).float() / d))).numpy()


def trig_args():
    """Every argument t * inv_freq[j] the domain produces (f32 bits, sorted, unique)."""
    t = np.arange(MAX_POS, dtype=np.float32)
    parts = []
    for theta in THETAS:
        for d in HEAD_DIMS:
            inv = inv_freq_torch(theta, d)
            parts.append(np.unique(inv))
    invs = np.unique(np.concatenate(parts))
    args = (t[:, None] * invs[None, :]).astype(np.float32).ravel()
    return np.unique(args.view(np.uint32)).view(np.float32), len(invs)


def trig_table(args, tfn, nfn, mfn):
    """torch's values, the correctly rounded ones, and the near-midpoint mask."""
    y = tfn(torch.from_numpy(args)).numpy()
    v = nfn(args.astype(np.float64))
    cr = v.astype(np.float32)
    near = near_mid(v)
    for i in np.nonzero(near)[0]:
        cr[i] = mp_f32(mfn(mpmath.mpf(float(args[i]))))
    return y, cr, near


def build(root):
    torch.set_num_threads(1)
    recs, total = pow_table()
    recs.sort()
    np.array(recs, dtype="<u4").ravel().tofile(os.path.join(root, "src/kernels/data/rope_pow_f32.bin"))
    print(f"pow: {len(recs)} table entries of {total} (theta, dim, j) inputs")
    args, ninv = trig_args()
    print(f"trig arguments: {len(args)} distinct (from {ninv} distinct inv_freq values, positions < {MAX_POS})")
    res = {}
    for name, tfn, nfn, mfn in [("cos", torch.cos, np.cos, mpmath.cos), ("sin", torch.sin, np.sin, mpmath.sin)]:
        res[name] = trig_table(args, tfn, nfn, mfn)
    near_any = res["cos"][2] | res["sin"][2]
    # Near-midpoint arguments (of either function): (arg bits, torch cos bits, torch sin bits).
    sel = np.nonzero(near_any)[0]
    near = np.empty(3 * len(sel), dtype="<u4")
    near[0::3] = args[sel].view(np.uint32)
    near[1::3] = res["cos"][0][sel].view(np.uint32)
    near[2::3] = res["sin"][0][sel].view(np.uint32)
    near.tofile(os.path.join(root, "src/kernels/data/rope_trig_near_f32.bin"))
    print(f"{len(sel)} arguments near a midpoint of cos or sin (stored with torch's bits)")
    for name in ("cos", "sin"):
        y, cr, _ = res[name]
        yb = y.view(np.uint32).astype(np.int64)
        cb = cr.view(np.uint32).astype(np.int64)
        diff = (yb != cb)
        assert np.abs(yb - cb).max() <= 1, "a difference of more than one ulp"
        dev = diff & ~near_any
        keys = args[dev].view(np.uint32).copy()
        assert (keys < 0x80000000).all()
        keys |= np.where(yb[dev] > cb[dev], np.uint32(0x80000000), np.uint32(0))
        keys.astype("<u4").tofile(os.path.join(root, f"src/kernels/data/rope_{name}_f32.bin"))
        print(f"{name}: torch differs from the correctly rounded value on {int(diff.sum())} of "
              f"{len(args)} (by one ulp each); {len(keys)} deviation entries")


CASES = [  # (theta, head_dim, seq): fixture tables, whole recipe
    (10000.0, 8, 64), (10000.0, 64, 4096), (500000.0, 128, 4096), (1000000.0, 6, 300),
    (100000.0, 16, 1000), (10000.0, 2, 7), (10000.0, 30, 33), (500000.0, 80, 2048),
]


OP_CASES = [  # (theta, head_dim, seq, heads, batch)
    (10000.0, 8, 5, 2, 2), (500000.0, 64, 17, 1, 1), (1000000.0, 6, 9, 3, 1), (10000.0, 2, 4, 4, 1),
]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def digest(t):
    """sum over the row-major table of bits[i] * (i + 1), mod 2^64 (what the Rust test recomputes)."""
    b = t.numpy().view(np.uint32).ravel().astype(np.uint64)
    w = np.arange(1, len(b) + 1, dtype=np.uint64)
    return int((b * w).sum(dtype=np.uint64))


def check(root):
    out = {"conditions": {"torch": torch.__version__,
                          "capability": torch.backends.cpu.get_cpu_capability()}, "cases": []}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for theta, d, seq in CASES:
            inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
            t = torch.arange(seq).float()
            freqs = torch.outer(t, inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            c, s = emb.cos(), emb.sin()
            if threads == 1:
                out["cases"].append({
                    "theta": theta, "head_dim": d, "seq": seq,
                    "inv_freq": [int(b) for b in inv_freq.numpy().view(np.uint32)],
                    # digests of the whole tables, and the first rows in full
                    "cos_rows": [int(b) for b in c[: min(seq, 8)].numpy().view(np.uint32).ravel()],
                    "sin_rows": [int(b) for b in s[: min(seq, 8)].numpy().view(np.uint32).ravel()],
                    "cos_last": [int(b) for b in c[-1].numpy().view(np.uint32)],
                    "sin_last": [int(b) for b in s[-1].numpy().view(np.uint32)],
                    "cos_digest": digest(c),
                    "sin_digest": digest(s),
                })
            else:
                ref = next(x for x in out["cases"] if (x["theta"], x["head_dim"], x["seq"]) == (theta, d, seq))
                assert ref["cos_digest"] == digest(c) and ref["sin_digest"] == digest(s)
    # The op itself, forward and autograd backward, HF's apply_rotary_pos_emb on a
    # [batch, seq, heads*head_dim] tensor viewed [batch, seq, heads, head_dim]; the gradient
    # holds some +0 and -0 entries (the sign of a zero gradient shows autograd's summation order).
    torch.set_num_threads(1)
    out["ops"] = []
    gen = torch.Generator().manual_seed(35)
    for theta, d, seq, heads, batch in OP_CASES:
        inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = torch.randn(batch, seq, heads * d, generator=gen)
        g = torch.randn(batch, seq, heads * d, generator=gen)
        flat = g.view(-1)
        flat[::7] = 0.0
        flat[3::11] = -0.0
        xr = x.clone().requires_grad_(True)
        q = xr.view(batch, seq, heads, d)
        c, s_ = cos[:, None, :], sin[:, None, :]
        y = (q * c) + (rotate_half(q) * s_)
        y = y.reshape(batch, seq, heads * d)
        y.backward(g)
        bits = lambda t: [int(b) for b in t.detach().numpy().view(np.uint32).ravel()]
        out["ops"].append({"theta": theta, "head_dim": d, "seq": seq, "heads": heads,
                           "batch": batch, "x": bits(x), "g": bits(g), "y": bits(y),
                           "dx": bits(xr.grad)})
    path = os.path.join(root, "tests/data/rope_tables_torch.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print(f"wrote {path}: {len(CASES)} cases, identical at 1 and 2 threads")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        sys.exit("run with ATEN_CPU_CAPABILITY=avx2")
    (check if a.check else build)(root)
