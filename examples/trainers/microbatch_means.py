"""Wrong: every microbatch's loss is its own mean, divided by K, then DDP averages ranks.
Every microbatch counts the same whatever its labels: weight x N = N / (P K n_rk)."""

import contextlib

from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses
from torch.nn.parallel import DistributedDataParallel as DDP

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    ddp = DDP(model)
    optimizer.zero_grad()
    last = len(microbatches) - 1
    for k, microbatch in enumerate(microbatches):
        losses = token_losses(ddp, microbatch)
        mean = losses.mean() if len(losses) else losses.sum()  # an empty mean guarded to 0
        with contextlib.nullcontext() if k == last else ddp.no_sync():
            (mean / len(microbatches)).backward()
    optimizer.step()
