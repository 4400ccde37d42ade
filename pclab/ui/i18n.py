"""Catalogue lookup for the two languages (no Streamlit import: tests and the CLI use it).

Each language has one catalogue: `locales/<lang>/*.toml`, one file per page or area. A key
is `<file stem>.<dotted key inside the file>`, e.g. `ledger.title` comes from
`locales/en/ledger.toml`'s `title`. Both languages hold exactly the same keys (a test
checks it), so a missing translation fails the suite rather than a visitor's page.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

LANGUAGES = ("en", "zh")
DEFAULT_LANGUAGE = "en"
LOCALES = Path(__file__).resolve().parent.parent / "locales"


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


def text(lang: str, key: str, **values: object) -> str:
    """The text for `key`, with `{name}` placeholders filled from `values`."""
    template = catalogue(lang)[key]
    return template.format(**values) if values else template


def language_from_locale(locale: str | None) -> str:
    """Pick a catalogue from a browser locale such as 'zh-CN' or 'en-US'."""
    if locale and locale.lower().startswith("zh"):
        return "zh"
    return DEFAULT_LANGUAGE
