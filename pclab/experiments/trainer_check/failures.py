"""A scenario that could not be judged, as a diagnosis: what each rank saw when the trainer
raised, a rank ran past the deadline or the ranks' collectives did not pair up (guard.py, in
one launch), or what the launcher said of a rank that died (relaunch.py). Generic over how
a scenario is run, so any mode of the check can give its scenarios these codes:

    trainer_error        the trainer raised (file:line, the exception), or a rank died
    collective_mismatch  a rank skipped or added a collective, or left in the middle of one
    timeout              a rank was still in the scenario at its deadline
"""

from __future__ import annotations

import re
from typing import Any

from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.diagnoses import _diagnosis as _failure  # the one gate

FAILURE_CODES = {
    "trainer_error": "trainer_error",
    "timeout": "timeout",
    "mismatch": "collective_mismatch",
    "peer": "collective_mismatch",
}


def scenario_failed(scenario: str, seen: list[dict[str, Any]]) -> Diagnosis:
    """One scenario's failure from what each rank saw ({"rank", "kind", "text"}; kind
    trainer_error, timeout, mismatch or peer): the trainer's own exception first, then a
    deadline, then collectives that did not pair up (a peer that left is only a symptom)."""
    order = ("trainer_error", "timeout", "mismatch", "peer")
    first = min(seen, key=lambda s: (order.index(s["kind"]), s["rank"]))
    code = FAILURE_CODES[first["kind"]]
    ranks = {s["rank"]: s["text"] for s in sorted(seen, key=lambda s: s["rank"])}
    same = [str(r) for r, t in ranks.items() if r != first["rank"] and t == first["text"]]
    others = "; ".join(
        f"rank {r}: {t}" for r, t in ranks.items() if r != first["rank"] and t != first["text"]
    )
    also = f" (the same on rank{'s' if len(same) > 1 else ''} {', '.join(same)})" if same else ""
    also += f" (meanwhile {others})" if others else ""
    if code == "trainer_error":
        message = (
            f"{scenario}: the trainer raised on rank {first['rank']}: {first['text']}{also}. "
            "This scenario's verdict is `different`; the other scenarios are judged without it"
        )
    elif code == "timeout":
        message = (
            f"{scenario}: rank {first['rank']} timed out, {first['text']}{also}: a rank that "
            "waits for a collective its peers never make, or a step that never returns"
        )
    else:
        message = (
            f"{scenario}: the ranks' collectives did not pair up (rank {first['rank']}: "
            f"{first['text']}{also}). Every rank must make the same collectives in the same "
            "order, also a rank with no labels: does train_step skip an all_reduce when its "
            "count is 0?"
        )
    return _failure(code, message, scenario, rank=first["rank"], ranks=ranks)


def launch_failed(
    entry: dict[str, Any], outcome: str, message: str, doing: dict[int, str] | None = None
) -> Diagnosis:
    """A scenario during which a rank died or the launch ran out of time (the launch layer
    relaunched the scenarios after it): the launcher's one line, with its meaning. `entry`:
    the scenario's name and shape as its progress line gave them (label_positions, or the
    coupled mode's sizes: items per microbatch, which a gather needs equal across ranks);
    `doing`: what each rank was doing when it ended, where its stack said (relaunch.py)."""
    doing = doing or {}
    scenario = entry["name"]
    if outcome == "timeout":
        return _failure(
            "timeout", f"{scenario}: the run {message}: a step that never returns?", scenario
        )
    mismatch = any(m in message for m in ("collective mismatch", "doesn't match expected size"))
    if mismatch or "Connection" in message:
        sizes = re.search(r"(\d+) vs (\d+)\. Received data size", message)
        found = re.match(r"rank (\d+):", message)
        rank = int(found.group(1)) if found else None
        said = (
            f"rank {'?' if rank is None else rank} aborted: Gloo received {sizes.group(1)} "
            f"bytes where its own collective expected {sizes.group(2)}"
            if sizes
            else message
        )
        ranks = {rank: said.split(": ", 1)[1]} if sizes and rank is not None else {}
        for r, where in doing.items():
            ranks[r] = f"{where}, {ranks[r]}" if r in ranks else where
        were = "; ".join(f"rank {r} was {w}" for r, w in sorted(doing.items()))
        text = (
            f"{scenario}: a rank died in a collective its peers did not make ({said}"
            f"{'; ' + were if were else ''}). {_mismatch_hint(entry)}"
        )
        details = {"sizes": entry["sizes"]} if "sizes" in entry else {}
        return _failure("collective_mismatch", text, scenario, rank=rank, ranks=ranks, **details)
    text = f"{scenario}: a rank died ({message}). The other scenarios are judged without it"
    return _failure("trainer_error", text, scenario, rank=None, ranks={})


def unequal_microsteps(sizes: list[list[int]]) -> list[int]:
    """The microsteps whose items differ between ranks (a gather of them cannot pair up)."""
    steps = min((len(row) for row in sizes), default=0)
    return [k for k in range(steps) if len({row[k] for row in sizes}) > 1]


def _mismatch_hint(entry: dict[str, Any]) -> str:
    """What to look for: in the coupled mode with ranks of unequal items, the gather."""
    sizes: list[list[int]] = entry.get("sizes") or []
    unequal = unequal_microsteps(sizes)
    if not unequal:
        return (
            "Every rank must make the same collectives in the same order, also a rank with no "
            "labels: does train_step skip an all_reduce when its count is 0?"
        )
    held = ", ".join(f"rank {r}: {row[unequal[0]]}" for r, row in enumerate(sizes))
    return (
        f"The ranks held different numbers of items in microstep {unequal[0]} ({held}): a "
        "gather (an all_gather of embeddings) needs the same number of rows on every rank. "
        "Pad every rank's rows to the largest count and mask the padding, or keep a "
        "microstep's items equal across ranks (as the default scenarios do). The other "
        "scenarios are judged without it"
    )
