"""The "Check a trainer" page's run-mode examples (issue 41; resume, issue 42): each is listed
from the examples' index (examples.RUN) after the token and coupled ones, renders in both
languages with its own code and the module it shares, hands the run only its bundled path
with the page's P and K, and reads a real report (recorded once from real `pclab check
--json` runs: fixtures/trainer_check_run.json, see its "about") as a verdict, a strip of
updates per scenario, the learning rate per update, the first divergent update, the claims,
the diagnoses in the reader's language and a fix line; a resumable loop's kill points as a
timeline. Pages 04 and the Full Transformer link here. No process is started.

    python -m pytest tests/app/test_check_trainer_run.py -q
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from pclab.experiments.trainer_check import examples
from pclab.ui import i18n
from pclab.ui import trainer_diagnoses as diagnoses
from pclab.ui import trainer_views as views
from pclab.ui.trainer_examples import RUN_EXAMPLES
from tests.app.sections_helper import open_section
from tests.app.test_check_trainer_page import launches as page_launches  # noqa: F401

PAGE = "pclab/sections/check_trainer.py"
FIXTURE = Path(__file__).parent / "fixtures" / "trainer_check_run.json"
RECORDED = json.loads(FIXTURE.read_text())["checks"]  # example -> its check's report
CJK = "\u4e00-\u9fff"


@pytest.fixture
def launches(page_launches):  # noqa: F811
    """The page test's stand-in trainer check, reporting the recorded check of the example."""
    page_launches.use(lambda world_size, accum, example: RECORDED[example])
    return page_launches


def charts(at, check: dict) -> dict[str, tuple[dict, object]]:
    """Each chart's spec and data, named by what it draws in page order: per scenario
    strip_<name> and lr_<name>, then the resume check's timeline."""
    names = [f"{kind}_{s['name']}" for s in check["scenarios"] for kind in ("strip", "lr")]
    names += ["timeline"] if check.get("resume") else []
    found = at.get("vega_lite_chart")
    assert len(found) == len(names)
    out = {}
    for name, chart in zip(names, found):
        data = chart.proto.datasets[0].data.data
        frame = pa.ipc.open_stream(data).read_all().to_pandas()
        out[name] = (json.loads(chart.proto.spec), frame)
    return out


def test_the_run_examples_are_the_index_s_after_the_others():
    assert list(RUN_EXAMPLES) == [e.code for e in examples.RUN]
    at = open_section(PAGE)
    options = at.selectbox(key="chk_example").options
    names = [i18n.text("en", f"check.run_mode.example.{c}") for c in RUN_EXAMPLES]
    assert options[-len(names) :] == names


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_run_example_renders_its_code_without_running(lang, launches):
    at = open_section(PAGE, lang)
    for code in RUN_EXAMPLES:
        at.selectbox(key="chk_example").set_value(code).run()
        assert not at.exception, (code, at.exception)
        assert at.query_params.get("chk_example") == code
        path = views.bundled_path(code)
        shown = [c.value for c in at.code]
        assert path.read_text().rstrip() in shown
        assert any("def train_loop" in c for c in shown)
        assert "chk_loop_run" in [b.key for b in at.button] and "chk_run" not in [
            b.key for b in at.button
        ]
        resumable = code.startswith("run_resume_")
        said = i18n.text(lang, "check.run_mode.resumable")
        assert (said in [i.value for i in at.info]) == resumable
    assert launches == []


def test_the_run_gets_only_the_bundled_path_and_p_and_k(launches):
    at = open_section(PAGE, chk_example="run_divide_by_k", chk_world_size="2", chk_accum="2")
    at.button(key="chk_loop_run").click().run()
    assert not at.exception, at.exception
    root = Path(__file__).resolve().parents[2]
    assert launches == [((str(root / "examples" / "trainers" / "run_divide_by_k.py"),), 2, 2)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_divide_by_k_loop_reads_update_by_update(lang, launches):
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    check = RECORDED["run_divide_by_k"]
    at = open_section(PAGE, lang, chk_example="run_divide_by_k")
    at.button(key="chk_loop_run").click().run()
    assert not at.exception, at.exception
    names = [say(f"check.scenario.{s['name']}") for s in check["scenarios"]]
    failed = say("check.run_mode.results.failed", scenarios=i18n.join(lang, names))
    assert [e.value for e in at.error] == [failed] and not at.success
    assert [tab.label for tab in at.tabs] == names
    found = charts(at, check)
    for s in check["scenarios"]:
        _, strip = found[f"strip_{s['name']}"]
        assert len(strip) == len(s["updates"]) == 6  # one cell per window: 2 epochs of 2, 2, 1
        assert list(strip["where"])[2].endswith(say("check.run_mode.cell.tail"))
        _, rates = found[f"lr_{s['name']}"]
        assert set(rates["lr"]) == {0.1} and 0 not in set(rates["lr"])
    _, empty = found["strip_empty_window"]
    skipped = empty[empty["state"] == "skipped"]
    assert list(skipped["text"]) == [say("common.skipped")] and not skipped["coloured"].any()
    assert skipped["verdict"].isna().all()  # no verdict colour for a skipped window
    _, rates = found["lr_empty_window"]
    intended = rates[rates["series"] == say("check.run_mode.lr.intended")]
    assert len(intended) == 5  # the skipped window has no intended rate: left out, not 0
    _, uneven = found["strip_uneven"]
    assert set(uneven["state"]) == {"different"}
    assert uneven["text"].iloc[0] == say("schemes.microbatch_mean")
    text = "\n".join(m.value for m in at.markdown)
    tensor = say("check.results.tensor_parameter", name="0.weight")
    detail = say("check.results.divergence", rank=0, tensor=tensor)
    first = say("check.run_mode.scenario.first_divergence", where="0·0", detail=detail)
    assert first in text
    claims = [say(f"check.run_mode.claim.{c}") for c in ("normalisation", "tail")]
    claims = i18n.join(lang, claims)
    assert claims in text
    for d in check["diagnoses"]:  # each scenario's tail_window_scaled, in the reader's words
        line = diagnoses.said(d)  # English: the report's own words, headed by the scenario
        if lang == "zh":
            line = say(
                "check.diagnosis.tail_window_scaled",
                scenario=say(f"check.scenario.{d['scenario']}"),
                scale=f"{d['scale']:.4g}",
                microsteps=d["microsteps"],
                message=d["message"],
            )
        assert f"- {line}" in text.split("\n")
    fix = say("check.run_mode.fix.tail_window_scaled")
    assert text.count(f"- {fix}") == 3  # the fix line, in each scenario's tab
    links = {(a.proto.page, a.proto.label) for a in at.get("page_link")}
    assert ("across-updates", say("check.fix.link", page=say("across.nav"))) in links


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_resumable_loop_shows_its_kill_points_as_a_timeline(lang, launches):
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    check = RECORDED["run_resume_forgets_scheduler"]
    at = open_section(PAGE, lang, chk_example="run_resume_forgets_scheduler")
    at.button(key="chk_loop_run").click().run()
    assert not at.exception, at.exception
    points = [say(f"check.run_mode.point.{e['point']}") for e in check["resume"]]
    parted = say("check.run_mode.results.resume_failed", points=i18n.join(lang, points))
    assert [e.value for e in at.error] == [parted]  # every scenario matched: only the resume
    _, timeline = charts(at, check)["timeline"]
    assert len(timeline) == 4 * 6  # a row of the run's six updates per kill point
    for entry, point in zip(check["resume"], points):
        row = timeline[timeline["point"] == point].reset_index(drop=True)
        first = entry["first_divergence"]
        assert (row["phase"].iloc[first:] == "parts").all()
        assert row["phase"].iloc[:first].isin(["before_kill", "same_run"]).all()
        assert "✕" in row["marks"].str.cat() and "↻" in row["marks"].str.cat()
    mid_window = timeline[timeline["point"] == points[1]].reset_index(drop=True)
    assert mid_window["marks"].iloc[1] == "✕ ↻"  # killed at microbatch 4, resumed from 3
    table = at.dataframe[-1].value
    assert list(table.columns[:3]) == ["point", "killed_at", "resumed_from"]
    config = json.loads(at.dataframe[-1].proto.columns)  # the headers, in the reader's words
    assert config["point"]["label"] == say("check.run_mode.resume.point")
    assert list(table.iloc[:, 0]) == points
    assert table.iloc[1, 1] == say("check.run_mode.resume.at", microbatch=4, where="0·1")
    text = "\n".join(m.value for m in at.markdown)
    (d,) = check["diagnoses"]
    line = d["message"]  # English: the report's own words
    if lang == "zh":  # the catalogue's, the kill points in words
        line = say("check.diagnosis.scheduler_reset", points=i18n.join(lang, points), message=line)
    assert f"- {line}" in text.split("\n")
    assert f"- {say('check.run_mode.fix.scheduler_reset')}" in text.split("\n")
    assert say("check.run_mode.claim.schedule") in text


def test_the_chinese_run_view_is_punctuated_as_chinese(launches):
    at = open_section(PAGE, "zh", chk_example="run_resume_forgets_scheduler")
    at.button(key="chk_loop_run").click().run()
    texts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    texts += [e.value for e in at.error]
    ascii_between = re.compile(rf"[{CJK}）](\*\*)? ?[,;:!?()](\*\*)? ?[{CJK}（]")
    touching = re.compile(rf"[A-Za-z0-9]\**[{CJK}]|[{CJK}]\**[A-Za-z0-9]")
    for text in texts:
        prose = re.sub(r"`[^`]*`|\$[^$]*\$", " ", text)
        assert not ascii_between.search(prose), text
        assert not touching.search(prose), text


@pytest.mark.parametrize(
    ("page", "example"),
    [("04_limits", "run_tail_never_steps"), ("experiment", "run_divide_by_k")],
)
def test_page_04_and_the_full_transformer_link_to_a_run_example(page, example):
    at = open_section(f"pclab/sections/{page}.py")
    assert not at.exception, at.exception
    key = "limits.window.to_check" if page == "04_limits" else "experiment.windows.to_check"
    (link,) = [a for a in at.get("page_link") if a.proto.label == i18n.text("en", key)]
    assert link.proto.page == "check-trainer"
    assert f"chk_example={example}" in link.proto.query_string


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_contrastive_loop_reads_by_the_pool_each_update_took(lang, launches):
    """A coupled loop over epochs (its recorded report: every full window a pool per
    microstep, each tail 1/K of its own): the contrastive intro and its scenarios, each
    update's pool in the strip, the items column, the tail's diagnosis, and the pool's fix."""
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    code = "run_coupled_naive_accumulation"
    check = RECORDED[code]
    assert check["mode"] == "coupled_run"
    at = open_section(PAGE, lang, chk_example=code)
    text = "\n".join(m.value for m in at.markdown)
    assert say("check.run_mode.intro_coupled") in text
    assert say("check.run_mode.intro") not in text
    assert any("def embedding_loss" in c.value for c in at.code)  # tiny_embedder.py, shared
    at.button(key="chk_loop_run").click().run()
    assert not at.exception, at.exception
    names = [say(f"check.scenario.{s['name']}") for s in check["scenarios"]]
    assert [tab.label for tab in at.tabs] == names
    found = charts(at, check)
    for s in check["scenarios"]:
        _, strip = found[f"strip_{s['name']}"]
        full = strip[[u["microsteps"] == 2 for u in s["updates"]]]
        assert set(full["text"]) == {say("coupled.scheme.microstep_pool")}
        assert list(strip["items"]) == [u["num_valid_labels"] for u in s["updates"]]
    text = "\n".join(m.value for m in at.markdown)
    filled = say(
        "check.run_mode.results.pool",
        pool=say("coupled.scheme.microstep_pool"),
        code="microstep_pool",
    )
    assert text.count(filled) == len(check["scenarios"])
    assert text.count(f"- {say('coupled.fix.microstep_pool')}") == len(check["scenarios"])
    assert text.count(f"- {say('check.run_mode.fix.tail_window_scaled')}") == 2
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["items"]["label"] == say("check.run_mode.column.items")


def test_a_resumable_contrastive_loop_is_the_same_run_at_every_kill_point(launches):
    check = RECORDED["run_resume_coupled_gradcache"]
    at = open_section(PAGE, "en", chk_example="run_resume_coupled_gradcache")
    at.button(key="chk_loop_run").click().run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [] and at.success
    _, timeline = charts(at, check)["timeline"]
    assert len(timeline) == 4 * 6 and "parts" not in set(timeline["phase"])
    claims = [i18n.text("en", f"check.run_mode.claim.{c}") for c in ("pool", "tail", "schedule")]
    assert i18n.join("en", claims) in "\n".join(m.value for m in at.markdown)
