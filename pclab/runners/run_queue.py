"""The run queue of one runtime (the whole server's, in Streamlit): share, queue, refuse, cancel.

Every `runners.launcher.launch` call goes through its runtime's `RunQueue.submit`, so every
experiment's `run()` gets these rules without knowing about them:

    identical requests share one run   key: (worker, world_size, args, worker code hash);
                                       a second identical request waits for the first's
                                       RunResult instead of launching again
    distinct requests queue, FIFO      at most `max_concurrent_runs` runs hold processes at
                                       once (runners.settings: PCL_MAX_CONCURRENT_RUNS); a
                                       waiting run's requesters see "queued" events with its
                                       position; who is admitted, who waits for memory and who
                                       hears "busy" at once: runners.admission
    nobody waiting, nothing running    a requester leaves on its cancel check, its own
                                       time limit or an exception in its progress callback
                                       (Streamlit's Stop / rerun / closed tab); when the last
                                       one leaves, the run is cancelled and its processes
                                       and temporary directory are gone before `submit`
                                       returns or re-raises

A run in the queue has its own thread; each requester polls in its *own* thread and calls its
own progress callback there, so a Streamlit page only ever draws from its script thread.

    nice -n 10 python -m pytest tests/runners/test_run_queue.py     # the rules, with fake runs
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable

from pclab.runners.admission import Admission, Decision, Verdict, ZygoteSupply
from pclab.runners.memory import MemoryBudget
from pclab.runners.results import Outcome, ProgressEvent, RunResult
from pclab.runners.settings import Settings

POLL_S = 0.1  # how often a requester forwards events and checks its cancel flag
CLEANUP_S = 30.0  # longest wait for a cancelled run's processes to be stopped and reaped

# A requester's way to stop: a threading.Event or a zero-argument callable, polled every
# POLL_S seconds in its own thread. A callable may also *raise* (Streamlit raises its stop
# or rerun exception from any element call): the run is cleaned up and the exception goes on.
Cancel = threading.Event | Callable[[], object] | None


class RunQueue:
    """One runtime's runs in flight, waiting and running, and its counters."""

    def __init__(
        self, settings: Settings, memory: MemoryBudget, pool: ZygoteSupply | None = None
    ) -> None:
        self.memory = memory
        self.admission = Admission(settings, memory, pool)
        # launched: runs started; shared: requests served by another's run; busy: refused;
        # cancelled: runs ended because nobody waited any more; max_running: peak running.
        self.stats: Counter[str] = Counter()
        self._lock = threading.Condition()  # guards everything below (re-entrant inside)
        self._in_flight: dict[Hashable, QueuedRun] = {}  # by key: what an identical one joins
        self._waiting: list[QueuedRun] = []  # FIFO of runs waiting for a slot
        self._running: set[QueuedRun] = set()  # runs holding a slot (processes may be alive)
        self._unmeasured: set[QueuedRun] = set()  # took a slot, memory not measured after

    def submit(
        self,
        key: Hashable,
        work: Callable[[QueuedRun], RunResult],
        *,
        timeout_s: float,
        worker_hash: str,
        progress: Callable[[ProgressEvent], None] | None = None,
        cancel: Cancel = None,
        memory_mb: float = 0.0,
        zygote: bool = False,
    ) -> RunResult:
        """Run `work(run)` once per in-flight `key`, bounded and queued; returns its RunResult.

        Args:
            key: what makes two requests identical.
            work: the launch itself; it must poll `run.cancelled()` and honour `run.timeout_s`
                counted from `run.start` (the time in the queue included).
            timeout_s: this request's wall-clock limit (a joiner's own limit; a new run's too).
            progress: called in this thread with every ProgressEvent of the run.
            cancel: an Event or a callable (`Cancel`): this request leaves when it fires.
            memory_mb: what the run's processes are expected to add to the server's tree.
            zygote: the run's ranks come from a warm-pool zygote (admission counts a new one
                when no idle one is left for it).
        Returns:
            The run's RunResult (shared by identical requests), or one ended BUSY, CANCELLED
            or TIMEOUT for this request alone.
        """
        request = _Request(timeout_s, worker_hash, progress, cancel)
        entered = self._enter(key, work, request, (memory_mb, zygote))
        if isinstance(entered, Verdict):
            request.tell(ProgressEvent.of("busy", entered.message, **entered.values))
            return RunResult.ended(Outcome.BUSY, entered.message, 0.0, worker_hash)  # at once
        return self._await(entered, request)

    def in_flight(self) -> dict[str, int]:
        """How many runs wait and run right now, and how many requesters they serve."""
        with self._lock:
            runs = set(self._in_flight.values()) | set(self._waiting) | self._running
            return {
                "waiting": len(self._waiting),
                "running": len(self._running),
                "requesters": sum(len(r.waiters) for r in runs),
            }

    def reserved_mb(self) -> float:
        """Memory the running runs hold in reserve beyond any reading (admission's count)."""
        with self._lock:
            return self.admission.reserved_mb(self._running)

    def retire_expired(self) -> int:
        """Retire the warm pool's zygotes idle past its timeout that no run needs (under the
        lock: no run is admitted meanwhile on a zygote about to go); returns how many."""
        with self._lock:
            return self.admission.retire_expired(self._running)

    def shutdown(self) -> None:
        """Cancel every run and wait for its processes to be stopped."""
        with self._lock:
            runs = set(self._in_flight.values()) | set(self._waiting) | self._running
            for run in runs:
                run.cancel.set()
        for run in runs:
            run.done.wait(CLEANUP_S)

    def _enter(
        self,
        key: Hashable,
        work: Callable[[QueuedRun], RunResult],
        request: _Request,
        cost: tuple[float, bool],
    ) -> QueuedRun | Verdict:
        """Join the identical run in flight, start a new one (a slot or a place in the queue),
        or refuse (the Verdict): all under the lock, so the very next request counts this one."""
        with self._lock:
            # The request's clock starts under the lock: a joiner then never starts before the
            # run it joins, so an equal limit always defers to the run's own (plus its cleanup)
            # and identical requests share one result.
            request.start = time.monotonic()
            run = self._in_flight.get(key)
            if run is not None:
                self.stats["shared"] += 1
                request.joined = True
                request.events.put(
                    ProgressEvent.of(
                        "shared", "an identical run is in progress; sharing its result"
                    )
                )
                if run.last_queued is not None and run not in self._running:
                    request.events.put(run.last_queued)
            else:
                run = QueuedRun(self, key, work, request.timeout_s, request.worker_hash, *cost)
                verdict = self.admission.on_arrival(run, len(self._waiting), self._running)
                if verdict.decision is Decision.REFUSE:
                    self.stats["busy"] += 1
                    return verdict
                self._in_flight[key] = run
                if verdict.decision is Decision.ADMIT:
                    self._take_slot(run)
                else:
                    run.memory_checked = (0.0, -1)  # its thread measures (and says) at once
                    self._waiting.append(run)
            run.waiters.append(request.events)
            if not request.joined:
                run.thread.start()
            return run

    def _await(self, run: QueuedRun, request: _Request) -> RunResult:
        """Forward the run's events until its result, this request's stop or its own limit."""
        # A request relies on the run's own limit (plus its cleanup) when that ends first; a
        # joiner with a shorter limit of its own leaves at that limit instead.
        deadline = request.start + request.timeout_s
        if not request.joined or run.start + run.timeout_s <= deadline:
            deadline = run.start + run.timeout_s + CLEANUP_S
        try:
            while True:
                finished = run.done.is_set()
                _forward(request.events, request.progress)
                if finished:
                    assert run.result is not None  # set before `done`
                    return run.result
                if _is_set(request.cancel):
                    self._leave(run, request.events)
                    message = "stopped on request; every process of the run was ended"
                    seconds = time.monotonic() - request.start
                    request.tell(ProgressEvent.of("cancelled", message, seconds=seconds))
                    return request.ended(Outcome.CANCELLED, message)
                if time.monotonic() >= deadline:
                    self._leave(run, request.events)
                    limit = request.timeout_s
                    message = f"timed out after {limit:g} s waiting for an identical run to finish"
                    return request.ended(Outcome.TIMEOUT, message)
                run.done.wait(POLL_S)
        except BaseException:
            self._leave(run, request.events)  # Stop, rerun, closed tab, Ctrl-C: nothing outlives it
            raise

    def _leave(self, run: QueuedRun, mine: queue.SimpleQueue[ProgressEvent]) -> None:
        """Stop waiting; the last requester to leave cancels the run and waits for its cleanup."""
        with self._lock:
            if mine in run.waiters:
                run.waiters.remove(mine)
            last = not run.waiters and not run.done.is_set()
            if last:
                run.cancel.set()
                if self._in_flight.get(run.key) is run:
                    del self._in_flight[run.key]  # a rerun's identical request must not join it
        if last:
            run.done.wait(CLEANUP_S)

    def _take_slot(self, run: QueuedRun) -> None:
        """Move `run` into a free slot (the caller holds the lock)."""
        self._running.add(run)
        self._unmeasured.add(run)
        self.stats["launched"] += 1
        self.stats["max_running"] = max(self.stats["max_running"], len(self._running))

    def broadcast(self, run: QueuedRun, event: ProgressEvent) -> None:
        """Put `event` in the queue of every requester of `run`."""
        with self._lock:
            if event.event == "queued":
                run.last_queued = event  # replayed to a late joiner
            for waiter in run.waiters:
                waiter.put(event)

    def wait_turn(self, run: QueuedRun) -> RunResult | None:
        """Hold `run`'s place in the queue (taken in `submit`) until admission lets it take a
        slot (None), or end it unstarted: cancelled, timed out, or refused."""
        with self._lock:
            if run in self._running:  # `submit` found a free slot and nobody in the queue
                return None
            told: tuple[Decision, object] | None = None  # what the requesters last heard
            try:
                while (ended := run.ended_in_queue()) is None:
                    ahead = self._waiting.index(run)
                    verdict = self.admission.at_head(run, ahead, self._running)
                    if verdict.decision is Decision.ADMIT:
                        self._take_slot(run)
                        return None
                    if verdict.decision is Decision.REFUSE:  # nothing running could free it
                        self.stats["busy"] += 1
                        run.say("busy", verdict.message, **verdict.values)
                        return run.end(Outcome.BUSY, verdict.message)
                    shown = (verdict.decision, verdict.values.get("position"))
                    if verdict.message and shown != told:
                        told = shown
                        run.say(verdict.decision.value, verdict.message, **verdict.values)
                    self._lock.wait(POLL_S)
                return ended
            finally:
                self._waiting.remove(run)
                self._lock.notify_all()

    def finish(self, run: QueuedRun, result: RunResult | None) -> None:
        """Record `run`'s result, free its slot and key, and wake every requester."""
        with self._lock:
            self._running.discard(run)
            self._lock.notify_all()
            run.result = result or run.end(Outcome.FAILED, "launcher error: no result")
            if self._in_flight.get(run.key) is run:
                del self._in_flight[run.key]  # a later identical request launches afresh
            if run.result.outcome is Outcome.CANCELLED:
                self.stats["cancelled"] += 1
            measure = run in self._unmeasured
            self._unmeasured.discard(run)
        run.done.set()
        if measure:
            self.memory.lab_mb()  # a fresh reading for the next run, off its click's path


class QueuedRun:
    """One run in flight: its deadline, its requesters' event queues, and its result."""

    def __init__(
        self,
        run_queue: RunQueue,
        key: Hashable,
        work: Callable[[QueuedRun], RunResult],
        timeout_s: float,
        worker_hash: str,
        memory_mb: float = 0.0,
        zygote: bool = False,
    ):
        self.run_queue, self.key, self.work = run_queue, key, work
        self.timeout_s, self.worker_hash = timeout_s, worker_hash
        self.memory_mb = memory_mb  # what its ranks are expected to add (runners.memory)
        self.zygote = zygote  # its ranks come from a warm-pool zygote
        self.reserved_mb = memory_mb  # admission's count once admitted (a new zygote too)
        self.memory_checked = (0.0, -1)  # admission's last reading for it: when, N running
        self.start = time.monotonic()
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.result: RunResult | None = None
        self.waiters: list[queue.SimpleQueue[ProgressEvent]] = []
        self.last_queued: ProgressEvent | None = None  # replayed to a late joiner
        self.thread = threading.Thread(target=self._main, name="pcl-run", daemon=True)

    def say(self, event: str, text: str, **values: object) -> None:
        """Send a progress event to every requester (each forwards it in its own thread)."""
        self.run_queue.broadcast(self, ProgressEvent.of(event, text, **values))

    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def end(self, outcome: Outcome, message: str) -> RunResult:
        seconds = time.monotonic() - self.start
        return RunResult.ended(outcome, message, seconds, self.worker_hash)

    def ended_in_queue(self) -> RunResult | None:
        """Cancelled or timed out while it waited (said to its requesters), or None."""
        if self.cancel.is_set():
            return self.end(Outcome.CANCELLED, "stopped on request before it started")
        if time.monotonic() - self.start < self.timeout_s:
            return None
        message = f"timed out after {self.timeout_s:g} s waiting for other runs to finish"
        self.say("timeout", message, seconds=self.timeout_s, timeout_s=self.timeout_s)
        return self.end(Outcome.TIMEOUT, message)

    def _main(self) -> None:
        result = None
        try:
            result = self.run_queue.wait_turn(self)
            if result is None:
                result = self.work(self)
        except Exception as exc:  # a launcher bug must still answer every requester
            result = self.end(Outcome.FAILED, f"launcher error: {type(exc).__name__}: {exc}")
        finally:
            self.run_queue.finish(self, result)


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
        self.start = 0.0  # set under the run queue's lock, when the request is admitted
        self.joined = False

    def tell(self, event: ProgressEvent) -> None:
        if self.progress is not None:
            self.progress(event)

    def ended(self, outcome: Outcome, message: str) -> RunResult:
        seconds = time.monotonic() - self.start
        return RunResult.ended(outcome, message, seconds, self.worker_hash)


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
