"""The microbatches of a scenario, the same on every rank: the file's make_microbatch, or
deterministic random tokens with exactly the counted labels a cell asks for (every mode's
`<mode>_rank.batches` builds its grid with these)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import torch

from pclab.experiments.trainer_check.scenarios import OFF_FIRST_POSITION
from pclab.experiments.trainer_check.trainer import Trainer

IGNORE = -100  # a position that does not count (the Hugging Face convention)
Batch = dict[str, Any]  # one microbatch: whatever the file's token_losses reads


def microbatch(
    trainer: Trainer, scenario: str, rank: int, step: int, valid: int, off_first: bool = False
) -> Batch:
    """The file's make_microbatch(valid, generator) when it has one; else deterministic random
    tokens with exactly `valid` counted label positions, never at position 0 of a sequence
    when the file sets FIRST_POSITION_LABELLED = False or `off_first` asks (and it fits)."""
    seed = zlib.crc32(f"{scenario}:{rank}:{step}".encode())
    gen = torch.Generator().manual_seed(seed)
    if trainer.has("make_microbatch"):
        batch = trainer.call("make_microbatch", valid, gen)
        if not isinstance(batch, dict):
            raise ValueError(f"make_microbatch returned {type(batch).__name__}: it must be a dict")
        made: Batch = batch
        return made
    shape = (trainer.batch_size, trainer.seq_len)
    input_ids = torch.randint(0, trainer.vocab_size, shape, generator=gen)
    targets = torch.randint(0, trainer.vocab_size, shape, generator=gen)
    columns = trainer.labelled_columns
    if off_first and trainer.seq_len >= 2 and valid <= trainer.batch_size * (trainer.seq_len - 1):
        columns = trainer.seq_len - 1
    counted = torch.randperm(trainer.batch_size * columns, generator=gen)[:valid]
    skipped = trainer.seq_len - columns  # 1: column 0 never holds a label
    counted = counted + skipped * (counted // columns + 1)
    labels = torch.full((trainer.batch_size * trainer.seq_len,), IGNORE, dtype=torch.long)
    labels[counted] = targets.flatten()[counted]
    return {"input_ids": input_ids, "labels": labels.view(shape)}


def scenario_batches(
    trainer: Trainer, scenario: str, counts: Sequence[Sequence[int]], off_first: bool = False
) -> list[list[Batch]]:
    """Every cell's microbatch, P x K, with counts[r][k] counted labels: every rank builds all
    of them (the reference steps on the whole grid; the user's step takes its own row). Seeded
    by (scenario, rank, microstep), so every rank builds the same grid. Off position 0 where
    they fit for the scenarios of OFF_FIRST_POSITION, or when `off_first` asks (--counts)."""
    off_first = off_first or scenario in OFF_FIRST_POSITION
    return [
        [microbatch(trainer, scenario, r, k, n, off_first) for k, n in enumerate(row)]
        for r, row in enumerate(counts)
    ]


def labels_at_first_position(batch: Batch) -> int:
    """Counted labels at position 0 of a sequence: a causal LM's shift drops exactly these."""
    labels = batch.get("labels")
    if not isinstance(labels, torch.Tensor) or labels.dim() != 2:
        return 0
    return int((labels[:, 0] != IGNORE).sum())
