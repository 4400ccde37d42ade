"""The words of the "Check a trainer" page after a Run (issue 31). Every bundled example, in
both languages and at two shapes, reaches its verdict without an exception (the "no label at
position 0" Hugging Face example raised a KeyError below its verdict); each row's scheme, its
notes and its fix line name one scheme; the "Why" under a failed verdict is about the failure.

No process starts: the trainer check is replaced by test_check_trainer_page's stand-in, whose
report each example's known scheme makes exactly (hand-made rank outputs, the worker's shape).

    python -m pytest tests/app/test_check_page_words.py -q
"""

from __future__ import annotations

import pytest

from pclab.ui import i18n
from pclab.ui import trainer_views as views
from tests.app.sections_helper import open_section
from tests.app.test_check_trainer_page import PAGE, launches, verdicts  # noqa: F401 (fixture)


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


def test_a_tied_row_names_the_trainers_scheme_in_its_cell_and_its_fix(launches):  # noqa: F811
    """A double ÷K at P = K = 2: the empty rank's weights fit the mean of local means too;
    its row names global N, then ÷K (the tie in its notes), as its fix line does; the
    control row of a wrong trainer never reads as the global token mean."""
    at = open_section(PAGE, chk_example="double_divide_by_k")
    at.button(key="chk_run").click().run()
    table = verdicts(at).set_index("scenario")
    say = lambda key, **v: i18n.text("en", key, **v)  # noqa: E731
    empty, control = say("check.scenario.empty_rank"), say("check.scenario.equal_counts")
    assert table.loc[empty, "scheme"] == say("schemes.double_scaled")
    assert say("schemes.replica_mean") in table.loc[empty, "notes"]
    assert table.loc[control, "scheme"] == say("schemes.double_scaled")
    fix = next(m.value for m in at.markdown if m.value.startswith("**The loss is divided by K"))
    assert empty in fix
    assert not [m for m in at.markdown if m.value.startswith("**Each rank divides")]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_why_under_a_failure_is_about_the_failure(launches, lang):  # noqa: F811
    """Mean of local means: the control matched the reference (no evidence); that is said in
    its row's notes, not under "Why" as if it explained the failure."""
    at = open_section(PAGE, lang, chk_example="ddp_mean_of_local_means")
    at.button(key="chk_run").click().run()
    texts = [m.value for m in at.markdown]
    control = i18n.text(lang, "check.scenario.equal_counts")
    assert not [x for x in texts if x.startswith(f"- {control}")]
    notes = verdicts(at, lang)["notes"]
    assert any(i18n.text(lang, "check.note.control") in n for n in notes)
    if lang == "zh":  # sentences joined the Chinese way: no space after 。
        assert not [n for n in notes if "。 " in n]


def test_a_language_switch_sends_the_example_with_its_new_name():
    """A selectbox's value travels as its label: after a switch the browser would keep the
    English name (issue 31). The page sets the chosen code again, so the frontend is sent
    the Chinese label as the value (set_value), and the choice itself is kept."""
    at = open_section(PAGE, chk_example="ddp_mean_of_local_means")
    at.selectbox(key="chk_example").set_value("microbatch_means").run()
    at.session_state["lang"] = "zh"
    at.run()
    box = at.selectbox(key="chk_example")
    assert box.value == "microbatch_means" and not at.exception
    assert box.label == i18n.text("zh", "check.controls.example")  # its own label, not a name
    assert box.proto.set_value and box.proto.raw_value == i18n.text(
        "zh", "check.example.microbatch_means"
    )
    at.run()  # the next rerun in the same language leaves the widget to the reader
    assert not at.selectbox(key="chk_example").proto.set_value


def test_a_bare_return_to_the_page_gets_its_inputs_and_its_result_back(launches):  # noqa: F811
    """Back after a fix link (or the sidebar) arrives with the language only: Streamlit drops
    a page's parameters when another opens. The page gives back its last ones, so the example,
    P, K and the kept verdict are there again; a default chosen on purpose stays chosen."""
    at = open_section(PAGE, chk_example="microbatch_means", chk_world_size="4")
    at.button(key="chk_run").click().run()
    assert at.table
    at.switch_page("pclab/sections/01_denominator.py").run()
    for key in [k for k in at.query_params if k.startswith("chk_")]:
        del at.query_params[key]
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="chk_example").value == "microbatch_means"
    assert at.query_params.get("chk_world_size") in ("4", ["4"])
    assert at.table and len(launches) == 1  # the kept result, not a second run
    at.selectbox(key="chk_example").set_value("correct_manual").run()  # the default, on purpose
    at.run()
    assert at.selectbox(key="chk_example").value == "correct_manual"
