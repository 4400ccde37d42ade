"""ui.run_panel with AppTest and the stand-in experiment: the kept result follows the page's
inputs, says when they changed since, and a run cut off (Stop, or an input changed while it
ran) is said on the next render instead of vanishing without a word."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.runners.workers import fake_runner


def script():
    import streamlit as st

    from pclab.ui.run_panel import run_panel

    world_size = st.number_input("P", value=2, key="world_size")
    result = run_panel("fake", {"world_size": world_size}, key="demo", button="Run", label="demo")
    st.text("none" if result is None else f"report={result.report}")


@pytest.fixture
def app(monkeypatch):
    from pclab.experiments import registry
    from pclab.ui import runs

    monkeypatch.setattr(registry, "get", lambda name: fake_runner.FAKE)  # asked by name
    runs.clear()
    fake_runner.CALLS.clear()
    at = AppTest.from_function(script, default_timeout=30)
    at.run()
    assert not at.exception
    return at


def test_a_press_keeps_the_result_for_these_inputs(app):
    assert app.text[0].value == "none" and not fake_runner.CALLS  # nothing runs by itself
    app.button(key="demo").click().run()
    assert app.text[0].value == "report={'world_size': 2}"
    assert [b.proto.label for b in app.get("download_button")]  # the run record
    app.run()  # a rerun keeps it, without running again
    assert app.text[0].value == "report={'world_size': 2}" and len(fake_runner.CALLS) == 1


def test_changed_inputs_hide_the_old_result_and_say_so(app):
    app.button(key="demo").click().run()
    app.number_input(key="world_size").set_value(3).run()
    assert app.text[0].value == "none"
    assert any("inputs changed" in c.value for c in app.caption)


def test_a_run_cut_off_is_said_on_the_next_render(app):
    app.session_state["demo_pending"] = {"world_size": 2}  # what a Stop mid-run leaves behind
    app.run()
    assert any("did not finish" in i.value for i in app.info)
    app.run()  # said once
    assert not any("did not finish" in i.value for i in app.info)


def test_a_failed_runs_own_line_is_text_never_markup(app, monkeypatch):
    """The launcher's line names files and says what a rank raised: `__init__.py` or a
    trainer's `**kwargs` must read as written, not bold (Streamlit renders an error as
    Markdown)."""
    import html

    from pclab.runners.results import Outcome, RunResult
    from pclab.ui.plain_text import WORD_JOINER
    from tests.runners.workers.fake_runner import FakeExperiment

    line = "rank 1 raised in __init__.py: step(**kwargs) got [x](http://a.example)"

    def failing(*args, **kwargs):
        return RunResult.ended(Outcome.FAILED, line, 0.1, "f" * 64)

    monkeypatch.setattr(FakeExperiment, "run", failing)
    app.button(key="demo").click().run()
    (error,) = [e.value for e in app.error]
    assert "__init__" not in error and "**kwargs" not in error and "](http" not in error
    shown = html.unescape(error).replace(WORD_JOINER, "")  # plain() keeps "://" from linking
    assert line in shown and shown.startswith("The multi-process run did not complete: ")


@pytest.mark.parametrize("where", ["run", "cache_key"])
def test_a_run_that_raises_is_said_in_the_panel_not_in_an_exception_box(app, monkeypatch, where):
    """A run's failures come back as a RunResult; one that raises instead (a bug of the
    lab's: a loaded suite once showed Streamlit's redacted exception box under Run), in the
    run or in finding its stored result, is said in the panel in the reader's language, and
    the next press runs again."""
    from pclab.ui import runs
    from tests.runners.workers.fake_runner import FakeExperiment

    def raising(*args, **kwargs):
        raise SystemError("the *pool* broke")

    owner, name = (FakeExperiment, "run") if where == "run" else (runs, "cache_key")
    working = getattr(owner, name)
    monkeypatch.setattr(owner, name, raising)
    app.button(key="demo").click().run()
    assert not app.exception
    (error,) = [e.value for e in app.error]
    assert "the lab itself failed" in error and "SystemError" in error
    assert "*pool*" not in error and "pool" in error  # its text is text, never markup
    assert app.text[0].value == "none"  # no result kept
    monkeypatch.setattr(owner, name, working)
    app.button(key="demo").click().run()
    assert app.text[0].value == "report={'world_size': 2}"
