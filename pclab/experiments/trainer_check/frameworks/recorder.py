"""The framework table, recorded: the trainer check run on the chosen settings' adapters (one
launch per package and K), each made into a record (`measured`; a setting that cannot run
here: `not_run`, its reason), written with the versions that ran it to
pclab/artifacts/framework_checks.json. The settings not chosen keep their records as they
were, byte for byte.

    python -m pclab.experiments.trainer_check.frameworks --only fsdp2_local_mean
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pclab.experiments.trainer_check.frameworks.loader import RECORDED, by_code
from pclab.experiments.trainer_check.frameworks.setting import (
    ACCUM,
    MEASURED_COUPLED,
    MEASURED_SCENARIO,
    WORLD_SIZE,
    Setting,
    installed_version,
)
from pclab.experiments.trainer_check.frameworks.table import BY_CODE, SETTINGS
from pclab.paths import shown

if TYPE_CHECKING:
    from pclab.runners.runtime import Runtime

ABOUT = (
    "The trainer check on each framework setting (P = 2, K = 2 unless a record's accum says "
    "otherwise), keyed by the setting's code: the uneven scenario's scheme and weight x N (a "
    "coupled record, mode coupled: uneven_microsteps' scheme, its factor, one per parameter "
    "group where they differ, its residual, and each scenario's scheme), recorded by "
    "`python -m pclab.experiments.trainer_check.frameworks`."
)


def chosen(only: list[str] | None) -> list[Setting]:
    """The settings `--only` names, in the table's order: each name a setting's code or a
    package (all of its settings); None: every setting. ValueError for any other name."""
    if only is None:
        return list(SETTINGS)
    packages = {s.package for s in SETTINGS}
    unknown = [name for name in only if name not in BY_CODE and name not in packages]
    if unknown:
        codes = ", ".join(BY_CODE)
        raise ValueError(f"--only {','.join(unknown)}: not a setting's code ({codes}) or package")
    return [s for s in SETTINGS if s.code in only or s.package in only]


def _uneven(check: dict[str, Any]) -> dict[str, Any]:
    name = MEASURED_COUPLED if check.get("mode") == "coupled" else MEASURED_SCENARIO
    found: dict[str, Any] = next(s for s in check["scenarios"] if s["name"] == name)
    return found


def _base(setting: Setting, now: str) -> dict[str, Any]:
    found: dict[str, Any] = {
        "code": setting.code,
        "framework": setting.framework,
        "package": setting.package,
        "version": installed_version(setting.package) or setting.examined,
        "setting": setting.setting,
        "default": setting.default,
        "torch": installed_version("torch"),
        "recorded_at": now,
    }
    if setting.also:  # the row drives more than its package: every version that ran it
        found["also"] = {package: installed_version(package) for package in setting.also}
    return found


def command(setting: Setting) -> str:
    """The `pclab check` command of a setting's record (its adapter, its K)."""
    accum = "" if setting.accum == ACCUM else f" --accum {setting.accum}"
    return f"pclab check {shown(setting.path)}{accum} --json"


def _coupled(setting: Setting, found: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    """A coupled record's own fields, from its uneven_microsteps scenario (`found`): its K, the
    items per microbatch, each scenario's scheme, the least-squares factor of the objective
    named (scaled, other: the global batch's), the factor of each parameter group (scaled;
    else []), the named explanation's residual, the check's diagnosis codes."""
    fit = found["fits"].get(found["scheme"] or "", {})
    return {
        "mode": "coupled",
        "accum": setting.accum,
        "sizes": found["sizes"],
        "schemes": {s["name"]: s["scheme"] for s in check["scenarios"]},
        "factor": fit.get("factor", found["scale"]),
        "scale_groups": found["scale_groups"],
        "residual": found["residual"],
        "diagnoses": sorted({d["code"] for d in check["diagnoses"]}),
    }


def measured(setting: Setting, check: dict[str, Any], now: str) -> dict[str, Any]:
    """The record of one real run: the uneven scenario's scheme, weights and difference (a
    coupled check: uneven_microsteps' scheme and difference, its factors and residual instead
    of weights, `_coupled`)."""
    uneven = _uneven(check)
    coupled = check.get("mode") == "coupled"
    found = _base(setting, now) | {
        "scheme": uneven["scheme"],
        "weights": None if coupled else uneven["weights"],  # a coupled loss has none per label
        "counts": None if coupled else uneven["counts"],
        "passed": check["passed"],
        "status": check["status"],  # the check's own verdict: same_update, different, no_evidence
        "max_abs_diff": uneven["max_abs_diff"],
        "tolerance": uneven["tolerance"],  # the one its verdict used (measured below float64)
        "dtype": check["dtype"],
        "scenarios": {s["name"]: s["passed"] for s in check["scenarios"]},
        "command": command(setting),
        "reason": None,
    }
    return (found | _coupled(setting, uneven, check)) if coupled else found


def not_run(setting: Setting, reason: str, now: str) -> dict[str, Any]:
    """The record of a setting that cannot run here: why, and nothing measured."""
    measures = ("scheme", "weights", "counts", "passed", "status", "max_abs_diff", "dtype")
    empty = dict.fromkeys(measures)
    return _base(setting, now) | empty | {"tolerance": None, "command": None, "reason": reason}


def check_adapters(
    settings: list[Setting], runtime: Runtime | None = None
) -> dict[str, dict[str, Any]]:
    """One launch for these adapters (as `pclab check A.py B.py` would): adapter -> check.
    `runtime`: the run queue and pool to launch through (default: a cold one of its own)."""
    from pclab.experiments.trainer_check import EXPERIMENT
    from pclab.experiments.trainer_check.params import Params

    files = [str(s.path) for s in settings]
    accums = {s.accum for s in settings} or {ACCUM}
    if len(accums) != 1:
        raise ValueError(f"accum={sorted(accums)}: one launch checks its adapters at one K")
    (accum,) = accums
    params = Params.checked(files, world_size=WORLD_SIZE, accum=accum)
    result = EXPERIMENT.run(params, runtime=runtime)
    if not result.ok:
        raise RuntimeError(f"{', '.join(files)}: the check did not finish: {result.message}")
    report: dict[str, Any] = result.report
    return {str(s.adapter): check for s, check in zip(settings, report["checks"], strict=True)}


def record(only: list[str] | None = None, path: Path = RECORDED) -> dict[str, Any]:
    """Run the chosen settings' installed adapters (`chosen(only)`; None: every setting), one
    launch per package and K, and rewrite the file: a chosen setting gets a new record (its
    measurement, or its reason), every other record stays as it was."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    before = by_code(path)
    picked = chosen(only)
    runnable = [s for s in picked if s.adapter and installed_version(s.package)]
    checks: dict[str, dict[str, Any]] = {}
    for package, accum in dict.fromkeys((s.package, s.accum) for s in runnable):
        checks |= check_adapters([s for s in runnable if (s.package, s.accum) == (package, accum)])
    records = []
    for s in SETTINGS:
        kept = before.get(s.code)
        if s.code in checks:
            records.append(measured(s, checks[s.code], now))
        elif s in picked and s.reason:
            records.append(not_run(s, s.reason, now))
        elif kept is not None:
            records.append(kept)
        else:
            records.append(not_run(s, s.reason or f"{s.package} is not installed here", now))
    payload = {"about": ABOUT, "records": records}
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return payload
