"""sentence-transformers 6.2.0, MultipleNegativesRankingLoss with its defaults and naive
gradient accumulation: one microbatch per microstep (per_device_train_batch_size = its items,
gradient_accumulation_steps = K), each loss divided by K and back-propagated under DDP's no_sync
but the last, as the transformers Trainer under SentenceTransformerTrainer does: its collator
puts no "labels" in a batch (a label column becomes "label"), so Trainer counts no
num_items_in_batch and divides each loss by K (transformers 5.24.0, Trainer.training_step); one
optimizer step. Accumulation does not enlarge the pool of negatives (sentence-transformers
#2916).

    pclab check examples/frameworks/sentence_transformers/sbert_mnrl_accumulate.py --json
"""

from contextlib import nullcontext
from pathlib import Path

from sbert_model import (
    build_model,
    counting_forwards,
    embed,
    embedding_loss,
    evidence,
    features,
    make_microbatch,
    wrapped,
)

ADAPTER = Path(__file__).stem  # its name in the tests' evidence
__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    ddp = wrapped(model)
    loss = MultipleNegativesRankingLoss(model)  # gather_across_devices=False, the default
    loss.model = ddp
    rows, handle = counting_forwards(model)
    optimizer.zero_grad()
    k = len(microbatches)
    for step, mb in enumerate(microbatches):
        last = step == k - 1
        with nullcontext() if last else ddp.no_sync():
            columns = [features(model, mb[c]) for c in ("anchor", "positive")]
            (loss(columns, None) / k).backward()
    optimizer.step()
    handle.remove()
    evidence(ADAPTER, loss, ddp, rows, k)
