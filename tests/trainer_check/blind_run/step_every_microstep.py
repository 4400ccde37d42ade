"""Blind run-mode trainer: the optimizer stepped at every microbatch (written for K steps a
window).

By hand: the window's global count is agreed at its start and each microbatch's summed loss
divided by it, the gradients all_reduced, but the guard on the step was forgotten: step and
zero_grad after every microbatch. Windows with N = 0 are skipped whole.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def train_loop(model, optimizer, epochs, accum_steps):
    for epoch in epochs:
        for start in range(0, len(epoch), accum_steps):
            window = epoch[start : start + accum_steps]
            n = torch.tensor(float(count_labels(window)))
            dist.all_reduce(n)
            if n.item() == 0:
                continue
            for mb in window:
                (token_losses(model, mb).sum() / n).backward()
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                optimizer.step()
                optimizer.zero_grad()
