"""Blind resumable loop with one mistake (written for `counter_reset`, where a restart
lands inside an epoch): an HF-style loop over the epoch's microbatches whose window test is
`(step + 1) % K == 0 or step + 1 == len(epoch)`, `step` the index of `enumerate`. After every
update it saves the model, AdamW's state, the scheduler and the position (epoch, next
microbatch); a restart skips that many microbatches of the epoch and enumerates the rest, so
`step` starts again at 0: full windows still end in the right places (the restarts fall on
even positions at K = 2), but the tail's test `step + 1 == len(epoch)` never holds, the tail
gets no step of its own and its gradient is stepped with the next epoch's first window
(zero_grad only after a step). A restart at an epoch's start is unaffected."""

import os

import torch.distributed as dist
from _resume_shared import (  # noqa: F401
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    adamw,
    build_model,
    global_count,
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
    scheduler = make_scheduler(optimizer, num_updates(window_counts(epochs, k)))
    path = os.path.join(checkpoint_dir, "trainer_state.pt")
    state, resume_at = read(path), (0, 0)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        resume_at = tuple(state["next"])
    optimizer.zero_grad()
    for e, epoch in enumerate(epochs):
        if e < resume_at[0]:
            continue
        skipped = resume_at[1] if e == resume_at[0] else 0
        batches = epoch[skipped:]
        for step, microbatch in enumerate(batches):  # the mistake: step restarts at 0
            if step % k == 0:
                n = global_count(batches[step : step + k])  # the window as it counts it
            if n:
                (token_losses(model, microbatch).sum() / n).backward()
            if (step + 1) % k == 0 or step + 1 == len(epoch):
                if n:
                    reduce_gradients(model)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                if dist.get_rank() == 0:
                    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                    position = (e, skipped + step + 1)
                    write(path, state | {"scheduler": scheduler.state_dict(), "next": position})
                dist.barrier()
