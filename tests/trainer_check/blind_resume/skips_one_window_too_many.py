"""Blind resumable loop with one mistake (written for `data_skipped`): after every update it
saves the model, the optimizer, the scheduler and how many windows of the run are done (one
count over every epoch's windows, N = 0 ones included), and a restart begins one window
later than that count says: it reads "done" as the index of the last window and steps past
it, so the first window after the checkpoint is never run by either launch."""

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
    sgd,
    token_losses,
    window_counts,
    write,
)

make_optimizer = sgd


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    k = accum_steps
    counts = window_counts(epochs, k)
    scheduler = make_scheduler(optimizer, num_updates(counts))
    path = os.path.join(checkpoint_dir, "last.pt")
    run = [(e, s) for e, epoch in enumerate(epochs) for s in range(0, len(epoch), k)]
    first = 0
    state = read(path)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        first = state["windows_done"] + 1  # the mistake: "done" is already the next index
    for j in range(first, len(run)):
        e, start = run[j]
        n = counts[e][start // k]
        if n == 0:
            continue
        optimizer.zero_grad()
        for microbatch in epochs[e][start : start + k]:
            (token_losses(model, microbatch).sum() / n).backward()
        reduce_gradients(model)
        optimizer.step()
        scheduler.step()
        if dist.get_rank() == 0:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            write(path, state | {"scheduler": scheduler.state_dict(), "windows_done": j + 1})
        dist.barrier()
