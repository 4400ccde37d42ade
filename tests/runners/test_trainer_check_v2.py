"""The trainer check's v2 contract on real Gloo processes: each diagnosis (stable code, in the
JSON and the summary) from a trainer file written to provoke it, verdicts that never
over-claim, the optional DTYPE / MAX_GRAD_NORM / make_microbatch / full_parameters, the CI
routes (a hand-typed torchrun's exit code, contradicting --counts), and Gloo by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from runner_support import ROOT

from pclab.core import update_weights
from pclab.experiments.trainer_check import EXPERIMENT, diagnoses
from pclab.experiments.trainer_check.params import Params
from tests.test_diagnosis_codes import registry_findings

EXAMPLES = ROOT / "examples" / "trainers"
TRAINERS = ROOT / "tests" / "trainers"
# file -> (status, the diagnosis codes it must carry)
EXPECTED = {
    "one_term_per_position": ("unusable", {"terms_mismatch"}),
    "unseeded_model": ("unusable", {"model_not_deterministic"}),
    "float32_model": ("unusable", {"dtype_changed"}),
    "casts_to_float32": ("different", {"dtype_changed"}),
    "own_optimizer": ("same_update", {"optimizer_not_stepped", "no_evidence"}),
    "never_steps": ("different", {"optimizer_not_stepped"}),
    "clips_without_max_grad_norm": ("different", {"uniform_scale"}),
    "clips_per_rank": ("different", set()),
    "clips_double_counted": ("different", {"uniform_scale"}),
    "clip_global_norm": ("same_update", {"no_evidence"}),
    "adamw_steps_at_zero": ("different", {"extra_optimizer_state", "no_evidence"}),
    "correct_float32": ("same_update", {"no_evidence"}),
    "microbatch_means_float32": ("different", {"no_evidence"}),
    "correct_bfloat16": ("same_update", {"no_evidence"}),
    "own_microbatches": ("same_update", {"no_evidence"}),
    "sharded_parameters": ("same_update", {"no_evidence"}),
}


def _path(name: str):
    example = EXAMPLES / f"{name}.py"
    return example if example.exists() else TRAINERS / f"{name}.py"


@pytest.fixture(scope="module")
def checks(warm_pool):
    """One launch, P = 2, K = 2, every file above, through the session's warm pool."""
    params = Params.checked([str(_path(n)) for n in EXPECTED], world_size=2, accum=2)
    result = EXPERIMENT.run(params, timeout_s=600, runtime=warm_pool)
    assert result.ok, result.message
    return {os.path.basename(c["trainer"])[:-3]: c for c in result.report["checks"]}


def _scenario(check: dict, name: str) -> dict:
    return next(s for s in check["scenarios"] if s["name"] == name)


@pytest.mark.parametrize("name", EXPECTED)
def test_each_file_gets_its_status_and_diagnoses(checks, name):
    status, codes = EXPECTED[name]
    check = checks[name]
    assert check["status"] == status, [d["message"] for d in check["diagnoses"]]
    found = {d["code"] for d in check["diagnoses"]}
    assert found == codes, check["diagnoses"]
    assert all(d["message"] for d in check["diagnoses"])
    assert registry_findings(check) == []  # codes, details and exit effects as registered
    if status == "unusable":
        assert check["scenarios"] == [] and not check["passed"]


def test_terms_mismatch_says_more(checks):
    (d,) = checks["one_term_per_position"]["diagnoses"]
    # one loss per position: BATCH_SIZE x SEQ_LEN = 16, whatever the labels
    assert d["side"] == "more" and d["terms"] == 16 and d["counted_labels"] < 16
    assert "more than" in d["message"] and f"{d['terms']} terms" in d["message"]


def test_clipping_needs_max_grad_norm_and_names_the_scale(checks):
    clip = {d["scenario"]: d for d in checks["clips_without_max_grad_norm"]["diagnoses"]}
    declared = checks["clip_global_norm"]
    for s in declared["scenarios"]:
        if s["clip_coefficient"] is None:
            continue
        assert 0 < s["clip_coefficient"] < 1  # every labelled scenario is really clipped
        # undeclared, the same clipping is the reference's own coefficient, uniformly
        assert clip[s["name"]]["scale"] == pytest.approx(s["clip_coefficient"], rel=1e-6)
        assert s["scheme"] == "global_token"
    double = [d for d in checks["clips_double_counted"]["diagnoses"] if d["scenario"]]
    # the replicated gradient counted P = 2 times: its norm sqrt(2) too large
    assert all(d["scale"] == pytest.approx(2**-0.5, rel=1e-6) for d in double if "scale" in d)
    per_rank = _scenario(checks["clips_per_rank"], "uneven")
    assert per_rank["scheme"] == "other" and per_rank["residual"] < 1e-6
    assert per_rank["weights"][0][0] != pytest.approx(per_rank["weights"][1][0], rel=1e-3)


def test_extra_optimizer_state_says_what_appeared(checks):
    (d,) = [
        d
        for d in checks["adamw_steps_at_zero"]["diagnoses"]
        if d["code"] == "extra_optimizer_state"
    ]
    assert d["scenario"] == "no_labels" and d["keys"] == ["exp_avg", "exp_avg_sq", "step"]
    assert d["parameters"] == 3 and "N = 0" in d["message"]


def test_low_precision_still_solves_the_weights_and_names_the_scheme(checks):
    for name, scheme in [
        ("correct_float32", "global_token"),
        ("microbatch_means_float32", "microbatch_mean"),
        ("correct_bfloat16", "global_token"),
    ]:
        uneven = _scenario(checks[name], "uneven")
        assert uneven["scheme"] == scheme, name
        assert uneven["floor"] > 0 and uneven["tolerance"] == pytest.approx(10 * uneven["floor"])
        rtol = 1e-3 if "float32" in name else 5e-2
        want = update_weights.scheme_weights_times_n(uneven["counts"], scheme)
        for got_row, want_row in zip(uneven["weights"], want):
            assert got_row == pytest.approx(want_row, rel=rtol)
    assert _scenario(checks["correct_float32"], "uneven")["tolerance"] < 1e-4


def test_full_parameters_and_own_microbatches(checks):
    for name in ("sharded_parameters", "own_microbatches"):
        uneven = _scenario(checks[name], "uneven")
        assert uneven["passed"] and uneven["max_abs_diff"] < 1e-12
        assert uneven["counts"] == uneven["label_positions"]  # n_terms asked = terms returned


def test_own_optimizer_compares_parameters_only(checks):
    (d,) = [d for d in checks["own_optimizer"]["diagnoses"] if d["code"] == "optimizer_not_stepped"]
    assert d["parameters_changed"] and "never stepped" in d["message"]
    (idle,) = [
        d for d in checks["never_steps"]["diagnoses"] if d["code"] == "optimizer_not_stepped"
    ]
    assert not idle["parameters_changed"] and "did it call optimizer.step()?" in idle["message"]


def cli(*args: str, timeout: float = 240):
    return subprocess.run(
        [sys.executable, "-m", "pclab", "check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_signature_is_caught_before_any_process_starts():
    done = cli(str(TRAINERS / "wrong_signature.py"), "--timeout", "5")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "train_step(model, optimizer) cannot be called as" in line
    assert "train_step(model, optimizer, microbatches)" in line
    done = cli(str(TRAINERS / "wrong_signature.py"), "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 2 and report["status"] == "unusable"
    assert [d["code"] for d in report["diagnoses"]] == ["signature"]


@pytest.mark.parametrize(
    "args",
    [
        ["--world-size", "1", "--accum", "1"],
        ["--counts", "5,5;5,5"],  # equal counts: replica_mean and microbatch_mean look right
    ],
)
def test_no_evidence_exits_2(args):
    done = cli(str(EXAMPLES / "microbatch_means.py"), *args, "--json")
    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "no_evidence" and not report["passed"]
    assert [d["code"] for d in report["diagnoses"] if d["scenario"] is None] == ["no_evidence"]


@pytest.mark.parametrize(
    "args", [["--world-size", "3"], ["--accum", "3"], ["--world-size", "2", "--accum", "1"]]
)
def test_counts_contradicting_the_shape_exit_2(args):
    done = cli(str(EXAMPLES / "correct_manual.py"), "--counts", "3,8;8,16", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert "as counts='3,8;8,16' says" in done.stderr


def test_help_is_complete():
    done = cli("--help")
    assert done.returncode == 0
    for needle in ("Exit codes", "--device", "--counts", "no scenario\nis evidence", "README"):
        assert needle in done.stdout, needle


def test_a_hand_typed_torchrun_exits_1_with_the_summary(tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done = subprocess.run(
        [*torchrun, "--nproc-per-node", "2", "-m", "pclab.experiments.trainer_check"]
        + ["--out-dir", str(tmp_path), "--trainer", str(EXAMPLES / "double_divide_by_k.py")],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PCL_LAUNCH_TOKEN"}
        | {"TMPDIR": str(tmp_path)},  # the agent's torchelastic_* logs: here, not in /tmp
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode != 0
    assert "FAIL" in done.stdout and "scheme double_scaled" in done.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "different"


def test_the_default_stays_gloo_when_cuda_says_available(monkeypatch, tmp_path):
    """The worker in this process (one rank), with torch.cuda.is_available patched to True:
    without --device cuda it joins Gloo, and the rank's output says so."""
    import socket

    import torch
    import torch.distributed as dist

    from pclab.experiments.trainer_check import worker

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    for key, value in {**env, "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PCL_LAUNCH_TOKEN", "test")  # as the lab launches it: no exit code
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    ended = []
    monkeypatch.setattr(worker, "finish_worker", lambda code=0: ended.append(code))
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    try:
        worker.main(
            ["--out-dir", str(tmp_path), "--accum", "2", "--counts", "3,5"]
            + ["--trainer", str(EXAMPLES / "correct_manual.py")]
        )
        assert dist.get_backend() == "gloo"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    assert rank0["backend"] == "gloo" and ended == [0]
    assert rank0["checks"][0]["device"] == "cpu"


def test_real_vocabularies_are_accepted(tmp_path):
    from pclab.experiments.trainer_check import microbatches
    from pclab.experiments.trainer_check.trainer_file import MAX_VOCAB, TrainerFileError, load

    path = tmp_path / "gpt2_vocab.py"
    body = (
        "def build_model(): ...\ndef token_losses(model, microbatch): ...\n"
        "def train_step(model, optimizer, microbatches): ...\n"
    )
    path.write_text(f"VOCAB_SIZE = 50304\n{body}")
    trainer = load(path)
    ids = microbatches.microbatch(trainer, "uneven", 0, 0, 5)["input_ids"]
    assert trainer.vocab_size == 50304 and int(ids.max()) < 50304
    path.write_text(f"VOCAB_SIZE = {MAX_VOCAB + 1}\n{body}")
    with pytest.raises(TrainerFileError, match=f"1..{MAX_VOCAB}"):
        load(path)


def test_the_device_is_asked_for_never_inferred():
    path = str(EXAMPLES / "correct_manual.py")
    assert Params.checked(path).device == "cpu"
    assert not any(a.startswith("--device") for a in Params.checked(path).worker_args())
    assert "--device=cuda" in Params.checked(path, device="cuda").worker_args()
    with pytest.raises(ValueError, match="device"):
        Params.checked(path, device="tpu")


BODY = {
    "build_model": "def build_model(): ...",
    "token_losses": "def token_losses(model, microbatch): ...",
    "train_step": "def train_step(model, optimizer, microbatches): ...",
}


@pytest.mark.parametrize(
    "extra, needle, code",
    [
        (
            "def make_optimizer(): ...",
            "make_optimizer() cannot be called as make_optimizer(params)",
            "signature",
        ),
        (
            "def make_microbatch(n): ...",
            "cannot be called as make_microbatch(n_terms, generator)",
            "signature",
        ),
        ("def full_parameters(): ...", "cannot be called as full_parameters(model)", "signature"),
        ("full_parameters = 3", "full_parameters is not a function", "signature"),
        (
            'DTYPE = "float16"',
            "DTYPE='float16' must be one of float64, float32, bfloat16",
            "contract",
        ),
        ("MAX_GRAD_NORM = 0", "MAX_GRAD_NORM=0 must be a number > 0", "contract"),
        ("MAX_GRAD_NORM = True", "MAX_GRAD_NORM=True must be a number > 0", "contract"),
    ],
)
def test_the_optional_attributes_are_checked_before_launch(tmp_path, extra, needle, code):
    from pclab.experiments.trainer_check.trainer_file import TrainerFileError, load

    path = tmp_path / "trainer.py"
    path.write_text("VOCAB_SIZE = 7\n" + "\n".join(BODY.values()) + f"\n{extra}\n")
    with pytest.raises(TrainerFileError) as caught:
        load(path)
    assert needle in str(caught.value) and caught.value.code == code


def test_extra_parameters_with_defaults_still_fit_the_signature(tmp_path):
    from pclab.experiments.trainer_check.trainer_file import load

    path = tmp_path / "trainer.py"
    body = {**BODY, "train_step": "def train_step(model, optimizer, microbatches, scale=1): ..."}
    path.write_text("\n".join(body.values()) + "\ndef make_microbatch(n_terms, generator): ...\n")
    trainer = load(path)  # VOCAB_SIZE is optional with make_microbatch
    assert trainer.has("make_microbatch") and trainer.dtype == "float64"
    assert trainer.max_grad_norm is None


def test_no_evidence_messages_name_the_reason():
    one = diagnoses.no_evidence_scenario("uneven", [])
    assert one["message"] == (
        "uneven: one microbatch in all splits nothing, so matching the reference here is no "
        "evidence"
    )
    two = diagnoses.no_evidence_scenario("equal_counts", ["replica_mean"])
    assert "give DDP's mean of local means (replica_mean) the global token mean's" in two["message"]
