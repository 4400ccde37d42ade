"""`python -m pclab.experiments.trainer_check`: a rank runs the worker, anything else the CLI."""

from pclab.experiments.command import entry
from pclab.experiments.trainer_check import cli, worker

entry(worker.main, cli.main)
