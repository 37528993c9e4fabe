#!/usr/bin/env python3
"""Cross-check seedsweep's DeepSpeed mirrors (T1 and T2) against real PyTorch on this CPU.

Runs DeepSpeed's TestTiedRowParallelOutputHeadTraining model (mission.md, T1), or the untied
TestRowParallelOutputHeadTraining (T2) for a T2 --param, in torch for
one seed and parametrization, twice: the unsharded fp32 reference and a simulated row-parallel
head (each rank's contiguous weight shard, partial logits summed), then compares every
recorded tensor with `seedsweep repro --dump DIR` bit for bit and prints per-check agreement
rates. Needs `pip install torch`; never needed by the tests or the main job. Run it with
ATEN_CPU_CAPABILITY=avx2 to compare with the `cpu-fma` profile (torch's AVX2 kernels), or on
an AVX512 machine without it for `cpu-fma-avx512`.

    cargo run --release -- repro --seed 8199 --param 35-3-False-0 --dump /tmp/dump
    python3 scripts/crosscheck_torch.py --seed 8199 --param 35-3-False-0 \
        --dump /tmp/dump/deepspeed-tied-row-parallel__35-3-False-0__cpu-fma__seed8199.csv

With `--threads 2`, compare a dump of `--profile cpu-fma+mkl-threads-2` (MKL's two-thread
matmul orders) instead.
"""
import argparse
import csv
import math
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

PARAMS = {
    "32-None-False-0": (32, None, 0),
    "35-3-False-0": (35, 3, 0),
    "35-3-True-0": (35, 3, 0),
    "32-3-False-2": (32, 3, 2),
}
# T2 (TestRowParallelOutputHeadTraining): (hidden, input_shape, bias)
PARAMS_T2 = {
    "32-input_shape0-lm_head-False": (32, (4,), False),
    "35-input_shape1-lm_head-True": (35, (2, 3), True),
    "35-input_shape2-embed_out-True": (35, (4,), True),
}
V, B, S, STEPS, LR, TP = 67, 2, 5, 3, 0.05, 2


def shards(h, tp):
    out, start = [], 0
    for r in range(tp):
        n = h // tp + (1 if r < h % tp else 0)
        out.append(slice(start, start + n))
        start += n
    return out


class CrTanh(torch.autograd.Function):
    """tanh rounded correctly (f64 tanh of the f32 input, rounded once: correct except in
    astronomically rare double-rounding cases), with torch's own tanh_backward kernel. torch's
    CPU tanh is MKL's vsTanh, 1 ulp off for some inputs; seedsweep's tanh_f32 is correctly
    rounded, so --cr-tanh isolates every other difference."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x.double()).float()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(g, y)


TANH = torch.tanh


def run(seed, hidden, pad, zero_stage, sharded):
    torch.manual_seed(seed)
    emb = nn.Embedding(V, hidden, padding_idx=pad)
    proj = nn.Linear(hidden, hidden)
    head = nn.Linear(hidden, V, bias=False)
    head.weight = emb.weight  # tied
    params = [emb.weight, proj.weight, proj.bias]
    opt = torch.optim.SGD(params, lr=LR)
    rec = defaultdict(list)
    for step in range(STEPS):
        torch.manual_seed(100 + step)
        ids = torch.randint(V, (B, S))
        if pad is not None:
            ids[0, 0] = pad
        labels = torch.randint(V, (B, S))
        opt.zero_grad()
        x = emb(ids)
        h = TANH(proj(x))
        if sharded:
            parts = []
            for s in shards(hidden, TP):
                w_shard = emb.weight[:, s].contiguous()
                # Gradient flows back into the full weight through the slice.
                w_shard = emb.weight[:, s] if False else emb.weight[:, s]
                parts.append(F.linear(h[..., s].contiguous(), w_shard.contiguous()))
            logits = parts[0]
            for p in parts[1:]:
                logits = logits + p
        else:
            logits = head(h)
        rec[("logits", str(step))] = logits.detach().flatten().tolist()
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
        loss.backward()
        if zero_stage == 0:
            rec[("tied_grad", str(step))] = emb.weight.grad.detach().flatten().tolist()
        opt.step()
        rec[("head_weight", str(step))] = emb.weight.detach().flatten().tolist()
        rec[("projection_weight", str(step))] = proj.weight.detach().flatten().tolist()
    return rec


def run_t2(seed, hidden, shape, bias, sharded):
    """T2: untied row-parallel head, 5 steps x 2 micro-steps of (loss / 2).backward(), SGD."""
    torch.manual_seed(seed)
    proj = nn.Linear(hidden, hidden)
    head = nn.Linear(hidden, V, bias=bias)
    opt = torch.optim.SGD(list(proj.parameters()) + list(head.parameters()), lr=LR)
    rec = defaultdict(list)
    for step in range(5):
        opt.zero_grad()
        for micro in range(2):
            torch.manual_seed(100 + 2 * step + micro)
            x = torch.randn(*shape, hidden, requires_grad=True)
            labels = torch.randint(V, shape)
            h = TANH(proj(x))
            if sharded:
                parts = [F.linear(h[..., s].contiguous(), head.weight[:, s].contiguous()) for s in shards(hidden, TP)]
                logits = parts[0]
                for p in parts[1:]:
                    logits = logits + p
                if bias:
                    logits = logits + head.bias
            else:
                logits = head(h)
            label = f"{step}.{micro}"
            rec[("logits", label)] = logits.detach().flatten().tolist()
            loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
            rec[("loss", label)] = [loss.item()]
            (loss / 2).backward()
            rec[("input_grad", label)] = x.grad.flatten().tolist()
            rec[("projection_grad", label)] = proj.weight.grad.flatten().tolist()
            rec[("head_grad", label)] = head.weight.grad.flatten().tolist()
        opt.step()
        rec[("projection_weight", str(step))] = proj.weight.detach().flatten().tolist()
        rec[("head_weight", str(step))] = head.weight.detach().flatten().tolist()
    return rec


def load_dump(path):
    out = defaultdict(dict)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["role"] != "value":
                continue
            out[(row["computation"], row["check"], row["step"])][int(row["index"])] = float(row["value"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--param", required=True, choices=sorted(PARAMS) + sorted(PARAMS_T2))
    ap.add_argument("--dump", help="CSV written by seedsweep repro --dump")
    ap.add_argument("--emit-fixture", metavar="JSON", help="write torch's logits and final head weight as u32 bits")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch.set_num_threads (default 1, as cpu-fma; 2 for cpu-fma+mkl-threads-2)")
    ap.add_argument("--cr-tanh", action="store_true",
                    help="use a correctly rounded tanh in torch (seedsweep's tanh) instead of MKL's")
    a = ap.parse_args()
    if a.cr_tanh:
        global TANH
        TANH = CrTanh.apply
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    torch.set_num_threads(a.threads)
    if a.param in PARAMS_T2:
        hidden, shape, bias = PARAMS_T2[a.param]
        runner = lambda sharded: run_t2(a.seed, hidden, shape, bias, sharded)  # noqa: E731
        last = "4"
    else:
        hidden, pad, zero = PARAMS[a.param]
        runner = lambda sharded: run(a.seed, hidden, pad, zero, sharded)  # noqa: E731
        last = str(STEPS - 1)
    if a.emit_fixture:
        import json
        import struct

        def bits(vals):
            return [struct.unpack("<I", struct.pack("<f", v))[0] for v in vals]

        out = {"about": f"torch {torch.__version__} CPU ({torch.backends.cpu.get_cpu_capability()}), "
               "scripts/crosscheck_torch.py: T1 reference and simulated row-parallel computations",
               "seed": a.seed, "param": a.param, "computations": {}}
        for comp, sharded in (("reference", False), ("sharded", True)):
            rec = runner(sharded)
            out["computations"][comp] = {f"{c}@{s}": bits(v) for (c, s), v in rec.items()
                                         if c in ("logits", "loss") or (c == "head_weight" and s == last)}
        with open(a.emit_fixture, "w") as f:
            json.dump(out, f, separators=(",", ":"))
        print(f"wrote {a.emit_fixture}")
        return
    if not a.dump:
        ap.error("--dump is required unless --emit-fixture is given")
    dump = load_dump(a.dump)
    print(f"torch {torch.__version__}, seed {a.seed}, param {a.param}")
    for comp, sharded in (("reference", False), ("sharded", True)):
        rec = runner(sharded)
        for (check, step), values in sorted(rec.items()):
            ours = dump.get((comp, check, step))
            if ours is None:
                print(f"  {comp:9} {check:18} step {step}: not in dump")
                continue
            same = sum(1 for i, v in enumerate(values) if ours.get(i) == v)
            worst = max(abs(ours[i] - v) for i, v in enumerate(values))
            print(f"  {comp:9} {check:18} step {step}: {same}/{len(values)} bit-identical, max |diff| {worst:.3e}")
    # The quantity the test asserts: sharded vs reference logits.
    ref = runner(False)
    tp = runner(True)
    for (check, step) in sorted(k for k in ref if k[0] == "logits"):
        r, t = ref[(check, step)], tp[(check, step)]
        usage = max(abs(x - y) / (1e-6 + 1e-5 * abs(y)) for x, y in zip(t, r))
        usage_d = max(abs(x - y) / (1e-5 + 1.3e-6 * abs(y)) for x, y in zip(t, r))
        print(f"  torch logits step {step}: usage old {100*usage:.1f}%, torch-default {100*usage_d:.1f}%")


if __name__ == "__main__":
    main()
