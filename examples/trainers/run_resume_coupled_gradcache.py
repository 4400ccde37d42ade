"""A resumable contrastive loop, done right: run_coupled_gradcache.py's loop (one GradCache
update a window, the tail too), and after every update rank 0 saves the model, the optimizer
(AdamW: its moments and step count), the scheduler and the position in the data (the next
window of the next epoch) to checkpoint_dir, as run_resume_correct.py does; at start a
checkpoint found there is restored and the windows it already stepped are skipped. A run
stopped anywhere, even in the middle of a window, restarts that window from its start: the
same run."""

import os

from gradcache import train_step
from run_coupled_gradcache import make_optimizer, make_scheduler
from run_resume_correct import CHECKPOINT, restore, save
from tiny_embedder import build_model, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "make_optimizer"]
__all__ += ["make_scheduler", "train_loop"]


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    path = os.path.join(checkpoint_dir, CHECKPOINT)
    updates = sum(-(-len(epoch) // accum_steps) for epoch in epochs)  # tails count
    scheduler = make_scheduler(optimizer, updates)
    start = restore(path, model, optimizer, scheduler)
    for e, epoch in enumerate(epochs):
        for w, first in enumerate(range(0, len(epoch), accum_steps)):
            if (e, w) < start:
                continue  # stepped before the restart
            train_step(model, optimizer, epoch[first : first + accum_steps])  # one pool
            scheduler.step()
            save(path, model, optimizer, scheduler, (e, w + 1))
