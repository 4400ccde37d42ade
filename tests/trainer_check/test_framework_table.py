"""The framework table as data (issue 40): every record keyed by its setting's code, `--only`
recording just the rows it names, the README's table and examples/README.md generated from
the record (a stale one fails here), the examples' index holding every file once and agreeing
with the record, and the README's prose quoting no grid the record does not hold. Nothing is
launched: a recording is checked with a stand-in for the check.

    python -m pytest -n 0 tests/trainer_check/test_framework_table.py -q
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest

from pclab.experiments.trainer_check import examples, frameworks
from pclab.experiments.trainer_check.frameworks import __main__ as command
from pclab.experiments.trainer_check.frameworks import readme_table, recorder
from pclab.paths import IMPORT_ROOT

REWRITE = "python -m pclab.experiments.trainer_check.frameworks --readme"


def test_the_generated_tables_are_the_records():
    stale = readme_table.stale()
    assert stale == [], f"{', '.join(map(str, stale))} differ from the record: run {REWRITE}"


def test_every_record_is_keyed_by_its_settings_code():
    records = frameworks.load()["records"]
    assert [r["code"] for r in records] == list(frameworks.CODES)  # the table's order
    assert len(set(frameworks.CODES)) == len(frameworks.CODES)
    for r in records:
        assert frameworks.setting_of(r) is frameworks.BY_CODE[r["code"]]
    with pytest.raises(ValueError, match="no such setting"):
        frameworks.setting_of({"code": "not_a_row", "setting": records[0]["setting"]})


def test_rewording_a_setting_changes_nothing_else(monkeypatch):
    """The record, the page's words and both generated tables are found by code alone."""
    before = readme_table.table(), readme_table.index()
    code = "fsdp2_local_mean"
    reworded = dataclasses.replace(frameworks.BY_CODE[code], setting="said another way")
    monkeypatch.setitem(frameworks.BY_CODE, code, reworded)
    (record,) = [r for r in frameworks.load()["records"] if r["code"] == code]
    assert frameworks.setting_of(record) is reworded
    assert (readme_table.table(), readme_table.index()) == before


def test_only_names_codes_or_packages():
    assert [s.code for s in recorder.chosen(["fsdp2_local_mean", "hf_trainer"])] == [
        "hf_trainer",  # the table's order
        "fsdp2_local_mean",
    ]
    lightning = [s.code for s in recorder.chosen(["lightning"])]
    assert lightning == ["lightning_accumulate", "lightning_global_tokens"]
    assert recorder.chosen(None) == list(frameworks.SETTINGS)
    with pytest.raises(ValueError, match="nope"):
        recorder.chosen(["hf_trainer", "nope"])
    with pytest.raises(SystemExit):  # argparse: exit 2, the reason on stderr
        command.main(["--only", "hf_trainer,nope", "--readme"])


def test_only_records_just_those_rows(tmp_path, monkeypatch):
    """`--only a,b` launches only a's and b's adapters and rewrites only their records; every
    other record stays byte for byte (the check is a stand-in: no process starts)."""
    path = tmp_path / "framework_checks.json"
    shutil.copy(frameworks.RECORDED, path)
    launched = []

    def check_adapters(settings, runtime=None):
        launched.append([s.code for s in settings])
        return {s.code: {"stand-in": s.code} for s in settings}

    monkeypatch.setattr(recorder, "check_adapters", check_adapters)
    monkeypatch.setattr(recorder, "installed_version", lambda package: "0.0")
    monkeypatch.setattr(recorder, "measured", lambda s, check, now: {"code": s.code, **check})
    payload = recorder.record(["fsdp2_local_mean", "torchtitan", "hf_trainer"], path=path)
    assert launched == [["hf_trainer"], ["fsdp2_local_mean"]]  # one launch per package and K
    before = frameworks.load()["records"]
    after = json.loads(path.read_text())["records"]
    assert after == payload["records"] and len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        if old["code"] in ("fsdp2_local_mean", "hf_trainer"):
            assert new == {"code": old["code"], "stand-in": old["code"]}
        elif old["code"] == "torchtitan":  # a reason row, chosen: recorded again, same reason
            assert new["reason"] == old["reason"] and new["recorded_at"] != old["recorded_at"]
        else:
            assert json.dumps(new, indent=1) == json.dumps(old, indent=1)


def test_the_index_lists_every_file_once_and_agrees_with_the_record():
    on_disk = sorted(p.resolve() for p in examples.EXAMPLES_ROOT.rglob("*.py"))
    assert sorted(p.resolve() for p in examples.files().values()) == on_disk
    index = examples.INDEX.read_text(encoding="utf-8")
    for path in on_disk:
        relative = path.relative_to(examples.EXAMPLES_ROOT).as_posix()
        assert index.count(f"[`{relative}`]({relative})") == 1, relative
    records = frameworks.by_code()
    for e in (*examples.TOKEN, *examples.COUPLED):  # a page example that is also a row
        if e.code in records:
            assert (e.scheme, e.verdict) == (records[e.code]["scheme"], records[e.code]["status"])
    for s in frameworks.SETTINGS:
        if s.adapter:
            assert records[s.code]["command"] == frameworks.command(s)
            assert s.path.parent.parent.name == "frameworks"


def test_the_readmes_prose_quotes_only_the_records_grids():
    """A grid quoted in "Frameworks, measured" outside the generated table (weight x N or the
    terms, "a, b / c, d") is one a record holds: a re-recording that changed it fails here."""
    text = (IMPORT_ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Frameworks, measured") : text.index("## Using `core`")]
    start, end = section.index("<!-- framework-table:start"), section.index("framework-table:end")
    prose = section[:start] + section[end:]
    grids = {
        readme_table._grid(r[field], cell)
        for r in frameworks.load()["records"]
        for field, cell in (("weights", readme_table.weight), ("counts", str))
        if r[field] is not None
    }
    quoted = re.findall(r"\d[\d.]*, \d[\d.]*\s+/\s+\d[\d.]*, \d[\d.]*", prose)
    assert quoted, "the prose quotes the uneven grids"
    for grid in quoted:
        assert " ".join(grid.split()) in grids, grid
