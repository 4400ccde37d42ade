"""The real Hugging Face Trainer through the trainer check, on two real Gloo processes (P = 2,
K = 2; transformers as pinned in requirements.txt). One launch per setting:

    average_tokens_across_devices=True   hf_trainer.py, hf_trainer_no_first_label.py and the
                                         AdamW variant (tests/trainers/hf_trainer_adamw.py),
                                         through EXPERIMENT.run
    average_tokens_across_devices=False  hf_trainer_local_average.py, through the README's
                                         command `pclab check ... --json`

What they measured with transformers 5.24.0, pinned here against core.update_weights' closed
forms (to 1e-6, the float32 of transformers' causal-LM loss is well inside it):

- True: Trainer sums every microbatch's terms and divides by `num_items_in_batch`, the label
  count gathered over both ranks and both microsteps, then multiplies by P, which DDP's mean
  takes back: the global token mean, weight x N = 1 in every cell and every scenario, the
  same update as the reference to 1e-10.
- False: each rank divides by its own count, DDP averages the ranks: the mean of replica
  means, weight x N = N / (P n_r). A rank without labels contributes zero gradient and still
  counts in DDP's mean, so the other rank's tokens get N / (P n_0) = 1/2: the update is halved.
- The label shift: Trainer 5.24.0 counts `labels[..., 1:]` for a causal LM, so a label at
  position 0 (never a term) is not counted. The uneven scenario puts 34 labels in, 29 of them
  terms, and the weights are 1, not 29/34; with FIRST_POSITION_LABELLED = False (labels =
  terms) they are 1 too. No off-by-one, in either setting.
- With no label at all, Trainer still calls optimizer.step() on zero gradients: SGD changes
  nothing, AdamW gains a step count and moments (the `no_labels` scenario fails for it).

That the update went through Trainer's own loop is read from the adapter's record
($PCL_HF_TRAINER_RECORD): after every train_step, Trainer's state.global_step is 1 and its
scheduler stepped once, and the `num_items_in_batch` Trainer handed each microstep's loss is
the count the weights imply.

    python -m pytest tests/runners/test_hf_trainer.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest
from runner_support import MARK_ENV, ROOT, marked

from pclab.core import update_weights
from pclab.experiments.trainer_check import EXPERIMENT, hf_recorded
from pclab.experiments.trainer_check.params import Params

EXAMPLES = ROOT / "examples" / "frameworks" / "hf_trainer"
RECORD_ENV = "PCL_HF_TRAINER_RECORD"  # examples/frameworks/hf_trainer/hf_trainer.py writes it
GLOBAL_FILES = {  # one launch, average_tokens_across_devices=True
    "hf_trainer": EXAMPLES / "hf_trainer.py",
    "hf_trainer_no_first_label": EXAMPLES / "hf_trainer_no_first_label.py",
    "hf_trainer_adamw": ROOT / "tests" / "trainers" / "hf_trainer_adamw.py",
}
STEPS_PER_SCENARIO = 2  # the check's train_step calls: the user's optimizer, then SGD at lr 1


def _records(path) -> dict[int, list[dict]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    by_rank: dict[int, list[dict]] = {}
    for line in lines:
        by_rank.setdefault(line["rank"], []).append(line)
    return by_rank


def _ignored_folders() -> set[str]:
    """The folders .gitignore names (test-artifacts/, build/ ...): other tests and tools may
    write there while this module runs (two xdist workers), and none of it is the Trainer's."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return {line.strip().strip("/") for line in lines if line.strip().endswith("/")}


def _source_tree() -> set[str]:
    """Every path of the project, caches (__pycache__, .pytest_cache ...) and git-ignored
    folders aside."""
    ignored = _ignored_folders()
    paths = (p.relative_to(ROOT) for p in ROOT.rglob("*"))
    return {
        str(p)
        for p in paths
        if not any(x.startswith(".") or x == "__pycache__" or x in ignored for x in p.parts)
    }


@pytest.fixture(scope="module")
def hf_global(tmp_path_factory, warm_pool):
    """The one launch with Trainer's default, average_tokens_across_devices=True, through the
    session's warm pool (hf_local below goes the README's way: the command, cold torchrun)."""
    tmp = tmp_path_factory.mktemp("hf_global")
    rank_tmp, record = tmp / "rank_tmp", tmp / "record.jsonl"
    rank_tmp.mkdir()
    changes = {RECORD_ENV: str(record), "TMPDIR": str(rank_tmp), MARK_ENV: uuid.uuid4().hex}
    saved = {k: os.environ.get(k) for k in changes}
    before = _source_tree()
    os.environ.update(changes)
    try:
        params = Params.checked([str(p) for p in GLOBAL_FILES.values()], world_size=2, accum=2)
        result = EXPERIMENT.run(params, timeout_s=400, runtime=warm_pool)
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    assert result.ok, result.message
    checks = dict(zip(GLOBAL_FILES, result.report["checks"], strict=True))
    return SimpleNamespace(
        checks=checks,
        records=_records(record),
        leftover_processes=marked(changes[MARK_ENV]),
        leftover_files=sorted(p.name for p in rank_tmp.iterdir()),
        new_source_files=_source_tree() - before,
    )


@pytest.fixture(scope="session")
def hf_local(tmp_path_factory):
    """The one launch with average_tokens_across_devices=False, by the README's command."""
    tmp = tmp_path_factory.mktemp("hf_local")
    rank_tmp, record = tmp / "rank_tmp", tmp / "record.jsonl"
    rank_tmp.mkdir()
    env = dict(os.environ, **{RECORD_ENV: str(record), "TMPDIR": str(rank_tmp)})
    done = subprocess.run(
        [sys.executable, "-m", "pclab", "check"]
        + ["examples/frameworks/hf_trainer/hf_trainer_local_average.py", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    return SimpleNamespace(
        returncode=done.returncode,
        stderr=done.stderr,
        check=json.loads(done.stdout) if done.stdout.strip() else None,
        records=_records(record),
        leftover_files=sorted(p.name for p in rank_tmp.iterdir()),
    )


def _assert_scheme(check: dict, scheme: str) -> None:
    """Every scenario with labels: the measured weights are `scheme`'s closed form."""
    for s in check["scenarios"]:
        if not sum(map(sum, s["counts"])):
            assert s["scheme"] is None and all(w is None for row in s["weights"] for w in row)
            continue
        expected = update_weights.scheme_weights_times_n(s["counts"], scheme)
        for got_row, want_row in zip(s["weights"], expected, strict=True):
            for got, want in zip(got_row, want_row, strict=True):
                assert (got is None) == (want is None), (s["name"], s["weights"])
                if want is not None:
                    assert got == pytest.approx(want, rel=1e-6), (s["name"], s["weights"])
        assert scheme in s["matching_schemes"] and s["residual"] < 1e-6, s["name"]


def _scenario(check: dict, name: str) -> dict:
    return next(s for s in check["scenarios"] if s["name"] == name)


def test_the_default_is_the_global_token_mean_and_the_same_update(hf_global):
    check = hf_global.checks["hf_trainer"]
    assert check["passed"], [(s["name"], s["first_divergence"]) for s in check["scenarios"]]
    _assert_scheme(check, "global_token")
    uneven = _scenario(check, "uneven")
    assert uneven["scheme"] == "global_token" and uneven["max_abs_diff"] <= 1e-10


def test_trainer_counts_after_the_causal_shift(hf_global):
    """Labels at position 0 were in the microbatches (34 placed, 29 terms) and the weights
    are still 1, not 29/34; with no label at position 0 (labels = terms), 1 as well."""
    check = hf_global.checks["hf_trainer"]
    assert check["first_position_labelled"] is True
    uneven = _scenario(check, "uneven")
    assert uneven["label_positions"] == [[16, 8], [7, 3]]
    assert uneven["counts"] == [[14, 7], [5, 3]]  # the first position of each row fell out
    assert all(w == pytest.approx(1, rel=1e-6) for row in uneven["weights"] for w in row)
    separated = hf_global.checks["hf_trainer_no_first_label"]
    assert separated["first_position_labelled"] is False and separated["passed"]
    for s in separated["scenarios"]:
        assert s["label_positions"] == s["counts"]
    _assert_scheme(separated, "global_token")
    control = _scenario(separated, "equal_counts")
    assert control["counts"] == [[7, 7], [7, 7]]  # a true control once labels are terms
    assert set(control["matching_schemes"]) >= {"global_token", "replica_mean"}


def test_local_average_is_the_mean_of_replica_means(hf_local):
    assert hf_local.returncode == 1, hf_local.stderr  # a different update: exit 1
    check = hf_local.check
    assert not check["passed"]
    _assert_scheme(check, "replica_mean")
    uneven = _scenario(check, "uneven")
    assert uneven["scheme"] == "replica_mean" and not uneven["passed"]
    assert uneven["weights"][0] == pytest.approx([29 / 42] * 2, rel=1e-6)  # N / (P n_0)
    assert uneven["weights"][1] == pytest.approx([29 / 16] * 2, rel=1e-6)
    empty_rank = _scenario(check, "empty_rank")  # the other rank's tokens count half
    assert empty_rank["weights"][0] == pytest.approx([0.5, 0.5], rel=1e-6)
    assert empty_rank["weights"][1] == [None, None] and not empty_rank["passed"]
    assert _scenario(check, "no_labels")["passed"]  # zero gradients, plain SGD: no change


def test_with_no_label_at_all_trainer_still_steps(hf_global):
    """AdamW at weight decay 0: the same update wherever there are labels; at N = 0 Trainer
    steps on zero gradients and AdamW's state appears."""
    check = hf_global.checks["hf_trainer_adamw"]
    _assert_scheme(check, "global_token")
    for s in check["scenarios"]:
        assert s["passed"] == (s["name"] != "no_labels"), (s["name"], s["first_divergence"])
    no_labels = _scenario(check, "no_labels")
    assert "zero_must_skip" in no_labels["notes"]
    assert no_labels["first_divergence"]["why"] == "unexpected"
    assert no_labels["first_divergence"]["tensor"].startswith("optimizer ")


def _assert_went_through_trainer(records, checks, average_tokens: bool) -> None:
    """Per rank, one record per train_step, in the check's order: Trainer's own step count
    and scheduler each advanced once, and its num_items_in_batch is the global (True) or the
    rank's own (False) number of terms."""
    assert sorted(records) == [0, 1]
    for rank, lines in records.items():
        calls = [(c, s) for c in checks for s in c["scenarios"] for _ in range(STEPS_PER_SCENARIO)]
        assert len(lines) == len(calls)
        for line, (_, s) in zip(lines, calls, strict=True):
            assert line["global_step"] == 1 and line["scheduler_steps"] == 1
            assert line["world_size"] == 2 and line["gradient_accumulation_steps"] == 2
            assert line["average_tokens_across_devices"] is average_tokens
            assert line["distributed_type"] == "MULTI_CPU"  # accelerate on the lab's Gloo group
            assert line["wrapped_in"] == "DistributedDataParallel"  # Trainer's own DDP
            counted = sum(map(sum, s["counts"])) if average_tokens else sum(s["counts"][rank])
            assert line["num_items_in_batch"] == [counted, counted], (rank, s["name"])


def test_every_step_went_through_trainers_own_loop(hf_global, hf_local):
    _assert_went_through_trainer(hf_global.records, list(hf_global.checks.values()), True)
    _assert_went_through_trainer(hf_local.records, [hf_local.check], False)


def test_nothing_is_left_behind(hf_global, hf_local):
    """No process, no Trainer output directory in the ranks' temp dir (torch's own inductor
    cache folder, which importing torch._dynamo makes in every rank of every experiment, aside),
    nothing new in the source tree (no checkpoints, logs or runs/)."""
    assert hf_global.leftover_processes == []
    for left in (hf_global.leftover_files, hf_local.leftover_files):
        assert [name for name in left if not name.startswith("torchinductor_")] == []
    assert hf_global.new_source_files == set()


def _table(check: dict) -> list[tuple]:
    """What a verdict table says of each scenario, its numbers aside: the verdict and what
    decides it (the scheme, its ties, what the scenario cannot tell, the notes, where it
    first diverged). Floats differ between two real runs in the last digits; words do not."""

    def first(divergence: dict | None) -> tuple | None:
        return divergence and (divergence["rank"], divergence["tensor"], divergence["why"])

    return [
        (
            s["name"],
            s["verdict"],
            s["passed"],
            s["scheme"],
            sorted(s["matching_schemes"]),
            sorted(s["untold"]),
            sorted(s["notes"]),
            first(s["first_divergence"]),
        )
        for s in check["scenarios"]
    ]


def test_the_recorded_tables_are_the_live_checks(hf_global, hf_local):
    """The page's "Hugging Face Trainer, measured" tables (the record) say what the live check
    of the same example says with the same versions: a change of what a scenario can tell (a
    new candidate scheme) needs `python -m pclab.experiments.trainer_check.hf_recorded`."""
    recorded = hf_recorded.load()
    installed = {p: hf_recorded.installed_version(p) for p in hf_recorded.PACKAGES}
    if installed != recorded["versions"]:
        pytest.skip(f"recorded with {recorded['versions']}, installed {installed}")
    live = {
        "hf_trainer": hf_global.checks["hf_trainer"],
        "hf_trainer_local_average": hf_local.check,
    }
    assert set(live) == set(hf_recorded.SETTINGS)
    for example, check in live.items():
        kept = recorded["checks"][example]
        assert (kept["status"], kept["passed"]) == (check["status"], check["passed"]), example
        assert _table(kept) == _table(check), f"{example}: re-record (hf_recorded)"
        for was, now in zip(kept["scenarios"], check["scenarios"], strict=True):
            for row_was, row_now in zip(was["weights"], now["weights"], strict=True):
                for cell_was, cell_now in zip(row_was, row_now, strict=True):
                    # an undefined weight (a cell without labels) is None on both sides; a
                    # number compared to a number (approx refuses None: a clean-clone run
                    # beside busy loops raised TypeError here)
                    if cell_was is None or cell_now is None:
                        assert cell_was == cell_now, (example, was["name"])
                    else:
                        assert cell_was == pytest.approx(cell_now, rel=1e-6), (example, was["name"])


def test_checking_the_contract_does_not_import_transformers():
    """The command imports the trainer file in its own process before launching: the HF files
    import transformers only inside their functions, so only the ranks pay for it."""
    from pclab.experiments.trainer_check.trainer_file import load

    imported_before = "transformers" in sys.modules
    files = [EXAMPLES / f"{name}.py" for name in ("hf_trainer", "hf_trainer_local_average")]
    loaded = [load(path) for path in [*files, EXAMPLES / "hf_trainer_no_first_label.py"]]
    assert [t.capacity for t in loaded] == [16, 16, 14]
    if not imported_before:
        assert "transformers" not in sys.modules
