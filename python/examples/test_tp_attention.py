"""A causal self-attention block, tensor-parallel over two ranks emulated in one process and
checked against the unsharded block, in plain PyTorch in the style of Megatron-LM's attention
tests: q, k and v projections column-parallel with whole heads per rank (4 heads, 2 per rank),
`F.scaled_dot_product_attention` per rank on its own heads, an output projection row-parallel
(the ranks' partial outputs summed, the all-reduce, and its bias added once after), AdamW.

The attention runs under `sdpa_kernel(SDPBackend.MATH)`: torch's default CPU backend is the
flash kernel, which seedsweep does not model (capture refuses it and says so).

The key projection has no bias. Softmax is shift-invariant per row, so a key bias adds the same
q·b_k to every score of a row and its gradient is zero in exact arithmetic: what torch computes
for it is rounding noise of the key gradient's column sums, and AdamW scales that noise up to
the learning rate. The sharded computation's noise is not torch's (seedsweep lists it among the
gaps of `check`), so a key bias would be checked on noise; Megatron-style models often omit it.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SEED, DATA_SEED = 4321, 7
BATCH, SEQ, HIDDEN, HEADS, TP, STEPS = 2, 6, 16, 4, 2, 3


def shard(t, dim, rank, world):
    """Rank `rank`'s contiguous shard of `t` along `dim`, as its own leaf tensor."""
    size = t.shape[dim] // world
    return t.detach().narrow(dim, rank * size, size).clone().requires_grad_()


def attention(q, k, v, heads):
    """[batch, seq, heads*head_dim] q, k, v -> causal attention per head -> the same layout."""
    b, s, _ = q.shape

    def split(t):
        return t.view(b, s, heads, -1).transpose(1, 2)

    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
    return o.transpose(1, 2).reshape(b, s, -1)


def test_tp_attention_adamw():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    wq = nn.Linear(HIDDEN, HIDDEN)
    wk = nn.Linear(HIDDEN, HIDDEN, bias=False)
    wv = nn.Linear(HIDDEN, HIDDEN)
    wo = nn.Linear(HIDDEN, HIDDEN)

    # The TP copy: q/k/v column-parallel (rows of the weights: whole heads per rank, biases
    # sharded), the output projection row-parallel (columns of its weight; its bias whole).
    q_w = [shard(wq.weight, 0, r, TP) for r in range(TP)]
    q_b = [shard(wq.bias, 0, r, TP) for r in range(TP)]
    k_w = [shard(wk.weight, 0, r, TP) for r in range(TP)]
    v_w = [shard(wv.weight, 0, r, TP) for r in range(TP)]
    v_b = [shard(wv.bias, 0, r, TP) for r in range(TP)]
    o_w = [shard(wo.weight, 1, r, TP) for r in range(TP)]
    o_b = wo.bias.detach().clone().requires_grad_()

    ref_opt = torch.optim.AdamW([*wq.parameters(), *wk.parameters(), *wv.parameters(), *wo.parameters()], lr=1e-3)
    tp_opt = torch.optim.AdamW([*q_w, *q_b, *k_w, *v_w, *v_b, *o_w, o_b], lr=1e-3)

    for step in range(STEPS):
        ref_opt.zero_grad()
        tp_opt.zero_grad()
        torch.manual_seed(DATA_SEED + step)
        x = torch.randn(BATCH, SEQ, HIDDEN)
        target = torch.randn(BATCH, SEQ, HIDDEN)

        ref_out = wo(attention(wq(x), wk(x), wv(x), HEADS))
        ref_loss = F.mse_loss(ref_out, target)
        ref_loss.backward()

        partials = []
        for r in range(TP):
            q = torch.matmul(x, q_w[r].t()) + q_b[r]
            k = torch.matmul(x, k_w[r].t())
            v = torch.matmul(x, v_w[r].t()) + v_b[r]
            partials.append(torch.matmul(attention(q, k, v, HEADS // TP), o_w[r].t()))
        tp_out = partials[0] + partials[1] + o_b
        tp_loss = F.mse_loss(tp_out, target)
        tp_loss.backward()

        torch.testing.assert_close(tp_out, ref_out)
        torch.testing.assert_close(tp_loss, ref_loss)
        torch.testing.assert_close(torch.cat([w.grad for w in q_w], 0), wq.weight.grad)
        torch.testing.assert_close(torch.cat([w.grad for w in k_w], 0), wk.weight.grad)
        ref_opt.step()
        tp_opt.step()
        torch.testing.assert_close(torch.cat([w.detach() for w in o_w], 1), wo.weight.detach())
        torch.testing.assert_close(torch.cat([w.detach() for w in v_w], 0), wv.weight.detach())
