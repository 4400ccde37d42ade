"""Right weights, wrong at N = 0: with no label anywhere it back-propagates a zero loss and
steps AdamW anyway. The step count advances and weight decay shrinks every weight, where
the objective (undefined at N = 0) asks for no update at all."""

import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["token_losses", "train_step"]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


def train_step(model, optimizer, microbatches):
    n = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(n)
    optimizer.zero_grad()
    for microbatch in microbatches:
        (token_losses(model, microbatch).sum() / max(n.item(), 1.0)).backward()  # 0 at N = 0
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
    optimizer.step()  # the bug: a step even when N = 0
