"""A correct loop whose scheduler.step() sits inside the microbatch loop: the schedule
advances K times per update, so at update u the rate is the intended schedule's at about
K u, and it reaches its end K times too early."""

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
            optimizer.zero_grad()
            for j, microbatch in enumerate(window):
                if n:
                    (token_losses(model, microbatch).sum() / n).backward()
                if j == len(window) - 1 and n:
                    sum_gradients(model)
                    optimizer.step()
                scheduler.step()  # every microbatch: the bug
