"""The coupled run mode (train_loop with a contrastive loss): the bundled loops through the real
check on two Gloo processes, two epochs of 5 microbatches at K = 2 (a tail of 1 each epoch),
get the verdict and the pools their loops were written for; each is held to an independent
account: the window's reference objective against InfoNCE written out here, and the naive
loop's first full and tail updates replayed here, two ranks simulated in one process, their
factors on the global pool's gradient solved by least squares. One warm launch for the module.

    PYTHONPATH=$PWD python -m pytest -n 0 tests/trainer_check/test_coupled_run.py"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from pclab.experiments.trainer_check import coupled_run_rank as rank_side
from pclab.experiments.trainer_check import trainer_file
from pclab.experiments.trainer_check.coupled_run_observe import ItemObserver
from pclab.experiments.trainer_check.report import exit_code
from pclab.experiments.trainer_check.run_codes import LOOP_CODE_NAMES
from pclab.experiments.trainer_check.run_reference import windows
from tests.trainer_check.examples_launch import checks_by_shape
from tests.trainer_check.page_records import assert_same_story

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "trainers"
WRITTEN_FOR = {  # example -> (status, its run codes, the pool of every full window)
    "run_coupled_gradcache": ("same_update", set(), "global_batch"),
    "run_coupled_naive_accumulation": ("different", {"tail_window_scaled"}, "microstep_pool"),
    "run_resume_coupled_gradcache": ("same_update", set(), "global_batch"),  # killed too
}


@pytest.fixture(scope="module")
def checks(warm_pool) -> dict:
    """{(P, K): {example: its check}}: one warm launch per shape."""
    return checks_by_shape({(2, 2): list(WRITTEN_FOR), (1, 1): list(WRITTEN_FOR)[:1]}, warm_pool)


@pytest.mark.parametrize("name", WRITTEN_FOR)
def test_each_loop_gets_its_verdict_codes_and_pool(checks, name):
    check = checks[(2, 2)][name]
    status, codes, pool = WRITTEN_FOR[name]
    assert check["mode"] == "coupled_run" and check["status"] == status, check["diagnoses"]
    assert {d["code"] for d in check["diagnoses"]} & set(LOOP_CODE_NAMES) == codes
    assert exit_code(check) == (0 if status == "same_update" else 1)
    assert {s["name"] for s in check["scenarios"]} == {"uneven_items", "equal_items"}
    for s in check["scenarios"]:
        assert s["steps"] == s["reference_steps"] == 6, s["name"]  # 2 epochs x (2 + a tail)
        full = [u for u in s["updates"] if u["microsteps"] == 2]
        assert {u["scheme"] for u in full} == {pool}, s["name"]
        assert all(u["optimizer_steps"] == 1 for u in s["updates"])


def test_the_gradcache_loop_matches_every_update_and_is_evidence_for_the_pool(checks):
    check = checks[(2, 2)]["run_coupled_gradcache"]
    for s in check["scenarios"]:
        assert s["claims"] == ["pool", "tail", "schedule"], s["name"]
        for u in s["updates"]:
            assert u["max_abs_diff"] <= 1e-10 and u["scheme"] == "global_batch", u
            assert u["lr_yours"] == pytest.approx(u["lr_intended"], rel=1e-12)
    uneven = next(s for s in check["scenarios"] if s["name"] == "uneven_items")
    assert uneven["sizes"][0][0] == [3, 2, 5, 4, 2]  # coupled_scenarios.SIZES, every rank
    assert [u["num_valid_labels"] for u in uneven["updates"][:3]] == [10, 18, 4]  # P x items


def test_a_resumable_contrastive_loop_is_killed_and_restarted_as_the_same_run(checks):
    """Killed on every rank at each point, restarted from its own checkpoint (saved after
    every update): back at the first microbatch of the window the kill interrupted, or of
    the next, and the same run from there."""
    check = checks[(2, 2)]["run_resume_coupled_gradcache"]
    points = {e["point"]: e for e in check["resume"]}
    assert list(points) == ["mid_epoch", "mid_window", "before_tail", "epoch_boundary"]
    assert {e["verdict"] for e in points.values()} == {"same_run"}, check["resume"]
    back = {name: (e["killed_at"], e["resumed_from"]) for name, e in points.items()}
    assert back == {
        "mid_epoch": (3, 3),
        "mid_window": (4, 3),  # the window re-run from its start
        "before_tail": (5, 5),
        "epoch_boundary": (6, 6),
    }
    assert all(e["codes"] == [] for e in points.values())


@pytest.mark.parametrize("name", ["run_coupled_naive_accumulation", "run_resume_coupled_gradcache"])
def test_the_pages_recorded_report_is_what_the_live_check_reports(checks, name):
    """The page's AppTests read a recorded report of these loops
    (tests/app/fixtures/trainer_check_run.json): the live check agrees."""
    fixture = ROOT / "tests" / "app" / "fixtures" / "trainer_check_run.json"
    recorded = json.loads(fixture.read_text())["checks"][name]
    assert_same_story(name, checks[(2, 2)][name], recorded, fixture.name)


def test_one_rank_one_microstep_is_no_evidence(checks):
    check = checks[(1, 1)]["run_coupled_gradcache"]
    assert check["status"] == "no_evidence" and exit_code(check) == 2
    assert all(s["claims"] == [] for s in check["scenarios"])


# -- the independent account: InfoNCE written out here, two ranks simulated in one process


def _infonce(model, queries, documents):
    """tiny_embedder's loss, written out: query i's cross-entropy against every document,
    its positive the i-th, logits scaled by exp(logit_scale), the mean over queries."""
    encode = lambda x: torch.tanh(x @ model.encoder.weight.T + model.encoder.bias)  # noqa: E731
    logits = encode(queries) @ encode(documents).T * model.logit_scale.exp()
    picked = logits[torch.arange(len(queries)), torch.arange(len(queries))]
    return (torch.logsumexp(logits, dim=1) - picked).mean()


def _flat_grad(model, loss):
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.flatten() for g in grads])


@pytest.fixture(scope="module")
def naive():
    sys.path.insert(0, str(EXAMPLES))
    return trainer_file.load(EXAMPLES / "run_coupled_naive_accumulation.py")


def _epoch0(trainer, grid):
    """[rank][microbatch] of epoch 0, as the check builds them (seeded by scenario, rank,
    index)."""
    from pclab.experiments.trainer_check.run_rank import run_epochs

    return run_epochs(trainer, "uneven_items", grid)[0]


def test_the_window_objective_is_infonce_over_every_ranks_items(naive):
    grid = rank_side.scenario_sizes(2, 2, None)["uneven_items"]
    epoch = _epoch0(naive, grid)
    model = naive.module.build_model()
    cells = [list(rank[0:2]) for rank in epoch]  # the first window, both ranks
    got = rank_side.window_loss(naive, model, cells, 10, reverse=False)
    rows = [mb for rank in cells for mb in rank]  # rank-major, as the pool is laid out
    q = torch.cat([mb["queries"] for mb in rows])
    d = torch.cat([mb["documents"] for mb in rows])
    want = _infonce(model, q, d)
    assert got.item() == pytest.approx(want.item(), rel=1e-14)
    back = rank_side.window_loss(naive, model, cells, 10, reverse=True)
    assert back.item() == pytest.approx(got.item(), rel=1e-14)


def _naive_update(model, cells, k):
    """The naive loop's gradient on one window, two ranks simulated: at each microstep,
    rank r's queries against every rank's documents of that microstep, divided by k, the
    ranks' gradients averaged (DDP's mean)."""
    total = None
    world = len(cells)
    for r in range(world):
        for j in range(len(cells[r])):
            q = cells[r][j]["queries"]
            docs = torch.cat([cells[s][j]["documents"] for s in range(world)])
            n = len(q)
            encode = lambda x: torch.tanh(x @ model.encoder.weight.T + model.encoder.bias)  # noqa: E731
            logits = encode(q) @ encode(docs).T * model.logit_scale.exp()
            positive = torch.arange(n) + r * n
            loss = (torch.logsumexp(logits, 1) - logits[torch.arange(n), positive]).mean() / k
            g = _flat_grad(model, loss) / world
            total = g if total is None else total + g
    return total


def _factor(change, reference):
    """Least-squares factor c of change ~ c x reference, and the misfit's relative size."""
    c = float(change @ reference / (reference @ reference))
    return c, float((change - c * reference).norm() / change.norm())


def test_the_naive_loops_tail_is_half_its_pool_and_its_full_windows_are_no_global_pool(naive):
    grid = rank_side.scenario_sizes(2, 2, None)["uneven_items"]
    epoch = _epoch0(naive, grid)
    model = naive.module.build_model()
    full = [list(rank[0:2]) for rank in epoch]
    tail = [list(rank[4:5]) for rank in epoch]

    def pooled(cells):
        rows = [mb for rank in cells for mb in rank]
        q = torch.cat([mb["queries"] for mb in rows])
        d = torch.cat([mb["documents"] for mb in rows])
        return _flat_grad(model, _infonce(model, q, d))

    c, misfit = _factor(_naive_update(model, tail, 2), pooled(tail))
    assert c == pytest.approx(0.5, rel=1e-12) and misfit < 1e-12  # the tail: 1/K of its pool
    _, misfit = _factor(_naive_update(model, full, 2), pooled(full))
    assert misfit > 1e-3  # a full window is no multiple of the global pool's gradient


def test_the_run_is_cut_into_windows_of_k_and_a_tail_per_epoch(naive):
    grid = rank_side.scenario_sizes(2, 2, None)["uneven_items"]
    from pclab.experiments.trainer_check.run_rank import run_epochs

    epochs = run_epochs(naive, "uneven_items", grid)
    sizes = rank_side.sizes(naive, epochs, "cpu")
    cut = [(w.epoch, w.start, w.end, w.num_valid_labels) for w in windows(epochs, 2, sizes)]
    assert cut[:3] == [(0, 0, 2, 10), (0, 2, 4, 18), (0, 4, 5, 4)]
    assert len(cut) == 6


# -- placing a loop whose inputs the check cannot recognise (texts the loop tokenizes)


def test_an_unrecognised_model_run_twice_a_microbatch_is_placed_by_its_count(naive):
    model = torch.nn.Linear(2, 1).double()
    observer = ItemObserver(naive, model, {}, microbatches=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with observer:
        for _ in range(3):  # three microbatches, each run twice (anchors, then positives)
            for _ in range(2):
                model(torch.randn(4, 2, dtype=torch.float64)).sum().backward()
            optimizer.step()
    assert [s.forwards for s in observer.steps] == [1, 2, 3]


def test_a_count_that_is_no_multiple_is_left_as_it_ran(naive):
    model = torch.nn.Linear(2, 1).double()
    observer = ItemObserver(naive, model, {}, microbatches=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with observer:
        for runs in (2, 3):
            for _ in range(runs):
                model(torch.randn(4, 2, dtype=torch.float64)).sum().backward()
            optimizer.step()
    assert [s.forwards for s in observer.steps] == [2, 5]


# -- the contract


def _file(tmp_path, body):
    path = tmp_path / "loop.py"
    head = f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
    head += "from tiny_embedder import build_model, embed, embedding_loss, make_microbatch\n"
    path.write_text(head + textwrap.dedent(body))
    return path


def test_a_loop_with_another_signature_is_refused_with_the_one_it_needs(tmp_path):
    path = _file(tmp_path, "def train_loop(model, optimizer, epochs): pass\n")
    with pytest.raises(trainer_file.TrainerFileError) as raised:
        trainer_file.load(path)
    assert raised.value.code == "signature"
    assert "train_loop(model, optimizer, epochs, accum_steps)" in str(raised.value)
    resumable = "def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir): pass\n"
    assert trainer_file.load(_file(tmp_path, resumable)).mode == "coupled_run"


@pytest.mark.parametrize("value", ["1", "True", "'3'", "5000"])
def test_items_out_of_range_is_named(tmp_path, value):
    path = _file(
        tmp_path, f"ITEMS = {value}\ndef train_loop(model, optimizer, epochs, accum_steps): pass\n"
    )
    with pytest.raises(
        trainer_file.TrainerFileError, match=r"ITEMS=.* must be a whole number 2\.\.4096"
    ):
        trainer_file.load(path)


def test_items_gives_one_scenario_of_that_many(tmp_path):
    path = _file(
        tmp_path, "ITEMS = 4\ndef train_loop(model, optimizer, epochs, accum_steps): pass\n"
    )
    trainer = trainer_file.load(path)
    assert trainer.mode == "coupled_run"
    grids, skipped = rank_side.scenarios(trainer, 2, 2, None, "terms")
    assert list(grids) == ["equal_items"] and skipped == []
    assert {n for rank in grids["equal_items"] for epoch in rank for n in epoch} == {4}
    with pytest.raises(ValueError, match="leave --counts out"):
        rank_side.scenarios(trainer, 2, 2, ((3, 3), (3, 3)), "terms")
