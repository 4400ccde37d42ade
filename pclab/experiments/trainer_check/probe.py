"""Torch helpers of the trainer check (rank side): the microbatches, the single-process
reference step, snapshots of parameters and optimizer state, and their comparison."""

from __future__ import annotations

import zlib

import torch

from pclab.experiments.trainer_check.trainer_file import Trainer

IGNORE = -100  # a position that does not count (the Hugging Face convention)


def microbatch(trainer: Trainer, scenario: str, rank: int, step: int, valid: int) -> dict:
    """Deterministic random tokens with exactly `valid` counted label positions (never at
    position 0 of a sequence when the file sets FIRST_POSITION_LABELLED = False)."""
    seed = zlib.crc32(f"{scenario}:{rank}:{step}".encode())
    gen = torch.Generator().manual_seed(seed)
    shape = (trainer.batch_size, trainer.seq_len)
    input_ids = torch.randint(0, trainer.vocab_size, shape, generator=gen)
    targets = torch.randint(0, trainer.vocab_size, shape, generator=gen)
    counted = torch.randperm(trainer.capacity, generator=gen)[:valid]
    skipped = trainer.seq_len - trainer.labelled_columns  # 1: column 0 never holds a label
    counted = counted + skipped * (counted // trainer.labelled_columns + 1)
    labels = torch.full((trainer.batch_size * trainer.seq_len,), IGNORE, dtype=torch.long)
    labels[counted] = targets.flatten()[counted]
    return {"input_ids": input_ids, "labels": labels.view(shape)}


def on_device(batch: dict, model: torch.nn.Module) -> dict:
    device = next(model.parameters()).device
    return {k: t.to(device) for k, t in batch.items()}


def terms(trainer: Trainer, model, batch: dict) -> torch.Tensor:
    """The objective's terms for one microbatch, checked to be a 1-D tensor."""
    losses = trainer.call("token_losses", model, on_device(batch, model))
    if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
        kind = getattr(losses, "shape", type(losses).__name__)
        raise ValueError(f"token_losses returned {kind}: it must be a 1-D tensor of losses")
    return losses


def make_optimizer(trainer: Trainer, model) -> torch.optim.Optimizer:
    if hasattr(trainer.module, "make_optimizer"):
        return trainer.call("make_optimizer", model.parameters())
    return torch.optim.SGD(model.parameters(), lr=0.1)


def reference_step(trainer: Trainer, model, optimizer, batches) -> int:
    """One update on the global token mean: sum of every microbatch's terms / N; no step at
    N = 0 (nothing to average). Returns N, the number of terms."""
    losses = [terms(trainer, model, b) for row in batches for b in row]
    n = sum(len(x) for x in losses)
    if n:
        optimizer.zero_grad(set_to_none=True)
        (sum(x.sum() for x in losses) / n).backward()
        optimizer.step()
    return n


def flat_gradient(trainer: Trainer, model, batch: dict) -> list[float]:
    """d(sum of this microbatch's terms)/d(parameters) at the model's weights, flattened
    (zeros for a microbatch without terms)."""
    model.zero_grad(set_to_none=True)
    losses = terms(trainer, model, batch)
    if len(losses):
        losses.sum().backward()
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten()
        for p in model.parameters()
    ]
    return torch.cat(parts).double().cpu().tolist()


def flat_parameters(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).double()


def snapshot(model, optimizer) -> dict[str, torch.Tensor]:
    """Every parameter and every optimizer-state tensor (step counts included), by name."""
    names = {id(p): n for n, p in model.named_parameters()}
    state = {f"parameter {n}": p.detach().double().clone() for n, p in model.named_parameters()}
    for param, entries in optimizer.state.items():
        for key, value in sorted(entries.items()):
            if isinstance(value, torch.Tensor):
                value = value.detach().double().clone()
            elif isinstance(value, int | float):
                value = torch.tensor(float(value), dtype=torch.float64)
            else:
                continue
            state[f"optimizer {key} of {names.get(id(param), '?')}"] = value
    return state


def compare(got: dict, want: dict, tolerance: float) -> tuple[float | None, dict | None]:
    """(max |got - want| over every tensor, the first tensor beyond `tolerance`). A tensor
    that one side lacks, or of another shape, diverges at once; a non-finite gap is None."""
    worst, first = 0.0, None
    for name in [*want, *(n for n in got if n not in want)]:
        if name not in got or name not in want or got[name].shape != want[name].shape:
            missing = "missing" if name not in got else "unexpected"
            detail = missing if name in want or name in got else "shape"
            return None, first or {"tensor": name, "abs_diff": None, "why": detail}
        gap = float((got[name] - want[name]).abs().max()) if got[name].numel() else 0.0
        if gap != gap or gap == float("inf"):  # NaN or inf: not a number to report
            return None, first or {"tensor": name, "abs_diff": None, "why": "non-finite"}
        worst = max(worst, gap)
        if gap > tolerance and first is None:
            first = {"tensor": name, "abs_diff": gap, "why": "differs"}
    return worst, first


def same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
