"""The lab's tiny causal Transformer: float64, no dropout, 298,176 parameters.

    vocabulary 387 (byte-level BPE), context 96, width 96, 2 pre-norm blocks,
    4 heads of 24, MLP 4x with GELU, rotary positions (no position table),
    untied output head without bias.

Parameter count (every Linear has a bias except the head; LayerNorms have weight + bias):
    token embedding        387 * 96               =  37,152
    per block  qkv         96 * 288 + 288         =  27,936
               proj        96 * 96 + 96           =   9,312
               fc          96 * 384 + 384         =  37,248
               fc2         384 * 96 + 96          =  36,960
               2 LayerNorms 2 * 2 * 96            =     384   -> 111,840 per block
    2 blocks                                      = 223,680
    final LayerNorm                               =     192
    head                   96 * 387               =  37,152
    total                                         = 298,176

Rotary positions keep the count equal to the seed's 298,176 without a position table.
Attention is written out (no fused kernel) so every operation is plain and deterministic
on the CPU; padding sits at the end of a window and causal attention never lets a real
position see it.

    python -c "from pclab.experiments.transformer.lm import model; print(model.TinyLM())"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

DTYPE = torch.float64
IGNORE = -100  # target id of a position that carries no label


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 387
    context: int = 96
    d_model: int = 96
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    rope_base: float = 10000.0
    init_std: float = 0.02


def _rotary_tables(config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of angle p * base^(-2i/d_head) for position p and frequency pair i."""
    head_dim = config.d_model // config.n_heads
    inv_freq = config.rope_base ** (-torch.arange(0, head_dim, 2, dtype=DTYPE) / head_dim)
    angles = torch.arange(config.context, dtype=DTYPE)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) pair of the last dimension by its position's angle."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d, hidden = config.d_model, config.d_model * config.mlp_ratio
        self.n_heads = config.n_heads
        self.ln1 = nn.LayerNorm(d, dtype=DTYPE)
        self.qkv = nn.Linear(d, 3 * d, dtype=DTYPE)
        self.proj = nn.Linear(d, d, dtype=DTYPE)
        self.ln2 = nn.LayerNorm(d, dtype=DTYPE)
        self.fc = nn.Linear(d, hidden, dtype=DTYPE)
        self.fc2 = nn.Linear(hidden, d, dtype=DTYPE)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(batch, length, self.n_heads, -1).transpose(1, 2) for z in (q, k, v))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        attended = (weights @ v).transpose(1, 2).reshape(batch, length, d)
        x = x + self.proj(attended)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, config: ModelConfig = ModelConfig()) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model, dtype=DTYPE)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model, dtype=DTYPE)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False, dtype=DTYPE)
        cos, sin = _rotary_tables(config)
        # Buffers, not parameters: derived from the config, never saved or trained.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_weights(self, seed: int) -> None:
        """N(0, init_std) for matrices and embeddings, zero biases, unit LayerNorm weights."""
        generator = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, self.config.init_std, generator=generator)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (batch, length, vocab) for token ids (batch, length), length <= context."""
        length = ids.shape[1]
        cos, sin = self.rope_cos[:length], self.rope_sin[:length]
        x = self.tok_emb(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.ln_f(x))


def loss_sum(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """S = sum over labelled positions of -log p(target); positions with IGNORE add nothing.

    A batch without any label returns a zero that is still connected to the graph, so
    back-propagating it gives exact zero gradients (the naive N = 0 path uses that).
    """
    logits = model(inputs)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=IGNORE,
        reduction="sum",
    )
