"""Blind resumable loop with one mistake (written for `data_replayed`, where a restart lands
inside an epoch): it saves the model, the optimizer, the scheduler and the epoch after every
update, but its position is only the epoch (as a loop that once checkpointed per epoch): a
restart runs the interrupted epoch again from its first window, stepping once more the
windows the killed launch had already stepped. A kill at an epoch boundary loses nothing."""

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
    path = os.path.join(checkpoint_dir, "epoch_state.pt")
    state, first_epoch = read(path), 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        first_epoch = state["epoch"]  # the mistake: where in that epoch is not kept
    for e in range(first_epoch, len(epochs)):
        epoch = epochs[e]
        for w, start in enumerate(range(0, len(epoch), k)):
            if counts[e][w] == 0:
                continue
            optimizer.zero_grad()
            for microbatch in epoch[start : start + k]:
                (token_losses(model, microbatch).sum() / counts[e][w]).backward()
            reduce_gradients(model)
            optimizer.step()
            scheduler.step()
            done = start + k >= len(epoch)
            if dist.get_rank() == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                write(path, state | {"scheduler": scheduler.state_dict(), "epoch": e + done})
            dist.barrier()
