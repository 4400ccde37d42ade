"""torchtune's full_finetune_distributed recipe through the trainer check
(examples/frameworks/torchtune/torchtune_full_finetune.py and _masked.py), from torchtune's own
environment: torchtune 0.6.1 needs torchao, of which only 0.13.0-0.15.0 import beside torch 2.13.0,
so the check runs under a Python that has it - this one, or the environment `python -m
bench.framework_env torchtune` builds ($PCL_TORCHTUNE_PYTHON, else $TMPDIR/pcl-torchtune). Without
one, the run's tests skip and say how to build it. One launch checks both adapters.

What torchtune 0.6.1 measured (torch 2.13.0, float32, P = 2, K = 2), pinned against weights
computed from the counts alone: the recipe multiplies each microbatch's mean loss (over its
terms, the labels after the shift) by its label count before the shift, and scales the
gradients by P / (the labels of the update, counted before the shift, summed over the ranks).
So weight x N = (labels_rk / n_rk) x (N / labels): with position 0 counted, not the global
token mean; with position 0 masked, labels = terms and the weights are 1. With no label at all
the scale is P / 0 and the parameters turn non-finite.

Across a run (examples/frameworks/torchtune/run_torchtune_full_finetune.py: the recipe's own
train() over two epochs of 5 microbatches a rank, K = 2, position 0 masked): its windows restart
each epoch at `(idx + 1) % K`, and its label count and gradients are zeroed only after a step, so
epoch 0's tail is carried into epoch 1's first window (normalised by the three microbatches'
global count) and epoch 1's is never stepped (`tail_window_dropped`, `gradient_leak`: 2, 2 steps
for 3, 3); its cosine is built for epochs x floor(5 / K) = 4 updates (`schedule_length`); at a
window with N = 0 it scales the gradients by P / 0 (`non_finite`).

    python -m pytest tests/runners/test_torchtune.py -q
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from runner_support import (
    assert_measures_its_record,
    check_in_own_environment,
    own_environment_timeout,
    run_in_own_environment,
)

from bench import framework_env
from pclab.experiments.trainer_check import frameworks
from pclab.experiments.trainer_check.frameworks import run_table

pytestmark = own_environment_timeout()

ADAPTERS = ("torchtune_full_finetune", "torchtune_full_finetune_masked")
STEPS_PER_SCENARIO = 2  # the check's train_step calls: its optimizer, then SGD at lr 1
ONE_LAUNCH = (  # both adapters in one launch, as the table records them
    "import json; from pclab.experiments.trainer_check import frameworks as f; "
    "print(json.dumps(f.check_adapters([s for s in f.SETTINGS if s.package == 'torchtune'])))"
)
REL = 1e-5  # float32 (DTYPE): the solved weights, as the check's float32 tolerance allows


def _trainer(adapter: str):
    return frameworks.BY_CODE[adapter].path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One launch of both adapters (frameworks.check_adapters, as `--only torchtune` records
    them) under torchtune's Python, with every rank's evidence; this checkout's package first
    on the path."""
    folder = tmp_path_factory.mktemp("torchtune")
    done = run_in_own_environment("torchtune", folder, "-c", ONE_LAUNCH)
    assert done.returncode == 0, done.stderr[-3000:]
    checks = json.loads(done.stdout.splitlines()[-1])
    lines = (folder / "record.jsonl").read_text().splitlines()
    return checks, [json.loads(x) for x in lines]


def _expected(s: dict) -> list[list[float | None]]:
    """(labels_rk / n_rk) x (N / labels): the recipe's count is taken before the shift."""
    terms, labels = sum(map(sum, s["counts"])), sum(map(sum, s["label_positions"]))
    return [
        [lab / n * terms / labels if n else None for n, lab in zip(row, placed, strict=True)]
        for row, placed in zip(s["counts"], s["label_positions"], strict=True)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_recipe_weights_each_microbatch_by_labels_over_terms(run, adapter):
    check = run[0][adapter]
    assert check["status"] == "different" and not check["passed"] and check["dtype"] == "float32"
    for s in check["scenarios"]:
        if s["name"] == "no_labels":  # P / 0: the parameters are no longer finite
            assert not s["passed"] and s["first_divergence"]["why"] == "non-finite"
            continue
        for got_row, want_row in zip(s["weights"], _expected(s), strict=True):
            for got, want in zip(got_row, want_row, strict=True):
                assert (got is None) == (want is None), (s["name"], s["weights"])
                if want is not None:
                    assert got == pytest.approx(want, rel=REL), (s["name"], s["weights"])
    uneven = next(s for s in check["scenarios"] if s["name"] == "uneven")
    if adapter.endswith("masked"):  # every counted label is a term: the global token mean
        assert uneven["scheme"] == "global_token" and uneven["passed"]
        assert uneven["counts"] == uneven["label_positions"] == [[14, 8], [1, 8]]
    else:  # 34 labels placed, 5 at position 0: N = 29 terms
        assert uneven["scheme"] == "labels_before_shift" and not uneven["passed"]
        assert uneven["label_positions"] == [[16, 8], [7, 3]]
        assert uneven["counts"] == [[14, 7], [5, 3]]
    assert "optimizer_not_stepped" in {d["code"] for d in check["diagnoses"]}


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_step_went_through_the_recipes_own_train(run, adapter):
    """Per rank, one line per train_step: the recipe's train() took one global step over K
    microbatches with the optimizer it built itself, over FSDP2's DTensor shards."""
    checks, lines = run
    calls = len(checks[adapter]["scenarios"]) * STEPS_PER_SCENARIO
    for rank in (0, 1):
        mine = [x for x in lines if x["adapter"] == adapter and x["rank"] == rank]
        assert len(mine) == calls, (rank, len(mine))
        for line in mine:
            assert line["world_size"] == 2 and line["global_step"] == 1
            assert line["gradient_accumulation_steps"] == 2 and line["optimizer_steps"] == 1
            assert line["optimizer_class"] == "SGD" and not line["optimizer_is_the_one_passed"]
            assert line["parameter_type"] == "DTensor"


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_run_measures_what_the_torchtune_record_says(run, adapter):
    assert_measures_its_record(run[0][adapter], adapter, REL)


def test_checking_the_contract_imports_no_torchtune():
    """The command imports the adapters in its own process (the lab's environment, without
    torchtune): only the ranks import torchtune."""
    from pclab.experiments.trainer_check.trainer_file import load

    capacities = [load(_trainer(a)).capacity for a in ADAPTERS]
    assert capacities == [16, 14]  # masked: labels at positions 1..7 only
    assert "torchtune" not in sys.modules


def test_the_environment_pins_torchao_beside_the_labs_torch(tmp_path):
    steps = framework_env.commands("torchtune", tmp_path / "venv")
    framework, recorded = steps[2], steps[3]
    assert steps[1][-1] == "torch==2.13.0"  # the lab's pin first: the CPU build
    assert {"torch==2.13.0", "torchtune==0.6.1", "torchao==0.15.0", "-e"} <= set(framework)
    assert recorded[-2:] == ["--only", "torchtune"]


RUN_ADAPTER = "run_torchtune_full_finetune"
EPOCHS, M, K = 2, 5, 2  # the run mode's epochs, microbatches an epoch a rank, microsteps


@pytest.fixture(scope="module")
def run_across_epochs(tmp_path_factory):
    """One `pclab check run_torchtune_full_finetune.py --json` under torchtune's Python, with
    every rank's evidence."""
    folder = tmp_path_factory.mktemp("torchtune-run")
    row = next(r for r in run_table.ROWS if r.code == RUN_ADAPTER)
    return check_in_own_environment("torchtune", folder, row.path(RUN_ADAPTER))  # different


def _scenario(check: dict, name: str) -> dict:
    return next(s for s in check["scenarios"] if s["name"] == name)


def _update(s: dict, epoch: int, window: int) -> dict:
    return next(u for u in s["updates"] if (u["epoch"], u["window"]) == (epoch, window))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["uneven", "equal_counts"])
def test_the_recipe_carries_each_epochs_tail_into_the_next_epochs_first_window(
    run_across_epochs, name
):
    """Blind ground truth from the recipe's source: a step at every K-th batch of an epoch
    (2 an epoch), the tail's gradient and label count kept for the next window. That window's
    update is the global token mean over its own 2 microbatches and the tail: weight x N =
    N / (N + N_tail) on every term, the tail's included (the check's `leak`)."""
    check, _ = run_across_epochs
    s = _scenario(check, name)
    codes = {d["code"] for d in check["diagnoses"] if d.get("scenario") == name}
    assert codes == {"tail_window_dropped", "gradient_leak", "schedule_length"}
    stepped = [sum(u["optimizer_steps"] for u in s["updates"] if u["epoch"] == e) for e in (0, 1)]
    assert stepped == [M // K] * EPOCHS and s["reference_steps"] == EPOCHS * math.ceil(M / K)
    assert _update(s, 0, 2)["optimizer_steps"] == _update(s, 1, 2)["optimizer_steps"] == 0
    n, tail = _update(s, 1, 0)["num_valid_labels"], _update(s, 0, 2)["num_valid_labels"]
    assert _update(s, 1, 0)["leak"] == pytest.approx(n / (n + tail), rel=REL)
    for epoch, window in ((0, 0), (0, 1), (1, 1)):  # the windows nothing was carried into
        assert _update(s, epoch, window)["scheme"] == "global_token", (epoch, window)
        assert _update(s, epoch, window)["leak"] < 1e-5


@pytest.mark.slow
def test_the_recipes_schedule_is_built_for_the_floored_count(run_across_epochs):
    """Its rates are torchtune's cosine without warm-up built for epochs x floor(M / K) = 4
    updates, in closed form: 0.1 x (1 + cos(pi k / 4)) / 2."""
    check, lines = run_across_epochs
    built_for = EPOCHS * (M // K)
    want = [0.1 * (1 + math.cos(math.pi * k / built_for)) / 2 for k in range(built_for)]
    schedule = _scenario(check, "uneven")["schedule"]
    assert schedule["yours"] == pytest.approx(want, abs=1e-12)
    assert (schedule["matches"], schedule["built_for"], schedule["updates"]) == ("own_steps", 4, 6)
    assert lines
    for line in lines:
        assert line["steps_per_epoch"] == M // K and line["global_step"] == built_for
        assert line["scheduler_steps"] == line["optimizer_steps"] == built_for
        assert line["epochs_set"] == [0, 1] and line["model_is_the_checks"] is True
        assert line["parameter_type"] == "DTensor"  # the recipe's FSDP2, on the check's model


@pytest.mark.slow
def test_the_recipe_turns_a_window_with_no_labels_non_finite(run_across_epochs):
    """At the N = 0 window the recipe still steps, with its gradients scaled by P / 0."""
    check, _ = run_across_epochs
    s = _scenario(check, "empty_window")
    assert _update(s, 0, 1)["skipped"] and _update(s, 0, 1)["optimizer_steps"] == 1
    found = [d for d in check["diagnoses"] if d["code"] == "non_finite"]
    assert [d["scenario"] for d in found] == ["empty_window"]


@pytest.mark.slow
def test_the_table_across_a_run_records_what_the_recipes_loop_does(run_across_epochs):
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}[RUN_ADAPTER]
    assert run_table.story(run_across_epochs[0]) == recorded["run"], "re-record: --runs"
    assert recorded["package"] == "torchtune"


RESUME_ADAPTER = "run_resume_torchtune_full_finetune"


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """One `pclab check run_resume_torchtune_full_finetune.py --json` under torchtune's Python:
    the run check, then every rank killed at four points and restarted from the recipe's own
    epoch-end checkpoint, with every rank's evidence."""
    folder = tmp_path_factory.mktemp("torchtune-resume")
    row = next(r for r in run_table.ROWS if r.code == RUN_ADAPTER)
    return check_in_own_environment("torchtune", folder, row.path(RESUME_ADAPTER))


@pytest.mark.slow
def test_a_restart_after_an_epoch_end_loses_the_tail_the_recipe_carried(resumed):
    """Blind, from the recipe's source: it saves only at an epoch's end, after the epoch's tail
    has run but before anything steps it (the tail's gradient waits in .grad for the next
    epoch's first window: the test above). Killed anywhere in epoch 0 there is no checkpoint
    yet, and the restart starts over: the run never stopped. Killed at epoch 1's first
    microbatch, it resumes from epoch 0's checkpoint with no gradient held, so epoch 1's
    first window lacks the tail: window_gradient_lost, and nothing else."""
    check, lines = resumed
    points = {p["point"]: p for p in check["resume"]}
    for point in ("mid_epoch", "mid_window", "before_tail"):
        assert (points[point]["verdict"], points[point]["codes"]) == ("same_run", []), point
    assert points["epoch_boundary"]["verdict"] == "different"
    assert points["epoch_boundary"]["codes"] == ["window_gradient_lost"]
    restarts = [x for x in lines if x["adapter"] == RESUME_ADAPTER]
    assert {x["resumed_after_epoch"] for x in restarts} == {None, 0}


@pytest.mark.slow
def test_the_table_records_torchtunes_restarts(resumed):
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}[RUN_ADAPTER]
    assert run_table.story(resumed[0])["resume"] == recorded["resume"], "re-record: --runs"
