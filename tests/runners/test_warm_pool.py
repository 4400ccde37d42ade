"""The warm pool (runners/warm_pool.py; on in the server unless PCL_WARM_POOL=0), through
`runners.launcher`:

the same numbers and signatures as the session's cold torchrun launches, per experiment
failures named like under torchrun: a raising rank, a killed rank, a timeout, a Stop
a dead zygote is replaced; a zygote that dies mid-run fails that run only
bounded by the concurrency limit; listening on 127.0.0.1 only
nothing outlives the pool's shutdown or its server's death
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from runner_support import MARK_ENV, NEGATIVES_ARGS, ROOT, marked

import pclab.experiments.clipping as clipping_runner
import pclab.experiments.negatives as negatives
import pclab.experiments.transformer as transformer
from pclab.experiments import registry
from pclab.runners import jobs, launcher, settings, warm_pool
from pclab.runners.zygote import SPARE_RANKS

LOOP = "tests.runners.workers.collective_loop"
SLEEPS = "tests.runners.workers.sleeps"


@pytest.fixture(scope="module")
def pool(negatives_cli, real_run, experiment, tmp_path_factory):
    """The pool switched on for this module, after the cold launches it is compared with.
    Every process it starts carries a mark; none may be left after its shutdown."""
    mark = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MARK_ENV, mark)  # inherited by every zygote, store and rank
        patch.setattr("tempfile.tempdir", str(tmp_path_factory.mktemp("warm")))
        with settings.overridden(warm_pool=True):
            warm_pool.prestart(preload=registry.worker_modules())
            wait_for(lambda: warm_pool.size()["idle"] == 1, 180)
            yield mark
            warm_pool.shutdown()
    wait_for(lambda: marked(mark) == [], 5)
    assert marked(mark) == [], "a zygote, store or rank outlived the pool's shutdown"


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_experiment_runs_at_its_defaults_and_agrees(pool, name):
    """The registry's one launch-and-compare test: a new experiment is in it by its line."""
    experiment = registry.get(name)
    result = experiment.launch(timeout_s=experiment.timeout_s)
    assert result.ok, result.message
    assert experiment.agrees(result.report)


def wait_for(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rank_pids_when_reported(world_size: int):
    """A progress callback that collects each rank's pid from its JSON once all reported."""
    pids: dict[int, int] = {}

    def progress(event):
        if event.event == "rank_done" and event.values["done"] == world_size and not pids:
            for path in Path(tempfile.gettempdir()).glob("pcl-run-*/out/rank*.json"):
                payload = json.loads(path.read_text())
                pids[payload["rank"]] = payload["pid"]

    return pids, progress


def test_off_unless_asked_or_serving():
    """Unset, the setting is the server's to decide (on: ui.serving); a CLI or a test that
    never asks stays cold. tests/runners/test_hosted_defaults.py checks the server's side."""
    assert settings.from_env({}).warm_pool is None
    for value, on in (("1", True), ("true", True), ("0", False), ("", None), ("no", False)):
        assert settings.from_env({"PCL_WARM_POOL": value}).warm_pool is on
    with settings.overridden(warm_pool=None):
        assert not warm_pool.enabled()
    with settings.overridden(warm_pool=True):
        assert warm_pool.enabled()


def test_noop_job_runs_on_two_real_ranks_through_the_launcher(pool):
    before = jobs.STATS["launched"]
    events = []
    result = launcher.launch("bench.noop_worker", 2, timeout_s=120, progress=events.append)
    assert result.ok, result.message
    assert [r["rank"] for r in result.ranks] == [0, 1]
    assert {r["world_size"] for r in result.ranks} == {2}
    assert [e.event for e in events][0] == "start" and events[-1].event == "finished"
    assert jobs.STATS["launched"] == before + 1  # counted by the registry like a cold launch
    assert warm_pool.size()["zygotes"] == 1


def test_negatives_match_the_cold_launch_bit_for_bit(pool, negatives_cli):
    assert negatives_cli.returncode == 0, negatives_cli.stderr
    result = negatives.run(world_size=int(NEGATIVES_ARGS[1]), tau=float(NEGATIVES_ARGS[3]))
    assert result.ok, result.message
    assert result.report == negatives_cli.report  # every number and each rank's sha256


def test_clipping_ranks_match_the_cold_launch_bit_for_bit(pool, real_run):
    cold, _ = real_run
    assert cold.ok, cold.message
    result = clipping_runner.run(inject_overflow=1, timeout_s=280)
    assert result.ok, result.message
    assert result.ranks == cold.ranks  # each rank's whole payload and its signature


def test_transformer_matches_the_cold_launch_bit_for_bit(pool, experiment):
    assert experiment.returncode == 0, experiment.stderr
    result = transformer.run(timeout_s=280)
    assert result.ok, result.message
    assert result.report["rank_output_sha256"] == experiment.report["rank_output_sha256"]
    assert result.report == experiment.report


def test_ranks_reuse_preloaded_modules_until_a_project_file_changes(pool):
    """Ranks start with the zygote's imports of the lab's modules; once one of those files is
    edited, every rank reads the project afresh (an edit is never run stale)."""
    worker = "tests.runners.workers.reports_preloaded"
    first = launcher.launch(worker, 2)
    assert first.ok, first.message
    assert [r["preloaded"] for r in first.ranks] == [True, True]
    # imported by a preloaded worker
    edited = ROOT / "pclab" / "experiments" / "negatives" / "params.py"
    before = edited.stat()
    try:
        os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        second = launcher.launch(worker, 2)
    finally:
        os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert second.ok, second.message
    assert [r["preloaded"] for r in second.ranks] == [False, False]


def test_a_spare_rank_killed_while_it_waits_is_never_used(pool):
    """The zygote forks ranks ahead of time; one that dies while waiting is replaced."""
    (zygote,) = warm_pool.zygote_pids()

    def spares() -> list[int]:
        with open(f"/proc/{zygote}/task/{zygote}/children") as f:
            return [int(pid) for pid in f.read().split()]

    # the ranks and a store, all waiting (forked again just after the last run's reply)
    assert wait_for(lambda: len(spares()) == SPARE_RANKS + 1, 5), spares()
    killed = spares()
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    # dead, not merely signalled: a SIGKILLed process of ~300 MB takes a moment to go
    assert wait_for(lambda: not any(alive(pid) for pid in killed), 5)
    result = launcher.launch("bench.noop_worker", 2)
    assert result.ok, result.message


def test_a_raising_rank_is_named_with_its_exception(pool):
    result = launcher.launch("tests.runners.workers.raises", 2, timeout_s=120)
    assert not result.ok and result.code == "failed" and result.ranks == ()
    assert result.message.startswith("rank 1: ZeroDivisionError"), result.message


def test_a_killed_rank_is_named_and_the_zygote_goes_on(pool):
    zygotes = warm_pool.zygote_pids()
    pids, progress = rank_pids_when_reported(2)

    def kill_rank_one(event):
        progress(event)
        if pids and alive(pids[1]):
            os.kill(pids[1], signal.SIGKILL)

    result = launcher.launch(LOOP, 2, ["--seconds", "120"], timeout_s=200, progress=kill_rank_one)
    assert not result.ok and result.code == "failed"
    assert result.message == "rank 1: killed by SIGKILL"
    assert wait_for(lambda: not any(alive(p) for p in pids.values()), 5)
    assert warm_pool.zygote_pids() == zygotes  # the same zygote serves the next run
    assert launcher.launch("bench.noop_worker", 2).ok


def test_a_timeout_and_a_stop_end_every_rank_and_the_pool_serves_again(pool):
    pids, progress = rank_pids_when_reported(2)
    result = launcher.launch(LOOP, 2, ["--seconds", "120"], timeout_s=6, progress=progress)
    assert not result.ok and result.message.startswith("timed out after 6 s"), result.message
    assert pids and not any(alive(p) for p in pids.values())

    stop = threading.Event()
    pids, progress = rank_pids_when_reported(2)

    def stop_when_running(event):
        progress(event)
        if pids:
            stop.set()

    result = launcher.launch(LOOP, 2, ["--seconds", "120"], progress=stop_when_running, cancel=stop)
    assert result.code == "cancelled", result.message
    assert pids and wait_for(lambda: not any(alive(p) for p in pids.values()), 5)
    assert launcher.launch("bench.noop_worker", 2).ok


def test_a_dead_zygote_is_replaced(pool):
    (old,) = warm_pool.zygote_pids()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not alive(old), 5)
    result = launcher.launch("bench.noop_worker", 2, timeout_s=200)
    assert result.ok, result.message
    assert len(warm_pool.zygote_pids()) == 1 and warm_pool.zygote_pids() != {old}


def test_a_zygote_dying_mid_run_fails_that_run_only(pool):
    (zygote,) = warm_pool.zygote_pids()
    pids, progress = rank_pids_when_reported(2)

    def kill_zygote(event):
        progress(event)
        if pids and alive(zygote):
            os.kill(zygote, signal.SIGKILL)

    result = launcher.launch(LOOP, 2, ["--seconds", "120"], timeout_s=200, progress=kill_zygote)
    assert result.code == "failed"
    assert result.message.startswith("the warm pool's process stopped during the run"), (
        result.message
    )
    assert wait_for(lambda: not any(alive(p) for p in pids.values()), 5)  # its ranks died with it
    assert wait_for(lambda: warm_pool.size()["idle"] == 1, 180)  # a replacement was started
    assert launcher.launch("bench.noop_worker", 2).ok


def test_zygotes_are_bounded_by_the_concurrency_limit(pool):
    results, most = [], [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            most[0] = max(most[0], warm_pool.size()["zygotes"] + warm_pool.size()["starting"])
            time.sleep(0.01)

    def request(tag):
        args = ["--seconds", "1", "--tag", tag]
        results.append(launcher.launch(SLEEPS, 2, args, timeout_s=240))

    with settings.overridden(max_concurrent_runs=2):
        watcher = threading.Thread(target=sample)
        watcher.start()
        threads = [threading.Thread(target=request, args=(str(i),)) for i in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done.set()
        watcher.join()
    assert [r.ok for r in results] == [True] * 5, [r.message for r in results]
    assert most[0] == 2  # a second zygote for the second slot, never a third


def _listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of the TCP sockets these processes listen on (from /proc)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                    found.add(fields[1].split(":")[0])
    return found


def test_every_socket_listens_on_loopback_only(pool):
    seen: set[str] = set()

    def look(event):
        if event.event == "rank_done" and event.values["done"] == 2:
            seen.update(_listening_addresses(marked(pool)))

    result = launcher.launch(LOOP, 2, ["--seconds", "1"], timeout_s=120, progress=look)
    assert result.ok, result.message
    # the store and Gloo's pairs: 127.0.0.1 in /proc's little-endian hex (IPv4 or mapped)
    assert seen, "no listening socket found while the ranks ran"
    assert seen <= {"0100007F", "0000000000000000FFFF00000100007F"}, seen


def test_the_pool_dies_with_its_server(pool, tmp_path):
    """SIGKILL of the server mid-run: its zygote, store and ranks are gone within seconds.
    (The run's directory cannot be removed by a killed server: it goes to this test's own
    temporary directory, not the machine's.)"""
    mark = uuid.uuid4().hex
    script = (
        "import sys, threading\n"
        "from pclab.runners import launcher\n"
        "def say(e):\n"
        "    if e.event == 'rank_done' and e.values['done'] == 2: print('running', flush=True)\n"
        f"launcher.launch({LOOP!r}, 2, ['--seconds', '120'], timeout_s=200, progress=say)\n"
    )
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.update({MARK_ENV: mark, settings.ENV_NAMES["warm_pool"]: "1"})
    server = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout.readline().strip() == "running"
        assert len(marked(mark)) >= 4  # the server, the zygote, the store and two ranks
        server.send_signal(signal.SIGKILL)
        server.wait()
        assert wait_for(lambda: marked(mark) == [], 5), marked(mark)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
