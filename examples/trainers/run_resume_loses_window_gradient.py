"""A resumable loop that saves its place after every microbatch (the next microbatch to run),
with the model, the optimizer and the scheduler, but not the gradient accumulated so far:
killed in the middle of a window, it comes back at the next microbatch with that gradient
gone, and the window's update is made of its last microbatches only (OneTrainer PR #1465)."""

import os

import torch
import torch.distributed as dist
from run_loop import (
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    global_count,
    make_scheduler,
    sum_gradients,
    token_losses,
    true_updates,
    windows,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]

CHECKPOINT = "state.pt"


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def save(path, model, optimizer, scheduler, position):
    if dist.get_rank() == 0:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "position": position,  # (epoch, window, microbatch) of the next microbatch to run
        }
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # a kill mid-save leaves the last whole checkpoint
    dist.barrier()


def restore(path, model, optimizer, scheduler):
    if not os.path.exists(path):
        return (0, 0, 0)
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return tuple(state["position"])


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    path = os.path.join(checkpoint_dir, CHECKPOINT)
    scheduler = make_scheduler(optimizer, true_updates(epochs, accum_steps))
    start = restore(path, model, optimizer, scheduler)
    for e, epoch in enumerate(epochs):
        for w, window in enumerate(windows(epoch, accum_steps)):
            if (e, w + 1, 0) <= start:
                continue  # stepped before the restart
            n = global_count(window)
            if n:
                optimizer.zero_grad()
                for m, microbatch in enumerate(window):
                    if (e, w, m) < start:
                        continue  # run before the restart: its gradient is gone
                    (token_losses(model, microbatch).sum() / n).backward()
                    save(path, model, optimizer, scheduler, (e, w, m + 1))  # no gradients: the bug
                sum_gradients(model)
                optimizer.step()
                scheduler.step()
            save(path, model, optimizer, scheduler, (e, w + 1, 0))
