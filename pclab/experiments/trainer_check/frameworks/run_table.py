"""Frameworks across a run: each framework's own loop through the run mode (two epochs of 5
microbatches a rank at P = 2, K = 2: windows of 2, 2 and a tail of 1), and, where the lab has
an adapter for the framework's resume path, its checkpoint restart through the resume check.
One record per framework, keyed by its run adapter's code, written with the versions that
ran it to pclab/artifacts/framework_runs.json; "Frameworks, measured" and README.md's
"across a run" table read it (`run_words`).

    python -m pclab.experiments.trainer_check.frameworks --runs      # record every row again
    python -m pclab.experiments.trainer_check.frameworks --runs --only litgpt   # just these

A record keeps each check's `story`: what the row shows of it (each scenario's verdict and
codes, the uneven scenario's optimizer steps per epoch, the tail's scale, the schedule's
stepping, the steps taken at the N = 0 windows; each kill point's verdict and codes).
tests/runners/test_run_frameworks.py and test_resume_frameworks.py, which run the same
adapters live, hold each story to its record.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pclab.experiments.trainer_check.frameworks.loader import load
from pclab.experiments.trainer_check.frameworks.setting import (
    ACCUM,
    FOLDERS,
    WORLD_SIZE,
    installed_version,
)
from pclab.paths import FRAMEWORK_EXAMPLES_DIR, PACKAGE_DIR, shown

if TYPE_CHECKING:
    from pclab.runners.runtime import Runtime

RUNS_RECORDED = PACKAGE_DIR / "artifacts" / "framework_runs.json"
UNEVEN, EMPTY = "uneven", "empty_window"  # the scenarios a row's columns read
ABOUT = (
    "Each framework's own loop through the trainer check's run mode (P = 2, K = 2, two epochs "
    "of 5 microbatches a rank: a tail of 1 each epoch) and, where it has one, its resume "
    "adapter through the resume check (every rank SIGKILLed at four points, restarted from the "
    "loop's own checkpoint); each check's story as the page shows it, recorded by "
    "`python -m pclab.experiments.trainer_check.frameworks --runs`."
)


@dataclass(frozen=True)
class RunRow:
    """One framework across a run: its run adapter and, if measured, its resume adapter."""

    code: str  # its stable key: the run adapter's file stem
    framework: str  # as users name it
    package: str  # the distribution whose installed version is recorded
    resume: str | None = None  # the resume adapter's stem, in the same folder; None: none
    own_environment: bool = False  # run under its own Python (bench/framework_env.py)

    def path(self, stem: str) -> Path:
        return FRAMEWORK_EXAMPLES_DIR / FOLDERS[self.package] / f"{stem}.py"

    def adapters(self) -> tuple[str, ...]:
        return (self.code,) if self.resume is None else (self.code, self.resume)


ROWS = (
    RunRow("run_accelerate_accumulate", "Accelerate", "accelerate", "run_resume_accelerate"),
    RunRow(
        "run_lightning_accumulate",
        "PyTorch Lightning",
        "lightning",
        "run_resume_lightning_accumulate",
    ),
    RunRow("run_hf_trainer", "transformers Trainer", "transformers", "run_resume_hf_trainer"),
    RunRow("run_deepspeed_engine", "DeepSpeed", "deepspeed", "run_resume_deepspeed_engine"),
    RunRow(
        "run_hf_trainer_deepspeed_zero2",
        "transformers Trainer + DeepSpeed ZeRO-2",
        "deepspeed",
        "run_resume_hf_trainer_deepspeed_zero2",
    ),
    RunRow("run_trl_sft", "TRL SFTTrainer", "trl", "run_resume_trl_sft"),
    RunRow(
        "run_clm_no_trainer",
        "transformers' run_clm_no_trainer.py (Accelerate)",
        "accelerate",
        "run_resume_clm_no_trainer",
    ),
    RunRow("run_litgpt_finetune", "litgpt", "litgpt", "run_resume_litgpt_finetune", True),
    RunRow(
        "run_torchtune_full_finetune",
        "torchtune",
        "torchtune",
        "run_resume_torchtune_full_finetune",
        True,
    ),
    RunRow(
        "run_olmo_core_trainer",
        "OLMo-core",
        "ai2-olmo-core",
        "run_resume_olmo_core_trainer",
        True,
    ),
    RunRow(  # a coupled loop (MultipleNegativesRankingLoss): the coupled run mode
        "run_sbert_trainer_mnrl_gather",
        "sentence-transformers",
        "sentence-transformers",
        "run_resume_sbert_trainer_mnrl_gather",
    ),
)


def _codes(check: dict[str, Any], scenario: str) -> list[str]:
    return sorted({d["code"] for d in check["diagnoses"] if d.get("scenario") == scenario})


def _diagnosis(check: dict[str, Any], code: str) -> dict[str, Any]:
    return next((d for d in check["diagnoses"] if d["code"] == code), {})


def shown_scenario(names: list[str]) -> str:
    """The scenario a row's columns read: uneven (a coupled run's, whose scenarios are others:
    its first)."""
    return UNEVEN if UNEVEN in names else names[0]


def _pool(scenario: dict[str, Any]) -> str | None:
    """The one pool every full window of a coupled run's scenario optimised, or None."""
    k = max(u["microsteps"] for u in scenario["updates"])
    pools = {u.get("scheme") for u in scenario["updates"] if u["microsteps"] == k}
    return pools.pop() if len(pools) == 1 else None


def story(check: dict[str, Any]) -> dict[str, Any]:
    """What a row shows of one run-mode check (a resumable one: its kill points too)."""
    scenarios = {s["name"]: s for s in check["scenarios"]}
    uneven = scenarios[shown_scenario(list(scenarios))]
    per_epoch: dict[int, int] = {}  # the loop's optimizer steps, and the reference's updates
    reference: dict[int, int] = {}
    for u in uneven["updates"]:
        per_epoch[u["epoch"]] = per_epoch.get(u["epoch"], 0) + u["optimizer_steps"]
        reference[u["epoch"]] = reference.get(u["epoch"], 0) + (not u["skipped"])
    scale = _diagnosis(check, "tail_window_scaled").get("scale")
    rate = _diagnosis(check, "scheduler_rate").get("rate")
    found: dict[str, Any] = {
        "status": check["status"],
        "scenarios": {
            name: {"verdict": s["verdict"], "codes": _codes(check, name)}
            for name, s in scenarios.items()
        },
        "steps_per_epoch": [per_epoch[e] for e in sorted(per_epoch)],
        "reference_steps_per_epoch": [reference[e] for e in sorted(reference)],
        # to the weight solve's own tolerance (1e-6): a float32 loop's eighth digit is the
        # CPU's kernels' (0.499999993 recorded on one box, 0.499999976 on an AMD EPYC one)
        "tail_scale": None if scale is None else round(scale, 6),
        "schedule": (uneven.get("schedule") or {}).get("matches"),
        "scheduler_rate": rate,
        # the loop's optimizer steps at the N = 0 windows, which the reference skips
        "empty_steps": sum(
            u["optimizer_steps"]
            for u in scenarios.get(EMPTY, {}).get("updates", ())
            if u["skipped"]
        ),
        "resume": None,
    }
    if check.get("mode") == "coupled_run":  # a coupled loop's full windows: their one pool
        found["pool"] = _pool(uneven)
    if check.get("resume") is not None:
        found["resume"] = [
            {"point": e["point"], "verdict": e["verdict"], "codes": sorted(e.get("codes", ()))}
            for e in check["resume"]
        ]
    return found


def command(row: RunRow, stem: str) -> str:
    return f"pclab check {shown(row.path(stem))} --json"


def check_rows(
    rows: tuple[RunRow, ...], runtime: Runtime | None = None
) -> dict[str, dict[str, Any]]:
    """One launch for every adapter of these rows: adapter stem -> its check."""
    from pclab.experiments.trainer_check import EXPERIMENT
    from pclab.experiments.trainer_check.params import Params

    stems = [(row, stem) for row in rows for stem in row.adapters()]
    params = Params.checked(
        [str(row.path(stem)) for row, stem in stems], world_size=WORLD_SIZE, accum=ACCUM
    )
    result = EXPERIMENT.run(params, timeout_s=1800, runtime=runtime)
    if not result.ok:
        raise RuntimeError(f"the run adapters' check did not finish: {result.message}")
    return {stem: c for (_, stem), c in zip(stems, result.report["checks"], strict=True)}


def chosen_runs(only: list[str] | None) -> tuple[RunRow, ...]:
    """The rows `--runs --only` names, in the table's order: each name a row's code or a
    package (all of its rows); None: every row. ValueError for any other name."""
    if only is None:
        return ROWS
    unknown = [n for n in only if n not in {r.code for r in ROWS} | {r.package for r in ROWS}]
    if unknown:
        codes = ", ".join(r.code for r in ROWS)
        names = ",".join(unknown)
        raise ValueError(f"--runs --only {names}: not a run row's code ({codes}) or package")
    return tuple(r for r in ROWS if r.code in only or r.package in only)


def record_runs(path: Path = RUNS_RECORDED, only: list[str] | None = None) -> dict[str, Any]:
    """Run every row `only` names (all: None) whose package is installed here and rewrite the
    file; every other row keeps its record as it was (a framework with an environment of its
    own records its rows from there: bench/framework_env.py)."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    before = {r["code"]: r for r in load_runs(path)["records"]}
    runnable = tuple(row for row in chosen_runs(only) if installed_version(row.package))
    checks = check_rows(runnable) if runnable else {}
    records = []
    for row in ROWS:
        if row.code not in checks:
            if row.code in before:
                records.append(before[row.code])
            continue
        records.append(
            {
                "code": row.code,
                "framework": row.framework,
                "package": row.package,
                "version": installed_version(row.package),
                "torch": installed_version("torch"),
                "recorded_at": now,
                "commands": [command(row, stem) for stem in row.adapters()],
                "run": story(checks[row.code]),
                "resume": None if row.resume is None else story(checks[row.resume])["resume"],
            }
        )
    payload = {"about": ABOUT, "records": records}
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return payload


def load_runs(path: Path = RUNS_RECORDED) -> dict[str, Any]:
    """{"about", "records": [...]} as recorded, or no records when there is no file (read as
    the one-update table is: loader.load)."""
    return load(path)
