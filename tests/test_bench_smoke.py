"""Smoke test of the benchmark harness: it runs and its report parses. No timing assertions
(numbers belong in BENCHMARKS.md, not in tests), and the committed BENCHMARKS.md is never
touched: the run writes to a temporary path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import report
from tests.runners.runner_support import alive, wait_for

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


@pytest.mark.slow
def test_quick_frameworks_run_checks_the_baseline_cold_and_warm(tmp_path):
    """`--quick --only frameworks`: the bundled correct trainer's check through torchrun, the
    warm pool and the pool with the frameworks preloaded (none for it), with each rank's peak
    memory (the full run adds every adapter the framework table lists)."""
    committed = ROOT / "BENCHMARKS.md"
    before = committed.read_bytes() if committed.exists() else None
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "frameworks", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    section = report.parse(out.read_text(encoding="utf-8"))["frameworks"]
    (baseline,) = [r for r in section["data"]["rows"] if r["adapter"] == "correct_manual"]
    for mode in ("cold", "pooled", "preloaded"):
        row = baseline[mode]
        assert row["ok"] and row["status"] == "same_update", row
        assert row["wall_s"] > 0 and len(row["rank_pss_kb"]) == 2
        # a rank that imported torch holds tens of MB of its own; RSS counts shared pages too
        assert all(10_000 < pss <= rss for pss, rss in zip(row["rank_pss_kb"], row["rank_rss_kb"]))
    assert "| `correct_manual.py` | none |" in section["markdown"]
    assert (committed.read_bytes() if committed.exists() else None) == before


def test_the_frameworks_bench_plans_every_adapter_that_can_run_here():
    """New adapters of the framework table appear by themselves: each under this Python when
    its package is here, litgpt under its own environment's when that exists."""
    from bench import framework_env
    from bench import frameworks as bench_frameworks
    from pclab.experiments.trainer_check.frameworks import SETTINGS, installed_version

    planned = bench_frameworks.plan()
    assert planned[sys.executable][0] == "correct_manual"  # the baseline, no framework
    everywhere = [a for adapters in planned.values() for a in adapters]
    assert len(everywhere) == len(set(everywhere))
    for package, adapter in (
        ("accelerate", "accelerate_accumulate"),
        ("lightning", "lightning_global_tokens"),
        ("transformers", "hf_trainer_local_average"),
    ):
        assert (adapter in planned[sys.executable]) == (installed_version(package) is not None)
    own = framework_env.python_for("litgpt")
    if installed_version("litgpt") is None:
        assert ("litgpt_finetune" in everywhere) == (own is not None)
        assert own is None or planned[str(own)] == ["litgpt_finetune"]
    assert {s.adapter for s in SETTINGS if s.adapter} >= set(everywhere) - {"correct_manual"}


def test_a_server_a_bench_started_dies_with_the_bench(tmp_path):
    """A bench (or test) process that is killed outright takes the Streamlit server it started
    with it: no server is left serving on the box."""
    script = (
        "import sys\n"
        "from bench.cold_start import MINIMAL, free_port, start_server, wait_healthy\n"
        "port = free_port()\n"
        "server = start_server(port, MINIMAL)\n"
        "assert wait_healthy(server, f'http://127.0.0.1:{port}')\n"
        "print(server.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    bench = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        server = int(bench.stdout.readline())
        bench.kill()
        bench.wait()
        # within Streamlit's own shutdown on SIGTERM
        assert wait_for(lambda: not alive(server), 60), "the server outlived the bench"
    finally:
        bench.kill()
        bench.wait()
        bench.stdin.close()
        bench.stdout.close()


def test_the_cli_bench_pairs_each_command_with_a_bare_torchrun(monkeypatch):
    """bench/cli.py: each command in an A/B pair with a bare run of its own, the order
    alternating by round; a goal is the median of its pairs' ratios (timings stubbed: numbers
    belong in BENCHMARKS.md)."""
    from bench import cli

    walls = {
        "bare": iter([3.0, 3.2, 3.1, 3.0, 2.9, 3.3]),
        "transformer": iter([3.3, 3.9, 3.5]),
        "check": iter([4.2, 3.9, 4.4]),
    }
    order: list[str] = []

    def timed(job: str) -> dict:
        order.append(job)
        return {"job": job, "ok": True, "wall_s": next(walls[job]), "cpu_s": 1.0, "error": ""}

    monkeypatch.setattr(cli, "timed", timed)
    section = cli.run(repeats=3)
    assert order == [
        *("bare", "transformer", "bare", "check"),
        *("transformer", "bare", "check", "bare"),
        *("bare", "transformer", "bare", "check"),
    ]
    transformer, check = section.goals
    # pairs: 3.3/3.0, 3.9/3.1, 3.5/2.9 -> 1.10, 1.26, 1.21; 4.2/3.2, 3.9/3.0, 4.4/3.3
    assert transformer.measured == "1.21× (1.10–1.26)" and transformer.met is False
    assert check.measured == "1.31× (1.30–1.33)" and check.met is False
    assert [row[3] for row in section.rows] == ["1.00×", "1.21× (1.10–1.26)", "1.31× (1.30–1.33)"]
    assert [row[5] for row in section.rows][1:] == ["1.00× (1.00–1.00)"] * 2  # CPU: 1 s each
    assert cli.COMMANDS["bare"][-1] == "bench/bare_worker.py"
    assert "cli" in report.ORDER


def test_the_page_benches_find_every_page_the_app_registers():
    """bench.pages (and bench.cold_start) time the pages app.py navigates: each section file
    the app has, home first (it once parsed a list app.py no longer holds and raised)."""
    from bench.pages import registered_pages

    pages = registered_pages()
    sections = {f"pclab/sections/{p.name}" for p in (ROOT / "pclab" / "sections").glob("*.py")}
    assert pages[0] == "pclab/sections/home.py"
    assert set(pages) == sections and len(pages) == len(sections)


def test_the_bare_baseline_imports_nothing_of_the_lab(tmp_path):
    """bench/bare_worker.py, the command line's baseline (bench/cli.py), run as one rank of a
    one-process Gloo group: it takes its DDP step and writes its line, and no module of the lab
    (pclab) or of the bench is imported, in its source or at run time."""
    import ast
    import json
    import os

    worker = ROOT / "bench" / "bare_worker.py"
    tree = ast.parse(worker.read_text(encoding="utf-8"))
    named = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    named += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert [m for m in named if m.split(".")[0] in ("pclab", "bench")] == []
    code = (  # the worker ends with os._exit, as a rank does: list the modules just before
        "import json, os, runpy, sys\n"
        "end = os._exit\n"
        "os._exit = lambda code: (print(json.dumps(sorted(sys.modules)), flush=True), end(code))\n"
        f"sys.argv = ['bare_worker.py', '--out-dir', {str(tmp_path)!r}]\n"
        f"runpy.run_path({str(worker)!r}, run_name='__main__')\n"
    )
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
    env["MASTER_PORT"] = str(_free_port())
    env.pop("PYTHONPATH", None)  # nothing of the checkout on the path that torchrun gives it
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert "torch._dynamo" in modules  # the DDP step ran: what every DDP job imports
    assert [m for m in modules if m.split(".")[0] in ("pclab", "bench")] == []
    assert json.loads((tmp_path / "rank0.json").read_text()) == {"rank": 0, "world_size": 1}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _room_round(lags, answered=3, shown=3, writes=(0.01, 0.02, 0.03)):
    return {
        "participants": 3,
        "answered": answered,
        "shown": shown,
        "lag_s": lags,
        "write_s": list(writes),
    }


def test_the_room_check_asks_what_holds_on_a_busy_box_and_the_goals_ask_the_timing():
    from bench.room import lost, missed

    slow = _room_round([0.1, 0.2, 2.8], writes=(0.01, 0.02, 1.4))
    assert lost(slow) == []  # all answers recorded and shown: the suite passes however busy
    assert any("lag p95 is 2.8" in p for p in missed(slow))
    assert any("slowest write took 1.400" in p for p in missed(slow))
    assert missed(_room_round([0.1, 0.2, 0.3])) == []
    unseen = _room_round([0.1, None, None], shown=1)
    assert lost(unseen) == [
        "the presenter's view ended at 1 answered; 2 recorded answers never appeared in it"
    ]
    dropped = _room_round([0.1, 0.2], answered=2, shown=2)
    assert lost(dropped) == ["2 of 3 answers recorded"]
    assert missed(dropped) == lost(dropped)
    assert lost({"error": "no browser"}) == ["no browser"]


SPIN_AND_SLEEP = """
import time

def test_spins():  # 0.3 s of this process's own CPU, however busy the box is
    start = time.process_time()
    while time.process_time() - start < 0.3:
        pass

def test_sleeps():
    time.sleep(0.05)
"""


def test_the_suite_cpu_plugin_charges_each_test_and_states_the_floor(tmp_path):
    """bench.suite_cpu, as its docstring runs it, on two tests of a throwaway file: the
    spinning test is charged at least the CPU it burned itself (the box's busy time can only
    add to it), the table sums the file and divides by the cores, and under xdist the plugin
    refuses to run (each test would be charged the other worker's work)."""
    import json
    import os

    from bench.suite_cpu import table

    (tmp_path / "test_work.py").write_text(SPIN_AND_SLEEP)
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # `-p bench.suite_cpu` from the checkout
    record = tmp_path / "cpu.json"

    def pytest_with_plugin(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "bench.suite_cpu", "test_work.py"]
        return subprocess.run(
            [*command, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    done = pytest_with_plugin("--suite-cpu", str(record))
    assert done.returncode == 0, done.stdout[-2000:]
    tests = {t["test"]: t for t in json.loads(record.read_text())["tests"]}
    assert set(tests) == {"test_work.py::test_spins", "test_work.py::test_sleeps"}
    assert tests["test_work.py::test_spins"]["cpu_s"] >= 0.25  # 0.3 s, less a tick or two
    assert tests["test_work.py::test_sleeps"]["wall_s"] >= 0.05
    cpu = sum(t["cpu_s"] for t in tests.values())
    shown = table([{"cores": 2, "tests": list(tests.values())}])
    assert f"{cpu:,.0f} CPU-seconds" in shown and f"before {cpu / 2:,.0f} s" in shown
    assert "| `test_work.py` |" in shown and "| 2 |" in shown
    with pytest.raises(ValueError, match="no test"):
        table([{"cores": 2, "tests": []}])

    refused = pytest_with_plugin("-n", "2", "--suite-cpu", str(tmp_path / "no.json"))
    assert refused.returncode == 4 and "-n 0" in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "no.json").exists()
