"""The opt-in warm pool (runners/warm_pool.py): real Gloo ranks forked from a pre-imported
zygote give the same report as torchrun, fail with the same one-line root cause, and leave
no process behind when a run times out."""

from __future__ import annotations

import sys

import pytest
from runner_support import MARK_ENV, NEGATIVES_ARGS, marked

from runners import negatives
from runners.launcher import ProgressEvent
from runners.warm_pool import Pool


@pytest.fixture(scope="module")
def pool():
    with Pool() as warm:
        yield warm


def test_noop_job_runs_on_two_real_ranks(pool):
    events: list[ProgressEvent] = []
    result = pool.launch("bench.noop_worker", 2, timeout_s=120, progress=events.append)
    assert result.ok, result.message
    assert [r["rank"] for r in result.ranks] == [0, 1]
    assert {r["world_size"] for r in result.ranks} == {2}
    assert [e.event for e in events][0] == "start" and events[-1].event == "finished"


def test_negatives_report_is_identical_to_torchrun(pool, negatives_cli):
    """Same inputs as the session's torchrun launch (P = 3, tau = 0.5): the same numbers, bit
    for bit, and each rank signs the same payload."""
    assert negatives_cli.returncode == 0, negatives_cli.stderr
    world_size, tau = int(NEGATIVES_ARGS[1]), float(NEGATIVES_ARGS[3])
    result = pool.run(negatives.run, world_size=world_size, tau=tau)
    assert result.ok, result.message
    assert result.report == negatives_cli.report
    borrowed = [
        name for name, module in sys.modules.items() if getattr(module, "launch", None) == pool.launch
    ]
    assert borrowed == []  # every module that borrowed the pool's launch has given it back


def test_a_raising_rank_is_named_with_its_exception(pool):
    result = pool.launch("tests.runners.workers.raises", 2, timeout_s=120)
    assert not result.ok and result.ranks == ()
    assert result.message.startswith("rank 1: ZeroDivisionError"), result.message


def test_a_timeout_stops_every_rank_and_the_pool_starts_again(monkeypatch, process_mark):
    monkeypatch.setenv(MARK_ENV, process_mark)  # inherited by the zygote and every rank
    with Pool() as warm:
        result = warm.launch("tests.runners.workers.hangs", 2, timeout_s=8, pg_timeout_s=600)
        assert not result.ok and result.message.startswith("timed out after 8 s"), result.message
        assert marked(process_mark) == []  # no rank, no zygote
        again = warm.launch("bench.noop_worker", 2, timeout_s=120)
        assert again.ok, again.message
    assert marked(process_mark) == []


def test_invalid_arguments_raise_before_anything_starts(pool):
    with pytest.raises(ValueError, match="world_size"):
        pool.launch("bench.noop_worker", 0)
    with pytest.raises(TypeError):
        pool.launch("bench.noop_worker", 2, "--flag")
