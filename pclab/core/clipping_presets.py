"""The clipping pages' gradient presets: the seed page's layouts (and variations on them) as
two ranks' scaled gradients, with an optional non-finite value injected on one rank.

    >>> scenario_grads("seed", 8.0)
    ({'w0': 24.0}, {'w1': 32.0})
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypedDict

from pclab.core import validation as v

Grads = dict[str, float]
INJECTIONS = {"inf": math.inf, "nan": math.nan}


class Layout(TypedDict):
    """Unscaled gradients of a preset: sharded (rank, id, g) and replicated (id, g)."""

    sharded: tuple[tuple[int, str, float], ...]
    replicated: tuple[tuple[str, float], ...]


SCENARIOS: dict[str, Layout] = {
    "seed": {"sharded": ((0, "w0", 3.0), (1, "w1", 4.0)), "replicated": ()},
    "seed_replicated": {
        "sharded": ((0, "w0", 3.0), (1, "w1", 4.0)),
        "replicated": (("shared", 12.0),),
    },
    "mixed": {
        "sharded": ((0, "a0", 0.5), (0, "a1", -2.0), (1, "b0", 1.5)),
        "replicated": (("bias", -1.0),),
    },
}


def _rank(value: object, field: str) -> int:
    if (rank := v.count(value, field)) > 1:  # the presets have two ranks
        raise v.InvalidInput(field, value, "in_range", "0 or 1")
    return rank


def scenario_grads(
    name: str = "seed",
    scale: float = 8.0,
    *,
    extra_sharded: Iterable[tuple[int, str, float]] = (),
    extra_replicated: Iterable[tuple[str, float]] = (),
    inject: tuple[int, str | None, str] | None = None,
) -> tuple[Grads, ...]:
    """Two ranks' scaled gradients G = scale * g of a SCENARIOS entry plus extra parameters.

    extra_sharded: (rank, id, g) triples; extra_replicated: (id, g) pairs; inject: None or
    (rank, id or None for its first, "inf" | "nan"), overwriting that rank's copy.
    """
    base = SCENARIOS[v.choice(name, "scenario", tuple(SCENARIOS))]
    scale = v.positive(scale, "scale")
    grads: list[Grads] = [{}, {}]
    for r, pid, g in (*base["sharded"], *extra_sharded):
        grads[_rank(r, "rank")][pid] = scale * v.finite(g, pid)
    for pid, g in (*base["replicated"], *extra_replicated):
        for held in grads:
            held[pid] = scale * v.finite(g, pid)
    if inject is not None:
        rank, wanted, kind = inject
        r = _rank(rank, "inject_rank")
        wanted = next(iter(grads[r]), None) if wanted is None else wanted  # default: its first id
        pid, kind = (
            v.choice(wanted, "inject_id", tuple(grads[r])),
            v.choice(kind, "inject", tuple(INJECTIONS)),
        )
        grads[r][pid] = INJECTIONS[kind]
    return tuple(grads)
