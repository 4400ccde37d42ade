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
    every process counted first       a warm run's estimate holds its ranks and, unless an idle
                                      (or prestarting) zygote is left for it once every running
                                      warm run has one, a new zygote with its spares (ZYGOTE_MB):
                                      the pool starts one only for a run counted so
    idle zygotes give way             when memory is short, idle zygotes no run needs are
                                      retired before the run is told to wait or refused; the
                                      runtime's retiring thread retires those idle for the
                                      pool's `idle_timeout_s`, down to one. So a refusal lasts
                                      only while runs hold the memory: once they end, the next
                                      run fits

    nice -n 10 python -m pytest tests/runners/test_admission.py tests/runners/test_memory.py
"""

from __future__ import annotations

import enum
import gc
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from pclab.runners.memory import READING_MAX_AGE_S, ZYGOTE_MB, MemoryBudget
from pclab.runners.settings import Settings
from pclab.runners.warm_pool import PoolCounts

MEMORY_CHECK_S = 0.5  # how often a run held back by the memory budget measures again


class Queued(Protocol):
    """What admission reads of a run in the queue (run_queue.QueuedRun)."""

    memory_mb: float  # what its ranks (and a cold run's agent) are expected to add
    zygote: bool  # it takes a warm-pool zygote for its ranks
    reserved_mb: float  # set when admitted: memory_mb, plus ZYGOTE_MB when it needs a new one
    memory_checked: tuple[float, int]  # when memory was last measured for it, with N running


class ZygoteSupply(Protocol):
    """The warm pool as admission sees it (warm_pool.WarmPool)."""

    idle_timeout_s: float

    def counts(self) -> PoolCounts: ...

    def unready_mb(self) -> float: ...

    def retire_idle(self, keep: int, idle_for_s: float = 0.0) -> int: ...


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

    def __init__(
        self, settings: Settings, memory: MemoryBudget, pool: ZygoteSupply | None = None
    ) -> None:
        self.settings, self.memory, self.pool = settings, memory, pool

    def reserved_mb(self, running: Collection[Queued]) -> float:
        """What no reading may count yet: every running run's reservation and the zygote a
        `prestart` is still starting."""
        unready = self.pool.unready_mb() if self.pool is not None else 0.0
        return sum(run.reserved_mb for run in running) + unready

    def retire_expired(self, running: Collection[Queued]) -> int:
        """Retire the zygotes idle for the pool's `idle_timeout_s` that neither a running
        run nor the next click needs (one is kept); returns how many went."""
        if self.pool is None:
            return 0
        keep = max(1, self._pending(running, self.pool.counts()))
        return self.pool.retire_idle(keep, self.pool.idle_timeout_s)

    def on_arrival(self, run: Queued, waiting: int, running: Collection[Queued]) -> Verdict:
        """A new run, when `waiting` runs are in the queue and `running` hold slots."""
        must_wait = waiting > 0 or len(running) >= self.settings.max_concurrent_runs
        verdict = self._queued(waiting, running) if must_wait else None
        if verdict is None:  # a free slot: does the run fit the memory budget too?
            verdict = self._memory(run, running, waiting)
        if verdict.decision is Decision.ADMIT or verdict.decision is Decision.REFUSE:
            return verdict
        if waiting >= self.settings.max_waiting_runs:  # it would wait, and the queue is full
            message = f"busy: {len(running)} running and {waiting} waiting; try again shortly"
            return Verdict(Decision.REFUSE, message, {"reason": "queue", "waiting": waiting})
        return verdict

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
        cost = run.memory_mb + self._zygote_mb(run, running)
        used = self._short(cost, running)
        if used is not None and self._retire_surplus(run, running):
            used = self._short(cost, running)  # measured afresh: the retired ones are gone
        if used is None:
            run.reserved_mb = cost
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
        reserved = self.reserved_mb(running)
        # RSS first: it bounds PSS from above and costs 0.02 ms a process where a PSS reading
        # of the tree costs ~12 ms of CPU (smaps_rollup) on every click more than 5 s apart.
        if self.memory.lab_rss_mb() + reserved + memory_mb <= budget:
            return None
        used = self.memory.lab_mb(READING_MAX_AGE_S)
        if used + reserved + memory_mb > budget:  # before saying no, look again, freshly
            if not running:
                gc.collect()
            used = self.memory.lab_mb()
        return None if used + reserved + memory_mb <= budget else used

    def _pending(self, running: Collection[Queued], counts: PoolCounts) -> int:
        """Running warm runs that hold no zygote yet and none is being started for: each
        takes an idle one."""
        warm = sum(1 for run in running if run.zygote)
        return max(0, warm - counts.busy - (counts.starting - counts.prestarting))

    def _spare(self, running: Collection[Queued]) -> tuple[int, int]:
        """(zygotes idle or prestarting that no running run will take, of which idle)."""
        assert self.pool is not None
        counts = self.pool.counts()
        spare = counts.idle + counts.prestarting - self._pending(running, counts)
        return spare, counts.idle

    def _zygote_mb(self, run: Queued, running: Collection[Queued]) -> float:
        """ZYGOTE_MB when the run will need a zygote the pool has to start for it."""
        if not run.zygote or self.pool is None:
            return 0.0
        return 0.0 if self._spare(running)[0] > 0 else float(ZYGOTE_MB)

    def _retire_surplus(self, run: Queued, running: Collection[Queued]) -> bool:
        """Memory is short: retire the idle zygotes that neither a running run nor this one
        will use (the longest idle first). True when any went."""
        if self.pool is None:
            return False
        spare, idle = self._spare(running)
        surplus = min(spare - (1 if run.zygote else 0), idle)
        return surplus > 0 and self.pool.retire_idle(idle - surplus) > 0
