"""The "Check a trainer" page: renders in both languages, shows the chosen example's own code,
grades the exercise, hands the run only a bundled example's path with the page's P and K, and
draws a real report: verdicts, skipped scenarios, notes, and the weights as a heat map whose
undefined cells are never drawn as 0.

No process is started here. The registry's "trainer_check" is replaced by a stand-in (validated
by the real Params, hashed as the real worker) whose report is `build_report` over either the
rank outputs recorded once from a real run (fixtures/trainer_check_microbatch_means_p2k2.json,
see its "about") or hand-made rank outputs of the same shape. The real launch is tested in
tests/runners/.

    python -m pytest tests/app/test_check_trainer_page.py -q
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pyarrow as pa
import pytest

from pclab.core import update_weights
from pclab.experiments.trainer_check import EXPERIMENT, diagnoses, examples, frameworks
from pclab.experiments.trainer_check.report import build_report
from pclab.experiments.trainer_check.scenarios import scenario_counts
from pclab.runners.results import RunResult
from pclab.ui import i18n, trainer_examples
from pclab.ui import trainer_views as views
from pclab.ui.trainer_verdict import TEACHES
from tests.app.sections_helper import open_section

ROOT = Path(__file__).resolve().parents[2]
PAGE = "pclab/sections/check_trainer.py"
FIXTURE = Path(__file__).parent / "fixtures" / "trainer_check_microbatch_means_p2k2.json"
RECORDED = tuple(json.loads(FIXTURE.read_text())["ranks"])


def hand_made_ranks(world_size: int, accum: int, example: str) -> tuple[dict, ...]:
    """Rank outputs of the worker's shape for an example that applies its known scheme
    exactly (weights from pclab.core.update_weights); only rank 0 carries the solved weights."""
    scheme = views.EXAMPLES[example]
    grids, skipped = scenario_counts(world_size, accum, views.CAPACITY)
    ranks = []
    for rank in range(world_size):
        scenarios = []
        for name, counts in grids.items():
            n = sum(map(sum, counts))
            weights = update_weights.scheme_weights_times_n(counts, scheme)
            ok = all(w is None or math.isclose(w, 1.0) for row in weights for w in row)
            skips = n > 0 or example != "adamw_steps_at_zero"
            ok = ok and skips
            where = {"tensor": "parameter 0.weight", "abs_diff": 1e-3, "why": "differs"}
            scenario = {
                "name": name,
                "label_positions": [list(row) for row in counts],
                "max_abs_diff": 0.0 if ok else 1e-3,
                "first_divergence": None if ok else where,
                "unchanged": n == 0 and skips,
                "reference_changed": n > 0,
                "spread": 0.0,
            }
            if rank == 0:
                scenario |= {
                    "counts": [list(row) for row in counts],
                    "weights": [list(row) for row in weights],
                    "residual": 1e-15 if n else None,
                    "identifiable": True,
                }
            scenarios.append(scenario)
        trainer = str(views.bundled_path(example))
        check = {"trainer": trainer, "scenarios": scenarios, "skipped": skipped}
        ranks.append(
            {"rank": rank, "world_size": world_size, "accum_steps": accum, "tolerance": 1e-10}
            | {"backend": "gloo", "checks": [check]}
        )
    return tuple(ranks)


class Launches(list):
    """What each run was given: (trainer paths, world_size, accum_steps)."""

    # (world_size, accum, example) -> rank outputs, or one check's recorded report
    make_ranks = staticmethod(hand_made_ranks)

    def use(self, make_ranks) -> None:
        self.make_ranks = make_ranks


@pytest.fixture
def launches(monkeypatch):
    """Replace the trainer check in the registry with a stand-in; yields its Launches."""
    from pclab.experiments import registry
    from pclab.ui import runs

    calls = Launches()

    class FakeTrainerCheck:
        name, worker, params = EXPERIMENT.name, EXPERIMENT.worker, EXPERIMENT.params

        def run(self, params, progress=None, **_):
            calls.append((params.trainers, params.world_size, params.accum_steps))
            example = Path(params.trainers[0]).stem
            made = calls.make_ranks(params.world_size, params.accum_steps, example)
            if isinstance(made, dict):  # a recorded report (`pclab check --json`'s check)
                return RunResult.finished((), 0.5, "x").with_report({"checks": [made]})
            return RunResult.finished(made, 0.5, "x").with_report(build_report(made))

    real_get = registry.get
    fake = FakeTrainerCheck()
    monkeypatch.setattr(registry, "get", lambda n: fake if n == "trainer_check" else real_get(n))
    runs.clear()
    yield calls
    runs.clear()


def chart_frames(at) -> list[tuple[dict, object]]:
    """Each Altair chart's spec and data, in page order."""
    out = []
    for chart in at.get("vega_lite_chart"):
        data = chart.proto.datasets[0].data.data
        out.append((json.loads(chart.proto.spec), pa.ipc.open_stream(data).read_all().to_pandas()))
    return out


COLUMNS = ("scenario", "verdict", "max_abs_diff", "scheme", "residual")
COLUMNS += ("first_divergence", "notes")


BADGES = {"same_update": "green", "different": "red", "no_evidence": "orange"}


def verdicts(at, lang: str = "en"):
    """The verdict table (a static st.table, whose cells wrap) with the columns' codes; each
    verdict cell read back as its code from its words and colour (a Markdown badge)."""
    table = at.table[0].value
    headers = {i18n.text(lang, f"check.results.{c}"): c for c in COLUMNS}
    assert list(table.columns) == list(headers)
    table = table.rename(columns=headers).reset_index(drop=True)
    # The figures are kept whole on the page by the table's style, not by joiners in their
    # text: a figure copied from the table pastes as a number.
    styles = at.table[0].proto.arrow_data.styler.styles
    assert styles.endswith("{ white-space: nowrap }"), styles[-200:]
    whole = {COLUMNS[int(i)] for i in re.findall(r"_col(\d+)", styles)}
    assert whole == {"max_abs_diff", "residual"}
    for column in COLUMNS:
        assert not table[column].str.contains("[\u2060\u2011]").any(), column
    for cell in table["max_abs_diff"]:
        if cell != i18n.text(lang, "common.undefined") and not cell.startswith("≥"):
            float(cell)  # e.g. "6.01e-03", as copied
    cells = {
        f":{colour}-badge[{i18n.text(lang, f'check.verdict.{code}')}]": code
        for code, colour in BADGES.items()
    }
    assert set(table["verdict"]) <= set(cells), list(table["verdict"])
    table["verdict"] = table["verdict"].map(cells)
    return table


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_renders_in_both_languages_without_starting_anything(lang, launches):
    at = open_section(PAGE, lang)
    assert at.title[0].value == i18n.text(lang, "check.title")
    box = at.selectbox(key="chk_example")
    token = [i18n.text(lang, f"check.example.{c}") for c in views.EXAMPLES]
    coupled = [i18n.text(lang, f"coupled.example.{c}") for c in trainer_examples.COUPLED_EXAMPLES]
    loops = [i18n.text(lang, f"check.run_mode.example.{c}") for c in trainer_examples.RUN_EXAMPLES]
    assert box.options == token + coupled + loops  # coupled after the token ones, then the runs
    assert at.code[0].value == views.bundled_path("correct_manual").read_text().rstrip()
    assert len(at.get("vega_lite_chart")) == 1  # each scheme's prediction, before any run
    assert at.button(key="chk_run") is not None and not at.table
    own = " ".join(m.value for m in at.markdown)
    assert "VOCAB_SIZE" in own and "`2`" in own  # the contract and the exit codes
    commands = [c.value for c in at.code]
    assert views.CLI_COMMAND in commands and views.PYTEST_SNIPPET.rstrip() in commands
    assert any("--nproc-per-node 4" in c and "report.json" in c for c in commands)
    assert any(i.value == i18n.text(lang, "check.own.safety") for i in at.info)
    assert launches == []


def test_each_example_shows_its_own_code_and_its_predictions_follow_p_and_k():
    at = open_section(PAGE, chk_world_size="4", chk_accum="3")
    for code in views.EXAMPLES:
        at.selectbox(key="chk_example").set_value(code).run()
        assert not at.exception
        assert at.code[0].value == views.bundled_path(code).read_text().rstrip()
        assert at.query_params.get("chk_example", "correct_manual") == code
    _, frame = chart_frames(at)[0]
    assert len(frame) == 5 * 4 * 3  # five schemes x P x K
    assert set(frame["rank"]) == {0, 1, 2, 3} and set(frame["microstep"]) == {0, 1, 2}
    correct = frame[frame["group"] == "global token mean"]
    assert set(correct["weight"]) == {1.0} and set(correct["text"]) == {"1"}


@pytest.mark.parametrize(
    ("example", "world_size", "accum"),
    [
        ("unnormalised_sum", 4, 3),
        ("correct_manual", 1, 1),
        ("adamw_steps_at_zero", 2, 2),
        ("hf_trainer_local_average", 2, 2),
    ],
)
def test_run_button_passes_the_bundled_path_and_p_and_k(launches, example, world_size, accum):
    at = open_section(
        PAGE, chk_example=example, chk_world_size=str(world_size), chk_accum=str(accum)
    )
    at.button(key="chk_run").click().run()
    assert not at.exception, at.exception
    path = str(examples.path_of(example).resolve())
    assert launches == [((path,), world_size, accum)]
    table = verdicts(at)
    names, skipped = scenario_counts(world_size, accum, views.CAPACITY)
    assert list(table["scenario"]) == [i18n.text("en", f"check.scenario.{n}") for n in names]
    captions = [c.value for c in at.caption if "was skipped" in c.value]
    assert len(captions) == len(skipped)
    if world_size == 1 and accum == 1:
        assert any("at least 2 microsteps" in c for c in captions)
        assert any("at least 2 ranks" in c for c in captions)
    if example == "adamw_steps_at_zero":  # right weights, wrong at N = 0
        assert list(table["verdict"]) == ["same_update"] * 3 + ["no_evidence", "different"]
        assert "the update must change nothing" in table["notes"].iloc[-1]
    if (world_size, accum) == (1, 1):  # nothing split: no scenario is evidence, never a pass
        assert set(table["verdict"]) <= {"no_evidence", "same_update"}
        assert not at.success and not at.error
        assert [w.value for w in at.warning] == [i18n.text("en", "check.results.no_evidence")]
        unsplit = diagnoses.no_evidence_run(1, 1)["message"]  # in English, the report's words
        assert any(f"- {unsplit}" in m.value.split("\n") for m in at.markdown)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_recorded_real_run_reads_as_verdicts_notes_and_a_heat_map(launches, lang):
    launches.use(lambda *_: RECORDED)
    at = open_section(PAGE, lang, chk_example="microbatch_means")
    at.button(key="chk_run").click().run()
    assert not at.exception, at.exception
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    table = verdicts(at, lang)
    # equal counts matched the reference, but so would microbatch means: no evidence
    assert list(table["verdict"]) == ["different"] * 3 + ["no_evidence", "same_update"]
    assert table["scheme"].iloc[0] == say("schemes.microbatch_mean")
    assert table["scheme"].iloc[-1] == say("check.results.scheme_undefined")
    tensor = say("check.results.tensor_parameter", name="0.weight")  # in the reader's words
    first = say("check.results.divergence", rank=0, tensor=tensor)
    assert table["first_divergence"].iloc[0] == first
    assert table["first_divergence"].iloc[3] == say("check.results.none")
    assert say("check.note.control") in table["notes"].iloc[3]  # no evidence: the note holds
    # the control fits every scheme: its row names the trainer's (measured without a tie
    # elsewhere), never "global token mean" beside a wrong trainer; the rest are its ties
    ties = [say(f"schemes.{x}") for x in ("global_token", "replica_mean")]
    tie_note = say("check.note.ties", schemes=i18n.join(lang, ties))
    assert table["notes"].iloc[3].startswith(tie_note)  # ties read in the notes, in full
    assert table["scheme"].iloc[3] == say("schemes.microbatch_mean")
    assert table["max_abs_diff"].iloc[0] == "3.89e-03"
    scenarios = i18n.join(
        lang, [say(f"check.scenario.{n}") for n in ("uneven", "empty_microbatch", "empty_rank")]
    )
    assert [e.value for e in at.error] == [say("check.results.failed", scenarios=scenarios)]
    fix = say("check.fix.microbatch_mean", scenarios=scenarios)
    assert fix in [m.value for m in at.markdown]
    link = say("check.fix.link", page=say("denominator.nav"))  # the page that teaches it
    assert [(a.proto.page, a.proto.label) for a in at.get("page_link")] == [("denominator", link)]
    assert len(at.get("vega_lite_chart")) == 2  # the schemes' predictions, then the measured
    assert say("downloads.run_record") in [b.label for b in at.get("download_button")]


def test_the_heat_map_shows_undefined_cells_as_undefined_never_as_zero(launches):
    launches.use(lambda *_: RECORDED)
    at = open_section(PAGE, chk_example="microbatch_means")
    at.button(key="chk_run").click().run()
    spec, frame = chart_frames(at)[-1]
    rect, empty, text, words = spec["spec"]["layer"]
    assert rect["transform"] == [{"filter": "datum.defined"}]  # only defined cells get a colour
    scale = rect["encoding"]["color"]["scale"]
    assert scale["domainMid"] == 1 and scale["type"] == "log"  # diverging around 1
    low, high = scale["domain"]  # a 0.8 / 1.25 cell at least half way to full colour
    assert math.log(0.8) / math.log(low) >= 0.5 and math.log(1.25) / math.log(high) >= 0.5
    # Undefined: no fill of its own (the theme's background), a dashed outline, its word in a
    # grey (black on a dark page would vanish).
    assert empty["transform"] == [{"filter": "!datum.defined"}] and "strokeDash" in empty["mark"]
    assert empty["mark"]["fill"] is None
    assert text["encoding"]["text"]["field"] == "text" == words["encoding"]["text"]["field"]
    assert words["transform"] == [{"filter": "!datum.defined"}]
    assert words["mark"]["color"] == empty["mark"]["stroke"] == views.UNDEFINED_INK
    undefined = frame[~frame["defined"]]
    assert set(undefined["text"]) == {"undefined"} and undefined["weight"].isna().all()
    cell = lambda group, r, k: frame[  # noqa: E731
        (frame["group"] == group) & (frame["rank"] == r) & (frame["microstep"] == k)
    ].iloc[0]
    assert not cell("an empty microbatch", 0, 1)["defined"]  # its microbatch had no labels
    assert cell("an empty microbatch", 0, 0)["text"] == "0.578"
    assert (~frame[frame["group"] == "no labels (N = 0)"]["defined"]).all()
    assert cell("uneven counts", 1, 1)["weight"] == pytest.approx(1.875)  # N / (P K n_rk)
    assert not (frame["defined"] & (frame["weight"] == 0)).any()


def test_the_exercise_grades_and_workshop_mode_holds_the_run_until_the_reveal(launches):
    at = open_section(PAGE, workshop=True, chk_example="ddp_mean_of_local_means")
    assert not at.get("button") or "chk_run" not in [b.key for b in at.button]
    at.radio(key="chk_ex_guess").set_value("microbatch_mean").run()
    at.button(key="chk_ex_reveal").click().run()
    answer = i18n.text("en", "schemes.replica_mean")
    assert any(answer in w.value for w in at.warning)
    assert "chk_run" in [b.key for b in at.button]  # revealed: the run may start
    at.selectbox(key="chk_example").set_value("unnormalised_sum").run()
    assert "chk_run" not in [b.key for b in at.button]  # a new example hides it again
    at.radio(key="chk_ex_guess").set_value("unnormalised_sum").run()
    at.button(key="chk_ex_reveal").click().run()
    assert any(i18n.text("en", "schemes.unnormalised_sum") in s.value for s in at.success)
    assert launches == []


def test_a_tampered_url_falls_back_to_a_bundled_example(launches):
    at = open_section(
        PAGE, chk_example="../../../tmp/evil", chk_world_size="99", chk_accum="<script>"
    )
    assert at.selectbox(key="chk_example").value == "correct_manual"
    at.button(key="chk_run").click().run()
    assert not at.exception
    assert launches == [((str(views.bundled_path("correct_manual")),), 2, 2)]


def test_a_value_outside_the_list_never_reaches_the_run(launches, monkeypatch):
    """Even if the example widget handed back something else, no path is built from it."""
    from pclab.ui import deeplink

    real_choice = deeplink.choice

    def tampered(widget, label, options, *, key, **kwargs):
        value = real_choice(widget, label, options, key=key, **kwargs)
        return "/tmp/evil.py" if key == "chk_example" else value

    monkeypatch.setattr(deeplink, "choice", tampered)
    at = open_section(PAGE)
    assert at.error and "chk_run" not in [b.key for b in at.button]
    assert launches == []


def test_bundled_path_builds_only_example_files():
    """Every file under examples/ is in the index once (pclab.experiments.trainer_check
    .examples: the page's examples, the framework table's adapters, their modules); the page
    lists the index's trainers and builds a path only from one of their codes or an
    adapter's."""
    on_disk = sorted(p.resolve() for p in (ROOT / "examples").rglob("*.py"))
    assert sorted(p.resolve() for p in examples.files().values()) == on_disk
    assert len({p.stem for p in on_disk}) == len(on_disk)  # a code names one file
    assert list(views.EXAMPLES) == [e.code for e in examples.TOKEN]
    assert list(trainer_examples.COUPLED_EXAMPLES) == [e.code for e in examples.COUPLED]
    assert list(trainer_examples.RUN_EXAMPLES) == [e.code for e in examples.RUN]
    pages = (*views.EXAMPLES, *trainer_examples.COUPLED_EXAMPLES, *trainer_examples.RUN_EXAMPLES)
    for code in [*pages, *frameworks.ADAPTERS]:
        path = views.bundled_path(code)
        assert path.is_absolute() and path.is_relative_to(ROOT / "examples")
        assert path == examples.path_of(code) and path.suffix == ".py" and path.is_file()
    assert {views.bundled_path(c).parent.name for c in views.HF_EXAMPLES} == {"hf_trainer"}
    for bad in ("tiny_lm", "../app", "/etc/passwd", "correct_manual.py", ""):
        with pytest.raises(ValueError, match="not a bundled example"):
            views.bundled_path(bad)


def test_the_page_takes_no_typed_text_or_upload():
    """The page's only inputs are a fixed list, P and K: nothing a visitor types is code."""
    text_widgets = {"file_uploader", "text_input", "text_area", "chat_input", "data_editor"}
    for path in (ROOT / PAGE, ROOT / "pclab" / "ui" / "trainer_views.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr not in text_widgets, f"{path.name}: {node.func.attr}"
                for kw in node.keywords:
                    if kw.arg == "accept_new_options":
                        assert isinstance(kw.value, ast.Constant) and kw.value.value is False


def test_the_answer_key_and_the_capacity_match_the_bundled_files():
    model = ast.parse(views.MODEL_FILE.read_text())
    sizes = {
        node.targets[0].id: node.value.value
        for node in model.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
    }
    assert sizes["SEQ_LEN"] * sizes["BATCH_SIZE"] == views.CAPACITY
    recorded = build_report(RECORDED)["checks"][0]["scenarios"][0]  # a real run's "uneven"
    assert recorded["scheme"] == views.EXAMPLES["microbatch_means"]
    assert set(views.EXAMPLES.values()) == set(update_weights.NAMED_SCHEMES)


TEACHING_PAGE = {  # example -> the page its failed verdict links to (None: it passes)
    "correct_manual": None,
    "ddp_mean_of_local_means": "ledger",
    "microbatch_means": "denominator",
    "double_divide_by_k": "framework",
    "unnormalised_sum": "framework",
    "adamw_steps_at_zero": "coordinated-step",
}


@pytest.mark.parametrize(("example", "page"), TEACHING_PAGE.items())
def test_a_failed_verdict_says_what_to_change_and_links_the_page_that_teaches_it(
    launches, example, page
):
    at = open_section(PAGE, chk_example=example)
    at.button(key="chk_run").click().run()
    assert not at.exception, at.exception
    links = [(a.proto.page, a.proto.label) for a in at.get("page_link")]
    if page is None:  # the same update wherever the counts can tell: a success, no fix
        assert at.success and not at.error and links == []
        control = i18n.text("en", "check.scenario.equal_counts")  # no evidence, said so
        untold = i18n.text("en", "check.results.untold", scenarios=control)
        assert untold in [i.value for i in at.info]
        assert verdicts(at)["verdict"].tolist()[3] == "no_evidence"
        return
    assert len(at.error) == 1 and not at.warning  # a failure is an error, not a warning
    assert [p for p, _ in links] == [page]
    assert links[0][1].startswith(i18n.text("en", "check.fix.link", page="")[:10])
    heads = [i18n.text("en", f"check.fix.{c}", scenarios="").split(" (")[0] for c in TEACHES]
    fixes = [m.value for m in at.markdown if m.value.startswith(tuple(heads))]
    assert len(fixes) == 1  # one line per measured cause: these examples have one each
    table = verdicts(at)
    control = table[table["scenario"] == i18n.text("en", "check.scenario.equal_counts")]
    note = i18n.text("en", "check.note.control")
    untold = control["verdict"].iloc[0] == "no_evidence"
    assert (note in control["notes"].iloc[0]) == untold  # said only when it is true


def test_a_comparison_stopped_by_new_optimizer_state_reads_as_a_bound_and_a_note(launches):
    """AdamW stepping at N = 0 creates state the reference lacks: the worker's max |delta| is
    then None; the table shows the gap seen before it as a lower bound, and says why."""

    def ranks(world_size, accum, example):
        out = hand_made_ranks(world_size, accum, example)
        for rank in out:
            zero = rank["checks"][0]["scenarios"][-1]
            zero["max_abs_diff"] = None
            zero["first_divergence"] = {
                "tensor": "parameter 0.weight",
                "abs_diff": 3.15e-3,
                "why": "differs",
            }
        return out

    launches.use(ranks)
    at = open_section(PAGE, chk_example="adamw_steps_at_zero")
    at.button(key="chk_run").click().run()
    row = verdicts(at).iloc[-1]
    assert row["max_abs_diff"] == "≥ 3.15e-03"
    assert i18n.text("en", "check.note.state_apart") in row["notes"]
    assert "exp_avg" in i18n.text("en", "check.note.state_apart")  # it says what appeared


def test_the_chinese_page_is_punctuated_as_chinese(launches):
    """Everything code assembles on the Chinese page (lists, clauses, notes, table cells)
    joins Chinese with Chinese punctuation, and Latin words stand apart from Chinese."""
    import re

    launches.use(lambda *_: RECORDED)
    at = open_section(PAGE, "zh", chk_example="microbatch_means")
    at.button(key="chk_run").click().run()
    texts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    texts += [e.value for e in at.error] + list(verdicts(at, "zh").to_numpy().ravel())
    cjk = "\u4e00-\u9fff"
    ascii_between = re.compile(rf"[{cjk}）](\*\*)? ?[,;:!?()](\*\*)? ?[{cjk}（]")
    touching = re.compile(rf"[A-Za-z0-9]\**[{cjk}]|[{cjk}]\**[A-Za-z0-9]")
    for text in texts:
        prose = re.sub(r"`[^`]*`|\$[^$]*\$", " ", text)
        assert not ascii_between.search(prose), text
        assert not touching.search(prose), text


def with_extra_state(world_size, accum, example):
    """AdamW stepping at N = 0, as its ranks report it: state the reference has none of."""
    out = hand_made_ranks(world_size, accum, example)
    for rank in out:
        rank["checks"][0]["scenarios"][-1]["extra_state"] = {
            "keys": ["step", "exp_avg", "exp_avg_sq"],
            "parameters": 4,
        }
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_failed_verdict_is_explained_by_its_diagnosis_in_the_readers_language(launches, lang):
    """A double ÷K at K = 2: every weight x N is 0.5; the report's uniform_scale diagnoses
    read in the reader's language with their numbers, under the failed verdict, before the
    fix: in English the report's own message headed by the scenario's name, in Chinese the
    catalogue's words and not the English message."""
    at = open_section(PAGE, lang, chk_example="double_divide_by_k")
    at.button(key="chk_run").click().run()
    assert not at.exception, at.exception
    report = build_report(hand_made_ranks(2, 2, "double_divide_by_k"))["checks"][0]
    english = [d["message"] for d in report["diagnoses"]]
    # an empty rank at K = 2 ties with DDP's mean of local means: its name says it, no scale
    scaled = ("uneven", "empty_microbatch", "equal_counts")
    assert [(d["code"], d["scenario"]) for d in report["diagnoses"]] == [
        ("uniform_scale", name) for name in scaled
    ]
    texts = [m.value for m in at.markdown]
    why = texts.index(i18n.text(lang, "check.results.why"))
    listed = texts[why + 1]
    for name, message in zip(scaled, english):
        scenario = i18n.text(lang, f"check.scenario.{name}")
        line = i18n.join(lang, [scenario, message], "head")  # English: the report's words
        if lang == "zh":
            line = i18n.text(
                lang,
                "check.diagnosis.uniform_scale.second_k",
                scenario=scenario,
                scale="0.5",
                residual="1.0e-15",
                accum=2,
            )
        assert f"- {line}" in listed.split("\n")
    assert ("1/K" in listed) and ("K = 2" in listed)
    if lang == "zh":
        assert not any(message in text for message in english for text in texts)
    fix = i18n.text(lang, "check.fix.double_scaled", scenarios="").split("**")[1]
    assert why < next(i for i, text in enumerate(texts) if fix in text)  # the why, then the fix


def test_adamw_at_zero_names_the_new_state_in_chinese(launches):
    launches.use(with_extra_state)
    at = open_section(PAGE, "zh", chk_example="adamw_steps_at_zero")
    at.button(key="chk_run").click().run()
    assert not at.exception, at.exception
    line = i18n.text(
        "zh",
        "check.diagnosis.extra_optimizer_state.at_zero",
        scenario=i18n.text("zh", "check.scenario.no_labels"),
        keys="`step`、`exp_avg`、`exp_avg_sq`",
        parameters=4,
    )
    assert any(f"- {line}" in m.value.split("\n") for m in at.markdown)
    assert len(at.error) == 1 and not at.success


def test_an_unusable_file_shows_its_diagnoses_and_an_unknown_code_its_own_words(launches):
    """A file the check cannot use: an error banner, no table; a known code (signature)
    through the catalogue, a code this page does not know as the report's English message."""
    expected = "train_step(model, optimizer, microbatches)"

    def unusable(world_size, accum, example):
        out = hand_made_ranks(world_size, accum, example)
        for rank in out:
            rank["checks"][0]["scenarios"] = []
            rank["checks"][0]["diagnoses"] = [
                {"code": "signature", "message": f"expected {expected}", "scenario": None},
                {
                    "code": "a_future_code",
                    "message": "Something new, said in English.",
                    "scenario": None,
                },
            ]
        return out

    launches.use(unusable)
    at = open_section(PAGE, "zh", chk_example="correct_manual")
    at.button(key="chk_run").click().run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [i18n.text("zh", "check.results.unusable")]
    assert not at.success and not at.table
    signature = i18n.text("zh", "check.diagnosis.signature", message=f"expected {expected}")
    listed = [m.value for m in at.markdown if m.value.startswith("- ")]
    assert listed == [f"- {signature}\n- Something new, said in English."]


V2_ATTRIBUTE = {  # the v2 example -> the optional contract name it shows (README's table)
    "clip_global_norm": "MAX_GRAD_NORM",
    "correct_float32": "DTYPE",
    "own_microbatches": "make_microbatch",
}


@pytest.mark.parametrize(("example", "attribute"), V2_ATTRIBUTE.items())
def test_each_v2_example_is_listed_with_its_attribute_and_its_answer(example, attribute):
    path = ROOT / "examples" / "trainers" / f"{example}.py"
    assert views.bundled_path(example) == path and path.is_file()
    assert not (ROOT / "tests" / "trainers" / f"{example}.py").exists()  # moved, not copied
    defined = {
        target.id if isinstance(node, ast.Assign) else node.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, (ast.Assign, ast.FunctionDef))
        for target in (node.targets if isinstance(node, ast.Assign) else [node])
        if isinstance(target, (ast.Name, ast.FunctionDef))
    }
    assert attribute in defined
    assert views.EXAMPLES[example] == "global_token"  # each is correct: the exercise's answer
    at = open_section(PAGE, chk_example=example)
    assert not at.exception, at.exception
    assert i18n.text("en", f"check.example.{example}") in at.selectbox(key="chk_example").options
    assert at.code[0].value == path.read_text().rstrip()
    file = f"examples/trainers/{example}.py"  # a v2 example is in the contract by example
    caption = i18n.text("en", f"check.code.caption_v2.{example}", file=file, attribute=attribute)
    assert caption in [c.value for c in at.caption]
    shared_model = i18n.text("en", "check.code.model") in [e.label for e in at.expander]
    assert shared_model == (example != "own_microbatches")  # its model is in the file itself
    at.radio(key="chk_ex_guess").set_value("global_token").run()
    at.button(key="chk_ex_reveal").click().run()
    assert at.success and not at.warning  # graded right: the global token mean
