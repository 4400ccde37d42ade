"""The trainer check on real Gloo processes: the bundled examples get their verdicts and
schemes, and the weights each one really applies match the closed-form grids of
core.update_weights to 1e-6, for P in {1, 2, 4} and K in {1, 2, 3} (one launch per shape,
every example in it). Broken trainer files each get a one-line answer and leave nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from runner_support import MARK_ENV, ROOT, marked

from pclab.core import update_weights
from pclab.experiments.trainer_check import EXPERIMENT, assert_same_update
from pclab.experiments.trainer_check.params import Params

EXAMPLES = ROOT / "examples" / "trainers"
BROKEN = ROOT / "tests" / "trainers"
# example -> the scheme its train_step applies (core.update_weights' names)
SCHEMES = {
    "correct_manual": "global_token",
    "correct_ddp_no_sync": "global_token",
    "adamw_steps_at_zero": "global_token",
    "ddp_mean_of_local_means": "replica_mean",
    "microbatch_means": "microbatch_mean",
    "double_divide_by_k": "double_scaled",
    "unnormalised_sum": "unnormalised_sum",
}
CORRECT = {"correct_manual", "correct_ddp_no_sync"}
SHAPES = [(p, k) for p in (1, 2, 4) for k in (1, 2, 3)]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: f"P{s[0]}K{s[1]}")
def shape_run(request, warm_pool):
    """One launch per (P, K) with every bundled example in it, through the session's warm pool
    (the cold path, torchrun, is tested below and in tests/runners/test_launcher.py)."""
    world_size, accum = request.param
    trainers = [str(EXAMPLES / f"{name}.py") for name in SCHEMES]
    params = Params.checked(trainers, world_size=world_size, accum=accum)
    result = EXPERIMENT.run(params, timeout_s=400, runtime=warm_pool)
    assert result.ok, result.message
    checks = {os.path.basename(c["trainer"])[:-3]: c for c in result.report["checks"]}
    return world_size, accum, checks


def test_weights_match_each_examples_formula(shape_run):
    world_size, accum, checks = shape_run
    for name, scheme in SCHEMES.items():
        for s in checks[name]["scenarios"]:
            if not sum(map(sum, s["counts"])):
                assert s["weights"] is None or all(w is None for row in s["weights"] for w in row)
                assert s["scheme"] is None
                continue
            expected = update_weights.scheme_weights_times_n(s["counts"], scheme)
            for got_row, want_row in zip(s["weights"], expected, strict=True):
                for got, want in zip(got_row, want_row, strict=True):
                    assert (got is None) == (want is None), (name, s["name"], s["weights"])
                    if want is not None:
                        assert got == pytest.approx(want, rel=1e-6, abs=1e-9), (name, s["name"])
            assert s["residual"] < 1e-6 and scheme in s["matching_schemes"], (name, s["name"])


def test_verdicts(shape_run):
    world_size, accum, checks = shape_run
    for name in CORRECT:
        assert all(s["passed"] for s in checks[name]["scenarios"]), [
            (s["name"], s["first_divergence"]) for s in checks[name]["scenarios"]
        ]
        # P = K = 1 splits nothing: matching the reference there is no evidence (exit 2)
        want = "no_evidence" if world_size * accum == 1 else "same_update"
        assert checks[name]["status"] == want and checks[name]["passed"] == (want != "no_evidence")
        run_level = [d for d in checks[name]["diagnoses"] if d["scenario"] is None]
        assert [d["code"] for d in run_level] == (["no_evidence"] if want == "no_evidence" else [])
    adamw = {s["name"]: s for s in checks["adamw_steps_at_zero"]["scenarios"]}
    assert not adamw["no_labels"]["passed"] and "zero_must_skip" in adamw["no_labels"]["notes"]
    assert all(s["passed"] for n, s in adamw.items() if n != "no_labels")
    for s in checks["unnormalised_sum"]["scenarios"]:
        if sum(map(sum, s["counts"])):  # N / P is never 1 with a full microbatch in it
            assert not s["passed"]
    names = {s["name"] for s in checks["correct_manual"]["scenarios"]}
    skipped = {s["name"] for s in checks["correct_manual"]["skipped_scenarios"]}
    assert names | skipped == {
        "uneven",
        "empty_microbatch",
        "empty_rank",
        "equal_counts",
        "no_labels",
    }
    assert ("empty_rank" in skipped) == (world_size == 1)
    assert ("empty_microbatch" in skipped) == (accum == 1)


def test_wrong_schemes_are_named_and_fail_where_counts_differ(shape_run):
    world_size, accum, checks = shape_run
    if (world_size, accum) != (2, 2):
        return  # the names are checked at the CLI's default shape, where all five differ
    for name, scheme in SCHEMES.items():
        uneven = next(s for s in checks[name]["scenarios"] if s["name"] == "uneven")
        assert uneven["scheme"] == scheme
        assert uneven["passed"] == (scheme == "global_token")
        control = next(s for s in checks[name]["scenarios"] if s["name"] == "equal_counts")
        assert "control" in control["notes"]
        assert control["untold"] == ["replica_mean", "microbatch_mean"]
        if scheme in ("replica_mean", "microbatch_mean"):
            assert control["passed"]  # the control cannot see these: why it is no evidence
        if control["passed"]:
            assert control["verdict"] == "no_evidence"
        totals = [sum(row) for row in uneven["counts"]]
        assert max(totals) >= 1.5 * min(totals)  # DDP's mean of local means shows
    first = next(s for s in checks["microbatch_means"]["scenarios"] if s["name"] == "uneven")
    assert first["first_divergence"]["tensor"].startswith("parameter ")


def cli(*args: str, timeout: float = 240, mark: str | None = None, env: dict | None = None):
    env = dict(os.environ, **(env or {}), **({MARK_ENV: mark} if mark else {}))
    return subprocess.run(
        [sys.executable, "-m", "pclab", "check", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_json_and_a_hand_typed_torchrun_agree(tmp_path):
    done = cli(str(EXAMPLES / "correct_manual.py"), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) >= {
        "trainer",
        "world_size",
        "accum_steps",
        "tolerance",
        "passed",
        "scenarios",
    }
    fields = {
        "name",
        "counts",
        "passed",
        "max_abs_diff",
        "first_divergence",
        "weights",
        "residual",
        "scheme",
    }
    assert all(fields <= set(s) for s in report["scenarios"])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    worker = ["-m", "pclab.experiments.trainer_check", "--out-dir", str(tmp_path)]
    trainer = ["--trainer", str(EXAMPLES / "correct_manual.py")]
    by_hand = subprocess.run(
        [*torchrun, "--nproc-per-node", "2", *worker, *trainer],
        cwd=ROOT,
        env=dict(os.environ, TMPDIR=str(tmp_path)),  # the agent's torchelastic_* logs: here
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert by_hand.returncode == 0, by_hand.stderr
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_counts_pattern_reads_p_and_k():
    done = cli(str(EXAMPLES / "microbatch_means.py"), "--counts", "3,8;8,16", "--json")
    assert done.returncode == 1, done.stderr  # a different update: exit 1
    report = json.loads(done.stdout)
    assert (report["world_size"], report["accum_steps"]) == (2, 2)
    (custom,) = report["scenarios"]
    assert custom["name"] == "custom" and custom["counts"] == [[3, 8], [8, 16]]
    assert custom["weights"][0] == pytest.approx([35 / 12, 35 / 32], rel=1e-6)
    assert custom["scheme"] == "microbatch_mean"


ONE_RANK = ("--world-size", "1", "--accum", "1")  # a single rank is enough to show these
# Two ranks, one scenario: each scenario a trainer raises in is relaunched cold for the rest
# (test_trainer_check_alone.py tests that), 67 s for the five defaults on a quiet box.
ONE_PATTERN = ("--counts", "3,5;4,6")
RAISE_LINE = next(  # the line of the `raise` in that file: the check must name it
    n
    for n, text in enumerate((BROKEN / "raises_on_rank_one.py").read_text().splitlines(), 1)
    if text.strip().startswith("raise ")
)


BROKEN_CASES = [  # (trainer, extra arguments, exit code, what the output must say)
    (BROKEN / "syntax_error.py", (), 2, "syntax_error.py:4: SyntaxError"),
    (BROKEN / "missing_train_step.py", (), 2, "missing train_step()"),
    (
        BROKEN / "raises_on_rank_one.py",
        ONE_PATTERN,
        1,
        f"raises_on_rank_one.py:{RAISE_LINE} in train_step: ZeroDivisionError",
    ),
    (BROKEN / "never_steps.py", ONE_RANK, 1, "did it call optimizer.step()?"),
    (BROKEN / "hangs.py", ONE_RANK, 1, "timed out after 12 s"),
]


def _start_broken(trainer, args, mark: str) -> subprocess.Popen:
    # 12 s where the timeout is the subject (hangs.py); elsewhere a margin that holds on a
    # loaded 2-core machine, where the ranks' start-up alone can take longer than 12 s.
    timeout = "12" if trainer.stem == "hangs" else "120"
    # Rank 0 waits in the all_reduce rank 1 never joins until the process group's timeout
    # (guard.rejoin): 20 s rather than the default 60 s, as the hang tests use, cuts 40 s.
    pg = {"PCL_PG_TIMEOUT_S": "20"} if trainer.stem == "raises_on_rank_one" else {}
    return subprocess.Popen(
        [sys.executable, "-m", "pclab", "check", str(trainer), *args, "--timeout", timeout],
        cwd=ROOT,
        env=dict(os.environ, **pg, **{MARK_ENV: mark}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def broken_runs() -> dict[str, tuple[subprocess.CompletedProcess, str]]:
    """Every broken trainer's command, all started at once: two of them wait mostly on a
    timeout (the hang's 12 s, the raising rank's peer the process group's 20 s), so side by
    side they take about the longest one's time rather than the sum (about 45 s in the
    suite). trainer stem -> (the finished command, its mark)."""
    started = {}
    for trainer, args, _, _ in BROKEN_CASES:
        mark = uuid.uuid4().hex
        started[trainer.stem] = (_start_broken(trainer, args, mark), mark, args)
    done = {}
    try:
        for stem, (process, mark, args) in started.items():
            stdout, stderr = process.communicate(timeout=240)
            done[stem] = (
                subprocess.CompletedProcess(args, process.returncode, stdout, stderr),
                mark,
            )
    finally:
        for process, _, _ in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


@pytest.mark.parametrize(
    "trainer, args, code, needle", BROKEN_CASES, ids=lambda x: getattr(x, "stem", None)
)
def test_broken_trainers_get_one_clear_line_and_leave_nothing(
    broken_runs, trainer, args, code, needle
):
    done, mark = broken_runs[trainer.stem]
    assert done.returncode == code, done.stdout + done.stderr
    assert needle in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    if code == 2:
        assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert marked(mark) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--world-size", "9"],
        ["--accum", "0"],
        ["--counts", "a,b"],
        ["--counts", "3,99"],
        ["--tolerance", "-1"],
    ],
)
def test_bad_arguments_exit_2_in_one_line(args):
    done = cli(str(EXAMPLES / "correct_manual.py"), *args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("example", ["run_correct.py", "run_coupled_gradcache.py"])
def test_counts_on_a_whole_run_exit_2_before_anything_is_launched(example):
    """A run mode's scenarios are its own epochs: --counts (one update's) is refused as any bad
    argument is, by the command, not by ranks that were started for nothing (exit 1)."""
    done = cli(str(EXAMPLES / example), "--counts", "1,2;2,1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert f"{example}: --counts gives one update's counts" in done.stderr
    with pytest.raises(ValueError, match=r"counts='1,2;2,1': --counts gives one update's"):
        assert_same_update(str(EXAMPLES / example), counts="1,2;2,1")


def test_the_pytest_helper(warm_pool):
    """What it returns and says, through the session's warm pool (a user's call, cold, is
    test_trainer_check_alone.py's test_the_pytest_helper_names_the_failed_scenario)."""
    warm = {"runtime": warm_pool}
    check = assert_same_update(str(EXAMPLES / "correct_manual.py"), world_size=1, accum=2, **warm)
    assert check["passed"] and check["world_size"] == 1
    with pytest.raises(AssertionError) as caught:
        assert_same_update(str(EXAMPLES / "double_divide_by_k.py"), counts="4,9", **warm)
    text = str(caught.value)
    assert "not the same update in custom" in text and '"double_scaled"' in text
    summary = text.split("the report:")[0]  # the human summary comes first, then the JSON
    assert "FAIL" in summary and "scheme double_scaled" in summary
    assert "4 /       0.5     9 /       0.5" in summary  # the weight grid: 1/K in each cell
    assert "uniform_scale" in summary and "1/K" in summary
    with pytest.raises(AssertionError, match="no_evidence"):  # P = K = 1 proves nothing
        assert_same_update(str(EXAMPLES / "correct_manual.py"), world_size=1, accum=1, **warm)


def _contract_file(tmp_path, name: str, extra: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(
        "VOCAB_SIZE, SEQ_LEN, BATCH_SIZE = 7, 5, 3\n"
        "def build_model(): ...\ndef token_losses(model, microbatch): ...\n"
        f"def train_step(model, optimizer, microbatches): ...\n{extra}\n"
    )
    return str(path)


def test_first_position_labelled_false_never_labels_position_zero(tmp_path):
    """The contract's optional FIRST_POSITION_LABELLED: False moves every counted label off a
    sequence's position 0 (capacity BATCH_SIZE x (SEQ_LEN - 1)); the default is unchanged."""
    from pclab.experiments.trainer_check import microbatches
    from pclab.experiments.trainer_check.trainer_file import TrainerFileError, load

    free = load(_contract_file(tmp_path, "free", "FIRST_POSITION_LABELLED = False"))
    default = load(_contract_file(tmp_path, "default", ""))
    assert (free.capacity, default.capacity) == (12, 15)
    assert not free.first_position_labelled and default.first_position_labelled
    for valid in range(free.capacity + 1):
        labels = microbatches.microbatch(free, "uneven", 1, 0, valid)["labels"]
        assert int((labels != microbatches.IGNORE).sum()) == valid
        assert (labels[:, 0] == microbatches.IGNORE).all()
    full = microbatches.microbatch(default, "uneven", 1, 0, default.capacity)["labels"]
    assert (full != microbatches.IGNORE).all()  # the default still labels position 0
    for extra, needle in [
        ("FIRST_POSITION_LABELLED = 0", "must be True or False"),
        ("FIRST_POSITION_LABELLED = False\nSEQ_LEN = 1", "needs SEQ_LEN >= 2"),
    ]:
        with pytest.raises(TrainerFileError, match=needle):
            load(_contract_file(tmp_path, "bad", extra))
