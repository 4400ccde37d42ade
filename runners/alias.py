"""Keep a published command working after its code moved: `python -m runners.<name>`.

The README promises `python -m runners.negatives --json ...` (and `torchrun ... -m
runners.negatives`); the experiment itself lives in `experiments/negatives/`. An alias
module runs that package as `__main__`, by name: the launching layer never imports an
experiment, and the package decides (rank or command line) exactly as when run directly.
"""

from __future__ import annotations

import runpy


def forward(package: str) -> None:
    """Run `package` as the program, with this process's arguments (its __main__ decides)."""
    runpy.run_module(package, run_name="__main__", alter_sys=True)
