"""A runner for the Streamlit stop test: a real launch of the `sleeps` worker (no torch in
the ranks), with the runner interface ui.runs expects (WORKER, check_params, run)."""

from __future__ import annotations

from core import validation as v
from runners.launcher import RunResult, launch

WORKER = "tests.runners.workers.sleeps"


def check_params(seconds: float = 120.0) -> dict:
    return {"seconds": v.positive(seconds, "seconds")}


def run(seconds: float = 120.0, *, progress=None) -> RunResult:
    params = check_params(seconds)
    return launch(WORKER, 2, ["--seconds", repr(params["seconds"])], timeout_s=300, progress=progress)
