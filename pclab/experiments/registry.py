"""The one list of the lab's experiments: a page, a CLI, the warm pool and the bench read it.

    from pclab.experiments import registry
    registry.get("negatives").run(registry.get("negatives").params(world_size=2))

Adding an experiment is one package under experiments/ and one line here.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from functools import partial

from pclab.experiments.base import Experiment

# name -> package. Packages are imported when first asked for, so reading this list costs
# nothing (the transformer's package loads its tokenizer).
EXPERIMENTS = {
    "negatives": "pclab.experiments.negatives",
    "clipping": "pclab.experiments.clipping",
    "transformer": "pclab.experiments.transformer",
    "trainer_check": "pclab.experiments.trainer_check",
}


def names() -> tuple[str, ...]:
    return tuple(EXPERIMENTS)


def get(name: str) -> Experiment:
    """The experiment registered as `name` (ValueError naming it when there is none)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment={name!r} is not registered: one of {', '.join(EXPERIMENTS)}")
    experiment: Experiment = importlib.import_module(EXPERIMENTS[name]).EXPERIMENT
    return experiment


def cli(name: str) -> Callable[[list[str]], int]:
    """The `main(argv)` of the experiment's command line (`pclab run <name>`): its cli.py's,
    or, without one, `command.run_command` printing the report as JSON."""
    experiment = get(name)  # the same ValueError for an unknown name
    if importlib.util.find_spec(f"{EXPERIMENTS[name]}.cli") is None:
        from pclab.experiments.command import run_command

        return partial(run_command, experiment)
    main: Callable[[list[str]], int] = importlib.import_module(f"{EXPERIMENTS[name]}.cli").main
    return main


def worker_modules() -> tuple[str, ...]:
    """The modules a warm-pool zygote imports ahead: each experiment's rank-side code."""
    return tuple(f"{package}.worker" for package in EXPERIMENTS.values())
