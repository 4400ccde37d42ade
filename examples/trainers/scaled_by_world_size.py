"""Wrong by a factor: gather_with_grad.py with the loss multiplied by P, a compensation
copied from a trainer whose gather carried no gradient (tevatron #30). Here the gather's
backward already returns every rank's share, so the update is P times the right one."""

import torch.distributed as dist
from gather_with_grad import gathered_loss
from tiny_embedder import average_gradients, build_model, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    (gathered_loss(model, microbatches) * dist.get_world_size()).backward()  # x P: too many
    average_gradients(model)
    optimizer.step()
