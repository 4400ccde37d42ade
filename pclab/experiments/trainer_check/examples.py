"""The bundled examples, every file by its code (its stem): examples/trainers/, the contract by
example (one file per verdict, ready to copy), and examples/frameworks/<framework>/, the
framework table's adapters (frameworks.table) with the modules they share. The "Check a
trainer" page lists its examples from here; examples/README.md is this index rendered with
each adapter's recorded verdict (frameworks.readme_table; a test holds it to the files on
disk and to the record).

    python -m pclab.experiments.trainer_check.frameworks --readme   # rewrite examples/README.md
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pclab.experiments.trainer_check.frameworks.setting import FOLDERS, SHARED
from pclab.experiments.trainer_check.frameworks.table import SETTINGS
from pclab.paths import EXAMPLES_ROOT

INDEX = EXAMPLES_ROOT / "README.md"
BLOCK = "examples-index"  # its markers: <!-- examples-index:start/end -->
HF = f"frameworks/{FOLDERS['transformers']}"  # the real transformers.Trainer's folder


@dataclass(frozen=True)
class Module:
    """A file other files import, no trainer of its own."""

    path: str  # below examples/
    shows: str  # what it holds, in one line (Markdown)

    @property
    def code(self) -> str:
        return Path(self.path).stem

    @property
    def file(self) -> Path:
        return EXAMPLES_ROOT / self.path


@dataclass(frozen=True)
class Example(Module):
    """A trainer the page can check, with its answer key and its verdict."""

    scheme: str  # what its step applies (token: core.update_weights; coupled_schemes); a run
    # example (train_loop): the run diagnoses its check names, "—" for none
    verdict: str  # the check's verdict on it at P = 2 and K = `accum`
    accum: int = 2


def _t(stem: str, shows: str, scheme: str, verdict: str, accum: int = 2) -> Example:
    return Example(f"trainers/{stem}.py", shows, scheme, verdict, accum)


SAME, DIFFERENT = "same_update", "different"
TOKEN = (  # the page's token examples, in its order (each verdict: tests/runners/)
    _t("correct_manual", "by hand: token-loss sums ÷ the global count N", "global_token", SAME),
    _t("correct_ddp_no_sync", "DDP with `no_sync()`: each sum × P ÷ N", "global_token", SAME),
    _t(
        "ddp_mean_of_local_means",
        "each rank's own mean, then DDP's mean of the ranks",
        "replica_mean",
        DIFFERENT,
    ),
    _t(
        "microbatch_means",
        "each microbatch's own mean ÷ K, then DDP's mean",
        "microbatch_mean",
        DIFFERENT,
    ),
    _t("double_divide_by_k", "the global token mean ÷ K once more", "double_scaled", DIFFERENT),
    _t("unnormalised_sum", "token losses summed, never divided", "unnormalised_sum", DIFFERENT),
    _t(
        "adamw_steps_at_zero",
        "right weights, but AdamW steps at N = 0 (`zero_must_skip`)",
        "global_token",
        DIFFERENT,
    ),
    _t(
        "clip_global_norm",
        "v2: clipped once by the global norm (`MAX_GRAD_NORM`)",
        "global_token",
        SAME,
    ),
    _t("correct_float32", "v2: a float32 model (`DTYPE`)", "global_token", SAME),
    _t(
        "own_microbatches",
        "v2: its own data, no language model (`make_microbatch`)",
        "global_token",
        SAME,
    ),
    Example(
        f"{HF}/hf_trainer.py",
        "the real `transformers.Trainer`, `average_tokens_across_devices=True`",
        "global_token",
        SAME,
    ),
    Example(
        f"{HF}/hf_trainer_local_average.py",
        "the real `transformers.Trainer`, `average_tokens_across_devices=False`",
        "replica_mean",
        DIFFERENT,
    ),
    Example(
        f"{HF}/hf_trainer_no_first_label.py",
        "the real `transformers.Trainer` with no label at position 0",
        "global_token",
        SAME,
    ),
)
COUPLED = (  # the page's coupled examples (batch_loss / embed), in its order
    _t(
        "gradcache",
        "GradCache: one loss over the global batch at any P and K",
        "global_batch",
        SAME,
    ),
    _t(
        "gather_with_grad",
        "a gradient-carrying gather, meant for K = 1",
        "global_batch",
        SAME,
        accum=1,
    ),
    _t("naive_accumulation", "accumulation without a gather", "microbatch_pool", DIFFERENT),
    _t(
        "naive_accumulation_gather",
        "a gather per microstep: the pool does not grow",
        "microstep_pool",
        DIFFERENT,
    ),
    _t(
        "remote_detached",
        "`dist.all_gather`: other ranks' documents carry no gradient",
        "remote_detached",
        DIFFERENT,
    ),
    _t(
        "scaled_by_world_size",
        "a gradient-carrying gather with the loss × P",
        "scaled",
        DIFFERENT,
        accum=1,
    ),
    _t("batchnorm_ddp", "BatchNorm under plain DDP: a pool per rank", "rank_pool", DIFFERENT, 1),
)
RUN = (  # the run mode's examples (train_loop over epochs; the resumable ones take
    # checkpoint_dir and are killed and restarted too): tests/trainer_check/test_run_mode.py,
    # test_resume.py and tests/runners/test_run_frameworks.py hold these verdicts
    _t("run_correct", "a loop over epochs: each window ÷ its global N, tail included", "—", SAME),
    _t(
        "run_ddp_no_sync",
        "DDP wrapped once, `no_sync()` but at each window's last backward, the sums × P / N",
        "—",
        SAME,
    ),
    _t(
        "run_divide_by_k",
        "nanoGPT's loop: each mean ÷ K, the tail too",
        "tail_window_scaled",
        DIFFERENT,
    ),
    _t(
        "run_tail_never_steps",
        "steps only when (i + 1) % K == 0",
        "tail_window_dropped, gradient_leak",
        DIFFERENT,
    ),
    _t("run_zero_grad_per_epoch", "`zero_grad` once per epoch", "gradient_leak", DIFFERENT),
    _t(
        "run_scheduler_per_microstep",
        "`scheduler.step()` after every backward",
        "scheduler_rate",
        DIFFERENT,
    ),
    _t(
        "run_schedule_len_over_k",
        "a schedule built for len // K updates an epoch",
        "schedule_length",
        DIFFERENT,
    ),
    _t(
        "run_scheduler_on_skip",
        "the scheduler stepped at an N = 0 window",
        "scheduler_on_skip",
        DIFFERENT,
    ),
    _t(
        "run_resume_correct",
        "resumable: model, optimizer, scheduler and position restored",
        "—",
        SAME,
    ),
    _t(
        "run_resume_forgets_scheduler",
        "resumable, the scheduler not restored",
        "scheduler_reset",
        DIFFERENT,
    ),
    _t(
        "run_resume_forgets_position",
        "resumable, the position in the data not restored",
        "data_replayed",
        DIFFERENT,
    ),
    _t(
        "run_resume_loses_step_count",
        "resumable, AdamW's step count not restored",
        "optimizer_state_lost",
        DIFFERENT,
    ),
    _t(
        "run_resume_skips_ahead",
        "resumable, fast-forwards updates × K windows",
        "data_skipped",
        DIFFERENT,
    ),
    _t(
        "run_resume_resets_counter",
        "resumable, the window counter restarts at 0",
        "counter_reset",
        DIFFERENT,
    ),
    _t(
        "run_resume_loses_window_gradient",
        "resumable, saved mid-window without the accumulated gradient",
        "window_gradient_lost",
        DIFFERENT,
    ),
    Example(
        "frameworks/accelerate/run_accelerate_accumulate.py",
        "Accelerate's own loop: `accumulate`, a prepared scheduler",
        "tail_window_scaled, scheduler_rate, scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        "frameworks/lightning/run_lightning_accumulate.py",
        "Lightning's own fit loop, `accumulate_grad_batches`",
        "tail_window_scaled, scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        f"{HF}/run_hf_trainer.py",
        "the real `transformers.Trainer`'s own loop",
        "scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        "frameworks/deepspeed/run_deepspeed_engine.py",
        "DeepSpeed's engine loop: `engine.backward`, `engine.step()` every batch",
        "tail_window_dropped, gradient_leak",
        DIFFERENT,
    ),
    Example(
        "frameworks/trl/run_trl_sft.py",
        "TRL's `SFTTrainer.train()` on text it tokenizes itself",
        "scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        "frameworks/accelerate/run_clm_no_trainer.py",
        "transformers' `run_clm_no_trainer.py` loop and its step arithmetic",
        "tail_window_scaled, schedule_length, scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        "frameworks/accelerate/run_resume_accelerate.py",
        "resumable, Accelerate's checkpointing example: `save_state` every batch",
        "tail_window_scaled, scheduler_rate, scheduler_on_skip, window_gradient_lost",
        DIFFERENT,
    ),
    Example(
        "frameworks/accelerate/run_resume_accelerate_at_updates.py",
        "resumable, the same example saving only at update boundaries",
        "tail_window_scaled, scheduler_rate, scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        f"{HF}/run_resume_hf_trainer.py",
        "resumable, `Trainer` saving every update, `resume_from_checkpoint`",
        "scheduler_on_skip",
        DIFFERENT,
    ),
)
MODULES = (  # examples/trainers/' modules
    Module("trainers/tiny_lm.py", "the tiny causal LM every token example imports"),
    Module("trainers/tiny_embedder.py", "the embedding model every coupled example imports"),
    Module("trainers/run_loop.py", "what the run examples share besides their loop"),
)


def files() -> dict[str, Path]:
    """code -> its file, for every file the index lists (a code names one file only)."""
    found = {e.code: e.file for e in (*TOKEN, *COUPLED, *RUN, *MODULES)}
    found |= {s.code: s.path for s in SHARED}
    found |= {s.code: s.path for s in SETTINGS if s.adapter}
    return found


def path_of(code: str) -> Path:
    """The file of a bundled example or adapter, from its code alone (ValueError otherwise)."""
    found = files()
    if code not in found:
        raise ValueError(f"example={code!r} is not a bundled example: one of {', '.join(found)}")
    return found[code]
