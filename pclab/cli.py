"""The `pclab` command: check a trainer file, or run one of the lab's experiments.

    pclab check TRAINER.py [--world-size P] [--accum K] [--counts "3,8;8,16"] [--json]
    pclab run EXPERIMENT [its options] [--json]      # EXPERIMENT from the registry
    pclab run EXPERIMENT --help                      # an experiment's own options
    python -m pclab ...                              # the same command

Exit codes (every subcommand): 0 ok, 1 a failed run or check, 2 a bad argument or file.
"""

from __future__ import annotations

import sys

from pclab import __version__
from pclab.experiments import registry

CHECK = "trainer_check"  # `pclab check` is `pclab run trainer_check`


def usage() -> str:
    experiments = ", ".join(registry.names())
    return (
        f"usage: pclab check TRAINER.py [options] | pclab run EXPERIMENT [options]\n\n"
        f"  check      is your training step the same update as the single-process one?\n"
        f"  run        one of the lab's experiments on real processes: {experiments}\n"
        f"  --version  the lab's version\n\n"
        f"`pclab check --help` and `pclab run EXPERIMENT --help` list the options."
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"pclab {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command == "check":
        return registry.cli(CHECK)(rest)
    if command == "run":
        if not rest or rest[0] in ("-h", "--help"):
            print(usage())
            return 0 if rest else 2
        if rest[0] not in registry.names():
            known = ", ".join(registry.names())
            print(
                f"pclab run: error: unknown experiment {rest[0]!r}: one of {known}", file=sys.stderr
            )
            return 2
        return registry.cli(rest[0])(rest[1:])
    print(
        f"pclab: error: unknown command {command!r}: check or run (see pclab --help)",
        file=sys.stderr,
    )
    return 2
