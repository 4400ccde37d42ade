"""Plain PyTorch FSDP2, written wrong the common way: each rank divides its summed loss by its
OWN label count over the K microbatches, and FSDP2 averages the ranks — DDP's mean of local
means, weight × N = N ÷ (P·n_r). Everything else is fsdp2_global_tokens.py's (the sharding,
the optimizer built after it, gradient sync on the last microstep, full_parameters).

    pclab check examples/frameworks/fsdp2/fsdp2_local_mean.py --json
"""

import sys
from pathlib import Path

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_terms, token_losses  # noqa: E402
from fsdp2_global_tokens import fsdp_step, full_parameters  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "full_parameters"]
__all__ += ["token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def local_count(microbatches):
    """n_r: this rank's own terms (the bug), 1 when it has none (every rank must take part)."""
    return max(count_terms(microbatches), 1)


def train_step(model, optimizer, microbatches):
    """One FSDP2 update on the mean of the ranks' local means."""
    fsdp_step(model, optimizer, microbatches, local_count, ADAPTER)
