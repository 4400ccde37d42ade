"""How the "Check a trainer" page picks a bundled example and draws the trainer check's report.

Page-side only (sections/check_trainer.py is the page): the fixed list of example trainers
and the scheme each one applies (the exercise's answer key), the verdict table, the weights
grids as heat maps, the notes and skipped scenarios, and the "your own trainer" section.

The page never runs anything a visitor typed or uploaded: `bundled_path` builds a path only
from an option code of EXAMPLES (or an adapter's code), so the run can only ever see a file the
examples' index lists (examples/README.md).

    python -c "from pclab.ui import trainer_views as v; print(v.bundled_path('correct_manual'))"
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import update_weights
from pclab.experiments.trainer_check import examples, frameworks
from pclab.paths import shown
from pclab.ui import i18n, vega
from pclab.ui.language import lang, t
from pclab.ui.trainer_examples import (
    COUPLED_EXAMPLES,
    EXAMPLES,
    HF_EXAMPLES,
    RUN_EXAMPLES,
    SELF_CONTAINED,
    V2_EXAMPLES,
)

MODEL_FILE = examples.path_of("tiny_lm")  # the model every other example imports
HF_MODEL_FILE = examples.path_of("hf_trainer")  # the Trainer adapter the other HF files import
CAPACITY = 8 * 2  # tiny_lm's SEQ_LEN x BATCH_SIZE: the most labels a microbatch holds
# hf_trainer_no_first_label sets FIRST_POSITION_LABELLED = False: (SEQ_LEN - 1) x BATCH_SIZE
CAPACITIES = {"hf_trainer_no_first_label": 7 * 2}
WORLD_SIZES, ACCUM_STEPS = (1, 2, 4), (1, 2, 3)
FOLD_LINES = 80  # an example file longer than this is shown folded
# The colour scale: log, diverging around 1, saturating at 2/3 and 3/2, so a 0.8 / 1.25 cell
# is already more than half way to full colour (beyond, the cell's label gives the number).
WEIGHT_DOMAIN, WEIGHT_RANGE = (2 / 3, 3 / 2), ("#1f5fa8", "#efefef", "#b3530b")
SATURATED = (0.72, 1.38)  # beyond these a cell is dark enough for white ink
# Undefined cells: outline and word in a grey that reads on a light and a dark page (4.3:1).
UNDEFINED_INK = "#7b7b7b"
VERDICT_COLOURS = {"same_update": "green", "different": "red", "no_evidence": "orange"}
SKIP_REASONS = {  # experiments.trainer_check.scenarios' reasons -> catalogue codes
    "needs at least 2 microsteps": "needs_microsteps",
    "needs at least 2 ranks": "needs_ranks",
}
CLI_COMMAND = "pclab check my_trainer.py --json"
TORCHRUN_COMMAND = (
    "torchrun --standalone --nproc-per-node 4 -m pclab.experiments.trainer_check \\\n"
    "    --out-dir DIR --trainer my_trainer.py\ncat DIR/report.json"
)
PYTEST_SNIPPET = """from pclab.experiments.trainer_check import assert_same_update


def test_my_trainer_is_the_same_update():
    assert_same_update("my_trainer.py", world_size=2, accum=2)
"""


def bundled_path(code: str) -> Path:
    """The absolute path of a bundled example trainer or framework adapter (the "Frameworks,
    measured" page), from its option code alone."""
    pages = (*EXAMPLES, *COUPLED_EXAMPLES, *RUN_EXAMPLES)
    if code not in pages and code not in frameworks.ADAPTERS:
        known = ", ".join(dict.fromkeys([*pages, *frameworks.ADAPTERS]))
        raise ValueError(f"example={code!r} is not a bundled example: one of {known}")
    return examples.path_of(code)


def capacity(code: str) -> int:
    """The most labels one microbatch of this example holds."""
    return CAPACITIES.get(code, CAPACITY)


def shift_drops_labels(code: str) -> bool:
    """True for an HF example whose labels may sit at position 0, which a causal LM never
    predicts: its measured term counts can be smaller than the labels placed."""
    return code in HF_EXAMPLES and code not in CAPACITIES


def model_file(code: str) -> Path | None:
    """The file this example imports its model from (None: the model is in the file itself)."""
    if code in SELF_CONTAINED:
        return None
    return HF_MODEL_FILE if code in HF_EXAMPLES else MODEL_FILE


def example_code(code: str, installed_transformers: str) -> None:
    """The example's own file, then the file its model comes from, in an expander."""
    path = bundled_path(code)
    st.subheader(t("check.code.heading"))
    file = shown(path)
    hf = code in HF_EXAMPLES
    if hf:
        caption = t("check.code.caption_hf", file=file, version=installed_transformers)
    elif code in V2_EXAMPLES:
        caption = t(f"check.code.caption_v2.{code}", file=file, attribute=V2_EXAMPLES[code])
    else:
        caption = t("check.code.caption", file=file)
    st.caption(caption)
    source = path.read_text(encoding="utf-8")
    lines = source.count("\n") + 1
    if lines > FOLD_LINES:  # a long file folds, so Predict and Run stay near the top
        with st.expander(t("check.code.fold", file=file, lines=lines), icon=":material/code:"):
            st.code(source, language="python", line_numbers=True)
    else:
        st.code(source, language="python", line_numbers=True)
    if (model := model_file(code)) is not None:
        label = t("check.code.model_hf") if hf else t("check.code.model")
        with st.expander(label, icon=":material/code:"):
            st.code(model.read_text(encoding="utf-8"), language="python")


def say(group: str, code: str) -> str:
    """The translation of a report's code (`check.<group>.<code>`), else the code as is."""
    key = f"check.{group}.{code}"
    return t(key) if key in i18n.catalogue(lang()) else code


def scheme_name(scheme: str) -> str:
    return t(f"schemes.{scheme}")


def weight_rows(counts, weights, group: str) -> list[dict]:
    """One row per microbatch (r, k): its labels, weight x N and the label drawn in the cell.
    A cell without a weight (no labels, N = 0, not solvable) is `defined: False`, never 0."""
    grid = weights or [[None] * len(row) for row in counts]
    rows = []
    for r, (row_n, row_w) in enumerate(zip(counts, grid, strict=True)):
        for k, (n, w) in enumerate(zip(row_n, row_w, strict=True)):
            defined = w is not None and math.isfinite(w)
            text = f"{w:.3g}" if defined else t("common.undefined")
            rows.append(
                {
                    "group": group,
                    "rank": r,
                    "microstep": k,
                    "labels": n,
                    "weight": w if defined else None,
                }
                | {"defined": defined, "text": text}
            )
    return rows


def _colour_scale(weights: list[float]) -> alt.Scale:
    """Diverging around 1 (the global token mean). When every weight is positive, a log scale
    from 2/3 to 3/2 (a ratio reads the same both ways; beyond it the colour saturates and the
    cell's label gives the number); linear otherwise."""
    if weights and min(weights) > 0:
        low, high = WEIGHT_DOMAIN
        return alt.Scale(
            type="log", domain=[low, high], domainMid=1, clamp=True, range=list(WEIGHT_RANGE)
        )
    low, high = min([WEIGHT_DOMAIN[0], *weights]), max([WEIGHT_DOMAIN[1], *weights])
    return alt.Scale(domain=[low, high], domainMid=1, range=list(WEIGHT_RANGE))


def heat_map(rows: list[dict], order: list[str], key: str) -> None:
    """Weight x N grids, one panel per group: x = microstep k, y = rank r, coloured around 1.
    Undefined cells get no colour at all: a dashed outline and the word "undefined".

    The Vega-Lite spec is built once per grid and language (`_heat_map_spec`, cached: building
    and validating the Altair chart takes ~0.1 s, and the "Frameworks, measured" page draws
    sixteen of them on every rerun)."""
    spec = _heat_map_spec(json.dumps(rows), tuple(order), lang())
    st.vega_lite_chart(spec=spec, key=key)


@st.cache_data(show_spinner=False, max_entries=256)
def _heat_map_spec(rows_json: str, order: tuple[str, ...], language: str) -> dict:
    def say(key: str) -> str:
        return i18n.text(language, key)

    frame = pd.DataFrame(json.loads(rows_json))
    weights = [w for w, ok in zip(frame["weight"], frame["defined"]) if ok]
    tip = [
        alt.Tooltip("group:N", title=say("check.chart.group")),
        alt.Tooltip("rank:O", title=say("check.chart.rank")),
        alt.Tooltip("microstep:O", title=say("check.chart.microstep")),
        alt.Tooltip("labels:Q", title=say("check.chart.labels")),
        alt.Tooltip("text:N", title=say("check.chart.weight")),
    ]
    gaps = alt.Scale(paddingInner=0.08)  # cells apart by the page's own background
    base = alt.Chart().encode(
        x=alt.X(
            "microstep:O",
            title=say("check.chart.microstep"),
            axis=alt.Axis(labelAngle=0),
            scale=gaps,
        ),
        y=alt.Y("rank:O", title=say("check.chart.rank"), scale=gaps),
        tooltip=tip,
    )
    scale = _colour_scale(weights)
    ticks = [0.67, 0.8, 1, 1.25, 1.5] if scale.type == "log" else alt.Undefined
    legend = alt.Legend(values=ticks, orient="bottom", gradientLength=160, direction="horizontal")
    colour = alt.Color("weight:Q", scale=scale, title=say("check.chart.weight"), legend=legend)
    cells = base.mark_rect().encode(color=colour).transform_filter("datum.defined")
    # Undefined: no fill at all (the theme's background shows), a dashed outline and its word
    # in a grey that reads in both themes.
    empty = base.mark_rect(fill=None, stroke=UNDEFINED_INK, strokeWidth=1.5, strokeDash=[4, 3])
    empty = empty.transform_filter("!datum.defined")
    low, high = SATURATED
    dark = f"datum.weight < {low} || datum.weight > {high}"
    ink = alt.condition(dark, alt.value("white"), alt.value("#1a1a1a"))
    text = base.mark_text(fontSize=11).encode(text="text:N", color=ink)
    text = text.transform_filter("datum.defined")
    words = base.mark_text(fontSize=11, color=UNDEFINED_INK).encode(text="text:N")
    words = words.transform_filter("!datum.defined")
    height = 34 * (int(frame["rank"].max()) + 1)
    chart = (
        alt.layer(cells, empty, text, words)
        .properties(width=140, height=height)
        .facet(
            facet=alt.Facet(
                "group:N", sort=list(order), title=None, header=alt.Header(labelLimit=0)
            ),
            data=frame,
            columns=3,
        )
    )
    return vega.spec_of(chart)  # cached: half of the Frameworks page's rerun was this


def predicted_maps(counts) -> None:
    """The weight x N grid each named scheme predicts for `counts` (core.update_weights)."""
    schemes = update_weights.NAMED_SCHEMES
    names = [scheme_name(s) for s in schemes]
    rows = [
        row
        for scheme, name in zip(schemes, names, strict=True)
        for row in weight_rows(counts, update_weights.scheme_weights_times_n(counts, scheme), name)
    ]
    heat_map(rows, names, "chk_predicted")


def verdict_text(s: dict) -> str:
    """A scenario's verdict in words: same update, different, or no evidence (it matched the
    reference, but so would a wrong scheme: never read as a pass)."""
    return t(f"check.verdict.{s['verdict']}")


def verdict_badge(s: dict) -> str:
    """The verdict as a table cell: its words on its colour (Markdown badge, both themes)."""
    return f":{VERDICT_COLOURS[s['verdict']]}-badge[{verdict_text(s)}]"


def named(check: dict) -> list[dict]:
    """The check's scenarios, each naming one scheme: its measured one, or, where its counts
    fit several (an empty rank at K = 2: the mean of local means and a double ÷K give the
    same weights; equal counts: every scheme), the one another scenario measured without a
    tie, so a row's scheme, its notes and its fix line all name the trainer's scheme."""
    sure = {s["scheme"] for s in check["scenarios"] if len(s["matching_schemes"]) == 1}
    out = []
    for s in check["scenarios"]:
        tied = [x for x in s["matching_schemes"] if x in sure]
        shown = s["scheme"] if s["scheme"] in sure or not tied else tied[0]
        out.append(s | {"scheme": shown})
    return out


def scheme_text(s: dict) -> str:
    """A scenario's measured scheme as the verdict table words it: its name alone (the
    schemes these counts cannot tell from it go to the notes)."""
    if s["scheme"] is None:
        return t("check.results.scheme_undefined")
    return scheme_name(s["scheme"]) if s["scheme"] != "other" else t("check.results.other")


def own_trainer() -> None:
    """The command line for a visitor's own file: contract, command, exit codes, torchrun,
    pytest. Nothing here runs; the page only ever runs the bundled examples."""
    st.subheader(t("check.own.heading"))
    st.info(t("check.own.safety"), icon=":material/shield:")
    st.markdown(t("check.own.contract"))
    st.markdown(t("check.own.command"))
    st.code(CLI_COMMAND, language="bash")
    st.markdown(t("check.own.options"))
    st.markdown(t("check.own.exit_codes"))
    st.markdown(t("check.own.torchrun"))
    st.code(TORCHRUN_COMMAND, language="bash")
    st.markdown(t("check.own.pytest"))
    st.code(PYTEST_SNIPPET, language="python")
