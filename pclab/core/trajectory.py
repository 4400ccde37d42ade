"""Section 04, condition 4: the same numeric and random trajectory.

Mathematical equivalence is not bit equality. Floating-point addition is not associative,
so the same numbers summed in another order (per replica then across replicas, pairwise,
sorted) round differently; and dropout draws its mask from a random stream whose
consumption depends on how the batch was cut into calls. Both demonstrations measure how
far the split computation lands from the one-batch computation.

Run: python -c "from pclab.core.trajectory import *; print(summation_order().rows)"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from pclab.core import validation as v
from pclab.core.limits import DTYPE, Row, bounded_count, max_abs_diff, seeded_generator

SUM_ORDERS = (
    "sequential",
    "reversed",
    "ascending_magnitude",
    "replica_partials",
    "pairwise",
    "torch_sum",
)
DROPOUT_VARIANTS = (
    "continued_stream",
    "reseeded_each_microstep",
    "seed_per_rank",
    "per_sample_seed",
)
LAYERS = 2  # two dropout layers: the split interleaves their draws


def summands(count: int, seed: int = 0) -> np.ndarray:
    """`count` float32 values of mixed sign spanning eight decades (seeded); count in 1..200000."""
    count, gen = bounded_count(count, "count", 1, 200_000), seeded_generator(seed)
    mantissa = torch.randn(count, generator=gen, dtype=DTYPE)
    exponent = torch.empty(count, dtype=DTYPE).uniform_(-4.0, 4.0, generator=gen)
    values: np.ndarray = (mantissa * 10.0**exponent).to(torch.float32).numpy()
    return values


def sequential_sum(values: np.ndarray) -> float:
    """Left-to-right sum rounded to float32 after every addition (numpy's accumulate).

    values: a non-empty 1-D numpy array of finite real numbers; a sum beyond float32 is refused.
    """
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "fiu":
        raise TypeError(f"values={values!r} is not a numpy array of real numbers")
    if values.ndim != 1 or not values.size:
        raise v.InvalidInput("values", values, "non_empty", "a 1-D array")
    if not np.isfinite(values).all():
        raise v.InvalidInput("values", values, "finite")
    return v.finite_result(float(np.add.accumulate(values, dtype=np.float32)[-1]), "values", values)


@dataclass(frozen=True)
class SummationOrder:
    count: int
    exact: float  # math.fsum of the float32 values: correctly rounded
    float64: float  # the sequential order accumulated in float64
    sums: dict[str, float]  # order -> float32 result
    distinct_results: int  # how many different float32 values the orders produced
    rows: tuple[Row, ...]  # per order: value, error vs exact, bit pattern (float64 row: 64 bits)
    difference: float  # largest minus smallest float32 result


def summation_order(count: int = 10_000, replicas: int = 4, seed: int = 0) -> SummationOrder:
    """The same float32 numbers summed in several orders, against the exact sum.

        error(order) = sum_order(x) - fsum(x),   |error| <= (n-1) u sum|x_i| + O(u^2),
        u = 2^-24 in float32, 2^-53 in float64.

    Orders: sequential, reversed, ascending by magnitude, `replica_partials` (P contiguous
    shards summed locally, then the P partials summed - what an all-reduce of partial sums
    does), numpy's pairwise `np.sum`, and torch's vectorised `torch.sum`.

    Args: count n in 2..200000, replicas P in 1..min(64, n), seed >= 0.
    """
    n = bounded_count(count, "count", 2, 200_000)
    replicas = bounded_count(replicas, "replicas", 1, min(64, n))
    x = summands(n, seed)
    exact = math.fsum(x.tolist())
    partials = np.array(
        [sequential_sum(shard) for shard in np.array_split(x, replicas)], dtype=np.float32
    )
    sums = {
        "sequential": sequential_sum(x),
        "reversed": sequential_sum(x[::-1]),
        "ascending_magnitude": sequential_sum(x[np.argsort(np.abs(x), kind="stable")]),
        "replica_partials": sequential_sum(partials),
        "pairwise": float(np.sum(x, dtype=np.float32)),
        "torch_sum": float(torch.from_numpy(x).sum()),
    }
    float64 = float(np.add.accumulate(x.astype(np.float64))[-1])
    rows: list[Row] = [
        {
            "variant": name,
            "value": s,
            "error": s - exact,
            "bits": f"0x{np.float32(s).view(np.uint32):08x}",
        }
        for name, s in sums.items()
    ]
    bits64 = f"0x{np.float64(float64).view(np.uint64):016x}"
    rows.append({"variant": "float64", "value": float64, "error": float64 - exact, "bits": bits64})
    values = list(sums.values())
    return SummationOrder(
        n, exact, float64, sums, len(set(values)), tuple(rows), max(values) - min(values)
    )


# ---------------------------------------------------------------- dropout's random stream


def _probability(p: object) -> float:
    """A dropout probability: finite, 0 <= p < 1."""
    p = v.non_negative(p, "p")
    if p >= 1:
        raise v.InvalidInput("p", p, "in_range", "0 <= p < 1")
    return p


def _features(features: object, rows: int) -> int:
    """At most 100000 mask elements in all."""
    return bounded_count(features, "features", 1, 100_000 // rows)


def dropout_mask(rows: int, features: int, p: float) -> torch.Tensor:
    """0/1 mask of one real `F.dropout` call on the global stream (scale removed).

    Args: rows in 1..100000, features with rows * features <= 100000, p in [0, 1).
    """
    rows = bounded_count(rows, "rows", 1, 100_000)
    features, p = _features(features, rows), _probability(p)
    kept = torch.nn.functional.dropout(torch.ones(rows, features, dtype=DTYPE), p, training=True)
    return (kept != 0).to(DTYPE)


def sample_masks(sample: int, features: int, p: float, seed: int) -> torch.Tensor:
    """Both layers' masks (2, features) keyed on the sample's identity: generator seed + sample.

    Args: sample >= 0 and seed >= 0 with seed + sample <= 2^31-1, features in 1..50000, p in [0, 1).
    """
    sample = bounded_count(sample, "sample", 0, 2**31 - 1)
    seed = bounded_count(seed, "seed", 0, 2**31 - 1 - sample)
    features, p = _features(features, LAYERS), _probability(p)
    gen = torch.Generator().manual_seed(seed + sample)
    return torch.empty(LAYERS, features, dtype=DTYPE).bernoulli_(1 - p, generator=gen)


def _stream_masks(
    parts: list[int], features: int, p: float, seed: int, reseed: str
) -> torch.Tensor:
    """(2, B, F) masks a forward pass draws, microbatch by microbatch, layer by layer.

    reseed: "once" (seed before the first microbatch), "every" (the same seed before each
    microbatch) or "rank" (microbatch k seeded seed + k, like DDP ranks seeded by rank).
    """
    with torch.random.fork_rng(devices=[]):  # leave the caller's global stream untouched
        torch.manual_seed(seed)
        chunks = []
        for k, n in enumerate(parts):
            if reseed != "once":
                torch.manual_seed(seed + (k if reseed == "rank" else 0))
            chunks.append(torch.stack([dropout_mask(n, features, p) for _ in range(LAYERS)]))
    return torch.cat(chunks, dim=1)


@dataclass(frozen=True)
class DropoutSplit:
    mask_one_batch: tuple[tuple[tuple[float, ...], ...], ...]  # [layer][sample][feature], one batch
    masks: dict[str, tuple[tuple[tuple[float, ...], ...], ...]]  # variant -> the split's masks
    rows: tuple[Row, ...]  # per variant: mismatched mask fraction, gradient gap
    difference: float  # continued stream: max gradient gap to the one-batch computation


def dropout_split(
    batch_size: int = 8, accum_steps: int = 2, p: float = 0.5, seed: int = 0, features: int = 4
) -> DropoutSplit:
    """Two dropout layers' masks and gradients: one batch vs K microbatches.

        h = dropout(x W1),   y = dropout(h W2),   L = (1/B) sum_b |y_b|^2

    One batch draws layer 1's mask for all B samples, then layer 2's. Split, the stream is
    consumed microbatch by microbatch (layer 1, layer 2, next microbatch ...):
    continued_stream seeds once; reseeded_each_microstep resets the same seed before every
    microbatch (a replay slip: microbatches repeat each other's masks); seed_per_rank seeds
    microbatch k with seed + k, as replicas seeded by rank do. per_sample_seed draws each
    sample's masks from its own generator (seed + sample index) in the batch and in the
    split alike, so the split cannot change them. The global random state is restored.

    Args: batch_size B in 1..256, accum_steps K in 1..B, p in [0, 1), seed in
        0..2^31-1-B, features in 1..64.
    """
    size = bounded_count(batch_size, "batch_size", 1, 256)
    steps = bounded_count(accum_steps, "accum_steps", 1, size)
    features = bounded_count(features, "features", 1, 64)
    seed, p = bounded_count(seed, "seed", 0, 2**31 - 1 - size), _probability(p)
    gen = seeded_generator(seed)
    x = torch.randn(size, features, generator=gen, dtype=DTYPE)
    weights = torch.randn(LAYERS, features, features, generator=gen, dtype=DTYPE) / math.sqrt(
        features
    )
    parts = [len(c) for c in x.tensor_split(steps)]

    def grad_with(masks: torch.Tensor, pieces: int) -> torch.Tensor:
        w = weights.clone().requires_grad_(True)
        chunks = zip(
            x.tensor_split(pieces), masks[0].tensor_split(pieces), masks[1].tensor_split(pieces)
        )
        for xk, m1, m2 in chunks:
            h = (xk @ w[0]) * m1 / (1 - p)
            y = (h @ w[1]) * m2 / (1 - p)
            (y**2).sum().div(size).backward()  # the additive share of L
        return w.grad

    reference = _stream_masks([size], features, p, seed, "once")
    per_sample = torch.stack([sample_masks(i, features, p, seed) for i in range(size)], dim=1)
    masks = {
        "continued_stream": _stream_masks(parts, features, p, seed, "once"),
        "reseeded_each_microstep": _stream_masks(parts, features, p, seed, "every"),
        "seed_per_rank": _stream_masks(parts, features, p, seed, "rank"),
        "per_sample_seed": per_sample,
    }
    rows: list[Row] = []
    for name in DROPOUT_VARIANTS:
        baseline = per_sample if name == "per_sample_seed" else reference  # same rule, one batch
        rows.append(
            {
                "variant": name,
                "mask_mismatch": float((masks[name] != baseline).to(DTYPE).mean()),
                "max_grad_diff": max_abs_diff(
                    grad_with(masks[name], steps), grad_with(baseline, 1)
                ),
            }
        )

    def as_tuple(m: torch.Tensor) -> tuple[tuple[tuple[float, ...], ...], ...]:
        return tuple(tuple(tuple(r) for r in layer) for layer in m.tolist())

    return DropoutSplit(
        as_tuple(reference),
        {k: as_tuple(m) for k, m in masks.items()},
        tuple(rows),
        rows[0]["max_grad_diff"],
    )
