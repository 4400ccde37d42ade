"""`pclab run clipping`: the coordinated,
clipped step on two real processes, printed as a table or as JSON.

    pclab run clipping --json [options]      # `pclab run clipping --help` lists them
"""

from __future__ import annotations

from pclab.experiments.clipping import EXPERIMENT
from pclab.experiments.command import run_command


def print_table(report: dict) -> None:
    where = f"{report['backend']} torch {report['torch']} layout={report['layout']}"
    print(f"P={report['world_size']} {where}")
    for name, s in report["scenarios"].items():
        for row in s["ranks"]:
            print(
                f"{name:<9} rank {row['rank']}: skip={row['skip']} norm={row['norm']}"
                f" c={row['coefficient']} params={row['params']}"
            )
        print(
            f"{name:<9} core agrees: {s['agree_core']}  clip_grad_norm_: {s['agree_reference']}"
            f"  FSDP2: {s['agree_fsdp2']}"
        )


def main(argv: list[str] | None = None) -> int:
    """`pclab run clipping`: 0 ok, 1 failed run or disagreement, 2 bad arguments."""
    return run_command(
        EXPERIMENT,
        argv,
        doc=__doc__,
        human=print_table,
        exit_code=lambda report: 0 if report["agree"] else 1,
    )
