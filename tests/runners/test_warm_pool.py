"""The warm pool (runners/warm_pool.py; on in the server unless PCL_WARM_POOL=0), through
`runners.launcher`, in a runtime of this module's own:

the same numbers and signatures as the session's cold torchrun launches, per experiment
failures named like under torchrun: a raising rank, a killed rank, a timeout, a Stop
a dead zygote is replaced; a zygote that dies mid-run fails that run only
bounded by the concurrency limit
nothing outlives the pool's shutdown
(The zygote process itself - preloaded modules, spare ranks, loopback, dying with its
server: tests/runners/test_zygote.py.)
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from runner_support import MARK_ENV, NEGATIVES_ARGS, alive, marked, wait_for, warm_runtime

import pclab.experiments.clipping as clipping_runner
import pclab.experiments.negatives as negatives
import pclab.experiments.transformer as transformer
from pclab.experiments import registry
from pclab.runners import launcher

LOOP = "tests.runners.workers.collective_loop"
SLEEPS = "tests.runners.workers.sleeps"


@pytest.fixture(scope="module")
def warm(negatives_cli, real_run, experiment, tmp_path_factory):
    """This module's runtime, its pool on, after the cold launches it is compared with.
    Every process it starts carries a mark; none may be left after its shutdown."""
    mark = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MARK_ENV, mark)  # inherited by every zygote, store and rank
        patch.setattr("tempfile.tempdir", str(tmp_path_factory.mktemp("warm")))
        with warm_runtime() as runtime:
            yield runtime
    wait_for(lambda: marked(mark) == [], 5)
    assert marked(mark) == [], "a zygote, store or rank outlived the pool's shutdown"


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_experiment_runs_at_its_defaults_and_agrees(warm, name):
    """The registry's one launch-and-compare test: a new experiment is in it by its line."""
    experiment = registry.get(name)
    result = experiment.launch(timeout_s=experiment.timeout_s, runtime=warm)
    assert result.ok, result.message
    assert experiment.agrees(result.report)


def rank_pids_when_reported(world_size: int):
    """A progress callback that collects each rank's pid from its JSON once all reported: from
    this process's own launch folders only (runners.scratch names them pcl-run-<pid>-*). A
    glob of every pcl-run-* folder read the other xdist worker's launches too, and the test
    then killed a rank of another run (measured once in a clean-clone suite: "rank 0:
    ... Connection reset by peer" named where "rank 1: killed by SIGKILL" was due)."""
    pids: dict[int, int] = {}

    def progress(event):
        if event.event == "rank_done" and event.values["done"] == world_size and not pids:
            own = f"pcl-run-{os.getpid()}-*/out/rank*.json"
            for path in Path(tempfile.gettempdir()).glob(own):
                payload = json.loads(path.read_text())
                pids[payload["rank"]] = payload["pid"]

    return pids, progress


def test_noop_job_runs_on_two_real_ranks_through_the_launcher(warm):
    before = warm.run_queue.stats["launched"]
    events = []
    result = launcher.launch(
        "bench.noop_worker", 2, timeout_s=120, progress=events.append, runtime=warm
    )
    assert result.ok, result.message
    assert [r["rank"] for r in result.ranks] == [0, 1]
    assert {r["world_size"] for r in result.ranks} == {2}
    assert [e.event for e in events][0] == "start" and events[-1].event == "finished"
    assert warm.run_queue.stats["launched"] == before + 1  # counted by the line like a cold launch
    assert warm.pool.size()["zygotes"] == 1


def test_negatives_match_the_cold_launch_bit_for_bit(warm, negatives_cli):
    assert negatives_cli.returncode == 0, negatives_cli.stderr
    world_size, tau = int(NEGATIVES_ARGS[1]), float(NEGATIVES_ARGS[3])
    result = negatives.run(world_size=world_size, tau=tau, runtime=warm)
    assert result.ok, result.message
    assert result.report == negatives_cli.report  # every number and each rank's sha256


def test_clipping_ranks_match_the_cold_launch_bit_for_bit(warm, real_run):
    cold, _ = real_run
    assert cold.ok, cold.message
    result = clipping_runner.run(inject_overflow=1, timeout_s=280, runtime=warm)
    assert result.ok, result.message
    assert result.ranks == cold.ranks  # each rank's whole payload and its signature


def test_transformer_matches_the_cold_launch_bit_for_bit(warm, experiment):
    assert experiment.returncode == 0, experiment.stderr
    result = transformer.run(timeout_s=280, runtime=warm)
    assert result.ok, result.message
    assert result.report["rank_output_sha256"] == experiment.report["rank_output_sha256"]
    assert result.report == experiment.report


def test_a_raising_rank_is_named_with_its_exception(warm):
    result = launcher.launch("tests.runners.workers.raises", 2, timeout_s=120, runtime=warm)
    assert not result.ok and result.code == "failed" and result.ranks == ()
    assert result.message.startswith("rank 1: ZeroDivisionError"), result.message


def test_a_killed_rank_is_named_and_the_zygote_goes_on(warm):
    zygotes = warm.pool.zygote_pids()
    pids, progress = rank_pids_when_reported(2)

    def kill_rank_one(event):
        progress(event)
        if pids and alive(pids[1]):
            os.kill(pids[1], signal.SIGKILL)

    result = launcher.launch(
        LOOP, 2, ["--seconds", "120"], timeout_s=200, progress=kill_rank_one, runtime=warm
    )
    assert not result.ok and result.code == "failed"
    assert result.message == "rank 1: killed by SIGKILL"
    assert wait_for(lambda: not any(alive(p) for p in pids.values()), 5)
    assert warm.pool.zygote_pids() == zygotes  # the same zygote serves the next run
    assert launcher.launch("bench.noop_worker", 2, runtime=warm).ok


def test_a_timeout_and_a_stop_end_every_rank_and_the_pool_serves_again(warm):
    pids, progress = rank_pids_when_reported(2)
    result = launcher.launch(
        LOOP, 2, ["--seconds", "120"], timeout_s=6, progress=progress, runtime=warm
    )
    assert not result.ok and result.message.startswith("timed out after 6 s"), result.message
    assert pids and not any(alive(p) for p in pids.values())

    stop = threading.Event()
    pids, progress = rank_pids_when_reported(2)

    def stop_when_running(event):
        progress(event)
        if pids:
            stop.set()

    result = launcher.launch(
        LOOP, 2, ["--seconds", "120"], progress=stop_when_running, cancel=stop, runtime=warm
    )
    assert result.code == "cancelled", result.message
    assert pids and wait_for(lambda: not any(alive(p) for p in pids.values()), 5)
    assert launcher.launch("bench.noop_worker", 2, runtime=warm).ok


def test_a_dead_zygote_is_replaced(warm):
    (old,) = warm.pool.zygote_pids()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not alive(old), 5)
    result = launcher.launch("bench.noop_worker", 2, timeout_s=200, runtime=warm)
    assert result.ok, result.message
    assert len(warm.pool.zygote_pids()) == 1 and warm.pool.zygote_pids() != {old}


def test_a_zygote_dying_mid_run_fails_that_run_only(warm):
    (zygote,) = warm.pool.zygote_pids()
    pids, progress = rank_pids_when_reported(2)

    def kill_zygote(event):
        progress(event)
        if pids and alive(zygote):
            os.kill(zygote, signal.SIGKILL)

    result = launcher.launch(
        LOOP, 2, ["--seconds", "120"], timeout_s=200, progress=kill_zygote, runtime=warm
    )
    assert result.code == "failed"
    assert result.message.startswith("the warm pool's process stopped during the run"), (
        result.message
    )
    assert wait_for(lambda: not any(alive(p) for p in pids.values()), 5)  # its ranks died with it
    assert wait_for(lambda: warm.pool.size()["idle"] == 1, 180)  # a replacement was started
    assert launcher.launch("bench.noop_worker", 2, runtime=warm).ok


def test_zygotes_are_bounded_by_the_concurrency_limit(warm):
    """A runtime of two slots (beside the module's): a second zygote for the second slot,
    never a third."""
    results, most = [], [0]
    done = threading.Event()

    with warm_runtime(max_concurrent_runs=2) as two:

        def sample():
            while not done.is_set():
                size = two.pool.size()
                most[0] = max(most[0], size["zygotes"] + size["starting"])
                time.sleep(0.01)

        def request(tag):
            args = ["--seconds", "1", "--tag", tag]
            results.append(launcher.launch(SLEEPS, 2, args, timeout_s=240, runtime=two))

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


def test_a_shutdown_while_a_zygote_imports_leaves_nothing(monkeypatch):
    """A server that stops while its pool is still starting a zygote (a few seconds of
    imports, longer under load): that zygote is stopped too, and not started again."""
    from pclab.runners.runtime import Runtime
    from pclab.runners.settings import Settings

    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK_ENV, mark)
    runtime = Runtime.start(Settings(warm_pool=True))
    try:
        runtime.pool.prestart(preload=("tests.runners.workers.slow_to_import",))
        assert wait_for(lambda: marked(mark), 30), "no zygote process was started"
        assert runtime.pool.size() == {"zygotes": 0, "idle": 0, "starting": 1}
    finally:
        runtime.shutdown()
    assert wait_for(lambda: marked(mark) == [], 5), marked(mark)
    assert wait_for(lambda: runtime.pool.size()["starting"] == 0, 5)
    assert marked(mark) == [] and runtime.pool.zygote_pids() == set()
