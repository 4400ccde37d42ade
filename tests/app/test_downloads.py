"""Tables download as CSV/JSON; a run record carries what is needed to trust a run."""

import json
import platform
from importlib import metadata
from pathlib import Path

from streamlit.testing.v1 import AppTest

from pclab.runners.results import RunResult
from pclab.ui.downloads import run_record

ROOT = Path(__file__).resolve().parents[2]


def test_run_record_holds_parameters_hashes_and_versions():
    ranks = ({"sha256": "a" * 64}, {"sha256": "b" * 64})
    result = RunResult.finished(ranks, 9.87654, "c" * 64).with_report({"schemes": {}})
    record = run_record(result, {"world_size": 2, "tau": 1.0}, "negatives")
    assert record["parameters"] == {"world_size": 2, "tau": 1.0}
    assert record["worker_sha256"] == "c" * 64
    assert record["rank_sha256"] == ["a" * 64, "b" * 64]
    assert record["versions"]["torch"] == metadata.version("torch")
    assert record["versions"]["python"] == platform.python_version()
    json.dumps(record)  # serialisable as it stands


def test_run_record_parameters_are_what_the_ranks_ran():
    """A declared field (here one the page never passed) reaches the record from the ranks."""
    ran = {"world_size": 2, "tau": 1.0, "wq": 1.0, "wd": 1.0}
    result = RunResult.finished(({"sha256": "a" * 64},), 1.0, "c" * 64)
    record = run_record(result.with_report({"parameters": ran}), {"tau": 1.0}, "negatives")
    assert record["parameters"] == ran


def test_every_ledger_table_offers_csv_and_json():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("pclab/sections/01_denominator.py").run()
    buttons = at.get("download_button")
    labels = sorted(b.proto.label for b in buttons)
    assert labels == ["CSV", "CSV", "JSON", "JSON"]
