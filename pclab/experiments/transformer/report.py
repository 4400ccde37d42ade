"""The Transformer experiment's report: every branch's worst |delta| over the ranks beside
what the theory predicts for it, the equal-count control, and N = 0."""

from __future__ import annotations

from typing import TypedDict

from pclab.experiments.transformer.lm import data
from pclab.experiments.transformer.params import TOLERANCE, expected_correct, rank_windows


class TransformerReport(TypedDict):
    tolerance: float
    labels: list[int]
    num_valid_labels: int
    world_size: int
    backend: str
    windows: list[dict]  # document, index, capacity, padding, rank
    branches: list[dict]  # one row per (optimizer, branch): see _merge
    equal_count_control: dict  # labels, branches
    zero_labels: dict  # skip_state_identical, naive_changed, by_optimizer
    rank_output_sha256: list[str]


def _merge(ranks: tuple[dict, ...], key: str, labels, world_size: int) -> list[dict]:
    """One row per (optimizer, branch): the worst rank's |delta|, every rank's hash."""
    rows = []
    for i, first in enumerate(ranks[0][key]):
        per = [r[key][i] for r in ranks]
        if any((p["name"], p["optimizer"]) != (first["name"], first["optimizer"]) for p in per):
            raise ValueError("ranks ran different branches")
        diffs = [p["max_abs_diff"] for p in per]
        divergence = next(
            (
                {**p["first_divergence"], "rank": r}
                for r, p in enumerate(per)
                if p["first_divergence"]
            ),
            None,
        )
        rows.append(
            {
                "name": first["name"],
                "optimizer": first["optimizer"],
                "expected_correct": expected_correct(first["name"], labels, world_size),
                "status": first["status"],
                "reason": first["reason"],
                "loss": first["loss"],
                "max_abs_diff": None if None in diffs else max(diffs),
                "max_abs_diff_state": None
                if any(p["max_abs_diff_state"] is None for p in per)
                else max(p["max_abs_diff_state"] for p in per),
                "passed": all(p["passed"] for p in per),
                "first_divergence": divergence,
                "divergence_by_stage": per[0]["divergence_by_stage"],
                "rank_hashes": [p["hash"] for p in per],
                "param_diffs": {
                    n: max(p["param_diffs"][n] for p in per) for n in first["param_diffs"]
                },
            }
        )
    return rows


def build_report(ranks: tuple[dict, ...]) -> TransformerReport:
    """The CLI's JSON from every rank's output (ValueError if the ranks disagree on inputs)."""
    first = ranks[0]
    for key in ("labels", "optimizers", "world_size", "control_labels"):
        if any(r[key] != first[key] for r in ranks):
            raise ValueError(f"ranks disagree on {key}")
    labels, world_size = tuple(first["labels"]), first["world_size"]
    zero = {name: [r["zero_labels"][name] for r in ranks] for name in first["zero_labels"]}
    naive_changed = []
    for name, per in zero.items():
        for kind in per[0]["naive_changed"]:
            naive_changed.append(f"{name}.{kind}")
    windows = data.experiment_windows()
    return {
        "tolerance": TOLERANCE,
        "labels": list(labels),
        "num_valid_labels": sum(labels),
        "world_size": world_size,
        "backend": first["backend"],
        "windows": [
            {
                "document": w.document,
                "index": w.index,
                "capacity": w.capacity,
                "padding": w.padding,
                "rank": r,
            }
            for r, rows in enumerate(rank_windows(world_size))
            for w in (windows[i] for i in rows)
        ],
        "branches": _merge(ranks, "main", labels, world_size),
        "equal_count_control": {
            "labels": first["control_labels"],
            "branches": _merge(ranks, "control", tuple(first["control_labels"]), world_size),
        },
        "zero_labels": {
            "skip_state_identical": all(
                p["skip_status"] == "skipped"
                and not p["skip_changed"]
                and p["skip_hash"] == p["initial_hash"]
                for per in zero.values()
                for p in per
            ),
            "naive_changed": naive_changed,
            "by_optimizer": {
                name: {
                    "naive_changed": per[0]["naive_changed"],
                    "naive_max_weight_change": max(p["naive_max_weight_change"] for p in per),
                    "steps_before": per[0]["steps_before"],
                    "steps_after_naive": per[0]["steps_after_naive"],
                    "ranks_agree": len({(tuple(p["naive_changed"]), p["skip_hash"]) for p in per})
                    == 1,
                }
                for name, per in zero.items()
            },
        },
        # each rank's signed JSON payload; no timings inside, so equal inputs sign equally
        "rank_output_sha256": [r["sha256"] for r in ranks],
    }


def agrees(report: dict) -> bool:
    """Every branch passes exactly when the theory (core.ledger) says it is the same update,
    in the uneven run and the equal-count control, and N = 0 is a coordinated skip."""
    blocks = (report["branches"], report["equal_count_control"]["branches"])
    rows = [row for block in blocks for row in block]
    theory = all(row["passed"] == (row["expected_correct"] is True) for row in rows)
    return theory and bool(report["zero_labels"]["skip_state_identical"])
