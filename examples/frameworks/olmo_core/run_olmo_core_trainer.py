"""OLMo-core's own `Trainer.fit()` over a run: TrainerConfig(max_duration=Duration.epochs(E))
trains olmo_core_train_module.py's TransformerTrainModule (FSDP, float32) on batches from
OLMo-core's own `NumpyFSLDataLoader` over `NumpyFSLDataset`s: the check's tokens and label
masks written as .npy arrays, as OLMo-core's data are. OLMo-core cuts the windows: the loader
makes each global batch (K microbatches a rank), the train module splits a rank's batch into
its micro-batches and steps once per batch.

    pclab check examples/frameworks/olmo_core/run_olmo_core_trainer.py --json   # its environment
    python -m bench.framework_env ai2-olmo-core      # builds it, records its rows

One thing is set here so that the check's epochs reach the loop: OLMo-core serves the same
dataset every epoch (reshuffled), the check hands each epoch its own microbatches, so each
epoch's arrays are a NumpyFSLDataset of their own and the loader's `reshuffle(epoch)` (which
the Trainer calls at each epoch's start) picks that epoch's before it builds its indices.
Nothing of the window, the normalisation, the schedule or the step is replaced.

Measured (ai2-olmo-core 3.0.0, torch 2.13.0, float32, P = 2, K = 2, two epochs of 5
microbatches a rank; tests/runners/test_olmo_core.py pins it): the loader serves only full
global batches (data_loader.py:642-648, :724), so each epoch's tail is never read
(`tail_window_dropped`, 2, 2 steps for 3, 3); each window is each rank's own mean
(`replica_mean`); the cosine runs over max_steps = 4 full batches, read from step 1
(`schedule_length`, 4 for 6); a window with no labels stops the Trainer on its NaN loss
(`trainer_error`: "nan loss encountered at step 2"; allenai/OLMo-core#657).

ai2-olmo-core is imported inside the functions: only the ranks pay for it.
"""

import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

# framework_lm.py (the evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import IGNORE, StepCounter, record  # noqa: E402
from olmo_core_train_module import (
    BATCH_SIZE,
    DTYPE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    full_parameters,
    sgd_config,
    token_losses,
)

__all__ = [
    "BATCH_SIZE",
    "DTYPE",
    "FIRST_POSITION_LABELLED",
    "GLOBAL_BATCH",
    "SEQ_LEN",
    "VOCAB_SIZE",
    "build_model",
]
__all__ += ["full_parameters", "make_microbatch", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
GLOBAL_BATCH = True  # OLMo-core's loader hands each rank its share of every global batch
FIRST_POSITION_LABELLED = False  # no position predicts position 0: at most SEQ_LEN - 1 terms
PAD, EOS = 0, 0  # OLMo-core's dataset needs both ids; no row is padded


def cosine():
    """OLMo-core's own cosine schedule, no warm-up (its default floor: alpha_f = 0.1)."""
    from olmo_core.optim.scheduler import CosWithWarmup

    return CosWithWarmup(warmup=0)


def make_scheduler(optimizer, num_updates):
    """The intended schedule: OLMo-core's cosine over the run's true number of updates, read
    as OLMo-core reads it: its step count starts at 1 (the Trainer counts a batch's step
    before the module's optim_step sets the rate, trainer.py `_fit_epoch`), so update s gets
    get_lr(s + 1): the last update the floor, the peak never."""
    schedule = cosine()
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: schedule.get_lr(1.0, s + 1, num_updates)
    )


def make_microbatch(n_terms, generator):
    """BATCH_SIZE rows of SEQ_LEN tokens, as OLMo-core's data are: the labels are the tokens
    themselves (its `get_labels` shifts input_ids), n_terms of them counted (its label_mask),
    never at position 0, which no position predicts."""
    input_ids = torch.randint(0, VOCAB_SIZE, (BATCH_SIZE, SEQ_LEN), generator=generator)
    counted = torch.randperm(BATCH_SIZE * (SEQ_LEN - 1), generator=generator)[:n_terms]
    mask = torch.zeros((BATCH_SIZE, SEQ_LEN - 1), dtype=torch.bool)
    mask.view(-1)[counted] = True
    mask = torch.cat([torch.zeros((BATCH_SIZE, 1), dtype=torch.bool), mask], dim=1)
    return {"input_ids": input_ids, "labels": torch.where(mask, input_ids, IGNORE)}


def global_order(ranks) -> list[dict]:
    """One epoch's rows ([rank][microbatch]) in the order of OLMo-core's instance indices: the
    loader cuts them into global batches of P x K x BATCH_SIZE rows and gives rank r the rows
    r, r + P, r + 2P, ... of each (data_loader.py `_get_local_instance_indices`), so row j of
    rank r's window b is instance b x (P K BATCH_SIZE) + r + P j. The epoch's tail window (its
    rows past the last full batch) is laid out the same way after them."""
    world, per_rank = len(ranks), [[row for mb in rank for row in _rows(mb)] for rank in ranks]
    order = []
    for j in range(len(per_rank[0])):
        order.extend(per_rank[r][j] for r in range(world))
    return order


def _rows(microbatch):
    return [
        (microbatch["input_ids"][i], microbatch["labels"][i] != IGNORE) for i in range(BATCH_SIZE)
    ]


def _dataset(folder: Path, epoch: int, rows):
    """One epoch's rows as OLMo-core's own data: a token array and its label mask array."""
    from olmo_core.data import NumpyFSLDataset

    # the same names every epoch: a checkpoint's loader state holds the dataset's fingerprint,
    # its files' names and sizes, which a restart in another epoch must find the same
    (folder / f"epoch{epoch}").mkdir(exist_ok=True)
    tokens, masks = folder / f"epoch{epoch}" / "tokens.npy", folder / f"epoch{epoch}" / "mask.npy"
    np.asarray(torch.stack([ids for ids, _ in rows]).numpy(), dtype=np.uint16).tofile(tokens)
    np.asarray(torch.stack([m for _, m in rows]).numpy(), dtype=np.bool_).tofile(masks)
    dataset = NumpyFSLDataset(
        tokens,
        sequence_length=SEQ_LEN,
        pad_token_id=PAD,
        eos_token_id=EOS,
        vocab_size=VOCAB_SIZE,
        label_mask_paths=[masks],
    )
    dataset.work_dir = folder
    return dataset


def _loader(datasets, accum_steps, folder):
    """OLMo-core's NumpyFSLDataLoader, in order, global batches of P x K microbatches; each
    epoch (the Trainer's reshuffle) served from that epoch's dataset."""
    import torch.distributed as dist
    from olmo_core.data import DataCollator, NumpyFSLDataLoader

    class EachEpochItsData(NumpyFSLDataLoader):
        def reshuffle(self, epoch=None, **kwargs):
            chosen = 1 if epoch is None and self._epoch is None else epoch or self._epoch + 1
            self.dataset = datasets[chosen - 1]
            epochs_set.append(chosen)
            super().reshuffle(epoch=chosen, **kwargs)

    epochs_set: list[int] = []
    world = dist.get_world_size()
    loader = EachEpochItsData(
        datasets[0],
        collator=DataCollator(pad_token_id=PAD),
        global_batch_size=world * accum_steps * BATCH_SIZE * SEQ_LEN,  # in tokens
        work_dir=folder,
        shuffle=False,
        dp_world_size=world,
        dp_rank=dist.get_rank(),
        fs_local_rank=dist.get_rank(),
    )
    return loader, epochs_set


def optim_config(optimizer):
    """The OLMo-core OptimConfig that builds the check's optimizer again (OLMo-core builds its
    own from a config): SGD at its rate (sgd_config), or torch's AdamW with every
    hyperparameter of the one handed in."""
    group = optimizer.param_groups[0]
    if isinstance(optimizer, torch.optim.AdamW):
        from olmo_core.optim import AdamWConfig

        betas, eps, decay = tuple(group["betas"]), group["eps"], group["weight_decay"]
        return AdamWConfig(lr=group["lr"], betas=betas, eps=eps, weight_decay=decay)
    if isinstance(optimizer, torch.optim.SGD):
        return sgd_config(group["lr"])
    raise ValueError(f"optimizer={type(optimizer).__name__}: this adapter builds SGD or AdamW")


@contextlib.contextmanager
def shared_folder(checkpoint_dir=None):
    """Where every rank's Trainer works: `checkpoint_dir` (a resumable run's, kept), else one
    temporary folder rank 0 makes and removes once every rank is done with it."""
    import torch.distributed as dist

    if checkpoint_dir is not None:
        yield Path(checkpoint_dir)
        return
    made = [tempfile.mkdtemp(prefix="pcl-olmo-run-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(made)
    try:
        yield Path(made[0])
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            shutil.rmtree(made[0], ignore_errors=True)


def olmo_run(model, optimizer, epochs, accum_steps, adapter, checkpoint_dir=None):
    """OLMo-core's Trainer.fit() over len(epochs) epochs of the check's microbatches; with a
    `checkpoint_dir`, its own checkpointer saves there after every step and the Trainer
    resumes from the latest one it finds there (its save folder, load_strategy if_available)."""
    from olmo_core.distributed import parallel
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.train import Duration, TrainerConfig
    from olmo_core.train.callbacks import CheckpointerCallback
    from olmo_core.train.train_module import TransformerTrainModule
    from olmo_core.train.train_module.transformer.config import TransformerDataParallelConfig
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    parallel._WORLD_MESH = None  # one run per call: OLMo-core keeps one mesh a process
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    module = TransformerTrainModule(
        model,
        optim_config(optimizer),
        rank_microbatch_size=BATCH_SIZE * SEQ_LEN,
        max_sequence_length=SEQ_LEN,
        dp_config=TransformerDataParallelConfig(name=DataParallelType.fsdp),
        device=torch.device("cpu"),
        scheduler=cosine(),  # stepped by the module at each optim_step, from the Trainer's step
    )
    set_model_state_dict(model, initial, options=StateDictOptions(full_state_dict=True))
    counter = StepCounter(module.optim)
    resumable = checkpoint_dir is not None
    saving = {"checkpointer": CheckpointerCallback(save_interval=1, save_async=False)}
    with shared_folder(checkpoint_dir) as folder:
        data = folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        datasets = [_dataset(data, e, global_order(ranks)) for e, ranks in enumerate(epochs)]
        loader, epochs_set = _loader(datasets, accum_steps, data)
        trainer = TrainerConfig(
            save_folder=str(folder / "save"),
            work_dir=str(data),
            device="cpu",
            max_duration=Duration.epochs(len(epochs)),
            no_checkpoints=not resumable,
            callbacks=saving if resumable else {},
            no_evals=True,
            metrics_collect_interval=10**6,
            cancel_check_interval=10**6,
        ).build(module, loader)
        trainer.fit()
    record(
        adapter,
        optimizer_steps=counter.close(),
        optimizer_class=type(module.optim).__name__,
        global_step=trainer.global_step,
        max_steps=trainer.max_steps,  # what the module's schedule runs over
        epochs_set=epochs_set,
        total_batches=loader.total_batches,  # per epoch: full global batches only
        dataset_rows=len(datasets[0]),
        parameter_type=type(next(model.parameters())).__name__,  # DTensor: FSDP
        resumed=trainer.checkpoint_loaded,
    )


def train_loop(model, optimizer, epochs, accum_steps):
    """OLMo-core's Trainer.fit() over len(epochs) epochs of the check's microbatches."""
    olmo_run(model, optimizer, epochs, accum_steps, ADAPTER)
