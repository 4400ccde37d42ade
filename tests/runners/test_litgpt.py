"""litgpt's fine-tuning loop through the trainer check
(examples/frameworks/litgpt/litgpt_finetune.py), from litgpt's own environment: litgpt cannot share
the lab's (it requires huggingface-hub<1.4, transformers 5.24.0 >=1.31), so the check runs under a
Python that has it - this one, or the environment `python -m bench.framework_env litgpt` builds
($PCL_LITGPT_PYTHON, else $TMPDIR/pcl-litgpt). Without one, the run's tests skip and say how to
build it.

What litgpt 0.5.13 measured (torch 2.13.0, P = 2, K = 2), pinned against weights computed from
the counts alone: each microbatch's mean loss (chunked_cross_entropy) / K, DDP's mean over P,
so weight x N = N / (P K n_rk); a microbatch without labels adds nothing (its loss is
0 / max(n, 1)), so no_labels changes nothing.

Across a run (examples/frameworks/litgpt/run_litgpt_finetune.py: fit() over two epochs of 5
microbatches a rank, K = 2): litgpt's windows run on across the epoch boundary (one
`iter_num` over the run, `CycleIterator`), so epoch 0's tail is stepped with epoch 1's first
microbatch (`tail_window_dropped`, `gradient_leak`: 5 steps for 6), and its cosine schedule is
built for epochs x floor(5 / K) = 4 updates: its rates 0, 0.1, 0.075, 0.025, 0 (the last
update at rate 0), stepped once per step of its own (`schedule_length`: 4 for 6).

    python -m pytest tests/runners/test_litgpt.py -q
"""

from __future__ import annotations

import math
import sys

import pytest
from runner_support import (
    ROOT,
    assert_measures_its_record,
    check_in_own_environment,
    own_environment_timeout,
)

from bench import framework_env
from pclab.experiments.trainer_check import frameworks
from pclab.experiments.trainer_check.frameworks import run_table

pytestmark = own_environment_timeout()

ADAPTER = "litgpt_finetune"
TRAINER = frameworks.BY_CODE[ADAPTER].path
RUN_ADAPTER = "run_litgpt_finetune"
RUN_TRAINER = next(r for r in run_table.ROWS if r.code == RUN_ADAPTER).path(RUN_ADAPTER)
EPOCHS, M, K = 2, 5, 2  # the run mode's epochs, microbatches an epoch a rank, microsteps
STEPS_PER_SCENARIO = 2  # the check's train_step calls: its optimizer, then SGD at lr 1


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One `pclab check litgpt_finetune.py --json` under litgpt's Python, with every rank's
    evidence; this checkout's package first on the path (the environment's may be another's)."""
    folder = tmp_path_factory.mktemp("litgpt")
    return check_in_own_environment("litgpt", folder, TRAINER)  # a different update


def _microbatch_means(counts):
    total, ranks, steps = sum(map(sum, counts)), len(counts), len(counts[0])
    return [[total / (ranks * steps * n) if n else None for n in row] for row in counts]


@pytest.mark.slow
def test_litgpt_weights_each_microbatch_by_its_own_mean(run):
    check, _ = run
    assert check["status"] == "different" and not check["passed"]
    assert check["dtype"] == "float64"
    for s in check["scenarios"]:
        if s["name"] == "no_labels":
            assert s["weights"] == [[None, None], [None, None]] and s["passed"]
            continue
        for got_row, want_row in zip(s["weights"], _microbatch_means(s["counts"]), strict=True):
            for got, want in zip(got_row, want_row, strict=True):
                assert (got is None) == (want is None), (s["name"], s["weights"])
                if want is not None:
                    assert got == pytest.approx(want, rel=1e-9), (s["name"], s["weights"])
        assert s["residual"] < 1e-9, s["name"]
    uneven = next(s for s in check["scenarios"] if s["name"] == "uneven")
    assert uneven["scheme"] == "microbatch_mean" and uneven["counts"] == [[14, 7], [5, 3]]
    # litgpt builds its own optimizer: the check compares the parameters and says so
    assert "optimizer_not_stepped" in {d["code"] for d in check["diagnoses"]}


@pytest.mark.slow
def test_every_step_went_through_litgpts_own_loop(run):
    """Per rank, one line per train_step: fit() ran K microsteps and stepped once, with the
    optimizer litgpt built, the model in Fabric's DDP, all-reducing on the last microstep."""
    check, lines = run
    calls = len(check["scenarios"]) * STEPS_PER_SCENARIO
    for rank in (0, 1):
        mine = [x for x in lines if x["rank"] == rank]
        assert len(mine) == calls, (rank, len(mine))
        for line in mine:
            assert line["adapter"] == ADAPTER and line["world_size"] == 2
            assert (line["iter_num"], line["step_count"]) == (2, 1)
            assert line["gradient_accumulation_iters"] == 2
            assert (line["strategy"], line["precision"]) == ("DDPStrategy", "DoublePrecision")
            assert line["wrapped_in"] == "DistributedDataParallel"
            assert line["optimizer"] == "SGD" and line["optimizer_is_the_checks"] is False
            assert line["optimizer_steps"] == 1
            assert line["grad_sync"] == [False, True]


@pytest.mark.slow
def test_the_run_measures_what_the_litgpt_record_says(run):
    assert_measures_its_record(run[0], ADAPTER, 1e-9)


def test_checking_the_contract_imports_no_litgpt():
    """The command imports the adapter in its own process (the lab's environment, without
    litgpt): only the ranks import litgpt."""
    from pclab.experiments.trainer_check.trainer_file import load

    assert load(TRAINER).capacity == 16
    assert "litgpt" not in sys.modules


def test_the_environment_keeps_the_labs_torch_and_stays_outside_the_checkout(tmp_path):
    steps = framework_env.commands("litgpt", tmp_path / "venv")
    assert steps[0][1:3] == ["-m", "venv"]
    torch_first, framework, recorded = steps[1], steps[2], steps[3]
    assert torch_first[-1] == "torch==2.13.0"  # requirements.txt's pin: the CPU build
    # the framework is installed beside the same pin, so pip cannot swap torch for another
    assert {"torch==2.13.0", "litgpt==0.5.13", "-e"} <= set(framework)
    assert not any(a.startswith("torch") and a != "torch==2.13.0" for s in steps for a in s)
    assert recorded[-2:] == ["--only", "litgpt"] and recorded[0] == torch_first[0]
    assert not framework_env.default_venv("litgpt").resolve().is_relative_to(ROOT)
    with pytest.raises(SystemExit) as refused:
        framework_env.main(["litgpt", "--venv", str(ROOT / "venv"), "--dry-run"])
    assert refused.value.code == 2


@pytest.fixture(scope="module")
def run_across_epochs(tmp_path_factory):
    """One `pclab check run_litgpt_finetune.py --json` under litgpt's Python, with every
    rank's evidence."""
    folder = tmp_path_factory.mktemp("litgpt-run")
    return check_in_own_environment("litgpt", folder, RUN_TRAINER)  # a different run


def _litgpt_rates(base_lr: float, built_for: int, steps: int) -> list[float]:
    """litgpt's get_lr_scheduler in closed form: one warm-up step (rate step / 1, so 0 at the
    first update), then cosine annealing to 0 over built_for - 1 steps."""
    t_max = built_for - 1
    rates = [0.0]
    rates += [base_lr * (1 + math.cos(math.pi * (s - 1) / t_max)) / 2 for s in range(1, steps)]
    return rates


@pytest.mark.slow
def test_litgpts_windows_run_across_the_epoch_boundary(run_across_epochs):
    """Blind ground truth from litgpt's source: one microstep counter over the run, a step
    every K-th microstep. Over 2 x 5 microsteps that is 5 steps, after microsteps 2, 4, 6, 8,
    10: the third holds epoch 0's tail and epoch 1's first microbatch."""
    check, _ = run_across_epochs
    assert check["mode"] == "run" and check["status"] == "different"
    steps_at = [i for i in range(1, EPOCHS * M + 1) if i % K == 0]
    per_epoch = [sum(1 for i in steps_at if (i - 1) // M == e) for e in range(EPOCHS)]
    for s in check["scenarios"]:
        codes = {d["code"] for d in check["diagnoses"] if d.get("scenario") == s["name"]}
        # the schedule's length is named where the loop took no step at an N = 0 window
        short = set() if s["name"] == "empty_window" else {"schedule_length"}
        assert codes == {"tail_window_dropped", "gradient_leak"} | short, s["name"]
        empty = s["name"] == "empty_window"  # one window with N = 0: the reference skips it
        windows = EPOCHS * math.ceil(M / K) - empty
        assert (s["steps"], s["reference_steps"]) == (len(steps_at), windows), s["name"]
        stepped = [u["optimizer_steps"] for u in s["updates"] if u["epoch"] == 0]
        assert stepped[-1] == 0, s["name"]  # epoch 0's tail: no step of its own
        got = [sum(u["optimizer_steps"] for u in s["updates"] if u["epoch"] == e) for e in (0, 1)]
        assert got == per_epoch == [2, 3], s["name"]


@pytest.mark.slow
def test_litgpts_schedule_is_built_for_the_floored_count(run_across_epochs):
    """Its rates are litgpt's schedule built for epochs x floor(M / K) = 4 updates, against
    the intended one built for the run's 6: the last of its 5 updates at rate 0."""
    check, lines = run_across_epochs
    uneven = next(s for s in check["scenarios"] if s["name"] == "uneven")
    built_for = EPOCHS * (M // K)
    yours = uneven["schedule"]["yours"]
    assert yours == pytest.approx(_litgpt_rates(0.1, built_for, len(yours)), abs=1e-15)
    assert len(yours) == 5 and yours[-1] == pytest.approx(0.0, abs=1e-15)
    assert (uneven["schedule"]["matches"], uneven["schedule"]["built_for"]) == ("own_steps", 4)
    length = next(d for d in check["diagnoses"] if d["code"] == "schedule_length")
    assert (length["built"], length["updates"]) == (built_for, 6)
    intended = uneven["schedule"]["intended"]
    assert intended == pytest.approx(_litgpt_rates(0.1, 6, 6), abs=1e-15)
    for line in (x for x in lines if x["iter_num"] == EPOCHS * M + 1):  # the optimizer's runs
        assert line["lr_max_steps"] == built_for and line["step_count"] == 5
        assert line["epochs_set"] == [0, 1, 1]  # a third pass started, its first batch dropped
    assert any(x["iter_num"] == EPOCHS * M + 1 for x in lines)


@pytest.mark.slow
def test_the_table_across_a_run_records_what_litgpts_loop_does(run_across_epochs):
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}[RUN_ADAPTER]
    assert run_table.story(run_across_epochs[0]) == recorded["run"], "re-record: --runs"
    assert recorded["package"] == "litgpt"


RESUME_ADAPTER = "run_resume_litgpt_finetune"


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """One `pclab check run_resume_litgpt_finetune.py --json` under litgpt's Python: the run
    check, then every rank killed at four points and restarted from fit()'s own checkpoints,
    with every rank's evidence."""
    folder = tmp_path_factory.mktemp("litgpt-resume")
    return check_in_own_environment("litgpt", folder, RUN_TRAINER.with_name(RESUME_ADAPTER + ".py"))


@pytest.mark.slow
def test_a_restart_comes_back_after_the_last_step_fit_saved(resumed):
    """Blind, from full.py: fit() saves its whole state (the model, AdamW, the schedule,
    iter_num, step_count) after every optimizer step (`--train.save_interval 1`), and a restart
    (`--resume auto`) loads the latest and skips the iter_num microbatches it had read. Its
    straight run steps at microbatches 2, 4, 6, 8 and 10 (the window 5-6 across the epoch
    boundary). Killed at 3 or 4, it comes back at 3 (after the step at 2); at 5 or 6, at 5:
    a window killed in its middle runs again from its start, and every restart is the run
    never stopped. The sanity check's evaluation forward on epoch 0's first rows, which runs
    first in every launch, does not place it (before: "resumed from 1" at every point)."""
    check, lines = resumed
    points = {p["point"]: p for p in check["resume"]}
    for point, killed, back in (
        ("mid_epoch", 3, 3),
        ("mid_window", 4, 3),
        ("before_tail", 5, 5),
        ("epoch_boundary", 6, 5),
    ):
        got = points[point]
        assert (got["killed_at"], got["resumed_from"]) == (killed, back), got
        assert (got["verdict"], got["codes"]) == ("same_run", []), got
    restarts = [x for x in lines if x["adapter"] == RESUME_ADAPTER and x["resumed_from"]]
    assert {x["resumed_from"] for x in restarts} == {"step-000001", "step-000002"}
    assert {tuple(x["resumed_at"]) for x in restarts} == {(2, 1), (4, 2)}  # iter_num, steps


@pytest.mark.slow
def test_the_table_records_litgpts_restarts(resumed):
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}[RUN_ADAPTER]
    assert run_table.story(resumed[0])["resume"] == recorded["resume"], "re-record: --runs"
