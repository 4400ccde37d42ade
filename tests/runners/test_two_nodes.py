"""Past one machine, for real: two `torchrun` agents on this host as two nodes
(`--nnodes 2 --nproc-per-node 1`, a c10d rendezvous on 127.0.0.1, Gloo) give the same report
and exit code as one node running both ranks (`--standalone --nproc-per-node 2`).

Three configurations, each launched once per session in each layout: the trainer check of a
correct trainer (exit 0) and of a wrong one (microbatch means, exit 1), and the Transformer
experiment's worker. Every launch is typed as a user types it (README "Past one machine").

What is compared, and what is not: the whole of each document, nothing left out. The trainer
check's report.json and every rank's rank<r>.json name no folder of the run (the test asserts
it: the out-dirs differ between the layouts), no time and no host; `trainer` is the path given
on both command lines; the "hash" and "sha256" fields hash the updated weights and the rank's
own payload, so they are the result itself (the same update, bit for bit, whatever the layout),
not a property of the run. The Transformer's report is built from the ranks' files as its
command builds it (build_report, then the ranks' parameters).

Exit codes: rank 0 sends the check's verdict to the other ranks and every rank exits with it,
so every agent exits as the one-node launch does. (When only rank 0 carried it, the agent whose
ranks exited 0 waited at torchrun's exit barrier, up to 300 s, for an agent that had failed and
would never come: whenever it held the rendezvous store, which on one host is a race.) With a
c10d rendezvous torchrun assigns the node ranks itself (`--node-rank` is ignored, torch says),
so either agent may hold rank 0: the test finds which from the files.

What this does not show: two hosts (both agents are on one loopback), NCCL or a GPU.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from runner_support import MARK_ENV, ROOT, marked, wait_for

from pclab.experiments.transformer import EXPERIMENT as TRANSFORMER
from pclab.runners.protocol import RankOutput

EXAMPLES = ROOT / "examples" / "trainers"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# One launch's limit: a cold check or Transformer run takes 8-12 s on a quiet 2-core box and
# 30-40 s at a load average of 8; both layouts of a configuration run in one fixture's setup,
# under pytest's 300 s per test.
LAUNCH_TIMEOUT_S = 120.0
# A c10d agent waits this long for the other to join (torch's default is 600 s): an agent that
# never starts fails the launch in a minute, not ten.
JOIN_TIMEOUT_S = 60

CONFIGURATIONS = {
    "check_correct": (
        "pclab.experiments.trainer_check",
        ("--trainer", str(EXAMPLES / "correct_manual.py")),
    ),
    "check_wrong": (
        "pclab.experiments.trainer_check",
        ("--trainer", str(EXAMPLES / "microbatch_means.py")),
    ),
    "transformer": ("pclab.experiments.transformer", ()),
}
EXPECTED_CODE = {"check_correct": 0, "check_wrong": 1, "transformer": 0}


@dataclass
class Agent:
    """One torchrun agent (one node): its exit code, its output, its --out-dir."""

    returncode: int | None  # None: killed at the launch's timeout
    stdout: str
    stderr: str
    out_dir: Path

    def ranks(self) -> dict[int, dict]:
        """The rank<r>.json files this node's ranks wrote, checked and decoded."""
        found = {}
        for path in sorted(self.out_dir.glob("rank*.json")):
            rank = int(path.stem.removeprefix("rank"))
            found[rank] = RankOutput.decode(path.read_text(), rank).payload
        return found


@dataclass
class Launch:
    """Every agent of one launch, and the processes it left (marked in /proc)."""

    agents: list[Agent]
    leftover_processes: list[int]
    seconds: float

    def ranks(self) -> dict[int, dict]:
        merged: dict[int, dict] = {}
        for agent in self.agents:
            merged.update(agent.ranks())
        return merged

    def rank_zero_agent(self) -> Agent:
        (agent,) = [a for a in self.agents if (a.out_dir / "rank0.json").exists()]
        return agent

    def exit_code(self) -> int | None:
        codes = [a.returncode for a in self.agents]
        return None if None in codes else max(c for c in codes if c is not None)

    def failure(self) -> str:
        return "\n".join(f"exit {a.returncode}: {a.stderr[-1500:]}" for a in self.agents)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(agent_args: list[list[str]], module: str, args: tuple[str, ...], tmp: Path) -> Launch:
    """Start one torchrun agent per entry of `agent_args` at once, each with its own --out-dir
    (a node's local disk), wait for all; at the timeout kill each agent's process group."""
    mark, began = uuid.uuid4().hex, time.monotonic()
    # TMPDIR: each agent keeps its logs in a torchelastic_* folder it never removes
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp), **{MARK_ENV: mark})
    started = []
    for i, launcher in enumerate(agent_args):
        out_dir, log = tmp / f"node{i}", tmp / f"node{i}"
        out_dir.mkdir()
        stdout, stderr = open(f"{log}.stdout", "w"), open(f"{log}.stderr", "w")
        command = [*TORCHRUN, *launcher, "-m", module, "--out-dir", str(out_dir), *args]
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr, start_new_session=True
        )
        started.append((process, out_dir, stdout, stderr))
    deadline = began + LAUNCH_TIMEOUT_S
    agents = []
    for process, out_dir, stdout, stderr in started:
        try:
            code: int | None = process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
        stdout.close()
        stderr.close()
        agents.append(
            Agent(code, Path(stdout.name).read_text(), Path(stderr.name).read_text(), out_dir)
        )
    seconds = time.monotonic() - began
    wait_for(lambda: marked(mark) == [], 10)  # an agent's ranks may outlive it by a moment
    return Launch(agents, marked(mark), seconds)


def one_node(module: str, args: tuple[str, ...], tmp: Path) -> Launch:
    return _launch([["--standalone", "--nproc-per-node", "2"]], module, args, tmp)


def two_nodes(module: str, args: tuple[str, ...], tmp: Path) -> Launch:
    rendezvous = [
        *("--nnodes", "2", "--nproc-per-node", "1"),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}"),
        *("--rdzv-id", f"two-nodes-{uuid.uuid4().hex[:8]}"),
        *("--rdzv-conf", f"join_timeout={JOIN_TIMEOUT_S}"),
    ]
    return _launch([rendezvous, rendezvous], module, args, tmp)


@dataclass
class Layouts:
    name: str
    one: Launch
    two: Launch


@pytest.fixture(scope="session", params=list(CONFIGURATIONS))
def layouts(request, tmp_path_factory) -> Layouts:
    """One configuration, launched once on one node and once on two."""
    module, args = CONFIGURATIONS[request.param]
    one = one_node(module, args, tmp_path_factory.mktemp(f"{request.param}-one"))
    two = two_nodes(module, args, tmp_path_factory.mktemp(f"{request.param}-two"))
    return Layouts(request.param, one, two)


def _report(layouts: Layouts, launch: Launch) -> dict:
    """The configuration's report: the check's report.json (rank 0's node writes it), or the
    Transformer's, built from every rank's file as `pclab run transformer` builds it."""
    if layouts.name == "transformer":
        ranks = launch.ranks()
        payloads = tuple(ranks[r] for r in sorted(ranks))
        return {**TRANSFORMER.build_report(payloads), "parameters": payloads[0]["parameters"]}
    return json.loads((launch.rank_zero_agent().out_dir / "report.json").read_text())


def test_both_layouts_exit_as_expected_and_leave_nothing(layouts):
    expected = EXPECTED_CODE[layouts.name]
    for launch in (layouts.one, layouts.two):
        assert launch.exit_code() == expected, launch.failure()
        assert launch.leftover_processes == []
    # every node exits as the one-node launch does
    assert [a.returncode for a in layouts.two.agents] == [expected, expected]


def test_each_node_holds_its_own_rank(layouts):
    assert set(layouts.one.ranks()) == {0, 1}
    assert sorted(set(agent.ranks()) for agent in layouts.two.agents) == [{0}, {1}]
    for rank, payload in layouts.two.ranks().items():
        assert (payload["rank"], payload["world_size"], payload["backend"]) == (rank, 2, "gloo")


def test_the_same_rank_outputs_on_one_node_and_on_two(layouts):
    one, two = layouts.one.ranks(), layouts.two.ranks()
    for rank in (0, 1):
        for launch in (layouts.one, layouts.two):  # nothing of the run's folders in them
            text = json.dumps(launch.ranks()[rank])
            assert all(str(agent.out_dir) not in text for agent in launch.agents)
        assert one[rank] == two[rank], f"rank {rank} differs"


def test_the_same_report_on_one_node_and_on_two(layouts):
    one, two = _report(layouts, layouts.one), _report(layouts, layouts.two)
    for launch, report in ((layouts.one, one), (layouts.two, two)):
        text = json.dumps(report)
        assert all(str(agent.out_dir) not in text for agent in launch.agents)
    assert one == two
    assert one["world_size"] == 2
    if layouts.name == "transformer":
        assert TRANSFORMER.agrees(one)
    else:
        assert one["passed"] is (EXPECTED_CODE[layouts.name] == 0)
        # the summary rank 0 prints: the same words from either layout
        assert layouts.one.rank_zero_agent().stdout == layouts.two.rank_zero_agent().stdout
