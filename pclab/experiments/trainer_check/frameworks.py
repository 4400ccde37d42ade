"""Frameworks, measured: the trainer check run on each bundled framework adapter
(examples/trainers/<adapter>.py; P = 2, K = 2), one record per framework setting, written with
the versions that ran it to pclab/artifacts/framework_checks.json. A coupled adapter (a loss over
in-batch negatives: OpenCLIP at K = 1, sentence-transformers) is recorded with the objective its
step minimised, that objective's factor (one per parameter group where they differ) and
residual, and each scenario's scheme (`measured`). A setting that cannot run here keeps a
record too, with the exact reason instead of a measurement.

    python -m pclab.experiments.trainer_check.frameworks              # every installed one
    python -m pclab.experiments.trainer_check.frameworks --only lightning

The ranks run under the Python that runs this command, so a framework that cannot share the
lab's environment is recorded from its own virtual environment with `--only PACKAGE`: the
other records stay as they were. A setting whose package is not installed keeps its last
record (from a real run elsewhere), or gets one saying it is not installed.
"""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pclab.experiments.trainer_check.hf_recorded import installed_version
from pclab.paths import EXAMPLES_DIR, PACKAGE_DIR, shown

if TYPE_CHECKING:
    from pclab.runners.runtime import Runtime

RECORDED = PACKAGE_DIR / "artifacts" / "framework_checks.json"
WORLD_SIZE, ACCUM = 2, 2  # P and K of every record (K: unless its setting says otherwise)
MEASURED_SCENARIO = "uneven"  # the record's scheme, weights and max_abs_diff are this one's
MEASURED_COUPLED = "uneven_microsteps"  # a coupled record's scheme, factors and residual
OPENCLIP = "OpenCLIP ClipLoss"
OPENCLIP_ACCUM = 1  # ClipLoss has no accumulation (open_clip_train's accum_freq: its train.py)
NEEDS_V2 = "the trainer check's v2 contract (issue 22)"
TRL_DEFAULTS = (  # float32: TRL's fused LM head computes its log-softmax in float32 anyway
    "defaults (text data, labels from the inputs), bf16=False: a float32 model, no autocast"
)


@dataclass(frozen=True)
class Setting:
    framework: str  # as users name it
    package: str  # the distribution whose installed version is recorded
    setting: str  # in plain words
    default: bool  # the framework's default setting
    adapter: str | None = None  # examples/trainers/<adapter>.py; None: cannot run here
    reason: str | None = None  # why not, when adapter is None
    examined: str | None = None  # the version the reason is about, when none is installed
    accum: int = ACCUM  # K of its check: 1 where the library has no accumulation of its own

    @property
    def code(self) -> str:
        """Its key (the page's widgets, the catalogue): the adapter's file stem, else the
        package's name (a setting that cannot run here)."""
        return self.adapter or self.package


SETTINGS = (
    Setting(
        "Accelerate",
        "accelerate",
        "accelerator.accumulate(model), the model's mean loss",
        True,
        "accelerate_accumulate",
    ),
    Setting(
        "Accelerate",
        "accelerate",
        "its gradient-accumulation guide, as its text says: labels[..., 1:] counted, "
        "gathered (N), summed loss x K x P / N",
        False,
        "accelerate_guide",
    ),
    Setting(
        "Accelerate",
        "accelerate",
        "its gradient-accumulation guide's code as written: every label counted",
        False,
        "accelerate_guide_as_written",
    ),
    Setting(
        "PyTorch Lightning",
        "lightning",
        'accumulate_grad_batches=K, strategy="ddp", training_step returns the model\'s mean loss',
        True,
        "lightning_accumulate",
    ),
    Setting(
        "PyTorch Lightning",
        "lightning",
        "the window's label count summed over ranks (N), training_step returns the summed "
        "loss x K x P / N",
        False,
        "lightning_global_tokens",
    ),
    Setting(
        "transformers Trainer",
        "transformers",
        "average_tokens_across_devices=True",
        True,
        "hf_trainer",
    ),
    Setting(
        "transformers Trainer",
        "transformers",
        "average_tokens_across_devices=False",
        False,
        "hf_trainer_local_average",
    ),
    Setting("TRL SFTTrainer", "trl", TRL_DEFAULTS, True, "trl_sft"),
    Setting("TRL SFTTrainer", "trl", "padding_free=True", False, "trl_sft_padding_free"),
    Setting(
        "TRL SFTTrainer",
        "trl",
        "packing=True (best-fit decreasing): a microbatch is one packed row's documents",
        False,
        "trl_sft_packing",
    ),
    Setting(
        "TRL SFTTrainer",
        "trl",
        "completion_only_loss=True, prompt-completion data",
        False,
        "trl_sft_completion_only",
    ),
    Setting(
        "DeepSpeed",
        "deepspeed",
        "engine, gradient_accumulation_steps=K, the model's mean loss, float32",
        True,
        "deepspeed_engine",
    ),
    Setting(
        "transformers Trainer + DeepSpeed",
        "deepspeed",
        "ZeRO-2, the optimizer the user passes in, float32",
        False,
        "hf_trainer_deepspeed_zero2",
    ),
    Setting(
        "torch FSDP2",
        "torch",
        "fully_shard on CPU Gloo, summed loss ÷ the global token count (N) × P",
        False,
        "fsdp2_global_tokens",
    ),
    Setting(
        "torch FSDP2",
        "torch",
        "fully_shard on CPU Gloo, summed loss ÷ the rank's own token count",
        False,
        "fsdp2_local_mean",
    ),
    Setting(  # its own environment: python -m bench.framework_env litgpt
        "litgpt",
        "litgpt",
        "finetune/full.py fit(), its Fabric loop: each microbatch's mean loss / "
        "gradient_accumulation_iters (DDP: Fabric refuses its FSDP setup on a CPU)",
        True,
        "litgpt_finetune",
    ),
    Setting(  # its own environment: python -m bench.framework_env torchtune
        "torchtune",
        "torchtune",
        "recipes/full_finetune_distributed.py, labels as text_completion_dataset builds them "
        "(position 0 counted), FSDP2, float32",
        True,
        "torchtune_full_finetune",
    ),
    Setting(
        "torchtune",
        "torchtune",
        "recipes/full_finetune_distributed.py, the label at position 0 masked (-100)",
        False,
        "torchtune_full_finetune_masked",
    ),
    Setting(  # its own environment: python -m bench.framework_env ai2-olmo-core
        "OLMo-core",
        "ai2-olmo-core",
        "TransformerTrainModule, FSDP: each rank's summed loss / its own label count "
        "(loss_div_factor), float32",
        True,
        "olmo_core_train_module",
    ),
    Setting(
        "OLMo-core",
        "ai2-olmo-core",
        "OLMoDDPTrainModule (its MoE models, its own distributed optimizer)",
        False,
        reason="not measured: OLMoDDPTrainModule takes only an OLMoDDPModel (OLMo-core's MoE "
        "transformer) and builds its optimizer from OLMoDDPOptimizerConfig, a distributed fused "
        "AdamW with skip-step spike detection (its docstring); it has no SGD, and the check "
        "solves each microbatch's weight from an SGD update, so the update cannot be set "
        "against the check's reference. Its source all-reduces the label count over the "
        "data-parallel group and divides it by the group's size before dividing each loss "
        "(ddp_train_module.py:1598-1604): read, not measured",
        examined="3.0.0",
    ),
    Setting(
        "torchtitan",
        "torchtitan",
        "its trainer",
        True,
        reason="torchtitan 0.3.0 cannot run on a CPU: tools/utils.py takes device_type = "
        "_get_available_device_type() or 'cuda', and Trainer.__init__ (trainer.py:301) calls "
        "device_module.set_device, i.e. torch.cuda.set_device, which torch 2.13.0+cpu refuses "
        "(AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'; its own "
        "llama3_debugmodel config, 2 ranks under torchrun, in a separate virtual environment). "
        "It co-installs only by moving datasets back to 4.7.0 (it pins <4.8) and huggingface_hub "
        "to 1.33.0",
        examined="0.3.0",
    ),
    Setting(  # transformers' example script (its code: "transformers"); the next row's
        "transformers run_clm_no_trainer.py",  # accumulation is Accelerate's, so is its package
        "transformers",
        "as shipped: group_texts blocks, labels = input_ids, accelerator.accumulate + outputs.loss",
        True,
        reason="not a separate measurement: group_texts cuts the text into blocks of block_size "
        "tokens with every label counted and no padding, and Accelerate's prepared DataLoader "
        "fills a short last batch (even_batches), so every microbatch holds the same "
        "per_device_train_batch_size x (block_size - 1) terms and each outputs.loss / K, "
        "averaged over P, is the global token mean on that data. The check's uneven counts "
        "cannot be built from such blocks, and on equal counts every scheme passes; the same "
        "loop on padded, masked data is the next row",
    ),
    Setting(
        "transformers run_clm_no_trainer.py",
        "accelerate",
        "its loop (accelerator.accumulate + outputs.loss) on right-padded, masked data",
        False,
        "clm_no_trainer_padded",
    ),
    Setting(  # pip install --no-deps -r requirements-nodeps.txt (examples/trainers/openclip_*)
        OPENCLIP,
        "open-clip-torch",
        "local_loss=False, gather_with_grad=False, learnable logit_scale, DDP",
        True,
        "openclip_global_loss",
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        OPENCLIP,
        "open-clip-torch",
        "local_loss=False, gather_with_grad=True",
        False,
        "openclip_global_gather_grad",
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        OPENCLIP,
        "open-clip-torch",
        "local_loss=True, gather_with_grad=False",
        False,
        "openclip_local_loss",
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        OPENCLIP,
        "open-clip-torch",
        "local_loss=True, gather_with_grad=True",
        False,
        "openclip_local_gather_grad",
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        OPENCLIP,
        "open-clip-torch",
        "the defaults with the loss x P before backward (tevatron's compensation for a gather "
        "without gradient)",
        False,
        "openclip_times_world_size",
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        "Composer",
        "composer",
        "its Trainer: the default, accumulate_train_batch_on_tokens=True with its default token "
        "counter, and with a counter of loss-generating tokens",
        True,
        reason="composer 0.32.1 cannot share the lab's environment: its METADATA requires "
        "'torch<2.7.1,>=2.6.0' and 'torchvision<0.22.1,>=0.21.0', and the lab runs torch "
        "2.13.0 (CPU). An environment of its own needs torch 2.6.x or 2.7.0: this machine's "
        "wheel store holds no CPU build of either (torch 2.13.0+cpu and 2.14.1 only), and the "
        "package index offers PyPI's CUDA build (torch-2.7.0 manylinux wheel 865.2 MB, plus 14 "
        "nvidia-*-cu12 packages). Not measured; its arithmetic is not reproduced by hand: that "
        "would be no measurement",
        examined="0.32.1",
    ),
    Setting(
        "sentence-transformers",
        "sentence-transformers",
        "MultipleNegativesRankingLoss, gather_across_devices=False (its default): the rank's K "
        "microbatches one per-device batch, torch DDP",
        True,
        "sbert_mnrl",
    ),
    Setting(
        "sentence-transformers",
        "sentence-transformers",
        "MultipleNegativesRankingLoss, gather_across_devices=True",
        False,
        "sbert_mnrl_gather",
    ),
    Setting(
        "sentence-transformers",
        "sentence-transformers",
        "CachedMultipleNegativesRankingLoss (GradCache), gather_across_devices=False, "
        "mini_batch_size = the largest microbatch",
        False,
        "sbert_cached_mnrl",
    ),
    Setting(
        "sentence-transformers",
        "sentence-transformers",
        "CachedMultipleNegativesRankingLoss (GradCache), gather_across_devices=True",
        False,
        "sbert_cached_mnrl_gather",
    ),
    Setting(
        "sentence-transformers",
        "sentence-transformers",
        "MultipleNegativesRankingLoss with naive gradient accumulation: one microbatch a "
        "microstep, each loss / K, DDP's no_sync but the last",
        False,
        "sbert_mnrl_accumulate",
    ),
    Setting(
        "Megatron-core",
        "megatron-core",
        "calculate_per_token_loss=False (its default) and True",
        True,
        reason="megatron-core 0.19.2 cannot be installed here: it requires Python >= 3.12, as "
        "every release since 0.17.0 does, and the lab's Python is 3.11 (pip: 'Ignored the "
        "following versions that require a different python version: ... 0.19.2 Requires-Python "
        ">=3.12'). Its arithmetic is not reproduced by hand: that would be no measurement",
        examined="0.19.2",
    ),
)


ADAPTERS = tuple(s.adapter for s in SETTINGS if s.adapter)  # their file stems
MODEL_MODULE = "framework_lm"  # the model the Accelerate and Lightning adapters share
OPENCLIP_MODULE = "openclip_clip_loss"  # what the OpenCLIP adapters share: model, ClipLoss
SBERT_MODULE = "sbert_model"  # what the sentence-transformers adapters share: model, loss
SHARED_MODULES = (MODEL_MODULE, OPENCLIP_MODULE, SBERT_MODULE)  # bundled, but no adapters
# package -> the modules its adapters' ranks import, which a warm-pool zygote can import ahead
# (the server does unless PCL_PRELOAD_FRAMEWORKS=0: BENCHMARKS.md, "Frameworks")
PRELOAD = {
    "accelerate": ("accelerate",),
    "lightning": ("lightning.pytorch",),
    "transformers": ("transformers.trainer", "transformers.models.llama.modeling_llama"),
    "litgpt": ("litgpt.finetune.full",),
}


# package -> its pin in requirements-nodeps.txt, installed with `pip install --no-deps -r`:
# its declared dependencies would replace the lab's torch (open-clip-torch: torchvision)
NO_DEPS = {"open-clip-torch": "open-clip-torch==3.3.0"}


def preload_modules() -> tuple[str, ...]:
    """PRELOAD's modules of the packages this Python has."""
    return tuple(m for p, modules in PRELOAD.items() if installed_version(p) for m in modules)


def setting_of(record: dict[str, Any]) -> Setting:
    """The SETTINGS entry a record was made for (ValueError for one the table no longer has)."""
    for s in SETTINGS:
        if (s.framework, s.setting) == (record["framework"], record["setting"]):
            return s
    raise ValueError(f"no setting {record['framework']!r}, {record['setting']!r} in SETTINGS")


def _uneven(check: dict[str, Any]) -> dict[str, Any]:
    name = MEASURED_COUPLED if check.get("mode") == "coupled" else MEASURED_SCENARIO
    found: dict[str, Any] = next(s for s in check["scenarios"] if s["name"] == name)
    return found


def _base(setting: Setting, now: str) -> dict[str, Any]:
    return {
        "framework": setting.framework,
        "package": setting.package,
        "version": installed_version(setting.package) or setting.examined,
        "setting": setting.setting,
        "default": setting.default,
        "torch": installed_version("torch"),
        "recorded_at": now,
    }


def _command(setting: Setting) -> str:
    trainer = shown(EXAMPLES_DIR / f"{setting.adapter}.py")
    accum = "" if setting.accum == ACCUM else f" --accum {setting.accum}"
    return f"pclab check {trainer}{accum} --json"


def _coupled(setting: Setting, found: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    """A coupled record's own fields, from its uneven_microsteps scenario (`found`): its K, the
    items per microbatch, each scenario's scheme, the least-squares factor of the objective
    named (scaled, other: the global batch's), the factor of each parameter group (scaled;
    else []), the named explanation's residual, the check's diagnosis codes."""
    fit = found["fits"].get(found["scheme"] or "", {})
    return {
        "mode": "coupled",
        "accum": setting.accum,
        "sizes": found["sizes"],
        "schemes": {s["name"]: s["scheme"] for s in check["scenarios"]},
        "factor": fit.get("factor", found["scale"]),
        "scale_groups": found["scale_groups"],
        "residual": found["residual"],
        "diagnoses": sorted({d["code"] for d in check["diagnoses"]}),
    }


def measured(setting: Setting, check: dict[str, Any], now: str) -> dict[str, Any]:
    """The record of one real run: the uneven scenario's scheme, weights and difference (a
    coupled check: uneven_microsteps' scheme and difference, its factors and residual instead
    of weights, `_coupled`)."""
    uneven = _uneven(check)
    coupled = check.get("mode") == "coupled"
    found = _base(setting, now) | {
        "scheme": uneven["scheme"],
        "weights": None if coupled else uneven["weights"],  # a coupled loss has none per label
        "counts": None if coupled else uneven["counts"],
        "passed": check["passed"],
        "status": check["status"],  # the check's own verdict: same_update, different, no_evidence
        "max_abs_diff": uneven["max_abs_diff"],
        "tolerance": uneven["tolerance"],  # the one its verdict used (measured below float64)
        "dtype": check["dtype"],
        "scenarios": {s["name"]: s["passed"] for s in check["scenarios"]},
        "command": _command(setting),
        "reason": None,
    }
    return (found | _coupled(setting, uneven, check)) if coupled else found


def not_run(setting: Setting, reason: str, now: str) -> dict[str, Any]:
    """The record of a setting that cannot run here: why, and nothing measured."""
    measures = ("scheme", "weights", "counts", "passed", "status", "max_abs_diff", "dtype")
    empty = dict.fromkeys(measures)
    return _base(setting, now) | empty | {"tolerance": None, "command": None, "reason": reason}


def check_adapters(
    settings: list[Setting], runtime: Runtime | None = None
) -> dict[str, dict[str, Any]]:
    """One launch for these adapters (as `pclab check A.py B.py` would): adapter -> check.
    `runtime`: the run queue and pool to launch through (default: a cold one of its own)."""
    from pclab.experiments.trainer_check import EXPERIMENT
    from pclab.experiments.trainer_check.params import Params

    files = [str(EXAMPLES_DIR / f"{s.adapter}.py") for s in settings]
    accums = {s.accum for s in settings} or {ACCUM}
    if len(accums) != 1:
        raise ValueError(f"accum={sorted(accums)}: one launch checks its adapters at one K")
    (accum,) = accums
    params = Params.checked(files, world_size=WORLD_SIZE, accum=accum)
    result = EXPERIMENT.run(params, runtime=runtime)
    if not result.ok:
        raise RuntimeError(f"{', '.join(files)}: the check did not finish: {result.message}")
    report: dict[str, Any] = result.report
    return {str(s.adapter): check for s, check in zip(settings, report["checks"], strict=True)}


def load(path: Path = RECORDED) -> dict[str, Any]:
    """{"about", "records": [...]} as recorded, or no records when there is no file."""
    if not path.is_file():
        return {"records": []}
    recorded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return recorded


def record(only: set[str] | None = None, path: Path = RECORDED) -> dict[str, Any]:
    """Run every installed adapter (of the packages in `only`, when given), one launch per
    package and K, and rewrite the table; other settings keep their last record."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    before = {(r["framework"], r["setting"]): r for r in load(path)["records"]}
    chosen = [s for s in SETTINGS if only is None or s.package in only]
    runnable = [s for s in chosen if s.adapter and installed_version(s.package)]
    checks: dict[str, dict[str, Any]] = {}
    for package, accum in dict.fromkeys((s.package, s.accum) for s in runnable):
        checks |= check_adapters([s for s in runnable if (s.package, s.accum) == (package, accum)])
    records = []
    for s in SETTINGS:
        kept = before.get((s.framework, s.setting))
        if s.adapter in checks:
            records.append(measured(s, checks[s.adapter], now))
        elif s in chosen and s.reason:
            records.append(not_run(s, s.reason, now))
        elif kept is not None:
            records.append(kept)
        else:
            records.append(not_run(s, s.reason or f"{s.package} is not installed here", now))
    payload = {
        "about": "The trainer check on each framework setting (P = 2, K = 2 unless a record's "
        "accum says otherwise), the uneven scenario's scheme and weight x N (a coupled "
        "record, mode coupled: uneven_microsteps' scheme, its factor, one per parameter group "
        "where they differ, its residual, and each scenario's scheme), recorded by "
        "`python -m pclab.experiments.trainer_check.frameworks`.",
        "records": records,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return payload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pclab.experiments.trainer_check.frameworks")
    parser.add_argument("--only", action="append", metavar="PACKAGE", help="e.g. lightning")
    args = parser.parse_args(argv)
    payload = record(set(args.only) if args.only else None)
    for r in payload["records"]:
        found = r["scheme"] if r["reason"] is None else "not run: " + r["reason"][:60]
        print(f"{r['framework']} {r['version']}, {r['setting'][:50]}: {found}")
    print(f"wrote {shown(RECORDED)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
