"""A trainer whose rank with no labels, when others have some (empty_rank), never returns
from train_step (a loop waiting for data that never comes) while its peer waits in the next
collective. With a short PCL_SCENARIO_TIMEOUT_S the check must give empty_rank `timeout`
and judge the other scenarios."""

import time

import _examples  # noqa: F401
import torch
import torch.distributed as dist
from correct_manual import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses
from correct_manual import train_step as correct
from tiny_lm import count_labels

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]


def train_step(model, optimizer, microbatches):
    local = count_labels(microbatches)
    n = torch.tensor(float(local))
    dist.all_reduce(n)
    while local == 0 and n.item() > 0:  # waits for a microbatch that never comes
        time.sleep(0.5)
    correct(model, optimizer, microbatches)
