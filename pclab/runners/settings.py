"""The lab's deployment settings: read once from the environment, validated, frozen.

    PCL_WARM_POOL            1/0: fork ranks from a pre-imported process, or always start
                             torchrun (unset: on in the Streamlit server, off for the CLIs)
    PCL_PRELOAD              0/false/no/off: no background imports after the first page (on)
    PCL_PRELOAD_FRAMEWORKS   0/false/no/off: the warm pool's zygotes do not import the installed
                             training frameworks ahead (on: a framework check answers in ~2 s
                             instead of ~5 s; the zygote takes ~4 s longer to start and, with its
                             spares, ~200 MB more)
    PCL_MAX_CONCURRENT_RUNS  runs holding processes at once, 1 to 64 (half the CPUs this
                             process may use - its affinity and cgroup quota, not the host's -
                             at least 1, and at most what the memory budget holds:
                             `default_concurrency`)
    PCL_MAX_WAITING_RUNS     runs waiting in the run queue before a request hears "busy",
                             0 to 256 (8)
    PCL_PG_TIMEOUT_S         the process-group timeout a launch hands its ranks, 1 to 3600 s
                             (60)
    PCL_MEMORY_BUDGET_MB     memory the server's whole process tree may use, 64 to 1048576 MB
                             (2500): a run that would go past it waits in line, or is refused
                             when nothing running could free memory
    PCL_ROOM_DB              the live rooms' SQLite file (unset: the lab's data folder,
                             pclab.rooms.location); its folder must exist

Each range is what the setting can mean (README, "Settings"): a process-group timeout under a
second fails every run before its ranks have met; more than 64 runs at once is more processes
than any host here has cores for; a line of more than 256 waiting runs (at a few seconds a
run) is a wait no visitor stays for; a budget under 64 MB is gigabytes written as megabytes
(a budget below the server's own footprint is allowed: every Run is then refused, the pages
stay up). Numbers are written in ASCII digits, without `_`, `+` or an exponent (Python's own
int() and float() accept `1_000`, `+5`, `1e3` and other scripts' digits); a variable that is
set but empty is refused like any malformed value, never read as unset.

`Settings.from_env` reads them; a malformed value is a `ValueError` naming the variable. The
Streamlit server reads them once, when it builds its runtime (pclab.ui.serving): a server
that was told something it cannot honour stops at start-up, with the reason, rather than
running on defaults nobody chose. A CLI or a notebook reads them for each launch that is
given no runtime (pclab.runners.runtime); a test builds the Settings it wants.

    python -m pclab.runners.settings        # prints the settings in force
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from pclab.runners.memory import RUN_FOOTPRINT_MB

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_WHOLE, _DECIMAL = re.compile(r"[0-9]+"), re.compile(r"[0-9]+(?:\.[0-9]+)?")  # ASCII only
SHOWN_CHARS = 40  # a refusal echoes at most this much of the value
# The range each number setting accepts (the module docstring says why each).
LIMITS: dict[str, tuple[float, float]] = {
    "max_concurrent_runs": (1, 64),
    "max_waiting_runs": (0, 256),
    "pg_timeout_s": (1, 3600),
    "memory_budget_mb": (64, 1_048_576),
}
DEFAULT_BUDGET_MB = 2500  # fits Streamlit Community Cloud's ~2.7 GB per app
CGROUP, SELF_CGROUP = Path("/sys/fs/cgroup"), Path("/proc/self/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP, membership: Path = SELF_CGROUP) -> float | None:
    """The CPUs this process's cgroup may use (its quota over its period), or None when no
    quota is set. cgroup v2: `cpu.max` of its own group (`membership` names it) and each
    parent, the smallest; v1: `cpu.cfs_quota_us` / `cpu.cfs_period_us`."""
    limits = []
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        lines = []
    group = next((line[3:] for line in lines if line.startswith("0::")), "/")
    folder = root / group.lstrip("/")
    while True:
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            if quota != "max":
                limits.append(int(quota) / int(period))
        except (OSError, ValueError):
            pass
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    for v1 in (root / "cpu", root / "cpu,cpuacct"):
        try:
            quota_us = int((v1 / "cpu.cfs_quota_us").read_text())
            period_us = int((v1 / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        if quota_us > 0 and period_us > 0:
            limits.append(quota_us / period_us)
    return min(limits) if limits else None


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity, capped by its cgroup's quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cpus, math.ceil(limit))) if limit is not None else max(1, cpus)


def default_concurrency(memory_budget_mb: int = DEFAULT_BUDGET_MB) -> int:
    """Half the usable CPUs (at least 1), and no more runs than the memory budget holds
    when each needs a zygote of its own (memory.RUN_FOOTPRINT_MB); never past the setting's
    range (LIMITS)."""
    most = int(LIMITS["max_concurrent_runs"][1])
    return max(1, min(usable_cpus() // 2, memory_budget_mb // RUN_FOOTPRINT_MB, most))


@dataclass(frozen=True)
class Settings:
    warm_pool: bool | None = None  # None: the server's default (on), a CLI's (off)
    preload: bool = True
    preload_frameworks: bool = True
    max_concurrent_runs: int = default_concurrency()  # from_env: for the budget it reads
    max_waiting_runs: int = 8
    pg_timeout_s: float = 60.0
    memory_budget_mb: int = DEFAULT_BUDGET_MB
    room_db: str = ""  # "": the data folder's rooms.sqlite3

    def __post_init__(self) -> None:
        if self.warm_pool not in (None, True, False):
            raise ValueError(f"warm_pool={self.warm_pool!r} must be on, off or unset")
        for field, (low, high) in LIMITS.items():
            value = getattr(self, field)
            if isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{field}={value!r} must be in [{low:g}, {high:g}]")
        if self.room_db and (os.path.isdir(self.room_db) or not _folder_of(self.room_db)):
            raise ValueError(f"room_db={self.room_db!r} must be a file in an existing folder")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """The settings `environ` asks for; unset variables keep their defaults (ValueError on
        a malformed, empty or out-of-range value: one line naming the variable and its form)."""
        changes: dict[str, Any] = {
            field: parse(field, environ[name])
            for field, name in ENV_NAMES.items()
            if name in environ
        }
        if "max_concurrent_runs" not in changes and "memory_budget_mb" in changes:
            changes["max_concurrent_runs"] = default_concurrency(changes["memory_budget_mb"])
        return cls(**changes)

    def served(self) -> Settings:
        """These settings in the Streamlit server: what was left unset takes the server's
        default (the warm pool on). A CLI or a test that never asks stays on the cold path."""
        return self if self.warm_pool is not None else replace(self, warm_pool=True)


ENV_NAMES = {
    "warm_pool": "PCL_WARM_POOL",
    "preload": "PCL_PRELOAD",
    "preload_frameworks": "PCL_PRELOAD_FRAMEWORKS",
    "max_concurrent_runs": "PCL_MAX_CONCURRENT_RUNS",
    "max_waiting_runs": "PCL_MAX_WAITING_RUNS",
    "pg_timeout_s": "PCL_PG_TIMEOUT_S",
    "memory_budget_mb": "PCL_MEMORY_BUDGET_MB",
    "room_db": "PCL_ROOM_DB",
}
SWITCHES = ("warm_pool", "preload", "preload_frameworks")  # the on/off settings
PATHS = ("room_db",)  # the settings that name a file
PATH_MAX = 4096  # Linux's limit on a path's length: anything longer names no file

# What each variable accepts, as the one-line refusal of a malformed value says it.
FORMS = dict.fromkeys(SWITCHES, "1 or 0 (also true/false, yes/no, on/off)") | {
    "max_concurrent_runs": "a whole number of runs from 1 to 64",
    "max_waiting_runs": "a whole number of runs from 0 to 256",
    "pg_timeout_s": "a number of seconds from 1 to 3600 (digits, one optional decimal point)",
    "memory_budget_mb": "a whole number of megabytes from 64 to 1048576",
    "room_db": "a file name in an existing folder (or :memory: for a test)",
}


def _folder_of(path: str) -> bool:
    return path == ":memory:" or os.path.isdir(os.path.dirname(os.path.abspath(path)))


def _refused(field: str, text: str) -> ValueError:
    name, shown = ENV_NAMES[field], text[:SHOWN_CHARS]
    if not text.strip():
        return ValueError(f"{name} is set but empty: write {FORMS[field]}, or unset it")
    more = f"... ({len(text)} characters)" if len(text) > SHOWN_CHARS else ""
    return ValueError(f"{name}={shown!r}{more} can't be used: write {FORMS[field]}")


def parse(field: str, text: str) -> Any:
    """The value of setting `field` written as `text` (surrounding spaces ignored):
    ValueError naming its variable when empty, malformed or out of its range."""
    value = text.strip().lower()
    if field in PATHS:  # a file name keeps its case
        path = text.strip()
        if not path or len(path) > PATH_MAX or os.path.isdir(path) or not _folder_of(path):
            raise _refused(field, text)
        return path
    if field in SWITCHES:
        if value in _TRUE | _FALSE:
            return value in _TRUE
        raise _refused(field, text)
    whole = isinstance(Settings.__dataclass_fields__[field].default, int)
    if len(value) > SHOWN_CHARS or not (_WHOLE if whole else _DECIMAL).fullmatch(value):
        raise _refused(field, text)  # long: past any range (and int() refuses 4,300 digits)
    number = int(value) if whole else float(value)
    low, high = LIMITS[field]
    if not low <= number <= high:
        raise _refused(field, text)
    return number


if __name__ == "__main__":
    read = Settings.from_env(os.environ)
    for field in fields(Settings):
        value = getattr(read, field.name)
        shown = "unset (on in the Streamlit server, off for a CLI)" if value is None else value
        shown = "unset (the lab's data folder)" if value == "" else shown
        print(f"{ENV_NAMES[field.name]:<24} {shown}")
