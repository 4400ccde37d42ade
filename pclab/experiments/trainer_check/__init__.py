"""Check your own trainer: one command that proves a training step is the same update as the
single-process reference on the global token mean, or says which weight each microbatch
really got. The seed page's section 07 recipe (fixed weights, a single-process reference,
uneven supervision, empty replicas, compare the parameters after one update) as one launch.

    pclab check my_trainer.py --json
    torchrun --standalone --nproc-per-node 4 -m pclab.experiments.trainer_check --out-dir /tmp/c \\
        --trainer my_trainer.py

In a test suite:

    from pclab.experiments.trainer_check import assert_same_update
    assert_same_update("trainer.py", world_size=2, accum=2)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pclab.experiments.base import Experiment
from pclab.experiments.base import Params as AnyParams
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.report import agrees, build_report
from pclab.runners.results import Outcome, RunResult


@dataclass(frozen=True)
class TrainerCheck(Experiment):
    """The trainer check's experiment: a launch in which a rank died is run again scenario by
    scenario (relaunch.py), so that the dead rank's scenario is the only one it costs; a
    resumable run-mode file is then killed and restarted at the kill points (resume.py)."""

    def run(
        self, params: AnyParams, *, timeout_s: float | None = None, **options: Any
    ) -> RunResult:
        limit = self.timeout_s if timeout_s is None else timeout_s
        result = self._judged(params, limit, **options)
        if result.ok and result.report is not None:
            from pclab.experiments.trainer_check.report import with_resume

            for check in result.report["checks"]:
                with_resume(check, params, limit - result.seconds, **options)
        return result

    def _judged(self, params: AnyParams, limit: float, **options: Any) -> RunResult:
        from pclab.experiments.trainer_check.relaunch import run_check

        result = super().run(params, timeout_s=limit, **options)
        if result.outcome is not Outcome.FAILED or result.message.startswith("inconsistent"):
            return result
        again = run_check(self.worker, params, result, limit - result.seconds, **options)
        if not again.ok or again is result:
            return again
        try:
            return again.with_report(self.build_report(again.ranks))
        except (KeyError, TypeError, ValueError) as exc:
            return again.failed(f"inconsistent rank outputs: {exc}")


EXPERIMENT = TrainerCheck(
    name="trainer_check",
    worker="pclab.experiments.trainer_check",
    params=Params.checked,
    build_report=build_report,
    agrees=agrees,
    timeout_s=600.0,
)


run = EXPERIMENT.launch  # raw parameters in: validated, then run (notebooks, tests)


def assert_same_update(
    trainer: str, world_size: int | None = None, accum: int | None = None, **options: Any
) -> dict[str, Any]:
    """Run the check; return the report, or raise AssertionError (for pytest) whose message
    starts with the human summary (verdict, diagnoses, then scheme and weight grid of each
    scenario that differs) and ends with the JSON. No evidence fails too.

    `options`: counts ("3,8;8,16"), tolerance, device, timeout_s, and runtime (a
    pclab.runners.runtime.Runtime to launch in, such as a warm pool; by default a fresh one,
    cold torchrun). P and K default to 2.
    """
    from pclab.experiments.trainer_check.modes import counts_refused
    from pclab.experiments.trainer_check.summary import render
    from pclab.experiments.trainer_check.trainer_file import load

    mode = load(trainer).mode  # a file that can't be used raises TrainerFileError here
    if options.get("counts") is not None and (refused := counts_refused(mode)):
        raise ValueError(f"counts={options['counts']!r}: {refused}")
    timeout_s = options.pop("timeout_s", None)
    result = run(
        trainer=trainer, world_size=world_size, accum=accum, timeout_s=timeout_s, **options
    )
    if not result.ok:
        raise AssertionError(f"the trainer check did not finish: {result.message}")
    check: dict[str, Any] = result.report["checks"][0]
    if not check["passed"]:
        failed = [s["name"] for s in check["scenarios"] if s["verdict"] == "different"]
        why = f"not the same update in {', '.join(failed)}" if failed else check["status"]
        raise AssertionError(
            f"{trainer}: {why}\n{render(check, only_failing=True)}\n\n"
            f"the report:\n{json.dumps(check, indent=2)}"
        )
    return check
