"""Which scenarios a launch of the trainer check runs, and what it leaves for a relaunch: a
unit is one trainer file's scenario, counted across the files in order. Each rank appends its
progress to <progress>/rank<r>.jsonl and, when it dies, its stacks to rank<r>.stack (and what
it last ran to rank<r>.doing), from which relaunch.py says what it was doing and launches the
rest (--skip N)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pclab.experiments.trainer_check.doing as doing
from pclab.runners.worker import PG_TIMEOUT_ENV

SCENARIO_TIMEOUT_ENV = "PCL_SCENARIO_TIMEOUT_S"  # one scenario's deadline (default 4 x the
# process group's timeout): past it, the scenario's verdict is `different`, with `timeout`


@dataclass(frozen=True)
class Units:
    """Which scenarios this launch runs, counted across the trainer files in order (a unit is
    one trainer's scenario): from `skip` on (the launch layer relaunches the rest after a rank
    died), each one's evidence appended to <progress>/rank<r>.jsonl as it is judged."""

    skip: int = 0
    progress: str | None = None
    timeout_s: float = 240.0  # one scenario's deadline on every rank (guard.deadline)
    pg_timeout_s: float = 60.0  # the process group's: a rank blocked in a collective waits it

    def record(self, rank: int, line: dict[str, Any]) -> None:
        if self.progress is not None:
            with Path(self.progress, f"rank{rank}.jsonl").open("a") as out:
                out.write(json.dumps(line) + "\n")

    def watch_stack(self, rank: int) -> None:
        """With a progress folder: a rank that dies (a Gloo abort, a segfault) or is stopped
        (torchrun's SIGTERM once a peer died) leaves its Python stacks in
        <progress>/rank<r>.stack (faulthandler), and the trainer function or check step it
        was last in, in rank<r>.doing (doing.py), from which relaunch.py says what
        it was doing. Once per process: the files stay open until it exits."""
        if self.progress is None or _STACKS:
            return
        import faulthandler
        import signal

        _STACKS.append(Path(self.progress, f"rank{rank}.stack").open("w"))  # noqa: SIM115
        faulthandler.enable(_STACKS[0], all_threads=True)
        faulthandler.register(signal.SIGTERM, _STACKS[0], all_threads=True, chain=True)
        doing.write_to(Path(self.progress, f"rank{rank}.doing"))


_STACKS: list[Any] = []  # the open file faulthandler writes this rank's stacks to


def units_of(argv: list[str] | None) -> tuple[list[str] | None, Units]:
    """The launch layer's own arguments (--skip N, --progress-dir D), taken out of `argv`
    before the declared parameters are read; the scenario deadline from the environment."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    values: dict[str, str] = {}
    for flag in ("--skip", "--progress-dir"):
        if flag in args:
            at = args.index(flag)
            values[flag] = args[at + 1]
            del args[at : at + 2]
    pg_timeout = float(os.environ.get(PG_TIMEOUT_ENV, "60"))
    timeout_s = float(os.environ.get(SCENARIO_TIMEOUT_ENV, repr(4 * pg_timeout)))
    units = Units(int(values.get("--skip", 0)), values.get("--progress-dir"), timeout_s, pg_timeout)
    return args, units
