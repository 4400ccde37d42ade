"""The model the framework adapters share (accelerate_*.py, lightning_*.py): a tiny causal LM
(an embedding, tanh and a linear read-out over an 11-token vocabulary, 187 float64 parameters)
whose loss is shifted the way transformers' causal LMs shift it: position t predicts the label
at t + 1, so a label at position 0 is never a term. The adapters differ only in how they drive
their framework; this is what the trainer check needs besides train_step.

    pclab check examples/frameworks/accelerate/accelerate_accumulate.py --json

A trainer file may import its neighbours, as each adapter imports this one. Nothing here
imports a framework: the command imports the adapters in its own process to check the
contract, and only the ranks pay for accelerate or lightning.
"""

import json
import os
import resource

import torch
from torch.nn import functional as F

VOCAB_SIZE = 11
SEQ_LEN = 8  # positions per sequence
BATCH_SIZE = 2  # sequences per microbatch
IGNORE = -100  # a label that does not count
RECORD_ENV = "PCL_FRAMEWORK_RECORD"  # a file: one JSON line per train_step and rank (tests)


def build_model() -> torch.nn.Module:
    """A fresh model, identical on every call (fixed seed), float64 on the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB_SIZE, 8), torch.nn.Tanh(), torch.nn.Linear(8, VOCAB_SIZE)
    )
    return model.double()


def shifted_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One cross-entropy term per counted label after the causal shift (1-D, maybe empty)."""
    targets = labels[:, 1:]
    counted = targets != IGNORE
    return F.cross_entropy(logits[:, :-1][counted], targets[counted], reduction="none")


def mean_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The model's own loss, as a causal LM returns it by default: the mean of this
    microbatch's terms (0/0 = NaN on a microbatch without terms, as F.cross_entropy gives)."""
    targets = labels[:, 1:]
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB_SIZE), targets.reshape(-1), ignore_index=IGNORE
    )


def token_losses(model, microbatch) -> torch.Tensor:
    """The objective's terms: the shifted cross-entropy of every counted label."""
    return shifted_losses(model(microbatch["input_ids"]), microbatch["labels"])


def count_terms(microbatches) -> int:
    """Labels that are terms on this rank: counted after the shift (`labels[..., 1:]`)."""
    return sum(int((mb["labels"][:, 1:] != IGNORE).sum()) for mb in microbatches)


class StepCounter:
    """Counts the optimizer's real steps (a torch step post-hook), whatever wraps it."""

    def __init__(self, optimizer) -> None:
        self.steps = 0
        self._handle = optimizer.register_step_post_hook(self._count)

    def _count(self, *_) -> None:
        self.steps += 1

    def close(self) -> int:
        self._handle.remove()
        return self.steps


def record(adapter: str, **evidence) -> None:
    """Append this rank's evidence that the framework's own machinery made the update (one
    JSON line) to $PCL_FRAMEWORK_RECORD, when that is set."""
    path = os.environ.get(RECORD_ENV)
    if path:
        import torch.distributed as dist

        line = {"adapter": adapter, "rank": dist.get_rank(), "world_size": dist.get_world_size()}
        line["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # so far
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line | evidence) + "\n")
