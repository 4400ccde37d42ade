"""sentence-transformers 6.2.0, MultipleNegativesRankingLoss(gather_across_devices=True) with
naive gradient accumulation: one microbatch per microstep, each loss divided by K and
back-propagated under DDP's no_sync but the last (as SentenceTransformerTrainer's Trainer
does), one optimizer step. The gather pools every rank's embeddings of the SAME microstep,
so accumulation still does not enlarge the pool (sentence-transformers #2916: the setting its
users try, expecting K times the negatives).

    pclab check examples/frameworks/sentence_transformers/sbert_mnrl_gather_accumulate.py --json
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
    loss = MultipleNegativesRankingLoss(model, gather_across_devices=True)
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
