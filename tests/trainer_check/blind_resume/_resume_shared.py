"""What the blind resumable loops of this folder share (a trainer file may import its
neighbours): the tiny model of examples/trainers/tiny_lm.py, a falling schedule, the two
optimizers, every window's global label count, a summed all_reduce of the gradients, and a
checkpoint file written so that a kill never leaves half of one."""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import (  # noqa: E402, F401
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    count_labels,
    token_losses,
)


def make_scheduler(optimizer, num_updates):
    """The intended schedule: the rate falls linearly to 0.4 of its start over the run."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: 1.0 - 0.6 * u / num_updates)


def adamw(params):
    return torch.optim.AdamW(params, lr=0.02, weight_decay=0.05)


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def window_counts(epochs, k):
    """[epoch][window]: the window's labels summed over every rank (one all_reduce)."""
    starts = [range(0, len(epoch), k) for epoch in epochs]
    local = [count_labels(epoch[s : s + k]) for epoch, row in zip(epochs, starts) for s in row]
    flat = torch.tensor(local, dtype=torch.float64)
    dist.all_reduce(flat)
    values = iter(int(v) for v in flat.tolist())
    return [[next(values) for _ in row] for row in starts]


def global_count(microbatches):
    """N of these microbatches over every rank (a summed all_reduce of the local counts)."""
    total = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(total)
    return int(total.item())


def num_updates(counts):
    return sum(1 for row in counts for n in row if n)


def reduce_gradients(model):
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


def write(path, state):
    """torch.save through a temporary name: a kill mid-write leaves the previous file."""
    torch.save(state, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


def read(path):
    return torch.load(path, weights_only=True) if os.path.exists(path) else None
