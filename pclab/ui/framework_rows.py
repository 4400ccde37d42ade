"""The rows of the "Frameworks, measured" page (sections/frameworks.py): one bordered row per
framework setting of the recorded table (pclab/artifacts/framework_checks.json, written by
`python -m pclab.experiments.trainer_check.frameworks`), with its verdict, measured scheme,
weight x N grid (ui.trainer_views' heat map; a coupled row: the objective its step minimised,
its factors and residual), one line on what to set and the upstream issues.

A row whose framework this server's Python has runs live: its Run button checks the bundled
adapter through ui.run_panel (the warm pool, the cache the "Check a trainer" page shares: the
same trainer file, P = 2, the setting's K), and the measured record replaces the recorded
one. The rest are shown from their record, labelled with the versions that made it, and say
why they cannot run here.

    python -c "from pclab.ui import framework_issues as f; print(f.ISSUES['torchtitan'])"
"""

from __future__ import annotations

import datetime

import pandas as pd
import streamlit as st

from pclab.experiments.trainer_check import frameworks
from pclab.experiments.trainer_check.frameworks import installed_version
from pclab.ui import downloads, first_run, i18n
from pclab.ui import trainer_views as views
from pclab.ui.framework_issues import issue_links
from pclab.ui.language import lang, t
from pclab.ui.plain_text import plain
from pclab.ui.run_panel import run_panel
from pclab.ui.trainer_coupled import sizes_text

VERDICT_CODES = ("same_update", "different", "no_evidence")  # a check's status, as recorded
REFERENCE_SCHEMES = ("global_token", "global_batch")  # the one-process objective, measured


def records() -> list[tuple[frameworks.Setting, dict]]:
    """Every setting with its record (by its code), in the table's order; a setting not
    recorded yet is left out."""
    recorded = frameworks.by_code()
    return [(s, recorded[s.code]) for s in frameworks.SETTINGS if s.code in recorded]


@st.cache_data(ttl=60, show_spinner=False)
def installed_versions() -> dict[str, str | None]:
    """Each table package's version in the server's Python (None: not installed), read once a
    minute: 2 ms a package, and every row asks."""
    return {s.package: installed_version(s.package) for s in frameworks.SETTINGS}


def why_not_here(setting: frameworks.Setting, recorded: dict) -> str | None:
    """Why this row cannot run on this server (None: it can). A reason that names the
    framework's version takes it from the row's record ({version}), never typed in the text."""
    code = setting.code
    version = plain(recorded["version"])
    if setting.adapter is None:
        return t(f"frameworks.reason.{code}", version=version)
    if installed_versions()[setting.package] is None:
        key = f"frameworks.reason.{code}"
        if key in i18n.catalogue(lang()):
            return t(key, version=version)
        if pin := frameworks.NO_DEPS.get(setting.package):
            return t("frameworks.reason.not_installed_no_deps", pin=pin)  # ours, in a code span
        return t("frameworks.reason.not_installed", package=plain(setting.package))
    if not views.bundled_path(code).is_file():  # an installed wheel carries no examples/
        return t("frameworks.reason.no_examples")
    return None


def when(iso: str) -> str:
    """A recorded moment as the page shows it: 2026-12-02 16:20 UTC."""
    moment = datetime.datetime.fromisoformat(iso).astimezone(datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def provenance(record: dict, live: bool) -> str:
    """Which versions made the shown result, and when (or: here, just now)."""
    package, torch = plain(record["package"]), plain(record["torch"])
    version = plain(record["version"] + frameworks.also_label(record))  # + transformers 5.24.0
    if live:
        return t("frameworks.measured_here", package=package, version=version, torch=torch)
    when_recorded = when(record["recorded_at"])
    if record["package"] == "torch":
        return t("frameworks.recorded_torch", torch=torch, date=when_recorded)
    return t(
        "frameworks.recorded", package=package, version=version, torch=torch, date=when_recorded
    )


def verdict_text(record: dict) -> str:
    """The check's verdict in words (three, never "pass" for a control), or "not run here"
    for a row that was never measured."""
    status = record["status"]  # None: never measured
    return t("frameworks.not_run") if status is None else views.verdict_text({"verdict": status})


def failed_in(record: dict) -> str | None:
    """Why a row differs when its measured scheme is the one-process objective's: the
    scenarios it failed (torchtune, label 0 masked: no labels, N = 0), in the reader's words;
    None when the scheme already says why (or nothing failed)."""
    if record["status"] != "different" or record["scheme"] not in REFERENCE_SCHEMES:
        return None
    failed = [n for n, passed in record.get("scenarios", {}).items() if passed is False]
    names = [views.say("scenario", n) for n in failed]
    return t("frameworks.failed_in", scenarios=i18n.join(lang(), names)) if names else None


def verdict(record: dict) -> str:
    """The verdict on its colour (a Markdown badge, both themes)."""
    status = record["status"]
    if status is None:
        return f":gray-badge[{verdict_text(record)}]"
    return views.verdict_badge({"verdict": status})


def coupled(record: dict) -> bool:
    """A coupled check's record (a loss over in-batch negatives): a scheme of the coupled
    mode, a factor and residual, no weight per label."""
    return record.get("mode") == "coupled"


def scheme(record: dict) -> str:
    if record["scheme"] is None:
        return t("frameworks.nothing_measured")
    if coupled(record):  # the coupled mode's schemes (pools, paths, scaled)
        return t(f"coupled.scheme.{record['scheme']}")
    return views.scheme_text({"scheme": record["scheme"]})


def advice(setting: frameworks.Setting, recorded: dict, shown: dict) -> str:
    """One line on what to set: the row's own advice while the measured scheme is the one it
    was written for; otherwise the scheme a live run measured, said plainly."""
    if shown["scheme"] != recorded["scheme"]:
        return t("frameworks.changed", scheme=scheme(shown), recorded=scheme(recorded))
    return t(f"frameworks.advice.{setting.code}", version=plain(recorded["version"]))


def live_record(setting: frameworks.Setting, result) -> dict | None:
    """The record a finished live run makes (frameworks.measured), or None when the check
    could not use the file (no scenario ran: the recorded row stays)."""
    if result is None:
        return None
    check = result.report["checks"][0]
    if not check["scenarios"]:
        st.error(t("frameworks.unusable"), icon=":material/error:")
        return None
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return frameworks.measured(setting, check, now)


def _run(setting: frameworks.Setting):
    """The Run button (ui.run_panel) and its kept result."""
    params = {
        "trainer": str(views.bundled_path(setting.code)),
        "world_size": frameworks.WORLD_SIZE,
        "accum": setting.accum,
    }
    return run_panel(
        "trainer_check",
        params,
        key=f"fw_run_{setting.code}",
        button=t("frameworks.run"),
        label=t("frameworks.run_label", framework=plain(setting.framework), file=setting.code),
    )


def summary(shown: list[tuple[frameworks.Setting, dict]]) -> None:
    """Every shown row once more as one table (downloadable): the verdict on its colour, and
    in words in the download."""

    def frame(say_verdict) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "framework": setting.framework,
                "version": frameworks.version_label(record),  # which package's version
                "setting": t(f"frameworks.setting.{setting.code}"),
                "default": t("common.yes") if setting.default else t("common.no"),
                "scheme": scheme(record),
                "verdict": " ".join(filter(None, (say_verdict(record), failed_in(record)))),
            }
            for setting, record in shown
        )

    config = {c: t(f"frameworks.col.{c}") for c in frame(verdict).columns}
    data = frame(verdict_text)
    downloads.table(
        frame(verdict),
        "frameworks",
        data=data,
        static=True,
        # "deepspeed 0.19.8" may wrap at its space: kept on one line, the versions pushed the
        # table past the main column at the projector's width (tests/e2e/test_projector_walk)
        one_line_headers=("default",),  # 默认 over 是/否: never one character a line
        column_config=config,
    )


def _factors(record: dict) -> None:
    """A coupled finding's factor: the named objective's on every parameter, each parameter
    group's (scaled: one group per distinct factor), or none fits (other: the best single)."""
    factor = "—" if record["factor"] is None else f"{record['factor']:.6g}"
    if record["scheme"] == "other":
        st.markdown(t("frameworks.no_factor", factor=factor))
    elif not record["scale_groups"]:  # a named objective: its factor fits every parameter
        st.markdown("- " + t("frameworks.factor_everywhere", factor=factor))
    for group in record["scale_groups"]:
        # in code spans, as the check page shows them (a bundled model's parameter names)
        parameters = i18n.join(lang(), [f"`{p}`" for p in group["parameters"]])
        factor = f"{group['factor']:.6g}"
        st.markdown("- " + t("coupled.explain.factor", factor=factor, parameters=parameters))


def _coupled_finding(record: dict) -> None:
    """A coupled row's right column (no grid: a coupled loss has no weight per label): P, K
    and the items per microbatch, the objective the uneven_microsteps step minimised, each
    scenario's scheme, the factor (_factors) and the fit's residual."""
    sizes = sizes_text(record["sizes"])
    world_size, accum = frameworks.WORLD_SIZE, record["accum"]
    st.markdown(t("frameworks.coupled_items", world_size=world_size, accum=accum, sizes=sizes))
    if record["scheme"] is not None:
        objective = t(f"coupled.explain.{record['scheme']}")
        st.markdown(t("frameworks.coupled_objective", objective=objective))
        _factors(record)
    schemes = [
        i18n.join(lang(), [name, t(f"coupled.scheme.{found}") if found else "—"], "head")
        for name, found in record["schemes"].items()
    ]
    st.caption(t("frameworks.coupled_schemes", schemes=i18n.join(lang(), schemes)))
    residual = record["residual"]
    residual = "—" if residual is None else f"{residual:.1e}"
    st.caption(t("frameworks.residual", residual=residual))


def _grid(code: str, record: dict) -> None:
    if coupled(record):
        _coupled_finding(record)
        return
    if record["weights"] is None:
        st.caption(t("frameworks.no_grid"))
        return
    counts = " / ".join(i18n.join(lang(), map(str, row)) for row in record["counts"])
    group = t("frameworks.grid", counts=counts)
    views.heat_map(views.weight_rows(record["counts"], record["weights"], group), [group], code)


def row(setting: frameworks.Setting, recorded: dict) -> dict:
    """One row: the setting, its verdict, scheme, advice, issues, provenance, Run (where the
    framework is installed here) and the weight x N grid. Returns the record shown."""
    code = setting.code
    with st.container(border=True, key=f"fw_row_{code}"):
        title = f"**{t(f'frameworks.setting.{code}')}**"
        if setting.default:
            title += f" :blue-badge[{t('frameworks.default')}]"
        st.markdown(title)
        left, right = st.columns([3, 2])
        top = left.container()
        reason = why_not_here(setting, recorded)
        if not reason and (ops := first_run.to_compile(setting.package)):
            ops_text = i18n.join(lang(), [f"`{op}`" for op in ops])
            left.warning(t("frameworks.first_compile", ops=ops_text), icon=":material/timer:")
        with left:
            live = None if reason else live_record(setting, _run(setting))
        shown = live or recorded
        with top:
            st.markdown(t("frameworks.verdict_line", verdict=verdict(shown), scheme=scheme(shown)))
            st.markdown(advice(setting, recorded, shown))
            if links := issue_links(code):
                st.markdown(links)
            st.caption(provenance(shown, live is not None))
            if reason:
                st.info(reason, icon=":material/block:")
            if recorded["reason"]:
                with st.expander(t("frameworks.recorded_reason")):
                    st.markdown(plain(recorded["reason"]))
            installed = installed_versions()[setting.package]
            if not reason and live is None and installed != recorded["version"]:
                st.caption(t("frameworks.other_version", version=plain(installed)))
        with right:
            _grid(f"fw_map_{code}", shown)
    return shown
