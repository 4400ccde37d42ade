"""The words of the "Frameworks, measured" page (issue 31): each "Set:" line says the fix
(never the bug, never a row that fails), a live result never claims "just now", and a
framework whose first run compiles an op says so before Run, from a measured look at torch's
extension cache (pclab.ui.first_run).

    python -m pytest tests/app/test_framework_words.py -q
"""

from __future__ import annotations

import sys

import pytest

from pclab.experiments.trainer_check import frameworks
from pclab.ui import first_run, framework_issues, framework_rows, i18n
from tests.app.sections_helper import open_section

PAGE = "pclab/sections/frameworks.py"
CODES = [s.code for s in frameworks.SETTINGS]


def test_a_missing_op_is_found_in_each_layout_of_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert first_run.to_compile("deepspeed") == ("deepspeed_shm_comm",)
    assert first_run.to_compile("accelerate") == ()
    python = f"py{sys.version_info.major}{sys.version_info.minor}{sys.abiflags}"
    folder = tmp_path / "torch_extensions" / f"{python}_cpu" / "deepspeed_shm_comm"
    folder.mkdir(parents=True)
    assert first_run.to_compile("deepspeed") == ("deepspeed_shm_comm",)  # a failed build
    (folder / "deepspeed_shm_comm.so").write_bytes(b"")
    assert first_run.to_compile("deepspeed") == ()
    chosen = tmp_path / "chosen"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(chosen))
    assert first_run.to_compile("deepspeed") == ("deepspeed_shm_comm",)
    (chosen / "deepspeed_shm_comm").mkdir(parents=True)
    (chosen / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"")
    assert first_run.to_compile("deepspeed") == ()


@pytest.mark.skipif(
    framework_rows.installed_version("deepspeed") is None, reason="deepspeed not installed"
)
def test_the_page_warns_before_a_first_run_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # an empty cache
    at = open_section(PAGE)
    warned = [w for w in at.warning if "g++" in w.value]
    assert len(warned) == 3  # the three DeepSpeed rows, and no other
    assert all("`deepspeed_shm_comm`" in w.value for w in warned)
    (tmp_path / "deepspeed_shm_comm").mkdir()
    (tmp_path / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"")
    at = open_section(PAGE)
    assert not [w for w in at.warning if "g++" in w.value]


def test_each_set_line_says_the_fix():
    """The rows read on their own: no "just now", the default rows point at the row that
    is the same update, each 'Set:' line is the fix (its scheme's formula or 'keep it')."""
    en = {code: i18n.text("en", f"frameworks.advice.{code}") for code in CODES}
    assert "just now" not in i18n.text("en", "frameworks.measured_here")
    assert en["accelerate_accumulate"].startswith("**Set:** the next row")
    assert "× K × P ÷ N" in en["accelerate_accumulate"]
    assert "× K × P ÷ N" in en["lightning_accumulate"]
    assert "fit()" in en["litgpt_finetune"] and "Lightning" not in en["litgpt_finetune"]
    assert "multiply by P" in en["fsdp2_local_mean"]
    assert not en["torchtitan"].startswith("**Set:**")
    order = [s.code for s in frameworks.SETTINGS]
    nxt = order[order.index("accelerate_accumulate") + 1]
    assert nxt == "accelerate_guide"  # "the next row" is the guide as its text says
    assert "huggingface/transformers" not in str(framework_issues.ISSUES.get(order[0], ()))
