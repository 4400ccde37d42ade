"""A real run of the negatives experiment beside `core.infonce.encoder_grads`' prediction.

The runner (runners/negatives.py) reports, per scheme, each rank's local loss and pre-DDP
gradients, DDP's mean and the parameters after one SGD step; `check_run` predicts every one
of those numbers from the inputs the run says it used and compares. A number that is
missing or not finite is None and never agrees.
"""

from __future__ import annotations

from core import validation as v
from core.infonce import SCHEMES, _checked, encoder_grads, finite_or_none

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
    tol = _checked(v.non_negative, tol, "tol")
    wq, wd, lr = (_checked(v.finite, report.get(k), k) for k in ("wq", "wd", "lr"))
    rows = []
    for scheme in SCHEMES:
        p = encoder_grads(report.get("a"), report.get("b"), wq, wd, report.get("tau"), scheme)
        got = _dict(report["schemes"].get(scheme))
        after, ranks = _dict(got.get("params_after_sgd")), got.get("ranks") or []
        pairs = [(p.grad_wq, got.get("grad_wq")), (p.grad_wd, got.get("grad_wd"))]
        pairs += [(wq - lr * p.grad_wq, after.get("wq")), (wd - lr * p.grad_wd, after.get("wd"))]
        for r in range(p.world_size):
            m = _dict(ranks[r] if isinstance(ranks, list) and r < len(ranks) else None)
            for name in ("local_loss", "grad_wq_local", "grad_wd_local"):
                pairs.append((getattr(p, name)[r], m.get(name)))
        diffs = [None if finite_or_none(x) is None else abs(finite_or_none(x) - want) for want, x in pairs]
        worst = None if None in diffs else max(diffs)
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
