"""nanoGPT's loop across a run: every microbatch's mean loss divided by accum_steps, the
ranks' gradients averaged, one step at the end of each window of K or of the epoch. A full
window is the mean of its microbatch means (microbatch_mean), and the tail, fewer than K
microbatches, is divided by K all the same: its update is k'/K of what the same loop gives a
full window (nanoGPT #605, Lightning #19987)."""

import torch
import torch.distributed as dist
from run_loop import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, make_optimizer, token_losses

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["token_losses", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps):
    world = dist.get_world_size()
    for epoch in epochs:
        optimizer.zero_grad()
        for i, microbatch in enumerate(epoch):
            (token_losses(model, microbatch).mean() / accum_steps).backward()
            if (i + 1) % accum_steps == 0 or i == len(epoch) - 1:
                for p in model.parameters():
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    dist.all_reduce(p.grad)
                    p.grad /= world  # DDP's mean over the ranks
                optimizer.step()
                optimizer.zero_grad()
