"""Correct, with a symmetric CLIP loss (a test file): gradcache.py's step over a loss that
scores queries against documents and documents against queries. That loss needs as many
documents as queries, so the gradient paths (extra negatives) cannot be computed: the check
names the pools and says so (candidate_left_out)."""

import sys
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "trainers"))
import gradcache  # noqa: E402
from tiny_embedder import build_model, embed, make_microbatch  # noqa: E402, F401

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def embedding_loss(model, queries, documents):
    logits = queries @ documents.T * model.logit_scale.exp()
    labels = torch.arange(len(queries))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


gradcache.embedding_loss = embedding_loss  # its GradCache step, over this loss
train_step = gradcache.train_step
