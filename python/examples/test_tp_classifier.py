"""A token classifier with a tensor-parallel MLP head, trained with SGD and momentum.

Plain PyTorch in the style of the public TP tests: an embedding and a LayerNorm replicated on
every rank (one copy of each), then a column-parallel linear without bias -> relu -> a
row-parallel linear whose partial outputs are summed (the all-reduce) before its bias, and a
cross-entropy loss; the copy's parameters and loss are compared with the unsharded model's.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
DATA_SEED = 500
VOCAB, HIDDEN, FFN, CLASSES, TOKENS, TP = 50, 24, 48, 10, 12, 2
STEPS = 2


def rows(t, rank, world):
    n = t.shape[0] // world
    return t.detach()[rank * n:(rank + 1) * n].clone().requires_grad_()


def cols(t, rank, world):
    n = t.shape[1] // world
    return t.detach()[:, rank * n:(rank + 1) * n].clone().requires_grad_()


def replica(t):
    return t.detach().clone().requires_grad_()


@pytest.mark.parametrize("rtol,atol", [(1e-5, 1e-5)], ids=["default"])
def test_tp_classifier_sgd(rtol, atol):
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    embed = nn.Embedding(VOCAB, HIDDEN)
    norm = nn.LayerNorm(HIDDEN)
    up = nn.Linear(HIDDEN, FFN, bias=False)
    down = nn.Linear(FFN, CLASSES)

    tp_embed, tp_norm_w, tp_norm_b = replica(embed.weight), replica(norm.weight), replica(norm.bias)
    tp_up = [rows(up.weight, r, TP) for r in range(TP)]
    tp_down = [cols(down.weight, r, TP) for r in range(TP)]
    tp_down_b = replica(down.bias)

    ref_params = [*embed.parameters(), *norm.parameters(), *up.parameters(), *down.parameters()]
    ref_opt = torch.optim.SGD(ref_params, lr=0.1, momentum=0.9)
    tp_opt = torch.optim.SGD([tp_embed, tp_norm_w, tp_norm_b, *tp_up, *tp_down, tp_down_b], lr=0.1, momentum=0.9)

    for step in range(STEPS):
        ref_opt.zero_grad()
        tp_opt.zero_grad()
        torch.manual_seed(DATA_SEED + step)
        ids = torch.randint(VOCAB, (TOKENS,))
        labels = torch.randint(CLASSES, (TOKENS,))

        logits = down(F.relu(up(norm(embed(ids)))))
        loss = F.cross_entropy(logits, labels)
        loss.backward()

        h = F.layer_norm(F.embedding(ids, tp_embed), (HIDDEN,), tp_norm_w, tp_norm_b)
        partials = [torch.matmul(F.relu(torch.matmul(h, tp_up[r].t())), tp_down[r].t()) for r in range(TP)]
        tp_logits = partials[0] + partials[1] + tp_down_b
        tp_loss = F.cross_entropy(tp_logits, labels)
        tp_loss.backward()

        torch.testing.assert_close(tp_logits, logits, rtol=rtol, atol=atol)
        torch.testing.assert_close(tp_loss, loss, rtol=rtol, atol=atol)
        torch.testing.assert_close(tp_embed.grad, embed.weight.grad, rtol=rtol, atol=atol)

        ref_opt.step()
        tp_opt.step()
        torch.testing.assert_close(torch.cat([w.detach() for w in tp_up], 0), up.weight.detach(),
                                   rtol=rtol, atol=atol)
        torch.testing.assert_close(tp_embed.detach(), embed.weight.detach(), rtol=rtol, atol=atol)
