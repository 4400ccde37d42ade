"""The framework table's command: record the chosen rows, then rewrite the README's tables and
the examples' index from the records (`--readme`: only that, nothing run; `--runs`: the rows
across a run, frameworks.run_table, instead of the one-update rows).

    python -m pclab.experiments.trainer_check.frameworks --only CODE[,CODE...]
    python -m pclab.experiments.trainer_check.frameworks --runs [--only CODE[,CODE...]]
"""

from __future__ import annotations

import argparse

from pclab.experiments.trainer_check.frameworks import readme_table
from pclab.experiments.trainer_check.frameworks.loader import RECORDED
from pclab.experiments.trainer_check.frameworks.recorder import chosen, record
from pclab.experiments.trainer_check.frameworks.run_table import (
    RUNS_RECORDED,
    chosen_runs,
    record_runs,
)
from pclab.paths import shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pclab.experiments.trainer_check.frameworks")
    parser.add_argument(
        "--only",
        action="append",
        metavar="CODE[,CODE...]",
        help="record only these settings: their codes (frameworks.CODES) or a package's name "
        "for all its rows, e.g. fsdp2_local_mean or lightning (with --runs: the run rows' "
        "codes or packages); the other records stay",
    )
    parser.add_argument(
        "--readme",
        action="store_true",
        help="run nothing: rewrite README.md's framework table and examples/README.md",
    )
    parser.add_argument(
        "--runs",
        action="store_true",
        help="record the rows across a run instead (each framework's own loop over two epochs, "
        "and its restart where it has a resume adapter): pclab/artifacts/framework_runs.json",
    )
    args = parser.parse_args(argv)
    if args.runs and args.readme:
        parser.error("--runs records run rows: --readme runs nothing")
    only = [n for item in args.only for n in item.split(",") if n] if args.only else None
    try:
        rows = chosen_runs(only) if args.runs else chosen(only)
        picked = {row.code for row in rows}
    except ValueError as exc:
        parser.error(str(exc))
    if args.runs:
        for r in record_runs(only=only)["records"]:
            if r["code"] in picked:
                print(f"{r['code']}: {r['framework']} {r['version']}: {r['run']['status']}")
        print(f"wrote {shown(RUNS_RECORDED)}")
    elif not args.readme:
        payload = record(only)
        for r in payload["records"]:
            if r["code"] in picked:
                found = r["scheme"] if r["reason"] is None else "not run: " + r["reason"][:60]
                print(f"{r['code']}: {r['framework']} {r['version']}: {found}")
        print(f"wrote {shown(RECORDED)}")
    for path in readme_table.write():
        print(f"rewrote {shown(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
