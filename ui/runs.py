"""Run a real multi-process experiment from a page: live progress, a cached result, no hang.

The Streamlit side of `runners/`. A page (through `ui.run_panel`) calls

    result = run_with_status(t("parameters.run.label"), "negatives", world_size=2, tau=1.0)

with an experiment's registry name (experiments/registry.py) and gets a `RunResult` (or None
when the parameters are invalid, after a translated error). Results are cached with
`st.cache_data`, keyed on the validated parameters plus the sha256 of the worker's package
source, so editing an experiment re-runs it. Only successful runs are stored: a
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
import threading
import time

import streamlit as st

from core.validation import InvalidInput
from experiments import registry
from experiments.base import Experiment, params_record
from runners import jobs
from runners.launcher import worker_code_hash
from runners.results import Outcome, RunResult
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


def progress_text(line: str) -> str:
    """A launcher progress line in the reader's language (its English text if unknown)."""
    event = getattr(line, "event", None)
    try:
        return t(f"runs.progress.{event}", **getattr(line, "values", {}))
    except (KeyError, IndexError, ValueError):
        return str(line)


def run_with_status(label: str, experiment: str | Experiment, **raw: object) -> RunResult | None:
    """Run the experiment (a registry name) on `raw` parameters under `st.status`, cached on
    the validated parameters + the worker's code hash.

    Returns the `RunResult` (ok or not; a failure is also shown with `st.error`), or None
    when the parameters are invalid (shown as a translated `st.error`, nothing launched).
    """
    if isinstance(experiment, str):
        experiment = registry.get(experiment)
    try:
        params = experiment.params(**raw)
    except (ValueError, TypeError) as exc:
        # A refused input names its rule; anything else (a damaged artifact) is said as is.
        plain = isinstance(exc, ValueError) and not isinstance(exc, InvalidInput)
        st.error(
            t("runs.cannot_start", message=exc) if plain else error_message(exc),
            icon=":material/error:",
        )
        return None
    runner_id = experiment.name
    worker_hash = worker_code_hash(experiment.worker)
    params_key = json.dumps(params_record(params), sort_keys=True, default=repr)
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
        result = _run_live(status, label, experiment, params)
        if result.ok:
            status.update(
                label=t("runs.done", label=label, seconds=result.seconds), state="complete"
            )
        else:
            busy = result.outcome is Outcome.BUSY
            status.update(label=t("runs.failed", label=label), state="error", expanded=not busy)
    if not result.ok:
        if result.outcome is Outcome.BUSY:
            st.warning(t("runs.busy"), icon=":material/hourglass_top:")
        elif result.outcome is Outcome.CANCELLED:
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


def _run_live(status, label: str, experiment: Experiment, params: object) -> RunResult:
    """Run the experiment with progress lines in `status` and a label that ticks every second."""
    state = {"beat": time.monotonic(), "began": time.monotonic(), "position": None}

    def label_now() -> str:
        if state["position"] is not None:
            return t("runs.waiting", label=label, position=state["position"])
        return t("runs.running_for", label=label, seconds=time.monotonic() - state["began"])

    def on_event(line: str) -> None:
        event = getattr(line, "event", None)
        if event == "queued":
            state["position"] = line.values.get("position")
            status.update(label=label_now())
        elif event == "start":  # out of the line: the clock counts the run, not the wait
            state["position"], state["began"] = None, time.monotonic()
        status.write(progress_text(line))

    def heartbeat() -> bool:
        # Never "cancel" by itself: the Streamlit call raises when the session was stopped.
        now = time.monotonic()
        if now - state["beat"] >= HEARTBEAT_S:
            state["beat"] = now
            status.update(label=label_now())
        return False

    with jobs.cancel_when(heartbeat):
        return experiment.run(params, progress=on_event)


def clear() -> None:
    """Forget every stored run (tests; a page's "run again" button)."""
    _stored.clear()
