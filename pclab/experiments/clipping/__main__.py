"""`python -m pclab.experiments.clipping`: a rank runs the worker, anything else the CLI."""

from pclab.experiments.clipping import worker
from pclab.experiments.command import entry


def command_line() -> int:
    """The command line, imported only off a rank: a rank never loads the CLI's modules."""
    from pclab.experiments.clipping import cli

    return cli.main()


entry(worker.main, command_line)
