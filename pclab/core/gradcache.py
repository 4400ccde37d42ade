"""In-batch negatives under accumulation, and the gradient-cache remedy (section 04, condition 2).

A dual encoder scores every query against every document of its batch (InfoNCE, positive on
the diagonal). Splitting the batch into K microbatches and accumulating keeps the loss
additive but shrinks each query's candidate pool from B - 1 negatives to n_k - 1: it is a
different objective, and no loss coefficient repairs it.

The gradient cache (Gao et al., 2021) recovers the full-pool objective with one
microbatch's encoder graph alive at a time:

    1 encode every microbatch without a graph        q_k, d_k   (no_grad)
    2 take the loss over the whole cached pool       L(Q, D),   g_Q = dL/dQ, g_D = dL/dD
    3 per microbatch: re-encode with a graph, back-propagate (q_k . g_Q,k + d_k . g_D,k)

Step 3's chain rule gives exactly sum_k dq_k/dw^T g_Q,k + ... = dL/dw. The re-run must
replay the same random state (dropout) as step 1; this encoder has none.

Run: python -c "from pclab.core.gradcache import *; print(negatives_split().rows)"
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from pclab.core import validation as v
from pclab.core.limits import DTYPE, Row, bounded_count, max_abs_diff, seeded_generator, tensor

INPUT_DIM, HIDDEN, REP_DIM = 5, 16, 4
NEGATIVE_VARIANTS = ("full_pool", "per_microbatch", "gradient_cache")


def encoder(seed: int = 0) -> torch.nn.Module:
    """A small shared MLP encoder 5 -> 16 -> tanh -> 4 with seeded float64 weights."""
    gen = seeded_generator(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(INPUT_DIM, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, REP_DIM)
    )
    net = net.to(DTYPE)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=DTYPE))
    return net


def pairs(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Query inputs a (B, 5) and positive document inputs b, b a noisy copy of a.

    Args: batch_size B in 1..10000, seed in 0..2^31-2 (the inputs draw from seed + 1).
    """
    batch_size = bounded_count(batch_size, "batch_size", 1, 10_000)
    gen = seeded_generator(bounded_count(seed, "seed", 0, 2**31 - 2) + 1)
    a = torch.randn(batch_size, INPUT_DIM, generator=gen, dtype=DTYPE)
    return a, a + 0.5 * torch.randn(batch_size, INPUT_DIM, generator=gen, dtype=DTYPE)


def info_nce_sum(q: torch.Tensor, d: torch.Tensor, tau: float) -> torch.Tensor:
    """sum_i -log softmax_j(q_i . d_j / tau)[i]: every document of the pool is a candidate.

    Args: q, d finite (B, R) float tensors of one shape and dtype, B >= 1; tau finite > 0.
    Returns: a 0-d tensor (with autograd history); a loss beyond float64 is refused.
    """
    _pair(q, d)
    tau = v.positive(tau, "tau")
    loss = torch.nn.functional.cross_entropy(q @ d.T / tau, torch.arange(len(q)), reduction="sum")
    v.finite_result(float(loss.detach()), "tau", tau)  # q . d / tau beyond float64
    return loss


def _pair(q: torch.Tensor, d: torch.Tensor, names: str = "qd") -> None:
    """Two sides of the pairs: finite float tensors of one 2-D shape and dtype, at least one row."""
    tensor(q, names[0]), tensor(d, names[1])
    if not (q.is_floating_point() and q.dtype == d.dtype):
        raise TypeError(
            f"{names[0]} and {names[1]} must be float tensors of one dtype, "
            f"not {q.dtype}, {d.dtype}"
        )
    if q.ndim != 2 or q.shape != d.shape or not len(q):
        raise v.InvalidInput(
            names[1], tuple(d.shape), "same_shape", f"(B >= 1, R) like {names[0]}: {tuple(q.shape)}"
        )


@contextmanager
def saved_activation_counter(params: Iterable[torch.Tensor]) -> Iterator[Callable[[], int]]:
    """Count elements autograd saves for backward inside the block, parameters excluded.

    params: an iterable of tensors (e.g. net.parameters()); TypeError for anything else.
    """
    held = list(params) if hasattr(params, "__iter__") and not isinstance(params, str) else params
    if not isinstance(held, list) or not all(isinstance(p, torch.Tensor) for p in held):
        raise TypeError(f"params={held!r} is not an iterable of tensors")
    pointers = {p.data_ptr() for p in held}
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in pointers:
            total[0] += t.numel()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield lambda: total[0]


def gradient_cache(
    net: torch.nn.Module, a: torch.Tensor, b: torch.Tensor, accum_steps: int, tau: float
) -> tuple[float, int, int]:
    """Accumulate d(full-pool InfoNCE / B)/dw into net's .grad, one microbatch graph at a time.

    Args: net a torch module mapping (n, 5) to representations; a, b finite (B, 5) inputs of
        one shape and dtype (see `pairs`); accum_steps K in 1..B; tau finite > 0.
    Returns (loss, encoder_saved, loss_saved): the full-pool mean loss, the most activation
    elements one encoder graph saved for backward, and what the pool's loss graph saved.
    """
    if not isinstance(net, torch.nn.Module):
        raise TypeError(f"net={net!r} is not a torch module")
    _pair(a, b, "ab")
    if a.shape[1] != INPUT_DIM or a.dtype != DTYPE:
        raise v.InvalidInput(
            "a", tuple(a.shape), "same_shape", f"(B, {INPUT_DIM}) float64, like pairs()"
        )
    accum_steps, tau = bounded_count(accum_steps, "accum_steps", 1, len(a)), v.positive(tau, "tau")
    params = list(net.parameters())
    with torch.no_grad():  # 1: representations only, no graph
        q = torch.cat([net(x) for x in a.tensor_split(accum_steps)])
        d = torch.cat([net(x) for x in b.tensor_split(accum_steps)])
    q.requires_grad_(True)
    d.requires_grad_(True)
    with saved_activation_counter(params) as loss_saved:  # 2: loss over the whole cached pool
        loss = info_nce_sum(q, d, tau) / len(a)
    grad_q, grad_d = torch.autograd.grad(loss, (q, d))
    encoder_peak = 0
    chunks = zip(
        a.tensor_split(accum_steps),
        b.tensor_split(accum_steps),
        grad_q.tensor_split(accum_steps),
        grad_d.tensor_split(accum_steps),
        strict=True,
    )
    for xa, xb, gq, gd in chunks:  # 3: re-encode this microbatch, chain its cached gradients
        with saved_activation_counter(params) as saved:
            reps = (net(xa), net(xb))
        torch.autograd.backward(reps, (gq, gd))  # frees this graph before the next re-run
        encoder_peak = max(encoder_peak, saved())
    return float(loss.detach()), encoder_peak, loss_saved()


@dataclass(frozen=True)
class NegativesSplit:
    batch_size: int
    accum_steps: int
    grads: dict[str, tuple[float, ...]]  # variant -> flattened encoder gradient
    rows: tuple[Row, ...]  # per variant: loss, fewest negatives per query, gradient gap, saved
    difference: float  # per-microbatch pools: max gradient gap to the full pool
    cache_difference: float  # gradient cache: max gradient gap to the full pool


def negatives_split(
    batch_size: int = 8, accum_steps: int = 2, tau: float = 0.5, seed: int = 0
) -> NegativesSplit:
    """Full-pool InfoNCE vs per-microbatch pools vs the gradient cache, on one shared encoder.

        full pool:       L = (1/B) sum_i -log softmax_{j in batch}(q_i . d_j / tau)[i]
        per microbatch:  L' = (1/B) sum_k sum_{i in k} -log softmax_{j in k}(...)[i]

    Both are additive over queries, so accumulation reproduces L' exactly - but L' has
    n_k - 1 negatives per query instead of B - 1. The gradient cache reproduces L.

    Args: batch_size B in 2..256, accum_steps K in 1..B, tau finite > 0, seed >= 0.
    Returns: a NegativesSplit. `encoder_saved` counts the activation elements the largest
        encoder graph alive at once saved for backward (the cache: one microbatch's);
        `loss_saved` what the similarity loss saved (it sees only representations).
    """
    size = bounded_count(batch_size, "batch_size", 2, 256)
    steps = bounded_count(accum_steps, "accum_steps", 1, size)
    tau = v.positive(tau, "tau")
    a, b = pairs(size, seed)

    def flat(net: torch.nn.Module) -> torch.Tensor:
        return torch.cat([p.grad.reshape(-1) for p in net.parameters()])

    def pooled(
        net: torch.nn.Module, xa: torch.Tensor, xb: torch.Tensor
    ) -> tuple[torch.Tensor, int, int]:
        with saved_activation_counter(net.parameters()) as encoder_saved:
            q, d = net(xa), net(xb)
        with saved_activation_counter(net.parameters()) as loss_saved:
            loss = info_nce_sum(q, d, tau) / size
        return loss, encoder_saved(), loss_saved()

    results = {}
    net = encoder(seed)
    loss, enc, lss = pooled(net, a, b)  # one graph over the whole batch
    loss.backward()
    results["full_pool"] = (float(loss.detach()), flat(net), enc, lss, size - 1)

    net = encoder(seed)
    total, enc, lss = 0.0, 0, 0
    for xa, xb in zip(a.tensor_split(steps), b.tensor_split(steps), strict=True):
        part, part_enc, part_lss = pooled(net, xa, xb)
        part.backward()
        total, enc, lss = total + float(part.detach()), max(enc, part_enc), max(lss, part_lss)
    fewest = len(a.tensor_split(steps)[-1]) - 1  # tensor_split puts the smallest microbatch last
    results["per_microbatch"] = (total, flat(net), enc, lss, fewest)

    net = encoder(seed)
    loss, enc, lss = gradient_cache(net, a, b, steps, tau)
    results["gradient_cache"] = (loss, flat(net), enc, lss, size - 1)

    for loss, grad, *_ in results.values():  # tau near the float64 limit: the logits overflow
        for x in (loss, float(grad.abs().max())):
            v.finite_result(x, "tau", tau)
    ref = results["full_pool"][1]
    rows: tuple[Row, ...] = tuple(
        {
            "variant": name,
            "loss": loss,
            "negatives_per_query": negatives,
            "max_grad_diff": max_abs_diff(grad, ref),
            "encoder_saved": encoder_saved,
            "loss_saved": loss_saved,
        }
        for name, (loss, grad, encoder_saved, loss_saved, negatives) in results.items()
    )
    return NegativesSplit(
        size,
        steps,
        {name: tuple(r[1].tolist()) for name, r in results.items()},
        rows,
        rows[1]["max_grad_diff"],
        rows[2]["max_grad_diff"],
    )
