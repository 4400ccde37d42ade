"""The real Hugging Face `transformers.Trainer`, checked as it ships: one optimizer update over
this rank's K microbatches, with `average_tokens_across_devices=True` (the default).

    pclab check examples/frameworks/hf_trainer/hf_trainer.py --json

The model is a tiny Llama causal LM built from a config (no download): random weights from a
fixed seed, float64, CPU. `train_step` hands the lab's optimizer to a real `Trainer` with a
constant schedule and lets Trainer do the rest its own way: it counts the labels of the
accumulated microbatches (`num_items_in_batch`), passes that count to the model's loss, scales
and back-propagates each microstep, lets DDP average the gradients on the last one, and steps.

The only Trainer method replaced is `get_train_dataloader`: the lab has already given each rank
its own K microbatches, so they are served in order, one per microstep, instead of being
shuffled and split across the processes a second time.

transformers is imported inside the functions: the command imports this file in its own
process to check the contract, and that costs nothing; only the ranks pay for the import.
"""

import gc
import os
import tempfile

import torch
from torch.nn import functional as F

VOCAB_SIZE = 11
SEQ_LEN = 8  # positions per sequence
BATCH_SIZE = 2  # sequences per microbatch: Trainer's per_device_train_batch_size
IGNORE = -100  # a label that does not count (Trainer's convention)
AVERAGE_TOKENS_ACROSS_DEVICES = True  # the setting under test (hf_trainer_local_average: False)
RECORD_ENV = "PCL_HF_TRAINER_RECORD"  # a file: one JSON line per train_step (for the tests)
_QUIET: list[bool] = []  # set once this process has been made quiet


def build_model() -> torch.nn.Module:
    """A one-layer Llama causal LM from a config: no download, fixed seed, float64, CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=SEQ_LEN,
        initializer_range=0.5,  # large enough that each microbatch's gradient differs
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.float64)


def token_losses(model, microbatch) -> torch.Tensor:
    """The terms of the model's own causal-LM loss (transformers' ForCausalLMLoss): position t
    predicts the label at t + 1, so a label at position 0 is never a term; -100 is skipped.
    Like that loss, the cross-entropy is taken on `logits.float()` (float32)."""
    logits = model(input_ids=microbatch["input_ids"]).logits
    labels = microbatch["labels"][:, 1:]
    counted = labels != IGNORE
    return F.cross_entropy(logits[:, :-1].float()[counted], labels[counted], reduction="none")


def _quiet_and_fast() -> None:
    """Once per rank process: no logs, no progress bars, this process's own thread count (else
    accelerate resets it and warns), and the import's many objects moved out of the garbage
    collector's way (accelerate runs gc.collect() at the start of every train())."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    gc.freeze()


# The TrainingArguments every adapter of a Trainer (or a subclass: TRL's SFTTrainer) sets to
# make one quiet update on the CPU's Gloo group: nothing logged, saved or printed.
ONE_QUIET_STEP_ON_CPU = {
    "use_cpu": True,
    "ddp_backend": "gloo",
    "report_to": "none",
    "save_strategy": "no",
    "logging_strategy": "no",
    "disable_tqdm": True,
    "log_level": "error",
    "log_level_replica": "error",
    "dataloader_pin_memory": False,
}


class InOrder:
    """Mixed into a Trainer (or a subclass such as TRL's SFTTrainer) before it: the trainer's
    own loop, fed this rank's rows in order, one microbatch per microstep, collated by the
    trainer's own data collator, instead of shuffled and split across the processes a second
    time. It notes, per microstep, the label count Trainer handed the loss and whether DDP
    all-reduced the gradients (False inside Trainer's no_sync), then runs Trainer's own step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.counted: list[int | None] = []  # num_items_in_batch, per microstep
        self.synced: list[bool] = []  # DDP's require_backward_grad_sync, per microstep

    def get_train_dataloader(self):
        return torch.utils.data.DataLoader(
            self.train_dataset,
            batch_size=self._train_batch_size,
            shuffle=False,
            collate_fn=self.data_collator,
        )

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.counted.append(None if num_items_in_batch is None else int(num_items_in_batch))
        self.synced.append(bool(getattr(model, "require_backward_grad_sync", True)))
        return super().training_step(model, inputs, num_items_in_batch)


def train_step(model, optimizer, microbatches, average_tokens=AVERAGE_TOKENS_ACROSS_DEVICES):
    """One optimizer update by transformers.Trainer over this rank's K microbatches."""
    _record(run_trainer(model, optimizer, microbatches, average_tokens=average_tokens))


def run_trainer(model, optimizer, microbatches, trainer_class=None, **settings):
    """Train a real Trainer (or `trainer_class`, a subclass that only observes) for one update
    over the microbatches, the lab's optimizer handed in; `settings` override the
    TrainingArguments below (average_tokens=: average_tokens_across_devices). The Trainer."""
    from transformers import PrinterCallback, Trainer, TrainingArguments, default_data_collator
    from transformers.optimization import get_constant_schedule

    if not _QUIET:
        _quiet_and_fast()
        _QUIET.append(True)

    class OneRankTrainer(InOrder, trainer_class or Trainer):
        pass

    rows = [
        {k: t[i] for k, t in mb.items()} for mb in microbatches for i in range(len(mb["labels"]))
    ]
    with tempfile.TemporaryDirectory(prefix="pcl-hf-trainer-") as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=BATCH_SIZE,
            gradient_accumulation_steps=len(microbatches),
            max_steps=1,
            average_tokens_across_devices=settings.pop(
                "average_tokens", AVERAGE_TOKENS_ACROSS_DEVICES
            ),
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=0.0,  # no clipping
            ddp_find_unused_parameters=False,  # every parameter takes part in every forward
            eval_strategy="no",
            dataloader_num_workers=0,
            seed=0,
            **ONE_QUIET_STEP_ON_CPU,
            **settings,
        )
        trainer = OneRankTrainer(
            model=model,
            args=args,
            train_dataset=rows,
            data_collator=default_data_collator,
            optimizers=(optimizer, get_constant_schedule(optimizer)),
        )
        trainer.remove_callback(PrinterCallback)  # it prints the metrics of every train()
        trainer.train()
    return trainer


def _record(trainer) -> None:
    """Evidence that the update went through Trainer's own loop, for the tests: its step count,
    its scheduler's (one each) and the label count Trainer handed each microstep's loss,
    appended as a JSON line to $PCL_HF_TRAINER_RECORD when that is set."""
    path = os.environ.get(RECORD_ENV)
    if path:
        import json

        line = {
            "rank": trainer.args.process_index,
            "world_size": trainer.args.world_size,
            "global_step": trainer.state.global_step,
            "scheduler_steps": trainer.lr_scheduler.last_epoch,
            "average_tokens_across_devices": trainer.args.average_tokens_across_devices,
            "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
            "distributed_type": trainer.accelerator.distributed_type.name,  # MULTI_CPU: Gloo
            "wrapped_in": type(trainer.model_wrapped).__name__,  # DistributedDataParallel
            "num_items_in_batch": trainer.counted,  # per microstep, as Trainer passed it on
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
