"""A framework that owns its data loading and keeps state per process, given what it needs:
`GLOBAL_BATCH = True` hands train_step every rank's microbatches (P lists of K, by rank), and
the framework's own DistributedSampler picks this rank's; `fresh_start()` is called before
every train_step, so the framework's once-per-process set-up (a device mesh, a step counter)
starts over for each update. Correct: the global token mean, N = 0 skipped on every rank.

    pclab check tests/trainers/framework_sampler.py
"""

import _examples  # noqa: F401
import torch.distributed as dist
from correct_manual import train_step as global_token_step
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses
from torch.utils.data import DataLoader, DistributedSampler

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]

GLOBAL_BATCH = True
FRAMEWORK = {"updates": 0}  # what a framework sets up once per process (OLMo-core's mesh)


def fresh_start():
    """Each train_step the check runs is a new update from a fresh model."""
    FRAMEWORK["updates"] = 0


def train_step(model, optimizer, global_batch):
    FRAMEWORK["updates"] += 1
    if FRAMEWORK["updates"] > 1:  # the framework's own guard: one update per set-up
        raise RuntimeError("the framework was set up for one update; call fresh_start first")
    world, accum = len(global_batch), len(global_batch[0])
    # DistributedSampler hands rank r the indices r, r + P, ...: lay the microbatches out so
    # that those are rank r's own K, in order (a framework's loader over the global batch)
    dataset = [global_batch[i % world][i // world] for i in range(world * accum)]
    sampler = DistributedSampler(dataset, num_replicas=world, rank=dist.get_rank(), shuffle=False)
    loader = DataLoader(dataset, batch_size=None, sampler=sampler)
    global_token_step(model, optimizer, list(loader))  # correct_manual's own step
