"""`python -m pclab.experiments.clipping`: a rank runs the worker, anything else the CLI."""

from pclab.experiments.clipping import cli, worker
from pclab.experiments.command import entry

entry(worker.main, cli.main)
