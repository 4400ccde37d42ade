"""`pclab check TRAINER.py`: is your training step the same update as the
single-process reference, and which weight did each microbatch really get?

    pclab check my_trainer.py [--world-size P] [--accum K] [--counts "3,8;8,16"]
                            [--counts-labels "3,8;8,16"]
                            [--tolerance T] [--device cpu|cuda] [--json] [--timeout S]

Exit codes: 0 the same update in every scenario that can tell; 1 one differs, or the trainer
raised while running (the line names your file and line), or the run timed out; 2 the file
can't be used (syntax or import error, a missing function, a wrong signature, token_losses
not one term per counted label, build_model not deterministic or not in DTYPE), no scenario
is evidence (P = K = 1, or counts that cannot tell the schemes apart), or an argument is bad.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from functools import partial
from typing import Any

import pclab.experiments.trainer_check.modes as modes
from pclab.experiments.trainer_check import EXPERIMENT, diagnoses
from pclab.experiments.trainer_check.coupled_scenarios import checked_counts
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.report import exit_code
from pclab.experiments.trainer_check.summary import render
from pclab.experiments.trainer_check.trainer_file import TrainerFileError, load
from pclab.runners.cli import checked_or_exit, experiment_parser
from pclab.runners.results import RunResult

PROG = "pclab check"


def print_check(check: dict[str, Any]) -> None:
    """The human report: the verdict, its diagnoses, a table per scenario and its weights."""
    print(render(check))


def _unusable(trainer: str, exc: TrainerFileError, as_json: bool) -> int:
    """A file the check cannot use: one line on stderr (and with --json, the report with its
    diagnosis on stdout); exit 2."""
    print(f"{PROG}: {exc}", file=sys.stderr)
    if as_json:
        found = [diagnoses.unusable_file(exc.code, str(exc))]
        report = {"trainer": trainer, "passed": False, "status": "unusable", "diagnoses": found}
        print(json.dumps(report, indent=2))
    return 2


def _to_stderr(line: object) -> None:
    print(line, file=sys.stderr)


class _Launch:
    """The check's launch, started at once in a thread of its own; its progress lines are
    held back until `result` (the file passed the contract), or dropped by `stop`."""

    def __init__(self, params: Params, timeout_s: float | None) -> None:
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.held: list[object] | None = []  # None: said as they come
        self.outcome: list[RunResult | BaseException] = []
        self.thread = threading.Thread(
            target=self._run, args=(params, timeout_s), name="pcl-check-launch", daemon=True
        )
        self.thread.start()

    def _run(self, params: Params, timeout_s: float | None) -> None:
        try:
            run = EXPERIMENT.run(
                params, timeout_s=timeout_s, progress=self._say, cancel=self.cancel
            )
            self.outcome.append(run)
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            self.outcome.append(exc)

    def _say(self, line: object) -> None:
        with self.lock:
            if self.held is None:
                _to_stderr(line)
            else:
                self.held.append(line)

    def stop(self) -> None:
        """Cancel it (its processes end) and wait; nothing it says from now on is printed
        (the command's own line says it stopped: a late "cancelled" would follow it)."""
        with self.lock:
            self.held = []
        self.cancel.set()
        self.thread.join()

    def result(self) -> RunResult:
        """Say what it held, then wait for it (Ctrl-C stops it first)."""
        with self.lock:
            for line in self.held or ():
                _to_stderr(line)
            self.held = None
        try:
            while self.thread.is_alive():
                self.thread.join(0.25)
        except KeyboardInterrupt:
            self.stop()
            raise
        (found,) = self.outcome
        if isinstance(found, BaseException):
            raise found
        return found


def not_run(params: Params, outcome: str, message: str) -> dict[str, Any]:
    """The --json report of a run that judged nothing (a rank failed before any scenario,
    the time ran out, the line was busy): status different (exit 1), one run-level
    diagnosis: trainer_error, timeout, or the outcome (busy, cancelled)."""
    return {
        "trainer": params.trainers[0],
        "world_size": params.world_size,
        "accum_steps": params.accum_steps,
        "tolerance": params.tolerance,
        "passed": False,
        "status": "different",
        "scenarios": [],
        "skipped_scenarios": [],
        "diagnoses": [diagnoses.not_run(outcome, message)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(PROG, __doc__, timeout_s=EXPERIMENT.timeout_s)
    parser.description = __doc__  # the whole of it: usage and exit codes, not its first line
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "The trainer file's contract: README.md, 'Check your own trainer'."
    parser.add_argument("trainer", help="your trainer file (see the README's contract)")
    Params.add_options(parser)
    args = parser.parse_args(argv)
    check = partial(Params.from_options, args, trainer=args.trainer)
    params = checked_or_exit(parser, check, args.timeout)
    # The ranks start while this process reads the trainer file (its imports, torch's, take
    # a second or two): a file the check cannot use stops the launch before its first line
    # is said, and gets its one line, exit 2, as if nothing had been launched.
    launch = _Launch(params, args.timeout)
    usable = False
    try:
        try:
            trainer = load(params.trainers[0])  # the contract
        except TrainerFileError as exc:
            return _unusable(params.trainers[0], exc, args.json)
        grid = params.counts if params.counts is not None else params.counts_labels
        if grid is not None and (refused := modes.counts_refused(trainer.mode)):
            parser.error(f"{trainer.path.name}: {refused}")
        if trainer.mode == "coupled" and params.counts is not None:  # issue 28: items, >= 1
            checked_or_exit(parser, partial(checked_counts, params.counts), args.timeout)
        largest = max((n for row in grid or () for n in row), default=0)
        if largest > trainer.capacity:
            parser.error(f"counts={largest} is more than a microbatch holds ({trainer.capacity})")
        usable = True
    finally:
        if not usable:
            launch.stop()
    result = launch.result()
    if not result.ok:  # nothing judged at all: one line, and with --json still a report
        print(f"{PROG}: run failed: {result.message}", file=sys.stderr)
        if args.json:
            print(json.dumps(not_run(params, result.outcome.value, result.message), indent=2))
        return 1
    check = result.report["checks"][0]
    if args.json:
        print(json.dumps(check, indent=2))
    else:
        print_check(check)
    return exit_code(check)
