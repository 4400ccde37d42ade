"""Fixtures for the real-torchrun tests: the session's one launch of the negatives job,
and a per-test process mark for finding leftovers in /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest
from runner_support import MARK_ENV, NEGATIVES_ARGS, ROOT, marked


@pytest.fixture
def process_mark(monkeypatch) -> str:
    """A unique mark in this test's environment; every process a launch starts inherits it."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK_ENV, mark)
    return mark


@pytest.fixture(scope="session")
def negatives_cli(tmp_path_factory) -> SimpleNamespace:
    """The session's one real launch: `python -m runners.negatives --json` on 3 processes."""
    tmp = tmp_path_factory.mktemp("negatives_tmp")
    mark = uuid.uuid4().hex
    env = dict(os.environ, TMPDIR=str(tmp), **{MARK_ENV: mark})
    done = subprocess.run(
        [sys.executable, "-m", "runners.negatives", "--json", *NEGATIVES_ARGS],
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
