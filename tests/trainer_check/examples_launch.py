"""The bundled examples checked for real, one warm launch per shape: what test_run_mode.py and
test_coupled_run.py share (their module-scoped fixtures call it once each)."""

from __future__ import annotations

from pathlib import Path

from pclab.experiments.trainer_check import EXPERIMENT
from pclab.experiments.trainer_check.params import Params

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "trainers"


def checks_by_shape(shapes: dict[tuple[int, int], list[str]], runtime) -> dict:
    """{(P, K): {example: its check}} for examples/trainers/<example>.py, one launch a shape."""
    found = {}
    for (world_size, accum), names in shapes.items():
        paths = [str(EXAMPLES / f"{n}.py") for n in names]
        params = Params.checked(paths, world_size=world_size, accum=accum)
        result = EXPERIMENT.run(params, timeout_s=600, runtime=runtime)
        assert result.ok, result.message
        found[(world_size, accum)] = dict(zip(names, result.report["checks"], strict=True))
    return found
