"""Real runs: each experiment's cold run against a no-op Gloo job through the same launcher
(bench/noop_worker.py), and its cached call.

    python -m bench --only runs [--quick] [--repeats N]
    python -m bench.runs --child negatives          # one launch, one JSON line
    python -m bench.runs --cached negatives --repeats 20
    python -m bench.runs --pooled --repeats 3         # the same runs through the warm pool
    python -m bench.runs --child trainer_check_hf   # the real HF Trainer's check (no goal)
    python -m bench.runs --pooled --repeats 1 --jobs noop,trainer_check_hf
    python -m bench.runs --check-cost [--pool]      # one trainer check against P, K, size

Cold run: `runners.<experiment>.run()` at its defaults (2 processes), timed around the call
(launch, torchrun, every rank, the report), measured alternately with the baseline - a
two-process `torchrun --standalone` job of bench/noop_worker.py launched through the same
`runners.launcher.launch` - in the order noop, experiment, noop, experiment ... so both see
the same machine load. Every launch runs in a fresh child process that imports the runner
first (untimed); the ratio is median(experiment) / median(noop).

Peak memory per job, two ways: the child's `getrusage(RUSAGE_CHILDREN).ru_maxrss` after the
launch is the exact peak RSS of the largest process of the launch (torchrun's agent or a
rank); a sampler thread reads VmHWM from /proc/<pid>/status of the agent and of each rank
every 50 ms, which splits that peak by role (a lower bound: growth in a process's last
50 ms is missed).

Cached call: an AppTest script calls `ui.runs.run_with_status` exactly as a page does. The
first run launches and stores the result; each further rerun is a cache hit, and the script
times the `run_with_status` call itself (validation, the worker-code hash, the
`st.cache_data` lookup and the "cached" status element).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from dataclasses import dataclass

from bench import ROOT, child_json, loadavg, stats, vm_kb
from bench.report import Goal, Section, duration, megabytes, now, spread
from pclab.experiments import registry
from pclab.experiments.base import Experiment
from pclab.runners import memory

RATIO_GOAL, CACHED_GOAL_S, POOL_GOAL_S = 1.3, 0.050, 0.200
# Jobs run with the arguments a page's run panel passes (the experiment's checked() keywords),
# where the defaults are not the point or its parameter record is no set of keywords.
PAGE_PARAMS = {
    "trainer_check": ("trainer_check", {"world_size": 2, "accum": 2}),  # a bundled DDP example
    # the real transformers.Trainer: its ranks import transformers
    "trainer_check_hf": (
        "trainer_check",
        {"trainer": str(ROOT / "examples/frameworks/hf_trainer/hf_trainer.py"), "world_size": 2},
    ),
}
LABELS = {"trainer_check_hf": "`pclab check examples/frameworks/hf_trainer/hf_trainer.py`"}
NO_GOAL = {"trainer_check_hf"}  # the goals are for the lab's own jobs; this one times Trainer
EXPERIMENTS = (*registry.names(), "trainer_check_hf")  # every registered one, and the HF check
JOBS = ("noop", "noop_ddp", *EXPERIMENTS)


@dataclass(frozen=True)
class NoopParams:
    """The baseline's parameters: a bare no-op, or one taking a DDP/SGD step."""

    one_ddp_step: bool = False
    world_size: int = 2

    @classmethod
    def checked(cls, one_ddp_step: bool = False) -> NoopParams:
        return cls(one_ddp_step=bool(one_ddp_step))

    def worker_args(self) -> list[str]:
        return ["--one-ddp-step"] if self.one_ddp_step else []


# The baseline job, bench/noop_worker.py on 2 processes, as an experiment of the bench's own:
# it goes through the same launcher, run queue and run panel code as the real ones.
NOOP = Experiment(
    name="noop",
    worker="bench.noop_worker",
    params=NoopParams.checked,
    build_report=lambda ranks: {"world_size": len(ranks)},
    agrees=lambda report: report["world_size"] == 2,  # no reference: every rank reported
    timeout_s=240.0,
)


def job_experiment(job: str) -> tuple[Experiment, dict]:
    """The experiment behind `job` and the raw parameters a page passes to the run panel:
    none, so every experiment runs at its defaults. (Its validated record is no raw input:
    clipping's and the trainer check's records hold fields their `Params.checked` does not
    take.)"""
    if job in ("noop", "noop_ddp"):
        return NOOP, {"one_ddp_step": job == "noop_ddp"}
    if job in PAGE_PARAMS:
        name, params = PAGE_PARAMS[job]
        return registry.get(name), dict(params)
    return registry.get(job), {}  # at its defaults


CACHED_SCRIPT = """
import time
import streamlit as st
from bench.runs import job_experiment
from pclab.ui import runs

experiment, params = job_experiment(st.session_state["bench_job"])
began = time.perf_counter()
result = runs.run_with_status("bench", experiment, **params)
st.session_state["bench_s"] = time.perf_counter() - began
st.session_state["bench_ok"] = bool(result is not None and result.ok)
began = time.perf_counter()  # what the "cached" st.status element alone costs
st.status("bench", state="complete", expanded=False)
st.session_state["bench_status_s"] = time.perf_counter() - began
"""


def launch_job(job: str, runtime=None):
    """One run of `job` with its default parameters, through the lab's launcher (in
    `runtime`, or a fresh cold one for this run, as a CLI's)."""
    experiment, params = job_experiment(job)
    return experiment.run(experiment.params(**params), runtime=runtime)


class _Sampler(threading.Thread):
    """Peak VmHWM, PSS and RSS of every descendant process, by pid, read every `interval_s`."""

    def __init__(self, interval_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.peaks: dict[int, int] = {}  # VmHWM: the kernel's own peak RSS
        self.pss: dict[int, int] = {}  # sampled peaks (pclab.runners.memory)
        self.rss: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self.depths: dict[int, int] = {}
        self.done = threading.Event()

    def _sample(self, pid: int, depth: int) -> None:
        kb = vm_kb(pid)
        if kb is None:
            return
        self.peaks[pid] = max(kb, self.peaks.get(pid, 0))
        self.roles[pid] = "agent" if depth == 1 else "rank"
        self.depths[pid] = depth
        for peaks, read in ((self.pss, memory.pss_kb), (self.rss, memory.rss_kb)):
            value = read(pid)
            if value is not None:
                peaks[pid] = max(value, peaks.get(pid, 0))

    def run(self) -> None:
        # Depth, not the command line, tells the roles apart: a rank read between its fork and
        # its exec still shows the agent's command line. Depth 1: torchrun's agent (or the warm
        # pool's zygote); 2: a rank (or the zygote's store and spare ranks).
        while not self.done.wait(self.interval_s):
            frontier = [(pid, 1) for pid in memory.children(os.getpid())]
            while frontier:
                pid, depth = frontier.pop()
                self._sample(pid, depth)
                frontier += [(child, depth + 1) for child in memory.children(pid)]

    def stop(self) -> None:
        self.done.set()
        self.join()

    def launch_ranks(self, world_size: int) -> list[int]:
        """The ranks of a launch that has ended, once stopped: of the processes two levels
        down that are gone (a torchrun agent's children; the zygote's forks, less the spares
        it keeps for the next launch), the `world_size` with the largest peak PSS (so not the
        zygote's store)."""
        ended = [pid for pid, depth in self.depths.items() if depth == 2 and vm_kb(pid) is None]
        return sorted(ended, key=lambda pid: -self.pss.get(pid, 0))[:world_size]


def child(job: str) -> dict:
    """One launch of `job` in this process: seconds, outcome and memory, as a dict."""
    sampler = _Sampler()
    sampler.start()
    began = time.perf_counter()
    result = launch_job(job)
    wall = time.perf_counter() - began
    sampler.stop()
    ranks = [kb for pid, kb in sampler.peaks.items() if sampler.roles.get(pid) == "rank"]
    agents = [kb for pid, kb in sampler.peaks.items() if sampler.roles.get(pid) == "agent"]
    return {
        "job": job,
        "ok": result.ok,
        "message": result.message,
        "wall_s": wall,
        "launch_s": result.seconds,
        "children_maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        "agent_hwm_kb": max(agents, default=None),
        "rank_hwm_kb": sorted(ranks),
    }


def pooled(repeats: int, jobs=("noop", *EXPERIMENTS)) -> dict:
    """The opt-in warm pool (PCL_WARM_POOL=1): its start-up, then each job's runs through the
    same `run()` calls as the cold rows, in one runtime whose pool is on (as the server's),
    and the zygote's memory."""
    from dataclasses import replace

    from pclab.runners.runtime import Runtime
    from pclab.runners.settings import Settings
    from pclab.runners.warm_pool import START_TIMEOUT_S

    runtime = Runtime.start(replace(Settings.from_env(os.environ), warm_pool=True))
    began = time.perf_counter()
    runtime.pool.prestart(preload=registry.worker_modules())
    while runtime.pool.size()["idle"] == 0:
        if time.perf_counter() - began > START_TIMEOUT_S:
            runtime.shutdown()
            return {"error": "the warm pool did not start"}
        time.sleep(0.01)
    out: dict = {"pool_start_s": time.perf_counter() - began, "jobs": {}}
    (zygote,) = runtime.pool.zygote_pids()
    try:
        for _ in range(repeats):
            for job in jobs:
                began = time.perf_counter()
                result = launch_job(job, runtime)
                row = {
                    "ok": result.ok,
                    "message": result.message,
                    "wall_s": time.perf_counter() - began,
                }
                out["jobs"].setdefault(job, []).append(row)
        out["zygote_hwm_kb"] = vm_kb(zygote)
    finally:
        runtime.shutdown()
    return out


SIZED_TRAINER = """import sys

sys.path.insert(0, {examples!r})  # the bundled examples: correct_manual's step, tiny_lm's loss

import torch
from correct_manual import train_step
from tiny_lm import VOCAB_SIZE, token_losses

WIDTH = {width}


def build_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB_SIZE, WIDTH), torch.nn.Tanh(), torch.nn.Linear(WIDTH, VOCAB_SIZE)
    )
    return model.double()
"""
SIZED_COUPLED = """import sys

sys.path.insert(0, {examples!r})  # the bundled examples: GradCache's step, the InfoNCE loss

import torch
from gradcache import train_step
from tiny_embedder import FEATURES, embed, embedding_loss, make_microbatch

WIDTH = {width}


def build_model():
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.encoder = torch.nn.Linear(FEATURES, WIDTH)
    model.logit_scale = torch.nn.Parameter(torch.tensor(0.5))
    return model.double()
"""
SIZED_RUN = """import sys

sys.path.insert(0, {examples!r})  # the bundled examples: run_correct's loop, tiny_lm's loss

import torch
from run_correct import make_optimizer, make_scheduler, train_loop
from tiny_lm import VOCAB_SIZE, token_losses

WIDTH = {width}


def build_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB_SIZE, WIDTH), torch.nn.Tanh(), torch.nn.Linear(WIDTH, VOCAB_SIZE)
    )
    return model.double()
"""
# The run mode (issue 41): run_correct's loop over 2 epochs of 2K + 1 microbatches, by K and
# size (22 x width + 11 parameters, as the token trainer)
RUN_GRID = ((2, 2, 1_000), (2, 4, 1_000), (2, 2, 10_000))
# The coupled mode (issue 28): a correct GradCache trainer, 5 x width + 1 parameters, in the
# default scenarios (items 3, 2 and 2, 5 a microbatch at K = 2)
COUPLED_GRID = ((2, 2, 16), (2, 2, 10_000))
# (P, K, parameters): P and K around the default 2 x 2 at 1e4 parameters, then the size alone
COST_GRID = (
    *((p, 2, 10_000) for p in (1, 2, 4)),
    *((2, k, 10_000) for k in (1, 4)),
    *((2, 2, size) for size in (100, 1_000_000)),
)


def timed_checks(
    pool: bool, cases: list[tuple[dict, str, int, int]], preload: tuple[str, ...] = ()
) -> dict:
    """One `pclab check` per case (row, trainer file, P, K), cold (torchrun) or through the
    warm pool (started and idle before the first; its zygote also imports `preload`), in one
    runtime: each row with its wall
    time, status and the peak memory of each of its ranks (PSS and RSS, sampled every 50 ms;
    the pool's ranks share the zygote's pages, which RSS counts in full and PSS in part)."""
    from dataclasses import replace

    from pclab.experiments.trainer_check import EXPERIMENT
    from pclab.experiments.trainer_check.params import Params
    from pclab.runners.runtime import Runtime
    from pclab.runners.settings import Settings
    from pclab.runners.warm_pool import START_TIMEOUT_S

    rows: list[dict] = []
    out: dict = {"pooled": pool, "rows": rows}
    runtime = Runtime.start(replace(Settings.from_env(os.environ), warm_pool=pool))
    try:
        if pool:
            began = time.perf_counter()
            runtime.pool.prestart(preload=(*registry.worker_modules(), *preload))
            while (
                runtime.pool.size()["idle"] == 0 and time.perf_counter() - began < START_TIMEOUT_S
            ):
                time.sleep(0.01)
            out["pool_start_s"] = time.perf_counter() - began
            zygotes = sorted(runtime.pool.zygote_pids())
            out["zygote_pss_kb"] = memory.tree_kb(zygotes)
            out["zygote_rss_kb"] = memory.tree_kb(zygotes, "rss")
        for row, path, world_size, accum in cases:
            params = Params.checked(path, world_size=world_size, accum=accum)
            sampler = _Sampler()
            sampler.start()
            began = time.perf_counter()
            result = EXPERIMENT.run(params, timeout_s=1200, runtime=runtime)
            wall = time.perf_counter() - began
            sampler.stop()
            ranks = sampler.launch_ranks(world_size)
            status = result.report["checks"][0]["status"] if result.ok else None
            rows.append(
                row
                | {"ok": result.ok, "wall_s": wall, "status": status, "message": result.message}
                | {"rank_pss_kb": [sampler.pss.get(p) for p in ranks]}
                | {"rank_rss_kb": [sampler.rss.get(p) for p in ranks]}
            )
    finally:
        runtime.shutdown()
    return out | {"loadavg": loadavg()}


def check_cost(pool: bool, grid=COST_GRID, coupled=COUPLED_GRID, run=RUN_GRID) -> dict:
    """The wall time of one `pclab check` of a correct trainer (correct_manual.py's step on
    an embedding-tanh-linear model of ~`size` parameters, 11 tokens: 22 x width + 11) per
    (P, K, size), cold (torchrun) or through the warm pool, one run each; then the coupled
    mode's GradCache trainer per (P, K, size) of `coupled` (rows with "mode": "coupled"), and
    the run mode's run_correct loop per (P, K, size) of `run` (rows with "mode": "run")."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="pcl-check-cost-") as folder:
        examples = str(ROOT / "examples" / "trainers")
        # (mode, template, rows, parameters = per_width x width + fixed) per kind of trainer
        kinds = (
            ("token", SIZED_TRAINER, grid, 22, 11),
            ("coupled", SIZED_COUPLED, coupled, 5, 1),
            ("run", SIZED_RUN, run, 22, 11),
        )
        cases = []
        for mode, template, rows, per_width, fixed in kinds:
            for world_size, accum, size in rows:
                width = max(1, round((size - fixed) / per_width))
                path = Path(folder, f"{mode}_{width}.py")
                path.write_text(template.format(width=width, examples=examples))
                row = {"world_size": world_size, "accum": accum}
                row |= {"parameters": per_width * width + fixed}
                row |= {} if mode == "token" else {"mode": mode}  # token rows as before
                cases.append((row, str(path), world_size, accum))
        return timed_checks(pool, cases)


def cached(job: str, repeats: int) -> dict:
    """The cold call, then `repeats` cache hits of run_with_status inside AppTest."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(CACHED_SCRIPT, default_timeout=600)
    at.session_state["bench_job"] = job
    began = time.perf_counter()
    at.run()
    cold = {"script_s": at.session_state["bench_s"], "apptest_s": time.perf_counter() - began}
    if at.exception or not at.session_state["bench_ok"]:
        shown = [e.value for e in at.error] + [str(e.message) for e in at.exception]
        return {
            "job": job,
            "error": f"the first (launching) call failed: {shown[:1]}",
            "cold": cold,
        }
    calls, reruns, status = [], [], []
    for _ in range(repeats):
        began = time.perf_counter()
        at.run()
        reruns.append(time.perf_counter() - began)
        calls.append(at.session_state["bench_s"])
        status.append(at.session_state["bench_status_s"])
    return {
        "job": job,
        "cold": cold,
        "cached_call_s": stats(calls),
        "status_element_s": stats(status),
        "apptest_rerun_s": stats(reruns),
    }


def _ratio(exp: list[float], noop: list[float]) -> float | None:
    if not exp or not noop:
        return None
    return stats(exp)["median"] / stats(noop)["median"]


def _extra_rank_kb(base: list[dict], other: list[dict]) -> int | None:
    """How much more the largest rank of `other` peaked than that of `base` (median launches)."""
    peaks = [
        [max(r["rank_hwm_kb"]) for r in rows if r.get("rank_hwm_kb")] for rows in (base, other)
    ]
    if not all(peaks):
        return None
    return int(stats(peaks[1])["median"] - stats(peaks[0])["median"])


def _pool_rows(section: Section, pool: dict, noop_all: list[float]) -> None:
    """The warm pool's rows and goals, against the median cold no-op."""
    noop_median = stats(noop_all)["median"] if noop_all else None
    zygote = megabytes(pool["zygote_hwm_kb"]) if pool.get("zygote_hwm_kb") else "—"
    for job, rows in pool.get("jobs", {}).items():
        walls = [r["wall_s"] for r in rows if r["ok"]]
        ratio = (
            "—" if not walls or not noop_median else f"{stats(walls)['median'] / noop_median:.2f}×"
        )
        label = "no-op Gloo job" if job == "noop" else LABELS.get(job, f"`runners.{job}`")
        section.rows.append(
            [f"{label} via the warm pool", spread(stats(walls)), ratio, "—", f"zygote {zygote}"]
        )
        median = stats(walls)["median"] if walls else None
        if job in NO_GOAL:
            continue
        section.goals.append(
            Goal(
                f"`{job}` uncached via the warm pool",
                duration(median),
                f"< {POOL_GOAL_S * 1000:.0f} ms",
                None if median is None else median < POOL_GOAL_S,
            )
        )


def run_section(quick: bool = False, repeats: int | None = None, experiments=None) -> Section:
    repeats = repeats or (1 if quick else 3)
    experiments = list(experiments or (("negatives",) if quick else EXPERIMENTS))
    section = Section(
        "runs",
        "Real runs: cold run vs a no-op Gloo job, cached call, memory",
        ["job", "cold run: median (min–max)", "vs no-op", "cached call", "peak RSS: rank / agent"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    launches: dict[str, list[dict]] = {job: [] for job in ("noop", "noop_ddp", *experiments)}
    noop_before: dict[str, list[float]] = {job: [] for job in experiments}
    for _ in range(repeats):
        for job in experiments:  # noop, exp, noop, exp ...: alternately, in one run
            # the DDP no-op once per round, beside the first experiment's pair
            for name in ("noop", "noop_ddp", job) if job == experiments[0] else ("noop", job):
                result = child_json("bench.runs", ["--child", name], timeout_s=600)
                result.setdefault("job", name)
                launches[name].append(result)
                if name == "noop" and result.get("ok"):
                    noop_before[job].append(result["wall_s"])
    hits = "5" if quick else "20"
    cache = {
        job: child_json("bench.runs", ["--cached", job, "--repeats", hits], 900)
        for job in experiments
    }
    pool = {} if quick else child_json("bench.runs", ["--pooled", "--repeats", str(repeats)], 1800)

    def ok(job: str) -> list[dict]:
        return [r for r in launches[job] if r.get("ok")]

    def memory(rows: list[dict]) -> str:
        ranks = [max(r["rank_hwm_kb"]) for r in rows if r.get("rank_hwm_kb")]
        agents = [r["agent_hwm_kb"] for r in rows if r.get("agent_hwm_kb")]
        exact = [r["children_maxrss_kb"] for r in rows]
        rank = megabytes(max(ranks)) if ranks else "—"
        agent = megabytes(max(agents)) if agents else "—"
        return f"{rank} / {agent} (largest process: {megabytes(max(exact)) if exact else '—'})"

    noop_all = [r["wall_s"] for r in ok("noop")]
    section.rows.append(
        ["no-op Gloo job (baseline)", spread(stats(noop_all)), "1", "—", memory(ok("noop"))]
    )
    ddp_all = [r["wall_s"] for r in ok("noop_ddp")]
    ddp_ratio = _ratio(ddp_all, noop_all)
    section.rows.append(
        [
            "no-op + one DDP/SGD step (imports torch._dynamo)",
            spread(stats(ddp_all)),
            "—" if ddp_ratio is None else f"{ddp_ratio:.2f}×",
            "—",
            memory(ok("noop_ddp")),
        ]
    )
    for job in experiments:
        walls = [r["wall_s"] for r in ok(job)]
        ratio = _ratio(walls, noop_before[job])
        hit = cache[job].get("cached_call_s")
        vs_ddp = _ratio(walls, ddp_all)
        section.rows.append(
            [
                LABELS.get(job, f"`runners.{job}`"),
                spread(stats(walls)),
                ("—" if ratio is None else f"{ratio:.2f}×")
                + ("" if vs_ddp is None else f" ({vs_ddp:.2f}× the DDP no-op)"),
                spread(hit) if hit else "error: " + cache[job].get("error", "?"),
                memory(ok(job)),
            ]
        )
        if job in NO_GOAL:
            continue
        measured = "—" if ratio is None else f"{ratio:.2f}×"
        section.goals.append(
            Goal(
                f"`{job}` cold run / no-op",
                measured,
                f"≤ {RATIO_GOAL}×",
                None if ratio is None else ratio <= RATIO_GOAL,
            )
        )
        hit_s = hit["median"] if hit else None
        section.goals.append(
            Goal(
                f"`{job}` cached call",
                duration(hit_s),
                f"≤ {CACHED_GOAL_S * 1000:.0f} ms",
                None if hit_s is None else hit_s <= CACHED_GOAL_S,
            )
        )
    _pool_rows(section, pool, noop_all)
    if pool.get("error"):
        section.notes.append(f"The warm pool was not measured: {pool['error']}")
    if pool.get("pool_start_s"):
        section.notes.append(
            f"Warm pool rows (PCL_WARM_POOL=1; runners/warm_pool.py): ranks forked from a zygote "
            f"that has imported torch and torch._dynamo once (its start-up took "
            f"{duration(pool['pool_start_s'])}, in the background at server start; not counted), "
            "no torchrun agent; the same `run()` calls and run queue as the cold rows. Their "
            "ratio is against the median torchrun no-op above; memory is the zygote's VmHWM "
            "(ranks share its pages copy-on-write). Measured after the alternation, in one process."
        )
    extra = _extra_rank_kb(ok("trainer_check"), ok("trainer_check_hf"))
    if extra is not None:
        section.notes.append(
            "`pclab check examples/frameworks/hf_trainer/hf_trainer.py` is the trainer check "
            "driving the real transformers.Trainer (P = 2, K = 2): every rank imports "
            "transformers and accelerate, "
            f"{megabytes(extra)} more peak RSS per rank than the check of the bundled DDP example; "
            "it has no goal (the goals are for the lab's own jobs)."
        )
    failed = [r for rows in launches.values() for r in rows if not r.get("ok")]
    if failed:
        section.notes.append(
            f"{len(failed)} launch(es) failed: {failed[0].get('message') or failed[0].get('error')}"
        )
    section.notes += [
        "Every experiment builds a DDP model or an optimizer, and torch imports torch._dynamo "
        "when it does (DistributedDataParallel.__init__ and Optimizer.add_param_group): the "
        "'DDP no-op' row pays just that, so its ratio is the part of the goal no worker code can "
        "remove on a cold launch; the warm pool below pays it once per server.",
        f"{repeats} cold run(s) per experiment, each right after its own no-op launch; the ratio "
        "divides the experiment's median by the median of the no-op launches paired with it.",
        "Peak RSS: the largest rank and the agent by sampled VmHWM (every 50 ms), and in "
        "brackets the exact peak of the largest process from getrusage(RUSAGE_CHILDREN).",
        "Cached call: `ui.runs.run_with_status` on a cache hit, timed inside the AppTest script "
        "(not AppTest's own rerun overhead, which is in the raw data).",
    ]
    status = [c["status_element_s"]["median"] for c in cache.values() if c.get("status_element_s")]
    if status:
        section.notes.append(
            f"Of the cached call, a bare `st.status(..., state='complete')` alone takes "
            f"{duration(stats(status)['median'])}: Streamlit's StatusContainer sleeps 50 ms when "
            "it is "
            "created (streamlit/elements/lib/mutable_status_container.py), so any cache hit shown "
            "with st.status costs at least that."
        )
    section.data = {"launches": launches, "cached": cache, "pool": pool, "repeats": repeats}
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.runs", description=__doc__.splitlines()[0]
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--child", choices=tuple(JOBS), help="one launch, one JSON line")
    mode.add_argument("--cached", choices=EXPERIMENTS, help="cache hits of run_with_status")
    mode.add_argument(
        "--pooled", action="store_true", help="every job through the opt-in warm pool"
    )
    mode.add_argument(
        "--check-cost", action="store_true", help="one trainer check against P, K and size"
    )
    parser.add_argument("--pool", action="store_true", help="with --check-cost: warm pool")
    parser.add_argument("--jobs", default=None, help="with --pooled: these jobs only, a,b")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    if args.check_cost:
        print(json.dumps(check_cost(args.pool)))
        return 0
    if args.pooled:
        jobs = args.jobs.split(",") if args.jobs else ("noop", *EXPERIMENTS)
        unknown = [j for j in jobs if j not in JOBS]
        if unknown:
            parser.error(f"--jobs: unknown {', '.join(unknown)}: one of {', '.join(JOBS)}")
        out = pooled(args.repeats, tuple(jobs))
    else:
        out = child(args.child) if args.child else cached(args.cached, args.repeats)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
