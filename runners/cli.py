"""What every experiment module shares: launch-then-report, and its command line.

Each experiment (`runners.negatives`, `runners.clipping`, `runners.transformer`) launches its
worker, turns the ranks' outputs into one report, and offers a CLI with the same contract:
exit 0 on success, 1 for a failed run (one line saying why), 2 for a bad argument (one line,
no usage block, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

from runners.launcher import RunResult, launch


def launch_with_report(
    worker: str,
    world_size: int,
    args: Sequence[str],
    build_report: Callable[[tuple[dict, ...]], dict],
    **launch_options: object,
) -> RunResult:
    """`launch(...)`, then `build_report(ranks)` into `.report`. Rank outputs that do not
    fit together are a failed run with a message, never an exception for a page."""
    result = launch(worker, world_size, args, **launch_options)
    if not result.ok:
        return result
    try:
        report = build_report(result.ranks)
    except (KeyError, TypeError, ValueError) as exc:
        return replace(result, ok=False, ranks=(), message=f"inconsistent rank outputs: {exc}")
    return replace(result, report=report)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage + message; one line is enough
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def experiment_parser(module: str, doc: str | None, timeout_s: float) -> OneLineParser:
    """The options every experiment CLI has: --json and --timeout."""
    parser = OneLineParser(prog=f"python -m {module}", description=(doc or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the JSON report to stdout")
    parser.add_argument("--timeout", type=float, default=timeout_s, help="seconds for the whole run")
    return parser


def run_for_cli(parser: argparse.ArgumentParser, start: Callable[..., RunResult]) -> RunResult | None:
    """Run with progress lines on stderr; a failed run is reported in one line and gives None."""
    result = start(progress=lambda line: print(line, file=sys.stderr))
    if not result.ok:
        print(f"{parser.prog}: run failed: {result.message}", file=sys.stderr)
        return None
    return result
