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

`--all` loops over every parametrization of both tests and seeds 8173..8212 (`--first-seed`,
`--seeds`), runs `seedsweep repro --dump` for each itself, and prints the agreement per
parametrization and check; it exits 1 unless every element of every tensor agrees:

    cargo build --release
    ATEN_CPU_CAPABILITY=avx2 python3 scripts/crosscheck_torch.py --all               # cpu-fma
    python3 scripts/crosscheck_torch.py --all --profile cpu-fma-avx512              # AVX512 CPU

torch runs with one thread (`--threads 1`, the condition `cpu-fma` models), eagerly.

With `--threads 2` (here and with `--all`), compare a dump of `--profile cpu-fma+mkl-threads-2` (MKL's two-thread
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
            if bias:
                rec[("bias_grad", label)] = head.bias.grad.flatten().tolist()
        old = proj.weight.detach().clone()
        # The test's expectation of the update, `old - lr * grad` (product and difference
        # each rounded in f32), which seedsweep records as sgd_update's expected-f32 role.
        rec[("sgd_update", f"{step}.1", "expected-f32")] = (old - LR * proj.weight.grad).flatten().tolist()
        opt.step()
        rec[("sgd_update", f"{step}.1")] = proj.weight.detach().flatten().tolist()
        rec[("projection_weight", str(step))] = proj.weight.detach().flatten().tolist()
        rec[("head_weight", str(step))] = head.weight.detach().flatten().tolist()
        if bias:
            rec[("bias", str(step))] = head.bias.detach().flatten().tolist()
    return rec


ROLES = {"value": None, "expected-f32": "expected-f32"}


def load_dump(path):
    """{(computation, check, step[, role]): {index: value}} of the f32 computations' values
    (role `value`) and the test-written expectations (role `expected-f32`)."""
    out = defaultdict(dict)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["role"] not in ROLES or row["computation"] == "f64":
                continue
            key = (row["computation"], row["check"], row["step"])
            if ROLES[row["role"]]:
                key += (ROLES[row["role"]],)
            out[key][int(row["index"])] = float(row["value"])
    return out


def compare(rec, dump, comp):
    """[(check, step-key, same, total, first differing (index, ours, torch) or None)] for every
    tensor torch recorded; a tensor missing from the dump counts as all different."""
    rows = []
    for key, values in sorted(rec.items()):
        check, step = key[0], key[1]
        ours = dump.get((comp,) + key)
        if ours is None:
            rows.append((check, ".".join(key[1:]), 0, len(values), "not in dump"))
            continue
        same, first = 0, None
        for i, v in enumerate(values):
            if ours.get(i) == v:
                same += 1
            elif first is None:
                first = (i, ours.get(i), v)
        rows.append((check, ".".join(key[1:]), same, len(values), first))
    return rows


def all_seeds(a):
    """Every parametrization of T1 and T2 x every seed: `seedsweep repro --dump` vs torch."""
    import glob
    import subprocess
    import tempfile

    seeds = range(a.first_seed, a.first_seed + a.seeds)
    params = a.params.split(",") if a.params else sorted(PARAMS) + sorted(PARAMS_T2)
    cap = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__}, CPU capability {cap}, {torch.get_num_threads()} thread(s), "
          f"profile {a.profile}, seeds {seeds.start}..{seeds.stop - 1}, eager")
    grand_same = grand_total = 0
    divergent = []
    with tempfile.TemporaryDirectory() as tmp:
        for param in params:
            per_check = defaultdict(lambda: [0, 0])
            tensors = tensors_same = 0
            for seed in seeds:
                d = f"{tmp}/{param}-{seed}"
                subprocess.run([a.bin, "repro", "--seed", str(seed), "--param", param, "--profile", a.profile,
                                "--dump", d], check=True, stdout=subprocess.DEVNULL)
                (path,) = glob.glob(f"{d}/*.csv")
                dump = load_dump(path)
                runner = make_runner(seed, param)
                for comp, sharded in (("reference", False), ("sharded", True)):
                    for check, step, same, total, first in compare(runner(sharded), dump, comp):
                        per_check[check][0] += same
                        per_check[check][1] += total
                        tensors += 1
                        tensors_same += same == total
                        if same != total:
                            divergent.append((param, seed, comp, check, step, total - same, first))
            same = sum(v[0] for v in per_check.values())
            total = sum(v[1] for v in per_check.values())
            grand_same += same
            grand_total += total
            print(f"{param}: {same}/{total} elements bit-identical ({100 * same / total:.4f} %), "
                  f"{tensors_same}/{tensors} tensors")
            for check, (s_, t_) in sorted(per_check.items()):
                print(f"    {check:18} {s_}/{t_} ({100 * s_ / t_:.4f} %)")
    print(f"ALL: {grand_same}/{grand_total} elements bit-identical ({100 * grand_same / grand_total:.4f} %), "
          f"{len(divergent)} tensors with a difference")
    for row in divergent[:a.show]:
        print("  differs:", row)
    return 0 if grand_same == grand_total else 1


def make_runner(seed, param):
    if param in PARAMS_T2:
        hidden, shape, bias = PARAMS_T2[param]
        return lambda sharded: run_t2(seed, hidden, shape, bias, sharded)  # noqa: E731
    hidden, pad, zero = PARAMS[param]
    return lambda sharded: run(seed, hidden, pad, zero, sharded)  # noqa: E731


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--param", choices=sorted(PARAMS) + sorted(PARAMS_T2))
    ap.add_argument("--all", action="store_true",
                    help="every parametrization of T1 and T2 x seeds --first-seed.. (runs `--bin repro --dump` itself)")
    ap.add_argument("--first-seed", type=int, default=8173)
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--params", help="with --all: comma-separated parametrizations (default: all)")
    ap.add_argument("--profile", default="cpu-fma", help="with --all: the seedsweep profile")
    ap.add_argument("--bin", default="target/release/seedsweep", help="with --all: the seedsweep binary")
    ap.add_argument("--show", type=int, default=20, help="with --all: how many differing tensors to list")
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
    if a.all:
        raise SystemExit(all_seeds(a))
    if a.seed is None or a.param is None:
        ap.error("--seed and --param are required unless --all is given")
    runner = make_runner(a.seed, a.param)
    last = "4" if a.param in PARAMS_T2 else str(STEPS - 1)
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
            out["computations"][comp] = {f"{k[0]}@{k[1]}": bits(v) for k, v in rec.items()
                                         if len(k) == 2 and (k[0] in ("logits", "loss")
                                                             or (k[0] == "head_weight" and k[1] == last))}
        with open(a.emit_fixture, "w") as f:
            json.dump(out, f, separators=(",", ":"))
        print(f"wrote {a.emit_fixture}")
        return
    if not a.dump:
        ap.error("--dump is required unless --emit-fixture is given")
    dump = load_dump(a.dump)
    print(f"torch {torch.__version__}, seed {a.seed}, param {a.param}")
    for comp, sharded in (("reference", False), ("sharded", True)):
        for check, step, same, total, first in compare(runner(sharded), dump, comp):
            note = "" if first is None else f", first difference {first}"
            print(f"  {comp:9} {check:18} step {step}: {same}/{total} bit-identical{note}")
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
