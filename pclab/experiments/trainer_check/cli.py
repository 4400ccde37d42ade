"""`pclab check TRAINER.py`: is your training step the same update as the
single-process reference, and which weight did each microbatch really get?

    pclab check my_trainer.py [--world-size P] [--accum K] [--counts "3,8;8,16"]
                            [--tolerance T] [--json] [--timeout S]

Exit codes: 0 every scenario is the same update; 1 one differs, or the trainer raised while
running (the line names your file and line), or the run timed out; 2 the file can't be used
(syntax or import error, a missing function) or an argument is bad.
"""

from __future__ import annotations

import json
import sys
from functools import partial

from pclab.experiments.trainer_check import EXPERIMENT
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.trainer_file import TrainerFileError, load
from pclab.runners.cli import checked_or_exit, experiment_parser, run_for_cli

PROG = "pclab check"
NOTES = {
    "no_step": "train_step left the parameters unchanged: did it call optimizer.step()?",
    "ranks_differ": "the ranks hold different parameters or optimizer state after the step",
    "zero_must_skip": "with no labels (N = 0) the step must change nothing: no update, "
    "no optimizer state, no step count",
    "control": "equal counts are no evidence: wrong schemes pass this control too",
    "not_finite": "the update is not finite (a mean over an empty microbatch?)",
    "not_linear": "the update is not a weighted sum of microbatch gradients: clipping, a "
    "regulariser or weight decay, momentum or an adaptive optimizer inside train_step?",
    "not_identifiable": "the microbatches' gradients are linearly dependent, so their weights "
    "cannot be told apart",
}


def _number(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"


def print_check(check: dict) -> None:
    """The human report: a table per scenario and its weights grid."""
    verdict = "PASS" if check["passed"] else "FAIL"
    shape = f"P={check['world_size']} K={check['accum_steps']} tolerance={check['tolerance']:g}"
    print(f"{verdict}  {check['trainer']}  ({shape})")
    for s in check["scenarios"]:
        diff = "undefined" if s["max_abs_diff"] is None else f"{s['max_abs_diff']:.2e}"
        scheme = s["scheme"] or "undefined (N = 0)"
        print(f"\n  {s['name']:<17} {'same update' if s['passed'] else 'DIFFERENT'}")
        residual = _number(s["residual"])
        print(f"    max |delta| vs reference {diff}   scheme {scheme}   residual {residual}")
        if s["first_divergence"]:
            d = s["first_divergence"]
            print(f"    first divergence: rank {d['rank']}, {d['tensor']} ({d['why']})")
        if s.get("label_positions", s["counts"]) != s["counts"]:
            placed = "; ".join(" ".join(map(str, row)) for row in s["label_positions"])
            print(f"    labels placed {placed} (token_losses returned fewer terms)")
        print("    counts (terms) / weight x N:")
        weights = s["weights"] or [[None] * len(row) for row in s["counts"]]
        for r, (counts, row) in enumerate(zip(s["counts"], weights)):
            cells = "  ".join(f"{n:>4} / {_number(w):>9}" for n, w in zip(counts, row))
            print(f"      rank {r}: {cells}")
        for note in s["notes"]:
            print(f"    note: {NOTES.get(note, note)}")
    for skipped in check["skipped_scenarios"]:
        print(f"\n  {skipped['name']:<17} skipped: {skipped['reason']}")


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(PROG, __doc__, timeout_s=EXPERIMENT.timeout_s)
    parser.add_argument("trainer", help="your trainer file (see the README's contract)")
    parser.add_argument("--world-size", type=int, default=2, help="ranks P, 1..8 (default 2)")
    parser.add_argument("--accum", type=int, default=2, help="microsteps K, 1..8 (default 2)")
    parser.add_argument("--counts", default=None, help='one pattern, e.g. "3,8;8,16"')
    parser.add_argument("--tolerance", type=float, default=1e-10, help="default 1e-10")
    args = parser.parse_args(argv)
    fields = (args.trainer, args.world_size, args.accum, args.counts, args.tolerance)
    params = checked_or_exit(parser, partial(Params.checked, *fields), args.timeout)
    try:
        trainer = load(params.trainers[0])  # the contract, before anything is launched
    except TrainerFileError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    largest = max((n for row in params.counts or () for n in row), default=0)
    if largest > trainer.capacity:
        parser.error(f"counts={largest} is more than a microbatch holds ({trainer.capacity})")
    result = run_for_cli(parser, EXPERIMENT, params, args.timeout)
    if result is None:
        return 1
    check = result.report["checks"][0]
    if args.json:
        print(json.dumps(check, indent=2))
    else:
        print_check(check)
    return 0 if check["passed"] else 1
