"""The Flax (Linen) twin of the GPT (:mod:`dlscale.contract.gpt` declares it;
:mod:`dlscale.frameworks.torch.models.gpt` is the reference): nanoGPT's model with PyTorch's
parameter names and layouts, so the PyTorch twin's initial weights load unchanged.

Token and position embeddings (``wte``, ``wpe``: ``weight`` of (rows, width)), ``n_layer``
pre-norm blocks ``h_0 ... h_{n-1}`` (``ln_1``, causal self-attention ``attn`` of ``c_attn`` and
``c_proj``, ``ln_2``, ``mlp`` of ``c_fc``, exact GELU and ``c_proj``), a final ``ln_f`` and the
head onto the vocabulary: ``wte``'s weight where the embeddings are tied (PyTorch's state then
holds ``lm_head.weight`` too, the same tensor: :data:`TIED` names it for the transfer), else
``lm_head`` of its own, without bias. Linear weights are (out, in) as PyTorch's; LayerNorm's eps
is PyTorch's 1e-5, its variance the biased one.

Attention is written out (:func:`causal_attention`): scores scaled by ``1 / sqrt(head
width)``, a lower-triangular mask, softmax over the keys, what PyTorch's
``scaled_dot_product_attention(is_causal=True)`` computes. Not
:func:`jax.nn.dot_product_attention` (``is_causal=True``): in float64 it was 1.7e-7 from
PyTorch's on random (2, 16, 2, 16) inputs (jax 0.10.2), the written-out one 4e-16. Dropout
masks (``dropout > 0`` in training: embeddings, attention weights, residual branches) come from
the ``dropout`` stream of the step's key: they cannot match PyTorch's, as for every twin with
dropout.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

TIED = {"lm_head.weight": "wte.weight"}
"""PyTorch's key of the tied head and the key it shares its tensor with."""

LN_EPS = 1e-5


class Dense(nn.Module):
    """``torch.nn.Linear`` over the last axis: ``weight`` (out, in), ``bias`` where it has one."""

    features: int
    bias: bool = True

    @nn.compact
    def __call__(self, x: Any) -> Any:
        shape = (self.features, x.shape[-1])
        weight = self.param("weight", nn.initializers.zeros, shape, x.dtype)
        out = x @ weight.T
        if self.bias:
            out = out + self.param("bias", nn.initializers.zeros, (self.features,), x.dtype)
        return out


class LayerNorm(nn.Module):
    """``torch.nn.LayerNorm`` over the last axis: ``weight``, ``bias`` where it has one."""

    bias: bool = True

    @nn.compact
    def __call__(self, x: Any) -> Any:
        width = x.shape[-1]
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        out = (x - mean) * jax.lax.rsqrt(var + LN_EPS)
        out = out * self.param("weight", nn.initializers.ones, (width,), x.dtype)
        if self.bias:
            out = out + self.param("bias", nn.initializers.zeros, (width,), x.dtype)
        return out


class Embedding(nn.Module):
    """``torch.nn.Embedding``: ``weight`` (rows, width); :meth:`attend` is the tied head."""

    rows: int
    width: int
    dtype: Any = jnp.float32

    def setup(self) -> None:
        self.weight = self.param(
            "weight", nn.initializers.zeros, (self.rows, self.width), self.dtype
        )

    def __call__(self, ids: Any) -> Any:
        return jnp.take(self.weight, ids, axis=0)

    def attend(self, x: Any) -> Any:
        return x @ self.weight.T


def causal_attention(q: Any, k: Any, v: Any, drop: Any = None) -> Any:
    """Softmax attention of ``(B, T, heads, width)`` queries, keys and values under the causal
    mask, the attention weights passed through ``drop`` (a dropout layer) where one is given."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * jnp.asarray(scale, q.dtype)
    time = q.shape[1]
    mask = jnp.tril(jnp.ones((time, time), dtype=bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    if drop is not None:
        weights = drop(weights)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


class CausalSelfAttention(nn.Module):
    n_embd: int
    n_head: int
    bias: bool
    dropout: float

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        batch, time, width = x.shape
        qkv = Dense(3 * width, self.bias, name="c_attn")(x)
        q, k, v = (t.reshape(batch, time, self.n_head, -1) for t in jnp.split(qkv, 3, axis=-1))
        drop = nn.Dropout(self.dropout, deterministic=False) if train and self.dropout else None
        y = causal_attention(q, k, v, drop)  # masks on the weights where drop: SDPA's dropout_p
        y = Dense(width, self.bias, name="c_proj")(y.reshape(batch, time, width))
        return nn.Dropout(self.dropout, deterministic=not train)(y)


class MLP(nn.Module):
    hidden: int
    bias: bool
    dropout: float

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        h = jax.nn.gelu(Dense(self.hidden, self.bias, name="c_fc")(x), approximate=False)
        out = Dense(x.shape[-1], self.bias, name="c_proj")(h)
        return nn.Dropout(self.dropout, deterministic=not train)(out)


class Block(nn.Module):
    """Pre-norm: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    n_embd: int
    n_head: int
    hidden: int
    bias: bool
    dropout: float

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        attention = CausalSelfAttention(
            self.n_embd, self.n_head, self.bias, self.dropout, name="attn"
        )
        x = x + attention(LayerNorm(self.bias, name="ln_1")(x), train)
        mlp = MLP(self.hidden, self.bias, self.dropout, name="mlp")
        return x + mlp(LayerNorm(self.bias, name="ln_2")(x), train)


class GPT(nn.Module):
    """Token ids ``(B, T)`` in, logits over the vocabulary ``(B, T, vocab)`` out, in the
    parameters' dtype (the run's precision: the ids carry none)."""

    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    mlp_ratio: int = 4
    tie_embeddings: bool = True
    bias: bool = True
    dropout: float = 0.0

    @property
    def tied(self) -> dict[str, str]:
        """PyTorch's keys that name another's tensor (the tied head's)."""
        return dict(TIED) if self.tie_embeddings else {}

    @nn.compact
    def __call__(self, idx: Any, train: bool = True) -> Any:
        time = idx.shape[1]
        if time > self.block_size:
            raise ValueError(f"a sequence of {time} tokens is longer than block_size")
        wte = Embedding(self.vocab_size, self.n_embd, name="wte")
        wpe = Embedding(self.block_size, self.n_embd, name="wpe")
        x = wte(idx) + wpe(jnp.arange(time))[None]
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
        for index in range(self.n_layer):
            block = Block(
                self.n_embd,
                self.n_head,
                self.mlp_ratio * self.n_embd,
                self.bias,
                self.dropout,
                name=f"h_{index}",
            )
            x = block(x, train)
        x = LayerNorm(self.bias, name="ln_f")(x)
        if self.tie_embeddings:
            return wte.attend(x)
        return Dense(self.vocab_size, bias=False, name="lm_head")(x)


def gpt(num_classes: int, **dimensions: Any) -> GPT:
    """The Flax twin of a GPT over ``num_classes`` tokens with the run's dimensions
    (:class:`dlscale.contract.gpt.GPTOptions`) and dropout."""
    return GPT(num_classes, **dimensions)
