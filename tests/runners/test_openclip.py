"""OpenCLIP's ClipLoss through the trainer check's coupled mode (examples/frameworks/openclip/):
its four settings of local_loss x gather_with_grad and the x P compensation, re-run in one
launch on two Gloo processes (P = 2, K = 1) through the session's warm pool, and compared with
their records and with the closed forms of their schemes. Every rank writes the evidence that
the installed open_clip/loss.py made the loss, under torch's DistributedDataParallel, without
importing the open_clip package or torchvision ($PCL_FRAMEWORK_RECORD).

open-clip-torch 3.3.0 installs without its dependencies (`pip install --no-deps -r
requirements-nodeps.txt`: they would bring torchvision, which would replace torch); without it
the run's tests skip and say so. What it measured (torch 2.13.0, float64), with the reference
OpenCLIP's own objective at world_size 1 over every rank's pairs:

- the defaults (local_loss=False, gather_with_grad=False): `scaled`, the image and text towers
  1/P, logit_scale 1: every rank takes the whole batch's loss, only its own rows with a graph;
- gather_with_grad=True, with or without local_loss: the same update (global_batch), to 2e-16;
- local_loss=True without gather_with_grad: `query_path_only` in each direction (the adapters'
  SYMMETRIC = True, embedding_loss one direction of ClipLoss), residual ~2e-16: every rank's
  images against every rank's texts gathered without gradient, its own included, and its texts
  against the images (before the check took a symmetric loss's directions: `other`, ~0.47);
- the defaults with the loss x P (tevatron#30): `scaled`, the towers 1, logit_scale P;
- the defaults with AdamW (tests/trainers/openclip_defaults_adamw.py): the same factors, but
  every parameter within ~1e-10 after the step; the first moments carry the factor.

    python -m pytest tests/runners/test_openclip.py -q
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from runner_support import ROOT, assert_coupled_record_is_fresh, checked_with_evidence

from pclab.experiments.trainer_check import EXPERIMENT, frameworks
from pclab.experiments.trainer_check.params import Params

PACKAGE = "open-clip-torch"
SETTINGS = [s for s in frameworks.SETTINGS if s.package == PACKAGE]
ADAPTERS = [s.adapter for s in SETTINGS]
P = frameworks.WORLD_SIZE
TOWERS = {"visual.weight", "visual.bias", "text.weight", "text.bias"}
# adapter -> (ClipLoss's local_loss, gather_with_grad, loss x P), as each file sets them
SWITCHES = {
    "openclip_global_loss": (False, False, False),
    "openclip_global_gather_grad": (False, True, False),
    "openclip_local_loss": (True, False, False),
    "openclip_local_gather_grad": (True, True, False),
    "openclip_times_world_size": (False, False, True),
}
# the closed forms: {factor: parameters} of each scaled setting, from how DDP's mean meets a
# gather without gradient (each rank's own rows reach the towers once: 1/P; logit_scale sees
# the whole loss on every rank: 1), times P where the loss is multiplied by P
SCALED = {
    "openclip_global_loss": {1 / P: TOWERS, 1.0: {"logit_scale"}},
    "openclip_times_world_size": {1.0: TOWERS, float(P): {"logit_scale"}},
}
SAME = {"openclip_global_gather_grad", "openclip_local_gather_grad"}
ADAMW = ROOT / "tests" / "trainers" / "openclip_defaults_adamw.py"  # the defaults, with AdamW
NOT_INSTALLED = (
    "open-clip-torch is not installed: pip install --no-deps -r requirements-nodeps.txt "
    "(without its dependencies: they would bring torchvision, which would replace torch)"
)
needs_open_clip = pytest.mark.skipif(
    frameworks.installed_version(PACKAGE) is None, reason=NOT_INSTALLED
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, warm_pool):
    """One launch of the five adapters (frameworks.check_adapters, as `--only open-clip-torch`
    records them) and one of the defaults with AdamW ("adamw"), through the session's warm
    pool, with every rank's evidence."""
    folder = tmp_path_factory.mktemp("openclip")
    checks, lines = checked_with_evidence(SETTINGS, warm_pool, folder)
    params = Params.checked([str(ADAMW)], world_size=P, accum=1)  # its evidence: not recorded
    result = EXPERIMENT.run(params, runtime=warm_pool)
    assert result.ok, result.message
    (checks["adamw"],) = result.report["checks"]
    return SimpleNamespace(checks=checks, lines=lines)


def _groups(s: dict) -> dict[float, set[str]]:
    return {round(g["factor"], 9): set(g["parameters"]) for g in s["scale_groups"]}


@needs_open_clip
@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_setting_gets_the_closed_form_of_its_scheme(runs, adapter):
    check = runs.checks[adapter]
    assert check["mode"] == "coupled" and check["accum_steps"] == 1 and check["dtype"] == "float64"
    # ClipLoss is symmetric: SYMMETRIC = True, embedding_loss one direction, every path named
    assert check["diagnoses"] == []
    for s in check["scenarios"]:
        assert all(row == s["sizes"][0] for row in s["sizes"])  # a gather needs it
        if adapter in SAME:
            assert s["scheme"] == "global_batch" and s["passed"], s["name"]
            assert s["max_abs_diff"] < 1e-14 and s["scale"] == pytest.approx(1, rel=1e-12)
        elif adapter in SCALED:
            assert s["scheme"] == "scaled" and not s["passed"] and s["residual"] < 1e-12
            want = {round(f, 9): group for f, group in SCALED[adapter].items()}
            assert _groups(s) == want, s["scale_groups"]
        else:  # local_loss without gather_with_grad: the query side of each direction
            assert s["scheme"] == "query_path_only" and not s["passed"] and s["scale_groups"] == []
            assert s["matching_schemes"] == ["query_path_only"] and s["residual"] < 1e-12
            assert s["left_out"] == {} and "query_path_only" in s["candidates"]
            assert s["fits"]["global_batch"]["residual"] > 0.1  # no multiple of the global one
    assert check["status"] == ("same_update" if adapter in SAME else "different")


@needs_open_clip
@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_run_measures_what_its_record_says(runs, adapter):
    fresh = assert_coupled_record_is_fresh(runs.checks[adapter], adapter)
    assert fresh["accum"] == 1 and set(fresh["schemes"].values()) == {fresh["scheme"]}
    path = f"examples/frameworks/openclip/{adapter}.py"
    assert fresh["command"] == f"pclab check {path} --accum 1 --json"


@needs_open_clip
@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_step_used_the_installed_cliploss_under_ddp(runs, adapter):
    """Per rank, one line per train_step (two per scenario: the user's optimizer, then SGD at
    lr 1): OpenCLIP's ClipLoss class from the installed open_clip/loss.py with the file's
    switches and the real rank count, the model in DistributedDataParallel, and neither the
    open_clip package nor torchvision imported."""
    import importlib.util

    loss_file = Path(next(iter(importlib.util.find_spec("open_clip").submodule_search_locations)))
    local_loss, gather_with_grad, times = SWITCHES[adapter]
    scenarios = runs.checks[adapter]["scenarios"]
    for rank in range(P):
        mine = [x for x in runs.lines if x["adapter"] == adapter and x["rank"] == rank]
        assert len(mine) == 2 * len(scenarios), (rank, len(mine))
        for line in mine:
            assert line["loss_class"] == "pclab_open_clip_loss.ClipLoss"
            assert Path(line["loss_file"]) == loss_file / "loss.py"
            assert (line["local_loss"], line["gather_with_grad"]) == (local_loss, gather_with_grad)
            assert line["times_world_size"] is times and line["loss_world_size"] == P
            assert line["wrapped_in"] == "DistributedDataParallel"
            assert not line["open_clip_imported"] and not line["torchvision_imported"]


def test_the_no_deps_pin_is_the_one_installed_and_declared():
    """requirements-nodeps.txt pins what frameworks.NO_DEPS names; the README installs it with
    --no-deps; an installed open-clip-torch is that version and left torch alone."""
    pins = [
        line.strip()
        for line in (ROOT / "requirements-nodeps.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert pins == list(frameworks.NO_DEPS.values())
    assert "pip install --no-deps -r requirements-nodeps.txt" in (ROOT / "README.md").read_text()
    assert "--no-deps -r requirements-nodeps.txt" in (ROOT / ".ci" / "run").read_text()
    version = frameworks.installed_version(PACKAGE)
    if version is not None:
        assert f"{PACKAGE}=={version}" == frameworks.NO_DEPS[PACKAGE]
        assert frameworks.installed_version("torch").startswith("2.13.0")


def test_checking_the_contract_imports_no_open_clip():
    """The command loads each adapter in its own process to check the contract: ClipLoss is
    loaded only when a loss is computed, and never through the open_clip package."""
    from pclab.experiments.trainer_check.trainer_file import load

    before = {m for m in ("open_clip", "torchvision", "pclab_open_clip_loss") if m in sys.modules}
    for adapter in ADAPTERS:
        assert load(frameworks.BY_CODE[adapter].path).mode == "coupled"
    after = {m for m in ("open_clip", "torchvision", "pclab_open_clip_loss") if m in sys.modules}
    assert after == before


@needs_open_clip
@pytest.mark.slow
def test_the_defaults_under_adamw_differ_in_the_moments_not_the_step(runs):
    """The defaults with AdamW (tests/trainers/openclip_defaults_adamw.py): the same factors
    per group, but Adam divides each gradient by its running magnitude, so a constant factor
    cancels in the step up to eps: every parameter within ~1e-10 of the reference's, the
    first moment off by the gradient's x 0.5."""
    check = runs.checks["adamw"]
    assert check["status"] == "different"
    for s in check["scenarios"]:
        want = {round(f, 9): group for f, group in SCALED["openclip_global_loss"].items()}
        assert s["scheme"] == "scaled" and _groups(s) == want, s["scale_groups"]
        first = s["first_divergence"]
        if first["tensor"].startswith("parameter "):  # the step itself: eps, no more
            assert first["abs_diff"] < 1e-9, first
        else:  # every parameter within the tolerance (1e-10); the moments carry the factor
            assert first["tensor"].startswith("optimizer exp_avg of "), first
            assert first["abs_diff"] > 1e-3
