"""Every registered page renders without an exception, in both languages."""

import ast
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def registered_pages() -> list[str]:
    """The page files app.py registers (read without running Streamlit)."""
    tree = ast.parse((ROOT / "app.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PAGES":
            return [entry[0] for entry in ast.literal_eval(node.value)]
    raise AssertionError("app.py has no PAGES list")


PAGES = registered_pages()


def test_every_page_file_is_registered():
    on_disk = {f"sections/{p.name}" for p in (ROOT / "sections").glob("*.py")}
    assert on_disk == set(PAGES)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", PAGES)
def test_page_renders_without_exception(page, lang):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lang"] = lang
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    assert at.title, f"{page} shows no title"
    # The title comes from the chosen language's catalogue.
    if lang == "zh":
        assert any("\u4e00" <= ch <= "\u9fff" for ch in at.title[0].value), at.title[0].value


def test_language_switch_keeps_widget_values():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("sections/02_ledger.py").run()
    at.number_input(key="ledger_n_a").set_value(5).run()
    before = [m.value for m in at.metric]
    at.session_state["lang"] = "zh"
    at.run()
    assert at.number_input(key="ledger_n_a").value == 5
    assert [m.value for m in at.metric] == before
    assert at.metric[0].label == "正确的全局梯度"
