"""The GPT, declared without a framework: its dimensions as the model's options, its named sizes,
and its parameter count and forward FLOPs as functions of them.

A GPT here is nanoGPT's (Karpathy, after GPT-2): token and position embeddings, ``n_layer``
pre-norm blocks (LayerNorm, causal self-attention of ``n_head`` heads, LayerNorm, an MLP of
``mlp_ratio * n_embd`` with exact GELU), a final LayerNorm and a linear head onto the
vocabulary, tied to the token embedding unless ``tie_embeddings`` is off. Every framework's twin
(``frameworks/<framework>/models/gpt.py`` or ``gpt.py``) builds this one architecture with
these options, from the same initial weights (the torch twin's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.options import declared, setting


@dataclass(frozen=True)
class GPTOptions:
    """A GPT's dimensions (the defaults: ``gpt-mini``; each named size has its own)."""

    n_layer: int = setting(6, "transformer blocks", minimum=1)
    n_head: int = setting(8, "attention heads per block (must divide n_embd)", minimum=1)
    n_embd: int = setting(256, "width: the embedding and residual dimension", minimum=1)
    block_size: int = setting(256, "context: tokens per sequence (one sample)", minimum=1)
    vocab_size: int = setting(
        256,
        "vocabulary with random tokens or a token-file (python-source: its 256 bytes)",
        minimum=2,
    )
    mlp_ratio: int = setting(4, "MLP hidden width over n_embd", minimum=1)
    tie_embeddings: bool = setting(True, "the output head shares the token embedding")
    bias: bool = setting(True, "biases in the linear layers and LayerNorms (GPT-2: true)")


SIZES: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt": ("a GPT of any size: set n_layer, n_head, n_embd, block_size... (gpt-mini's)", {}),
    "gpt-mini": (
        "GPT for CPUs and tests: 6 layers, 8 heads, width 256, context 256, bytes (torchtitan's "
        "debug size)",
        {},
    ),
    "gpt-nano": (
        "nanoGPT's CPU run: 4 layers, 4 heads, width 128, context 64, bytes",
        {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64},
    ),
    "nanogpt-char": (
        "nanoGPT's Shakespeare-char model: 6 layers, 6 heads, width 384, context 256",
        {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "vocab_size": 65},
    ),
    "gpt2-small": (
        "GPT-2 small (124 M parameters): 12 layers, 12 heads, width 768, context 1024, "
        "GPT-2's vocabulary of 50,257 (for GPUs)",
        {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "vocab_size": 50257},
    ),
}
"""Each named GPT: its description and the dimensions that differ from gpt-mini's."""


def options_of(size: str) -> tuple[Any, ...]:
    """The size's options: GPT's, with the size's dimensions as their defaults."""
    changes = SIZES[size][1]
    return tuple(
        _with_default(option, changes[option.name]) if option.name in changes else option
        for option in declared(GPTOptions)
    )


def _with_default(option: Any, value: Any) -> Any:
    from dataclasses import replace

    return replace(option, default=value)


def dimensions(options: dict[str, Any], size: str = "gpt") -> dict[str, Any]:
    """The resolved dimensions of a GPT under a run's options (the size's defaults filled)."""
    return {o.name: options.get(o.name, o.default) for o in options_of(size)}


def check(values: dict[str, Any]) -> None:
    """What no single option can say: the heads divide the width."""
    if values["n_embd"] % values["n_head"]:
        raise UserError(
            f"n_head = {values['n_head']} does not divide n_embd = {values['n_embd']}: each "
            f"head takes n_embd / n_head dimensions; choose n_head from "
            f"{', '.join(str(h) for h in _divisors(values['n_embd']))}"
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 64) + 1) if n % d == 0]


def parameter_counts(values: dict[str, Any], vocab: int) -> tuple[int, int]:
    """``(params, embedding_params)`` of a GPT of ``values`` over ``vocab`` tokens: every
    trainable parameter (a tied head counted once), and of them the token and position
    embeddings'."""
    d, layers, hidden = values["n_embd"], values["n_layer"], values["mlp_ratio"] * values["n_embd"]
    b = 1 if values["bias"] else 0
    norm = d * (1 + b)
    block = 2 * norm + (d * 3 * d + 3 * d * b) + (d * d + d * b)
    block += (d * hidden + hidden * b) + (hidden * d + d * b)
    embeddings = vocab * d + values["block_size"] * d
    head = 0 if values["tie_embeddings"] else d * vocab
    return embeddings + layers * block + norm + head, embeddings


def forward_flops(values: dict[str, Any], vocab: int) -> int:
    """FLOPs (a multiply-add is 2) of one forward pass of one sequence of ``block_size``
    tokens: the matrix products of every linear layer and the head, and attention's two
    products (scores and weighted values) over the whole ``T x T`` square, not halved for the
    causal mask, as nanoGPT and PaLM count them. Embedding lookups, LayerNorms, GELU and
    softmax are not counted."""
    d, layers, t = values["n_embd"], values["n_layer"], values["block_size"]
    hidden = values["mlp_ratio"] * d
    per_token = layers * (d * 3 * d + d * d + 2 * d * hidden) + d * vocab
    return 2 * per_token * t + layers * 4 * t * t * d


def sizes(values: dict[str, Any]) -> tuple[int, int, int]:
    """``(params, embedding_params, forward_flops_per_sample)`` of a GPT of ``values``."""
    vocab = int(values["vocab_size"])
    return (*parameter_counts(values, vocab), forward_flops(values, vocab))
