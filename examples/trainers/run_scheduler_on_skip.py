"""A correct loop that skips the optimizer at a window with no labels (N = 0) but still
steps its scheduler there: the schedule runs ahead of the updates by one step for every
skipped window."""

from run_loop import (
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    global_count,
    make_optimizer,
    make_scheduler,
    sum_gradients,
    token_losses,
    true_updates,
    windows,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps):
    scheduler = make_scheduler(optimizer, true_updates(epochs, accum_steps))
    for epoch in epochs:
        for window in windows(epoch, accum_steps):
            n = global_count(window)
            if n:
                optimizer.zero_grad()
                for microbatch in window:
                    (token_losses(model, microbatch).sum() / n).backward()
                sum_gradients(model)
                optimizer.step()
            scheduler.step()  # at a skipped window too: the bug
