"""`python -m pclab.experiments.negatives`: a rank runs the worker, anything else the CLI."""

from pclab.experiments.command import entry
from pclab.experiments.negatives import cli, worker

entry(worker.main, cli.main)
