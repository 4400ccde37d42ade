"""An independent, one-process account of the blind trainers' updates (no pclab code).

For each blind trainer, `simulate_<file>` redoes its `train_step` by hand in float64: every
rank and microstep in one process, a gather played by concatenation (with or without its
backward, as the trainer's gather has it), the ranks' gradient reduction by hand. The
contract's candidate objectives (README, "Coupled objectives") are computed from the
trainer's own `batch_loss` / `embed` / `embedding_loss` with torch autograd, and
`name_scheme` says which one the simulated gradient is: residual ~0 at factor 1, or the
global-batch gradient times one factor per parameter (`scaled`).

    PYTHONPATH=$PWD python tests/trainer_check/blind_reference.py   # prints every trainer's scheme
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

BLIND = Path(__file__).parent / "blind"
TOLERANCE = 1e-9

Microbatches = list[list[dict]]  # [rank][micro_step]
Gradient = dict[str, torch.Tensor]


def load(name: str) -> ModuleType:
    """The blind trainer `name` (a file stem in blind/), imported by path."""
    if str(BLIND) not in sys.path:
        sys.path.insert(0, str(BLIND))  # as the check does: a trainer may import its neighbours
    spec = importlib.util.spec_from_file_location(f"blind_{name}", BLIND / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample(trainer: ModuleType, sizes: list[list[int]], seed: int = 0) -> Microbatches:
    """Microbatches of the given item counts, [rank][micro_step], from the trainer's own maker."""
    generator = torch.Generator().manual_seed(seed)
    return [[trainer.make_microbatch(n, generator) for n in rank] for rank in sizes]


def gradient(model: torch.nn.Module, loss: torch.Tensor) -> Gradient:
    """d loss / d parameter for every parameter (zeros where none flows)."""
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {
        n: torch.zeros_like(p) if g is None else g
        for (n, p), g in zip(params.items(), grads, strict=True)
    }


def mean(grads: list[Gradient]) -> Gradient:
    """The elementwise mean of several gradients."""
    return {n: sum(g[n] for g in grads) / len(grads) for n in grads[0]}


def objective(trainer: ModuleType, model, microbatches: list[dict]) -> torch.Tensor:
    """The contract's one-process objective: `batch_loss`, else `embedding_loss` of the
    concatenated embeddings."""
    if hasattr(trainer, "batch_loss"):
        return trainer.batch_loss(model, microbatches)
    pairs = [trainer.embed(model, mb) for mb in microbatches]
    queries = torch.cat([q for q, _ in pairs])
    documents = torch.cat([d for _, d in pairs])
    return trainer.embedding_loss(model, queries, documents)


def _own_queries_loss(trainer, model, pools: list[list[dict]], rank: int, remote: bool):
    """Rank `rank`'s loss over its own queries against every rank's documents of `pools`
    (own first), remote documents detached, and with `remote=False` its own too."""
    pairs = [[trainer.embed(model, mb) for mb in pool] for pool in pools]
    docs = [torch.cat([d for _, d in pair]) for pair in pairs]
    queries = torch.cat([q for q, _ in pairs[rank]])
    own = docs[rank] if remote else docs[rank].detach()
    others = [d.detach() for r, d in enumerate(docs) if r != rank]
    return trainer.embedding_loss(model, queries, torch.cat([own, *others]))


def candidates(trainer: ModuleType, mbs: Microbatches) -> dict[str, Gradient]:
    """Each contract scheme's gradient at the initial weights, by its README definition."""
    model = trainer.build_model()
    ranks, steps = len(mbs), len(mbs[0])
    everything = [mb for rank in mbs for mb in rank]
    out = {
        "global_batch": gradient(model, objective(trainer, model, everything)),
        "rank_pool": mean([gradient(model, objective(trainer, model, r)) for r in mbs]),
        "microbatch_pool": mean(
            [gradient(model, objective(trainer, model, [m])) for m in everything]
        ),
        "microstep_pool": mean(
            [gradient(model, objective(trainer, model, [r[k] for r in mbs])) for k in range(steps)]
        ),
    }
    if hasattr(trainer, "embed"):
        for scheme, remote in (("remote_detached", True), ("query_path_only", False)):
            # the pool a rank's queries see: all its microbatches (the README's wording) ...
            out[scheme] = mean(
                [
                    gradient(model, _own_queries_loss(trainer, model, mbs, r, remote))
                    for r in range(ranks)
                ]
            )
            # ... or one microstep at a time, averaged over microsteps (not in the README)
            per_step = [
                gradient(
                    model, _own_queries_loss(trainer, model, [[rk[k]] for rk in mbs], r, remote)
                )
                for k in range(steps)
                for r in range(ranks)
            ]
            out[f"{scheme}@microstep"] = mean(per_step)
    return out


def _flat(g: Gradient) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in g.values()])


def fit(update: Gradient, candidate: Gradient) -> tuple[float, float]:
    """Least-squares factor c of `update ≈ c · candidate`, and the relative residual."""
    u, c = _flat(update), _flat(candidate)
    factor = float(u @ c / (c @ c))
    return factor, float((u - factor * c).norm() / u.norm())


def name_scheme(update: Gradient, cands: dict[str, Gradient]) -> dict:
    """Every candidate the update equals (factor 1, residual ~0); else `scaled` with the
    per-parameter factors if it is the global-batch gradient times constants; else `other`."""
    fits = {name: fit(update, g) for name, g in cands.items()}
    matching = [n for n, (c, r) in fits.items() if r < TOLERANCE and abs(c - 1) < TOLERANCE]
    if matching:
        return {"scheme": matching[0], "matching": matching, "fits": fits}
    factors = {}
    scale = float(_flat(cands["global_batch"]).norm())
    for name, g in cands["global_batch"].items():
        if float(g.norm()) < TOLERANCE * scale and float(update[name].norm()) < TOLERANCE * scale:
            continue  # no gradient either way (a bias InfoNCE cannot see): no factor to tell
        c, r = fit({name: update[name]}, {name: g})
        factors[name] = c if r < TOLERANCE else None
    if all(f is not None for f in factors.values()):
        return {"scheme": "scaled", "factors": factors, "fits": fits}
    return {"scheme": "other", "fits": fits}


def _merged(trainer, pool: list[dict]) -> dict:
    """One microbatch holding every item of `pool` (a rank concatenating its K microbatches)."""
    return {key: torch.cat([mb[key] for mb in pool]) for key in pool[0]}


def _sum(grads: list[Gradient]) -> Gradient:
    return {n: sum(g[n] for g in grads) for n in grads[0]}


def simulate_gradcache_tower(trainer, mbs: Microbatches) -> Gradient:
    """GradCache: the pool's loss on no-grad embeddings, its gradient cached per row, each
    microbatch re-forwarded with it; encoder gradients summed over ranks, the temperature's
    (the same on every rank) averaged."""
    model = trainer.build_model()
    with torch.no_grad():
        rows = [[trainer.embed(model, mb) for mb in rank] for rank in mbs]
    q_all = torch.cat([q for rank in rows for q, _ in rank]).requires_grad_(True)
    d_all = torch.cat([d for rank in rows for _, d in rank]).requires_grad_(True)
    loss = trainer.embedding_loss(model, q_all, d_all)
    g_q, g_d, g_scale = torch.autograd.grad(loss, [q_all, d_all, model.log_scale])
    per_rank, start = [], 0
    for rank in mbs:
        model.zero_grad()
        for mb in rank:
            q, d = trainer.embed(model, mb)
            stop = start + len(q)
            ((q * g_q[start:stop]).sum() + (d * g_d[start:stop]).sum()).backward()
            start = stop
        per_rank.append({n: p.grad.clone() for n, p in model.proj.named_parameters()})
    out = {f"proj.{n}": g for n, g in _sum(per_rank).items()}  # all_reduce SUM
    out["log_scale"] = g_scale  # all_reduce SUM then ÷ P of P equal copies
    return {n: out[n] for n, _ in model.named_parameters()}


def simulate_naive_accumulation_local(trainer, mbs: Microbatches) -> Gradient:
    """Each microbatch's loss ÷ K summed on its rank; the ranks' sums averaged."""
    model = trainer.build_model()
    ranks = [
        _sum([gradient(model, trainer.batch_loss(model, [mb]) / len(rank)) for mb in rank])
        for rank in mbs
    ]
    return mean(ranks)


def _step_losses(trainer, model, step_pool: list[dict], detach_remote: bool, detach_own: bool):
    """Each rank's loss at one microstep: own queries against [own docs, other ranks' docs]."""
    pairs = [trainer.embed(model, mb) for mb in step_pool]
    losses = []
    for r, (queries, own) in enumerate(pairs):
        others = [d.detach() if detach_remote else d for s, (_, d) in enumerate(pairs) if s != r]
        mine = own.detach() if detach_own else own
        losses.append(trainer.embedding_loss(model, queries, torch.cat([mine, *others])))
    return losses


def simulate_accumulate_gather_with_grad(trainer, mbs: Microbatches) -> Gradient:
    """Per microstep, a gather whose backward sums every rank's share home: the ranks'
    gradients summed are the gradient of the ranks' losses summed; then ÷ K (in the loss)
    and ÷ P (the hand all_reduce)."""
    model = trainer.build_model()
    ranks, steps = len(mbs), len(mbs[0])
    per_step = []
    for k in range(steps):
        losses = _step_losses(trainer, model, [rank[k] for rank in mbs], False, False)
        per_step.append(gradient(model, sum(losses) / steps))
    return {n: g / ranks for n, g in _sum(per_step).items()}


def _rank_pooled(trainer, model, mbs, detach_remote: bool, detach_own: bool, scale: float = 1.0):
    """The ranks' losses with each rank's K microbatches merged into one forward."""
    pool = [_merged(trainer, rank) for rank in mbs]
    return [scale * x for x in _step_losses(trainer, model, pool, detach_remote, detach_own)]


def simulate_remote_documents_detached(trainer, mbs: Microbatches) -> Gradient:
    """Plain gather (no backward), own documents put back: each rank's own gradient, averaged."""
    model = trainer.build_model()
    losses = _rank_pooled(trainer, model, mbs, detach_remote=True, detach_own=False)
    return mean([gradient(model, loss) for loss in losses])


def simulate_remote_detached_per_microstep(trainer, mbs: Microbatches) -> Gradient:
    """As above, but one gather per microstep and each loss ÷ K."""
    model = trainer.build_model()
    steps = len(mbs[0])
    per_rank: list[Gradient] = []
    for r in range(len(mbs)):
        parts = []
        for k in range(steps):
            losses = _step_losses(trainer, model, [rank[k] for rank in mbs], True, False)
            parts.append(gradient(model, losses[r] / steps))
        per_rank.append(_sum(parts))
    return mean(per_rank)


def simulate_documents_frozen_everywhere(trainer, mbs: Microbatches) -> Gradient:
    """Plain gather, own documents not put back: only the queries' path, averaged over ranks."""
    model = trainer.build_model()
    losses = _rank_pooled(trainer, model, mbs, detach_remote=True, detach_own=True)
    return mean([gradient(model, loss) for loss in losses])


def simulate_times_world_size(trainer, mbs: Microbatches) -> Gradient:
    """A gradient-carrying gather over each rank's merged microbatches, loss × P, then the
    ranks' gradients (summed by the gather's backward) averaged."""
    model = trainer.build_model()
    ranks = len(mbs)
    losses = _rank_pooled(trainer, model, mbs, False, False, scale=float(ranks))
    return {n: g / ranks for n, g in gradient(model, sum(losses)).items()}


def simulate_batchnorm_classifier_ddp(trainer, mbs: Microbatches) -> Gradient:
    """DDP over one forward of each rank's merged samples: BatchNorm statistics per rank,
    the ranks' gradients averaged."""
    model = trainer.build_model()
    per_rank = []
    for rank in mbs:
        batch = _merged(trainer, rank)
        loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
        per_rank.append(gradient(model, loss))
    return mean(per_rank)


def simulate_whole_batch_detached_doc_bias(trainer, mbs: Microbatches) -> Gradient:
    """Each rank: every rank's queries and documents in one loss, its own rows with their
    graph, the others' detached; the ranks' gradients averaged."""
    model = trainer.build_model()
    per_rank = []
    for r in range(len(mbs)):
        pairs = [trainer.embed(model, _merged(trainer, rank)) for rank in mbs]
        queries = torch.cat([q if s == r else q.detach() for s, (q, _) in enumerate(pairs)])
        docs = torch.cat([d if s == r else d.detach() for s, (_, d) in enumerate(pairs)])
        per_rank.append(gradient(model, trainer.embedding_loss(model, queries, docs)))
    return mean(per_rank)


def simulate_batchnorm_accumulated_ddp(trainer, mbs: Microbatches) -> Gradient:
    """DDP with accumulation: a forward per microbatch (its own statistics), each loss ÷ K,
    the ranks' sums averaged."""
    model = trainer.build_model()
    steps = len(mbs[0])

    def loss(mb: dict) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(mb["x"]), mb["y"]) / steps

    return mean([_sum([gradient(model, loss(mb)) for mb in rank]) for rank in mbs])


TRAINERS = [
    "gradcache_tower",
    "naive_accumulation_local",
    "accumulate_gather_with_grad",
    "remote_documents_detached",
    "remote_detached_per_microstep",
    "documents_frozen_everywhere",
    "times_world_size",
    "batchnorm_classifier_ddp",
    "whole_batch_detached_doc_bias",
    "batchnorm_accumulated_ddp",
]


def independent_scheme(name: str, sizes: list[list[int]], seed: int = 0) -> dict:
    """The scheme `name`'s step optimises at these sizes ([rank][micro_step] item counts)."""
    with _one_thread_float64():
        trainer = load(name)
        mbs = sample(trainer, sizes, seed)
        update = globals()[f"simulate_{name}"](trainer, mbs)
        return name_scheme(update, candidates(trainer, mbs))


@contextlib.contextmanager
def _one_thread_float64() -> Iterator[None]:
    """float64 by default and one intra-op thread (on a loaded 2-core box these tiny
    computations took 0.4-3 s each with torch's threads, 0.03-0.08 s with one), restored after."""
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)


if __name__ == "__main__":
    for sizes in ([[3, 2], [3, 2]], [[2, 5, 4], [2, 5, 4]], [[3], [3], [3]], [[3, 2]] * 3):
        print(sizes)
        for trainer_name in TRAINERS:
            found = independent_scheme(trainer_name, sizes)
            factors = {p: f"{c:.9g}" for p, c in found.get("factors", {}).items()}
            extra = found.get("matching") or factors
            print(f"  {trainer_name:32s} {found['scheme']:18s} {extra}")
