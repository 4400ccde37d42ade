"""The run mode's diagnosis codes (train_loop; resume.py's), registered in codes.CODES beside
every other mode's."""

from __future__ import annotations

from pclab.experiments.trainer_check.code_entry import Code

LOOP_CODES = (  # what a loop over epochs gets wrong (run_report.py)
    Code(
        code="tail_window_scaled",
        summary="the epoch's tail stepped at k'/K of a full window's update (divided by K)",
        details=("scale", "microsteps", "scheme"),
        modes=("run", "coupled_run"),
        placeholders=("scenario", "scale", "microsteps", "message"),
    ),
    Code(
        code="tail_window_dropped",
        summary="an epoch's tail window took no optimizer step",
        details=("epochs",),
        modes=("run", "coupled_run"),
        placeholders=("scenario", "epochs", "message"),
    ),
    Code(
        code="gradient_leak",
        summary="an update carries an earlier window's gradient (zero_grad missing)",
        details=("epoch", "window", "leak"),
        modes=("run",),
        placeholders=("scenario", "epoch", "window", "message"),
    ),
    Code(
        code="steps_per_window",
        summary="a window took more than one optimizer step, or a full one none",
        details=("steps",),
        modes=("run", "coupled_run"),
        placeholders=("scenario", "steps", "message"),
    ),
    Code(
        code="scheduler_rate",
        summary="the schedule steps c times per update (per microstep, or P: prepared)",
        details=("how", "rate"),
        modes=("run", "coupled_run"),
        placeholders=("scenario", "rate", "message"),
    ),
    Code(
        code="schedule_length",
        summary="the schedule was built for another number of updates than the run takes",
        details=("built", "updates"),
        modes=("run", "coupled_run"),
        placeholders=("scenario", "built", "updates", "message"),
    ),
    Code(
        code="scheduler_on_skip",
        summary="the schedule advanced at a window with N = 0",
        modes=("run",),
    ),
)
RESUME_CODES = (  # what a restart gets wrong (resume_judge.py)
    Code(
        code="not_resumable",
        summary="a resumable loop, killed and started again, started over or raised",
        effects=("different",),
        details=("points",),
        modes=("run",),
        placeholders=("points", "message"),
    ),
    Code(
        code="data_replayed",
        summary="after a restart the loop ran microbatches it had already stepped",
        effects=("different",),
        details=("points",),
        modes=("run",),
        placeholders=("points", "message"),
    ),
    Code(
        code="data_skipped",
        summary="after a restart a window with labels was stepped by neither run",
        effects=("different",),
        details=("points",),
        modes=("run",),
        placeholders=("points", "message"),
    ),
    Code(
        code="scheduler_reset",
        summary="after a restart the schedule started again from its first step",
        effects=("different",),
        details=("points",),
        modes=("run",),
        placeholders=("points", "message"),
    ),
    Code(
        code="optimizer_state_lost",
        summary="after a restart the optimizer's step count restarted",
        effects=("different",),
        details=("points",),
        modes=("run",),
        placeholders=("points", "message"),
    ),
    Code(
        code="counter_reset",
        summary="after a restart the loop stepped where no window ends",
        effects=("different",),
        details=("points",),
        modes=("run",),
        placeholders=("points", "message"),
    ),
    Code(
        code="window_gradient_lost",
        summary="killed mid-window, the restart lost what the window had accumulated",
        effects=("different",),
        details=("points",),
        modes=("run",),
        placeholders=("points", "message"),
    ),
)
RUN_CODES = (*LOOP_CODES, *RESUME_CODES)
LOOP_CODE_NAMES = tuple(c.code for c in LOOP_CODES)
