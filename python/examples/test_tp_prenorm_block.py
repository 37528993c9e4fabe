"""A pre-norm residual MLP block (LayerNorm -> column-parallel fc1 -> tanh-approximated gelu ->
row-parallel fc2, plus the block's input) trained with Adam, tensor-parallel over two ranks
emulated in one process and checked against the unsharded block, in plain PyTorch.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED, DATA_SEED = 2024, 31
TOKENS, HIDDEN, FFN, TP, STEPS = 6, 20, 40, 2, 2


def test_tp_prenorm_block_adam():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    ln = nn.LayerNorm(HIDDEN)
    fc1 = nn.Linear(HIDDEN, FFN)
    fc2 = nn.Linear(FFN, HIDDEN)

    half = FFN // TP
    ln_w, ln_b = (p.detach().clone().requires_grad_() for p in (ln.weight, ln.bias))
    w1 = [fc1.weight.detach()[r * half:(r + 1) * half].clone().requires_grad_() for r in range(TP)]
    b1 = [fc1.bias.detach()[r * half:(r + 1) * half].clone().requires_grad_() for r in range(TP)]
    w2 = [fc2.weight.detach()[:, r * half:(r + 1) * half].clone().requires_grad_() for r in range(TP)]
    b2 = fc2.bias.detach().clone().requires_grad_()

    ref_opt = torch.optim.Adam([*ln.parameters(), *fc1.parameters(), *fc2.parameters()], lr=1e-2)
    tp_opt = torch.optim.Adam([ln_w, ln_b, *w1, *b1, *w2, b2], lr=1e-2)

    for step in range(STEPS):
        ref_opt.zero_grad()
        tp_opt.zero_grad()
        torch.manual_seed(DATA_SEED + step)
        x = torch.randn(TOKENS, HIDDEN)
        target = torch.randn(TOKENS, HIDDEN)

        ref_out = fc2(F.gelu(fc1(ln(x)), approximate="tanh")) + x
        ref_loss = F.mse_loss(ref_out, target)
        ref_loss.backward()

        h = F.layer_norm(x, (HIDDEN,), ln_w, ln_b)
        partials = [torch.matmul(F.gelu(torch.matmul(h, w1[r].t()) + b1[r], approximate="tanh"), w2[r].t())
                    for r in range(TP)]
        tp_out = partials[0] + partials[1] + b2 + x
        tp_loss = F.mse_loss(tp_out, target)
        tp_loss.backward()

        torch.testing.assert_close(tp_out, ref_out)
        torch.testing.assert_close(tp_loss, ref_loss)
        torch.testing.assert_close(ln_w.grad, ln.weight.grad)
        ref_opt.step()
        tp_opt.step()
        torch.testing.assert_close(torch.cat([w.detach() for w in w2], 1), fc2.weight.detach())
