"""Every bundled example on the "Check a trainer" page, Run clicked, in both languages and at
two shapes: the page never raises past its verdict (issue 31: the "no label at position 0"
Hugging Face example raised a KeyError below its verdict).

No process starts: the trainer check is replaced by test_check_trainer_page's stand-in, whose
report each example's known scheme makes exactly (hand-made rank outputs, the worker's shape).

    python -m pytest tests/app/test_check_every_example.py -q
"""

from __future__ import annotations

import pytest

from pclab.ui import i18n
from pclab.ui import trainer_views as views
from tests.app.sections_helper import open_section
from tests.app.test_check_trainer_page import PAGE, launches  # noqa: F401 (a fixture)


@pytest.mark.parametrize(("lang", "world_size", "accum"), [("en", 2, 2), ("zh", 4, 3)])
def test_every_bundled_example_runs_to_its_verdict_without_an_exception(
    launches,  # noqa: F811
    lang,
    world_size,
    accum,
):
    at = open_section(PAGE, lang, chk_world_size=str(world_size), chk_accum=str(accum))
    failures = {}
    for example in views.EXAMPLES:
        at.selectbox(key="chk_example").set_value(example).run()
        at.button(key="chk_run").click().run()
        heading = i18n.text(lang, "check.results.heading")
        if at.exception or heading not in [s.value for s in at.subheader]:
            failures[example] = [e.value for e in at.exception] or "no verdict"
    assert not failures, failures
    assert len(launches) == len(views.EXAMPLES)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_one_scheme_reads_as_one_fix_line_in_trainers_terms(launches, lang):  # noqa: F811
    """Each rank's own average, measured: Trainer's setting says what to change, the
    hand-coding line of the same scheme is not said a second time; the link stays."""
    at = open_section(PAGE, lang, chk_example="hf_trainer_local_average")
    at.button(key="chk_run").click().run()
    texts = [m.value for m in at.markdown]
    head = i18n.text(lang, "check.fix.replica_mean", scenarios="@").split("@")[0]
    assert not [x for x in texts if x.startswith(head)]
    assert any(x.startswith("**`average_tokens_across_devices=False`**") for x in texts)
    assert [a.proto.page for a in at.get("page_link")] == ["ledger"]
