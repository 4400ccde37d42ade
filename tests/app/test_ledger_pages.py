"""Pages 01-03: the seed's figures by default, widgets drive their figures, bad input is a
message."""

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from pclab.ui import i18n

ROOT = Path(__file__).resolve().parents[2]


def open_page(page: str, lang: str = "en") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lang"] = lang
    at.run()
    at.switch_page(page).run()
    assert not at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_ledger_shows_the_seed_figures_and_the_reversal():
    at = open_page("pclab/sections/02_ledger.py")
    shown = metrics(at)
    assert shown["Correct global gradient"] == "+0.4"
    assert shown["Implementation's gradient"] == "-0.5"
    assert shown["θ after SGD (correct)"] == "-0.04"
    assert shown["θ after SGD (implementation)"] == "+0.05"
    assert any("opposite way" in e.value for e in at.error)


def test_ledger_widgets_drive_the_figures():
    at = open_page("pclab/sections/02_ledger.py")
    at.number_input(key="ledger_n_a").set_value(8).run()  # equal counts: the replica mean is right
    assert metrics(at)["Correct global gradient"] == "-0.5"
    assert metrics(at)["Implementation's gradient"] == "-0.5"
    assert at.success
    at.number_input(key="ledger_lr").set_value(1.0).run()
    assert metrics(at)["θ after SGD (correct)"] == "+0.5"


def test_ledger_empty_replica_is_unavailable_and_zero_n_skips():
    at = open_page("pclab/sections/02_ledger.py", "zh")
    at.number_input(key="ledger_n_a").set_value(0).run()
    assert metrics(at)["该实现的梯度"] == "不可用"
    assert metrics(at)["正确的全局梯度"] == "+1"
    at.number_input(key="ledger_n_b").set_value(0).run()
    assert metrics(at)["正确的全局梯度"] == "已跳过"
    assert any("一起跳过" in w.value for w in at.warning)


def test_denominator_counts_only_valid_labels():
    at = open_page("pclab/sections/01_denominator.py")
    # preset windows: 96-0-30, 96-50-20, 96-0-88, 96-40-16 -> 66 + 26 + 8 + 40
    assert metrics(at)["Global valid labels N"] == "140"
    assert metrics(at)["Input positions (not the denominator)"] == "384"
    at.number_input(key="den_replicas").set_value(1).run()
    assert metrics(at)["Global valid labels N"] == "92"


def test_denominator_reports_bad_rows_on_the_page():
    at = open_page("pclab/sections/01_denominator.py", "zh")
    # Streamlit's data editor state: edit row 0 so padding + prompt exceed the positions.
    at.session_state["den_windows"] = {
        "edited_rows": {0: {"padding": 90}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert not at.exception
    # Named by the table's own columns and the row (r0·k0), in Chinese.
    padding, prompt = (i18n.text("zh", f"denominator.col_{c}") for c in ("padding", "prompt"))
    both = f"{padding} + {prompt}"
    assert any(both in e.value and "r0·k0" in e.value and "无法使用" in e.value for e in at.error)


def test_framework_double_scaling_and_regulariser_are_flagged():
    at = open_page("pclab/sections/03_framework.py")
    assert (
        metrics(at)["Gradient the optimizer receives"]
        == metrics(at)["Gradient of the global objective"]
    )
    at.checkbox(key="fw_double").check().run()
    assert any("departs" in e.value for e in at.error)
    assert any("K = 2" in m.value for m in at.markdown)
    at.checkbox(key="fw_double").uncheck().run()
    at.radio(key="fw_placement").set_value("every_microstep").run()
    assert metrics(at)["Regulariser copies in the update"] == "2"
    at.radio(key="fw_collective").set_value("sum").run()
    assert metrics(at)["Regulariser copies in the update"] == "4"


@pytest.mark.parametrize("loss_input", ["sum", "local_mean"])
def test_framework_correct_for_either_loss_input(loss_input):
    at = open_page("pclab/sections/03_framework.py")
    at.radio(key="fw_input").set_value(loss_input).run()
    assert at.success and not at.error
    table = at.dataframe[-1].value
    assert isinstance(table, pd.DataFrame)


def test_a_deep_link_carries_an_edited_table_both_ways():
    """Data editors cannot bind to the URL; their editable cells travel as one parameter."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    # window (0, 0) with 50 padding instead of 0: 66 -> 16 valid labels, N 140 -> 90
    at.query_params["den_table"] = "96~50~30~0~138.6_96~50~20~8~41.6_96~0~88~0~20_96~40~16~0~72"
    at.run()
    at.switch_page("pclab/sections/01_denominator.py").run()
    assert metrics(at)["Global valid labels N"] == "90"
    # An edit on the page goes back into the URL; the preset leaves no parameter behind.
    at.session_state["den_windows"] = {
        "edited_rows": {1: {"prompt": 30}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert metrics(at)["Global valid labels N"] == "80"
    linked = at.query_params["den_table"]
    linked = linked[0] if isinstance(linked, list) else linked
    assert linked.split("_")[1] == "96~50~30~8~41.6"
    fresh = open_page("pclab/sections/01_denominator.py")
    assert "den_table" not in fresh.query_params


def test_a_link_that_does_not_fit_the_table_is_ignored():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["den_table"] = "1~2_3"  # wrong shape
    at.run()
    at.switch_page("pclab/sections/01_denominator.py").run()
    assert not at.exception and metrics(at)["Global valid labels N"] == "140"
