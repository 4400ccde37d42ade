"""Issue 17's parts that need no browser: a shared link's unusable values are named, a
prediction is graded as it stood at Reveal, downloads are labelled data with a BOM, and the
home page says where to start. (The browser parts: tests/e2e/test_workshop_room.py.)"""

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from pclab.ui import downloads, i18n
from pclab.ui.plain_text import plain
from tests.app.sections_helper import ROOT, open_section

LEDGER = "pclab/sections/02_ledger.py"


def open_link(page: str, **query: str) -> AppTest:
    """A visitor following a shared link: everything, the language too, comes from the URL."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def html_bodies(at: AppTest) -> str:
    return " ".join(h.proto.body for h in at.get("html"))


def link_notices(at, lang: str) -> list[str]:
    head = i18n.text(lang, "common.link.unusable").split("{")[0]
    return [w.value for w in at.warning if w.value.startswith(head)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_link_with_unusable_values_names_each_one(lang):
    bad = {
        "ledger_n_a": "99999",
        "ledger_scheme": "bogus",
        "ledger_theta": "abc",
        "workshop": "maybe",
    }
    at = open_link(LEDGER, lang=lang, ledger_lr="0.2", **bad)
    (notice,) = link_notices(at, lang)
    for key, value in bad.items():
        assert f"{plain(key)}={plain(value)}" in notice  # shown as text, never as markup
    assert "ledger_lr" not in notice  # a usable value is used, and not mentioned
    assert at.number_input(key="ledger_lr").value == 0.2
    # It stays while the visitor works on the page.
    at.number_input(key="ledger_ex_guess").set_value(1.0).run()
    assert len(link_notices(at, lang)) == 1


def test_a_usable_link_gets_no_notice():
    link = {"ledger_n_a": "5", "ledger_scheme": "microbatch_mean", "workshop": "true"}
    at = open_link(LEDGER, lang="zh", **link)
    assert link_notices(at, "zh") == []
    assert at.number_input(key="ledger_n_a").value == 5


def test_a_table_link_that_does_not_fit_says_the_preset_is_shown():
    at = open_link("pclab/sections/01_denominator.py", den_table="1~2~3")
    (notice,) = link_notices(at, "en")
    assert f"{plain('den_table')}={plain('1~2~3')}" in notice
    assert i18n.text("en", "common.link.preset") in notice


def test_a_prediction_is_graded_as_it_stood_at_reveal():
    at = open_section(LEDGER, workshop=True)
    at.number_input(key="ledger_ex_guess").set_value(0.4).run()
    at.button(key="ledger_ex_reveal").click().run()
    assert at.warning and "+0.9" in at.warning[0].value  # 0.4 is off by 0.9
    # A new guess after the reveal is not graded until Reveal is pressed again.
    at.number_input(key="ledger_ex_guess").set_value(-0.5).run()
    assert not at.success
    assert any(i.value == i18n.text("en", "exercise.regrade", answer="-0.5") for i in at.info)
    at.button(key="ledger_ex_reveal").click().run()
    assert any("Right" in s.value for s in at.success)


def test_a_new_scenario_clears_the_old_prediction():
    at = open_section(LEDGER)
    at.number_input(key="ledger_ex_guess").set_value(-0.5).run()
    at.button(key="ledger_ex_reveal").click().run()
    at.number_input(key="ledger_n_a").set_value(4).run()
    assert at.number_input(key="ledger_ex_guess").value is None
    assert not at.success  # nothing graded for the new scenario


@pytest.fixture
def exported(monkeypatch) -> dict[str, pd.DataFrame]:
    """Every frame a page hands to the CSV download, by file name, with its bytes checked."""
    frames: dict[str, pd.DataFrame] = {}
    real = downloads.csv_bytes

    def recording(frame: pd.DataFrame) -> bytes:
        data = real(frame)
        assert data.startswith(b"\xef\xbb\xbf")  # UTF-8 with a BOM, for Excel
        frames[f"table-{len(frames)}"] = frame
        return data

    monkeypatch.setattr(downloads, "csv_bytes", recording)
    return frames


def test_downloads_are_labelled_data(exported):
    open_section("pclab/sections/06_parameters.py", "zh")
    gwq, correction = (
        i18n.text("zh", k) for k in ("parameters.owner.gwq", "parameters.compare.correction_wq")
    )
    owners = next(f for f in exported.values() if gwq in f.columns)
    assert list(owners.columns) == [
        i18n.text("zh", f"parameters.owner.{c}") for c in ("rank", "loss", "gwq", "gwd")
    ]
    assert pd.api.types.is_float_dtype(owners[gwq])
    recipes = next(f for f in exported.values() if correction in f.columns)
    assert pd.api.types.is_numeric_dtype(recipes[correction])

    exported.clear()
    open_section("pclab/sections/08_clipping.py")
    ranks = next(f for f in exported.values() if "scaled gradient" in f.columns)
    assert ranks["scaled gradient"].tolist() == [24.0, 32.0]  # the seed's 3 and 4, scaled by 8
    assert ranks["unscaled gradient"].tolist() == [3.0, 4.0]  # numbers, not "+24 → +3"
    assert ranks["step skipped"].tolist() == [False, False]


def test_home_says_where_to_start_and_has_no_copy_button():
    at = open_section("pclab/sections/home.py")
    assert 'class="pcl-share"' not in html_bodies(at)
    assert any(i18n.text("en", "home.start_workshop")[:40] in m.value for m in at.markdown)
    ledger = open_section(LEDGER)
    assert 'class="pcl-share"' in html_bodies(ledger)  # a page with a scenario keeps its button
