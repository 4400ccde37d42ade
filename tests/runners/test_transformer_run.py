"""The full-Transformer experiment, run for real once per session (2 Gloo processes, DDP).

One launch of `pclab run transformer --json` with the default labels (40, 7, 0, 23)
and both optimizers also runs the equal-count control and the N = 0 case. The checks:
correct branches within 2e-10, wrong branches fail where the theory says so, the control
passes, N = 0 skips bit-identically while the naive step changes AdamW's state, and the
worker's losses match an independent forward pass computed here.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pclab.experiments.transformer
from pclab.core.validation import InvalidInput
from pclab.experiments.transformer import params as transformer
from pclab.experiments.transformer.lm import data

ROOT = data.ROOT
TOL = 2e-10
CORRECT = ("full_batch", "accum_global_n", "ddp_pn_scale")
WRONG = ("accum_microbatch_mean", "ddp_mean_of_means")


def rows(report: dict, optimizer: str | None = None) -> list[dict]:
    return [r for r in report["branches"] if optimizer in (None, r["optimizer"])]


def test_cli_succeeds_with_the_documented_json(experiment):
    assert experiment.returncode == 0, experiment.stderr
    assert "Traceback" not in experiment.stderr
    assert experiment.leftover_processes == []
    report = experiment.report
    assert report["tolerance"] == TOL
    assert report["labels"] == list(data.DEFAULT_LABELS) == [40, 7, 0, 23]
    assert (
        report["num_valid_labels"] == 70
        and report["world_size"] == 2
        and report["backend"] == "gloo"
    )
    assert [(r["name"], r["optimizer"]) for r in report["branches"]] == [
        (name, opt) for opt in ("sgd", "adamw") for name in transformer.BRANCHES
    ]
    keys = {
        "name",
        "optimizer",
        "expected_correct",
        "max_abs_diff",
        "passed",
        "first_divergence",
        "rank_hashes",
    }
    assert all(keys <= set(r) for r in report["branches"])
    assert {"skip_state_identical", "naive_changed"} <= set(report["zero_labels"])


def test_windows_include_a_short_tail(experiment):
    windows = experiment.report["windows"]
    assert len(windows) == 4 and [w["rank"] for w in windows] == [0, 0, 1, 1]
    assert [w["capacity"] for w in windows[:3]] == [96, 96, 96]
    tail = windows[3]
    assert tail["index"] == "tail" and data.MIN_TAIL_TOKENS <= tail["capacity"] < 96
    assert tail["padding"] == 96 - tail["capacity"] > 0


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_correct_branches_reproduce_the_full_batch(experiment, optimizer):
    for row in rows(experiment.report, optimizer):
        if row["name"] in CORRECT:
            assert row["expected_correct"] is True
            assert row["passed"] is True, row
            assert row["max_abs_diff"] <= TOL and row["max_abs_diff_state"] <= TOL
            assert row["first_divergence"] is None
    reference = next(r for r in rows(experiment.report, optimizer) if r["name"] == "full_batch")
    assert reference["max_abs_diff"] == 0.0  # the reference against itself


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_wrong_branches_fail_with_unequal_labels(experiment, optimizer):
    for row in rows(experiment.report, optimizer):
        if row["name"] in WRONG:
            assert row["expected_correct"] is False
            assert row["passed"] is False
            assert row["max_abs_diff"] > 1e3 * TOL  # far outside the tolerance, not rounding
            # A different denominator is a different objective: the loss parts first.
            assert row["first_divergence"]["stage"] == "loss"
            assert row["divergence_by_stage"]["gradient"]["tensor"] is not None


def test_theory_predicts_every_measured_verdict(experiment):
    for block in (
        experiment.report["branches"],
        experiment.report["equal_count_control"]["branches"],
    ):
        assert [r["passed"] for r in block] == [r["expected_correct"] is True for r in block]


def test_every_process_reports_the_same_state(experiment):
    for row in experiment.report["branches"]:
        hashes = row["rank_hashes"]
        assert len(hashes) == 2 and hashes[0] == hashes[1] and len(hashes[0]) == 64
    by_name = {
        (r["name"], r["optimizer"]): r["rank_hashes"][0] for r in experiment.report["branches"]
    }
    assert by_name[("full_batch", "sgd")] != by_name[("full_batch", "adamw")]
    assert by_name[("full_batch", "sgd")] != by_name[("ddp_mean_of_means", "sgd")]


def test_equal_count_control_lets_the_wrong_rules_pass(experiment):
    control = experiment.report["equal_count_control"]
    labels = control["labels"]
    assert len(set(labels)) == 4  # every window differs ...
    counts = transformer.label_counts(labels, 2)
    assert (
        len(set(counts["microbatches"])) == 1 and len(set(counts["ranks"])) == 1
    )  # ... the splits do not
    for row in control["branches"]:
        assert row["passed"] is True and row["max_abs_diff"] <= TOL, row


def test_zero_labels_skip_is_bit_identical_and_the_naive_step_is_not(experiment):
    zero = experiment.report["zero_labels"]
    assert zero["skip_state_identical"] is True
    assert zero["naive_changed"] == [
        "adamw.weights",
        "adamw.exp_avg",
        "adamw.exp_avg_sq",
        "adamw.step",
    ]
    adamw = zero["by_optimizer"]["adamw"]
    assert adamw["steps_before"] == [800.0] and adamw["steps_after_naive"] == [801.0]
    assert adamw["naive_max_weight_change"] > 1e-6 and adamw["ranks_agree"] is True
    # Plain SGD (no momentum, no decay) with zero gradients changes nothing: the contrast.
    assert zero["by_optimizer"]["sgd"]["naive_changed"] == []


def test_losses_match_an_independent_forward(experiment):
    """Each branch's objective value from the worker vs per-window loss sums computed here
    with an explicit log-softmax (not the worker's cross_entropy call)."""
    torch = pytest.importorskip("torch")
    from pclab.experiments.transformer.lm import artifacts
    from pclab.experiments.transformer.lm.model import TinyLM

    model = TinyLM()
    artifacts.weights(model)
    windows, labels = data.experiment_windows(), experiment.report["labels"]
    sums = []
    with torch.no_grad():
        for window, count in zip(windows, labels, strict=True):
            ids = torch.tensor([window.chunk[:-1]])
            logp = torch.log_softmax(model(ids)[0], dim=-1)
            targets = data.supervised_targets(window, count)
            sums.append(sum(-logp[i, y].item() for i, y in enumerate(targets) if y is not None))
    n = sum(labels)
    microbatch = [sums[0] + sums[1], sums[2] + sums[3]]
    counts = [labels[0] + labels[1], labels[2] + labels[3]]
    expected = {
        "full_batch": sum(sums) / n,
        "accum_global_n": sum(sums) / n,
        "ddp_pn_scale": sum(sums) / n,
        "accum_microbatch_mean": (microbatch[0] / counts[0] + microbatch[1] / counts[1]) / 2,
        "ddp_mean_of_means": (microbatch[0] / counts[0] + microbatch[1] / counts[1]) / 2,
    }
    for row in experiment.report["branches"]:
        assert math.isclose(row["loss"], expected[row["name"]], rel_tol=1e-11), row["name"]


@pytest.mark.parametrize(
    "labels, needle",
    [
        ("40,7,0,200", "labels[3]=200"),
        ("40,7,0", "4 counts"),
        ("40,-1,0,2", "labels[1]=-1"),
        ("x", "labels"),
    ],
)
def test_bad_labels_exit_2_with_one_line(labels, needle):
    done = subprocess.run(
        [sys.executable, "-m", "pclab", "run", "transformer", "--json", "--labels", labels],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        done.stdout == "" and len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"labels": (97, 0, 0, 0)},
        {"labels": (1, 1, 1, 78)},
        {"labels": (1.5, 0, 0, 0)},
        {"world_size": 3},
    ],
)
def test_run_refuses_bad_parameters_before_launching(kwargs):
    with pytest.raises(InvalidInput):
        pclab.experiments.transformer.run(**{"labels": data.DEFAULT_LABELS, **kwargs})


@given(st.lists(st.integers(0, 60), min_size=4, max_size=4))
def test_theory_of_the_microbatch_mean(labels):
    """Closed form: equal weighting of the two microbatch means is the token mean exactly
    when both microbatches hold the same positive count, and undefined when one is empty."""
    first, second = labels[0] + labels[1], labels[2] + labels[3]
    predicted = transformer.expected_correct("accum_microbatch_mean", labels, 2)
    assert predicted == (None if 0 in (first, second) else first == second)
    assert (
        transformer.expected_correct("ddp_mean_of_means", labels, 2) == predicted
    )  # same split at P = 2
    assert transformer.expected_correct("ddp_pn_scale", labels, 2) is True
