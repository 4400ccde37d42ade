"""The framework table (pclab/artifacts/framework_checks.json) against real runs: the installed
framework adapters (Accelerate, PyTorch Lightning, TRL, DeepSpeed, torch FSDP2) re-run through
the trainer check on two Gloo processes (P = 2, K = 2), one launch per framework, and compared
with their records, with the closed forms of their schemes, and with the evidence every rank
writes that the framework's own loop made the update ($PCL_FRAMEWORK_RECORD).

What they measured (accelerate 1.15.0, lightning 2.6.6, trl 1.16.0, torch 2.13.0), pinned here
against weights computed from the counts alone:

- the framework defaults (accelerator.accumulate, accumulate_grad_batches) with the model's mean
  loss: each microbatch's mean / K, DDP's mean over P: weight x N = N / (P K n_rk);
- Accelerate's guide as its text says, and Lightning with the window's count summed over the
  ranks: the global token mean, 1 in every cell, the same update to 1e-10;
- Accelerate's guide's code as written counts every label, position 0 included, where only
  the shifted ones are terms: weight x N = terms / labels everywhere (29/34 when uneven);
- TRL's SFTTrainer, its defaults, padding_free, packing and completion-only loss (float32, its
  fused LM head's precision; weights to 1e-5): the global token mean, 1 in every cell, every
  microstep's loss divided by N itself (num_items_in_batch), the labels its collator built
  being the check's terms, microstep by microstep (rank by rank when packing regroups them).
- transformers' run_clm_no_trainer.py loop (accelerator.accumulate + outputs.loss) on padded,
  masked data: microbatch means, as the defaults; each rank served its own microbatches by
  Accelerate's sharded DataLoader (the global batch gathered first);
- DeepSpeed's engine (0.19.8, float32) with the model's mean loss: microbatch means, as above;
  Trainer + DeepSpeed ZeRO-2 and FSDP2 with the global count: 1 everywhere; FSDP2 with each
  rank's own count: DDP's mean of local means, weight x N = N / (P n_r).

    python -m pytest tests/runners/test_frameworks.py -q
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest
from runner_support import ROOT

from pclab.experiments.trainer_check import frameworks

RECORD_ENV = "PCL_FRAMEWORK_RECORD"  # examples/frameworks/shared/framework_lm.py writes it
STEPS_PER_SCENARIO = 2  # the check's train_step calls: the user's optimizer, then SGD at lr 1
SPEC_FIELDS = {
    "framework",
    "version",
    "setting",
    "default",
    "scheme",
    "weights",
    "passed",
    "max_abs_diff",
    "tolerance",
    "torch",
    "recorded_at",
    "command",
}
ISSUE_FRAMEWORKS = {  # every framework the table must show, measured or with a reason
    "Accelerate",
    "PyTorch Lightning",
    "TRL SFTTrainer",
    "litgpt",
    "DeepSpeed",
    "transformers Trainer + DeepSpeed",
    "torch FSDP2",
    "torchtitan",
    "transformers run_clm_no_trainer.py",
    "Megatron-core",
    "torchtune",
    "OLMo-core",
    "OpenCLIP ClipLoss",
    "Composer",
    "sentence-transformers",
}
RUN_HERE = ("accelerate", "lightning", "trl", "deepspeed", "torch")  # whose adapters this re-runs
# The module's launches run in the first test's setup: about a minute on a warm machine, plus,
# on a fresh one, DeepSpeed compiling its CPU op on its first launch (81 s here beside one busy
# core, more with both cores busy). Above the suite's 300 s default; each launch keeps the
# check's own 600 s limit.
pytestmark = pytest.mark.timeout(900)
DDP_LOOPS = ("accelerate", "lightning", "trl")  # their adapters wrap the model in DDP
WEIGHT_REL = {"float64": 1e-9, "float32": 1e-5}  # weight x N as solved, by the check's DTYPE
FLOAT32_LOSS = {"clm_no_trainer_padded"}  # transformers' causal-LM loss: logits.float()
GLOBAL_TOKEN = {  # the adapters whose closed form is the global token mean
    "accelerate_guide",
    "lightning_global_tokens",
    "trl_sft",
    "trl_sft_padding_free",
    "trl_sft_packing",
    "trl_sft_completion_only",
    "hf_trainer_deepspeed_zero2",
    "fsdp2_global_tokens",
}


def _recorded() -> dict[str, dict]:
    """adapter -> its record, for the settings that ran."""
    recorded = frameworks.by_code()
    return {s.code: recorded[s.code] for s in frameworks.SETTINGS if s.adapter}


def _installed(package: str) -> bool:
    return frameworks.installed_version(package) is not None


@pytest.fixture(scope="module")
def runs(tmp_path_factory, warm_pool):
    """One launch per installed framework of RUN_HERE, with every rank's evidence, through the
    session's warm pool (the ranks import the framework themselves, as a cold launch's do)."""
    record = tmp_path_factory.mktemp("frameworks") / "record.jsonl"
    saved = os.environ.get(RECORD_ENV)
    os.environ[RECORD_ENV] = str(record)
    checks: dict[str, dict] = {}
    try:
        for package in RUN_HERE:
            settings = [s for s in frameworks.SETTINGS if s.package == package and s.adapter]
            if _installed(package):
                checks |= frameworks.check_adapters(settings, runtime=warm_pool)
    finally:
        os.environ.pop(RECORD_ENV) if saved is None else os.environ.__setitem__(RECORD_ENV, saved)
    lines = [json.loads(x) for x in record.read_text().splitlines()] if record.exists() else []
    return SimpleNamespace(checks=checks, lines=lines)


def _check(runs, adapter: str) -> dict:
    package = next(s.package for s in frameworks.SETTINGS if s.adapter == adapter)
    if not _installed(package):
        pytest.skip(f"{package} is not installed")
    return runs.checks[adapter]


def _scenario(check: dict, name: str) -> dict:
    return next(s for s in check["scenarios"] if s["name"] == name)


ADAPTERS = [s.adapter for s in frameworks.SETTINGS if s.adapter and s.package in RUN_HERE]
DDP_ADAPTERS = [s.adapter for s in frameworks.SETTINGS if s.adapter and s.package in DDP_LOOPS]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_installed_adapter_measures_what_its_record_says(runs, adapter):
    check, recorded = _check(runs, adapter), _recorded()[adapter]
    uneven = _scenario(check, "uneven")
    assert recorded["reason"] is None and recorded["command"].endswith(f"{adapter}.py --json")
    assert (uneven["scheme"], check["passed"]) == (recorded["scheme"], recorded["passed"])
    assert uneven["counts"] == recorded["counts"]
    assert {s["name"]: s["passed"] for s in check["scenarios"]} == recorded["scenarios"]
    rel = 1e-6 if adapter in FLOAT32_LOSS else WEIGHT_REL[check["dtype"]]
    for got, want in zip(uneven["weights"], recorded["weights"], strict=True):
        assert got == pytest.approx(want, rel=rel, abs=1e-12)
    assert recorded.get("dtype", "float64") == check["dtype"]  # records before dtype: float64
    if recorded["passed"]:
        assert uneven["max_abs_diff"] <= recorded["tolerance"]
    else:
        rel = 1e-3 if check["dtype"] == "float32" else 1e-6
        assert uneven["max_abs_diff"] == pytest.approx(recorded["max_abs_diff"], rel=rel)


MICROBATCH_MEANS = (  # the model's mean loss per microbatch, ÷ K by the framework, DDP's ÷ P
    "accelerate_accumulate",
    "clm_no_trainer_padded",
    "lightning_accumulate",
    "deepspeed_engine",
    "deepspeed_engine_zero2_adamw",
)
OFF_FIRST_POSITION = {"clm_no_trainer_padded": [[14, 8], [1, 8]]}  # its uneven terms


def _mean_of_microbatch_means(counts):
    total, ranks, steps = sum(map(sum, counts)), len(counts), len(counts[0])
    return [[total / (ranks * steps * n) if n else None for n in row] for row in counts]


def _mean_of_local_means(counts):
    total, ranks = sum(map(sum, counts)), len(counts)
    return [[total / (ranks * sum(row)) if n else None for n in row] for row in counts]


def _uniform(counts, value):
    return [[value if n else None for n in row] for row in counts]


def _own_microbatches(adapter: str) -> bool:
    """The adapter builds its microbatches (make_microbatch): every label it places is a term."""
    from pclab.experiments.trainer_check.trainer_file import load

    return load(frameworks.BY_CODE[adapter].path).has("make_microbatch")


def _expected(adapter: str, s: dict):
    """weight x N from the counts alone, per adapter's normalisation."""
    if adapter in MICROBATCH_MEANS:
        return _mean_of_microbatch_means(s["counts"])  # the defaults: each mean ÷ K, DDP's ÷ P
    if adapter == "fsdp2_local_mean":  # each rank's own count, FSDP2's mean over the ranks
        return _mean_of_local_means(s["counts"])
    if adapter == "accelerate_guide_as_written":  # N counted every label, terms are fewer
        terms, labels = sum(map(sum, s["counts"])), sum(map(sum, s["label_positions"]))
        return _uniform(s["counts"], terms / labels)
    return _uniform(s["counts"], 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_weights_are_the_closed_form_of_each_normalisation(runs, adapter):
    check = _check(runs, adapter)
    rel = 1e-6 if adapter in FLOAT32_LOSS else WEIGHT_REL[check["dtype"]]
    for s in check["scenarios"]:
        if s["name"] == "no_labels":
            assert s["weights"] == [[None, None], [None, None]] and s["passed"]
            continue
        for got_row, want_row in zip(s["weights"], _expected(adapter, s), strict=True):
            for got, want in zip(got_row, want_row, strict=True):
                assert (got is None) == (want is None), (s["name"], s["weights"])
                if want is not None:
                    assert got == pytest.approx(want, rel=rel), (s["name"], s["weights"])
        assert s["residual"] < rel, s["name"]
    uneven = _scenario(check, "uneven")
    if adapter in OFF_FIRST_POSITION:  # FIRST_POSITION_LABELLED = False: 14 per microbatch
        terms = OFF_FIRST_POSITION[adapter]
        assert uneven["label_positions"] == uneven["counts"] == terms
    else:
        terms = [[16, 8], [7, 3]] if _own_microbatches(adapter) else [[14, 7], [5, 3]]
        assert uneven["label_positions"] == [[16, 8], [7, 3]] and uneven["counts"] == terms
    global_mean = adapter in GLOBAL_TOKEN
    assert check["passed"] is global_mean and uneven["passed"] is global_mean


@pytest.mark.slow
@pytest.mark.parametrize("adapter", DDP_ADAPTERS)
def test_every_step_went_through_the_frameworks_own_loop(runs, adapter):
    """Per rank, one line per train_step: the optimizer really stepped once, the model was in
    the framework's DistributedDataParallel, and DDP all-reduced on the last microstep only."""
    check = _check(runs, adapter)
    lines = [x for x in runs.lines if x["adapter"] == adapter]
    calls = [s for s in check["scenarios"] for _ in range(STEPS_PER_SCENARIO)]
    for rank in (0, 1):
        mine = [x for x in lines if x["rank"] == rank]
        assert len(mine) == len(calls), (rank, len(mine))
        for line, s in zip(mine, calls, strict=True):
            assert line["world_size"] == 2 and line["optimizer_steps"] == 1
            assert line["grad_sync"] == [False, True]
            if adapter.startswith("trl"):
                _trl_evidence(adapter, line, s, rank)
            elif adapter.startswith("lightning"):
                assert line["global_step"] == 1 and line["accumulate_grad_batches"] == 2
                assert line["strategy"] == "DDPStrategy"
                assert line["wrapped_in"] == ["DistributedDataParallel"]
            else:
                assert line["distributed_type"] == "MULTI_CPU"  # on the lab's Gloo group
                assert line["wrapped_in"] == "DistributedDataParallel"
                assert line["optimizer_wrapped_in"] == "AcceleratedOptimizer"
            if adapter == "clm_no_trainer_padded":  # Accelerate's sharding: its own, in order
                assert line["terms_served"] == s["counts"][rank], s["name"]
            if adapter.startswith("accelerate_guide"):
                key = "label_positions" if adapter.endswith("as_written") else "counts"
                assert line["num_items_in_batch"] == sum(map(sum, s[key])), s["name"]


def _trl_evidence(adapter: str, line: dict, s: dict, rank: int) -> None:
    """SFTTrainer's own loop, its own count: global step 1 in its DistributedDataParallel; every
    microstep's loss divided by N, the scenario's terms over both ranks (num_items_in_batch); the
    labels its collator built are the check's terms, microstep by microstep - rank by rank when
    packing regroups the documents into K rows of max_length tokens."""
    counts = s["counts"][rank]
    assert line["global_step"] == 1 and line["gradient_accumulation_steps"] == 2
    assert line["distributed_type"] == "MULTI_CPU"
    assert line["wrapped_in"] == "DistributedDataParallel"
    assert line["average_tokens_across_devices"] is True and line["max_grad_norm"] == 1.0
    assert line["num_items_in_batch"] == [sum(map(sum, s["counts"]))] * 2, s["name"]
    assert line["collator"] == "DataCollatorForLanguageModeling"
    packing = adapter == "trl_sft_packing"
    assert line["packing"] is packing
    assert line["padding_free"] is (packing or adapter == "trl_sft_padding_free")
    assert line["completion_only_loss"] is (adapter == "trl_sft_completion_only")
    if packing:  # one row of 18 tokens per microstep, which documents in it is TRL's choice
        assert line["batches"] == [[1, 18], [1, 18]] and sum(line["terms"]) == sum(counts)
        return
    assert line["terms"] == counts, s["name"]
    if adapter == "trl_sft_padding_free":  # one row: the documents' words, and 2 ends
        assert line["batches"] == [[1, n + 2] for n in counts]
    else:  # 2 rows, padded to the longest
        assert [b[0] for b in line["batches"]] == [2, 2]


def _lines(runs, adapter: str, rank: int) -> list[dict]:
    """This rank's evidence, one line per train_step: per scenario, the user's optimizer
    (SGD, lr 0.1), then SGD at lr 1 for the weights."""
    check = _check(runs, adapter)
    mine = [x for x in runs.lines if x["adapter"] == adapter and x["rank"] == rank]
    calls = [s for s in check["scenarios"] for _ in range(STEPS_PER_SCENARIO)]
    assert len(mine) == len(calls), (adapter, rank, len(mine))
    return list(zip(mine, calls, strict=True))


def _optimizer_not_stepped(check: dict) -> bool:
    found = [d for d in check["diagnoses"] if d["code"] == "optimizer_not_stepped"]
    return bool(found) and all(d["parameters_changed"] for d in found)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_deepspeed_engine_steps_the_optimizer_it_is_given(runs, rank):
    """DeepSpeed's own engine made the update: one global step over K microsteps, all-reduce
    and step on the last one only, on the lab's Gloo group, with the passed optimizer."""
    for line, _ in _lines(runs, "deepspeed_engine", rank):
        assert line["wrapped_in"] == "DeepSpeedEngine" and line["zero_stage"] == 0
        assert (line["global_steps"], line["micro_steps"], line["optimizer_steps"]) == (1, 2, 1)
        assert line["grad_sync"] == [False, True] and line["gradient_accumulation_steps"] == 2
        assert (line["backend"], line["accelerator"]) == ("gloo", "cpu")
        assert line["optimizer_is_the_one_passed"] and line["optimizer_class"] == "SGD"
    assert not _optimizer_not_stepped(_check(runs, "deepspeed_engine"))


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_zero2_steps_the_adamw_it_is_given_on_its_own_partitions(runs, rank):
    """The engine with ZeRO-2 steps the AdamW passed in (then SGD at lr 1 for the weights),
    once per update, inside its DeepSpeedZeroOptimizer; after initialize that optimizer holds
    ZeRO's flat partitions, so the check reads none of its state: every scenario notes it."""
    check = _check(runs, "deepspeed_engine_zero2_adamw")
    for line, _ in _lines(runs, "deepspeed_engine_zero2_adamw", rank):
        assert line["wrapped_in"] == "DeepSpeedEngine" and line["zero_stage"] == 2
        assert (line["global_steps"], line["micro_steps"], line["optimizer_steps"]) == (1, 2, 1)
        assert line["optimizer_class"] == "DeepSpeedZeroOptimizer"
        assert not line["optimizer_is_the_one_passed"]
    assert all("optimizer_state_unread" in s["notes"] for s in check["scenarios"])
    assert not _optimizer_not_stepped(check)


@pytest.mark.slow
def test_zero2_gives_the_stage_0_engine_s_weights_and_no_pass_at_n_0(runs):
    """Partitioning changes nothing the solve sees: every scenario's weights are the stage-0
    row's (a separate launch, SGD at stage 0), to float32's solve precision. At N = 0 the
    engine still steps AdamW, whose state cannot be read: unchanged parameters there are no
    evidence, not a pass."""
    zero2, stage0 = (_check(runs, a) for a in ("deepspeed_engine_zero2_adamw", "deepspeed_engine"))
    for mine, theirs in zip(zero2["scenarios"], stage0["scenarios"], strict=True):
        assert mine["name"] == theirs["name"]
        if mine["weights"] is None or mine["name"] == "no_labels":
            continue
        for got_row, want_row in zip(mine["weights"], theirs["weights"], strict=True):
            for got, want in zip(got_row, want_row, strict=True):
                assert (got is None) == (want is None)
                assert got is None or got == pytest.approx(want, rel=WEIGHT_REL["float32"])
    zero = _scenario(zero2, "no_labels")
    assert zero["passed"] and zero["verdict"] == "no_evidence"
    said = [d for d in zero2["diagnoses"] if d["scenario"] == "no_labels"]
    assert [d["code"] for d in said] == ["no_evidence"] and said[0]["state_unread"] is True
    assert zero2["status"] == "different"  # the microbatch means, as stage 0's


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_trainer_with_deepspeed_discards_the_optimizer_it_is_given(runs, rank):
    """Trainer + ZeRO-2 never steps the optimizer passed in: it builds its own (from
    TrainingArguments: SGD at the passed learning rate, 0.1 then 1) and ZeRO-2 steps that
    once per parameter group; the check compares the parameters alone."""
    check = _check(runs, "hf_trainer_deepspeed_zero2")
    for line, s in _lines(runs, "hf_trainer_deepspeed_zero2", rank):
        assert line["global_step"] == 1 and line["gradient_accumulation_steps"] == 2
        assert (line["distributed_type"], line["wrapped_in"]) == ("DEEPSPEED", "DeepSpeedEngine")
        assert line["zero_stage"] == 2 and line["optimizer_wrapped_in"] == "DeepSpeedZeroOptimizer"
        assert not line["optimizer_is_the_one_passed"] and line["passed_optimizer_steps"] == 0
        assert line["optimizer_class"] == "SGD"
        assert line["optimizer_steps"] == line["optimizer_param_groups"] == 2
        assert line["num_items_in_batch"] == [sum(map(sum, s["counts"]))] * 2, s["name"]
    lrs = [line["optimizer_lr"] for line, _ in _lines(runs, "hf_trainer_deepspeed_zero2", rank)]
    assert lrs == [0.1, 1.0] * len(check["scenarios"])
    assert _optimizer_not_stepped(check)


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ["fsdp2_global_tokens", "fsdp2_local_mean"])
def test_fsdp2_shards_and_syncs_on_the_last_microstep(runs, adapter):
    """Every parameter a DTensor sharded on dim 0 (the 11 embedding rows: 6 on rank 0, 5 on
    rank 1), the optimizer built over the shards, FSDP2's reduce-scatter on the last microstep
    only; the global-count variant skips the step at N = 0."""
    for rank, rows in ((0, 6), (1, 5)):
        for line, s in _lines(runs, adapter, rank):
            assert (line["wrapped_in"], line["parameter_type"]) == ("FSDPSequential", "DTensor")
            assert line["placements"] == ["S(0)"] and line["local_rows"] == rows
            assert not line["optimizer_is_the_one_passed"]
            skipped = adapter == "fsdp2_global_tokens" and s["name"] == "no_labels"
            assert line["optimizer_steps"] == (0 if skipped else 1), s["name"]
            assert line["grad_sync"] == ([] if skipped else [False, True]), s["name"]
    assert _optimizer_not_stepped(_check(runs, adapter))


def test_the_table_shows_every_framework_measured_or_with_its_reason():
    records = frameworks.load()["records"]
    assert [r["code"] for r in records] == [s.code for s in frameworks.SETTINGS]
    assert {r["framework"] for r in records} >= ISSUE_FRAMEWORKS
    for r, s in zip(records, frameworks.SETTINGS, strict=True):
        assert SPEC_FIELDS <= set(r) and r["default"] is s.default and r["torch"]
        assert r["version"], r["framework"]
        if s.adapter is None:
            assert r["reason"] == s.reason and r["command"] is None
            assert r["scheme"] is r["weights"] is r["passed"] is None
        else:  # a real run: a command anyone can repeat, and what it measured
            assert r["reason"] is None and r["command"] == frameworks.command(s)
            assert (ROOT / r["command"].split()[2]).is_file()
            assert isinstance(r["passed"], bool)
            if r.get("mode") == "coupled":  # no weight per label: the objective's factors
                _assert_coupled_record(r, s)
            else:
                assert len(r["weights"]) == 2 and s.accum == frameworks.ACCUM
                assert "accum" not in r and "mode" not in r  # the token records as they were
    defaults = {r["framework"] for r in records if r["default"]}
    assert defaults >= ISSUE_FRAMEWORKS - {"transformers Trainer + DeepSpeed", "torch FSDP2"}


COUPLED_FIELDS = {"accum", "sizes", "schemes", "factor", "scale_groups", "residual", "diagnoses"}


def _assert_coupled_record(r: dict, s: frameworks.Setting) -> None:
    """One coupled record's form: its setting's K (in its command when not the table's), the
    items P x K, each scenario's scheme (the record's is uneven_microsteps'), the factor, the
    groups' factors (scaled, two or more groups: they differ), a residual that fits unless no
    objective does (other)."""
    assert COUPLED_FIELDS <= set(r) and r["weights"] is r["counts"] is None
    assert r["accum"] == s.accum and (" --accum " in r["command"]) is (s.accum != frameworks.ACCUM)
    assert [len(row) for row in r["sizes"]] == [s.accum] * frameworks.WORLD_SIZE
    assert r["schemes"][frameworks.MEASURED_COUPLED] == r["scheme"]
    assert set(r["schemes"]) == set(r["scenarios"]) and isinstance(r["factor"], float)
    assert r["scale_groups"] == [] or r["scheme"] == "scaled"
    assert r["residual"] < 1e-9 or (r["scheme"] == "other" and r["residual"] > 1e-3)


def test_checking_the_contract_imports_no_framework():
    """The command imports an adapter in its own process to check the contract: the adapters
    import their framework (accelerate, lightning, trl) only inside their functions."""
    from pclab.experiments.trainer_check.trainer_file import load

    packages = ("accelerate", "lightning", "trl", "deepspeed", "transformers")
    before = {m for m in packages if m in sys.modules}
    for adapter in ADAPTERS:
        capacity = 14 if adapter in OFF_FIRST_POSITION else 16  # labels at 1..7 only: 14
        assert load(frameworks.BY_CODE[adapter].path).capacity == capacity
    assert {m for m in packages if m in sys.modules} == before
