"""The hosted demo's defaults: warm runs in the server without a setting, cold under AppTest,
and torchrun as the fallback when the pool cannot start (said as an event). (The settings
themselves: tests/runners/test_settings.py; the memory budget: test_memory.py.)"""

from __future__ import annotations

from runner_support import ROOT, marked
from streamlit.testing.v1 import AppTest

from pclab.runners import launcher, warm_pool

ROOT_APP = str(ROOT / "app.py")


def test_app_py_under_apptest_stays_cold():
    """AppTest runs app.py in this process under a mock runtime: not a server, so the one
    runtime it builds (ui.serving) launches through torchrun and starts no zygote."""
    from pclab.ui import serving

    at = AppTest.from_file(ROOT_APP, default_timeout=60)
    at.run()
    assert not at.exception
    served = serving.runtime()
    assert served.settings.warm_pool is None and not served.pool.enabled()
    assert served.pool.size() == {"zygotes": 0, "idle": 0, "starting": 0}
    at.run()
    assert serving.runtime() is served  # one runtime for the server, not one per script run


def test_a_pool_that_cannot_start_falls_back_to_torchrun_and_says_so(
    monkeypatch, process_mark, new_runtime
):
    attempts = []

    class NoZygote:
        def __init__(self, preload=()) -> None:
            attempts.append(1)
            raise RuntimeError("the warm pool's process did not start")

    monkeypatch.setattr(warm_pool, "Zygote", NoZygote)
    runtime = new_runtime(warm_pool=True)
    for _ in range(2):
        events = []
        result = launcher.launch(
            "bench.noop_worker", 2, timeout_s=200, progress=events.append, runtime=runtime
        )
        assert result.ok, result.message
        codes = [e.event for e in events]
        assert codes.count("pool_fallback") == 1 and codes[-1] == "finished"
        fallback = next(e for e in events if e.event == "pool_fallback")
        assert fallback.values["reason"] == "the warm pool's process did not start"
    assert len(attempts) == 1  # the second launch went straight to torchrun (RETRY_S)
    assert runtime.pool.size()["zygotes"] == 0
    assert marked(process_mark) == []
