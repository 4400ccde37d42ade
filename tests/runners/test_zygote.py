"""The zygote (runners/zygote.py), the warm pool's pre-imported process, in a runtime of this
module's own: its ranks reuse the preloaded modules until a project file changes, a spare
rank that died while waiting is never used, every socket listens on loopback only, and its
zygote, store and ranks die with the server that started it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest
from runner_support import MARK_ENV, ROOT, alive, marked, wait_for, warm_runtime

from pclab.runners import launcher, zygote
from pclab.runners.settings import ENV_NAMES
from pclab.runners.zygote import SPARE_RANKS, _end_others, waiting_spares

LOOP = "tests.runners.workers.collective_loop"


@pytest.fixture(scope="module")
def warm_mark() -> str:
    """The mark in the environment of every process this module's pool starts."""
    return uuid.uuid4().hex


@pytest.fixture(scope="module")
def warm(warm_mark, tmp_path_factory):
    """This module's runtime with the pool on; nothing it started outlives its shutdown."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MARK_ENV, warm_mark)  # inherited by every zygote, store and rank
        patch.setattr("tempfile.tempdir", str(tmp_path_factory.mktemp("zygote")))
        with warm_runtime() as runtime:
            yield runtime
    wait_for(lambda: marked(warm_mark) == [], 5)
    assert marked(warm_mark) == [], "a zygote, store or rank outlived the pool's shutdown"


def _launch_after_touching(path, worker: str, runtime):
    """A launch of `worker` while `path`'s modification time says it was edited (restored
    after, to the nanosecond: the zygote compares stamps for equality)."""
    before = path.stat()
    try:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        return launcher.launch(worker, 2, runtime=runtime)
    finally:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_ranks_reuse_preloaded_modules_until_a_project_file_changes(warm):
    """Ranks start with the zygote's imports of the lab's modules; once one of those files is
    edited, every rank reads the project afresh (an edit is never run stale)."""
    worker = "tests.runners.workers.reports_preloaded"
    first = launcher.launch(worker, 2, runtime=warm)
    assert first.ok, first.message
    assert [r["preloaded"] for r in first.ranks] == [True, True]
    # imported by a preloaded worker
    edited = ROOT / "pclab" / "experiments" / "negatives" / "params.py"
    second = _launch_after_touching(edited, worker, warm)
    assert second.ok, second.message
    assert [r["preloaded"] for r in second.ranks] == [False, False]


def test_ranks_find_the_transformer_loaded_until_one_of_its_files_changes(warm):
    """The Transformer worker's preload(): its hash-checked start and windows are loaded once
    in the zygote; once a file they came from is touched, a rank drops them with the
    project's modules and loads (and checks) them again."""
    worker = "tests.runners.workers.reports_preloaded"
    first = launcher.launch(worker, 2, runtime=warm)
    assert first.ok, first.message
    assert [(r["start"], r["windows"]) for r in first.ranks] == [(True, True)] * 2
    touched = ROOT / "pclab" / "artifacts" / "adamw_state.safetensors"
    second = _launch_after_touching(touched, worker, warm)
    assert second.ok, second.message
    assert [(r["preloaded"], r["start"]) for r in second.ranks] == [(False, False)] * 2


def test_a_spare_rank_killed_while_it_waits_is_never_used(warm):
    """The zygote forks ranks ahead of time; one that dies while waiting is replaced."""
    (zygote,) = warm.pool.zygote_pids()
    # the ranks and a store, all waiting (forked again once the zygote is idle after a run),
    # not the last launch's store and ranks on their way out
    assert wait_for(lambda: len(waiting_spares(zygote)) == SPARE_RANKS + 1, 5)
    killed = waiting_spares(zygote)
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    # dead, not merely signalled: a SIGKILLed process of ~300 MB takes a moment to go
    assert wait_for(lambda: not any(alive(pid) for pid in killed), 5)
    result = launcher.launch("bench.noop_worker", 2, runtime=warm)
    assert result.ok, result.message


def _listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of the TCP sockets these processes listen on (from /proc)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                    found.add(fields[1].split(":")[0])
    return found


def test_spares_are_told_from_a_launchs_ranks(warm):
    """While a launch runs, the zygote's children are its store and ranks, as many as its
    spares: `waiting_spares` names none of them (the bench reads an idle zygote by it), and
    names the new spares once the zygote has forked them after the launch."""
    (zygote,) = warm.pool.zygote_pids()
    during: list[tuple[list[int], list[int]]] = []

    def look(event):
        if event.event == "rank_done" and event.values["done"] == 2:
            with open(f"/proc/{zygote}/task/{zygote}/children") as f:
                children = [int(pid) for pid in f.read().split()]
            during.append((children, waiting_spares(zygote)))

    result = launcher.launch(
        LOOP, 2, ["--seconds", "1"], timeout_s=120, progress=look, runtime=warm
    )
    assert result.ok, result.message
    ranks = {r["pid"] for r in result.ranks}
    ((running, said),) = during
    assert ranks < set(running) and said == []  # read mid-launch: its ranks, no spare
    assert wait_for(lambda: len(waiting_spares(zygote)) == SPARE_RANKS + 1, 60)
    assert set(waiting_spares(zygote)).isdisjoint(running)


def test_a_rank_killed_before_it_joined_ends_the_run_at_once(warm):
    """Rank 1 is SIGKILLed before it joins the group: rank 0 would wait in its rendezvous for
    the process-group timeout (60 s; the probe of issue 34 saw a killed Transformer rank
    answered after 60.4 s). The zygote ends the others as torchrun's agent does."""
    began = time.monotonic()
    worker = "tests.runners.workers.dies_before_rendezvous"
    result = launcher.launch(worker, 2, timeout_s=120, runtime=warm)
    took = time.monotonic() - began
    assert not result.ok and result.message == "rank 1: killed by SIGKILL", result.message
    assert took < 20, f"answered after {took:.1f} s"
    assert launcher.launch("bench.noop_worker", 2, runtime=warm).ok  # the zygote goes on


def test_every_socket_listens_on_loopback_only(warm, warm_mark):
    seen: set[str] = set()

    def look(event):
        if event.event == "rank_done" and event.values["done"] == 2:
            seen.update(_listening_addresses(marked(warm_mark)))

    result = launcher.launch(
        LOOP, 2, ["--seconds", "1"], timeout_s=120, progress=look, runtime=warm
    )
    assert result.ok, result.message
    # the store and Gloo's pairs: 127.0.0.1 in /proc's little-endian hex (IPv4 or mapped)
    assert seen, "no listening socket found while the ranks ran"
    assert seen <= {"0100007F", "0000000000000000FFFF00000100007F"}, seen


def test_the_pool_dies_with_its_server(tmp_path):
    """SIGKILL of the server mid-run: its zygote, store and ranks are gone within seconds.
    The "server" is a plain script with PCL_WARM_POOL=1 whose launch is given no runtime: the
    fresh runtime of that call starts the zygote. (The run's directory cannot be removed by a
    killed server: it goes to this test's own temporary directory, not the machine's.)"""
    mark = uuid.uuid4().hex
    script = (
        "import sys, threading\n"
        "from pclab.runners import launcher\n"
        "def say(e):\n"
        "    if e.event == 'rank_done' and e.values['done'] == 2: print('running', flush=True)\n"
        f"launcher.launch({LOOP!r}, 2, ['--seconds', '120'], timeout_s=200, progress=say)\n"
    )
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.update({MARK_ENV: mark, ENV_NAMES["warm_pool"]: "1"})
    server = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout.readline().strip() == "running"
        assert len(marked(mark)) >= 4  # the server, the zygote, the store and two ranks
        server.send_signal(signal.SIGKILL)
        server.wait()
        assert wait_for(lambda: marked(mark) == [], 5), marked(mark)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def test_a_child_whose_zygote_died_before_it_armed_its_death_signal_exits(tmp_path):
    """PR_SET_PDEATHSIG only acts from the prctl call on: a zygote killed between a fork and
    that call (a server shutting down while the zygote forks its next spares) would leave a
    spare store serving forever. The child here waits until its parent has died, then arms
    the signal as every forked child does; it must exit instead of going on."""
    script = (
        "import os, sys, time\n"
        "from pclab.runners.zygote import _die_with_parent\n"
        "said = int(sys.argv[1])\n"
        "parent = os.getpid()\n"
        "if os.fork() == 0:\n"
        "    while os.getppid() == parent:\n"
        "        time.sleep(0.01)\n"
        "    _die_with_parent(parent)\n"
        "    os.write(said, b'survived')\n"
        "    os._exit(0)\n"
    )
    said_r, said_w = os.pipe()
    try:
        subprocess.run(
            [sys.executable, "-c", script, str(said_w)], cwd=ROOT, pass_fds=(said_w,), timeout=120
        )
        os.close(said_w)
        said_w = -1
        # EOF once the child has gone; its word if it went on
        assert os.read(said_r, 64) == b""
    finally:
        os.close(said_r)
        if said_w != -1:
            os.close(said_w)


def _child(code: str) -> tuple[int, int, int]:
    """A rank as `_serve_one` holds it, (pid, job pipe, exit-code pipe), running `code` in
    its own session; it writes no word, so only its wait status can say how it ended."""
    code_r, code_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", code], pass_fds=(code_w,), start_new_session=True
    )
    os.close(code_w)
    return child.pid, -1, code_r


def test_a_peer_killed_from_outside_keeps_its_signal_when_the_other_rank_is_read_first():
    """Rank 1 is killed; rank 0, losing its peer, fails at once, and its word can be read
    before rank 1's closed pipe: the ranks that had already ended keep their own codes (rank
    1's SIGKILL, which the diagnosis names), and only the one still running is ended as 0."""
    killed = _child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    running = _child("import time; time.sleep(60)")
    ranks = [(0, -1, -1), killed, running]
    assert wait_for(lambda: not alive(killed[0]) or _readable(killed[2]), 10)
    waiting = {killed[2]: 1, running[2]: 2}
    codes: list[int | None] = [1, None, None]  # rank 0's word: it failed, it said so first
    _end_others(ranks, waiting, codes)
    assert codes == [1, -signal.SIGKILL, 0] and waiting == {}
    assert os.waitstatus_to_exitcode(os.waitpid(running[0], 0)[1]) == -signal.SIGKILL


def test_a_peer_killed_from_outside_keeps_its_signal_when_its_pipe_closes_after_the_other_word(
    monkeypatch,
):
    """The same, with rank 1's pipe closing only after rank 0's word was read (under load, a
    killed rank can end after the peer it broke: its SIGKILL was reported as 0, and the launch
    named rank 0's lost connection). Here a grandchild holds the killed rank's pipe open for a
    moment; the others are given PEER_GRACE_S (long here, so that the test waits for nothing
    but the pipe) to end by themselves before they are ended."""
    monkeypatch.setattr(zygote, "PEER_GRACE_S", 60.0)
    killed = _child(
        "import os, signal, time\n"
        "if os.fork() == 0:\n"
        "    time.sleep(1.5)\n"  # the pipe's last holder
        "    os._exit(0)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert wait_for(lambda: not alive(killed[0]), 10) and not _readable(killed[2])
    waiting = {killed[2]: 1}
    codes: list[int | None] = [1, None]  # rank 0's word, read before rank 1's pipe closed
    _end_others([(0, -1, -1), killed], waiting, codes)
    assert codes == [1, -signal.SIGKILL] and waiting == {}


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])
