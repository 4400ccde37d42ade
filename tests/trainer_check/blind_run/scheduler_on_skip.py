"""Blind run-mode trainer: N = 0 skips the optimizer but still steps the scheduler (written
for a schedule that advances at a skipped window).

By hand: the schedule is built for every window of the run (ceil(len / K) an epoch), and
"to keep the schedule aligned with the data" a window with no label on any rank steps the
scheduler and nothing else. Otherwise each window is one update over its global count.
"""

import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def make_scheduler(optimizer, num_updates):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: 1.0 / (1.0 + u / num_updates))


def train_loop(model, optimizer, epochs, accum_steps):
    windows = math.ceil(len(epochs[0]) / accum_steps)
    scheduler = make_scheduler(optimizer, windows * len(epochs))
    for epoch in epochs:
        for w in range(windows):
            window = epoch[w * accum_steps : (w + 1) * accum_steps]
            n = torch.tensor(float(count_labels(window)))
            dist.all_reduce(n)
            if n.item() == 0:
                scheduler.step()  # the bug: the schedule moves on without an update
                continue
            optimizer.zero_grad()
            for mb in window:
                (token_losses(model, mb).sum() / n).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            scheduler.step()
