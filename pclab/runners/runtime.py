"""One runtime of the lab: its settings, memory budget, run queue and warm
pool, built together
and handed to every launch.

The Streamlit server builds exactly one when it starts (pclab.ui.serving) and every page's
run goes through it: identical requests from any visitor share one run, and the line, the
memory budget and the pool's bound hold for the whole server. A CLI, a notebook or a test
that passes no runtime to `launcher.launch` or `Experiment.run` gets a fresh one for that
call (`given_or_fresh`), from the PCL_* settings, shut down when the call returns. Importing
this package starts, registers and remembers nothing: a runtime's threads, zygotes and its
exit handler exist from `Runtime.start` until its `shutdown`.

    python -m pclab.runners.runtime      # build one from PCL_*, print it, shut it down
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator
from types import TracebackType

from pclab.runners.memory import MemoryBudget
from pclab.runners.run_queue import RunQueue
from pclab.runners.settings import Settings
from pclab.runners.warm_pool import WarmPool


class Runtime:
    """The lab's running state, one object: `settings`, `memory` (the budget of the tree's
    memory), `run_queue` (the queue every launch joins) and `pool` (the warm pool's zygotes)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.memory = MemoryBudget(settings.memory_budget_mb)
        self.pool = WarmPool(settings, self.memory)
        self.run_queue = RunQueue(settings, self.memory, self.pool)
        self.pool.reserved_by_runs = self.run_queue.reserved_mb
        self._stopped = threading.Event()
        self._retirer = threading.Thread(
            target=self._retire_expired, name="pcl-retire-zygotes", daemon=True
        )

    @classmethod
    def start(cls, settings: Settings) -> Runtime:
        """A runtime under these settings, shut down at interpreter exit unless earlier.
        (Its pool starts no zygote until asked: `pool.prestart`, or a launch.)"""
        runtime = cls(settings)
        atexit.register(runtime.shutdown)
        if runtime.pool.enabled():
            runtime._retirer.start()
        return runtime

    def _retire_expired(self) -> None:
        """Until shutdown: retire the zygotes idle past the pool's `idle_timeout_s` that no
        run needs, checking every quarter of it (at most every 5 s)."""
        while not self._stopped.wait(min(5.0, max(0.05, self.pool.idle_timeout_s / 4))):
            self.run_queue.retire_expired()

    def shutdown(self) -> None:
        """Cancel every run (its processes and temporary directory go), then stop every
        zygote. Safe to call twice."""
        atexit.unregister(self.shutdown)
        self._stopped.set()
        if self._retirer.is_alive():
            self._retirer.join()
        self.run_queue.shutdown()
        self.pool.shutdown()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.shutdown()


@contextlib.contextmanager
def given_or_fresh(runtime: Runtime | None) -> Iterator[Runtime]:
    """`runtime` as it is, or - when None - a fresh one from this process's PCL_* settings
    (a malformed one is a ValueError naming it), shut down after the block: a call from a
    CLI or a notebook leaves nothing running behind it."""
    if runtime is not None:
        yield runtime
        return
    with Runtime.start(Settings.from_env(os.environ)) as fresh:
        yield fresh


if __name__ == "__main__":
    with Runtime.start(Settings.from_env(os.environ)) as shown:
        print(shown.settings)
        print(f"memory: {shown.memory.lab_mb():.0f} of {shown.memory.budget_mb} MB")
        print(f"run queue: {shown.run_queue.in_flight()}, pool: {shown.pool.size()}")
