"""What each rank really consumes per epoch under torch's DistributedSampler (section 07).

`torch.utils.data.DistributedSampler` gives every rank the same number of samples,
ceil(n / P). With drop_last=False it pads the shuffled index list by repeating its head
until it divides by P; with drop_last=True it cuts the tail instead. Rank r then takes
every P-th entry starting at r. So an epoch can count some samples twice (or drop them),
and the tokens actually consumed differ from the dataset's. The real sampler is used here
(no process group is needed when num_replicas and rank are given).

Samples have deterministic lengths (a generator seeded with LENGTH_SEED), so changing the
shuffle seed reorders one fixed dataset.

Run: python -c "from pclab.core.sampler import *; print(sampler_epoch(10, 4, 0).rows)"
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TypedDict

import torch
from torch.utils.data import DistributedSampler

from pclab.core import validation as v
from pclab.core.limits import bounded_count

LENGTH_SEED = 11
MIN_TOKENS, MAX_TOKENS = 16, 96  # sample lengths, like the seed's 96-token windows


def sample_lengths(dataset_size: int) -> tuple[int, ...]:
    """Token length of every sample: uniform in 16..96, fixed seed (n in 1..100000)."""
    dataset_size = bounded_count(dataset_size, "dataset_size", 1, 100_000)
    gen = torch.Generator().manual_seed(LENGTH_SEED)
    return tuple(torch.randint(MIN_TOKENS, MAX_TOKENS + 1, (dataset_size,), generator=gen).tolist())


class RankRow(TypedDict):
    """One rank's epoch: samples, repeats, tokens, share of the dataset's tokens."""

    rank: int
    samples: int
    repeats: int
    tokens: int
    token_share: float
    indices: tuple[int, ...]


@dataclass(frozen=True)
class SamplerEpoch:
    dataset_size: int
    world_size: int
    dataset_tokens: int
    even_share_tokens: float  # dataset tokens / P: each rank's share without padding
    indices: tuple[tuple[int, ...], ...]  # per rank, in the order the rank reads them
    consumed_samples: int  # sum over ranks
    consumed_tokens: int
    extra_tokens: int  # consumed - dataset tokens (negative when drop_last cuts samples)
    distinct_samples: int  # dataset samples seen at least once
    repeated_entries: int  # entries beyond a sample's first appearance (padding)
    dropped_samples: int  # dataset samples never seen (drop_last=True)
    times_seen: dict[int, int]  # how many samples were seen 0, 1, 2, ... times
    rows: tuple[RankRow, ...]  # per rank


def sampler_epoch(
    dataset_size: int, world_size: int, seed: int, epoch: int = 0, drop_last: bool = False
) -> SamplerEpoch:
    """One epoch of DistributedSampler(shuffle=True) over P ranks, against the dataset.

        per rank: ceil(n / P) samples (drop_last=False) or floor(n / P) (drop_last=True)
        repeated entries: P ceil(n / P) - n;   consumed tokens = sum over entries of len

    A rank's entry is a repeat when the same sample already appeared earlier in the
    sampler's global order (entry j of rank r sits at position j P + r).

    Args: dataset_size n in 1..10000, world_size P in 1..64, seed >= 0, epoch >= 0
        (the sampler shuffles with seed + epoch), drop_last a bool.
    Returns: a SamplerEpoch.
    """
    n = bounded_count(dataset_size, "dataset_size", 1, 10_000)
    ranks = bounded_count(world_size, "world_size", 1, 64)
    seed = bounded_count(seed, "seed", 0, 2**62)
    epoch = bounded_count(epoch, "epoch", 0, 2**62 - seed)
    if not isinstance(drop_last, bool):
        raise v.InvalidInput("drop_last", drop_last, "one_of", "True, False")
    lengths = sample_lengths(n)
    indices = []
    for rank in range(ranks):
        sampler = DistributedSampler(
            lengths, num_replicas=ranks, rank=rank, shuffle=True, seed=seed, drop_last=drop_last
        )
        sampler.set_epoch(epoch)
        indices.append(tuple(sampler))
    seen: set[int] = set()
    repeat_flags = [[False] * len(ix) for ix in indices]
    for j in range(max(map(len, indices))):  # walk the global order j * P + r
        for rank, ix in enumerate(indices):
            if j < len(ix):
                repeat_flags[rank][j] = ix[j] in seen
                seen.add(ix[j])
    counts = Counter(i for ix in indices for i in ix)
    dataset_tokens = sum(lengths)
    rows = tuple(
        RankRow(
            rank=rank,
            samples=len(ix),
            repeats=sum(repeat_flags[rank]),
            tokens=sum(lengths[i] for i in ix),
            token_share=sum(lengths[i] for i in ix) / dataset_tokens,
            indices=ix,
        )
        for rank, ix in enumerate(indices)
    )
    times_seen = Counter(counts.get(i, 0) for i in range(n))
    return SamplerEpoch(
        dataset_size=n,
        world_size=ranks,
        dataset_tokens=dataset_tokens,
        even_share_tokens=dataset_tokens / ranks,
        indices=tuple(indices),
        consumed_samples=sum(map(len, indices)),
        consumed_tokens=sum(r["tokens"] for r in rows),
        extra_tokens=sum(r["tokens"] for r in rows) - dataset_tokens,
        distinct_samples=len(seen),
        repeated_entries=sum(map(sum, repeat_flags)),
        dropped_samples=n - len(seen),
        times_seen=dict(sorted(times_seen.items())),
        rows=rows,
    )
