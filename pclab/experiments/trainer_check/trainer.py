"""The user's trainer on a rank: the only way the check runs the file's functions
(`Trainer.call`), and the three fresh-model runs of a one-update scenario, each read as a
float64 State (`snapshot`): `reference_update` (the mode's reference objective), `user_update`
(the file's train_step), `sgd_delta` (train_step with SGD at learning rate 1). pipeline.py
judges them. trainer_file.load makes the Trainer: importing this module imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pclab.experiments.trainer_check.coupled_contract as coupled_contract
from pclab.experiments.trainer_check.doing import now_in
from pclab.experiments.trainer_check.trainer_raised import TrainerRaised, where

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from pclab.experiments.trainer_check.states import State

    Loss = Callable[[torch.nn.Module], torch.Tensor | None]  # mode_protocols.ReferenceLoss
    Batches = list[list[dict[str, Any]]]  # P x K microbatches (mode_protocols.Batch)


@dataclass(frozen=True)
class Trainer:
    path: Path
    module: ModuleType
    vocab_size: int
    seq_len: int
    batch_size: int
    first_position_labelled: bool = True
    dtype: str = "float64"
    max_grad_norm: float | None = None
    mode: str = "token"  # modes.NAMES: "coupled" for a file with batch_loss
    global_batch: bool = False  # GLOBAL_BATCH: train_step is handed every rank's microbatches

    def has(self, name: str) -> bool:
        """The file defines the optional function `name`."""
        return callable(getattr(self.module, name, None))

    @property
    def labelled_columns(self) -> int:
        """Positions of a sequence that may hold a counted label."""
        return self.seq_len - (0 if self.first_position_labelled else 1)

    @property
    def capacity(self) -> int:
        """Label positions of one microbatch: the most any n_rk can be (coupled: items)."""
        if self.mode in ("coupled", "coupled_run"):
            return coupled_contract.MAX_ITEMS
        return self.labelled_columns * self.batch_size

    def call(self, name: str, *args: object) -> Any:
        """Call the file's `name`, turning any exception into TrainerRaised at the user's
        own line (the lab's frames are not the user's business)."""
        function = getattr(self.module, name)
        outer = now_in(f"{name}()")  # left as is when it raises: the where
        try:
            result = function(*args)
        except Exception as exc:  # noqa: BLE001 - reported, with where it happened
            raise TrainerRaised(where(exc, self.path, name)) from None
        now_in(outer)
        return result

    # A fresh model and optimizer for every step the check takes, and train_step's input.

    def build(self, device: str = "cpu") -> torch.nn.Module:
        """A fresh model from the file, on this rank's device (--device cuda: its local GPU)."""
        model = self.call("build_model")
        return model.to(device_of(device)) if device == "cuda" else model

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """The file's make_optimizer(params), or SGD at learning rate 0.1."""
        import torch

        if self.has("make_optimizer"):
            return self.call("make_optimizer", model.parameters())
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def parameters(self, model: torch.nn.Module, stepped_by_user: bool) -> dict[str, Any]:
        """The model's parameters by name: the file's full_parameters(model) for a model the
        user's train_step ran on (sharded or wrapped), else its named_parameters()."""
        import torch

        if stepped_by_user and self.has("full_parameters"):
            full = self.call("full_parameters", model)
            if not isinstance(full, dict):
                raise ValueError("full_parameters returned no dict of {name: tensor}")
            return {n: torch.as_tensor(t).detach() for n, t in full.items()}
        return {n: p.detach() for n, p in model.named_parameters()}

    def step_input(self, batches: Batches, rank: int, model: torch.nn.Module) -> Any:
        """train_step's input on the model's device: this rank's K microbatches, or every rank's
        with GLOBAL_BATCH (P lists of K: the framework's sampler picks). The file's fresh_start()
        first, when it has one: each call is a new update from a fresh model."""
        if self.has("fresh_start"):
            self.call("fresh_start")
        if self.global_batch:
            return [[on_device(b, model) for b in row] for row in batches]
        return [on_device(b, model) for b in batches[rank]]


def on_device(batch: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """The microbatch's tensors on the model's device (anything else as it is)."""
    import torch

    device = next(model.parameters()).device
    return {k: t.to(device) if isinstance(t, torch.Tensor) else t for k, t in batch.items()}


def device_of(device: str) -> torch.device:
    """The torch device of --device on this rank (cuda: the rank's local GPU)."""
    import torch

    if device == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def snapshot(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    named: State | None = None,
    with_optimizer: bool = True,
) -> State:
    """Every parameter (`named`, default the model's) and every optimizer-state tensor (step
    counts included; none when `with_optimizer` is False), by name, as float64 (states.State)."""
    import torch

    names = {id(p): n for n, p in model.named_parameters()}
    named = {n: p.detach() for n, p in model.named_parameters()} if named is None else named
    state = {f"parameter {n}": p.double().clone() for n, p in named.items()}
    for param, entries in optimizer.state.items() if with_optimizer else ():
        for key, value in sorted(entries.items()):
            if hasattr(value, "full_tensor"):  # a sharded state (FSDP2's DTensor): gathered,
                value = value.full_tensor()  # a collective every rank's snapshot makes alike
            if isinstance(value, torch.Tensor):
                value = value.detach().double().clone()
            elif isinstance(value, int | float):
                value = torch.tensor(float(value), dtype=torch.float64)
            else:
                continue
            state[f"optimizer {key} of {names.get(id(param), '?')}"] = value
    return state


def holds_none_of(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> bool:
    """An optimizer holding none of the model's parameters: a wrapper's inner one on flat copies
    (DeepSpeed ZeRO steps it on fp32 partitions: stage_1_and_2.py `step`), whose state no name
    of the model keys. Read at the step: a loop may replace the parameters (fully_shard)."""
    own = {id(p) for p in model.parameters()}
    return not any(id(p) in own for g in optimizer.param_groups for p in g["params"])


class StepWatch:
    """Counts an optimizer's step() calls from now on and notes whether any of them stepped
    none of the model's parameters (holds_none_of: its state cannot be read by name).
    `steps` is None for an optimizer that is no torch.optim.Optimizer: nothing to count."""

    def __init__(self, optimizer: object, model: torch.nn.Module) -> None:
        import torch

        self.steps: int | None = None
        self.state_read = True
        if isinstance(optimizer, torch.optim.Optimizer):
            self.steps = 0
            optimizer.register_step_pre_hook(self._pre)
            optimizer.register_step_post_hook(self._post)
        self._model = model

    def _pre(self, optimizer: torch.optim.Optimizer, *_: object) -> None:
        if holds_none_of(optimizer, self._model):
            self.state_read = False

    def _post(self, *_: object) -> None:
        self.steps = (self.steps or 0) + 1


@dataclass(frozen=True)
class Reference:
    """The single-process reference of one scenario (the same on every rank)."""

    initial: State  # the fresh model's parameters, before any step
    final: State  # its parameters and optimizer state after the reference step
    reordered: State  # the same step on the grid reversed (`final` when the mode takes none)


def reference_step(
    trainer: Trainer,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor | None,
) -> None:
    """The reference's one update on `loss` (None: nothing to average, no step), in every
    mode: gradients zeroed, `loss` differentiated, the global gradient norm clipped once to
    MAX_GRAD_NORM when the file sets one (as torch.nn.utils.clip_grad_norm_ does it:
    coefficient max / (norm + 1e-6), at most 1), the file's optimizer stepped."""
    import torch

    if loss is None:
        return
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if trainer.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.max_grad_norm)
    optimizer.step()


def reference_update(
    trainer: Trainer, loss: Loss, reordered_loss: Loss | None, device: str
) -> Reference:
    """The update the user's step must match: a fresh model and the file's optimizer stepped on
    the mode's reference objective over the whole grid, in this process alone. Where the mode
    asks (mode.reorders), a second fresh model takes the same step on the grid reversed
    (`reordered_loss`): how far the two land apart is the reference's own rounding,
    which the tolerance must not go below (states.floor)."""
    import torch

    model = trainer.build(device)
    initial = snapshot(model, torch.optim.SGD(model.parameters(), lr=0.0))
    optimizer = trainer.make_optimizer(model)
    reference_step(trainer, model, optimizer, loss(model))
    final = snapshot(model, optimizer)
    reordered = final
    if reordered_loss is not None:
        other = trainer.build(device)
        other_optimizer = trainer.make_optimizer(other)
        reference_step(trainer, other, other_optimizer, reordered_loss(other))
        reordered = snapshot(other, other_optimizer)
    return Reference(initial, final, reordered)


@dataclass(frozen=True)
class UserUpdate:
    """What the file's own train_step did to a fresh model on this rank."""

    parameters: State  # by name, as the step left them (full_parameters when the file has it)
    state: State  # parameters as float64, and optimizer state when any rank's optimizer stepped
    # What the step showed that only a rank sees, by the scenario's JSON field: compare_updates
    # hands it on as it is. "stepped": optimizer.step() calls, most on any rank (None: none
    # could be counted); "state_read": False when some rank's optimizer stepped none of the
    # model's parameters (a wrapper's flat partitions: compared on the parameters alone).
    noted: dict[str, Any]


def user_update(trainer: Trainer, batches: Batches, rank: int, device: str) -> UserUpdate:
    """A fresh model and the file's optimizer, stepped by the file's train_step on this rank's K
    microbatches. Its step() calls are counted and all-reduced (MAX), so every rank compares the
    same tensors: optimizer state only when some rank stepped and every rank's optimizer held
    the model's own parameters (not a wrapper's flat copies, which no parameter name keys)."""
    import torch
    import torch.distributed as dist

    model = trainer.build(device)
    optimizer = trainer.make_optimizer(model)
    watch = StepWatch(optimizer, model)
    trainer.call("train_step", model, optimizer, trainer.step_input(batches, rank, model))
    stepped = -1.0 if watch.steps is None else float(watch.steps)
    most = torch.tensor([stepped, float(not watch.state_read)], device=device_of(device))
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    steps = None if most[0].item() < 0 else int(most[0].item())
    state_read = most[1].item() == 0
    named = trainer.parameters(model, stepped_by_user=True)
    state = snapshot(model, optimizer, named, with_optimizer=steps != 0 and state_read)
    return UserUpdate(named, state, {"stepped": steps, "state_read": state_read})


def sgd_delta(trainer: Trainer, batches: Batches, rank: int, device: str) -> torch.Tensor:
    """train_step once more on a fresh model, with SGD at learning rate 1 for the file's
    optimizer: the parameters' change (flat, float64, named_parameters order) is minus the
    gradient the step applied (rank 0's mode.solve reads it). Every rank runs it: train_step
    may hold collectives (DDP's all-reduce)."""
    import torch

    model = trainer.build(device)
    order = [n for n, _ in model.named_parameters()]
    before = flat_parameters(trainer.parameters(model, False), order)
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer.call("train_step", model, sgd, trainer.step_input(batches, rank, model))
    after = flat_parameters(trainer.parameters(model, True), order)
    return after - before


def flat_parameters(named: State, order: list[str]) -> torch.Tensor:
    """The named parameters flattened in `order` (names), as float64."""
    import torch

    return torch.cat([named[n].flatten() for n in order]).double()
