"""An untied output head made row-parallel on a replicated activation, the way DeepSpeed's
AutoTP `LinearAllreduceWithReplicatedInput` computes it, with the two ranks emulated in one
process: each rank narrows the full activation to its hidden slice (DeepSpeed's near-even shard
sizes, 18 + 17 for 35), multiplies by its column shard of the head weight, the partial logits are
summed (the all-reduce) and the replicated bias is added once after it. The model and loop are
those of the built-in `deepspeed-row-parallel`'s `35-input_shape2-embed_out-True` (DeepSpeed's
row-parallel output-head training test as mission.md describes it): projection -> tanh -> head,
5 optimizer steps of 2 accumulation micro-steps, SGD. `scripts/crosscheck_deepspeed_gloo.py`
checks that DeepSpeed's layer on two gloo ranks computes the built-in's bits, and
tests/suite/capture_equiv.rs that this test's capture computes them too.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED, DATA_SEED = 8173, 100
VOCAB, HIDDEN, TOKENS, TP = 67, 35, 4, 2
STEPS, MICRO_STEPS, LR = 5, 2, 0.05


def shard_sizes(total, world):
    """DeepSpeed's near-even rule (grain 1): the first total % world ranks get one more."""
    return [total // world + (1 if r < total % world else 0) for r in range(world)]


def test_row_parallel_head_sgd():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    projection = nn.Linear(HIDDEN, HIDDEN)
    lm_head = nn.Linear(HIDDEN, VOCAB)

    sizes = shard_sizes(HIDDEN, TP)
    offsets = [sum(sizes[:r]) for r in range(TP)]
    tp_pw, tp_pb = (p.detach().clone().requires_grad_() for p in (projection.weight, projection.bias))
    tp_w = [lm_head.weight.detach()[:, o:o + n].clone().requires_grad_() for o, n in zip(offsets, sizes)]
    tp_b = lm_head.bias.detach().clone().requires_grad_()

    ref_opt = torch.optim.SGD([*projection.parameters(), *lm_head.parameters()], lr=LR)
    tp_opt = torch.optim.SGD([tp_pw, tp_pb, *tp_w, tp_b], lr=LR)

    for step in range(STEPS):
        ref_opt.zero_grad()
        tp_opt.zero_grad()
        for micro in range(MICRO_STEPS):
            torch.manual_seed(DATA_SEED + MICRO_STEPS * step + micro)
            x = torch.randn(TOKENS, HIDDEN)
            labels = torch.randint(VOCAB, (TOKENS,))

            logits = lm_head(torch.tanh(projection(x)))
            loss = F.cross_entropy(logits, labels)
            (loss / MICRO_STEPS).backward()

            h = torch.tanh(F.linear(x, tp_pw, tp_pb))
            partials = [torch.matmul(h[..., o:o + n].contiguous(), w.t()) for o, n, w in zip(offsets, sizes, tp_w)]
            tp_logits = partials[0] + partials[1] + tp_b
            tp_loss = F.cross_entropy(tp_logits, labels)
            (tp_loss / MICRO_STEPS).backward()

            torch.testing.assert_close(tp_logits, logits, atol=1e-5, rtol=1.3e-6)
            torch.testing.assert_close(tp_loss, loss, atol=1e-5, rtol=1.3e-6)
            torch.testing.assert_close(tp_pw.grad, projection.weight.grad, atol=1e-5, rtol=1.3e-6)

        ref_opt.step()
        tp_opt.step()
        torch.testing.assert_close(torch.cat([w.detach() for w in tp_w], 1), lm_head.weight.detach(),
                                   atol=1e-5, rtol=1.3e-6)
        torch.testing.assert_close(tp_pw.detach(), projection.weight.detach(), atol=1e-5, rtol=1.3e-6)
