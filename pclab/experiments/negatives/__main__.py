"""`python -m pclab.experiments.negatives`: a rank runs the worker, anything else the CLI."""

from pclab.experiments.command import entry
from pclab.experiments.negatives import worker


def command_line() -> int:
    """The command line, imported only off a rank: a rank never loads the CLI's modules."""
    from pclab.experiments.negatives import cli

    return cli.main()


entry(worker.main, command_line)
