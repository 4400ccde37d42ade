"""What a room answered to one exercise: how many, the spread, and (after Reveal) how many
were right. Pure functions over the predictions the store read; no SQLite here.

A number counts as right when it lies within the exercise's tolerance of the answer, relative
to the answer's size (`WITHIN`, 5 %, unless the exercise asks for an exact count; an answer of
0 asks for 0 exactly); a decision when it is the answer. An undefined answer (`None`: core's
"undefined", never 0) makes every number wrong. `is_right` is the one rule: the room's tally
and the participant's own page (ui.exercise) both ask it.

    python -c "from pclab.rooms.tally import summarise; print(summarise([0.4, 0.5], 0.4))"
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

WITHIN = 0.05  # an exercise's default tolerance: "within 5%" on Reveal, room and page alike


@dataclass(frozen=True)
class Tally:
    """One exercise's predictions in one room, for one scenario.

    `numbers`: the numeric predictions, sorted; `choices`: (option, how many) in the order
    the page offers them; `answer`/`right`: set once the exercise was revealed."""

    answered: int
    participants: int
    numbers: tuple[float, ...] = ()
    choices: tuple[tuple[str, int], ...] = ()
    revealed: bool = False
    answer: float | str | None = None
    right: int | None = None


def is_right(
    prediction: float | str, answer: float | str | None, tolerance: float = WITHIN
) -> bool:
    """A number within `tolerance` of the answer, relative (|p - a| <= tolerance |a|; 0: the
    answer exactly), or the answer's option."""
    if answer is None or isinstance(answer, str) or isinstance(prediction, str):
        return prediction == answer and answer is not None
    return math.isfinite(prediction) and abs(prediction - answer) <= tolerance * abs(answer)


def summarise(
    predictions: Sequence[float | str],
    answer: float | str | None = None,
    tolerance: float = WITHIN,
    *,
    revealed: bool = False,
    participants: int = 0,
    options: Sequence[str] = (),
) -> Tally:
    """The room's tally: counts per option (every offered option, zeros included) or the
    sorted numbers, and after Reveal how many were right.

    Args:
        predictions: one per participant who answered (numbers, or option codes).
        answer: the figure core computed for the scenario (None: undefined).
        tolerance: the exercise's (is_right), so the room counts as its page grades.
        revealed: whether the presenter has revealed it; `right` is None until then.
        participants: how many have joined the room (answered or not).
        options: a decision's options, in the page's order.
    """
    numbers = tuple(sorted(p for p in predictions if not isinstance(p, str)))
    counted = Counter(p for p in predictions if isinstance(p, str))
    choices = tuple((option, counted.get(option, 0)) for option in options)
    right = sum(is_right(p, answer, tolerance) for p in predictions) if revealed else None
    return Tally(
        answered=len(predictions),
        participants=max(participants, len(predictions)),
        numbers=numbers,
        choices=choices,
        revealed=revealed,
        answer=answer if revealed else None,
        right=right,
    )
