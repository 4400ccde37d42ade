"""Blind trainer g2 (beyond the brief's list): the BatchNorm classifier of
`batchnorm_classifier_ddp.py` under DDP, but accumulating microstep by microstep (`no_sync`
until the last), so each forward's statistics are one microbatch's (expected
`microbatch_pool` at K > 1, which is `rank_pool` at K = 1).
"""

import contextlib

from batchnorm_classifier_ddp import batch_loss, build_model, make_microbatch
from torch.nn.parallel import DistributedDataParallel

__all__ = ["batch_loss", "build_model", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    ddp = DistributedDataParallel(model)
    optimizer.zero_grad()
    last = len(microbatches) - 1
    for k, mb in enumerate(microbatches):
        with ddp.no_sync() if k < last else contextlib.nullcontext():
            (batch_loss(ddp, [mb]) / len(microbatches)).backward()
    optimizer.step()
