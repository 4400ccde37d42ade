"""The job line of one runtime (the whole server's, in Streamlit): share, queue, refuse, cancel.

Every `runners.launcher.launch` call goes through its runtime's `JobRegistry.submit`, so
every experiment's `run()` gets these rules without knowing about them:

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

    nice -n 10 python -m pytest tests/runners/test_jobs.py     # the rules, with fake jobs
"""

from __future__ import annotations

import gc
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable

from pclab.runners.memory import MemoryBudget
from pclab.runners.results import Outcome, ProgressEvent, RunResult
from pclab.runners.settings import Settings

POLL_S = 0.1  # how often a requester forwards events and checks its cancel flag
MEMORY_CHECK_S = 0.5  # how often a job held back by the memory budget measures again
# A reading of the tree's memory this recent is used as is: measuring takes ~20 ms, on the
# path from a click to its run. Every job measures afresh when it ends (off that path), and
# a running job's own estimate counts beside any reading.
MEMORY_MAX_AGE_S = 5.0
CLEANUP_S = 30.0  # longest wait for a cancelled job's processes to be stopped and reaped

# A requester's way to stop: a threading.Event or a zero-argument callable, polled every
# POLL_S seconds in its own thread. A callable may also *raise* (Streamlit raises its stop
# or rerun exception from any element call): the run is cleaned up and the exception goes on.
Cancel = threading.Event | Callable[[], object] | None


class JobRegistry:
    """One runtime's jobs: in flight, waiting and running, and its counters."""

    def __init__(self, settings: Settings, memory: MemoryBudget) -> None:
        self.settings, self.memory = settings, memory
        # launched: jobs started; shared: requests served by another's run; busy: refused;
        # cancelled: jobs ended because nobody waited any more; max_running: peak running.
        self.stats: Counter[str] = Counter()
        self._lock = threading.Condition()  # guards everything below (re-entrant inside)
        self._jobs: dict[Hashable, Job] = {}  # in flight, by key: what an identical one joins
        self._waiting: list[Job] = []  # FIFO of jobs waiting for a slot
        self._running: set[Job] = set()  # jobs holding a slot (their processes may be alive)
        self._started: set[Job] = set()  # took a slot, have not yet measured memory after

    def submit(
        self,
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
            cancel: an Event or a callable (`Cancel`): this request leaves when it fires.
            memory_mb: what the job's processes are expected to add to the server's tree.
        Returns:
            The job's RunResult (shared by identical requests), or one ended BUSY, CANCELLED
            or TIMEOUT for this request alone.
        """
        request = _Request(timeout_s, worker_hash, progress, cancel)
        admitted = self._admit(key, work, request, memory_mb)
        if isinstance(admitted, _Refusal):
            return self._refuse(admitted, request)
        return self._await(admitted, request)

    def in_flight(self) -> dict[str, int]:
        """How many jobs wait and run right now, and how many requesters they serve."""
        with self._lock:
            jobs = set(self._jobs.values()) | set(self._waiting) | self._running
            return {
                "waiting": len(self._waiting),
                "running": len(self._running),
                "requesters": sum(len(j.waiters) for j in jobs),
            }

    def shutdown(self) -> None:
        """Cancel every job and wait for its processes to be stopped."""
        with self._lock:
            jobs = set(self._jobs.values()) | set(self._waiting) | self._running
            for job in jobs:
                job.cancel.set()
        for job in jobs:
            job.done.wait(CLEANUP_S)

    def _admit(
        self, key: Hashable, work: Callable[[Job], RunResult], request: _Request, memory_mb: float
    ) -> Job | _Refusal:
        """Join the identical job in flight, start a new one (a slot or a place in line), or
        refuse: all under the lock, so the very next request already counts this one."""
        with self._lock:
            # The request's clock starts under the lock: a joiner then never starts before the
            # job it joins, so an equal limit always defers to the job's own (plus its cleanup)
            # and identical requests share one result.
            request.start = time.monotonic()
            job = self._jobs.get(key)
            if job is not None:
                self.stats["shared"] += 1
                request.joined = True
                request.events.put(
                    ProgressEvent.of(
                        "shared", "an identical run is in progress; sharing its result"
                    )
                )
                if job.last_queued is not None and job not in self._running:
                    request.events.put(job.last_queued)
            else:
                waiting, running, used = len(self._waiting), len(self._running), None
                must_wait = waiting > 0 or running >= self.settings.max_concurrent_runs
                if not must_wait:  # a free slot: does the job fit the memory budget too?
                    used = self._memory_short(memory_mb, collect=not self._running)
                    must_wait = used is not None
                line_full = must_wait and waiting >= self.settings.max_waiting_runs
                if line_full or (used is not None and not self._running):
                    self.stats["busy"] += 1
                    return _Refusal(waiting, running, used)
                job = Job(self, key, work, request.timeout_s, request.worker_hash, memory_mb)
                self._jobs[key] = job
                if must_wait:
                    self._waiting.append(job)
                else:
                    self._take_slot(job)
            job.waiters.append(request.events)
            if not request.joined:
                job.thread.start()
            return job

    def _refuse(self, refusal: _Refusal, request: _Request) -> RunResult:
        """Turned away at once: the line is full, or memory is and nothing runs."""
        values: dict[str, object]
        if refusal.used_mb is not None and not refusal.running:
            used = refusal.used_mb
            message, values = self._memory_message(used), self._memory_values(used)
        else:
            waiting, running = refusal.waiting, refusal.running
            message = f"busy: {running} running and {waiting} waiting; try again shortly"
            values = {"reason": "line"}
        request.tell(ProgressEvent.of("busy", message, waiting=refusal.waiting, **values))
        return RunResult.ended(Outcome.BUSY, message, 0.0, request.worker_hash)

    def _await(self, job: Job, request: _Request) -> RunResult:
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
                    self._leave(job, request.events)
                    message = "stopped on request; every process of the run was ended"
                    seconds = time.monotonic() - request.start
                    request.tell(ProgressEvent.of("cancelled", message, seconds=seconds))
                    return request.ended(Outcome.CANCELLED, message)
                if time.monotonic() >= deadline:
                    self._leave(job, request.events)
                    limit = request.timeout_s
                    message = f"timed out after {limit:g} s waiting for an identical run to finish"
                    return request.ended(Outcome.TIMEOUT, message)
                job.done.wait(POLL_S)
        except BaseException:
            self._leave(job, request.events)  # Stop, rerun, closed tab, Ctrl-C: nothing outlives it
            raise

    def _leave(self, job: Job, mine: queue.SimpleQueue[ProgressEvent]) -> None:
        """Stop waiting; the last requester to leave cancels the job and waits for its cleanup."""
        with self._lock:
            if mine in job.waiters:
                job.waiters.remove(mine)
            last = not job.waiters and not job.done.is_set()
            if last:
                job.cancel.set()
                if self._jobs.get(job.key) is job:
                    del self._jobs[job.key]  # a rerun's identical request must not join it
        if last:
            job.done.wait(CLEANUP_S)

    def _memory_short(self, memory_mb: float, collect: bool) -> float | None:
        """None when a job expected to add `memory_mb` fits the budget beside what the
        server's tree holds and every running job's estimate; else the MB the tree holds.
        With `collect`, a miss runs Python's collector once and measures again (the server
        itself may hold garbage: Streamlit's forced collection after each script run is off)."""
        budget = self.memory.budget_mb
        reserved = sum(job.memory_mb for job in self._running)
        used = self.memory.lab_mb(MEMORY_MAX_AGE_S)
        if used + reserved + memory_mb > budget:  # before saying no, look again, freshly
            if collect:
                gc.collect()
            used = self.memory.lab_mb()
        return None if used + reserved + memory_mb <= budget else used

    def _memory_values(self, used: float) -> dict[str, object]:
        return {"reason": "memory", "used_mb": round(used), "budget_mb": self.memory.budget_mb}

    def _memory_message(self, used: float) -> str:
        budget = self.memory.budget_mb
        return f"busy: the lab's processes use {used:.0f} MB of their {budget} MB memory budget"

    def _take_slot(self, job: Job) -> None:
        """Move `job` into a free slot (the caller holds the lock)."""
        self._running.add(job)
        self._started.add(job)
        self.stats["launched"] += 1
        self.stats["max_running"] = max(self.stats["max_running"], len(self._running))


class Job:
    """One run in flight: its deadline, its requesters' event queues, and its result."""

    def __init__(
        self,
        registry: JobRegistry,
        key: Hashable,
        work: Callable[[Job], RunResult],
        timeout_s: float,
        worker_hash: str,
        memory_mb: float = 0.0,
    ):
        self.registry, self.key, self.work = registry, key, work
        self.timeout_s, self.worker_hash = timeout_s, worker_hash
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
        with self.registry._lock:
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
        registry = self.registry
        lock, waiting, running = registry._lock, registry._waiting, registry._running
        with lock:
            if self in running:  # `submit` found a free slot and nobody in line
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
                    ahead = waiting.index(self)
                    slot = ahead == 0 and len(running) < registry.settings.max_concurrent_runs
                    again = time.monotonic() - measured[0] >= MEMORY_CHECK_S
                    if slot and (again or len(running) < measured[1]):  # or a job just ended
                        measured = (time.monotonic(), len(running))
                        used = registry._memory_short(self.memory_mb, collect=not running)
                        if used is None:
                            registry._take_slot(self)
                            return None
                        message = registry._memory_message(used)
                        values = registry._memory_values(used)
                        if not running:  # nothing running could free it: say so now
                            registry.stats["busy"] += 1
                            self.say("busy", message, waiting=len(waiting), **values)
                            return self._end(Outcome.BUSY, message)
                        if shown != "memory":
                            shown = "memory"
                            self.say("memory", message, **values)
                    elif not slot and ahead + 1 != shown:
                        shown = ahead + 1
                        text = f"waiting in line: position {shown} ({len(running)} running)"
                        self.say("queued", text, position=shown, running=len(running))
                    lock.wait(POLL_S)
            finally:
                waiting.remove(self)
                lock.notify_all()

    def _main(self) -> None:
        registry, result = self.registry, None
        try:
            result = self._wait_for_slot()
            if result is None:
                try:
                    result = self.work(self)
                finally:
                    with registry._lock:
                        registry._running.discard(self)
                        registry._lock.notify_all()
        except Exception as exc:  # a launcher bug must still answer every requester
            result = self._end(Outcome.FAILED, f"launcher error: {type(exc).__name__}: {exc}")
        finally:
            with registry._lock:
                self.result = result or self._end(Outcome.FAILED, "launcher error: no result")
                if registry._jobs.get(self.key) is self:
                    del registry._jobs[self.key]  # a later identical request launches afresh
                if self.result.outcome is Outcome.CANCELLED:
                    registry.stats["cancelled"] += 1
            self.done.set()
            if self in registry._started:
                registry._started.discard(self)
                registry.memory.lab_mb()  # a fresh reading for the next job, off its click's path


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


def _is_set(check: Cancel) -> bool:
    if check is None:
        return False
    if isinstance(check, threading.Event):
        return check.is_set()
    return bool(check())


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
