"""The resume judge's codes on launches made by hand (no process): P = 1, K = 2, two epochs of
5 microbatches (windows 2, 2, 1 an epoch; run indices 1-10), killed at the forward of
microbatch 3 after the killed launch stepped window 1. The real loops behind each case are
in tests/trainer_check/test_resume.py and tests/runners/test_resume_frameworks.py."""

from __future__ import annotations

import torch

from pclab.experiments.trainer_check.resume_judge import Launches, from_first_handed_out, judge
from pclab.experiments.trainer_check.run_observe import Step
from pclab.experiments.trainer_check.run_reference import Update, Window

RATE = (0.1,)
KILL_AT = 3


def _state(value: float) -> dict[str, torch.Tensor]:
    return {"parameter w": torch.tensor([value], dtype=torch.float64)}


def _windows() -> list[Window]:
    found, forwards = [], 0
    for epoch in range(2):
        for index, (start, end) in enumerate(((0, 2), (2, 4), (4, 5))):
            found.append(Window(epoch, index, start, end, 7, forwards))
            forwards += end - start
    return found


WINDOWS = _windows()
ENDS = [w.first_forward + w.microsteps for w in WINDOWS]  # 2, 4, 5, 7, 9, 10
REFERENCE = (
    _state(0.0),
    [Update(w, RATE, _state(float(i + 1))) for i, w in enumerate(WINDOWS)],
    WINDOWS,
)


def _steps(ends: list[int], values: list[float], start: float = 0.0) -> list[Step]:
    """A step at each `ends` forward, moving w from the value before (`start` first) to its
    value."""
    before = [start, *values[:-1]]
    return [
        Step(e, RATE, _state(b), _state(v)) for e, b, v in zip(ends, before, values, strict=True)
    ]


def _judged(resumed_forwards: list[int], resumed: list[Step]) -> dict:
    killed = _steps([2], [1.0])
    straight = _steps(ENDS, [float(i + 1) for i in range(len(ENDS))])
    launches = Launches(killed, resumed, resumed_forwards, straight)
    return judge(launches, REFERENCE, KILL_AT, tolerance=1e-12)


def test_a_restart_that_goes_on_where_it_stopped_is_the_same_run():
    resumed = _steps(ENDS[1:], [2.0, 3.0, 4.0, 5.0, 6.0], start=1.0)  # from the checkpoint
    got = _judged(list(range(3, 11)), resumed)
    assert (got["verdict"], got["codes"], got["resumed_from"]) == ("same_run", [], 3)


def test_a_restart_that_comes_back_right_but_serves_epoch_0_again_replays_and_skips():
    """run_clm_no_trainer.py's: it comes back at microbatch 3, as it should, then its next
    epoch is epoch 0's data again (run indices 1-5): windows the killed launch had stepped
    run again, and epoch 1's never do. Before, only where the run came back was looked at,
    so this was `data_skipped` alone."""
    forwards = [3, 4, 5, 1, 2, 3, 4, 5]
    resumed = _steps([4, 5, 2, 4, 5], [2.0, 3.0, 9.0, 9.5, 9.75], start=1.0)
    got = _judged(forwards, resumed)
    assert got["verdict"] == "different" and got["resumed_from"] == 3
    assert set(got["codes"]) == {"data_replayed", "data_skipped"}, got["codes"]


def test_a_restart_from_the_start_of_the_data_replays():
    forwards = list(range(1, 11))
    resumed = _steps(ENDS, [1.5, 2.0, 3.0, 4.0, 5.0, 6.0], start=1.0)
    got = _judged(forwards, resumed)
    assert got["resumed_from"] == 1 and "data_replayed" in got["codes"], got["codes"]


def test_a_restart_whose_first_input_the_check_did_not_hand_out_is_no_evidence():
    """A loop that builds its own inputs (TRL's SFTTrainer tokenizes text) is counted in
    order from 1 after a restart: judged from there, a right restart read as replaying. Not
    placed, the point is no evidence, with no code and no place it came back to."""
    resumed = _steps(ENDS[1:], [2.0, 3.0, 4.0, 5.0, 6.0], start=1.0)
    killed = _steps([2], [1.0])
    straight = _steps(ENDS, [float(i + 1) for i in range(len(ENDS))])
    launches = Launches(killed, resumed, list(range(1, 9)), straight, placed=False)
    got = judge(launches, REFERENCE, KILL_AT, tolerance=1e-12)
    assert (got["verdict"], got["codes"], got["resumed_from"]) == ("no_evidence", [], None)
    assert got["first_divergence"] is None and got["steps_after"] == 5


def test_a_run_right_everywhere_but_an_unplaced_restart_is_no_evidence(monkeypatch):
    """report.with_resume (its launches stood in for): one kill point not placed, the others
    the same run, turns a passing run into no_evidence (exit 2), never a pass; a different
    point still makes it different."""
    from pathlib import Path

    import pclab.experiments.trainer_check.resume as resume
    from pclab.experiments.trainer_check import report
    from pclab.experiments.trainer_check.judging import exit_code

    example = Path(__file__).parents[2] / "examples" / "trainers" / "run_resume_correct.py"
    for verdicts, status in (
        (("same_run", "no_evidence"), "no_evidence"),
        (("different", "no_evidence"), "different"),
        (("same_run", "same_run"), "same_update"),
    ):
        entries = [{"point": f"p{i}", "verdict": v, "codes": []} for i, v in enumerate(verdicts)]
        monkeypatch.setattr(resume, "check", lambda *a, e=entries, **k: e)
        check = {"mode": "run", "status": "same_update", "passed": True, "diagnoses": []}
        check |= {"trainer": str(example), "world_size": 2, "accum_steps": 2, "tolerance": 1e-10}
        report.with_resume(check, None, 60.0)
        assert check["status"] == status, verdicts
        said = [d for d in check["diagnoses"] if d["code"] == "no_evidence"]
        assert [d.get("resume") for d in said] == ([True] if status == "no_evidence" else [])
    assert exit_code({"status": "no_evidence"}) == 2


def test_a_restart_is_placed_by_its_first_input_the_check_handed_out():
    """Forwards of a framework's own batch before only handed-out ones (OLMo-core's dry run)
    are left out; a first forward handed out places it as before; a mix after a foreign first
    (inputs the check's by chance: TRL's own tokenizing) or none at all cannot place it."""
    assert from_first_handed_out([1, 2, 3, 4], [False, False, True, True]) == ([3, 4], True)
    assert from_first_handed_out([3, 4, 5], [True, False, True]) == ([3, 4, 5], True)
    assert from_first_handed_out([1, 2, 3], [False, True, False]) == ([1, 2, 3], False)
    assert from_first_handed_out([1, 2], [False, False]) == ([1, 2], False)
    assert from_first_handed_out([], []) == ([], True)  # killed before its first forward


def _carried_tail(resumed: list[Step]) -> dict:
    """torchtune's recipe: its straight run steps at 2, 4, 7 and 9 (each epoch's tail carried
    into the next epoch's first window, the last never stepped) and checkpoints at each
    epoch's end; killed at microbatch 6, after the checkpoint of epoch 0, it comes back at 6."""
    straight = _steps([2, 4, 7, 9], [1.0, 2.0, 3.0, 4.0])
    killed = _steps([2, 4], [1.0, 2.0])
    return judge(Launches(killed, resumed, list(range(6, 11)), straight), REFERENCE, 6, 1e-12)


def test_a_restart_inside_the_loops_own_window_loses_what_it_had_accumulated():
    """Come back at 6 from the weights the straight run had there, its first step (at 7, as the
    straight run's) parts from the straight one: the tail's gradient (microbatch 5), held
    in .grad over the epoch-end checkpoint, is gone. The straight run's own folding of the
    tail is not charged to the restart (before: counter_reset)."""
    got = _carried_tail(_steps([7, 9], [3.5, 4.5], start=2.0))
    assert (got["verdict"], got["codes"], got["first_divergence"]) == (
        "different",
        ["window_gradient_lost"],
        3,
    )


def test_a_lost_window_gradient_is_named_only_from_the_straight_runs_weights_and_rates():
    """The same restart from other weights (a checkpoint of other values) or at other rates
    can part for that reason: no window_gradient_lost is claimed from it."""
    assert _carried_tail(_steps([7, 9], [3.5, 4.5], start=2.25))["codes"] == []
    other_rate = [
        Step(s.forwards, (0.2,), s.before, s.after) for s in _steps([7, 9], [3.5, 4.5], 2.0)
    ]
    assert _carried_tail(other_rate)["codes"] == []


def test_a_restart_that_steps_where_the_loop_itself_does_not_resets_the_counter():
    got = _carried_tail(_steps([8, 10], [3.5, 4.5], start=2.0))
    assert got["verdict"] == "different" and got["codes"] == ["counter_reset"], got["codes"]


def test_a_step_before_the_resumed_launchs_first_forward_is_no_update():
    """torchtune's resume loads the optimizer through torch.distributed.checkpoint, whose
    _init_optim_state steps AdamW at lr 0 before any forward (forwards 0, nothing moved): read
    as the first resumed step it had claimed optimizer_state_lost and counter_reset."""
    set_up = Step(0, (0.0,), _state(2.0), _state(2.0))
    got = _carried_tail([set_up, *_steps([7, 9], [3.5, 4.5], start=2.0)])
    assert got["codes"] == ["window_gradient_lost"], got["codes"]
