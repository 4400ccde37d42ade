"""The run mode's examples in the index (examples.py): loops over epochs (train_loop), the
resumable ones (checkpoint_dir: killed and restarted too) and the framework run adapters.
tests/trainer_check/test_run_mode.py, test_resume.py and tests/runners/test_run_frameworks.py
and test_resume_frameworks.py hold these verdicts."""

from __future__ import annotations

from pclab.experiments.trainer_check.example_entry import DIFFERENT, HF, SAME, Example, _t

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
    # contrastive loops (the coupled run mode: tests/trainer_check/test_coupled_run.py)
    _t(
        "run_coupled_gradcache",
        "a contrastive loop: one GradCache update a window, tail included",
        "—",
        SAME,
        mode="coupled_run",
    ),
    _t(
        "run_coupled_naive_accumulation",
        "a contrastive loop: a gather per microstep ÷ K, the tail too (`microstep_pool`)",
        "tail_window_scaled",
        DIFFERENT,
        mode="coupled_run",
    ),
    _t(
        "run_resume_coupled_gradcache",
        "resumable contrastive loop: model, optimizer, scheduler and position restored",
        "—",
        SAME,
        mode="coupled_run",
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
        "frameworks/deepspeed/run_hf_trainer_deepspeed_zero2.py",
        "the real `transformers.Trainer`'s own loop with DeepSpeed ZeRO-2",
        "scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        "frameworks/deepspeed/run_hf_trainer_deepspeed_zero2_adamw.py",
        "the same with AdamW, whose ZeRO-2 state the check compares on the parameters alone",
        "scheduler_on_skip",
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
        "frameworks/accelerate/run_resume_clm_no_trainer.py",
        "resumable, `run_clm_no_trainer.py`'s `--checkpointing_steps` and its resume arithmetic",
        "tail_window_scaled, schedule_length, scheduler_on_skip, counter_reset, data_replayed, "
        "data_skipped",
        DIFFERENT,
    ),
    Example(
        "frameworks/deepspeed/run_resume_hf_trainer_deepspeed_zero2.py",
        "resumable, `Trainer` + ZeRO-2 saving every update through the engine",
        "scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        "frameworks/trl/run_resume_trl_sft.py",
        "resumable, TRL's `SFTTrainer` saving every update: three restarts it cannot place",
        "scheduler_on_skip",
        DIFFERENT,
    ),
    Example(
        "frameworks/lightning/run_resume_lightning_accumulate.py",
        'resumable, Lightning\'s `ModelCheckpoint` every step, `fit(ckpt_path="last")`',
        "tail_window_scaled, scheduler_on_skip, counter_reset, data_replayed, data_skipped",
        DIFFERENT,
    ),
    Example(
        "frameworks/deepspeed/run_resume_deepspeed_engine.py",
        "resumable, DeepSpeed's `save_checkpoint` every batch, `load_checkpoint` + skip",
        "tail_window_dropped, gradient_leak, counter_reset, window_gradient_lost",
        DIFFERENT,
    ),
    Example(
        f"{HF}/run_resume_hf_trainer.py",
        "resumable, `Trainer` saving every update, `resume_from_checkpoint`",
        "scheduler_on_skip",
        DIFFERENT,
    ),
)
