"""The Hugging Face Trainer on the "Check a trainer" page: the installed transformers version and
what the check measured for the two settings of `average_tokens_across_devices`, side by side.

The grids are a recorded real run (artifacts/hf_trainer_check.json, written by
`python -m pclab.experiments.trainer_check.hf_recorded`), labelled with the transformers version
that made it; the run panel above measures the installed one for real. Nothing here imports
transformers: the server reads its version from the package metadata.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pclab.experiments.trainer_check import hf_recorded
from pclab.ui import downloads, i18n
from pclab.ui import trainer_views as views
from pclab.ui.language import lang, t

ADVICE = ("global_token", "replica_mean")  # measured schemes with advice of their own
SAME_SETTING_AS = {"hf_trainer_no_first_label": "hf_trainer"}  # a file that imports another's


def installed() -> str:
    """The installed transformers version, or the words for "not installed"."""
    return hf_recorded.installed_version("transformers") or t("check.hf.not_installed")


def _scenario(check: dict, name: str) -> dict:
    return next(s for s in check["scenarios"] if s["name"] == name)


def _weights(weights) -> str:
    """The distinct measured weights x N of a grid, to 3 significant digits."""
    seen = dict.fromkeys(f"{w:.3g}" for row in weights or [] for w in row if w is not None)
    return i18n.join(lang(), seen) or t("common.undefined")


def empty_weights(empty: dict | None) -> str:
    """The empty-rank scenario's weights x N of the ranks that hold labels: "the other rank's"
    at P = 2, each rank named at P > 2 (P - 1 other ranks, one value each); at P = 1 the
    check has no such scenario (None), and says it measured none."""
    if empty is None:
        return t("check.hf.empty.none")
    grid = empty["weights"] or []
    held = [(r, row) for r, row in enumerate(grid) if any(w is not None for w in row)]
    if len(held) <= 1:
        return t("check.hf.empty.one", weights=_weights(grid))
    ranks = [t("check.hf.empty.rank", rank=r, weights=_weights([row])) for r, row in held]
    return t("check.hf.empty.many", weights=i18n.join(lang(), ranks, "clauses"))


def setting(example: str) -> str:
    """The example's `average_tokens_across_devices`, as code (ValueError for a non-HF one)."""
    recorded = SAME_SETTING_AS.get(example, example)
    if recorded not in hf_recorded.SETTINGS:
        raise ValueError(f"example {example!r} is none of {views.HF_EXAMPLES}")
    value = hf_recorded.SETTINGS[recorded]
    return f"`average_tokens_across_devices={value}`"


def advised(check: dict) -> str | None:
    """The measured scheme the setting's sentence already says how to fix (None: none)."""
    scheme = _scenario(check, "uneven")["scheme"]
    return scheme if scheme in ADVICE else None


def advice(example: str, check: dict) -> str:
    """One sentence on what to set, chosen by the scheme the check measured (not assumed)."""
    uneven = _scenario(check, "uneven")
    empty = next((s for s in check["scenarios"] if s["name"] == "empty_rank"), None)  # P > 1
    scheme = advised(check) or "other"
    return t(
        f"check.hf.advice.{scheme}",
        setting=setting(example),
        scheme=views.scheme_name(uneven["scheme"]) if scheme == "other" else "",
        weights=_weights(uneven["weights"]),
        empty=empty_weights(empty),
    )


def _table(check: dict, verdict=views.verdict_badge) -> pd.DataFrame:
    """One row per scenario: its verdict (three states, each on its colour) and scheme."""
    return pd.DataFrame(
        {
            "scenario": views.say("scenario", s["name"]),
            "verdict": verdict(s),
            "scheme": views.scheme_text(s),
        }
        for s in views.named(check)
    )


def measured() -> None:
    """Both settings' weight grids (uneven counts) side by side, each with its verdicts and one
    sentence on what to set, then what the label count shows."""
    recorded = hf_recorded.load()
    version = recorded["versions"]["transformers"]
    st.subheader(t("check.hf.heading"))
    st.caption(t("check.hf.caption", version=version, date=recorded["recorded"], now=installed()))
    if hf_recorded.installed_version("transformers") != version:
        st.info(t("check.hf.other_version", version=version), icon=":material/info:")
    checks = recorded["checks"]
    names = {example: setting(example).strip("`") for example in checks}
    rows = [
        row
        for example, check in checks.items()
        for row in views.weight_rows(
            _scenario(check, "uneven")["counts"],
            _scenario(check, "uneven")["weights"],
            names[example],
        )
    ]
    views.heat_map(rows, list(names.values()), "chk_hf_measured")
    config = {c: t(f"check.results.{c}") for c in ("scenario", "verdict", "scheme")}
    for column, (example, check) in zip(st.columns(len(checks)), checks.items(), strict=True):
        with column:
            st.markdown(advice(example, check))
            plain = _table(check, views.verdict_text)
            downloads.table(
                _table(check), f"hf-{example}", data=plain, static=True, column_config=config
            )
    default = _scenario(checks["hf_trainer"], "uneven")
    placed, terms = sum(map(sum, default["label_positions"])), sum(map(sum, default["counts"]))
    st.markdown(
        t(
            "check.hf.shift",
            placed=placed,
            terms=terms,
            ratio=f"{terms / placed:.3g}",
            weights=_weights(default["weights"]),
        )
    )
