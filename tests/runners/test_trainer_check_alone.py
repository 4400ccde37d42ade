"""Issue 29 on real Gloo processes: every scenario judged on its own (a trainer that raises,
hangs or skips a collective in one scenario costs that scenario only), a non-finite update
named as such, torchtune's count before the causal shift named, and --counts as terms.

Each trainer file is in tests/trainers/; each test is one check of it (P = K = 2): through
`pclab check` where the cold launch is the subject (torchrun's agent ending every rank when
one dies, then the relaunch; the scenario deadline read from the environment; the pytest
helper as a user calls it), else through the session's warm pool (the same experiment, the
same report the command prints as JSON, about 2 s instead of a cold launch's 12-20 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from runner_support import ROOT

from pclab.experiments.trainer_check import EXPERIMENT, assert_same_update
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.report import exit_code

TRAINERS = ROOT / "tests" / "trainers"


def start_check(name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`pclab check tests/trainers/<name>.py --json`, started."""
    return subprocess.Popen(
        [sys.executable, "-m", "pclab", "check", str(TRAINERS / f"{name}.py"), "--json"],
        cwd=ROOT,
        env=dict(os.environ, **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_check(started: subprocess.Popen) -> tuple[int, dict]:
    """(exit code, the report) of a started check."""
    try:
        stdout, stderr = started.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        started.kill()
        stdout, stderr = started.communicate()
    assert stdout, stderr
    return started.returncode, json.loads(stdout)


# The cold commands whose rank dies or hangs: each waits mostly on a timeout or on torchrun
# ending the other rank, so they run side by side (a fixture starts both) and take about the
# longer one's time rather than the sum (17 + 26 s in the suite).
COLD = {
    "skips_collective_on_empty_rank": {},
    "hangs_on_empty_rank": {"PCL_SCENARIO_TIMEOUT_S": "10", "PCL_PG_TIMEOUT_S": "20"},
}


@pytest.fixture(scope="module")
def cold_checks() -> dict[str, tuple[int, dict]]:
    started = {name: start_check(name, env) for name, env in COLD.items()}
    try:
        return {name: finish_check(process) for name, process in started.items()}
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def warm_check(pool, name: str, **options: object) -> tuple[int, dict]:
    """The same check through `pool`: (the exit code `pclab check` gives it, the report it
    prints with --json)."""
    params = Params.checked([str(TRAINERS / f"{name}.py")], **options)
    result = EXPERIMENT.run(params, timeout_s=600, runtime=pool)
    assert result.ok, result.message
    (report,) = result.report["checks"]
    return exit_code(report), report


def by_name(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["scenarios"]}


def codes(report: dict, scenario: str | None) -> list[str]:
    return [d["code"] for d in report["diagnoses"] if d["scenario"] == scenario]


def line_of(name: str, needle: str) -> int:
    text = (TRAINERS / f"{name}.py").read_text().splitlines()
    return next(n for n, line in enumerate(text, 1) if needle in line and "#" not in line[:4])


JUDGED = ("uneven", "empty_microbatch", "empty_rank")  # the same update where not broken


def test_an_exception_at_n_zero_costs_that_scenario_only(warm_pool):
    code, report = warm_check(warm_pool, "zero_division_at_no_labels")
    assert code == 1 and report["status"] == "different"
    scenarios = by_name(report)
    assert all(scenarios[n]["verdict"] == "same_update" for n in JUDGED)
    failed = scenarios["no_labels"]
    assert failed["verdict"] == "different" and failed["ranks_agree"] is None
    assert codes(report, "no_labels") == ["trainer_error"]
    (error,) = [d for d in report["diagnoses"] if d["code"] == "trainer_error"]
    where = f"zero_division_at_no_labels.py:{line_of('zero_division_at_no_labels', '1 / total')}"
    assert f"{where} in train_step: ZeroDivisionError" in error["message"]


def test_a_skipped_collective_is_a_collective_mismatch_in_its_scenario(cold_checks):
    """The empty rank skips the gradients' all_reduce: Gloo aborts a rank on the size
    mismatch; the command runs the check again from the next scenario."""
    code, report = cold_checks["skips_collective_on_empty_rank"]
    assert code == 1
    scenarios = by_name(report)
    assert codes(report, "empty_rank") == ["collective_mismatch"]
    assert scenarios["empty_rank"]["verdict"] == "different"
    assert all(scenarios[n]["verdict"] == "same_update" for n in ("uneven", "empty_microbatch"))
    assert scenarios["equal_counts"]["verdict"] == "no_evidence"  # judged after the relaunch
    message = next(d["message"] for d in report["diagnoses"] if d["scenario"] == "empty_rank")
    assert "skip an all_reduce" in message and "pair.cc" not in message  # never raw Gloo alone


def test_a_hang_in_one_scenario_is_its_timeout(cold_checks):
    code, report = cold_checks["hangs_on_empty_rank"]  # a 10 s scenario deadline (COLD)
    assert code == 1
    scenarios = by_name(report)
    assert codes(report, "empty_rank") == ["timeout"]
    assert all(scenarios[n]["verdict"] == "same_update" for n in ("uneven", "empty_microbatch"))
    assert scenarios["no_labels"]["verdict"] == "same_update"


def test_a_nan_update_is_non_finite_not_ranks_apart(warm_pool):
    code, report = warm_check(warm_pool, "nan_at_zero_count")
    assert code == 1
    scenarios = by_name(report)
    nan = scenarios["no_labels"]
    assert nan["verdict"] == "different" and nan["ranks_agree"] is True
    assert "ranks_differ" not in nan["notes"]
    assert codes(report, "no_labels") == ["non_finite"]
    (found,) = [d for d in report["diagnoses"] if d["code"] == "non_finite"]
    assert "division by the zero count" in found["message"] and found["values"] > 0
    assert all(scenarios[n]["verdict"] == "same_update" for n in JUDGED)


def test_torchtune_counting_labels_before_the_shift_is_named(warm_pool):
    code, report = warm_check(warm_pool, "torchtune_count_before_shift")
    assert code == 1
    scenarios = by_name(report)
    uneven = scenarios["uneven"]
    assert uneven["scheme"] == "labels_before_shift" and uneven["verdict"] == "different"
    terms, labels = uneven["counts"], uneven["label_positions"]
    ratio = sum(map(sum, terms)) / sum(map(sum, labels))
    for t_row, l_row, w_row in zip(terms, labels, uneven["weights"], strict=True):
        for t, lab, w in zip(t_row, l_row, w_row, strict=True):
            assert w == pytest.approx(lab / t * ratio, rel=1e-6)
    # where every microbatch loses the same share to the shift, the counts cannot tell
    for s in report["scenarios"]:
        if s["verdict"] == "no_evidence":
            assert s["untold"], s["name"]
    assert "labels_before_shift" in scenarios["equal_counts"]["untold"]


def test_counts_are_terms_and_counts_labels_are_said(warm_pool):
    code, report = warm_check(warm_pool, "causal_shift_lm", counts="1,9;5,3")
    assert code == 0 and report["counts_given"] == "terms"
    (custom,) = report["scenarios"]
    assert custom["counts"] == [[1, 9], [5, 3]] and codes(report, "custom") == []
    code, report = warm_check(warm_pool, "causal_shift_lm", counts_labels="1,9;5,3")
    assert report["counts_given"] == "labels"
    (custom,) = report["scenarios"]
    assert custom["label_positions"] == [[1, 9], [5, 3]]
    assert custom["counts"][0][0] == 0  # its one label sits at position 0: the shift drops it
    assert codes(report, "custom") == ["counts_not_terms"]
    (said,) = report["diagnoses"]
    assert [0, 0, 1, 0] in said["cells"] and "holds no terms" in said["message"]


def test_the_pytest_helper_names_the_failed_scenario():
    with pytest.raises(AssertionError) as caught:
        assert_same_update(str(TRAINERS / "zero_division_at_no_labels.py"))
    text = str(caught.value)
    assert "not the same update in no_labels" in text
    assert "trainer_error" in text and "ZeroDivisionError" in text


def test_a_framework_gets_the_global_batch_and_a_fresh_start(warm_pool):
    """tests/trainers/framework_sampler.py: its own DistributedSampler picks this rank's
    microbatches from the global batch, and its once-per-process set-up raises unless
    fresh_start() came before each train_step."""
    code, report = warm_check(warm_pool, "framework_sampler")
    assert code == 0 and report["status"] == "same_update", report["diagnoses"]
    assert all(s["scheme"] in ("global_token", None) for s in report["scenarios"])
