"""Blind run-mode trainer: a step only every K-th microbatch (written for a dropped tail
that leaks into the next epoch).

By hand: each window's global count is agreed up front, each microbatch's summed loss is
divided by it, and the loop steps when (i + 1) % K == 0, zeroing only after a step. The
epoch's tail (M mod K microbatches) is backpropagated and never stepped: its gradient stays
in .grad and joins the next epoch's first update.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def train_loop(model, optimizer, epochs, accum_steps):
    k = accum_steps
    for epoch in epochs:
        local = [count_labels(epoch[s : s + k]) for s in range(0, len(epoch), k)]
        totals = torch.tensor(local, dtype=torch.float64)
        dist.all_reduce(totals)
        for i, mb in enumerate(epoch):
            n = totals[i // k].item()
            if n > 0:
                (token_losses(model, mb).sum() / n).backward()
            if (i + 1) % k == 0 and n > 0:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                optimizer.step()
                optimizer.zero_grad()
