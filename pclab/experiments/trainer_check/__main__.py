"""`python -m pclab.experiments.trainer_check`: a rank runs the worker, anything else the CLI."""

import pclab.experiments.trainer_check.cli as cli
import pclab.experiments.trainer_check.worker as worker
from pclab.experiments.command import entry

entry(worker.main, cli.main)
