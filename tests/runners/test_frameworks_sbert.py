"""The sentence-transformers rows of the framework table (pclab/artifacts/framework_checks.json)
against real runs: the five adapters (examples/frameworks/sentence_transformers/sbert_*.py, the
library's own loss classes on a SentenceTransformer built from its modules) re-run through the
coupled trainer check on two Gloo processes (P = 2, K = 2), in one launch, and compared with their
records, with the objective each setting's arithmetic names, and with the evidence every rank writes
that the library's loss ran on the DDP-wrapped model ($PCL_FRAMEWORK_RECORD).

What sentence-transformers 6.2.0 measured (torch 2.13.0, float64):

- MultipleNegativesRankingLoss, gather_across_devices=False (its default), the rank's K
  microbatches one per-device batch: a pool per rank (rank_pool, factor 1);
- with gather_across_devices=True: the global batch, the same update;
- CachedMultipleNegativesRankingLoss (GradCache): a pool per rank without the gather, the global
  batch with it; GradCache pools the rank's whole batch, never another rank's;
- MultipleNegativesRankingLoss with naive accumulation (each microbatch's loss / K): a pool per
  microbatch (microbatch_pool, factor 1): accumulation does not enlarge the pool (#2916).

The check's objective is the library's loss on the rows given (sbert_model.embedding_loss);
it is tested here against InfoNCE written out by hand (cosine similarity x 20, float64).

    python -m pytest tests/runners/test_frameworks_sbert.py -q
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from runner_support import assert_coupled_record_is_fresh, checked_with_evidence

from pclab.experiments.trainer_check import frameworks

PACKAGE = "sentence-transformers"
STEPS_PER_SCENARIO = 2  # the check's train_step calls: the user's optimizer, then SGD at lr 1
SCHEMES = {  # adapter -> the objective its arithmetic names
    "sbert_mnrl": "rank_pool",
    "sbert_mnrl_gather": "global_batch",
    "sbert_cached_mnrl": "rank_pool",
    "sbert_cached_mnrl_gather": "global_batch",
    "sbert_mnrl_accumulate": "microbatch_pool",
    "sbert_mnrl_gather_accumulate": "microstep_pool",  # a gather per microstep (#2916)
}
SETTINGS = [s for s in frameworks.SETTINGS if s.package == PACKAGE]
ADAPTERS = [s.adapter for s in SETTINGS]
# One launch of the six adapters through the warm pool: ~70 s beside a loaded machine.
pytestmark = pytest.mark.timeout(900)


def _installed() -> bool:
    return frameworks.installed_version(PACKAGE) is not None


@pytest.fixture(scope="module")
def runs(tmp_path_factory, warm_pool):
    """One launch of every sentence-transformers adapter, with every rank's evidence."""
    if not _installed():
        pytest.skip(f"{PACKAGE} is not installed")
    folder = tmp_path_factory.mktemp("sbert")
    checks, lines = checked_with_evidence(SETTINGS, warm_pool, folder)
    return SimpleNamespace(checks=checks, lines=lines)


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_fresh_run_gives_the_recorded_row(runs, adapter):
    fresh = assert_coupled_record_is_fresh(runs.checks[adapter], adapter)
    assert fresh["residual"] < 1e-12 and fresh["accum"] == frameworks.ACCUM
    assert fresh["scale_groups"] == [] and set(fresh["schemes"].values()) == {SCHEMES[adapter]}


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_setting_minimises_the_objective_its_arithmetic_names(runs, adapter):
    """Every scenario: the named objective alone fits (factor 1, residual at rounding), and
    only the global batch's passes."""
    check = runs.checks[adapter]
    want = SCHEMES[adapter]
    assert check["mode"] == "coupled" and check["dtype"] == "float64"
    for s in check["scenarios"]:
        assert (s["scheme"], s["matching_schemes"]) == (want, [want]), s["name"]
        assert s["fits"][want]["factor"] == pytest.approx(1.0, rel=1e-9)
        assert s["residual"] < 1e-12 and not s["left_out"]
        assert s["passed"] is (want == "global_batch")
    assert check["status"] == ("same_update" if want == "global_batch" else "different")


def _forward_rows(adapter: str, sizes: list[int]) -> list[int]:
    """Rows per forward of the SentenceTransformer, per column (anchor, positive): the whole
    batch once; GradCache's mini-batches (mini_batch_size = the largest microbatch) embedded
    without a graph, then again with one; one microbatch a microstep when accumulating."""
    if adapter.endswith("_accumulate"):
        return [n for n in sizes for _ in range(2)]
    if "cached" in adapter:
        total, size = sum(sizes), max(sizes)
        chunks = [min(size, total - begin) for begin in range(0, total, size)]
        return chunks * 4
    return [sum(sizes)] * 2


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_librarys_loss_ran_on_the_ddp_model(runs, adapter):
    """Per rank and train_step: the loss class is the library's, with the setting's gather,
    handed the DistributedDataParallel wrapper (as SentenceTransformerTrainer does), and the
    model ran the forwards that class makes."""
    check = runs.checks[adapter]
    cached = "cached" in adapter
    name = "CachedMultipleNegativesRankingLoss" if cached else "MultipleNegativesRankingLoss"
    for rank in (0, 1):
        mine = [x for x in runs.lines if x["adapter"] == adapter and x["rank"] == rank]
        calls = [s for s in check["scenarios"] for _ in range(STEPS_PER_SCENARIO)]
        assert len(mine) == len(calls)
        for line, s in zip(mine, calls, strict=True):
            assert line["loss_class"].startswith("sentence_transformers.")
            assert line["loss_class"].endswith(f".{name}") and line["world_size"] == 2
            assert line["gather_across_devices"] is ("_gather" in adapter)
            assert (line["wrapped_in"], line["is_the_wrapper"]) == ("DistributedDataParallel", True)
            sizes = s["sizes"][rank]
            assert line["mini_batch_size"] == (max(sizes) if cached else None)
            assert line["forward_rows"] == _forward_rows(adapter, sizes), s["name"]
            assert line["microsteps"] == (2 if adapter.endswith("accumulate") else 1)


@pytest.mark.skipif(not _installed(), reason=f"{PACKAGE} is not installed")
def test_the_checks_objective_is_infonce_with_cosine_similarity(monkeypatch):
    """sbert_model.embedding_loss (the library's loss on the rows given) against InfoNCE typed
    out: logits = 20 cos(q_i, d_j), positive j = i, extra rows as negatives; value and
    gradients in float64."""
    monkeypatch.syspath_prepend(str(frameworks.BY_CODE["sbert_mnrl"].path.parent))
    import sbert_model

    model = sbert_model.build_model()
    gen = torch.Generator().manual_seed(3)
    queries = torch.randn(3, sbert_model.OUTPUT, generator=gen, dtype=torch.float64)
    documents = torch.randn(5, sbert_model.OUTPUT, generator=gen, dtype=torch.float64)
    for rows in (3, 5):  # the pool alone, and with two extra negatives
        q, d = queries.clone().requires_grad_(), documents[:rows].clone().requires_grad_()
        got = sbert_model.embedding_loss(model, q, d)
        got_grads = torch.autograd.grad(got, (q, d))
        q2, d2 = queries.clone().requires_grad_(), documents[:rows].clone().requires_grad_()
        cos = (q2 / q2.norm(dim=1, keepdim=True)) @ (d2 / d2.norm(dim=1, keepdim=True)).T
        want = torch.nn.functional.cross_entropy(20.0 * cos, torch.arange(3))
        want_grads = torch.autograd.grad(want, (q2, d2))
        assert got.item() == pytest.approx(want.item(), rel=1e-12)
        for g, w in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not _installed(), reason=f"{PACKAGE} is not installed")
def test_the_model_is_built_offline_deterministic_and_float64(monkeypatch):
    monkeypatch.syspath_prepend(str(frameworks.BY_CODE["sbert_mnrl"].path.parent))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import sbert_model

    first, second = sbert_model.build_model(), sbert_model.build_model()
    assert first is not second
    for (name, a), (_, b) in zip(first.named_parameters(), second.named_parameters()):
        assert a.dtype == torch.float64 and torch.equal(a, b), name
        assert a.requires_grad, name  # the word embeddings train too
    pair = sbert_model.make_microbatch(3, torch.Generator().manual_seed(0))
    q, d = sbert_model.embed(first, pair)
    assert q.shape == d.shape == (3, sbert_model.OUTPUT)


def test_checking_the_contract_imports_no_framework():
    """The command loads each adapter in its own process to check the contract: the adapters
    import sentence_transformers only inside their functions, and read as coupled files."""
    import sys

    from pclab.experiments.trainer_check.trainer_file import load

    before = "sentence_transformers" in sys.modules
    for adapter in ADAPTERS:
        trainer = load(frameworks.BY_CODE[adapter].path)
        assert trainer.mode == "coupled", adapter
    assert ("sentence_transformers" in sys.modules) is before
