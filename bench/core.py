"""Time per call of the public core entry points, at the pages' defaults and at large inputs.

    python -m bench --only core [--quick] [--repeats N]

Large inputs (the issue's sizes): a 1024-replica x 64-microstep ledger, a 512-pair InfoNCE
with 64-dimensional vectors, a 10,000-parameter clipping layout (2 ranks, 4,500 shards each
plus 1,000 replicated parameters). Inputs are built once, seeded, outside the timing. Each
sample times enough calls to last >= 50 ms (10 ms with --quick) and reports time per call;
the table gives the median sample with the min-max over samples. A large case also reports
the peak Python allocation of one call (tracemalloc; skipped with --quick).
"""

from __future__ import annotations

import gc
import random
import time
import tracemalloc
from collections.abc import Callable

from bench import loadavg, stats
from bench.report import Section, duration, now, spread

P_LARGE, K_LARGE = 1024, 64
PAIRS_LARGE, DIM_LARGE = 512, 64
SHARDS_PER_RANK, REPLICATED = 4500, 1000  # 2 * 4500 + 1000 = 10,000 independent parameters


def _ledger_large(rng: random.Random) -> tuple[list, list]:
    grads = [[rng.uniform(-1, 1) for _ in range(K_LARGE)] for _ in range(P_LARGE)]
    counts = [[rng.randint(1, 8) for _ in range(K_LARGE)] for _ in range(P_LARGE)]
    return grads, counts


def _pairs_large(rng: random.Random) -> tuple[list, list]:
    # |q . d| stays near 1, so the logits stay finite whatever the temperature
    vec = lambda: [rng.gauss(0, 1) / 8 for _ in range(DIM_LARGE)]  # noqa: E731
    return [vec() for _ in range(PAIRS_LARGE)], [vec() for _ in range(PAIRS_LARGE)]


def _clip_large(rng: random.Random, scale: float = 8.0) -> tuple[dict, dict]:
    ranks: tuple[dict, dict] = ({}, {})
    for r, held in enumerate(ranks):
        held.update({f"r{r}.w[{i}]": scale * rng.uniform(-1, 1) for i in range(SHARDS_PER_RANK)})
    for i in range(REPLICATED):
        g = scale * rng.uniform(-1, 1)
        for held in ranks:
            held[f"shared[{i}]"] = g
    return ranks


def cases(quick: bool) -> list[tuple[str, str, Callable[[], object]]]:
    """(entry point, input label, zero-argument call) for every measured case."""
    from pclab.core import clipping, infonce, ledger

    seed = infonce.SEED
    out = [
        (
            "ledger.reduce_gradient",
            "seed: n = (2, 8), G = (-4, 8)",
            lambda: ledger.reduce_gradient([[-4.0], [8.0]], [[2], [8]], "global_token"),
        ),
        (
            "ledger.local_loss_scale",
            "seed: n = (2, 8)",
            lambda: ledger.local_loss_scale([[2], [8]], "mean"),
        ),
        (
            "ledger.quadratic_ledger",
            "seed (page 02)",
            lambda: ledger.quadratic_ledger((2, 8), (2.0, -1.0)),
        ),
        (
            "infonce.contrastive",
            "seed: 2 scalar pairs",
            lambda: infonce.contrastive(seed["q"], seed["d"], seed["tau"]),
        ),
        (
            "infonce.encoder_grads",
            "seed: 2 pairs, gather",
            lambda: infonce.encoder_grads(seed["a"], seed["b"], 1.0, 1.0, 1.0, "gather"),
        ),
        (
            "clipping.clip_report",
            "seed: [3, 4] x scale 8, tau 1",
            lambda: clipping.clip_report(clipping.scenario_grads("seed"), 1.0, 8.0),
        ),
    ]
    if quick:
        return out
    rng = random.Random(2024)
    grads, counts = _ledger_large(rng)
    q, d = _pairs_large(rng)
    rank_grads = _clip_large(rng)
    big = f"{P_LARGE} x {K_LARGE}"
    out += [
        (
            "ledger.reduce_gradient",
            f"{big} ledger",
            lambda: ledger.reduce_gradient(grads, counts, "global_token"),
        ),
        (
            "ledger.local_loss_scale",
            f"{big} ledger",
            lambda: ledger.local_loss_scale(counts, "mean"),
        ),
        (
            "infonce.contrastive",
            f"{PAIRS_LARGE} pairs x {DIM_LARGE} dims",
            lambda: infonce.contrastive(q, d, 1.0),
        ),
        (
            "infonce.encoder_grads",
            f"{PAIRS_LARGE} pairs x {DIM_LARGE} dims, gather",
            lambda: infonce.encoder_grads(q, d, 1.0, 1.0, 1.0, "gather"),
        ),
        (
            "clipping.clip_report",
            "10,000 parameters (2 ranks)",
            lambda: clipping.clip_report(rank_grads, 1.0, 8.0),
        ),
    ]
    return out


def time_call(call: Callable[[], object], repeats: int, target_s: float) -> tuple[dict, int]:
    """Seconds per call over `repeats` samples of `loops` calls each (loops fills target_s)."""
    call()  # warm-up: first-call imports and caches are not what a rerun pays
    loops = 1
    while True:  # timeit's autorange: 1, 2, 5, 10, 20, 50 ... calls until a sample lasts target_s
        began = time.perf_counter()
        for _ in range(loops):
            call()
        if time.perf_counter() - began >= target_s or loops >= 100_000:
            break
        loops = loops * 5 // 2 if str(loops).startswith("2") else loops * 2
    samples = []
    for _ in range(repeats):
        gc.collect()
        began = time.perf_counter()
        for _ in range(loops):
            call()
        samples.append((time.perf_counter() - began) / loops)
    return stats(samples), loops


def peak_alloc(call: Callable[[], object]) -> int:
    """Peak bytes Python allocated during one call (tracemalloc; the result included)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del result
    return peak


def run(quick: bool = False, repeats: int | None = None) -> Section:
    repeats = repeats or (3 if quick else 7)
    section = Section(
        "core",
        "Core entry points: time per call",
        ["entry point", "input", "per call: median (min–max)", "calls × samples", "peak alloc"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    rows = []
    for name, label, call in cases(quick):
        timing, loops = time_call(call, repeats, 0.01 if quick else 0.05)
        large = "seed" not in label
        peak = peak_alloc(call) if large and not quick else None
        rows.append(
            {"entry": name, "input": label, "seconds": timing, "loops": loops, "peak_bytes": peak}
        )
        section.rows.append(
            [
                f"`{name}`",
                label,
                spread(timing),
                f"{loops} × {timing['n']}",
                "—" if peak is None else f"{peak / 2**20:.1f} MB",
            ]
        )
    section.data = {"cases": rows, "repeats": repeats, "quick": quick}
    slowest = max((r for r in rows if "seed" in r["input"]), key=lambda r: r["seconds"]["median"])
    section.notes.append(
        f"At the pages' defaults the slowest entry point is `{slowest['entry']}` at "
        f"{duration(slowest['seconds']['median'])} per call: core is never what a visitor "
        "waits for."
    )
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section
