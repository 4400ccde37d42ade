"""The mode registry (modes.py): every registered mode supplies each member of the rank and
report protocols with the arguments pipeline.py and report.py pass, and a file's mode is read
from the file by the first contract that claims it."""

from __future__ import annotations

import inspect
import types

import pytest

from pclab.experiments.trainer_check import mode_protocols, modes


def _members(protocol: type) -> dict[str, list[str] | None]:
    """Protocol member -> its parameter names (None: a plain attribute), its bases' too."""
    found: dict[str, list[str] | None] = {}
    for cls in protocol.__mro__:
        if cls in (object,) or cls.__name__ in ("Protocol", "Generic"):
            continue
        for name in getattr(cls, "__annotations__", {}):
            found.setdefault(name, None)
        for name, value in vars(cls).items():
            if inspect.isfunction(value) and not name.startswith("_"):
                found.setdefault(name, list(inspect.signature(value).parameters)[1:])
    return found


@pytest.mark.parametrize("mode", modes.MODES, ids=modes.NAMES)
@pytest.mark.parametrize("side", ["rank", "report"])
def test_every_mode_supplies_its_protocol(mode, side):
    """A rank side is an update's steps (RankMode) or a whole run's (RunMode, its own
    check_scenario); a report side is a ReportMode."""
    module = mode.rank_side() if side == "rank" else mode.report_side()
    protocol = mode_protocols.ReportMode
    if side == "rank":
        protocol = (
            mode_protocols.RunMode if hasattr(module, "check_scenario") else mode_protocols.RankMode
        )
    for name, arguments in _members(protocol).items():
        assert hasattr(module, name), f"{module.__name__} lacks {name}"
        if arguments is not None:
            given = list(inspect.signature(getattr(module, name)).parameters)
            assert given == arguments, f"{module.__name__}.{name}{tuple(given)}"


@pytest.mark.parametrize("mode", modes.MODES, ids=modes.NAMES)
def test_every_mode_has_a_contract_and_summary(mode):
    for member in ("claims", "problems", "SIGNATURES"):
        assert hasattr(mode.contract, member)
    assert callable(mode._side("summary").lines)


def test_the_first_contract_that_claims_a_file_reads_its_mode():
    def fake(**functions):
        module = types.ModuleType("trainer")
        for name in functions:
            setattr(module, name, lambda *a: None)
        return module

    assert modes.of_module(fake(batch_loss=1, build_model=1)).name == "coupled"
    assert modes.of_module(fake(embed=1, embedding_loss=1)).name == "coupled"
    assert modes.of_module(fake(token_losses=1, embed=1)).name == "token"
    assert modes.of_module(fake(train_loop=1, train_step=1)).name == "run"
    assert modes.of_module(fake()).name == "token"  # the token mode claims every other file
    assert modes.MODES[-1].name == "token"


@pytest.mark.parametrize(
    ("flag", "callables", "problem"),
    [
        (True, ("embed", "embedding_loss"), None),
        (False, ("batch_loss",), None),
        (True, ("batch_loss",), "SYMMETRIC = True without embed() and embedding_loss()"),
        (1, ("embed", "embedding_loss"), "SYMMETRIC=1 must be True or False"),
        ("yes", ("embed", "embedding_loss"), "SYMMETRIC='yes' must be True or False"),
    ],
)
def test_the_coupled_contract_reads_symmetric(flag, callables, problem):
    """SYMMETRIC (coupled_contract): a bool, and only beside embed and embedding_loss, whose
    one direction it declares; `symmetric` reads it as True only when it is True."""
    from pclab.experiments.trainer_check import coupled_contract

    module = types.ModuleType("trainer")
    for name in ("build_model", "train_step", "make_microbatch", *callables):
        setattr(module, name, lambda *a: None)
    module.SYMMETRIC = flag
    found = coupled_contract.problems(module)
    assert found == ([] if problem is None else [found[0]])
    if problem is not None:
        assert found[0].startswith(problem), found
    assert coupled_contract.symmetric(module) is (flag is True)
