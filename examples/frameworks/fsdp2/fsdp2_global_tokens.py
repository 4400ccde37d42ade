"""Plain PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`) on CPU Gloo, written right: the
label count of the K microbatches summed over the ranks (N), each microbatch's summed loss
÷ N × P (FSDP2 averages the gradients over the P ranks, as DDP does), gradient sync only on the
last microstep (`set_requires_gradient_sync`), no step when N = 0.

    pclab check examples/frameworks/fsdp2/fsdp2_global_tokens.py --json

`train_step` shards the lab's model as FSDP2's docs do (each layer with parameters, then the
root): every parameter becomes a DTensor holding one dim-0 slice per rank, and the optimizer
is built after sharding, over those DTensors, with the rule of the one the check passed in
(its class and hyperparameters): the optimizer passed in holds the unsharded parameters FSDP2
has replaced, so it is not the one that steps (the check then compares the parameters alone,
`optimizer_not_stepped`). `full_parameters` gathers every DTensor back (`full_tensor()`, a
collective) under build_model()'s names. FSDP2's all-gathers, reduce-scatters and the sharded
update are its own; nothing of that is re-implemented here.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    build_model,
    count_terms,
    record,
    shifted_losses,
    token_losses,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "full_parameters"]
__all__ += ["token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def shard(model, optimizer):
    """fully_shard each layer with parameters, then the root; a fresh optimizer of the passed
    one's class and hyperparameters over the sharded parameters."""
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer)
    fully_shard(model)
    (group,) = optimizer.param_groups
    settings = {k: v for k, v in group.items() if k != "params"}
    return model, type(optimizer)(model.parameters(), **settings)


def fsdp_step(model, optimizer, microbatches, divide_by, adapter: str) -> None:
    """One update over the microbatches: each one's summed loss ÷ divide_by(microbatches),
    FSDP2 syncing the gradients on the last microstep only. divide_by returns None: no step."""
    model, sharded_optimizer = shard(model, optimizer)
    counter = StepCounter(sharded_optimizer)
    divisor = divide_by(microbatches)
    grad_sync = []
    if divisor is not None:
        sharded_optimizer.zero_grad()
        for k, mb in enumerate(microbatches):
            last = k == len(microbatches) - 1
            model.set_requires_gradient_sync(last)  # FSDP2's no_sync: reduce-scatter at the end
            grad_sync.append(last)
            (shifted_losses(model(mb["input_ids"]), mb["labels"]).sum() / divisor).backward()
        sharded_optimizer.step()
    weight = model[0].weight
    record(
        adapter,
        wrapped_in=type(model).__name__,  # FSDPSequential
        parameter_type=type(weight).__name__,  # DTensor
        placements=[str(p) for p in weight.placements],  # Shard(dim=0)
        local_rows=weight.to_local().shape[0],  # this rank's slice of the 11 embedding rows
        optimizer_is_the_one_passed=sharded_optimizer is optimizer,
        optimizer_steps=counter.close(),
        grad_sync=grad_sync,  # per microstep: only the last one reduce-scatters
    )


def global_count_times_p(microbatches):
    """N ÷ P: the terms of every rank's K microbatches (an all-reduce), over FSDP2's mean."""
    n = torch.tensor(float(count_terms(microbatches)))
    dist.all_reduce(n)
    return float(n) / dist.get_world_size() if n.item() else None


def train_step(model, optimizer, microbatches):
    """One FSDP2 update on the global token mean."""
    fsdp_step(model, optimizer, microbatches, global_count_times_p, ADAPTER)


def full_parameters(model):
    """The full parameters after the step, gathered from every rank's shard."""
    return {n: p.full_tensor() for n, p in model.named_parameters()}
