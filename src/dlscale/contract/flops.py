"""Training FLOPs per sample (forward and backward), the numerator of model FLOPs utilisation.

Two ways to the number, checked against each other (tests/unit/test_flops.py):

* analytic, here, with no framework: an image model's forward FLOPs from its layer tables
  (:mod:`dlscale.contract.cnn_flops`) or as it declares them, times 3 (the backward pass
  costs twice the forward: a gradient for the inputs and one for the weights); a GPT's from
  torchtitan's rule per token (:func:`gpt_training_flops`);
* counted, by a framework (torch: ``dlscale.frameworks.torch.profile.count_training_flops``,
  3 x what ``FlopCounterMode`` counts of one forward pass): a user's or a library's model,
  which declares none.

A multiply-add is 2 FLOPs; only the matrix products are counted (convolutions, linear layers,
attention), not normalisation, activations, pooling, softmax or the optimizer's update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlscale.contract.cnn_flops import analytic_forward_flops
from dlscale.contract.gpt import parameter_counts
from dlscale.contract.models import ModelSpec

__all__ = [
    "CNN_RULE",
    "GPT_RULE",
    "GPT_SIZER",
    "SOURCES",
    "TrainingFlops",
    "gpt_training_flops",
    "training_flops",
]

SOURCES = ("analytic", "counted")
"""Where a :class:`TrainingFlops` comes from: worked out from the architecture, or counted by
a framework's FLOP counter on the built model."""

CNN_RULE = "3 x forward; conv and linear: 2 FLOPs a multiply-add"
"""The rule of an image model's training FLOPs."""

GPT_RULE = (
    "6 x (params - embedding params) + 12 x layers x n_embd x context, per token, x context "
    "tokens a sample; the output head's n_embd x vocab matrix counted though tied to the token "
    "embedding; attention not halved for the causal mask"
)
"""The rule of a GPT's training FLOPs (torchtitan's ``get_num_flop_per_token``)."""
GPT_SIZER = "dlscale.contract.gpt:sizes"
"""The sizer every GPT size registers with (:mod:`dlscale.contract.models`)."""


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs of training on one sample: one forward and one backward pass."""

    per_sample: int
    """FLOPs (a multiply-add is 2) of the forward and backward pass of one sample (an image,
    or a sequence of ``block_size`` tokens)."""
    rule: str
    """How it was had, in a line (:data:`CNN_RULE`, :data:`GPT_RULE`, or a counter's)."""
    causal_per_sample: int | None = None
    """A GPT's: the same with attention's cost halved, as a causal mask leaves half of the
    ``T x T`` square to compute (``None``: not a GPT, or counted)."""
    source: str = "analytic"
    """``"analytic"`` or ``"counted"`` (:data:`SOURCES`)."""

    def to_dict(self) -> dict[str, Any]:
        """Its fields, for JSON."""
        return {
            "per_sample": self.per_sample,
            "rule": self.rule,
            "causal_per_sample": self.causal_per_sample,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: object) -> TrainingFlops | None:
        """What :meth:`to_dict` wrote; ``None`` for anything else (a damaged or older file)."""
        if not isinstance(data, Mapping):
            return None
        per_sample, rule = _count(data.get("per_sample")), data.get("rule")
        causal, source = _count(data.get("causal_per_sample")), data.get("source")
        if per_sample is None or not isinstance(rule, str) or source not in SOURCES:
            return None
        if causal is None and data.get("causal_per_sample") is not None:
            return None
        return cls(per_sample=per_sample, rule=rule, causal_per_sample=causal, source=source)


def _count(value: object) -> int | None:
    """``value`` where it is a non-negative int (not a bool), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def training_flops(
    spec: ModelSpec,
    options: Mapping[str, Any],
    *,
    image_size: int | None = None,
    num_classes: int | None = None,
) -> TrainingFlops | None:
    """The analytic training FLOPs of one sample of the model ``spec`` under a run's resolved
    ``options`` (a GPT's dimensions); an image model takes ``image_size x image_size`` images
    and has ``num_classes`` outputs (given as keywords or as keys of ``options``; ``None`` or
    absent: the model's own).

    An image model: 3 x its forward FLOPs, from its layer tables where it is a built-in, else
    as it declares them (``source="counted"``: declared numbers are what a counter counted);
    ``None`` where it declares none (a user's or a library's model) or declares them at
    another image size or class count than the run's. A GPT: :func:`gpt_training_flops`;
    another token model: ``None``.
    """
    if spec.sample == "tokens":  # a GPT of dlscale.contract.gpt; another token model: None
        if spec.sizer != GPT_SIZER:
            return None
        values = {o.name: options.get(o.name, o.default) for o in spec.options}
        return gpt_training_flops(values)
    size = int(image_size or options.get("image_size") or spec.input_size)
    classes = int(num_classes or options.get("num_classes") or spec.default_classes)
    forward = analytic_forward_flops(spec.name, classes, size) if spec.builtin else None
    if forward is not None:
        return TrainingFlops(per_sample=3 * forward, rule=CNN_RULE, source="analytic")
    declared = spec.sized(options)[2]
    if declared is None or (size, classes) != (spec.input_size, spec.default_classes):
        return None
    return TrainingFlops(per_sample=3 * declared, rule=CNN_RULE, source="counted")


def gpt_training_flops(values: Mapping[str, Any]) -> TrainingFlops:
    """A GPT's training FLOPs per sequence from its dimensions (:mod:`dlscale.contract.gpt`),
    by torchtitan's rule (``get_num_flop_per_token``, after Kaplan et al. 2020 and PaLM):

    per token, ``6 x N + 12 x n_layer x n_head x head_dim x T``, with ``T`` the context
    (``block_size``), ``n_head x head_dim = n_embd``, and ``N`` the parameters less the token
    and position embeddings, *plus* the output head's ``n_embd x vocab`` matrix where it is
    tied to the token embedding (a lookup costs nothing, but the head is a matrix product every
    token pays); 6 = 2 FLOPs a multiply-add x 3 for forward and backward. The second term is
    attention's two ``T x T x head_dim`` products, forward and backward, over the whole
    square; :attr:`TrainingFlops.causal_per_sample` halves it (``6 x n_layer x n_embd x T``)
    for the causal mask. Per sample: per token x ``T`` tokens.

    Against 3 x :func:`dlscale.contract.gpt.forward_flops` (matrix products only, the same
    unhalved attention): ``N`` here also holds the biases and LayerNorm parameters, a fraction
    of a percent more (gpt-mini: 0.37 %).
    """
    d, layers, context = int(values["n_embd"]), int(values["n_layer"]), int(values["block_size"])
    vocab = int(values["vocab_size"])
    params, embeddings = parameter_counts(dict(values), vocab)
    head = d * vocab if values["tie_embeddings"] else 0  # untied: already among params
    dense = params - embeddings + head
    per_token = 6 * dense + 12 * layers * d * context
    causal_per_token = 6 * dense + 6 * layers * d * context
    return TrainingFlops(
        per_sample=per_token * context,
        rule=GPT_RULE,
        causal_per_sample=causal_per_token * context,
        source="analytic",
    )
