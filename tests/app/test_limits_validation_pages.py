"""Pages 04 and 07: both languages, widgets drive the figures, bad input is a message, the real run
fills cells; the predict-then-reveal exercises, workshop mode, deep links and downloads."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pclab.ui import i18n
from tests.app.sections_helper import open_section

ROOT = Path(__file__).resolve().parents[2]
LIMITS, VALIDATION = "pclab/sections/04_limits.py", "pclab/sections/07_validation.py"


def open_page(page: str, lang: str = "en", workshop: bool = False, **query) -> AppTest:
    return open_section(page, lang, workshop, timeout=120, **query)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_limits_renders_every_block_in_both_languages(lang):
    at = open_page(LIMITS, lang)
    assert not at.error
    assert len(at.metric) == 6 and all(m.value not in ("0", "") for m in at.metric)
    word = "Measured" if lang == "en" else "实测"
    assert sum(word in md.value for md in at.markdown) == 6
    assert (
        len(at.dataframe) == 6 and len(at.table) == 1
    )  # one table per demonstration, the overview
    assert len(at.get("download_button")) == 12  # each demonstration's table as CSV and JSON
    if lang == "zh":
        assert metrics(at)["窗口内提前更新：最大参数差"] == "0.00636"
    # every metric is a largest gap or a spread, every gap column an absolute value: no '+'
    assert not [m.value for m in at.metric if m.value.startswith("+")]
    gaps = {"max_param_diff", "max_output_diff", "loss_diff", "max_grad_diff", "max_diff"}
    gaps.add("mask_mismatch")  # a fraction
    cells = [v for d in at.dataframe for c in d.value.columns if c in gaps for v in d.value[c]]
    assert cells and not [v for v in cells if str(v).startswith("+")]


def test_limits_widgets_drive_the_figures():
    at = open_page(LIMITS)
    assert metrics(at)["Step inside the window: largest parameter gap"] == "0.00636"
    at.slider(key="lim_w_steps").set_value(
        1
    ).run()  # one microbatch: stepping inside changes nothing
    assert metrics(at)["Step inside the window: largest parameter gap"] == "0"
    at.slider(key="lim_c_norm").set_value(10.0).run()  # no clip active: the two orders agree
    assert metrics(at)["Largest element gap"] == "0"
    before = metrics(at)["Per-microbatch pools: largest gradient gap"]
    at.slider(key="lim_f_tau").set_value(2.0).run()
    assert metrics(at)["Per-microbatch pools: largest gradient gap"] != before
    at.slider(key="lim_d_steps").set_value(1).run()
    assert metrics(at)["Continued stream: largest gradient gap"] == "0"
    at.number_input(key="lim_seed").set_value(3).run()
    assert metrics(at)["Spread of the float32 results"] != "+0.328125"
    assert not at.exception


def test_limits_bad_combination_is_a_translated_message():
    at = open_page(LIMITS, "zh")
    at.slider(key="lim_f_steps").set_value(
        5
    ).run()  # 8 samples in 5 microbatches: BatchNorm needs 2 each
    assert not at.exception
    assert any("accum_steps = 5" in e.value and "允许范围" in e.value for e in at.error)
    assert "按 microbatch 分池：最大梯度差" in metrics(at)  # the negatives block still renders


def matrices(at, lang: str = "en") -> list:
    """The coverage matrices: static tables (their cells wrap, nothing cut at 800 px), read
    back with the columns' codes."""
    from pclab.ui import i18n

    codes = {i18n.text(lang, "validation.matrix.row"): "row"}
    prefix = "validation.column."
    codes |= {
        v: k.removeprefix(prefix) for k, v in i18n.catalogue(lang).items() if k.startswith(prefix)
    }
    return [t.value.rename(columns=codes).reset_index(drop=True) for t in at.table]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_validation_matrix_is_filled_from_the_checks(lang):
    at = open_page(VALIDATION, lang)
    details, ranks = (d.value for d in at.dataframe)
    matrix, torchrun = matrices(at, lang)
    assert matrix.shape == (6, 5) and torchrun.shape == (6, 5)
    cells = matrix.drop(columns="row").to_numpy().ravel()
    assert all(c.startswith(("✓", "⚠")) for c in cells)
    assert sum(c.startswith("⚠") for c in cells) == 5  # repeated tokens (4) + clipping hides one
    not_run = "not run yet" if lang == "en" else "尚未运行"
    assert (torchrun.drop(columns="row") == not_run).all().all()
    assert list(ranks["samples"]) == [3, 3, 3, 3] and list(ranks["repeats"]) == [0, 0, 1, 1]
    assert details["num_valid_labels"].tolist() == [21, 11, 14, 16, 25, 19]
    assert len(at.get("download_button")) == 8  # matrix, scenarios, torchrun matrix, ranks


def test_validation_widgets_drive_the_matrix_and_the_sampler():
    at = open_page(VALIDATION)
    assert "repeated tokens" in at.warning[0].value
    at.selectbox(key="val_slip").set_value("double_scaled").run()  # K = 1 rows cannot see a ÷K slip
    assert all(
        row in at.warning[0].value for row in ("unequal lengths", "no labels", "5 sequences")
    )
    assert "repeated tokens" not in at.warning[0].value
    assert metrics(at)["Repeated entries (padding)"] == "2"
    at.number_input(key="val_size").set_value(12).run()
    assert metrics(at)["Repeated entries (padding)"] == "0"
    at.number_input(key="val_size").set_value(10).run()
    at.toggle(key="val_drop_last").set_value(True).run()
    assert metrics(at)["Samples never read"] == "2"
    assert int(metrics(at)["Tokens the ranks consume"]) < int(metrics(at)["Tokens in the dataset"])
    at.number_input(key="val_world").set_value(64).run()
    assert not at.exception


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_two_process_run_fills_the_torchrun_cells():
    at = open_page(VALIDATION)
    at.button(key="val_torchrun").click()
    at.run(timeout=500)
    assert not at.exception
    torchrun = matrices(at)[1].set_index("row")
    filled = torchrun[["loss", "parameters"]].loc[["accumulation window", "unequal lengths"]]
    assert filled.map(lambda c: c.startswith("✓")).all().all()
    assert (torchrun["global_norm"] == "no number from this run").all()
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Download the run record (JSON)" in labels  # the run's record sits beside its cells


def download_keys(at: AppTest) -> set[str]:
    return {b.proto.id.rsplit("-dl_", 1)[-1] for b in at.get("download_button")}


def bound_inputs(at: AppTest) -> dict[str, str]:
    """Every number, slider and toggle of the page itself: key -> URL key. Not the exercise's
    guess (a prediction is not part of the scenario) nor the header's workshop switch."""
    widgets = [*at.number_input, *at.slider, *at.select_slider, *at.toggle]
    return {
        w.key: w.proto.query_param_key
        for w in widgets
        if w.key != "workshop" and not w.key.endswith("_guess")
    }


def test_limits_inputs_live_in_the_url_and_tables_download():
    at = open_page(LIMITS)
    bound = bound_inputs(at)
    assert len(bound) == 14 and all(
        url == key for key, url in bound.items()
    )  # seed + 13 tab inputs
    assert {
        f"limits-{name}_{kind}"
        for name in ("window", "clip", "dropout")
        for kind in ("csv", "json")
    } <= (download_keys(at))


def test_limits_clip_exercise_gates_only_its_block_in_workshop_mode():
    at = open_page(LIMITS, workshop=True)
    shown = metrics(at)
    assert "Largest element gap" not in shown and len(shown) == 5  # the other tabs still render
    assert len(at.dataframe) == 5
    question = next(md.value for md in at.markdown if "clip(Σg) have?" in md.value)
    # ‖Σg‖ at the defaults, a norm: no sign (the answer neither; the gap keeps its sign)
    assert "7.883567" in question and "+7.883567" not in question and "τ = 1" in question
    at.number_input(key="lim_ex_guess").set_value(3.49).run()  # the norm of Σ clip(g), not clip(Σg)
    at.button(key="lim_ex_reveal").click().run()
    assert [w.value for w in at.warning] == [
        i18n.text("en", "exercise.gap", answer="1", gap="+2.49")
    ]
    assert metrics(at)["Largest element gap"] != "0" and len(at.dataframe) == 6
    at.number_input(key="lim_ex_guess").set_value(1.0).run()
    assert not at.success  # a changed prediction waits for another Reveal (issue 17)
    at.button(key="lim_ex_reveal").click().run()
    assert any(s.value == "Right — core computes 1." for s in at.success)
    at.slider(key="lim_c_norm").set_value(10.0).run()  # a new scenario hides the block again
    assert "Largest element gap" not in metrics(at)
    at.number_input(key="lim_ex_guess").set_value(7.883567).run()  # τ above ‖Σg‖: nothing clipped
    at.button(key="lim_ex_reveal").click().run()
    assert [s.value for s in at.success] == [i18n.text("en", "exercise.right", answer="7.883567")]
    assert metrics(at)["Largest element gap"] == "0"


def test_validation_sampler_exercise_in_workshop_mode():
    at = open_page(VALIDATION, workshop=True)
    assert len(at.metric) == 0 and len(at.table) == 2  # the matrices show, the sampler waits
    assert len(at.dataframe) == 1
    at.number_input(key="val_ex_guess").set_value(3).run()
    assert len(at.metric) == 0  # typing a guess reveals nothing
    at.button(key="val_ex_reveal").click().run()
    assert any(w.value == "Core computes 2; your prediction is off by +1." for w in at.warning)
    assert metrics(at)["Repeated entries (padding)"] == "2" and len(at.dataframe) == 2
    at.toggle(key="val_drop_last").set_value(True).run()  # drop_last cuts instead of padding
    assert len(at.metric) == 0
    at.number_input(key="val_ex_guess").set_value(0).run()
    at.button(key="val_ex_reveal").click().run()
    assert any(s.value == "Right — core computes 0." for s in at.success)
    assert metrics(at)["Samples never read"] == "2"


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_validation_deep_link_is_language_neutral(lang):
    at = open_page(VALIDATION, lang, val_slip="double_scaled")  # one link, read in either language
    assert at.selectbox(key="val_slip").value == "double_scaled"
    assert ("长度不等" if lang == "zh" else "unequal lengths") in at.warning[
        0
    ].value  # K = 1 hides ÷K
    if lang == "en":  # AppTest formats a selectbox's options in English, so set it there
        at.selectbox(key="val_slip").set_value("replica_mean").run()
        assert at.query_params["val_slip"] == "replica_mean"  # the option's code, not its label


def test_validation_inputs_live_in_the_url_and_tables_download():
    at = open_page(VALIDATION)
    bound = bound_inputs(at)
    keys = {"val_seed", "val_size", "val_world", "val_sampler_seed", "val_epoch", "val_drop_last"}
    assert set(bound) == keys and all(url == key for key, url in bound.items())
    names = ("coverage-matrix", "coverage-scenarios", "coverage-torchrun", "sampler-ranks")
    assert download_keys(at) == {f"{name}_{kind}" for name in names for kind in ("csv", "json")}
