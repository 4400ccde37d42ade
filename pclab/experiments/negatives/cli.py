"""`pclab run negatives`: InfoNCE with
gathered negatives on P real processes, printed as a table or as JSON.

    pclab run negatives --json [options]     # `pclab run negatives --help` lists them
"""

from __future__ import annotations

from pclab.experiments.command import run_command
from pclab.experiments.negatives import EXPERIMENT


def print_table(report: dict) -> None:
    print(f"P={report['world_size']} tau={report['tau']:g} a={report['a']} b={report['b']}")
    ref = report["reference"]
    print(f"{'reference':<20} grad_wq={ref['grad_wq']:+.12f} grad_wd={ref['grad_wd']:+.12f}")
    for name, s in report["schemes"].items():
        print(
            f"{name:<20} grad_wq={s['grad_wq']:+.12f} grad_wd={s['grad_wd']:+.12f}"
            f"  max|diff|={s['max_diff_from_reference']:.3e}"
        )


def main(argv: list[str] | None = None) -> int:
    """`pclab run negatives`: 0 ok, 1 failed run, 2 bad arguments (one line each)."""
    return run_command(EXPERIMENT, argv, doc=__doc__, human=print_table)
