"""`pclab run clipping` (also `pclab run clipping`): the coordinated,
clipped step on two real processes, printed as a table or as JSON.

    pclab run clipping --json [--inject-overflow RANK] [--nonfinite inf|nan]
"""

from __future__ import annotations

import json
from functools import partial

from pclab.experiments.clipping import EXPERIMENT
from pclab.experiments.clipping.params import Params
from pclab.runners.cli import checked_or_exit, experiment_parser, run_for_cli


def main(argv: list[str] | None = None) -> int:
    """`pclab run clipping`: 0 ok, 1 failed run or disagreement, 2 bad arguments."""
    parser = experiment_parser("pclab run clipping", __doc__, timeout_s=EXPERIMENT.timeout_s)
    parser.add_argument("--inject-overflow", type=int, default=None, metavar="RANK", help="0 or 1")
    parser.add_argument("--nonfinite", default="inf", help="inf (default) or nan")
    args = parser.parse_args(argv)
    check = partial(Params.checked, args.inject_overflow, args.nonfinite)
    params = checked_or_exit(parser, check, args.timeout)
    result = run_for_cli(parser, EXPERIMENT, params, args.timeout)
    if result is None:
        return 1
    report = result.report
    if args.json:
        print(json.dumps(report, indent=2))
    else:
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
    return 0 if report["agree"] else 1
