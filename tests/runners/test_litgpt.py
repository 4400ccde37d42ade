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

    python -m pytest tests/runners/test_litgpt.py -q
"""

from __future__ import annotations

import json
import sys

import pytest
from runner_support import ROOT, assert_measures_its_record, run_in_own_environment

from bench import framework_env
from pclab.experiments.trainer_check import frameworks

ADAPTER = "litgpt_finetune"
TRAINER = frameworks.BY_CODE[ADAPTER].path
STEPS_PER_SCENARIO = 2  # the check's train_step calls: its optimizer, then SGD at lr 1


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One `pclab check litgpt_finetune.py --json` under litgpt's Python, with every rank's
    evidence; this checkout's package first on the path (the environment's may be another's)."""
    folder = tmp_path_factory.mktemp("litgpt")
    done = run_in_own_environment("litgpt", folder, "-m", "pclab", "check", str(TRAINER), "--json")
    assert done.returncode == 1, done.stderr[-3000:]  # a different update, as recorded
    lines = [json.loads(x) for x in (folder / "record.jsonl").read_text().splitlines()]
    return json.loads(done.stdout), lines


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
