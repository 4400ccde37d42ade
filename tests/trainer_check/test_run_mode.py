"""The run mode (train_loop): every bundled run example through the real check on two Gloo
processes, over two epochs of 5 microbatches at K = 2 (a tail of 1 each epoch), gets the
verdict and the diagnoses its loop was written to earn; the tail's measured scale is what
core.windows predicts for a divide-by-K loop, and P = K = 1 is no evidence. One warm launch
per shape for the module, every file inside.

    PYTHONPATH=$PWD python -m pytest -n 0 tests/trainer_check/test_run_mode.py"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


from pclab.core import windows  # noqa: E402
from pclab.experiments.trainer_check.report import exit_code  # noqa: E402
from pclab.experiments.trainer_check.run_codes import LOOP_CODE_NAMES  # noqa: E402
from tests.trainer_check.examples_launch import checks_by_shape  # noqa: E402
from tests.trainer_check.page_records import assert_agrees_with_its_record, page_loops  # noqa: E402

EXAMPLES = ROOT / "examples" / "trainers"
WRITTEN_FOR = {  # example -> (status, the run codes its diagnoses must be)
    "run_correct": ("same_update", set()),
    "run_ddp_no_sync": ("same_update", set()),
    "run_divide_by_k": ("different", {"tail_window_scaled"}),
    "run_tail_never_steps": ("different", {"tail_window_dropped", "gradient_leak"}),
    "run_zero_grad_per_epoch": ("different", {"gradient_leak"}),
    "run_scheduler_per_microstep": ("different", {"scheduler_rate"}),
    "run_schedule_len_over_k": ("different", {"schedule_length"}),
    "run_scheduler_on_skip": ("different", {"scheduler_on_skip"}),
}
RUN_CODES = set(LOOP_CODE_NAMES)  # the run-loop codes (run_codes.py)


@pytest.fixture(scope="module")
def run_checks(warm_pool) -> dict:
    """{(P, K): {example: its check}}: one warm launch per shape."""
    return checks_by_shape({(2, 2): list(WRITTEN_FOR), (1, 1): ["run_correct"]}, warm_pool)


@pytest.mark.parametrize("name", WRITTEN_FOR)
def test_each_loop_gets_the_verdict_and_diagnoses_it_was_written_for(run_checks, name):
    check = run_checks[(2, 2)][name]
    status, codes = WRITTEN_FOR[name]
    assert check["mode"] == "run" and check["status"] == status, check["diagnoses"]
    found = {d["code"] for d in check["diagnoses"]} & RUN_CODES
    assert found == codes, [d["message"] for d in check["diagnoses"]]
    assert exit_code(check) == (0 if status == "same_update" else 1)


def test_the_correct_loop_matches_every_update_to_the_tolerance(run_checks):
    check = run_checks[(2, 2)]["run_correct"]
    for s in check["scenarios"]:
        assert s["verdict"] == "same_update" and s["steps"] == s["reference_steps"], s["name"]
        for u in s["updates"]:
            assert u["skipped"] or (u["max_abs_diff"] <= 1e-10 and u["optimizer_steps"] == 1)
            assert u["skipped"] or u["lr_yours"] == pytest.approx(u["lr_intended"], rel=1e-12)
            assert u["skipped"] or u["scheme"] == "global_token", u
    claims = {s["name"]: s["claims"] for s in check["scenarios"]}
    assert "normalisation" not in claims["equal_counts"] and "tail" in claims["equal_counts"]
    assert "skip" in claims["empty_window"]


def test_the_divide_by_k_tail_is_the_scale_core_windows_predicts(run_checks):
    check = run_checks[(2, 2)]["run_divide_by_k"]
    s = next(s for s in check["scenarios"] if s["name"] == "uneven")
    first_epoch = [rank[0] for rank in s["counts"]]  # P x M terms of epoch 0
    predicted = windows.epoch_updates(first_epoch, 2, "accum_steps")[-1].ratio
    scaled = next(d for d in check["diagnoses"] if d["code"] == "tail_window_scaled")
    assert scaled["scale"] == pytest.approx(predicted) == 0.5
    full = {u["scheme"] for u in s["updates"] if u["microsteps"] == 2}
    assert full == {"microbatch_mean"}


def test_a_tail_that_never_steps_is_named_per_epoch_and_leaks_into_the_next(run_checks):
    check = run_checks[(2, 2)]["run_tail_never_steps"]
    dropped = next(d for d in check["diagnoses"] if d["code"] == "tail_window_dropped")
    assert dropped["epochs"] == [0, 1]
    leak = next(d for d in check["diagnoses"] if d["code"] == "gradient_leak")
    assert (leak["epoch"], leak["window"]) == (1, 0)


def test_one_rank_one_microstep_is_no_evidence(run_checks):
    check = run_checks[(1, 1)]["run_correct"]
    assert check["status"] == "no_evidence" and exit_code(check) == 2
    assert all(s["claims"] == [] for s in check["scenarios"])


def test_the_json_carries_each_update(run_checks):
    s = run_checks[(2, 2)]["run_correct"]["scenarios"][0]
    keys = {"epoch", "window", "microsteps", "num_valid_labels", "lr_yours", "lr_intended"}
    keys |= {"optimizer_steps", "scheme", "weights", "max_abs_diff", "skipped"}
    assert all(keys <= set(u) for u in s["updates"] if not u["skipped"])


@pytest.mark.parametrize("name", page_loops(resumable=False))
def test_page_10s_record_of_the_loop_is_what_the_live_run_reports(run_checks, name):
    """The page's AppTests read a recorded report of this loop: the live one agrees."""
    assert name in WRITTEN_FOR, "a loop of page 10 that this module does not run"
    assert_agrees_with_its_record(name, run_checks[(2, 2)][name])
