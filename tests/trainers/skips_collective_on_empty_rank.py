"""A trainer whose rank with no labels returns before the gradients' all_reduce (line 21): its
peers wait in a collective it never makes, and it makes the check's next one instead. Only
empty_rank (and no_labels, where every rank returns) can show it: the check must give that
scenario `collective_mismatch` and judge the others."""

import _examples  # noqa: F401
import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]


def train_step(model, optimizer, microbatches):
    local = count_labels(microbatches)
    n = torch.tensor(float(local))
    dist.all_reduce(n)
    if n.item() == 0:
        return
    if local == 0:
        return  # the bug: "nothing to contribute", so this rank skips the gradients' all_reduce
    optimizer.zero_grad()
    for microbatch in microbatches:
        (token_losses(model, microbatch).sum() / n).backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
    optimizer.step()
