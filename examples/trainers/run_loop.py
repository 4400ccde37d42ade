"""What the run-mode examples (run_*.py) share besides their loop: the tiny model, a linear
schedule, and the two collectives a loop over ranks needs by hand. A trainer file may import
its neighbours, as every run_*.py imports this one."""

import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = [
    "BATCH_SIZE",
    "SEQ_LEN",
    "VOCAB_SIZE",
    "build_model",
    "count_labels",
    "global_count",
    "make_optimizer",
    "make_scheduler",
    "sum_gradients",
    "token_losses",
    "true_updates",
    "windows",
]


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.1)


def make_scheduler(optimizer, num_updates):
    """The intended schedule: the rate falls linearly from its start towards 0 over the run."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / (num_updates + 1))


def windows(epoch, accum_steps):
    """The epoch's windows of accum_steps microbatches, the last a shorter tail."""
    return [epoch[start : start + accum_steps] for start in range(0, len(epoch), accum_steps)]


def global_count(microbatches):
    """N over every rank's share of this window (a SUM all-reduce of the local counts)."""
    n = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(n)
    return int(n.item())


def true_updates(epochs, accum_steps):
    """The updates the run will take: its windows whose global N is not 0."""
    return sum(1 for epoch in epochs for w in windows(epoch, accum_steps) if global_count(w))


def sum_gradients(model):
    """Every rank's gradients summed (each rank already divided by the global N)."""
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
