"""Issue 28's blind check: trainers written from the README's coupled contract alone
(tests/trainer_check/blind/) get, from the real check on Gloo processes, the scheme that an
independent one-process float64 computation (`blind_reference`, torch autograd, no pclab
code) names at the very sizes the check used; that account in turn names what each file was
written to do (WRITTEN_FOR). Two warm launches for the whole module, in a session fixture:
every file at P = 2, K = 2 (the defaults), and three at P = 3, K = 1. Measured: ~30 s on a
box at load 23-28 (17-23 s of it the warm pool's start and the two launches).

    PYTHONPATH=$PWD python -m pytest -n 0 tests/trainer_check/test_blind_trainers.py"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

import blind_reference  # noqa: E402

from pclab.experiments.trainer_check import EXPERIMENT  # noqa: E402
from pclab.experiments.trainer_check.params import Params  # noqa: E402

LAUNCHES = {  # (P, K) -> the blind files checked in that one launch
    (2, 2): tuple(blind_reference.TRAINERS),
    (3, 1): ("times_world_size", "remote_detached_per_microstep", "whole_batch_detached_doc_bias"),
}
CASES = [(name, shape) for shape, names in LAUNCHES.items() for name in names]


# what each file was written to do, (P, K) -> scheme: the independent account must say so too
WRITTEN_FOR = {
    "gradcache_tower": {(2, 2): "global_batch", (3, 1): "global_batch"},
    "naive_accumulation_local": {(2, 2): "microbatch_pool", (3, 1): "rank_pool"},
    "accumulate_gather_with_grad": {(2, 2): "microstep_pool", (3, 1): "global_batch"},
    "remote_documents_detached": {(2, 2): "remote_detached", (3, 1): "remote_detached"},
    "remote_detached_per_microstep": {(2, 2): "other", (3, 1): "remote_detached"},
    "documents_frozen_everywhere": {(2, 2): "query_path_only", (3, 1): "query_path_only"},
    "times_world_size": {(2, 2): "scaled", (3, 1): "scaled"},
    "batchnorm_classifier_ddp": {(2, 2): "rank_pool", (3, 1): "rank_pool"},
    "whole_batch_detached_doc_bias": {(2, 2): "scaled", (3, 1): "scaled"},
    "batchnorm_accumulated_ddp": {(2, 2): "microbatch_pool", (3, 1): "rank_pool"},
}
SIZES = {(2, 2): [[3, 2], [3, 2]], (3, 1): [[4], [4], [4]]}


@pytest.mark.parametrize("name", blind_reference.TRAINERS)
def test_the_independent_account_names_what_each_file_was_written_to_do(name):
    for shape, scheme in WRITTEN_FOR[name].items():
        found = blind_reference.independent_scheme(name, SIZES[shape])
        assert _contract_name(found["scheme"]) == scheme, (shape, found)
    factors = blind_reference.independent_scheme(name, SIZES[(2, 2)]).get("factors", {})
    if name == "times_world_size":  # x P everywhere InfoNCE gives a gradient
        assert factors == pytest.approx({"tau": 2, "w_q.weight": 2, "w_d.weight": 2})
    if name == "whole_batch_detached_doc_bias":  # encoder / P, temperature x 1
        assert factors == pytest.approx(
            {"tau": 1, "query_proj.weight": 0.5, "doc_proj.weight": 0.5}
        )


@pytest.fixture(scope="session")
def blind_checks(warm_pool) -> dict:
    """{(file, (P, K)): its check}: one warm launch per (P, K), every file of it inside."""
    found = {}
    for (world_size, accum), names in LAUNCHES.items():
        paths = [str(blind_reference.BLIND / f"{n}.py") for n in names]
        params = Params.checked(paths, world_size=world_size, accum=accum)
        result = EXPERIMENT.run(params, timeout_s=600, runtime=warm_pool)
        assert result.ok, result.message
        checks = result.report["checks"]
        found |= {(n, (world_size, accum)): c for n, c in zip(names, checks, strict=True)}
    return found


def _contract_name(scheme: str) -> str:
    """The independent account's pools the README names none of (a path per microstep)
    can only be the check's `other`."""
    return "other" if "@" in scheme else scheme


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-P{c[1][0]}K{c[1][1]}")
def test_the_check_names_the_scheme_a_one_process_computation_names(blind_checks, case):
    name, _ = case
    check = blind_checks[case]
    assert check["mode"] == "coupled" and check["scenarios"], check["diagnoses"]
    for s in check["scenarios"]:
        mine = blind_reference.independent_scheme(name, s["sizes"])
        assert s["scheme"] == _contract_name(mine["scheme"]), (s["name"], mine, s["fits"])
        if mine["scheme"] == "scaled":
            factors = {p: g["factor"] for g in s["scale_groups"] for p in g["parameters"]}
            assert factors.keys() >= mine["factors"].keys(), (factors, mine["factors"])
            # only parameters with a gradient: see the test below for the others
            for parameter, factor in mine["factors"].items():
                assert factors[parameter] == pytest.approx(factor, rel=1e-9), parameter
        else:
            named = [m for m in mine.get("matching", []) if "@" not in m]
            assert sorted(s["matching_schemes"]) == sorted(named), (s["name"], mine)
        same = mine["scheme"] == "global_batch"
        assert s["verdict"] == ("same_update" if same else "different"), s["name"]


SCALED = [c for c in CASES if c[0] in ("times_world_size", "whole_batch_detached_doc_bias")]


@pytest.mark.parametrize("case", SCALED, ids=lambda c: f"{c[0]}-P{c[1][0]}K{c[1][1]}")
def test_a_factor_is_given_only_to_parameters_with_a_gradient(blind_checks, case):
    for s in blind_checks[case]["scenarios"]:
        mine = blind_reference.independent_scheme(case[0], s["sizes"])
        named = {p for g in s["scale_groups"] for p in g["parameters"]}
        assert named == set(mine["factors"]), (s["name"], s["scale_groups"])
