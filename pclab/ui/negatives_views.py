"""Page 06's real run beside core: each scheme's predicted and measured gradients of the
shared encoder weights (experiments.negatives.report.check_run), and one verdict."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.elements.lib.column_types import ColumnConfig

from pclab.experiments.negatives import report as negatives_report
from pclab.ui import downloads, i18n
from pclab.ui.figures import fmt
from pclab.ui.language import lang, t

number = st.column_config.NumberColumn


def run_check(report: dict) -> None:
    """The table of a finished run's report against the prediction, and the verdict."""
    rows = negatives_report.check_run(report)
    used = {k: report[k] for k in ("a", "b", "wq", "wd", "tau", "lr", "backend")}
    st.caption(t("parameters.run.inputs", **used))
    text = {
        "scheme": lambda s: t(f"parameters.scheme.{s}"),
        "measured_wq": fmt,
        "measured_wd": fmt,
        "max_abs_diff": lambda x: fmt(None) if x is None else f"{x:.1e}",
        "agree": lambda ok: t("common.yes") if ok else t("common.no"),
    }
    table = pd.DataFrame(
        [{k: text[k](x) if k in text else x for k, x in row.items()} for row in rows]
    )
    labels = {k: t(f"parameters.run.{'diff' if k == 'max_abs_diff' else k}") for k in table.columns}
    config: dict[str, str | ColumnConfig] = {**labels}
    config.update({k: number(labels[k], format="%+.6f") for k in ("predicted_wq", "predicted_wd")})
    data = pd.DataFrame(rows)  # the download: numbers as numbers
    downloads.table(
        table, "run-check", data=data, hide_index=True, column_config=config, key="par_run_table"
    )
    if all(row["agree"] for row in rows):
        worst = f"{max(row['max_abs_diff'] for row in rows):.1e}"
        st.success(
            t("parameters.run.agree_all", tol=f"{negatives_report.RUN_TOL:.0e}", diff=worst),
            icon=":material/check:",
        )
    else:
        failing = [t(f"parameters.scheme.{r['scheme']}") for r in rows if not r["agree"]]
        schemes = i18n.join(lang(), failing)
        st.warning(t("parameters.run.disagree", schemes=schemes), icon=":material/warning:")
