"""The lab's temporary folders (runners/scratch.py): named after their owner process,
removed when their work ends or the interpreter exits, and removed by the next start when
the owner died (SIGKILL) - never while the owner lives (another server, a test on the other
xdist worker). A run's ranks make their own temporary folders inside the run's, so a run
cancelled mid-way (every requester left: the tab closed) leaves nothing, cold or warm."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from runner_support import ROOT, marked, wait_for, warm_runtime

from pclab.runners import launcher, scratch

SLEEPS = "tests.runners.workers.sleeps"


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_folder_records_its_owner_and_goes_when_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = scratch.folder("run")
    assert made.parent == tmp_path and made.name.startswith(f"pcl-run-{os.getpid()}-")
    assert scratch.owner(made.name) == os.getpid()
    (made / "inner").mkdir()
    scratch.remove(made)
    assert list(tmp_path.iterdir()) == []
    scratch.remove(made)  # twice: nothing to do


@pytest.mark.parametrize(
    ("name", "pid"),
    [
        ("pcl-run-123-abc_9", 123),
        ("pcl-torch-cache-45-x", 45),
        ("pcl-hf-trainer-6-12345678", 6),
        ("pcl-run-abc", None),  # an owner-less name (an old version's): not ours to judge
        ("pcl-run--12-x", None),
        ("pcl-123-x", None),
        ("other-run-123-x", None),
        ("pcl-run-\u0661\u0662-x", None),  # Arabic-Indic digits are no process id
    ],
)
def test_the_owner_is_read_from_the_name(name, pid):
    assert scratch.owner(name) == pid


def test_only_a_dead_owners_folders_are_removed(tmp_path):
    dead, live = _dead_pid(), os.getpid()
    stale = [tmp_path / f"pcl-{kind}-{dead}-abc" for kind in ("run", "hf-trainer", "torch-cache")]
    kept = [
        tmp_path / f"pcl-run-{live}-abc",  # this process: live
        tmp_path / "pcl-torch-cache-notapid",
        tmp_path / "pcl-hf-trainer-zz9",
        tmp_path / f"lab-{dead}-abc",
    ]
    for folder in stale + kept:
        folder.mkdir()
    (stale[0] / "tmp" / "pcl-hf-trainer-q").mkdir(parents=True)  # what a run's rank made
    (tmp_path / f"pcl-run-{dead}-file").write_text("a file, not a folder")
    assert sorted(scratch.remove_stale(str(tmp_path))) == sorted(str(p) for p in stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)
    assert (tmp_path / f"pcl-run-{dead}-file").exists()


def test_a_folder_still_held_goes_when_the_interpreter_exits(tmp_path):
    code = "from pclab.runners import scratch; print(scratch.folder('run'))"
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(tmp_path / "pcl-run-"))
    assert list(tmp_path.iterdir()) == []


def test_the_module_removes_the_stale_folders(tmp_path):
    stale = tmp_path / f"pcl-run-{_dead_pid()}-abc"
    stale.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "pclab.runners.scratch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == f"removed {stale}\n", done.stderr
    assert not stale.exists()


def _cancel_mid_run(runtime, tmp_path) -> object:
    """A launch whose ranks each make a `pcl-hf-trainer-*` folder and then sleep, cancelled
    (every requester left, as when the tab closes) once both folders exist."""
    stop, out = threading.Event(), {}
    args = ["--seconds", "120", "--temp-prefix", "pcl-hf-trainer-"]

    def request() -> None:
        out["result"] = launcher.launch(
            SLEEPS, 2, args, timeout_s=200, cancel=stop, runtime=runtime
        )

    thread = threading.Thread(target=request)
    thread.start()
    made = lambda: list(tmp_path.glob("pcl-run-*/tmp/pcl-hf-trainer-*"))  # noqa: E731
    assert wait_for(lambda: len(made()) == 2, 120), "the ranks never made their folders"
    assert list(tmp_path.glob("pcl-hf-trainer-*")) == []  # inside the run's folder, not beside
    stop.set()
    thread.join(60)
    return out["result"]


def test_a_cancelled_cold_run_leaves_no_folder(tmp_path, monkeypatch, process_mark, runtime):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert _cancel_mid_run(runtime, tmp_path).code == "cancelled"
    assert marked(process_mark) == [], "a rank outlived the cancelled run"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_cancelled_warm_run_leaves_no_folder(tmp_path, monkeypatch, process_mark):
    """A forked rank reads the run's TMPDIR afresh (the zygote had its own cached)."""
    with warm_runtime() as runtime:
        tempfile.gettempdir()  # cached in this process (and so in the zygote's fork) first
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        began = time.monotonic()
        assert _cancel_mid_run(runtime, tmp_path).code == "cancelled"
        assert time.monotonic() - began < 60
        assert list(tmp_path.iterdir()) == []
    assert wait_for(lambda: marked(process_mark) == [], 10), "a rank or zygote was left"
