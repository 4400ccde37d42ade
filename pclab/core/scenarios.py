"""One registry of named scenarios: the pages' presets and the tests' parametrisation.

Each scenario is plain data. Pages read their defaults from here, and tests iterate the
same entries, so a preset a learner sees is always a preset the suite has checked.
"""

from __future__ import annotations

from typing import TypedDict


class LedgerScenario(TypedDict):
    """Section 02's two replicas: label counts, targets, the start theta and the rate."""

    counts: tuple[int, int]
    targets: tuple[float, float]
    theta: float
    lr: float


class InfoNCESeed(TypedDict):
    """Sections 05 and 06 (core.infonce.SEED): two logical ranks' queries q and documents d,
    the temperature tau; the encoder inputs a, b and the shared scalar weights wq, wd."""

    q: tuple[float, float]
    d: tuple[float, float]
    tau: float
    a: tuple[float, float]
    b: tuple[float, float]
    wq: float
    wd: float


class FrameworkScenario(TypedDict):
    """Section 03's grid, [replica][microstep]: label counts and gradient sums; the
    regulariser's gradient."""

    counts: tuple[tuple[int, ...], ...]
    grad_sums: tuple[tuple[float, ...], ...]
    reg_grad: float


# Section 01: microbatch windows, keyed (replica, microstep). Unequal valid counts, and
# every kind of non-counting position present at least once.
DENOMINATOR_WINDOWS = {
    (0, 0): {"positions": 96, "padding": 0, "prompt": 30, "truncated": 0, "loss_sum": 138.6},
    (0, 1): {"positions": 96, "padding": 50, "prompt": 20, "truncated": 8, "loss_sum": 41.6},
    (1, 0): {"positions": 96, "padding": 0, "prompt": 88, "truncated": 0, "loss_sum": 20.0},
    (1, 1): {"positions": 96, "padding": 40, "prompt": 16, "truncated": 0, "loss_sum": 72.0},
}
# A window added when the user asks for more replicas or microsteps than the preset has.
DENOMINATOR_EXTRA_WINDOW = {
    "positions": 96,
    "padding": 16,
    "prompt": 24,
    "truncated": 0,
    "loss_sum": 100.0,
}

# Section 02: the seed's two-replica ledger and its published figures.
LEDGER_SEED: LedgerScenario = {"counts": (2, 8), "targets": (2.0, -1.0), "theta": 0.0, "lr": 0.1}
LEDGER_SEED_FIGURES = {"global_token": 0.4, "replica_mean": -0.5}

# Section 03: a two-replica, two-microstep update with one empty microbatch.
FRAMEWORK_DEFAULT: FrameworkScenario = {
    "counts": ((3, 0), (1, 6)),
    "grad_sums": ((-1.8, 0.0), (0.7, 2.4)),
    "reg_grad": 0.05,
}

LEDGER_PRESETS: dict[str, LedgerScenario] = {
    "seed": LEDGER_SEED,
    "equal_counts": {"counts": (5, 5), "targets": (2.0, -1.0), "theta": 0.0, "lr": 0.1},
    "empty_replica": {"counts": (0, 8), "targets": (2.0, -1.0), "theta": 0.0, "lr": 0.1},
    "no_labels": {"counts": (0, 0), "targets": (2.0, -1.0), "theta": 0.0, "lr": 0.1},
}


def denominator_window(replica: int, step: int) -> dict[str, float]:
    """The preset window for (replica, step), or the generic extra window."""
    return dict(DENOMINATOR_WINDOWS.get((replica, step), DENOMINATOR_EXTRA_WINDOW))
