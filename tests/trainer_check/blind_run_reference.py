"""An independent, one-process account of the blind run-mode loops (no pclab code).

`blind_run_loops` replays each loop of blind_run/ by hand: every rank in one process, one
model (the ranks' replicas stay equal), its gradient buffer kept twice (float64 tensors from
torch autograd, and the coefficient each microbatch's summed terms carries in it), plain SGD
at the rate of the file's own `make_scheduler`. `reference` plays the README's rules (windows
of K, the tail, N = 0 skipped by everyone, one schedule step per update, the schedule built
for the true number of updates). `account` compares the two runs and derives the run
diagnoses from what they computed: each step's window, its coefficients, its rate.

    PYTHONPATH=$PWD python tests/trainer_check/blind_run_reference.py   # every file's account
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
BLIND = HERE / "blind_run"
TOLERANCE = 1e-10
Key = tuple[int, int, int]  # (rank, epoch, microbatch)
torch.set_num_threads(1)  # tiny tensors: intra-op threads only contend (18 ms a cross-entropy)


def load(name: str):
    """The blind file `name`, imported by path with its folder on sys.path (as the check does)."""
    if str(BLIND) not in sys.path:
        sys.path.insert(0, str(BLIND))  # a trainer may import its neighbours
    spec = importlib.util.spec_from_file_location(f"blind_run_{name}", BLIND / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample(trainer, counts: list, seed: int = 0) -> list:
    """Microbatches with the given numbers of terms, [rank][epoch][microbatch]."""
    g = torch.Generator().manual_seed(seed)
    if hasattr(trainer, "make_microbatch"):
        return [[[trainer.make_microbatch(n, g) for n in e] for e in r] for r in counts]
    shape = (getattr(trainer, "BATCH_SIZE", 2), getattr(trainer, "SEQ_LEN", 8))

    def lm(n: int) -> dict:
        labels = torch.full(shape, -100).view(-1)
        where = torch.randperm(labels.numel(), generator=g)[:n]
        labels[where] = torch.randint(trainer.VOCAB_SIZE, (n,), generator=g)
        ids = torch.randint(trainer.VOCAB_SIZE, shape, generator=g)
        return {"input_ids": ids, "labels": labels.view(shape)}

    return [[[lm(n) for n in e] for e in r] for r in counts]


@dataclass
class Step:
    after: tuple[int, int]  # (epoch, microbatch) the model ran last
    lr: float
    coef: dict[Key, float]  # the gradient stepped: sum of coef x d(terms of the microbatch)
    params: torch.Tensor  # every parameter after the step, flattened


class Run:
    """One process playing every rank of a loop (or of the reference)."""

    def __init__(self, trainer, data: list) -> None:
        self.trainer, self.data = trainer, data
        self.model = trainer.build_model()
        self.params = list(self.model.parameters())
        optimizer = getattr(trainer, "make_optimizer", lambda p: torch.optim.SGD(p, lr=0.1))
        self.lr0 = optimizer([torch.zeros(1, requires_grad=True)]).param_groups[0]["lr"]
        self.schedule: int | None = None  # the length the schedule was built for
        self.schedule_steps = 0
        self.steps: list[Step] = []
        self.last = (-1, -1)
        self.zero_grad()

    @property
    def world(self) -> int:
        return len(self.data)

    def terms(self, rank: int, epoch: int, i: int) -> int:
        with torch.no_grad():
            return len(self.trainer.token_losses(self.model, self.data[rank][epoch][i]))

    def count(self, epoch: int, start: int, stop: int) -> int:
        """A window's global N: every rank's terms of microbatches start..stop-1."""
        m = len(self.data[0][epoch])
        return sum(
            self.terms(r, epoch, i) for r in range(self.world) for i in range(start, stop) if i < m
        )

    def backward(self, rank: int, epoch: int, i: int, c: float) -> None:
        """Rank `rank` backpropagates c x its microbatch's summed terms into the buffer."""
        self.last = (epoch, i)
        loss = self.trainer.token_losses(self.model, self.data[rank][epoch][i]).sum()
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        for buffer, g in zip(self.grad, grads):
            buffer += 0 if g is None else c * g
        key = (rank, epoch, i)
        self.coef[key] = self.coef.get(key, 0.0) + c

    def zero_grad(self) -> None:
        self.grad = [torch.zeros_like(p) for p in self.params]
        self.coef: dict[Key, float] = {}

    def rate(self) -> float:
        if self.schedule is None:
            return self.lr0
        return rates(self.trainer, self.lr0, self.schedule, self.schedule_steps + 1)[-1]

    def step(self) -> None:
        lr = self.rate()
        with torch.no_grad():
            for p, g in zip(self.params, self.grad):
                p -= lr * g
        flat = torch.cat([p.detach().reshape(-1) for p in self.params]).clone()
        self.steps.append(Step(self.last, lr, dict(self.coef), flat))

    def build_schedule(self, num_updates: int) -> None:
        self.schedule, self.schedule_steps = num_updates, 0

    def schedule_step(self) -> None:
        self.schedule_steps += 1


def rates(trainer, lr0: float, length: int, n: int) -> list[float]:
    """The rate of the file's own schedule built for `length` updates, after 0..n-1 steps."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr0)
    scheduler = trainer.make_scheduler(optimizer, length)
    found = []
    for _ in range(n):
        found.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return found


def reference(run: Run, k: int) -> Run:
    """The README's rules: windows of k, the tail, N = 0 skipped, the schedule per update."""
    windows = [
        (e, s, run.count(e, s, s + k)) for e in range(len(run.data[0])) for s in starts(run, e, k)
    ]
    if hasattr(run.trainer, "make_scheduler"):
        run.build_schedule(sum(n > 0 for _, _, n in windows))
    for e, s, n in windows:
        if n == 0:
            continue
        run.zero_grad()
        for r in range(run.world):
            for i in range(s, min(s + k, len(run.data[r][e]))):
                run.backward(r, e, i, 1.0 / n)
        run.step()
        run.schedule_step()
    return run


def starts(run: Run, epoch: int, k: int) -> range:
    return range(0, len(run.data[0][epoch]), k)


def account(name: str, counts: list, k: int) -> dict:
    """The loop against the reference at these term counts, [rank][epoch][microbatch]:
    {"passed": the same trajectory, "codes": {code: detail}, "weights": {(epoch, window):
    weight x N, P x k', None where no term}} (the codes derived from the two runs alone)."""
    from blind_run_loops import REPLAYS

    trainer = load(name)
    data = sample(trainer, counts)
    mine = REPLAYS[name](Run(trainer, data), k)
    ref = reference(Run(trainer, data), k)
    passed = len(mine.steps) == len(ref.steps) and all(
        float((a.params - b.params).abs().max()) < TOLERANCE for a, b in zip(mine.steps, ref.steps)
    )
    windows = [  # (epoch, window, microsteps, N), in the run's order
        (e, s // k, min(k, len(row) - s), sum(sum(r[e][s : s + k]) for r in counts))
        for e, row in enumerate(counts[0])
        for s in range(0, len(row), k)
    ]
    placed: dict[tuple[int, int], list[Step]] = {}
    for step in mine.steps:
        placed.setdefault((step.after[0], step.after[1] // k), []).append(step)
    codes: dict[str, dict] = {}
    weights, dropped, leaks = {}, [], []
    for e, w, size, n in windows:
        got = placed.get((e, w), [])
        if n and size < k and not got:
            dropped.append(e)
        elif n and len(got) != 1:
            codes["steps_per_window"] = {"steps": len(got)}
        elif n and size < k:
            c = tail_ratio(REPLAYS[name], Run(trainer, data), counts, (e, w * k, size), got[0])
            if c is not None and abs(c - 1) > 1e-9:
                codes["tail_window_scaled"] = {"scale": c, "microsteps": size}
        if n and len(got) == 1:
            own = range(w * k, w * k + size)
            weights[(e, w)] = [
                [got[0].coef.get((r, e, i), 0.0) * n if counts[r][e][i] else None for i in own]
                for r in range(len(counts))
            ]
        for step in got:  # weight x N of this window on an earlier window's microbatch
            leaks += [
                c * n
                for (r, e2, i), c in step.coef.items()
                if (e2, i // k) < (e, w) and counts[r][e2][i] and abs(c) > 1e-15
            ]
    if dropped:
        codes["tail_window_dropped"] = {"epochs": dropped}
    if leaks:
        codes["gradient_leak"] = {"leak": max(leaks, key=abs)}
    live = [i for i, x in enumerate(windows) if x[3]]
    if hasattr(trainer, "make_scheduler") and all(
        len(placed.get(windows[i][:2], [])) == 1 for i in live
    ):
        yours = [placed[windows[i][:2]][0].lr for i in live]
        sizes = [windows[i][2] for i in live]
        codes |= schedule_codes(trainer, mine.lr0, yours, live, len(windows), sizes, k)
    elif hasattr(trainer, "make_scheduler") and mine.steps:  # steps that are not the windows
        codes |= own_step_codes(trainer, mine.lr0, [s.lr for s in mine.steps], len(live))
    return {"passed": passed, "codes": codes, "weights": weights}


def tail_ratio(replay, fresh: Run, counts: list, tail: tuple, step: Step) -> float | None:
    """The tail step's coefficients over those the same loop gives the tail's microbatches
    as one full window (their epoch alone, accum_steps = k'): one number if uniform."""
    e, start, size = tail
    fresh.data = [[rank[e][start : start + size]] for rank in fresh.data]
    again = replay(fresh, size)
    if len(again.steps) != 1:
        return None
    full = {(r, e, start + i): c for (r, _, i), c in again.steps[0].coef.items()}
    ratios = [
        c / full[key] for key, c in step.coef.items() if full.get(key) and counts[key[0]][e][key[2]]
    ]
    if ratios and max(ratios) - min(ratios) < 1e-12 * max(abs(x) for x in ratios):
        return ratios[0]
    return None


def schedule_codes(trainer, lr0, yours, index, windows, sizes, k) -> dict[str, dict]:
    """Which stepping and length of the file's own schedule gives the loop's rates, update u
    of U at window index[u] of `windows` with sizes[u] microsteps; preferred in this order:
    the reference's (once per update, built for U); once per window, skipped ones included
    (scheduler_on_skip); once per microstep or c per update (scheduler_rate); once per update,
    built for another length (schedule_length)."""
    u_count = len(yours)

    def fits(length: int, at: list[int]) -> bool:
        table = rates(trainer, lr0, length, max(at) + 1)
        return all(abs(table[i] - y) <= 1e-12 * abs(y) for i, y in zip(at, yours))

    per_update = list(range(u_count))
    if fits(u_count, per_update):
        return {}
    if windows > u_count and any(fits(n, index) for n in (u_count, windows)):
        return {"scheduler_on_skip": {"windows": windows, "updates": u_count}}
    before = [sum(sizes[:u]) for u in range(u_count)]
    upto = [sum(sizes[: u + 1]) - 1 for u in range(u_count)]
    if fits(u_count, before) or fits(u_count, upto):
        return {"scheduler_rate": {"rate": k, "how": "per_microstep"}}
    for c in range(2, 4 * k + 1):
        if fits(u_count, [c * u for u in per_update]):
            return {"scheduler_rate": {"rate": c, "how": "c_per_update"}}
    for length in range(1, 4 * u_count + 1):
        if length != u_count and fits(length, per_update):
            return {"schedule_length": {"built_for": length, "updates": u_count}}
    return {"schedule_other": {"yours": yours}}


def own_step_codes(trainer, lr0, yours, updates: int) -> dict[str, dict]:
    """A loop whose steps are not the reference's windows (a tail dropped or carried), read
    step by step: the file's own schedule built for some length L gives the rate of each of
    its steps in order; L = the run's updates is the intended schedule (the windows' codes
    say the rest), any other L a schedule_length; none: no schedule code."""
    for length in (updates, *range(1, 4 * updates + 1)):
        table = rates(trainer, lr0, length, len(yours))
        if all(abs(t - y) <= 1e-12 * abs(y) for t, y in zip(table, yours)):
            found = {"built": length, "updates": updates}
            return {} if length == updates else {"schedule_length": found}
    return {}


if __name__ == "__main__":
    from blind_run_loops import REPLAYS, SCENARIOS

    for trainer_name in REPLAYS:
        for scenario, grid in SCENARIOS.items():
            found = account(trainer_name, grid, 2)
            print(trainer_name, scenario, found["passed"], found["codes"])
