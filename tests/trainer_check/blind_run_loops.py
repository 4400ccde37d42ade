"""Each blind run-mode loop (blind_run/) replayed by hand on a `blind_run_reference.Run`:
every rank in one process, the ranks' gradient reduction written out (a summed all_reduce
adds each rank's c; DDP's mean adds c / P), the optimizer, zero_grad and the scheduler where
the file has them. No pclab code. `SCENARIOS`: term counts of the account's own,
[rank][epoch][microbatch] at P = 2, K = 2 (two epochs of 5), shaped like the check's three.
"""

from __future__ import annotations

import math


def _windows(run, epoch: int, k: int) -> list[tuple[int, int, int]]:
    """(start, stop, global N) of each window of `epoch`, the tail included."""
    m = len(run.data[0][epoch])
    return [(s, min(s + k, m), run.count(epoch, s, s + k)) for s in range(0, m, k)]


def _epochs(run) -> range:
    return range(len(run.data[0]))


def _window_backward(run, e: int, start: int, stop: int, c: float) -> None:
    for r in range(run.world):
        for i in range(start, stop):
            run.backward(r, e, i, c)


def _updates(run, k: int) -> int:
    return sum(n > 0 for e in _epochs(run) for _, _, n in _windows(run, e, k))


def correct_hand_window(run, k):
    run.build_schedule(_updates(run, k))
    for e in _epochs(run):
        for start, stop, n in _windows(run, e, k):
            if n:
                run.zero_grad()
                _window_backward(run, e, start, stop, 1 / n)  # summed all_reduce
                run.step()
                run.schedule_step()
    return run


def nanogpt_divide_by_k(run, k):
    for e in _epochs(run):
        for start, stop, n in _windows(run, e, k):
            if not n:
                continue
            for i in range(start, stop):
                for r in range(run.world):  # each microbatch's mean (0 terms: its sum) / K
                    terms = run.terms(r, e, i)
                    run.backward(r, e, i, (1 / terms if terms else 1) / k / run.world)
            run.step()
            run.zero_grad()
    return run


def tail_never_steps(run, k, schedule_length: int | None = None):
    """A step every K-th microbatch of an epoch; with a schedule (built for schedule_length),
    one schedule step after each optimizer step."""
    if schedule_length is not None:
        run.build_schedule(schedule_length)
    for e in _epochs(run):
        windows = _windows(run, e, k)
        for i in range(len(run.data[0][e])):
            n = windows[i // k][2]
            if n:
                for r in range(run.world):
                    run.backward(r, e, i, 1 / n)
            if (i + 1) % k == 0 and n:
                run.step()
                run.zero_grad()
                if schedule_length is not None:
                    run.schedule_step()
    return run


def tail_never_steps_short_schedule(run, k):
    return tail_never_steps(run, k, len(run.data[0][0]) // k * len(run.data[0]))


def zero_grad_per_epoch(run, k):
    for e in _epochs(run):
        run.zero_grad()
        for start, stop, n in _windows(run, e, k):
            if n:
                _window_backward(run, e, start, stop, run.world / n / run.world)  # x P, DDP mean
                run.step()
    return run


def zero_grad_per_epoch_linear(run, k):
    return zero_grad_per_epoch(run, k)  # the same loop and data, another model


def step_every_microstep(run, k):
    for e in _epochs(run):
        for start, stop, n in _windows(run, e, k):
            for i in range(start, stop) if n else ():
                for r in range(run.world):
                    run.backward(r, e, i, 1 / n)
                run.step()
                run.zero_grad()
    return run


def scheduler_per_microstep(run, k):
    run.build_schedule(_updates(run, k))
    for e in _epochs(run):
        windows, m = _windows(run, e, k), len(run.data[0][e])
        for i in range(m):
            n = windows[i // k][2]
            if not n:
                continue
            for r in range(run.world):
                run.backward(r, e, i, 1 / n)  # x P over N, DDP's mean
            if (i + 1) % k == 0 or i + 1 == m:
                run.step()
                run.zero_grad()
            run.schedule_step()
    return run


def _per_update(run, k, schedule_length: int, step_on_skip: bool = False):
    """One update per window over its global N; the schedule built for `schedule_length`."""
    run.build_schedule(schedule_length)
    for e in _epochs(run):
        for start, stop, n in _windows(run, e, k):
            if not n:
                if step_on_skip:
                    run.schedule_step()
                continue
            run.zero_grad()
            _window_backward(run, e, start, stop, 1 / n)
            run.step()
            run.schedule_step()
    return run


def schedule_len_over_k(run, k):
    return _per_update(run, k, len(run.data[0][0]) // k * len(run.data[0]))


def scheduler_on_skip(run, k):
    windows = math.ceil(len(run.data[0][0]) / k) * len(run.data[0])
    return _per_update(run, k, windows, step_on_skip=True)


def skips_both_ddp(run, k):
    return _per_update(run, k, _updates(run, k))  # x P / N under DDP's mean: 1 / N


def skips_both_ceil_length(run, k):
    return _per_update(run, k, math.ceil(len(run.data[0][0]) / k) * len(run.data[0]))


REPLAYS = {
    f.__name__: f
    for f in (
        correct_hand_window,
        nanogpt_divide_by_k,
        tail_never_steps,
        tail_never_steps_short_schedule,
        zero_grad_per_epoch,
        zero_grad_per_epoch_linear,
        step_every_microstep,
        scheduler_per_microstep,
        schedule_len_over_k,
        scheduler_on_skip,
        skips_both_ddp,
        skips_both_ceil_length,
    )
}

SCENARIOS = {
    "uneven": [[[3, 14, 9, 5, 16], [11, 6, 2, 12, 7]], [[9, 1, 4, 16, 13], [15, 13, 10, 3, 4]]],
    "empty_window": [
        [[3, 14, 0, 0, 16], [11, 6, 2, 12, 7]],
        [[9, 1, 0, 0, 13], [15, 13, 10, 3, 4]],
    ],
    "equal_counts": [[[8] * 5, [8] * 5], [[8] * 5, [8] * 5]],
}
