"""The real clipping run as pages 08 and 09 show it: one row per scenario and rank, the real
decision beside core's prediction. On the page a skipped step reads "skipped" and figures
are rounded; the download holds the numbers (an empty cell where a step was skipped)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pclab.runners.results import RunResult
from pclab.ui import downloads
from pclab.ui.figures import magnitude
from pclab.ui.language import t
from pclab.ui.rank_table import rank_label

FIGURES = ("norm", "coefficient", "core_norm", "core_coefficient")  # magnitudes: shown unsigned
VERDICTS = ("skip", "core_skip", "agrees")


def clipping_summary_rows(report: dict) -> list[dict]:
    """One row per scenario and rank, the real decision beside core's prediction, for a page.

    Language-neutral values: scenario ("finite" | "overflow"), inject_rank, rank, skip, norm,
    coefficient (None when skipped), params ("id=value, ..."), core_skip, core_norm,
    core_coefficient, agrees (ranks identical and matching core, clip_grad_norm_ and FSDP2).
    """
    rows = []
    for name, s in report["scenarios"].items():
        core = s["core"]
        agrees = (
            s["ranks_identical"]
            and s["agree_core"]
            and s["agree_reference"]
            and s["agree_fsdp2"] is not False
        )
        for r in s["ranks"]:
            rows.append(
                {
                    "scenario": name,
                    "inject_rank": (s["inject"] or {}).get("rank"),
                    **{k: r[k] for k in ("rank", "skip", "norm", "coefficient")},
                    "params": ", ".join(f"{j}={x:.6f}" for j, x in sorted(r["params"].items())),
                    **{f"core_{k}": core[k] for k in ("skip", "norm", "coefficient")},
                    "agrees": agrees,
                }
            )
    return rows


def run_table(result: RunResult, key: str) -> None:
    """The run's rows as a table (with CSV/JSON downloads) and whether everything agreed."""
    rows = clipping_summary_rows(result.report)
    data = pd.DataFrame(rows).drop(columns="inject_rank")
    data["scenario"] = [
        t(f"clipping.scenario_{r['scenario']}", rank=r["inject_rank"]) for r in rows
    ]
    data["rank"] = data["rank"].map(rank_label)
    shown = data.copy()
    for column in FIGURES:  # None is a skipped step: said, never NaN or a 0
        shown[column] = [t("common.skipped") if x is None else magnitude(x) for x in data[column]]
    for column in VERDICTS:
        shown[column] = [t("common.yes") if x else t("common.no") for x in data[column]]
    labels = {c: t(f"clipping.run_col.{c}") for c in data.columns}
    downloads.table(shown, "run-check", data=data, hide_index=True, column_config=labels, key=key)
    agree = result.report["agree"]
    (st.success if agree else st.error)(t(f"clipping.run_{'agree' if agree else 'disagree'}"))


def clipping_results(result: RunResult) -> None:
    """Page 08: the run's table, and whether FSDP2's own clipping agrees on the finite case."""
    run_table(result, "clip_run_table")
    yes_no = {True: t("common.yes"), False: t("common.no")}
    finite = result.report["scenarios"]["finite"]
    agrees = yes_no.get(finite["agree_fsdp2"])
    if finite["fsdp2"]["supported"]:
        st.caption(t("clipping.fsdp2_line", norm=finite["fsdp2"]["norm"], agree=agrees))
    else:
        st.warning(t("clipping.fsdp2_unsupported", reason=finite["fsdp2"]["reason"]))


def step_results(result: RunResult) -> None:
    """Page 09: the run's table, and each FSDP2 scenario that could not run or that every
    rank skipped (with each shard's scaled gradient)."""
    run_table(result, "step_run_table")
    for name, s in result.report["scenarios"].items():
        if not s["fsdp2"]["supported"]:
            st.warning(t("clipping.fsdp2_unsupported", reason=s["fsdp2"]["reason"]))
        elif name == "overflow" and all(r["skip"] for r in s["fsdp2_ranks"]):
            shards = " · ".join(
                f"{rank_label(r['rank'])}: {r['local_scaled_grad']}" for r in s["fsdp2_ranks"]
            )
            st.caption(t("step.fsdp2_overflow", shards=shards))
