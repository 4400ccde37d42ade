"""The run-mode examples of the "Check a trainer" page (issue 41): a bundled loop over epochs
(`train_loop`), its code, the real check run on it through the run panel (warm pool, cached,
as every example), and its report update by update. Per scenario: its verdict and what it
can support (claims), the first update that parts from the one-process run, a strip of its
updates and the learning rate per update (ui.trainer_run_figures), every update's numbers,
its diagnoses in the reader's language (trainer_diagnoses.text) and a fix line per finding
with a link to the page that teaches it. A resumable loop (issue 42) adds the timeline of its
kill points: where it was killed, where it resumed, where it parts from the uninterrupted run.

Only a fixed option code reaches a path (trainer_views.bundled_path), as for every example.

    python -c "from pclab.ui.trainer_examples import RUN_EXAMPLES; print(*RUN_EXAMPLES)"
"""

from __future__ import annotations

import ast
from pathlib import Path

import streamlit as st

from pclab.experiments.trainer_check import examples
from pclab.experiments.trainer_check.codes import CODES
from pclab.experiments.trainer_check.run_scenarios import EPOCHS, microbatches_per_epoch
from pclab.experiments.trainer_check.run_summary import window_rerun
from pclab.paths import EXAMPLES_ROOT, shown
from pclab.ui import i18n, trainer_diagnoses
from pclab.ui import trainer_run_figures as figures
from pclab.ui import trainer_views as views
from pclab.ui.input_errors import guard
from pclab.ui.language import lang, page_link, t
from pclab.ui.pages import PAGES
from pclab.ui.run_panel import run_section
from pclab.ui.trainer_examples import COUPLED_LOOPS, COUPLED_MODEL, RUN_EXAMPLES, RUN_SHARED
from pclab.ui.trainer_verdict import tensor_name

RESUMED = ("uneven", "uneven_items")  # the scenario a resume check replays, by mode
POOL_FIXES = ("rank_pool", "microbatch_pool", "microstep_pool")  # coupled.fix.<pool> says how
TEACHES = {  # a run diagnosis -> the page (pclab.ui.pages key) that teaches its fix
    "tail_window_scaled": "across",
    "tail_window_dropped": "across",
    "gradient_leak": "limits",
    "steps_per_window": "limits",
    "scheduler_rate": "across",
    "schedule_length": "across",
    "scheduler_on_skip": "across",
}


def names() -> dict[str, str]:
    """Option code -> the run example's name in this render's language."""
    return {code: t(f"check.run_mode.example.{code}") for code in RUN_EXAMPLES}


def resumable(path: Path) -> bool:
    """True for a loop that takes `checkpoint_dir` (read from its file, never imported)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == "train_loop":
            return "checkpoint_dir" in [a.arg for a in node.args.args]
    return False


def shared_module(code: str) -> Path:
    """The module the example's neighbours share (run_loop.py, framework_run.py; a contrastive
    loop's model, tiny_embedder.py)."""
    if code in COUPLED_LOOPS:
        return examples.path_of(COUPLED_MODEL)
    folder = examples.path_of(code).relative_to(EXAMPLES_ROOT).parts[0]
    return examples.path_of(RUN_SHARED[folder])


def windows_text(microbatches: int, accum: int) -> str:
    """An epoch's windows: "2 + 2 + 1" (K = 2, M = 5)."""
    sizes = [min(accum, microbatches - start) for start in range(0, microbatches, accum)]
    return " + ".join(map(str, sizes))


def section(example: str, world_size: int, accum: int) -> None:
    """The whole page below the controls for a run-mode example."""
    with guard():
        path, shared = views.bundled_path(example), shared_module(example)
        coupled = example in COUPLED_LOOPS  # a contrastive loop: the global pool a window
        st.markdown(t("check.run_mode.intro_coupled" if coupled else "check.run_mode.intro"))
        if resumable(path):
            st.info(t("check.run_mode.resumable"), icon=":material/restart_alt:")
        st.subheader(t("check.code.heading"))
        st.caption(t("check.run_mode.code_caption", file=shown(path), shared=shared.name))
        source = path.read_text(encoding="utf-8")
        lines = source.count("\n") + 1
        if lines > views.FOLD_LINES:
            with st.expander(t("check.code.fold", file=shown(path), lines=lines)):
                st.code(source, language="python", line_numbers=True)
        else:
            st.code(source, language="python", line_numbers=True)
        with st.expander(t("check.run_mode.shared", file=shared.name), icon=":material/code:"):
            st.code(shared.read_text(encoding="utf-8"), language="python")
        m = microbatches_per_epoch(accum)
        shape = {"epochs": EPOCHS, "microbatches": m, "accum": accum}
        caption = "check.run_mode.scenarios_coupled" if coupled else "check.run_mode.scenarios"
        st.caption(t(caption, windows=windows_text(m, accum), **shape))
        st.subheader(t("check.run_mode.run.heading"))
        st.markdown(t("check.run_mode.run.body"))
        label = t(
            "check.run_mode.run.label",
            example=names()[example],
            world_size=world_size,
            accum=accum,
        )
        run_section(
            "trainer_check",
            {"trainer": str(path), "world_size": world_size, "accum": accum},
            show=lambda result: results(result.report["checks"][0], example),
            key="chk_loop_run",
            button=t("check.run_mode.run.button"),
            label=label,
            primary=True,
        )
    st.markdown(t("check.run_mode.own"))


def _is_resume(d: dict) -> bool:
    return d.get("code") in CODES and "points" in CODES[d["code"]].details


def _said(found: list[dict], check: dict) -> None:
    """Diagnoses in the reader's language, as a list under "Why"."""
    if found:
        st.markdown(t("check.results.why"))
        st.markdown("\n".join(f"- {trainer_diagnoses.text(d, check)}" for d in found))


def _fixes(found: list[dict]) -> None:
    """One fix line per code found, each with a link to the page that teaches it (if any)."""
    known = i18n.catalogue(lang())
    codes = [
        c for c in dict.fromkeys(d["code"] for d in found) if f"check.run_mode.fix.{c}" in known
    ]
    if not codes:
        return
    st.markdown(t("check.run_mode.results.what_to_change"))
    for code in codes:
        st.markdown(f"- {t(f'check.run_mode.fix.{code}')}")
    for key in dict.fromkeys(TEACHES[c] for c in codes if c in TEACHES):
        page = next(p for p in PAGES if p.key == key)
        label = t("check.fix.link", page=t(page.title_key))
        page_link(page.file, label=label, icon=":material/school:")


def banner(check: dict) -> None:
    """The run's status, never over-claimed, then its run-wide diagnoses (not a kill point's:
    the resume section says those)."""
    status, scenarios = check["status"], check["scenarios"]
    named = lambda found: i18n.join(lang(), [views.say("scenario", s["name"]) for s in found])  # noqa: E731
    untold = [s for s in scenarios if s["verdict"] == "no_evidence"]
    if status == "same_update":
        st.success(t("check.run_mode.results.passed"), icon=":material/check:")
        if untold:
            st.info(t("check.run_mode.results.untold", scenarios=named(untold)))
    elif status == "different":
        failed = [s for s in scenarios if s["verdict"] == "different"]
        if failed:
            st.error(
                t("check.run_mode.results.failed", scenarios=named(failed)), icon=":material/error:"
            )
        parted = [e for e in check.get("resume") or () if e["verdict"] == "different"]
        if parted:
            points = i18n.join(lang(), [views.say("run_mode.point", e["point"]) for e in parted])
            st.error(
                t("check.run_mode.results.resume_failed", points=points), icon=":material/error:"
            )
    elif status == "no_evidence":
        unplaced = any(e["verdict"] == "no_evidence" for e in check.get("resume") or ())
        key = "no_evidence_resume" if unplaced else "no_evidence"
        st.warning(t(f"check.run_mode.results.{key}"), icon=":material/help:")
    else:
        st.error(t("check.results.unusable"), icon=":material/error:")
    found = [d for d in check["diagnoses"] if d.get("scenario") is None and not _is_resume(d)]
    _said(found, check)


def results(check: dict, example: str) -> None:
    """Everything a finished run check shows."""
    st.subheader(t("check.run_mode.results.heading"))
    shape = {"world_size": check["world_size"], "accum": check["accum_steps"]}
    worst = max([check["tolerance"], *(s.get("tolerance", 0.0) for s in check["scenarios"])])
    epochs = check.get("epochs") or EPOCHS
    caption = t(
        "check.run_mode.results.caption",
        example=names()[example],
        epochs=epochs,
        tolerance=f"{worst:.0e}",
        **shape,
    )
    st.caption(caption)
    banner(check)
    if not check["scenarios"]:  # an unusable file: its diagnoses say why
        return
    tabs = st.tabs(
        [views.say("scenario", s["name"]) for s in check["scenarios"]], key="chk_loop_tabs"
    )
    for tab, s in zip(tabs, check["scenarios"], strict=True):
        with tab:
            scenario(s, check)
    for skipped in check["skipped_scenarios"]:
        reason = views.SKIP_REASONS.get(skipped["reason"])
        why = t(f"check.skipped.{reason}") if reason else skipped["reason"]
        name = views.say("scenario", skipped["name"])
        st.caption(t("check.skipped.item", scenario=name, reason=why))
    if check.get("resume"):
        resume(check)


def _first_divergence(s: dict, accum: int) -> str:
    d = s.get("first_divergence")
    if d is None:
        return t("check.run_mode.scenario.no_divergence")
    if d.get("update") is None or d["update"] >= len(s["updates"]):
        return t("check.run_mode.scenario.unplaced")
    if d.get("rank") is None:
        detail = t("check.results.ranks_differ")
    else:
        tensor = tensor_name(d["tensor"])
        detail = t("check.results.divergence", rank=d["rank"], tensor=tensor)
    if d.get("why") not in (None, "differs"):
        why = views.say("divergence_why", d["why"])
        detail = i18n.join(lang(), [detail, why], "clauses")
    where = figures.where(s["updates"][d["update"]], accum)
    return t("check.run_mode.scenario.first_divergence", where=where, detail=detail)


def scenario(s: dict, check: dict) -> None:
    """One scenario's tab: verdict and claims, first divergence, strip, rates, numbers,
    diagnoses and fixes."""
    accum = check["accum_steps"]
    claims = [t(f"check.run_mode.claim.{c}") for c in s.get("claims", ())]
    claimed = i18n.join(lang(), claims) if claims else t("check.run_mode.scenario.nothing")
    st.markdown(
        t("check.run_mode.scenario.verdict", verdict=views.verdict_badge(s), claims=claimed)
    )
    notes = [views.say("note", n) for n in s.get("notes", ())]
    if notes:
        st.caption(i18n.join(lang(), notes, "sentences"))
    if s.get("updates"):
        st.markdown(_first_divergence(s, accum))
        steps = {"steps": s.get("steps"), "reference": s.get("reference_steps")}
        st.caption(t("check.run_mode.scenario.steps", **steps))
        rows = figures.strip_rows(s, accum)
        figures.strip(rows, key=f"chk_loop_strip_{s['name']}")
        coupled = "sizes" in s  # a contrastive loop's: each cell names a pool, not weights
        st.caption(t(f"check.run_mode.scenario.strip_caption{'_coupled' if coupled else ''}"))
        order = [r["where"] for r in rows]
        figures.rates(figures.rate_rows(s, accum), order, key=f"chk_loop_lr_{s['name']}")
        st.caption(t("check.run_mode.scenario.lr_caption"))
        with st.expander(t("check.run_mode.scenario.table"), icon=":material/table_rows:"):
            frame = figures.update_frame(s, accum)
            config = {
                c: st.column_config.TextColumn(t(f"check.run_mode.column.{c}")) for c in frame
            }
            st.dataframe(
                frame, hide_index=True, column_config=config, key=f"chk_loop_updates_{s['name']}"
            )
    found = [d for d in check["diagnoses"] if d.get("scenario") == s["name"]]
    _said(found, check)
    _pools(s, accum)
    _fixes(found)


def _pools(s: dict, accum: int) -> None:
    """A contrastive loop's full windows that took their loss over another pool than the
    window's global one (no code of its own): what that pool is and how to fix it."""
    full = {u.get("scheme") for u in s.get("updates", ()) if u["microsteps"] == accum}
    for pool in sorted(p for p in full if p in POOL_FIXES):
        st.markdown(t("check.run_mode.results.pool", pool=t(f"coupled.scheme.{pool}"), code=pool))
        st.markdown(f"- {t(f'coupled.fix.{pool}')}")


def resume(check: dict) -> None:
    """A resumable loop's kill points: the timeline, one table row each, their diagnoses."""
    st.subheader(t("check.run_mode.resume.heading"))
    st.caption(t("check.run_mode.resume.caption"))
    entries, accum = check["resume"], check["accum_steps"]
    # the scenario the kill points replay: uneven (a contrastive loop's first, uneven_items)
    uneven = next((s for s in check["scenarios"] if s["name"] in RESUMED), None)
    updates = (uneven or {}).get("updates") or []
    if updates:
        figures.timeline(figures.timeline_rows(entries, updates, accum), key="chk_loop_timeline")
    frame = figures.resume_frame(entries, updates, accum)
    config = {c: st.column_config.TextColumn(t(f"check.run_mode.resume.{c}")) for c in frame}
    st.dataframe(frame, hide_index=True, column_config=config, key="chk_loop_resume")
    for e in entries:
        if window_rerun(e):  # a documented limit, said as such (HF: checkpoints at updates)
            point = views.say("run_mode.point", e["point"])
            killed, resumed = e["killed_at"], e["resumed_from"]
            st.caption(
                t("check.run_mode.resume.window_rerun", point=point, killed=killed, resumed=resumed)
            )
    found = [d for d in check["diagnoses"] if _is_resume(d)]
    _said(found, check)
    _fixes(found)
