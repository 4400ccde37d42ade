"""The trainer check's diagnoses: why a verdict is what it is, each with a stable code (the
JSON's "diagnoses": [{"code", "message", "scenario", ...}], the page's and CI's key). Every
code, its details, its exit effect and the modes that raise it are in one registry, codes.py;
_diagnosis refuses a code (or a detail) that is not there.

Messages are plain English, built once, by the builders here (failures.py's for a scenario
that failed; one mode's own in coupled_messages.py and run_messages.py): that message is the
diagnosis's one English wording, in the JSON, the summary and the English page alike
(ui/trainer_diagnoses); other languages translate it by code.
"""

from __future__ import annotations

from typing import Any

from pclab.experiments.trainer_check.codes import CODES
from pclab.experiments.trainer_check.codes import UNUSABLE as UNUSABLE  # kept: diagnoses.UNUSABLE

Diagnosis = dict[str, Any]  # {"code", "message", "scenario", ...its details}: the JSON's entry
SCHEME_WORDS = {
    "replica_mean": "DDP's mean of local means (replica_mean)",
    "microbatch_mean": "microbatch means (microbatch_mean)",
    "double_scaled": "a double ÷K (double_scaled)",
    "unnormalised_sum": "an unnormalised sum (unnormalised_sum)",
    "labels_before_shift": "labels counted before the causal shift (labels_before_shift)",
}


def _diagnosis(
    code: str, message: str, scenario: str | None = None, **details: object
) -> Diagnosis:
    """The one way a diagnosis is made: its code and details as codes.CODES declares them."""
    entry = CODES.get(code)
    if entry is None:
        raise ValueError(f"code={code!r} is not registered: add it to codes.CODES")
    if undeclared := sorted(set(details) - set(entry.details)):
        raise ValueError(f"{code}: details {undeclared} are not in codes.CODES[{code!r}].details")
    return {"code": code, "message": message, "scenario": scenario, **details}


def signature(message: str) -> Diagnosis:
    """From trainer_file's TrainerFileError(code="signature"): the message shows both."""
    return _diagnosis("signature", message)


def unusable_file(code: str, message: str) -> Diagnosis:
    """A file trainer_file.load refused (pclab check --json): its TrainerFileError's code,
    signature, else contract."""
    return _diagnosis("signature" if code == "signature" else "contract", message)


def not_run(outcome: str, message: str) -> Diagnosis:
    """A run that judged nothing (pclab check --json), from its launch's outcome: a failed
    launch is trainer_error; timeout, busy and cancelled keep their names."""
    return _diagnosis({"failed": "trainer_error"}.get(outcome, outcome), message)


def elsewhere() -> Diagnosis:
    """A rank's stand-in when another rank's preflight found the file unusable."""
    return _diagnosis("elsewhere", "another rank found the file unusable")


def objective_invalid(message: str) -> Diagnosis:
    return _diagnosis("objective_invalid", f"the coupled objective cannot be computed: {message}")


def terms_mismatch(got: int, want: int, own_batches: bool) -> Diagnosis:
    side = "more" if got > want else "fewer"
    made = "make_microbatch was asked for" if own_batches else "the microbatch holds"
    hint = (
        " (one per position, not one per counted label?)"
        if got > want
        else " (labels dropped without a causal shift: -100 is the only label that does not count)"
    )
    message = (
        f"token_losses returned {got} terms where {made} {want} counted labels: {got - want:+d}, "
        f"{side} than the contract's one loss per counted label{hint}. The check cannot judge "
        "train_step until the terms are right"
    )
    return _diagnosis("terms_mismatch", message, terms=got, counted_labels=want, side=side)


def model_not_deterministic(tensor: str, gap: float | None, across_ranks: bool) -> Diagnosis:
    where = "on two ranks" if across_ranks else "on two calls"
    size = "a different shape" if gap is None else f"up to {gap:.3g}"
    message = (
        f"build_model() returned different weights {where}: {tensor} differs by {size}. "
        "Seed it (torch.manual_seed(0) first thing in build_model) so that every call builds "
        "the same model; the reference and your step must start from the same weights"
    )
    return _diagnosis("model_not_deterministic", message, tensor=tensor, across_ranks=across_ranks)


def dtype_built(tensor: str, dtype: str, declared: str) -> Diagnosis:
    message = (
        f"build_model() returned {tensor} in {dtype} where DTYPE is {declared} (float64 when "
        f'the file sets none): set DTYPE = "{dtype}" to check in that precision, or build the '
        f"model in {declared}"
    )
    return _diagnosis("dtype_changed", message, tensor=tensor, dtype=dtype, declared=declared)


def dtype_after(scenario: str, tensor: str, dtype: str, declared: str) -> Diagnosis:
    message = (
        f"after train_step, {tensor} is {dtype}, not {declared}: train_step changed the "
        "parameters' precision (a .float(), .half() or an autocast that casts the weights?), "
        f"so its update differs from the {declared} reference by that rounding"
    )
    return _diagnosis(
        "dtype_changed", message, scenario, tensor=tensor, dtype=dtype, declared=declared
    )


def optimizer_not_stepped(scenarios: list[str], parameters_changed: bool) -> Diagnosis:
    where = ", ".join(scenarios)
    if parameters_changed:
        rest = (
            "yet the parameters changed: train_step steps an optimizer of its own (a framework "
            "that builds or replaces it?). Only the parameters are compared; make train_step "
            "step the optimizer it is given to have its state checked too"
        )
    else:
        rest = "and the parameters did not change: did it call optimizer.step()?"
    message = f"the optimizer passed to train_step never stepped ({where}), {rest}"
    return _diagnosis(
        "optimizer_not_stepped", message, scenarios=scenarios, parameters_changed=parameters_changed
    )


def uniform_scale(
    scenario: str, scale: float, residual: float | None, accum: int, terms_over_labels: float = 1.0
) -> Diagnosis:
    """Every weight x N is one c != 1; `terms_over_labels`: N_terms / N_labels of the scenario
    (a summed loss over a label count taken before the causal shift gives exactly that)."""
    why = (
        f" (= 1/K: a second division by K = {accum}?)"
        if accum > 1 and abs(scale * accum - 1) < 1e-6
        else ""
    )
    if terms_over_labels != 1.0 and abs(scale - terms_over_labels) < 1e-6 * terms_over_labels:
        why = (
            " (= N_terms / N_labels: the summed loss divided by the labels counted before the "
            "causal shift, the global form of labels_before_shift; count after the shift)"
        )
    fit = "" if residual is None else f", residual {residual:.1e}"
    message = (
        f"normalisation right, update scaled by {scale:.4g}{why}: every microbatch got the same "
        f"weight x N = {scale:.4g}{fit}. A factor common to every token: clipping (set "
        "MAX_GRAD_NORM to check it), the learning rate, or a factor in the loss"
    )
    return _diagnosis("uniform_scale", message, scenario, scale=scale)


def extra_optimizer_state(scenario: str, keys: list[str], parameters: int, n: int) -> Diagnosis:
    at_zero = (
        " with no labels (N = 0), where the reference does not step at all"
        if n == 0
        else ", where the reference has none"
    )
    message = (
        f"train_step created optimizer state{at_zero}: {', '.join(keys)} of {parameters} "
        "parameters (so max |delta| is undefined: there is nothing to compare them with). "
        + (
            "Skip optimizer.step() when N = 0: AdamW's step count and weight decay move the "
            "weights even with zero gradients"
            if n == 0
            else "Does train_step step another optimizer than the one it is given?"
        )
    )
    return _diagnosis("extra_optimizer_state", message, scenario, keys=keys, parameters=parameters)


def no_evidence_scenario(scenario: str, untold: list[str], state_unread: bool = False) -> Diagnosis:
    """`state_unread`: N = 0, the optimizer stepped and its state could not be read."""
    names = ", ".join(SCHEME_WORDS.get(s, s) for s in untold)
    why = f"these counts give {names} the global token mean's weights"
    why = why if untold else "one microbatch in all splits nothing"
    if state_unread:
        why = (
            "with no labels the optimizer stepped, and its state (a wrapper's flat partitions) "
            "cannot be read: unchanged parameters do not show that nothing else changed"
        )
    message = f"{scenario}: {why}, so matching the reference here is no evidence"
    extra = {"state_unread": True} if state_unread else {}
    return _diagnosis("no_evidence", message, scenario, untold=untold, **extra)


def no_evidence_run(world_size: int, accum: int) -> Diagnosis:
    if world_size * accum == 1:
        why = (
            "with P = 1 and K = 1 nothing is split, so DDP's mean of local means, microbatch "
            "means and a double ÷K are all the global token mean"
        )
    else:
        why = "no scenario's counts tell the global token mean from every wrong scheme"
    message = (
        f"no evidence: {why}. Run with more ranks or microsteps (--world-size 2 --accum 2, "
        "the default) or uneven --counts"
    )
    return _diagnosis("no_evidence", message)


def non_finite(
    scenario: str, rank: int, found: dict[str, Any], counts: list[list[int]], agree: bool | None
) -> Diagnosis:
    """A NaN or inf after train_step (worker.first_non_finite on `rank`, the first that has
    one), with the likeliest cause these counts suggest."""
    n = sum(map(sum, counts))
    empty = [
        f"rank {r} microstep {k}"
        for r, row in enumerate(counts)
        for k, c in enumerate(row)
        if c == 0
    ]
    if n == 0:
        cause = (
            "N = 0 here: a division by the zero count (world_size / num_tokens is inf)? "
            "With no labels, skip the step on every rank"
        )
    elif empty:
        cause = f"{', '.join(empty)} held no terms: a mean over nothing, or a division by its 0?"
    else:
        cause = "every microbatch held terms: a log or division of your own, or a learning rate?"
    kind = "NaN" if found["nan"] else "inf"
    same = (
        ". The ranks agree bit for bit: every rank holds the same non-finite update"
        if (agree)
        else ""
    )
    message = (
        f"{scenario}: your update is not finite: after train_step, {found['tensor']} on rank "
        f"{rank} holds {found['values']} {kind} value(s) ({found['tensors']} tensor(s) hold "
        f"NaN or inf). Likely cause: {cause}{same}"
    )
    return _diagnosis(
        "non_finite", message, scenario, rank=rank, tensor=found["tensor"], values=found["values"]
    )


def counts_not_terms(
    scenario: str, given: list[list[int]], terms: list[list[int]], counts_given: str
) -> list[Diagnosis]:
    """--counts (terms) that a microbatch did not get, or --counts-labels that left a
    microbatch holding labels with no terms: said, never silent. [] when neither."""
    cells = [
        (r, k, g, t)
        for r, (g_row, t_row) in enumerate(zip(given, terms))
        for k, (g, t) in enumerate(zip(g_row, t_row))
        if (g != t if counts_given == "terms" else g > 0 and t == 0)
    ]
    if not cells:
        return []
    if counts_given == "terms":
        said = ", ".join(f"rank {r} microstep {k}: {g} asked, {t} held" for r, k, g, t in cells)
        message = (
            f"{scenario}: --counts gives terms, but {said}: more labels than fit off a "
            "sequence's position 0, so the causal shift dropped those at position 0. The "
            "weights are over the terms held"
        )
    else:
        said = ", ".join(
            f"rank {r} microstep {k} ({g} label{'s' if g != 1 else ''})" for r, k, g, _ in cells
        )
        message = (
            f"{scenario}: --counts-labels placed labels, but {said} holds no terms: every "
            "label sits at a sequence's position 0, which a causal shift drops. The microbatch "
            "is empty here; use --counts to give terms"
        )
    cells_out = [[r, k, g, t] for r, k, g, t in cells]
    return [_diagnosis("counts_not_terms", message, scenario, given=counts_given, cells=cells_out)]
