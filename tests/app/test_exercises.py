""" "Predict, then reveal" on the ledger-side pages, and workshop mode hiding the figures."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def open_page(page: str, workshop: bool, lang: str = "en") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lang"] = lang
    at.session_state["workshop"] = workshop
    at.run()
    at.switch_page(page).run()
    assert not at.exception
    return at


def test_workshop_mode_hides_figures_until_revealed():
    at = open_page("pclab/sections/02_ledger.py", workshop=True)
    assert len(at.metric) == 0
    at.number_input(key="ledger_ex_guess").set_value(-0.5).run()
    assert len(at.metric) == 0  # typing a guess reveals nothing
    at.button(key="ledger_ex_reveal").click().run()
    assert any("Right" in s.value and "-0.5" in s.value for s in at.success)
    assert {m.label: m.value for m in at.metric}["Implementation's gradient"] == "-0.5"
    # A new scenario hides the figures again until its own answer is revealed.
    at.number_input(key="ledger_lr").set_value(0.2).run()  # same answer, new scenario
    assert len(at.metric) == 0


def test_the_prediction_field_shows_a_figure_as_it_is_typed():
    """ "%g": a recorded -0.5 reads -0.5, not -0.500000 (issue 45)."""
    at = open_page("pclab/sections/02_ledger.py", workshop=True)
    field = at.number_input(key="ledger_ex_guess")
    assert field.proto.format == "%g" and "%g" % -0.5 == "-0.5"


def test_wrong_guess_explains_the_gap():
    at = open_page("pclab/sections/02_ledger.py", workshop=False, lang="zh")
    assert len(at.metric) == 4  # outside workshop mode the figures are always shown
    at.number_input(key="ledger_ex_guess").set_value(0.4).run()
    at.button(key="ledger_ex_reveal").click().run()
    assert any("-0.5" in w.value and "+0.9" in w.value for w in at.warning)  # off by 0.4 - (-0.5)


def test_undefined_answer_expects_no_number():
    at = open_page("pclab/sections/02_ledger.py", workshop=True)
    at.number_input(key="ledger_n_a").set_value(0).run()
    at.button(key="ledger_ex_reveal").click().run()
    assert any("undefined" in s.value for s in at.success)


def test_denominator_exercise_is_exact_and_framework_follows_the_scenario():
    at = open_page("pclab/sections/01_denominator.py", workshop=True)
    at.number_input(key="den_ex_guess").set_value(139).run()
    at.button(key="den_ex_reveal").click().run()
    assert any("140" in w.value for w in at.warning)
    fw = open_page("pclab/sections/03_framework.py", workshop=True)
    fw.checkbox(key="fw_double").check().run()
    fw.number_input(key="fw_ex_guess").set_value(0.115).run()
    fw.button(key="fw_ex_reveal").click().run()
    assert any("+0.115" in s.value for s in fw.success)
