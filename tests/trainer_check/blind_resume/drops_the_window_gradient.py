"""Blind resumable loop with one mistake (written for `window_gradient_lost`, where the kill
falls inside a window): like a loop that checkpoints after every microbatch for safety, it
saves the model, AdamW's state, the scheduler and the position (epoch, next microbatch) in
the middle of a window too, but not the `.grad` accumulated there. A restart inside a window
goes on from the next microbatch with an empty gradient, so that window's update lacks the
microbatches run before the kill. Restarted at a window's start it loses nothing."""

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
    scheduler = make_scheduler(optimizer, num_updates(counts))
    path = os.path.join(checkpoint_dir, "ckpt.pt")
    state, resume_at = read(path), (0, 0)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        resume_at = tuple(state["next"])
    dist.barrier()  # every rank has read the checkpoint before rank 0 writes the next
    optimizer.zero_grad()
    for e, epoch in enumerate(epochs):
        for i, microbatch in enumerate(epoch):
            n = counts[e][i // k]
            if (e, i) < resume_at or n == 0:
                continue
            (token_losses(model, microbatch).sum() / n).backward()
            if i % k == k - 1 or i == len(epoch) - 1:
                reduce_gradients(model)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if dist.get_rank() == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                write(path, state | {"scheduler": scheduler.state_dict(), "next": (e, i + 1)})
            dist.barrier()
