"""ui.run_with_status with AppTest: live progress in st.status, a cache keyed on the
parameters (a re-run replays no progress lines and does not launch again), failures shown
with their root cause and never cached, invalid parameters rejected before any launch."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.runners.workers import fake_runner
from ui import i18n


def script():
    import streamlit as st

    from tests.runners.workers import fake_runner
    from ui.runs import run_with_status

    world_size = st.number_input("P", value=2, key="world_size")
    fail = st.checkbox("fail", key="fail")
    result = run_with_status("demo", fake_runner.FAKE, world_size=world_size, fail=fail)
    st.text("none" if result is None else f"ok={result.ok} report={result.report}")


@pytest.fixture
def app():
    from ui import runs

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
    assert app.status[0].label.startswith("Finished: demo") and app.status[0].state == "complete"
    assert "Starting 2 processes" in markdown(app) and "Rank 0 reported" in markdown(app)
    assert "a plain line without an event" in markdown(app)
    assert app.text[0].value == "ok=True report={'world_size': 2}"

    app.run()  # same parameters: served from the cache, no progress replayed
    assert not app.exception
    assert len(fake_runner.CALLS) == 1
    assert not app.status and any("Stored result: demo" in c.value for c in app.caption)
    assert "Starting" not in markdown(app) and "Rank 0" not in markdown(app)
    assert app.text[0].value == "ok=True report={'world_size': 2}"

    app.number_input(key="world_size").set_value(3).run()  # new key: a fresh run
    assert len(fake_runner.CALLS) == 2 and app.text[0].value == "ok=True report={'world_size': 3}"
    app.number_input(key="world_size").set_value(2).run()  # back: still stored
    assert len(fake_runner.CALLS) == 2


def test_failure_is_shown_and_not_cached(app):
    app.checkbox(key="fail").check().run()
    assert not app.exception
    assert app.status[0].state == "error"
    assert "rank 1: ZeroDivisionError: division by zero" in app.error[0].value
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
    assert app.status[0].label.startswith("已完成：demo")
    assert "正在用 torchrun 启动 4 个进程" in markdown(app)


def test_catalogues_have_the_same_keys():
    keys = {
        lang: {k for k in i18n.catalogue(lang) if k.startswith("runs.")} for lang in i18n.LANGUAGES
    }
    assert keys["en"] == keys["zh"] and "runs.progress.timeout" in keys["en"]
