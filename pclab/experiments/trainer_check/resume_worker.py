"""One rank of a resume launch (resume.py starts two per kill point, in fresh processes):

    killed   the file's resumable train_loop from an empty checkpoint_dir, every optimizer step
             it takes written to the trace folder as it happens; at the forward of microbatch
             `--kill-at` (the run's index, from 1) the rank SIGKILLs itself, as every rank
             does at the same point: a preemption, with nothing flushed or saved by the check
    resumed  the same loop started again from the same checkpoint_dir, run to its end; this
             rank then joins the two launches' steps into one trajectory and judges it
             against the one-process reference and against the loop's own straight run
             (resume_judge.py), and writes rank<r>.json

Both run the file's mode's run (run_rank.Objective: the token mean's, or a coupled loop's pool)
on its resume scenario, watched by that mode's observer.

    torchrun --standalone --nproc-per-node 2 -m pclab.experiments.trainer_check.resume_worker \\
        --out-dir D --trainer T.py --accum 2 --kill-at 4 --phase killed --checkpoint-dir C \\
        --trace-dir R
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist

import pclab.experiments.trainer_check.modes as modes
import pclab.experiments.trainer_check.resume_judge as resume_judge
import pclab.experiments.trainer_check.run_loop as run_loop
import pclab.experiments.trainer_check.run_rank as run_rank
import pclab.experiments.trainer_check.run_reference as run_reference
from pclab.experiments.trainer_check.run_observe import Observer, Step
from pclab.experiments.trainer_check.trainer_file import load
from pclab.runners.worker import finish_worker, init_worker, write_rank_output


def _trace(trace_dir: str, rank: int) -> Path:
    folder = Path(trace_dir, f"rank{rank}")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def killing_observer(trace: Path, kill_at: int, base: type[Observer]) -> type[Observer]:
    """`base` (the mode's Observer) saving each step to `trace` as it is taken, and SIGKILLing
    this rank at the forward of microbatch `kill_at`."""

    class Killing(base):  # type: ignore[valid-type,misc]
        def _record(self, step: Step) -> None:
            path = trace / f"step{len(self.steps)}.pt"
            super()._record(step)
            torch.save(step.__dict__, path.with_suffix(".part"))
            os.replace(path.with_suffix(".part"), path)

        def _arrived(self) -> None:
            super()._arrived()
            if self.forwards == kill_at:
                # Every rank reaches this forward first: the first rank to die has its peers
                # ended at once (torchrun's agent, the zygote), and a peer still writing its
                # checkpoint (rank 0's save_state) would leave a torn one the restart cannot
                # load, measured once as a false not_resumable.
                if dist.is_available() and dist.is_initialized():
                    dist.barrier()
                os.kill(os.getpid(), signal.SIGKILL)

    return Killing


def recording_observer(seen: list[Observer], base: type[Observer]) -> type[Observer]:
    """`base` (the mode's Observer) adding itself to `seen` as it is entered."""

    class Recording(base):  # type: ignore[valid-type,misc]
        def __enter__(self) -> Observer:
            seen.append(self)
            entered: Observer = super().__enter__()
            return entered

    return Recording


def traced_steps(trace: Path) -> list[Step]:
    """The steps a killed launch saved, in order."""
    paths = sorted(trace.glob("step*.pt"), key=lambda p: int(p.stem.removeprefix("step")))
    return [Step(**torch.load(p, weights_only=True)) for p in paths]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="resume_worker")
    for flag in ("--out-dir", "--trainer", "--checkpoint-dir", "--trace-dir", "--phase"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--accum", type=int, required=True)
    parser.add_argument("--kill-at", type=int, required=True)
    parser.add_argument("--tolerance", type=float, default=1e-10)
    args = parser.parse_args(argv)
    rank, world = init_worker(backend="gloo")
    trainer = load(args.trainer)
    objective: run_rank.Objective = modes.named(trainer.mode).rank_side().OBJECTIVE
    name, grid = objective.resume_scenario(trainer, world, args.accum)
    epochs = run_rank.run_epochs(trainer, name, grid)
    trace = _trace(args.trace_dir, rank)
    # a loop that runs its model on inputs of its own (texts it tokenizes): what they are, from
    # one run of it, so that a kill lands at the microbatch it names and a restart is placed
    learned = objective.own_inputs(trainer, epochs, rank, args.accum, "cpu")
    run = functools.partial(
        run_loop.watched_run, trainer, epochs, rank, args.accum, "cpu", False, args.checkpoint_dir
    )
    if args.phase == "killed":
        run(
            objective.observing(
                epochs, killing_observer(trace, args.kill_at, objective.observer), learned
            )
        )
        write_rank_output(args.out_dir, rank, {"rank": rank, "killed": False})
        finish_worker(0)
        return
    terms = objective.sizes(trainer, epochs, "cpu")
    windows = run_reference.windows(epochs, args.accum, terms)
    initial, updates = run_reference.run(
        trainer, epochs, windows, "cpu", window_loss=objective.window_loss
    )
    straight, _, _ = objective.user_run(trainer, epochs, rank, args.accum, "cpu")
    seen: list[Observer] = []
    resumed, _, _ = run(
        objective.observing(epochs, recording_observer(seen, objective.observer), learned)
    )
    forwards, placed = resume_judge.from_first_handed_out(seen[0].seen, seen[0].placed)
    judged = resume_judge.judge(
        resume_judge.Launches(traced_steps(trace), resumed, forwards, straight, placed),
        (initial, updates, windows),
        args.kill_at,
        args.tolerance,
    )
    write_rank_output(args.out_dir, rank, {"rank": rank, "killed": True, **judged})
    finish_worker(0)


if __name__ == "__main__":
    main()
