"""Torch helpers every mode of the trainer check shares on a rank: the microbatches, fresh
models and optimizers, snapshots of parameters and optimizer state, their comparison and the
reference's own floor (pipeline.py runs the steps; a mode's `<mode>_rank.py` its objective)."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch

from pclab.experiments.trainer_check.scenarios import OFF_FIRST_POSITION
from pclab.experiments.trainer_check.trainer_file import Trainer

IGNORE = -100  # a position that does not count (the Hugging Face convention)
Batch = dict[str, Any]  # one microbatch: whatever the file's token_losses reads
State = dict[str, torch.Tensor]  # "parameter <name>" / "optimizer <key> of <name>" -> float64


class Divergence(TypedDict):
    """The first tensor beyond the tolerance (abs_diff None: missing, shape, non-finite)."""

    tensor: str
    abs_diff: float | None
    why: str  # differs, missing, unexpected, shape, non-finite


def microbatch(
    trainer: Trainer, scenario: str, rank: int, step: int, valid: int, off_first: bool = False
) -> Batch:
    """The file's make_microbatch(valid, generator) when it has one; else deterministic random
    tokens with exactly `valid` counted label positions, never at position 0 of a sequence
    when the file sets FIRST_POSITION_LABELLED = False or `off_first` asks (and it fits)."""
    seed = zlib.crc32(f"{scenario}:{rank}:{step}".encode())
    gen = torch.Generator().manual_seed(seed)
    if trainer.has("make_microbatch"):
        batch = trainer.call("make_microbatch", valid, gen)
        if not isinstance(batch, dict):
            raise ValueError(f"make_microbatch returned {type(batch).__name__}: it must be a dict")
        made: Batch = batch
        return made
    shape = (trainer.batch_size, trainer.seq_len)
    input_ids = torch.randint(0, trainer.vocab_size, shape, generator=gen)
    targets = torch.randint(0, trainer.vocab_size, shape, generator=gen)
    columns = trainer.labelled_columns
    if off_first and trainer.seq_len >= 2 and valid <= trainer.batch_size * (trainer.seq_len - 1):
        columns = trainer.seq_len - 1
    counted = torch.randperm(trainer.batch_size * columns, generator=gen)[:valid]
    skipped = trainer.seq_len - columns  # 1: column 0 never holds a label
    counted = counted + skipped * (counted // columns + 1)
    labels = torch.full((trainer.batch_size * trainer.seq_len,), IGNORE, dtype=torch.long)
    labels[counted] = targets.flatten()[counted]
    return {"input_ids": input_ids, "labels": labels.view(shape)}


def scenario_batches(
    trainer: Trainer, scenario: str, counts: Sequence[Sequence[int]], off_first: bool = False
) -> list[list[Batch]]:
    """Every cell's microbatch, P x K, with counts[r][k] counted labels: every rank builds all
    of them (the reference steps on the whole grid; the user's step takes its own row). Seeded
    by (scenario, rank, microstep), so every rank builds the same grid. Off position 0 where
    they fit for the scenarios of OFF_FIRST_POSITION, or when `off_first` asks (--counts)."""
    off_first = off_first or scenario in OFF_FIRST_POSITION
    return [
        [microbatch(trainer, scenario, r, k, n, off_first) for k, n in enumerate(row)]
        for r, row in enumerate(counts)
    ]


def on_device(batch: Batch, model: torch.nn.Module) -> Batch:
    """The microbatch's tensors on the model's device (anything else as it is)."""
    device = next(model.parameters()).device
    return {k: t.to(device) if isinstance(t, torch.Tensor) else t for k, t in batch.items()}


def build(trainer: Trainer, device: str = "cpu") -> torch.nn.Module:
    """A fresh model from the file, on this rank's device (--device cuda: its local GPU)."""
    model = trainer.call("build_model")
    if device == "cuda":
        model = model.to(torch.device("cuda", torch.cuda.current_device()))
    return model


def labels_at_first_position(batch: Batch) -> int:
    """Counted labels at position 0 of a sequence: a causal LM's shift drops exactly these."""
    labels = batch.get("labels")
    if not isinstance(labels, torch.Tensor) or labels.dim() != 2:
        return 0
    return int((labels[:, 0] != IGNORE).sum())


def make_optimizer(trainer: Trainer, model: torch.nn.Module) -> torch.optim.Optimizer:
    if hasattr(trainer.module, "make_optimizer"):
        return trainer.call("make_optimizer", model.parameters())
    return torch.optim.SGD(model.parameters(), lr=0.1)


@dataclass(frozen=True)
class Reference:
    """The single-process reference of one scenario (the same on every rank)."""

    initial: State  # the fresh model's parameters, before any step
    final: State  # its parameters and optimizer state after the reference step
    floor: float | None  # its own precision floor in DTYPE (see `floor`)


def parameters(trainer: Trainer, model: torch.nn.Module, stepped_by_user: bool) -> State:
    """The model's parameters by name: the file's full_parameters(model) for a model the
    user's train_step ran on (sharded or wrapped), else its named_parameters()."""
    if stepped_by_user and trainer.has("full_parameters"):
        full = trainer.call("full_parameters", model)
        if not isinstance(full, dict):
            raise ValueError("full_parameters returned no dict of {name: tensor}")
        return {n: torch.as_tensor(t).detach() for n, t in full.items()}
    return {n: p.detach() for n, p in model.named_parameters()}


def flat_parameters(named: State, order: Iterable[str]) -> torch.Tensor:
    """The named parameters flattened in `order` (names), as float64."""
    return torch.cat([named[n].flatten() for n in order]).double()


def snapshot(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    named: State | None = None,
    with_optimizer: bool = True,
) -> State:
    """Every parameter (`named`, default the model's) and every optimizer-state tensor (step
    counts included; none when `with_optimizer` is False), by name, as float64."""
    names = {id(p): n for n, p in model.named_parameters()}
    named = {n: p.detach() for n, p in model.named_parameters()} if named is None else named
    state = {f"parameter {n}": p.double().clone() for n, p in named.items()}
    for param, entries in optimizer.state.items() if with_optimizer else ():
        for key, value in sorted(entries.items()):
            if isinstance(value, torch.Tensor):
                value = value.detach().double().clone()
            elif isinstance(value, int | float):
                value = torch.tensor(float(value), dtype=torch.float64)
            else:
                continue
            state[f"optimizer {key} of {names.get(id(param), '?')}"] = value
    return state


def compare(got: State, want: State, tolerance: float) -> tuple[float | None, Divergence | None]:
    """(max |got - want| over every tensor, the first tensor beyond `tolerance`). A tensor
    that one side lacks, or of another shape, diverges at once; a non-finite gap is None."""
    worst = 0.0
    first: Divergence | None = None
    for name in [*want, *(n for n in got if n not in want)]:
        if name not in got or name not in want or got[name].shape != want[name].shape:
            missing = "missing" if name not in got else "unexpected"
            detail = missing if name in want or name in got else "shape"
            return None, first or {"tensor": name, "abs_diff": None, "why": detail}
        gap = float((got[name] - want[name]).abs().max()) if got[name].numel() else 0.0
        if not math.isfinite(gap):  # NaN or inf: not a number to report
            return None, first or {"tensor": name, "abs_diff": None, "why": "non-finite"}
        worst = max(worst, gap)
        if gap > tolerance and first is None:
            first = {"tensor": name, "abs_diff": gap, "why": "differs"}
    return worst, first


class ExtraState(TypedDict):
    keys: list[str]  # sorted optimizer-state keys
    parameters: int  # how many parameters carry them


def extra_state(got: State, want: State) -> ExtraState:
    """Optimizer state the user's step created that the reference has none of:
    {"keys": sorted state keys, "parameters": how many parameters carry them}."""
    extra = [n for n in got if n.startswith("optimizer ") and n not in want]
    keys = sorted({n.split(" ")[1] for n in extra})
    return {"keys": keys, "parameters": len({n.split(" of ", 1)[1] for n in extra})}


def count_steps(optimizer: object) -> list[int] | None:
    """A one-element list that counts the optimizer's step() calls from now on (None for an
    optimizer that is no torch.optim.Optimizer: nothing to count with)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        return None
    steps = [0]

    def hook(*_: object) -> None:
        steps[0] += 1

    optimizer.register_step_post_hook(hook)
    return steps


def floor(reordered: State, want: State, dtype: str) -> float | None:
    """The reference's own precision floor in `dtype`: its largest gap to itself with the
    microbatches summed in the other order, and at least one unit in the last place of its
    largest parameter (None when either is not finite)."""
    spread, _ = compare(reordered, want, float("inf"))
    largest = max((float(t.abs().max()) for t in want.values() if t.numel()), default=0.0)
    if spread is None or not math.isfinite(largest):
        return None
    eps: float = torch.finfo(getattr(torch, dtype)).eps
    return max(spread, eps * largest)


def same_state(a: State, b: State) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype's short name, the way DTYPE spells it: torch.float32 -> "float32"."""
    return str(dtype).removeprefix("torch.")


def first_not_in(named: Mapping[str, torch.Tensor], dtype: str) -> tuple[str, str] | None:
    """(name, dtype_name) of the first tensor in `named` that is not in `dtype` (a DTYPE such
    as "float64"), or None when all are: what build_model or train_step got wrong."""
    declared = getattr(torch, dtype)
    return next(((n, dtype_name(t.dtype)) for n, t in named.items() if t.dtype != declared), None)


def device_of(device: str) -> torch.device:
    """The torch device of --device on this rank (cuda: the rank's local GPU)."""
    if device == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
