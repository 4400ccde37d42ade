"""Admission to the run queue (runners.run_queue): who may take a slot now, who waits and why,
who is turned away. The whole policy is here; the queue only holds the runs and applies it.

    a run waits behind another        first come, first served: a new run that finds others
                                      waiting, or every slot (`max_concurrent_runs`) taken,
                                      joins the end of the queue ("queued", its position)
    a full queue answers at once      beyond `max_waiting_runs` waiting runs: "busy", reason
                                      "queue"
    memory is budgeted                a run takes a slot only while the lab's process tree
                                      (runners.memory, by PSS) plus its estimate and that of
                                      every running run fits PCL_MEMORY_BUDGET_MB; otherwise it
                                      waits ("memory") while a running run may free some, or
                                      is refused at once ("busy", reason "memory") when none runs

    nice -n 10 python -m pytest tests/runners/test_run_queue.py tests/runners/test_memory.py
"""

from __future__ import annotations

import enum
import gc
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from pclab.runners.memory import READING_MAX_AGE_S, MemoryBudget
from pclab.runners.settings import Settings

MEMORY_CHECK_S = 0.5  # how often a run held back by the memory budget measures again


class Queued(Protocol):
    """What admission reads of a run in the queue (run_queue.QueuedRun)."""

    memory_mb: float  # what its processes are expected to add to the lab's tree
    memory_checked: tuple[float, int]  # when memory was last measured for it, with N running


class Decision(enum.Enum):
    ADMIT = "admit"  # take a slot now
    QUEUE = "queued"  # wait for a slot or for the runs ahead
    MEMORY = "memory"  # at the head with a slot free, waiting for memory a running run holds
    REFUSE = "busy"  # turned away: the queue is full, or memory is and nothing runs


@dataclass(frozen=True)
class Verdict:
    """A decision, and what the run's requesters are told about it (its event's text and
    values, as runners.results.ProgressEvent carries them)."""

    decision: Decision
    message: str = ""
    values: dict[str, object] = field(default_factory=dict)


ADMIT = Verdict(Decision.ADMIT)


class Admission:
    """The run queue's policy: its concurrency limit, its length and the memory budget."""

    def __init__(self, settings: Settings, memory: MemoryBudget) -> None:
        self.settings, self.memory = settings, memory

    def on_arrival(self, run: Queued, waiting: int, running: Collection[Queued]) -> Verdict:
        """A new run, when `waiting` runs are in the queue and `running` hold slots."""
        if waiting > 0 or len(running) >= self.settings.max_concurrent_runs:
            if waiting >= self.settings.max_waiting_runs:
                message = f"busy: {len(running)} running and {waiting} waiting; try again shortly"
                return Verdict(Decision.REFUSE, message, {"reason": "queue", "waiting": waiting})
            return self._queued(waiting, running)
        return self._memory(run, running, waiting)

    def at_head(self, run: Queued, ahead: int, running: Collection[Queued]) -> Verdict:
        """A run in the queue with `ahead` runs before it: admitted when it is first, a slot
        is free and memory fits (measured at most every MEMORY_CHECK_S, or as soon as a run
        has ended)."""
        if ahead > 0 or len(running) >= self.settings.max_concurrent_runs:
            return self._queued(ahead, running)
        checked_at, checked_running = run.memory_checked
        due = time.monotonic() - checked_at >= MEMORY_CHECK_S
        if not due and len(running) >= checked_running:
            return Verdict(Decision.MEMORY)  # nothing changed since the last reading
        return self._memory(run, running, ahead)

    def _queued(self, ahead: int, running: Collection[Queued]) -> Verdict:
        position = ahead + 1
        text = f"waiting in the run queue: position {position} ({len(running)} running)"
        return Verdict(Decision.QUEUE, text, {"position": position, "running": len(running)})

    def _memory(self, run: Queued, running: Collection[Queued], waiting: int) -> Verdict:
        """Admitted when the run fits the budget beside what the tree holds and every running
        run's estimate; else a wait ("memory") or, when nothing runs that could free any, a
        refusal."""
        run.memory_checked = (time.monotonic(), len(running))
        used = self._short(run.memory_mb, running)
        if used is None:
            return ADMIT
        budget = self.memory.budget_mb
        message = f"busy: the lab's processes use {used:.0f} MB of their {budget} MB memory budget"
        values: dict[str, object] = {
            "reason": "memory",
            "used_mb": round(used),
            "budget_mb": budget,
            "waiting": waiting,
        }
        return Verdict(Decision.MEMORY if running else Decision.REFUSE, message, values)

    def _short(self, memory_mb: float, running: Collection[Queued]) -> float | None:
        """None when `memory_mb` more fits; else the MB the tree holds. With nothing running,
        a miss runs Python's collector once before measuring again (the server itself may hold
        garbage: Streamlit's forced collection after each script run is off)."""
        budget = self.memory.budget_mb
        reserved = sum(run.memory_mb for run in running)
        used = self.memory.lab_mb(READING_MAX_AGE_S)
        if used + reserved + memory_mb > budget:  # before saying no, look again, freshly
            if not running:
                gc.collect()
            used = self.memory.lab_mb()
        return None if used + reserved + memory_mb <= budget else used
