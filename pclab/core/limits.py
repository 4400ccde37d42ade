"""Section 04: when gradient accumulation equals one large batch, shown with numbers.

Accumulating K microbatches reproduces one large-batch update only under four conditions:

    1 the same additive objective       parameters fixed inside the window, each term once
    2 the same forward semantics        no sample's output depends on its microbatch
    3 the same non-linear processing    clip and step the accumulated gradient, once
    4 the same numeric/random trajectory summation order, dropout's random stream

Each demonstration runs one small float64 torch computation twice - as one batch and split
into microbatches - and measures the difference. This module holds the window update
(condition 1), BatchNorm (2) and clipping (3); `core.gradcache` holds in-batch negatives
(2) and `core.trajectory` condition 4. Every result carries `rows`: one dict per variant
with a language-neutral `variant` code, and `difference`: the headline measured gap.

Run: python -c "from pclab.core.limits import *; print(window_update().rows)"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pclab.core import validation as v

DTYPE = torch.float64
FEATURES = 3
WINDOW_VARIANTS = ("large_batch", "accumulate", "step_inside", "reg_every_microstep")
NORM_VARIANTS = ("batchnorm_train", "batchnorm_eval", "layernorm")
MAX_ELEMENTS = 100_000  # the most samples (or elements) a data helper builds: the pages use <= 8192


def bounded_count(value: object, field: str, low: int, high: int) -> int:
    """A whole number in low..high; ValueError naming the value otherwise."""
    n = v.count(value, field)
    if not low <= n <= high:
        raise v.InvalidInput(field, value, "in_range", f"{low}..{high}")
    return n


def tensor(value: object, field: str) -> torch.Tensor:
    """`value` itself when it is a torch tensor with finite entries; TypeError when not a tensor."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{field}={value!r} is not a torch tensor")
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise v.InvalidInput(field, value, "finite")
    return value


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over every element (0 for empty tensors); a and b finite, of one shape."""
    if tensor(a, "a").shape != tensor(b, "b").shape:
        raise v.InvalidInput("b", tuple(b.shape), "same_shape", str(tuple(a.shape)))
    return v.finite_result(float((a - b).abs().max()), "a - b", (a, b)) if a.numel() else 0.0


def seeded_generator(seed: object) -> torch.Generator:
    """A CPU generator seeded with `seed` (a whole number in 0..2^31-1); global RNG untouched."""
    return torch.Generator().manual_seed(bounded_count(seed, "seed", 0, 2**31 - 1))


# ---------------------------------------------------------------- 1 the same additive objective


def regression_data(
    num_samples: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs x (n, 3), targets y and a non-zero start w0 for least squares (n <= 100000)."""
    num_samples, gen = (
        bounded_count(num_samples, "num_samples", 1, MAX_ELEMENTS),
        seeded_generator(seed),
    )
    x = torch.randn(num_samples, FEATURES, generator=gen, dtype=DTYPE)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE) + 0.3 * torch.randn(
        num_samples, generator=gen, dtype=DTYPE
    )
    w0 = torch.randn(FEATURES, generator=gen, dtype=DTYPE)
    return x, y, w0


Row = dict[str, Any]  # one table row: a language-neutral `variant` code and its figures


@dataclass(frozen=True)
class WindowUpdate:
    accum_steps: int
    params: dict[str, tuple[float, ...]]  # variant -> w after the window
    max_param_diff: dict[str, float]  # variant -> max |w - w_large_batch|
    objective_after: dict[str, float]  # variant -> L(w) of the whole window after it
    rows: tuple[Row, ...]
    difference: float  # the step-inside variant's gap


def window_update(
    accum_steps: int = 4,
    microbatch_size: int = 4,
    lr: float = 0.1,
    reg: float = 0.05,
    seed: int = 0,
) -> WindowUpdate:
    """One SGD update over K microbatches, done right and with the two additive-objective slips.

        L(w) = (1/N) sum_b 1/2 (x_b . w - y_b)^2 + lambda/2 |w|^2,   N = K * microbatch_size

    large_batch: one backward of L. accumulate: backward of S_k / N per microbatch, the
    regulariser once, one optimizer.step() - equal to large_batch. step_inside: the same
    terms but optimizer.step() after every microbatch, so later microbatches see moved
    parameters. reg_every_microstep: lambda R added on all K microsteps, K times too strong.

    Args: accum_steps K in 1..32, microbatch_size in 1..256, lr and reg finite >= 0
        (lr > 0), seed >= 0.
    Returns: a WindowUpdate; `difference` is the step-inside variant's max parameter gap.
    """
    steps = bounded_count(accum_steps, "accum_steps", 1, 32)
    size = bounded_count(microbatch_size, "microbatch_size", 1, 256)
    lr, reg = v.positive(lr, "lr"), v.non_negative(reg, "reg")
    x, y, w0 = regression_data(steps * size, seed)
    n = steps * size

    def run(parts: int, step_inside: bool, reg_each: bool) -> torch.Tensor:
        w = w0.clone().requires_grad_(True)
        opt = torch.optim.SGD([w], lr=lr)
        for k, (xk, yk) in enumerate(
            zip(x.tensor_split(parts), y.tensor_split(parts), strict=True)
        ):
            loss = 0.5 * ((xk @ w - yk) ** 2).sum() / n  # S_k / N: the additive share
            if reg_each or k == 0:
                loss = loss + 0.5 * reg * w.dot(w)
            loss.backward()
            if step_inside:
                opt.step()
                opt.zero_grad()
        if not step_inside:
            opt.step()
        return w.detach()

    def objective(w: torch.Tensor) -> float:
        return float(0.5 * ((x @ w - y) ** 2).mean() + 0.5 * reg * w.dot(w))

    results = {
        "large_batch": run(1, False, False),
        "accumulate": run(steps, False, False),
        "step_inside": run(steps, True, False),
        "reg_every_microstep": run(steps, False, True),
    }
    after = {name: objective(w) for name, w in results.items()}
    for x in (*after.values(), *(float(w.abs().max()) for w in results.values())):
        v.finite_result(x, "lr, reg", (lr, reg))  # a huge rate overflows the step or the loss
    gaps = {name: max_abs_diff(w, results["large_batch"]) for name, w in results.items()}
    rows: tuple[Row, ...] = tuple(
        {"variant": name, "max_param_diff": gaps[name], "objective_after": after[name]}
        for name in WINDOW_VARIANTS
    )
    return WindowUpdate(
        steps,
        {k: tuple(w.tolist()) for k, w in results.items()},
        gaps,
        after,
        rows,
        gaps["step_inside"],
    )


# ---------------------------------------------------------------- 2 the same forward semantics


def norm_data(batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch x (B, 3) with a shifted mean, targets, affine weight/bias and a linear head
    (B <= 100000)."""
    batch_size, gen = (
        bounded_count(batch_size, "batch_size", 1, MAX_ELEMENTS),
        seeded_generator(seed),
    )
    scale = torch.tensor([1.0, 2.0, 0.5], dtype=DTYPE)
    x = torch.randn(batch_size, FEATURES, generator=gen, dtype=DTYPE) * scale + 1.5
    return {
        "x": x,
        "targets": torch.randn(batch_size, generator=gen, dtype=DTYPE),
        "weight": 1 + 0.3 * torch.randn(FEATURES, generator=gen, dtype=DTYPE),
        "bias": 0.3 * torch.randn(FEATURES, generator=gen, dtype=DTYPE),
        "head": torch.randn(FEATURES, generator=gen, dtype=DTYPE),
    }


@dataclass(frozen=True)
class NormSplit:
    accum_steps: int
    pred_full: tuple[float, ...]  # BatchNorm (training) over the whole batch, per sample
    pred_split: tuple[float, ...]  # BatchNorm (training) per microbatch
    running_mean_full: tuple[float, ...]
    running_mean_split: tuple[float, ...]
    running_mean_diff: float  # max gap of BatchNorm's running mean after the window
    rows: tuple[Row, ...]  # per variant: output, loss and gradient gaps
    difference: float  # BatchNorm (training): max gradient gap


def batchnorm_split(batch_size: int = 8, accum_steps: int = 2, seed: int = 0) -> NormSplit:
    """One batch vs K microbatches through a normalisation layer and a linear head.

        pred_b = head . norm(x)_b,   L = (1/B) sum_b 1/2 (pred_b - t_b)^2

    Each microbatch back-propagates its loss sum / B, so the objective is additive; only
    the normalisation's statistics change. BatchNorm in training mode normalises by the
    microbatch's own mean and biased variance, so every output changes; in eval mode
    (fixed running statistics) and LayerNorm (per-sample statistics) nothing does.

    Args: batch_size B in 2..256; accum_steps K with at least 2 samples per microbatch
        (BatchNorm needs two to estimate a variance); seed >= 0.
    Returns: a NormSplit; `difference` is BatchNorm's max gradient gap over its weight,
        bias and the head.
    """
    size = bounded_count(batch_size, "batch_size", 2, 256)
    steps = bounded_count(accum_steps, "accum_steps", 1, max(1, size // 2))
    data = norm_data(size, seed)

    def layer(kind: str) -> torch.nn.Module:
        module = (
            torch.nn.LayerNorm(FEATURES) if kind == "layernorm" else torch.nn.BatchNorm1d(FEATURES)
        )
        module = module.to(DTYPE)
        with torch.no_grad():
            module.weight.copy_(data["weight"])
            module.bias.copy_(data["bias"])
        return module.eval() if kind == "batchnorm_eval" else module.train()

    def run(kind: str, parts: int) -> dict[str, torch.Tensor]:
        norm, head = layer(kind), data["head"].clone().requires_grad_(True)
        preds, total = [], 0.0
        for xk, tk in zip(
            data["x"].tensor_split(parts), data["targets"].tensor_split(parts), strict=True
        ):
            pred = norm(xk) @ head
            loss = 0.5 * ((pred - tk) ** 2).sum() / size
            loss.backward()
            preds.append(pred.detach())
            total += float(loss.detach())
        grads = torch.cat([norm.weight.grad, norm.bias.grad, head.grad])
        running = getattr(norm, "running_mean", None)
        return {
            "pred": torch.cat(preds),
            "loss": torch.tensor(total),
            "grad": grads,
            "running": running,
        }

    rows: list[Row] = []
    runs = {}
    for kind in NORM_VARIANTS:
        full, split = run(kind, 1), run(kind, steps)
        runs[kind] = (full, split)
        rows.append(
            {
                "variant": kind,
                "max_output_diff": max_abs_diff(full["pred"], split["pred"]),
                "loss_diff": abs(float(full["loss"] - split["loss"])),
                "max_grad_diff": max_abs_diff(full["grad"], split["grad"]),
            }
        )
    full, split = runs["batchnorm_train"]
    pred_full, pred_split, mean_full, mean_split = (
        tuple(t.tolist()) for t in (full["pred"], split["pred"], full["running"], split["running"])
    )
    gap = max_abs_diff(full["running"], split["running"])
    return NormSplit(
        steps,
        pred_full,
        pred_split,
        mean_full,
        mean_split,
        gap,
        tuple(rows),
        rows[0]["max_grad_diff"],
    )
