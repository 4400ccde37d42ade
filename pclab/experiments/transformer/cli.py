"""`pclab run transformer`: accumulation vs
real DDP processes vs the full batch on the trained Transformer, as a table or as JSON.

    pclab run transformer --json [options]   # `pclab run transformer --help` lists them

Exit codes: 0 ok, 1 failed run (one line on stderr), 2 bad arguments (one line on stderr).
"""

from __future__ import annotations

from pclab.experiments.command import run_command
from pclab.experiments.transformer import EXPERIMENT
from pclab.experiments.transformer.lm.artifacts import ArtifactError


def _print_table(report: dict) -> None:
    print(f"labels {report['labels']}  N={report['num_valid_labels']}  P={report['world_size']}")
    for row in report["branches"]:
        diff = "undefined" if row["max_abs_diff"] is None else f"{row['max_abs_diff']:.3e}"
        where = row["first_divergence"] or {}
        first = f"{where.get('stage', '')} {where.get('tensor') or ''}".strip()
        verdict = "pass" if row["passed"] else "FAIL"
        print(f"{row['name']:<22} {row['optimizer']:<6} {diff:>10}  {verdict:<4}  {first}")
    zero = report["zero_labels"]
    skip, naive = zero["skip_state_identical"], zero["naive_changed"]
    print(f"N = 0: skip identical {skip}; naive step changed {naive}")


def main(argv: list[str] | None = None) -> int:
    """`pclab run transformer`: 0 ok, 1 failed run or damaged artifacts, 2 bad arguments."""
    return run_command(EXPERIMENT, argv, doc=__doc__, human=_print_table, broken=(ArtifactError,))
