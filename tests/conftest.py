"""Shared test setup: run from the repository root so `core`, `ui` and `runners` import; and
the fast tier, `python -m pytest -m quick` (QUICK_TIER below)."""

import os
import sys
from pathlib import Path

import pytest

# The tests' own torch work is on tiny tensors, where intra-op threads only contend (the ranks
# and the server run on one thread for the same reason): tests/core took 43 CPU-seconds on one
# thread against 49 on two, alone on a 2-core box. Set before anything imports torch; a value
# set by hand is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The hosted-demo config hides error details from visitors; tests want the full message
# and stack when a page fails.
from streamlit import config as _streamlit_config  # noqa: E402

_streamlit_config.set_option("client.showErrorDetails", "full")


def _scan_installed_components_once() -> None:
    """Every new AppTest scans all installed distributions' metadata for Streamlit v2
    components on its first run (streamlit.testing.v1.app_test: a fresh
    BidiComponentManager per AppTest): about 0.4 s on this environment's 350 packages, paid
    by each of the suite's ~1,500 AppTests. What is installed does not change within a test
    session (tests/package/test_wheel.py installs into a venv of its own), so the first
    scan's answer is the answer; a real server scans once at start-up anyway."""
    from functools import cache

    from streamlit.components.v2 import manifest_scanner

    scan = manifest_scanner.scan_component_manifests
    once = cache(lambda: scan())
    manifest_scanner.scan_component_manifests = lambda max_workers=None: list(once())


_scan_installed_components_once()


@pytest.fixture(scope="session")
def warm_pool():
    """One warm Runtime per test process (each xdist worker), its zygote idle with every
    experiment's rank code imported ahead, for the tests that check what a run computes
    rather than how a launch starts, stops or fails: a run then costs well under a second
    instead of a cold launch's 10-20 s, on real processes and Gloo all the same. Shared, since
    a pool's start is 4-8 s and eleven files used one each; a test that needs other settings,
    its own environment in the ranks, or kills what it runs, starts its own
    (runner_support.warm_runtime). Shut down when the session ends."""
    runners = str(ROOT / "tests" / "runners")
    if runners not in sys.path:
        sys.path.insert(0, runners)
    from runner_support import warm_runtime

    with warm_runtime(frameworks=True) as runtime:
        yield runtime


# The fast tier a contributor runs before the full suite: `python -m pytest -m quick`
# (about a minute on a quiet 2-core box; README "Two commands"). Each entry is a test file
# (every test in it) or `file::function` (every parametrisation of that function), relative to
# the repository root; tests/test_quick_tier.py holds every entry to an existing test. Chosen
# for what a change most often breaks, at the lowest cost: the math against its independent
# references, the contracts users' CI depends on (names, catalogues, options, exit codes, the
# import graph), a few pages through AppTest, and one real torchrun + Gloo launch.
QUICK_TIER: dict[str, tuple[str, ...]] = {
    "core": (
        "tests/core/test_ledger.py",
        "tests/core/test_framework.py",
        "tests/core/test_infonce.py",
        "tests/core/test_clipping.py",
        "tests/core/test_update_weights.py",
        "tests/core/test_windows.py",
        "tests/core/test_schedules.py",
        "tests/core/test_coverage.py",
    ),
    "contracts": (
        "tests/test_architecture.py",
        "tests/test_catalogue.py",
        "tests/test_glossary.py",
        "tests/test_quick_tier.py",
        "tests/runners/test_settings.py",
        "tests/runners/test_experiment_declare.py",
        "tests/runners/test_coupled_contract.py",
        "tests/trainer_check/test_modes.py",
        "tests/runners/test_trainer_check.py::test_bad_arguments_exit_2_in_one_line",
        "tests/app/test_error_codes.py",
    ),
    "pages": (
        "tests/app/test_every_page.py::test_every_page_file_is_registered",
        "tests/app/test_every_page.py::test_the_home_page_walks_the_navigation_in_order",
        "tests/app/test_every_page.py::test_language_switch_keeps_widget_values",
        "tests/app/test_ledger_pages.py",
    ),
    # The negatives experiment on 3 Gloo processes, through `pclab run negatives --json`,
    # against core's prediction: the session's one cold launch (tests/runners/conftest.py).
    "launch": ("tests/runners/test_negatives.py",),
}
QUICK_ENTRIES = frozenset(entry for entries in QUICK_TIER.values() for entry in entries)
QUICK_FILES = frozenset(entry.split("::")[0] for entry in QUICK_ENTRIES)


def _quick_only(config: pytest.Config) -> bool:
    """`-m quick` exactly: then nothing outside the tier can be selected."""
    return config.getoption("markexpr", "") == "quick"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m quick`, do not import the test files outside the tier (collecting the whole
    suite costs each xdist worker about 25 s of CPU, only to deselect it)."""
    if not _quick_only(config) or not collection_path.is_file():
        return None
    if not (collection_path.name.startswith("test_") and collection_path.suffix == ".py"):
        return None
    try:
        relative = collection_path.resolve().relative_to(ROOT).as_posix()
    except ValueError:  # a file outside the checkout, named on the command line
        return None
    return True if relative not in QUICK_FILES else None


# The order in which the xdist workers are handed the test files (`--dist loadfile
# --no-loadscope-reorder` in pyproject.toml): the folders whose files are long first (the
# browser's, then the launches'), the short files last, so that a run ends with short files on
# both workers. xdist's default order, most tests first, handed out the browser files, each a
# few tests of 10-90 s, last: one worker ran the hosted demo's 90 s while the other had ended.
LONG_FILES_FIRST = ("tests/e2e/", "tests/runners/", "tests/trainer_check/", "tests/package/")


def _handed_out(item: pytest.Item) -> int:
    path = item.nodeid.split("::")[0]
    return next((i for i, f in enumerate(LONG_FILES_FIRST) if path.startswith(f)), 99)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tier's tests `quick` (a file's every test, or a function's every case), and
    put the long files first (LONG_FILES_FIRST; stable, so a file's tests keep their order)."""
    items.sort(key=_handed_out)
    for item in items:
        path = item.nodeid.split("::")[0]
        function = item.nodeid.split("[")[0]
        if path in QUICK_ENTRIES or function in QUICK_ENTRIES:
            item.add_marker(pytest.mark.quick)


# DeepSpeed compiles its CPU shared-memory op (g++: 52 s and 88 CPU-seconds alone on a quiet
# 2-core box, two minutes beside the other worker) the first time a process on a fresh
# machine starts its distributed backend, and the framework table's tests are the first to:
# their module's set-up then waited for the compiler. Started as collection ends, by one
# test process of the session, the build runs beside the tests that come before; the ranks
# that need the op wait on torch's build lock and load what it built. The op serves
# DeepSpeed's inference all-reduce, not the training path the table measures, so nothing
# measured depends on when it is built. A session that collects none of these files starts
# nothing.
NEEDS_DEEPSPEED_OP = frozenset(
    {
        "tests/runners/test_frameworks.py",
        "tests/runners/test_resume_frameworks.py",
        "tests/runners/test_run_frameworks.py",
        "tests/trainer_check/test_framework_runs.py",
    }
)
BUILD_DEEPSPEED_OP = (
    "from deepspeed.comm.torch import build_shm_op; build_shm_op()"  # DeepSpeed's own build
)
_op_build: list = []


def pytest_collection_finish(session: pytest.Session) -> None:
    import importlib.util
    import os
    import subprocess

    from pclab.ui import first_run

    worker = getattr(session.config, "workerinput", {}).get("workerid", "gw0")
    files = {item.nodeid.split("::")[0] for item in session.items}
    if worker != "gw0" or not files & NEEDS_DEEPSPEED_OP:
        return
    if importlib.util.find_spec("deepspeed") is None or not first_run.to_compile("deepspeed"):
        return
    _op_build.append(
        subprocess.Popen(
            [sys.executable, "-c", BUILD_DEEPSPEED_OP],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "DS_ACCELERATOR": "cpu"},
        )
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The build is waited for, never killed: a build stopped midway leaves torch's lock file
    behind, and every later build would wait on it for good."""
    for build in _op_build:
        build.wait(timeout=900)
