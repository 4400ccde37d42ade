"""The lab's deployment settings: read once from the environment, validated, frozen.

    PCL_WARM_POOL            1/0: fork ranks from a pre-imported process, or always start
                             torchrun (unset: on in the Streamlit server, off for the CLIs)
    PCL_PRELOAD              0/false/no/off: no background imports after the first page (on)
    PCL_MAX_CONCURRENT_RUNS  jobs holding processes at once (half the CPUs, at least 1)
    PCL_MAX_WAITING_RUNS     jobs waiting in line before a request hears "busy" (8)
    PCL_PG_TIMEOUT_S         the process-group timeout a launch hands its ranks (60 s)
    PCL_MEMORY_BUDGET_MB     memory the server's whole process tree may use (2500 MB): a run
                             that would go past it waits in line, or is refused when nothing
                             running could free memory

A malformed value is a `ValueError` of one line naming the variable and the form it takes,
raised when the settings are first read (`current()`; `malformed()` returns it without
raising): a server that was told something it cannot honour stops at start-up with that line
(ui.serving), rather than running on defaults nobody chose.

    python -m pclab.runners.settings        # prints the settings in force
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Settings:
    warm_pool: bool | None = None  # None: the server's default (on), a CLI's (off)
    preload: bool = True
    max_concurrent_runs: int = max(1, (os.cpu_count() or 2) // 2)
    max_waiting_runs: int = 8
    pg_timeout_s: float = 60.0
    memory_budget_mb: int = 2500  # fits Streamlit Community Cloud's ~2.7 GB per app

    def __post_init__(self) -> None:
        if self.warm_pool not in (None, True, False):
            raise ValueError(f"warm_pool={self.warm_pool!r} must be on, off or unset")
        if not 64 <= self.memory_budget_mb <= 1_048_576:
            raise ValueError(f"memory_budget_mb={self.memory_budget_mb} must be in [64, 1048576]")
        if self.max_concurrent_runs < 1:
            raise ValueError(f"max_concurrent_runs={self.max_concurrent_runs} must be >= 1")
        if self.max_waiting_runs < 0:
            raise ValueError(f"max_waiting_runs={self.max_waiting_runs} must be >= 0")
        if not 0 < self.pg_timeout_s <= 3600:
            raise ValueError(f"pg_timeout_s={self.pg_timeout_s} must be in (0, 3600]")


ENV_NAMES = {
    "warm_pool": "PCL_WARM_POOL",
    "preload": "PCL_PRELOAD",
    "max_concurrent_runs": "PCL_MAX_CONCURRENT_RUNS",
    "max_waiting_runs": "PCL_MAX_WAITING_RUNS",
    "pg_timeout_s": "PCL_PG_TIMEOUT_S",
    "memory_budget_mb": "PCL_MEMORY_BUDGET_MB",
}
KINDS = {
    name: bool if name in ("warm_pool", "preload") else type(value)
    for name, value in ((f.name, f.default) for f in fields(Settings))
}


# What each variable accepts, as the one-line refusal of a malformed value says it.
FORMS = {
    "warm_pool": "1 or 0 (also true/false, yes/no, on/off)",
    "preload": "1 or 0 (also true/false, yes/no, on/off)",
    "max_concurrent_runs": "a whole number >= 1",
    "max_waiting_runs": "a whole number >= 0",
    "pg_timeout_s": "a number of seconds in (0, 3600]",
    "memory_budget_mb": "a whole number of megabytes in [64, 1048576]",
}


def _refused(field: str, text: str) -> ValueError:
    return ValueError(f"{ENV_NAMES[field]}={text!r} can't be used: write {FORMS[field]}")


def _parse(field: str, text: str) -> object:
    value, kind = text.strip().lower(), KINDS[field]
    if kind is bool:
        if value in _TRUE | _FALSE:
            return value in _TRUE
        raise _refused(field, text)
    try:
        return kind(value)
    except ValueError:
        raise _refused(field, text) from None


def from_env(environ: Mapping[str, str]) -> Settings:
    """The settings `environ` asks for; unset variables keep their defaults (ValueError on
    a malformed or out-of-range value: one line naming the variable and its form)."""
    changes = {}
    for field in fields(Settings):
        text = environ.get(ENV_NAMES[field.name], "")
        if text.strip():
            changes[field.name] = _parse(field.name, text)
    try:
        return Settings(**changes)
    except ValueError as exc:
        name = str(exc).split("=", 1)[0]  # the field Settings names
        raise _refused(name, environ[ENV_NAMES[name]]) from None


def _from_environment() -> tuple[Settings, ValueError | None]:
    try:
        return from_env(os.environ), None
    except ValueError as exc:
        return Settings(), exc


_FROM_ENVIRONMENT, _MALFORMED = _from_environment()
_CURRENT = [_FROM_ENVIRONMENT]


def malformed() -> ValueError | None:
    """The refusal of a malformed PCL_* variable in this process's environment, or None."""
    return _MALFORMED


def current() -> Settings:
    """The settings in force for this process (ValueError when the environment's are
    malformed: nothing runs on defaults nobody chose)."""
    if (error := malformed()) is not None:
        raise error
    return _CURRENT[0]


def configure(**changes: object) -> Settings:
    """Replace some settings for the rest of this process (the benchmark's pool rows);
    returns the previous settings."""
    previous = _CURRENT[0]
    _CURRENT[0] = replace(previous, **changes)
    return previous


def serve_by_default() -> Settings:
    """Called by the Streamlit server (ui.serving): settings left unset take the server's
    default - the warm pool on. A CLI or a test that never calls it stays on the cold path."""
    if _CURRENT[0].warm_pool is None:
        configure(warm_pool=True)
    return _CURRENT[0]


@contextlib.contextmanager
def overridden(**changes: object) -> Iterator[Settings]:
    """Within the block, these settings are changed (tests)."""
    previous = configure(**changes)
    try:
        yield _CURRENT[0]
    finally:
        _CURRENT[0] = previous


if __name__ == "__main__":
    if malformed() is not None:
        raise SystemExit(str(malformed()))
    for field in fields(Settings):
        value = getattr(current(), field.name)
        shown = "unset (on in the Streamlit server, off for a CLI)" if value is None else value
        print(f"{ENV_NAMES[field.name]:<24} {shown}")
