"""What relaunch.py reads from a rank's faulthandler dump: where the rank was when it died.

The dumps are real: a child process calls into the check's trainer_file.py and dumps its stacks
with faulthandler (as units.Units.watch_stack has a dying rank do), once from inside the user's
train_step (under Trainer.call) and once from inside the check's own on_device, both under a
function named run_units as guard.py's (how the scenarios' thread is told from the others).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from pclab.experiments.trainer_check.relaunch import _from_stack

CHILD = textwrap.dedent(
    """
    import faulthandler, pathlib, sys
    import pclab.experiments.trainer_check.trainer_file as trainer_file

    where, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    (folder / "my_trainer.py").write_text(
        "import faulthandler, sys\\n"
        "VOCAB_SIZE = 3\\n"
        "def build_model(): ...\\n"
        "def token_losses(model, microbatch): ...\\n"
        "def helper():\\n"
        "    faulthandler.dump_traceback(sys.stderr, all_threads=True)\\n"
        "def train_step(model, optimizer, microbatches):\\n"
        "    helper()\\n"
    )
    trainer = trainer_file.load(folder / "my_trainer.py")

    class Dumps:  # on_device asks the model for its device: the dump is taken there
        def parameters(self):
            faulthandler.dump_traceback(sys.stderr, all_threads=True)
            raise SystemExit(0)

    def run_units():
        if where == "user":
            trainer.call("train_step", None, None, [])
        else:
            trainer_file.on_device({}, Dumps())

    run_units()
    """
)


def _dump(where: str, tmp_path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, where, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_rank_in_the_users_function_is_named_by_the_function_the_check_called(tmp_path):
    said = _from_stack(_dump("user", tmp_path))
    assert said is not None
    assert said.startswith("in train_step() at my_trainer.py:")
    assert said.endswith(" in helper")  # the innermost line of the user's code


def test_a_rank_in_the_checks_own_steps_in_trainer_file_is_not_left_out(tmp_path):
    """trainer_file.py holds the check's own steps too (Trainer.build, step_input, on_device):
    only below Trainer.call's frame is the user's function."""
    assert _from_stack(_dump("check", tmp_path)) == "in the check's own steps (on_device)"
