"""The in-process checks behind section 07's coverage matrix.

A tiny next-token model - embedding E (7 x 3), head H (3 x 7), cross-entropy summed over
labelled positions - reads each scenario's sequences placed on P replicas x K microsteps.
Three float64 autograd computations in this process:

    reference  one device, every sequence in one batch: L = sum CE / N, its gradient, the
               global norm, one SGD step clipped at MAX_NORM (c = min(1, tau / n), exact).
    correct    replica r back-propagates c_rk S_rk on each microstep with c_rk = P / N from
               core.ledger.local_loss_scale; the replicas' gradients are averaged (DDP's
               mean, here an in-process mean); core.clipping.clip_report computes the global
               norm over ZeRO-style shards and the clip coefficient of the same SGD step.
    slip       the same pipeline with a wrong normalisation, written the way trainers do:
               microbatch_mean  CE mean per microbatch / K      (an empty one gives NaN)
               replica_mean     S_rk / n_r, n_r the replica's window count
               double_scaled    (P / N) S_rk / K

Each column compares one quantity with the reference: the aggregate (logged) loss, the
gradients of both layers, the global norm, the parameters after the update. Evidence goes
to core.coverage. The collective is arithmetic here; the real Gloo runs live in runners/.

Run: python -c "from pclab.core.coverage_checks import *; print(run_checks().evidence[0])"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import torch

from pclab.core import clipping, coverage, ledger
from pclab.core import validation as v
from pclab.core.limits import DTYPE, bounded_count, max_abs_diff, seeded_generator

VOCAB, DIM, PAD, IGNORE, REPEAT_TOKEN = 7, 3, 0, -100, 3
LR, MAX_NORM, TOLERANCE = 0.5, 0.3, 1e-12
SLIPS = ("microbatch_mean", "replica_mean", "double_scaled")
REPEATED = {"repeated_tokens"}
Batch = tuple[torch.Tensor, torch.Tensor]  # (inputs, labels) of one microbatch
Params = Sequence[torch.Tensor]  # (embedding, head)
# row -> [replica][microstep] -> sequences (tokens, masked prompt labels). A sequence of
# L tokens has L - 1 next-token labels; the first `prompt` of them are masked.
SCENARIOS = {
    "unequal_lengths": [[[(4, 1), (3, 0)]], [[(12, 2), (9, 0)]]],
    "empty_label_replica": [[[(6, 1), (8, 0)]], [[(7, 6)]]],
    "tail_batch": [[[(5, 0)], [(6, 1)]], [[(9, 2)], []]],  # the epoch's last, short batch
    "repeated_tokens": [[[(5, 0)], [(5, 0)]], [[(5, 0)], [(5, 0)]]],  # equal counts
    "non_divisible": [[[(6, 0), (6, 0), (6, 0)]], [[(6, 0), (6, 0)]]],  # 5 sequences over 2
    "accumulation_window": [[[(4, 0)], [(7, 1)], [(10, 0)], [(3, 0)]]],
}


def _batch(seqs: list[torch.Tensor], prompts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad sequences into next-token inputs and labels; prompt and padding labels are IGNORE."""
    width = max((len(s) - 1 for s in seqs), default=1)
    inputs = torch.full((len(seqs), width), PAD)
    labels = torch.full((len(seqs), width), IGNORE)
    for i, (tokens, prompt) in enumerate(zip(seqs, prompts, strict=True)):
        inputs[i, : len(tokens) - 1] = tokens[:-1]
        labels[i, prompt : len(tokens) - 1] = tokens[1 + prompt :]
    return inputs, labels


def scenario_batches(row: str, seed: int = 0) -> list[list[Batch]]:
    """[replica][microstep] -> (inputs, labels) for a scenario, tokens drawn from `seed`."""
    row = v.choice(row, "row", tuple(SCENARIOS))
    gen = seeded_generator(seed)
    out = []
    for replica in SCENARIOS[row]:
        steps: list[Batch] = []
        for micro in replica:
            seqs = [torch.randint(1, VOCAB, (length,), generator=gen) for length, _ in micro]
            if row in REPEATED:
                for tokens in seqs:
                    tokens[::2] = REPEAT_TOKEN  # the same token at every other position
            steps.append(_batch(seqs, [prompt for _, prompt in micro]))
        out.append(steps)
    return out


def _model(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = seeded_generator(seed + 1)
    return 0.5 * torch.randn(VOCAB, DIM, generator=gen, dtype=DTYPE), 0.5 * torch.randn(
        DIM, VOCAB, generator=gen, dtype=DTYPE
    )


def _ce(params: Params, inputs: torch.Tensor, labels: torch.Tensor, reduction: str) -> torch.Tensor:
    embed, head = params
    logits = (embed[inputs] @ head).reshape(-1, VOCAB)
    return torch.nn.functional.cross_entropy(
        logits, labels.reshape(-1), ignore_index=IGNORE, reduction=reduction
    )


def _step(params: Params, grads: torch.Tensor, coefficient: float | None) -> torch.Tensor:
    """Flattened parameters after SGD with the clipped gradient; a skip leaves them as they are."""
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    if coefficient is None:
        return flat
    return flat - LR * coefficient * grads


class Measured(TypedDict):
    """One pipeline's figures, one per coverage column."""

    loss: float
    grads: torch.Tensor
    norm: float | None
    params: torch.Tensor


class SplitRun(Measured):
    counts: list[list[int]]  # [replica][microstep] valid labels


def _figures(m: Measured) -> tuple[torch.Tensor | float | None, ...]:
    """The figures in coverage.COLUMNS order."""
    return m["loss"], m["grads"], m["norm"], m["params"]


def _reference(params0: Params, batches: Sequence[Sequence[Batch]]) -> Measured:
    params = [p.clone().requires_grad_(True) for p in params0]
    every = [b for replica in batches for b in replica if b[0].numel()]
    inputs = _batch_all(every)
    count = int((inputs[1] != IGNORE).sum())
    loss = _ce(params, *inputs, "sum") / count
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in params])
    norm = float(torch.linalg.vector_norm(grads))
    coefficient = 1.0 if norm == 0 else min(1.0, MAX_NORM / norm)
    return Measured(
        loss=float(loss.detach()),
        grads=grads,
        norm=norm,
        params=_step(params, grads, coefficient),
    )


def _batch_all(parts: Sequence[Batch]) -> Batch:
    """Concatenate padded microbatches into one padded batch (wider padding is inert)."""
    width = max(p[0].shape[1] for p in parts)

    def pad(t: torch.Tensor, fill: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=fill)

    return torch.cat([pad(p[0], PAD) for p in parts]), torch.cat([pad(p[1], IGNORE) for p in parts])


def _split(params0: Params, batches: Sequence[Sequence[Batch]], scheme: str) -> SplitRun:
    counts = [[int((labels != IGNORE).sum()) for _, labels in replica] for replica in batches]
    replicas, steps = len(counts), len(counts[0])
    scale = ledger.local_loss_scale(counts, "mean")  # P / N: the lab's coefficient under test
    replica_grads, logged = [], []
    for r, replica in enumerate(batches):
        params = [p.clone().requires_grad_(True) for p in params0]
        total = torch.zeros((), dtype=DTYPE)
        for inputs, labels in replica:
            if scheme == "microbatch_mean":
                loss = _ce(params, inputs, labels, "mean") / steps
            elif scheme == "replica_mean":
                loss = _ce(params, inputs, labels, "sum") / torch.tensor(
                    float(sum(counts[r])), dtype=DTYPE
                )
            else:
                loss = (
                    scale
                    * _ce(params, inputs, labels, "sum")
                    / (steps if scheme == "double_scaled" else 1)
                )
            if loss.requires_grad:
                loss.backward()
            total = total + loss.detach()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        replica_grads.append(torch.cat([g.reshape(-1) for g in grads]))
        logged.append(total)
    grads = torch.stack(replica_grads).mean(0)  # DDP: mean over replicas
    shards = np.array_split(np.arange(grads.numel()), replicas)  # rank r owns shard r
    report = clipping.clip_report(
        [{f"p{i}": float(grads[i]) for i in shard} for shard in shards], MAX_NORM
    )
    return SplitRun(
        loss=float(torch.stack(logged).mean()),
        grads=grads,
        norm=report.global_norm,
        params=_step(params0, grads, report.coefficient),
        counts=counts,
    )


def _gap(
    ref: torch.Tensor | float | None, got: torch.Tensor | float | None
) -> tuple[float | None, float]:
    """(max |got - ref| or None when not finite, tolerance TOLERANCE * max(1, |ref|))."""
    diff: float | None
    if isinstance(ref, torch.Tensor):
        diff, scale = max_abs_diff(got, ref), float(ref.abs().max())
    else:
        assert ref is not None, "the reference defines every figure"
        diff, scale = (None if got is None else abs(got - ref)), abs(ref)
    finite = diff is not None and np.isfinite(diff)
    return (diff if finite else None), TOLERANCE * max(1.0, scale)


@dataclass(frozen=True)
class CheckRun:
    slip: str
    seed: int
    evidence: tuple[coverage.Evidence, ...]
    details: tuple[ScenarioDetail, ...]  # per row


class ScenarioDetail(TypedDict):
    row: str
    counts: list[list[int]]
    num_valid_labels: int  # N
    replicas: int  # P
    accum_steps: int  # K
    reference_loss: float
    reference_norm: float | None
    slip_loss: float | None  # None where the slip's loss is not finite


def run_checks(
    slip: str = "microbatch_mean", seed: int = 0, rows: Iterable[str] = tuple(SCENARIOS)
) -> CheckRun:
    """Run every scenario three ways and measure each column's gap to the reference.

    Args: slip one of SLIPS; seed >= 0 (tokens and weights); rows a subset of the scenarios.
    Returns: a CheckRun whose `evidence` feeds core.coverage.coverage_matrix.
    """
    slip = v.choice(slip, "slip", SLIPS)
    seed = bounded_count(seed, "seed", 0, 2**31 - 2)
    names = tuple(v.choice(row, "rows", tuple(SCENARIOS)) for row in rows)
    params0 = _model(seed)
    evidence: list[coverage.Evidence] = []
    details: list[ScenarioDetail] = []
    for row in names:
        batches = scenario_batches(row, seed)
        ref, good, bad = (
            _reference(params0, batches),
            _split(params0, batches, "correct"),
            _split(params0, batches, slip),
        )
        figures = zip(coverage.COLUMNS, _figures(ref), _figures(good), _figures(bad), strict=True)
        for column, ref_figure, good_figure, bad_figure in figures:
            correct_diff, tol = _gap(ref_figure, good_figure)
            slip_diff, _ = _gap(ref_figure, bad_figure)
            evidence.append(
                coverage.Evidence(row, column, "in_process", correct_diff, tol, slip_diff, True)
            )
        counts = good["counts"]
        details.append(
            ScenarioDetail(
                row=row,
                counts=counts,
                num_valid_labels=sum(map(sum, counts)),
                replicas=len(counts),
                accum_steps=len(counts[0]),
                reference_loss=ref["loss"],
                reference_norm=ref["norm"],
                slip_loss=bad["loss"] if np.isfinite(bad["loss"]) else None,
            )
        )
    return CheckRun(slip, seed, tuple(evidence), tuple(details))
