"""Each parameter declared once: `--help` shows its documentation and a choice's values, the
README's usage lines are the registry's, the ranks' parameters reach the report, and an
experiment with no cli.py still has its command line. No launch: fast."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import pytest
from runner_support import ROOT

from pclab.core.validation import InvalidInput
from pclab.experiments import base, command, registry
from pclab.experiments.declare import Declared, param
from pclab.runners import launcher
from pclab.runners.results import RunResult


def _squeezed(text: str) -> str:
    """Text without its whitespace: argparse re-wraps help (and splits at hyphens)."""
    return "".join(text.split())


def _help(name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        registry.cli(name)(["--help"])
    assert done.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("name", registry.names())
def test_every_parameter_is_documented_and_help_shows_it_and_each_choice(name):
    params = command.params_of(registry.get(name))
    docs = params.docs()
    shown = _squeezed(_help(name))
    for attr, option, spec, _ in params.declared():
        assert docs.get(attr), f"{name}: {attr} has no documentation under its declaration"
        if spec.option:
            assert _squeezed(docs[attr]) in shown, f"{name} --help lacks {attr}'s doc"
            assert "--" + option.replace("_", "-") in shown
            for value in spec.choices:
                assert _squeezed(f"one of {', '.join(spec.choices)}") in shown, value


@pytest.mark.parametrize("name", registry.names())
def test_the_readme_usage_lines_are_the_registrys(name):
    lines = (ROOT / "README.md").read_text().splitlines()
    prefix = f"pclab run {name} --json"
    written = [line.split("  #")[0].rstrip() for line in lines if line.startswith(prefix)]
    if name == "trainer_check":  # `pclab check TRAINER.py ...`, its own line
        assert written == []
    else:
        usage = command.usage(registry.get(name))
        assert written == [usage], f"README.md's line for {name} should read: {usage}"


@dataclass(frozen=True)
class Toy(Declared):
    order: str = param("ascending", "walk order", choices=("ascending", "descending"))
    """Which bucket comes first."""
    world_size: int = param(2, "processes", lambda value, field: value, option=False)


def test_a_choice_checks_its_values_and_names_them():
    assert Toy.checked(order="descending").order == "descending"
    with pytest.raises(InvalidInput) as caught:
        Toy.checked(order="sideways")
    assert "sideways" in str(caught.value) and "ascending, descending" in str(caught.value)
    assert Toy.docs() == {"order": "Which bucket comes first."}
    with pytest.raises(TypeError, match="needs a check or choices"):
        param(1, "no check")


def test_a_class_without_source_has_no_docs():
    made = dataclass(frozen=True)(type("Made", (Declared,), {"__annotations__": {}}))
    assert made.docs() == {}


def _experiment(ranks: tuple[dict, ...]) -> base.Experiment:
    def build_report(got):
        return {"ranks": len(got)}

    return base.Experiment("toy", "toy", Toy.checked, build_report, lambda r: True, 1.0)


@pytest.fixture
def launched(monkeypatch):
    """Experiment.run with `launch` answering the ranks given."""

    def with_ranks(*ranks: dict) -> RunResult:
        finished = RunResult.finished(ranks, 0.1, "h")
        monkeypatch.setattr(launcher, "launch", lambda *a, **k: finished)
        return _experiment(ranks).run(Toy.checked())

    return with_ranks


def test_the_ranks_parameters_reach_the_report(launched):
    sent = {"order": "ascending", "world_size": 2}
    result = launched({"rank": 0, "parameters": sent}, {"rank": 1, "parameters": sent})
    assert result.ok and result.report == {"ranks": 2, "parameters": sent}


def test_ranks_that_disagree_on_the_parameters_fail_the_run(launched):
    result = launched(
        {"rank": 0, "parameters": {"order": "ascending"}},
        {"rank": 1, "parameters": {"order": "descending"}},
    )
    assert not result.ok and "disagree on the parameters" in result.message


def test_a_worker_without_rank_main_keeps_its_report(launched):
    result = launched({"rank": 0}, {"rank": 1})
    assert result.ok and result.report == {"ranks": 2}


def test_without_a_cli_module_the_command_line_comes_from_the_experiment(monkeypatch):
    monkeypatch.setitem(registry.EXPERIMENTS, "toy", "pclab.experiments.clipping")
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        registry.cli("toy")(["--help"])
    assert "pclab run clipping" in out.getvalue() and "{inf,nan}" in out.getvalue()
