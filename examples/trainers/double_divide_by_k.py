"""Wrong: the loss is already the global token mean (P / N with DDP), and the accumulation
loop divides by K again, as many trainers' loops do: weight x N = 1 / K."""

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
        return
    scale = dist.get_world_size() / n.item()
    optimizer.zero_grad()
    last = len(microbatches) - 1
    for k, microbatch in enumerate(microbatches):
        loss = token_losses(ddp, microbatch).sum() * scale
        with contextlib.nullcontext() if k == last else ddp.no_sync():
            (loss / len(microbatches)).backward()  # the extra / K
    optimizer.step()
