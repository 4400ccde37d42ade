"""What relaunch.py reads from a rank's faulthandler dump: where the rank was when it died.

The dumps are real: a child process calls into the check's trainer.py and dumps its stacks
with faulthandler (as units.Units.watch_stack has a dying rank do), once from inside the user's
train_step (under Trainer.call) and once from inside the check's own on_device, both under a
function named run_units as guard.py's (how the scenarios' thread is told from the others).
And a rank stopped by a real SIGTERM while it handles its trainer's failure, read by `_doing`
with the rank<r>.doing file units.Units.watch_stack keeps, among them one stopped inside the real
guard.alone just before it writes what it saw.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pclab.experiments.trainer_check.relaunch import _doing, _from_stack

CHILD = textwrap.dedent(
    """
    import faulthandler, pathlib, sys
    import pclab.experiments.trainer_check.trainer as trainer_runs
    import pclab.experiments.trainer_check.trainer_file as trainer_file

    where, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    trainer = trainer_file.load(folder / "my_trainer.py")

    class Dumps:  # on_device asks the model for its device: the dump is taken there
        def parameters(self):
            faulthandler.dump_traceback(sys.stderr, all_threads=True)
            raise SystemExit(0)

    def run_units():
        if where == "user":
            trainer.call("train_step", None, None, [])
        else:
            trainer_runs.on_device({}, Dumps())

    run_units()
    """
)


def _trainer(folder, train_step: str) -> None:
    """my_trainer.py in `folder`: the contract's smallest file, with this train_step body."""
    (folder / "my_trainer.py").write_text(
        "import faulthandler, sys\n"
        "VOCAB_SIZE = 3\n"
        "def build_model(): ...\n"
        "def token_losses(model, microbatch): ...\n"
        "def helper():\n"
        "    faulthandler.dump_traceback(sys.stderr, all_threads=True)\n"
        "def train_step(model, optimizer, microbatches):\n"
        f"    {train_step}\n"
    )


def _child(script: str, arg: str, tmp_path, train_step: str) -> subprocess.CompletedProcess:
    """`script` run in a child process with `arg` and `tmp_path`, my_trainer.py written there."""
    _trainer(tmp_path, train_step)
    return subprocess.run(
        [sys.executable, "-c", script, arg, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _dump(where: str, tmp_path) -> str:
    done = _child(CHILD, where, tmp_path, "helper()")
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_rank_in_the_users_function_is_named_by_the_function_the_check_called(tmp_path):
    said = _from_stack(_dump("user", tmp_path))
    assert said is not None
    assert said.startswith("in train_step() at my_trainer.py:")
    assert said.endswith(" in helper")  # the innermost line of the user's code


def test_a_rank_in_the_checks_own_steps_in_trainer_py_is_not_left_out(tmp_path):
    """trainer.py holds the check's own steps too (Trainer.build, step_input, on_device):
    only below Trainer.call's frame is the user's function."""
    assert _from_stack(_dump("check", tmp_path)) == "in the check's own steps (on_device)"


STOPPED = textwrap.dedent(
    """
    import os, pathlib, signal, sys, traceback
    import pclab.experiments.trainer_check.doing as doing
    import pclab.experiments.trainer_check.trainer_file as trainer_file
    from pclab.experiments.trainer_check.trainer_raised import TrainerRaised
    from pclab.experiments.trainer_check.units import Units

    when, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    trainer = trainer_file.load(folder / "my_trainer.py")
    Units(progress=str(folder)).watch_stack(0)

    def stop(*_):
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, once a peer aborted

    if when == "raising":  # in Trainer.call's except, reading the user's traceback
        traceback.extract_tb = stop

    def run_units():
        try:
            trainer.call("train_step", None, None, [])
        except TrainerRaised:
            if when == "handled":  # what guard.alone does once it has said what it saw
                doing.now_in(doing.CHECK_STEPS)
            stop()

    run_units()
    """
)


def _stopped(when: str, tmp_path) -> dict[int, str]:
    done = _child(STOPPED, when, tmp_path, "raise RuntimeError('Connection closed by peer')")
    assert done.returncode == -15, done.stderr  # ended by the SIGTERM, its stacks dumped
    assert "run_units" in (tmp_path / "rank0.stack").read_text()
    return _doing(tmp_path, world_size=1, unit=0)


@pytest.mark.parametrize("when", ["raising", "raised"])
def test_a_rank_stopped_while_it_handles_its_trainers_failure_is_placed_in_that_function(
    when, tmp_path
):
    """Under load, torchrun's SIGTERM (0.1 s after a peer's abort) can land after train_step
    raised and before the rank wrote what it saw: its stacks are then the check's (in
    trainer.py's own frames, or further out), and only the function it last entered
    (rank<r>.doing) says where it failed."""
    assert _stopped(when, tmp_path) == {0: "in train_step()"}


def test_a_rank_back_in_the_checks_steps_is_not_placed_in_the_trainer(tmp_path):
    assert _stopped("handled", tmp_path) == {}


ALONE = textwrap.dedent(
    """
    import os, pathlib, signal, sys
    from datetime import timedelta
    import torch.distributed as dist
    import pclab.experiments.trainer_check.guard as guard
    import pclab.experiments.trainer_check.trainer_file as trainer_file
    from pclab.experiments.trainer_check.units import Units

    folder = pathlib.Path(sys.argv[2])
    # one rank, its store served here as torchrun's agent serves it (heartbeat's rendezvous
    # is then a client, as on a launched rank)
    agent = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=timedelta(seconds=60))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(agent.port), RANK="0",
                      WORLD_SIZE="1", TORCHELASTIC_USE_AGENT_STORE="True")
    dist.init_process_group("gloo")
    trainer = trainer_file.load(folder / "my_trainer.py")
    Units(progress=str(folder)).watch_stack(0)

    def stopped(seen):  # torchrun's SIGTERM, landing as the rank is about to say what it saw
        os.kill(os.getpid(), signal.SIGTERM)

    def run_units():
        step = lambda: trainer.call("train_step", None, None, [])
        guard.alone(step, "custom", 0, (60.0, 60.0), "gloo", None, stopped)

    run_units()
    """
)


def test_a_rank_stopped_as_guard_alone_says_what_it_saw_is_placed_in_the_trainer(tmp_path):
    """The loaded suite's case (a coupled gather of unequal items): the peer of the rank that
    aborted caught its lost connection in train_step and was stopped before its "seen" line
    was written. guard.alone must not reset the doing file to the check's steps before that
    line: it did, and the rank was said to be "in the check's own steps (alone)"."""
    done = _child(ALONE, "", tmp_path, "raise RuntimeError('Connection closed by peer')")
    assert done.returncode == -15, done.stderr  # stopped inside alone, its stacks dumped
    assert "in alone" in (tmp_path / "rank0.stack").read_text()
    assert _doing(tmp_path, world_size=1, unit=0) == {0: "in train_step()"}
