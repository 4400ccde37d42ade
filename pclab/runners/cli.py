"""The command-line contract every experiment's CLI keeps.

exit 0 on success, 1 for a failed run (one line saying why), 2 for a bad argument (one line,
no usage block, no traceback); progress lines on stderr, the report on stdout.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from pclab.core.validation import positive
from pclab.runners.results import ProgressEvent, RunResult


class Runnable(Protocol):
    def run(
        self,
        params: Any,
        *,
        timeout_s: float | None = None,
        progress: Callable[[ProgressEvent], None] | None = None,
    ) -> RunResult: ...


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse prints usage + a line; one is enough
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def experiment_parser(prog: str, doc: str | None, timeout_s: float) -> OneLineParser:
    """The options every experiment CLI has: --json and --timeout (`prog`: the command as a
    user types it, e.g. "pclab run negatives")."""
    # The doc's first paragraph, whole: `--help` never stops mid-sentence.
    summary = " ".join((doc or "").split("\n\n")[0].split()).replace("`", "")
    parser = OneLineParser(prog=prog, description=summary)
    parser.add_argument("--json", action="store_true", help="print the JSON report to stdout")
    parser.add_argument(
        "--timeout", type=float, default=timeout_s, help="seconds for the whole run"
    )
    return parser


def checked_or_exit(
    parser: argparse.ArgumentParser,
    check: Callable[[], object],
    timeout: float,
    passes: tuple[type[Exception], ...] = (),
) -> Any:
    """`check()` (an experiment's validation of the parsed arguments) and a positive timeout;
    a bad value exits 2 with one line naming it. Exceptions in `passes` go on to the caller
    (a damaged file of the lab's own is no bad argument)."""
    try:
        params = check()
        positive(timeout, "timeout")
    except passes:
        raise
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    return params


def run_for_cli(
    parser: argparse.ArgumentParser, experiment: Runnable, params: object, timeout_s: float
) -> RunResult | None:
    """`experiment.run(params)` with progress lines on stderr; a failed run is reported in
    one line and gives None."""
    result = experiment.run(params, timeout_s=timeout_s, progress=_to_stderr)
    if not result.ok:
        print(f"{parser.prog}: run failed: {result.message}", file=sys.stderr)
        return None
    return result


def _to_stderr(line: ProgressEvent) -> None:
    print(line, file=sys.stderr)
