"""Memory of a process tree, read from /proc: what the memory budget (PCL_MEMORY_BUDGET_MB)
is checked against, and what the benchmark samples.

A process's share is its PSS (proportional set size, /proc/<pid>/smaps_rollup): a page that
n processes share counts 1/n in each, so the PSS of a tree adds up to the memory the tree
really holds. RSS would count a warm-pool zygote's ~300 MB once more in every rank and spare
it forks (they share those pages copy-on-write). Where smaps_rollup cannot be read (an old
kernel, another user's process), VmRSS stands in: larger, never smaller. `MemoryBudget` holds
what one runtime counts as the lab's; the functions above it read any process.

    python -m pclab.runners.memory [PID]     # a tree's memory now, per process (default: this one)
"""

from __future__ import annotations

import os
import sys
import threading
import time

# What a launch adds to the tree, by PSS, measured on the Transformer (the largest ranks) on
# the 2-core box (BENCHMARKS.md, "Memory"), rounded up: a rank forked from a zygote adds
# ~90 MB of its own pages; a cold rank ~325 MB and torchrun's agent ~170 MB; a zygote (with
# its spare store and ranks) ~255 MB, ~450 MB once it has imported the installed training
# frameworks too (the server's default, PCL_PRELOAD_FRAMEWORKS: measured 253 / 451 MB).
WARM_RANK_MB, COLD_RANK_MB, COLD_AGENT_MB, ZYGOTE_MB = 100, 350, 200, 460
# A reading of the tree's memory this recent is used as is: measuring takes ~20 ms, on the
# path from a click to its run. Every run measures afresh when it ends (off that path).
READING_MAX_AGE_S = 5.0


# What a two-rank run needs when no zygote is idle for it: a new zygote with its spares and
# its ranks (the default concurrency is capped at how many of these the budget holds).
RUN_FOOTPRINT_MB = ZYGOTE_MB + 2 * WARM_RANK_MB


def launch_estimate_mb(world_size: int, warm: bool) -> float:
    """What one launch of `world_size` ranks is expected to add to the server's tree (a warm
    one's zygote, when it needs a new one, is counted by runners.admission)."""
    if warm:
        return world_size * WARM_RANK_MB
    return COLD_AGENT_MB + world_size * COLD_RANK_MB


def children(pid: int) -> list[int]:
    """Direct children of `pid` (every thread's), [] once it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, depth first (not `pid` itself)."""
    out, frontier = [], children(pid)
    while frontier:
        child = frontier.pop()
        out.append(child)
        frontier += children(child)
    return out


def _field_kb(path: str, name: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_kb(pid: int) -> int | None:
    """Resident set size in kB (None once the process is gone)."""
    return _field_kb(f"/proc/{pid}/status", "VmRSS")


def pss_kb(pid: int) -> int | None:
    """Proportional set size in kB; VmRSS where smaps_rollup cannot be read."""
    pss = _field_kb(f"/proc/{pid}/smaps_rollup", "Pss")
    return rss_kb(pid) if pss is None else pss


def tree_kb(pids: list[int], kind: str = "pss") -> int:
    """The summed PSS (or RSS) of these processes in kB; gone ones count 0."""
    read = pss_kb if kind == "pss" else rss_kb
    return sum(read(pid) or 0 for pid in pids)


def fd_count(pid: int) -> int | None:
    """Open file descriptors of a process (None once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class MemoryBudget:
    """What the lab's process tree holds, against its budget (PCL_MEMORY_BUDGET_MB): this
    process, and every process below the roots its runtime watches - the warm pool's
    zygotes (with their spares, stores and ranks) and live torchrun launches (agents and
    ranks). Other children (a test's own subprocesses) are not the lab's and are not
    counted. One per runtime (pclab.runners.runtime)."""

    def __init__(self, budget_mb: int) -> None:
        self.budget_mb = budget_mb
        self._lock = threading.Lock()
        self._roots: set[int] = set()
        self._last: tuple[float, float] | None = None  # (monotonic time, MB) of lab_mb

    def watch(self, pid: int) -> None:
        """Count `pid` and its descendants as the lab's (until `unwatch`)."""
        with self._lock:
            self._roots.add(pid)

    def unwatch(self, pid: int) -> None:
        with self._lock:
            self._roots.discard(pid)

    def lab_pids(self) -> list[int]:
        """This process and every process below a watched root."""
        with self._lock:
            roots = sorted(self._roots)
        pids = [os.getpid()]
        for root in roots:
            pids += [root, *descendants(root)]
        return list(dict.fromkeys(pids))

    def lab_rss_mb(self) -> float:
        """An upper bound of `lab_mb` read in microseconds: the tree's summed RSS (a page
        shared by k processes counts k times in RSS, once in PSS, so RSS ≥ PSS always)."""
        return tree_kb(self.lab_pids(), "rss") / 1024

    def lab_mb(self, max_age_s: float = 0.0) -> float:
        """What the lab's process tree holds, in MB (PSS): measured now (~20 ms for a server,
        a zygote and its spares), or the last reading when it is at most `max_age_s` old."""
        last = self._last
        if last is not None and time.monotonic() - last[0] <= max_age_s:
            return last[1]
        used = tree_kb(self.lab_pids()) / 1024
        self._last = (time.monotonic(), used)
        return used


if __name__ == "__main__":
    root = int(sys.argv[1]) if len(sys.argv) > 1 else os.getpid()
    tree = [root, *descendants(root)]
    for pid in tree:
        pss, rss = (pss_kb(pid) or 0) / 1024, (rss_kb(pid) or 0) / 1024
        print(f"{pid:>8}  pss {pss:8.1f} MB  rss {rss:8.1f} MB")
    pss, rss = tree_kb(tree) / 1024, tree_kb(tree, "rss") / 1024
    print(f"{'tree':>8}  pss {pss:8.1f} MB  rss {rss:8.1f} MB")
