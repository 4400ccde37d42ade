"""Wrong: accumulation without a gather. Each microbatch's loss sees only its own
documents as negatives, divided by K, and DDP averages over the ranks: the objective is
the mean of every microbatch's own loss (microbatch_pool), not the global batch's."""

from tiny_embedder import average_gradients, build_model, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    for mb in microbatches:
        queries, documents = embed(model, mb)
        (embedding_loss(model, queries, documents) / len(microbatches)).backward()
    average_gradients(model)
    optimizer.step()
