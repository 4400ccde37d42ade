"""sentence-transformers 6.2.0, MultipleNegativesRankingLoss(gather_across_devices=True): each
rank's K microbatches are its one per-device batch; the library all-gathers every rank's
embeddings with their gradient (torch.distributed.nn.all_gather) and scores this rank's anchors
against every rank's positives; torch DDP averages the gradients over the ranks.

    pclab check examples/frameworks/sentence_transformers/sbert_mnrl_gather.py --json
"""

from pathlib import Path

from sbert_model import build_model, embed, embedding_loss, make_microbatch, step_on_batch

ADAPTER = Path(__file__).stem  # its name in the tests' evidence
__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    options = {"gather_across_devices": True}
    step_on_batch(
        ADAPTER, model, optimizer, microbatches, "MultipleNegativesRankingLoss", **options
    )
