"""The run mode's summary lines (summary.py writes the headline): the run's diagnoses, then
per scenario its verdict and what it can support, and one line per update: epoch and window,
N, the rates yours and intended, the loop's steps in the window, max |delta| and the scheme."""

from __future__ import annotations

from typing import Any

from pclab.experiments.trainer_check.judging import SOLVE_RTOL
from pclab.experiments.trainer_check.summary_words import STATE_UNREAD, VERDICT, number


def _update(i: int, u: dict[str, Any], k: int, rtol: float, count: str) -> str:
    where = f"e{u['epoch']}·w{u['window']}"
    tail = " tail" if u["microsteps"] < k else ""
    if u["skipped"]:
        return f"      {i:>2} {where:<7} {count}={u['num_valid_labels']:<4} skipped (N = 0)"
    diff = "undefined" if u["max_abs_diff"] is None else f"{u['max_abs_diff']:.1e}"
    rates = f"lr {number(u['lr_yours'])} / {number(u['lr_intended'])}"
    scheme = u.get("scheme") or "—"
    leak = f"  leak {u['leak']:.3g}" if (u.get("leak") or 0) > rtol else ""  # as diagnosed
    return (
        f"      {i:>2} {where:<7} k'={u['microsteps']}{tail} {count}={u['num_valid_labels']:<4} "
        f"{rates}  steps {u['optimizer_steps']}  max |delta| {diff}  scheme {scheme}{leak}"
    )


def _scenario(s: dict[str, Any], check: dict[str, Any], count: str) -> list[str]:
    claims = ", ".join(s.get("claims", [])) or "nothing"
    lines = [
        f"\n  {s['name']:<17} {VERDICT[s['verdict']]}   evidence for: {claims}   "
        f"steps {s.get('steps')} / {s.get('reference_steps')}   tolerance {s['tolerance']:.1e}"
    ]
    d = s.get("first_divergence")
    if d:
        lines.append(f"    first divergence: update {d.get('update')} ({d.get('why')})")
    if "optimizer_state_unread" in s.get("notes", ()):
        lines.append(f"    note: {STATE_UNREAD}")
    head = f"{count:<5}"
    lines.append(f"    update  window   {head} lr yours / intended   steps   max |delta|   scheme")
    rtol = SOLVE_RTOL[check.get("dtype", "float64")]
    k = check["accum_steps"]
    lines.extend(_update(i, u, k, rtol, count) for i, u in enumerate(s.get("updates", [])))
    for diagnosis in check.get("diagnoses", []):
        if diagnosis.get("scenario") == s["name"]:
            lines.append(f"    diagnosis {diagnosis['code']}: {diagnosis['message']}")
    return lines


def window_rerun(entry: dict[str, Any]) -> bool:
    """A kill point's entry whose restart went back before the kill and is still the same
    run: the loop checkpoints only at update boundaries (as the HF Trainer documents), so the
    killed window ran again from its start. Said as such, never as a mistake."""
    back, killed = entry.get("resumed_from"), entry.get("killed_at")
    return (
        entry["verdict"] == "same_run" and back is not None and killed is not None and back < killed
    )


def _resume(entry: dict[str, Any]) -> str:
    """One kill point of a resume check, in a line."""
    head = f"    {entry['point']:<15} killed at microbatch {entry['killed_at']}"
    if entry["verdict"] == "not_killed":
        return f"{head}: the run ended before it"
    if entry["verdict"] == "no_evidence":
        return f"{head}: no evidence (its restart's inputs are not the check's: not placed)"
    back = entry.get("resumed_from")
    said = "same run" if entry["verdict"] == "same_run" else "DIFFERENT"
    part = entry.get("first_divergence")
    where = "" if part is None else f" from update {part}"
    codes = ", ".join(entry.get("codes", []))
    if window_rerun(entry):
        said += " (it checkpoints at update boundaries: the killed window ran again from its start)"
    return f"{head}, resumed from {back}: {said}{where}" + (f" ({codes})" if codes else "")


def lines(check: dict[str, Any], only_failing: bool = False, count: str = "N") -> list[str]:
    """The lines under the headline (`only_failing`: the scenarios that differ; `count`: what
    a window's size counts, N labels or a coupled loop's items)."""
    run = [d for d in check.get("diagnoses", []) if d.get("scenario") is None]
    found = [f"  diagnosis {d['code']}: {d['message']}" for d in run]
    for s in check["scenarios"]:
        if not only_failing or s.get("verdict") == "different":
            found.extend(_scenario(s, check, count))
    if check.get("resume"):
        found.append("\n  resume (killed on every rank, restarted from its checkpoint_dir):")
        found.extend(_resume(e) for e in check["resume"])
    return found
