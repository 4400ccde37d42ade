"""The launcher's failure paths, each with a real torchrun launch of a tiny worker:
a raising rank comes back as its root cause, a hang as a timeout, and neither leaves a
process (checked in /proc) or a temporary directory behind."""

from __future__ import annotations

import json
import tempfile
import time

import pytest
from runner_support import children, marked

from pclab.core.validation import InvalidInput
from pclab.runners import diagnosis, launcher
from pclab.runners.code_hash import worker_code_hash
from pclab.runners.processes import GRACE_S
from pclab.runners.worker import payload_sha256, write_rank_output


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Route the launcher's temporary directory here, to see that it is removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def assert_nothing_left(mark, before, tmp):
    assert marked(mark) == [], "a process of the launch is still running"
    assert set(children()) - before == set(), "a child process was left (or not reaped)"
    assert list(tmp.glob("pcl-run-*")) == [], "the launch's temporary directory was left"


def test_raising_rank_is_the_root_cause(process_mark, private_tmp):
    before = set(children())
    events = []
    result = launcher.launch(
        "tests.runners.workers.raises", 2, timeout_s=200, progress=events.append
    )
    assert not result.ok and result.ranks == () and result.report is None
    # rank 0 also fails (its collective loses the peer) - but it is not the root cause
    assert result.message == "rank 1: ZeroDivisionError: division by zero"
    assert result.worker_hash == worker_code_hash("tests.runners.workers.raises")
    assert [e.event for e in events] == ["start", "failed"]
    assert_nothing_left(process_mark, before, private_tmp)


def test_hanging_rank_times_out(process_mark, private_tmp):
    before = set(children())
    events = []
    start = time.monotonic()
    result = launcher.launch(
        "tests.runners.workers.hangs", 2, timeout_s=10, pg_timeout_s=600, progress=events.append
    )
    elapsed = time.monotonic() - start
    assert not result.ok and result.ranks == ()
    assert result.message.startswith("timed out after 10 s")
    assert "1 unfinished" in result.message  # rank 1 never reports
    assert 10 <= result.seconds <= elapsed < 10 + 3 * GRACE_S
    assert events[0].event == "start" and events[-1].event == "timeout"
    assert_nothing_left(process_mark, before, private_tmp)


def test_process_group_timeout_reaches_the_workers(process_mark, private_tmp):
    # The wall clock allows minutes; the workers' own 5 s process-group timeout ends it.
    before = set(children())
    result = launcher.launch("tests.runners.workers.hangs", 2, timeout_s=250, pg_timeout_s=5)
    assert not result.ok
    assert result.message.startswith("rank 0: ") and "Timed out" in result.message
    assert "[/" not in result.message  # no C++ source location noise
    assert result.seconds < 250
    assert_nothing_left(process_mark, before, private_tmp)


def test_interrupted_launch_still_cleans_up(process_mark, private_tmp):
    # A Streamlit re-run stops a page by raising inside its callbacks: here, mid-run.
    class PageStopped(Exception):
        pass

    def progress(event):
        if event.event == "rank_done":
            raise PageStopped

    before = set(children())
    with pytest.raises(PageStopped):
        launcher.launch(
            "tests.runners.workers.hangs", 2, timeout_s=250, pg_timeout_s=600, progress=progress
        )
    assert_nothing_left(process_mark, before, private_tmp)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"worker": "runners.negatives; rm -rf /"}, InvalidInput),
        ({"worker": "no.such.module"}, InvalidInput),
        ({"world_size": 0}, InvalidInput),
        ({"world_size": launcher.MAX_WORLD_SIZE + 1}, InvalidInput),
        ({"world_size": 2.5}, InvalidInput),
        ({"args": "--tau 1"}, TypeError),
        ({"args": ["--tau", 1.0]}, TypeError),
        ({"timeout_s": 0}, InvalidInput),
        ({"pg_timeout_s": float("inf")}, InvalidInput),
    ],
)
def test_invalid_arguments_raise_before_launching(kwargs, error, process_mark):
    call = {"worker": "tests.runners.workers.raises", "world_size": 2, **kwargs}
    with pytest.raises(error):
        launcher.launch(**call)
    assert marked(process_mark) == []


def test_rank_output_is_signed_and_checked(tmp_path):
    write_rank_output(tmp_path, 0, {"x": 1.5, "sha256": "ignored"})
    write_rank_output(tmp_path, 1, {"x": 2.5})
    ranks, message = launcher._read_ranks(tmp_path, 2)
    assert message == "" and [r["x"] for r in ranks] == [1.5, 2.5]
    assert ranks[0]["sha256"] == payload_sha256({"x": 1.5})
    tampered = json.dumps({"x": 3.5, "sha256": ranks[1]["sha256"]})
    (tmp_path / "rank1.json").write_text(tampered)
    assert launcher._read_ranks(tmp_path, 2) == ((), "rank 1: output checksum mismatch")
    assert launcher._read_ranks(tmp_path, 3)[1] == "rank 1: output checksum mismatch"
    (tmp_path / "rank1.json").unlink()
    assert launcher._read_ranks(tmp_path, 2) == ((), "rank 1: wrote no output")


def _torchrun_cause(log_dir, err, returncode):
    """The launcher's reading of a torchrun job: its rank logs, then its summary on stderr."""
    summary = err.read_text()
    return diagnosis.rank_root_cause(
        log_dir, diagnosis.summary_failure(summary), summary, returncode
    )


def _rank_log(log_dir, rank, text):
    path = log_dir / "run_x" / "attempt_0" / str(rank)
    path.mkdir(parents=True)
    (path / "stderr.log").write_text(text)
    time.sleep(0.01)  # distinct modification times: the order of failure


def test_only_a_peers_lost_connection_on_disk_is_only_symptoms(tmp_path):
    """What makes the warm pool wait for the exit codes (KILLED_PEER_WAIT_S): every rank log
    a lost connection (the killed rank left none); not with no log, nor with a real error."""
    assert not diagnosis.only_symptoms(tmp_path)  # nothing on disk yet
    _rank_log(
        tmp_path,
        0,
        "[rank0]: Traceback (most recent call last):\n[rank0]:   File x\n"
        "[rank0]: RuntimeError: Read error [127.0.0.1]:1: Connection reset by peer.\n",
    )
    assert diagnosis.only_symptoms(tmp_path)
    _rank_log(
        tmp_path,
        1,
        "[rank1]: Traceback (most recent call last):\n[rank1]:   File y\n"
        "[rank1]: ZeroDivisionError: division by zero\n",
    )
    assert not diagnosis.only_symptoms(tmp_path)


def test_root_cause_prefers_the_first_primary_failure(tmp_path):
    err = tmp_path / "torchrun.err"
    err.write_text("")
    _rank_log(
        tmp_path,
        0,
        "[rank0]: Traceback (most recent call last):\n[rank0]:   File x\n"
        "[rank0]: RuntimeError: [/w/gloo/pair.cc:553] Connection closed by peer [127.0.0.1]:1\n",
    )
    _rank_log(
        tmp_path,
        2,
        "[rank2]: Traceback (most recent call last):\n[rank2]:   File y\n"
        "[rank2]:     1 / 0\n[rank2]: ZeroDivisionError: division by zero\n",
    )
    _rank_log(tmp_path, 1, "[rank1]: Traceback (most recent call last):\n[rank1]: KeyError: 'a'\n")
    # rank 0 failed first, but only because a peer died; rank 2 is the first real failure
    assert _torchrun_cause(tmp_path, err, 1) == "rank 2: ZeroDivisionError: division by zero"


def test_root_cause_without_tracebacks_uses_torchrun_summary(tmp_path):
    err = tmp_path / "torchrun.err"
    err.write_text(
        "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 123)\n"
    )
    assert _torchrun_cause(tmp_path, err, 1) == "rank 1: killed by SIGKILL"
    err.write_text("")
    assert _torchrun_cause(tmp_path, err, 3) == "torchrun exited with code 3"


def test_root_cause_of_a_crash_below_python(tmp_path):
    err = tmp_path / "torchrun.err"
    err.write_text("")
    _rank_log(
        tmp_path,
        1,
        "[rank1]: terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "[rank1]:   what():  [enforce fail at /w/gloo/x.cc:20] bad\n",
    )
    assert _torchrun_cause(tmp_path, err, 1) == (
        "rank 1: terminate called after throwing an instance of 'gloo::EnforceNotMet'"
        " what(): [enforce fail at /w/gloo/x.cc:20] bad"
    )
