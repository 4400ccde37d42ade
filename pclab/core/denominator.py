"""What counts in N, and the other legitimate objective (every sequence weighted equally).

A microbatch window holds `positions` token slots. Padding and a masked prompt occupy
slots but carry no label; labels lost to truncation never reached the window at all.
Only the remaining supervised positions count:

    n_rk = positions - padding - prompt          (truncated labels: not in the window)

The token-mean objective weights every valid label by 1/N. The sequence-mean objective
is a different, equally legitimate choice: each labelled sequence b gets total weight 1/B
(B = number of sequences with at least one label), spread over its n_b labels:

    L_seq = (1/B) sum_b S_b / n_b   ->   per-label weight 1 / (B n_b).
"""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import validation as v


@dataclass(frozen=True)
class LabelCount:
    positions: int
    padding: int
    prompt: int
    truncated: int
    valid: int  # what enters N


def count_valid_labels(positions: int, padding: int, prompt: int, truncated: int = 0) -> LabelCount:
    """Valid labels of one window: its positions minus padding and masked prompt.

    `truncated` is reported for the table only: those labels were cut before the window
    existed, so they never count, whatever the input length was.
    """
    positions = v.count(positions, "positions")
    padding = v.count(padding, "padding")
    prompt = v.count(prompt, "prompt")
    truncated = v.count(truncated, "truncated")
    if padding + prompt > positions:
        raise v.InvalidInput(
            "padding + prompt",
            padding + prompt,
            "in_range",
            code="up_to",
            high=positions,
            of="positions",
        )
    return LabelCount(positions, padding, prompt, truncated, positions - padding - prompt)


@dataclass(frozen=True)
class SequenceObjective:
    labelled_sequences: int  # B: sequences with at least one label
    per_label_weights: tuple[float | None, ...]  # 1 / (B n_b); None for an unlabelled sequence
    sequence_shares: tuple[float | None, ...]  # 1 / B each; None for an unlabelled sequence


def sequence_mean_weights(label_counts: object) -> SequenceObjective | None:
    """Weights of the sequence-mean objective for sequences with `label_counts` labels.

    A sequence with no label has no mean: it is left out of B (weight `None`, not 0).
    Returns `None` when no sequence has a label: that objective is undefined too.
    """
    if not isinstance(label_counts, (list, tuple)) or not label_counts:
        raise v.InvalidInput("label_counts", label_counts, "non_empty")
    counts = tuple(v.count(c, f"label_counts[{i}]") for i, c in enumerate(label_counts))
    labelled = sum(1 for c in counts if c)
    if labelled == 0:
        return None
    return SequenceObjective(
        labelled_sequences=labelled,
        per_label_weights=tuple(1 / (labelled * c) if c else None for c in counts),
        sequence_shares=tuple(1 / labelled if c else None for c in counts),
    )
