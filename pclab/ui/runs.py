"""Run a real multi-process experiment from a page: live progress, a cached result, no hang.

The Streamlit side of `runners/`. A page (through `ui.run_panel`) calls

    result = run_with_status(t("parameters.run.label"), "negatives", world_size=2, tau=1.0)

with an experiment's registry name (experiments/registry.py) and gets a `RunResult` (or None
when the parameters are invalid, after a translated error). Results are cached with
`st.cache_data`, keyed on the validated parameters plus the sha256 of the worker's package
source, so editing an experiment re-runs it. Only successful runs are stored: a
timeout on a busy box is retried next time rather than remembered.

Progress is drawn *outside* the cached function, so a cache hit replays no elements
(Streamlit would otherwise record the progress lines and replay them); the cached function
itself only hands back results that were just computed or are already stored. A run that
answers within SHOW_AFTER_S (a warm-pool run of pages 06 and 08 takes ~0.15 s) is drawn as
one finished line holding its progress lines; a longer one, or one waiting in line, gets a
live `st.status` from then on (Streamlit sleeps 50 ms when it creates one: BENCHMARKS.md).

While a run is in progress the status label is refreshed every HEARTBEAT_S seconds (elapsed
time, or the place in line). That refresh is a Streamlit call, and a Streamlit call is where
Stop, a rerun or a closed session surfaces as an exception in the script thread: the
launcher then stops the run (unless another visitor's identical request still waits for it)
and removes every process and temporary file before the exception goes on.

Every run goes through the server's one runtime (ui.serving: its run queue, memory budget and
warm pool). When the warm pool cannot start, runs fall back to torchrun (runners.launcher's
"pool_fallback" event); the page says so once per session.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Literal

import streamlit as st
from streamlit.elements.lib.mutable_status_container import StatusContainer

from pclab.core.validation import DamagedFile
from pclab.experiments import registry
from pclab.experiments.base import Experiment, Params, params_record
from pclab.runners.code_hash import worker_code_hash
from pclab.runners.diagnosis import one_line
from pclab.runners.results import Outcome, ProgressEvent, RunResult
from pclab.ui import serving
from pclab.ui.input_errors import error_message
from pclab.ui.language import t
from pclab.ui.plain_text import plain

_LOG = logging.getLogger(__name__)
HEARTBEAT_S = 1.0  # how often a running page makes a Streamlit call (where Stop surfaces)
SHOW_AFTER_S = 0.4  # a run still going after this gets a live st.status (it costs 50 ms)
FALLBACK_SHOWN_KEY = "pcl_pool_fallback_shown"  # this session was told the pool is down

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


def progress_text(line: ProgressEvent) -> str:
    """A launcher progress line in the reader's language (its English text if unknown)."""
    event: str = line.event
    values = line.values
    if event == "start" and values.get("path") == "pool":
        event = "start_pool"
    try:
        return t(f"runs.progress.{event}", **values)
    except (KeyError, IndexError, ValueError):
        return str(line)


def cache_key(experiment: Experiment, params: Params) -> tuple[str, str, str]:
    """What a stored result is found by: the experiment, the sha256 of every source file its
    worker runs (pclab.runners.code_hash: core included) and the validated parameters."""
    params_key = json.dumps(params_record(params), sort_keys=True, default=repr)
    return experiment.name, worker_code_hash(experiment.worker), params_key


def run_with_status(label: str, experiment: str | Experiment, **raw: object) -> RunResult | None:
    """Run the experiment (a registry name) on `raw` parameters under `st.status`, cached on
    the validated parameters + the worker's code hash.

    Returns the `RunResult` (ok or not; a failure is also shown with `st.error`, and so is an
    exception raised on the way, a bug of the lab's whose stack goes to the server's log), or
    None when the parameters are invalid (a translated `st.error`, nothing launched).
    """
    if isinstance(experiment, str):
        experiment = registry.get(experiment)
    try:
        params = experiment.params(**raw)
    except (ValueError, TypeError) as exc:
        # A refused input names its rule; a damaged artifact of the lab's stops the run itself.
        message = error_message(exc)
        if isinstance(exc, DamagedFile):
            message = t("runs.cannot_start", message=message)
        st.error(message, icon=":material/error:")
        return None
    live = _Live(label)
    try:
        return _stored_or_run(live, experiment, params)
    except Exception as exc:  # noqa: BLE001 - the lab's own fault, said in the panel
        # A run's failures come back as a RunResult; an exception here is a bug of the lab's.
        # Left alone it would end the page in Streamlit's exception box, whose text the lab's
        # config hides from visitors. Stop and reruns are BaseExceptions and go on.
        _LOG.exception("a run of %s raised", experiment.name)  # the stack, in the server's log
        error = one_line(f"{type(exc).__name__}: {exc}")
        failed = RunResult.ended(Outcome.FAILED, error, time.monotonic() - live.began, "")
        live.finish(failed)
        st.error(t("runs.lab_error", error=plain(error)), icon=":material/error:")
        return failed


def _stored_or_run(live: _Live, experiment: Experiment, params: Params) -> RunResult:
    """The stored result for these parameters and this worker code, or a run drawn by `live`
    (stored when it finished)."""
    runner_id, worker_hash, params_key = cache_key(experiment, params)
    try:
        result = _stored(runner_id, worker_hash, params_key)
    except _NotStored:
        result = None
    if result is not None:
        # A plain line, not st.status: creating a status element costs ~50 ms of the
        # ~51 ms a cached call took (BENCHMARKS.md), the lookup itself about 1 ms.
        seconds = result.seconds
        st.caption(f":material/cached: {t('runs.cached', label=live.label, seconds=seconds)}")
        return result

    live.began = live.beat = time.monotonic()  # the run's clock: the lookup is not the run's
    result = experiment.run(
        params, progress=live.on_event, cancel=live.heartbeat, runtime=serving.started()
    )
    live.finish(result)
    if live.fallback and not st.session_state.get(FALLBACK_SHOWN_KEY):
        st.session_state[FALLBACK_SHOWN_KEY] = True  # once per session: it is the server's state
        st.info(t("runs.pool_fallback"), icon=":material/speed:")
    if not result.ok:
        if result.outcome is Outcome.BUSY and live.busy_values.get("reason") == "memory":
            st.warning(t("runs.busy_memory", **live.busy_values), icon=":material/memory:")
        elif result.outcome is Outcome.BUSY:
            st.warning(t("runs.busy"), icon=":material/hourglass_top:")
        elif result.outcome is Outcome.CANCELLED:
            st.info(t("runs.cancelled"), icon=":material/stop_circle:")
        else:
            st.error(t("runs.error", message=plain(result.message)), icon=":material/error:")
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


class _Live:
    """A run's progress on the page. A run that answers within SHOW_AFTER_S draws one
    finished line (an expander holding its progress lines); a longer one gets a live
    `st.status` (created then: it costs Streamlit's 50 ms sleep), whose label ticks every
    HEARTBEAT_S. Every call happens in the script thread (run_queue.submit forwards events
    there)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lines: list[str] = []
        self.status: StatusContainer | None = None
        self.began = self.beat = time.monotonic()
        self.position: object = None  # place in line, while waiting
        self.memory = False  # waiting for memory to free, while the line is empty
        self.fallback = False  # the warm pool could not start: torchrun started the ranks
        self.busy_values: dict[str, object] = {}

    def label_now(self) -> str:
        if self.memory:
            return t("runs.waiting_memory", label=self.label)
        if self.position is not None:
            return t("runs.waiting", label=self.label, position=self.position)
        return t("runs.running_for", label=self.label, seconds=time.monotonic() - self.began)

    def on_event(self, line: ProgressEvent) -> None:
        event, values = line.event, line.values
        if event == "queued":
            self.position, self.memory = values.get("position"), False
        elif event == "memory":
            self.memory = True
        elif event == "start":  # out of the line: the clock counts the run, not the wait
            self.position, self.memory, self.began = None, False, time.monotonic()
        elif event == "pool_fallback":
            self.fallback = True
        elif event == "busy":
            self.busy_values = {k: v for k, v in values.items() if k != "waiting"}
        text = progress_text(line)
        self.lines.append(text)
        if self.status is not None:
            if event in ("queued", "memory"):
                self.status.update(label=self.label_now())
            self.status.write(text)

    def heartbeat(self) -> bool:
        # Never "cancel" by itself: the Streamlit call raises when the session was stopped.
        now = time.monotonic()
        if self.status is None and now - self.began >= SHOW_AFTER_S:
            self.beat = now
            self.status = st.status(self.label_now(), expanded=False)
            for text in self.lines:
                self.status.write(text)
        elif self.status is not None and now - self.beat >= HEARTBEAT_S:
            self.beat = now
            self.status.update(label=self.label_now())
        return False

    def finish(self, result: RunResult) -> None:
        """The run's last word: the live status updated, or one finished line drawn."""
        state: Literal["complete", "error"]
        if result.ok:
            label, state, icon = (
                t("runs.done", label=self.label, seconds=result.seconds),
                "complete",
                ":material/check_circle:",
            )
        else:
            label, state, icon = t("runs.failed", label=self.label), "error", ":material/error:"
        expanded = not result.ok and result.outcome is not Outcome.BUSY
        if self.status is not None:
            self.status.update(label=label, state=state, expanded=expanded)
            return
        with st.expander(label, expanded=expanded, icon=icon):
            for text in self.lines:
                st.write(text)


def clear() -> None:
    """Forget every stored run (tests; a page's "run again" button)."""
    _stored.clear()
