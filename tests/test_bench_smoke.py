"""Smoke test of the benchmark harness: it runs and its report parses. No timing assertions
(numbers belong in BENCHMARKS.md, not in tests), and the committed BENCHMARKS.md is never
touched: the run writes to a temporary path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench import report

ROOT = Path(__file__).resolve().parents[1]


def test_quick_core_run_writes_a_report_that_parses(tmp_path):
    committed = ROOT / "BENCHMARKS.md"
    before = committed.read_bytes() if committed.exists() else None
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            "core",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ledger.reduce_gradient" in done.stdout  # the printed table
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks")
    assert "| torch / streamlit |" in text
    sections = report.parse(text)
    assert list(sections) == ["core"]
    cases = sections["core"]["data"]["cases"]
    assert {c["entry"] for c in cases} >= {
        "ledger.reduce_gradient",
        "infonce.contrastive",
        "clipping.clip_report",
    }
    assert all(c["seconds"]["n"] == 1 and c["seconds"]["median"] > 0 for c in cases)
    assert "| `infonce.contrastive` |" in sections["core"]["markdown"]
    assert (committed.read_bytes() if committed.exists() else None) == before


def test_a_partial_run_replaces_only_its_own_section():
    old = report.Section("core", "Core", ["a"], rows=[["old core"]], data={"v": 1})
    kept = report.Section("runs", "Runs", ["a"], rows=[["old runs"]], data={"v": 2})
    previous = report.render([old, kept])
    new = report.Section("core", "Core", ["a"], rows=[["new core"]], data={"v": 3})
    sections = report.parse(report.render([new], previous))
    assert list(sections) == ["core", "runs"]
    assert sections["core"]["data"] == {"v": 3} and "new core" in sections["core"]["markdown"]
    assert sections["runs"]["data"] == {"v": 2} and "old runs" in sections["runs"]["markdown"]


def test_an_unknown_family_is_refused():
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "core,gpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "gpu" in done.stderr
