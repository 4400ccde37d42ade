"""The Full Transformer experiment page: renders in both languages without a run, its label
controls drive the highlighted text and the theory table, and a stored run's results render.

No process is started here: the results section is fed a report of the documented shape
built from `transformer.predictions` (the real run is tested in tests/runners)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from pclab.experiments.transformer import params as transformer
from pclab.experiments.transformer.lm import data
from pclab.runners.results import RunResult
from pclab.ui import i18n, transformer_views
from tests.app.sections_helper import open_section

ROOT = Path(__file__).resolve().parents[2]
PAGE = "pclab/sections/experiment.py"


def open_page(lang: str = "en", workshop: bool = False, **query) -> AppTest:
    return open_section(PAGE, lang, workshop, **query)


def theory(at: AppTest) -> list[str]:
    return list(at.dataframe[0].value.iloc[:, 2])  # the prediction table comes first


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_renders_without_starting_anything(lang):
    at = open_page(lang)
    assert at.title[0].value == (
        "Full Transformer experiment" if lang == "en" else "完整 Transformer 实验"
    )
    assert [at.number_input(key=f"exp_labels{i}").value for i in range(4)] == list(
        data.DEFAULT_LABELS
    )
    assert at.number_input(key="exp_labels3").max < 96  # the short tail window


def test_rendering_needs_no_torch():
    """Everything the page imports to render stays light: torch only loads in the workers."""
    code = (
        "import sys; from pclab.experiments.transformer import params as transformer; "
        "from pclab.experiments.transformer.lm import artifacts, data; "
        "import pclab.ui.transformer_views; "
        "data.experiment_windows(data.committed_tokenizer()); "
        "transformer.predictions((40, 7, 0, 23)); "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_label_counts_drive_the_text_and_the_theory():
    at = open_page()
    highlighted = [m.value for m in at.markdown if 'class="pcl-label"' in m.value]
    assert len(highlighted) == 3  # window 2 carries no label by default
    assert theory(at)[2] == "different update" and theory(at)[3] == "different update"
    for i, n in enumerate((30, 10, 25, 15)):  # equal microbatch and rank counts
        at.number_input(key=f"exp_labels{i}").set_value(n).run()
    assert not at.exception
    assert len([m for m in at.markdown if 'class="pcl-label"' in m.value]) == 4
    assert set(theory(at)) == {"same update"}
    at.number_input(key="exp_labels0").set_value(0).run()
    at.number_input(key="exp_labels1").set_value(0).run()
    assert theory(at)[2].startswith("undefined")


def fake_report(labels) -> dict:
    """A report of the CLI's shape (numbers illustrative): what the page must be able to show."""
    branches = []
    for row in transformer.predictions(labels):
        ok = row["expected_correct"] is True
        diff = 0.0 if row["name"] == "full_batch" else (1e-16 if ok else 3e-2)
        branches.append(
            {
                **row,
                "max_abs_diff": diff,
                "passed": ok,
                "first_divergence": None if ok else {"stage": "loss", "tensor": None},
                "rank_hashes": ["ab" * 32, "ab" * 32],
                "param_diffs": {"tok_emb.weight": diff, "head.weight": diff / 2},
            }
        )
    adamw = {
        "naive_changed": ["weights", "exp_avg", "exp_avg_sq", "step"],
        "naive_max_weight_change": 2e-3,
    }
    return {
        "tolerance": 2e-10,
        "labels": list(labels),
        "num_valid_labels": sum(labels),
        "branches": branches,
        "equal_count_control": {"labels": [30, 10, 25, 15], "branches": branches},
        "zero_labels": {
            "skip_state_identical": True,
            "naive_changed": ["adamw.weights"],
            "by_optimizer": {
                "adamw": {**adamw, "steps_before": [800.0], "steps_after_naive": [801.0]},
                "sgd": {"naive_changed": [], "naive_max_weight_change": 0.0},
            },
        },
    }


def download_labels(at: AppTest) -> list[str]:
    return sorted(b.proto.label for b in at.get("download_button"))


def predict(at: AppTest, guess: str) -> AppTest:
    at.radio(key="exp_ex_guess").set_value(guess).run()
    at.button(key="exp_ex_reveal").click().run()
    assert not at.exception, at.exception
    return at


def test_exercise_asks_whether_ddp_mean_of_means_matches():
    at = predict(open_page(), "same")  # 47 labels on rank 0, 23 on rank 1: not the same weights
    assert any("different update" in w.value for w in at.warning) and not at.success
    at = predict(at, "different")
    assert any("Right" in s.value and "different update" in s.value for s in at.success)


def test_workshop_mode_hides_the_theory_table_until_revealed():
    at = open_page(workshop=True)
    assert not at.dataframe and not at.get("download_button")
    assert len([m for m in at.markdown if 'class="pcl-label"' in m.value]) == 3  # the inputs stay
    at = predict(at, "different")
    assert theory(at)[3] == "different update" and download_labels(at) == ["CSV", "JSON"]
    at.number_input(key="exp_labels0").set_value(
        16
    ).run()  # 23 + 23: now the ranks hold equal counts
    assert not at.dataframe
    at = predict(at, "same")
    assert any("Right" in s.value for s in at.success) and theory(at)[3] == "same update"


def test_deep_link_sets_the_scenario():
    at = open_page(workshop=True, exp_optimizer="sgd", exp_world_size="4", exp_labels1="5")
    assert at.session_state["exp_world_size"] == 4 and at.session_state["exp_labels1"] == 5
    assert at.segmented_control(key="exp_optimizer").value == "sgd"
    at = predict(at, "undefined")  # four ranks, one window each: window 2 holds no label
    assert any("Right" in s.value and "undefined" in s.value for s in at.success)
    table = at.dataframe[0].value
    assert len(table) == len(transformer.BRANCHES) and set(table.iloc[:, 1]) == {"SGD"}
    at.segmented_control(key="exp_optimizer").set_value("adamw").run()
    at.session_state["lang"] = "zh"
    at.run()
    assert at.query_params["exp_optimizer"] == "adamw"  # the option code, in any language


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_measured_tables_wrap_instead_of_scrolling_off(lang):
    """Issue 45 item 10: at 800 px (dark, Chinese) the results' last column read '各进' and
    '9601…' with no scroll cue (an st.dataframe's seven columns). The measured tables are
    st.tables whose cells wrap: every header is the catalogue's, each rank's hash shows its
    first 8 hex digits (", " between ranks: a narrow cell wraps after the comma), the
    downloads keep all 64; 3.00e-02 stays on one line and 不同的更新 / 在容差内 never stand one
    character a line - rules that reach the Markdown inside each cell, where the text is."""
    at = open_page(lang)
    params = {"labels": data.DEFAULT_LABELS, "world_size": 2, "optimizer": "both"}
    report = fake_report(data.DEFAULT_LABELS)
    report["branches"][0]["rank_hashes"] = ["96014a1b" + "c" * 56, "96014a1b" + "d" * 56]
    result = RunResult.finished((), 12.0, "0" * 64).with_report(report)
    at.session_state["exp_run_result"] = (params, result)
    at.run()
    assert not at.exception, at.exception
    assert len(at.dataframe) == 1 and len(at.table) == 2  # the prediction table, then these two
    columns = ("branch", "optimizer", "theory", *transformer_views.MEASURED)
    headers = [i18n.text(lang, f"experiment.results.{c}") for c in columns]
    for table in at.table:
        assert list(table.value.columns) == headers
        styles = table.proto.arrow_data.styler.styles
        for column, rule in (
            ("max_abs_diff", "white-space: nowrap"),
            ("theory", "word-break: keep-all"),
            ("passed", "word-break: keep-all"),
        ):
            i = columns.index(column)
            assert f".data.col{i} * {{ {rule} }}" in styles, (column, styles[-300:])
        assert f".col_heading.col{columns.index('passed')} * {{ word-break: keep-all }}" in styles
    hashes = at.table[0].value[headers[-1]]
    assert hashes.iloc[0] == "96014a1b, 96014a1b" and hashes.iloc[1] == "abababab, abababab"
    assert "各进程的状态哈希" in headers or lang == "en"
    from pclab.ui import branch_table

    whole = branch_table.prepare(report["branches"], "exp_results", transformer_views.MEASURED)
    assert f"{'96014a1b' + 'c' * 56} / {'96014a1b' + 'd' * 56}" in whole.csv.decode()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_stored_run_renders_its_results(monkeypatch, lang):
    from pclab.ui import downloads

    records = []
    record = downloads.run_record
    monkeypatch.setattr(
        downloads, "run_record", lambda *args: records.append(args[1:]) or record(*args)
    )
    at = open_page(lang)
    params = {"labels": data.DEFAULT_LABELS, "world_size": 2, "optimizer": "both"}
    result = RunResult.finished((), 12.0, "0" * 64).with_report(fake_report(data.DEFAULT_LABELS))
    at.session_state["exp_run_result"] = (params, result)
    at.run()
    assert not at.exception, at.exception
    (predictions,) = (d.value for d in at.dataframe)  # the measured tables: st.table (below)
    results, control = (d.value for d in at.table)
    assert len(predictions) == len(results) == len(control) == 10
    assert results.iloc[2, 3] == "3.00e-02" and results.iloc[0, 3] == "0.00e+00"
    assert at.metric[0].value == ("yes" if lang == "en" else "是")
    charts = at.get("vega_lite_chart")
    assert len(charts) == 1 and '"log"' in charts[0].proto.spec  # |delta| per tensor, log scale
    # The optimizer legend: in the reader's language, symbols in a grey both themes show.
    spec = json.loads(charts[0].proto.spec)
    y = spec["layer"][0]["encoding"]["y"]  # every tick in one notation (1e-8, not 0.000001)
    assert y["scale"]["type"] == "log" and y["axis"]["format"] == "~e"
    shape = spec["layer"][0]["encoding"]["shape"]
    assert shape["legend"]["symbolFillColor"] == transformer_views.NEUTRAL
    rows = pa.ipc.open_stream(charts[0].proto.datasets[0].data.data).read_all().to_pandas()
    optimizers = set(rows["optimizer"])
    assert optimizers == {i18n.text(lang, f"experiment.optimizer.{o}") for o in ("adamw", "sgd")}
    changed = i18n.join(
        lang, [i18n.text(lang, f"experiment.zero.kind.{k}") for k in ("weights", "exp_avg")]
    )
    assert any(changed in m.value for m in at.markdown)  # plain text: never cut like a metric
    assert len(at.get("download_button")) == 7  # three tables as CSV and JSON, and the run record
    assert records[-1] == (params, "transformer")
