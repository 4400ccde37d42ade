"""The trainer check's coupled mode on real Gloo processes: every bundled coupled example
(and a file written against the contract alone) gets the scheme its train_step applies by
construction, in every default scenario, through the same report, JSON and exit codes as
the token mode. Three warm launches for the whole module: P = 2 with K = 2, P = 2 with
K = 1 (several files each), and P = K = 1."""

from __future__ import annotations

import pytest
from runner_support import ROOT

from pclab.experiments.trainer_check import EXPERIMENT
from pclab.experiments.trainer_check.coupled_scenarios import NAMES
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.report import exit_code
from pclab.experiments.trainer_check.summary import render

EXAMPLES = ROOT / "examples" / "trainers"
TRAINERS = ROOT / "tests" / "trainers"
# (file, K) -> (status, scheme in every scenario, matching_schemes), at P = 2
EXPECTED = {
    ("gradcache", 2): ("same_update", "global_batch", ["global_batch"]),
    ("naive_accumulation", 2): ("different", "microbatch_pool", ["microbatch_pool"]),
    ("naive_accumulation_gather", 2): ("different", "microstep_pool", ["microstep_pool"]),
    ("remote_detached", 2): ("different", "remote_detached", ["remote_detached"]),
    ("documents_without_gradient", 2): ("different", "query_path_only", ["query_path_only"]),
    ("gradcache_symmetric", 2): ("same_update", "global_batch", ["global_batch"]),
    ("gradcache", 1): ("same_update", "global_batch", ["global_batch", "microstep_pool"]),
    ("gather_with_grad", 1): ("same_update", "global_batch", ["global_batch", "microstep_pool"]),
    ("scaled_by_world_size", 1): ("different", "scaled", []),
    ("whole_batch_detached", 1): ("different", "scaled", []),
    ("batchnorm_ddp", 1): ("different", "rank_pool", ["rank_pool", "microbatch_pool"]),
}


def _path(name: str) -> str:
    example = EXAMPLES / f"{name}.py"
    return str(example if example.exists() else TRAINERS / f"{name}.py")


def _launch(runtime, names, world_size, accum):
    params = Params.checked([_path(n) for n in names], world_size=world_size, accum=accum)
    result = EXPERIMENT.run(params, timeout_s=600, runtime=runtime)
    assert result.ok, result.message
    return dict(zip(names, result.report["checks"]))


UNUSABLE = ("coupled_vector_loss",)  # in the K = 2 launch too


@pytest.fixture(scope="module")
def checks(warm_pool):
    """{(file, K): its check}: one launch per K, every file of that K in it."""
    found = {}
    for accum in (2, 1):
        names = [n for n, k in EXPECTED if k == accum] + list(UNUSABLE if accum == 2 else ())
        found |= {(n, accum): c for n, c in _launch(warm_pool, names, 2, accum).items()}
    return found


@pytest.mark.parametrize("case", EXPECTED, ids=lambda c: f"{c[0]}-K{c[1]}")
def test_each_example_gets_its_scheme_in_every_scenario(checks, case):
    status, scheme, matching = EXPECTED[case]
    check = checks[case]
    assert check["mode"] == "coupled" and check["status"] == status, check["diagnoses"]
    assert exit_code(check) == {"same_update": 0, "different": 1}[status]
    assert [s["name"] for s in check["scenarios"]] == list(NAMES)
    for s in check["scenarios"]:
        assert s["scheme"] == scheme and s["matching_schemes"] == matching, s
        assert s["verdict"] == status and s["explanation"]
        assert all(row == s["sizes"][0] for row in s["sizes"])  # a gather needs it


def test_a_correct_trainer_matches_the_reference_to_rounding(checks):
    for case in (("gradcache", 2), ("gradcache", 1), ("gather_with_grad", 1)):
        assert all(s["max_abs_diff"] < 1e-14 for s in checks[case]["scenarios"])


def test_the_x_p_compensation_reports_its_factor_on_every_parameter(checks):
    for s in checks[("scaled_by_world_size", 1)]["scenarios"]:
        (group,) = s["scale_groups"]
        assert group["factor"] == pytest.approx(2.0, rel=1e-9)  # P = 2
        assert set(group["parameters"]) == {"encoder.weight", "encoder.bias", "logit_scale"}
        assert s["residual"] < 1e-9 and s["fits"]["global_batch"]["factor"] == pytest.approx(2)


def test_the_summary_names_the_scheme_and_the_fix(checks):
    text = render(checks[("naive_accumulation_gather", 2)])
    assert text.startswith("FAIL") and "scheme microstep_pool" in text
    assert "fix:" in text and "GradCache" in text and "page 04" in text
    text = render(checks[("gather_with_grad", 1)])
    assert "PASS" in text and "the same objective at this P and K" in text


def test_nothing_split_is_no_evidence(warm_pool):
    (check,) = _launch(warm_pool, ["gradcache"], 1, 1).values()
    assert check["status"] == "no_evidence" and exit_code(check) == 2
    assert any("P = 1 and K = 1" in d["message"] for d in check["diagnoses"])
    assert all(s["verdict"] == "no_evidence" for s in check["scenarios"])


def test_a_vector_batch_loss_is_unusable_before_any_scenario(checks):
    check = checks[("coupled_vector_loss", 2)]
    assert check["status"] == "unusable" and exit_code(check) == 2 and check["scenarios"] == []
    (d,) = check["diagnoses"]
    assert d["code"] == "objective_invalid" and "batch_loss" in d["message"]


def test_a_symmetric_loss_leaves_the_paths_out_and_says_why(checks):
    check = checks[("gradcache_symmetric", 2)]
    codes = [d["code"] for d in check["diagnoses"]]
    assert codes == ["candidate_left_out"]
    for s in check["scenarios"]:
        assert set(s["left_out"]) == {"remote_detached", "query_path_only"}
        assert s["candidates"] == ["global_batch", "rank_pool", "microbatch_pool", "microstep_pool"]


def test_a_whole_batch_loss_with_detached_rows_gets_a_factor_per_group(checks):
    """The encoder / P, the temperature x 1 (OpenCLIP local_loss=False, no gradient gather)."""
    for s in checks[("whole_batch_detached", 1)]["scenarios"]:
        factors = {g["factor"]: set(g["parameters"]) for g in s["scale_groups"]}
        assert sorted(factors) == pytest.approx([0.5, 1.0], rel=1e-9)
        assert factors[min(factors)] == {"encoder.weight", "encoder.bias"}
        assert factors[max(factors)] == {"logit_scale"}


@pytest.fixture(scope="session")
def unequal():
    """One real cold launch (torchrun, as `pclab check` runs it) of two coupled files with
    unequal items per rank (--counts "2;3"): gather_with_grad.py's all_gather aborts rank 0
    (Gloo: a size mismatch), the check runs again from the next scenario, batchnorm_ddp.py
    (no gather) is judged. {file: its check}, and the summary of the first."""
    names = ["gather_with_grad", "batchnorm_ddp"]
    params = Params.checked([_path(n) for n in names], counts="2;3")
    result = EXPERIMENT.run(params, timeout_s=600)
    assert result.ok, result.message
    return dict(zip(names, result.report["checks"]))


def test_a_gather_of_unequal_items_is_a_collective_mismatch_in_its_scenario(unequal):
    check = unequal["gather_with_grad"]
    assert check["mode"] == "coupled" and check["status"] == "different" and exit_code(check) == 1
    (s,) = check["scenarios"]
    assert s["name"] == "custom" and s["sizes"] == [[2], [3]]
    assert s["verdict"] == "different" and s["ranks_agree"] is None and s["scheme"] is None
    (d,) = check["diagnoses"]
    assert d["code"] == "collective_mismatch" and d["scenario"] == "custom"
    assert d["sizes"] == [[2], [3]] and d["rank"] == 0
    message = d["message"]
    assert "different numbers of items in microstep 0 (rank 0: 2, rank 1: 3)" in message
    assert "rank 0 was in train_step() at tiny_embedder.py:" in message  # the user's line
    assert {str(r) for r in d["ranks"]} == {"0", "1"} and all(
        "train_step()" in w for w in d["ranks"].values()
    ), d["ranks"]  # what each rank said it was doing (a loaded run once lacked one's train_step)
    for raw in ("pair.cc", "EnforceNotMet", "terminate called"):  # never raw Gloo
        assert raw not in message
    assert "collective_mismatch" in render(check) and "DIFFERENT" in render(check)


def test_the_file_after_the_dead_rank_is_still_judged(unequal):
    check = unequal["batchnorm_ddp"]
    (s,) = check["scenarios"]
    assert s["scheme"] == "rank_pool" and s["verdict"] == "different" and s["ranks_agree"]
    assert [d["code"] for d in check["diagnoses"]] == []
