"""The `pclab` command ends without the interpreter's teardown (pclab.cli.console): the exit
code and the printed output are main()'s, the exit handlers run first, and a process that
imported torch (as `pclab check` does, to read the trainer file) exits at once."""

from __future__ import annotations

import subprocess
import sys

import pytest
from runner_support import ROOT

import pclab
from pclab import cli


class _Exited(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def test_console_runs_the_exit_handlers_then_exits_with_mains_code(monkeypatch, capsys):
    calls: list[str] = []
    monkeypatch.setattr(sys, "argv", ["pclab", "--version"])
    monkeypatch.setattr(cli.atexit, "_run_exitfuncs", lambda: calls.append("atexit"))

    def exit_now(code: int) -> None:
        calls.append(f"exit {code}")
        raise _Exited(code)

    monkeypatch.setattr(cli.os, "_exit", exit_now)
    with pytest.raises(_Exited):
        cli.console()
    assert calls == ["atexit", "exit 0"]
    assert capsys.readouterr().out == f"pclab {pclab.__version__}\n"


@pytest.mark.parametrize(
    "args, code", [(["--version"], 0), ([], 2), (["run", "no_such_experiment"], 2)]
)
def test_python_m_pclab_keeps_every_exit_code(args, code):
    done = subprocess.run(
        [sys.executable, "-m", "pclab", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr


def test_an_exit_handler_registered_by_the_command_still_runs(tmp_path):
    # what atexit holds in a real process (a runtime's shutdown, the scratch folders) runs
    marker = tmp_path / "ran"
    code = (
        "import atexit, sys, torch\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
        "sys.argv = ['pclab', '--version']\n"
        "from pclab.cli import console\n"
        "console()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"pclab {pclab.__version__}"
    assert marker.read_text() == "yes"


def test_ctrl_c_during_a_check_ends_it_with_one_line_and_nothing_left(tmp_path):
    """Ctrl-C while `pclab check` follows its run: exit 130, one line on stderr (no
    traceback), and no rank, torchrun agent or scratch folder outlives the command."""
    import os
    import signal
    import time
    import uuid

    from runner_support import MARK_ENV, marked, wait_for

    mark = uuid.uuid4().hex
    env = os.environ | {MARK_ENV: mark, "TMPDIR": str(tmp_path)}
    trainer = ROOT / "examples" / "trainers" / "run_resume_correct.py"  # eight launches more
    proc = subprocess.Popen(
        [sys.executable, "-m", "pclab", "check", str(trainer)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal has it: a shell without job control starts a background job (CI's
        # `.ci/run &`) with SIGINT ignored, and Python then installs no Ctrl-C handler at all
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert wait_for(lambda: len(marked(mark)) >= 3, 120), "its ranks never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and err.splitlines()[-1] == "pclab: stopped (Ctrl-C)", err
    assert wait_for(lambda: marked(mark) == [], 15), marked(mark)
    assert [p.name for p in tmp_path.iterdir()] == []
