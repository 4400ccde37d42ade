"""Wrong: each rank averages over its OWN labels, then DDP averages the ranks. A token on a
rank with few labels weighs more: weight x N = N / (P n_r) (the 'replica_mean' scheme)."""

from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses
from torch.nn.parallel import DistributedDataParallel as DDP

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    ddp = DDP(model)
    local = max(count_labels(microbatches), 1)  # the local count (the bug), guarded against 0
    optimizer.zero_grad()
    loss = sum(token_losses(ddp, mb).sum() for mb in microbatches) / local
    loss.backward()  # DDP's mean over ranks
    optimizer.step()
