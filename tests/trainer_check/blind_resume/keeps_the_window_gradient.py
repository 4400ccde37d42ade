"""Blind resumable loop, written to be the same run at every kill point: it checkpoints after
every microbatch, in the middle of a window too, and keeps everything a restart needs to go
on from the very next microbatch: the model, AdamW's state, the scheduler, the position (the
epoch and the next microbatch) and, on every rank, that rank's own accumulated `.grad` (its
share, not yet all-reduced). A restart inside a window therefore finishes that window with
the gradient of the microbatches it had already run. Each window, the tail included, is one
update over its global N; a window with N = 0 is skipped by every rank."""

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
    rank, k = dist.get_rank(), accum_steps
    counts = window_counts(epochs, k)
    scheduler = make_scheduler(optimizer, num_updates(counts))
    shared = os.path.join(checkpoint_dir, "state.pt")
    mine = os.path.join(checkpoint_dir, f"grad_rank{rank}.pt")
    resume_at = (0, 0)
    state = read(shared)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        resume_at = tuple(state["next"])
        grads = read(mine)
        assert tuple(grads["next"]) == resume_at, "a rank's gradient from another checkpoint"
        for p, g in zip(model.parameters(), grads["grad"]):
            p.grad = g
    dist.barrier()  # every rank has read the checkpoint before rank 0 writes the next
    for e, epoch in enumerate(epochs):
        for i, microbatch in enumerate(epoch):
            if (e, i) < resume_at:
                continue
            n = counts[e][i // k]
            if n == 0:
                continue
            if i % k == 0:
                optimizer.zero_grad()
            (token_losses(model, microbatch).sum() / n).backward()
            if i % k == k - 1 or i == len(epoch) - 1:
                reduce_gradients(model)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            after = (e, i + 1)
            if rank == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                write(shared, state | {"scheduler": scheduler.state_dict(), "next": after})
            grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
            write(mine, {"next": after, "grad": grads})
            dist.barrier()  # no rank runs on before every file of this checkpoint is written
