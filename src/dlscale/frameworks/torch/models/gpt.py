"""The PyTorch GPT (:mod:`dlscale.contract.gpt` declares it): nanoGPT's model, in the parameter
names every other framework's twin maps from.

Attention is PyTorch's ``scaled_dot_product_attention`` with ``is_causal=True`` (the fused
kernel where the device has one). Initialization is nanoGPT's: every linear and embedding
weight drawn from N(0, 0.02), the residual projections' (``attn.c_proj``, ``mlp.c_proj``) from
N(0, 0.02 / sqrt(2 * n_layer)), biases zero, LayerNorms one and zero.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPT", "gpt"]

INIT_STD = 0.02


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, bias: bool, dropout: float) -> None:
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, time, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(batch, time, width)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd: int, hidden: int, bias: bool, dropout: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, hidden, bias=bias)
        self.c_proj = nn.Linear(hidden, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, n_embd: int, n_head: int, hidden: int, bias: bool, dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, bias, dropout)
        self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = MLP(n_embd, hidden, bias, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token ids ``(B, T)`` in, logits over the vocabulary ``(B, T, vocab)`` out."""

    def __init__(
        self,
        vocab_size: int,
        *,
        n_layer: int,
        n_head: int,
        n_embd: int,
        block_size: int,
        mlp_ratio: int = 4,
        tie_embeddings: bool = True,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(
            Block(n_embd, n_head, mlp_ratio * n_embd, bias, dropout) for _ in range(n_layer)
        )
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.apply(_init)
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=INIT_STD / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        time = idx.shape[1]
        if time > self.block_size:
            raise ValueError(f"a sequence of {time} tokens is longer than block_size")
        position = torch.arange(time, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(position))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)


def gpt(num_classes: int, **dimensions: object) -> GPT:
    """A GPT over ``num_classes`` tokens with the run's dimensions
    (:class:`dlscale.contract.gpt.GPTOptions`) and dropout."""
    return GPT(num_classes, **dimensions)  # type: ignore[arg-type]
