"""Equivalence limit 3 (section 04): the same non-linear processing. Clipping the summed
gradient of an accumulation window is not the sum of the clipped microstep gradients.

    >>> clip_split(4, 3, 1.0).difference > 0
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pclab.core import validation as v
from pclab.core.limits import (
    DTYPE,
    MAX_ELEMENTS,
    Row,
    bounded_count,
    max_abs_diff,
    seeded_generator,
    tensor,
)


def clip_vector(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """g * c with c = 1 if |g| = 0 else min(1, tau / |g|) (the exact rule, no epsilon);
    g finite, tau >= 0."""
    g, max_norm = tensor(g, "g"), v.non_negative(max_norm, "max_norm")
    norm = v.finite_result(float(torch.linalg.vector_norm(g)), "g", g)  # a norm beyond float64
    return g if norm == 0 else g * min(1.0, max_norm / norm)


def microstep_grads(accum_steps: int, dim: int, seed: int = 0) -> torch.Tensor:
    """K seeded microstep gradient contributions (K, dim) sharing a drift; K * dim <= 100000."""
    accum_steps = bounded_count(accum_steps, "accum_steps", 1, MAX_ELEMENTS)
    dim, gen = bounded_count(dim, "dim", 1, MAX_ELEMENTS // accum_steps), seeded_generator(seed)
    drift = torch.randn(dim, generator=gen, dtype=DTYPE)
    return 0.5 * drift + torch.randn(accum_steps, dim, generator=gen, dtype=DTYPE)


@dataclass(frozen=True)
class ClipSplit:
    grads: tuple[tuple[float, ...], ...]  # g_k, one row per microstep
    clip_of_sum: tuple[float, ...]  # clip(sum_k g_k): the large batch's update direction
    sum_of_clips: tuple[float, ...]  # sum_k clip(g_k): clipping inside the window
    rows: tuple[Row, ...]  # per variant: norm, gap to clip(sum), cosine to clip(sum)
    difference: float  # max |clip(sum g) - sum clip(g)|


def clip_split(
    accum_steps: int = 4, dim: int = 3, max_norm: float = 1.0, seed: int = 0
) -> ClipSplit:
    """clip(sum_k g_k) against sum_k clip(g_k) for K microstep gradients.

    The accumulated gradient is sum_k g_k (each g_k already carries its n_k / N share).
    Clipping is not linear: with any clipping active the two differ in norm (the second
    can reach K tau) and in direction. Equal when no clipping is active anywhere.

    Args: accum_steps K in 1..64, dim in 1..64, max_norm tau finite >= 0, seed >= 0.
    """
    steps = bounded_count(accum_steps, "accum_steps", 1, 64)
    dim = bounded_count(dim, "dim", 1, 64)
    tau = v.non_negative(max_norm, "max_norm")
    grads = microstep_grads(steps, dim, seed)
    total = grads.sum(0)
    variants = {
        "unclipped_sum": total,
        "clip_of_sum": clip_vector(total, tau),
        "sum_of_clips": torch.stack([clip_vector(g, tau) for g in grads]).sum(0),
    }
    ref = variants["clip_of_sum"]

    def cosine(g: torch.Tensor) -> float | None:
        denom = float(torch.linalg.vector_norm(g) * torch.linalg.vector_norm(ref))
        return None if denom == 0 else max(-1.0, min(1.0, float(g.dot(ref)) / denom))

    rows: tuple[Row, ...] = tuple(
        {
            "variant": name,
            "norm": float(torch.linalg.vector_norm(g)),
            "max_diff": max_abs_diff(g, ref),
            "cosine": cosine(g),
        }
        for name, g in variants.items()
    )
    return ClipSplit(
        tuple(tuple(g.tolist()) for g in grads),
        tuple(ref.tolist()),
        tuple(variants["sum_of_clips"].tolist()),
        rows,
        rows[2]["max_diff"],
    )
