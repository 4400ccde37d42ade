"""sentence-transformers across a run: `SentenceTransformerTrainer.train()` with
MultipleNegativesRankingLoss(gather_across_devices=True), K = 2, two epochs of 5 microbatches of
3 pairs a rank at P = 2 (run_sbert_trainer_mnrl_gather.py in
examples/frameworks/sentence_transformers/), through the coupled run mode once (one warm
launch), against its record, the evidence every rank writes ($PCL_FRAMEWORK_RECORD) and an
account computed here blind: InfoNCE written out (cosine x 20), each microstep pooled over the
ranks and the window's microsteps averaged, as the adapter's docstring reads the trainer's
source.

Measured (sentence-transformers 6.2.0, transformers 5.24.0, accelerate 1.15.0, torch 2.13.0):
every full window `microstep_pool` (factor 1), each epoch's tail, one microstep, the global pool
(the same update); 3 steps an epoch; the trainer's linear schedule the intended one.

    PYTHONPATH=$PWD python -m pytest -n 0 tests/runners/test_run_sbert.py -q
"""

from __future__ import annotations

import pytest
import torch
from runner_support import ROOT

from pclab.core import coupled_objectives as co
from pclab.experiments.trainer_check import EXPERIMENT, trainer_file
from pclab.experiments.trainer_check.frameworks import run_table
from pclab.experiments.trainer_check.frameworks.setting import installed_version
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.report import exit_code
from pclab.experiments.trainer_check.run_rank import run_epochs

ADAPTER, RESUME = "run_sbert_trainer_mnrl_gather", "run_resume_sbert_trainer_mnrl_gather"
FOLDER = ROOT / "examples" / "frameworks" / "sentence_transformers"
FILE = FOLDER / f"{ADAPTER}.py"
P, K, M = 2, 2, 5
pytestmark = pytest.mark.timeout(900)


def _skip_without_the_library() -> None:
    missing = [p for p in ("sentence-transformers", "transformers") if not installed_version(p)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")


@pytest.fixture(scope="module")
def run(tmp_path_factory, warm_pool):
    """{"check": its check, "resume": the resumable adapter's, "lines": every rank's evidence
    lines of the first}: one warm launch (the resume check's own launches after it)."""
    import json

    _skip_without_the_library()
    record = tmp_path_factory.mktemp("run_sbert") / "record.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PCL_FRAMEWORK_RECORD", str(record))
        params = Params.checked([str(FILE), str(FOLDER / f"{RESUME}.py")], world_size=P, accum=K)
        result = EXPERIMENT.run(params, timeout_s=600, runtime=warm_pool)
    assert result.ok, result.message
    lines = [json.loads(x) for x in record.read_text().splitlines()] if record.exists() else []
    first, resumable = result.report["checks"]
    return {
        "check": first,
        "resume": resumable,
        "lines": [x for x in lines if x["adapter"] == ADAPTER],
    }


def test_full_windows_are_a_pool_per_microstep_and_the_tails_the_global_pool(run):
    check = run["check"]
    assert check["mode"] == "coupled_run" and check["status"] == "different"
    assert exit_code(check) == 1 and check["items"] == 3
    (s,) = check["scenarios"]
    assert s["name"] == "equal_items" and (s["steps"], s["reference_steps"]) == (6, 6)
    for u in s["updates"]:
        assert u["optimizer_steps"] == 1 and u["lr_yours"] == pytest.approx(u["lr_intended"])
        if u["microsteps"] == K:
            assert u["scheme"] == "microstep_pool" and u["fitting"]["microstep_pool"] == (
                pytest.approx(1.0, rel=1e-9)
            )
            assert "global_batch" not in u["fitting"]
        else:  # the tail: one microstep, divided by 1 (its own window's size)
            assert u["scheme"] == "global_batch" and u["fitting"]["global_batch"] == (
                pytest.approx(1.0, rel=1e-9)
            )
    assert s["schedule"]["matches"] == "intended"
    assert s["first_divergence"]["update"] == 0
    assert not {d["code"] for d in check["diagnoses"]} & {"tail_window_scaled", "schedule_length"}


def test_the_trainer_ran_its_own_loop_on_the_ddp_model(run):
    """Each train_loop a rank ran (the run, then the check's SGD replay) is the trainer's:
    its windows, its divisor, its schedule, the epochs set by the trainer itself."""
    lines = run["lines"]
    assert {x["rank"] for x in lines} == {0, 1} and len(lines) == 4
    for line in lines:
        assert line["is_the_wrapper"] and line["wrapped_in"] == "DistributedDataParallel"
        assert line["gather_across_devices"] is True
        assert line["divided_by"] == [2, 2, 2, 2, 1] * 2  # the window's own batches
        assert line["synced"] == [False, True, False, True, True] * 2
        assert (line["global_step"], line["max_steps"], line["scheduler_steps"]) == (6, 6, 6)
        assert line["optimizer_steps"] == 6 and line["scheduler"] == "LambdaLR"
        assert line["epochs_set"] == [0, 0, 1, 1]
        assert line["forward_rows"] == [3] * (2 * 2 * M)  # anchors, then positives
        assert line["num_items_in_batch"] == [None] * (2 * M)


def test_the_trainers_own_restart_is_the_same_run_at_every_kill_point(run):
    """Saved after every update, resumed from the last checkpoint: back at the first
    microbatch of the window the kill interrupted (or of the next), placed by what the model
    ran on in one run of the loop (the trainer tokenizes the texts itself), the same run."""
    check = run["resume"]
    assert check["mode"] == "coupled_run" and check["status"] == "different"  # its windows
    back = {e["point"]: (e["killed_at"], e["resumed_from"], e["verdict"]) for e in check["resume"]}
    assert back == {
        "mid_epoch": (3, 3, "same_run"),
        "mid_window": (4, 3, "same_run"),  # checkpoint-1: the window re-run from its start
        "before_tail": (5, 5, "same_run"),
        "epoch_boundary": (6, 6, "same_run"),
    }


def test_the_row_across_a_run_records_what_the_live_loop_does(run):
    recorded = {r["code"]: r for r in run_table.load_runs()["records"]}
    assert run_table.story(run["check"]) == recorded[ADAPTER]["run"], "re-record: --runs"
    assert recorded[ADAPTER]["run"]["pool"] == "microstep_pool"
    assert run_table.story(run["resume"])["resume"] == recorded[ADAPTER]["resume"]


# -- blind: the trainer's arithmetic written out, two ranks simulated in one process


def _infonce(queries, documents, positives):
    """MultipleNegativesRankingLoss's defaults written out: 20 x cosine similarity, each
    query's cross-entropy against every document, its positive at `positives`."""
    q = torch.nn.functional.normalize(queries, dim=1)
    d = torch.nn.functional.normalize(documents, dim=1)
    return torch.nn.functional.cross_entropy(20.0 * q @ d.T, positives)


def _trainers_window(module, model, cells):
    """One window as the adapter's docstring reads the source: at each microstep every rank's
    anchors against every rank's positives of THAT microstep (the gather), the mean over the
    rank's anchors; divided by the window's own number of microsteps; DDP's mean of the ranks
    (the gather's backward sums every rank's share into each rank's rows)."""
    world, steps = len(cells), len(cells[0])
    total = torch.zeros((), dtype=torch.float64)
    for j in range(steps):
        embedded = [module.embed(model, cells[r][j]) for r in range(world)]
        documents = torch.cat([d for _, d in embedded])
        for r, (queries, _) in enumerate(embedded):
            n = len(queries)
            loss = _infonce(queries, documents, torch.arange(n) + r * n)
            total = total + loss / steps / world
    return total


def _gradient(model, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))])


def _misfit(change, reference):
    c = float(change @ reference / (reference @ reference))
    return c, float((change - c * reference).norm() / change.norm())


def test_the_trainers_arithmetic_is_the_pool_per_microstep_the_check_names():
    """Blind: the gradient of the trainer's window, written out here, is the check's
    microstep_pool candidate (factor 1) and no multiple of its global pool; the tail's, one
    microstep, is the global pool itself."""
    _skip_without_the_library()
    trainer = trainer_file.load(FILE)
    module = trainer.module
    grid = tuple(tuple(tuple([3] * M) for _ in range(2)) for _ in range(P))
    epoch = run_epochs(trainer, "equal_items", grid)[0]
    model = module.build_model()
    given = {"batch_loss": None, "embed": module.embed, "embedding_loss": module.embedding_loss}
    for start, end in ((0, 2), (4, 5)):  # a full window, then the tail
        cells = [list(rank[start:end]) for rank in epoch]
        blind = _gradient(model, _trainers_window(module, model, cells))

        def candidate(scheme, cells=cells):
            found = co.candidate_gradient(scheme, model, cells, **given, symmetric=False)
            return torch.cat([found[n].flatten() for n, _ in model.named_parameters()])

        c, misfit = _misfit(blind, candidate("microstep_pool"))
        assert c == pytest.approx(1.0, rel=1e-10) and misfit < 1e-10
        c, misfit = _misfit(blind, candidate("global_batch"))
        if end - start == K:
            assert misfit > 1e-3, "a full window is no multiple of the global pool"
        else:
            assert c == pytest.approx(1.0, rel=1e-10) and misfit < 1e-10
