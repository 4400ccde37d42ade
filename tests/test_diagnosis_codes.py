"""The trainer check's diagnosis codes against their one registry (experiments/trainer_check/
codes.py): the builders make exactly its codes, with its details, and nothing bypasses them;
the README's tables list exactly its codes with its exit column; the catalogues translate
every code and case, naming only placeholders the page fills; each case renders in both
languages, in English as the report's own message. No process is started.

    python -m pytest -n 0 tests/test_diagnosis_codes.py -q
"""

from __future__ import annotations

import ast
import json
import re
import string
from pathlib import Path

import pytest
import streamlit as st

from pclab.experiments.trainer_check import coupled_messages as cm
from pclab.experiments.trainer_check import diagnoses as d
from pclab.experiments.trainer_check import failures
from pclab.experiments.trainer_check import run_messages as rm
from pclab.experiments.trainer_check.codes import CODES
from pclab.experiments.trainer_check.report import build_report
from pclab.runners.results import Outcome
from pclab.ui import i18n
from pclab.ui import trainer_diagnoses as page

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "pclab" / "experiments" / "trainer_check"
BASE = {"code", "message", "scenario"}
GATES = ("_diagnosis", "_failure")  # the gate, and failures.py's name for it


def token(world_size: int = 2, accum: int = 2) -> dict:
    """A token check's fields the page reads: its shape and two scenarios."""
    scenarios = [
        {"name": "uneven", "counts": [[3, 0], [2, 5]], "residual": 1e-15},
        {"name": "no_labels", "counts": [[0, 0], [0, 0]], "residual": None},
    ]
    return {"world_size": world_size, "accum_steps": accum, "scenarios": scenarios}


def run(world_size: int = 2, accum: int = 2) -> dict:
    scenarios = [{"name": "uneven", "counts": [[[3, 2]], [[1, 4]]], "residual": None}]
    return {"mode": "run", **token(world_size, accum), "scenarios": scenarios}


def coupled(world_size: int = 2, accum: int = 2) -> dict:
    scenarios = [{"name": "custom", "sizes": [[2], [3]], "residual": None}]
    return {"mode": "coupled", **token(world_size, accum), "scenarios": scenarios}


SEEN = {"rank": 1, "text": "t.py:3 in train_step: ZeroDivisionError"}
DIED = "rank 0: collective mismatch: 36 vs 24. Received data size"
LEFT = {
    "remote_detached": "embedding_loss refused 6 documents for 3 queries.",
    "query_path_only": "",
}
NAN = {"tensor": "parameter 0.weight", "values": 4, "tensors": 1, "nan": True}
SAMPLES = [  # (a diagnosis its builder made, its check, the case the page must pick)
    (d.signature("t.py: train_step(model) cannot take (model, optimizer, batches)"), token(), None),
    (d.unusable_file("contract", "t.py: missing train_step()"), token(), None),
    (d.terms_mismatch(16, 5, False), token(), "more"),
    (d.terms_mismatch(3, 5, True), token(), "fewer"),
    (d.model_not_deterministic("0.weight", 0.25, False), token(), "calls"),
    (d.model_not_deterministic("0.weight", None, True), coupled(), "ranks"),
    (d.dtype_built("0.weight", "float32", "float64"), token(), "built"),
    (d.dtype_after("uneven", "0.weight", "float32", "float64"), token(), "recast"),
    (d.optimizer_not_stepped(["uneven", "no_labels"], False), token(), "forgot"),
    (d.optimizer_not_stepped(["uneven"], True), token(), "own"),
    (d.uniform_scale("uneven", 0.3, 2e-15, 2), token(), "scale"),
    (d.uniform_scale("uneven", 0.5, 1e-15, 2), token(), "second_k"),
    (d.extra_optimizer_state("no_labels", ["step", "exp_avg"], 4, 0), token(), "at_zero"),
    (d.extra_optimizer_state("custom", ["step"], 4, 1), coupled(), "labels"),
    (d.no_evidence_scenario("uneven", ["replica_mean"]), token(), "scenario"),
    (d.no_evidence_scenario("uneven", []), token(), "unsplit_scenario"),
    (d.no_evidence_scenario("no_labels", [], state_unread=True), token(), "state_unread"),
    (d.no_evidence_run(2, 2), token(), "run"),
    (d.no_evidence_run(1, 1), token(1, 1), "unsplit_run"),
    (cm.no_evidence_coupled_scenario("custom", ["rank_pool"]), coupled(), "coupled_scenario"),
    (cm.no_evidence_coupled_scenario("custom", []), coupled(1, 1), "coupled_unsplit_scenario"),
    (cm.no_evidence_coupled_run(2, 2), coupled(), "coupled_run"),
    (cm.no_evidence_coupled_run(1, 1), coupled(1, 1), "coupled_unsplit_run"),
    (rm.no_evidence_resume(), run(), "resume_run"),
    (failures.scenario_failed("uneven", [{**SEEN, "kind": "trainer_error"}]), token(), None),
    (failures.scenario_failed("uneven", [{**SEEN, "kind": "mismatch"}]), token(), "ranks"),
    (failures.scenario_failed("uneven", [{**SEEN, "kind": "timeout"}]), token(), None),
    (
        failures.launch_failed({"name": "custom", "sizes": [[2], [3]]}, "failed", DIED),
        coupled(2, 1),
        "unequal_items",
    ),
    (d.counts_not_terms("uneven", [[3, 1], [2, 5]], [[3, 0], [2, 5]], "terms")[0], token(), None),
    (d.non_finite("no_labels", 0, NAN, [[0, 0], [0, 0]], True), token(), None),
    (d.objective_invalid("batch_loss returned a vector"), coupled(), None),
    (cm.candidate_left_out(LEFT), coupled(), None),
    (d.elsewhere(), coupled(), None),
    (d.not_run("busy", "the run queue is full"), token(), None),
    (rm.tail_window_scaled("uneven", 0.5, 1, 2, "microbatch_mean"), run(), None),
    (rm.tail_window_dropped("uneven", [0, 1]), run(), None),
    (rm.gradient_leak("uneven", 1, 0, 1.59), run(), None),
    (rm.steps_per_window("uneven", 2, 2), run(), None),
    (rm.scheduler_rate("uneven", "prepared", 2), run(), None),
    (rm.schedule_length("uneven", 4, 6), run(), None),
    (rm.scheduler_on_skip("empty_window"), run(), None),
    *(
        (rm.resume_code(code, ["mid_epoch"], "rank 0: TypeError"), run(), None)
        for code in rm.RESUME
    ),
    (d.not_run("cancelled", "stopped on request"), token(), None),
]


def registry_findings(check: dict) -> list[str]:
    """What a report says against the registry: a code not registered for the check's mode,
    a detail it does not declare, or an exit effect that does not hold (a code that only
    makes a file unusable without status unusable, one that makes its scenario different on
    a scenario that is not, a run's no_evidence without status no_evidence)."""
    mode = check.get("mode", "token")
    verdicts = {s["name"]: s["verdict"] for s in check.get("scenarios", [])}
    found = []
    for x in check["diagnoses"]:
        code = CODES.get(x["code"])
        if code is None or mode not in code.modes:
            found.append(f"{x['code']}: not registered for the {mode} mode")
            continue
        if extra := set(x) - BASE - set(code.details):
            found.append(f"{x['code']}: undeclared details {sorted(extra)}")
        if code.effects == ("unusable",) and check["status"] != "unusable":
            found.append(f"{x['code']}: status {check['status']}, not unusable")
        scenario = x.get("scenario")
        if "different" in code.effects and scenario and verdicts.get(scenario) != "different":
            found.append(f"{x['code']}: {scenario} is {verdicts.get(scenario)}, not different")
        if code.effects == ("no_evidence",) and scenario is None:
            if check["status"] != "no_evidence":
                found.append(f"{x['code']}: the run's, yet status {check['status']}")
    return found


def test_every_registered_code_and_case_is_built_by_a_builder():
    built = {(x["code"], case) for x, _, case in SAMPLES}
    assert built == {(c.code, case) for c in CODES.values() for case in c.cases or (None,)}
    for x, _, _ in SAMPLES:
        assert set(x) >= BASE and set(x) - BASE <= set(CODES[x["code"]].details), x


def test_no_code_is_made_but_through_a_registered_builder():
    """Every code the check's modules name as a constant goes through the one gate, and the
    gate's is the only dict literal that makes a diagnosis."""
    literals = []
    for path in CHECK.glob("*.py"):
        tree = ast.parse(path.read_text())
        gates = [f for f in ast.walk(tree) if getattr(f, "name", "") == "_diagnosis"]
        inside = {id(n) for gate in gates for n in ast.walk(gate)}
        for node in ast.walk(tree):
            keys = [k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant)]
            if isinstance(node, ast.Dict) and "code" in keys:
                literals.append((path.name, id(node) in inside))
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in GATES:
                first = node.args[0]
                if isinstance(first, ast.Constant):
                    assert first.value in CODES, f"{path.name}:{node.lineno}: {first.value}"
    assert literals == [("diagnoses.py", True)]
    assert set(failures.FAILURE_CODES.values()) <= set(CODES)
    for outcome in Outcome:
        if outcome is not Outcome.FINISHED:  # a run that judged nothing: its one diagnosis
            assert d.not_run(outcome.value, "")["code"] in CODES


def test_an_unregistered_code_or_detail_is_refused():
    with pytest.raises(ValueError, match="code='lr_typo' is not registered"):
        d._diagnosis("lr_typo", "a message")
    with pytest.raises(ValueError, match=r"timeout: details \['lr'\]"):
        d._diagnosis("timeout", "a message", "uneven", lr=0.1)


def readme_tables() -> list[dict[str, str]]:
    """The README's diagnosis tables ("| code | when | exit |"), in order: code -> exit."""
    tables, rows = [], None
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.strip() == "| code | when | exit |":
            rows = {}
            tables.append(rows)
        elif rows is not None and line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[-1]
        elif rows is not None and not line.startswith("|"):
            rows = None
    return tables


def test_the_readmes_tables_list_every_code_with_its_exit():
    """The first table: every code the token mode raises (the other modes' too where they
    share them); the coupled section's: the codes only a coupled mode raises (a step's, or
    a run's: coupled_run); the run section's: those only a run mode raises (run, and
    coupled_run where its loop makes the same mistake)."""
    shared, coupled_only, run_only = readme_tables()
    not_token = [c for c in CODES.values() if "token" not in c.modes]
    assert set(shared) == {c.code for c in CODES.values() if "token" in c.modes}
    assert set(coupled_only) == {c.code for c in not_token if "coupled" in c.modes}
    assert set(run_only) == {c.code for c in not_token if "coupled" not in c.modes}
    every = {**shared, **coupled_only, **run_only}
    assert every == {code: CODES[code].exit for code in every}


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_the_catalogues_translate_every_code_and_case_and_english_has_none():
    keys = {key for c in CODES.values() for key in c.keys}
    zh = {k for k in i18n.catalogue("zh") if k.startswith("check.diagnosis.")}
    assert sorted(zh - keys) == [] and sorted(keys - zh) == []
    assert [k for k in i18n.catalogue("en") if k.startswith("check.diagnosis.")] == []


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_every_catalogue_entry_names_only_placeholders_the_page_fills(lang):
    for key, text in i18n.catalogue(lang).items():
        if key.startswith("check.diagnosis."):
            code = CODES[key.split(".")[2]]
            assert placeholders(text) <= set(code.placeholders), key
    for code in CODES.values():
        fillable = set(page.FILL) | set(code.details) | {"message"}  # a detail: as it is
        assert set(code.placeholders) <= fillable, code.code


@pytest.fixture
def reader():
    """The reader's language, as the page's switch sets it."""

    def use(lang: str) -> None:
        st.session_state["lang"] = lang

    yield use
    st.session_state.pop("lang", None)


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize(("x", "check", "case"), SAMPLES, ids=lambda v: str(v)[:30])
def test_each_case_reads_in_the_readers_language(reader, lang, x, check, case):
    reader(lang)
    code = x["code"]
    assert (page.CASES[code](x, check) if code in page.CASES else None) == case
    words = page.text(x, check)
    if lang == "en":  # the report's words, headed by the scenario's name as the table says it
        head = i18n.text("en", f"check.scenario.{x['scenario']}") if x["scenario"] else ""
        body = x["message"].removeprefix(f"{x['scenario']}: ")
        assert words == (f"{head}: {body}" if head else x["message"])
    else:
        key = f"check.diagnosis.{code}" + (f".{case}" if case else "")
        assert words == i18n.text(lang, key, **page.values(x, check))
        assert re.search(r"[\u4e00-\u9fff]", words.replace(x["message"], ""))


def test_the_recorded_reports_hold_to_the_registry():
    """The recorded real runs (the page tests' fixtures), put together as the command does."""
    fixtures = ROOT / "tests" / "app" / "fixtures"
    runs = json.loads((fixtures / "trainer_check_coupled.json").read_text())["runs"]
    ranks = json.loads((fixtures / "trainer_check_microbatch_means_p2k2.json").read_text())
    for outputs in [*runs.values(), ranks["ranks"]]:
        for check in build_report(tuple(outputs))["checks"]:
            assert registry_findings(check) == [], check["trainer"]
