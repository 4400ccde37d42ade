"""Admission (runners/admission.py) against the memory budget, with the warm pool's zygotes
counted: every process a run may start is counted before it starts, idle zygotes give way
when memory is needed or when idle too long, and a refusal lasts only while runs hold the
memory. Fakes first (a pool and a tree that start nothing), then real bursts through the warm
pool with the tree's PSS sampled (issue 34); the concurrency default: test_settings.py.
"""

from __future__ import annotations

import threading
import time

import pytest
from runner_support import wait_for, warm_runtime

from pclab.experiments import registry
from pclab.runners import launcher
from pclab.runners.admission import Admission, Decision
from pclab.runners.memory import WARM_RANK_MB, ZYGOTE_MB, MemoryBudget, tree_kb
from pclab.runners.results import Outcome
from pclab.runners.settings import Settings
from pclab.runners.warm_pool import PoolCounts

SERVER_MB, IDLE_ZYGOTE_MB = 400.0, 300.0  # the fakes' server and idle zygote
SLEEPS = "tests.runners.workers.sleeps"


class FakePool:
    """Zygotes as numbers: idle ones hold IDLE_ZYGOTE_MB each in FakeTree's reading."""

    def __init__(self, idle: int = 0, busy: int = 0) -> None:
        self.idle, self.busy, self.idle_timeout_s = idle, busy, 60.0
        self.retired: list[tuple[int, float]] = []

    def counts(self) -> PoolCounts:
        return PoolCounts(self.idle, self.busy, 0, 0)

    def unready_mb(self) -> float:
        return 0.0

    def retire_idle(self, keep: int, idle_for_s: float = 0.0) -> int:
        gone = max(0, self.idle - keep)
        self.idle -= gone
        self.retired.append((keep, idle_for_s))
        return gone


class FakeTree(MemoryBudget):
    """A budget whose tree is the fake server plus the fake pool's zygotes."""

    def __init__(self, budget_mb: int, pool: FakePool) -> None:
        super().__init__(budget_mb)
        self.pool = pool

    pss_readings = 0
    rss_extra_mb = 0.0  # how far the tree's RSS lies above its PSS (shared pages)

    def lab_mb(self, max_age_s: float = 0.0) -> float:
        self.pss_readings += 1
        return SERVER_MB + (self.pool.idle + self.pool.busy) * IDLE_ZYGOTE_MB

    def lab_rss_mb(self) -> float:
        return SERVER_MB + (self.pool.idle + self.pool.busy) * IDLE_ZYGOTE_MB + self.rss_extra_mb


class Run:
    """A queued run as admission reads it."""

    def __init__(self, world_size: int = 2, zygote: bool = True) -> None:
        self.memory_mb, self.zygote = world_size * WARM_RANK_MB, zygote
        self.reserved_mb, self.memory_checked = self.memory_mb, (0.0, -1)


def admission(budget_mb: int, pool: FakePool, concurrency: int = 64) -> Admission:
    settings = Settings(max_concurrent_runs=concurrency, memory_budget_mb=budget_mb)
    return Admission(settings, FakeTree(budget_mb, pool), pool)


def test_each_warm_run_without_an_idle_zygote_counts_a_new_one():
    """The issue's arithmetic: a zygote was counted only when the pool had none, so eight
    runs started eight. Now the second run, finding the only zygote taken, counts its own."""
    pool = FakePool()
    budget = int(SERVER_MB + ZYGOTE_MB + 2 * WARM_RANK_MB) + 50  # room for one run, not two
    policy, first, second = admission(budget, pool), Run(), Run()
    assert policy.on_arrival(first, 0, []).decision is Decision.ADMIT
    assert first.reserved_mb == ZYGOTE_MB + 2 * WARM_RANK_MB
    pool.busy = 1  # the pool started its zygote for the first run
    verdict = policy.on_arrival(second, 0, [first])
    assert verdict.decision is Decision.MEMORY and verdict.values["reason"] == "memory"


def test_an_idle_zygote_is_reused_and_a_cold_run_counts_none():
    pool = FakePool(idle=1)
    policy, warm, cold = admission(2500, pool), Run(), Run(zygote=False)
    assert policy.on_arrival(warm, 0, []).decision is Decision.ADMIT
    assert warm.reserved_mb == 2 * WARM_RANK_MB  # the idle zygote serves it
    assert policy.on_arrival(cold, 0, [warm]).decision is Decision.ADMIT
    assert cold.reserved_mb == 2 * WARM_RANK_MB


def test_idle_zygotes_over_the_budget_are_retired_and_the_next_run_admitted():
    """After the burst: eight idle zygotes hold more than the budget and nothing runs. The
    issue's server refused every Run until a restart; here the surplus goes and it runs."""
    pool = FakePool(idle=8)
    policy = admission(2500, pool)  # 400 + 8 x 300 = 2800 MB > 2500
    assert policy.on_arrival(Run(), 0, []).decision is Decision.ADMIT
    assert pool.idle == 1 and pool.retired == [(1, 0.0)]  # one kept: the run's own


def test_a_run_the_rss_bound_admits_costs_no_pss_reading():
    """RSS bounds PSS from above: when even RSS fits, the slow smaps reading is skipped."""
    pool = FakePool(idle=1)
    policy = admission(2500, pool)
    assert policy.on_arrival(Run(), 0, []).decision is Decision.ADMIT
    assert policy.memory.pss_readings == 0


def test_a_run_only_pss_admits_is_admitted_after_a_pss_reading():
    """Shared pages make RSS overcount: where RSS says no, PSS decides."""
    pool = FakePool(idle=1)
    policy = admission(2500, pool)
    policy.memory.rss_extra_mb = 2500.0
    assert policy.on_arrival(Run(), 0, []).decision is Decision.ADMIT
    assert policy.memory.pss_readings >= 1


def test_a_refusal_is_only_for_what_no_retirement_frees():
    pool = FakePool(idle=1)
    policy = admission(int(SERVER_MB), pool)  # not even the server fits
    verdict = policy.on_arrival(Run(), 0, [])
    assert verdict.decision is Decision.REFUSE and verdict.values["reason"] == "memory"
    assert pool.idle == 1  # its own zygote was not retired for nothing


def test_retiring_expired_zygotes_keeps_one_zygote_and_those_running_runs_wait_for():
    pool = FakePool(idle=5, busy=1)
    policy = admission(10_000, pool)
    running = [Run(), Run(), Run()]  # one holds the busy zygote, two will take idle ones
    assert policy.retire_expired(running) == 3 and pool.idle == 2
    assert pool.retired == [(2, 60.0)]
    assert policy.retire_expired([]) == 1 and pool.idle == 1  # nothing running: one stays warm


# ------------------------------------------------------------ real bursts through the pool


class PeakSampler:
    """The lab tree's PSS (runtime.memory.lab_pids), sampled every 20 ms until stopped."""

    def __init__(self, memory: MemoryBudget) -> None:
        self.memory, self.peak_mb, self.samples = memory, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_mb = max(self.peak_mb, tree_kb(self.memory.lab_pids()) / 1024)
            self.samples += 1

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def mixed_burst() -> list[tuple[str, dict]]:
    """Ten distinct small runs: five of page 05's negatives, five of page 08's clipping."""
    negatives = [("negatives", {"tau": tau}) for tau in (0.5, 1.0, 2.0, 3.0, 4.0)]
    clippings = [(None, "inf"), (0, "inf"), (1, "inf"), (0, "nan"), (1, "nan")]
    return negatives + [
        ("clipping", {"inject_overflow": rank, "nonfinite": what}) for rank, what in clippings
    ]


def run_all(runtime, runs: list[tuple[str, dict]]) -> list:
    results: list = [None] * len(runs)

    def one(i: int, name: str, raw: dict) -> None:
        results[i] = registry.get(name).launch(timeout_s=240, runtime=runtime, **raw)

    threads = [threading.Thread(target=one, args=(i, *run)) for i, run in enumerate(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


# 64 is the most PCL_MAX_CONCURRENT_RUNS accepts (10**6 is refused at the setting now).
@pytest.mark.parametrize("concurrency", [8, 64])
def test_ten_simultaneous_runs_stay_under_the_budget(concurrency):
    """A budget with room for this process, one zygote and one run's ranks: ten different
    runs pressed at once all answer, one after another, and the tree's PSS never passes it."""
    base = MemoryBudget(2500).lab_mb()
    budget = int(base + ZYGOTE_MB + 2 * WARM_RANK_MB + 60)
    settings = dict(
        max_concurrent_runs=concurrency,
        max_waiting_runs=16,
        memory_budget_mb=budget,
        preload_frameworks=False,
    )
    with warm_runtime(**settings) as runtime:
        sampler = PeakSampler(runtime.memory)
        results = run_all(runtime, mixed_burst())
        peak = sampler.stop()
        assert [r.ok for r in results] == [True] * 10, [r.message for r in results]
        # At least a few readings during the burst (a PSS reading of the tree takes longer on
        # a loaded box: beside four busy loops 20 readings at 50 ms were not always had).
        assert sampler.samples >= 5 and peak <= budget, (sampler.samples, peak, budget)
        assert runtime.pool.size()["zygotes"] == 1  # a second would not have fitted
        after = registry.get("negatives").launch(tau=5.0, timeout_s=120, runtime=runtime)
        assert after.ok, after.message  # the next Run, after the burst, is admitted


def test_idle_zygotes_go_when_memory_is_needed_and_when_idle_too_long(tmp_path):
    """Two slots and a roomy budget: two runs at once leave two idle zygotes. Shrunk to a
    budget that holds one, the next run is admitted (the other zygote retired first, not a
    refusal); with a short idle timeout, the pool is back to one zygote by itself.

    The real pool and real zygotes, read by a meter that counts them (IDLE_ZYGOTE_MB each):
    the tree's PSS also moves with processes outside it that map the same libraries (torch
    subprocesses of the other xdist worker come and go), by as much as 50 MB between two
    readings beside four busy loops - more than retiring a zygote frees. The real readings
    are the bursts' (above)."""
    with warm_runtime(max_concurrent_runs=2, preload_frameworks=False) as runtime:
        base_mb = runtime.memory.lab_mb()

        def counted_mb(max_age_s: float = 0.0) -> float:
            return base_mb + runtime.pool.size()["zygotes"] * IDLE_ZYGOTE_MB

        runtime.memory.lab_mb = counted_mb  # type: ignore[method-assign]
        runtime.memory.lab_rss_mb = counted_mb  # type: ignore[method-assign]

        def burst() -> None:
            # The two runs meet at a barrier (their four ranks), so they overlap and need two
            # zygotes however late a loaded box schedules the second.
            barrier = tmp_path / f"barrier-{time.monotonic_ns()}"
            barrier.mkdir()

            def one(tag: str) -> None:
                args = ["--seconds", "0", "--tag", tag, "--barrier", str(barrier)]
                args += ["--parties", "4"]
                assert launcher.launch(SLEEPS, 2, args, timeout_s=240, runtime=runtime).ok

            threads = [threading.Thread(target=one, args=(tag,)) for tag in "ab"]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        burst()
        assert runtime.pool.size() == {"zygotes": 2, "idle": 2, "starting": 0}
        # 5 MB short of room for the run's ranks beside both zygotes: retiring either frees
        # IDLE_ZYGOTE_MB, so the run is admitted only if admission retires one first.
        runtime.memory.budget_mb = int(counted_mb() + 2 * WARM_RANK_MB - 5)
        result = launcher.launch(SLEEPS, 2, ["--seconds", "0"], timeout_s=60, runtime=runtime)
        assert result.outcome is Outcome.FINISHED, result.message
        assert runtime.pool.size()["zygotes"] == 1
        runtime.memory.budget_mb = 2500
        burst()
        assert runtime.pool.size()["zygotes"] == 2
        runtime.pool.idle_timeout_s = 0.3  # the runtime's retiring thread reads it on its next turn
        assert wait_for(lambda: runtime.pool.size()["zygotes"] == 1, 10)
        time.sleep(1.0)
        assert runtime.pool.size()["zygotes"] == 1  # the last one stays warm
