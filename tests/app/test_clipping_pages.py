"""Pages 08 (global gradient norm) and 09 (coordinate the step) under AppTest.

The figures on screen must be the seed's, must follow the widgets and deep links, a skipped
step must read "skipped" (never NaN), and a stored two-process run must be shown beside
core's prediction. The real torchrun launch itself is tested in tests/runners/; here the
stored run is a report built by pclab.experiments.clipping.build_report from rank outputs
shaped like the worker's. Rendering must never import torch.
"""

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pclab.core import clipping
from pclab.ui import i18n
from pclab.ui.figures import fmt
from tests.app.sections_helper import open_section

ROOT = Path(__file__).resolve().parents[2]
CLIP, STEP = "pclab/sections/08_clipping.py", "pclab/sections/09_coordinated_step.py"


def open_page(page: str, lang: str = "en", workshop: bool = False, **query) -> AppTest:
    return open_section(page, lang, workshop, **query)


def metrics(at: AppTest) -> list[str]:
    return [m.value for m in at.metric]


def text(at: AppTest) -> str:
    return " ".join(m.value for m in at.markdown)


RANK_COLUMNS = ("rank", "id", "value", "owner", "coefficient", "applied", "param", "steps")
HEADINGS = ("clipping.col_{}", "step.col.{}")  # page 08's and page 09's


def rank_rows(at: AppTest):
    """The per-rank table (a static table, headed in the page's language) by column code."""
    table = at.table[0].value
    codes = {}
    for lang in i18n.LANGUAGES:
        for heading in HEADINGS:
            codes |= {
                i18n.text(lang, heading.format(c)): c
                for c in RANK_COLUMNS
                if heading.format(c) in i18n.catalogue(lang)
            }
    assert set(table.columns) <= set(codes), list(table.columns)
    return table.rename(columns=codes)


def download_labels(at: AppTest) -> list[str]:
    return sorted(b.proto.label for b in at.get("download_button"))


def reveal(at: AppTest, key: str) -> AppTest:
    at.button(key=f"{key}_reveal").click().run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", [CLIP, STEP])
def test_pages_render_in_both_languages(page, lang):
    at = open_page(page, lang)
    assert at.table and not at.error
    has_chinese = any("\u4e00" <= ch <= "\u9fff" for ch in at.title[0].value)
    assert has_chinese == (lang == "zh")


def test_clipping_shows_the_seed_figures():
    at = open_page(CLIP)
    assert metrics(at) == ["5", "1", "0.2"]  # n, norm after clipping, c: magnitudes, unsigned
    table = rank_rows(at)
    assert list(table["value"]) == ["+24 → +3", "+32 → +4"]
    assert list(table["applied"]) == ["+0.6", "+0.8"]
    assert list(table["param"]) == ["+0.94", "+0.92"]
    at.segmented_control(key="clip_variant").set_value("per_rank").run()
    assert metrics(at) == ["5", "1.414214", "0.333333 / 0.25"]  # [1, 1], norm sqrt(2)
    assert list(rank_rows(at)["applied"]) == ["+1", "+1"]
    assert at.error  # the wrong norm changes the update here


def test_replicated_twelve_gives_thirteen_and_double_counting_sqrt_313():
    at = open_page(CLIP)
    at.toggle(key="clip_add_rep").set_value(True).run()
    assert metrics(at)[0] == "13"
    assert "17.691806" in text(at) and "+17.691806" not in text(at)  # sqrt(313), a norm
    owners = list(rank_rows(at)["owner"])
    assert owners.count("rank 0 — copy not counted") == 1
    at.segmented_control(key="clip_variant").set_value("per_rank").run()
    assert any("differs between the ranks" in e.value for e in at.error)


def test_widgets_drive_the_figures():
    at = open_page(CLIP)
    at.number_input(key="clip_threshold").set_value(10.0).run()
    assert metrics(at) == ["5", "5", "1"]
    at.toggle(key="clip_add_shard").set_value(True).run()
    at.selectbox(key="clip_rank").set_value(1).run()
    assert metrics(at)[0] == "5.385165"  # sqrt(9 + 16 + 4)
    assert list(rank_rows(at)["id"]) == ["w0", "w1", "w2"]
    at.number_input(key="clip_scale").set_value(1.0).run()
    assert rank_rows(at)["value"][0] == "+3 → +3"
    assert metrics(at)[0] == "5.385165"  # the scale never changes the unscaled norm


def test_deep_link_and_language_switch_keep_the_scenario():
    at = open_page(CLIP, clip_threshold="2.5", clip_variant="before_unscale")
    assert metrics(at) == ["5", "0.3125", "0.0625"]  # scaled norm 40: c = 2.5/40
    at.session_state["lang"] = "zh"
    at.run()
    assert metrics(at) == ["5", "0.3125", "0.0625"]


SLOT = re.compile(r"(?:\bn|\bc|η|Scale|缩放系数) = \+")  # "n = +5": a magnitude with a sign


def signed(x: float) -> re.Pattern:
    """A figure as fmt writes it with its sign ("+13"), not followed by more digits."""
    return re.compile(re.escape(fmt(x)) + r"(?![\d.])")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("variant", clipping.VARIANTS)
def test_a_norm_or_coefficient_shows_no_plus_sign(lang, variant):
    """Issue 45 item 12: norms, clip coefficients, the scale and η are magnitudes: page 08's
    metrics, seed check, setup line and table's c, page 09's "n, c" line, show no '+'; the
    gradients beside them keep their sign ("+24 → +3")."""
    at = open_page(CLIP, lang, clip_variant=variant, clip_add_rep="true")  # 13; sqrt(313)
    assert not at.exception, at.exception
    words = [*metrics(at), text(at), *(c.value for c in at.caption)]
    grads = clipping.scenario_grads("seed", 8.0, extra_replicated=(("shared2", 12.0),))
    report = clipping.clip_report(grads, 1.0, 8.0, 0.1)
    figures = (report.global_norm, report.coefficient, report.double_counted_norm)
    figures += (report.scaled_norm, *report.per_rank_norms, *report.applied_norms.values())
    for x in figures:
        assert not [w for w in words if signed(x).search(w)], (fmt(x), words)
    assert not [w for w in words if SLOT.search(w)], words
    table = rank_rows(at)
    assert not any(c.startswith("+") for c in table["coefficient"]), list(table["coefficient"])
    assert table["value"][0] == "+24 → +3"  # a gradient: signed
    at = open_page(STEP, lang, step_variant=variant, step_inject="none")
    assert not at.exception, at.exception
    assert "n = " in text(at) and not SLOT.search(text(at))  # "n = 13, c = 0.076923"
    assert not any(c.startswith("+") for c in rank_rows(at)["coefficient"])


@pytest.mark.parametrize("lang, words", [("en", "finite number > 0"), ("zh", "有限")])
def test_bad_scale_is_a_translated_error_not_a_traceback(lang, words):
    # Through the link: AppTest formats a translated option outside the run, always in English,
    # so widgets are only set by hand on English pages.
    at = open_page(CLIP, lang, clip_scale="0.0")
    assert not at.exception
    assert words in at.error[0].value


def test_step_default_overflow_skips_every_rank():
    at = open_page(STEP)
    table = rank_rows(at)
    assert set(table["coefficient"]) == {"skipped"} and set(table["steps"]) == {"0"}
    assert list(table["param"]) == ["+1 · skipped"] * 4
    assert table.loc[table["id"] == "w1", "value"].item() == "inf → inf"
    assert "every rank skips" in text(at)
    assert "rank 1: **non-finite**" in text(at)
    assert at.success  # the skip left the state identical
    assert "nan" not in table.to_string().lower()  # a skip reads "skipped", never NaN


def test_step_marks_follow_the_scenario():
    at = open_page(STEP)
    at.radio(key="step_variant").set_value("local_skip").run()
    assert ":red-badge[" in text(at) and "rank 1 skips, rank 0 steps" in text(at)
    assert any("different parameters" in e.value for e in at.error)
    assert sorted(rank_rows(at)["steps"]) == ["0", "0", "1", "1"]
    at.selectbox(key="step_inject").set_value("none").run()
    assert "every rank steps" in text(at) and ":red-badge[" not in text(at)  # latent, not wrong
    assert ":orange-badge[" in text(at)
    assert set(rank_rows(at)["steps"]) == {"1"}


def test_nan_on_a_copy_that_is_not_counted_still_stops_everyone():
    at = open_page(STEP, step_inject="nan", step_inject_id="shared")
    table = rank_rows(at)
    row = table[(table["rank"] == "rank 1") & (table["id"] == "shared")]
    assert row["value"].item() == "NaN → NaN" and "not counted" in row["owner"].item()
    assert "rank 1: **non-finite**" in text(at) and set(table["steps"]) == {"0"}


# ------------------------------------------------------------- exercise, workshop, links, downloads


def test_clipping_exercise_judges_the_coefficient():
    at = open_page(CLIP)
    at.number_input(key="clip_ex_guess").set_value(
        0.25
    ).run()  # 1/4: rank 1's local norm, not n = 5
    reveal(at, "clip_ex")
    # the answer, a coefficient, unsigned; the gap to the guess keeps its sign
    gap = i18n.text("en", "exercise.gap", answer="0.2", gap="+0.05")
    assert not at.success and [w.value for w in at.warning] == [gap]
    at.number_input(key="clip_ex_guess").set_value(0.2).run()
    assert not at.success  # a changed prediction waits for another Reveal (issue 17)
    reveal(at, "clip_ex")
    assert [s.value for s in at.success] == [i18n.text("en", "exercise.right", answer="0.2")]


def test_clipping_workshop_mode_hides_the_figures_until_revealed():
    at = open_page(CLIP, workshop=True, clip_threshold="2.5")
    assert at.session_state["clip_threshold"] == 2.5  # the bound number came from the link
    assert not at.metric and not at.table and not at.get("vega_lite_chart")
    at.number_input(key="clip_ex_guess").set_value(0.5).run()
    assert not at.metric
    reveal(at, "clip_ex")
    right = i18n.text("en", "exercise.right", answer="0.5")  # c = 2.5 / 5, unsigned
    assert [s.value for s in at.success] == [right]
    assert metrics(at) == ["5", "2.5", "0.5"] and len(at.get("vega_lite_chart")) == 1
    assert download_labels(at) == ["CSV", "JSON"]
    at.toggle(key="clip_add_rep").set_value(True).run()  # a new scenario: hidden again
    assert not at.metric and not at.table


def test_clipping_choice_links_carry_the_option_code():
    at = open_page(CLIP, clip_layout="mixed")
    assert at.selectbox(key="clip_layout").value == "mixed"
    assert list(rank_rows(at)["id"]) == ["a0", "a1", "bias", "b0", "bias"]
    at.segmented_control(key="clip_variant").set_value("double_counted").run()
    assert at.query_params["clip_variant"] == "double_counted"
    at.session_state["lang"] = "zh"
    at.run()
    assert at.query_params["clip_variant"] == "double_counted"
    assert at.segmented_control(key="clip_variant").value == "double_counted"


def test_step_exercise_asks_for_the_decision():
    at = open_page(STEP, workshop=True)
    assert not at.table and "02 / AGREE" not in text(at)  # no protocol cards, no table
    at.radio(key="step_ex_guess").set_value("split").run()  # one rank overflows: does only it skip?
    reveal(at, "step_ex")
    assert any("every rank skips" in w.value for w in at.warning)
    assert len(at.table) == 1 and set(rank_rows(at)["steps"]) == {"0"}
    assert "02 / AGREE" in text(at)
    assert download_labels(at) == ["CSV", "JSON"]


def test_step_linked_local_skip_splits_the_ranks():
    at = open_page(STEP, workshop=True, step_variant="local_skip", step_inject="nan")
    assert (
        at.radio(key="step_variant").value == "local_skip"
        and at.selectbox(key="step_inject").value == "nan"
    )
    at.radio(key="step_ex_guess").set_value("split").run()
    reveal(at, "step_ex")
    assert any(
        "Right" in s.value and "one rank skips, the other steps" in s.value for s in at.success
    )
    assert "rank 1 skips, rank 0 steps" in text(at)
    at.selectbox(key="step_inject").set_value("none").run()  # new scenario: every rank steps
    assert not at.table
    reveal(at, "step_ex")
    assert any("every rank steps" in w.value for w in at.warning)


# ---------------------------------------------------------------- a stored two-process run


def rank_payloads(inject_rank, fsdp2_supported=True):
    """Rank outputs shaped like the clipping experiment's worker, with core's numbers."""
    from pclab.experiments.clipping.params import scenario_grads

    ranks = []
    for rank in (0, 1):
        scenarios = {}
        for name, inject in (("finite", None), ("overflow", inject_rank)):
            report = clipping.clip_report(scenario_grads(inject), 1.0, 8.0, 0.1, momentum=0.9)
            mine = report.outcomes["global"][rank]
            norm = report.global_norm if not report.skip else "inf"
            reference = {"skip": report.skip, "norm": norm, "params": report.params_after}
            reference["successful_steps"] = report.step_after
            fsdp2 = dict(reference, supported=True, local_scaled_grad=[1.0])
            if not fsdp2_supported:
                fsdp2 = {"supported": False, "reason": "not supported on this torch/backend: test"}
            scenarios[name] = {
                "protocol": {
                    "nonfinite_local": report.nonfinite[rank],
                    "skip": mine.skip,
                    "norm": mine.norm,
                    "coefficient": mine.coefficient,
                    "decision_agreed": True,
                    "params": mine.params,
                    "momentum_buffers": mine.momentum_buffers,
                    "successful_steps": mine.step,
                },
                "reference": reference,
                "fsdp2": fsdp2,
            }
        ranks.append(
            {
                "rank": rank,
                "world_size": 2,
                "backend": "gloo",
                "torch": "test",
                "inject_overflow": inject_rank,
                "nonfinite": "inf",
                "scenarios": scenarios,
            }
        )
    return ranks


def stored(page_key, params, ranks):
    from pclab.experiments.clipping.report import build_report
    from pclab.runners.results import RunResult

    report = build_report(tuple(ranks))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    result = RunResult.finished(tuple(ranks), 1.0, "x").with_report(report)
    at.session_state[page_key] = (params, result)
    return at


@pytest.mark.parametrize("drift, agrees", [(0.0, True), (1e-9, False)])
@pytest.mark.parametrize(
    "page, key, experiment",
    [(CLIP, "clip_run_result", "clipping"), (STEP, "step_run_result", "coordinated-step")],
)
def test_stored_run_is_shown_beside_core(monkeypatch, page, key, experiment, drift, agrees):
    from pclab.ui import downloads

    records = []
    record = downloads.run_record
    monkeypatch.setattr(
        downloads, "run_record", lambda *args: records.append(args[1:]) or record(*args)
    )
    ranks = rank_payloads(1)
    ranks[1]["scenarios"]["finite"]["protocol"]["params"]["shared"] += drift
    at = stored(key, {"inject_overflow": 1, "nonfinite": "inf"}, ranks)
    at.run()  # the entry script first: it registers the sections
    at.switch_page(page).run()
    assert not at.exception, at.exception
    table = at.dataframe[-1].value
    assert len(table) == 4 and list(table["rank"]) == ["rank 0", "rank 1"] * 2
    assert list(table["agrees"]) == (["yes"] * 4 if agrees else ["no", "no", "yes", "yes"])
    norms = [x for c in ("norm", "coefficient", "core_norm", "core_coefficient") for x in table[c]]
    assert "13" in norms and not [x for x in norms if x.startswith("+")]  # magnitudes: no sign
    assert bool(at.success) == agrees or page == STEP  # page 09 also shows a success for the skip
    assert any("does not match" in e.value for e in at.error) != agrees
    # Both tables as CSV and JSON, and the run's record with the parameters it was launched with.
    assert download_labels(at) == ["CSV", "CSV", "Download the run record (JSON)", "JSON", "JSON"]
    assert records[-1] == ({"inject_overflow": 1, "nonfinite": "inf"}, experiment)


def test_stored_run_without_fsdp2_says_so():
    at = stored(
        "step_run_result", {"inject_overflow": 1, "nonfinite": "inf"}, rank_payloads(1, False)
    )
    at.run()  # the entry script first: it registers the sections
    at.switch_page(STEP).run()
    assert any("not supported on this torch/backend: test" in w.value for w in at.warning)


def test_a_stored_run_for_other_parameters_is_not_shown():
    at = stored("step_run_result", {"inject_overflow": 0, "nonfinite": "inf"}, rank_payloads(0))
    at.run()  # the entry script first: it registers the sections
    at.switch_page(STEP).run()  # the page asks for an overflow on rank 1: a different experiment
    assert len(at.table) == 1 and not at.dataframe  # the rank table only


@pytest.mark.parametrize(
    "page, button, query, expected",
    [
        (CLIP, "clip_run", {}, {"inject_overflow": 1, "nonfinite": "inf"}),
        (
            STEP,
            "step_run",
            {"step_inject": "nan", "step_rank": "rank 0"},
            {"inject_overflow": 0, "nonfinite": "nan"},
        ),
        (STEP, "step_run", {"step_inject": "none"}, {"inject_overflow": None, "nonfinite": "inf"}),
    ],
)
def test_run_button_launches_with_the_page_parameters(monkeypatch, page, button, query, expected):
    """The button hands the page's scenario to the clipping experiment (replaced in the registry
    by a stand-in returning a report built from core-shaped rank outputs; the real launch is in
    tests/runners/)."""
    from pclab.experiments import registry
    from pclab.experiments.clipping import EXPERIMENT
    from pclab.experiments.clipping.report import build_report
    from pclab.runners.results import RunResult
    from pclab.ui import runs

    calls = []

    class FakeClipping:  # validated by the real Params, hashed as the real worker
        name, worker, params = EXPERIMENT.name, EXPERIMENT.worker, EXPERIMENT.params

        def run(self, params, progress=None, **_):
            calls.append({"inject_overflow": params.inject_overflow, "nonfinite": params.nonfinite})
            ranks = rank_payloads(1 if params.inject_overflow is None else params.inject_overflow)
            report = build_report(tuple(ranks))
            return RunResult.finished(tuple(ranks), 0.5, "x").with_report(report)

    real_get = registry.get
    monkeypatch.setattr(
        registry, "get", lambda name: FakeClipping() if name == "clipping" else real_get(name)
    )
    runs.clear()
    at = open_page(page, **query)
    assert len(at.table) == 1 and not at.dataframe
    at.button(key=button).click().run()
    assert not at.exception, at.exception
    assert calls == [expected]
    assert len(at.dataframe) == 1 and "yes" in set(at.dataframe[-1].value["agrees"])
    runs.clear()
