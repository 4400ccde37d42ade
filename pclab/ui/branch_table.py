"""The Full Transformer page's branch table: one row per branch and optimizer, the theory's
verdict, and (after a real run) the measured gap, pass/fail, where it first diverged and
each rank's output hash - short on the page, whole in the downloads."""

from __future__ import annotations

import pandas as pd

from pclab.ui import downloads
from pclab.ui.figures import fmt
from pclab.ui.language import t

HASH_SHOWN = 8  # hex digits of each rank's state hash on the page (the downloads: all 64)
UNBROKEN = ("max_abs_diff",)  # "3.00e-02" on one line
WHOLE_WORDS = ("theory", "passed")  # 不同的更新, 在容差内: never one character a line
VERDICTS = {True: "same", False: "different", None: "undefined"}  # expected_correct -> verdict code


def verdict(code: str) -> str:
    return t(f"experiment.verdict.{code}")


def first(row: dict) -> str:
    where = row["first_divergence"] or {"stage": "none", "tensor": None}
    if where["stage"] == "undefined":
        side = "microbatch" if row["name"].startswith("accum") else "rank"
        return t(f"experiment.undefined.{side}")
    tensor = f" · {where['tensor']}" if where["tensor"] else ""
    return t(f"experiment.stage.{where['stage']}") + tensor


def table(rows: list[dict], key: str, extra: tuple[str, ...] = ()) -> None:
    """One row per branch; `extra` adds measured columns from a run's report."""
    prepare(rows, key, extra).draw()


def prepare(rows: list[dict], key: str, extra: tuple[str, ...] = ()) -> downloads.PreparedTable:
    """`table`, computed but not drawn yet (downloads.PreparedTable)."""
    data = pd.DataFrame(
        {
            "branch": t(f"experiment.branch.{r['name']}"),
            "optimizer": t(f"experiment.optimizer.{r['optimizer']}"),
            "theory": verdict(VERDICTS[r["expected_correct"]]),
            "max_abs_diff": r.get("max_abs_diff"),
            "passed": bool(r.get("passed")),
            "first": first(r) if extra else "",
            "hashes": " / ".join(h or "—" for h in r.get("rank_hashes", ())),
        }
        for r in rows
    )
    shown = data.assign(
        max_abs_diff=[fmt(None) if pd.isna(x) else f"{x:.2e}" for x in data["max_abs_diff"]],
        passed=[t("common.yes") if x else t("common.no") for x in data["passed"]],
        # "a, b": a narrow column wraps after the comma, never a "/" alone on a line
        hashes=[", ".join(h[:HASH_SHOWN] for h in x.split(" / ")) for x in data["hashes"]],
    )
    columns = ["branch", "optimizer", "theory", *extra]
    config = {k: t(f"experiment.results.{k}") for k in columns}
    name = key.removeprefix("exp_")
    # The measured table has seven columns: as an st.table its cells wrap, so at 800 px (the
    # sidebar open) every header and hash stays in view instead of scrolling off unseen; a
    # figure such as 3.00e-02 is never split at its hyphen.
    measured = bool(extra)

    def shown_of(styled: tuple[str, ...]) -> list[str]:  # a styled column the table has
        return [c for c in styled if c in columns] if measured else []

    return downloads.prepare_table(
        shown[columns],
        name,
        data=data[columns],
        static=measured,
        unbroken=shown_of(UNBROKEN),
        whole_words=shown_of(WHOLE_WORDS),
        hide_index=True,
        key=key,
        column_config=config,
    )
