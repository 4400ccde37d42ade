"""Lets the broken trainers here reuse the bundled examples: the tiny models of
examples/trainers/, and the two framework adapters some of them change (the Trainer's and
OpenCLIP's, from examples/frameworks/)."""

import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
for folder in ("frameworks/openclip", "frameworks/hf_trainer", "trainers"):  # trainers/ first
    sys.path.insert(0, str(EXAMPLES / folder))
