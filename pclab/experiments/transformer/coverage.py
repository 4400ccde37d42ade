"""Section 07's evidence from a real Transformer run: its report's branches, mapped onto the
coverage matrix's rows and columns (core.coverage), so the matrix fills from a real launch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pclab.core import validation as v
from pclab.core.coverage import Evidence

# The real two-process Transformer run (experiments.transformer): which of its branches is a
# row's correct computation and which its slip. Every run accumulates two microbatches; a
# padded (non-full) tail window is the tail; the DDP branches cover a row only when the
# run's labels give the ranks that situation.
TRANSFORMER_BRANCHES = {
    "accumulation_window": ("accum_global_n", "accum_microbatch_mean"),
    "tail_batch": ("accum_global_n", "accum_microbatch_mean"),
    "unequal_lengths": ("ddp_pn_scale", "ddp_mean_of_means"),
    "empty_label_replica": ("ddp_pn_scale", "ddp_mean_of_means"),
}
TRANSFORMER_COLUMNS = ("loss", "parameters")  # the gaps its report gives as numbers


def _records(report: object, key: str, fields: tuple[str, ...]) -> list[Mapping]:
    """report[key] as a list of records, each holding `fields`; ValueError naming it otherwise."""
    if not isinstance(report, Mapping):
        raise TypeError(f"report={report!r} is not a mapping (an experiments.transformer report)")
    items = report.get(key)
    if not isinstance(items, list | tuple) or any(
        not isinstance(item, Mapping) or not set(fields) <= item.keys() for item in items
    ):
        raise v.InvalidInput(
            key, items, "same_shape", f"a list of records with {', '.join(fields)}"
        )
    return list(items)


def transformer_rows(report: Mapping) -> tuple[str, ...]:
    """The rows a Transformer run exercises (its windows are listed in label order).

    Args: an experiments.transformer report: "windows" [{"rank", "padding"}] and "labels", one
        whole-number count per window.
    """
    windows = _records(report, "windows", ("rank", "padding"))
    labels = report.get("labels")
    if not isinstance(labels, list | tuple) or len(labels) != len(windows):
        raise v.InvalidInput(
            "labels", labels, "same_shape", f"one count per window ({len(windows)})"
        )
    rank_counts: dict[int, int] = {}
    for i, (count, window) in enumerate(zip(labels, windows)):
        rank = v.count(window["rank"], f"windows[{i}].rank")
        rank_counts[rank] = rank_counts.get(rank, 0) + v.count(count, f"labels[{i}]")
    rows = ["accumulation_window"]
    if any(v.count(w["padding"], f"windows[{i}].padding") > 0 for i, w in enumerate(windows)):
        rows.append("tail_batch")
    if len(set(rank_counts.values())) > 1:
        rows.append("unequal_lengths")
    if 0 in rank_counts.values() and sum(rank_counts.values()) > 0:
        rows.append("empty_label_replica")
    return tuple(rows)


def evidence_from_transformer(report: Mapping | None) -> tuple[Evidence, ...]:
    """Evidence from an experiments.transformer report; () when there is no report.

    Per row, the correct and the slip branch are compared with the full batch of the same
    optimizer, and the worse optimizer counts:
        loss        |loss_branch - loss_full_batch|   (None when the branch is undefined)
        parameters  the report's max |theta_branch - theta_full_batch| after the update
    The run compares gradients too but reports them only where they exceed its tolerance,
    and it does not clip, so those cells stay without a number from this source.
    """
    if not isinstance(report, Mapping) or not report.get("branches"):
        return ()
    tolerance = v.non_negative(report.get("tolerance"), "tolerance")
    by_name: dict[str, list[Mapping]] = {}
    for i, branch in enumerate(
        _records(report, "branches", ("name", "optimizer", "loss", "max_abs_diff"))
    ):
        if not (isinstance(branch["name"], str) and isinstance(branch["optimizer"], str)):
            raise v.InvalidInput(
                f"branches[{i}]", branch, "same_shape", "name and optimizer as text"
            )
        by_name.setdefault(branch["name"], []).append(branch)
    reference = {b["optimizer"]: b for b in by_name.get("full_batch", [])}

    def number(x: object, field: str) -> float | None:  # None: the run had no figure
        return None if x is None else v.number(x, field)

    def worst(name: str, column: str) -> float | None:
        gaps = []
        for branch in by_name.get(name, []):
            if column == "parameters":
                gaps.append(number(branch["max_abs_diff"], "max_abs_diff"))
            else:  # no full-batch run of this optimizer: no reference, no gap
                ref = number(reference.get(branch["optimizer"], {}).get("loss"), "loss")
                loss = number(branch["loss"], "loss")
                gaps.append(None if loss is None or ref is None else abs(loss - ref))
        defined = [g for g in gaps if g is not None and math.isfinite(g)]
        return max(defined) if gaps and len(defined) == len(gaps) else None

    out = []
    for row in transformer_rows(report):
        correct, slip = TRANSFORMER_BRANCHES[row]
        for column in TRANSFORMER_COLUMNS:
            out.append(
                Evidence(
                    row,
                    column,
                    "torchrun",
                    worst(correct, column),
                    tolerance,
                    worst(slip, column),
                    True,
                )
            )
    return tuple(out)
