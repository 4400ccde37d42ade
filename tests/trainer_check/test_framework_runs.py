"""The framework table across a run (frameworks.run_table, run_words): each recorded row's
words say what its story says, in both languages, for every kind of finding (the recorded
rows, and stories made by hand for the cases no framework here shows); a row with no code
says nothing needs changing; the README's table is the record (test_framework_table.py); the
live runs that hold each story to its record are tests/runners/test_run_frameworks.py and
test_resume_frameworks.py.

    python -m pytest -n 0 tests/trainer_check/test_framework_runs.py -q
"""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from pclab.experiments.trainer_check import codes
from pclab.experiments.trainer_check.frameworks import __main__ as command
from pclab.experiments.trainer_check.frameworks import run_table, run_words
from pclab.experiments.trainer_check.frameworks.readme_table import say_english
from pclab.ui import i18n

RECORDS = {r["code"]: r for r in run_table.load_runs()["records"]}


def _say(lang: str):
    return lambda key, **values: i18n.text(lang, key).format(**values)


def test_every_row_is_recorded_with_its_versions_and_commands():
    assert [r.code for r in run_table.ROWS] == list(RECORDS)
    for row in run_table.ROWS:
        record = RECORDS[row.code]
        assert record["framework"] == row.framework and record["version"]
        assert record["commands"] == [run_table.command(row, s) for s in row.adapters()]
        assert (record["resume"] is None) == (row.resume is None)
        for stem in row.adapters():
            assert row.path(stem).is_file()


def test_every_recorded_code_is_a_run_code_with_a_fix_line_in_both_languages():
    for record in RECORDS.values():
        for code in run_words.codes_found(record):
            assert code in codes.CODES, code
            for lang in ("en", "zh"):
                assert i18n.text(lang, f"check.run_mode.fix.{code}")


def test_accelerates_row_says_its_tail_its_scheduler_and_where_its_restart_differs():
    words = run_words.cells(RECORDS["run_accelerate_accumulate"], say_english)
    assert "0.5 of what its own count gives" in words["tail"]
    assert "Optimizer steps an epoch: 3, 3 (the reference: 3, 3)" in words["tail"]
    assert "stepped 2 times an update" in words["schedule"]
    assert "`scheduler_on_skip`" in words["empty"]
    assert words["resume"] == "`window_gradient_lost` (mid_window); the same run at the other 3."
    assert words["set"].count("**") == 2 * len(
        run_words.codes_found(RECORDS["run_accelerate_accumulate"])
    )


def test_deepspeeds_row_says_its_tail_never_steps_and_it_steps_at_the_empty_window():
    words = run_words.cells(RECORDS["run_deepspeed_engine"], say_english)
    assert words["tail"].startswith("never stepped (`tail_window_dropped`, `gradient_leak`)")
    assert "Optimizer steps an epoch: 2, 3 (the reference: 3, 3)" in words["tail"]
    assert words["schedule"] == say_english("frameworks.runs.schedule_own_steps")
    assert words["empty"] == say_english("frameworks.runs.empty_stepped")


def test_the_clm_loops_row_says_its_tail_and_its_schedules_length():
    words = run_words.cells(RECORDS["run_clm_no_trainer"], say_english)
    assert "0.5 of what its own count gives" in words["tail"]
    assert "`schedule_length`" in words["schedule"]  # sized from the global dataloader
    assert "`scheduler_on_skip`" in words["empty"]


def test_a_resume_that_differs_at_every_kill_point_says_so_and_counts_no_same_run():
    """run_clm_no_trainer.py's restart parts from the straight run at all four points: its
    cell lists each, and says no "same run at the other 0"."""
    words = run_words.cells(RECORDS["run_clm_no_trainer"], say_english)
    assert words["resume"].endswith(": a different run at every kill point.")
    assert "the other" not in words["resume"]
    assert "`data_replayed`, `data_skipped` (epoch_boundary)" in words["resume"]
    deepspeed = run_words.cells(RECORDS["run_deepspeed_engine"], say_english)["resume"]
    assert deepspeed.endswith("; the same run at the other 2.")


def test_deepspeeds_row_says_its_schedule_is_stepped_once_per_step_of_its_own():
    """Its shifted windows are read step by step: the intended schedule, one rate per step of
    its own, so no schedule code; litgpt's and torchtune's, read the same way, are built for
    the floored count (`schedule_length`)."""
    words = run_words.cells(RECORDS["run_deepspeed_engine"], say_english)
    assert "once per optimizer step of its own" in words["schedule"]
    for code in ("run_litgpt_finetune", "run_torchtune_full_finetune"):
        assert "`schedule_length`" in run_words.cells(RECORDS[code], say_english)["schedule"]


def test_the_trainers_row_is_right_but_for_the_empty_window():
    words = run_words.cells(RECORDS["run_hf_trainer"], say_english)
    assert words["tail"].startswith("divided by its own count")
    assert words["schedule"] == "once per update, as intended."
    assert "`scheduler_on_skip`" in words["empty"]
    assert words["resume"] == "the same run at all 4 kill points."


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_kind_of_finding_has_its_words(lang):
    """Stories made by hand: a tail never stepped, a short schedule, another code at the
    empty window, a clean row: each cell is filled (no placeholder left) and says the code."""
    say = _say(lang)
    clean = copy.deepcopy(RECORDS["run_hf_trainer"])
    for s in clean["run"]["scenarios"].values():
        s["codes"], s["verdict"] = [], "same_update"
    clean["run"]["empty_steps"] = 0  # the N = 0 window skipped too
    assert run_words.to_set(clean, say) == i18n.text(lang, "frameworks.runs.nothing_to_set")
    assert run_words.empty(clean["run"], say) == i18n.text(lang, "frameworks.runs.empty_skipped")
    broken = copy.deepcopy(clean)
    broken["run"]["scenarios"]["uneven"]["codes"] = ["gradient_leak", "tail_window_dropped"]
    broken["run"]["scenarios"]["uneven"]["codes"] += ["schedule_length"]
    broken["run"]["scenarios"]["empty_window"]["codes"] = ["steps_per_window"]
    broken["resume"] = [{"point": "mid_window", "verdict": "different", "codes": []}]
    stepped = copy.deepcopy(clean)
    stepped["run"]["empty_steps"] = 1  # a step at N = 0 that no code of its own names
    assert run_words.empty(stepped["run"], say) == i18n.text(lang, "frameworks.runs.empty_stepped")
    assert "lr_intended" in run_words.schedule(stepped["run"] | {"schedule": None}, say)
    words = run_words.cells(broken, say)
    assert "`tail_window_dropped`" in words["tail"] and "`gradient_leak`" in words["tail"]
    assert "`schedule_length`" in words["schedule"]
    assert "`steps_per_window`" in words["empty"]
    assert "different (mid_window)" in words["resume"]
    assert all("{" not in w for w in words.values()), words


def test_a_story_reads_what_the_page_shows_of_a_check():
    """story() on a check made by hand: the steps per epoch, the reference's updates (a skipped
    window is none), the codes per scenario, the tail's scale and the schedule's stepping."""

    def update(epoch, steps, skipped=False):
        return {"epoch": epoch, "optimizer_steps": steps, "skipped": skipped}

    check = {
        "status": "different",
        "scenarios": [
            {
                "name": "uneven",
                "verdict": "different",
                "updates": [update(0, 1), update(0, 0, True), update(0, 2), update(1, 1)],
                "schedule": {"matches": "prepared"},
            },
            {"name": "empty_window", "verdict": "same_update", "updates": []},
        ],
        "diagnoses": [
            {"code": "tail_window_scaled", "scenario": "uneven", "scale": 0.5000000000000002},
            {"code": "scheduler_rate", "scenario": "uneven", "rate": 2},
        ],
    }
    found = run_table.story(check)
    assert found["steps_per_epoch"] == [3, 1] and found["reference_steps_per_epoch"] == [2, 1]
    assert found["scenarios"]["uneven"]["codes"] == ["scheduler_rate", "tail_window_scaled"]
    assert found["scenarios"]["empty_window"] == {"verdict": "same_update", "codes": []}
    assert (found["tail_scale"], found["schedule"], found["scheduler_rate"]) == (0.5, "prepared", 2)
    assert found["resume"] is None and found["empty_steps"] == 0


def test_runs_only_names_run_rows_or_their_packages():
    assert [r.code for r in run_table.chosen_runs(["torchtune", "run_hf_trainer"])] == [
        "run_hf_trainer",  # the table's order
        "run_torchtune_full_finetune",
    ]
    assert run_table.chosen_runs(None) == run_table.ROWS
    with pytest.raises(ValueError, match="nope"):
        run_table.chosen_runs(["litgpt", "nope"])
    with pytest.raises(SystemExit):  # argparse: exit 2, the reason on stderr
        command.main(["--runs", "--only", "litgpt,nope"])


def test_runs_only_records_just_those_rows(tmp_path, monkeypatch):
    """`--runs --only a` launches only a's adapters and rewrites only its record; every other
    record stays byte for byte (the check is a stand-in: no process starts)."""
    path = tmp_path / "framework_runs.json"
    shutil.copy(run_table.RUNS_RECORDED, path)
    launched = []

    def check_rows(rows, runtime=None):
        launched.append([r.code for r in rows])
        return {stem: {"stand-in": stem} for r in rows for stem in r.adapters()}

    monkeypatch.setattr(run_table, "check_rows", check_rows)
    monkeypatch.setattr(run_table, "installed_version", lambda package: "0.0")
    monkeypatch.setattr(run_table, "story", lambda check: {"resume": None, **check})
    payload = run_table.record_runs(path, only=["litgpt"])
    assert launched == [["run_litgpt_finetune"]]
    after = json.loads(path.read_text())["records"]
    assert after == payload["records"] and len(after) == len(RECORDS)
    for old, new in zip(RECORDS.values(), after, strict=True):
        if old["code"] == "run_litgpt_finetune":
            assert new["run"] == {"stand-in": "run_litgpt_finetune", "resume": None}
        else:
            assert json.dumps(new, indent=1) == json.dumps(old, indent=1)


def test_an_environment_of_its_own_records_its_run_rows_too(tmp_path):
    from bench import framework_env

    steps = framework_env.commands("torchtune", tmp_path / "venv")
    assert steps[-2][-2:] == ["--only", "torchtune"]  # the one-update rows, then the run row
    assert steps[-1][-3:] == ["--runs", "--only", "torchtune"]
    olmo = framework_env.commands("ai2-olmo-core", tmp_path / "venv")
    assert olmo[-1][-3:] == ["--runs", "--only", "ai2-olmo-core"]  # run_olmo_core_trainer


def test_restarts_the_check_could_not_place_are_said_once_as_no_evidence():
    """TRL's record: three kill points no_evidence (not placed), one the same run."""
    words = run_words.cells(RECORDS["run_trl_sft"], say_english)["resume"]
    assert words == (
        "no evidence at mid_epoch, mid_window, epoch_boundary (the restart runs inputs the "
        "check did not hand out, so it cannot be placed); the same run at the other 1."
    )
