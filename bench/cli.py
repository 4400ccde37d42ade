"""The command line against a bare torchrun: `pclab run transformer --json` and a cold
`pclab check examples/trainers/correct_manual.py --json`, as a user types them.

    python -m bench --only cli [--repeats N]
    python -m bench.cli --repeats 5 [--workers]     # the same measurement, one JSON line

The baseline ("bare") is `torchrun --standalone --nproc-per-node 2 bench/bare_worker.py`: two
processes that import torch and nothing of the lab, join a Gloo group, take one DDP/SGD step
(torch, Gloo and torch._dynamo: what any DDP job pays) and exit. Each command is timed from
spawn to exit in A/B pairs with its own bare run, the pair's order alternating round by round
(bare first, then the command first), so both halves of a pair see the same machine load; the
ratio of a command is the median of its pairs' ratios. `--workers` adds each command's worker
under a bare torchrun, paired the same way: the command's cost over it is the CLI's own
process (its imports, the code hash, the launcher's polling and the report).

Goals (issue 46): transformer <= 1.2x the bare job, the cold check <= 1.3x.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from bench import ROOT, loadavg, stats
from bench.report import Goal, Section, duration, now, spread

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
CHECKED = "examples/trainers/correct_manual.py"
COMMANDS = {
    "bare": [*TORCHRUN, "bench/bare_worker.py"],
    "transformer": [sys.executable, "-m", "pclab", "run", "transformer", "--json"],
    "check": [sys.executable, "-m", "pclab", "check", CHECKED, "--json"],
    "transformer_worker": [*TORCHRUN, "-m", "pclab.experiments.transformer"],
    "check_worker": [*TORCHRUN, "-m", "pclab.experiments.trainer_check", "--trainer", CHECKED],
}
TAKES_OUT_DIR = ("bare", "transformer_worker", "check_worker")  # a torchrun job's --out-dir
LABELS = {
    "bare": "bare torchrun, 2 processes, one DDP step (bench/bare_worker.py: torch only)",
    "transformer": "`pclab run transformer --json`",
    "check": f"`pclab check {CHECKED} --json`, cold (PCL_WARM_POOL=0)",
    "transformer_worker": "the transformer's worker under the same torchrun",
    "check_worker": "the check's worker under the same torchrun",
}
GOALS = {"transformer": 1.2, "check": 1.3}
PAIRED = ("transformer", "check")  # each timed against a bare run of its own
WORKERS = ("transformer_worker", "check_worker")


def timed(job: str, timeout_s: float = 300.0) -> dict:
    """One run of `job` from the checkout, as a user's shell starts it: wall seconds, the CPU
    seconds of its whole process tree (user + system, every rank included: far less moved
    by other work on a shared box than the wall time) and ok."""
    out_dir = tempfile.mkdtemp(prefix="pcl-bench-cli-")
    # TMPDIR: a bare torchrun keeps its agent's logs in a torchelastic_* folder of its own
    # under it and never removes it; here it goes with the out-dir
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PCL_WARM_POOL="0")
    env["TMPDIR"] = out_dir
    cmd = COMMANDS[job] + (["--out-dir", out_dir] if job in TAKES_OUT_DIR else [])
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return {"job": job, "ok": False, "error": f"timed out after {timeout_s:g} s"}
    finally:
        wall = time.perf_counter() - began
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        shutil.rmtree(out_dir, ignore_errors=True)
    cpu = sum(getattr(cpu_after, f) - getattr(cpu_before, f) for f in ("ru_utime", "ru_stime"))
    ok = done.returncode == 0
    if ok and job in GOALS:  # the exit code says whether the run agreed; the report:
        ok = isinstance(json.loads(done.stdout), dict)
    error = "" if ok else done.stderr[-500:]
    return {"job": job, "ok": ok, "wall_s": wall, "cpu_s": cpu, "error": error}


def measure(repeats: int, jobs: tuple[str, ...] = PAIRED) -> dict:
    """`repeats` rounds; in each, every job of `jobs` in an A/B pair with a bare run (bare
    first in even rounds, the job first in odd ones). Every pair and the load around them."""
    out: dict = {"load_start": loadavg(), "pairs": {job: [] for job in jobs}}
    for round_ in range(repeats):
        for job in jobs:
            order = ("bare", job) if round_ % 2 == 0 else (job, "bare")
            ran = {name: timed(name) for name in order}
            out["pairs"][job].append({"bare": ran["bare"], "job": ran[job], "first": order[0]})
    return out | {"load_end": loadavg()}


def _ratios(pairs: list[dict], key: str = "wall_s") -> list[float]:
    ok = [p for p in pairs if p["job"]["ok"] and p["bare"]["ok"]]
    return [p["job"][key] / p["bare"][key] for p in ok]


def _walls(pairs: list[dict], half: str, key: str = "wall_s") -> list[float]:
    return [p[half][key] for p in pairs if p[half]["ok"]]


def summary(data: dict) -> dict:
    """Per job: its walls, its bare halves' walls and the pairs' ratios, wall and CPU, as
    bench.stats()."""
    return {
        job: {
            "wall": stats(_walls(pairs, "job")),
            "bare": stats(_walls(pairs, "bare")),
            "ratio": stats(_ratios(pairs)),
            "cpu": stats(_walls(pairs, "job", "cpu_s")),
            "cpu_ratio": stats(_ratios(pairs, "cpu_s")),
        }
        for job, pairs in data["pairs"].items()
    }


def _ratio_text(ratio: dict) -> str:
    if ratio["median"] is None:
        return "—"
    if ratio["n"] == 1:
        return f"{ratio['median']:.2f}×"
    return f"{ratio['median']:.2f}× ({ratio['min']:.2f}–{ratio['max']:.2f})"


def run(quick: bool = False, repeats: int | None = None, workers: bool = False) -> Section:
    """The `cli` section of BENCHMARKS.md."""
    repeats = repeats or (1 if quick else 5)
    section = Section(
        "cli",
        "The command line against a bare torchrun (`pclab run transformer`, a cold `pclab check`)",
        [
            "command",
            "wall: median (min–max)",
            "its pairs' bare run",
            "vs bare (pairs)",
            "CPU of the tree",
            "CPU vs bare",
            "n",
        ],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    data = measure(repeats, PAIRED + (WORKERS if workers else ()))
    figures = summary(data)
    bare_all = [w for f in data["pairs"].values() for w in _walls(f, "bare")]
    bare_cpu = [w for f in data["pairs"].values() for w in _walls(f, "bare", "cpu_s")]
    bare_row = [spread(stats(bare_all)), "—", "1.00×", spread(stats(bare_cpu)), "1.00×"]
    section.rows.append([LABELS["bare"], *bare_row, len(bare_all)])
    for job, figure in figures.items():
        row = [LABELS[job], spread(figure["wall"]), spread(figure["bare"])]
        row += [_ratio_text(figure["ratio"]), spread(figure["cpu"])]
        section.rows.append([*row, _ratio_text(figure["cpu_ratio"]), figure["ratio"]["n"]])
    for job, goal in GOALS.items():
        ratio = figures[job]["ratio"]["median"]
        section.goals.append(
            Goal(
                f"{LABELS[job]} / bare torchrun (median of A/B pairs)",
                _ratio_text(figures[job]["ratio"]),
                f"≤ {goal}×",
                None if ratio is None else ratio <= goal,
            )
        )
    for job, worker in zip(PAIRED, WORKERS):
        command, alone = figures[job]["wall"]["median"], figures.get(worker, {}).get("wall")
        if command is not None and alone and alone["median"] is not None:
            section.notes.append(
                f"{LABELS[job]} costs {duration(command - alone['median'])} over its worker "
                "under torchrun alone: the command's own process (imports, code hash, the "
                "launcher's polling, the report)."
            )
    failed = [p[h] for ps in data["pairs"].values() for p in ps for h in ("bare", "job")]
    failed = [r for r in failed if not r["ok"]]
    if failed:
        section.notes.append(f"{len(failed)} run(s) failed: {failed[0]['error'][-200:]}")
    section.notes.append(
        f"{repeats} round(s) of A/B pairs (each command beside a bare run of its own, the order "
        "alternating by round); each a fresh process tree from the checkout (PYTHONPATH, "
        "OMP_NUM_THREADS=1, PCL_WARM_POOL=0), timed from spawn to exit. The ratio is the "
        "median of the pairs' ratios; the bare job imports nothing of the lab. 'CPU of the "
        "tree': user + system seconds of every process of the run (getrusage of the waited-for "
        "children), far less moved than the wall time by other work on a shared box."
    )
    section.data = data | {"summary": figures}
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", action="store_true", help="also pair each worker alone")
    args = parser.parse_args(argv)
    data = measure(args.repeats, PAIRED + (WORKERS if args.workers else ()))
    print(json.dumps(data | {"summary": summary(data)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
