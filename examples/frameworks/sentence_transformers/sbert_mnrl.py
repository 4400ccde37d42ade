"""sentence-transformers 6.2.0, MultipleNegativesRankingLoss with its defaults
(gather_across_devices=False): each rank's K microbatches are its one per-device batch, its
anchors scored against its own positives only; torch DDP averages the gradients over the ranks.

    pclab check examples/frameworks/sentence_transformers/sbert_mnrl.py --json

The model and the check's objective (the library's loss on the rows given) are sbert_model.py's.
"""

from pathlib import Path

from sbert_model import build_model, embed, embedding_loss, make_microbatch, step_on_batch

ADAPTER = Path(__file__).stem  # its name in the tests' evidence
__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    options = {"gather_across_devices": False}  # the default, said aloud
    step_on_batch(
        ADAPTER, model, optimizer, microbatches, "MultipleNegativesRankingLoss", **options
    )
