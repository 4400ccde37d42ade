"""A resumable loop that keeps its place in the data (the microbatches it has consumed) but not
its window counter: the counter that says how long the next window is (K, or the epoch's
shorter tail) restarts at 0 after a restart, so the window boundaries move and it steps where
no window ends (transformers #22143: total_batched_samples reset to 0 on resume)."""

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


def save(path, model, optimizer, scheduler, consumed):
    if dist.get_rank() == 0:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "consumed": consumed,  # the run's microbatches stepped so far (the loader's state)
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
    return state["consumed"]


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    path = os.path.join(checkpoint_dir, CHECKPOINT)
    scheduler = make_scheduler(optimizer, true_updates(epochs, accum_steps))
    sizes = [len(w) for epoch in epochs for w in windows(epoch, accum_steps)]  # K, K, tail, ...
    stream = [microbatch for epoch in epochs for microbatch in epoch]
    consumed = restore(path, model, optimizer, scheduler)
    counter = 0  # the windows taken: not in the checkpoint, so it restarts at 0: the bug
    while consumed < len(stream):
        window = stream[consumed : consumed + sizes[counter]]
        n = global_count(window)
        if n:
            optimizer.zero_grad()
            for microbatch in window:
                (token_losses(model, microbatch).sum() / n).backward()
            sum_gradients(model)
            optimizer.step()
            scheduler.step()
        consumed, counter = consumed + len(window), counter + 1
        save(path, model, optimizer, scheduler, consumed)
