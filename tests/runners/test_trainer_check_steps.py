"""The trainer check's small steps in one process, at the edges the bundled trainers never
reach: a NaN or infinite gap, a DTYPE's short name, the floor-raised tolerance, and, on a
one-rank Gloo group, rank_spread and a sharded (DTensor) optimizer state (no torchrun; the
real launches are in test_trainer_check.py and test_trainer_check_v2.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from pclab.experiments.trainer_check import pipeline, states, trainer
from pclab.experiments.trainer_check.trainer_file import DTYPES


@pytest.mark.parametrize("name", DTYPES)
def test_dtype_name_is_what_dtype_spells(name):
    assert states.dtype_name(getattr(torch, name)) == name


def test_first_not_in_names_the_first_tensor_in_another_dtype():
    named = {
        "a": torch.zeros(2, dtype=torch.float64),
        "b": torch.zeros(2, dtype=torch.bfloat16),
        "c": torch.zeros(2, dtype=torch.float32),
    }
    assert states.first_not_in(named, "float64") == ("b", "bfloat16")
    assert states.first_not_in({"a": named["a"]}, "float64") is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_compare_reports_a_non_finite_gap_as_no_number(bad):
    want = {"parameter w": torch.tensor([1.0, 2.0], dtype=torch.float64)}
    got = {"parameter w": torch.tensor([1.0, bad], dtype=torch.float64)}
    assert states.compare(got, want, 1e-10) == (
        None,
        {"tensor": "parameter w", "abs_diff": None, "why": "non-finite"},
    )
    assert states.floor(got, got, "float64") is None  # NaN or inf largest: no floor
    assert states.compare(want, want, 1e-10) == (0.0, None)


def test_scenario_tolerance_is_raised_to_ten_floors_never_lowered():
    assert pipeline.scenario_tolerance(1e-10, None) == 1e-10
    assert pipeline.scenario_tolerance(1e-10, 1e-16) == 1e-10
    assert pipeline.scenario_tolerance(1e-10, 1e-6) == pytest.approx(1e-5)


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("values", [[0.5, -2.0], [math.nan, 1.0], [math.inf, 1.0], [-math.inf]])
def test_rank_spread_counts_the_same_non_finite_values_as_agreement(one_rank_group, values):
    """Ranks that hold the same NaN or inf agree (issue 29: that is non_finite, never ranks
    apart); on one rank every state agrees with itself."""
    state = {"parameter w": torch.tensor(values, dtype=torch.float64)}
    assert states.rank_spread(state, torch.device("cpu")) == 0.0


def test_a_non_finite_value_across_from_a_finite_one_is_no_agreement():
    """What rank_spread's MAX and MIN see where one rank holds NaN and another 1.0: the codes
    it puts in for NaN and inf spread past 1e300, so the spread is None (ranks differ)."""
    coded = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64).nan_to_num(
        nan=states.NAN_CODE, posinf=states.INF_CODE, neginf=-states.INF_CODE
    )
    assert all(abs(float(x) - 1.0) >= 1e300 for x in coded)
    assert len({float(x) for x in coded}) == 3  # NaN, inf and -inf stay apart


def test_snapshot_gathers_a_sharded_optimizer_state(one_rank_group):
    """An optimizer over DTensor parameters (FSDP2, OLMo-core) keeps its moments as DTensors:
    snapshot reads them whole (full_tensor), the same numbers as Adam over a plain tensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    start = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)
    grad = torch.tensor([[0.25, 1.0], [-0.5, 2.0]], dtype=torch.float64)
    mesh = init_device_mesh("cpu", (1,))
    sharded = torch.nn.Linear(2, 2, bias=False).double()
    sharded.weight = torch.nn.Parameter(distribute_tensor(start.clone(), mesh, [Shard(0)]))
    plain = torch.nn.Linear(2, 2, bias=False).double()
    plain.weight = torch.nn.Parameter(start.clone())
    states_after = []
    for model, g in ((sharded, distribute_tensor(grad, mesh, [Shard(0)])), (plain, grad)):
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        model.weight.grad = g
        optimizer.step()
        whole = getattr(model.weight, "full_tensor", model.weight.detach)()  # as full_parameters
        states_after.append(trainer.snapshot(model, optimizer, {"weight": whole.detach()}))
    got, want = states_after
    assert set(got) == set(want) >= {"optimizer exp_avg of weight", "optimizer step of weight"}
    for name in want:
        assert type(got[name]) is torch.Tensor, name  # a plain tensor, not a DTensor
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-15)
