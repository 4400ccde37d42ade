"""What the run-mode framework adapters (run_*.py in accelerate/, lightning/, hf_trainer/,
deepspeed/, trl/, sentence_transformers/) share besides their model: the intended schedule,
the resume adapters' optimizer, and the check's epochs as ONE dataset a framework iterates
once per epoch itself.

The run mode hands `train_loop` a list of epochs whose microbatches differ from one epoch to
the next. A framework loop walks one DataLoader `num_epochs` times, and tells its sampler or
dataset which epoch starts (`set_epoch`, as it does for DistributedSampler's shuffling):
`EpochData` serves epoch e's items after `set_epoch(e)`, so the framework's own epoch counter
picks the data, and each epoch ends where the framework's dataloader ends. A framework that
takes only its own dataset type gets every epoch's rows stacked in one dataset, and `EpochRows`,
a sampler, makes the same switch. Nothing here cuts a window: every adapter leaves that to its
framework.

Nothing here imports a framework.
"""

import torch


def make_optimizer(params):
    """The resume adapters' (run_resume_*.py) optimizer: AdamW, as
    examples/trainers/run_resume_correct.py's, whose step count shows a lost optimizer state."""
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def make_scheduler(optimizer, num_updates):
    """The intended schedule: the rate falls linearly from its start towards 0 over the run
    (never reaching it: 1 - s / (num_updates + 1)), as examples/trainers/run_loop.py's."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / (num_updates + 1))


class EpochData(torch.utils.data.Dataset):
    """items[e][i]: the i-th item of epoch e; the epoch served is the last `set_epoch`'s
    (0 before any). Every epoch must hold as many items (the check's do)."""

    def __init__(self, items):
        if len({len(epoch) for epoch in items}) != 1:
            raise ValueError("every epoch must hold as many items")
        self.items, self.epoch, self.epochs_set = items, 0, []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.epochs_set.append(epoch)  # evidence: the framework itself moved to the next epoch

    def __len__(self) -> int:
        return len(self.items[0])

    def __getitem__(self, i):
        return self.items[self.epoch][i]


class EpochSampler(torch.utils.data.SequentialSampler):
    """In order, and passing the framework's `set_epoch` on to its EpochData (Lightning calls
    set_epoch on a DataLoader's sampler only)."""

    def set_epoch(self, epoch: int) -> None:
        self.data_source.set_epoch(epoch)


class EpochRows(torch.utils.data.Sampler):
    """In order, the row numbers of the epoch served, for a framework that takes only its own
    dataset type (sentence-transformers' trainer: a `datasets.Dataset`, whose Arrow rows cannot
    change from one epoch to the next). That dataset holds every epoch's rows stacked, epoch
    e's i-th row at e * length + i; this sampler serves epoch e's numbers after `set_epoch(e)`,
    which Accelerate's DataLoaderShard passes to the sampler inside a batch sampler: the
    framework's own epoch counter still picks the data. Its EpochData keeps the evidence
    (`epochs_set`)."""

    def __init__(self, epochs: int, length: int):
        self.data = EpochData([range(e * length, (e + 1) * length) for e in range(epochs)])

    def set_epoch(self, epoch: int) -> None:
        self.data.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        return iter(self.data.items[self.data.epoch])


def rows(microbatch) -> list[dict]:
    """A microbatch's rows, one dict per row: a token microbatch's sequences (a DataLoader's
    default collate, or transformers' default_data_collator, stacks BATCH_SIZE of them back into
    it) or a coupled microbatch's items (sentence-transformers' text pairs: {"anchor": text,
    "positive": text}). Every column holds one entry per row."""
    n = len(next(iter(microbatch.values())))
    return [{k: column[i] for k, column in microbatch.items()} for i in range(n)]


def global_rows(epochs) -> list[list[dict]]:
    """GLOBAL_BATCH epochs ([epoch][rank][microbatch]) as each epoch's rows in the order
    Accelerate's sharded DataLoader (batch i to process i mod P, `BatchSamplerShard`) hands
    them back: global batch j * P + r is rank r's j-th microbatch (token rows or text pairs,
    `rows`)."""
    return [
        [row for j in range(len(ranks[0])) for rank in ranks for row in rows(rank[j])]
        for ranks in epochs
    ]
