"""The hostile-visitor probe's bookkeeping (bench/probe.py): which loads it plans, and that
every problem a load, a path, a setting or a fault shows becomes a failing row. No server
and no browser here: `python -m bench --only probe --quick` runs the real thing."""

from __future__ import annotations

from bench import probe


def _clean() -> dict:
    """A probe result in which nothing was found."""
    return {
        "browse": {
            "keys": {"check-trainer": ("chk_accum",)},
            "loads": [{"page": "check-trainer", "load": "all keys", "problems": []}],
            "hosts": ["http://127.0.0.1:1", "ws://127.0.0.1:1"],
            "foreign": [],
        },
        "paths": [{"path": "//evil.example", "status": 400, "problems": []}],
        "settings": [{"variable": "PCL_PG_TIMEOUT_S", "value": "1e-9", "problems": []}],
        "left_after_stop": {"processes": [], "tmp": []},
        "faults": {
            "kills": [{"target": "rank", "signal": "SIGKILL", "problems": []}],
            "refusal": {
                "refused": True,
                "admitted": ["result"],
                "refusal_to_admitted_s": 3.0,
                "last_refusal_to_admitted_s": 0.4,
                "unanswered": 0,
            },
        },
    }


def test_a_clean_probe_passes_every_row():
    rows = probe.rows(_clean())
    assert rows and all(row[2] == "pass" for row in rows), rows


def test_each_kind_of_finding_fails_its_row():
    findings = {
        "no payload rendered as markup": "b holds the marker",
        "no Python message": "Python text 'NoneType'",
        "the Run button present": "no Run button",
        "no format (Cf) character": "format characters in the page: U+202E",
    }
    for check, problem in findings.items():
        result = _clean()
        result["browse"]["loads"][0]["problems"] = [problem]
        failed = [row[1] for row in probe.rows(result) if row[2] == "FAIL"]
        assert len(failed) == 1 and failed[0].startswith(check), (problem, failed)
    result = _clean()
    result["paths"][0]["problems"] = ["redirect off the host: //evil.example"]
    result["settings"][0]["problems"] = ["it served"]
    result["browse"]["foreign"] = ["https://fonts.gstatic.com"]
    result["faults"]["kills"][0]["problems"] = ["the next Run: busy_memory"]
    result["faults"]["refusal"]["refusal_to_admitted_s"] = None
    failed = {row[0] for row in probe.rows(result) if row[2] == "FAIL"}
    assert failed == {"paths", "settings", "hosts", "faults"}, failed


def test_the_judge_ignores_the_pages_own_format_characters_but_not_the_links():
    seen = {"bad": [], "cf": ["U+200B"], "near": [], "text": "", "exceptions": 0}
    assert probe.judge(seen, "ledger", {"U+200B"}) == []
    assert probe.judge({**seen, "near": ["U+200B"]}, "ledger", {"U+200B"})
    assert probe.judge({**seen, "cf": ["U+202E"]}, "ledger", {"U+200B"})
    assert probe.judge(seen, "experiment", {"U+200B"}) == ["no Run button"]


def test_the_full_probe_plans_the_issues_scale_and_quick_a_few_loads():
    keys = {p.url: tuple(f"k{i}_{p.url[:3]}" for i in range(6)) for p in probe.PAGES}
    full, quick = probe.link_loads(keys, False), probe.link_loads(keys, True)
    assert len(full) >= 350 and len(quick) <= 100, (len(full), len(quick))
    assert {url for url, _, _ in full} == set(keys)
    assert any(query.endswith("=") for _, _, query in full)  # an empty value alone
    assert any("%E2%80%AE" in query for _, _, query in full)  # a bidi override


def test_the_malformed_settings_cover_every_variable():
    from pclab.runners.settings import ENV_NAMES

    named = {name for name, _ in probe.bad_settings(quick=False)}
    assert named == set(ENV_NAMES.values())
    assert ("PCL_PG_TIMEOUT_S", "1e-9") in probe.bad_settings(quick=False)
