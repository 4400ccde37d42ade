"""The run mode on real framework loops: Accelerate (`accumulate` + a prepared DataLoader and a
prepared scheduler), PyTorch Lightning (`Trainer.fit`, accumulate_grad_batches, max_epochs),
transformers' `Trainer.train()` (alone and with DeepSpeed ZeRO-2), DeepSpeed's engine, TRL's
SFTTrainer and transformers' run_clm_no_trainer.py loop, each its own loop over the check's two
epochs of 5 microbatches at K = 2 (a tail of 1 per epoch), P = 2, through the check once (one
warm launch for the module), against what each framework's source says it does and the evidence
every rank writes ($PCL_FRAMEWORK_RECORD, $PCL_HF_TRAINER_RECORD). The adapters' docstrings
cite the framework lines behind each finding.

Measured (accelerate 1.15.0, lightning 2.6.6, transformers 5.24.0, deepspeed 0.19.8, trl 1.16.0,
torch 2.13.0), pinned here:

- Accelerate: full windows microbatch means (each mean / K, DDP's / P); the tail a window of
  its own (the prepared dataloader's end syncs) but still / K: weight x N = N / (P K n),
  `tail_window_scaled` 0.5; the prepared scheduler steps P = 2 times an update:
  `scheduler_rate` c = 2 (uneven, equal_counts); in empty_window it also steps P times at the
  skipped window (`scheduler_rate` and `scheduler_on_skip`).
- Lightning: steps like Accelerate (grad sync F,T,F,T,T an epoch; 6 steps, 6 scheduler steps)
  and divides the tail by K too (Lightning #19987): `tail_window_scaled` 0.5; it steps the
  scheduler at the N = 0 window: `scheduler_on_skip`. It runs a window's last microbatch
  inside `optimizer.step(closure)`, after torch's step pre-hook: run_observe.Observer places
  a step by the forwards seen when the step ends, so each lands in its own window.
- Trainer: the global token mean in every window, the tail included (it counts the window's
  own labels: #38837 fixed), its own schedule the intended one: same update in uneven and
  equal_counts to 1e-16. At the N = 0 window it still steps the optimizer (no change with SGD)
  and the scheduler, built for 6 updates where the reference takes 5: `scheduler_on_skip` in
  empty_window.
- DeepSpeed (deepspeed 0.19.8, float32): the engine's boundary is its run-long micro_steps
  counter ((micro_steps + 1) % K == 0, never reset at an epoch): epoch 0's tail does not step
  and is stepped with epoch 1's first microbatch, every later window shifted by one:
  `tail_window_dropped` and `gradient_leak` in every scenario, 5 steps for 6.
- Trainer + DeepSpeed ZeRO-2 (float32): Trainer's row. Accelerate's DeepSpeed wrapper sets
  the engine's boundary from its own sync (the tail steps as its own window), Trainer passes
  scale_wrt_gas=False (no second / K); ZeRO-2 steps Trainer's own SGD once per parameter
  group, observed as one update per window.
- TRL's SFTTrainer (trl 1.16.0, float32): Trainer's loop underneath, the same findings as
  Trainer's: same update in uneven and equal_counts, `scheduler_on_skip` in empty_window.
- transformers' run_clm_no_trainer.py loop (on Accelerate): the tail / K (`tail_window_scaled`
  0.5), `scheduler_on_skip`, and a schedule built from the unprepared DataLoader's length
  (ceil(P M / K) an epoch: the P tails counted as one window), stepped P times an update:
  the rates run out one update early (0 at the last): `schedule_length` (built for 5 updates
  where the run takes 6; run_schedule's "prepared_global" stepping).

    PYTHONPATH=$PWD python -m pytest -n 0 tests/runners/test_run_frameworks.py -q
"""

from __future__ import annotations

import json
import math
import os

import pytest
from runner_support import ROOT

from pclab.experiments.trainer_check import EXPERIMENT, run_summary
from pclab.experiments.trainer_check.frameworks import run_table
from pclab.experiments.trainer_check.frameworks.setting import installed_version
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.report import exit_code
from pclab.experiments.trainer_check.run_codes import LOOP_CODE_NAMES

FRAMEWORKS = ROOT / "examples" / "frameworks"
ADAPTERS = {  # adapter -> (its file, the packages it needs)
    "run_accelerate_accumulate": ("accelerate", ("accelerate",)),
    "run_lightning_accumulate": ("lightning", ("lightning",)),
    "run_hf_trainer": ("hf_trainer", ("transformers", "accelerate")),
    "run_deepspeed_engine": ("deepspeed", ("deepspeed",)),
    # before TRL's and run_clm_no_trainer's on purpose: in the same launch they hold it to leaving
    # no DeepSpeed state behind (hf_trainer_deepspeed_zero2.no_deepspeed_left)
    "run_hf_trainer_deepspeed_zero2": ("deepspeed", ("deepspeed", "transformers", "accelerate")),
    "run_hf_trainer_deepspeed_zero2_adamw": (
        "deepspeed",
        ("deepspeed", "transformers", "accelerate"),
    ),
    "run_trl_sft": ("trl", ("trl", "transformers", "accelerate")),
    "run_clm_no_trainer": ("accelerate", ("accelerate", "transformers")),
}
RECORDS = ("PCL_FRAMEWORK_RECORD", "PCL_HF_TRAINER_RECORD")  # framework_lm.py, run_hf_trainer.py
SCENARIOS = ("uneven", "empty_window", "equal_counts")
RUN_CODES = set(LOOP_CODE_NAMES)  # the run-loop codes (run_codes.py)
P, K, M = 2, 2, 5  # ranks, microsteps, microbatches an epoch (windows 2, 2 and a tail of 1)
MEASURED = {  # adapter -> {scenario: (verdict, its run codes)}; every check is "different"
    "run_accelerate_accumulate": {
        "uneven": ("different", {"tail_window_scaled", "scheduler_rate"}),
        "empty_window": (
            "different",
            {"tail_window_scaled", "scheduler_rate", "scheduler_on_skip"},
        ),
        "equal_counts": ("different", {"tail_window_scaled", "scheduler_rate"}),
    },
    "run_lightning_accumulate": {  # Lightning #19987: the tail divided by K
        "uneven": ("different", {"tail_window_scaled"}),
        "empty_window": ("different", {"tail_window_scaled", "scheduler_on_skip"}),
        "equal_counts": ("different", {"tail_window_scaled"}),
    },
    "run_hf_trainer": {
        "uneven": ("same_update", set()),
        "empty_window": ("different", {"scheduler_on_skip"}),
        "equal_counts": ("same_update", set()),
    },
    "run_deepspeed_engine": {  # the engine's micro_steps runs on across epochs
        name: ("different", {"tail_window_dropped", "gradient_leak"}) for name in SCENARIOS
    },
    "run_hf_trainer_deepspeed_zero2": {  # Trainer's row: Accelerate ends the engine's windows
        "uneven": ("same_update", set()),
        "empty_window": ("different", {"scheduler_on_skip"}),
        "equal_counts": ("same_update", set()),
    },
    "run_hf_trainer_deepspeed_zero2_adamw": {  # the same, AdamW's state on ZeRO's partitions
        "uneven": ("same_update", set()),
        "empty_window": ("different", {"scheduler_on_skip"}),
        "equal_counts": ("same_update", set()),
    },
    "run_trl_sft": {  # Trainer's loop underneath
        "uneven": ("same_update", set()),
        "empty_window": ("different", {"scheduler_on_skip"}),
        "equal_counts": ("same_update", set()),
    },
    "run_clm_no_trainer": {  # and a schedule one update short
        "uneven": ("different", {"tail_window_scaled", "schedule_length"}),
        "empty_window": ("different", {"tail_window_scaled", "scheduler_on_skip"}),
        "equal_counts": ("different", {"tail_window_scaled", "schedule_length"}),
    },
}
pytestmark = pytest.mark.timeout(1200)  # the eight loops: a few minutes beside a busy core


def _missing(adapter: str) -> list[str]:
    return [p for p in ADAPTERS[adapter][1] if installed_version(p) is None]


@pytest.fixture(scope="module")
def run(tmp_path_factory, warm_pool):
    """{"checks": {adapter: its check}, "lines": {adapter: every rank's record lines}}: the
    installed frameworks' adapters through one launch of the session's warm pool (its zygote
    has the frameworks imported, as a served one has)."""
    names = [a for a in ADAPTERS if not _missing(a)]
    if not names:
        pytest.skip("none of accelerate, lightning, transformers is installed")
    folder = tmp_path_factory.mktemp("run_frameworks")
    saved = {env: os.environ.get(env) for env in RECORDS}
    os.environ |= {env: str(folder / f"{env}.jsonl") for env in RECORDS}
    try:
        paths = [str(FRAMEWORKS / ADAPTERS[n][0] / f"{n}.py") for n in names]
        params = Params.checked(paths, world_size=P, accum=K)
        result = EXPERIMENT.run(params, timeout_s=600, runtime=warm_pool)
    finally:
        for env, value in saved.items():
            os.environ.pop(env) if value is None else os.environ.__setitem__(env, value)
    assert result.ok, result.message
    lines: list[dict] = []
    for env in RECORDS:
        path = folder / f"{env}.jsonl"
        lines += [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    checks = dict(zip(names, result.report["checks"], strict=True))
    by_adapter = {n: [x for x in lines if x.get("adapter", "run_hf_trainer") == n] for n in names}
    return {"checks": checks, "lines": by_adapter}


def _check(run, adapter: str) -> dict:
    missing = _missing(adapter)
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: {adapter} drives that framework")
    return run["checks"][adapter]


def _scenario(check: dict, name: str) -> dict:
    return next(s for s in check["scenarios"] if s["name"] == name)


def _codes(check: dict, scenario: str) -> set[str]:
    return {d["code"] for d in check["diagnoses"] if d.get("scenario") == scenario} & RUN_CODES


def _tail_weights_scaled_by_k(u: dict) -> list[list[float]]:
    """A tail's weight x N when each microbatch's mean is divided by K and DDP's by P."""
    n = u["num_valid_labels"]
    return [[n / (P * K * c) for c in row] for row in u["counts"]]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_framework_loop_gets_its_measured_verdict_and_codes(run, adapter):
    check = _check(run, adapter)
    assert check["mode"] == "run" and check["status"] == "different", check["diagnoses"]
    assert exit_code(check) == 1
    for name, (verdict, codes) in MEASURED[adapter].items():
        s = _scenario(check, name)
        assert s["verdict"] == verdict, (name, s["first_divergence"])
        assert _codes(check, name) == codes, [d["message"] for d in check["diagnoses"]]


@pytest.mark.slow
def test_accelerate_steps_the_tail_but_divides_it_by_k_and_its_scheduler_steps_p_times(run):
    check = _check(run, "run_accelerate_accumulate")
    uneven = _scenario(check, "uneven")
    assert (uneven["steps"], uneven["reference_steps"]) == (6, 6)
    for u in uneven["updates"]:
        assert u["optimizer_steps"] == 1 and u["leak"] < 1e-9
        if u["microsteps"] == K:
            assert u["scheme"] == "microbatch_mean"
        else:  # the tail: its own window, / K all the same
            for got, want in zip(u["weights"], _tail_weights_scaled_by_k(u), strict=True):
                assert got == pytest.approx(want, rel=1e-9)
    scaled = next(d for d in check["diagnoses"] if d["code"] == "tail_window_scaled")
    assert scaled["scale"] == pytest.approx(0.5)
    rate = next(d for d in check["diagnoses"] if d["code"] == "scheduler_rate")
    assert (rate["how"], rate["rate"]) == ("prepared", P)
    for line in run["lines"]["run_accelerate_accumulate"]:
        assert line["wrapped_in"] == "DistributedDataParallel"
        assert line["scheduler_wrapped_in"] == "AcceleratedScheduler"
        assert line["epochs_set"] == [0, 1]  # DataLoaderShard's set_epoch, each pass
        synced = [m[0] for m in line["microsteps"]]
        end_of_dataloader = [m[1] for m in line["microsteps"]]
        assert synced == [False, True, False, True, True] * 2  # the tail syncs and steps
        assert end_of_dataloader == [False] * 4 + [True] + [False] * 4 + [True]
        assert (line["optimizer_steps"], line["scheduler_steps"]) == (6, P * 6)


@pytest.mark.slow
def test_accelerate_tails_are_divided_by_k_in_every_scenario(run):
    """Every full window is microbatch_mean (equal counts fit global_token too; a skipped
    window has none), and every tail's weights are those halved: / K, not / k'. In the
    empty_window scenario the prepared scheduler also steps, P times, at the skipped window,
    on a schedule built for every window (the loop's own count, ceil(M / K) an epoch): the
    rate at each update is the intended LambdaLR's, 1 - s / (L + 1), at s = P x the windows
    before it, skipped or not."""
    check = _check(run, "run_accelerate_accumulate")
    for name in ("uneven", "empty_window", "equal_counts"):
        s = _scenario(check, name)
        full = {u.get("scheme") for u in s["updates"] if u["microsteps"] == K and not u["skipped"]}
        assert "microbatch_mean" in full and full <= {"microbatch_mean", "global_token"}, full
        for u in s["updates"]:
            if u["microsteps"] < K:
                for got, want in zip(u["weights"], _tail_weights_scaled_by_k(u), strict=True):
                    assert got == pytest.approx(want, rel=1e-9)
    empty = _scenario(check, "empty_window")
    windows = math.ceil(M / K) * 2  # both epochs' windows, the skipped one included
    before = [i for i, u in enumerate(empty["updates"]) if not u["skipped"]]
    base = empty["schedule"]["intended"][0]
    closed_form = [base * (1 - P * i / (windows + 1)) for i in before]
    assert empty["schedule"]["yours"] == pytest.approx(closed_form, rel=1e-12)
    assert empty["schedule"]["matches"] == "prepared_skip_all"


@pytest.mark.slow
def test_lightning_steps_every_window_once_its_closure_has_run(run):
    """Lightning runs a window's last forward inside optimizer.step(closure): the observer
    places a step by the forwards seen when the step ends, so each lands in its window."""
    check = _check(run, "run_lightning_accumulate")
    for line in run["lines"]["run_lightning_accumulate"]:
        assert line["strategy"] == "DDPStrategy" and line["epochs_set"] == [0, 1]
        assert line["grad_sync"] == [False, True, False, True, True] * 2
        assert (line["optimizer_steps"], line["global_step"], line["scheduler_steps"]) == (6, 6, 6)
        assert line["scheduler_length"] == 6  # estimated_stepping_batches: ceil(5 / 2) x 2
    uneven = _scenario(check, "uneven")
    steps = [u["optimizer_steps"] for u in uneven["updates"]]
    assert steps == [1] * 6
    assert uneven["schedule"]["matches"] == "intended"  # the rates themselves are right


@pytest.mark.slow
def test_the_trainer_divides_every_window_by_its_own_global_count_tail_included(run):
    check = _check(run, "run_hf_trainer")
    for name in ("uneven", "equal_counts"):
        s = _scenario(check, name)
        assert s["schedule"]["matches"] == "intended" and s["max_abs_diff"] <= 1e-10
        for u in s["updates"]:
            assert u["scheme"] == "global_token" and u["optimizer_steps"] == 1, u
    lines = run["lines"]["run_hf_trainer"]
    assert lines and all(x["wrapped_in"] == "DistributedDataParallel" for x in lines)
    for line in lines:
        assert (line["global_step"], line["max_steps"], line["scheduler_steps"]) == (6, 6, 6)
        assert line["synced"] == [False, True, False, True, True] * 2
        assert line["scheduler"] == "LambdaLR"  # Trainer's own, not Accelerate's prepared one
    # the label count Trainer handed each microstep's loss is its window's global N, the
    # tail's own (the first train_loop a rank records is uneven's)
    uneven = _scenario(check, "uneven")
    counted = [u["num_valid_labels"] for u in uneven["updates"] for _ in range(u["microsteps"])]
    assert len(counted) == 2 * M and lines[0]["num_items_in_batch"] == counted


@pytest.mark.slow
def test_the_trainer_steps_the_optimizer_and_its_schedule_at_an_empty_window(run):
    check = _check(run, "run_hf_trainer")
    s = _scenario(check, "empty_window")
    skipped = [u for u in s["updates"] if u["skipped"]]
    assert [u["optimizer_steps"] for u in skipped] == [1]  # a step with zero gradients
    assert (s["steps"], s["reference_steps"]) == (6, 5)
    assert len(s["schedule"]["yours"]) == 5  # the rates of the updates the reference took
    assert s["schedule"]["matches"] == "skip_advances_all"  # built for 6, stepped at the skip
    assert s["first_divergence"]["update"] == 2  # the first update after it: its rate
    assert s["updates"][1]["max_abs_diff"] <= 1e-10  # SGD at zero gradients changed nothing


@pytest.mark.slow
def test_zero2_under_the_trainer_is_the_trainer_s_row_one_update_per_window(run):
    """ZeRO-2 steps Trainer's own SGD once per parameter group on its fp32 partitions (the one
    passed in never steps); the check sees one update per window, the tail its own, each the
    global token mean to float32's floor, as the plain Trainer's."""
    check = _check(run, "run_hf_trainer_deepspeed_zero2")
    for name in ("uneven", "equal_counts"):
        s = _scenario(check, name)
        assert s["schedule"]["matches"] == "intended" and s["max_abs_diff"] <= s["tolerance"]
        assert s["tolerance"] < 1e-5  # float32's, not a loose one
        for u in s["updates"]:
            assert u["scheme"] == "global_token" and u["optimizer_steps"] == 1, u
    lines = run["lines"]["run_hf_trainer_deepspeed_zero2"]
    assert lines and {x["rank"] for x in lines} == {0, 1}
    for line in lines:
        assert (line["wrapped_in"], line["zero_stage"]) == ("DeepSpeedEngine", 2)
        assert line["optimizer_wrapped_in"] == "DeepSpeedZeroOptimizer"
        assert line["optimizer_class"] == "SGD" and not line["optimizer_is_the_one_passed"]
        assert line["passed_optimizer_steps"] == 0 and line["max_steps"] == 6
    uneven = _scenario(check, "uneven")
    counted = [u["num_valid_labels"] for u in uneven["updates"] for _ in range(u["microsteps"])]
    assert lines[0]["num_items_in_batch"] == counted and lines[0]["global_step"] == 6


@pytest.mark.slow
def test_zero2_with_adamw_is_compared_on_the_parameters_alone(run):
    """ZeRO-2 holds AdamW's moments on its flat partitions, keyed by none of the model's
    parameters: the check says it did not read them (the note) and compares every update on
    the parameters, where it had diverged at once on a "missing" exp_avg."""
    check = _check(run, "run_hf_trainer_deepspeed_zero2_adamw")
    for name in ("uneven", "equal_counts"):
        s = _scenario(check, name)
        assert "optimizer_state_unread" in s["notes"], s["notes"]
        assert s["verdict"] == "same_update" and s["max_abs_diff"] <= s["tolerance"] < 1e-5
        assert all(u["first_divergence"] is None for u in s["updates"]), s["updates"]
    lines = run["lines"]["run_hf_trainer_deepspeed_zero2_adamw"]
    # AdamW for the run; SGD for the check's replays that solve the weights (SGD handed in)
    assert {(x["optimizer_class"], x["zero_stage"]) for x in lines} == {("AdamW", 2), ("SGD", 2)}
    said = run_summary.lines(check)
    assert any("its state is not read" in ln for ln in said), said


@pytest.mark.slow
def test_lightning_divides_its_tail_by_k(run):
    check = _check(run, "run_lightning_accumulate")
    uneven = _scenario(check, "uneven")
    assert [u["optimizer_steps"] for u in uneven["updates"]] == [1] * 6
    assert _codes(check, "uneven") == {"tail_window_scaled"}


@pytest.mark.slow
def test_deepspeeds_tail_never_steps_and_leaks_into_the_next_epochs_first_update(run):
    """The engine's boundary is (micro_steps + 1) % K == 0 over the whole run: epoch 0's tail
    (micro_steps 4) is none, epoch 1's first microbatch (5) is, and steps both; every later
    window of the run is shifted by one microbatch, so epoch 1 ends on a boundary."""
    check = _check(run, "run_deepspeed_engine")
    for name in SCENARIOS:
        s = _scenario(check, name)
        assert [u["optimizer_steps"] for u in s["updates"]] == [1, 1, 0, 1, 1, 1], name
        assert s["steps"] == 5 and s["updates"][3]["leak"] > 0.3  # the tail, stepped late
        # read step by step (its steps are not the windows): the intended schedule, one rate
        # per step of its own; in empty_window it steps at the N = 0 window too, 5 steps for 5
        # updates, and no stepping is claimed
        schedule = s["schedule"]
        if name == "empty_window":
            assert schedule["matches"] is None
        else:
            assert (schedule["matches"], schedule["built_for"]) == ("own_steps", 6), name
    assert "schedule_length" not in {d["code"] for d in check["diagnoses"]}
    dropped = next(d for d in check["diagnoses"] if d["code"] == "tail_window_dropped")
    assert dropped["epochs"] == [0]
    leak = next(d for d in check["diagnoses"] if d["code"] == "gradient_leak")
    assert (leak["epoch"], leak["window"]) == (1, 1) and leak["leak"] == pytest.approx(
        1.25, rel=1e-5
    )
    uneven = _scenario(check, "uneven")
    # the client scheduler steps once per engine update: the intended rates, one update behind
    assert uneven["schedule"]["yours"] == pytest.approx(uneven["schedule"]["intended"][:5])
    lines = run["lines"]["run_deepspeed_engine"]
    assert lines
    for line in lines:
        assert (line["wrapped_in"], line["backend"], line["zero_stage"]) == (
            "DeepSpeedEngine",
            "gloo",
            0,
        )
        assert line["optimizer_is_the_one_passed"] and line["scheduler"] == "LambdaLR"
        assert (line["global_steps"], line["micro_steps"], line["scheduler_steps"]) == (5, 10, 5)
        assert line["num_updates"] == 6 and line["epochs_set"] == [0, 1]
        assert [m[1] for m in line["microsteps"]] == list(range(2 * M))  # never reset
        assert [m[2] for m in line["microsteps"]] == [False, True] * M  # the boundaries
        assert line["optimizer_steps"] == 5


@pytest.mark.slow
def test_trl_sft_trainer_divides_every_window_by_its_own_global_count_as_trainer_does(run):
    check = _check(run, "run_trl_sft")
    for name in ("uneven", "equal_counts"):
        s = _scenario(check, name)
        assert s["schedule"]["matches"] == "intended" and s["max_abs_diff"] <= 1e-6  # float32
        for u in s["updates"]:
            assert u["scheme"] == "global_token" and u["optimizer_steps"] == 1, u
    empty = _scenario(check, "empty_window")
    assert [u["optimizer_steps"] for u in empty["updates"] if u["skipped"]] == [1]
    assert (empty["steps"], empty["reference_steps"]) == (6, 5)
    assert empty["schedule"]["matches"] == "skip_advances_all"
    lines = run["lines"]["run_trl_sft"]
    assert lines
    for line in lines:
        assert (line["global_step"], line["max_steps"], line["scheduler_steps"]) == (6, 6, 6)
        assert line["optimizer_steps"] == 6 and line["scheduler"] == "LambdaLR"
        assert line["synced"] == [False, True, False, True, True] * 2
        assert line["wrapped_in"] == "DistributedDataParallel"
        assert line["collator"] == "DataCollatorForLanguageModeling"  # TRL's: labels from ids
        assert {"input_ids", "labels"} <= set(line["columns"])  # SFTTrainer tokenized the text
        assert line["epochs_set"] == [0, 0, 1, 1]  # Trainer's set_epoch, then DataLoaderShard's
        assert line["max_grad_norm"] == 1.0
    uneven = _scenario(check, "uneven")
    counted = [u["num_valid_labels"] for u in uneven["updates"] for _ in range(u["microsteps"])]
    assert len(counted) == 2 * M and lines[0]["num_items_in_batch"] == counted


@pytest.mark.slow
def test_run_clm_no_trainers_schedule_counts_the_p_tails_as_one_window(run):
    """Built from the unprepared DataLoader, ceil(P M / K) = 5 updates an epoch, 10 in all,
    and stepped P = 2 times an update by the prepared scheduler: the rate at update u is
    max(0, 1 - P u / 10) x the base, 0 at the last update; the tail is divided by K."""
    check = _check(run, "run_clm_no_trainer")
    uneven = _scenario(check, "uneven")
    assert [u["optimizer_steps"] for u in uneven["updates"]] == [1] * 6
    length = math.ceil(P * M / K) * 2
    base = uneven["schedule"]["intended"][0]
    closed_form = [base * max(0.0, 1 - P * u / length) for u in range(6)]
    assert uneven["schedule"]["yours"] == pytest.approx(closed_form, rel=1e-12, abs=1e-15)
    assert uneven["schedule"]["yours"][-1] == 0
    assert uneven["schedule"]["matches"] == "prepared_global"
    assert (uneven["schedule"]["built_for"], uneven["schedule"]["updates"]) == (length // P, 6)
    for u in uneven["updates"]:
        if u["microsteps"] == K:
            assert u["scheme"] == "microbatch_mean"
        elif u.get("weights") is not None:  # the last tail stepped at rate 0: no weights
            for got, want in zip(u["weights"], _tail_weights_scaled_by_k(u), strict=True):
                assert got == pytest.approx(want, rel=1e-5)
    scaled = next(d for d in check["diagnoses"] if d["code"] == "tail_window_scaled")
    assert scaled["scale"] == pytest.approx(0.5, rel=1e-5)
    assert _scenario(check, "empty_window")["schedule"]["matches"] == "skip_advances"
    lines = run["lines"]["run_clm_no_trainer"]
    assert lines
    for line in lines:
        assert line["scheduler_length"] == length and line["batches_per_epoch"] == M
        assert (line["max_train_steps"], line["completed_steps"]) == (6, 6)
        assert (line["optimizer_steps"], line["scheduler_steps"]) == (6, P * 6)
        assert [m[0] for m in line["microsteps"]] == [False, True, False, True, True] * 2
        assert line["scheduler_wrapped_in"] == "AcceleratedScheduler"
        assert line["wrapped_in"] == "DistributedDataParallel" and line["epochs_set"] == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [r.code for r in run_table.ROWS if r.code in ADAPTERS])
def test_the_table_across_a_run_records_what_the_live_loop_does(run, adapter):
    """ "Frameworks, measured" and the README's table across a run read the record
    (frameworks.run_table): the live check of the same loop tells the same story."""
    check = _check(run, adapter)
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}
    assert run_table.story(check) == recorded[adapter]["run"], "re-record: --runs"
