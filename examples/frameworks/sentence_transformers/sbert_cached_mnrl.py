"""sentence-transformers 6.2.0, CachedMultipleNegativesRankingLoss (GradCache) with its
defaults (gather_across_devices=False): each rank's K microbatches are its one per-device batch,
embedded mini-batch by mini-batch without a graph (mini_batch_size: the largest microbatch), the
loss taken over the whole batch and its gradient pushed back one mini-batch at a time (the
library's backward hook, DDP's no_sync until the last); torch DDP averages over the ranks.

    pclab check examples/frameworks/sentence_transformers/sbert_cached_mnrl.py --json
"""

from pathlib import Path

from sbert_model import build_model, embed, embedding_loss, make_microbatch, step_on_batch

ADAPTER = Path(__file__).stem  # its name in the tests' evidence
__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    options = {
        "gather_across_devices": False,  # the default, said aloud
        "mini_batch_size": max(len(mb["anchor"]) for mb in microbatches),
    }
    step_on_batch(
        ADAPTER, model, optimizer, microbatches, "CachedMultipleNegativesRankingLoss", **options
    )
