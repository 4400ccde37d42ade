"""Blind run-mode trainer: nanoGPT's accumulation (written for a ÷K tail).

DDP, gradient sync switched by `require_backward_grad_sync` on the window's last microstep,
each microbatch's own mean loss divided by `gradient_accumulation_steps`, as nanoGPT's
train.py does; the epoch's short last window is divided by K all the same. A window with no
label on any rank is skipped (its count all_reduced first), so no NaN mean is ever stepped.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def train_loop(model, optimizer, epochs, accum_steps):
    ddp = DDP(model)
    gradient_accumulation_steps = accum_steps
    for epoch in epochs:
        for start in range(0, len(epoch), gradient_accumulation_steps):
            window = epoch[start : start + gradient_accumulation_steps]
            n = torch.tensor(float(count_labels(window)))
            dist.all_reduce(n)
            if n.item() == 0:
                continue
            for micro_step, mb in enumerate(window):
                ddp.require_backward_grad_sync = micro_step == len(window) - 1
                losses = token_losses(ddp, mb)
                loss = losses.mean() if len(losses) else losses.sum()
                (loss / gradient_accumulation_steps).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
