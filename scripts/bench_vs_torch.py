#!/usr/bin/env python3
"""seedsweep's throughput beside a plain PyTorch loop doing the same seed-runs, in one run.

A T1 seed-run (DeepSpeed's TestTiedRowParallelOutputHeadTraining, one parametrization, one
seed; see ../shared/docs/mission.md) is three computations of three training steps each:
  1. the float64 ground truth (unsharded),
  2. the unsharded fp32 reference,
  3. the fp32 sharded computation: the tied head row-parallel over TP = 2 ranks, the two
     partial logits summed (the all-reduce), the tied gradient summed from its two parts.
The PyTorch loop below does exactly that with ordinary eager torch and autograd, the way an
engineer would write the loop by hand: torch.manual_seed(seed), nn.Embedding / nn.Linear in
the test's construction order, the test's input draws, mean cross-entropy, SGD lr 0.05. It
records the same tensors the checks compare (logits, tied gradient, weights after each step)
so that it does the work the comparison needs, and compares them with torch.testing's
default tolerance, as the test does.

Both sides run on one thread (torch.set_num_threads(1); seedsweep's `bench` one-thread
figure), over T1's four parametrizations, and the script prints seed-runs/s for each and the
ratio. `bench` runs the seed-runs as a sweep does: 35-3-True-0 resolves to the same
computation as 35-3-False-0 (its `embedding_spec` changes nothing numerically), so seedsweep
computes three of the four parametrizations per seed and reports the fourth from the same
run and evaluation (as a sweep does), while the torch loop computes all four. The script prints the ratio of seed-runs and,
beside it, the ratio of computations (seedsweep's rate times 3/4), which leaves that sharing
out. Usage:

    /path/to/venv/bin/python scripts/bench_vs_torch.py [--seeds 200] [--bench-seeds 2000]
        [--binary target/release/seedsweep] [--repeats 3]

The binary is built with `cargo build --release` when absent. The machine should be quiet:
both figures are wall-clock throughput.
"""

import argparse
import os
import re
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 67
BATCH, SEQ = 2, 5
STEPS = 3
LR = 0.05
TP = 2
PARAMS = [  # (id, hidden, padding_idx)
    ("32-None-False-0", 32, None),
    ("35-3-False-0", 35, 3),
    ("35-3-True-0", 35, 3),
    ("32-3-False-2", 32, 3),
]


def build(seed, hidden, padding_idx, dtype):
    """The test's model, built in its construction order; the head's draws are consumed and
    the head is tied to the embedding."""
    torch.manual_seed(seed)
    emb = nn.Embedding(VOCAB, hidden, padding_idx=padding_idx)
    proj = nn.Linear(hidden, hidden)
    nn.Linear(hidden, VOCAB, bias=False)  # draws consumed, weight replaced by the tie
    w = emb.weight.detach().to(dtype).clone().requires_grad_(True)
    p = proj.weight.detach().to(dtype).clone().requires_grad_(True)
    b = proj.bias.detach().to(dtype).clone().requires_grad_(True)
    return w, p, b


def inputs(step, padding_idx):
    torch.manual_seed(100 + step)
    ids = torch.randint(VOCAB, (BATCH, SEQ))
    if padding_idx is not None:
        ids[0, 0] = padding_idx
    labels = torch.randint(VOCAB, (BATCH, SEQ))
    return ids, labels


def train(seed, hidden, padding_idx, dtype, shards):
    """Three steps; returns the recorded (logits, tied grad, weights) per step."""
    w, p, b = build(seed, hidden, padding_idx, dtype)
    cuts = []
    start = 0
    for r in range(shards):
        size = (hidden + shards - 1 - r) // shards  # ceil for the first ranks: 35 -> 18, 17
        cuts.append((start, start + size))
        start += size
    recorded = []
    for s in range(STEPS):
        ids, labels = inputs(s, padding_idx)
        x = F.embedding(ids, w, padding_idx=padding_idx)
        h = torch.tanh(F.linear(x, p, b))
        if shards == 1:
            logits = F.linear(h, w)
        else:
            partials = [F.linear(h[..., a:z], w[:, a:z]) for a, z in cuts]
            logits = partials[0]
            for part in partials[1:]:
                logits = logits + part
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        w.grad = p.grad = b.grad = None
        loss.backward()
        with torch.no_grad():
            grad = w.grad.clone()
            for t in (w, p, b):
                t -= LR * t.grad
        recorded.append((logits.detach(), grad, w.detach().clone(), p.detach().clone()))
    return recorded


def torch_seed_run(seed, hidden, padding_idx):
    truth = train(seed, hidden, padding_idx, torch.float64, 1)
    ref = train(seed, hidden, padding_idx, torch.float32, 1)
    sharded = train(seed, hidden, padding_idx, torch.float32, TP)
    failures = 0
    for (a, b, c) in zip(truth, ref, sharded):
        for t64, t_ref, t_sh in zip(a, b, c):
            if not torch.allclose(t_sh, t_ref, rtol=1.3e-6, atol=1e-5):
                failures += 1
            # the worst usage against the float64 truth, as the sweep reports it
            _ = ((t_sh.double() - t64).abs() / (1e-5 + 1.3e-6 * t64.abs())).max()
    return failures


def torch_throughput(seeds, first_seed):
    torch.set_num_threads(1)
    torch_seed_run(first_seed, 35, 3)  # warm-up: allocator, dispatcher
    start = time.perf_counter()
    runs = 0
    for _, hidden, padding_idx in PARAMS:
        for seed in range(first_seed, first_seed + seeds):
            torch_seed_run(seed, hidden, padding_idx)
            runs += 1
    return runs / (time.perf_counter() - start), runs


def seedsweep_throughput(binary, seeds):
    """(seed-runs/s on 1 thread, distinct computations per seed, groups, bench output)."""
    out = subprocess.run(
        [binary, "bench", "--scenario", "deepspeed-tied-row-parallel", "--seeds", str(seeds)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    line = next(l for l in out.splitlines() if l.strip().startswith("fast kernels, 1 thread"))
    rate = float(re.search(r"(\d+(?:\.\d+)?) seed-runs/s", line).group(1))
    row = next(l for l in out.splitlines() if l.startswith("deepspeed-tied-row-parallel")).split()
    return rate, int(row[2]), int(row[1]), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=200, help="seeds per parametrization, torch loop")
    ap.add_argument("--bench-seeds", type=int, default=2000, help="seeds for `seedsweep bench`")
    ap.add_argument("--binary", default="target/release/seedsweep")
    ap.add_argument("--repeats", type=int, default=3, help="alternating repeats; best of each")
    ap.add_argument("--first-seed", type=int, default=8173)
    args = ap.parse_args()
    if not os.path.exists(args.binary):
        subprocess.run(["cargo", "build", "--release"], check=True)
    best_torch = best_ss = 0.0
    for i in range(args.repeats):
        t, runs = torch_throughput(args.seeds, args.first_seed)
        s, computed, groups, out = seedsweep_throughput(args.binary, args.bench_seeds)
        print(f"repeat {i + 1}: torch loop {t:8.1f} seed-runs/s ({runs} runs), "
              f"seedsweep {s:8.1f} seed-runs/s (1 thread)", flush=True)
        best_torch, best_ss = max(best_torch, t), max(best_ss, s)
    print()
    print(f"torch {torch.__version__}, 1 thread, plain eager loop: {best_torch:.1f} seed-runs/s")
    print(f"seedsweep bench, 1 thread:                     {best_ss:.1f} seed-runs/s")
    print(f"ratio: {best_ss / best_torch:.1f}x (best of {args.repeats} alternating repeats)")
    per = best_ss * computed / groups
    print(f"per computation: {per:.1f} computations/s, {per / best_torch:.1f}x "
          f"(seedsweep computes {computed} of the {groups} parametrizations per seed; "
          f"the torch loop computes all {groups})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
