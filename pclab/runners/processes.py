"""The cold path: one `torchrun --standalone` job in its own session, polled, stopped, asked why.

Every process of a launch carries TOKEN_ENV=<token> in its environment, so `stop` finds
and kills each one (torchrun's workers lead their own process groups) and waits until
none is left: a stopped run leaves no process behind, whatever it was doing. While it runs,
its runtime's memory budget counts it (runners.memory.MemoryBudget.watch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pclab.paths import IMPORT_ROOT
from pclab.runners.diagnosis import rank_root_cause, summary_failure
from pclab.runners.memory import MemoryBudget
from pclab.runners.worker import TOKEN_ENV

GRACE_S = 3.0  # between SIGTERM and SIGKILL when a run is stopped


class Torchrun:
    """`python -m torch.distributed.run --standalone ... -m <worker> *argv`, never via a shell."""

    def __init__(
        self,
        worker: str,
        world_size: int,
        argv: list[str],
        tmp: Path,
        env: dict[str, str],
        token: str,
        memory: MemoryBudget,
    ) -> None:
        options = {
            "--standalone": None,
            "--nproc-per-node": str(world_size),
            "--max-restarts": "0",
            "--monitor-interval": "0.1",
            "--shutdown-timeout": str(int(GRACE_S)),
            "--log-dir": str(tmp / "logs"),
            "--redirects": "3",  # per-rank stdout/stderr files: where root causes are read
        }
        flags = [part for name, value in options.items() for part in (name, value) if part]
        cmd = [sys.executable, "-m", "torch.distributed.run", *flags, "-m", worker, *argv]
        self.token, self.err, self.memory = token, tmp / "torchrun.err", memory
        with (tmp / "torchrun.out").open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                cwd=IMPORT_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group: one killpg reaches it all
            )
        memory.watch(self.proc.pid)  # the memory budget counts every live launch

    def poll(self) -> int | None:
        """torchrun's exit code, or None while it runs (waits up to 0.1 s)."""
        try:
            return self.proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Stop torchrun and every worker of this launch: SIGTERM, a grace period, SIGKILL."""
        proc, token = self.proc, self.token
        if proc.poll() is None or tagged_pids(token):
            _signal_all(proc, token, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline and (proc.poll() is None or tagged_pids(token)):
                time.sleep(0.05)
            _signal_all(proc, token, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + GRACE_S
        while tagged_pids(token) and time.monotonic() < deadline:
            _signal_all(proc, token, signal.SIGKILL)
            time.sleep(0.05)
        self.memory.unwatch(proc.pid)

    def root_cause(self, log_dir: Path, returncode: int) -> str:
        """The failing rank and why, from its logs or torchrun's failure summary on stderr."""
        try:
            summary = self.err.read_text(errors="replace")
        except OSError:
            summary = ""
        return rank_root_cause(log_dir, summary_failure(summary), summary, returncode)


def tagged_pids(token: str) -> list[int]:
    """Live processes whose environment carries this launch's token (Linux /proc)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours
    return found


def _signal_all(proc: subprocess.Popen[bytes], token: str, sig: int) -> None:
    for pid in tagged_pids(token):
        for kill in (os.killpg, os.kill):  # workers lead their own groups (torchrun's choice)
            try:
                kill(pid, sig)
            except OSError:
                pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
