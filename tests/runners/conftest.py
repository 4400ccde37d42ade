"""Fixtures for the real-torchrun tests: the session's one cold launch of each experiment
(negatives, clipping, Transformer; the warm-pool tests compare against them too), a
per-test process mark for finding leftovers in /proc, and runtimes of a test's own (each
test builds the settings, run queue, memory budget and pool it needs: no module globals).
The session's shared warm pool, `warm_pool`, is tests/conftest.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import pytest
from runner_support import MARK_ENV, NEGATIVES_ARGS, ROOT, marked

import pclab.experiments.clipping as clipping_runner
from pclab.runners.runtime import Runtime
from pclab.runners.settings import Settings


@pytest.fixture
def process_mark(monkeypatch) -> str:
    """A unique mark in this test's environment; every process a launch starts inherits it."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK_ENV, mark)
    return mark


@pytest.fixture
def new_runtime():
    """`new_runtime(**settings)`: a cold Runtime of this test's own under `Settings(**settings)`
    (the defaults, not the environment's), shut down after the test."""
    built: list[Runtime] = []

    def build(**settings) -> Runtime:
        built.append(Runtime.start(Settings(**settings)))
        return built[-1]

    yield build
    for runtime in built:
        runtime.shutdown()


@pytest.fixture
def runtime(new_runtime) -> Runtime:
    """A cold Runtime at the default settings, for this test alone."""
    return new_runtime()


@pytest.fixture(scope="session")
def negatives_cli(tmp_path_factory) -> SimpleNamespace:
    """The session's one real launch: `pclab run negatives --json` on 3 processes."""
    tmp = tmp_path_factory.mktemp("negatives_tmp")
    mark = uuid.uuid4().hex
    env = dict(os.environ, TMPDIR=str(tmp), **{MARK_ENV: mark})
    done = subprocess.run(
        [sys.executable, "-m", "pclab", "run", "negatives", "--json", *NEGATIVES_ARGS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    return SimpleNamespace(
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        report=json.loads(done.stdout) if done.returncode == 0 else None,
        leftover_processes=marked(mark),
        leftover_files=sorted(p.name for p in tmp.iterdir()),
    )


@pytest.fixture(scope="session")
def real_run():
    """The session's one launch of the clipping experiment (both scenarios, overflow on rank 1), and
    anything it left behind."""
    mark = uuid.uuid4().hex
    old = os.environ.get(MARK_ENV)
    os.environ[MARK_ENV] = mark
    try:
        result = clipping_runner.run(inject_overflow=1, timeout_s=280)
    finally:
        if old is None:
            os.environ.pop(MARK_ENV, None)
        else:
            os.environ[MARK_ENV] = old
    return result, marked(mark)


@pytest.fixture(scope="session")
def experiment() -> SimpleNamespace:
    """The session's one launch of the Transformer experiment, through its CLI, at the
    defaults."""
    began, mark = time.monotonic(), uuid.uuid4().hex
    done = subprocess.run(
        [sys.executable, "-m", "pclab", "run", "transformer", "--json"],
        cwd=ROOT,
        env=dict(os.environ, **{MARK_ENV: mark}),
        capture_output=True,
        text=True,
        timeout=280,
    )
    return SimpleNamespace(
        leftover_processes=marked(mark),
        returncode=done.returncode,
        stderr=done.stderr,
        report=json.loads(done.stdout) if done.returncode == 0 else None,
        seconds=time.monotonic() - began,
    )
