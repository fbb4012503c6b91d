"""The Keras GPT (:mod:`dlscale.contract.gpt` declares it): the twin of
:class:`dlscale.frameworks.torch.models.gpt.GPT`, layer for layer, under the torch module names.

A functional ``tf.keras.Model`` from int64 token ids ``(B, T)`` to logits ``(B, T, vocab)``.
Every layer with weights is a top-level layer named after the PyTorch module it mirrors
(``wte``, ``wpe``, ``h.0.ln_1``, ``h.0.attn.c_attn``, ``h.0.attn.c_proj``, ``h.0.ln_2``,
``h.0.mlp.c_fc``, ``h.0.mlp.c_proj``, ``ln_f``, ``lm_head``), so
:mod:`dlscale.frameworks.tensorflow.transfer` copies the torch twin's state dict in by name and
saves the trained parameters under its keys. What PyTorch does is written out:

* LayerNorm with PyTorch's epsilon 1e-5 (no bias when ``bias`` is off: Keras' ``center``);
* exact GELU (``erf``, PyTorch's default), not the tanh approximation;
* causal attention as ``softmax(mask(q k^T / sqrt(d))) v``, the positions after each query
  set to -inf (what ``scaled_dot_product_attention(is_causal=True)`` computes);
* a tied head is the token embedding's matrix, transposed: one variable, as PyTorch's
  ``lm_head.weight is wte.weight`` (:class:`TokenEmbedding` with ``attend=True``).

Initialization without a transfer is nanoGPT's: N(0, 0.02) for every linear and embedding
weight, N(0, 0.02 / sqrt(2 n_layer)) for the residual projections, zero biases.
"""

from __future__ import annotations

import math
from typing import Any

from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()
keras: Any = tf.keras
layers: Any = keras.layers
_Layer: Any = layers.Layer

INIT_STD = 0.02
LN_EPS = 1e-5


def _normal(std: float) -> Any:
    return keras.initializers.RandomNormal(mean=0.0, stddev=std)


class TokenEmbedding(_Layer):
    """``nn.Embedding(vocab, width)``: ids to rows; ``attend=True``: width to vocabulary
    logits by the same matrix transposed (the tied head)."""

    def __init__(self, vocab: int, width: int, tied: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.vocab, self.width, self.tied = vocab, width, tied

    def build(self, input_shape: Any) -> None:
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab, self.width), initializer=_normal(INIT_STD)
        )
        super().build(input_shape)

    def call(self, inputs: Any, attend: bool = False) -> Any:
        if attend:
            return tf.matmul(inputs, self.embeddings, transpose_b=True)
        return tf.gather(self.embeddings, inputs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab": self.vocab, "width": self.width, "tied": self.tied}


class PositionEmbedding(_Layer):
    """``x + wpe(arange(T))``: the first ``T`` rows of a ``(block_size, width)`` table added."""

    def __init__(self, block_size: int, width: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.block_size, self.width = block_size, width

    def build(self, input_shape: Any) -> None:
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.block_size, self.width), initializer=_normal(INIT_STD)
        )
        super().build(input_shape)

    def call(self, x: Any) -> Any:
        return x + self.embeddings[: tf.shape(x)[1]]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "block_size": self.block_size, "width": self.width}


class CausalAttention(_Layer):
    """The heads' causal attention over ``c_attn``'s output ``(B, T, 3 width)``: q, k, v split
    as PyTorch splits them, ``(B, T, width)`` out (before ``c_proj``)."""

    def __init__(self, n_head: int, dropout: float = 0.0, **kw: Any) -> None:
        super().__init__(**kw)
        self.n_head, self.dropout = n_head, dropout

    def call(self, qkv: Any, training: Any = None) -> Any:
        batch, time = tf.shape(qkv)[0], tf.shape(qkv)[1]
        width = qkv.shape[-1] // 3
        head = width // self.n_head

        def heads(t: Any) -> Any:  # (B, T, width) -> (B, heads, T, head)
            return tf.transpose(tf.reshape(t, (batch, time, self.n_head, head)), (0, 2, 1, 3))

        q, k, v = (heads(t) for t in tf.split(qkv, 3, axis=-1))
        scores = tf.matmul(q, k, transpose_b=True) * tf.constant(1.0 / math.sqrt(head), q.dtype)
        causal = tf.linalg.band_part(tf.ones((time, time), tf.bool), -1, 0)
        scores = tf.where(causal, scores, tf.constant(-math.inf, scores.dtype))
        weights = tf.nn.softmax(scores, axis=-1)
        if training and self.dropout:
            weights = tf.nn.dropout(weights, rate=self.dropout)
        y = tf.transpose(tf.matmul(weights, v), (0, 2, 1, 3))
        return tf.reshape(y, (batch, time, width))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "n_head": self.n_head, "dropout": self.dropout}


def _gelu(x: Any) -> Any:
    return tf.nn.gelu(x, approximate=False)


def _dense(x: Any, units: int, name: str, bias: bool, std: float = INIT_STD) -> Any:
    return layers.Dense(units, use_bias=bias, kernel_initializer=_normal(std), name=name)(x)


def _norm(x: Any, name: str, bias: bool) -> Any:
    return layers.LayerNormalization(epsilon=LN_EPS, center=bias, name=name)(x)


def gpt(
    num_classes: int,
    *,
    n_layer: int,
    n_head: int,
    n_embd: int,
    block_size: int,
    mlp_ratio: int = 4,
    tie_embeddings: bool = True,
    bias: bool = True,
    dropout: float = 0.0,
    input_size: int | None = None,
) -> Any:
    """A GPT over ``num_classes`` tokens with the run's dimensions
    (:class:`dlscale.contract.gpt.GPTOptions`) and dropout; ``input_size`` (the image models'
    keyword) is the context, which ``block_size`` already says."""
    del input_size
    residual = INIT_STD / math.sqrt(2 * n_layer)
    tokens = keras.Input(shape=(None,), dtype="int64", name="tokens")
    wte = TokenEmbedding(num_classes, n_embd, tied=tie_embeddings, name="wte")
    x = PositionEmbedding(block_size, n_embd, name="wpe")(wte(tokens))
    x = layers.Dropout(dropout, name="drop")(x)
    for i in range(n_layer):
        p = f"h.{i}"
        y = _dense(_norm(x, f"{p}.ln_1", bias), 3 * n_embd, f"{p}.attn.c_attn", bias)
        y = CausalAttention(n_head, dropout, name=f"{p}.attn.attention")(y)
        y = _dense(y, n_embd, f"{p}.attn.c_proj", bias, residual)
        x = layers.Add(name=f"{p}.attn.residual")([x, layers.Dropout(dropout)(y)])
        y = _dense(_norm(x, f"{p}.ln_2", bias), mlp_ratio * n_embd, f"{p}.mlp.c_fc", bias)
        y = layers.Activation(_gelu, name=f"{p}.mlp.gelu")(y)
        y = _dense(y, n_embd, f"{p}.mlp.c_proj", bias, residual)
        x = layers.Add(name=f"{p}.mlp.residual")([x, layers.Dropout(dropout)(y)])
    x = _norm(x, "ln_f", bias)
    logits = wte(x, attend=True) if tie_embeddings else _dense(x, num_classes, "lm_head", False)
    return keras.Model(tokens, logits, name="gpt")
