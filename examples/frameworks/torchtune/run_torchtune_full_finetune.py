"""torchtune's `recipes/full_finetune_distributed.py` over a run, as it ships: the recipe's own
`train()` over `epochs = len(epochs)` (no `max_steps_per_epoch`), its own windows
(`(idx + 1) % gradient_accumulation_steps` within each epoch), its own normalisation (each
microbatch's loss x its label count, the gradients scaled by P / the window's global count at
the step) and its own cosine schedule (`get_cosine_schedule_with_warmup`, no warm-up), built
over the number of updates the recipe computes. torchtune cuts the windows; no recipe method
of the loop is replaced.

    pclab check examples/frameworks/torchtune/run_torchtune_full_finetune.py --json  # its env
    python -m bench.framework_env torchtune               # builds it, records torchtune's rows

Measured (torchtune 0.6.1, torchao 0.15.0, torch 2.13.0, P = 2, K = 2, two epochs of 5
microbatches a rank): see tests/runners/test_torchtune.py, which pins it. What train() does,
in site-packages/recipes/full_finetune_distributed.py (0.6.1):

- The windows restart each epoch: `idx` is the epoch's own batch index (:764) and the step is
  taken at `(idx + 1) % K == 0` (:821), so an epoch's tail takes no step of its own. Nothing
  zeroes its gradient or its label count (`num_tokens` is set to 0 only after a step, :885):
  the tail is carried into the next epoch's first window, which steps after K more
  microbatches with the tail's gradient and tokens in it, and the run's last tail is left in
  `.grad`, never stepped.
- The normalisation: `current_loss = loss_fn(...) x current_num_tokens` (:802), the counts
  summed over the window and all-reduced at the step (:824), the gradients scaled by
  world_size / that sum (:829): the global token mean of what the window holds, the carried
  tail's tokens included.
- The schedule's length: `_steps_per_epoch = len(dataloader) // K` (:370-372), and the
  scheduler is built for `total_epochs x _steps_per_epoch` (:381-384): floored, the tails not
  counted; it is stepped once per optimizer step (:845-846).
- A checkpoint is saved at every epoch's end (:911-926) with `epochs_run` and the dataloader's
  state: its resume path restarts at an epoch boundary.

Set or replaced here, as torchtune_full_finetune.py does and for the same reasons (the check's
Gloo group, torchtune's CPU memory statistics, its optimizer built with the class and rate of
the one handed in); and two things so that the check watches the recipe's own training:
- the model the recipe builds is the check's: while `_setup_model` runs, instantiating
  `cfg.model` returns it, so the recipe shards it in place with its own FSDP2 setup and loads
  the checkpoint it saved (the same weights) into it; `full_parameters` gathers its DTensors;
- `_setup_data` serves this rank's epochs, in order (EpochData), through torchtune's own
  `StatefulDistributedSampler`, whose `set_epoch` (the recipe's, :763) also picks the epoch.
FIRST_POSITION_LABELLED = False, as torchtune_full_finetune_masked.py: with a label at position
0 every window is also normalised by a count one label too large a sequence (the one-update
rows measure that), which this row leaves out to show the loop alone.

torchtune is imported inside the functions: only the ranks pay for it.
"""

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

import torch
from torchtune_full_finetune import (
    BATCH_SIZE,
    DTYPE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    in_order_loader,
    on_the_checks_cpu_group,
    recipe_config,
    recipe_module,
    sft_rows,
    token_losses,
)

# framework_lm.py and framework_run.py (what most adapters share) are in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import StepCounter, record  # noqa: E402
from framework_run import EpochData  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "FIRST_POSITION_LABELLED", "SEQ_LEN", "VOCAB_SIZE"]
__all__ += ["build_model", "full_parameters", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
FIRST_POSITION_LABELLED = False
SCHEDULE = "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup"


def make_scheduler(optimizer, num_updates):
    """The intended schedule: torchtune's own cosine, no warm-up, over the run's true number
    of updates."""
    from torchtune.training.lr_schedulers import get_cosine_schedule_with_warmup

    return get_cosine_schedule_with_warmup(optimizer, 0, num_updates)


def full_parameters(model):
    """Every parameter whole: the recipe's FSDP2 shards gathered (a collective), others as
    they are."""
    from torch.distributed.tensor import DTensor

    return {
        name: p.full_tensor() if isinstance(p, DTensor) else p
        for name, p in model.named_parameters()
    }


def _recipe_class(model, data: EpochData):
    """The shipped recipe, training `model` and serving `data` by the recipe's own epoch."""
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler
    from torchtune import config

    class EpochSampler(StatefulDistributedSampler):
        def set_epoch(self, epoch: int) -> None:
            super().set_epoch(epoch)
            data.set_epoch(epoch)

    class ChecksModelAndEpochs(recipe_module().FullFinetuneRecipeDistributed):
        def _setup_model(self, cfg_model, *args, **kwargs):
            real = config.instantiate

            def instantiate(node, *more, **settings):
                return model if node is cfg_model else real(node, *more, **settings)

            config.instantiate = instantiate
            try:
                return super()._setup_model(cfg_model, *args, **kwargs)
            finally:
                config.instantiate = real

        def _setup_data(self, cfg_dataset, shuffle, batch_size, collate_fn, **_):
            return in_order_loader(data, batch_size, EpochSampler)

    return ChecksModelAndEpochs


LATEST_MODEL = "model-00001-of-00001.bin"  # what FullModelTorchTuneCheckpointer saves an epoch


@contextlib.contextmanager
def work_folder(checkpoint_dir=None):
    """Where this rank's recipe reads its base weights and writes its output: `checkpoint_dir`
    (a resumable run's, shared by the ranks and kept), else a temporary folder of its own."""
    if checkpoint_dir is not None:
        yield Path(checkpoint_dir)
        return
    with tempfile.TemporaryDirectory(prefix="pcl-torchtune-") as tmp:
        yield Path(tmp)


def last_saved_epoch(output_dir: Path) -> int | None:
    """The largest epoch whose checkpoint the recipe finished (its recipe state written
    after the model's), None before the first epoch's end."""
    if not (output_dir / "recipe_state" / "recipe_state.pt").exists():
        return None
    done = [
        int(p.parent.name.removeprefix("epoch_"))
        for p in output_dir.glob(f"epoch_*/{LATEST_MODEL}")
    ]
    return max(done, default=None)


def tune_run(model, optimizer, epochs, accum_steps, adapter, checkpoint_dir=None, **settings):
    """The recipe's train() over len(epochs) epochs of this rank's microbatches, its optimizer
    built with `settings` besides the rate. With a `checkpoint_dir`: the recipe's own epoch-end
    checkpoints are written there, and a launch that finds one resumes from it as torchtune's
    docs say to (`resume_from_checkpoint: True`, `checkpoint_files` the latest epoch's)."""
    import torch.distributed as dist
    from omegaconf import OmegaConf

    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    data = EpochData([sft_rows(epoch) for epoch in epochs])
    with work_folder(checkpoint_dir) as folder:
        if dist.get_rank() == 0 or checkpoint_dir is None:  # a shared folder: written once
            (folder / "base").mkdir(exist_ok=True)
            torch.save(model.state_dict(), folder / "base" / "model.pt")
        dist.barrier()
        cfg = recipe_config(folder, optimizer, accum_steps)
        cfg.optimizer.update(settings)
        cfg.epochs, cfg.max_steps_per_epoch = len(epochs), None
        cfg.lr_scheduler = OmegaConf.create({"_component_": SCHEDULE, "num_warmup_steps": 0})
        resumed_after = last_saved_epoch(folder / "out") if checkpoint_dir is not None else None
        if resumed_after is not None:
            cfg.resume_from_checkpoint = True
            cfg.checkpointer.checkpoint_files = [f"epoch_{resumed_after}/{LATEST_MODEL}"]
        with on_the_checks_cpu_group(), contextlib.redirect_stderr(io.StringIO()):
            recipe = _recipe_class(model, data)(cfg)
            recipe.setup(cfg)
            counter = StepCounter(recipe._optimizer)
            recipe.train()
    record(
        adapter,
        model_is_the_checks=recipe._model is model,
        global_step=recipe.global_step,
        steps_per_epoch=recipe._steps_per_epoch,  # what the schedule was built from
        scheduler_steps=recipe._lr_scheduler.last_epoch,
        epochs_set=data.epochs_set,  # by the recipe, each epoch
        optimizer_steps=counter.close(),
        parameter_type=type(next(model.parameters())).__name__,  # DTensor: FSDP2
        resumed_after_epoch=resumed_after,
    )


def train_loop(model, optimizer, epochs, accum_steps):
    """The recipe's train() over len(epochs) epochs of this rank's microbatches."""
    tune_run(model, optimizer, epochs, accum_steps, ADAPTER)
