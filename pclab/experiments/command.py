"""The parts every experiment's command line and `python -m` entry share.

    pclab run <name> [the Params' options] [--json] [--timeout S]

An experiment's cli.py is `main(argv)` calling `run_command` with its Params and, if it
has one, a printer for humans; its __main__.py is `entry(__package__)`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from pclab.experiments.base import Experiment
from pclab.experiments.declare import Declared
from pclab.runners.cli import checked_or_exit, experiment_parser, run_for_cli


def run_command(
    experiment: Experiment,
    params: type[Declared],
    argv: list[str] | None,
    *,
    doc: str | None,
    human: Callable[[dict[str, Any]], None] | None = None,
    exit_code: Callable[[dict[str, Any]], int] = lambda report: 0,
    broken: tuple[type[Exception], ...] = (),
) -> int:
    """Parse the options `params` declares, validate, run, print; 0 ok, 1 a failed run (or
    what `exit_code` says of the report, or one of the experiment's own files is `broken`),
    2 a bad argument (one line each)."""
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


def entry(worker: Callable[[], None], cli: Callable[[], int]) -> None:
    """`python -m <package>`: a rank (RANK set by torchrun or the warm pool) runs the
    worker, anything else is the command line. The package's __main__ imports both by name,
    so the run's code hash (pclab.runners.code_hash) sees them."""
    if "RANK" in os.environ:
        worker()
    else:
        sys.exit(cli())
