"""Wrong at K > 1: accumulation with a gradient-carrying gather per microbatch (the correct
K = 1 step of gather_with_grad.py, once per microstep). Each microstep's pool holds every
rank's items of that microstep, never the other microsteps': accumulation does not enlarge
the pool (sentence-transformers #2916); GradCache does."""

from gather_with_grad import gathered_loss
from tiny_embedder import average_gradients, build_model, embed, embedding_loss, make_microbatch  # noqa: F401

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    for mb in microbatches:  # one gather, one pool, per microstep
        (gathered_loss(model, [mb]) / len(microbatches)).backward()
    average_gradients(model)
    optimizer.step()
