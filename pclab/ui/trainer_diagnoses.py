"""The trainer check's diagnoses in the reader's language: each by its stable code
(experiments/trainer_check/diagnoses.py) through the catalogue, `check.diagnosis.<code>`, with
the report's values filled in; a code the catalogue does not know reads as the report's own
English message. A code with several cases (more or fewer terms, a model built in the wrong
dtype or recast by train_step, ...) has one entry per case: `check.diagnosis.<code>.<case>`.

    python -c "from pclab.ui import trainer_diagnoses as d; print(d.CASES)"
"""

from __future__ import annotations

from pclab.ui import i18n
from pclab.ui import trainer_views as views
from pclab.ui.language import lang, t

# with P = K = 1 these schemes are all the global token mean (diagnoses.no_evidence_run)
UNSPLIT = ("replica_mean", "microbatch_mean", "double_scaled")
CASES = {  # code -> the case of a diagnosis (its catalogue sub-key), from the report
    "terms_mismatch": lambda d, check: d["side"],
    "model_not_deterministic": lambda d, check: "ranks" if d["across_ranks"] else "calls",
    "dtype_changed": lambda d, check: "recast" if d["scenario"] else "built",
    "optimizer_not_stepped": lambda d, check: "own" if d["parameters_changed"] else "forgot",
    "uniform_scale": lambda d, check: "second_k" if _is_one_over_k(d, check) else "scale",
    "extra_optimizer_state": lambda d, check: "at_zero" if _terms(d, check) == 0 else "labels",
    "no_evidence": lambda d, check: _no_evidence_case(d, check),
}


def _scenario(d: dict, check: dict) -> dict | None:
    return next((s for s in check["scenarios"] if s["name"] == d.get("scenario")), None)


def _terms(d: dict, check: dict) -> int | None:
    s = _scenario(d, check)
    return None if s is None else sum(map(sum, s["counts"]))


def _is_one_over_k(d: dict, check: dict) -> bool:
    k = check["accum_steps"]
    return k > 1 and abs(d["scale"] * k - 1) < 1e-6


def _no_evidence_case(d: dict, check: dict) -> str:
    if d.get("scenario") is None:
        return "unsplit_run" if check["world_size"] * check["accum_steps"] == 1 else "run"
    return "scenario" if d.get("untold") else "unsplit_scenario"


def _schemes(codes) -> str:
    return i18n.join(lang(), [views.scheme_name(c) for c in codes])


def _scenarios(names) -> str:
    return i18n.join(lang(), [views.say("scenario", n) for n in names])


def values(d: dict, check: dict) -> dict:
    """Everything an entry may name, from the diagnosis and its check (numbers as shown)."""
    s = _scenario(d, check)
    residual = None if s is None else s["residual"]
    found = {
        "scenario": views.say("scenario", d["scenario"]) if d.get("scenario") else "",
        "scenarios": _scenarios(d.get("scenarios", ())),
        "schemes": _schemes(d.get("untold") or UNSPLIT),
        "keys": i18n.join(lang(), [f"`{k}`" for k in d.get("keys", ())]),
        "residual": "—" if residual is None else f"{residual:.1e}",
        "world_size": check["world_size"],
        "accum": check["accum_steps"],
    }
    if "scale" in d:
        found["scale"] = f"{d['scale']:.4g}"
    if "terms" in d:
        found["gap"] = f"{d['terms'] - d['counted_labels']:+d}"
    for key in ("terms", "counted_labels", "tensor", "dtype", "declared", "parameters"):
        if key in d:
            found[key] = d[key]
    found["message"] = d.get("message", "")
    return found


def text(d: dict, check: dict) -> str:
    """One diagnosis in the reader's language (the report's message for an unknown code)."""
    code = d.get("code", "")
    key = f"check.diagnosis.{code}"
    if code in CASES:
        try:
            key = f"{key}.{CASES[code](d, check)}"
        except (KeyError, TypeError):  # a report without the fields this case needs
            return d.get("message", code)
    if key not in i18n.catalogue(lang()):
        return d.get("message", code)
    return t(key, **values(d, check))


def _about_a_failure(d: dict, check: dict) -> bool:
    """False for a scenario's "no evidence" under a failed verdict: it is about a scenario
    that matched (the table's notes say so), not about why the check failed."""
    per_scenario = d.get("code") == "no_evidence" and d.get("scenario") is not None
    return not (per_scenario and check.get("status") == "different")


def explained(check: dict) -> list[str]:
    """The check's diagnoses, translated, in the report's order (under a failed verdict, the
    ones about why it failed)."""
    return [text(d, check) for d in check.get("diagnoses", ()) if _about_a_failure(d, check)]
