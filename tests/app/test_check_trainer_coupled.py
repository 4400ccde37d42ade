"""The "Check a trainer" page's coupled examples (issue 28): each renders in both languages
with its own code, hands the run only its bundled path with the page's P and K, and reads a
real report (rank outputs recorded once from real runs:
fixtures/trainer_check_coupled.json, see its "about") as a verdict, the scheme with its
explanation in the reader's language, a scaled update's factor, and a fix line linking the
pages that teach it. Pages 05 and 06 link here. No process is started.

    python -m pytest tests/app/test_check_trainer_coupled.py -q
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from pclab.core.coupled_objectives import NAMED_SCHEMES
from pclab.experiments.trainer_check.report import build_report
from pclab.ui import i18n
from pclab.ui.trainer_examples import COUPLED_EXAMPLES
from tests.app.sections_helper import open_section
from tests.app.test_check_trainer_page import launches as page_launches  # noqa: F401

PAGE = "pclab/sections/check_trainer.py"
FIXTURE = Path(__file__).parent / "fixtures" / "trainer_check_coupled.json"
RECORDED = json.loads(FIXTURE.read_text())["runs"]  # example -> its rank outputs


@pytest.fixture
def launches(page_launches):  # noqa: F811
    """The page test's stand-in trainer check, reporting the recorded ranks of the example
    it is given."""
    page_launches.use(lambda world_size, accum, example: tuple(RECORDED[example]))
    return page_launches


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("example", COUPLED_EXAMPLES)
def test_each_coupled_example_renders_its_code_without_running(example, lang, launches):
    at = open_section(PAGE, lang, chk_example=example)
    assert not at.exception, at.exception
    assert i18n.text(lang, "coupled.intro")[:20] in "".join(m.value for m in at.markdown)
    assert any("def train_step" in c.value for c in at.code)
    assert launches == []


def test_the_run_gets_only_the_bundled_path_and_p_and_k(launches):
    at = open_section(PAGE, chk_example="gradcache", chk_world_size="2", chk_accum="2")
    at.button(key="chk_coupled_run").click().run()
    assert not at.exception, at.exception
    ((trainers, world_size, accum),) = launches
    root = Path(__file__).resolve().parents[2]
    assert trainers == (str(root / "examples" / "trainers" / "gradcache.py"),)
    assert (world_size, accum) == (2, 2)
    assert at.success and not at.error and not at.get("page_link")[1:]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_different_update_names_its_scheme_and_the_fix_with_links(lang, launches):
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    at = open_section(PAGE, lang, chk_example="naive_accumulation_gather")
    at.button(key="chk_coupled_run").click().run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [say("coupled.status.different")]
    text = "\n".join(m.value for m in at.markdown)
    assert say("coupled.explain.microstep_pool") in text
    assert say("coupled.fix.microstep_pool") in text
    links = [(a.proto.page, a.proto.label) for a in at.get("page_link")]
    assert ("limits", say("coupled.fix.link", page=say("limits.nav"))) in links
    (table,) = at.table
    assert set(table.value[say("coupled.column.scheme")]) == {say("coupled.scheme.microstep_pool")}


def test_a_scaled_update_shows_its_factor_per_group(launches):
    at = open_section(PAGE, chk_example="scaled_by_world_size", chk_accum="1")
    at.button(key="chk_coupled_run").click().run()
    assert not at.exception, at.exception
    text = "\n".join(m.value for m in at.markdown)
    assert "factor 2 on" in text and "`logit_scale`" in text


def test_batchnorm_at_k_1_lists_the_schemes_it_cannot_tell_apart(launches):
    at = open_section(PAGE, "zh", chk_example="batchnorm_ddp", chk_accum="1")
    at.button(key="chk_coupled_run").click().run()
    assert not at.exception, at.exception
    (table,) = at.table
    also = set(table.value[i18n.text("zh", "coupled.column.also")])
    assert also == {i18n.text("zh", "coupled.scheme.microbatch_pool")}


def batchnorm_at(world_size: int):
    """The recorded real run of batchnorm_ddp.py at K = 2 on `world_size` processes (2 or 1):
    BatchNorm accumulated microstep by microstep is `microbatch_pool`."""
    recorded = RECORDED["batchnorm_ddp_k2" if world_size == 2 else "batchnorm_ddp_p1_k2"]

    def ranks(_world_size, _accum, _example):
        return tuple(copy.deepcopy(recorded))

    return ranks


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_batchnorm_at_k_2_is_fixed_across_microbatches_and_ranks(lang, launches):
    """At K = 2 BatchNorm pools per microbatch of each rank: the fix names one forward over a
    rank's K microbatches and, with P > 1, SyncBatchNorm across the ranks (at K = 1 the
    scheme is rank_pool, whose fix says SyncBatchNorm); at P = 1 one forward is all of it."""
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    fixes = {}
    for world_size in (2, 1):
        launches.use(batchnorm_at(world_size))
        at = open_section(PAGE, lang, chk_example="batchnorm_ddp", chk_world_size=str(world_size))
        at.button(key="chk_coupled_run").click().run()
        assert not at.exception, at.exception
        (table,) = at.table
        assert set(table.value[say("coupled.column.scheme")]) == {
            say("coupled.scheme.microbatch_pool")
        }
        head = f"**{say('coupled.fix.heading')}**"
        (fixes[world_size],) = [m.value for m in at.markdown if m.value.startswith(head)]
    assert "SyncBatchNorm" in fixes[2] and "SyncBatchNorm" not in fixes[1]
    for fix in fixes.values():
        assert "BatchNorm" in fix and "GradCache" in fix
    assert fixes[2].endswith(say("coupled.fix.across_ranks.microbatch_pool"))
    assert fixes[1].endswith(say("coupled.fix.microbatch_pool"))


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", ["05_negatives", "06_parameters"])
def test_pages_05_and_06_link_to_the_coupled_check(page, lang):
    """By the check page's own title, quoted as the language quotes a name."""
    at = open_section(f"pclab/sections/{page}.py", lang)
    assert not at.exception, at.exception
    labels = [a.proto.label for a in at.get("page_link")]
    title = i18n.text(lang, "check.nav")
    quoted = {"en": f'"{title}"', "zh": f"“{title}”"}[lang]
    assert i18n.text(lang, "coupled.to_check", page=title) in labels
    assert any(label.endswith(quoted) or f"{quoted}页" in label for label in labels)


# ASCII punctuation or a stray space touching Chinese text, outside code spans: "要改什么:",
# "全局 batch (global_batch):", "分类器 的".
NOT_CHINESE = re.compile(r"[\u4e00-\u9fff][*\s]*[:()]|[:()][*\s]*[\u4e00-\u9fff]")
STRAY_SPACE = re.compile(r"[\u4e00-\u9fff] [\u4e00-\u9fff]")


def shown_texts(at) -> list[str]:
    """Every text the page shows: prose, captions, boxes, labels, table headers and cells."""
    texts = [
        e.value
        for kind in ("markdown", "caption", "error", "success", "warning")
        for e in getattr(at, kind)
    ]
    texts += [e.label for e in at.button] + [e.label for e in at.expander]
    texts += [a.proto.label for a in at.get("page_link")] + [s.value for s in at.subheader]
    for table in at.table:
        texts += [str(c) for c in table.value.columns]
        texts += [str(v) for column in table.value.columns for v in table.value[column]]
    return texts


@pytest.mark.parametrize("example", RECORDED)
def test_the_coupled_view_punctuates_chinese_as_chinese(example, launches):
    """Each recorded run read in Chinese: full-width marks wherever code assembles text
    (the fix's head, a scheme with its code, a diagnosis's code, the items per rank)."""
    if example == "gather_with_grad_unequal" or example.startswith("batchnorm_ddp_"):
        launches.use(lambda *_: tuple(RECORDED[example]))
    shown = example.removesuffix("_unequal")
    shown = "batchnorm_ddp" if shown.startswith("batchnorm_ddp") else shown
    at = open_section(PAGE, "zh", chk_example=shown, chk_accum="1")
    at.button(key="chk_coupled_run").click().run()
    assert not at.exception, at.exception
    # the English a Chinese diagnosis quotes as the report said it (its own punctuation)
    quoted = [
        f["message"]
        for r in RECORDED.get(example, ())
        for c in r["checks"]
        for s in c["scenarios"]
        if (f := s.get("failure"))
    ]
    found = []
    for text in shown_texts(at):
        for message in quoted:
            text = text.replace(message, " ")
        prose = re.sub(r"`[^`]*`|:material/\w+:", " ", text)  # code, and an icon's name
        found += [m.group() for p in (NOT_CHINESE, STRAY_SPACE) for m in p.finditer(prose)]
    assert found == [], found


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_gather_of_unequal_items_is_said_in_the_readers_language(lang, launches):
    """The recorded real run of gather_with_grad.py with --counts "2;3" (Gloo aborted rank 0):
    its collective_mismatch reads in the reader's language, naming each rank's items; the
    failed scenario's row names no scheme."""
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    launches.use(lambda world_size, accum, example: tuple(RECORDED["gather_with_grad_unequal"]))
    at = open_section(PAGE, lang, chk_example="gather_with_grad", chk_accum="1")
    at.button(key="chk_coupled_run").click().run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [say("coupled.status.different")]
    (caption,) = [c.value for c in at.caption if "collective_mismatch" in c.value]
    held = i18n.join(
        lang, [say("coupled.diagnosis.held", rank=r, items=n) for r, n in ((0, 2), (1, 3))]
    )
    failure = RECORDED["gather_with_grad_unequal"][0]["checks"][0]["scenarios"][0]["failure"]
    scenario = say("check.scenario.custom")
    body = failure["message"].removeprefix("custom: ")  # English: the report's own words
    words = i18n.join(lang, [scenario, body], "head")
    if lang == "zh":
        words = say(
            "check.diagnosis.collective_mismatch.unequal_items",
            scenario=scenario,
            microstep=0,
            held=held,
            message=failure["message"],
        )
    assert caption == i18n.join(lang, ["`collective_mismatch`", words], "head")
    assert "rank 0: 2, rank 1: 3" in failure["message"]  # the items each rank held, said
    assert "pair.cc" not in caption and "tiny_embedder.py:" in caption  # the user's line
    (table,) = at.table
    assert list(table.value[say("coupled.column.scheme")]) == ["—"]
    assert list(table.value[say("coupled.column.verdict")]) == [say("check.verdict.different")]


REFUSED = "embedding_loss refused 6 documents for 3 queries."


def with_findings(world_size, accum, example):
    """The recorded GradCache run, as if train_step had made optimizer state the reference
    has none of (a shared diagnosis) and embedding_loss had refused extra documents (the
    coupled mode's own)."""
    ranks = copy.deepcopy(RECORDED["gradcache"])
    for rank in ranks:
        rank["checks"][0]["scenarios"][0]["extra_state"] = {"keys": ["step"], "parameters": 4}
    left = {"remote_detached": REFUSED, "query_path_only": REFUSED}
    ranks[0]["checks"][0]["scenarios"][0]["left_out"] = left
    return tuple(ranks)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_diagnosis_of_the_coupled_view_reads_in_the_readers_language(lang, launches):
    """The coupled view says every code through the token view's translator: in Chinese in
    the catalogue's words (the English message only quoted after them, never alone), in
    English as the report's own message."""
    launches.use(with_findings)
    at = open_section(PAGE, lang, chk_example="gradcache")
    at.button(key="chk_coupled_run").click().run()
    assert not at.exception, at.exception
    report = build_report(with_findings(2, 2, "gradcache"))["checks"][0]
    shown = [d for d in report["diagnoses"] if d["code"] != "no_evidence"]  # the banner's
    assert {d["code"] for d in shown} == {"extra_optimizer_state", "candidate_left_out"}
    head = i18n.PUNCTUATION[lang]["head"]  # "`code`: " in English, "`code`：" in Chinese
    codes = tuple(f"`{d['code']}`{head}" for d in shown)
    captions = [c.value for c in at.caption if c.value.startswith(codes)]
    assert len(captions) == len(shown)
    for d, caption in zip(shown, captions):
        code, words = caption.split(head, 1)
        assert code == f"`{d['code']}`"
        if lang == "en":
            assert words.endswith(d["message"].removeprefix(f"{d['scenario']}: "))
        else:
            assert re.search(r"[\u4e00-\u9fff]", words.replace(d["message"], ""))
            assert words != d["message"]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("example", COUPLED_EXAMPLES)
def test_each_coupled_example_is_predicted_then_revealed(example, lang, launches):
    """Predict, then reveal (issue 45): which objective the step minimises, among every one the
    check can name; in workshop mode the run waits for the reveal; the answer is the
    example's own key (the scheme its real check names: test_trainer_check_coupled.py) with
    why, in the reader's language."""
    at = open_section(PAGE, lang, workshop=True, chk_example=example)
    guess = at.radio(key="chk_coupled_ex_guess")
    options = (*NAMED_SCHEMES, "scaled")  # "other", none of them, is no prediction
    assert guess.options == [i18n.text(lang, f"coupled.scheme.{s}") for s in options]
    assert COUPLED_EXAMPLES[example] in options
    assert not _has(at, "chk_coupled_run")  # hidden until the reveal
    wrong = next(s for s in options if s != COUPLED_EXAMPLES[example])
    guess.set_value(wrong).run()
    at.button(key="chk_coupled_ex_reveal").click().run()
    assert not at.exception, at.exception
    why = i18n.text(lang, f"coupled.answer.{example}")
    assert why in [c.value for c in at.caption]
    answer = i18n.text(lang, f"coupled.scheme.{COUPLED_EXAMPLES[example]}")
    assert any(answer in w.value for w in at.warning)  # the wrong guess is told the answer
    assert _has(at, "chk_coupled_run") and launches == []


def _has(at, key: str) -> bool:
    return any(b.key == key for b in at.button)
