"""OLMo-core's TransformerTrainModule (FSDP) through the trainer check
(examples/frameworks/olmo_core/olmo_core_train_module.py), from its own environment: ai2-olmo-core
3.0.0 would move the lab's huggingface_hub from 2.4.0 to 1.33.0, so the check runs under the Python
`python -m bench.framework_env ai2-olmo-core` builds ($PCL_AI2_OLMO_CORE_PYTHON, else
$TMPDIR/pcl-ai2-olmo-core). Without one, the run's tests skip and say how to build it.

What ai2-olmo-core 3.0.0 measured (torch 2.13.0, float32, P = 2, K = 2), pinned against
weights computed from the counts alone: each rank's summed loss divided by its own label count
(`loss_div_factor`), FSDP2 averaging over the ranks: DDP's mean of local means,
weight x N = N / (P n_r).

Across a run (examples/frameworks/olmo_core/run_olmo_core_trainer.py: OLMo-core's own
Trainer.fit() over two epochs of 5 microbatches a rank, K = 2, its NumpyFSLDataLoader over the
check's tokens as .npy arrays): the loader keeps only full global batches (data_loader.py
`total_size`), so each epoch's tail is never read (`tail_window_dropped`: 2, 2 steps for 3, 3);
the Trainer's max_steps counts those full batches, so the module's cosine runs over 4 updates
(`schedule_length`); every window is each rank's own mean (as above); at a window with N = 0
the loss is 0 / 0 and the Trainer stops on it ("nan loss encountered": `trainer_error`).

    python -m pytest tests/runners/test_olmo_core.py -q
"""

from __future__ import annotations

import math
import sys

import pytest
from runner_support import (
    assert_measures_its_record,
    check_in_own_environment,
    own_environment_timeout,
)

from pclab.experiments.trainer_check import frameworks
from pclab.experiments.trainer_check.frameworks import run_table

pytestmark = own_environment_timeout()

ADAPTER = "olmo_core_train_module"
TRAINER = frameworks.BY_CODE[ADAPTER].path
STEPS_PER_SCENARIO = 2  # the check's train_step calls: its optimizer, then SGD at lr 1
REL = 1e-5  # float32 (DTYPE)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One `pclab check olmo_core_train_module.py --json` under OLMo-core's Python."""
    folder = tmp_path_factory.mktemp("olmo_core")
    return check_in_own_environment("ai2-olmo-core", folder, TRAINER)  # a different update


def _local_means(counts):
    total, ranks = sum(map(sum, counts)), len(counts)
    return [[total / (ranks * sum(row)) if n else None for n in row] for row in counts]


@pytest.mark.slow
def test_each_rank_divides_by_its_own_count(run):
    check, _ = run
    assert check["status"] == "different" and check["dtype"] == "float32"
    for s in check["scenarios"]:
        if s["name"] == "no_labels":
            assert s["passed"] and s["weights"] == [[None, None], [None, None]]
            continue
        for got_row, want_row in zip(s["weights"], _local_means(s["counts"]), strict=True):
            for got, want in zip(got_row, want_row, strict=True):
                assert (got is None) == (want is None), (s["name"], s["weights"])
                if want is not None:
                    assert got == pytest.approx(want, rel=REL), (s["name"], s["weights"])
    uneven = next(s for s in check["scenarios"] if s["name"] == "uneven")
    assert uneven["scheme"] == "replica_mean" and uneven["counts"] == [[14, 7], [5, 3]]
    assert "optimizer_not_stepped" in {d["code"] for d in check["diagnoses"]}


@pytest.mark.slow
def test_every_step_went_through_the_train_module(run):
    """Per rank, one line per train_step: the module's own optimizer stepped once over
    FSDP's DTensor shards, and its loss was divided by the rank's own terms."""
    check, lines = run
    for rank in (0, 1):
        mine = [x for x in lines if x["adapter"] == ADAPTER and x["rank"] == rank]
        assert len(mine) == len(check["scenarios"]) * STEPS_PER_SCENARIO
        calls = [s for s in check["scenarios"] for _ in range(STEPS_PER_SCENARIO)]
        for line, s in zip(mine, calls, strict=True):
            assert line["optimizer_steps"] == 1 and line["optimizer_class"] == "SGD"
            assert not line["optimizer_is_the_one_passed"]
            assert (line["wrapped_in"], line["parameter_type"]) == ("FSDPTransformer", "DTensor")
            assert line["counted"] == sum(s["counts"][rank]), s["name"]


@pytest.mark.slow
def test_the_run_measures_what_the_olmo_core_record_says(run):
    assert_measures_its_record(run[0], ADAPTER, REL)


def test_checking_the_contract_imports_no_olmo_core():
    from pclab.experiments.trainer_check.trainer_file import load

    assert load(TRAINER).capacity == 16
    run = load(next(r for r in run_table.ROWS if r.code == RUN_ADAPTER).path(RUN_ADAPTER))
    assert run.mode == "run" and run.global_batch and run.capacity == 14  # position 0: no term
    assert "olmo_core" not in sys.modules


RUN_ADAPTER = "run_olmo_core_trainer"
EPOCHS, M, K, P, ROWS = 2, 5, 2, 2, 2  # epochs, microbatches an epoch a rank, K, P, rows each


@pytest.fixture(scope="module")
def run_across_epochs(tmp_path_factory):
    """One `pclab check run_olmo_core_trainer.py --json` under OLMo-core's Python, with every
    rank's evidence."""
    folder = tmp_path_factory.mktemp("olmo-core-run")
    row = next(r for r in run_table.ROWS if r.code == RUN_ADAPTER)
    return check_in_own_environment("ai2-olmo-core", folder, row.path(RUN_ADAPTER))


def _scenario(check: dict, name: str) -> dict:
    return next(s for s in check["scenarios"] if s["name"] == name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["uneven", "equal_counts"])
def test_the_loader_drops_each_epochs_tail_and_each_window_is_each_ranks_mean(
    run_across_epochs, name
):
    """Blind ground truth from OLMo-core's source: batches of P x K x ROWS rows, the remainder
    of an epoch's P x M x ROWS never served, so 2 steps an epoch and none at a tail; each rank's
    loss over its own label count, FSDP's mean over the ranks: weight x N = N / (P n_r) on
    every microbatch of the window (n_r: that rank's labels in it)."""
    check, _ = run_across_epochs
    s = _scenario(check, name)
    codes = {d["code"] for d in check["diagnoses"] if d.get("scenario") == name}
    assert codes == {"tail_window_dropped", "schedule_length"}
    stepped = [sum(u["optimizer_steps"] for u in s["updates"] if u["epoch"] == e) for e in (0, 1)]
    assert stepped == [M // K] * EPOCHS and s["reference_steps"] == EPOCHS * math.ceil(M / K)
    for u in s["updates"]:
        if u["microsteps"] < K:  # the tail: no step, nothing solved
            assert u["optimizer_steps"] == 0 and u.get("weights") is None, u
            continue
        assert u["optimizer_steps"] == 1
        n = sum(map(sum, u["counts"]))
        for got_row, counts in zip(u["weights"], u["counts"], strict=True):
            for got in got_row:
                assert got == pytest.approx(n / (P * sum(counts)), rel=1e-4), u
    uneven_scheme = "replica_mean" if name == "uneven" else "global_token"  # equal: ties
    assert {u["scheme"] for u in s["updates"] if u["microsteps"] == K} == {uneven_scheme}


@pytest.mark.slow
def test_the_schedule_runs_over_the_full_batches_from_step_1(run_across_epochs):
    """The module's CosWithWarmup(warmup=0, alpha_f=0.1) at the Trainer's step 1 ... 4 over
    max_steps = epochs x floor(M / K) = 4, in closed form: 0.01 + 0.09 (1 + cos(pi s / 4)) / 2."""
    check, lines = run_across_epochs
    schedule = _scenario(check, "uneven")["schedule"]
    want = [0.01 + 0.09 * (1 + math.cos(math.pi * s / 4)) / 2 for s in range(1, 5)]
    assert schedule["yours"] == pytest.approx(want, rel=1e-12)
    assert (schedule["matches"], schedule["built_for"], schedule["updates"]) == ("own_steps", 4, 6)
    assert lines
    for line in lines:
        assert line["total_batches"] == (P * M * ROWS) // (P * K * ROWS) == 2
        assert line["dataset_rows"] == P * M * ROWS
        assert line["global_step"] == line["max_steps"] == line["optimizer_steps"] == 4
        assert line["epochs_set"] == [1, 2] and line["parameter_type"] == "DTensor"


@pytest.mark.slow
def test_a_window_with_no_labels_stops_the_trainer_on_its_nan_loss(run_across_epochs):
    check, _ = run_across_epochs
    found = [d for d in check["diagnoses"] if d.get("scenario") == "empty_window"]
    assert [d["code"] for d in found] == ["trainer_error"]
    assert "nan loss encountered" in found[0]["message"]  # the first of the chain, named


@pytest.mark.slow
def test_the_table_across_a_run_records_what_the_trainer_does(run_across_epochs):
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}[RUN_ADAPTER]
    assert run_table.story(run_across_epochs[0]) == recorded["run"], "re-record: --runs"
    assert recorded["package"] == "ai2-olmo-core"


RESUME_ADAPTER = "run_resume_olmo_core_trainer"


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """One `pclab check run_resume_olmo_core_trainer.py --json` under OLMo-core's Python: the
    run check, then every rank killed at four points and restarted from its own checkpoint."""
    folder = tmp_path_factory.mktemp("olmo-core-resume")
    row = next(r for r in run_table.ROWS if r.code == RUN_ADAPTER)
    return check_in_own_environment("ai2-olmo-core", folder, row.path(RESUME_ADAPTER))


@pytest.mark.slow
def test_a_restart_resumes_after_the_last_step_its_checkpointer_saved(resumed):
    """Blind, from OLMo-core's checkpointer (a checkpoint after every step, the loader's
    position in it): killed at microbatch 3 or 4 (window 1), the run comes back at 3, after
    step 1; killed at 6 (epoch 1's first), at 6, the tail (5) never served; microbatch 5 is
    never run, so no kill happens there. Every restart is the run never stopped."""
    check, lines = resumed
    points = {p["point"]: p for p in check["resume"]}
    assert points["before_tail"]["verdict"] == "not_killed"
    for point, back in (("mid_epoch", 3), ("mid_window", 3), ("epoch_boundary", 6)):
        assert points[point]["verdict"] == "same_run", points[point]
        assert points[point]["resumed_from"] == back and points[point]["codes"] == []
    assert any(line["resumed"] for line in lines if line["adapter"] == RESUME_ADAPTER)


@pytest.mark.slow
def test_checkpointing_before_the_first_batch_steps_adamw_once_at_lr_0(resumed):
    """The checkpointer's pre-train checkpoint asks torch.distributed.checkpoint for the
    optimizer's state, which a fresh AdamW does not have yet: `_init_optim_state` makes it by
    one step at lr 0 on zero gradients, so the uninterrupted run takes 5 optimizer steps for
    its 4 updates and every AdamW step count runs one ahead (pytorch/torchtitan#4382 fixed
    the same in its own code). SGD, the check's replays, has no state for it to find at any
    save, so every checkpoint steps it at lr 0 once more (4 updates, 5 saves: 9 steps)."""
    _, lines = resumed
    straight = [x for x in lines if x["adapter"] == RESUME_ADAPTER and not x["resumed"]]
    adamw = [x for x in straight if x["optimizer_class"] == "AdamW"]
    sgd = [x for x in straight if x["optimizer_class"] == "SGD"]
    assert adamw and all(x["optimizer_steps"] == x["global_step"] + 1 == 5 for x in adamw)
    assert sgd and all(x["optimizer_steps"] == 2 * x["global_step"] + 1 == 9 for x in sgd)


@pytest.mark.slow
def test_the_table_records_olmo_cores_restarts(resumed):
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}[RUN_ADAPTER]
    assert run_table.story(resumed[0])["resume"] == recorded["resume"], "re-record: --runs"


def test_the_state_made_by_a_step_at_lr_0_shrinks_adamws_first_update_to_0_744():
    """The README's figure, in closed form and against torch itself: after
    `_init_optim_state`'s step at lr 0, AdamW's first real update is taken at step 2, its
    bias-corrected moments (0.1 g / 0.19) / sqrt(0.001 g^2 / 0.001999) = 0.744 of step 1's."""
    import torch
    from torch.distributed.checkpoint.state_dict import _init_optim_state

    def first_update(initialised: bool) -> torch.Tensor:
        p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
        optimizer = torch.optim.AdamW([p], lr=0.01, weight_decay=0.1)
        if initialised:
            _init_optim_state(optimizer)
        p.grad = torch.tensor([0.3, -2.0, 5e-3], dtype=torch.float64)
        optimizer.step()
        return p.detach()

    want = (0.1 / 0.19) / math.sqrt(0.001 / (1 - 0.999**2))
    ratio = first_update(True) / first_update(False)
    assert ratio.tolist() == pytest.approx([want] * 3, rel=1e-6) and want == pytest.approx(
        0.744, abs=5e-4
    )
