"""Pages 05 (global negatives) and 06 (from representations to parameters) under AppTest.

The figures on screen must be the seed's, must follow the widgets, and the run section must
show a stored real-run result beside the prediction (the real torchrun launch itself is
tested in tests/runners/). Rendering must never import torch.
"""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.sections_helper import open_section

ROOT = Path(__file__).resolve().parents[2]
NEGATIVES, PARAMETERS = "pclab/sections/05_negatives.py", "pclab/sections/06_parameters.py"


def open_page(page: str, lang: str = "en", workshop: bool = False, **query) -> AppTest:
    at = open_section(page, lang, workshop, **query)
    assert not at.error, [e.value for e in at.error]
    return at


def metrics(at: AppTest) -> list[str]:
    return [m.value for m in at.metric]


def predict(at: AppTest, key: str, guess: float) -> AppTest:
    """Type a prediction into the page's exercise and press Reveal."""
    at.number_input(key=f"{key}_guess").set_value(guess).run()
    at.button(key=f"{key}_reveal").click().run()
    assert not at.exception, at.exception
    return at


def download_labels(at: AppTest) -> list[str]:
    return sorted(b.proto.label for b in at.get("download_button"))


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", [NEGATIVES, PARAMETERS])
def test_page_renders_in_both_languages(page, lang):
    at = open_page(page, lang)
    assert at.dataframe and at.metric
    has_chinese = any("\u4e00" <= ch <= "\u9fff" for ch in at.title[0].value)
    assert has_chinese == (lang == "zh")


def test_negatives_shows_the_seed_figures():
    at = open_page(NEGATIVES)
    assert metrics(at)[:3] == ["+2.072539", "+0.922412", "-0.059601"]
    gap = metrics(at)[3]  # max |full - kept| over the documents, an absolute value: no '+'
    assert not gap.startswith("+") and float(gap) == pytest.approx(0.922412 + 0.059601, abs=2e-6)
    contributions = at.dataframe[1].value
    assert contributions.loc[0, "kept"] == pytest.approx(-0.059601, abs=5e-7)
    assert contributions.loc[0, "full"] == pytest.approx(0.922412, abs=5e-7)


def test_changing_tau_changes_the_loss_shown():
    at = open_page(NEGATIVES)
    before = metrics(at)
    at.slider(key="neg_tau").set_value(2.0).run()
    after = metrics(at)
    assert not at.exception
    assert after[0] != before[0] and after[1] != before[1]


def test_changing_a_query_changes_the_probability_table():
    at = open_page(NEGATIVES)
    before = at.dataframe[0].value["p_0"].tolist()
    at.number_input(key="neg_q0").set_value(-1.0).run()
    assert at.dataframe[0].value["p_0"].tolist() != before


def test_deep_link_sets_tau():
    at = open_page(NEGATIVES, neg_tau="2.0")
    assert at.slider(key="neg_tau").value == 2.0
    assert metrics(at)[0] != "+2.072539"


def test_parameters_scheme_switch_shows_the_full_loss_factor():
    at = open_page(PARAMETERS)
    gather = metrics(at)
    assert gather[:2] == gather[2:] == ["+1.844825", "+1.844825"]  # applied == objective
    at.segmented_control(key="par_scheme").set_value("full_loss_each_rank").run()
    assert metrics(at)[:2] == ["+0.922412", "+0.922412"]  # 1/n of the objective ...
    assert "×2" in " ".join(m.value for m in at.markdown)  # ... so the page names the factor n
    at.slider(key="par_tau").set_value(0.5).run()
    assert metrics(at)[0] != "+0.922412"


def stored_run(report: dict):
    from pclab.runners.results import RunResult

    return RunResult.finished((), 1.0, "x").with_report(report)


def seed_report(perturb: float = 0.0) -> dict:
    """A report shaped like pclab.experiments.negatives' at the seed (numbers from the core:
    this test checks the page's display, the real run's numbers are checked in tests/runners/)."""
    from pclab.core import infonce

    schemes = {}
    for s in infonce.SCHEMES:
        r = infonce.encoder_grads([1.0, 2.0], [1.0, -1.0], 1.0, 1.0, 1.0, s)
        schemes[s] = {
            "grad_wq": r.grad_wq + perturb,
            "grad_wd": r.grad_wd,
            "params_after_sgd": {"wq": 1.0 - 0.1 * r.grad_wq, "wd": 1.0 - 0.1 * r.grad_wd},
            "ranks": [
                {
                    "local_loss": r.local_loss[k],
                    "grad_wq_local": r.grad_wq_local[k],
                    "grad_wd_local": r.grad_wd_local[k],
                }
                for k in range(2)
            ],
        }
    inputs = {"a": [1.0, 2.0], "b": [1.0, -1.0], "wq": 1.0, "wd": 1.0, "tau": 1.0, "lr": 0.1}
    return {**inputs, "backend": "gloo", "world_size": 2, "schemes": schemes}


@pytest.mark.parametrize("perturb, agrees", [(0.0, True), (1e-6, False)])
def test_stored_run_is_shown_beside_the_prediction(monkeypatch, perturb, agrees):
    from pclab.ui import downloads

    records = []
    record = downloads.run_record
    monkeypatch.setattr(
        downloads, "run_record", lambda *args: records.append(args[1:]) or record(*args)
    )
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    params = {"world_size": 2, "tau": 1.0, "wq": 1.0, "wd": 1.0}
    at.session_state["par_run_result"] = (params, stored_run(seed_report(perturb)))
    at.run()  # the entry script first: it registers the sections
    at.switch_page(PARAMETERS).run()
    assert not at.exception, at.exception
    table = at.dataframe[-1].value
    assert list(table["agree"]) == (["yes"] * 4 if agrees else ["no", "no", "no", "no"])
    assert bool(at.success) == agrees and bool(at.warning) != agrees
    # Three tables as CSV and JSON, and the run's record with the parameters it was launched with.
    assert download_labels(at) == ["CSV"] * 3 + ["Download the run record (JSON)"] + ["JSON"] * 3
    assert records[-1] == (params, "negatives")
    # A different tau is a different experiment: the stored run is no longer shown.
    at.slider(key="par_tau").set_value(2.0).run()
    assert not at.success and not at.warning


# ------------------------------------------------------------- exercise, workshop, links, downloads


def test_negatives_exercise_judges_the_kept_gradient():
    at = predict(open_page(NEGATIVES), "neg_ex", -0.0596)
    assert any("Right" in s.value and "-0.059601" in s.value for s in at.success)
    at = predict(
        at, "neg_ex", 0.922412
    )  # the full objective's gradient is not what detaching keeps
    assert not at.success
    assert any("-0.059601" in w.value and "+0.982013" in w.value for w in at.warning)


def test_workshop_mode_hides_the_negatives_figures_until_revealed():
    at = open_page(NEGATIVES, workshop=True)
    assert not at.metric and not at.dataframe and not at.get("vega_lite_chart")
    assert not at.get("download_button")
    at.number_input(key="neg_ex_guess").set_value(0.5).run()
    assert not at.metric  # typing a guess reveals nothing
    at.button(key="neg_ex_reveal").click().run()
    assert metrics(at)[:3] == ["+2.072539", "+0.922412", "-0.059601"] and len(at.dataframe) == 2
    assert len(at.get("vega_lite_chart")) == 1
    at.slider(key="neg_tau").set_value(2.0).run()  # a new scenario hides them again
    assert not at.metric and not at.dataframe


def test_negatives_tables_download():
    at = open_page(NEGATIVES)
    assert download_labels(at) == ["CSV", "CSV", "JSON", "JSON"]


def test_parameters_exercise_follows_the_linked_scheme():
    at = open_page(PARAMETERS, workshop=True, par_scheme="full_loss_each_rank")
    assert at.segmented_control(key="par_scheme").value == "full_loss_each_rank"
    assert not at.metric and not at.dataframe and not at.get("download_button")
    at = predict(at, "par_ex", 1.844825)  # the objective's gradient: n times too much here
    assert any("+0.922412" in w.value for w in at.warning)
    at = predict(at, "par_ex", 0.922412)
    assert any("Right" in s.value and "+0.922412" in s.value for s in at.success)
    assert metrics(at)[:2] == ["+0.922412", "+0.922412"]
    assert download_labels(at) == ["CSV", "CSV", "JSON", "JSON"]


def test_parameters_deep_link_sets_the_scenario_in_any_language():
    at = open_page(PARAMETERS, par_scheme="detach", par_wd="2.0", par_world_size="3")
    assert at.session_state["par_wd"] == 2.0 and at.session_state["par_world_size"] == 3
    assert at.segmented_control(key="par_scheme").value == "detach"
    linked = metrics(at)
    assert linked != ["+1.844825"] * 4 and linked[0] == linked[2]  # detaching keeps wq's gradient
    at.segmented_control(key="par_scheme").set_value("local").run()
    assert at.query_params["par_scheme"] == "local"  # the option code, never its label
    at.session_state["lang"] = "zh"
    at.run()
    assert not at.exception and at.query_params["par_scheme"] == "local"
    assert metrics(at) == ["0", "0", linked[2], linked[3]]  # own pair only: nothing applied
