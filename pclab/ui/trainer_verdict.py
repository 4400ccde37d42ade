"""The verdict of a finished trainer check on the "Check a trainer" page: the banner, one line
per cause on what to change in the trainer (with a link to the page that teaches it), the
verdict table and the measured weights.

A cause comes from what the check measured, never from the example's name: the scheme the
weights fit, or where the state went wrong (N = 0 not skipped, ranks apart, a non-finite
update). The Hugging Face examples say it in Trainer's own terms: the setting to choose.

    python -c "from pclab.ui import trainer_verdict as v; print(v.TEACHES)"
"""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from pclab.ui import downloads, i18n
from pclab.ui import hf_trainer_views as hf_views
from pclab.ui import trainer_diagnoses as diagnoses
from pclab.ui import trainer_views as views
from pclab.ui.figures import fmt
from pclab.ui.language import lang, page_link, t
from pclab.ui.pages import PAGES

TEACHES = {  # cause -> the page (pclab.ui.pages key) that teaches its fix
    "replica_mean": "ledger",
    "microbatch_mean": "denominator",
    "double_scaled": "framework",
    "unnormalised_sum": "framework",
    "other": "clipping",
    "not_finite": "denominator",
    "skip_at_zero": "step",
    "ranks_differ": "step",
    "state": "step",
    "labels_before_shift": "denominator",
    "scenario_failed": "step",
}
NOTE_FIRST = ("ranks_differ", "not_finite")  # causes a note names before the scheme does


def cause(scenario: dict) -> str | None:
    """Why a scenario failed, as a TEACHES key (None: its verdict is not "different")."""
    if scenario["verdict"] != "different":
        return None
    return _failure_cause(scenario)


def _failure_cause(scenario: dict) -> str:
    """Why a scenario whose verdict is "different" failed, as a TEACHES key."""
    if scenario.get("ranks_agree", False) is None:  # raised, hung or mismatched: not measured
        return "scenario_failed"
    for note in NOTE_FIRST:
        if note in scenario["notes"]:
            return note
    if scenario["scheme"] is None:  # N = 0: no weight, yet the state changed
        return "skip_at_zero"
    if scenario["scheme"] == "global_token":  # the right weights, something else moved
        return "state"
    return scenario["scheme"]


def causes(check: dict) -> dict[str, list[str]]:
    """Each cause of a failure -> the scenarios (their names in the reader's language), from
    the scheme each row names (views.named: a tie goes with the trainer's measured scheme),
    so one slip reads as one line and a fix line never contradicts its row."""
    found: dict[str, list[str]] = {}
    for s in views.named(check):
        if s["verdict"] == "different":
            found.setdefault(_failure_cause(s), []).append(views.say("scenario", s["name"]))
    return found


def _page(key: str):
    return next(p for p in PAGES if p.key == key)


def fixes(check: dict, example: str) -> None:
    """One line per cause on what to change, each with a link to the page that teaches it.
    For a Hugging Face example the first line is Trainer's setting, from the live check."""
    found = causes(check)
    if found:
        st.markdown(t("check.results.what_to_change"))
    said = None  # the cause Trainer's setting already says how to fix: one line per scheme
    if example in views.HF_EXAMPLES:
        st.markdown(hf_views.advice(example, check))
        said = hf_views.advised(check)
    for why, scenarios in found.items():
        if why != said:
            st.markdown(t(f"check.fix.{why}", scenarios=i18n.join(lang(), scenarios)))
        page = _page(TEACHES[why])
        label = t("check.fix.link", page=t(page.title_key))
        page_link(page.file, label=label, icon=":material/school:")


TENSOR = (  # the report's tensor names (states.State) -> their words in the reader's language
    (re.compile(r"parameter (?P<name>\S+)"), "check.results.tensor_parameter"),
    (re.compile(r"optimizer (?P<key>\S+) of (?P<name>\S+)"), "check.results.tensor_optimizer"),
)


def tensor_name(name: str) -> str:
    """A tensor of the report ("parameter 0.weight", "optimizer exp_avg of 0.weight") in the
    reader's language; a name of another shape as it is."""
    for pattern, key in TENSOR:
        if m := pattern.fullmatch(name):
            return t(key, **m.groupdict())
    return name


def _divergence(d: dict | None) -> str:
    if d is None:
        return t("check.results.none")
    if d["rank"] is None:  # every rank matched the reference alone, but not each other
        return t("check.results.ranks_differ")
    where = t("check.results.divergence", rank=d["rank"], tensor=tensor_name(d["tensor"]))
    if d["why"] == "differs":
        return where
    return i18n.join(lang(), [where, views.say("divergence_why", d["why"])], "clauses")


def _max_diff(s: dict) -> str:
    """The largest gap; when a tensor one side lacks stopped the comparison, the gap seen
    before it, as a lower bound (an undefined gap is never shown as a number)."""
    if s["max_abs_diff"] is not None:
        return f"{s['max_abs_diff']:.2e}"
    seen = (s["first_divergence"] or {}).get("abs_diff")
    return fmt(None) if seen is None else f"≥ {seen:.2e}"


def notes(s: dict) -> list[str]:
    """A scenario's notes in the reader's language: the ties of its scheme, the report's notes
    (the control's only when true: no evidence), a gap that stopped at a missing tensor."""
    out = []
    ties = [views.scheme_name(x) for x in s["matching_schemes"] if x != s["scheme"]]
    if ties:
        out.append(t("check.note.ties", schemes=i18n.join(lang(), ties)))
    codes = [n for n in s["notes"] if n != "control" or s["verdict"] == "no_evidence"]
    out += [views.say("note", n) for n in codes]
    if s["max_abs_diff"] is None and not s["passed"] and s["first_divergence"]:
        out.append(t("check.note.state_apart"))
    return out


# Cells that must read whole, each on one line in the wrapping table ("1.4e-15" was cut to
# "1.4e-" and "15", "未定义" to "未定" and "义" at 800 px): kept so by the table's style, not
# by joiners in the text, so a figure copied from the page pastes as a number (issue 45).
FIGURES = ("max_abs_diff", "residual")


def verdict_frame(check: dict, verdict=views.verdict_badge) -> pd.DataFrame:
    """One row per scenario, every cell text in the reader's language (the verdict on its
    colour; `verdict=views.verdict_text` for the download's plain words)."""
    return pd.DataFrame(
        {
            "scenario": views.say("scenario", s["name"]),
            "verdict": verdict(s),
            "max_abs_diff": _max_diff(s),
            "scheme": views.scheme_text(s),
            "residual": fmt(None) if s["residual"] is None else f"{s['residual']:.1e}",
            "first_divergence": _divergence(s["first_divergence"]),
            "notes": i18n.join(lang(), notes(s), "sentences"),
        }
        for s in views.named(check)
    )


def banner(check: dict) -> None:
    """The check's status, never over-claimed: a success only for the same update (qualified
    by the scenarios that are no evidence), an error for a different update or an unusable
    file, a warning when no scenario could tell; then its diagnoses, translated."""
    status = check["status"]
    untold = [s["name"] for s in check["scenarios"] if s["verdict"] == "no_evidence"]
    untold_names = i18n.join(lang(), [views.say("scenario", n) for n in untold])
    if status == "same_update":
        st.success(t("check.results.passed"), icon=":material/check:")
        if untold:
            st.info(t("check.results.untold", scenarios=untold_names), icon=":material/info:")
    elif status == "different":
        failed = [s["name"] for s in check["scenarios"] if s["verdict"] == "different"]
        where = i18n.join(lang(), [views.say("scenario", n) for n in failed])
        st.error(t("check.results.failed", scenarios=where), icon=":material/error:")
    elif status == "no_evidence":
        st.warning(t("check.results.no_evidence"), icon=":material/help:")
    else:
        st.error(t("check.results.unusable"), icon=":material/error:")
    explained = diagnoses.explained(check)
    if explained:
        st.markdown(t("check.results.why"))
        st.markdown("\n".join(f"- {line}" for line in explained))


def run_results(report: dict, example: str) -> None:
    """Everything a finished check shows: the verdict and its fixes, the table, the skipped
    scenarios, the measured weights."""
    check = report["checks"][0]
    shape = {"world_size": check["world_size"], "accum": check["accum_steps"]}
    st.subheader(t("check.results.heading"))
    # below float64 each scenario's tolerance is measured (10 x the reference's own floor)
    worst = max([check["tolerance"], *(s.get("tolerance", 0.0) for s in check["scenarios"])])
    tolerance = f"{worst:.0e}"
    example_name = views.say("example", example)
    st.caption(t("check.results.caption", example=example_name, tolerance=tolerance, **shape))
    banner(check)
    if not check["scenarios"]:  # an unusable file: no scenario ran, its diagnoses say why
        return
    fixes(check, example)
    frame = verdict_frame(check)
    config = {c: t(f"check.results.{c}") for c in frame.columns}
    plain = verdict_frame(check, views.verdict_text)
    downloads.table(
        frame, "trainer-check", data=plain, static=True, unbroken=FIGURES, column_config=config
    )
    st.caption(t("check.results.residual_means"))
    for skipped in check["skipped_scenarios"]:
        reason = views.SKIP_REASONS.get(skipped["reason"])
        why = t(f"check.skipped.{reason}") if reason else skipped["reason"]
        name = views.say("scenario", skipped["name"])
        st.caption(t("check.skipped.item", scenario=name, reason=why))
    st.subheader(t("check.results.weights_heading"))
    st.caption(t("check.results.weights_caption"))
    names = [views.say("scenario", s["name"]) for s in check["scenarios"]]
    rows = [
        row
        for s, name in zip(check["scenarios"], names, strict=True)
        for row in views.weight_rows(s["counts"], s["weights"], name)
    ]
    views.heat_map(rows, names, "chk_weights")
