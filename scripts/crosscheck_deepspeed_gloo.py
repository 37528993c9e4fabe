#!/usr/bin/env python3
"""Cross-check the built-in `deepspeed-row-parallel` (T2, mission.md) against DeepSpeed's own
row-parallel output head running on two gloo CPU ranks.

Where scripts/crosscheck_torch.py simulates the ranks in one process by slicing, this script
spawns two processes, initialises `deepspeed.comm` with the gloo backend, puts DeepSpeed AutoTP
in training mode and wraps the untied head in DeepSpeed's own
`deepspeed.module_inject.layers.LinearAllreduceWithReplicatedInput` (the row-parallel output
head whose input is replicated: it narrows the activation to the rank's frozen shard, multiplies
by the rank's weight shard, all-reduces the partial logits over gloo, adds the replicated bias
once; in backward it rebuilds the complete input gradient with a second all-reduce). The shard
sizes are DeepSpeed's (`tp_shard.get_shard_size_list`, tp_grain_size 1).

The model and the training loop follow mission.md's T2 definition (DeepSpeed's test file for it
is not in DeepSpeed's published sdist or wheel): torch.manual_seed(seed); projection =
nn.Linear(H, H); head = nn.Linear(H, 67, bias); 5 SGD steps (lr 0.05) of 2 micro-steps, micro-step
m of step s seeded with 100 + 2 s + m, x = randn(*input_shape, H), labels = randint(67,
input_shape), backward of loss / 2. Every rank also runs the unsharded reference. The optimizer is
torch.optim.SGD on each rank (no DeepSpeed engine: with TP 2 and DP 1 the engine reduces nothing
more).

Every rank's tensors (logits, loss, x.grad, projection grads and weights, bias, the rank's
head-weight shard and its gradient, the SGD-update expectation) are compared bit for bit with
`seedsweep repro --dump` of the built-in: the replicated tensors against the dump's `sharded`
computation on every rank, the head shards against their columns of it, and the reference
against the dump's `reference`. It prints per parametrization and check how many elements agree
and exits 1 unless all of them do.

Setup (outside the repository):
    python -m venv /work/venv-ds           # plus a .pth naming torch 2.15.0's site-packages
    DS_BUILD_OPS=0 /work/venv-ds/bin/pip install deepspeed     # 0.19.8 was used
    cargo build --release
    ATEN_CPU_CAPABILITY=avx2 /work/venv-ds/bin/python scripts/crosscheck_deepspeed_gloo.py \
        --bin target/release/seedsweep --first-seed 8173 --seeds 3

torch runs eagerly with one thread per rank (the condition the `cpu-fma` profile models).
"""
import argparse
import copy
import csv
import glob
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

V, LR, TP, STEPS, MICRO = 67, 0.05, 2, 5, 2
# (hidden_dim, input_shape, head attribute, bias), spelled as pytest spells the test's ids
PARAMS = {
    "32-input_shape0-lm_head-False": (32, (4,), "lm_head", False),
    "35-input_shape1-lm_head-True": (35, (2, 3), "lm_head", True),
    "35-input_shape2-embed_out-True": (35, (4,), "embed_out", True),
}


class Net(nn.Module):
    def __init__(self, hidden, head_attr, bias):
        super().__init__()
        self.head_attr = head_attr
        self.projection = nn.Linear(hidden, hidden)
        setattr(self, head_attr, nn.Linear(hidden, V, bias=bias))

    def head(self):
        return getattr(self, self.head_attr)

    def forward(self, x):
        return self.head()(torch.tanh(self.projection(x)))


def train(model, shape, hidden, rec, prefix):
    """The T2 loop; records every checked tensor under (prefix, check, label) (the head's weight
    and its gradient: this rank's shard in the row-parallel model)."""
    head = model.head()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    bias = head.bias is not None
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(MICRO):
            torch.manual_seed(100 + MICRO * step + micro)
            x = torch.randn(*shape, hidden, requires_grad=True)
            labels = torch.randint(V, shape)
            logits = model(x)
            label = f"{step}.{micro}"
            rec[(prefix, "logits", label)] = logits.detach().clone()
            loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
            rec[(prefix, "loss", label)] = loss.detach().clone()
            (loss / MICRO).backward()
            rec[(prefix, "input_grad", label)] = x.grad.clone()
            rec[(prefix, "projection_grad", label)] = model.projection.weight.grad.clone()
            rec[(prefix, "head_grad", label)] = head.weight.grad.clone()
            if bias:
                rec[(prefix, "bias_grad", label)] = head.bias.grad.clone()
        old = model.projection.weight.detach().clone()
        rec[(prefix, "sgd_update", f"{step}.1", "expected-f32")] = old - LR * model.projection.weight.grad
        opt.step()
        rec[(prefix, "sgd_update", f"{step}.1")] = model.projection.weight.detach().clone()
        rec[(prefix, "projection_weight", str(step))] = model.projection.weight.detach().clone()
        rec[(prefix, "head_weight", str(step))] = head.weight.detach().clone()
        if bias:
            rec[(prefix, "bias", str(step))] = head.bias.detach().clone()


def rank_main(rank, seed, param, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(TP),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    import deepspeed
    import deepspeed.comm as dist
    from deepspeed.module_inject.layers import LinearAllreduceWithReplicatedInput, set_autotp_mode
    from deepspeed.module_inject.tp_shard import AutoTPMeta

    # DeepSpeed's CPU accelerator would JIT-compile its shared-memory all-reduce op (used by
    # inference_all_reduce only; the training path calls dist.all_reduce): turned off, so no op is built.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")
    set_autotp_mode(training=True)
    group = dist.new_group(ranks=list(range(TP)))
    hidden, shape, head_attr, bias = PARAMS[param]
    torch.manual_seed(seed)
    ref = Net(hidden, head_attr, bias)
    tp = copy.deepcopy(ref)
    layer = LinearAllreduceWithReplicatedInput(getattr(tp, head_attr), group, tp_meta=AutoTPMeta(tp_grain_size=1))
    setattr(tp, head_attr, layer)
    sizes = list(layer._partition_sizes)
    cols = (sum(sizes[:rank]), sizes[rank])
    rec = {}
    train(ref, shape, hidden, rec, "reference")
    train(tp, shape, hidden, rec, "sharded")
    torch.save({"rec": rec, "cols": cols, "sizes": sizes, "deepspeed": deepspeed.__version__,
                "layer": type(layer).__name__}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def load_dump(path):
    out = defaultdict(dict)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["computation"] == "f64" or row["role"] not in ("value", "expected-f32"):
                continue
            key = (row["computation"], row["check"], row["step"])
            if row["role"] == "expected-f32":
                key += ("expected-f32",)
            out[key][int(row["index"])] = float(row["value"])
    return out


HEAD_SHARDED = ("head_grad", "head_weight")


def compare(ranks, dump, tally, divergent, tag):
    for r, data in enumerate(ranks):
        off, size = data["cols"]
        for key, t in sorted(data["rec"].items()):
            comp, check = key[0], key[1]
            ours = dump.get(key)
            if ours is None:
                tally[check][1] += t.numel()
                divergent.append((tag, r) + key + ("not in dump",))
                continue
            if comp == "sharded" and check in HEAD_SHARDED:
                # the rank's columns [off, off + size) of the V x H tensor, row-major in the dump
                h = sum(d["cols"][1] for d in ranks)
                idx = [row * h + off + c for row in range(t.shape[0]) for c in range(size)]
            else:
                idx = range(t.numel())
            vals = t.flatten().tolist()
            same = sum(1 for i, v in zip(idx, vals) if ours.get(i) == v)
            tally[check][0] += same
            tally[check][1] += len(vals)
            if same != len(vals):
                first = next((i, ours.get(i), v) for i, v in zip(idx, vals) if ours.get(i) != v)
                divergent.append((tag, r) + key + (first,))


def run_ranks(seed, param, port, d):
    mp.spawn(rank_main, args=(seed, param, port, d), nprocs=TP, join=True)
    return [torch.load(f"{d}/rank{r}.pt") for r in range(TP)]


def emit_fixture(a):
    import json
    import struct

    if a.seeds != 1 or "," in a.params:
        raise SystemExit("--emit-fixture takes one seed (--seeds 1) and one param")
    seed, param = a.first_seed, a.params
    with tempfile.TemporaryDirectory() as tmp:
        ranks = run_ranks(seed, param, a.port, tmp)
    last = str(STEPS - 1)

    def bits(t):
        return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.flatten().tolist()]

    comps = {}
    for comp in ("reference", "sharded"):
        out = {}
        for key, t in sorted(ranks[0]["rec"].items()):
            if key[0] != comp or len(key) != 3:
                continue
            check, label = key[1], key[2]
            if check in ("logits", "loss"):
                # every rank holds the all-reduced logits: they must agree before one is kept
                for other in ranks[1:]:
                    assert torch.equal(other["rec"][key], t), f"ranks differ on {key}"
                out[f"{check}@{label}"] = bits(t)
            elif check == "head_weight" and label == last:
                full = t if comp == "reference" else torch.cat([r["rec"][key] for r in ranks], dim=1)
                out[f"{check}@{label}"] = bits(full)
        comps[comp] = out
    doc = {"about": f"DeepSpeed {ranks[0]['deepspeed']} {ranks[0]['layer']} on {TP} gloo CPU ranks, torch "
                    f"{torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), one thread per rank, "
                    "scripts/crosscheck_deepspeed_gloo.py --emit-fixture: rank 0's unsharded reference and its "
                    "row-parallel computation (final head weight: the ranks' shards side by side)",
           "seed": seed, "param": param, "computations": comps}
    with open(a.emit_fixture, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"wrote {a.emit_fixture}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/seedsweep")
    ap.add_argument("--first-seed", type=int, default=8173)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--params", default=",".join(PARAMS))
    ap.add_argument("--profile", default="cpu-fma")
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--emit-fixture", metavar="JSON",
                    help="with one seed and one param: write the ranks' logits and losses of every micro-step and "
                         "the final head weight (the ranks' shards side by side) as f32 bits, the format "
                         "tests/suite/torch_fixtures.rs reads, instead of comparing")
    a = ap.parse_args()
    if a.emit_fixture:
        return emit_fixture(a)
    grand = [0, 0]
    divergent = []
    info = None
    port = a.port
    with tempfile.TemporaryDirectory() as tmp:
        for param in a.params.split(","):
            tally = defaultdict(lambda: [0, 0])
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                d = f"{tmp}/{param}-{seed}"
                os.makedirs(d)
                subprocess.run([a.bin, "repro", "--scenario", "deepspeed-row-parallel", "--seed", str(seed),
                                "--param", param, "--profile", a.profile, "--dump", f"{d}/dump"], check=True,
                               stdout=subprocess.DEVNULL)
                (path,) = glob.glob(f"{d}/dump/*.csv")
                ranks = run_ranks(seed, param, port, d)
                port += 1
                if info is None:
                    info = (ranks[0]["deepspeed"], ranks[0]["layer"])
                compare(ranks, load_dump(path), tally, divergent, (param, seed))
            same = sum(v[0] for v in tally.values())
            total = sum(v[1] for v in tally.values())
            grand[0] += same
            grand[1] += total
            sizes = ranks[0]["sizes"]
            print(f"{param} (head shards {sizes}): {same}/{total} elements bit-identical on {TP} ranks")
            for check, (s_, t_) in sorted(tally.items()):
                print(f"    {check:18} {s_}/{t_}")
    print(f"deepspeed {info[0]} {info[1]} on {TP} gloo ranks, torch {torch.__version__}, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, 1 thread per rank, profile {a.profile}, seeds "
          f"{a.first_seed}..{a.first_seed + a.seeds - 1}: {grand[0]}/{grand[1]} elements bit-identical")
    for row in divergent[:20]:
        print("  differs:", row)
    return 0 if grand[0] == grand[1] else 1


if __name__ == "__main__":
    sys.exit(main())
