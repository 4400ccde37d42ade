"""The run mode's blind check: loops written from the README's run-mode contract alone
(tests/trainer_check/blind_run/) get, from the real check on Gloo processes, the status, the
per-scenario verdicts, the run diagnoses (and their numbers) and the per-update weights that
an independent one-process float64 replay (`blind_run_reference`, torch autograd, no pclab
code) derives at the very term counts the check used; that account in turn names what each
file was written to do (WRITTEN_FOR). One warm launch for the module: every file at P = 2,
K = 2. Measured: 40 s on a 2-core box at load 6 (~12 s of it the launch, ~15 s the replays).

    PYTHONPATH=$PWD nice -n 10 python -m pytest -n 0 tests/trainer_check/test_blind_run.py"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import blind_run_reference  # noqa: E402
from blind_run_loops import REPLAYS, SCENARIOS  # noqa: E402

from pclab.experiments.trainer_check import EXPERIMENT  # noqa: E402
from pclab.experiments.trainer_check.params import Params  # noqa: E402
from pclab.experiments.trainer_check.run_codes import LOOP_CODE_NAMES  # noqa: E402

TRAINERS = tuple(REPLAYS)
RUN_CODES = set(LOOP_CODE_NAMES)  # the run-loop codes (run_codes.py)
EVERY = frozenset(SCENARIOS)
EMPTY = frozenset({"empty_window"})
# what each file was written to do: code -> the scenarios (of SCENARIOS) it shows in
WRITTEN_FOR = {
    "correct_hand_window": {},
    "nanogpt_divide_by_k": {"tail_window_scaled": EVERY},
    "tail_never_steps": {"tail_window_dropped": EVERY, "gradient_leak": EVERY},
    "tail_never_steps_short_schedule": {
        "tail_window_dropped": EVERY,
        "gradient_leak": EVERY,
        "schedule_length": EVERY,
    },
    "zero_grad_per_epoch": {"gradient_leak": EVERY},
    "zero_grad_per_epoch_linear": {"gradient_leak": EVERY},
    "step_every_microstep": {"steps_per_window": EVERY},
    "scheduler_per_microstep": {"scheduler_rate": EVERY},
    "schedule_len_over_k": {"schedule_length": EVERY},
    "scheduler_on_skip": {"scheduler_on_skip": EMPTY},
    "skips_both_ddp": {},
    "skips_both_ceil_length": {"schedule_length": EMPTY},
}
# where the check and the independent account disagree (reported to the lead; strict: a
# fixed check turns these into failures until the entry goes). zero_grad_per_epoch_linear
# was one until the check replayed a too-small model from several starting points.
DISAGREES: dict[str, str] = {}


@functools.cache
def _account(name: str, counts: str) -> dict:
    return blind_run_reference.account(name, json.loads(counts), 2)


@pytest.mark.parametrize("name", TRAINERS)
def test_the_independent_account_names_what_each_file_was_written_to_do(name):
    for scenario, counts in SCENARIOS.items():
        found = _account(name, json.dumps(counts))
        meant = {code for code, where in WRITTEN_FOR[name].items() if scenario in where}
        assert set(found["codes"]) == meant, (scenario, found["codes"])
        assert found["passed"] == (not meant), scenario
    details = _account(name, json.dumps(SCENARIOS["uneven"]))["codes"]
    if name == "nanogpt_divide_by_k":  # k'/K: a tail of 1 at K = 2
        assert details["tail_window_scaled"] == {"scale": pytest.approx(0.5), "microsteps": 1}
    if name == "scheduler_per_microstep":
        assert details["scheduler_rate"] == {"rate": 2, "how": "per_microstep"}
    if name == "schedule_len_over_k":  # 5 // 2 a epoch, not ceil(5 / 2)
        assert details["schedule_length"] == {"built_for": 4, "updates": 6}


@pytest.fixture(scope="session")
def run_checks(warm_pool) -> dict:
    """{file: its check}: one warm launch, every blind file inside, at P = 2, K = 2."""
    paths = [str(blind_run_reference.BLIND / f"{n}.py") for n in TRAINERS]
    result = EXPERIMENT.run(Params.checked(paths), timeout_s=900, runtime=warm_pool)
    assert result.ok, result.message
    return dict(zip(TRAINERS, result.report["checks"], strict=True))


def _cases():
    for name in TRAINERS:
        mark = pytest.mark.xfail(strict=True, reason=DISAGREES[name]) if name in DISAGREES else ()
        yield pytest.param(name, marks=mark)


def _approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12) if isinstance(value, float) else value


@pytest.mark.parametrize("name", _cases())
def test_the_check_names_what_a_one_process_replay_derives(run_checks, name):
    check = run_checks[name]
    assert check["mode"] == "run" and check["scenarios"], check["diagnoses"]
    said: dict[str, dict] = {s["name"]: {} for s in check["scenarios"]}
    for d in check["diagnoses"]:
        if d["code"] in RUN_CODES:
            said[d["scenario"]][d["code"]] = d
    passed = []
    for s in check["scenarios"]:
        mine = _account(name, json.dumps(s["counts"]))
        passed.append(mine["passed"])
        assert s["passed"] == mine["passed"], s["name"]
        assert set(said[s["name"]]) == set(mine["codes"]), (s["name"], mine["codes"])
        for code, detail in mine["codes"].items():  # the numbers both give
            for key in detail.keys() & said[s["name"]][code].keys():
                value = said[s["name"]][code][key]
                assert value == _approx(detail[key]), (s["name"], code, key)
        for u in s["updates"]:  # the window's weight x N, where the check gives a number
            ours = mine["weights"].get((u["epoch"], u["window"]))
            if u["optimizer_steps"] == 1 and ours is not None:
                pairs = [(a, b) for ra, rb in zip(u["weights"], ours) for a, b in zip(ra, rb)]
                for a, b in pairs:
                    assert a is None if b is None else a in (None, _approx(b)), (s["name"], u)
    assert check["status"] == ("same_update" if all(passed) else "different")


@pytest.mark.parametrize("name", [n for n, codes in WRITTEN_FOR.items() if not codes])
def test_the_correct_loops_pass(run_checks, name):
    check = run_checks[name]
    assert check["passed"] and check["status"] == "same_update", check["diagnoses"]
    assert all(s["verdict"] in ("same_update", "no_evidence") for s in check["scenarios"])
