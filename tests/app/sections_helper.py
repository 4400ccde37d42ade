"""Open one section in AppTest the way a visitor arrives: language, workshop mode and any
deep-link parameters set first, the entry script run (it registers the sections), then the
section itself. Shared by the section test modules."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def open_section(
    page: str, lang: str = "en", workshop: bool = False, timeout: float = 60, **query
) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    at.session_state["lang"] = lang
    at.session_state["workshop"] = workshop
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at
