"""The trainer check's diagnoses in the reader's language, for every view (the token verdict
and the coupled one): each by its stable code (experiments/trainer_check/codes.py).

One English wording per diagnosis: English reads the report's own message, headed by its
scenario's name as the page's table says it (said). Its builder (diagnoses.py, failures.py)
words it once, and the JSON, the command's summary and this page show those same words, so
no second English text can drift from them: locales/en/check.toml has no [diagnosis]. An
English catalogue entry could only approximate the message: a builder words it from facts
the report does not carry (whether make_microbatch built the batch, a weight's gap).

Another language reads its catalogue's `check.diagnosis.<code>`, or for a code with several
cases (more or fewer terms, a model built in the wrong dtype or recast by train_step, ...) its
`check.diagnosis.<code>.<case>` (CASES picks it from the report), with exactly the
placeholders codes.CODES declares for the code, filled from the report (FILL, else the
detail as it is). A code or case the catalogue does not know reads as the report's message.

    python -c "from pclab.ui import trainer_diagnoses as d; print(sorted(d.CASES), sorted(d.FILL))"
"""

from __future__ import annotations

from pclab.experiments.trainer_check.codes import CODES
from pclab.experiments.trainer_check.failures import unequal_microsteps
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
    "collective_mismatch": lambda d, check: "unequal_items" if _unequal(d) else "ranks",
}


def _scenario(d: dict, check: dict) -> dict | None:
    return next((s for s in check["scenarios"] if s["name"] == d.get("scenario")), None)


def _terms(d: dict, check: dict) -> int | None:
    """The scenario's N (None: no scenario, or the coupled mode's, which counts items)."""
    s = _scenario(d, check)
    return None if s is None or "counts" not in s else sum(map(sum, s["counts"]))


def _is_one_over_k(d: dict, check: dict) -> bool:
    k = check["accum_steps"]
    return k > 1 and abs(d["scale"] * k - 1) < 1e-6


def _no_evidence_case(d: dict, check: dict) -> str:
    """As the builders word it: the coupled mode's own (diagnoses.no_evidence_coupled_*)."""
    mode = "coupled_" if check.get("mode") == "coupled" else ""
    if d.get("resume"):  # a restart the check could not place (diagnoses.no_evidence_resume)
        return "resume_run"
    if d.get("state_unread"):  # N = 0, a wrapper's optimizer stepped: its state not read
        return "state_unread"
    if d.get("scenario") is None:
        unsplit = check["world_size"] * check["accum_steps"] == 1
        return f"{mode}{'unsplit_run' if unsplit else 'run'}"
    return f"{mode}{'scenario' if d.get('untold') else 'unsplit_scenario'}"


def _unequal(d: dict) -> list[int]:
    """The microsteps whose items differ between ranks (a gather's collective_mismatch)."""
    return unequal_microsteps(d.get("sizes") or [])


def _scheme_names(d: dict, check: dict) -> str:
    """The schemes a diagnosis names, in the words of its mode's table."""
    if check.get("mode") == "coupled":
        codes = d.get("schemes") or d.get("untold") or ()
        return i18n.join(lang(), [t(f"coupled.scheme.{c}") for c in codes])
    return i18n.join(lang(), [views.scheme_name(c) for c in d.get("untold") or UNSPLIT])


def _residual(d: dict, check: dict) -> str:
    s = _scenario(d, check)
    return "—" if s is None or s["residual"] is None else f"{s['residual']:.1e}"


def _held(d: dict, check: dict) -> str:
    step = _unequal(d)[0]
    held = [
        t("coupled.diagnosis.held", rank=r, items=row[step]) for r, row in enumerate(d["sizes"])
    ]
    return i18n.join(lang(), held)


FILL = {  # placeholder -> its words from the diagnosis and its check (else the detail as is)
    "scenario": lambda d, check: views.say("scenario", d["scenario"]) if d.get("scenario") else "",
    "scenarios": lambda d, check: i18n.join(
        lang(), [views.say("scenario", n) for n in d["scenarios"]]
    ),
    "schemes": _scheme_names,
    "keys": lambda d, check: i18n.join(lang(), [f"`{k}`" for k in d["keys"]]),
    "residual": _residual,
    "world_size": lambda d, check: check["world_size"],
    "accum": lambda d, check: check["accum_steps"],
    "scale": lambda d, check: f"{d['scale']:.4g}",
    "gap": lambda d, check: f"{d['terms'] - d['counted_labels']:+d}",
    "microstep": lambda d, check: _unequal(d)[0],
    "held": _held,
    # the run mode's: a dropped tail's epochs, a resume check's kill points (in words)
    "epochs": lambda d, check: i18n.join(lang(), [str(e) for e in d["epochs"]]),
    "points": lambda d, check: i18n.join(
        lang(), [views.say("run_mode.point", p) for p in d["points"]]
    ),
}


def values(d: dict, check: dict) -> dict:
    """Every placeholder codes.CODES declares for the diagnosis's code, filled (numbers as
    shown), but those this diagnosis has nothing for (another case's: an unequal microstep,
    a detail it does not carry)."""
    found = {}
    for name in CODES[d["code"]].placeholders:
        try:
            found[name] = FILL[name](d, check) if name in FILL else d[name]
        except (KeyError, IndexError, TypeError):
            continue
    return found


def said(d: dict) -> str:
    """The report's own message, headed by its scenario's name as the page shows it (a
    builder that names the scenario names it by its code: "uneven: ...")."""
    message = str(d.get("message", d.get("code", "")))
    name = d.get("scenario")
    if not name:
        return message
    body = message.removeprefix(f"{name}: ")
    return i18n.join(lang(), [views.say("scenario", name), body], "head")


def text(d: dict, check: dict) -> str:
    """One diagnosis in the reader's language (in English, and for a code or case the
    catalogue does not know, the report's own message: said)."""
    code = d.get("code", "")
    message = said(d)
    if code not in CODES:
        return message
    try:
        case = f".{CASES[code](d, check)}" if code in CASES else ""
    except (KeyError, TypeError):  # a report without the fields its case is read from
        return message
    key = f"check.diagnosis.{code}{case}"
    return t(key, **values(d, check)) if key in i18n.catalogue(lang()) else message


def _about_a_failure(d: dict, check: dict) -> bool:
    """False for a scenario's "no evidence" under a failed verdict: it is about a scenario
    that matched (the table's notes say so), not about why the check failed."""
    per_scenario = d.get("code") == "no_evidence" and d.get("scenario") is not None
    return not (per_scenario and check.get("status") == "different")


def explained(check: dict) -> list[str]:
    """The check's diagnoses, translated, in the report's order (under a failed verdict, the
    ones about why it failed)."""
    return [text(d, check) for d in check.get("diagnoses", ()) if _about_a_failure(d, check)]
