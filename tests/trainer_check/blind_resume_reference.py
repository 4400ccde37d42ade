"""An independent, one-process account of the blind resumable loops (no pclab code).

`blind_resume_loops` replays each loop of blind_resume/ on a `Launch`: every rank in one
process, float64, torch autograd, the file's own optimizer and schedule. `account` plays, for
each of the README's kill points (K = 2, epochs of 5), a launch killed at the forward of that
microbatch, then a fresh launch that finds the killed one's checkpoint, joins their updates
(each window's from the launch that took it last) and compares the joined run with the
loop's straight run, update by update: the same run or different. It names the mistake from
what the two launches did, by the README's definitions of the resume codes:

    not_resumable         the resumed launch started from the initial weights
    data_replayed         the resumed launch ran a microbatch the killed launch had stepped
    data_skipped          a window with labels stepped by neither, one of its microbatches
                          run by neither
    counter_reset         a window with labels stepped by neither though all of it ran (a
                          moved boundary folded it into another step), or a resumed step
                          where no window ends
    window_gradient_lost  resumed inside the killed window (past its start), and that
                          window's update lacks a microbatch the killed launch had run
    scheduler_reset       the first resumed rate is the schedule's first, not the straight
                          run's at that window
    optimizer_state_lost  AdamW's count at the first resumed step is below 1 + the steps the
                          killed launch took before the microbatch the run came back to

`reference` is the README's rules for the straight run (windows of K, the tail, N = 0
skipped, one schedule step per update): every blind loop's straight run is right.

    PYTHONPATH=$PWD python tests/trainer_check/blind_resume_reference.py   # every account
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
BLIND = HERE / "blind_resume"
TOLERANCE = 1e-10
IGNORE = -100  # tiny_lm's label that does not count
# the README's kill points at K = 2, epochs of 5: the run index (from 1) of the microbatch
# at whose forward every rank dies
KILL_POINTS = {"mid_epoch": 3, "mid_window": 4, "before_tail": 5, "epoch_boundary": 6}
Key = tuple[int, int, int]  # (rank, epoch, microbatch)
torch.set_num_threads(1)

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from blind_run_reference import sample  # noqa: E402  (microbatches with given term counts)


class Killed(Exception):
    """Every rank SIGKILLed at the forward of the kill point's microbatch."""


def load(name: str):
    """The blind file `name`, imported by path with its folder on sys.path (as the check does)."""
    if str(BLIND) not in sys.path:
        sys.path.insert(0, str(BLIND))
    spec = importlib.util.spec_from_file_location(f"blind_resume_{name}", BLIND / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Step:
    after: tuple[int, int]  # (epoch, microbatch) the model ran last
    lr: float
    count: int | None  # AdamW's step count after it (None: a stateless optimizer)
    coef: dict[Key, float]  # the gradient stepped: sum of coef x d(terms of the microbatch)
    params: torch.Tensor  # every parameter after the step, flattened


class Launch:
    """One launch of a loop, every rank in this process; `disk` outlives it."""

    def __init__(self, trainer, data: list, disk: dict, kill_at: int | None = None) -> None:
        self.trainer, self.data, self.disk, self.kill_at = trainer, data, disk, kill_at
        self.model = trainer.build_model()
        self.params = list(self.model.parameters())
        self.optimizer = trainer.make_optimizer(self.params)
        self.initial = self.flat()
        self.start: torch.Tensor | None = None  # the parameters at its first forward
        self.ran: list[tuple[int, int]] = []
        self.steps: list[Step] = []
        self.coef: dict[Key, float] = {}

    @property
    def epochs(self) -> range:
        return range(len(self.data[0]))

    def size(self, e: int) -> int:
        return len(self.data[0][e])

    def index(self, e: int, i: int) -> int:
        """The microbatch's run index from 0."""
        return sum(self.size(x) for x in range(e)) + i

    def locate(self, index: int) -> tuple[int, int]:
        """(epoch, microbatch) of a run index from 0."""
        e = 0
        while index >= self.size(e):
            index, e = index - self.size(e), e + 1
        return e, index

    def flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params]).clone()

    def count(self, e: int, start: int, stop: int) -> int:
        """Global N of microbatches start..stop-1 of epoch e."""
        mbs = [rank[e][i] for rank in self.data for i in range(start, min(stop, self.size(e)))]
        return sum(int((mb["labels"] != IGNORE).sum()) for mb in mbs)

    def windows(self, e: int, k: int) -> list[tuple[int, int, int]]:
        """(start, stop, global N) of each window of epoch e, the tail included."""
        m = self.size(e)
        return [(s, min(s + k, m), self.count(e, s, s + k)) for s in range(0, m, k)]

    def scheduler(self, k: int):
        updates = sum(n > 0 for e in self.epochs for *_, n in self.windows(e, k))
        return self.trainer.make_scheduler(self.optimizer, updates)

    def backward(self, e: int, i: int, c: float) -> None:
        """Every rank's microbatch i of epoch e, its summed terms x c, into the `.grad`."""
        if self.index(e, i) == self.kill_at:
            raise Killed
        if self.start is None:
            self.start = self.flat()
        self.ran.append((e, i))
        for r, rank in enumerate(self.data):
            (self.trainer.token_losses(self.model, rank[e][i]).sum() * c).backward()
            self.coef[(r, e, i)] = self.coef.get((r, e, i), 0.0) + c

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()
        self.coef = {}

    def step(self) -> None:
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        state = self.optimizer.state.get(self.params[0], {})
        count = int(state["step"]) if "step" in state else None
        self.steps.append(Step(self.ran[-1], lr, count, dict(self.coef), self.flat()))

    def save(self, scheduler, grad: bool = False, optimizer: bool = True, **position) -> None:
        state = {"model": self.model.state_dict()}
        if optimizer:
            state["optimizer"] = self.optimizer.state_dict()
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        if grad:
            state["grad"] = [p.grad for p in self.params]
            state["coef"] = self.coef
        self.disk.clear()
        self.disk.update(copy.deepcopy(state | position))

    def load(self, scheduler) -> dict | None:
        """What the disk holds into the model, the optimizer (if saved) and `scheduler`."""
        if not self.disk:
            return None
        state = copy.deepcopy(self.disk)
        self.model.load_state_dict(state["model"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        if "grad" in state:
            for p, g in zip(self.params, state["grad"]):
                p.grad = g
            self.coef = state["coef"]
        return state


def play(name: str, trainer, data: list, disk: dict, kill_at: int | None = None) -> Launch:
    from blind_resume_loops import REPLAYS

    launch = Launch(trainer, data, disk, kill_at)
    try:
        REPLAYS[name](launch, 2)
    except Killed:
        launch.killed = True
    else:
        launch.killed = False
    return launch


def reference(trainer, data: list, k: int) -> Launch:
    """The README's rules with the file's optimizer and schedule."""
    run = Launch(trainer, data, {})
    scheduler = run.scheduler(k)
    for e in run.epochs:
        for start, stop, n in run.windows(e, k):
            if n:
                run.zero_grad()
                for i in range(start, stop):
                    run.backward(e, i, 1 / n)
                run.step()
                scheduler.step()
    return run


def _first_divergence(a: dict, b: dict) -> int | None:
    """The first update (from 0, in b's window order) where run a parts from run b ({window:
    Step}): missing, or other parameters after it; None: the same updates."""
    for u, w in enumerate(sorted(b)):
        if w not in a or float((a[w].params - b[w].params).abs().max()) >= TOLERANCE:
            return u
    return None if a.keys() == b.keys() else len(b)


def _same(a: dict, b: dict) -> bool:
    return _first_divergence(a, b) is None


def straight_is_reference(name: str, counts: list, k: int = 2) -> bool:
    trainer = load(name)
    data = sample(trainer, counts)
    mine, ref = play(name, trainer, data, {}), reference(trainer, data, k)
    by_window = lambda run: {(s.after[0], s.after[1] // k): s for s in run.steps}  # noqa: E731
    return not mine.killed and _same(by_window(mine), by_window(ref))


def account(name: str, counts: list, k: int = 2) -> dict:
    """{kill point: {"verdict": same_run | different, "codes": set, "resumed_from": run index
    from 1 of the resumed launch's first microbatch, "first_divergence": the first update
    that parts from the straight run}} at these term counts."""
    trainer = load(name)
    data = sample(trainer, counts)

    def window(step: Step) -> tuple[int, int]:
        return step.after[0], step.after[1] // k

    straight = {window(s): s for s in play(name, trainer, data, {}).steps}
    first_rate = next(iter(straight.values())).lr
    found = {}
    for point, at in KILL_POINTS.items():
        disk: dict = {}
        killed = play(name, trainer, data, disk, kill_at=at - 1)
        assert killed.killed, point
        resumed = play(name, trainer, data, disk)
        joined = {window(s): s for s in killed.steps + resumed.steps}  # the later launch's
        back = resumed.ran[0]  # the microbatch the run came back to
        codes = set()
        if killed.steps and torch.equal(resumed.start, resumed.initial):
            codes.add("not_resumable")
        stepped = {(e, i) for s in killed.steps for (_, e, i), c in s.coef.items() if c}
        if stepped & set(resumed.ran):
            codes.add("data_replayed")
        ran = set(killed.ran) | set(resumed.ran)
        for e in resumed.epochs:
            for start, stop, n in resumed.windows(e, k):
                if n and (e, start // k) not in joined:
                    whole = all((e, i) in ran for i in range(start, stop))
                    codes.add("counter_reset" if whole else "data_skipped")
        for s in resumed.steps:
            e, i = s.after
            if not (i % k == k - 1 or i == resumed.size(e) - 1):
                codes.add("counter_reset")
        ke, ki = killed.locate(at - 1)  # the microbatch at whose forward it died
        kill_window = (ke, ki // k) if ki % k else None  # killed inside a window
        if kill_window and (back[0], back[1] // k) == kill_window and back[1] % k:
            update = joined.get(kill_window)
            had = [(r, e, i) for r in range(len(data)) for e, i in killed.ran]
            lost = [key for key in had if (key[1], key[2] // k) == kill_window]
            if update is None or any(not update.coef.get(key) for key in lost):
                codes.add("window_gradient_lost")
        if killed.steps and resumed.steps:
            first = resumed.steps[0]
            if first.lr == first_rate and straight[window(first)].lr != first_rate:
                codes.add("scheduler_reset")
            before = sum(resumed.index(*s.after) < resumed.index(*back) for s in killed.steps)
            if first.count is not None and first.count < before + 1:
                codes.add("optimizer_state_lost")
        parts = _first_divergence(joined, straight)
        found[point] = {
            "verdict": "same_run" if parts is None else "different",
            "codes": codes,
            "resumed_from": 1 + resumed.index(*back),
            "first_divergence": parts,
        }
    return found


if __name__ == "__main__":
    from blind_resume_loops import REPLAYS
    from blind_run_loops import SCENARIOS

    for trainer_name in REPLAYS:
        print(trainer_name, straight_is_reference(trainer_name, SCENARIOS["uneven"]))
        for where, entry in account(trainer_name, SCENARIOS["uneven"]).items():
            print("   ", where, entry)
