"""Core's input errors reach the reader through their codes, never their English text; and
what the server lets a visitor download names no folder of the server.

The page's message is built from InvalidInput's codes (field, cell, rule, detail code and
values) and NotANumber's field: an error whose English text says something else entirely
gets the same message, in both languages. Notebook users keep the English ValueError."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from pclab import paths
from pclab.core import denominator, framework
from pclab.core.validation import DETAILS, RULES, InvalidInput, NotANumber
from pclab.ui import downloads, i18n, input_errors, language
from pclab.ui.plain_text import plain


class Garbled(InvalidInput):
    """The same codes, English text that a text-matching UI would misread."""

    def __str__(self) -> str:
        return "x[9][9]=oops is not a number (the result overflows float64)"


@pytest.fixture(params=i18n.LANGUAGES)
def lang(request, monkeypatch):
    monkeypatch.setattr(language, "lang", lambda: request.param)
    return request.param


def caught(call) -> Exception:
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    return info.value


def test_a_cell_is_named_by_its_column_and_row_from_the_codes(lang):
    exc = caught(lambda: framework.framework_update([[1.0, math.nan]], [[1, 1]]))
    assert isinstance(exc, InvalidInput) and (exc.name, exc.cell) == ("grad_sums", (0, 1))
    assert str(exc).startswith("grad_sums[0][1]=nan is invalid")  # the notebook's English
    shown = input_errors.error_message(exc, {"grad_sums": "G"})
    assert shown == i18n.text(
        lang,
        "errors.invalid_cell",
        field="G",
        row="r0·k1",
        value=i18n.text(lang, "errors.empty_cell"),
        rule=i18n.text(lang, "errors.rule.finite"),
    )
    garbled = Garbled(exc.name, exc.value, exc.rule, cell=exc.cell)
    assert input_errors.error_message(garbled, {"grad_sums": "G"}) == shown


def test_a_detail_code_is_translated_with_its_values(lang):
    exc = caught(lambda: denominator.count_valid_labels(10, 6, 6, 0))
    assert (exc.code, exc.detail_values) == ("up_to", {"high": 10, "of": "positions"})
    assert "0..10 (positions)" in str(exc)
    shown = input_errors.error_message(exc, {"positions": "POS"})
    assert i18n.text(lang, "errors.detail.up_to", high=10, of="POS") in shown


def test_not_a_number_carries_its_field(lang):
    exc = caught(lambda: framework.framework_update([[1.0, "x"]], [[1, 1]]))
    assert isinstance(exc, NotANumber) and isinstance(exc, TypeError)
    assert str(exc) == "grad_sums[0][1]='x' is not a number"
    shown = input_errors.error_message(exc, {"grad_sums": "G"})
    assert "G" in shown and "r0·k1" in shown and i18n.text(lang, "errors.rule.finite") in shown


def test_counts_beyond_float64_are_refused_not_overflowed():
    exc = caught(lambda: framework.framework_update([[1.0, 1.0]], [[1e308, 1e308]]))
    assert isinstance(exc, InvalidInput) and (exc.rule, exc.code) == ("in_range", "overflow")


def test_every_code_has_a_translation():
    for lang in i18n.LANGUAGES:
        catalogue = i18n.catalogue(lang)
        assert {
            k.removeprefix("errors.detail.") for k in catalogue if "errors.detail." in k
        } == set(DETAILS)
        assert all(f"errors.rule.{rule}" in catalogue for rule in RULES)


def test_a_run_record_names_no_folder_of_the_server():
    trainer = paths.EXAMPLES_DIR / "correct_manual.py"
    result = SimpleNamespace(
        ok=True,
        message=f"checked {trainer}",
        seconds=1.0,
        worker_hash="abc",
        ranks=[{"sha256": "r0"}],
        report={"trainer": str(trainer), "log": [f"{paths.IMPORT_ROOT}/pclab/core/x.py"]},
    )
    record = downloads.run_record(result, {"trainer": str(trainer)}, "trainer_check")
    text = json.dumps(record)
    assert str(paths.IMPORT_ROOT) not in text, text
    assert record["parameters"]["trainer"] == "examples/trainers/correct_manual.py"
    assert record["report"]["log"] == ["pclab/core/x.py"]


@pytest.mark.parametrize(
    "exc, key",
    [
        (TypeError("unsupported operand type(s) for *: 'NoneType' and 'int'"), "not_a_number"),
        (ValueError("ranks disagree on the inputs"), "unusable"),
    ],
)
def test_an_error_without_codes_gets_the_catalogues_sentence(lang, exc, key):
    """Python's or core's English never reaches the reader: the sentence is the catalogue's."""
    assert input_errors.error_message(exc) == i18n.text(lang, f"errors.{key}")


def test_an_uncoded_detail_is_shown_only_without_words(lang):
    """A range or a shape reads the same in any language; a detail with words is English."""
    ranged = InvalidInput("world_size", 9, "in_range", "1..8")
    worded = InvalidInput("taus", [1.0], "in_range", "1..1000 temperatures")
    rule = i18n.text(lang, "errors.rule.in_range")
    assert f"{rule} ({plain('1..8')})" in input_errors.error_message(ranged)
    shown = input_errors.error_message(worded)
    assert rule in shown and "temperatures" not in shown and "1..1000" not in shown
