"""InfoNCE over global negatives: which document gradient each parallel scheme keeps.

n logical ranks each own one pair (q_i, d_i): a scalar or an m-vector. Similarity is the
un-normalised dot product over a temperature tau; query i's positive is its own d_i:

    s_ij = q_i . d_j / tau,   p_ij = exp(s_ij) / sum_k exp(s_ik),
    L = (1/n) sum_i L_i,      L_i = -log p_ii,
    dL/dd_j = (1/(n tau)) sum_i (p_ij - [i=j]) q_i.

Every d_j is in every query's candidate set, so its gradient sums one term per query. A
common implementation scores only each rank's local query and detaches remote documents
without compensation: d_j keeps only its owner's term. `encoder_grads` follows shared
encoder scalars (q_i = wq a_i, d_i = wd b_i) through each parallel scheme and DDP's mean.
n = 1 is accepted: one pair has no negative, so loss and gradients are exactly 0 (as in
the `local` scheme). Check the example with `python -m doctest core/infonce.py`:
    >>> round(contrastive([1, 2], [1, -1], 1.0).loss, 6)
    2.072539
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, overload

import numpy as np

from pclab.core import validation as v
from pclab.core.scenarios import InfoNCESeed

SCHEMES = ("gather", "detach", "local", "full_loss_each_rank")
CORRECT_SCHEME = "gather"
# The seed page's example: two logical ranks, encoder scalars evaluated at wq = wd = 1.
SEED = InfoNCESeed(
    q=(1.0, 2.0), d=(1.0, -1.0), tau=1.0, a=(1.0, 2.0), b=(1.0, -1.0), wq=1.0, wd=1.0
)
SWEEP_TAUS = tuple(round(0.1 * 10 ** (k / 20), 6) for k in range(41))  # 0.1 .. 10, log-spaced

Rep = float | tuple[float, ...]  # one representation (or its gradient): scalar or m-vector


@dataclass(frozen=True)
class Contrastive:
    tau: float
    logits: tuple[tuple[float, ...], ...]  # [query i][document j] s_ij
    probs: tuple[tuple[float, ...], ...]  # [i][j] p_ij; each row sums to 1
    per_query_loss: tuple[float, ...]  # L_i = -log p_ii, not divided by n
    loss: float  # the mean (1/n) sum_i L_i
    grad_d_full: tuple[Rep, ...]  # sum over every query: the objective's gradient
    grad_d_local: tuple[Rep, ...]  # only the owner's query: what local-query + detach keeps
    grad_q: tuple[Rep, ...]  # dL/dq_i (with 1/n)
    max_grad_diff: float  # largest |full - kept| over every document element
    # (p - onehot, q, tau, vector): the table below is built from these on first use only -
    # n*n*m numbers (16.8 million at 512 pairs of 64-vectors) that most callers never read.
    _table_inputs: tuple[np.ndarray, np.ndarray, float, bool] = field(repr=False, compare=False)

    @cached_property
    def contributions(self) -> tuple[tuple[Rep, ...], ...]:
        """[i][j]: query i's part of dL/dd_j (with 1/n); column sums are grad_d_full."""
        coeff, q, tau, vector = self._table_inputs
        n = len(q)
        return tuple(tuple(_rep(c, vector) for c in row) for row in _per_doc(coeff, q, tau) / n)


@dataclass(frozen=True)
class EncoderGrads:
    scheme: str
    world_size: int
    local_loss: tuple[float, ...]  # the loss each rank back-propagates
    grad_wq_local: tuple[float, ...]  # per rank, before DDP
    grad_wd_local: tuple[float, ...]
    grad_wq: float  # after DDP's mean over ranks
    grad_wd: float
    reference_wq: float  # d(mean loss)/dwq: what the update should apply
    reference_wd: float
    correction_wq: float | None  # reference / grad_wq: the factor still needed; None if grad is 0
    correction_wd: float | None


_SEQUENCES = (list, tuple, np.ndarray)  # ordered; a str, set or dict is not a representation


def _checked(check: Callable[[object, str], float], value: object, field: str) -> float:
    """A `validation` check that also turns an int too large for float64 into a ValueError."""
    try:
        return check(value, field)
    except OverflowError:
        raise v.InvalidInput(field, "an integer beyond float64", "finite") from None


def _representations(values: object, field: str) -> tuple[np.ndarray, bool]:
    """A length-n sequence of numbers or of equal-length sequences -> (n, m) array, is_vector."""
    if not isinstance(values, _SEQUENCES) or len(values) == 0:
        raise v.InvalidInput(field, values, "non_empty")
    items = list(values)
    vector = all(isinstance(x, _SEQUENCES) for x in items)
    mixed = not vector and any(isinstance(x, _SEQUENCES) for x in items)
    if mixed or vector and (len(items[0]) == 0 or any(len(x) != len(items[0]) for x in items)):
        raise v.InvalidInput(
            field, values, "rectangular", "all numbers or all equal-length vectors"
        )
    # A row of plain finite floats needs no per-number call (checks 10x faster at 512 x 64).
    rows = [
        x
        if all(type(c) is float and math.isfinite(c) for c in x)
        else [
            _checked(v.finite, c, f"{field}[{i}]" + (f"[{k}]" if vector else ""))
            for k, c in enumerate(x)
        ]
        for i, x in enumerate(items if vector else [[x] for x in items])
    ]
    return np.array(rows, dtype=float), vector


def _pair(
    left: object, right: object, names: tuple[str, str]
) -> tuple[np.ndarray, np.ndarray, bool]:
    x, x_vector = _representations(left, names[0])
    y, y_vector = _representations(right, names[1])
    if x.shape != y.shape or x_vector != y_vector:
        shape = f"{len(x)} numbers" if not x_vector else f"{x.shape[0]} vectors of {x.shape[1]}"
        raise v.InvalidInput(names[1], right, "same_shape", f"like {names[0]}: {shape}")
    return x, y, x_vector


def _forward(q: np.ndarray, d: np.ndarray, tau: float) -> dict[str, np.ndarray]:
    """Logits, probabilities, per-query losses and the un-divided derivatives of each L_i."""
    with np.errstate(over="ignore", invalid="ignore"):
        logits = (q @ d.T) / tau
    if not np.isfinite(logits).all():
        worst = float(np.max(np.abs(logits)))
        raise v.InvalidInput("q·d/tau", worst, "finite", "logits overflow float64", code="overflow")
    # log-sum-exp: shifting by the row maximum keeps exp() <= 1, so |s| of 1e4 and far beyond
    # never overflows. p and L come from the shifted logits (adding the max back costs ulps).
    shifted = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    partition = weights.sum(axis=1)
    probs = weights / partition[:, None]
    # p - onehot, with p_ii - 1 written as -(sum of the row's other p): exact where p_ii ~ 1.
    coeff = probs.copy()
    diagonal: np.ndarray = np.eye(len(q), dtype=bool)
    coeff[diagonal] = 0.0 - np.where(diagonal, 0.0, probs).sum(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        # |p - onehot| <= 1, so this bounds every |dL_i/dd_j| element without building the
        # n*n*m table; the sums below are then finite unless they overflow on their own.
        bound = np.abs(coeff).max() * np.abs(q).max() / tau
        doc_sum = (coeff.T @ q) / tau  # [j]: sum_i dL_i/dd_j, what d_j's owner receives
        own = np.diag(coeff)[:, None] * q / tau  # [j]: dL_j/dd_j, the owner's own query only
        per_query = (coeff @ d) / tau  # [i]: dL_i/dq_i
    if not (np.isfinite(bound) and np.isfinite(doc_sum).all() and np.isfinite(per_query).all()):
        worst = float(np.nan_to_num(max(bound, np.abs(doc_sum).max()), nan=np.inf))
        raise v.InvalidInput(
            "gradient", worst, "finite", "q, d or 1/tau too large for float64", code="overflow"
        )
    losses = np.log(partition) - np.diag(shifted)
    return dict(
        logits=logits,
        probs=probs,
        losses=losses,
        coeff=coeff,
        doc_sum=doc_sum,
        own=own,
        per_query=per_query,
    )


def _per_doc(coeff: np.ndarray, q: np.ndarray, tau: float) -> np.ndarray:
    """[i][j]: dL_i/dd_j = (p_ij - [i=j]) q_i / tau, the whole n x n x m table."""
    table: np.ndarray = coeff[:, :, None] * q[:, None, :] / tau
    return table


@overload
def _rep(row: np.ndarray, vector: Literal[True] = True) -> tuple[float, ...]: ...
@overload
def _rep(row: np.ndarray, vector: bool) -> Rep: ...
def _rep(row: np.ndarray, vector: bool = True) -> Rep:
    return tuple(row.tolist()) if vector else float(row[0])  # tolist: Python floats, exactly


def contrastive(q: object, d: object, tau: float) -> Contrastive:
    """InfoNCE over all n documents, with the full and the locally kept document gradient.

        L = -(1/n) sum_i log softmax_j(q_i . d_j / tau)_i
        grad_d_full[j]  = (1/(n tau)) sum_i (p_ij - [i=j]) q_i
        grad_d_local[j] = (1/(n tau)) (p_jj - 1) q_j   (rank j scores only q_j, remote d detached)

    Args:
        q, d: n representations each, one pair per logical rank: n numbers, or n
            equal-length sequences of numbers (m-vectors). Finite; d shaped like q.
        tau: temperature, a finite number > 0.
    Returns `Contrastive`: logits, probs, loss, the [query][document] contribution table and
    gradients shaped like d. ValueError names the value (empty, ragged or mismatched q/d,
    non-finite, tau <= 0, logits/gradients beyond float64); TypeError for a non-number.
    """
    q_arr, d_arr, vector = _pair(q, d, ("q", "d"))
    tau = _checked(v.positive, tau, "tau")
    f = _forward(q_arr, d_arr, tau)
    n = len(q_arr)
    full, kept = f["doc_sum"] / n, f["own"] / n
    return Contrastive(
        tau=tau,
        logits=tuple(map(_rep, f["logits"])),
        probs=tuple(map(_rep, f["probs"])),
        per_query_loss=_rep(f["losses"]),
        loss=float(f["losses"].mean()),
        grad_d_full=tuple(_rep(g, vector) for g in full),
        grad_d_local=tuple(_rep(g, vector) for g in kept),
        grad_q=tuple(_rep(g, vector) for g in f["per_query"] / n),
        max_grad_diff=float(np.max(np.abs(full - kept))),
        _table_inputs=(f["coeff"], q_arr, tau, vector),
    )


def encoder_grads(
    a: object, b: object, wq: float, wd: float, tau: float, scheme: str
) -> EncoderGrads:
    """Shared encoder scalars through one parallel InfoNCE scheme and DDP's mean.

    q_i = wq a_i and d_i = wd b_i; rank r owns (a_r, b_r). With g_ij = dL_i/dd_j (un-divided):
        gather               rank r back-propagates L_r; the gather's backward sums every
                             rank's g_ir into owner r:   gwd_r = b_r . sum_i g_ir
        detach               remote documents detached:  gwd_r = b_r . g_rr
        local                candidates = own pair only: L_r = 0, every gradient 0
        full_loss_each_rank  every rank computes the mean loss (1/n) sum_i L_i with its own
                             features re-inserted:       gwd_r = b_r . sum_i g_ir / n
    and gwq_r = a_r . dL_r/dq_r (divided by n for full_loss_each_rank). DDP's mean gives
    grad = (1/n) sum_r g_r. `gather` equals d(mean loss)/dw; `full_loss_each_rank` comes out
    1/n of it, so it needs a factor n (the world size) under DDP's mean.

    Args: a, b: n inputs each (numbers or equal-length vectors), one pair per rank; wq, wd:
    the shared scalars; tau > 0; scheme: one of SCHEMES. Returns `EncoderGrads`: per-rank
    loss and pre-DDP gradients, DDP's mean, the mean loss's gradient and the correction
    factor reference / applied (None when the applied gradient is 0: nothing to rescale).
    """
    a_arr, b_arr, _ = _pair(a, b, ("a", "b"))
    wq, wd = _checked(v.finite, wq, "wq"), _checked(v.finite, wd, "wd")
    tau = _checked(v.positive, tau, "tau")
    scheme = v.choice(scheme, "scheme", SCHEMES)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught below / in _forward
        q, d = wq * a_arr, wd * b_arr
        f, n = _forward(q, d, tau), len(q)
        owner_sum = f["doc_sum"]  # what the gather's backward returns to each owner
        wq_terms = np.einsum("rm,rm->r", a_arr, f["per_query"])
        wd_owner = np.einsum("rm,rm->r", b_arr, owner_sum)
        if scheme == "gather":
            losses, gwq, gwd = f["losses"], wq_terms, wd_owner
        elif scheme == "detach":
            losses, gwq, gwd = f["losses"], wq_terms, np.einsum("rm,rm->r", b_arr, f["own"])
        elif scheme == "local":
            singles = [_forward(q[r : r + 1], d[r : r + 1], tau) for r in range(n)]
            losses = np.array([s["losses"][0] for s in singles])
            gwq = np.array([a_arr[r] @ s["per_query"][0] for r, s in enumerate(singles)])
            gwd = np.array([b_arr[r] @ s["own"][0] for r, s in enumerate(singles)])
        else:
            losses = np.full(n, f["losses"].mean())
            gwq, gwd = wq_terms / n, wd_owner / n
        reference_wq, reference_wd = float(wq_terms.mean()), float(wd_owner.mean())
        grad_wq, grad_wd = float(gwq.mean()), float(gwd.mean())
    if not np.isfinite([grad_wq, grad_wd, reference_wq, reference_wd, *gwq, *gwd]).all():
        worst = max(abs(grad_wq), abs(grad_wd))
        raise v.InvalidInput("gradient", worst, "finite", "a, b or w too large", code="overflow")
    return EncoderGrads(
        scheme=scheme,
        world_size=n,
        local_loss=_rep(losses),
        grad_wq_local=_rep(gwq),
        grad_wd_local=_rep(gwd),
        grad_wq=grad_wq,
        grad_wd=grad_wd,
        reference_wq=reference_wq,
        reference_wd=reference_wd,
        # reference / applied; None where the applied gradient is 0 or the ratio overflows
        correction_wq=v.finite_or_none(reference_wq / grad_wq) if grad_wq else None,
        correction_wd=v.finite_or_none(reference_wd / grad_wd) if grad_wd else None,
    )


def tau_sweep(
    q: object, d: object, taus: Sequence[float] = SWEEP_TAUS, doc: int = 0
) -> tuple[dict[str, float | Rep], ...]:
    """Document `doc`'s full and kept gradient at each temperature: rows of
    {"tau", "loss", "grad_full", "grad_local"} (the page's chart)."""
    if isinstance(taus, (str, bytes)) or not hasattr(taus, "__len__") or not 1 <= len(taus) <= 1000:
        raise v.InvalidInput("taus", taus, "in_range", "1..1000 temperatures")
    q_arr, _, _ = _pair(q, d, ("q", "d"))
    doc = v.count(doc, "doc")
    if doc >= len(q_arr):
        raise v.InvalidInput("doc", doc, "in_range", f"0..{len(q_arr) - 1}")
    return tuple(
        {
            "tau": r.tau,
            "loss": r.loss,
            "grad_full": r.grad_d_full[doc],
            "grad_local": r.grad_d_local[doc],
        }
        for r in (contrastive(q, d, tau) for tau in taus)
    )
