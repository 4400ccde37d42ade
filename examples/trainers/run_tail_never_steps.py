"""A loop that steps only when (i + 1) % accum_steps == 0: each epoch's tail is accumulated
and never stepped, and since zero_grad runs only after a step, the tail's gradient reaches the
next epoch's first update (AnimaLoraStudio PR #305, torchseq #8). Each window is otherwise
normalised correctly (its global N)."""

from run_loop import (
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    global_count,
    make_optimizer,
    sum_gradients,
    token_losses,
    windows,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["token_losses", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps):
    optimizer.zero_grad()
    for epoch in epochs:
        for window in windows(epoch, accum_steps):
            n = global_count(window)
            for microbatch in window:
                if n:
                    (token_losses(model, microbatch).sum() / n).backward()
            if len(window) == accum_steps and n:  # a full window steps; the tail never does
                sum_gradients(model)
                optimizer.step()
                optimizer.zero_grad()
