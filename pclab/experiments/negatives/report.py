"""The negatives experiment's report: the ranks' outputs in one JSON, and the run beside core.

`build_report` is what `pclab run negatives --json` prints; `check_run` predicts
every number of a report from the inputs it says it used (`core.infonce.encoder_grads`) and
compares. A number that is missing or not finite is None and never agrees.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from pclab.core import validation as v
from pclab.core.infonce import SCHEMES, encoder_grads
from pclab.core.validation import finite_or_none
from pclab.experiments.base import ReportError


class SchemeResult(TypedDict):
    grad_wq: float
    grad_wd: float
    params_after_sgd: dict[str, float]
    ranks_agree: bool
    max_diff_from_reference: float
    ranks: list[dict]  # rank, local_loss, grad_wq_local, grad_wd_local, sha256


class NegativesReport(TypedDict):
    a: list[float]
    b: list[float]
    wq: float
    wd: float
    tau: float
    lr: float
    world_size: int
    backend: str
    reference: dict  # loss, grad_wq, grad_wd, params_after_sgd: single-process autograd
    schemes: dict[str, SchemeResult]


def build_report(ranks: tuple[dict, ...]) -> NegativesReport:
    """The CLI's JSON: the DDP result per scheme, per-rank detail, and the distance from the
    single-process reference. Raises ValueError if the ranks disagree on the inputs, and
    ReportError if the run produced non-finite numbers."""
    first = ranks[0]
    keys = ("a", "b", "wq", "wd", "tau", "lr", "world_size", "backend")
    if any(r[k] != first[k] for r in ranks for k in keys):
        raise ValueError("ranks disagree on the inputs")
    reference = first["reference"]
    schemes: dict[str, SchemeResult] = {}
    for name in SCHEMES:
        per_rank = [r["schemes"][name] for r in ranks]
        after = per_rank[0]
        schemes[name] = {
            "grad_wq": after["grad_wq"],
            "grad_wd": after["grad_wd"],
            "params_after_sgd": after["params_after_sgd"],
            # DDP's promise: every replica holds the same gradient and takes the same step
            "ranks_agree": all(
                s[k] == after[k]
                for s in per_rank
                for k in ("grad_wq", "grad_wd", "params_after_sgd")
            ),
            "max_diff_from_reference": max(
                abs(after["grad_wq"] - reference["grad_wq"]),
                abs(after["grad_wd"] - reference["grad_wd"]),
            ),
            "ranks": [
                {
                    "rank": r["rank"],
                    "local_loss": s["local_loss"],
                    "grad_wq_local": s["grad_wq_local"],
                    "grad_wd_local": s["grad_wd_local"],
                    "sha256": r["sha256"],
                }
                for r, s in zip(ranks, per_rank, strict=True)
            ],
        }
    report = NegativesReport(
        a=first["a"],
        b=first["b"],
        wq=first["wq"],
        wd=first["wd"],
        tau=first["tau"],
        lr=first["lr"],
        world_size=first["world_size"],
        backend=first["backend"],
        reference=reference,
        schemes=schemes,
    )
    if not _finite(report):
        raise ReportError(
            "the run produced non-finite numbers (tau too small or weights too large)"
        )
    return report


def _finite(value: object) -> bool:
    if isinstance(value, dict):
        return all(_finite(x) for x in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(x) for x in value)
    return not isinstance(value, float) or math.isfinite(value)


RUN_TOL = 1e-12  # a real float64 run vs the prediction: collectives only reorder sums (~1e-16)


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def check_run(report: dict, tol: float = RUN_TOL) -> tuple[dict, ...]:
    """A real run beside `encoder_grads`' prediction at the inputs the run reports it used.

    Per scheme: each rank's local loss and pre-DDP gradients, DDP's mean, w - lr * grad.
    Args:
        report: the runner's JSON ("a", "b", "wq", "wd", "tau", "lr"; per scheme in "schemes":
            "grad_wq", "grad_wd", "params_after_sgd", "ranks"[r]["local_loss", "grad_*_local"]).
        tol: largest |measured - predicted| that agrees (float64 collectives reorder sums).
    Returns:
        One row per scheme: predicted_wq/wd, measured_wq/wd, compared (how many numbers),
        max_abs_diff and agree. A missing or non-finite measurement is None, never agrees.
    """
    if not isinstance(report, dict) or not isinstance(report.get("schemes"), dict):
        raise v.InvalidInput("report", report, "non_empty")
    tol = _valid(v.non_negative, tol, "tol")
    wq, wd, lr = (_valid(v.finite, report.get(k), k) for k in ("wq", "wd", "lr"))
    tau: Any = report.get("tau")  # encoder_grads checks it (and a, b) with its own fields
    rows = []
    for scheme in SCHEMES:
        p = encoder_grads(report.get("a"), report.get("b"), wq, wd, tau, scheme)
        got = _dict(report["schemes"].get(scheme))
        after, ranks = _dict(got.get("params_after_sgd")), got.get("ranks") or []
        pairs = [(p.grad_wq, got.get("grad_wq")), (p.grad_wd, got.get("grad_wd"))]
        pairs += [(wq - lr * p.grad_wq, after.get("wq")), (wd - lr * p.grad_wd, after.get("wd"))]
        for r in range(p.world_size):
            m = _dict(ranks[r] if isinstance(ranks, list) and r < len(ranks) else None)
            for name in ("local_loss", "grad_wq_local", "grad_wd_local"):
                pairs.append((getattr(p, name)[r], m.get(name)))
        measured = [(want, finite_or_none(x)) for want, x in pairs]
        diffs = [abs(got - want) for want, got in measured if got is not None]
        worst = max(diffs) if len(diffs) == len(pairs) else None  # None: one is undefined
        rows.append(
            {
                "scheme": scheme,
                "predicted_wq": p.grad_wq,
                "measured_wq": finite_or_none(got.get("grad_wq")),
                "predicted_wd": p.grad_wd,
                "measured_wd": finite_or_none(got.get("grad_wd")),
                "compared": len(pairs),
                "max_abs_diff": worst,
                "agree": worst is not None and worst <= tol,
            }
        )
    return tuple(rows)


def agrees(report: dict) -> bool:
    """Every scheme's run matches core.infonce's prediction (`check_run`)."""
    return all(row["agree"] for row in check_run(report))


def _valid(check, value: object, field: str):
    """`check(value, field)`, a TypeError reported as the ValueError it is for a report."""
    try:
        return check(value, field)
    except TypeError as exc:
        raise v.InvalidInput(field, value, "finite") from exc
