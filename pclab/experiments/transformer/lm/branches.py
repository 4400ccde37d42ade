"""One optimizer update of the tiny Transformer under each averaging rule, compared exactly.

Four windows w = 0..3 carry n_w labels; N = sum_w n_w. S_w is a window's loss sum. Every
branch starts from the same step-800 weights (SGD: fresh state; AdamW: the restored step-800
state) and makes ONE update:

    full_batch              one process, one forward of all 4 windows, loss sum S / N  (reference)
    accum_global_n          one process, K = 2 microbatches (windows 0-1, 2-3), each S_k / N
    accum_microbatch_mean   one process, K = 2 microbatches, each (S_k / n_k) / K        (wrong)
    ddp_mean_of_means       P Gloo processes, rank r holds windows r*4/P .., backward of its
                            local mean S_r / n_r, DDP averages over ranks               (wrong)
    ddp_pn_scale            P Gloo processes, backward of (P / N) S_r with N all-gathered;
                            DDP's mean divides by P again: sum_r G_r / N                (correct)

N = 0 is a coordinated skip (no backward, no step). A mean over an empty microbatch or rank
is 0/0: that branch is reported as undefined, never run with a silent 0.

A branch's gradient does not depend on the optimizer that applies it, so each branch
computes it once (`single_process_gradient`, `distributed_gradient`) and each optimizer makes
its update from it on its own fresh copy of the step-800 parameters (`update`): the same numbers,
bit for bit, as running the whole branch once per optimizer, at half the forward and
backward passes.

The comparison walks the chain in order - loss, each parameter's gradient, each updated
parameter, each optimizer moment, the step count - and names the first item whose |delta|
exceeds the tolerance (2e-10).
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache

import torch

from pclab.core import ledger
from pclab.experiments.transformer.lm import artifacts, data
from pclab.experiments.transformer.lm.model import IGNORE, TinyLM, loss_sum

BRANCHES, DISTRIBUTED, OPTIMIZERS = data.BRANCHES, data.DISTRIBUTED_BRANCHES, data.OPTIMIZERS
TOLERANCE, MICROBATCHES = data.TOLERANCE, data.MICROBATCHES
SGD_LR = 0.1  # plain SGD: no momentum, no weight decay, so a fresh state is empty
PAD_ID = 0


def batch(windows, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets (4, 96): padding inputs are PAD_ID, unlabelled targets IGNORE."""
    inputs = torch.full((len(windows), data.CONTEXT), PAD_ID, dtype=torch.long)
    targets = torch.full((len(windows), data.CONTEXT), IGNORE, dtype=torch.long)
    for row, (window, count) in enumerate(zip(windows, labels, strict=True)):
        inputs[row, : window.capacity] = torch.tensor(window.chunk[:-1])
        supervised = data.supervised_targets(window, count)
        targets[row] = torch.tensor([IGNORE if t is None else t for t in supervised])
    return inputs, targets


@dataclass
class Start:
    """What every branch starts from: the step-800 weights and AdamW state (read once)."""

    weights: dict[str, torch.Tensor]
    adamw_tensors: dict[str, torch.Tensor]
    loaded: TinyLM  # holds `weights`; never trained, only copied

    @classmethod
    def from_artifacts(cls) -> Start:
        model = TinyLM()
        artifacts.weights(model)
        weights = {n: p.detach().clone() for n, p in model.named_parameters()}
        return cls(weights, artifacts.adamw_state_tensors(), model)

    def model(self) -> TinyLM:
        """A new model holding the step-800 weights (a copy: no random init to overwrite)."""
        return copy.deepcopy(self.loaded)

    def fresh(self, optimizer: str) -> tuple[Parameters, torch.optim.Optimizer]:
        """A copy of the step-800 parameters and a fresh optimizer over them, for one update.
        An update needs the parameters, not the module: copying the module for each of a
        run's two dozen updates was about a tenth of a rank's time."""
        model = Parameters(self.weights)
        if optimizer == "sgd":
            return model, torch.optim.SGD(model.parameters(), lr=SGD_LR, foreach=False)
        return model, artifacts.adamw(model, self.adamw_tensors)


class Parameters:
    """Copies of named tensors as parameters, read the way an optimizer's update reads a
    model's (`parameters`, `named_parameters`, in the model's order)."""

    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        self._named = [(n, torch.nn.Parameter(w.clone())) for n, w in weights.items()]

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return iter(self._named)

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return (p for _, p in self._named)


@cache
def shared_start() -> Start:
    """`Start.from_artifacts()`, once per process. Nothing ever writes to it (`model` copies
    the loaded model, `fresh` the weights and AdamW's state), so every update may start from it; a
    rank forked from the warm pool's zygote finds it loaded there (`worker.preload`)."""
    return Start.from_artifacts()


@dataclass
class Trace:
    """The state one branch leaves behind: what the comparison walks through."""

    status: str  # "updated", "skipped" (N = 0, coordinated) or "undefined" (0/0 mean)
    loss: float | None = None  # the objective whose gradient the branch applied
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    moments: dict[str, torch.Tensor] = field(default_factory=dict)  # "<param>.exp_avg" ...
    steps: dict[str, float] = field(default_factory=dict)
    reason: str = ""


def capture_state(model, optimizer, trace: Trace, copy: bool = True) -> Trace:
    """The parameters, moments and step counts of `model` and `optimizer` into `trace`:
    copies, or with copy=False the tensors themselves (for a model and an optimizer that are
    never stepped again; copying 300k weights and two moments was a tenth of a run)."""
    names = {id(p): n for n, p in model.named_parameters()}
    keep = (lambda t: t.detach().clone()) if copy else (lambda t: t.detach())
    trace.params = {n: keep(p) for n, p in model.named_parameters()}
    for p, state in optimizer.state.items():
        for key, value in state.items():
            if key == "step":
                trace.steps[names[id(p)]] = float(value)
            elif torch.is_tensor(value):
                trace.moments[f"{names[id(p)]}.{key}"] = keep(value)
    return trace


def _grads(model) -> dict[str, torch.Tensor]:
    """Every parameter's gradient (a parameter that got none has no entry)."""
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def single_process_outcome(branch: str, labels) -> Trace | None:
    """A single-process branch that applies no gradient, said from the counts alone: skipped
    (N = 0) or undefined (a 0/0 microbatch mean); None when it computes one."""
    if branch == "accum_microbatch_mean":
        counts = [sum(labels[w] for w in mb) for mb in MICROBATCHES]
        if 0 in counts:
            reason = f"microbatch {counts.index(0)} holds no labels: its mean is 0/0"
            return Trace("undefined", reason=reason)
    elif sum(labels) == 0:
        return Trace("skipped", reason="N = 0: coordinated skip")
    return None


def single_process_gradient(branch: str, model, inputs, targets, labels) -> Trace:
    """full_batch, accum_global_n or accum_microbatch_mean on this process alone: the
    gradient the branch applies (or why it applies none), before any update."""
    if (outcome := single_process_outcome(branch, labels)) is not None:
        return outcome
    total = sum(labels)
    counts = [sum(labels[w] for w in mb) for mb in MICROBATCHES]
    if branch == "full_batch":
        loss = loss_sum(model, inputs, targets) / total
        loss.backward()
        objective = loss.item()
    else:
        objective = 0.0
        for k, mb in enumerate(MICROBATCHES):
            rows = list(mb)
            local = loss_sum(model, inputs[rows], targets[rows])
            denominator = total if branch == "accum_global_n" else counts[k] * len(MICROBATCHES)
            (local / denominator).backward()  # gradients pile up in .grad across microsteps
            objective += local.item() / denominator
    return Trace("updated", loss=objective, grads=_grads(model))


def distributed_gradient(
    branch: str, model, inputs, targets, labels, rank: int, world: int
) -> Trace:
    """ddp_mean_of_means or ddp_pn_scale: this rank's share of the windows under DDP, and the
    gradient DDP leaves on every rank (or why there is none)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    per_rank = len(labels) // world
    rows = list(range(rank * per_rank, (rank + 1) * per_rank))
    local_count = torch.tensor([sum(labels[w] for w in rows)], dtype=torch.long)
    gathered = [torch.zeros_like(local_count) for _ in range(world)]
    dist.all_gather(gathered, local_count)  # every rank learns every count: one decision for all
    grid = [[int(c.item())] for c in gathered]
    if branch == "ddp_pn_scale":
        scale = ledger.local_loss_scale(grid, "mean")  # P / N, or None when N = 0
        if scale is None:
            return Trace("skipped", reason="N = 0 on every rank: coordinated skip")
    elif any(row[0] == 0 for row in grid):
        empty = next(r for r, row in enumerate(grid) if row[0] == 0)
        return Trace("undefined", reason=f"rank {empty} holds no labels: its local mean is 0/0")
    ddp = DDP(model, broadcast_buffers=False)
    local = loss_sum(ddp, inputs[rows], targets[rows])
    coefficient = scale if branch == "ddp_pn_scale" else 1.0 / grid[rank][0]
    (local * coefficient).backward()  # DDP all-reduces here and divides by P
    objective = (local.detach() * coefficient).reshape(1)
    dist.all_reduce(objective)  # the objective DDP's mean gradient belongs to: mean over ranks
    return Trace("updated", loss=objective.item() / world, grads=_grads(model))


def naive_zero_gradient(model, inputs, targets, labels, rank: int, world: int) -> Trace:
    """The N = 0 mistake: back-propagate a zero loss (S / max(N, 1)); `update` then steps
    on it anyway."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    per_rank = len(labels) // world
    rows = list(range(rank * per_rank, (rank + 1) * per_rank))
    total = torch.tensor([sum(labels[w] for w in rows)], dtype=torch.long)
    dist.all_reduce(total)
    ddp = DDP(model, broadcast_buffers=False)
    (loss_sum(ddp, inputs[rows], targets[rows]) / max(int(total.item()), 1)).backward()
    return Trace("naive", grads=_grads(model))


def share_gradient(gradient: Trace | None, shapes: dict[str, torch.Size], src: int) -> Trace:
    """A computed gradient (its objective and every tensor, bit for bit) sent from rank `src`,
    which passes it, to every other rank, which passes None: a single-process branch runs on
    one process, and the others read its result instead of computing it again."""
    import torch.distributed as dist

    flat = torch.empty(1 + sum(math.prod(shape) for shape in shapes.values()), dtype=torch.float64)
    if gradient is not None:
        flat[0] = gradient.loss
        torch.cat([gradient.grads[name].reshape(-1) for name in shapes], out=flat[1:])
    dist.broadcast(flat, src)
    grads, offset = {}, 1
    for name, shape in shapes.items():
        size = math.prod(shape)
        grads[name] = flat[offset : offset + size].reshape(shape).clone()
        offset += size
    return Trace("updated", loss=flat[0].item(), grads=grads)


def update(gradient: Trace, model, optimizer) -> Trace:
    """ONE optimizer step of a fresh step-800 `model` from a branch's `gradient`: the state
    the comparison walks through. A skipped branch keeps the state it started from; an
    undefined one has none. The trace holds the model's and the optimizer's own tensors:
    both are spent (never stepped again)."""
    if gradient.status == "undefined":
        return Trace("undefined", reason=gradient.reason)
    trace = Trace(gradient.status, loss=gradient.loss, grads=gradient.grads, reason=gradient.reason)
    if gradient.status != "skipped":
        for name, p in model.named_parameters():
            p.grad = gradient.grads[name].clone() if name in gradient.grads else None
        optimizer.step()
    return capture_state(model, optimizer, trace, copy=False)


def state_hash(trace: Trace) -> str | None:
    """sha256 over the bytes of every parameter, moment and step count (name order)."""
    if trace.status == "undefined":
        return None
    digest = hashlib.sha256()
    for table in (trace.params, trace.moments):
        for name in sorted(table):
            digest.update(name.encode())
            digest.update(table[name].contiguous().numpy())  # its bytes, read in place
    for name in sorted(trace.steps):
        digest.update(f"{name}={trace.steps[name]!r}".encode())
    return digest.hexdigest()


def _max_abs(a: torch.Tensor | None, b: torch.Tensor | None) -> float | None:
    """max |a - b|; None when one side does not exist (e.g. a moment the branch never made)."""
    if a is None or b is None:
        return None
    return float((a - b).abs().max()) if a.numel() else 0.0


def changed_state(before: Trace, after: Trace) -> list[str]:
    """Which kinds of state differ bit for bit: weights, each moment kind, step."""
    changed = []
    if any(not torch.equal(before.params[n], after.params[n]) for n in before.params):
        changed.append("weights")
    for key in artifacts.MOMENTS + ("momentum_buffer",):
        names = {n for n in set(before.moments) | set(after.moments) if n.endswith("." + key)}
        if any(n not in before.moments or n not in after.moments for n in names) or any(
            not torch.equal(before.moments[n], after.moments[n]) for n in names
        ):
            changed.append(key)
    if before.steps != after.steps:
        changed.append("step")
    return changed


def compare(trace: Trace, reference: Trace, tolerance: float = TOLERANCE) -> dict:
    """|delta| of the branch against the reference, and where they first part."""
    if trace.status == "undefined":
        return {
            "max_abs_diff": None,
            "max_abs_diff_state": None,
            "passed": False,
            "first_divergence": {
                "stage": "undefined",
                "tensor": None,
                "abs_diff": None,
                "detail": trace.reason,
            },
            "divergence_by_stage": {},
            "param_diffs": {},
        }
    chain: list[tuple[str, str | None, float | None]] = []
    if trace.loss is not None and reference.loss is not None:
        chain.append(("loss", None, abs(trace.loss - reference.loss)))
    elif (trace.loss is None) != (reference.loss is None):
        chain.append(("loss", None, None))  # one side skipped, the other updated
    for name in reference.grads:
        if name in trace.grads:
            chain.append(("gradient", name, _max_abs(trace.grads[name], reference.grads[name])))
    param_diffs = {n: _max_abs(trace.params.get(n), reference.params[n]) for n in reference.params}
    moment_names = list(reference.moments) + [
        n for n in trace.moments if n not in reference.moments
    ]
    moment_diffs = {
        n: _max_abs(trace.moments.get(n), reference.moments.get(n)) for n in moment_names
    }
    step_diffs = {
        n: abs(trace.steps[n] - reference.steps[n])
        if n in trace.steps and n in reference.steps
        else None
        for n in set(reference.steps) | set(trace.steps)
    }
    chain += [("parameter", n, d) for n, d in param_diffs.items()]
    chain += [("moment", n, d) for n, d in moment_diffs.items()]
    chain += [("step", n, d) for n, d in sorted(step_diffs.items())]
    diverged = [(stage, name, d) for stage, name, d in chain if d is None or not d <= tolerance]
    first = diverged[0] if diverged else None
    by_stage: dict[str, dict] = {}
    for stage, tensor, d in diverged:  # the first offender of each stage, in chain order
        by_stage.setdefault(stage, {"tensor": tensor, "abs_diff": d})
    state_diffs = [*param_diffs.values(), *moment_diffs.values(), *step_diffs.values()]
    known = [d for d in state_diffs if d is not None]
    return {
        "max_abs_diff": max(d for d in param_diffs.values() if d is not None),
        "max_abs_diff_state": max(known) if known else None,
        "passed": all(d is not None and d <= tolerance for d in state_diffs),
        "first_divergence": None
        if first is None
        else {"stage": first[0], "tensor": first[1], "abs_diff": first[2], "detail": ""},
        "divergence_by_stage": by_stage,
        "param_diffs": param_diffs,
    }
