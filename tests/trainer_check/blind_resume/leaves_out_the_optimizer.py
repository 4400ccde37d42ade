"""Blind resumable loop with one mistake (written for `optimizer_state_lost`): after every
update rank 0 saves the model, the scheduler and how many microbatches of the whole run are
consumed (a sampler's consumed-samples count, over every epoch in order), but not AdamW:
its two moments are twice the model, so the checkpoint leaves them out. A restart loads the
weights and the scheduler, gives the rate the scheduler had reached back to the optimizer's
param groups (LambdaLR's load_state_dict restores the scheduler, not the rate the optimizer
holds), and skips every window that starts before the consumed count. The optimizer it
runs on is the fresh one the launch built: zero moments, its step count from 0 again, so the
first resumed update has the bias correction of a first step."""

import os

import torch.distributed as dist
from _resume_shared import (  # noqa: F401
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    make_scheduler,
    num_updates,
    read,
    reduce_gradients,
    token_losses,
    window_counts,
    write,
)
from torch.optim import AdamW


def make_optimizer(params):
    return AdamW(params, lr=0.02, weight_decay=0.05)


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    k = accum_steps
    counts = window_counts(epochs, k)
    scheduler = make_scheduler(optimizer, num_updates(counts))
    path = os.path.join(checkpoint_dir, "weights_and_schedule.pt")
    consumed = 0
    saved = read(path)
    if saved is not None:
        model.load_state_dict(saved["model"])
        scheduler.load_state_dict(saved["scheduler"])
        for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr()):
            group["lr"] = lr
        consumed = saved["consumed"]  # the mistake: no optimizer.load_state_dict
    offset = 0  # the run index (from 0) of this epoch's first microbatch
    for e, epoch in enumerate(epochs):
        for w, start in enumerate(range(0, len(epoch), k)):
            stop, n = min(start + k, len(epoch)), counts[e][w]
            if offset + start < consumed or n == 0:
                continue
            optimizer.zero_grad()
            for microbatch in epoch[start:stop]:
                (token_losses(model, microbatch).sum() / n).backward()
            reduce_gradients(model)
            optimizer.step()
            scheduler.step()
            if dist.get_rank() == 0:
                state = {"model": model.state_dict(), "scheduler": scheduler.state_dict()}
                write(path, state | {"consumed": offset + stop})
            dist.barrier()
        offset += len(epoch)
