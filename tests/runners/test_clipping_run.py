"""The coordinated clipped step run for real, once: two Gloo processes, finite then overflow.

One launch (`pclab.experiments.clipping.run(inject_overflow=1)`) serves every test here. The test
checks the raw per-rank outputs itself - against closed forms (the seed's n = 13), against
core.clipping, and against the worker's torch references (clip_grad_norm_ on one process,
FSDP2 over the CPU mesh) - rather than trusting the report's own agree flags; then it checks
that those flags do fail when a rank's output is tampered with.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import pytest
import torch
from runner_support import ROOT

import pclab.experiments.clipping as runner
from pclab.core import clipping
from pclab.core.validation import InvalidInput
from pclab.experiments.clipping import cli as clipping_cli
from pclab.experiments.clipping.params import scenario_grads
from pclab.experiments.clipping.report import build_report
from pclab.ui.clipping_run_view import clipping_summary_rows

SCALE, TAU, LR, MOMENTUM = 8.0, 1.0, 0.1, 0.9
IDS = ("w0", "shared", "w1")


@pytest.fixture
def ranks(real_run):
    result, _ = real_run
    assert result.ok, result.message
    return result.ranks


def predicted(inject_rank):
    return clipping.clip_report(scenario_grads(inject_rank), TAU, SCALE, LR, momentum=MOMENTUM)


def test_launch_succeeds_and_leaves_nothing(real_run):
    result, leftovers = real_run
    assert result.ok, result.message
    assert leftovers == []
    assert [r["rank"] for r in result.ranks] == [0, 1]
    assert {r["backend"] for r in result.ranks} == {"gloo"}
    assert {r["torch"] for r in result.ranks} == {torch.__version__}


def test_finite_step_is_identical_on_both_ranks_and_equals_core(ranks):
    real = [r["scenarios"]["finite"]["protocol"] for r in ranks]
    core = predicted(None)
    for row in real:
        assert (
            row["skip"] is False
            and row["nonfinite_local"] is False
            and row["decision_agreed"] is True
        )
        assert row["norm"] == real[0]["norm"] and row["coefficient"] == real[0]["coefficient"]
        assert row["successful_steps"] == 1
    assert real[0]["norm"] == pytest.approx(13.0, rel=1e-15)  # the seed: sqrt(3^2 + 4^2 + 12^2)
    assert real[0]["coefficient"] == pytest.approx(1 / 13, rel=1e-15)
    assert real[0]["params"]["shared"] == real[1]["params"]["shared"]  # one model on both ranks
    for rank, row in enumerate(real):
        held = core.outcomes["global"][rank]
        assert row["params"] == pytest.approx(held.params, abs=1e-15)
        assert row["momentum_buffers"] == pytest.approx(held.momentum_buffers, abs=1e-15)
    assert real[0]["params"]["w0"] == pytest.approx(1 - LR * 3 / 13, abs=1e-15)


def test_overflow_on_rank_one_stops_both_ranks_with_state_untouched(ranks):
    real = [r["scenarios"]["overflow"]["protocol"] for r in ranks]
    assert [row["nonfinite_local"] for row in real] == [False, True]
    for row in real:
        assert row["skip"] is True and row["decision_agreed"] is True
        assert row["norm"] is None and row["coefficient"] is None
        assert set(row["params"].values()) == {1.0} and row["momentum_buffers"] == {}
        assert row["successful_steps"] == 0
    assert predicted(1).skip is True


def torch_slack(norm: float) -> float:
    """How far torch's (n + 1e-6) may move a parameter from core's exact coefficient."""
    biggest = 12.0  # the largest unscaled gradient of the layout
    return LR * biggest * min(1.0, TAU / norm) * 1e-6 / norm + 1e-15


@pytest.mark.parametrize("reference", ["reference", "fsdp2"])
def test_torch_references_match_core(ranks, reference):
    first = ranks[0]["scenarios"]
    if reference == "fsdp2" and not first["finite"]["fsdp2"]["supported"]:
        assert first["finite"]["fsdp2"]["reason"].startswith("not supported on this torch/backend")
        pytest.skip(first["finite"]["fsdp2"]["reason"])
    for r in ranks[1:]:  # every rank computed (or, for FSDP2, gathered) the same reference
        for name in ("finite", "overflow"):
            assert r["scenarios"][name][reference]["params"] == first[name][reference]["params"]
    finite, overflow = first["finite"][reference], first["overflow"][reference]
    core = predicted(None)
    assert finite["skip"] is False and finite["successful_steps"] == 1
    assert finite["norm"] == pytest.approx(13.0, rel=1e-12)
    assert finite["params"] == pytest.approx(core.params_after, abs=torch_slack(13.0))
    assert (
        finite["params"] != core.params_after
    )  # torch's epsilon is visible: a real, separate path
    assert finite["scaler_scale_after"] == SCALE
    assert overflow["skip"] is True and overflow["successful_steps"] == 0
    assert overflow["norm"] in ("inf", "nan")
    assert overflow["params"] == dict.fromkeys(IDS, 1.0)
    assert overflow["scaler_scale_after"] == SCALE / 2  # GradScaler's own back-off policy


def test_fsdp2_shards_every_element_once_and_agrees_on_found_inf(ranks):
    if not ranks[0]["scenarios"]["finite"]["fsdp2"]["supported"]:
        pytest.skip(ranks[0]["scenarios"]["finite"]["fsdp2"]["reason"])
    finite = [r["scenarios"]["finite"]["fsdp2"] for r in ranks]
    assert [f["placements"] for f in finite] == [["S(0)"], ["S(0)"]]
    shards = [f["local_scaled_grad"] for f in finite]
    assert sorted(x for shard in shards for x in shard) == sorted([24.0, 32.0, 96.0])  # each once
    overflow = [r["scenarios"]["overflow"]["fsdp2"] for r in ranks]
    finite_shard = [all(isinstance(x, float) for x in f["local_scaled_grad"]) for f in overflow]
    assert finite_shard.count(True) == 1  # only one rank's shard holds the inf ...
    assert all(f["skip"] for f in overflow)  # ... and both skip


def test_report_flags_agreement_and_catches_tampering(real_run):
    result, _ = real_run
    report = result.report
    assert report["agree"] is True and report["fsdp2_supported"] in (True, False)
    for s in report["scenarios"].values():
        assert s["ranks_identical"] and s["agree_core"] and s["agree_reference"]
        assert s["agree_fsdp2"] in (True, None)
    rows = clipping_summary_rows(report)
    assert [(r["scenario"], r["rank"]) for r in rows] == [
        ("finite", 0),
        ("finite", 1),
        ("overflow", 0),
        ("overflow", 1),
    ]
    assert all(r["agrees"] for r in rows)

    drifted = copy.deepcopy(result.ranks)
    drifted[1]["scenarios"]["finite"]["protocol"]["params"]["shared"] += 1e-9
    bad = build_report(tuple(drifted))
    assert bad["scenarios"]["finite"]["ranks_identical"] is False and bad["agree"] is False
    stepped = copy.deepcopy(result.ranks)
    stepped[0]["scenarios"]["overflow"]["protocol"]["successful_steps"] = 1
    assert build_report(tuple(stepped))["agree"] is False


def test_cli_prints_the_report_as_json(real_run, monkeypatch, capsys):
    result, _ = real_run
    seen = {}

    class Recorded:  # the session's real run, handed back for whatever the CLI asks
        name, timeout_s = "clipping", 180.0
        params = runner.EXPERIMENT.params  # Params.checked: the CLI reads its options from it

        def run(self, params, **kwargs):
            seen.update(inject_overflow=params.inject_overflow, nonfinite=params.nonfinite)
            return result

    monkeypatch.setattr(clipping_cli, "EXPERIMENT", Recorded())
    assert clipping_cli.main(["--json", "--inject-overflow", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(result.report))
    assert seen == {"inject_overflow": 1, "nonfinite": "inf"}


@pytest.mark.parametrize(
    "args", [["--inject-overflow", "2"], ["--inject-overflow", "x"], ["--nonfinite", "zero"]]
)
def test_cli_rejects_bad_arguments_in_one_line(args):
    done = subprocess.run(
        [sys.executable, "-m", "pclab", "run", "clipping", "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


@pytest.mark.parametrize(
    "kwargs", [{"inject_overflow": 2}, {"inject_overflow": -1}, {"nonfinite": "zero"}]
)
def test_run_validates_before_launching(kwargs):
    with pytest.raises(InvalidInput):
        runner.run(**kwargs)


def test_json_has_no_bare_infinity(real_run):
    text = json.dumps(real_run[0].report)
    assert "Infinity" not in text and "NaN" not in text
    assert math.isfinite(real_run[0].report["scenarios"]["finite"]["core"]["norm"])
