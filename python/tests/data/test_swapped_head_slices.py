"""The row-parallel head on a replicated input with a wrong shard offset: rank r multiplies the
activation's columns of the other rank by its own weight columns (a bug the sum can hide).
Capture must refuse it with the line, not write a file."""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, TOKENS, TP = 67, 36, 4, 2


def test_swapped_head_slices():
    torch.set_num_threads(1)
    torch.manual_seed(8173)
    projection = nn.Linear(HIDDEN, HIDDEN)
    lm_head = nn.Linear(HIDDEN, VOCAB)
    n = HIDDEN // TP
    tp_pw, tp_pb = (p.detach().clone().requires_grad_() for p in (projection.weight, projection.bias))
    tp_w = [lm_head.weight.detach()[:, r * n:(r + 1) * n].clone().requires_grad_() for r in range(TP)]
    tp_b = lm_head.bias.detach().clone().requires_grad_()
    ref_opt = torch.optim.SGD([*projection.parameters(), *lm_head.parameters()], lr=0.05)
    tp_opt = torch.optim.SGD([tp_pw, tp_pb, *tp_w, tp_b], lr=0.05)
    ref_opt.zero_grad()
    tp_opt.zero_grad()
    torch.manual_seed(100)
    x = torch.randn(TOKENS, HIDDEN)
    labels = torch.randint(VOCAB, (TOKENS,))
    logits = lm_head(torch.tanh(projection(x)))
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    h = torch.tanh(F.linear(x, tp_pw, tp_pb))
    partials = [torch.matmul(h[..., (1 - r) * n:(2 - r) * n].contiguous(), tp_w[r].t()) for r in range(TP)]
    tp_logits = partials[0] + partials[1] + tp_b
    tp_loss = F.cross_entropy(tp_logits, labels)
    tp_loss.backward()
    torch.testing.assert_close(tp_logits, logits)
    ref_opt.step()
    tp_opt.step()
