"""A correct loop whose schedule is built for len(epoch) // accum_steps updates an epoch, as
`num_training_steps = len(dataloader) // gradient_accumulation_steps * epochs` computes it:
the tails are updates too, so the schedule ends before the run does."""

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
    windows,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps):
    scheduler = make_scheduler(optimizer, len(epochs) * (len(epochs[0]) // accum_steps))
    for epoch in epochs:
        for window in windows(epoch, accum_steps):
            n = global_count(window)
            if n == 0:
                continue
            optimizer.zero_grad()
            for microbatch in window:
                (token_losses(model, microbatch).sum() / n).backward()
            sum_gradients(model)
            optimizer.step()
            scheduler.step()
