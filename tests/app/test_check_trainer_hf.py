"""The Hugging Face Trainer on the "Check a trainer" page: the three HF files are offered beside
the other examples with the installed transformers version, and the two settings' measured
weight grids (the recorded real run, artifacts/hf_trainer_check.json) stand side by side, each
with its sentence on what to set. The page never imports transformers.

No process is started here (the run itself is tests/runners/test_hf_trainer.py).

    python -m pytest tests/app/test_check_trainer_hf.py -q
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from pclab.core import update_weights
from pclab.experiments.trainer_check import hf_recorded
from pclab.experiments.trainer_check.scenarios import scenario_counts
from pclab.ui import i18n
from pclab.ui import trainer_views as views
from tests.app.sections_helper import open_section
from tests.app.test_check_trainer_page import launches  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
PAGE = "pclab/sections/check_trainer.py"
RECORDED = hf_recorded.load()


def chart_frame(at, index: int):
    """The data of the page's `index`-th Altair chart: 0 the schemes' predictions, -1 the
    measured HF grids once an HF example is chosen."""
    chart = at.get("vega_lite_chart")[index]
    return pa.ipc.open_stream(chart.proto.datasets[0].data.data).read_all().to_pandas()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_two_settings_side_by_side_without_importing_transformers(lang):
    imported_before = "transformers" in sys.modules
    at = open_section(PAGE, lang, chk_example="hf_trainer")
    assert not at.exception, at.exception
    if not imported_before:
        assert "transformers" not in sys.modules  # only the ranks of a run import it
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    assert say("check.hf.heading") in [s.value for s in at.subheader]
    installed = hf_recorded.installed_version("transformers")
    version = RECORDED["versions"]["transformers"]
    caption = say("check.hf.caption", version=version, date=RECORDED["recorded"], now=installed)
    assert caption in [c.value for c in at.caption]
    frame = chart_frame(at, -1)
    groups = ["average_tokens_across_devices=True", "average_tokens_across_devices=False"]
    assert sorted(set(frame["group"])) == sorted(groups)
    for group, example in zip(groups, hf_recorded.SETTINGS, strict=True):
        uneven = RECORDED["checks"][example]["scenarios"][0]
        cells = frame[frame["group"] == group].sort_values(["rank", "microstep"])
        want = [w for row in uneven["weights"] for w in row]
        assert list(cells["weight"]) == pytest.approx(want)
    text = " ".join(m.value for m in at.markdown)
    keep = say("check.hf.advice.global_token", setting=f"`{groups[0]}`", weights="1")
    assert keep in text
    local = say(
        "check.hf.advice.replica_mean",
        setting=f"`{groups[1]}`",
        weights=i18n.join(lang, ["0.69", "1.81"]),  # 0.69、1.81 in Chinese
        empty=say("check.hf.empty.one", weights="0.5"),
    )
    assert local in text
    shift = say("check.hf.shift", placed=34, terms=29, ratio="0.853", weights="1")
    assert shift in text
    assert len(at.table) == 2  # each setting's verdicts, under its own sentence, cells wrapping


def test_each_hf_file_shows_its_code_the_version_and_its_counts():
    installed = hf_recorded.installed_version("transformers")
    at = open_section(PAGE, chk_world_size="2", chk_accum="2")
    for code in views.HF_EXAMPLES:
        at.selectbox(key="chk_example").set_value(code).run()
        assert not at.exception
        assert at.code[0].value == views.bundled_path(code).read_text().rstrip()
        file = f"examples/frameworks/hf_trainer/{code}.py"
        caption = i18n.text("en", "check.code.caption_hf", file=file, version=installed)
        assert caption in [c.value for c in at.caption]
        expanders = [e.label for e in at.expander]
        assert (i18n.text("en", "check.code.model_hf") in expanders) == (code != "hf_trainer")
        source = views.bundled_path(code).read_text()
        lines = source.count("\n") + 1
        fold = i18n.text("en", "check.code.fold", file=file, lines=lines)
        assert (fold in expanders) == (lines > views.FOLD_LINES)  # a long file folds
        shift = i18n.text("en", "check.predict.shift") in [c.value for c in at.caption]
        assert shift == (code != "hf_trainer_no_first_label")
        predicted = chart_frame(at, 0)
        assert predicted["labels"].max() == views.capacity(code)  # the full microbatch


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_recorded_verdicts_read_as_three_states_never_no_evidence_as_a_pass(lang):
    """Each setting's table shows the recording's `verdict`: the equal-counts control, which
    both settings match (so would DDP's mean of local means), reads "no evidence" on orange."""
    at = open_section(PAGE, lang, chk_example="hf_trainer")
    say = lambda key: i18n.text(lang, key)  # noqa: E731
    badge = {
        "same_update": f":green-badge[{say('check.verdict.same_update')}]",
        "different": f":red-badge[{say('check.verdict.different')}]",
        "no_evidence": f":orange-badge[{say('check.verdict.no_evidence')}]",
    }
    header = say("check.results.verdict")
    for table, example in zip(at.table, hf_recorded.SETTINGS, strict=True):
        cells = list(table.value[header])
        scenarios = RECORDED["checks"][example]["scenarios"]
        assert cells == [badge[s["verdict"]] for s in scenarios]
        control = [s["name"] for s in scenarios].index("equal_counts")
        assert cells[control] == badge["no_evidence"]  # matched, yet no pass
    local = list(at.table[1].value[header])
    assert local[:3] == [badge["different"]] * 3  # the local average: a different update


def test_another_installed_version_is_said_so(monkeypatch):
    real = hf_recorded.installed_version
    monkeypatch.setattr(
        hf_recorded, "installed_version", lambda p: "9.9.9" if p == "transformers" else real(p)
    )
    at = open_section(PAGE, chk_example="hf_trainer_local_average")
    version = RECORDED["versions"]["transformers"]
    assert [i.value for i in at.info if version in i.value] == [
        i18n.text("en", "check.hf.other_version", version=version)
    ]
    assert any("installed here: 9.9.9" in c.value for c in at.caption)
    monkeypatch.setattr(hf_recorded, "installed_version", lambda p: None)
    at = open_section(PAGE, chk_example="hf_trainer")
    assert any("installed here: not installed" in c.value for c in at.caption)


def test_other_examples_do_not_show_the_hf_section():
    at = open_section(PAGE, chk_example="correct_manual")
    assert i18n.text("en", "check.hf.heading") not in [s.value for s in at.subheader]


def test_the_recording_agrees_with_the_answer_key_and_the_pins():
    """The recorded run is a real check's JSON of each setting, its measured schemes are the
    page's answer key, and it was made with the transformers and accelerate requirements.txt
    pins."""
    pins = dict(
        line.split("==")
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert RECORDED["versions"]["transformers"] == pins["transformers"]
    assert RECORDED["versions"]["accelerate"] == pins["accelerate"]
    for example, average_tokens in hf_recorded.SETTINGS.items():
        check = RECORDED["checks"][example]
        assert check["trainer"] == f"examples/frameworks/hf_trainer/{example}.py"
        assert (check["world_size"], check["accum_steps"]) == (2, 2)
        uneven = check["scenarios"][0]
        assert uneven["name"] == "uneven" and uneven["scheme"] == views.EXAMPLES[example]
        expected = update_weights.scheme_weights_times_n(uneven["counts"], uneven["scheme"])
        assert uneven["weights"] == [pytest.approx(row, rel=1e-6) for row in expected]
        assert check["passed"] == average_tokens
    assert json.loads(json.dumps(RECORDED)) == RECORDED  # plain JSON, nothing else


def test_the_hf_files_are_configured_as_the_page_says():
    """Read without importing: the local-average file sets the one flag to False, the
    no-first-label file sets FIRST_POSITION_LABELLED = False (capacity 7 x 2)."""

    def constants(code: str) -> dict:
        tree = ast.parse(views.bundled_path(code).read_text())
        return {
            node.targets[0].id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        }

    default, local = constants("hf_trainer"), constants("hf_trainer_local_average")
    assert default["AVERAGE_TOKENS_ACROSS_DEVICES"] is True
    assert local["AVERAGE_TOKENS_ACROSS_DEVICES"] is False
    assert constants("hf_trainer_no_first_label")["FIRST_POSITION_LABELLED"] is False
    assert default["SEQ_LEN"] * default["BATCH_SIZE"] == views.CAPACITY
    assert (default["SEQ_LEN"] - 1) * default["BATCH_SIZE"] == views.capacity(
        "hf_trainer_no_first_label"
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("world_size", "accum"), [(4, 3), (2, 2), (1, 2)])
def test_the_empty_rank_sentence_names_every_other_rank(
    launches,  # noqa: F811
    lang,
    world_size,
    accum,
):
    """A live check of the local average (each rank's own mean; the stand-in's weights from
    core.update_weights): when the last rank holds no label, P - 1 ranks do. At P = 2 the
    sentence says "the other rank's weight"; at P = 4 "the other ranks' weights", each value
    with its rank; at P = 1 there is no empty-rank scenario, and the page does not break."""
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    at = open_section(
        PAGE,
        lang,
        chk_example="hf_trainer_local_average",
        chk_world_size=str(world_size),
        chk_accum=str(accum),
    )
    at.button(key="chk_run").click().run()
    assert not at.exception, at.exception
    grids, _ = scenario_counts(world_size, accum, views.CAPACITY)
    text = "\n".join(m.value for m in at.markdown)
    if world_size == 1:  # no empty rank to name: the page still says what to set, unbroken
        assert "empty_rank" not in grids and say("check.results.what_to_change") not in text
        return
    weights = update_weights.scheme_weights_times_n(grids["empty_rank"], "replica_mean")
    per_rank = [f"{row[0]:.3g}" for row in weights[:-1]]  # a rank's weight: N / (P n_r)
    assert weights[-1] == (None,) * accum  # the empty rank: no weight at all
    if world_size == 2:
        empty = say("check.hf.empty.one", weights=per_rank[0])
    else:
        named = [say("check.hf.empty.rank", rank=r, weights=w) for r, w in enumerate(per_rank)]
        empty = say("check.hf.empty.many", weights=i18n.join(lang, named, "clauses"))
    assert f"{empty}{'. ' if lang == 'en' else '。'}" in text
    singular = say("check.hf.empty.one", weights="")  # the recorded P = 2 run's says it once
    assert text.count(singular) == 1 + (world_size == 2)
