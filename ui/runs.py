"""Run a real multi-process experiment from a page: live progress, a cached result, no hang.

The only Streamlit side of `runners/`. A page calls

    result = run_with_status(t("parameters.run_label"), runners.negatives.run, world_size=2, tau=1.0)

and gets a `RunResult` (or None when the parameters are invalid, after a translated error).
Results are cached with `st.cache_data`, keyed on the validated parameters plus the sha256
of the worker's source, so editing a worker re-runs it. Only successful runs are stored: a
timeout on a busy box is retried next time rather than remembered.

Progress is drawn in `st.status` *outside* the cached function, so a cache hit replays no
elements (Streamlit would otherwise record the progress lines and replay them); the cached
function itself only hands back results that were just computed or are already stored.

While a run is in progress the status label is refreshed every HEARTBEAT_S seconds (elapsed
time, or the place in line). That refresh is a Streamlit call, and a Streamlit call is where
Stop, a rerun or a closed session surfaces as an exception in the script thread: the
launcher then stops the run (unless another visitor's identical request still waits for it)
and removes every process and temporary file before the exception goes on.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable

import streamlit as st

from core.validation import InvalidInput
from runners import jobs
from runners.launcher import RunResult, worker_code_hash
from ui.page import error_message, t

HEARTBEAT_S = 1.0  # how often a running page makes a Streamlit call (where Stop surfaces)

_FRESH: dict[tuple[str, str, str], RunResult] = {}  # results on their way into the cache
_FRESH_LOCK = threading.Lock()


class _NotStored(Exception):
    """Raised by the cached lookup on a miss; Streamlit never caches an exception."""


@st.cache_data(show_spinner=False, max_entries=64)
def _stored(runner_id: str, worker_hash: str, params_key: str) -> RunResult:
    with _FRESH_LOCK:
        result = _FRESH.pop((runner_id, worker_hash, params_key), None)
    if result is None:
        raise _NotStored
    return result


def _worker_of(runner: Callable[..., RunResult]) -> str:
    """The torchrun worker behind a runner: its module's WORKER, else the module itself."""
    module = sys.modules.get(runner.__module__)
    return getattr(module, "WORKER", runner.__module__)


def _validated(runner: Callable[..., RunResult], params: dict) -> dict:
    """The runner module's `check_params(**params)` when it has one (ValueError / TypeError)."""
    check = getattr(sys.modules.get(runner.__module__), "check_params", None)
    return dict(check(**params)) if check is not None else dict(params)


def progress_text(line: str) -> str:
    """A launcher progress line in the reader's language (its English text if unknown)."""
    event = getattr(line, "event", None)
    try:
        return t(f"runs.progress.{event}", **getattr(line, "values", {}))
    except (KeyError, IndexError, ValueError):
        return str(line)


def run_with_status(label: str, runner: Callable[..., RunResult], **params: object) -> RunResult | None:
    """Run `runner(**params, progress=...)` under `st.status`, cached on params + worker hash.

    Returns the `RunResult` (ok or not; a failure is also shown with `st.error`), or None
    when the parameters are invalid (shown as a translated `st.error`, nothing launched).
    """
    try:
        params = _validated(runner, params)
    except (ValueError, TypeError) as exc:
        # A refused input names its rule; anything else (a damaged artifact) is said as is.
        plain = isinstance(exc, ValueError) and not isinstance(exc, InvalidInput)
        st.error(
            t("runs.cannot_start", message=exc) if plain else error_message(exc), icon=":material/error:"
        )
        return None
    runner_id = f"{runner.__module__}.{runner.__qualname__}"
    worker_hash = worker_code_hash(_worker_of(runner))
    params_key = json.dumps(params, sort_keys=True, default=repr)
    try:
        result = _stored(runner_id, worker_hash, params_key)
    except _NotStored:
        result = None
    if result is not None:
        # A plain line, not st.status: creating a status element costs ~50 ms of the
        # ~51 ms a cached call took (BENCHMARKS.md), the lookup itself about 1 ms.
        st.caption(f":material/cached: {t('runs.cached', label=label, seconds=result.seconds)}")
        return result

    with st.status(t("runs.running", label=label), expanded=False) as status:
        result = _run_live(status, label, runner, params)
        if result.ok:
            status.update(label=t("runs.done", label=label, seconds=result.seconds), state="complete")
        else:
            status.update(label=t("runs.failed", label=label), state="error", expanded=result.code != "busy")
    if not result.ok:
        if result.code == "busy":
            st.warning(t("runs.busy"), icon=":material/hourglass_top:")
        elif result.code == "cancelled":
            st.info(t("runs.cancelled"), icon=":material/stop_circle:")
        else:
            st.error(t("runs.error", message=result.message), icon=":material/error:")
        return result
    with _FRESH_LOCK:
        _FRESH[(runner_id, worker_hash, params_key)] = result
    try:
        _stored(runner_id, worker_hash, params_key)  # moves the fresh result into the cache
    except _NotStored:
        pass
    with _FRESH_LOCK:  # left over only if another session stored the same key first
        _FRESH.pop((runner_id, worker_hash, params_key), None)
    return result


def _run_live(status, label: str, runner: Callable[..., RunResult], params: dict) -> RunResult:
    """Call the runner with progress lines in `status` and a label that ticks every second."""
    began = time.monotonic()
    state = {"beat": began, "position": None}

    def label_now() -> str:
        if state["position"] is not None:
            return t("runs.waiting", label=label, position=state["position"])
        return t("runs.running_for", label=label, seconds=time.monotonic() - began)

    def on_event(line: str) -> None:
        event = getattr(line, "event", None)
        if event == "queued":
            state["position"] = line.values.get("position")
            status.update(label=label_now())
        elif event == "start":
            state["position"] = None
        status.write(progress_text(line))

    def heartbeat() -> bool:
        # Never "cancel" by itself: the Streamlit call raises when the session was stopped.
        now = time.monotonic()
        if now - state["beat"] >= HEARTBEAT_S:
            state["beat"] = now
            status.update(label=label_now())
        return False

    with jobs.cancel_when(heartbeat):
        return runner(**params, progress=on_event)


def clear() -> None:
    """Forget every stored run (tests; a page's "run again" button)."""
    _stored.clear()
