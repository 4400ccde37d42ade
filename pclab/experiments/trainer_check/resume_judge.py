"""A preempted run, judged (on each rank of the resumed launch): the killed launch's steps and
the resumed launch's, joined into one trajectory (each window's update from the launch that
took it last), against the one-process reference and the loop's own straight run, and what
went wrong named from what the two launches did:

    not_resumable         the resumed launch started over (its first step left from the
                          initial weights) although a checkpoint had been written
    data_replayed         it ran microbatches of windows the killed launch had stepped
    data_skipped          a window with labels was stepped by neither launch, and some of
                          its microbatches never ran
    scheduler_reset       its first rate is the schedule's first, not the one it had reached
    optimizer_state_lost  its first step's optimizer step count is below one more than the
                          steps the killed launch took before where it came back (AdamW's
                          bias correction shows it)
    counter_reset         it stepped where the loop never stopped does not (or a window that
                          run steps was stepped by neither launch though all of it ran): the
                          window boundary moved
    window_gradient_lost  killed mid-window, it came back inside that window past its start,
                          and the window's update lacks what was accumulated before the kill;
                          the window the reference's, or the loop's own (between two steps of
                          its straight run: a tail carried over an epoch-end checkpoint) where
                          the first resumed step starts from the straight run's weights, at
                          its rates, and still parts from it

Each code is named against the loop's straight run, so a loop that cuts its windows its own
way (torchtune carries an epoch's tail into the next) is not charged with that at a restart.

A resumed launch whose first microbatch is not one the check handed out (a loop that builds
its own inputs: TRL's SFTTrainer tokenizes text) cannot be placed: that kill point is
`no_evidence`, never judged from a guessed position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pclab.experiments.trainer_check.run_observe import Step
from pclab.experiments.trainer_check.run_reference import Update, Window
from pclab.experiments.trainer_check.states import (
    State,
    compare,
    parameters_of,
    readable,
    same_state,
)

RATE_RTOL = 1e-12


@dataclass(frozen=True)
class Launches:
    """What the two launches of one kill point did, on this rank."""

    killed: list[Step]  # the steps the killed launch took (saved as they happened)
    resumed: list[Step]  # the resumed launch's steps
    resumed_forwards: list[int]  # the run index of every microbatch the resumed launch ran
    straight: list[Step]  # the same loop, never stopped
    # the resumed launch ran an input the check handed out (a loop that tokenizes its own
    # text runs none): only then is it known where the run came back (from_first_handed_out)
    placed: bool = True


def from_first_handed_out(seen: list[int], given: list[bool]) -> tuple[list[int], bool]:
    """The resumed launch's forwards that say where it came back, and whether any does (or it
    ran none at all). `given`: per forward, its input was one the check handed out. A launch
    whose first forward was one is placed as it is; one whose framework ran batches of its own
    first and then only the check's (OLMo-core's dry run of a mock batch) is placed from the
    first of those; any other (TRL tokenizes its own text, so its inputs are the check's only
    by chance) cannot be placed."""
    if not given or given[0]:
        return seen, True
    lead = next((i for i, handed_out in enumerate(given) if handed_out), len(given))
    if lead < len(given) and all(given[lead:]):
        return seen[lead:], True
    return seen, False


def _window(windows: list[Window], position: int) -> int | None:
    return next(
        (
            i
            for i, w in enumerate(windows)
            if w.first_forward < position <= w.first_forward + w.microsteps
        ),
        None,
    )


def _step_count(state: State) -> float | None:
    """The optimizer's step count in a snapshot (the first parameter's), if it keeps one."""
    return next((float(t) for k, t in state.items() if k.startswith("optimizer step of")), None)


def _schedule_restarted(resumed: list[Step], updates: list[Update], windows: list[Window]) -> bool:
    """The resumed run's rates are not the reference's at its windows, but the schedule's from
    its start (from the second resumed step on: the first may still carry the rate an
    optimizer's restored param_groups hold)."""
    mine, want = [], []
    for step in resumed:
        at = _window(windows, step.forwards)
        rates = None if at is None else updates[at].lrs
        if rates is not None:
            mine.append(step.lrs[0])
            want.append(rates[0])
    start = [u.lrs[0] for u in updates if u.lrs is not None][: len(mine)]

    def same(a: list[float], b: list[float]) -> bool:
        return len(a) == len(b) and all(abs(x - y) <= RATE_RTOL * abs(y) for x, y in zip(a, b))

    return len(mine) > 1 and not same(mine, want) and same(mine[1:], start[1:])


def _codes(
    launches: Launches,
    reference: tuple[State, list[Update], list[Window]],
    kill_at: int,
    tolerance: float,
) -> list[str]:
    initial, updates, windows = reference
    # A step before the resumed launch's first forward ran on no gradient of its own: the
    # framework setting up a state to load into (torch.distributed.checkpoint's
    # _init_optim_state steps AdamW at lr 0; torchtune's resume), no window's update.
    killed, resumed = launches.killed, [s for s in launches.resumed if s.forwards > 0]
    stepped = {_window(windows, s.forwards) for s in killed}
    done = max((i for i in stepped if i is not None), default=-1)
    restart = windows[done + 1].first_forward + 1 if done + 1 < len(windows) else None
    found: list[str] = []
    first = resumed[0] if resumed else None
    if first is not None and killed and same_state(first.before, parameters_of(initial)):
        return ["not_resumable"]  # its first step left from the initial weights
    came_back = launches.resumed_forwards[0] if launches.resumed_forwards else None
    # anywhere in the resumed launch, not only where it came back: a loop that serves a later
    # epoch as an earlier one (its epoch not restored) replays after a right restart
    if restart is not None and any(f < restart for f in launches.resumed_forwards):
        found.append("data_replayed")
    taken = stepped | {_window(windows, s.forwards) for s in resumed}
    # Microbatches run by either launch (the killed one ran 1 .. kill_at - 1): a window with
    # no step of its own whose microbatches all ran was folded into a neighbour's step (a
    # moved boundary: counter_reset), not skipped; unless the loop never stopped folds it too.
    ran = set(range(1, kill_at)) | set(launches.resumed_forwards)
    unstepped = [i for i, u in enumerate(updates) if u.state is not None and i not in taken]
    if any(not _all_ran(windows[i], ran) for i in unstepped):
        found.append("data_skipped")
    straight_ends = {s.forwards for s in launches.straight}  # where the loop itself steps
    straight_taken = {_window(windows, end) for end in straight_ends}
    folded = any(_all_ran(windows[i], ran) for i in unstepped if i in straight_taken)
    if first is not None:
        if _schedule_restarted(resumed, updates, windows):
            found.append("scheduler_reset")
        # A restored optimizer counts, at the first resumed step, one more step than the
        # killed launch took before the microbatch it came back to (the reference's count at
        # that window would be higher wherever a window got no step: skipped or merged).
        mine = _step_count(first.after)
        if mine is not None and came_back is not None:
            before = sum(1 for s in killed if s.forwards < came_back)
            if mine < before + 1:
                found.append("optimizer_state_lost")
    if folded or any(s.forwards not in straight_ends for s in resumed):  # a boundary moved
        found.append("counter_reset")
    ends = {w.first_forward + w.microsteps for w in windows}
    kill_window = _window(windows, kill_at - 1)
    mid = kill_window is not None and kill_at - 1 not in ends
    if mid and came_back is not None and kill_window is not None:
        window = windows[kill_window]
        # it came back inside the killed window, past its start: what that window had
        # accumulated before the kill is gone (a restart beyond the window skipped it)
        if window.first_forward + 1 < came_back <= window.first_forward + window.microsteps:
            found.append("window_gradient_lost")
    elif came_back is not None and "optimizer_state_lost" not in found:
        if _own_window_lost(launches.straight, first, (kill_at, came_back), tolerance):
            found.append("window_gradient_lost")
    return found


def _own_window_lost(
    straight: list[Step], first: Step | None, kill: tuple[int, int], tolerance: float
) -> bool:
    """Killed inside one of the loop's own windows (between two steps of its straight run) and
    come back past that window's start, the first resumed step ends that window, starts from
    the straight run's weights there, at its rates, and still parts from it: nothing but what
    was accumulated before the kill can make that step differ. `kill`: (the microbatch whose
    forward every rank died at, the one the resumed launch came back to)."""
    kill_at, back = kill
    start = max((s.forwards for s in straight if s.forwards < kill_at - 1), default=0)
    end = next((s for s in straight if s.forwards >= kill_at - 1), None)
    if first is None or end is None or end.forwards == kill_at - 1:
        return False  # killed at a step of the loop's own: no window was open
    return (
        start + 1 < back <= end.forwards
        and first.forwards == end.forwards
        and compare(first.before, end.before, tolerance)[1] is None
        and len(first.lrs) == len(end.lrs)
        and all(abs(x - y) <= RATE_RTOL * abs(y) for x, y in zip(first.lrs, end.lrs))
        and compare(first.after, end.after, tolerance)[1] is not None
    )


def _all_ran(window: Window, ran: set[int]) -> bool:
    return all(window.first_forward + m in ran for m in range(1, window.microsteps + 1))


def judge(
    launches: Launches,
    reference: tuple[State, list[Update], list[Window]],
    kill_at: int,
    tolerance: float,
) -> dict[str, Any]:
    """The resumed trajectory against the reference and the straight run: where it first
    parts from each (an update index, None: it does not), the codes, and where it resumed."""
    _, updates, windows = reference
    if not launches.placed:  # counted in order from 1, it would be judged from the wrong place
        return {
            "killed_at": kill_at,
            "resumed_from": None,
            "steps_before_kill": len(launches.killed),
            "steps_after": len(launches.resumed),
            "first_divergence": None,
            "first_divergence_from_reference": None,
            "verdict": "no_evidence",
            "codes": [],
        }
    chosen: dict[int, Step] = {}
    for step in [*launches.killed, *launches.resumed]:  # a later launch's step wins
        at = _window(windows, step.forwards)
        if at is not None:
            chosen[at] = step
    straight = {_window(windows, s.forwards): s for s in launches.straight}

    def parts_from(want: dict[int, State | None]) -> int | None:
        for i, state in want.items():
            mine = chosen.get(i)
            if state is None and mine is None:
                continue
            if state is None or mine is None:
                return i
            _, first = compare(mine.after, readable(state, mine.state_read), tolerance)
            if first is not None:
                return i
        return None

    from_reference = parts_from({i: u.state for i, u in enumerate(updates)})
    from_straight = parts_from(
        {i: (straight[i].after if i in straight else None) for i in range(len(windows))}
    )
    codes = _codes(launches, reference, kill_at, tolerance) if from_straight is not None else []
    return {
        "killed_at": kill_at,
        "resumed_from": launches.resumed_forwards[0] if launches.resumed_forwards else None,
        "steps_before_kill": len(launches.killed),
        "steps_after": len(launches.resumed),
        "first_divergence": from_straight,
        "first_divergence_from_reference": from_reference,
        "verdict": "same_run" if from_straight is None else "different",
        "codes": codes,
    }
