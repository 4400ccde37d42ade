"""Wrong: token losses are summed and never divided by a count; DDP averages the ranks.
The step grows with the batch: weight x N = N / P."""

import contextlib

from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses
from torch.nn.parallel import DistributedDataParallel as DDP

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    ddp = DDP(model)
    optimizer.zero_grad()
    last = len(microbatches) - 1
    for k, microbatch in enumerate(microbatches):
        with contextlib.nullcontext() if k == last else ddp.no_sync():
            token_losses(ddp, microbatch).sum().backward()
    optimizer.step()
