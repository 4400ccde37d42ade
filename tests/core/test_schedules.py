"""core.schedules against torch's own scheduler: a LambdaLR on a real SGD optimizer, stepped
as each mistaken loop steps it, read at every true update."""

from __future__ import annotations

import pytest
import torch

from pclab.core import validation as v
from pclab.core.schedules import MISTAKES, RunShape, lr_trajectory, rate


def _torch_rates(shape: RunShape, mistake: str, warmup: int) -> list[float]:
    windows = shape.windows()
    skipped = set(shape.skipped)
    per_epoch = -(-shape.microbatches_per_epoch // shape.accum_steps)
    true_updates = len(windows) - len(skipped)
    length = (
        shape.epochs * (shape.microbatches_per_epoch // shape.accum_steps)
        if mistake == "short"
        else true_updates
    )
    assert len(windows) == shape.epochs * per_epoch
    theta = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([theta], lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: s / warmup if s < warmup else max(0.0, (length - s) / max(1, length - warmup)),
    )
    rates = []
    for index, microsteps in enumerate(windows):
        if mistake == "per_microstep":  # scheduler.step() after every backward
            for j in range(microsteps):
                if j == microsteps - 1 and index not in skipped:
                    rates.append(optimizer.param_groups[0]["lr"])
                    optimizer.step()
                schedule.step()
            continue
        if index in skipped:
            if mistake == "skip_advances":
                optimizer.step()
                schedule.step()
            continue
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        for _ in range(shape.world_size if mistake == "prepared" else 1):
            schedule.step()
    return rates


SHAPES = [RunShape(5, 2, 2, 2), RunShape(5, 2, 2, 2, skipped=(1,)), RunShape(7, 3, 3, 4, (0, 4))]


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("warmup", [0, 2])
def test_rates_are_torchs_scheduler_stepped_as_the_loop_steps_it(shape, mistake, warmup):
    got = lr_trajectory(shape, mistake, warmup).rates
    assert list(got) == pytest.approx(_torch_rates(shape, mistake, warmup))


def test_a_prepared_scheduler_on_two_ranks_is_20_percent_along_after_10_updates():
    prepared = lr_trajectory(RunShape(100, 1, 1, 2), "prepared")
    assert prepared.steps[10] == 20 and 1 - prepared.rates[10] == pytest.approx(0.2)
    assert prepared.ends_at == 50  # the schedule is over half way through the run
    assert lr_trajectory(RunShape(100, 1, 1, 2), "intended").ends_at is None


def test_a_schedule_built_for_len_over_k_ends_before_the_run():
    short = lr_trajectory(RunShape(5, 2, 2, 1), "short")  # 6 updates, a schedule of 4
    assert short.length == 4 and short.ends_at == 4 and short.rates[4:] == (0.0, 0.0)


def test_rate_is_warmup_then_linear_decay():
    assert [rate(s, 10, 2) for s in (0, 1, 2, 6, 10, 12)] == [0, 0.5, 1.0, 0.5, 0, 0]


@pytest.mark.parametrize(
    "shape, field",
    [
        (RunShape(0, 2, 1, 1), "microbatches_per_epoch"),
        (RunShape(5, 2, 1, 1, (3,)), "skipped"),
        (RunShape(5, 1, 5000, 1), "epochs"),
    ],
)
def test_bad_shapes_name_the_value(shape, field):
    with pytest.raises(v.InvalidInput) as caught:
        lr_trajectory(shape, "intended")
    assert caught.value.name == field
