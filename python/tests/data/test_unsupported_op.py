"""A tensor-parallel MLP trained with AdamW, checked against the unsharded block.

Written in plain PyTorch in the style of the public TP tests (Megatron-LM's and DeepSpeed's
column-parallel -> gelu -> row-parallel blocks): the ranks are emulated in one process, each
rank's shard of a weight is its own leaf tensor, the row-parallel partial outputs are summed
(the all-reduce) and the bias is added once after it. `seedsweep capture` turns this test
into a scenario file; `pytest --seedsweep=N` sweeps it over N seeds.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234          # the test's own seed: the weights
DATA_SEED = 100      # micro-step m of step s draws its batch after manual_seed(DATA_SEED + 2*s + m)
TOKENS, HIDDEN, FFN, TP = 8, 16, 64, 2
STEPS, MICRO_STEPS = 3, 2


def shard(t, dim, rank, world):
    """Rank `rank`'s contiguous shard of `t` along `dim`, as its own leaf tensor."""
    size = t.shape[dim] // world
    return t.detach().narrow(dim, rank * size, size).clone().requires_grad_()


@pytest.mark.parametrize(
    "atol,rtol",
    [(1e-5, 1.3e-6), (1e-6, 1e-6)],
    ids=["torch-default", "tight"],
)
def test_tp_mlp_adamw(atol, rtol):
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    fc1 = nn.Linear(HIDDEN, FFN)
    fc2 = nn.Linear(FFN, HIDDEN)

    # The TP copy: fc1 column-parallel (rows of the weight, the bias sharded), fc2 row-parallel
    # (columns of the weight; the bias whole, added after the all-reduce).
    w1 = [shard(fc1.weight, 0, r, TP) for r in range(TP)]
    b1 = [shard(fc1.bias, 0, r, TP) for r in range(TP)]
    w2 = [shard(fc2.weight, 1, r, TP) for r in range(TP)]
    b2 = fc2.bias.detach().clone().requires_grad_()

    ref_opt = torch.optim.AdamW([*fc1.parameters(), *fc2.parameters()], lr=1e-3)
    tp_opt = torch.optim.AdamW([*w1, *b1, *w2, b2], lr=1e-3)

    for step in range(STEPS):
        ref_opt.zero_grad()
        tp_opt.zero_grad()
        for micro in range(MICRO_STEPS):
            torch.manual_seed(DATA_SEED + MICRO_STEPS * step + micro)
            x = torch.randn(TOKENS, HIDDEN)
            target = torch.randn(TOKENS, HIDDEN)

            a = fc1(x)
            ref_out = fc2(a * torch.sigmoid(a))
            ref_loss = F.mse_loss(ref_out, target)
            (ref_loss / MICRO_STEPS).backward()

            partials = []
            for r in range(TP):
                a = torch.matmul(x, w1[r].t()) + b1[r]
                h = a * torch.sigmoid(a)  # a hand-written swish: aten.mul, aten.sigmoid
                partials.append(torch.matmul(h, w2[r].t()))
            tp_out = partials[0] + partials[1] + b2
            tp_loss = F.mse_loss(tp_out, target)
            (tp_loss / MICRO_STEPS).backward()

            torch.testing.assert_close(tp_out, ref_out, atol=atol, rtol=rtol)
            torch.testing.assert_close(tp_loss, ref_loss, atol=atol, rtol=rtol)

        ref_opt.step()
        tp_opt.step()
        torch.testing.assert_close(torch.cat([w.detach() for w in w1], 0), fc1.weight.detach(),
                                   atol=atol, rtol=rtol)
        torch.testing.assert_close(torch.cat([w.detach() for w in w2], 1), fc2.weight.detach(),
                                   atol=atol, rtol=rtol)
