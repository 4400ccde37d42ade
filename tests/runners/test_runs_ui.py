"""ui.run_with_status with AppTest: progress (a finished line for a run that answers at once,
a live st.status for a slow one), a cache keyed on the parameters (a re-run replays no
progress lines and does not launch again), failures shown with their root cause and never
cached, invalid parameters rejected before any launch, the warm pool's fallback and the
memory budget said in the reader's language."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from pclab.ui import i18n
from pclab.ui.plain_text import plain
from tests.runners.workers import fake_runner


def script():
    import streamlit as st

    from pclab.ui.runs import run_with_status
    from tests.runners.workers import fake_runner

    world_size = st.number_input("P", value=2, key="world_size")
    fail = st.checkbox("fail", key="fail")
    result = run_with_status("demo", fake_runner.FAKE, world_size=world_size, fail=fail)
    st.text("none" if result is None else f"ok={result.ok} report={result.report}")


@pytest.fixture
def app():
    from pclab.ui import runs

    runs.clear()
    fake_runner.CALLS.clear()
    at = AppTest.from_function(script, default_timeout=30)
    at.run()
    assert not at.exception
    return at


def markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_first_run_shows_progress_then_the_cache_answers(app):
    assert len(fake_runner.CALLS) == 1
    assert not app.status  # it answered at once: one finished line, no live status
    assert app.expander[0].label.startswith("Finished: demo")
    assert "Starting 2 processes" in markdown(app) and "Rank 0 reported" in markdown(app)
    assert "a line the catalogue cannot fill" in markdown(app)
    assert app.text[0].value == "ok=True report={'world_size': 2}"

    app.run()  # same parameters: served from the cache, no progress replayed
    assert not app.exception
    assert len(fake_runner.CALLS) == 1
    assert not app.status and not app.expander
    assert any("Stored result: demo" in c.value for c in app.caption)
    assert "Starting" not in markdown(app) and "Rank 0" not in markdown(app)
    assert app.text[0].value == "ok=True report={'world_size': 2}"

    app.number_input(key="world_size").set_value(3).run()  # new key: a fresh run
    assert len(fake_runner.CALLS) == 2 and app.text[0].value == "ok=True report={'world_size': 3}"
    app.number_input(key="world_size").set_value(2).run()  # back: still stored
    assert len(fake_runner.CALLS) == 2


def test_failure_is_shown_and_not_cached(app):
    app.checkbox(key="fail").check().run()
    assert not app.exception
    assert app.expander[0].label.startswith("Did not finish: demo")
    # the launcher's line as text (plain: its colons are character references, never markup)
    assert plain("rank 1: ZeroDivisionError: division by zero") in app.error[0].value
    assert app.text[0].value == "ok=False report=None"
    app.run()
    assert len(fake_runner.CALLS) == 3  # initial ok run + two failing attempts


def test_invalid_parameters_launch_nothing(app):
    app.number_input(key="world_size").set_value(0).run()
    assert not app.exception
    assert app.text[0].value == "none" and len(fake_runner.CALLS) == 1
    assert "world_size" in app.error[0].value


def test_chinese_labels_come_from_the_catalogue(app):
    app.session_state["lang"] = "zh"
    app.number_input(key="world_size").set_value(4).run()
    assert not app.exception
    assert app.expander[0].label.startswith("已完成：demo")
    assert "正在用 torchrun 启动 4 个进程" in markdown(app)


def test_catalogues_have_the_same_keys():
    keys = {
        lang: {k for k in i18n.catalogue(lang) if k.startswith("runs.")} for lang in i18n.LANGUAGES
    }
    assert keys["en"] == keys["zh"] and "runs.progress.timeout" in keys["en"]


def slow_page():
    import streamlit as st

    from pclab.ui.runs import run_with_status
    from tests.runners.workers import fake_runner

    seconds = st.number_input("seconds", value=0.0, key="seconds")
    fallback = st.checkbox("fallback", key="fallback")
    memory = st.checkbox("memory", key="memory")
    world_size = st.number_input("P", value=2, key="world_size")
    run_with_status(
        "demo",
        fake_runner.FAKE,
        world_size=world_size,
        seconds=seconds,
        fallback=fallback,
        memory=memory,
    )


@pytest.fixture
def slow_app():
    from pclab.ui import runs

    runs.clear()
    fake_runner.CALLS.clear()
    at = AppTest.from_function(slow_page, default_timeout=30)
    at.run()
    assert not at.exception and not at.info
    return at


def test_a_run_past_the_threshold_gets_a_live_status(slow_app):
    from pclab.ui import runs

    slow_app.number_input(key="seconds").set_value(runs.SHOW_AFTER_S + 0.6).run()
    assert not slow_app.exception
    assert slow_app.status[0].label.startswith("Finished: demo")
    assert slow_app.status[0].state == "complete" and not slow_app.expander
    assert "Starting 2 processes" in markdown(slow_app)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_pool_fallback_is_said_once_per_session(slow_app, lang):
    slow_app.session_state["lang"] = lang
    slow_app.checkbox(key="fallback").check().run()
    assert not slow_app.exception
    assert [i.value for i in slow_app.info] == [i18n.text(lang, "runs.pool_fallback")]
    assert i18n.text(lang, "runs.progress.pool_fallback", reason="a test said so") in markdown(
        slow_app
    )
    slow_app.number_input(key="world_size").set_value(3).run()  # a new run, the same session
    assert not slow_app.exception and len(fake_runner.CALLS) == 3
    assert not slow_app.info  # said once: the server's state, not this run's


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_refusal_for_memory_says_so(slow_app, lang):
    slow_app.session_state["lang"] = lang
    slow_app.checkbox(key="memory").check().run()
    assert not slow_app.exception and not slow_app.error
    expected = i18n.text(lang, "runs.busy_memory", used_mb=2600, budget_mb=2500)
    assert [w.value for w in slow_app.warning] == [expected]
