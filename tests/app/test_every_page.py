"""Every registered page renders without an exception, in both languages."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import pclab.ui.pages

ROOT = Path(__file__).resolve().parents[2]


PAGES = [page.file for page in pclab.ui.pages.PAGES]  # what app.py registers


def test_every_page_file_is_registered():
    on_disk = {f"pclab/sections/{p.name}" for p in (ROOT / "pclab" / "sections").glob("*.py")}
    assert on_disk == set(PAGES)


def test_the_home_page_walks_the_navigation_in_order():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception
    links = [link.proto.page for link in at.get("page_link")]
    workshop = [page.url for page in pclab.ui.pages.WORKSHOP]
    assert links == ["denominator", *workshop]  # "where to start", then the path in order


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
    at.switch_page("pclab/sections/02_ledger.py").run()
    at.number_input(key="ledger_n_a").set_value(5).run()
    before = [m.value for m in at.metric]
    at.session_state["lang"] = "zh"
    at.run()
    assert at.number_input(key="ledger_n_a").value == 5
    assert [m.value for m in at.metric] == before
    assert at.metric[0].label == "正确的全局梯度"


# Sections whose figures are torch computations; every other section must render without it,
# so a visitor never pays torch's import for arithmetic.
NEEDS_TORCH = {"pclab/sections/04_limits.py", "pclab/sections/07_validation.py"}


def test_sections_that_do_not_compute_with_torch_never_import_it():
    pages = [p for p in PAGES if p not in NEEDS_TORCH]
    code = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from streamlit.testing.v1 import AppTest

import pclab.ui.pages
out = {{}}
for page in {pages!r}:
    at = AppTest.from_file({str(ROOT / "app.py")!r}, default_timeout=60)
    at.run()
    at.switch_page(page).run()
    out[page] = [not at.exception, "torch" in sys.modules]
print(json.dumps(out))
"""
    env = dict(os.environ, PCL_PRELOAD="0")  # the page's own imports, not the server's preload
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {page: [True, False] for page in pages}


def test_the_server_preloads_torch_after_serving_a_page_unless_turned_off():
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from streamlit.testing.v1 import AppTest

import pclab.ui.pages
from pclab.ui import preload
AppTest.from_file({str(ROOT / "app.py")!r}, default_timeout=60).run()
started_by_app = list(preload._THREAD)  # app.py starts it after the page
for thread in started_by_app:
    thread.join(120)
print(bool(started_by_app), "torch" in sys.modules, "altair" in sys.modules)
"""
    for setting, expected in (("1", "True True True"), ("0", "False False False")):
        env = dict(os.environ, PCL_PRELOAD=setting)
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env=env,
        )
        assert done.stdout.strip().splitlines()[-1] == expected, done.stderr[-500:]
