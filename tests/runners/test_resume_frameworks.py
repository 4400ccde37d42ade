"""Resume on real framework loops (issues 42, 43): Accelerate's checkpointing example
(`save_state` after every batch, `load_state` + `skip_first_batches` on restart),
transformers' `Trainer` (`save_strategy="steps"`, `save_steps=1`,
`train(resume_from_checkpoint=get_last_checkpoint(dir))`), Lightning's `Trainer.fit`
(`ModelCheckpoint(every_n_train_steps=1, save_last=True)`, `fit(ckpt_path="last")`) and
DeepSpeed's engine (`save_checkpoint` / `load_checkpoint`), each
SIGKILLed on every rank at the four kill points and restarted in fresh processes, through the
check once (one warm launch of this module's own pool: it sets TMPDIR first, as
tests/trainer_check/test_resume.py does, to see that nothing is left behind), against what the
framework's source says it saves and each rank's evidence ($PCL_FRAMEWORK_RECORD,
$PCL_HF_TRAINER_RECORD). The adapters' docstrings cite the framework lines behind each finding.

Measured (accelerate 1.15.0, transformers 5.24.0, lightning 2.6.6, deepspeed 0.19.8,
torch 2.13.0, P = 2, K = 2, two epochs of 5 microbatches a rank), pinned here:

- Accelerate: `same_run` at mid_epoch, before_tail and epoch_boundary; `window_gradient_lost`
  at mid_window: save_state keeps `accelerator.step` (the window counter) but not `.grad`,
  and the example saves after every batch, inside windows too. The run itself keeps
  run_accelerate_accumulate.py's codes (`tail_window_scaled`, `scheduler_rate`, and
  `scheduler_on_skip` in empty_window).
- Trainer: `same_run` at every point: it saves only after an update, so a kill inside a window
  re-runs that window from its start (resumed from checkpoint-1 at mid_window).
- Lightning: `same_run` at epoch_boundary only. It saves only after an optimizer step and
  restores the weights, AdamW, the scheduler and its batch counter, but its plain DataLoader
  starts the epoch again from the first microbatch under the restored count (it warns: "your
  dataloader is not resumable"): `data_replayed`, `data_skipped` and `counter_reset` at
  mid_epoch, mid_window and before_tail. The run itself keeps run_lightning_accumulate.py's
  codes (`tail_window_scaled`, and `scheduler_on_skip` in empty_window).
- DeepSpeed's engine (the getting-started guide's `save_checkpoint` after every batch,
  `load_checkpoint` + a skip to the saved step): `same_run` at mid_epoch and before_tail
  only. The checkpoint keeps `global_steps` but not `micro_steps`, which a fresh engine
  counts from 0: `counter_reset` and `window_gradient_lost` at mid_window, `counter_reset`
  at epoch_boundary (after the tail it never stepped). The run keeps run_deepspeed_engine.py's
  codes (`tail_window_dropped`, `gradient_leak`).

    PYTHONPATH=$PWD python -m pytest -n 0 tests/runners/test_resume_frameworks.py -q
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid

import pytest
from runner_support import MARK_ENV, ROOT, marked, warm_runtime

from pclab.experiments.trainer_check import EXPERIMENT, run_summary
from pclab.experiments.trainer_check.frameworks import run_table
from pclab.experiments.trainer_check.frameworks.setting import installed_version
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.run_codes import LOOP_CODE_NAMES

FRAMEWORKS = ROOT / "examples" / "frameworks"
ADAPTERS = {  # adapter -> (its folder, the packages it needs)
    "run_resume_accelerate": ("accelerate", ("accelerate",)),
    "run_resume_accelerate_at_updates": ("accelerate", ("accelerate",)),
    "run_resume_hf_trainer": ("hf_trainer", ("transformers", "accelerate")),
    "run_resume_lightning_accumulate": ("lightning", ("lightning",)),
    "run_resume_deepspeed_engine": ("deepspeed", ("deepspeed",)),
    "run_resume_clm_no_trainer": ("accelerate", ("accelerate", "transformers")),
    "run_resume_hf_trainer_deepspeed_zero2": ("deepspeed", ("deepspeed", "transformers")),
    "run_resume_trl_sft": ("trl", ("trl", "transformers")),
}
RECORDS = ("PCL_FRAMEWORK_RECORD", "PCL_HF_TRAINER_RECORD")  # framework_lm.py, run_hf_trainer.py
RUN_CODES = set(LOOP_CODE_NAMES)
POINTS = ("mid_epoch", "mid_window", "before_tail", "epoch_boundary")
MEASURED_RUN = {  # adapter -> {scenario: (verdict, its run codes)}
    "run_resume_accelerate": {
        "uneven": ("different", {"tail_window_scaled", "scheduler_rate"}),
        "empty_window": (
            "different",
            {"tail_window_scaled", "scheduler_rate", "scheduler_on_skip"},
        ),
        "equal_counts": ("different", {"tail_window_scaled", "scheduler_rate"}),
    },
    "run_resume_accelerate_at_updates": {  # saving changes nothing of how Accelerate steps
        "uneven": ("different", {"tail_window_scaled", "scheduler_rate"}),
        "empty_window": (
            "different",
            {"tail_window_scaled", "scheduler_rate", "scheduler_on_skip"},
        ),
        "equal_counts": ("different", {"tail_window_scaled", "scheduler_rate"}),
    },
    "run_resume_hf_trainer": {
        "uneven": ("same_update", set()),
        "empty_window": ("different", {"scheduler_on_skip"}),
        "equal_counts": ("same_update", set()),
    },
    "run_resume_lightning_accumulate": {  # run_lightning_accumulate.py's codes
        "uneven": ("different", {"tail_window_scaled"}),
        "empty_window": ("different", {"tail_window_scaled", "scheduler_on_skip"}),
        "equal_counts": ("different", {"tail_window_scaled"}),
    },
    "run_resume_deepspeed_engine": {  # run_deepspeed_engine.py's codes: the run's windows
        name: ("different", {"tail_window_dropped", "gradient_leak"})
        for name in ("uneven", "empty_window", "equal_counts")
    },
    "run_resume_clm_no_trainer": {  # run_clm_no_trainer.py's codes
        "uneven": ("different", {"tail_window_scaled", "schedule_length"}),
        "empty_window": ("different", {"tail_window_scaled", "scheduler_on_skip"}),
        "equal_counts": ("different", {"tail_window_scaled", "schedule_length"}),
    },
    "run_resume_hf_trainer_deepspeed_zero2": {  # run_hf_trainer_deepspeed_zero2.py's
        "uneven": ("same_update", set()),
        "empty_window": ("different", {"scheduler_on_skip"}),
        "equal_counts": ("same_update", set()),
    },
    "run_resume_trl_sft": {  # run_trl_sft.py's
        "uneven": ("same_update", set()),
        "empty_window": ("different", {"scheduler_on_skip"}),
        "equal_counts": ("same_update", set()),
    },
}
LIGHTNING_REPLAYED = {"data_replayed", "data_skipped", "counter_reset"}
CLM_EPOCH_AGAIN = {"data_replayed", "data_skipped"}  # epoch 0's data run again, epoch 1's never
MEASURED_RESUME = {  # adapter -> {kill point: (verdict, codes, killed_at, resumed_from)}
    "run_resume_accelerate": {
        "mid_epoch": ("same_run", set(), 3, 3),
        "mid_window": ("different", {"window_gradient_lost"}, 4, 4),  # went on from the kill
        "before_tail": ("same_run", set(), 5, 5),
        "epoch_boundary": ("same_run", set(), 6, 6),
    },
    "run_resume_accelerate_at_updates": {  # a checkpoint only where Accelerate stepped
        "mid_epoch": ("same_run", set(), 3, 3),
        "mid_window": ("same_run", set(), 4, 3),  # its window again, from the start
        "before_tail": ("same_run", set(), 5, 5),
        "epoch_boundary": ("same_run", set(), 6, 6),
    },
    "run_resume_hf_trainer": {
        "mid_epoch": ("same_run", set(), 3, 3),
        "mid_window": ("same_run", set(), 4, 3),  # its window again, from the start
        "before_tail": ("same_run", set(), 5, 5),
        "epoch_boundary": ("same_run", set(), 6, 6),
    },
    "run_resume_lightning_accumulate": {  # the data starts over under the restored count
        "mid_epoch": ("different", LIGHTNING_REPLAYED, 3, 1),
        "mid_window": ("different", LIGHTNING_REPLAYED, 4, 1),
        "before_tail": ("different", LIGHTNING_REPLAYED, 5, 1),
        "epoch_boundary": ("same_run", set(), 6, 6),
    },
    "run_resume_deepspeed_engine": {  # right only where micro_steps was a multiple of K
        "mid_epoch": ("same_run", set(), 3, 3),
        "mid_window": ("different", {"counter_reset", "window_gradient_lost"}, 4, 4),
        "before_tail": ("same_run", set(), 5, 5),
        "epoch_boundary": ("different", {"counter_reset"}, 6, 6),
    },
    "run_resume_clm_no_trainer": {  # epoch 1 served as epoch 0 after any restart
        "mid_epoch": ("different", CLM_EPOCH_AGAIN, 3, 3),
        "mid_window": ("different", CLM_EPOCH_AGAIN | {"counter_reset"}, 4, 3),
        "before_tail": ("different", CLM_EPOCH_AGAIN, 5, 5),
        "epoch_boundary": ("different", CLM_EPOCH_AGAIN | {"counter_reset"}, 6, 2),
    },
    "run_resume_hf_trainer_deepspeed_zero2": {  # the plain Trainer's, through the engine
        "mid_epoch": ("same_run", set(), 3, 3),
        "mid_window": ("same_run", set(), 4, 3),  # its window again, from the start
        "before_tail": ("same_run", set(), 5, 5),
        "epoch_boundary": ("same_run", set(), 6, 6),
    },
    # SFTTrainer tokenizes its own text: a restart whose first microbatch holds several
    # documents (padded its own way) is no input the check handed out, so it is not placed
    "run_resume_trl_sft": {
        "mid_epoch": ("no_evidence", set(), 3, None),
        "mid_window": ("no_evidence", set(), 4, None),
        "before_tail": ("same_run", set(), 5, 5),  # the tail: one document, as handed out
        "epoch_boundary": ("no_evidence", set(), 6, None),
    },
}
pytestmark = pytest.mark.timeout(900)  # eight adapters x (1 run + 8 resume launches), warm


def _missing(adapter: str) -> list[str]:
    return [p for p in ADAPTERS[adapter][1] if installed_version(p) is None]


def _lines(folder) -> list[dict]:
    lines: list[dict] = []
    for env in RECORDS:
        path = folder / f"{env}.jsonl"
        lines += [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return lines


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    """{"checks": {adapter: its check}, "lines": {adapter: every rank's record lines},
    "folders", "processes": what was left behind}."""
    names = [a for a in ADAPTERS if not _missing(a)]
    if not names:
        pytest.skip("none of accelerate, transformers, lightning, deepspeed is installed")
    tmp, records = tmp_path_factory.mktemp("resume_tmp"), tmp_path_factory.mktemp("records")
    mark = uuid.uuid4().hex
    envs = {"TMPDIR": str(tmp), MARK_ENV: mark}
    envs |= {env: str(records / f"{env}.jsonl") for env in RECORDS}
    saved = {name: os.environ.get(name) for name in envs}
    os.environ.update(envs)
    tempfile.tempdir = None  # TMPDIR is read again
    try:
        with warm_runtime(frameworks=True) as runtime:
            paths = [str(FRAMEWORKS / ADAPTERS[n][0] / f"{n}.py") for n in names]
            params = Params.checked(paths, world_size=2, accum=2)
            result = EXPERIMENT.run(params, timeout_s=900, runtime=runtime)
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        tempfile.tempdir = None
    assert result.ok, result.message
    lines = _lines(records)
    folders = [p.name for p in tmp.iterdir() if p.name.startswith(("pcl_resume_", "pcl_check"))]
    return {
        "checks": dict(zip(names, result.report["checks"], strict=True)),
        "lines": {n: [x for x in lines if x.get("adapter") == n] for n in names},
        "folders": folders,
        "processes": marked(mark),
    }


def _check(resumed, adapter: str) -> dict:
    missing = _missing(adapter)
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: {adapter} drives that framework")
    return resumed["checks"][adapter]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_framework_loop_runs_as_its_run_mode_adapter_does(resumed, adapter):
    check = _check(resumed, adapter)
    assert check["mode"] == "run" and check["status"] == "different"
    for name, (verdict, codes) in MEASURED_RUN[adapter].items():
        scenario = next(s for s in check["scenarios"] if s["name"] == name)
        assert scenario["verdict"] == verdict, (name, scenario["first_divergence"])
        got = {d["code"] for d in check["diagnoses"] if d.get("scenario") == name} & RUN_CODES
        assert got == codes, [d["message"] for d in check["diagnoses"]]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_framework_resume_gets_its_measured_verdict_at_each_kill_point(resumed, adapter):
    entries = {e["point"]: e for e in _check(resumed, adapter)["resume"]}
    assert tuple(entries) == POINTS
    for point, (verdict, codes, killed_at, resumed_from) in MEASURED_RESUME[adapter].items():
        e = entries[point]
        assert (e["verdict"], set(e["codes"])) == (verdict, codes), (point, e)
        assert (e["killed_at"], e["resumed_from"]) == (killed_at, resumed_from), (point, e)


@pytest.mark.slow
def test_accelerate_restores_its_window_counter_but_not_the_windows_gradient(resumed):
    """load_state gives back `accelerator.step` (checkpointing.py:157, 296): at mid_window the
    restart loads step_3 with the counter at 3, mid-window, so it syncs at the next batch with
    only that batch's gradient; at the epoch's end the counter was reset to 0."""
    _check(resumed, "run_resume_accelerate")
    restarts = [x for x in resumed["lines"]["run_resume_accelerate"] if x["resumed_from"]]
    on_load = sorted({(x["resumed_from"], x["accumulate_step_on_load"]) for x in restarts})
    assert on_load == [(2, 2), (3, 3), (4, 4), (5, 0)]  # batches done, accelerator.step
    for x in restarts:  # the prepared scheduler came back: P steps an update, as uninterrupted
        assert x["scheduler_steps"] == 2 * 6
    assert {tuple(x["epochs_set"]) for x in restarts} == {(0, 0, 1, 1), (1, 1)}


@pytest.mark.slow
def test_accelerate_saving_at_update_boundaries_runs_a_killed_window_again(resumed):
    """Saved only where `accelerator.sync_gradients`: every restart loads a window boundary
    (step_2 for both kills in window 2, step_4 before the tail, step_5 after it), and
    `accelerator.step` comes back where that boundary left it (0 after the epoch's end)."""
    _check(resumed, "run_resume_accelerate_at_updates")
    restarts = [
        x for x in resumed["lines"]["run_resume_accelerate_at_updates"] if x["resumed_from"]
    ]
    on_load = sorted({(x["resumed_from"], x["accumulate_step_on_load"]) for x in restarts})
    assert on_load == [(2, 2), (4, 4), (5, 0)]
    check = resumed["checks"]["run_resume_accelerate_at_updates"]
    assert [e["point"] for e in check["resume"] if run_summary.window_rerun(e)] == ["mid_window"]


@pytest.mark.slow
def test_trainer_resumes_only_from_update_boundaries(resumed):
    _check(resumed, "run_resume_hf_trainer")
    restarts = [x for x in resumed["lines"]["run_resume_hf_trainer"] if x["resumed_from"]]
    names = sorted({x["resumed_from"] for x in restarts})
    assert names == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]  # mid_epoch, mid_window: 1
    assert all(x["global_step"] == 6 and x["scheduler_steps"] == 6 for x in restarts)
    # the limit the Trainer documents (#22143), said as such: only where it went back
    check = resumed["checks"]["run_resume_hf_trainer"]
    said = [ln for ln in run_summary.lines(check) if "ran again from its start" in ln]
    assert len(said) == 1 and "mid_window" in said[0] and "same run" in said[0], said
    assert [e["point"] for e in check["resume"] if run_summary.window_rerun(e)] == ["mid_window"]


@pytest.mark.slow
def test_lightning_restores_its_counts_but_not_the_position_in_the_data(resumed):
    """Every checkpoint is at an update (global_step 1 for both kills in window 2, 2 before
    the tail, 3 after it), saved inside on_train_batch_end (completed one behind ready);
    every restart ends at global_step 6 with the schedule stepped 6 times, as uninterrupted,
    yet a mid-epoch restart sets epoch 0 again and serves it from its first microbatch."""
    _check(resumed, "run_resume_lightning_accumulate")
    lines = resumed["lines"]["run_resume_lightning_accumulate"]
    restarts = [x for x in lines if x["resumed_from"]]
    loaded = sorted(
        {
            (x["resumed_from"]["global_step"], x["resumed_from"]["batch_progress_current"]["ready"])
            for x in restarts
        }
    )
    assert loaded == [(1, 2), (2, 4), (3, 5)]
    assert {x["ckpt_path"] for x in restarts} == {"last.ckpt"}
    assert all(x["global_step"] == 6 and x["scheduler_steps"] == 6 for x in restarts)
    by_step = {x["resumed_from"]["global_step"]: x for x in restarts}
    assert by_step[1]["epochs_set"] == [0, 1] and by_step[3]["epochs_set"] == [1]
    assert [by_step[n]["optimizer_steps"] for n in (1, 2, 3)] == [5, 4, 3]


@pytest.mark.slow
def test_deepspeed_restores_its_step_count_but_not_its_microstep_counter(resumed):
    """load_checkpoint gives back global_steps (engine.py:4711-4713) but a fresh engine's
    micro_steps is 0 (:538), checkpoint or not: every restart counts its windows from the
    microbatch it came back to. Uninterrupted, the engine takes 5 steps over the 10
    microbatches (every second one, across the epoch's end); restarted after 2 or 4 (a
    multiple of K) it still does, after 3 (mid-window) or 5 (the unstepped tail) it takes 4."""
    _check(resumed, "run_resume_deepspeed_engine")
    restarts = [x for x in resumed["lines"]["run_resume_deepspeed_engine"] if x["resumed_from"]]
    assert {x["micro_steps_on_load"] for x in restarts} == {0}
    got = sorted({(x["resumed_from"], x["global_steps"], x["micro_steps"]) for x in restarts})
    assert got == [(2, 5, 8), (3, 4, 7), (4, 5, 6), (5, 4, 5)]  # batches done: steps, micro
    assert {x["scheduler_steps"] - x["global_steps"] for x in restarts} == {0}


@pytest.mark.slow
def test_run_clm_no_trainer_resumes_from_the_folder_name_and_serves_epoch_0_again(resumed):
    """The script saves after every batch into step_<updates> (step_1 again after microbatch
    3, mid-window: accelerator.step 3 on load), resumes at updates x K batches (step_3 after
    the tail: batch 6, one past epoch 0's 5) and never sets the prepared DataLoader's epoch,
    which a fresh process starts at 0 and skip_first_batches advances only on its copy:
    every restart serves epoch 1 as epoch 0."""
    _check(resumed, "run_resume_clm_no_trainer")
    restarts = [x for x in resumed["lines"]["run_resume_clm_no_trainer"] if x["resumed_from"]]
    got = sorted(
        {
            (x["resumed_from"], x["accumulate_step_on_load"], x["completed_steps"])
            + (tuple(x["epochs_set"]),)
            for x in restarts
        }
    )
    assert got == [
        ("step_1", 2, 6, (0, 0)),
        ("step_1", 3, 6, (0, 0)),
        ("step_2", 4, 6, (0, 0)),
        ("step_3", 0, 5, (0,)),
    ]
    assert {x["iteration_on_load"] for x in restarts} == {0}


@pytest.mark.slow
def test_trainer_with_zero2_resumes_through_the_engine_from_update_boundaries(resumed):
    """The Trainer's checkpoints under ZeRO-2 (the engine's save_checkpoint into
    checkpoint-<step>, deepspeed_load_checkpoint on resume), as without DeepSpeed: only after
    an update, every restart ending at global_step 6 with the schedule stepped 6 times, the
    Trainer's SGD on the engine stepping, never the optimizer passed in."""
    _check(resumed, "run_resume_hf_trainer_deepspeed_zero2")
    lines = resumed["lines"]["run_resume_hf_trainer_deepspeed_zero2"]
    restarts = [x for x in lines if x["resumed_from"]]
    assert sorted({x["resumed_from"] for x in restarts}) == [
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-3",
    ]
    assert all(x["global_step"] == 6 and x["scheduler_steps"] == 6 for x in restarts)
    assert {(x["wrapped_in"], x["zero_stage"], x["optimizer_class"]) for x in lines} == {
        ("DeepSpeedEngine", 2, "SGD")
    }
    assert {x["passed_optimizer_steps"] for x in lines} == {0}


@pytest.mark.slow
def test_trl_resumes_as_the_trainer_does_where_the_check_cannot_place_it(resumed):
    """What the check cannot judge, the record shows: SFTTrainer came back from the
    Trainer's update-boundary checkpoints (checkpoint-1 for both kills in window 2) and ended
    at global_step 6 with its schedule stepped 6 times, as uninterrupted."""
    _check(resumed, "run_resume_trl_sft")
    restarts = [x for x in resumed["lines"]["run_resume_trl_sft"] if x.get("resumed_from")]
    assert sorted({x["resumed_from"] for x in restarts}) == [
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-3",
    ]
    assert all(x["global_step"] == 6 and x["scheduler_steps"] == 6 for x in restarts)
    check = resumed["checks"]["run_resume_trl_sft"]
    said = [ln for ln in run_summary.lines(check) if "no evidence" in ln]
    assert len(said) == 3 and all("not placed" in ln for ln in said), said


@pytest.mark.slow
def test_no_process_or_folder_is_left_behind_after_the_kills(resumed):
    assert resumed["processes"] == [] and resumed["folders"] == []


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [r.resume for r in run_table.ROWS if r.resume in ADAPTERS])
def test_the_table_across_a_run_records_what_the_live_restart_does(resumed, adapter):
    """The table across a run (frameworks.run_table) records each kill point's verdict and
    codes: the live restart of the same loop agrees."""
    row = next(r for r in run_table.ROWS if r.resume == adapter)
    record = {r["code"]: r for r in run_table.load_runs()["records"]}[row.code]
    assert run_table.story(_check(resumed, adapter))["resume"] == record["resume"], "--runs"
