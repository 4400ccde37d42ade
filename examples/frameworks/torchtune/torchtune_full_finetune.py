"""torchtune's `recipes/full_finetune_distributed.py`, checked as it ships: its
`FullFinetuneRecipeDistributed` sets up (FSDP2 over the ranks, its optimizer, its
`CEWithChunkedOutputLoss`) and its own `train()` makes one optimizer update over this rank's K
microbatches. torchtune's default setting: labels counted as `text_completion_dataset` builds
them, a copy of the tokens, so a label may sit at position 0 of a sequence (FIRST_POSITION_
LABELLED, the check's default); torchtune_full_finetune_masked.py masks position 0.

    pclab check examples/frameworks/torchtune/torchtune_full_finetune.py --json   # its environment
    python -m bench.framework_env torchtune          # builds it, records the rows

torchtune 0.6.1 needs torchao, and only torchao 0.13.0 to 0.15.0 import beside torch 2.13.0
(README, "Install facts"), hence an environment of its own.

What the recipe does per microbatch (full_finetune_distributed.py, train()): it counts
`labels != ignore_index` before the shift (current_num_tokens), multiplies the chunked loss,
the mean over the shifted labels, by that count, sums the counts over the update and the
ranks, and scales the gradients by world_size / that sum (`training.scale_grads`). The model
is torchtune's own `llama3` component builder at a tiny size (one layer, 8 wide, 11 tokens; no
download), float32 (its loss takes its cross-entropy in float32: `DTYPE = "float32"`). Set or
replaced here, each because the recipe cannot take one checkable step otherwise:
- `init_process_group` is the check's: the recipe would initialise the default group a second
  time (its module's name is patched to a no-op for the call; the group is Gloo either way),
  and `training.get_memory_stats` / `log_memory_stats`, which `_setup_model` calls on rank 0
  whatever the device and which raise on a CPU ("Logging memory stats is not supported on
  CPU devices"), return nothing, and `training.cleanup_before_training` runs only its
  gc.collect() (`torch.cpu` has no `empty_cache`);
- `_setup_data` serves the rank's own microbatches in order (torchtune's `padded_collate_sft`,
  its `StatefulDistributedSampler` over this rank alone, no shuffle), not split a second time;
  the tokenizer it would tokenize text with is therefore unused (`cfg.tokenizer` is a dict);
- the optimizer is the recipe's, built from `cfg.optimizer` with the class and learning rate
  of the one the check hands in; the updated parameters are copied back from the recipe's
  sharded model (`DTensor.full_tensor()`), and the check compares the parameters;
- the checkpoint it loads is the check's model, saved by this file for torchtune's own
  `FullModelTorchTuneCheckpointer`.

torchtune is imported inside the functions: only the ranks pay for it.
"""

import contextlib
import gc
import io
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import IGNORE, StepCounter, record  # noqa: E402
from torch.nn import functional as F  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE"]
__all__ += ["build_model", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record
VOCAB_SIZE = 11
SEQ_LEN = 8  # positions per sequence (the model's max_seq_len)
BATCH_SIZE = 2  # sequences per microbatch: the recipe's batch_size
DTYPE = "float32"  # the recipe's dtype "fp32"; its loss is float32 whatever the model's
RECIPE = "full_finetune_distributed"  # recipes/<RECIPE>.py in torchtune's wheel
MODEL = {
    "_component_": "torchtune.models.llama3.llama3",
    "vocab_size": VOCAB_SIZE,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 2,
    "embed_dim": 8,
    "intermediate_dim": 16,
    "max_seq_len": SEQ_LEN,
}


def build_model() -> torch.nn.Module:
    """torchtune's llama3 at MODEL's tiny size: fixed seed, float32, CPU."""
    from omegaconf import OmegaConf
    from torchtune import config

    torch.manual_seed(0)
    model = config.instantiate(OmegaConf.create(MODEL))
    with torch.no_grad():  # its init leaves the output head near zero: spread the weights
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model.float()


def token_losses(model, microbatch) -> torch.Tensor:
    """The recipe's terms: position t predicts the label at t + 1, -100 skipped, the
    cross-entropy on float32 logits (CEWithChunkedOutputLoss)."""
    logits = model(microbatch["input_ids"])
    labels = microbatch["labels"][:, 1:]
    counted = labels != IGNORE
    return F.cross_entropy(logits[:, :-1].float()[counted], labels[counted], reduction="none")


def recipe_config(folder: Path, optimizer, accum_steps: int):
    """The recipe's config (as its YAML would give it), for one update of K microbatches."""
    from omegaconf import OmegaConf

    cls = type(optimizer)
    return OmegaConf.create(
        {
            "device": "cpu",
            "dtype": "fp32",
            "seed": 0,
            "output_dir": str(folder / "out"),
            "resume_from_checkpoint": False,
            "epochs": 1,
            "max_steps_per_epoch": 1,
            "gradient_accumulation_steps": accum_steps,
            "batch_size": BATCH_SIZE,
            "shuffle": False,
            "clip_grad_norm": None,
            "compile": False,
            "enable_activation_checkpointing": False,
            "model": MODEL,
            "tokenizer": {"_component_": "builtins.dict"},  # unused: the data are token ids
            "dataset": {},
            "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
            "optimizer": {
                "_component_": f"{cls.__module__}.{cls.__qualname__}",
                "lr": optimizer.param_groups[0]["lr"],
            },
            "checkpointer": {
                "_component_": "torchtune.training.FullModelTorchTuneCheckpointer",
                "checkpoint_dir": str(folder / "base"),
                "checkpoint_files": ["model.pt"],
                "model_type": "LLAMA3",
                "output_dir": str(folder / "out"),
            },
            "metric_logger": {
                "_component_": "torchtune.training.metric_logging.DiskLogger",
                "log_dir": str(folder / "logs"),
            },
        }
    )


def recipe_module():
    """recipes/full_finetune_distributed.py, loaded from its file as `tune run` runs it (the
    `recipes` folder refuses to be imported as a package), once per process."""
    import importlib.util
    import sys

    if RECIPE not in sys.modules:
        folder = importlib.util.find_spec("recipes").submodule_search_locations[0]  # no import
        spec = importlib.util.spec_from_file_location(RECIPE, Path(folder) / f"{RECIPE}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[RECIPE] = module
    return sys.modules[RECIPE]


def sft_rows(microbatches) -> list[dict]:
    """One SFT sample per sequence, as torchtune's datasets yield them (tokens, labels)."""
    return [
        {"tokens": mb["input_ids"][i].tolist(), "labels": mb["labels"][i].tolist()}
        for mb in microbatches
        for i in range(len(mb["labels"]))
    ]


def in_order_loader(rows, batch_size: int, sampler_class=None):
    """The recipe's own kind of loader over `rows`, in order, on this rank alone: torchtune's
    `StatefulDistributedSampler` (or a subclass of it) and `padded_collate_sft`."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler
    from torchtune.data import padded_collate_sft

    sampler = (sampler_class or StatefulDistributedSampler)(
        rows, num_replicas=1, rank=0, shuffle=False
    )
    collate = partial(padded_collate_sft, padding_idx=0, ignore_idx=IGNORE)
    return StatefulDataLoader(
        rows, batch_size=batch_size, sampler=sampler, collate_fn=collate, drop_last=True
    )


def recipe_class(microbatches):
    """The shipped recipe with `_setup_data` serving these microbatches' rows, in order."""
    rows = sft_rows(microbatches)

    class OwnMicrobatches(recipe_module().FullFinetuneRecipeDistributed):
        def _setup_data(self, cfg_dataset, shuffle, batch_size, collate_fn, **_):
            return in_order_loader(rows, batch_size)

    return OwnMicrobatches


@contextlib.contextmanager
def on_the_checks_cpu_group():
    """While the recipe runs: its module's `init_process_group` a no-op (the check's Gloo group
    exists); torchtune's memory statistics, which `_setup_model` reads on rank 0 whatever the
    device and which raise on a CPU, empty and unlogged; `cleanup_before_training` only its
    gc.collect() (its device-cache calls have no CPU form)."""
    from torchtune import training

    patches = (
        (recipe_module(), "init_process_group", lambda *args, **kwargs: None),
        (training, "get_memory_stats", lambda *args, **kwargs: {}),
        (training, "log_memory_stats", lambda *args, **kwargs: None),
        (training, "cleanup_before_training", gc.collect),
    )
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, real in saved:
            setattr(owner, name, real)


def train_step(model, optimizer, microbatches, adapter=ADAPTER):
    """One update by torchtune's full_finetune_distributed recipe over this rank's K."""
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    with tempfile.TemporaryDirectory(prefix="pcl-torchtune-") as tmp:
        folder = Path(tmp)
        (folder / "base").mkdir()
        torch.save(model.state_dict(), folder / "base" / "model.pt")
        cfg = recipe_config(folder, optimizer, len(microbatches))
        with on_the_checks_cpu_group(), contextlib.redirect_stderr(io.StringIO()):
            recipe = recipe_class(microbatches)(cfg)
            recipe.setup(cfg)
            counter = StepCounter(recipe._optimizer)
            recipe.train()
        sharded = recipe._model.state_dict()
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                parameter.copy_(sharded[name].full_tensor())
    record(
        adapter,
        global_step=recipe.global_step,
        optimizer_steps=counter.close(),
        optimizer_class=type(recipe._optimizer).__name__,
        optimizer_is_the_one_passed=recipe._optimizer is optimizer,
        parameter_type=type(next(iter(sharded.values()))).__name__,  # DTensor: FSDP2
        gradient_accumulation_steps=recipe._gradient_accumulation_steps,
    )
