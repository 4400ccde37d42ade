"""Correct across a run, with DDP: the model is wrapped once, before the first epoch. DDP
averages the gradients over P ranks, so each window's local token-loss sums are scaled by
P / N (N the window's global count); every microstep but the window's last runs under
no_sync(), so the one all-reduce of a window comes at its last backward, a tail's too. A
window with N = 0 is skipped by every rank together, its scheduler step too."""

import contextlib

import torch.distributed as dist
from run_loop import (
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    global_count,
    make_optimizer,
    make_scheduler,
    token_losses,
    true_updates,
    windows,
)
from torch.nn.parallel import DistributedDataParallel as DDP

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps):
    ddp = DDP(model)
    scheduler = make_scheduler(optimizer, true_updates(epochs, accum_steps))
    for epoch in epochs:
        for window in windows(epoch, accum_steps):
            n = global_count(window)
            if n == 0:
                continue  # nothing to average: no step, no scheduler step, on every rank
            scale = dist.get_world_size() / n  # DDP's mean divides by P: put it back
            optimizer.zero_grad()
            last = len(window) - 1
            for k, microbatch in enumerate(window):
                sync = contextlib.nullcontext() if k == last else ddp.no_sync()
                with sync:
                    (token_losses(ddp, microbatch).sum() * scale).backward()
            optimizer.step()
            scheduler.step()
