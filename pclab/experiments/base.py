"""What every experiment is: validated parameters, a worker run on P ranks, a typed report.

An experiment package (`pclab/experiments/<name>/`, see README.md there) defines

    params.py   Params(Declared): each parameter declared once (experiments.declare); it
                validates (`Params.checked(**raw)`), makes the CLI options and the worker's
                arguments, and knows its `world_size`
    worker.py   `main(argv=None)`: `rank_main(Params, compute, argv)` (below) runs the torch
                code of one rank, started by torchrun or the warm pool; optionally
                `preload()`, which the pool's zygote calls once (runners/zygote.py)
    report.py   `build_report(ranks)`: every rank's JSON into one report (the CLI's JSON), and
                `agrees(report)`: does the run match its independent reference?
    __main__.py experiments.command.entry: a rank runs the worker, anything else the CLI
    __init__.py EXPERIMENT = Experiment(...), and `run(**raw)` for notebooks and tests
    cli.py      optional: `main(argv)` with a printer for humans (experiments.command)

and one line in `experiments/registry.py`. Everything else (the launch, the run queue, the
warm pool, the run panel, the benchmark, `pclab run`) finds it there. Every rank sends its
checked parameters (`rank_main`); `Experiment.run` fails a run whose ranks disagree on them
and puts them in the report as "parameters", so a declared field reaches the CLI's JSON and
the page's run record with nothing else typed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pclab.experiments.declare import Declared
from pclab.runners.worker import finish_worker, init_worker, write_rank_output

if TYPE_CHECKING:  # the launching layer loads when a run starts: a rank never needs it
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
        # Imported here, not at the top: every rank imports this module (rank_main), and the
        # launcher, run queue, pool and memory budget are the launching process's alone.
        from pclab.runners import launcher

        result = launcher.launch(
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
        sent = [rank.get("parameters") for rank in result.ranks]
        if any(values != sent[0] for values in sent):
            return result.failed("inconsistent rank outputs: ranks disagree on the parameters")
        try:
            report = self.build_report(result.ranks)
            if sent[0] is not None:  # a worker written with rank_main: its checked parameters
                report = {**report, "parameters": sent[0]}
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


def params_record(params: object) -> dict[str, Any]:
    """A parameter set as plain JSON-able values (cache keys, run records)."""
    values = asdict(params)  # type: ignore[call-overload]  # Params are dataclasses
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def rank_main(
    params: type[Declared],
    compute: Callable[[Any, int, int], dict[str, Any]],
    argv: Sequence[str] | None = None,
    *,
    backend: str | None = None,
) -> None:
    """What one rank runs (a worker's `main`): join the group, read `params`
    (`Params.from_worker_args`, world_size from torchrun's nproc, checked like any value),
    `compute(params, rank, world_size)` -> payload, then write it with "rank", "world_size",
    "backend" and "parameters" (`params_record`) added, and leave the group. torch's
    `@record` wraps it, so a raising rank leaves torchrun an error file naming it."""
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    def main() -> None:
        rank, world_size = init_worker(backend=backend)
        checked, out_dir = params.from_worker_args(argv, world_size=world_size)
        payload = compute(checked, rank, world_size)
        payload = {
            "rank": rank,
            "world_size": world_size,
            "backend": dist.get_backend(),
            **payload,
            "parameters": params_record(checked),
        }
        write_rank_output(out_dir, rank, payload)
        finish_worker()

    record(main)()
