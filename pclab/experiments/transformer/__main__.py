"""`python -m pclab.experiments.transformer`: a rank runs the worker, anything else the CLI."""

from pclab.experiments.command import entry
from pclab.experiments.transformer import cli, worker

entry(worker.main, cli.main)
