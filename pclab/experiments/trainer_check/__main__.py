"""`python -m pclab.experiments.trainer_check`: a rank runs the worker, anything else the CLI."""

import pclab.experiments.trainer_check.worker as worker
from pclab.experiments.command import entry


def command_line() -> int:
    """The command line, imported only off a rank: a rank never loads the CLI's modules."""
    import pclab.experiments.trainer_check.cli as cli

    return cli.main()


entry(worker.main, command_line)
