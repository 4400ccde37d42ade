"""The trainer check's diagnosis codes: one registry, one entry per code
(code_entry.Code), which every other part reads or is checked against; the run mode's
entries are declared in run_codes.py and registered here with the rest. A code is a promise
(users' CI matches on it): it never changes once released.

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

from pclab.experiments.trainer_check.code_entry import EXIT as EXIT
from pclab.experiments.trainer_check.code_entry import MODES as MODES
from pclab.experiments.trainer_check.code_entry import Code
from pclab.experiments.trainer_check.run_codes import RUN_CODES

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
            details=("untold", "resume", "state_unread"),
            cases=(
                *("scenario", "unsplit_scenario", "run", "unsplit_run"),
                *("coupled_scenario", "coupled_unsplit_scenario", "coupled_run"),
                *("coupled_unsplit_run", "resume_run", "state_unread"),
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
            modes=("token", "run", "coupled_run"),
            placeholders=("scenario", "tensor", "message"),
        ),
        Code(
            code="objective_invalid",
            summary="batch_loss / embed / embedding_loss gave no finite scalar or no "
            "(queries, documents) pair",
            effects=("unusable",),
            modes=("coupled", "coupled_run"),
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
        *RUN_CODES,
    )
}
UNUSABLE = tuple(c.code for c in CODES.values() if "unusable" in c.effects)
