"""One registry of torchrun jobs for the whole server process: share, queue, refuse, cancel.

Every `runners.launcher.launch` call goes through `submit`, so every experiment's `run()`
gets these rules without knowing about them:

    identical requests share one run   key: (worker, world_size, args, worker code hash);
                                       a second identical request waits for the first's
                                       RunResult instead of launching again
    distinct requests queue, FIFO      at most `max_concurrent_runs` jobs hold processes at
                                       once (runners.settings: PCL_MAX_CONCURRENT_RUNS, half
                                       the CPUs, at least 1 - so 1 on a 2-core box); a waiting
                                       job's requesters see "queued" events with their position
    a full queue answers at once       beyond `max_waiting_runs` waiting jobs (PCL_MAX_WAITING_RUNS,
                                       default 8) a new request gets Outcome.BUSY immediately
    memory is budgeted                 a job takes a slot only while the server's whole process
                                       tree (runners.memory: the server, zygotes, torchrun
                                       agents and ranks, by PSS) plus the job's estimate and
                                       that of every running job fits PCL_MEMORY_BUDGET_MB;
                                       otherwise it waits in line ("memory" events) while a
                                       running job may free some, or is refused at once
                                       (Outcome.BUSY, reason "memory") when nothing runs that
                                       could: the server is never the thing that runs out
    nobody waiting, nothing running    a requester leaves on its cancel check, its own
                                       time limit or an exception in its progress callback
                                       (Streamlit's Stop / rerun / closed tab); when the last
                                       one leaves, the job is cancelled and its processes
                                       and temporary directory are gone before `submit`
                                       returns or re-raises

A job runs in its own thread; each requester polls in its *own* thread and calls its own
progress callback there, so a Streamlit page only ever draws from its script thread.

    python -c "from pclab.runners import jobs; print(jobs.in_flight())"
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar

from pclab.runners import memory
from pclab.runners.results import Outcome, ProgressEvent, RunResult
from pclab.runners.settings import current

POLL_S = 0.1  # how often a requester forwards events and checks its cancel flag
MEMORY_CHECK_S = 0.5  # how often a job held back by the memory budget measures again
# A reading of the tree's memory this recent is used as is: measuring takes ~20 ms, on the
# path from a click to its run. Every job measures afresh when it ends (off that path), and
# a running job's own estimate counts beside any reading.
MEMORY_MAX_AGE_S = 5.0
CLEANUP_S = 30.0  # longest wait for a cancelled job's processes to be stopped and reaped
# launched: torchrun jobs started; shared: requests served by another's run; busy: refused;
# cancelled: jobs ended because nobody waited any more; max_running: peak concurrent jobs.
STATS: Counter[str] = Counter()

Cancel = threading.Event | Callable[[], object] | None
_CANCEL: ContextVar[Cancel] = ContextVar("pcl_cancel", default=None)
_LOCK = threading.Condition()  # guards everything below (an RLock inside: re-entrant)
_JOBS: dict[Hashable, Job] = {}  # in flight, by key: what an identical request joins
_WAITING: list[Job] = []  # FIFO of jobs waiting for a slot
_RUNNING: set[Job] = set()  # jobs holding a slot (their processes may be alive)
_STARTED: set[Job] = set()  # jobs that took a slot and have not yet measured memory after


@contextlib.contextmanager
def cancel_when(check: Cancel) -> Iterator[None]:
    """Within the block, launches from this thread also stop when `check` fires.

    `check` is a threading.Event or a zero-argument callable, polled every POLL_S seconds
    in the requester's thread. A callable may also *raise* (Streamlit raises its stop or
    rerun exception from any element call): the run is cleaned up and the exception goes on.
    """
    token = _CANCEL.set(check)
    try:
        yield
    finally:
        _CANCEL.reset(token)


def _is_set(check: Cancel) -> bool:
    if check is None:
        return False
    if isinstance(check, threading.Event):
        return check.is_set()
    return bool(check())


class Job:
    """One run in flight: its deadline, its requesters' event queues, and its result."""

    def __init__(
        self,
        key: Hashable,
        work: Callable[[Job], RunResult],
        timeout_s: float,
        worker_hash: str,
        memory_mb: float = 0.0,
    ):
        self.key, self.work, self.timeout_s, self.worker_hash = key, work, timeout_s, worker_hash
        self.memory_mb = memory_mb  # what its processes are expected to add (runners.memory)
        self.start = time.monotonic()
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.result: RunResult | None = None
        self.waiters: list[queue.SimpleQueue[ProgressEvent]] = []
        self.last_queued: ProgressEvent | None = None  # replayed to a late joiner
        self.thread = threading.Thread(target=self._main, name="pcl-job", daemon=True)

    def say(self, event: str, text: str, **values: object) -> None:
        """Send a progress event to every requester (each forwards it in its own thread)."""
        line = ProgressEvent.of(event, text, **values)
        with _LOCK:
            if event == "queued":
                self.last_queued = line
            for waiter in self.waiters:
                waiter.put(line)

    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def _end(self, outcome: Outcome, message: str) -> RunResult:
        seconds = time.monotonic() - self.start
        return RunResult.ended(outcome, message, seconds, self.worker_hash)

    def _wait_for_slot(self) -> RunResult | None:
        """Hold its place in line (taken in `submit`) until a slot is free (None), or end
        unstarted."""
        with _LOCK:
            if self in _RUNNING:  # `submit` found a free slot and nobody in line
                return None
            try:
                # what the requesters were last told (a place in line, or "memory"), and when
                # memory was last measured with how many jobs running
                shown: int | str | None = None
                measured = (0.0, -1)
                while True:
                    if self.cancel.is_set():
                        return self._end(Outcome.CANCELLED, "stopped on request before it started")
                    if time.monotonic() - self.start >= self.timeout_s:
                        message = (
                            f"timed out after {self.timeout_s:g} s waiting for other runs to finish"
                        )
                        self.say(
                            "timeout", message, seconds=self.timeout_s, timeout_s=self.timeout_s
                        )
                        return self._end(Outcome.TIMEOUT, message)
                    ahead = _WAITING.index(self)
                    slot = ahead == 0 and len(_RUNNING) < current().max_concurrent_runs
                    again = time.monotonic() - measured[0] >= MEMORY_CHECK_S
                    if slot and (again or len(_RUNNING) < measured[1]):  # or a job just ended
                        measured = (time.monotonic(), len(_RUNNING))
                        used = _memory_short(self.memory_mb, collect=not _RUNNING)
                        if used is None:
                            _take_slot(self)
                            return None
                        message = _memory_message(used)
                        if not _RUNNING:  # nothing running could free it: say so now
                            STATS["busy"] += 1
                            self.say("busy", message, waiting=len(_WAITING), **_memory_values(used))
                            return self._end(Outcome.BUSY, message)
                        if shown != "memory":
                            shown = "memory"
                            self.say("memory", message, **_memory_values(used))
                    elif not slot and ahead + 1 != shown:
                        shown = ahead + 1
                        text = f"waiting in line: position {shown} ({len(_RUNNING)} running)"
                        self.say("queued", text, position=shown, running=len(_RUNNING))
                    _LOCK.wait(POLL_S)
            finally:
                _WAITING.remove(self)
                _LOCK.notify_all()

    def _main(self) -> None:
        result = None
        try:
            result = self._wait_for_slot()
            if result is None:
                try:
                    result = self.work(self)
                finally:
                    with _LOCK:
                        _RUNNING.discard(self)
                        _LOCK.notify_all()
        except Exception as exc:  # a launcher bug must still answer every requester
            result = self._end(Outcome.FAILED, f"launcher error: {type(exc).__name__}: {exc}")
        finally:
            with _LOCK:
                self.result = result or self._end(Outcome.FAILED, "launcher error: no result")
                if _JOBS.get(self.key) is self:
                    del _JOBS[self.key]  # a later identical request launches afresh
                if self.result.outcome is Outcome.CANCELLED:
                    STATS["cancelled"] += 1
            self.done.set()
            if self in _STARTED:
                _STARTED.discard(self)
                memory.lab_mb()  # a fresh reading for the next job, off its click's path


def submit(
    key: Hashable,
    work: Callable[[Job], RunResult],
    *,
    timeout_s: float,
    worker_hash: str,
    progress: Callable[[ProgressEvent], None] | None = None,
    cancel: Cancel = None,
    memory_mb: float = 0.0,
) -> RunResult:
    """Run `work(job)` once per in-flight `key`, bounded and queued; returns its RunResult.

    Args:
        key: what makes two requests identical.
        work: the launch itself; it must poll `job.cancelled()` and honour `job.timeout_s`
            counted from `job.start` (the time in line included).
        timeout_s: this request's wall-clock limit (a joiner's own limit; a new job's too).
        progress: called in this thread with every ProgressEvent of the job.
        cancel: an Event or callable; default: the one installed by `cancel_when`.
        memory_mb: what the job's processes are expected to add to the server's tree.
    Returns:
        The job's RunResult (shared by identical requests), or one ended BUSY, CANCELLED
        or TIMEOUT for this request alone.
    """
    cancel = _CANCEL.get() if cancel is None else cancel
    request = _Request(timeout_s, worker_hash, progress, cancel)
    admitted = _admit(key, work, request, memory_mb)
    if isinstance(admitted, _Refusal):
        return _refuse(admitted, request)
    return _await(admitted, request)


class _Request:
    """One caller of `submit`: its own event queue, clock, limit and ways to hear and stop."""

    def __init__(
        self,
        timeout_s: float,
        worker_hash: str,
        progress: Callable[[ProgressEvent], None] | None,
        cancel: Cancel,
    ) -> None:
        self.events: queue.SimpleQueue[ProgressEvent] = queue.SimpleQueue()
        self.timeout_s, self.worker_hash = timeout_s, worker_hash
        self.progress, self.cancel = progress, cancel
        self.start = 0.0  # set under the registry's lock, when the request is admitted
        self.joined = False

    def tell(self, event: ProgressEvent) -> None:
        if self.progress is not None:
            self.progress(event)

    def ended(self, outcome: Outcome, message: str) -> RunResult:
        seconds = time.monotonic() - self.start
        return RunResult.ended(outcome, message, seconds, self.worker_hash)


class _Refusal:
    """Why a request was turned away at once: the line was full, or memory was and nothing
    running could free it (`used_mb` then holds what the tree used)."""

    def __init__(self, waiting: int, running: int, used_mb: float | None) -> None:
        self.waiting, self.running, self.used_mb = waiting, running, used_mb


def _admit(
    key: Hashable, work: Callable[[Job], RunResult], request: _Request, memory_mb: float
) -> Job | _Refusal:
    """Join the identical job in flight, start a new one (a slot or a place in line), or
    refuse: all under the registry's lock, so the very next request already counts this one."""
    with _LOCK:
        # The request's clock starts under the lock: a joiner then never starts before the
        # job it joins, so an equal limit always defers to the job's own (plus its cleanup)
        # and identical requests share one result.
        request.start = time.monotonic()
        job = _JOBS.get(key)
        if job is not None:
            STATS["shared"] += 1
            request.joined = True
            request.events.put(
                ProgressEvent.of("shared", "an identical run is in progress; sharing its result")
            )
            if job.last_queued is not None and job not in _RUNNING:
                request.events.put(job.last_queued)
        else:
            waiting, running, used = len(_WAITING), len(_RUNNING), None
            must_wait = waiting > 0 or running >= current().max_concurrent_runs
            if not must_wait:  # a free slot: does the job fit the memory budget too?
                used = _memory_short(memory_mb, collect=not _RUNNING)
                must_wait = used is not None
            line_full = must_wait and waiting >= current().max_waiting_runs
            if line_full or (used is not None and not _RUNNING):
                STATS["busy"] += 1
                return _Refusal(waiting, running, used)
            job = Job(key, work, request.timeout_s, request.worker_hash, memory_mb)
            _JOBS[key] = job
            if must_wait:
                _WAITING.append(job)
            else:
                _take_slot(job)
        job.waiters.append(request.events)
        if not request.joined:
            job.thread.start()
        return job


def _refuse(refusal: _Refusal, request: _Request) -> RunResult:
    """Turned away at once: the line is full, or memory is and nothing runs."""
    values: dict[str, object]
    if refusal.used_mb is not None and not refusal.running:
        message, values = _memory_message(refusal.used_mb), _memory_values(refusal.used_mb)
    else:
        waiting, running = refusal.waiting, refusal.running
        message = f"busy: {running} running and {waiting} waiting; try again shortly"
        values = {"reason": "line"}
    request.tell(ProgressEvent.of("busy", message, waiting=refusal.waiting, **values))
    return RunResult.ended(Outcome.BUSY, message, 0.0, request.worker_hash)


def _await(job: Job, request: _Request) -> RunResult:
    """Forward the job's events until its result, this request's stop or its own limit."""
    # A request relies on the job's own limit (plus its cleanup) when that ends first; a
    # joiner with a shorter limit of its own leaves at that limit instead.
    deadline = request.start + request.timeout_s
    if not request.joined or job.start + job.timeout_s <= deadline:
        deadline = job.start + job.timeout_s + CLEANUP_S
    try:
        while True:
            finished = job.done.is_set()
            _forward(request.events, request.progress)
            if finished:
                assert job.result is not None  # set before `done`
                return job.result
            if _is_set(request.cancel):
                _leave(job, request.events)
                message = "stopped on request; every process of the run was ended"
                seconds = time.monotonic() - request.start
                request.tell(ProgressEvent.of("cancelled", message, seconds=seconds))
                return request.ended(Outcome.CANCELLED, message)
            if time.monotonic() >= deadline:
                _leave(job, request.events)
                limit = request.timeout_s
                message = f"timed out after {limit:g} s waiting for an identical run to finish"
                return request.ended(Outcome.TIMEOUT, message)
            job.done.wait(POLL_S)
    except BaseException:
        _leave(job, request.events)  # Stop, rerun, closed tab, Ctrl-C: nothing may outlive it
        raise


def _memory_short(memory_mb: float, collect: bool) -> float | None:
    """None when a job expected to add `memory_mb` fits the budget beside what the server's
    tree holds and every running job's estimate; else the MB the tree holds. With `collect`,
    a miss runs Python's collector once and measures again (the server itself may hold
    garbage: Streamlit's forced collection after each script run is off)."""
    budget = current().memory_budget_mb
    reserved = sum(job.memory_mb for job in _RUNNING)
    used = memory.lab_mb(MEMORY_MAX_AGE_S)
    if used + reserved + memory_mb > budget:  # before saying no, look again, freshly
        if collect:
            gc.collect()
        used = memory.lab_mb()
    return None if used + reserved + memory_mb <= budget else used


def _memory_values(used: float) -> dict[str, object]:
    return {"reason": "memory", "used_mb": round(used), "budget_mb": current().memory_budget_mb}


def _memory_message(used: float) -> str:
    budget = current().memory_budget_mb
    return f"busy: the lab's processes use {used:.0f} MB of their {budget} MB memory budget"


def _take_slot(job: Job) -> None:
    """Move `job` into a free slot (the caller holds _LOCK)."""
    _RUNNING.add(job)
    _STARTED.add(job)
    STATS["launched"] += 1
    STATS["max_running"] = max(STATS["max_running"], len(_RUNNING))


def _forward(
    mine: queue.SimpleQueue[ProgressEvent], progress: Callable[[ProgressEvent], None] | None
) -> None:
    while True:
        try:
            line = mine.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(line)


def _leave(job: Job, mine: queue.SimpleQueue[ProgressEvent]) -> None:
    """Stop waiting; the last requester to leave cancels the job and waits for its cleanup."""
    with _LOCK:
        if mine in job.waiters:
            job.waiters.remove(mine)
        last = not job.waiters and not job.done.is_set()
        if last:
            job.cancel.set()
            if _JOBS.get(job.key) is job:
                del _JOBS[job.key]  # a rerun's identical request must not join a dying job
    if last:
        job.done.wait(CLEANUP_S)


def in_flight() -> dict[str, int]:
    """How many jobs wait and run right now, and how many requesters they serve."""
    with _LOCK:
        jobs = set(_JOBS.values()) | set(_WAITING) | _RUNNING
        return {
            "waiting": len(_WAITING),
            "running": len(_RUNNING),
            "requesters": sum(len(j.waiters) for j in jobs),
        }


@atexit.register
def _shutdown() -> None:
    """On interpreter exit, cancel every job and wait for its processes to be stopped."""
    with _LOCK:
        jobs = set(_JOBS.values()) | set(_WAITING) | _RUNNING
        for job in jobs:
            job.cancel.set()
    for job in jobs:
        job.done.wait(CLEANUP_S)
