"""Blind run-mode trainer: the loop done right, by hand (written to pass).

Every window's global label count is agreed up front in one all_reduce, so the schedule is
built for the updates the run will really take (no window with N = 0 counted). Each window,
the tail included, is one update over its own global N: zero, backward (sum / N), a summed
all_reduce of the gradients, one optimizer step, one scheduler step. N = 0: every rank skips.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def make_scheduler(optimizer, num_updates):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: 1.0 - 0.5 * u / num_updates)


def global_window_counts(epochs, k):
    """[epoch][window]: the window's labels over every rank."""
    shape = [range(0, len(epoch), k) for epoch in epochs]
    local = [count_labels(e[s : s + k]) for e, starts in zip(epochs, shape) for s in starts]
    flat = torch.tensor(local, dtype=torch.float64)
    dist.all_reduce(flat)
    values = iter(flat.tolist())
    return [[next(values) for _ in starts] for starts in shape]


def train_loop(model, optimizer, epochs, accum_steps):
    counts = global_window_counts(epochs, accum_steps)
    scheduler = make_scheduler(optimizer, sum(n > 0 for row in counts for n in row))
    for epoch, row in zip(epochs, counts):
        for w, n in enumerate(row):
            if n == 0:
                continue  # nothing to average: every rank agrees, nothing steps
            optimizer.zero_grad()
            for mb in epoch[w * accum_steps : (w + 1) * accum_steps]:
                (token_losses(model, mb).sum() / n).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            scheduler.step()
