"""The parts every experiment's command line and `python -m` entry share.

    pclab run <name> [the Params' options] [--json] [--timeout S]     (`usage(experiment)`)

An experiment's __main__.py is `entry(worker.main, EXPERIMENT)`: `run_command(EXPERIMENT)`
is then its command line, printing the report as JSON, its description the package's
docstring. An experiment that prints a table for humans has a cli.py whose `main(argv=None)`
returns `run_command(EXPERIMENT, argv, doc=__doc__, human=...)`, and passes `cli.main` to
`entry` instead.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from pclab.experiments.base import Experiment
from pclab.experiments.declare import Declared


def params_of(experiment: Experiment) -> type[Declared]:
    """The experiment's `Params` class (its `params` is the class's bound `checked`)."""
    params = getattr(experiment.params, "__self__", None)
    if not (isinstance(params, type) and issubclass(params, Declared)):
        raise TypeError(f"{experiment.name}: params={experiment.params!r} is no Params.checked")
    return params


def usage(experiment: Experiment) -> str:
    """One line: `pclab run <name> --json` and each declared option with its metavar (the
    README's list of experiments is these lines; a test holds them equal)."""
    options = []
    for _, name, spec, _ in params_of(experiment).declared():
        option = name.replace("_", "-")
        if spec.option:
            options.append(f"[--{option} {spec.metavar or name.upper()}]")
    return " ".join([f"pclab run {experiment.name} --json", *options])


def run_command(
    experiment: Experiment,
    argv: list[str] | None = None,
    *,
    doc: str | None = None,
    human: Callable[[dict[str, Any]], None] | None = None,
    exit_code: Callable[[dict[str, Any]], int] = lambda report: 0,
    broken: tuple[type[Exception], ...] = (),
) -> int:
    """Parse the options its `Params` declares, validate, run, print (JSON, or `human`'s
    table); 0 ok, 1 a failed run (or what `exit_code` says of the report, or one of the
    experiment's own files is `broken`), 2 a bad argument (one line each). `doc`: the
    description `--help` prints (default: the experiment package's docstring)."""
    # Imported here: every rank imports this module for `entry`, and never parses options.
    from pclab.runners.cli import checked_or_exit, experiment_parser, run_for_cli

    if doc is None:
        doc = importlib.import_module(experiment.worker).__doc__
    params = params_of(experiment)
    parser = experiment_parser(f"pclab run {experiment.name}", doc, experiment.timeout_s)
    params.add_options(parser)
    args = parser.parse_args(argv)
    try:
        options = partial(params.from_options, args)
        checked = checked_or_exit(parser, options, args.timeout, passes=broken)
    except broken as exc:  # not the user's argument: the lab's own file is damaged
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    result = run_for_cli(parser, experiment, checked, args.timeout)
    if result is None:
        return 1
    if args.json or human is None:
        print(json.dumps(result.report, indent=2))
    else:
        human(result.report)
    return exit_code(result.report)


def entry(worker: Callable[[], None], cli: Callable[[], int] | Experiment) -> None:
    """`python -m <package>`: a rank (RANK set by torchrun or the warm pool) runs the
    worker (called with no argument: it reads sys.argv), anything else is the command line,
    `cli()` or, given the Experiment, `run_command(experiment)`. The package's __main__
    imports the worker by name, so the run's code hash (pclab.runners.code_hash) sees it."""
    if "RANK" in os.environ:
        worker()
    else:
        sys.exit(run_command(cli) if isinstance(cli, Experiment) else cli())
