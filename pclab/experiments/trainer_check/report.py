"""The trainer check's report: per trainer file and scenario, did the step give the same
update as the single-process reference, on every rank, and what did it optimise instead.
This is the JSON `pclab check --json` prints (one trainer's entry), in every mode:

    trainer, [mode], world_size, accum_steps, tolerance, passed, status, scenarios,
    skipped_scenarios, dtype, max_grad_norm, device, diagnoses, and the mode's own fields
    (token: first_position_labelled, counts_given; token_report.TrainerReport lists them)

The shared steps are here and in judging.py; a mode's scenario results and its own
diagnoses come from its report side (mode_protocols.ReportMode), so no mode repeats the assembly.
"""

from __future__ import annotations

from typing import Any

import pclab.experiments.trainer_check.judging as judging
import pclab.experiments.trainer_check.modes as modes
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.judging import RunShape, exit_code

__all__ = ["agrees", "build_report", "exit_code"]


def build_check(
    ranks: tuple[dict[str, Any], ...], i: int, per_scenario: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    """The i-th trainer file's report from every rank's output (`per_scenario`: each
    scenario's entries, by rank)."""
    first, check = ranks[0], ranks[0]["checks"][i]
    name = check.get("mode", "token")
    mode = modes.named(name).report_side()
    run = RunShape(
        first["world_size"], first["accum_steps"], first["tolerance"], check.get("dtype", "float64")
    )
    scenarios = mode.judge(check, per_scenario, run)
    found: list[Diagnosis] = list(judging.preflight_diagnoses(ranks, i))
    unusable = bool(found)
    for s, per_rank in zip(scenarios, per_scenario):
        found += mode.scenario_diagnoses(s, per_rank, check, run)
    found += mode.run_diagnoses(scenarios, per_scenario)
    status = judging.status(scenarios, unusable, mode.proves)
    if status == "no_evidence":
        found.append(mode.no_evidence_run(run.world_size, run.accum_steps))
    return {
        "trainer": check["trainer"],
        **({} if name == "token" else {"mode": name}),
        "world_size": run.world_size,
        "accum_steps": run.accum_steps,
        "tolerance": run.tolerance,
        "passed": status == "same_update",
        "status": status,
        "scenarios": scenarios,
        "skipped_scenarios": check.get("skipped", []),
        **mode.fields(check),
        "dtype": run.dtype,
        "max_grad_norm": check.get("max_grad_norm"),
        "device": check.get("device", "cpu"),
        "diagnoses": found,
    }


def build_report(ranks: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """{"checks": [one report per trainer file]} from every rank's output (ValueError if
    they do not fit together)."""
    first = ranks[0]
    for key in ("world_size", "accum_steps", "tolerance"):
        if any(r[key] != first[key] for r in ranks):
            raise ValueError(f"ranks disagree on {key}")
    checks = []
    for i, check in enumerate(first["checks"]):
        names = [s["name"] for s in check["scenarios"]]
        if any([s["name"] for s in r["checks"][i]["scenarios"]] != names for r in ranks):
            raise ValueError("ranks ran different scenarios")
        per_scenario = [[r["checks"][i]["scenarios"][j] for r in ranks] for j in range(len(names))]
        checks.append(build_check(ranks, i, per_scenario))
    return {"checks": checks}


def with_resume(check: dict[str, Any], params: Any, timeout_s: float, **options: Any) -> None:
    """A run-mode check of a resumable file (train_loop takes checkpoint_dir), killed and
    restarted for real at each kill point (resume.py): `check["resume"]`, its diagnoses, and
    the status `different` when a restarted run is not the straight run, `no_evidence` when a
    run that is right everywhere else has a restart it could not place. Nothing else is."""
    import pclab.experiments.trainer_check.run_contract as run_contract
    import pclab.experiments.trainer_check.run_messages as run_messages
    from pclab.experiments.trainer_check.trainer_file import load

    if check.get("mode") not in ("run", "coupled_run") or check["status"] == "unusable":
        return
    if not run_contract.resumable(load(check["trainer"]).module):
        return
    import pclab.experiments.trainer_check.resume as resume

    shape = (check["world_size"], check["accum_steps"], check["tolerance"])
    entries = resume.check(check["trainer"], *shape, timeout_s=max(30.0, timeout_s), **options)
    check["resume"] = entries
    check["diagnoses"] += resume.diagnoses(entries)
    if any(e["verdict"] == "different" for e in entries):
        check["status"], check["passed"] = "different", False
    elif check["passed"] and any(e["verdict"] == "no_evidence" for e in entries):
        check["diagnoses"].append(run_messages.no_evidence_resume())  # a restart never judged
        check["status"], check["passed"] = "no_evidence", False


def agrees(report: dict[str, Any]) -> bool:
    """Every checked trainer's verdict is the same update as the single-process reference
    (the experiment's default trainer is a correct one)."""
    return all(check["passed"] for check in report["checks"])
