"""A resumable loop that restores the model, the optimizer and the scheduler and counts its
updates, but fast-forwards by the wrong unit: it turns the update count into microbatches
(updates x K) and then skips that many windows, K times too far, so the windows in between
are never seen (kohya-ss/sd-scripts PR #2425: initial_step x gradient_accumulation_steps
then divided by the updates of an epoch; diffusers #3467 made the same slip in its step)."""

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


def save(path, model, optimizer, scheduler, step):
    if dist.get_rank() == 0:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": step,  # the updates taken so far
        }
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # a kill mid-save leaves the last whole checkpoint
    dist.barrier()


def restore(path, model, optimizer, scheduler):
    if not os.path.exists(path):
        return 0
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return state["step"]


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    path = os.path.join(checkpoint_dir, CHECKPOINT)
    scheduler = make_scheduler(optimizer, true_updates(epochs, accum_steps))
    step = restore(path, model, optimizer, scheduler)
    skip = step * accum_steps  # the microbatches it has seen, skipped as windows: the bug
    run = [window for epoch in epochs for window in windows(epoch, accum_steps)]
    for i, window in enumerate(run):
        if i < skip:
            continue  # "stepped before the restart"
        n = global_count(window)
        if n:
            optimizer.zero_grad()
            for microbatch in window:
                (token_losses(model, microbatch).sum() / n).backward()
            sum_gradients(model)
            optimizer.step()
            scheduler.step()
            step += 1
        save(path, model, optimizer, scheduler, step)
