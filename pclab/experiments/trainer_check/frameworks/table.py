"""The framework table: one `Setting` per framework setting, in the page's and the README's
order, each keyed by its stable code (trainer_check/README.md, "add a framework row", says
what else a row takes): the language-model frameworks here, then the contrastive ones
(table_contrastive.py).

    python -c "from pclab.experiments.trainer_check.frameworks import table; print(table.CODES)"
"""

from __future__ import annotations

from pclab.experiments.trainer_check.frameworks.setting import Setting
from pclab.experiments.trainer_check.frameworks.table_contrastive import CONTRASTIVE
from pclab.experiments.trainer_check.frameworks.table_contrastive import OPENCLIP as OPENCLIP
from pclab.experiments.trainer_check.frameworks.table_contrastive import SBERT as SBERT

HF, CLM = "transformers Trainer", "transformers run_clm_no_trainer.py"
TRL, FSDP2, LIGHTNING = "TRL SFTTrainer", "torch FSDP2", "PyTorch Lightning"
TRL_DEFAULTS = (  # float32: TRL's fused LM head computes its log-softmax in float32 anyway
    "defaults (text data, labels from the inputs), bf16=False: a float32 model, no autocast"
)

LANGUAGE_MODELS = (
    Setting(
        "accelerate_accumulate",
        "Accelerate",
        "accelerate",
        "accelerator.accumulate(model), the model's mean loss",
        True,
    ),
    Setting(
        "accelerate_guide",
        "Accelerate",
        "accelerate",
        "its gradient-accumulation guide, as its text says: labels[..., 1:] counted, "
        "gathered (N), summed loss x K x P / N",
        False,
    ),
    Setting(
        "accelerate_guide_as_written",
        "Accelerate",
        "accelerate",
        "its gradient-accumulation guide's code as written: every label counted",
        False,
    ),
    Setting(
        "lightning_accumulate",
        LIGHTNING,
        "lightning",
        'accumulate_grad_batches=K, strategy="ddp", training_step returns the model\'s mean loss',
        True,
    ),
    Setting(
        "lightning_global_tokens",
        LIGHTNING,
        "lightning",
        "the window's label count summed over ranks (N), training_step returns the summed "
        "loss x K x P / N",
        False,
    ),
    Setting("hf_trainer", HF, "transformers", "average_tokens_across_devices=True", True),
    Setting(
        "hf_trainer_local_average", HF, "transformers", "average_tokens_across_devices=False", False
    ),
    Setting("trl_sft", TRL, "trl", TRL_DEFAULTS, True),
    Setting("trl_sft_padding_free", TRL, "trl", "padding_free=True", False),
    Setting(
        "trl_sft_packing",
        TRL,
        "trl",
        "packing=True (best-fit decreasing): a microbatch is one packed row's documents",
        False,
    ),
    Setting(
        "trl_sft_completion_only",
        TRL,
        "trl",
        "completion_only_loss=True, prompt-completion data",
        False,
    ),
    Setting(
        "deepspeed_engine",
        "DeepSpeed",
        "deepspeed",
        "engine, gradient_accumulation_steps=K, the model's mean loss, float32",
        True,
    ),
    Setting(
        "deepspeed_engine_zero2_adamw",
        "DeepSpeed",
        "deepspeed",
        "the same engine with ZeRO-2 on the AdamW passed in (zero_allow_untested_optimizer)",
        False,
    ),
    Setting(
        "hf_trainer_deepspeed_zero2",
        "transformers Trainer + DeepSpeed",
        "deepspeed",
        "ZeRO-2, the optimizer the user passes in, float32",
        False,
        also=("transformers",),
    ),
    Setting(
        "fsdp2_global_tokens",
        FSDP2,
        "torch",
        "fully_shard on CPU Gloo, summed loss ÷ the global token count (N) × P",
        False,
    ),
    Setting(
        "fsdp2_local_mean",
        FSDP2,
        "torch",
        "fully_shard on CPU Gloo, summed loss ÷ the rank's own token count",
        False,
    ),
    Setting(
        "litgpt_finetune",  # its own environment: `python -m bench.framework_env litgpt`
        "litgpt",
        "litgpt",
        "finetune/full.py fit(), its Fabric loop: each microbatch's mean loss / "
        "gradient_accumulation_iters (DDP: Fabric refuses its FSDP setup on a CPU)",
        True,
    ),
    Setting(
        "torchtune_full_finetune",  # its own environment (bench.framework_env torchtune)
        "torchtune",
        "torchtune",
        "recipes/full_finetune_distributed.py, labels as text_completion_dataset builds them "
        "(position 0 counted), FSDP2, float32",
        True,
    ),
    Setting(
        "torchtune_full_finetune_masked",
        "torchtune",
        "torchtune",
        "recipes/full_finetune_distributed.py, the label at position 0 masked (-100)",
        False,
    ),
    Setting(
        "olmo_core_train_module",  # its own environment (bench.framework_env ai2-olmo-core)
        "OLMo-core",
        "ai2-olmo-core",
        "TransformerTrainModule, FSDP: each rank's summed loss / its own label count "
        "(loss_div_factor), float32",
        True,
    ),
    Setting(
        "olmo_core_ddp_train_module",
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
    Setting(
        "clm_no_trainer_as_shipped",  # transformers' example script; the next row's
        CLM,  # accumulation is Accelerate's, so is its package
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
        "clm_no_trainer_padded",
        CLM,
        "accelerate",
        "its loop (accelerator.accumulate + outputs.loss) on right-padded, masked data",
        False,
        also=("transformers",),
    ),
    Setting(
        "composer",
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
        "megatron_core",
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
SETTINGS = (*LANGUAGE_MODELS, *CONTRASTIVE)


CODES = tuple(s.code for s in SETTINGS)
ADAPTERS = tuple(s.adapter for s in SETTINGS if s.adapter)  # their file stems
BY_CODE = {s.code: s for s in SETTINGS}
