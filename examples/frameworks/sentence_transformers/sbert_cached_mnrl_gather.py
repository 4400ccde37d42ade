"""sentence-transformers 6.2.0, CachedMultipleNegativesRankingLoss (GradCache) with
gather_across_devices=True: as sbert_cached_mnrl.py, and the cached embeddings of every rank
are all-gathered with their gradient before the loss, so each rank's anchors meet every rank's
positives; torch DDP averages the gradients over the ranks.

    pclab check examples/frameworks/sentence_transformers/sbert_cached_mnrl_gather.py --json
"""

from pathlib import Path

from sbert_model import build_model, embed, embedding_loss, make_microbatch, step_on_batch

ADAPTER = Path(__file__).stem  # its name in the tests' evidence
__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    options = {
        "gather_across_devices": True,
        "mini_batch_size": max(len(mb["anchor"]) for mb in microbatches),
    }
    step_on_batch(
        ADAPTER, model, optimizer, microbatches, "CachedMultipleNegativesRankingLoss", **options
    )
