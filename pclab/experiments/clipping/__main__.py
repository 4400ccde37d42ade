"""`python -m pclab.experiments.clipping`: a rank runs the worker, anything else the CLI."""

from pclab.experiments.command import entry

entry("pclab.experiments.clipping")
