"""Correct across a run: each window of accum_steps microbatches (the epoch's last one a
shorter tail) divides its token-loss sums by the window's GLOBAL count N and sums the
gradients over ranks; one optimizer step and one scheduler step per update, the gradients
zeroed before each window; a window with N = 0 is skipped by every rank together, its
scheduler step too. The schedule is built for the true number of updates."""

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
            if n == 0:
                continue  # nothing to average: no step, no scheduler step, on every rank
            optimizer.zero_grad()
            for microbatch in window:
                (token_losses(model, microbatch).sum() / n).backward()
            sum_gradients(model)
            optimizer.step()
            scheduler.step()
