"""The live room under load (issue 33): 60 participants answer within 10 s, every answer is
recorded and the presenter's view, in Chromium, shows the full count. Runs `python -m
bench.room --check` (bench/room.py says how it measures). The timing goals (each write
<= 1 s, the view's lag p95 <= 2 s) are the bench's, measured on a quiet box
(`python -m bench --only room`, BENCHMARKS.md): the suite must hold with both cores busy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.conftest import CHROMIUM, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_sixty_participants_are_all_counted_in_the_presenters_view(playwright):
    assert CHROMIUM  # the playwright fixture skips (or fails under CI) without a browser
    done = subprocess.run(
        [sys.executable, "-m", "bench.room", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["answered"] == result["participants"] == 60
    assert result["shown"] == 60 and None not in result["lag_s"]
