"""Both languages hold the same keys, every key a page asks for exists, and placeholders agree."""

import ast
import re
import string
from pathlib import Path

import pytest

from pclab.core.validation import RULES
from pclab.ui import i18n

ROOT = Path(__file__).resolve().parent.parent


def placeholders(text: str) -> set[str] | str:
    """Named {fields}; texts with raw LaTeX braces are never formatted and say so."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name}
    except ValueError:
        return "not a template"


# English reads a diagnosis as the report's own message (ui/trainer_diagnoses.py): only the
# other languages hold these keys, one per code and case of the registry (test_diagnosis_codes).
DIAGNOSES = "check.diagnosis."


def test_same_keys_in_both_languages():
    en, zh = i18n.catalogue("en"), i18n.catalogue("zh")
    assert sorted(set(en) - set(zh)) == []
    assert sorted(k for k in set(zh) - set(en) if not k.startswith(DIAGNOSES)) == []


def test_same_placeholders_in_both_languages():
    en, zh = i18n.catalogue("en"), i18n.catalogue("zh")
    mismatched = [key for key in en if placeholders(en[key]) != placeholders(zh[key])]
    assert mismatched == []


def test_every_error_rule_has_a_translation():
    for lang in i18n.LANGUAGES:
        assert {
            k.removeprefix("errors.rule.")
            for k in i18n.catalogue(lang)
            if k.startswith("errors.rule.")
        } == set(RULES)


def literal_keys(path: Path) -> list[str]:
    """Keys of t("area.key") calls with a constant argument (f-string keys are checked by
    rendering)."""
    return [
        node.args[0].value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "t"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def test_every_literal_key_used_in_code_exists():
    keys = set(i18n.catalogue("en"))
    sources = [*ROOT.glob("pclab/sections/*.py"), *ROOT.glob("pclab/ui/*.py"), ROOT / "app.py"]
    missing = [
        f"{path.name}: {key}" for path in sources for key in literal_keys(path) if key not in keys
    ]
    assert missing == []


def test_chinese_catalogue_is_chinese():
    zh = i18n.catalogue("zh")

    # Prose, not a formula: what is left once $...$ maths is removed is still a sentence.
    def is_prose(value: str) -> bool:
        if value.count("\\") > 3 and "$" not in value:  # a bare LaTeX formula for st.latex
            return False
        return len(re.sub(r"\$\$?[^$]*\$\$?", "", value)) > 40

    prose = [k for k, v in zh.items() if is_prose(v)]
    untranslated = [k for k in prose if not re.search(r"[\u4e00-\u9fff]", zh[k])]
    assert untranslated == []


def test_language_from_locale():
    assert i18n.language_from_locale("zh-CN") == "zh"
    assert i18n.language_from_locale("en-GB") == "en"
    assert i18n.language_from_locale(None) == "en"
    with pytest.raises(ValueError, match="^lang="):
        i18n.catalogue("fr")
