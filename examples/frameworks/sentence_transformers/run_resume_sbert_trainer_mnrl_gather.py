"""sentence-transformers' own trainer over a run, RESUMABLE as its users write it:
run_sbert_trainer_mnrl_gather.py's `SentenceTransformerTrainer.train()` (the same `_train`:
MultipleNegativesRankingLoss(gather_across_devices=True), K-batch windows, its linear schedule,
the pairs in the check's order) with `output_dir=checkpoint_dir`, `save_strategy="steps"`,
`save_steps=1` (a checkpoint-<global_step> folder after every update) and, at start,
`trainer.train(resume_from_checkpoint=get_last_checkpoint(checkpoint_dir))`, as
run_resume_hf_trainer.py does for transformers' Trainer; make_optimizer's AdamW, so a lost
optimizer state would show.

    cd examples/frameworks/sentence_transformers
    pclab check run_resume_sbert_trainer_mnrl_gather.py --json

Measured by the check (tests/runners/test_run_sbert.py pins it): the same run at all
four kill points, back at microbatch 3, 3, 5 and 6, as the table below says; the run itself is
run_sbert_trainer_mnrl_gather.py's (every full window `microstep_pool`). What follows was read
in the libraries' source and measured first with a driver (torchrun, P = 2, the check's
epochs, kills by SIGKILL). The trainer tokenizes the texts itself, so the check knows a
microbatch by what the model ran on in one run of the loop (coupled_run_rank.own_inputs).

What is saved (sentence-transformers 6.2.0, transformers 5.24.0, accelerate 1.15.0, torch
2.13.0; paths under site-packages/):

- When: `on_step_end` asks for a save when `global_step % save_steps == 0`
  (transformers/trainer_callback.py:584-589), after `optimizer.step()`, `lr_scheduler.step()`,
  `zero_grad` and `global_step += 1` (trainer.py:1943-1958): every checkpoint is at an update
  boundary, never inside a window.
- What: `_save_checkpoint` (trainer.py:3363-3417) saves the model through `save_model`
  (:3377), which is sentence-transformers' `_save` (sentence_transformers/base/trainer.py:
  1011-1029): `model.save_pretrained` in the library's own module layout (modules.json,
  model.safetensors of the WordEmbeddings, 1_Pooling/, 2_Dense/), the float64 weights as they
  are, and `torch.save(self.args)` (training_args.bin, :1029), which pickles the
  `batch_sampler` callable: the adapters bind a module-level function with functools.partial
  (a function local to `_train` cannot be pickled: the first save failed). Then the
  optimizer's and scheduler's state_dicts (optimizer.pt, scheduler.pt, trainer.py:3572,
  :3584, rank 0), each rank's RNG states (rng_state_<rank>.pth, :3519) and trainer_state.json
  with global_step (:3417).
- Every rank writes the model: transformers' `save_model` calls `_save` on every rank
  (trainer.py:4132-4133) and keeps the rank test inside its own `_save` (:4143-4145), which
  sentence-transformers' override replaces without one (base/trainer.py:1011-1012: "we are
  the process zero"): the P ranks write the same files into the same folder. Here the bytes
  agree (DDP keeps the ranks equal). A process killed inside a save leaves a checkpoint-N
  folder without trainer_state.json, which `get_last_checkpoint` (trainer_utils.py:270-279,
  the highest number, its contents unchecked) still picks: the restart then fails
  (FileNotFoundError; measured with a driver that killed inside a save).
- Each save also runs the model once: the model card encodes its widget examples
  (base/model.py:792-793, base/model_card.py:1971, sentence_transformer/model_card.py:123):
  `model.encode` under torch.inference_mode (sentence_transformer/model.py:751, :920), in
  eval mode (:945; Trainer's training_step sets train mode back, trainer.py:2080). The check
  passes over a forward without gradient (pclab/experiments/trainer_check/run_observe.py:74):
  it is no microbatch. The record's `forward_rows` does count it (3 rows a save).

What resume restores:

- The model, into the check's object: `train()` loads it before Accelerate prepares anything
  (trainer.py:1559-1565) through sentence-transformers' `_load_from_checkpoint`
  (base/trainer.py:1082-1091): it builds a NEW SentenceTransformer from the checkpoint and
  copies its state_dict into the trainer's model with `load_state_dict`, in place: the model
  the check handed in keeps its parameter tensors (measured: the same objects throughout),
  and the loss and DDP wrap that same model. Nothing is replaced, as with transformers'
  Trainer (run_resume_hf_trainer.py).
- Rounded to float32 at torch's default dtype: that new model is built at the default
  dtype. WordEmbeddings makes a float32 nn.Embedding and loads the saved float64 weights into it
  (sentence_transformer/modules/word_embeddings.py:52-53), Dense a float32 nn.Linear
  (base/modules/dense.py:75, loaded by safetensors' load_model, base/modules/module.py:362),
  the later modules are cast to the first one's dtype (base/model.py:287); the float32 values
  are then copied into the float64 parameters. Measured: the parameters a restart starts from
  are the straight run's after that update rounded to float32, exactly (8.2e-8 off at
  checkpoint-1, 5.7e-8 at checkpoint-2, 9.1e-8 at checkpoint-3), and the resumed run keeps
  that offset to its end. With the reload built in float64 (a driver's patch, not here:
  torch.set_default_dtype(float64) around `_load_from_checkpoint`) the resumed run equals
  the straight run exactly (0.0) at all four kill points: the rounding is the only
  difference. A float32 model, the library's usual one, would not show it. Under the check it
  does not show either: the check's ranks run at default dtype float64
  (pclab/runners/worker.py:48), so the new model is built in float64 and the restart is exact.
- The optimizer and scheduler: the lab's optimizer (`optimizers=(optimizer, None)`),
  prepared by Accelerate (trainer.py:1773: AcceleratedOptimizer wraps it), gets its state
  back from optimizer.pt (`_load_optimizer_and_scheduler`, trainer.py:1817, :3894, :3989),
  passed on to the check's optimizer itself (accelerate/optimizer.py:104-107); the
  trainer's own scheduler, built anew, gets its state back (:3996). Measured: AdamW's step
  counts and each update's rate equal the straight run's.
- trainer_state.json's global_step: `_init_training_state` (trainer.py:1678-1713) computes
  epochs_trained = global_step // updates_per_epoch (:1706) and the batches to skip,
  (global_step % updates_per_epoch) x K (:1708-1709); `_run_epoch` skips them with
  Accelerate's `skip_first_batches` on the prepared DataLoader (trainer.py:1850-1855,
  accelerate/data_loader.py:1395-1462: a new DataLoaderShard over SkipBatchSampler(the
  rank's BatchSamplerShard), :1332-1352), or, with none to skip, loads the RNG states
  (trainer.py:1856-1857; with a skip, after it, :1887-1889). The run is deterministic: the
  RNG changes nothing here.
- The epoch the sampler serves: the check's epochs live in framework_run.EpochRows inside
  the DefaultBatchSampler, told by `set_epoch`. With nothing skipped, Trainer's
  `train_dataloader.set_epoch(epoch)` (trainer.py:1859-1860) reaches it as in a straight run
  (DataLoaderShard.set_epoch, accelerate/data_loader.py:622-635). With a skip it does not:
  the skipping loader's batch sampler is a SkipBatchSampler, with neither `set_epoch` nor
  `sampler`, the BatchSamplerShard inside it has no `sampler`, a datasets.Dataset no
  `set_epoch` (:638), and Trainer's own reach one level down (trainer.py:1861-1866) finds the
  BatchSamplerShard, without `set_epoch`. EpochRows then serves the epoch it was built at, 0:
  right for every skip inside epoch 0, so at all four kill points below; a resume inside a
  later epoch would run epoch 0's rows there (measured: killed at microbatch 8, resumed from
  checkpoint-4 onto epoch 0's microbatches 3, 4, 5 where 8, 9, 10 were due; 4.6e-3 off at
  the end). The check never kills there (its kill points are K+1, K+2, 2K+1, M+1). The same
  hole would leave the library's epoch-seeded samplers at epoch 0 in such a resume
  (NoDuplicatesBatchSampler seeds with seed + epoch, base/sampler.py:550; read, not run).

Where each kill point comes back (P = 2, K = 2, M = 5: windows of microbatches 1-2, 3-4, the
tail 5, then 6-7, 8-9, 10; every rank killed at the forward of the microbatch named;
measured with a driver, both ranks):

    kill point            killed at  loads          skips  comes back to
    mid_epoch = K+1       3          checkpoint-1   2      3 (epoch 0)
    mid_window = K+2      4          checkpoint-1   2      3: window 3-4 rerun from its start
    before_tail = 2K+1    5          checkpoint-2   4      5, the tail
    epoch_boundary = M+1  6          checkpoint-3   0      6 (epoch 1, set_epoch(1) reaches
                                                            EpochRows: nothing skipped)

Each resumed launch then ran exactly the straight run's remaining microbatches, rows and
windows, with AdamW's step counts and the rates of the straight run; its parameters part
from the straight run's at the first resumed update by the float32 rounding of the reload
alone (5.7e-8 to 9.1e-8 at the end). Prediction for the check (to be confirmed by its run):
`different` at all four kill points, first at the first update after the checkpoint (past
its tolerance of 1e-10), with none of its codes (nothing was replayed, skipped, reset or
lost); a float32 model would be the same run.

The record (run_sbert_trainer_mnrl_gather._record, $PCL_FRAMEWORK_RECORD) adds
`resumed_from` (checkpoint-<global_step>, None from the start); a resumed launch's
`epochs_set` holds no entry for a skipped epoch ([1, 1] back at before_tail), and its
`optimizer_steps` count this launch's steps only.
"""

import sys
from pathlib import Path

from run_sbert_trainer_mnrl_gather import (
    DTYPE,
    GLOBAL_BATCH,
    ITEMS,
    _record,
    _train,
    build_model,
    embed,
    embedding_loss,
    make_microbatch,
    make_scheduler,
)

# framework_run.py (what the run adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import make_optimizer  # noqa: E402

__all__ = ["DTYPE", "GLOBAL_BATCH", "ITEMS", "build_model", "embed", "embedding_loss"]
__all__ += ["make_microbatch", "make_optimizer", "make_scheduler", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
SAVE_EVERY_UPDATE = {"save_strategy": "steps", "save_steps": 1}


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """SentenceTransformerTrainer.train() over the run (run_sbert_trainer_mnrl_gather.py's), a
    checkpoint after every update, resumed from the last."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(checkpoint_dir)  # None: nothing saved yet
    trainer, order, counter, rows = _train(
        model, optimizer, epochs, accum_steps, checkpoint_dir, last, **SAVE_EVERY_UPDATE
    )
    resumed_from = None if last is None else Path(last).name  # checkpoint-<global_step>
    _record(trainer, order, counter, rows, ADAPTER, resumed_from=resumed_from)
