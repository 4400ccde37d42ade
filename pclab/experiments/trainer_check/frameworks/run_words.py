"""What a framework's run record says, in words: the cells of its row (the tail window, the
schedule, the N = 0 window, the restart, what to set), in whichever language `say` speaks.
"Frameworks, measured" passes the page's `t`; README.md's table the English catalogue. The
words live in locales/<lang>/frameworks.toml ([runs]) and check.toml ([run_mode.fix]).

    python -c "import pclab.experiments.trainer_check.frameworks.run_words as w; print(w.COLUMNS)"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pclab.experiments.trainer_check.frameworks.run_table import EMPTY, shown_scenario

Say = Callable[..., str]  # (catalogue key, **values) -> the words
COLUMNS = ("tail", "schedule", "empty", "resume", "set")  # after framework and version
TAIL_CODES = ("tail_window_scaled", "tail_window_dropped", "gradient_leak")
SCHEDULE_CODES = ("scheduler_rate", "schedule_length")


def _code_list(codes: list[str]) -> str:
    return ", ".join(f"`{c}`" for c in codes)


def _main(run: dict[str, Any]) -> dict[str, Any]:
    """The scenario a row's columns read (run_table.shown_scenario)."""
    found: dict[str, Any] = run["scenarios"][shown_scenario(list(run["scenarios"]))]
    return found


def tail(run: dict[str, Any], say: Say) -> str:
    """The uneven scenario's tail window: divided by K, never stepped, or its own count."""
    codes = _main(run)["codes"]
    steps = ", ".join(str(n) for n in run["steps_per_epoch"])
    reference = ", ".join(str(n) for n in run["reference_steps_per_epoch"])
    if "tail_window_dropped" in codes:
        words = say(
            "frameworks.runs.tail_dropped", codes=_code_list([c for c in TAIL_CODES if c in codes])
        )
    elif "tail_window_scaled" in codes:
        words = say("frameworks.runs.tail_scaled", scale=f"{run['tail_scale']:.3g}")
    else:
        words = say("frameworks.runs.tail_own")
    return words + " " + say("frameworks.runs.steps", steps=steps, reference=reference)


def schedule(run: dict[str, Any], say: Say) -> str:
    """How the loop stepped the intended schedule in the uneven scenario (`schedule`: the
    stepping of it that gives the loop's rates; None when none does)."""
    codes = _main(run)["codes"]
    if "scheduler_rate" in codes:
        return say("frameworks.runs.schedule_rate", rate=run["scheduler_rate"])
    if "schedule_length" in codes:
        return say("frameworks.runs.schedule_length")
    if run["schedule"] == "own_steps":  # the intended schedule, once per update of its own
        return say("frameworks.runs.schedule_own_steps")
    if run["schedule"] != "intended":  # wrong rates no code names
        return say("frameworks.runs.schedule_unnamed")
    return say("frameworks.runs.schedule_intended")


def empty(run: dict[str, Any], say: Say) -> str:
    """What the loop did at the N = 0 window (the codes the empty_window scenario adds)."""
    if EMPTY not in run["scenarios"]:  # a coupled run: every window holds items
        return say("frameworks.runs.empty_none")
    empty_codes = run["scenarios"][EMPTY]["codes"]
    added = [c for c in empty_codes if c not in _main(run)["codes"]]
    if "scheduler_on_skip" in added:
        return say("frameworks.runs.empty_scheduler")
    if "trainer_error" in added:  # it raised: nothing after that window ran
        return say("frameworks.runs.empty_raised")
    if added:
        return say("frameworks.runs.empty_other", codes=_code_list(added))
    if run.get("empty_steps"):  # stepped there, but no code of its own beside the others
        return say("frameworks.runs.empty_stepped")
    return say("frameworks.runs.empty_skipped")


def resume(record: dict[str, Any], say: Say) -> str:
    """Each kill point's verdict: the same run everywhere, or the codes and where."""
    points = record.get("resume")
    if points is None:
        return say("frameworks.runs.resume_none")
    same = [p for p in points if p["verdict"] == "same_run"]
    if len(same) == len(points):
        return say("frameworks.runs.resume_same", points=len(points))
    parts = [
        f"{_code_list(p['codes']) or p['verdict']} ({p['point']})"
        for p in points
        if p["verdict"] not in ("same_run", "no_evidence", "not_killed")
    ]
    unplaced = [p["point"] for p in points if p["verdict"] == "no_evidence"]
    if unplaced:  # restarts the check could not place, said once
        parts.append(say("frameworks.runs.resume_unplaced", points=", ".join(unplaced)))
    unreached = [p["point"] for p in points if p["verdict"] == "not_killed"]
    if unreached:  # the run never ran the microbatch it was to be killed at
        parts.append(say("frameworks.runs.resume_unreached", points=", ".join(unreached)))
    found = "; ".join(parts)
    if same:
        return say("frameworks.runs.resume_found", found=found, others=len(same))
    if all(p["verdict"] == "different" for p in points):
        return say("frameworks.runs.resume_all_differ", found=found)
    return say("frameworks.runs.resume_none_same", found=found)


def codes_found(record: dict[str, Any]) -> list[str]:
    """Every run and resume code of the record, each once: the run's scenarios, then resume."""
    found = [c for s in record["run"]["scenarios"].values() for c in s["codes"]]
    found += [c for p in record.get("resume") or () for c in p["codes"]]
    return list(dict.fromkeys(found))


def to_set(record: dict[str, Any], say: Say) -> str:
    """The fix line of each code found (and of a coupled loop's wrong pool), or that nothing
    needs changing."""
    codes = codes_found(record)
    pool = record["run"].get("pool")
    wrong = [] if pool in (None, "global_batch") else [pool]
    if not codes and not wrong:
        return say("frameworks.runs.nothing_to_set")
    said = [
        say("frameworks.runs.pool", pool=say(f"coupled.scheme.{p}"), code=p)
        + " "
        + say(f"coupled.fix.{p}")
        for p in wrong
    ]
    return " ".join(said + [say(f"check.run_mode.fix.{code}") for code in codes])


def cells(record: dict[str, Any], say: Say) -> dict[str, str]:
    """column -> its words (COLUMNS), for one framework's record."""
    run = record["run"]
    return {
        "tail": tail(run, say),
        "schedule": schedule(run, say),
        "empty": empty(run, say),
        "resume": resume(record, say),
        "set": to_set(record, say),
    }
