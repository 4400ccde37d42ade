"""The coupled mode's contract, scenarios and verdict logic, without a process: the mode is
read from the file (batch_loss, or embed and embedding_loss without token_losses), what a
coupled file lacks is named before anything is launched, every default scenario keeps a
microstep's size equal across ranks, and a scenario is evidence only when no distinct
objective gives its update too."""

from __future__ import annotations

import pytest

from pclab.experiments.trainer_check import coupled_report, coupled_scenarios
from pclab.experiments.trainer_check.trainer_file import TrainerFileError, load

HEAD = "import torch\ndef build_model():\n    return torch.nn.Linear(2, 1).double()\n"
STEP = "def train_step(model, optimizer, microbatches):\n    pass\n"
BATCH = (
    "def make_microbatch(n, generator):\n    return {'x': torch.randn(n, 2, generator=generator)}\n"
)
LOSS = "def batch_loss(model, microbatches):\n    return model(torch.zeros(1, 2)).sum()\n"
EMBED = "def embed(model, microbatch):\n    return microbatch['x'], microbatch['x']\n"
EMBEDDING_LOSS = "def embedding_loss(model, queries, documents):\n    return queries.sum()\n"
TOKENS = "VOCAB_SIZE = 5\ndef token_losses(model, microbatch):\n    return torch.zeros(0)\n"


def _write(tmp_path, *parts: str):
    path = tmp_path / "trainer.py"
    path.write_text(HEAD + "".join(parts))
    return path


@pytest.mark.parametrize(
    "parts",
    [(STEP, BATCH, LOSS), (STEP, BATCH, EMBED, EMBEDDING_LOSS), (STEP, BATCH, LOSS, TOKENS)],
    ids=["batch_loss", "embed_pair", "batch_loss_beside_token_losses"],
)
def test_the_mode_is_read_from_the_file(tmp_path, parts):
    trainer = load(_write(tmp_path, *parts))
    assert trainer.mode == "coupled" and trainer.capacity > 1000


def test_a_token_file_stays_in_the_token_mode(tmp_path):
    assert load(_write(tmp_path, STEP, TOKENS)).mode == "token"


@pytest.mark.parametrize(
    ("parts", "needle"),
    [
        ((STEP, LOSS), "missing make_microbatch(n, generator)"),
        ((STEP, BATCH, EMBED), "embed() without embedding_loss()"),
        ((STEP, BATCH, EMBEDDING_LOSS), "embedding_loss() without embed()"),
        ((BATCH, LOSS), "missing train_step()"),
    ],
)
def test_what_a_coupled_file_lacks_is_named(tmp_path, parts, needle):
    with pytest.raises(TrainerFileError) as caught:
        load(_write(tmp_path, *parts))
    assert needle in str(caught.value) and caught.value.code == "contract"


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        ("def batch_loss(model):\n    pass\n", "batch_loss(model, microbatches)"),
        ("def embed(model):\n    pass\n", "embed(model, microbatch)"),
        ("def make_microbatch(n):\n    pass\n", "make_microbatch(n, generator)"),
    ],
)
def test_a_wrong_signature_shows_the_coupled_one(tmp_path, wrong, expected):
    parts = [STEP, BATCH, LOSS, EMBED, EMBEDDING_LOSS]
    name = wrong.split("(")[0].removeprefix("def ")
    kept = [p for p in parts if not p.startswith(f"def {name}(")]
    with pytest.raises(TrainerFileError) as caught:
        load(_write(tmp_path, *kept, wrong))
    assert caught.value.code == "signature" and f"cannot be called as {expected}" in str(
        caught.value
    )


@pytest.mark.parametrize(("p", "k"), [(1, 1), (2, 1), (2, 2), (3, 4), (8, 8)])
def test_default_sizes_are_equal_across_ranks_and_vary_between_microsteps(p, k):
    grids = coupled_scenarios.scenario_sizes(p, k)
    assert list(grids) == list(coupled_scenarios.NAMES)
    for grid in grids.values():
        assert len(grid) == p and all(row == grid[0] for row in grid)
        assert min(grid[0]) >= 2  # BatchNorm in training mode needs 2 values a channel
        assert k == 1 or len(set(grid[0])) > 1
    assert grids["uneven_microsteps"] != grids["shifted_microsteps"]


def test_counts_of_items_may_be_unequal_but_never_empty():
    assert coupled_scenarios.checked_counts([[3, 2], [2, 4]]) == ((3, 2), (2, 4))
    with pytest.raises(ValueError, match=r"counts\[1\]\[0\]=0"):
        coupled_scenarios.checked_counts([[3, 2], [0, 4]])


def _rank(**solve):
    compared = {
        "max_abs_diff": 0.0,
        "spread": 0.0,
        "first_divergence": None,
        "tolerance": 1e-10,
        "unchanged": False,
        "reference_changed": True,
        "stepped": 1,
    }
    return {"name": "s", "sizes": [[2], [2]], **compared, **solve}


@pytest.mark.parametrize(
    ("p", "k", "untold", "verdict"),
    [
        (2, 1, ["microstep_pool"], "same_update"),  # the same objective at K = 1
        (2, 2, ["microstep_pool"], "no_evidence"),  # a distinct objective, alike by chance
        (1, 1, [], "no_evidence"),  # nothing split
        (2, 2, [], "same_update"),
    ],
)
def test_a_coinciding_scheme_is_no_evidence_unless_it_is_the_same_objective(p, k, untold, verdict):
    solve = {"scheme": "global_batch", "matching_schemes": ["global_batch", *untold]}
    s = coupled_report.scenario([_rank(**solve, untold=untold)], 1e-10, p, k, "float64")
    assert s["verdict"] == verdict and s["matching_schemes"] == solve["matching_schemes"]


def test_below_float64_a_pass_needs_the_global_batch_scheme():
    s = coupled_report.scenario([_rank(scheme="rank_pool")], 1e-10, 2, 2, "float32")
    assert s["verdict"] == "different"
