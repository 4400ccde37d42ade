"""A trainer file without train_step (for the check's exit-2 path)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, token_losses  # noqa: E402

__all__ = ["VOCAB_SIZE", "build_model", "token_losses"]
