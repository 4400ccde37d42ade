"""The "Frameworks, measured" page: every recorded row is shown with its record's verdict (the
one the README's generated table states), the rows that cannot run here say why (and offer no
Run), a row whose framework is missing on the server says so, a live run replaces the record
and shares the "Check a trainer" page's cache, and the page renders in Chinese.

No process is started: the registry's "trainer_check" is the stand-in of
tests/app/test_check_trainer_page.py (hand-made rank outputs of a known scheme).

    python -m pytest tests/app/test_frameworks_page.py -q
"""

from __future__ import annotations

import re

import pytest

from pclab.experiments.trainer_check import frameworks
from pclab.ui import framework_issues, framework_rows, i18n
from pclab.ui import trainer_views as views
from pclab.ui.plain_text import plain
from tests.app.sections_helper import open_section
from tests.app.test_check_trainer_page import chart_frames, hand_made_ranks, launches  # noqa: F401

PAGE = "pclab/sections/frameworks.py"
# Each setting's finding: its record's verdict (None: not run), the one the README's generated
# table states (tests/trainer_check/test_framework_table.py holds that table to the record).
FINDINGS = {code: record["status"] for code, record in frameworks.by_code().items()}
COLOURS = {"same_update": "green", "different": "red", "no_evidence": "orange", None: "gray"}
BADGE = re.compile(r":(\w+)-badge\[([^\]]+)\]")


def badge(lang: str, verdict: str | None) -> tuple[str, str]:
    words = "frameworks.not_run" if verdict is None else f"check.verdict.{verdict}"
    return COLOURS[verdict], i18n.text(lang, words)


def verdict_lines(at) -> list[tuple[str, str]]:
    """Each row's verdict badge (colour, words), in page order."""
    sep = " · "
    lines = [m.value for m in at.markdown if sep in m.value and BADGE.match(m.value)]
    return [BADGE.match(line).groups() for line in lines]


def infos(at) -> list[str]:
    return [i.value for i in at.info]


def reason(lang: str, code: str) -> str:
    """A row's why-not-here text, its {version} the record's."""
    version = plain(frameworks.by_code()[code]["version"])
    return i18n.text(lang, f"frameworks.reason.{code}", version=version)


def run_buttons(at) -> set[str]:
    return {b.key.removeprefix("fw_run_") for b in at.button if b.key.startswith("fw_run_")}


def provenance(at, lang: str = "en") -> list[str]:
    starts = [i18n.text(lang, k).split("{")[0] for k in ("frameworks.recorded_torch",)]
    starts += [i18n.text(lang, "frameworks.measured_here").split("{")[0]]
    starts += [i18n.text(lang, "frameworks.recorded").split("{")[0]]
    return [c.value for c in at.caption if c.value.startswith(tuple(starts))]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_row_is_shown_with_the_readmes_verdict(lang):
    at = open_section(PAGE, lang=lang)
    codes = [s.code for s in frameworks.SETTINGS]
    assert codes == list(FINDINGS)  # a record for every setting, in the table's order
    assert verdict_lines(at) == [badge(lang, FINDINGS[c]) for c in codes]
    table = at.table[0].value  # the summary: one row per setting, the same verdicts
    verdicts = [BADGE.match(v).groups() for v in table[i18n.text(lang, "frameworks.col.verdict")]]
    assert verdicts == [badge(lang, FINDINGS[c]) for c in codes]
    settings = list(table[i18n.text(lang, "frameworks.col.setting")])
    assert settings == [i18n.text(lang, f"frameworks.setting.{c}") for c in codes]
    titles = [m.value for m in at.markdown if m.value.startswith("**")]
    for code in codes:
        assert any(i18n.text(lang, f"frameworks.setting.{code}") in t for t in titles), code
    defaults = [t for t in titles if "-badge[" in t and i18n.text(lang, "frameworks.default") in t]
    assert len(defaults) == sum(s.default for s in frameworks.SETTINGS)
    if lang == "zh":
        assert re.search(r"[\u4e00-\u9fff]", at.title[0].value)
        assert reason("zh", "torchtitan") in infos(at)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_reason_takes_its_version_from_the_record(lang):
    """Issue 45: a reason or a line of advice that names the framework's version reads it from
    the row's record ({version}); a version typed into the catalogue would go stale."""
    say = i18n.catalogue(lang)
    for setting, record in framework_rows.records():
        typed = f"{setting.package} {record['version']}"
        for section in ("reason", "advice"):
            text = say.get(f"frameworks.{section}.{setting.code}", "")
            assert typed not in text, (section, setting.code)
    titan = next(s for s in frameworks.SETTINGS if s.code == "torchtitan")
    recorded = dict(frameworks.by_code()["torchtitan"], version="9.8.7")
    assert "torchtitan 9.8.7" in i18n.text(lang, "frameworks.reason.torchtitan", version="9.8.7")
    assert f"torchtitan {plain('9.8.7')}" in framework_rows.why_not_here(titan, recorded)


def test_rows_that_cannot_run_here_say_why_and_offer_no_run():
    at = open_section(PAGE)
    say = i18n.catalogue("en")
    assert reason("en", "torchtitan") in infos(at)
    assert reason("en", "litgpt_finetune") in infos(at)  # its own environment
    (torchtitan,) = [r for r in frameworks.load()["records"] if r["framework"] == "torchtitan"]
    reasons = [
        e.markdown[0].value for e in at.expander if e.label == say["frameworks.recorded_reason"]
    ]
    assert plain(torchtitan["reason"]) in reasons  # the record's own words
    installed = {
        s.code for s, r in framework_rows.records() if not framework_rows.why_not_here(s, r)
    }
    assert run_buttons(at) == installed
    assert not {"torchtitan", "litgpt_finetune"} & run_buttons(at)
    # every row says which versions recorded it, with the date
    records = frameworks.load()["records"]
    lines = provenance(at)
    assert len(lines) == len(records)
    for line, record in zip(lines, records, strict=True):
        assert record["recorded_at"][:10] in line and plain(record["version"]) in line


def test_upstream_issues_are_links_built_from_data():
    at = open_section(PAGE)
    links = [m.value for m in at.markdown if m.value.startswith("Upstream:")]
    assert len(links) == len(framework_issues.ISSUES)
    assert "(https://github.com/Lightning-AI/pytorch-lightning/issues/20350)" in " ".join(links)
    for bad in ("a/b/../c", "a b/c", "owner/name)[x](javascript:alert(1)", "/etc"):
        with pytest.raises(ValueError, match="repository"):
            framework_issues.issue_url(bad, 1)
    with pytest.raises(ValueError, match="number"):
        framework_issues.issue_url("pytorch/torchtitan", 0)


def page_without(monkeypatch, package: str):
    """The page on a server whose Python lacks `package`."""
    real = framework_rows.installed_version
    monkeypatch.setattr(
        framework_rows, "installed_version", lambda p: None if p == package else real(p)
    )
    framework_rows.installed_versions.clear()
    try:
        return open_section(PAGE)
    finally:
        framework_rows.installed_versions.clear()


def test_a_framework_missing_on_the_server_shows_its_record_and_why(monkeypatch):
    at = page_without(monkeypatch, "lightning")
    missing = i18n.text("en", "frameworks.reason.not_installed", package="lightning")
    assert infos(at).count(missing) == 2  # both Lightning rows
    assert not {"lightning_accumulate", "lightning_global_tokens"} & run_buttons(at)
    assert verdict_lines(at)[3] == badge("en", "different")  # still the recorded verdict


def test_the_heat_map_is_the_records_weights():
    """The default Accelerate row: N / (P K n_rk) for terms 14, 7 / 5, 3 (N = 29)."""
    at = open_section(PAGE)
    _, frame = chart_frames(at)[0]
    cells = {(r.rank, r.microstep): r.weight for r in frame.itertuples()}
    counts = ((14, 7), (5, 3))
    expected = {(r, k): 29 / (2 * 2 * n) for r, row in enumerate(counts) for k, n in enumerate(row)}
    assert cells == pytest.approx(expected)


def test_a_live_run_replaces_the_record_and_shares_the_check_pages_cache(launches):  # noqa: F811
    at = open_section(PAGE)
    at.button(key="fw_run_hf_trainer").click().run()
    assert not at.exception
    path = str(views.bundled_path("hf_trainer"))
    assert launches == [((path,), 2, 2)]
    here = i18n.text("en", "frameworks.measured_here").split("{")[0]
    assert sum(line.startswith(here) for line in provenance(at)) == 1
    assert verdict_lines(at)[5] == badge("en", "same_update")
    # the same trainer file, P and K on the check page: the stored result, no second launch
    check = open_section("pclab/sections/check_trainer.py", chk_example="hf_trainer")
    check.button(key="chk_run").click().run()
    assert not check.exception and len(launches) == 1


def test_a_live_run_that_measures_another_scheme_says_so(launches):  # noqa: F811
    launches.use(lambda p, k, example: hand_made_ranks(p, k, "ddp_mean_of_local_means"))
    at = open_section(PAGE)
    at.button(key="fw_run_accelerate_guide").click().run()
    assert not at.exception
    assert verdict_lines(at)[1] == badge("en", "different")
    changed = i18n.text("en", "frameworks.changed", scheme="x", recorded="y").split("x")[0]
    assert any(m.value.startswith(changed) for m in at.markdown)
    advice = i18n.text("en", "frameworks.advice.accelerate_guide")
    assert not any(m.value == advice for m in at.markdown)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_coupled_row_shows_its_objective_factors_and_residual_not_a_grid(lang):
    """The coupled rows (OpenCLIP at K = 1, sentence-transformers at K = 2), as recorded: P, K
    and the items per microbatch, the objective explained, each scenario's scheme, the factor
    (one per parameter group where they differ: the defaults' towers 1/P beside logit_scale 1,
    the x P compensation's towers 1 beside logit_scale P; 1 on every parameter for a named
    objective, local_loss alone's query_path_only too) and the residual; a heat map only for
    the rows with weights per label."""
    at = open_section(PAGE, lang=lang)
    assert not at.exception
    records = frameworks.load()["records"]
    mine = [r for r in records if r.get("mode") == "coupled"]
    coupled_codes = {c for c in FINDINGS if c.startswith(("openclip_", "sbert_"))}
    assert {"openclip_global_loss", "sbert_mnrl"} <= coupled_codes
    assert {frameworks.setting_of(r).code for r in mine} == coupled_codes
    lines, captions = [m.value for m in at.markdown], [c.value for c in at.caption]
    for r in mine:
        objective = i18n.text(lang, f"coupled.explain.{r['scheme']}")
        assert i18n.text(lang, "frameworks.coupled_objective", objective=objective) in lines
        each = [
            i18n.join(lang, [n, i18n.text(lang, f"coupled.scheme.{s}")], "head")
            for n, s in r["schemes"].items()
        ]
        schemes = i18n.join(lang, each)
        assert i18n.text(lang, "frameworks.coupled_schemes", schemes=schemes) in captions
        residual = i18n.text(lang, "frameworks.residual", residual=f"{r['residual']:.1e}")
        assert residual in captions, r["setting"]
    head = i18n.PUNCTUATION[lang]["head"]  # "0: 3" in English, "0：3" in Chinese
    for accum, sizes in ((1, "0: 3 · 1: 3"), (2, "0: 3 + 2 · 1: 3 + 2")):
        sizes = sizes.replace(": ", head)
        items = i18n.text(lang, "frameworks.coupled_items", world_size=2, accum=accum, sizes=sizes)
        coupled = ("open-clip-torch", "sentence-transformers")
        rows = [s for s in frameworks.SETTINGS if s.package in coupled and s.accum == accum]
        assert lines.count(items) == len(rows)  # the OpenCLIP rows at K = 1, sbert's at K = 2
    towers = i18n.join(lang, ["`visual.weight`", "`visual.bias`", "`text.weight`", "`text.bias`"])
    for factor, parameters in (("0.5", towers), ("1", "`logit_scale`"), ("2", "`logit_scale`")):
        want = "- " + i18n.text(
            lang, "coupled.explain.factor", factor=factor, parameters=parameters
        )
        assert want in lines, want
    everywhere = "- " + i18n.text(lang, "frameworks.factor_everywhere", factor="1")
    named = [r for r in mine if r["scheme"] not in ("other", "scaled")]  # one factor, 1
    assert lines.count(everywhere) == len(
        named
    )  # gather_with_grad with/without local_loss; sbert's
    # local_loss without gather_with_grad: named (query_path_only in each direction), no row
    # left as `other`, so none says that no factor fits
    local = next(r for r in mine if frameworks.setting_of(r).code == "openclip_local_loss")
    assert local["scheme"] == "query_path_only" and local in named
    assert not [r for r in mine if r["scheme"] == "other"]
    no_factor = i18n.text(lang, "frameworks.no_factor", factor="@").split("@")[0]
    assert not [line for line in lines if line.startswith(no_factor)]
    scheme = i18n.text(lang, "coupled.scheme.microbatch_pool")
    assert any(line.endswith(scheme) for line in lines if BADGE.match(line))
    with_weights = [r for r in records if r["weights"] is not None]
    assert len(chart_frames(at)) == len(with_weights)


def test_a_missing_open_clip_says_to_install_it_without_its_dependencies(monkeypatch):
    at = page_without(monkeypatch, "open-clip-torch")
    pin = frameworks.NO_DEPS["open-clip-torch"]
    missing = i18n.text("en", "frameworks.reason.not_installed_no_deps", pin=pin)
    assert infos(at).count(missing) == 5 and "--no-deps" in missing
    codes = {s.code for s in frameworks.SETTINGS if s.package == "open-clip-torch"}
    assert not codes & run_buttons(at)


def test_an_openclip_row_runs_live_at_k_1(launches):  # noqa: F811
    """Its Run launches the bundled adapter at P = 2 and K = 1 and shows the coupled record
    it makes (the stand-in reports real ranks recorded from scaled_by_world_size.py at K = 1:
    factor 2 everywhere)."""
    from tests.app.test_check_trainer_coupled import RECORDED

    launches.use(lambda world_size, accum, example: tuple(RECORDED["scaled_by_world_size"]))
    at = open_section(PAGE)
    at.button(key="fw_run_openclip_times_world_size").click().run()
    assert not at.exception
    assert launches == [((str(views.bundled_path("openclip_times_world_size")),), 2, 1)]
    here = i18n.text("en", "frameworks.measured_here").split("{")[0]
    assert sum(line.startswith(here) for line in provenance(at)) == 1
    parameters = i18n.join("en", ["`logit_scale`", "`encoder.weight`", "`encoder.bias`"])
    factor = "- " + i18n.text("en", "coupled.explain.factor", factor="2", parameters=parameters)
    assert factor in [m.value for m in at.markdown]


def test_a_live_run_of_a_coupled_row_shows_what_it_measured(launches):  # noqa: F811
    """Run on a sentence-transformers row: the coupled report (a real run's rank outputs, the
    coupled page's fixture: GradCache, the global batch) replaces the record; its scheme in the
    coupled words, the changed line, and the live factor."""
    from tests.app.test_check_trainer_coupled import RECORDED

    launches.use(lambda world_size, accum, example: tuple(RECORDED["gradcache"]))
    at = open_section(PAGE)
    at.button(key="fw_run_sbert_mnrl").click().run()
    assert not at.exception
    path = str(views.bundled_path("sbert_mnrl"))
    assert launches == [((path,), 2, 2)]
    codes = [s.code for s in frameworks.SETTINGS]
    line = verdict_lines(at)[codes.index("sbert_mnrl")]
    assert line == badge("en", "same_update")
    say = i18n.catalogue("en")
    changed = i18n.text(
        "en",
        "frameworks.changed",
        scheme=say["coupled.scheme.global_batch"],
        recorded=say["coupled.scheme.rank_pool"],
    )
    assert changed in [m.value for m in at.markdown]
    objective = i18n.text("en", "coupled.explain.global_batch")
    lines = [m.value for m in at.markdown]
    assert i18n.text("en", "frameworks.coupled_objective", objective=objective) in lines
    assert "- " + i18n.text("en", "frameworks.factor_everywhere", factor="1") in lines


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_summary_names_each_versions_package_and_why_a_right_scheme_differs(lang):
    """Issue 45: "transformers Trainer + DeepSpeed" showed 0.19.8 and the padded
    run_clm_no_trainer.py row 1.15.0 as if they were transformers'; each version now carries
    its package (and a row driving transformers through DeepSpeed or Accelerate names both).
    The torchtune row whose scheme is the global token mean says in its cell the scenario it
    failed (N = 0); the Default header stays on one line."""
    at = open_section(PAGE, lang=lang)
    assert not at.exception, at.exception
    say = lambda key, **v: i18n.text(lang, key, **v)  # noqa: E731
    table = at.table[0]
    rows = table.value
    records = frameworks.by_code()
    codes = [s.code for s in frameworks.SETTINGS]
    versions = dict(zip(codes, rows[say("frameworks.col.version")], strict=True))
    for code in codes:
        r = records[code]
        also = "".join(f" + {p} {v}" for p, v in r.get("also", {}).items())
        assert versions[code] == (f"{r['package']} {r['version']}{also}" if r["version"] else "—")
    # a row that drives transformers through another package names both versions (issue 45)
    for code, first in (
        ("hf_trainer_deepspeed_zero2", "deepspeed"),
        ("clm_no_trainer_padded", "accelerate"),
    ):
        assert re.fullmatch(rf"{first} [\d.]+ \+ transformers [\d.]+", versions[code]), versions[
            code
        ]
    verdicts = dict(zip(codes, rows[say("frameworks.col.verdict")], strict=True))
    masked = records["torchtune_full_finetune_masked"]
    failed = [say(f"check.scenario.{n}") for n, ok in masked["scenarios"].items() if not ok]
    assert failed == [say("check.scenario.no_labels")]  # the record's own finding
    reason = say("frameworks.failed_in", scenarios=failed[0])
    assert verdicts["torchtune_full_finetune_masked"].endswith(f"] {reason}")
    said = [c for c, v in verdicts.items() if BADGE.sub("", v).strip()]  # words past the badge
    assert said == ["torchtune_full_finetune_masked"]  # a wrong scheme says why by itself
    header = list(rows.columns).index(say("frameworks.col.default"))
    styles = table.proto.arrow_data.styler.styles
    assert f".col_heading.col{header} {{ white-space: nowrap }}" in styles
    # and the Markdown inside the header, which sets white-space of its own (issue 45)
    assert f".col_heading.col{header} * {{ white-space: nowrap }}" in styles


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_olmo_core_cites_torchtitans_fix_as_related_not_as_its_own(lang):
    at = open_section(PAGE, lang=lang)
    upstream = i18n.text(lang, "frameworks.issues", links="").rstrip()
    related = i18n.text(lang, "frameworks.related", links="{}").split("{}")[0]
    link = "(https://github.com/pytorch/torchtitan/issues/2206)"
    lines = [m.value for m in at.markdown if link in m.value]
    assert lines and all(line.startswith(related) for line in lines)
    assert not any(line.startswith(upstream) for line in lines)
    assert "olmo_core_train_module" not in framework_issues.ISSUES


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_rows_across_a_run_say_their_record_in_the_readers_language(lang):
    """Each framework's run record (frameworks.run_table) as a block of its own: every column
    in the reader's words (run_words, the README's table in English), the versions and
    commands that recorded it, and its upstream issues as links built from data."""
    from pclab.experiments.trainer_check.frameworks import run_table, run_words

    at = open_section(PAGE, lang)
    texts = [m.value for m in at.markdown]
    captions = [c.value for c in at.caption]
    say = lambda key, **values: i18n.text(lang, key).format(**values)  # noqa: E731
    assert i18n.text(lang, "frameworks.runs.heading") in [h.value for h in at.subheader]
    records = run_table.load_runs()["records"]
    assert records, "no run record"
    for record in records:
        assert f"**{plain(record['framework'])}**" in texts
        words = run_words.cells(record, say)
        for column in run_words.COLUMNS:
            heading = i18n.text(lang, f"frameworks.runs.{column}")
            assert f"**{heading}:** {words[column]}" in texts, (column, words[column])
        assert any(all(c in line for c in record["commands"]) for line in captions)
    links = [m for m in texts if m.startswith(say("frameworks.runs.upstream", links=""))]
    assert len(links) == len(framework_issues.RUN_ISSUES)
    assert "(https://github.com/Lightning-AI/pytorch-lightning/issues/19987)" in " ".join(links)
