"""Hand-built coupled batches and every scheme's objective by explicit construction, for the
core.coupled_* tests. Nothing here calls pclab: each objective is written out with its own
index arithmetic (global document positions and labels offset by rank, `.detach()` where a
real implementation detaches), BatchNorm's statistics are computed by hand, and autograd
in float64 takes the gradients (`.backward()` on a fresh model, read from `.grad`).
"""

from __future__ import annotations

import torch

DTYPE = torch.float64
FEATURES, WIDTH, CLASSES = 3, 4, 3


class Dual(torch.nn.Module):
    """A dual encoder with a learnable temperature: q = Wq a, d = Wd b, tau = exp(log_tau)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.wq = torch.nn.Parameter(torch.randn(WIDTH, FEATURES, generator=gen, dtype=DTYPE))
        self.wd = torch.nn.Parameter(torch.randn(WIDTH, FEATURES, generator=gen, dtype=DTYPE))
        self.log_tau = torch.nn.Parameter(torch.tensor(-0.3, dtype=DTYPE))


def pairs_grid(sizes, seed: int = 1):
    """[rank][micro_step] microbatches {"a", "b"} with sizes[r][k] pairs each."""
    gen = torch.Generator().manual_seed(seed)

    def one(n):
        a = torch.randn(n, FEATURES, generator=gen, dtype=DTYPE)
        return {"a": a, "b": a + 0.7 * torch.randn(n, FEATURES, generator=gen, dtype=DTYPE)}

    return [[one(n) for n in row] for row in sizes]


def embed(model, microbatch):
    return microbatch["a"] @ model.wq.T, microbatch["b"] @ model.wd.T


def embedding_loss(model, queries, documents):
    logits = queries @ documents.T / model.log_tau.exp()
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(queries)))


def info_nce_batch_loss(model, microbatches):
    a = torch.cat([b["a"] for b in microbatches])
    b = torch.cat([b["b"] for b in microbatches])
    return embedding_loss(model, a @ model.wq.T, b @ model.wd.T)


def _info_nce(model, a, b, labels=None, keep=None):
    """Mean over queries a of -log softmax over documents b; `keep` (a bool per document
    row) marks the rows that carry gradient, the rest detached."""
    q, d = a @ model.wq.T, b @ model.wd.T
    if keep is not None:
        d = torch.where(keep[:, None], d, d.detach())
    labels = torch.arange(len(a)) if labels is None else labels
    return torch.nn.functional.cross_entropy(q @ d.T / model.log_tau.exp(), labels)


def info_nce_objective(scheme, model, grid):
    """Each scheme's objective over the [rank][micro_step] grid, written out by hand."""
    p, k = len(grid), len(grid[0])
    cat = torch.cat
    a_all = cat([mb["a"] for row in grid for mb in row])
    b_all = cat([mb["b"] for row in grid for mb in row])
    sizes = [sum(len(mb["a"]) for mb in row) for row in grid]
    starts = [sum(sizes[:r]) for r in range(p)]
    if scheme == "global_batch":
        return _info_nce(model, a_all, b_all)
    if scheme == "rank_pool":
        per = [_info_nce(model, cat([m["a"] for m in r]), cat([m["b"] for m in r])) for r in grid]
        return sum(per) / p
    if scheme == "microbatch_pool":
        return sum(_info_nce(model, m["a"], m["b"]) for row in grid for m in row) / (p * k)
    if scheme == "microstep_pool":
        per = [
            _info_nce(model, cat([row[j]["a"] for row in grid]), cat([row[j]["b"] for row in grid]))
            for j in range(k)
        ]
        return sum(per) / k
    # the paths: rank r scores its own queries against every document in global order; its
    # positives sit at the global positions starts[r] + i
    total = 0
    for r in range(p):
        own = torch.zeros(len(b_all), dtype=torch.bool)
        if scheme == "remote_detached":
            own[starts[r] : starts[r] + sizes[r]] = True
        a_r = a_all[starts[r] : starts[r] + sizes[r]]
        labels = torch.arange(sizes[r]) + starts[r]
        total = total + _info_nce(model, a_r, b_all, labels, keep=own)
    return total / p


def whole_loss_remote_detached(model, grid):
    """OpenCLIP local_loss=False, gather_with_grad=False under DDP: every rank computes the
    whole batch's loss with only its own rows (queries and documents) carrying gradient;
    DDP averages the ranks' gradients (one shared model: the mean of the losses)."""
    a_all = torch.cat([mb["a"] for row in grid for mb in row])
    b_all = torch.cat([mb["b"] for row in grid for mb in row])
    sizes = [sum(len(mb["a"]) for mb in row) for row in grid]
    total = 0
    for r in range(len(grid)):
        own = torch.zeros(len(a_all), dtype=torch.bool)
        own[sum(sizes[:r]) : sum(sizes[: r + 1])] = True
        q, d = a_all @ model.wq.T, b_all @ model.wd.T
        q = torch.where(own[:, None], q, q.detach())
        d = torch.where(own[:, None], d, d.detach())
        logits = q @ d.T / model.log_tau.exp()
        total = total + torch.nn.functional.cross_entropy(logits, torch.arange(len(q)))
    return total / len(grid)


class Classifier(torch.nn.Module):
    """Linear -> BatchNorm1d (train mode: the pool's statistics) -> tanh -> Linear."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.first = torch.nn.Linear(FEATURES, WIDTH).to(DTYPE)
        self.norm = torch.nn.BatchNorm1d(WIDTH).to(DTYPE)
        self.last = torch.nn.Linear(WIDTH, CLASSES).to(DTYPE)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.last(torch.tanh(self.norm(self.first(x))))


def labelled_grid(sizes, seed: int = 2):
    gen = torch.Generator().manual_seed(seed)
    return [
        [
            {
                "x": torch.randn(n, FEATURES, generator=gen, dtype=DTYPE),
                "y": torch.randint(0, CLASSES, (n,), generator=gen),
            }
            for n in row
        ]
        for row in sizes
    ]


def classifier_batch_loss(model, microbatches):
    x = torch.cat([b["x"] for b in microbatches])
    y = torch.cat([b["y"] for b in microbatches])
    return torch.nn.functional.cross_entropy(model(x), y)


def _by_hand(model, x, y):
    """The classifier's mean cross-entropy with BatchNorm's batch statistics computed here."""
    h = x @ model.first.weight.T + model.first.bias
    mean = h.sum(0) / len(h)
    var = ((h - mean) ** 2).sum(0) / len(h)  # the biased variance normalises in training
    h = (h - mean) / torch.sqrt(var + model.norm.eps) * model.norm.weight + model.norm.bias
    logits = torch.tanh(h) @ model.last.weight.T + model.last.bias
    picked = logits.gather(1, y[:, None])[:, 0]
    return (torch.logsumexp(logits, 1) - picked).mean()


def classifier_objective(scheme, model, grid):
    p, k = len(grid), len(grid[0])

    def pool(cells):
        return _by_hand(
            model, torch.cat([c["x"] for c in cells]), torch.cat([c["y"] for c in cells])
        )

    if scheme == "global_batch":
        return pool([c for row in grid for c in row])
    if scheme == "rank_pool":
        return sum(pool(row) for row in grid) / p
    if scheme == "microbatch_pool":
        return sum(pool([c]) for row in grid for c in row) / (p * k)
    return sum(pool([row[j] for row in grid]) for j in range(k)) / k


def _clip(model, a, b, labels=None, keep_a=None, keep_b=None):
    """A symmetric CLIP loss written out: (CE(s q d^T) + CE(s d q^T)) / 2 over equal rows,
    s = 1 / tau; `keep_a` / `keep_b` (a bool per row) mark the rows carrying gradient."""
    q, d = a @ model.wq.T, b @ model.wd.T
    if keep_a is not None:
        q = torch.where(keep_a[:, None], q, q.detach())
    if keep_b is not None:
        d = torch.where(keep_b[:, None], d, d.detach())
    labels = torch.arange(len(a)) if labels is None else labels
    logits = q @ d.T / model.log_tau.exp()
    ce = torch.nn.functional.cross_entropy
    return (ce(logits, labels) + ce(logits.T, labels)) / 2


def clip_direction(model, queries, documents):
    """One direction of the CLIP loss, the rows past len(queries) extra negatives."""
    logits = queries @ documents.T / model.log_tau.exp()
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(queries)))


def clip_objective(scheme, model, grid):
    """Each scheme's objective for a symmetric CLIP loss, written out by hand; the paths as
    OpenCLIP's ClipLoss(local_loss=True) computes a rank's loss: its images against every
    rank's texts (a list gathered by rank, `.detach()` on each piece a gather without
    gradient returns), labels offset by the rank's first global row, and the same for its
    texts against every rank's images; the ranks' losses averaged (DDP's mean)."""
    p, k = len(grid), len(grid[0])
    cat = torch.cat
    if scheme == "global_batch":
        return _clip(model, *(cat([m[x] for row in grid for m in row]) for x in "ab"))
    if scheme == "rank_pool":
        return sum(_clip(model, *(cat([m[x] for m in row]) for x in "ab")) for row in grid) / p
    if scheme == "microbatch_pool":
        return sum(_clip(model, m["a"], m["b"]) for row in grid for m in row) / (p * k)
    if scheme == "microstep_pool":
        per = [_clip(model, *(cat([row[j][x] for row in grid]) for x in "ab")) for j in range(k)]
        return sum(per) / k
    images = [cat([m["a"] for m in row]) @ model.wq.T for row in grid]  # rank r's rows
    texts = [cat([m["b"] for m in row]) @ model.wd.T for row in grid]

    def gathered(pieces, r):  # every rank's rows; remote_detached: rank r's with its graph
        own = scheme == "remote_detached"
        return cat([x if (j == r and own) else x.detach() for j, x in enumerate(pieces)])

    total = 0
    for r in range(p):
        all_images, all_texts = gathered(images, r), gathered(texts, r)
        labels = torch.arange(len(images[r])) + sum(len(x) for x in images[:r])
        scale = 1 / model.log_tau.exp()
        ce = torch.nn.functional.cross_entropy
        per_image = ce(scale * images[r] @ all_texts.T, labels)
        per_text = ce(scale * texts[r] @ all_images.T, labels)
        total = total + (per_image + per_text) / 2
    return total / p


def clip_whole_loss_local_rows(model, grid):
    """OpenCLIP's ClipLoss() defaults under DDP (local_loss=False, gather_with_grad=False):
    every rank the whole batch's symmetric loss, only its own rows carrying gradient."""
    a_all = torch.cat([mb["a"] for row in grid for mb in row])
    b_all = torch.cat([mb["b"] for row in grid for mb in row])
    sizes = [sum(len(mb["a"]) for mb in row) for row in grid]
    total = 0
    for r in range(len(grid)):
        own = torch.zeros(len(a_all), dtype=torch.bool)
        own[sum(sizes[:r]) : sum(sizes[: r + 1])] = True
        total = total + _clip(model, a_all, b_all, keep_a=own, keep_b=own)
    return total / len(grid)


def reference_gradient(make_model, objective):
    """{name: d objective / d parameter} on a fresh model, by .backward()."""
    model = make_model()
    objective(model).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def sgd_change(make_model, objective, factor=1.0):
    """One SGD step at lr 1 on factor x objective: {name: after - before}."""
    model = make_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    (factor * objective(model)).backward()
    optimizer.step()
    return {n: p.detach() - before[n] for n, p in model.named_parameters()}
