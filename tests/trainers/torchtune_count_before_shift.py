"""torchtune 0.6.1's full_finetune_distributed, in a dozen lines: each microbatch's mean loss
over its terms (after the causal shift) times its label count taken BEFORE the shift, summed,
gradients scaled by world_size / num_tokens (the global pre-shift count). Each microbatch gets
(labels / terms) x (N_terms / N_labels): the check must name it labels_before_shift."""

import _examples  # noqa: F401
import torch
import torch.distributed as dist
from causal_shift_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses
from tiny_lm import IGNORE

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]


def train_step(model, optimizer, microbatches):
    num_tokens = torch.tensor(float(sum(int((m["labels"] != IGNORE).sum()) for m in microbatches)))
    dist.all_reduce(num_tokens)  # labels counted before the shift
    if num_tokens.item() == 0:
        return
    optimizer.zero_grad()
    for mb in microbatches:
        terms = token_losses(model, mb)
        if len(terms):  # the mean over the terms after the shift, times the pre-shift count
            (terms.mean() * int((mb["labels"] != IGNORE).sum())).backward()
    for p in model.parameters():
        p.grad = torch.zeros_like(p) if p.grad is None else p.grad
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)  # DDP's mean
        p.grad *= dist.get_world_size() / num_tokens  # training.scale_grads
    optimizer.step()
