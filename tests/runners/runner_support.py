"""Helpers for the real-torchrun tests: a look at the process table (/proc) for anything a
launch left behind, and a warm runtime of a test's own. (Fixtures live in conftest.py; this
module is importable by name.)"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from pclab.runners.runtime import Runtime
from pclab.runners.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MARK_ENV = "PCL_TEST_MARK"  # inherited by torchrun and every rank: finds them in /proc
NEGATIVES_ARGS = ("--world-size", "3", "--tau", "0.5")  # P > 2 exercises the extended pairs


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def children(pid: int | None = None) -> list[int]:
    """Direct children of `pid` (default: this test process), zombies included: an
    un-reaped child is a leftover too."""
    pid = os.getpid() if pid is None else pid
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(entry)) is not None and stat[1] == pid:
            found.append(int(entry))
    return found


def marked(mark: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries MARK_ENV=mark."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        stat = _stat(entry)
        if needle in environ and stat is not None and stat[0] != "Z":
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie is no longer alive)."""
    stat = _stat(str(pid))
    return stat is not None and stat[0] != "Z"


def wait_for(condition, seconds: float) -> bool:
    """Poll `condition` every 50 ms for up to `seconds`; its last value."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@contextlib.contextmanager
def warm_runtime(frameworks: bool = False, **settings) -> Iterator[Runtime]:
    """A Runtime of the test's own with the warm pool on, its first zygote idle (importing
    every registered experiment ahead, and with `frameworks` the installed training
    frameworks too, as a served zygote does: ui.serving); shut down after the block."""
    from pclab.experiments import registry
    from pclab.experiments.trainer_check.frameworks.setting import preload_modules

    runtime = Runtime.start(Settings(warm_pool=True, **settings))
    preload = registry.worker_modules() + (preload_modules() if frameworks else ())
    try:
        runtime.pool.prestart(preload=preload)
        assert wait_for(lambda: runtime.pool.size()["idle"] == 1, 180), "no zygote started"
        yield runtime
    finally:
        runtime.shutdown()


OWN_ENVIRONMENT_TIMEOUT_S = 1800  # one check under a framework's own Python, at the most


def own_environment_timeout():
    """The pytest-timeout mark for a file whose fixtures run checks in a framework's own
    environment: pytest-timeout counts a module fixture's set-up in the first test that asks
    for it, and a resume check there (ten launches) outlived the suite's 300 s in CI
    (OLMo-core's, beside the other worker), so the bound is the check's own, with room to
    report."""
    import pytest

    return pytest.mark.timeout(OWN_ENVIRONMENT_TIMEOUT_S + 120)


def run_in_own_environment(package: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """`python ARGS` under the Python of `package`'s own environment (bench/framework_env.py),
    this checkout first on its path, every rank's evidence to folder/record.jsonl; the calling
    test skips, saying how to build the environment, where there is none."""
    import pytest

    from bench import framework_env

    python = framework_env.python_for(package)
    if python is None:
        pytest.skip(
            f"{package} is not installed here: it has its own environment, built by "
            f"`python -m bench.framework_env {package}` (or set "
            f"${framework_env.python_env(package)})"
        )
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PCL_FRAMEWORK_RECORD=str(folder / "record.jsonl"), PYTHONPATH=str(root))
    # the check bounds each of its launches itself; a resume check makes ten of them
    return subprocess.run(
        [str(python), *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=OWN_ENVIRONMENT_TIMEOUT_S,
    )


def check_in_own_environment(
    package: str, folder: Path, trainer: Path, exit_code: int = 1
) -> tuple[dict, list[dict]]:
    """`pclab check TRAINER --json` under `package`'s own Python (run_in_own_environment):
    its report, which must exit `exit_code` (1: a different update or run, as recorded), and
    every rank's evidence lines."""
    import json

    done = run_in_own_environment(package, folder, "-m", "pclab", "check", str(trainer), "--json")
    assert done.returncode == exit_code, done.stderr[-3000:]
    lines = [json.loads(x) for x in (folder / "record.jsonl").read_text().splitlines()]
    return json.loads(done.stdout), lines


def assert_measures_its_record(check: dict, adapter: str, rel: float) -> None:
    """A check of an adapter (its code) measured what the framework table records for it: the
    uneven scenario's scheme and weights (to `rel`), every scenario's verdict."""
    import pytest

    from pclab.experiments.trainer_check import frameworks

    recorded = frameworks.by_code()[adapter]
    assert recorded["command"] == frameworks.command(frameworks.BY_CODE[adapter])
    uneven = next(s for s in check["scenarios"] if s["name"] == "uneven")
    assert (uneven["scheme"], check["passed"]) == (recorded["scheme"], recorded["passed"])
    assert {s["name"]: s["passed"] for s in check["scenarios"]} == recorded["scenarios"]
    for got, want in zip(uneven["weights"], recorded["weights"], strict=True):
        assert got == pytest.approx(want, rel=rel)


COUPLED_EXACT = (  # a fresh coupled record's fields that must equal the stored one's
    "code framework package version setting default mode accum scheme schemes passed status "
    "scenarios sizes weights counts tolerance dtype diagnoses command reason"
).split()


def assert_coupled_record_is_fresh(check: dict, adapter: str) -> dict:
    """The record a coupled check of an adapter (its code) makes (frameworks.measured)
    is the stored one: COUPLED_EXACT equal, the factors (the named objective's, each parameter
    group's) to 1e-9, the residual and a failed check's difference to 1e-6. Returns it."""
    import pytest

    from pclab.experiments.trainer_check import frameworks

    setting, recorded = frameworks.BY_CODE[adapter], frameworks.by_code()[adapter]
    fresh = frameworks.measured(setting, check, recorded["recorded_at"])
    assert {k: fresh[k] for k in COUPLED_EXACT} == {k: recorded[k] for k in COUPLED_EXACT}
    assert fresh["factor"] == pytest.approx(recorded["factor"], rel=1e-9)
    groups = [(g["parameters"], g["factor"]) for g in recorded["scale_groups"]]
    assert [
        (g["parameters"], pytest.approx(g["factor"], rel=1e-9)) for g in fresh["scale_groups"]
    ] == groups
    assert fresh["residual"] == pytest.approx(recorded["residual"], rel=1e-6, abs=1e-12)
    if recorded["passed"]:
        assert fresh["max_abs_diff"] <= recorded["tolerance"]
    else:
        assert fresh["max_abs_diff"] == pytest.approx(recorded["max_abs_diff"], rel=1e-6)
    return fresh


def checked_with_evidence(settings: list, runtime: Runtime, folder: Path) -> tuple[dict, list]:
    """frameworks.check_adapters(settings) in one launch, with every rank's evidence: the
    adapters write it to $PCL_FRAMEWORK_RECORD, pointed at folder/record.jsonl for the launch
    only. Returns (adapter -> its check, the evidence lines parsed)."""
    import json

    import pytest

    from pclab.experiments.trainer_check import frameworks

    record = folder / "record.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PCL_FRAMEWORK_RECORD", str(record))
        checks = frameworks.check_adapters(settings, runtime=runtime)
    lines = [json.loads(x) for x in record.read_text().splitlines()] if record.exists() else []
    return checks, lines
