"""A SwiGLU MLP (LLaMA-style: `down(silu(gate(x)) * up(x))`, no biases) tensor-parallel over two
ranks emulated in one process and checked against the unsharded MLP, in plain PyTorch in the
style of the public TP tests: gate and up column-parallel (each rank holds the same rows of
both, so `silu(gate_r) * up_r` is the rank's shard of the product), down row-parallel (the
ranks' partial outputs summed, the all-reduce), AdamW over two accumulation micro-steps.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED, DATA_SEED = 777, 50
TOKENS, HIDDEN, FFN, TP = 8, 16, 48, 2
STEPS, MICRO_STEPS = 2, 2


def shard(t, dim, rank, world):
    """Rank `rank`'s contiguous shard of `t` along `dim`, as its own leaf tensor."""
    size = t.shape[dim] // world
    return t.detach().narrow(dim, rank * size, size).clone().requires_grad_()


def test_tp_swiglu_adamw():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    gate = nn.Linear(HIDDEN, FFN, bias=False)
    up = nn.Linear(HIDDEN, FFN, bias=False)
    down = nn.Linear(FFN, HIDDEN, bias=False)

    g_w = [shard(gate.weight, 0, r, TP) for r in range(TP)]
    u_w = [shard(up.weight, 0, r, TP) for r in range(TP)]
    d_w = [shard(down.weight, 1, r, TP) for r in range(TP)]

    ref_opt = torch.optim.AdamW([gate.weight, up.weight, down.weight], lr=1e-3)
    tp_opt = torch.optim.AdamW([*g_w, *u_w, *d_w], lr=1e-3)

    for step in range(STEPS):
        ref_opt.zero_grad()
        tp_opt.zero_grad()
        for micro in range(MICRO_STEPS):
            torch.manual_seed(DATA_SEED + MICRO_STEPS * step + micro)
            x = torch.randn(TOKENS, HIDDEN)
            target = torch.randn(TOKENS, HIDDEN)

            ref_out = down(F.silu(gate(x)) * up(x))
            ref_loss = F.mse_loss(ref_out, target)
            (ref_loss / MICRO_STEPS).backward()

            partials = [torch.matmul(F.silu(torch.matmul(x, g_w[r].t())) * torch.matmul(x, u_w[r].t()),
                                     d_w[r].t()) for r in range(TP)]
            tp_out = partials[0] + partials[1]
            tp_loss = F.mse_loss(tp_out, target)
            (tp_loss / MICRO_STEPS).backward()

            torch.testing.assert_close(tp_out, ref_out)
            torch.testing.assert_close(tp_loss, ref_loss)
            torch.testing.assert_close(torch.cat([w.grad for w in u_w], 0), up.weight.grad)

        ref_opt.step()
        tp_opt.step()
        torch.testing.assert_close(torch.cat([w.detach() for w in g_w], 0), gate.weight.detach())
        torch.testing.assert_close(torch.cat([w.detach() for w in d_w], 1), down.weight.detach())
