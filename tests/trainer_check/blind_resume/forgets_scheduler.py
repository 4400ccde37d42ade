"""Blind resumable loop with one mistake (written for `scheduler_reset`): after every update
it saves the model, AdamW's whole state and the position (epoch, next window), but not the
scheduler. A restart loads the optimizer and then builds the scheduler afresh; the new
LambdaLR keeps the loaded `initial_lr` and sets the rate to the schedule's first, so the
resumed updates run the schedule again from its start."""

import os

import torch.distributed as dist
from _resume_shared import (  # noqa: F401
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    adamw,
    build_model,
    make_scheduler,
    num_updates,
    read,
    reduce_gradients,
    token_losses,
    window_counts,
    write,
)

make_optimizer = adamw


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    k = accum_steps
    counts = window_counts(epochs, k)
    path = os.path.join(checkpoint_dir, "model_and_optimizer.pt")
    state, resume_at = read(path), (0, 0)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        resume_at = tuple(state["next"])
    scheduler = make_scheduler(optimizer, num_updates(counts))  # the mistake: never restored
    for e, epoch in enumerate(epochs):
        for w, n in enumerate(counts[e]):
            if (e, w) < resume_at or n == 0:
                continue
            optimizer.zero_grad()
            for microbatch in epoch[w * k : (w + 1) * k]:
                (token_losses(model, microbatch).sum() / n).backward()
            reduce_gradients(model)
            optimizer.step()
            scheduler.step()
            if dist.get_rank() == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                write(path, state | {"next": (e, w + 1)})
            dist.barrier()
