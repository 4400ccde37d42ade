"""The coupled examples of the "Check a trainer" page (issue 28): a bundled trainer whose loss
of one item depends on the others (in-batch negatives, BatchNorm), its code, the real check
run on it, and its verdict: same update, different or no evidence; its diagnoses, each in the
reader's language as the token view says them (trainer_diagnoses.text); the scheme the step
optimised with its explanation in the reader's language; a scaled update's factor per
parameter group; and a fix line linking the pages that teach it (04 to 06).

Like the token examples, only a fixed option code reaches a path (trainer_views.bundled_path).

    python -c "from pclab.ui.trainer_examples import COUPLED_EXAMPLES; print(COUPLED_EXAMPLES)"
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pclab.experiments.trainer_check import examples
from pclab.experiments.trainer_check.coupled_scenarios import scenario_sizes
from pclab.ui import i18n, trainer_diagnoses
from pclab.ui import trainer_views as views
from pclab.ui.exercise import predict_choice
from pclab.ui.input_errors import guard
from pclab.ui.language import lang, page_link, t
from pclab.ui.pages import PAGES
from pclab.ui.run_panel import run_panel
from pclab.ui.show_code import show_code
from pclab.ui.trainer_examples import COUPLED_EXAMPLES, SELF_CONTAINED

CHECK_PAGE = "pclab/sections/check_trainer.py"
MODEL_FILE = examples.path_of("tiny_embedder")  # the model the embedding examples import
TEACHES = {  # scheme -> the pages (pclab.ui.pages keys) that teach its fix
    "rank_pool": ("negatives", "parameters"),
    "microbatch_pool": ("limits", "negatives"),
    "microstep_pool": ("limits",),
    "remote_detached": ("negatives", "parameters"),
    "query_path_only": ("negatives", "parameters"),
    "scaled": ("parameters",),
    "other": ("limits", "negatives", "parameters"),
}
# Schemes whose pool at P > 1 is one rank's too: the fix shares it across ranks as well
# (coupled.fix.across_ranks.<scheme>; at P = 1 coupled.fix.<scheme> is the whole fix).
ACROSS_RANKS = ("microbatch_pool",)
STATUS_BOX = {"same_update": st.success, "different": st.error, "no_evidence": st.warning}


def link_to_coupled_check() -> None:
    """Pages 05 and 06: a link to this page's GradCache example (deep-linked)."""
    page = next(p for p in PAGES if p.file == CHECK_PAGE)
    page_link(
        CHECK_PAGE,
        label=t("coupled.to_check", page=t(page.title_key)),  # the page's own title
        icon=":material/troubleshoot:",
        chk_example="gradcache",
    )


def names() -> dict[str, str]:
    """Option code -> the example's name in this render's language."""
    return {code: t(f"coupled.example.{code}") for code in COUPLED_EXAMPLES}


def section(example: str, world_size: int, accum: int) -> None:
    """The whole page below the controls for a coupled example."""
    with guard():
        path = views.bundled_path(example)
        st.markdown(t("coupled.intro"))
        st.code(path.read_text(encoding="utf-8"), language="python")
        if example not in SELF_CONTAINED:
            with st.expander(t("coupled.model")):
                st.code(MODEL_FILE.read_text(encoding="utf-8"), language="python")
        sizes = scenario_sizes(world_size, accum)["uneven_microsteps"]
        st.caption(t("coupled.scenarios", sizes=sizes_text(sizes)))
        if _predicted(example):  # in workshop mode the run waits for the reveal
            _run(example, path, world_size, accum)
    st.markdown(t("coupled.own"))
    # Imported here: both import torch, which pages 05 and 06 (linking to this page's
    # helpers) must not pay for on every render.
    from pclab.core import coupled_objectives, coupled_schemes

    show_code(coupled_schemes.solve_schemes, coupled_objectives.candidate_gradient)


def _predicted(example: str) -> bool:
    """Predict, then reveal: which objective the file's step minimises (its answer key,
    COUPLED_EXAMPLES), among every objective the check can name. True once figures may show."""
    from pclab.core.coupled_objectives import NAMED_SCHEMES  # torch: see section()

    options = (*NAMED_SCHEMES, "scaled")
    question = t("coupled.exercise", example=names()[example])
    why = t(f"coupled.answer.{example}")
    scheme = COUPLED_EXAMPLES[example]
    labels = {s: t(f"coupled.scheme.{s}") for s in options}  # in this run's language
    return predict_choice(
        "chk_coupled_ex", question, options, scheme, why, labels.__getitem__, scenario=example
    )


def _run(example: str, path, world_size: int, accum: int) -> None:
    st.subheader(t("coupled.run.heading"))
    params = {"trainer": str(path), "world_size": world_size, "accum": accum}
    label = t("coupled.run.label", example=names()[example], world_size=world_size, accum=accum)
    result = run_panel(
        "trainer_check",
        params,
        key="chk_coupled_run",
        button=t("coupled.run.button"),
        label=label,
        primary=True,
    )
    if result is not None:
        results(result.report["checks"][0])


def sizes_text(grid: list[list[int]] | tuple[tuple[int, ...], ...]) -> str:
    """Items per microbatch, rank by rank, headed as the reader's language heads a list:
    "0: 3 + 2 · 1: 3 + 2" (in Chinese "0：3 + 2 · 1：3 + 2")."""
    rows = (i18n.join(lang(), [r, " + ".join(map(str, row))], "head") for r, row in enumerate(grid))
    return " · ".join(rows)


def fix_key(scheme: str, world_size: int) -> str:
    """The catalogue key of the fix for `scheme` at P = `world_size`: a pool per microbatch
    is at P > 1 also a pool per rank, and its fix shares across both."""
    if world_size > 1 and scheme in ACROSS_RANKS:
        return f"coupled.fix.across_ranks.{scheme}"
    return f"coupled.fix.{scheme}"


def results(check: dict) -> None:
    """The verdict of one coupled check: banner, table, the schemes explained, the fix."""
    status = check["status"]
    STATUS_BOX.get(status, st.error)(t(f"coupled.status.{status}"))
    for d in check["diagnoses"]:
        if d["code"] != "no_evidence":  # the banner says it
            words = trainer_diagnoses.text(d, check)
            st.caption(i18n.join(lang(), [f"`{d['code']}`", words], "head"))
    if not check["scenarios"]:
        return
    st.table(frame(check))
    shown = dict.fromkeys(s["scheme"] for s in check["scenarios"] if s["scheme"])
    for scheme in shown:
        name, explain = t(f"coupled.scheme.{scheme}"), t(f"coupled.explain.{scheme}")
        st.markdown(t("coupled.scheme_line", name=name, code=scheme, explain=explain))
    for group in next((s["scale_groups"] for s in check["scenarios"] if s["scale_groups"]), []):
        parameters = i18n.join(lang(), [f"`{p}`" for p in group["parameters"]])
        st.markdown(
            "- "
            + t("coupled.explain.factor", factor=f"{group['factor']:.6g}", parameters=parameters)
        )
    wrong = next((s["scheme"] for s in check["scenarios"] if s["verdict"] == "different"), None)
    if wrong in TEACHES:
        fix = t(fix_key(wrong, check["world_size"]))
        st.markdown(i18n.join(lang(), [f"**{t('coupled.fix.heading')}**", fix], "head"))
        for key in TEACHES[wrong]:
            page = next(p for p in PAGES if p.key == key)
            label = t("coupled.fix.link", page=t(page.title_key))
            page_link(page.file, label=label, icon=":material/school:")


def frame(check: dict) -> pd.DataFrame:
    """One row per scenario, in the reader's language (scheme codes in parentheses)."""
    rows = []
    for s in check["scenarios"]:
        also = [t(f"coupled.scheme.{m}") for m in s["matching_schemes"] if m != s["scheme"]]
        diff = s["max_abs_diff"]
        rows.append(
            {
                t("coupled.column.scenario"): views.say("scenario", s["name"]),
                t("coupled.column.items"): sizes_text(s["sizes"]),
                t("coupled.column.verdict"): views.verdict_text(s),  # the token view's words
                t("coupled.column.scheme"): "—"
                if s["ranks_agree"] is None  # failed: nothing measured (its diagnosis says)
                else t(f"coupled.scheme.{s['scheme'] or 'other'}"),
                t("coupled.column.also"): i18n.join(lang(), also) if also else "—",
                t("coupled.column.max_abs_diff"): "—" if diff is None else f"{diff:.1e}",
            }
        )
    return pd.DataFrame(rows)
