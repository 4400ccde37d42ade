"""What every experiment is: validated parameters, a worker run on P ranks, a typed report.

An experiment package (`pclab/experiments/<name>/`, see README.md there) defines

    params.py   Params(Declared): each parameter declared once (experiments.declare); it
                validates (`Params.checked(**raw)`), makes the CLI options and the worker's
                arguments, and knows its `world_size`
    worker.py   the torch code one rank runs (`main()`), started by torchrun or the warm pool
    report.py   `build_report(ranks)`: every rank's JSON into one report (the CLI's JSON), and
                `agrees(report)`: does the run match its independent reference?
    cli.py      `main(argv)`: experiments.command.run_command (exit 0 ok, 1 failed, 2 bad)
    __main__.py experiments.command.entry: a rank runs the worker, anything else the CLI
    __init__.py EXPERIMENT = Experiment(...), and `run(**raw)` for notebooks and tests

and one line in `experiments/registry.py`. Everything else (the launch, the run queue, the
warm pool, the run panel, the benchmark, `pclab run`) finds it there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from pclab.runners.launcher import launch
from pclab.runners.results import ProgressEvent, RunResult
from pclab.runners.run_queue import Cancel
from pclab.runners.runtime import Runtime


class Params(Protocol):
    """A validated, frozen parameter set of one experiment."""

    @property
    def world_size(self) -> int: ...

    def worker_args(self) -> list[str]: ...


class ReportError(ValueError):
    """The ranks finished, but what they say is not a result (the message says why, as is)."""


@dataclass(frozen=True)
class Experiment:
    """One experiment: how to validate its input, launch its worker and read its ranks."""

    name: str  # registry key and run-record name, e.g. "negatives"
    worker: str  # module every rank runs: the package itself (its __main__)
    params: Callable[..., Params]  # Params.checked: raw values in, validated Params out
    build_report: Callable[[tuple[dict[str, Any], ...]], Mapping[str, Any]]  # JSON, a TypedDict
    # Does a report agree with the experiment's independent reference (core, a single
    # process)? The one question the registry's launch-and-compare test asks of every run.
    agrees: Callable[[dict[str, Any]], bool]
    timeout_s: float  # the default wall-clock limit of one launch

    def run(
        self,
        params: Params,
        *,
        timeout_s: float | None = None,
        pg_timeout_s: float | None = None,
        progress: Callable[[ProgressEvent], None] | None = None,
        cancel: Cancel = None,
        runtime: Runtime | None = None,
    ) -> RunResult:
        """Launch `params` (already validated); `.report` is the experiment's report.

        `runtime`: the server's (pclab.ui.serving); None runs in a fresh one for this call
        (runners.launcher.launch, as are `progress` and `cancel`). A failed or timed-out run,
        or ranks whose outputs do not fit together, is a RunResult with ok=False and a
        one-line message - never an exception.
        """
        result = launch(
            self.worker,
            params.world_size,
            params.worker_args(),
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
            pg_timeout_s=pg_timeout_s,
            progress=progress,
            cancel=cancel,
            runtime=runtime,
        )
        if not result.ok:
            return result
        try:
            report = self.build_report(result.ranks)
        except ReportError as exc:
            return result.failed(str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            return result.failed(f"inconsistent rank outputs: {exc}")
        return result.with_report(report)

    def launch(
        self,
        *,
        timeout_s: float | None = None,
        pg_timeout_s: float | None = None,
        progress: Callable[[ProgressEvent], None] | None = None,
        cancel: Cancel = None,
        runtime: Runtime | None = None,
        **raw: object,
    ) -> RunResult:
        """Validate raw parameters (`params`' names; ValueError / TypeError before anything
        starts) and `run` them: what a notebook or a test calls."""
        checked = self.params(**raw)
        return self.run(
            checked,
            timeout_s=timeout_s,
            pg_timeout_s=pg_timeout_s,
            progress=progress,
            cancel=cancel,
            runtime=runtime,
        )


def params_record(params: Params) -> dict[str, Any]:
    """A parameter set as plain JSON-able values (cache keys, run records)."""
    values = asdict(params)  # type: ignore[call-overload]  # Params are dataclasses
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
