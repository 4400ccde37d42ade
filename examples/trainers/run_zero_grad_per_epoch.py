"""A loop that zeroes the gradients once per epoch, not once per update: from the second
window of an epoch on, every update carries the earlier windows' gradients again. Each window
is otherwise normalised correctly (its global N) and steps once."""

import torch.distributed as dist
from run_loop import (
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    global_count,
    make_optimizer,
    token_losses,
    windows,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["token_losses", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps):
    for epoch in epochs:
        optimizer.zero_grad()  # once an epoch: the bug
        for window in windows(epoch, accum_steps):
            n = global_count(window)
            if n == 0:
                continue
            before = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
            for microbatch in window:
                (token_losses(model, microbatch).sum() / n).backward()
            for p, old in zip(model.parameters(), before):  # sum this window's part over ranks
                new = p.grad - (0 if old is None else old)
                dist.all_reduce(new)
                p.grad = new + (0 if old is None else old)
            optimizer.step()
