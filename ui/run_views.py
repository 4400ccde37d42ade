"""Rows a page draws from a real run's report: language-neutral values, translated by the page.

Page-side helpers, not part of any experiment: how a report is laid out in a table or chart
is the pages' business (sections 08 and 09 share the clipping rows; the experiment page and
its tests the chart rows).
"""

from __future__ import annotations


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


DIFF_FLOOR = 1e-20  # where an exact 0 is drawn on a log axis (which has no 0)


def transformer_chart_rows(branches: list[dict], floor: float = DIFF_FLOOR) -> list[dict]:
    """One row per (branch, optimizer, parameter tensor) with |delta| after the update, for a
    log-scale chart: an exact 0 is plotted at `floor` and flagged `exact_zero`."""
    return [
        {
            "branch": row["name"],
            "optimizer": row["optimizer"],
            "tensor": tensor,
            "abs_diff": diff,
            "plotted": max(diff, floor),
            "exact_zero": diff == 0.0,
        }
        for row in branches
        for tensor, diff in row["param_diffs"].items()
    ]
