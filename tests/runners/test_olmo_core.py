"""OLMo-core's TransformerTrainModule (FSDP) through the trainer check
(examples/frameworks/olmo_core/olmo_core_train_module.py), from its own environment: ai2-olmo-core
3.0.0 would move the lab's huggingface_hub from 2.4.0 to 1.33.0, so the check runs under the Python
`python -m bench.framework_env ai2-olmo-core` builds ($PCL_AI2_OLMO_CORE_PYTHON, else
$TMPDIR/pcl-ai2-olmo-core). Without one, the run's tests skip and say how to build it.

What ai2-olmo-core 3.0.0 measured (torch 2.13.0, float32, P = 2, K = 2), pinned against
weights computed from the counts alone: each rank's summed loss divided by its own label count
(`loss_div_factor`), FSDP2 averaging over the ranks: DDP's mean of local means,
weight x N = N / (P n_r).

    python -m pytest tests/runners/test_olmo_core.py -q
"""

from __future__ import annotations

import json
import sys

import pytest
from runner_support import assert_measures_its_record, run_in_own_environment

from pclab.experiments.trainer_check import frameworks

ADAPTER = "olmo_core_train_module"
TRAINER = frameworks.BY_CODE[ADAPTER].path
STEPS_PER_SCENARIO = 2  # the check's train_step calls: its optimizer, then SGD at lr 1
REL = 1e-5  # float32 (DTYPE)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One `pclab check olmo_core_train_module.py --json` under OLMo-core's Python."""
    folder = tmp_path_factory.mktemp("olmo_core")
    done = run_in_own_environment(
        "ai2-olmo-core", folder, "-m", "pclab", "check", str(TRAINER), "--json"
    )
    assert done.returncode == 1, done.stderr[-3000:]  # a different update, as recorded
    lines = [json.loads(x) for x in (folder / "record.jsonl").read_text().splitlines()]
    return json.loads(done.stdout), lines


def _local_means(counts):
    total, ranks = sum(map(sum, counts)), len(counts)
    return [[total / (ranks * sum(row)) if n else None for n in row] for row in counts]


@pytest.mark.slow
def test_each_rank_divides_by_its_own_count(run):
    check, _ = run
    assert check["status"] == "different" and check["dtype"] == "float32"
    for s in check["scenarios"]:
        if s["name"] == "no_labels":
            assert s["passed"] and s["weights"] == [[None, None], [None, None]]
            continue
        for got_row, want_row in zip(s["weights"], _local_means(s["counts"]), strict=True):
            for got, want in zip(got_row, want_row, strict=True):
                assert (got is None) == (want is None), (s["name"], s["weights"])
                if want is not None:
                    assert got == pytest.approx(want, rel=REL), (s["name"], s["weights"])
    uneven = next(s for s in check["scenarios"] if s["name"] == "uneven")
    assert uneven["scheme"] == "replica_mean" and uneven["counts"] == [[14, 7], [5, 3]]
    assert "optimizer_not_stepped" in {d["code"] for d in check["diagnoses"]}


@pytest.mark.slow
def test_every_step_went_through_the_train_module(run):
    """Per rank, one line per train_step: the module's own optimizer stepped once over
    FSDP's DTensor shards, and its loss was divided by the rank's own terms."""
    check, lines = run
    for rank in (0, 1):
        mine = [x for x in lines if x["adapter"] == ADAPTER and x["rank"] == rank]
        assert len(mine) == len(check["scenarios"]) * STEPS_PER_SCENARIO
        calls = [s for s in check["scenarios"] for _ in range(STEPS_PER_SCENARIO)]
        for line, s in zip(mine, calls, strict=True):
            assert line["optimizer_steps"] == 1 and line["optimizer_class"] == "SGD"
            assert not line["optimizer_is_the_one_passed"]
            assert (line["wrapped_in"], line["parameter_type"]) == ("FSDPTransformer", "DTensor")
            assert line["counted"] == sum(s["counts"][rank]), s["name"]


@pytest.mark.slow
def test_the_run_measures_what_the_olmo_core_record_says(run):
    assert_measures_its_record(run[0], ADAPTER, REL)


def test_checking_the_contract_imports_no_olmo_core():
    from pclab.experiments.trainer_check.trainer_file import load

    assert load(TRAINER).capacity == 16
    assert "olmo_core" not in sys.modules
