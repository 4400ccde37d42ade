"""A stand-in for a framework that shards the parameters after the step (as FSDP2 or ZeRO-3
do): each rank keeps only its slice of every parameter, and full_parameters(model) gathers
the full ones back under build_model()'s names. The update itself is correct_manual's."""

import _examples  # noqa: F401
import correct_manual
import torch
import torch.distributed as dist
from tiny_lm import VOCAB_SIZE, build_model, token_losses

__all__ = ["VOCAB_SIZE", "build_model", "full_parameters", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    correct_manual.train_step(model, optimizer, microbatches)
    rank, world = dist.get_rank(), dist.get_world_size()
    model.full_shapes = {}
    for name, p in model.named_parameters():
        model.full_shapes[name] = p.shape
        p.data = p.data.flatten().tensor_split(world)[rank].clone()  # this rank's shard


def full_parameters(model):
    full = {}
    for name, shard in model.named_parameters():
        pieces = [None] * dist.get_world_size()
        dist.all_gather_object(pieces, shard.detach())
        full[name] = torch.cat(pieces).reshape(model.full_shapes[name])
    return full
