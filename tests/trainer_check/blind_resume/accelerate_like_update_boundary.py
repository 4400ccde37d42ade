"""Blind resumable loop, written to be the same run at every kill point, checkpointing as
Accelerate's examples do: `save_state` only where the gradients were synchronised (after
`optimizer.step()`), the run's position kept as one number, the updates completed; a restart
loads the state and turns that number back into a place in the data by walking the windows
(those with N = 0 take no update), then skips the epoch's first batches up to it (as
`skip_first_batches`). A kill inside a window leaves no checkpoint of it: the restart runs
the interrupted window again from its first microbatch. The windows are cut by the
microbatch's index in its epoch, not by a counter of the run so far."""

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


def position_after(counts, completed):
    """(epoch, microbatches of it to skip) once `completed` updates are done."""
    for e, row in enumerate(counts):
        for w, n in enumerate(row):
            if n and completed == 0:
                return e, w
            completed -= bool(n)
    return len(counts), 0


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    k = accum_steps
    counts = window_counts(epochs, k)
    scheduler = make_scheduler(optimizer, num_updates(counts))
    folder = os.path.join(checkpoint_dir, "accelerate_state")
    os.makedirs(folder, exist_ok=True)
    state, completed = read(os.path.join(folder, "state.pt")), 0
    if state is not None:  # load_state
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        completed = state["completed_updates"]
    first_epoch, first_window = position_after(counts, completed)
    for e in range(first_epoch, len(epochs)):
        skip = first_window * k if e == first_epoch else 0
        for i, microbatch in enumerate(epochs[e][skip:], start=skip):  # skip_first_batches
            n = counts[e][i // k]
            if n == 0:
                continue
            if i % k == 0:
                optimizer.zero_grad()
            (token_losses(model, microbatch).sum() / n).backward()
            if i % k == k - 1 or i == len(epochs[e]) - 1:  # sync_gradients
                reduce_gradients(model)
                optimizer.step()
                scheduler.step()
                completed += 1
                if dist.get_rank() == 0:  # save_state
                    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                    state |= {"scheduler": scheduler.state_dict(), "completed_updates": completed}
                    write(os.path.join(folder, "state.pt"), state)
                dist.barrier()
