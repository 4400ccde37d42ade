"""The live room's load bench passes (issue 33): 60 participants answer within 10 s and the
presenter's view, in Chromium, is current within 2 s (p95). Runs `python -m bench.room
--check` (bench/room.py says how it measures); its figures are in BENCHMARKS.md."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.conftest import CHROMIUM, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_sixty_participants_in_ten_seconds_and_the_view_keeps_up(playwright):
    assert CHROMIUM  # the playwright fixture skips (or fails under CI) without a browser
    done = subprocess.run(
        [sys.executable, "-m", "bench.room", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert done.returncode == 0, done.stderr[-2000:]
