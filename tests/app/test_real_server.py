"""The real server (`streamlit run app.py`), as a host starts it and as a visitor opens it:
a malformed PCL_* setting stops it with one line, and a server killed with SIGKILL leaves
nothing in the temporary directory once the next one has started. `pclab serve` refuses a
malformed setting before anything listens, and sweeps a dead server's folders before it
serves. (Which folders are stale, and a run's folders under a closed tab, SIGTERM and SIGKILL:
tests/runners/test_scratch.py, tests/e2e/test_leftovers.py.)

A visit is one Streamlit session opened over the server's websocket (what a browser tab
does first), so these tests need no browser. Streamlit runs app.py for the first time when
the first session opens: that is where the lab reads its settings and prepares its folders.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from bench import ROOT
from bench.cold_start import free_port, start_server, stop_server, wait_healthy
from pclab.runners import memory
from pclab.runners.settings import ENV_NAMES
from pclab.ui.serving import CACHE_PREFIX

pytestmark = pytest.mark.timeout(300)
MALFORMED = {
    "PCL_WARM_POOL": "maybe",
    "PCL_PRELOAD": "perhaps",
    "PCL_PRELOAD_FRAMEWORKS": "sometimes",
    "PCL_MAX_CONCURRENT_RUNS": "many",
    "PCL_MAX_WAITING_RUNS": "-4",
    "PCL_PG_TIMEOUT_S": "inf",
    "PCL_MEMORY_BUDGET_MB": "abc",
    "PCL_ROOM_DB": "/no/such/folder/rooms.sqlite3",
}


def visit(url: str, timeout_s: float = 120) -> bool:
    """Open one session and wait for its first script run to finish; False when the
    connection closed first (the server stopped)."""
    request = BackMsg()
    request.rerun_script.query_string = ""
    request.rerun_script.page_script_hash = ""
    deadline = time.monotonic() + timeout_s
    ws_url = url.replace("http://", "ws://") + "/_stcore/stream"
    try:
        with connect(ws_url, subprotocols=["streamlit"], open_timeout=30) as ws:
            ws.send(request.SerializeToString())
            while time.monotonic() < deadline:
                message = ForwardMsg()
                message.ParseFromString(ws.recv(timeout=deadline - time.monotonic()))
                if message.WhichOneof("type") == "script_finished":
                    return True
    except (ConnectionClosed, ConnectionError):
        return False
    raise AssertionError(f"the first script run did not finish in {timeout_s} s")


def test_the_served_config_keeps_the_event_loop_free_after_a_run():
    """The checkout's .streamlit/config.toml, as Streamlit reads it: no source watcher (after
    a script run that imported a new module it re-read the path of every loaded module on the
    server's event loop, 50-70 ms of a first press) and no forced collection after each run
    (0.25-0.7 s with torch loaded): both measured in BENCHMARKS.md."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"
    assert config["runner"]["postScriptGC"] is False


def test_every_variable_has_a_malformed_case():
    assert set(MALFORMED) == set(ENV_NAMES.values())


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_setting_stops_the_server_with_one_line(name, tmp_path):
    log = tmp_path / "server.log"
    port = free_port()
    with log.open("wb") as out:
        server = start_server(port, env={name: MALFORMED[name]}, log=out)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_healthy(server, url, timeout_s=120), log.read_text(errors="replace")
        visit(url)
        code = server.wait(timeout=60)
    finally:
        stop_server(server)
    text = log.read_text(errors="replace")
    lines = [line for line in text.splitlines() if name in line]
    assert code == 2, text[-2000:]
    assert len(lines) == 1, text[-2000:]
    assert f"{name}={MALFORMED[name]!r} can't be used: write " in lines[0]
    assert "Traceback" not in text


def _caches(temp: Path) -> list[Path]:
    return sorted(temp.glob(f"{CACHE_PREFIX}*"))


def test_a_killed_servers_temporary_files_do_not_outlive_the_next_start(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"TMPDIR": str(temp)}  # the server's defaults: the warm pool on
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # the server picks its own
    first_port, second_port = free_port(), free_port()
    first = start_server(first_port, env=env)
    try:
        assert wait_healthy(first, f"http://127.0.0.1:{first_port}")
        assert visit(f"http://127.0.0.1:{first_port}")
        left = _caches(temp)
        assert len(left) == 1, left  # the first server's own cache folder
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # no clean-up of its own can run
        first.wait(timeout=30)
    assert _caches(temp) == left  # what a SIGKILL leaves: the next start must remove it

    second = start_server(second_port, env=env)
    try:
        assert wait_healthy(second, f"http://127.0.0.1:{second_port}")
        assert visit(f"http://127.0.0.1:{second_port}")
        assert not left[0].exists(), "the killed server's cache folder is still there"
        assert len(_caches(temp)) == 1  # the second server's own
    finally:
        stop_server(second)  # SIGTERM: the server removes its own on the way out
    assert list(temp.iterdir()) == [], sorted(p.name for p in temp.iterdir())


# ------------------------------------------- pclab serve: the settings checked before serving


def _serve(port: int, env: dict, log, cwd: Path) -> subprocess.Popen:
    """`pclab serve` (as `python -m pclab serve`) from `cwd`, with streamlit's options."""
    options = ["--server.port", str(port), "--server.address", "127.0.0.1"]
    return subprocess.Popen(
        [sys.executable, "-m", "pclab", "serve", *options],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_pclab_serve_refuses_a_malformed_setting_before_listening(name, tmp_path):
    """The refusal comes before any port is open: a host's health check never says "ok"."""
    port, log = free_port(), tmp_path / "serve.log"
    with log.open("wb") as out:
        server = _serve(port, {name: MALFORMED[name]}, out, tmp_path)
        code = server.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert code == 2, text
    assert text.splitlines() == [
        f"pclab serve: error: {name}={MALFORMED[name]!r} can't be used: write "
        + text.split("can't be used: write ", 1)[1].strip()
    ]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def _zygotes(pid: int) -> list[int]:
    """The warm pool's zygotes among `pid`'s children."""
    found = []
    for child in memory.children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"pclab.runners.zygote" in f.read():
                    found.append(child)
        except OSError:
            continue
    return found


def test_pclab_serve_sweeps_then_serves_the_lab(tmp_path):
    """From another folder: a dead server's folders are gone before the server answers, the
    process serving is the one started, with the lab's app and settings, and it warms the
    lab as it starts: its warm pool's zygote is up before any page was opened (a bare
    `streamlit run` starts it at the first page view)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    stale = temp / f"pcl-run-{_dead_pid()}-abc"
    (stale / "tmp" / "pcl-hf-trainer-x").mkdir(parents=True)
    port, log = free_port(), tmp_path / "serve.log"
    with log.open("wb") as out:
        server = _serve(port, {"TMPDIR": str(temp)}, out, tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_healthy(server, url, timeout_s=120), log.read_text(errors="replace")
        assert not stale.exists()
        deadline = time.monotonic() + 120
        while not _zygotes(server.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _zygotes(server.pid), "no zygote before the first visit"
        assert visit(url)
    finally:
        stop_server(server)
    assert list(temp.iterdir()) == [], sorted(p.name for p in temp.iterdir())


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid
