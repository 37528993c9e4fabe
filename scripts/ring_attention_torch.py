#!/usr/bin/env python3
"""Ring attention (context parallelism) in real torch 2.15 on the CPU, as the fixture of
src/ops/ring.rs (tests/suite/ring_attention.rs).

What runs is torch's own ring code: `_templated_ring_attention` and
`_templated_ring_attention_backward` from
torch/distributed/tensor/experimental/_context_parallel/_attention.py, on `cp` gloo processes
(one per rank), with `_cp_options.enable_load_balance = False` (for the cases with
`load_balance`: True, in torch's round-robin layout, rank r holding chunks r and 2 cp - 1 - r of
2 cp) and the all-to-all rotater (the
rotation order, `_is_causal_behavior`, `_SDPAMerger`'s sigmoid/logsigmoid merge and the
backward's dq/dk/dv accumulation are torch's, unchanged). torch's ring dispatches only CUDA's
flash, efficient and cuDNN kernels, so the per-block op is emulated, and only it:

  forward  (q, k, v, is_causal) -> (out, lse): out = F.scaled_dot_product_attention under
           SDPBackend.MATH on the block; lse = torch.logsumexp(s, -1) of the math path's scores
           s = (q * sqrt(scale)) @ (k^T * sqrt(scale)) (+ the -inf causal bias above the diagonal)
  backward (grad_out, q, k, v, out, lse, is_causal) -> (dq, dk, dv), flash attention's backward
           from the merged out and lse: p = exp(s - lse) with ATen's vectorized (SLEEF) exp,
           reached through torch._log_softmax_backward_data (whose column j > 0 of a row with
           grad [-1, 0, ...] is exp(y_j) exactly); dv = p^T @ g; dp = g @ v^T;
           D = g_row @ out_row^T (a bmm, its sum from 0 in order); ds = p * (dp - D);
           dq = (ds @ (k * f)) * f; dk = (ds^T @ (q * f)) * f, f = sqrt(scale)

Every block product stays below ATen's naive bmm size (c * c * d < 400), so each is summed from
0 in contraction order. q, k, v are `torch.rand` after `torch.manual_seed(seed)`, each
[batch, seq, heads * head_dim] (seedsweep's layout), viewed [b, s, h, d] and transposed to
[b, h, s, d] for the ring (seq dim 2); rank r holds the contiguous chunk r. The output gradient
is ones (out.sum().backward()).

    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/ring_attention_torch.py \
        --seeds 2 --out tests/data/torch_ring_attention_avx2.json
    ATEN_CPU_CAPABILITY=avx2 /work/venv/bin/python scripts/ring_attention_torch.py \
        --load-balance --seeds 2 --out tests/data/torch_ring_attention_lb_avx2.json

One thread per process, eager, float32. Output: per case the seed, shape, cp, causal and the
ranks' results unsharded: out, lse, dq, dk, dv as base64 little-endian f32.
"""
import argparse
import base64
import json
import math
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.tensor.experimental._context_parallel import _attention as cpa
from torch.nn.attention import SDPBackend, sdpa_kernel


def sleef_exp(x):
    """ATen's vectorized exp of every element of x (SLEEF expf_u10 on AVX2), bit for bit:
    column j > 0 of _log_softmax_backward_data(g, y) with g's row [-1, 0, ..., 0] is
    fma(-exp(y_j), -1, 0) = exp(y_j)."""
    flat = x.reshape(-1)
    n = flat.numel()
    cols = 15
    rows = (n + cols - 1) // cols
    y = torch.zeros(rows, cols + 1, dtype=torch.float32)
    y.view(-1)  # contiguous
    pad = torch.zeros(rows * cols, dtype=torch.float32)
    pad[:n] = flat
    y[:, 1:] = pad.view(rows, cols)
    g = torch.zeros(rows, cols + 1, dtype=torch.float32)
    g[:, 0] = -1.0
    r = torch._log_softmax_backward_data(g, y, 1, torch.float32)
    return r[:, 1:].reshape(-1)[:n].reshape(x.shape)


def causal_bias(c):
    keep = torch.ones(c, c, dtype=torch.bool).tril()
    return torch.zeros(c, c, dtype=torch.float32).masked_fill(~keep, float("-inf"))


def scores(q, k, is_causal, scale):
    f = math.sqrt(scale)
    s = torch.matmul(q * f, k.transpose(-2, -1) * f)
    if is_causal:
        s = s + causal_bias(q.shape[-2])
    return s


def block_forward(q, k, v, is_causal=False, scale=None, **_):
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(is_causal), scale=scale)
    lse = torch.logsumexp(scores(q, k, is_causal, scale), dim=-1)
    return out, lse


def block_backward(query, key, value, out, logsumexp, is_causal=False, scale=None, grad_out=None, **_):
    f = math.sqrt(scale)
    s = scores(query, key, is_causal, scale)
    p = sleef_exp(s - logsumexp.unsqueeze(-1))
    g = grad_out
    dv = torch.matmul(p.transpose(-2, -1), g)
    dp = torch.matmul(g, value.transpose(-2, -1))
    d = torch.matmul(g.unsqueeze(-2), out.unsqueeze(-1)).squeeze(-1)
    ds = p * (dp - d)
    dq = torch.matmul(ds, key * f) * f
    dk = torch.matmul(ds.transpose(-2, -1), query * f) * f
    return dq, dk, dv


def draw(seed, b, s, h, d):
    torch.manual_seed(seed)
    return [torch.rand(b, s, h * d) for _ in range(3)]


def to_bhsd(x, h):
    b, s, w = x.shape
    return x.view(b, s, h, w // h).transpose(1, 2)


def worker(rank, cp, case, tmp):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=rank, world_size=cp)
    lb = case.get("load_balance", False)
    cpa._cp_options.enable_load_balance = lb
    cpa._cp_options.rotate_method = cpa._RotateMethod.ALL_TO_ALL
    b, s, h, d = case["batch"], case["seq"], case["heads"], case["head_dim"]
    q, k, v = draw(case["seed"], b, s, h, d)
    scale = 1.0 / math.sqrt(d)
    if lb:
        # torch's round-robin layout: rank r holds chunks r and 2 cp - 1 - r of 2 cp
        def local(t):
            ch = to_bhsd(t, h).chunk(2 * cp, dim=2)
            return torch.cat([ch[rank], ch[2 * cp - 1 - rank]], dim=2)
        ql, kl, vl = [local(t) for t in (q, k, v)]
    else:
        c = s // cp
        ql, kl, vl = [to_bhsd(t, h)[:, :, rank * c:(rank + 1) * c, :] for t in (q, k, v)]
    group = dist.group.WORLD
    out, lse = cpa._templated_ring_attention(
        group, 2, block_forward, ql, kl, vl, is_causal=case["causal"], scale=scale
    )
    g = torch.ones_like(out)
    dq, dk, dv = cpa._templated_ring_attention_backward(
        group, 2, block_backward, g, "grad_out", ql, kl, vl, out, lse, case["causal"], scale=scale
    )[:3]
    torch.save({"out": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv}, f"{tmp}/r{rank}.pt")
    dist.destroy_process_group()


def b64(t):
    return base64.b64encode(t.contiguous().numpy().astype("<f4").tobytes()).decode()


def spawn_and_load(case, tmp):
    cp = case["cp"]
    try:
        mp.spawn(worker, args=(cp, case, tmp), nprocs=cp, join=True)
    except mp.ProcessExitedException:
        # gloo sometimes aborts while a process tears down; the results are kept if every
        # rank wrote its own before
        pass
    return [torch.load(f"{tmp}/r{r}.pt") for r in range(cp)]


def run_case(case):
    cp = case["cp"]
    for attempt in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                parts = spawn_and_load(case, tmp)
                break
            except (FileNotFoundError, RuntimeError, EOFError):
                if attempt == 2:
                    raise
    def unshard(ts):
        if not case.get("load_balance", False):
            return torch.cat(ts, dim=2)
        chunks = [None] * (2 * cp)
        for r, t in enumerate(ts):
            a, z = t.chunk(2, dim=2)
            chunks[r], chunks[2 * cp - 1 - r] = a, z
        return torch.cat(chunks, dim=2)

    res = {}
    for name in ("out", "dq", "dk", "dv"):
        # [b, h, c, d] per rank -> [b, h, s, d] -> seedsweep's [b, s, h*d]
        full = unshard([p[name] for p in parts])
        res[name] = b64(full.transpose(1, 2).reshape(case["batch"], case["seq"], -1))
    res["lse"] = b64(unshard([p["lse"] for p in parts]))  # [b, h, s]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, default=1, help="seeds per (cp, causal) from 10")
    ap.add_argument("--load-balance", action="store_true",
                    help="only the load-balanced causal cases (tests/data/torch_ring_attention_lb_avx2.json)")
    a = ap.parse_args()
    assert os.environ.get("ATEN_CPU_CAPABILITY") == "avx2", "run with ATEN_CPU_CAPABILITY=avx2"
    cases = []
    if a.load_balance:
        for seed in range(10, 10 + a.seeds):
            for cp in (2, 4, 8):
                cases.append(dict(seed=seed, batch=1, seq=4 * cp, heads=2, head_dim=16, cp=cp,
                                  causal=True, load_balance=True))
        cases.append(dict(seed=77, batch=2, seq=12, heads=2, head_dim=8, cp=3, causal=True,
                          load_balance=True))
    else:
        cases = base_cases(a.seeds)
    run_all(a, cases)


def base_cases(seeds):
    cases = []
    # The built-in's shapes (configs/pytorch_ring_attention_sdpa_test.toml): batch 1, 2 heads of
    # 16, 4 tokens per rank; and 2 batches of 2 heads of 8 with 3 tokens per rank.
    for seed in range(10, 10 + seeds):
        for cp in (2, 4, 8):
            for causal in (False, True):
                cases.append(dict(seed=seed, batch=1, seq=4 * cp, heads=2, head_dim=16, cp=cp, causal=causal))
    for cp in (2, 3):
        for causal in (False, True):
            cases.append(dict(seed=77, batch=2, seq=3 * cp, heads=2, head_dim=8, cp=cp, causal=causal))
    return cases


def run_all(a, cases):
    for case in cases:
        case.update(run_case(case))
        print(f"seed {case['seed']} cp {case['cp']} causal {case['causal']} seq {case['seq']}: done", flush=True)
    meta = dict(
        torch=torch.__version__,
        aten_cpu_capability=os.environ.get("ATEN_CPU_CAPABILITY"),
        threads=1,
        note="torch's _templated_ring_attention(_backward), load balance as each case says, all-to-all rotater, gloo; "
        "block op emulated (math-path sdpa + torch.logsumexp forward; flash-style backward with SLEEF exp)",
    )
    with open(a.out, "w") as fh:
        json.dump(dict(meta=meta, cases=cases), fh)
        fh.write("\n")


if __name__ == "__main__":
    main()
