"""The training loop of transformers' `run_clm_no_trainer.py` example, fed padded, masked data:
`Accelerator(gradient_accumulation_steps=K)`, the training DataLoader (`default_data_collator`)
prepared by Accelerate, and per batch, inside `accelerator.accumulate(model)`:
`outputs = model(**batch)`, `loss = outputs.loss`, `accelerator.backward(loss)`,
`optimizer.step()`, `lr_scheduler.step()`, `optimizer.zero_grad()`. The loop is
huggingface/transformers examples/pytorch/language-modeling/run_clm_no_trainer.py at commit
3e93524a13cf090daed5f0398f4f756d4390e27a (its `for step, batch in enumerate(active_dataloader)`
loop); it is driven here, not copied: the calls above are its calls, in its order.

    pclab check examples/frameworks/accelerate/clm_no_trainer_padded.py --json

The example's own data (`group_texts`: blocks of block_size tokens, labels = input_ids) give
every microbatch the same number of terms, so the mean of each microbatch's `outputs.loss` is
the global token mean on them. This adapter swaps in what people commonly do next: documents
of their own lengths, right-padded to SEQ_LEN, pads masked (attention_mask 0, label -100), as
a padding collator makes them. `outputs.loss` is then each microbatch's own mean.

What differs from the script, each because one checkable update needs it:
- the model is hf_trainer.py's tiny Llama (from a config, float64) and the optimizer the one
  the check hands in (SGD), not AdamW from a checkpoint; the schedule is the script's
  `get_scheduler("linear", num_warmup_steps=0, ...)`, whose first step has the full rate;
- the DataLoader is not shuffled, and it holds every rank's microbatches (gathered with
  all_gather_object), ordered so that Accelerate's sharding (batch i to process i mod P) hands
  each rank back its own K, in order: the check gives each rank its microbatches, the script's
  prepared DataLoader splits one global dataset itself (issue 29 item 5; today's workaround).

transformers and accelerate are imported inside the functions: only the ranks pay for them.
"""

import sys
from pathlib import Path

import torch
from accelerate_accumulate import accelerator_for, evidence

# the neighbours of other folders: hf_trainer.py (the Trainer adapter) in ../hf_trainer/,
# framework_lm.py (the model and evidence most adapters share) in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf_trainer"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import IGNORE, StepCounter, record  # noqa: E402
from hf_trainer import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "FIRST_POSITION_LABELLED"]
__all__ += ["build_model", "make_microbatch", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record
FIRST_POSITION_LABELLED = False  # a causal LM: a row of t + 1 tokens holds t terms
PAD = 0  # the pad token: attention_mask 0, label -100


def make_microbatch(n_terms, generator):
    """BATCH_SIZE right-padded rows holding n_terms terms between them: a row of t terms is
    t + 1 real tokens (labels = input_ids there, as the example's data have them), then pads;
    a row without terms keeps one real token."""
    terms = [n_terms // BATCH_SIZE + (i < n_terms % BATCH_SIZE) for i in range(BATCH_SIZE)]
    input_ids = torch.full((BATCH_SIZE, SEQ_LEN), PAD, dtype=torch.long)
    real = torch.zeros((BATCH_SIZE, SEQ_LEN), dtype=torch.bool)
    for row, t in enumerate(terms):  # t = 0: one real token (an all-pad row is NaN in eager
        input_ids[row, : t + 1] = torch.randint(1, VOCAB_SIZE, (t + 1,), generator=generator)
        real[row, : t + 1] = True  # attention's softmax, and NaN x 0 is NaN in the backward)
    labels = torch.where(real, input_ids, torch.full_like(input_ids, IGNORE))
    return {"input_ids": input_ids, "attention_mask": real.long(), "labels": labels}


def global_rows(microbatches) -> list[dict]:
    """Every rank's rows, in the order Accelerate's sharded DataLoader hands them back: batch
    k * P + r is rank r's k-th microbatch."""
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, microbatches)
    return [
        {key: t[i] for key, t in ranks[k].items()}
        for k in range(len(microbatches))
        for ranks in gathered
        for i in range(BATCH_SIZE)
    ]


def train_step(model, optimizer, microbatches):
    """One update by run_clm_no_trainer.py's loop over this rank's K microbatches."""
    from transformers import default_data_collator, get_scheduler

    accelerator = accelerator_for(len(microbatches))
    loader = torch.utils.data.DataLoader(
        global_rows(microbatches), collate_fn=default_data_collator, batch_size=BATCH_SIZE
    )
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=1)
    counter = StepCounter(optimizer)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    grad_sync, served = [], []
    for batch in loader:
        served.append(int((batch["labels"][:, 1:] != IGNORE).sum()))
        with accelerator.accumulate(model):
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            grad_sync.append(model.require_backward_grad_sync)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    found = evidence(accelerator, model, optimizer, counter, grad_sync)
    record(ADAPTER, **found, terms_served=served)
