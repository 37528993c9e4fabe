"""The attention example's block (column-parallel q/k/v with whole heads per rank, sdpa, a
row-parallel output projection, SGD) in variants that capture must handle: `math-scale` (the
MATH backend, not causal, an explicit scale: translated, mirror exact), `flash` (torch's default
CPU backend: refused with the line of the call), `mask` (an additive attn_mask under MATH:
refused with its line), `tril-mask` (a boolean lower-triangular attn_mask built as torch builds
the causal one: the same ops, translated as causal, mirror exact), `softmax` (a plain F.softmax over the attention output: translated)."""
import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SEED, DATA_SEED = 99, 3
BATCH, SEQ, HIDDEN, HEADS, TP, STEPS = 2, 5, 12, 6, 2, 2


def shard(t, dim, rank, world):
    size = t.shape[dim] // world
    return t.detach().narrow(dim, rank * size, size).clone().requires_grad_()


def attention(q, k, v, heads, variant):
    b, s, _ = q.shape

    def split(t):
        return t.view(b, s, heads, -1).transpose(1, 2)

    ctx = contextlib.nullcontext() if variant == "flash" else sdpa_kernel(SDPBackend.MATH)
    with ctx:
        if variant == "tril-mask":
            mask = torch.ones(s, s, dtype=torch.bool).tril()
            o = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
        elif variant == "mask":
            mask = torch.full((s, s), -1.0).triu(1)
            o = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
        elif variant == "math-scale":
            o = F.scaled_dot_product_attention(split(q), split(k), split(v), scale=0.3)
        else:
            o = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
    return o.transpose(1, 2).reshape(b, s, -1)


@pytest.mark.parametrize("variant", ["math-scale", "flash", "mask", "tril-mask", "softmax"])
def test_sdpa_variant(variant):
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    wq = nn.Linear(HIDDEN, HIDDEN)
    wk = nn.Linear(HIDDEN, HIDDEN, bias=False)
    wv = nn.Linear(HIDDEN, HIDDEN)
    wo = nn.Linear(HIDDEN, HIDDEN)
    q_w = [shard(wq.weight, 0, r, TP) for r in range(TP)]
    q_b = [shard(wq.bias, 0, r, TP) for r in range(TP)]
    k_w = [shard(wk.weight, 0, r, TP) for r in range(TP)]
    v_w = [shard(wv.weight, 0, r, TP) for r in range(TP)]
    v_b = [shard(wv.bias, 0, r, TP) for r in range(TP)]
    o_w = [shard(wo.weight, 1, r, TP) for r in range(TP)]
    o_b = wo.bias.detach().clone().requires_grad_()
    ref_opt = torch.optim.SGD([*wq.parameters(), *wk.parameters(), *wv.parameters(), *wo.parameters()], lr=0.1)
    tp_opt = torch.optim.SGD([*q_w, *q_b, *k_w, *v_w, *v_b, *o_w, o_b], lr=0.1)
    for step in range(STEPS):
        ref_opt.zero_grad()
        tp_opt.zero_grad()
        torch.manual_seed(DATA_SEED + step)
        x = torch.randn(BATCH, SEQ, HIDDEN)
        target = torch.randn(BATCH, SEQ, HIDDEN)
        ref_out = wo(attention(wq(x), wk(x), wv(x), HEADS, variant))
        if variant == "softmax":
            ref_out = F.softmax(ref_out, dim=-1)
        ref_loss = F.mse_loss(ref_out, target)
        ref_loss.backward()
        partials = []
        for r in range(TP):
            q = torch.matmul(x, q_w[r].t()) + q_b[r]
            k = torch.matmul(x, k_w[r].t())
            v = torch.matmul(x, v_w[r].t()) + v_b[r]
            partials.append(torch.matmul(attention(q, k, v, HEADS // TP, variant), o_w[r].t()))
        tp_out = partials[0] + partials[1] + o_b
        if variant == "softmax":
            tp_out = F.softmax(tp_out, dim=-1)
        tp_loss = F.mse_loss(tp_out, target)
        tp_loss.backward()
        torch.testing.assert_close(tp_out, ref_out)
        torch.testing.assert_close(tp_loss, ref_loss)
        ref_opt.step()
        tp_opt.step()
        torch.testing.assert_close(torch.cat([w.detach() for w in k_w], 0), wk.weight.detach())
