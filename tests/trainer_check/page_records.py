"""Page 10 draws recorded run-mode reports in its AppTests (tests/app/fixtures/
across_run_checks.json, one check per loop of the page). A recorded report and a live run of
the same loop must tell the same story: the modules that already run those loops for real
(test_run_mode.py, test_resume.py) hold each live check against its record here, launching
nothing more. Re-record with the fixture's "about" line when this fails after a change to the
check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pclab.ui import across_run

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "app" / "fixtures" / "across_run_checks.json"
TOLERANCE = 1e-10  # the check's: a gap at or under it is rounding, whatever its digits


def recorded_loops() -> dict[str, dict]:
    """Example stem -> its recorded check, for every loop page 10 offers."""
    checks = json.loads(FIXTURE.read_text())["checks"]
    return {across_run.LOOPS[loop]: check for loop, check in checks.items()}


def page_loops(resumable: bool) -> list[str]:
    """The stems of page 10's loops that resume from a checkpoint (`resumable`), or not:
    test_resume.py runs the first for real, test_run_mode.py the others."""
    return [stem for stem, c in recorded_loops().items() if bool(c.get("resume")) == resumable]


def _story(check: dict) -> dict:
    """What the page shows of a check, but the gaps (compared on their own)."""
    return {
        "status": check["status"],
        "verdicts": [(s["name"], s["verdict"]) for s in check["scenarios"]],
        "updates": [
            [
                (u["epoch"], u["window"], u["skipped"], u["optimizer_steps"])
                + (u["num_valid_labels"], u.get("lr_yours"), u.get("lr_intended"))
                + (u.get("scheme"),)
                for u in s["updates"]
            ]
            for s in check["scenarios"]
        ],
        "codes": sorted(d["code"] for d in check["diagnoses"]),
        "resume": [
            (e["point"], e["verdict"], e.get("killed_at"), e.get("resumed_from"))
            + (e.get("first_divergence"), tuple(e.get("codes", ())))
            for e in check.get("resume") or ()
        ],
    }


def assert_agrees_with_its_record(stem: str, live: dict) -> None:
    """The live check of `stem` tells what page 10's record of it tells."""
    assert_same_story(stem, live, recorded_loops()[stem], FIXTURE.name)


def assert_same_story(stem: str, live: dict, recorded: dict, fixture: str) -> None:
    """A live check and a recorded one (in `fixture`) tell the same story, gaps compared apart:
    the same within the tolerance, a difference to 1e-6."""
    assert _story(live) == _story(recorded), f"{stem}: re-record {fixture}"
    for s_live, s_rec in zip(live["scenarios"], recorded["scenarios"], strict=True):
        for u_live, u_rec in zip(s_live["updates"], s_rec["updates"], strict=True):
            got, want = u_live.get("max_abs_diff"), u_rec.get("max_abs_diff")
            if want is None:  # no step taken: no gap to measure
                assert got is None, (stem, u_live)
            elif want <= TOLERANCE:
                assert got is not None and got <= TOLERANCE, (stem, u_live)
            else:
                assert got == pytest.approx(want, rel=1e-6), (stem, u_live)
