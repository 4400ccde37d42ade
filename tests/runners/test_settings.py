"""The deployment settings (runners/settings.py): read from PCL_* variables, each malformed,
empty or out-of-range value refused naming its variable (ASCII digits only, each number in
the range that gives it a meaning, at most a few dozen characters of the value echoed), and
the warm pool unset until the Streamlit server turns it on (a CLI or a test stays cold)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from runner_support import ROOT

from pclab.runners import settings as settings_module
from pclab.runners import worker
from pclab.runners.memory import RUN_FOOTPRINT_MB, MemoryBudget
from pclab.runners.settings import (
    ENV_NAMES,
    LIMITS,
    PATHS,
    SHOWN_CHARS,
    SWITCHES,
    Settings,
    cgroup_cpu_limit,
    default_concurrency,
)
from pclab.runners.warm_pool import WarmPool


def test_settings_are_read_from_the_environment():
    read = Settings.from_env({"PCL_MAX_CONCURRENT_RUNS": " 3 ", "PCL_PRELOAD": "off"})
    assert read.max_concurrent_runs == 3 and read.preload is False
    assert Settings.from_env({}) == Settings()
    assert Settings().max_concurrent_runs >= 1 and Settings().max_waiting_runs >= 0
    assert set(ENV_NAMES) == set(Settings.__dataclass_fields__)  # every setting has its name


def test_the_memory_budget_defaults_to_fit_a_small_host():
    assert Settings.from_env({}).memory_budget_mb == 2500
    assert Settings.from_env({"PCL_MEMORY_BUDGET_MB": " 1800 "}).memory_budget_mb == 1800


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PCL_MAX_CONCURRENT_RUNS", "many"),
        ("PCL_MAX_CONCURRENT_RUNS", "0"),
        ("PCL_MAX_CONCURRENT_RUNS", "65"),
        ("PCL_MAX_CONCURRENT_RUNS", "1000000000000"),
        ("PCL_MAX_CONCURRENT_RUNS", "1_0"),
        ("PCL_MAX_CONCURRENT_RUNS", "+5"),
        ("PCL_MAX_CONCURRENT_RUNS", "\u0665"),  # ARABIC-INDIC DIGIT FIVE: int() reads 5
        ("PCL_MAX_CONCURRENT_RUNS", "\uff15"),  # FULLWIDTH DIGIT FIVE
        ("PCL_MAX_CONCURRENT_RUNS", "4.0"),
        ("PCL_MAX_WAITING_RUNS", "-4"),
        ("PCL_MAX_WAITING_RUNS", "257"),
        ("PCL_MAX_WAITING_RUNS", "1_000"),
        ("PCL_WARM_POOL", "maybe"),
        ("PCL_PRELOAD", "2"),
        ("PCL_PG_TIMEOUT_S", "nan"),
        ("PCL_PG_TIMEOUT_S", "inf"),
        ("PCL_PG_TIMEOUT_S", "1e-9"),
        ("PCL_PG_TIMEOUT_S", "1e3"),
        ("PCL_PG_TIMEOUT_S", "0.5"),
        ("PCL_PG_TIMEOUT_S", "3600.5"),
        ("PCL_PG_TIMEOUT_S", "+60"),
        ("PCL_PG_TIMEOUT_S", "6_0"),
        ("PCL_PG_TIMEOUT_S", "-60"),
        ("PCL_PG_TIMEOUT_S", ".5"),
        ("PCL_PG_TIMEOUT_S", "\u0666\u0660"),  # Arabic-Indic 60: float() reads 60.0
        ("PCL_MEMORY_BUDGET_MB", "lots"),
        ("PCL_MEMORY_BUDGET_MB", "10"),
        ("PCL_MEMORY_BUDGET_MB", "2.5"),
        ("PCL_MEMORY_BUDGET_MB", "1048577"),
        ("PCL_MEMORY_BUDGET_MB", "2_500"),
    ],
)
def test_malformed_settings_are_refused_naming_the_variable(name, value):
    with pytest.raises(ValueError, match=f"^{name}=") as refused:
        Settings.from_env({name: value})
    assert "\n" not in str(refused.value) and "can't be used: write " in str(refused.value)


@pytest.mark.parametrize("name", sorted(ENV_NAMES.values()))
@pytest.mark.parametrize("value", ["", "   ", "\t"])
def test_an_empty_setting_is_refused_not_read_as_unset(name, value):
    with pytest.raises(ValueError, match=f"^{name} is set but empty: write .*, or unset it$"):
        Settings.from_env({name: value})


@pytest.mark.parametrize("name", sorted(ENV_NAMES.values()))
def test_a_long_value_is_echoed_only_in_part(name):
    value = "9" * 5000
    with pytest.raises(ValueError) as refused:
        Settings.from_env({name: value})
    message = str(refused.value)
    assert message.startswith(f"{name}={'9' * SHOWN_CHARS!r}... (5000 characters) can't be used")
    assert len(message) < 200


@pytest.mark.parametrize(("field", "limits"), sorted(LIMITS.items()))
def test_each_number_setting_reads_its_whole_range_and_nothing_beyond(field, limits):
    """Both ends are accepted, written as the user would, with spaces around; one step past
    either end is refused (a timeout of at least a second, concurrency 1 to 64, ...)."""
    name, (low, high) = ENV_NAMES[field], limits
    step = 0.5 if field == "pg_timeout_s" else 1
    for edge in (low, high):
        written = str(edge) if step == 0.5 else str(int(edge))
        assert getattr(Settings.from_env({name: f" {written} "}), field) == edge
    for beyond in (low - step, high + step):
        beyond = beyond if step == 0.5 else int(beyond)
        if beyond >= 0:
            with pytest.raises(ValueError, match=f"^{name}="):
                Settings.from_env({name: str(beyond)})
        with pytest.raises(ValueError, match=f"^{field}="):
            Settings(**{field: beyond})


def test_every_setting_is_a_switch_a_number_with_a_range_or_a_file():
    kinds = (set(SWITCHES), set(LIMITS), set(PATHS))
    assert set().union(*kinds) == set(ENV_NAMES) and sum(map(len, kinds)) == len(ENV_NAMES)
    assert LIMITS["pg_timeout_s"][0] >= 1 and LIMITS["max_concurrent_runs"] == (1, 64)


def test_the_timeout_takes_a_decimal_point():
    assert Settings.from_env({"PCL_PG_TIMEOUT_S": "2.5"}).pg_timeout_s == 2.5


@pytest.mark.parametrize(
    ("value", "read"), [("1", True), ("true", True), ("0", False), ("no", False)]
)
def test_the_pool_setting_reads_on_off_or_unset(value, read):
    assert Settings.from_env({"PCL_WARM_POOL": value}).warm_pool is read
    assert Settings.from_env({}).warm_pool is None


def test_a_rank_reads_the_timeout_as_the_server_does(monkeypatch):
    """A hand-typed torchrun's PCL_PG_TIMEOUT_S is checked in the rank: one line naming it
    before any process group forms, not a timeout of 0 ms."""
    monkeypatch.setenv("PCL_PG_TIMEOUT_S", "1e-9")
    with pytest.raises(ValueError, match="^PCL_PG_TIMEOUT_S='1e-9' can't be used"):
        worker.init_worker()


def test_the_pool_is_unset_until_the_server_turns_it_on():
    """Unset, the setting is the server's to decide (on: `served`, ui.serving); a CLI or a
    test that never asks stays cold; told off, the server obeys."""
    unset = Settings.from_env({})
    assert unset.warm_pool is None and not WarmPool(unset, MemoryBudget(2500)).enabled()
    served = unset.served()
    assert served.warm_pool is True and WarmPool(served, MemoryBudget(2500)).enabled()
    assert Settings.from_env({"PCL_WARM_POOL": "0"}).served().warm_pool is False
    assert Settings(max_waiting_runs=3).served() == Settings(warm_pool=True, max_waiting_runs=3)


def test_the_module_prints_the_settings_in_force():
    env = dict(os.environ, PCL_MAX_WAITING_RUNS="5")
    env.pop("PCL_WARM_POOL", None)
    done = subprocess.run(
        [sys.executable, "-m", "pclab.runners.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert lines["PCL_MAX_WAITING_RUNS"] == "5" and lines["PCL_WARM_POOL"].startswith("unset")


def test_the_cgroup_quota_is_read_from_the_process_group_and_its_parents(tmp_path):
    """cgroup v2: the smallest `cpu.max` from the process's own group up; v1: quota/period."""
    membership = tmp_path / "cgroup"
    membership.write_text("0::/lab/app\n")
    (tmp_path / "lab" / "app").mkdir(parents=True)
    (tmp_path / "lab" / "app" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path, membership) is None  # no quota anywhere
    (tmp_path / "lab" / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path, membership) == 1.5  # the parent's quota binds
    (tmp_path / "lab" / "app" / "cpu.max").write_text("50000 100000\n")
    assert cgroup_cpu_limit(tmp_path, membership) == 0.5
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(v1, tmp_path / "missing") == 3.0


@pytest.mark.parametrize(
    ("affinity", "quota", "budget_mb", "expected"),
    [
        (16, None, 1_000_000, 8),  # the host: half of 16 CPUs
        (16, 2.0, 1_000_000, 1),  # a container given 2 CPUs of the 16: half of 2
        (16, 3.5, 1_000_000, 2),  # 3.5 CPUs: 4 usable, half of them
        (4, None, 1_000_000, 2),  # pinned to 4 of the host's CPUs
        (16, None, 2500, 2500 // RUN_FOOTPRINT_MB),  # the default budget holds 3 runs' zygotes
        (1, None, 1_000_000, 1),  # never less than one
        (512, None, 1_048_576, 64),  # never past the setting's own range
    ],
)
def test_the_default_concurrency_reads_usable_cpus_and_the_budget(
    monkeypatch, affinity, quota, budget_mb, expected
):
    monkeypatch.setattr(settings_module.os, "sched_getaffinity", lambda pid: set(range(affinity)))
    monkeypatch.setattr(settings_module, "cgroup_cpu_limit", lambda: quota)
    assert default_concurrency(budget_mb) == expected
    read = Settings.from_env({"PCL_MEMORY_BUDGET_MB": str(budget_mb)})
    assert read.max_concurrent_runs == expected  # the default follows the budget it reads
    told = Settings.from_env(
        {"PCL_MEMORY_BUDGET_MB": str(budget_mb), "PCL_MAX_CONCURRENT_RUNS": "7"}
    )
    assert told.max_concurrent_runs == 7  # a setting is obeyed as given
