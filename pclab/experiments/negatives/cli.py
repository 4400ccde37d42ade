"""`pclab run negatives` (also `pclab run negatives`): InfoNCE with
gathered negatives on P real processes, printed as a table or as JSON.

    pclab run negatives --json [--world-size P] [--tau T]     # P in 2..8
"""

from __future__ import annotations

import json
from functools import partial

from pclab.experiments.negatives import EXPERIMENT
from pclab.experiments.negatives.params import DEFAULTS, Params
from pclab.runners.cli import checked_or_exit, experiment_parser, run_for_cli


def main(argv: list[str] | None = None) -> int:
    """`pclab run negatives`: 0 ok, 1 failed run, 2 bad arguments (one line each)."""
    parser = experiment_parser("pclab run negatives", __doc__, timeout_s=EXPERIMENT.timeout_s)
    parser.add_argument("--world-size", type=int, default=2, help="processes P, 2..8 (default 2)")
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name}", type=float, default=default, help=f"default {default}")
    args = parser.parse_args(argv)
    check = partial(Params.checked, args.world_size, args.tau, args.wq, args.wd)
    params = checked_or_exit(parser, check, args.timeout)
    result = run_for_cli(parser, EXPERIMENT, params, args.timeout)
    if result is None:
        return 1
    if args.json:
        print(json.dumps(result.report, indent=2))
    else:
        report = result.report
        print(f"P={report['world_size']} tau={report['tau']:g} a={report['a']} b={report['b']}")
        ref = report["reference"]
        print(f"{'reference':<20} grad_wq={ref['grad_wq']:+.12f} grad_wd={ref['grad_wd']:+.12f}")
        for name, s in report["schemes"].items():
            print(
                f"{name:<20} grad_wq={s['grad_wq']:+.12f} grad_wd={s['grad_wd']:+.12f}"
                f"  max|diff|={s['max_diff_from_reference']:.3e}"
            )
    return 0
