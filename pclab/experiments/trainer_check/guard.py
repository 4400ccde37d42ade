"""Each scenario stands alone: one rank of the trainer check runs a scenario under a deadline,
catches what the trainer raised there, and rejoins its peers in a fresh process group, so that
one scenario's failure is that scenario's verdict and every other scenario is still judged.

    evidence, failure = guard.alone(lambda: check_scenario(...), tag, timeout_s, backend)

A failing rank leaves the process group (its peers' pending collectives then fail at once:
"Connection closed by peer"), every rank meets again in a new group whose store keys carry
`tag`, and they exchange what each saw: the trainer's own exception wins over a peer's lost
connection. A deadline thread raises ScenarioTimeout in a rank stuck in Python; a Gloo
collective past the process group's timeout raises by itself. A rank that dies (a Gloo size
mismatch aborts the process) cannot rejoin: the launch layer relaunches the rest (see
pclab/experiments/trainer_check/__init__.py).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import Any

from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.doing import CHECK_STEPS, CURRENT, now_in
from pclab.experiments.trainer_check.failures import scenario_failed
from pclab.experiments.trainer_check.trainer import device_of  # torch-free at import
from pclab.experiments.trainer_check.trainer_raised import TrainerRaised
from pclab.experiments.trainer_check.units import Units

MARKER = 7.0e11  # the end-of-scenario all_gather carries [MARKER, index]: a paired-up foreign
# collective shows as other values (a collective one rank skipped)
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
TIMED_OUT = ("Timed out", "timed out", "Timeout", "timeout")


class ScenarioTimeout(BaseException):  # noqa: N818 - not an Exception: a trainer's
    """The scenario ran past its deadline (raised in the main thread by the deadline
    thread; a BaseException so that no `except Exception` in a trainer swallows it)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise ScenarioTimeout in this thread once `seconds` have passed (at the next Python
    line it runs: a rank stuck in a C call is freed by the call's own timeout)."""
    target = threading.get_ident()
    done = threading.Event()

    def watch() -> None:
        if not done.wait(seconds):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(target), ctypes.py_object(ScenarioTimeout)
            )

    thread = threading.Thread(target=watch, daemon=True, name="scenario-deadline")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _seen(exc: BaseException, rank: int, timeout_s: float) -> dict[str, Any]:
    """What this rank saw, in plain values: kind trainer_error | timeout | peer, and text."""
    where = CURRENT[0]
    if isinstance(exc, ScenarioTimeout):
        return {"rank": rank, "kind": "timeout", "text": f"still in {where} after {timeout_s:g} s"}
    text = " ".join(str(exc).split())
    if any(m in text for m in PEER_GONE):
        return {"rank": rank, "kind": "peer", "text": f"in {where}: a peer left the collective"}
    if "Gloo" in text or "gloo" in text or "NCCL" in text or "DistBackendError" in text:
        kind = "timeout" if any(m in text for m in TIMED_OUT) else "peer"
        return {"rank": rank, "kind": kind, "text": f"in {where}: a collective failed"}
    if isinstance(exc, TrainerRaised):
        return {"rank": rank, "kind": "trainer_error", "text": text, "step": where}
    return {"rank": rank, "kind": "trainer_error", "text": f"{type(exc).__name__}: {text}"}


def _marker(index: int, device: Any) -> bool:
    """Every rank at the end of scenario `index`, checked by the values (a foreign collective
    that paired with this one shows as others)."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor([MARKER, float(index)], dtype=torch.float64, device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return all(torch.equal(t, mine) for t in every)


HEARTBEAT_S, DEAD_AFTER_S = 1.0, 15.0  # a rank's heartbeat, and how long one may stand still
_BEATING: list[threading.Thread] = []


def heartbeat() -> None:
    """Start this rank's heartbeat (once): a thread adding 1 to the store's pcl_alive/<rank>
    every HEARTBEAT_S, with a store client of its own, so that a peer waiting to rejoin can
    tell a rank that is slow (blocked in a collective, stuck in Python: it still beats) from
    one that died (a Gloo abort; under the warm pool no agent ends its peers)."""
    import torch.distributed as dist

    if _BEATING:
        return
    rank = dist.get_rank()
    store, _, _ = next(dist.rendezvous("env://"))

    def beat() -> None:
        while True:
            try:
                store.add(f"pcl_alive/{rank}", 1)
            except Exception:  # noqa: BLE001 - the store is gone: the run is ending
                return
            time.sleep(HEARTBEAT_S)

    _BEATING.append(threading.Thread(target=beat, daemon=True, name="check-heartbeat"))
    _BEATING[0].start()


def _wait_for_peers(store: Any, tag: str, rank: int, world: int, timeout_s: float) -> None:
    """Say this rank arrived at `tag` and wait for every peer to; RuntimeError as soon as a
    peer's heartbeat stood still DEAD_AFTER_S (it died: waiting out `timeout_s` is useless)."""
    store.set(f"{tag}/arrived/{rank}", "1")
    beats: dict[int, tuple[int, float]] = {}
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        missing = [r for r in range(world) if not store.check([f"{tag}/arrived/{r}"])]
        if not missing:
            return
        now = time.monotonic()
        for peer in missing:
            count = store.add(f"pcl_alive/{peer}", 0)
            last = beats.get(peer)
            if last is None or last[0] != count:
                beats[peer] = (count, now)
            elif now - last[1] > DEAD_AFTER_S:
                raise RuntimeError(f"rank {peer} died (no heartbeat for {DEAD_AFTER_S:g} s)")
        time.sleep(0.2)


def rejoin(tag: str, backend: str, timeout_s: float) -> None:
    """Leave the (broken) default process group and meet every peer in a new one, its store
    keys under `tag` (the first group's keys are still in the store), waiting `timeout_s` for
    them: a peer blocked in a collective may only come back at the group's own timeout (a
    left group does not always free it: measured, a peer in an all_reduce held on until the
    leaving process exited)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    try:  # abort first: a collective still holding the group could keep its sockets open
        dist.group.WORLD.abort()
    except Exception:  # noqa: BLE001,S110 - older torch: destroying it is all there is
        pass
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001,S110 - a broken group may not leave cleanly: it is gone
        pass
    store, _, _ = next(dist.rendezvous("env://"))
    _wait_for_peers(store, tag, rank, world, timeout_s)
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(tag, store),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )


def alone(
    step: Callable[[], dict[str, Any]],
    scenario: str,
    index: int,
    timeouts: tuple[float, float],
    backend: str,
    device: Any,
    say: Callable[[dict[str, Any]], None] = lambda seen: None,
) -> tuple[dict[str, Any] | None, Diagnosis | None]:
    """(this rank's evidence, None), or (None, the scenario's diagnosis, the same on every
    rank) when any rank failed in it. `timeouts`: the scenario's deadline and the process
    group's timeout (a rank blocked in a collective is back by then); `say`: told what this
    rank saw before it rejoins (a peer that died never rejoins: the launch layer reads it)."""
    timeout_s, pg_timeout_s = timeouts
    import torch.distributed as dist

    rank = dist.get_rank()
    heartbeat()
    seen: dict[str, Any] | None = None
    evidence = None
    try:
        with deadline(timeout_s):
            evidence = step()
            now_in("the check's end-of-scenario collective")
            if not _marker(index, device):
                seen = {
                    "rank": rank,
                    "kind": "mismatch",
                    "text": "the end-of-scenario "
                    "collective paired with another (a collective some rank skipped?)",
                }
    except (Exception, ScenarioTimeout) as exc:  # noqa: BLE001 - this scenario's verdict
        seen = _seen(exc, rank, timeout_s)
    if seen is not None:
        # Said before the doing file is reset below: a rank stopped in between (torchrun ends
        # the peers of one that aborted) is then placed by the file, which still names the
        # trainer function that failed (relaunch._doing).
        say(seen)
    now_in(CHECK_STEPS)
    if seen is None:
        return evidence, None
    rejoin(f"pcl_scenario_{index}", backend, timeout_s + pg_timeout_s)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, seen)
    return None, scenario_failed(scenario, [s for s in every if s])


def run_units(
    where: tuple[Units, int, int],
    header: tuple[dict[str, Any], str],
    grids: Mapping[str, Sequence[Sequence[int]]],
    preflight: Callable[[], list[Diagnosis]],
    scenario: Callable[[str, Sequence[Sequence[int]]], dict[str, Any]],
    device: str,
) -> tuple[list[Diagnosis], list[dict[str, Any]]]:
    """(the preflight's diagnoses, the scenarios' entries) of one trainer file, in either
    mode: its scenarios from the launch's --skip on, each `alone`, its progress lines written
    as it goes (the header, each scenario's start and entry: relaunch.py reads them back).
    `where`: the launch's Units, this rank, the index of the file's first scenario; `header`:
    the file's check header and the name of a scenario's shape (label_positions, sizes)."""
    run, rank, first_unit = where
    lines, shape = header
    todo = [(first_unit + j, n, g) for j, (n, g) in enumerate(grids.items())]
    todo = [u for u in todo if u[0] >= run.skip]
    found = preflight() if todo else []
    run.record(rank, {"unit": first_unit, "units": len(grids), "header": lines, "diagnoses": found})
    scenarios = []
    for index, name, grid in [] if found else todo:
        named: dict[str, Any] = {"name": name, shape: [list(row) for row in grid]}
        run.record(rank, {"started": index, **named})
        evidence, failure = alone(
            partial(scenario, name, grid),
            name,
            index,
            (run.timeout_s, run.pg_timeout_s),
            "nccl" if device == "cuda" else "gloo",
            device_of(device),
            partial(_say_seen, run, rank, index),
        )
        entry = evidence or named
        if failure is not None:
            entry["failure"] = failure
        run.record(rank, {"unit": index, "scenario": entry})
        scenarios.append(entry)
    return found, scenarios


def _say_seen(run: Units, rank: int, index: int, seen: dict[str, Any]) -> None:
    run.record(rank, {"unit": index, "seen": seen})
