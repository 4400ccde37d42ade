"""torchtune's scaling: the summed loss's gradients, DDP-averaged, times
world_size / num_tokens (training.scale_grads), num_tokens the global count. At N = 0
(no_labels) that is 0 x inf: every parameter becomes NaN, the same on both ranks. The check
must say `non_finite` (a division by the zero count), never that the ranks disagree; every
scenario with labels is the same update."""

import _examples  # noqa: F401
import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]


def train_step(model, optimizer, microbatches):
    num_tokens = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(num_tokens)
    optimizer.zero_grad()
    for microbatch in microbatches:
        token_losses(model, microbatch).sum().backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()  # DDP's mean
        p.grad *= dist.get_world_size() / num_tokens  # undone, over the global count: inf at 0
    optimizer.step()
