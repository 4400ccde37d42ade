"""The trainer check's diagnosis codes: one registry, one entry per code, which every other
part reads or is checked against. A code is a promise (users' CI matches on it): it never
changes once released.

    code          the JSON's "code" (report.py, coupled_report.py, failures.py, cli.py)
    summary       one line: when the check raises it (the README's table says it at length)
    details       the JSON fields the diagnosis carries beyond code, message and scenario;
                  diagnoses._diagnosis refuses a code not here, or a detail it does not list
    effects       what it does to the command's exit code (EXIT): "unusable", the file cannot
                  be checked, no scenario runs (2); "different", its scenario's verdict is
                  `different` (1); "no_evidence", said of the whole run (2); none: it explains
                  a verdict the comparison gave. The README's "exit" column is `exit`
    modes         the check's modes that raise it: "token", "coupled", "run"
    cases         the catalogue's sub-keys, one entry per way the message reads
                  (check.diagnosis.<code>.<case>; none: check.diagnosis.<code>); the page picks
                  one from the report (ui/trainer_diagnoses.CASES)
    placeholders  the {names} a catalogue entry of the code may use; the page fills exactly
                  these (ui/trainer_diagnoses.values)

The English words are the report's message, built once by a builder in diagnoses.py (or
failures.py); the catalogues hold the other languages' words (locales/zh/check.toml).

    python -c "from pclab.experiments.trainer_check import codes; print(*codes.CODES, sep=' ')"
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("token", "coupled", "run")
EXIT = {"unusable": 2, "different": 1, "no_evidence": 2}  # effect -> the command's exit code


@dataclass(frozen=True)
class Code:
    code: str
    summary: str
    effects: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    modes: tuple[str, ...] = MODES
    cases: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ("scenario", "message")

    def __post_init__(self) -> None:
        if unknown := [e for e in self.effects if e not in EXIT]:
            raise ValueError(f"effects={unknown} is invalid: expected some of {', '.join(EXIT)}")
        if not self.modes or set(self.modes) - set(MODES):
            raise ValueError(f"modes={self.modes} is invalid: expected some of {MODES}")

    @property
    def exit(self) -> str:
        """The README's "exit" column: "2", "1", "2 / 1", or "—" for none of its own."""
        return " / ".join(map(str, sorted({EXIT[e] for e in self.effects}, reverse=True))) or "—"

    @property
    def keys(self) -> tuple[str, ...]:
        """Its catalogue keys: one per case."""
        base = f"check.diagnosis.{self.code}"
        return tuple(f"{base}.{case}" for case in self.cases) or (base,)


FAILED = ("rank", "ranks")  # a failed scenario's details (failures.py): which rank, what each saw
CODES = {
    c.code: c
    for c in (
        Code(
            code="signature",
            summary="a contract function cannot be called as the check calls it",
            effects=("unusable",),
            placeholders=("message",),
        ),
        Code(
            code="contract",
            summary="the file is no trainer: it does not import, lacks a function or sets a "
            "constant out of range (pclab check --json only)",
            effects=("unusable",),
            placeholders=("message",),
        ),
        Code(
            code="terms_mismatch",
            summary="token_losses returned more or fewer terms than counted labels",
            effects=("unusable",),
            details=("terms", "counted_labels", "side"),
            modes=("token", "run"),
            cases=("more", "fewer"),
            placeholders=("terms", "counted_labels", "gap"),
        ),
        Code(
            code="model_not_deterministic",
            summary="build_model() gave different weights on two calls (or ranks)",
            effects=("unusable",),
            details=("tensor", "across_ranks"),
            cases=("calls", "ranks"),
            placeholders=("tensor",),
        ),
        Code(
            code="dtype_changed",
            summary="the parameters are not (built) or no longer (recast) in DTYPE",
            effects=("unusable", "different"),
            details=("tensor", "dtype", "declared"),
            cases=("built", "recast"),
            placeholders=("scenario", "tensor", "dtype", "declared"),
        ),
        Code(
            code="optimizer_not_stepped",
            summary="the optimizer handed to train_step never stepped",
            details=("scenarios", "parameters_changed"),
            cases=("forgot", "own"),
            placeholders=("scenarios",),
        ),
        Code(
            code="uniform_scale",
            summary="every weight x N is one c != 1: the update scaled once",
            effects=("different",),
            details=("scale",),
            modes=("token",),
            cases=("scale", "second_k"),
            placeholders=("scenario", "scale", "residual", "accum"),
        ),
        Code(
            code="extra_optimizer_state",
            summary="train_step created optimizer state the reference has none of",
            effects=("different",),
            details=("keys", "parameters"),
            cases=("at_zero", "labels"),
            placeholders=("scenario", "keys", "parameters"),
        ),
        Code(
            code="no_evidence",
            summary="a scenario, or the whole run, whose update a wrong scheme gives too",
            effects=("no_evidence",),  # the run's (scenario None); a scenario's changes nothing
            details=("untold",),
            cases=(
                *("scenario", "unsplit_scenario", "run", "unsplit_run"),
                *("coupled_scenario", "coupled_unsplit_scenario", "coupled_run"),
                "coupled_unsplit_run",
            ),
            placeholders=("scenario", "schemes", "world_size", "accum"),
        ),
        Code(
            code="trainer_error",
            summary="the trainer raised in this scenario, or a rank died",
            effects=("different",),
            details=FAILED,
        ),
        Code(
            code="collective_mismatch",
            summary="the ranks' collectives did not pair up in this scenario",
            effects=("different",),
            details=(*FAILED, "sizes"),
            cases=("ranks", "unequal_items"),
            placeholders=("scenario", "message", "microstep", "held"),
        ),
        Code(
            code="timeout",
            summary="a rank was still in this scenario after its deadline",
            effects=("different",),
            details=FAILED,
        ),
        Code(
            code="counts_not_terms",
            summary="--counts or --counts-labels asked for what a microbatch cannot hold",
            details=("given", "cells"),
            modes=("token",),
        ),
        Code(
            code="non_finite",
            summary="a parameter or optimizer-state value is NaN or inf after the step",
            effects=("different",),
            details=("rank", "tensor", "values"),
            modes=("token", "run"),
            placeholders=("scenario", "tensor", "message"),
        ),
        Code(
            code="objective_invalid",
            summary="batch_loss / embed / embedding_loss gave no finite scalar or no "
            "(queries, documents) pair",
            effects=("unusable",),
            modes=("coupled",),
            placeholders=("message",),
        ),
        Code(
            code="candidate_left_out",
            summary="embedding_loss refused more documents than queries: two gradient paths "
            "cannot be named",
            details=("schemes",),
            modes=("coupled",),
            placeholders=("schemes", "message"),
        ),
        Code(
            code="elsewhere",
            summary="another rank found the file unusable (that rank's diagnosis is reported)",
            effects=("unusable",),
            placeholders=("message",),
        ),
        Code(
            code="tail_window_scaled",
            summary="the epoch's tail stepped at k'/K of a full window's update (divided by K)",
            details=("scale", "microsteps", "scheme"),
            modes=("run",),
            placeholders=("scenario", "scale", "microsteps", "message"),
        ),
        Code(
            code="tail_window_dropped",
            summary="an epoch's tail window took no optimizer step",
            details=("epochs",),
            modes=("run",),
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
            modes=("run",),
            placeholders=("scenario", "steps", "message"),
        ),
        Code(
            code="scheduler_rate",
            summary="the schedule steps c times per update (per microstep, or P: prepared)",
            details=("how", "rate"),
            modes=("run",),
            placeholders=("scenario", "rate", "message"),
        ),
        Code(
            code="schedule_length",
            summary="the schedule was built for another number of updates than the run takes",
            details=("built", "updates"),
            modes=("run",),
            placeholders=("scenario", "built", "updates", "message"),
        ),
        Code(
            code="scheduler_on_skip",
            summary="the schedule advanced at a window with N = 0",
            modes=("run",),
        ),
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
        Code(
            code="busy",
            summary="the run queue or the memory budget was full: nothing was judged",
            effects=("different",),
            placeholders=("message",),
        ),
        Code(
            code="cancelled",
            summary="the run was stopped before it judged anything",
            effects=("different",),
            placeholders=("message",),
        ),
    )
}
UNUSABLE = tuple(c.code for c in CODES.values() if "unusable" in c.effects)
