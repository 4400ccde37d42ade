"""Correct, with DDP: DDP averages gradients over P ranks, so each local sum is scaled by
P / N (N global); the first K - 1 microsteps skip DDP's all-reduce with no_sync()."""

import contextlib

import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses
from torch.nn.parallel import DistributedDataParallel as DDP

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    ddp = DDP(model)
    n = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(n)
    if n.item() == 0:
        return  # a coordinated skip
    scale = dist.get_world_size() / n.item()  # DDP's mean divides by P: put it back
    optimizer.zero_grad()
    last = len(microbatches) - 1
    for k, microbatch in enumerate(microbatches):
        sync = contextlib.nullcontext() if k == last else ddp.no_sync()
        with sync:
            (token_losses(ddp, microbatch).sum() * scale).backward()
    optimizer.step()
