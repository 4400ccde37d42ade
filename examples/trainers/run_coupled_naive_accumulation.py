"""Wrong twice across a run, for a contrastive loss: each microstep's loss, over a pool gathered
from every rank at that microstep only (naive_accumulation_gather.py's step), is divided by
accum_steps and back-propagated, one optimizer step per window. Every full window optimises
each microstep's pool (microstep_pool: accumulation does not enlarge the pool), and the
epoch's tail, one microbatch long, steps at 1/K of its own update (tail_window_scaled): it is
divided by K, not by the microsteps it holds."""

from gather_with_grad import gathered_loss
from run_coupled_gradcache import make_optimizer, make_scheduler
from tiny_embedder import average_gradients, build_model, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "make_optimizer"]
__all__ += ["make_scheduler", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps):
    updates = sum(-(-len(epoch) // accum_steps) for epoch in epochs)
    scheduler = make_scheduler(optimizer, updates)
    for epoch in epochs:
        for start in range(0, len(epoch), accum_steps):
            optimizer.zero_grad()
            for microbatch in epoch[start : start + accum_steps]:
                (gathered_loss(model, [microbatch]) / accum_steps).backward()  # / K, always
            average_gradients(model)
            optimizer.step()
            scheduler.step()
