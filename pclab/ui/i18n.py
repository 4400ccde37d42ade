"""Catalogue lookup for the two languages (no Streamlit import: tests and the CLI use it).

Each language has one catalogue: `locales/<lang>/*.toml`, one file per page or area. A key
is `<file stem>.<dotted key inside the file>`, e.g. `ledger.title` comes from
`locales/en/ledger.toml`'s `title`. Both languages hold exactly the same keys (a test
checks it), so a missing translation fails the suite rather than a visitor's page; but for the
trainer check's diagnoses (`check.diagnosis.*`), which English reads as the report's own
message and the other languages translate (ui/trainer_diagnoses.py).
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

LANGUAGES = ("en", "zh")
DEFAULT_LANGUAGE = "en"
LOCALES = Path(__file__).resolve().parent.parent / "locales"

# How each language joins what code assembles: items of a list, clauses of a sentence, and a
# head with what follows it ("uneven counts: ..."). Chinese uses its own full-width marks.
PUNCTUATION = {
    "en": {"list": ", ", "clauses": "; ", "head": ": ", "sentences": " "},
    "zh": {"list": "、", "clauses": "，", "head": "：", "sentences": ""},
}
CJK = "\u3400-\u4dbf\u4e00-\u9fff"
# A Latin letter or digit touching a Chinese character (bold markers ** in between count as
# touching): Chinese typesetting puts a space there ("microbatch 已跳过", "3 个").
_LATIN_THEN_CJK = re.compile(rf"([A-Za-z0-9][*_]*)(?=[{CJK}])")
_CJK_THEN_LATIN = re.compile(rf"(?<=[{CJK}])([*_]*[A-Za-z0-9])")


def _flatten(prefix: str, table: dict, out: dict[str, str]) -> None:
    for key, value in table.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            _flatten(name, value, out)
        else:
            out[name] = value


@cache
def catalogue(lang: str) -> dict[str, str]:
    """Every key -> text of one language."""
    if lang not in LANGUAGES:
        raise ValueError(f"lang={lang!r} is invalid: expected one of {', '.join(LANGUAGES)}")
    out: dict[str, str] = {}
    for path in sorted((LOCALES / lang).glob("*.toml")):
        with path.open("rb") as f:
            _flatten(path.stem, tomllib.load(f), out)
    return out


def space_latin(text: str) -> str:
    """A space between a Latin word (or a number) and a Chinese character that touch:
    "场景**一个空的 microbatch**已跳过" -> "场景**一个空的 microbatch** 已跳过"."""
    return _CJK_THEN_LATIN.sub(r" \1", _LATIN_THEN_CJK.sub(r"\1 ", text))


def join(lang: str, items, how: str = "list") -> str:
    """Items joined the way `lang` writes them: how = "list" (a, b, c / 甲、乙、丙), "clauses"
    (a; b / 甲，乙), "head" (head: rest / 标题：正文) or "sentences" (A. B. / 甲。乙。)."""
    if how not in PUNCTUATION[lang]:
        raise ValueError(f"how={how!r} is invalid: expected one of {', '.join(PUNCTUATION[lang])}")
    joined = PUNCTUATION[lang][how].join(str(item) for item in items)
    return space_latin(joined) if lang == "zh" else joined


def text(lang: str, key: str, **values: object) -> str:
    """The text for `key`, with `{name}` placeholders filled from `values`. In Chinese, a
    Latin word a placeholder brings in gets its space from the Chinese around it."""
    template = catalogue(lang)[key]
    filled = template.format(**values) if values else template
    return space_latin(filled) if lang == "zh" and values else filled


def language_from_locale(locale: str | None) -> str:
    """Pick a catalogue from a browser locale such as 'zh-CN' or 'en-US'."""
    if locale and locale.lower().startswith("zh"):
        return "zh"
    return DEFAULT_LANGUAGE
