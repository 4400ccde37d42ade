"""The negatives experiment, run for real once (3 Gloo processes, DDP), against core.

`core.infonce.encoder_grads` predicts every scheme's per-rank and post-DDP gradients in
numpy; the real run back-propagates through torch.distributed collectives and DDP. They
must agree to 1e-12. The worker's own single-process reference (plain autograd) must
agree with core's reference gradient too, and only `gather` may match it.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from runner_support import NEGATIVES_ARGS, ROOT

import pclab.experiments.negatives as negatives
from pclab.core import infonce
from pclab.core.validation import InvalidInput
from pclab.experiments.negatives import report as negatives_report
from pclab.experiments.negatives import worker as negatives_worker
from pclab.experiments.negatives.params import default_pairs

TOL = 1e-12


def test_cli_succeeds_and_leaves_nothing(negatives_cli):
    assert negatives_cli.returncode == 0, negatives_cli.stderr
    assert "Traceback" not in negatives_cli.stderr
    assert negatives_cli.leftover_processes == []
    # the launch's temporary directory is gone (torch may keep its own caches there)
    assert [name for name in negatives_cli.leftover_files if name.startswith("pcl-run-")] == []


def test_report_inputs(negatives_cli):
    report = negatives_cli.report
    world_size, tau = int(NEGATIVES_ARGS[1]), float(NEGATIVES_ARGS[3])
    a, b = default_pairs(world_size)
    assert report["world_size"] == world_size and report["tau"] == tau
    assert report["a"] == list(a) and report["b"] == list(b)
    assert report["a"][:2] == [1.0, 2.0] and report["b"][:2] == [1.0, -1.0]  # the seed's pairs
    assert (report["wq"], report["wd"], report["lr"]) == (1.0, 1.0, 0.1)
    assert report["backend"] == "gloo"
    assert set(report["schemes"]) == set(infonce.SCHEMES) == set(negatives_worker.SCHEMES)


@pytest.mark.parametrize("scheme", infonce.SCHEMES)
def test_real_run_matches_core(negatives_cli, scheme):
    report = negatives_cli.report
    real = report["schemes"][scheme]
    core = infonce.encoder_grads(
        report["a"], report["b"], report["wq"], report["wd"], report["tau"], scheme
    )
    assert real["grad_wq"] == pytest.approx(core.grad_wq, abs=TOL, rel=0)
    assert real["grad_wd"] == pytest.approx(core.grad_wd, abs=TOL, rel=0)
    ranks = real["ranks"]
    assert [r["rank"] for r in ranks] == list(range(report["world_size"]))
    for r, rank in enumerate(ranks):
        assert rank["local_loss"] == pytest.approx(core.local_loss[r], abs=TOL, rel=0)
        assert rank["grad_wq_local"] == pytest.approx(core.grad_wq_local[r], abs=TOL, rel=0)
        assert rank["grad_wd_local"] == pytest.approx(core.grad_wd_local[r], abs=TOL, rel=0)
    assert real["ranks_agree"] is True  # DDP: one gradient, one step, on every replica


@pytest.mark.parametrize("scheme", infonce.SCHEMES)
def test_sgd_step_and_distance_from_reference(negatives_cli, scheme):
    report = negatives_cli.report
    real, reference = report["schemes"][scheme], report["reference"]
    lr = report["lr"]
    after = real["params_after_sgd"]
    assert after["wq"] == pytest.approx(report["wq"] - lr * real["grad_wq"], abs=1e-15, rel=0)
    assert after["wd"] == pytest.approx(report["wd"] - lr * real["grad_wd"], abs=1e-15, rel=0)
    expected = max(
        abs(real["grad_wq"] - reference["grad_wq"]), abs(real["grad_wd"] - reference["grad_wd"])
    )
    assert real["max_diff_from_reference"] == expected
    if scheme == infonce.CORRECT_SCHEME:
        assert real["max_diff_from_reference"] < TOL
    else:  # the comparison can fail: every other scheme misses part of the gradient
        assert real["max_diff_from_reference"] > 1e-3


def test_reference_is_the_objective_gradient(negatives_cli):
    report = negatives_cli.report
    inputs = (report["a"], report["b"], report["wq"], report["wd"], report["tau"])
    core = infonce.encoder_grads(*inputs, "gather")
    reference = report["reference"]
    assert reference["grad_wq"] == pytest.approx(core.reference_wq, abs=TOL, rel=0)
    assert reference["grad_wd"] == pytest.approx(core.reference_wd, abs=TOL, rel=0)
    q = [report["wq"] * x for x in report["a"]]
    d = [report["wd"] * x for x in report["b"]]
    assert reference["loss"] == pytest.approx(
        infonce.contrastive(q, d, report["tau"]).loss, abs=TOL, rel=0
    )


def test_each_rank_signs_its_output(negatives_cli):
    schemes = negatives_cli.report["schemes"]
    digests = [r["sha256"] for r in schemes["gather"]["ranks"]]
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in digests)
    assert len(set(digests)) == len(digests)  # one output per rank
    for scheme in schemes.values():  # all schemes come from the same launch
        assert [r["sha256"] for r in scheme["ranks"]] == digests


def test_default_pairs_extend_the_seed():
    assert default_pairs(2) == ((1.0, 2.0), (1.0, -1.0))
    a, b = default_pairs(8)
    assert a == tuple(float(r) for r in range(1, 9))
    assert b == (1.0, -1.0, 0.5, -0.5, 0.25, -0.25, 0.125, -0.125)
    assert all(math.isfinite(x) for x in a + b)


@pytest.mark.parametrize(
    "args",
    [
        ["--world-size", "1"],
        ["--world-size", "9"],
        ["--world-size", "two"],
        ["--tau", "0"],
        ["--tau", "nan"],
    ],
)
def test_cli_rejects_bad_arguments_in_one_line(args):
    done = subprocess.run(
        [sys.executable, "-m", "pclab", "run", "negatives", "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in done.stderr


def test_world_size_range_message_names_the_value():
    with pytest.raises(InvalidInput) as caught:
        negatives.run(world_size=9)  # raises before anything is launched
    assert caught.value.field == "world_size" and "2..8" in str(caught.value)
    with pytest.raises(InvalidInput):
        negatives.run(world_size=2, tau=-1.0)
    with pytest.raises(TypeError):
        negatives.run(world_size="2")


def test_report_of_disagreeing_ranks_is_rejected():
    # build_report is what run() applies to the ranks' JSON; feed it a tampered rank
    rank = {
        "rank": 0,
        "world_size": 1,
        "backend": "gloo",
        "a": [1.0],
        "b": [1.0],
        "wq": 1.0,
        "wd": 1.0,
        "tau": 1.0,
        "lr": 0.1,
        "sha256": "0" * 64,
        "reference": {"grad_wq": 0.0, "grad_wd": 0.0},
        "schemes": {},
    }
    with pytest.raises(ValueError):
        negatives_report.build_report((rank, dict(rank, tau=2.0)))
