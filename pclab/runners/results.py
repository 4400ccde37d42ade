"""What a launch hands back: a `RunResult` with an `Outcome`, and the `ProgressEvent`s on the way.

result = launch("bench.noop_worker", 2)
if result.ok: ... result.ranks       # every rank's JSON, by rank
else:         ... result.outcome, result.message   # one line saying why
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


class Outcome(enum.Enum):
    """How a launch ended. The values are stable strings (run records, tests)."""

    FINISHED = "finished"  # every rank reported
    FAILED = "failed"  # a rank's root cause, or outputs that do not fit together
    TIMEOUT = "timeout"  # the wall-clock limit ran out; every process was killed
    CANCELLED = "cancelled"  # stopped on request (Stop, rerun, closed tab)
    BUSY = "busy"  # the run queue or the memory budget was full: nothing was launched


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """Outcome of one launch: every rank's JSON when it finished, else a one-line `message`.

    `report` is the experiment's report built from the ranks (None until built, or when the
    run did not finish); `worker_hash` is the sha256 of the worker's source.
    """

    outcome: Outcome
    seconds: float
    worker_hash: str
    message: str = ""
    ranks: tuple[dict[str, Any], ...] = ()
    report: Any = None  # the experiment's report (a TypedDict of its own), once built

    @classmethod
    def finished(
        cls, ranks: tuple[dict[str, Any], ...], seconds: float, worker_hash: str
    ) -> RunResult:
        return cls(
            outcome=Outcome.FINISHED, ranks=tuple(ranks), seconds=seconds, worker_hash=worker_hash
        )

    @classmethod
    def ended(cls, outcome: Outcome, message: str, seconds: float, worker_hash: str) -> RunResult:
        """A run that did not finish (`outcome` is not FINISHED), with its reason."""
        if outcome is Outcome.FINISHED:
            raise ValueError("outcome=FINISHED is invalid here: use RunResult.finished")
        return cls(outcome=outcome, message=message, seconds=seconds, worker_hash=worker_hash)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.FINISHED

    @property
    def code(self) -> str:
        """The outcome's stable string ("" for a finished run), as run records carry it."""
        return "" if self.ok else self.outcome.value

    def failed(self, message: str) -> RunResult:
        """This run, turned into a failure (its ranks' outputs did not fit together)."""
        return replace(self, outcome=Outcome.FAILED, message=message, ranks=(), report=None)

    def with_report(self, report: Any) -> RunResult:
        return replace(self, report=report)


class Event(enum.StrEnum):
    """What a progress event says happened (stable codes: the catalogue's runs.progress.*)."""

    START = "start"  # world_size, worker, path "pool" or "torchrun"
    QUEUED = "queued"  # position, running
    SHARED = "shared"  # an identical run is in progress
    BUSY = "busy"  # waiting, reason "line" or "memory" (with used_mb, budget_mb)
    MEMORY = "memory"  # reason, used_mb, budget_mb: waiting in line for memory to free
    POOL_FALLBACK = "pool_fallback"  # reason: the warm pool cannot start; torchrun does
    RANK_DONE = "rank_done"  # rank, done, world_size
    FINISHED = "finished"  # seconds
    FAILED = "failed"  # message
    TIMEOUT = "timeout"  # seconds, timeout_s
    CANCELLED = "cancelled"  # seconds
    KILL_POINT = "kill_point"  # microbatch: a resume check killed every rank there, as planned


@dataclass(frozen=True)
class ProgressEvent:
    """A progress line: a stable `event` code with its `values`, so a page can say it in the
    reader's language from its catalogue, and plain English `text` (what `str()` gives) for a
    terminal or a log."""

    event: Event
    text: str
    values: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, event: str, text: str, **values: object) -> ProgressEvent:
        """ValueError for an event code that is not an `Event`."""
        return cls(Event(event), text, values)

    def __str__(self) -> str:
        return self.text
