"""A visitor's value (a link's parameter, a rejected input) as plain text wherever Streamlit
renders Markdown: no markup, no linked address, and no invisible format character (bidi
overrides and isolates, zero-width characters) that would reorder or hide the app's words."""

from __future__ import annotations

import re
import unicodedata

_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")  # every ASCII punctuation character
# Where Streamlit's Markdown would find a web or e-mail address in plain text (it links
# "https://…", "www.…" and "name@host.…" after the text is parsed, escaped or not).
_ADDRESS = re.compile(r"(?i)(?<=:)(?=/)|(?<=www)(?=\.)|(?=@)")
WORD_JOINER = "\u2060"  # invisible, and no line break: the text reads the same


def _visible(text: str) -> str:
    """`text` without its format characters (Unicode category Cf): the bidi embeddings,
    overrides and isolates (U+202A-202E, U+2066-2069), the marks (U+200E, U+200F, U+061C),
    zero-width spaces and joiners (U+200B-200D, U+2060-2064, U+FEFF), soft hyphens, tags.
    ASCII text has none: it is returned as it came."""
    if text.isascii():
        return text
    return "".join(char for char in text if unicodedata.category(char) != "Cf")


def plain(text: object) -> str:
    """`text` as text, never markup, wherever Streamlit renders Markdown (a warning, an
    error, a caption), so a visitor's value cannot open a link, an image, a colour, a code
    span, an HTML tag or a formula, nor turn the sentence around it backwards.

    Every format character (category Cf: a bidi override such as U+202E, a zero-width
    space) is removed; every ASCII punctuation character is written as its numeric
    character reference (`&#58;` for ":"), which Markdown shows as that character and never
    reads as markup; an invisible word joiner inside "://", "www." and before "@" keeps an
    address from being linked; line breaks are shown as ⏎."""
    text = _visible(str(text).replace("\r", "").replace("\n", " ⏎ "))
    text = _ADDRESS.sub(WORD_JOINER, text)
    return _PUNCTUATION.sub(lambda match: f"&#{ord(match[0])};", text)
