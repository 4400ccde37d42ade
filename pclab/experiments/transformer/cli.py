"""`pclab run transformer` (also `pclab run transformer`): accumulation vs
real DDP processes vs the full batch on the trained Transformer, as a table or as JSON.

    pclab run transformer --json [--labels 40,7,0,23] [--world-size 2] [--optimizer both]

Exit codes: 0 ok, 1 failed run (one line on stderr), 2 bad arguments (one line on stderr).
"""

from __future__ import annotations

import json
import sys

from pclab.core import validation as v
from pclab.experiments.transformer import EXPERIMENT
from pclab.experiments.transformer.lm import data
from pclab.experiments.transformer.lm.artifacts import ArtifactError
from pclab.experiments.transformer.params import WORLD_SIZES, Params
from pclab.runners.cli import experiment_parser, run_for_cli


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
    """`pclab run transformer`: 0 ok, 1 failed run, 2 bad arguments."""
    parser = experiment_parser("pclab run transformer", __doc__, timeout_s=EXPERIMENT.timeout_s)
    parser.add_argument(
        "--labels", default=",".join(map(str, data.DEFAULT_LABELS)), help="per-window counts"
    )
    parser.add_argument(
        "--world-size", type=int, default=2, help=f"processes P, one of {WORLD_SIZES}"
    )
    parser.add_argument("--optimizer", default="both", help="sgd, adamw or both")
    args = parser.parse_args(argv)
    try:
        params = Params.checked(args.labels, args.world_size, args.optimizer)
        v.positive(args.timeout, "timeout")
    except ArtifactError as exc:
        print(f"{parser.prog}: broken artifacts: {exc}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    result = run_for_cli(parser, EXPERIMENT, params, args.timeout)
    if result is None:
        return 1
    if args.json:
        print(json.dumps(result.report, indent=1))
    else:
        _print_table(result.report)
    print(f"launch took {result.seconds:.1f} s", file=sys.stderr)
    return 0
