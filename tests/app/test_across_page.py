"""Page 10 · Across updates under AppTest: it renders in both languages with core's figures,
its two exercises are graded and each gates only its own block, bad table cells get a
translated message naming their column and rank (never a traceback), a link reopens the
scenario, and a run hands the check only a bundled run-mode example with P = K = 2 and draws
its report: the verdict, the diagnoses in the reader's language, an update with no gap as
what it is, never as 0, and a resumable loop's restart at the kill point the reader picks.

No process is started here. The registry's "trainer_check" is replaced by a stand-in
(validated by the real Params) that answers with the run-mode reports recorded once from real
runs of the page's six loops (fixtures/across_run_checks.json, see its "about"). The real
launch is tested in tests/trainer_check/test_run_mode.py and test_resume.py, which also hold
each live report against its record here (page_records.py), and by the browser test.

    python -m pytest -n 0 tests/app/test_across_page.py -q
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from pclab.core import schedules, windows
from pclab.experiments.trainer_check import EXPERIMENT
from pclab.runners.results import RunResult
from pclab.ui import across_inputs, across_run, i18n
from pclab.ui import trainer_run_figures as run_figures
from tests.app.sections_helper import open_section

PAGE = "pclab/sections/10_across_updates.py"
FIXTURE = Path(__file__).parent / "fixtures" / "across_run_checks.json"
RECORDED = json.loads(FIXTURE.read_text())["checks"]  # loop code -> its check
PRESET = ((4, 15, 10, 5, 16), (9, 6, 3, 16, 13))  # the run's uneven scenario, first epoch


def say(lang: str, key: str, **values) -> str:
    return i18n.text(lang, key, **values)


def chart_data(at) -> list[list]:
    """Every Altair chart's datasets (as pandas frames), in page order."""
    charts = []
    for chart in at.get("vega_lite_chart"):
        frames = [
            pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in chart.proto.datasets
        ]
        charts.append(frames)
    return charts


def metric(at, key: str, lang: str = "en") -> str:
    return next(m.value for m in at.metric if m.label == say(lang, key))


@pytest.fixture
def launches(monkeypatch):
    """The trainer check replaced by a stand-in that answers with the recorded reports."""
    from pclab.experiments import registry
    from pclab.ui import runs

    calls: list[tuple] = []
    by_stem = {stem: code for code, stem in across_run.LOOPS.items()}

    class RecordedTrainerCheck:
        name, worker, params = EXPERIMENT.name, EXPERIMENT.worker, EXPERIMENT.params

        def run(self, params, progress=None, **_):
            calls.append((params.trainers, params.world_size, params.accum_steps))
            check = RECORDED[by_stem[Path(params.trainers[0]).stem]]
            return RunResult.finished((), 0.5, "x").with_report({"checks": [check]})

    real_get = registry.get
    fake = RecordedTrainerCheck()
    monkeypatch.setattr(registry, "get", lambda n: fake if n == "trainer_check" else real_get(n))
    runs.clear()
    yield calls
    runs.clear()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_renders_core_figures_in_both_languages(lang, launches):
    at = open_section(PAGE, lang)
    assert at.title[0].value == say(lang, "across.title")
    assert not at.error
    # the ÷K tail: k'/K = 1/2 of the correct update, from core.windows on the preset table
    assert windows.epoch_updates(PRESET, 2, "accum_steps")[-1].ratio == 0.5
    assert metric(at, "across.tail.metric", lang) == "0.5"
    table = at.table[0].value  # the windows' weight sums, one column per loop
    tail = table.iloc[-1]
    assert tail[say(lang, "across.loops.accum_steps")] == "0.5"
    assert tail[say(lang, "across.loops.global_tokens")] == "1"
    assert tail[say(lang, "across.weights.col_labels")] == 29
    ends = at.table[1].value  # where each schedule ends
    assert list(ends[say(lang, "across.schedule.col_schedule")]) == [
        say(lang, f"across.schedule.names.{m}") for m in schedules.MISTAKES
    ]
    assert launches == []  # rendering starts nothing
    assert len(at.get("vega_lite_chart")) == 3  # the windows, the weight sums, the schedule


def test_the_figures_follow_the_table_and_k():
    at = open_section(PAGE, acr_accum="5")  # K = M: one full window, no tail
    assert any(i.value == say("en", "across.tail.none", accum=5) for i in at.info)
    at = open_section(PAGE, acr_accum="3")  # windows of 3 and a tail of 2: 2/3
    assert metric(at, "across.tail.metric") == "0.666667"
    at.session_state[across_inputs.TABLE_KEY] = {
        "edited_rows": {0: {"m4": 0}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert not at.exception
    table = at.table[0].value
    # rank 0's tail microbatch emptied: its mean is over no terms, so ÷K and ÷k' are undefined
    assert table.iloc[-1][say("en", "across.loops.accum_steps")] == say("en", "common.undefined")
    assert table.iloc[-1][say("en", "across.loops.global_tokens")] == "1"


def test_the_tail_exercise_is_graded_and_gates_only_its_block():
    at = open_section(PAGE, workshop=True)
    assert not at.metric and not at.table  # both blocks wait for their reveal
    assert at.button(key="acr_run")  # the run section does not wait
    at.number_input(key="acr_tail_ex_guess").set_value(0.5).run()
    at.button(key="acr_tail_ex_reveal").click().run()
    assert any(say("en", "exercise.right", answer="0.5") == s.value for s in at.success)
    assert metric(at, "across.tail.metric") == "0.5"
    assert len(at.table) == 1  # the schedule's table still waits


@pytest.mark.parametrize(("world_size", "answer"), [(2, "20"), (4, "40")])
def test_the_prepared_scheduler_exercise_follows_p(world_size, answer):
    at = open_section(PAGE, workshop=True, acr_world_size=str(world_size))
    at.number_input(key="acr_prepared_ex_guess").set_value(20).run()
    at.button(key="acr_prepared_ex_reveal").click().run()
    prepared = schedules.lr_trajectory(schedules.RunShape(100, 1, 1, world_size), "prepared")
    assert 100 * prepared.steps[10] / prepared.length == world_size * 10
    if world_size == 2:
        assert any(say("en", "exercise.right", answer=answer) == s.value for s in at.success)
    else:
        assert any(answer in w.value for w in at.warning)
    assert len(at.table) == 1  # the schedule's ends, revealed; the windows' block still waits


BAD_CELLS = [  # (edit, column index, rank, whether the cell was cleared)
    ({1: {"m2": None}}, 2, 1, True),
    ({0: {"m0": -3}}, 0, 0, False),
    ({1: {"m4": -1}}, 4, 1, False),
]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("edit", "column", "rank", "cleared"), BAD_CELLS)
def test_a_bad_cell_gets_a_translated_error_naming_its_column_and_rank(
    lang, edit, column, rank, cleared
):
    at = open_section(PAGE, lang)
    at.session_state[across_inputs.TABLE_KEY] = {
        "edited_rows": edit,
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert not at.exception, at.exception
    head = say(lang, "errors.invalid_cell", field="\0", row="\0", value="\0", rule="").split("\0")
    errors = [e.value for e in at.error if e.value.startswith(head[0])]
    assert len(errors) == 1, [e.value for e in at.error]
    assert say(lang, "across.windows.col_microbatch", index=column) in errors[0]
    assert say(lang, "clipping.rank_label", rank=rank) in errors[0]
    assert "nan" not in errors[0].lower()
    if cleared:
        assert say(lang, "errors.empty_cell") in errors[0]
    assert not at.metric and not at.get("vega_lite_chart")  # no figure from a refused table
    assert at.button(key="acr_run")  # the run does not depend on the table


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_linked_fractional_cell_gets_the_same_translated_error(lang):
    # The editor refuses 2.5 in a whole-number column itself; a link's cells reach the page.
    at = open_section(PAGE, lang, acr_cells="4~15~2.5~5~16_9~6~3~16~13")
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and say(lang, "across.windows.col_microbatch", index=2) in errors[0]
    assert say(lang, "errors.rule.non_negative_int") in errors[0] and "2.5" in errors[0]


def test_a_link_reopens_the_table_k_and_the_loop():
    cells = "1~1~1~1~1_1~1~1~1~1"
    at = open_section(PAGE, acr_cells=cells, acr_accum="4", acr_loop="tail_never_steps")
    assert metric(at, "across.tail.metric") == "0.25"  # a tail of 1 at K = 4
    assert at.radio(key="acr_loop").value == "tail_never_steps"
    assert at.query_params["acr_cells"] == cells


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("loop", list(across_run.LOOPS))
def test_a_run_hands_the_check_a_bundled_loop_and_reads_its_report(launches, lang, loop):
    at = open_section(PAGE, lang, acr_loop=loop)
    at.button(key="acr_run").click().run()
    assert not at.exception, at.exception
    path = str(Path(across_run.params(loop)["trainer"]).resolve())
    assert launches == [((path,), 2, 2)]
    assert Path(path).parent.name == "trainers" and Path(path).stem == across_run.LOOPS[loop]
    check = RECORDED[loop]
    if loop in ("correct", "resume_correct"):
        assert say(lang, "across.run.passed") in [s.value for s in at.success]
        assert not at.error
    elif loop == "resume_forgets_position":  # every scenario right, only the restart parts
        assert all(s["verdict"] == "same_update" for s in check["scenarios"])
        points = [say(lang, f"check.run_mode.point.{e['point']}") for e in check["resume"]]
        said = say(lang, "across.run.failed_restart", points=i18n.join(lang, points))
        assert said in [e.value for e in at.error]
    else:
        head = i18n.catalogue(lang)["across.run.failed"].split("{")[0]
        assert any(e.value.startswith(head) for e in at.error)
    resume_codes = {c for e in check.get("resume") or () for c in e["codes"]}
    codes = set(across_run.RUN_CODES) | resume_codes
    run_codes = {d["code"] for d in check["diagnoses"]} & codes
    text = " ".join(m.value for m in at.markdown)
    if lang == "en":  # each diagnosis once, in the report's own words (one wording a code)
        lines = across_run.explained(check)
        assert len(run_codes) <= len(lines) <= len(check["diagnoses"])
        assert all(line in text for line in lines)
    if lang == "zh":  # each diagnosis in Chinese, no report's English message
        bullets = [m.value for m in at.markdown if m.value.startswith("- ")]
        assert all(re.search(f"[{i18n.CJK}]", b) for b in bullets) and bool(bullets) == bool(
            run_codes
        )
        said = [b.split("检查的原话")[0] for b in bullets]  # the check's own words may follow
        assert not [d for d in check["diagnoses"] if any(d["message"] in b for b in said)]
    gaps = next(f for frames in chart_data(at) for f in frames if "gap" in f.columns)
    updates = [u for s in check["scenarios"] for u in s["updates"]]
    assert len(gaps) == len(updates)
    undefined = gaps[gaps["code"] != "measured"]
    assert undefined["gap"].isna().all()  # drawn on the floor, named by status, never a 0 gap
    no_step = [u for u in updates if not u["skipped"] and u["max_abs_diff"] is None]
    assert (undefined["code"] == "no_step").sum() == len(no_step)
    assert (loop == "tail_never_steps") == bool(no_step)
    if loop == "divide_by_k":  # core's prediction beside the measured scale
        tail = say(lang, "across.run.tail_check", predicted="0.5", measured="0.5")
        assert tail in text


def timeline_frame(at):
    """The restart's timeline: one row per update of the chosen kill point."""
    return next(f for frames in chart_data(at) for f in frames if "phase" in f.columns)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_restart_is_drawn_at_the_kill_point_the_reader_picks(launches, lang):
    """Issue 44, item 4: the loop killed at a chosen update and restarted from its own
    checkpoint, with the position in the data kept and forgotten, as a timeline."""
    at = open_section(PAGE, lang, acr_loop="resume_forgets_position")
    at.button(key="acr_run").click().run()
    assert not at.exception, at.exception
    check = RECORDED["resume_forgets_position"]
    entries = {e["point"]: e for e in check["resume"]}
    control = at.segmented_control(key="acr_kill")
    assert list(control.options) == [say(lang, f"check.run_mode.point.{p}") for p in entries]
    updates = next(s for s in check["scenarios"] if s["name"] == "uneven")["updates"]
    for point, entry in entries.items():
        control = at.segmented_control(key="acr_kill")
        if control.value != point:
            control.set_value(point).run()
        assert not at.exception, at.exception
        every = timeline_frame(at)
        name = say(lang, f"check.run_mode.point.{point}")
        assert len(every) == len(entries) * len(updates)
        frame = every[every["point"] == name].reset_index(drop=True)
        assert len(frame) == len(updates)
        # the report's own kill, restart and first parting, where the figure draws them
        killed = run_figures.window_of(updates, entry["killed_at"])
        assert (frame["phase"][:killed] == "before_kill").all()
        assert run_figures.KILLED in frame["marks"][killed]
        # the data replayed from the start: it parts at once, the first replayed update
        assert entry["verdict"] == "different" and entry["resumed_from"] == 1
        assert run_figures.RESUMED in frame["marks"][0]
        red = max(entry["first_divergence"], killed)
        assert (frame["phase"][red:] == "parts").all()
        assert (frame["phase"][killed:red] == "same_run").all()
        u = updates[red]  # "epoch·window", and the word for tail on the shorter window
        where = f"{u['epoch']}·{u['window']}"
        if u["microsteps"] < check["accum_steps"]:
            where += " " + say(lang, "check.run_mode.cell.tail")
        said = say(lang, "across.restart.parts", point=name, where=where)
        assert said in [e.value for e in at.error]
        assert at.query_params.get("acr_kill") in (None, point, [point])


def test_a_restart_that_keeps_its_place_is_the_same_run_and_a_link_picks_the_point(launches):
    at = open_section(PAGE, acr_loop="resume_correct", acr_kill="before_tail")
    at.button(key="acr_run").click().run()
    assert not at.exception, at.exception
    assert at.segmented_control(key="acr_kill").value == "before_tail"
    every = timeline_frame(at)
    frame = every[every["point"] == say("en", "check.run_mode.point.before_tail")]
    assert set(frame["phase"]) <= {"before_kill", "same_run"} and "same_run" in set(frame["phase"])
    name = say("en", "check.run_mode.point.before_tail")
    assert say("en", "across.restart.same", point=name) in [s.value for s in at.success]


def test_every_code_reads_as_the_check_page_says_it():
    check = RECORDED["tail_never_steps"]
    leak = next(d for d in check["diagnoses"] if d["code"] == "gradient_leak")
    assert across_run.diagnosis(leak, check).startswith(say("en", "check.scenario.uneven"))
    words = leak["message"].split(": ", 1)[1]  # the report's words, its scenario renamed
    assert across_run.diagnosis(leak, check).endswith(words)
    with pytest.raises(ValueError, match="loop='mine'"):
        across_run.params("mine")  # nothing but a bundled loop is ever handed to the run


@pytest.fixture
def room_db(tmp_path, monkeypatch):
    from pclab.ui.room_panel import room_store

    path = tmp_path / "rooms.sqlite3"
    monkeypatch.setenv("PCL_ROOM_DB", str(path))
    room_store.clear()
    yield path
    room_store.clear()


def test_a_live_room_collects_both_exercises_and_the_presenter_reveals_them(room_db):
    from pclab.rooms.store import RoomStore

    host = open_section(PAGE, workshop=True)
    host.sidebar.button(key="room_open").click().run()
    code = host.session_state["room_code"]
    people = [open_section(PAGE, lang, room=code) for lang in ("en", "zh")]
    for at, (tail, along) in zip(people, ((0.5, 20), (1.0, 20))):
        assert at.button(key="acr_tail_ex_reveal").disabled  # the presenter's to press
        at.number_input(key="acr_tail_ex_guess").set_value(tail).run()
        at.number_input(key="acr_prepared_ex_guess").set_value(along).run()
        assert not at.exception
    host.run()
    for key in ("acr_tail_ex", "acr_prepared_ex"):
        host.button(key=f"{key}_reveal").click().run()
        assert not host.exception
        tally = RoomStore(room_db).tally(code, key, host.session_state[f"{key}_scenario"])
        assert (tally.answered, tally.right) == ((2, 1) if key == "acr_tail_ex" else (2, 2))
    for at in people:
        at.run()
        assert at.number_input(key="acr_tail_ex_guess").disabled
        assert len(at.metric) == 1 and len(at.table) == 2  # revealed for the room: both blocks
